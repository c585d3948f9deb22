"""The C op table held against the specs, for `opconform validate` (seconds, before any test runs).

csrc/ops.def lists the ops the C library registers, one `OPC_OP(<op>, "<file>.c")` line each; the file
defines the op's entry next to its kernel with `OPC_DEFINE_OP(<op>)` (csrc/call.h). The checks:

- the table: every line is read, names an op once, has a spec, and its file defines the op; every
  `OPC_DEFINE_OP` in csrc/ has its line (an entry without one is compiled but never registered); every op's
  spec has a case group tagged thread_split (its thread-invariance cases, tests/openmp/test_omp_threads.py);
- the library (when one loads): it registers the table's ops in the table's order (else it was built from
  another table: rebuild), and each op's descriptor agrees with its spec (descriptor_problems: names,
  order, optionality and attributes equal the spec's, dtypes a subset of its main type's).

The table is the one beside the bottom spec directory (`<specs>/../csrc/ops.def`): a source checkout's,
or a copy of one; an installed wheel has none, and nothing here runs. tests/openmp/test_descriptors.py
calls descriptor_problems, so that there is one comparison.
"""
from __future__ import annotations

import re
from pathlib import Path

from harness.backends import openmp_lib
from harness.core.bench_spec import thread_split_problems
from harness.spec.errors import Problem
from harness.spec.model import Spec
from harness.spec.sources import shown

LINE = re.compile(r'^OPC_OP\((\w+), *"([\w./-]+)"\)', re.MULTILINE)
REBUILD = "pip install --no-build-isolation -e . (docs/install.md)"


def table_path(spec_root: Path | None) -> Path | None:
    """csrc/ops.def beside the bottom spec directory, when there is one."""
    if spec_root is None:
        return None
    path = Path(spec_root).resolve().parent / "csrc" / "ops.def"
    return path if path.is_file() else None


def read_table(path: Path) -> list[tuple[str, str]]:
    """(op, its C file) per OPC_OP line, in registry order."""
    return LINE.findall(path.read_text())


def defines(text: str, op: str) -> bool:
    """True when a C file's text defines op's entry (OPC_DEFINE_OP(op), or a file's own X_OP(op, ...))."""
    return op in entries(text)


def entries(text: str) -> list[str]:
    """The ops whose entries a C file defines: OPC_DEFINE_OP(op) lines, and lines calling a file's own entry
    macro (eltwise.c's EW_OP(op, ...)); not a macro's body (its lines end in a backslash)."""
    found = re.findall(r"^[ \t]*(?:OPC_DEFINE_OP\((\w+)\)|[A-Z_]+_OP\((\w+),)(?![^\n]*\\$)", text, re.MULTILINE)
    return [a or b for a, b in found]


def table_problems(path: Path, specs: dict[str, Spec], complete: bool = True) -> list[Problem]:
    """The table against the C files and the specs (complete: `specs` is the whole spec set, so an op
    without one is a problem; a selection cannot tell)."""
    where, csrc = shown(path), path.parent
    out: list[Problem] = []
    text = path.read_text()
    for line in text.splitlines():
        if line.startswith("OPC_OP") and not LINE.match(line):
            out.append(Problem(where, "", f"cannot read '{line.strip()}'; write OPC_OP(<Op>, \"<file>.c\")"))
    table = read_table(path)
    seen: set[str] = set()
    for op, source in table:
        if op in seen:
            out.append(Problem(where, op, "listed twice; keep one line per op"))
        seen.add(op)
        if complete and op not in specs:
            out.append(Problem(where, op, f"no spec for {op}: write specs/<domain>/{op}.yaml (opconform new-op {op}), "
                                          "or remove the line"))
        file = csrc / source
        if not file.is_file():
            out.append(Problem(where, op, f"its file csrc/{source} does not exist: write it, with the op's entry "
                                          f"OPC_DEFINE_OP({op}) = {{...}}; (csrc/call.h), or fix the file name"))
        elif not defines(file.read_text(), op):
            out.append(Problem(where, op, f"csrc/{source} does not define {op}: add OPC_DEFINE_OP({op}) = {{...}}; "
                                          "next to its kernel (csrc/call.h), or fix the file name"))
    for file in sorted(csrc.glob("*.c")):
        for op in entries(file.read_text()):
            if op not in seen:
                out.append(Problem(shown(file), op, f"OPC_DEFINE_OP({op}) has no line in csrc/ops.def, so the library "
                                                     f"never registers it: add OPC_OP({op}, \"{file.name}\")"))
    return out


def descriptor_problems(info: dict, spec: Spec) -> list[str]:
    """What an op's C descriptor (openmp_lib.op_info) says that its spec does not; [] when they agree."""
    problems = []
    inputs = [i.name for i in spec.inputs]
    if info["inputs"] != inputs:
        problems.append(f"inputs {info['inputs']} != spec's {inputs}")
    optional = [i.name for i in spec.inputs if i.optional]
    if info["optional_inputs"] != optional:
        problems.append(f"optional inputs {info['optional_inputs']} != spec's {optional}")
    outputs = [o.name for o in spec.outputs]
    if info["outputs"] != outputs:
        problems.append(f"outputs {info['outputs']} != spec's {outputs}")
    # The node's attributes, and the shapes a model declares for outputs the op cannot size (MaxPoolGrad's
    # dX_shape), which travel beside them.
    attributes = set(spec.attributes) | set(spec.declared_shapes())
    if len(set(info["attributes"])) != len(info["attributes"]):
        problems.append(f"attributes {info['attributes']} name one twice")
    if set(info["attributes"]) != attributes:
        problems.append(f"attributes {sorted(info['attributes'])} != spec's {sorted(attributes)}")
    if stray := set(info["extra_attributes"]) & attributes:
        problems.append(f"extra attributes {sorted(stray)} are the spec's: list them with the attributes")
    # The dtype a case runs in binds the spec's main type variable (Spec.main_type); the others (indices,
    # masks) are fixed by the kernel's own input checks.
    variable = spec.main_type
    allowed = spec.type_constraints[variable].types
    if not info["dtypes"]:
        problems.append("no dtypes")
    if outside := [d for d in info["dtypes"] if d not in allowed]:
        problems.append(f"dtypes {outside} are not in the spec's {variable} {allowed}: move them to the extra "
                        "dtypes (computed for the library's tests, never offered to runs) or drop them")
    if extra := [d for d in info["extra_dtypes"] if d in allowed]:
        problems.append(f"extra dtypes {extra} are in the spec's {variable}: list them with the dtypes")
    return problems


def library_problems(path: Path, specs: dict[str, Spec], lib) -> list[Problem]:
    """The loaded library (harness.backends.openmp_lib, or a stand-in with ops() and op_info()) against the
    table and the specs."""
    table = read_table(path)
    registered = lib.ops()
    wanted = [op for op, _ in table]
    if registered != wanted:
        added = [op for op in wanted if op not in registered]
        dropped = [op for op in registered if op not in wanted]
        what = (f"lacks {', '.join(added)}" if added else "") + ("; " if added and dropped else "") + \
               (f"has {', '.join(dropped)} that the table does not list" if dropped else "")
        return [Problem(shown(path), "", f"the loaded C library was built from another op table "
                                          f"({what or 'another order'}): rebuild it, {REBUILD}")]
    out = []
    for op, source in table:
        if op in specs and (info := lib.op_info(op)) is not None:
            for problem in descriptor_problems(info, specs[op]):
                out.append(Problem(shown(path.parent / source), f"OPC_DEFINE_OP({op})",
                                   f"{problem}; make the descriptor and the spec agree (then rebuild)"))
    return out


def check(spec_root: Path | None, specs: list[Spec], complete: bool = True, load_library=None
          ) -> tuple[list[Problem], list[str]]:
    """(problems, notes) for validate: the table's checks, then the library's when it loads (a note says
    why not, once). load_library: returns the loaded library module (default: harness.backends.openmp_lib)."""
    path = table_path(spec_root)
    if path is None:
        return [], []
    by_op = {s.op: s for s in specs}
    problems = table_problems(path, by_op, complete)
    # every op of the table has thread-invariance cases: a case group tagged thread_split in its spec
    problems += [Problem(shown(path), op, message)
                 for op, message in thread_split_problems([op for op, _ in read_table(path)], by_op)]
    if problems:
        return problems, []  # the library is checked against a table that reads cleanly
    try:
        lib = (load_library or _load_openmp)()
    except Exception as e:  # noqa: BLE001 - any reason the library will not load is a note, not a spec problem
        reason = " ".join(str(e).split()) or type(e).__name__
        return [], [f"the C kernel library cannot be loaded ({reason}); its descriptor checks are skipped"]
    return library_problems(path, by_op, lib), []


def _load_openmp():
    openmp_lib.load()
    return openmp_lib
