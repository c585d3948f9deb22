"""Loading the spec set: the built-in specs, then a team's directories (harness.spec.sources), each
holding <domain>/<Op>.yaml specs, <domain>/<Op>.overlay.yaml overlays and optional _defaults/.

`load_catalog(ops=...)` parses and checks only the specs of the selected ops (the file names say which
files those are), each through the cache of checked specs (harness.spec.cache); `load_catalog()` with
no selection loads and checks every spec, as `opconform validate` does. Start-up cost thus follows
the selection, not the size of the spec set. Heavy modules (pydantic and the spec models, numpy, the
checks) are imported where a spec is parsed or checked, not when this module is: a misspelt `--ops` is
answered from file names before any of them loads.
"""
from __future__ import annotations

import fnmatch
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.spec import cache as spec_cache
from harness.spec import sources as _sources
from harness.spec.dotted import package_problem
from harness.spec.errors import Problem, SpecError, from_validation_error
from harness.spec.sources import OVERLAY_SUFFIX, SpecFile, SpecIndex, SpecSources, UnknownOp, shown, unknown_op_text
from harness.spec.vocabulary import FLOAT_DTYPES

PROJECT_PACKAGE = "reference"  # harness.spec.dotted.PROJECT_PACKAGE, without importing it
DEFAULT_MAX_CASE_BYTES = 1 << 30  # harness.core.spec_checks.DEFAULT_MAX_CASE_BYTES (checked equal in the tests)

__all__ = ["Catalog", "SpecSources", "UnknownOp", "builtin_root", "default_root", "load_catalog", "load_spec",
           "read_yaml", "shown"]


class _UniqueKeys:
    """PyYAML keeps the last of two equal keys silently; a spec with one is almost always a mistake.
    Dates stay strings (pydantic parses them and names the field): PyYAML's own date constructor
    raises a bare ValueError on `2030-13-45`."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def construct_mapping(self, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in keys:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' appears twice in one mapping", key_node.start_mark)
            keys.add(key)
        return super().construct_mapping(node, deep)


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    pass


# libyaml's parser (C) reads a spec ~10x faster than PyYAML's; the constructor (what the values become)
# is the same Python code. Any problem is explained by the pure-Python loader, whose messages and
# positions the tests and users know.
_FastLoader = type("_FastUniqueKeyLoader", (_UniqueKeys, yaml.CSafeLoader), {}) \
    if getattr(yaml, "__with_libyaml__", False) else None


@dataclass
class Catalog:
    root: Path  # the bottom spec directory: the built-in specs, or the first given
    specs: list  # harness.spec.model.Spec: every spec, or those of the selected ops (see `complete`)
    files: dict[str, Path] = field(default_factory=dict)  # spec id -> file
    default_tolerances: dict = field(default_factory=dict)  # dtype -> Tolerance (the bottom directory's)
    digest: str = ""  # sha256 over every spec and overlay file of the set: names the spec set in results
    sources: SpecSources | None = None
    complete: bool = True  # every spec of the set is loaded (False: the selected ops' only)
    overlays: dict[str, list[Path]] = field(default_factory=dict)  # spec id -> its overlay files
    roots: dict[str, Path] = field(default_factory=dict)  # spec id -> the spec directory it is in
    layer_tolerances: dict[str, dict] = field(default_factory=dict)  # spec id -> its directory's own defaults
    loader: _Loader | None = field(default=None, repr=False, compare=False)  # loads further specs on demand

    @property
    def all_ops(self) -> list[str]:
        """Every op name of the set, loaded or not."""
        return self.loader.index.names if self.loader else sorted({s.op for s in self.specs})

    def select(self, patterns: list[str] | None) -> list:
        """Specs whose op name matches any pattern (exact names or globs), in catalog order."""
        if self.loader is not None and not self.complete:
            self._add(self.loader.index.select(patterns) if patterns else self.loader.index.names)
        if not patterns:
            return list(self.specs)
        names = [s.op for s in self.specs]
        for pattern in patterns:
            if not fnmatch.filter(names, pattern):
                raise UnknownOp(unknown_op_text(pattern, names) if not set("*?[") & set(pattern)
                                else f"'{pattern}' matches no op (known: {', '.join(names)})")
        return [s for s in self.specs if any(fnmatch.fnmatchcase(s.op, p) for p in patterns)]

    def by_op(self, op: str, domain: str | None = None):
        for s in [*self.specs, *self.loader.extra] if self.loader else self.specs:
            if s.op == op and (domain is None or s.domain == domain):
                return s
        if self.loader is not None and op in self.loader.index.specs:
            for s in self.loader.load_ops([op], self, extra=True):
                if domain is None or s.domain == domain:
                    return s
        raise UnknownOp(unknown_op_text(op, self.all_ops))

    def _add(self, ops) -> None:
        """Load these ops (not loaded yet) into specs; SpecError when one does not load."""
        loaded = {s.op for s in self.specs}
        missing = [op for op in ops if op not in loaded]
        if missing and self.loader is not None:
            self.specs = sorted([*self.specs, *self.loader.load_ops(missing, self)], key=lambda s: s.op)
            self.complete = set(self.all_ops) <= {s.op for s in self.specs}

    def tolerance(self, spec, dtype: str):
        """The spec's tolerance for the dtype, else its directory's default (harness.core.tolerance.tolerance_for)."""
        from harness.core.tolerance import tolerance_for  # lazy: numpy; a tolerance is looked up only when cases are judged

        return tolerance_for(spec, dtype, self.layer_tolerances.get(spec.id, self.default_tolerances))

    def path(self, spec) -> str:
        return shown(self.files[spec.id])

    def root_of(self, spec) -> Path:
        """The spec directory a spec's file is in."""
        return self.roots.get(spec.id, self.root)


def builtin_root() -> Path:
    """The built-in specs (harness.spec.sources.builtin_root); team directories come on top of them."""
    return _sources.builtin_root()


default_root = builtin_root  # its name before team directories


# Limits on one YAML file, checked on the event stream before anything is built from it: a spec is
# a few KB, and a nesting or alias bomb must cost a line, not a RecursionError or a walk that
# expands nine levels of aliases into 387 million nodes.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 40
MAX_NODES = 200_000  # after expanding aliases
NUL = bytes(1)


def read_yaml(path: Path) -> tuple[object, list[Problem]]:
    """The YAML document in path, or one Problem saying why it cannot be read (never raises)."""
    text, problem = _read_text(path)
    if problem:
        return None, [Problem(str(path), "", problem)]
    if _FastLoader is not None:
        try:
            if _structure_problem(text, _FastLoader) is None:
                return yaml.load(text, Loader=_FastLoader), []
        except Exception:  # noqa: BLE001 - the Python loader below says what is wrong, as it always has
            pass
    try:
        if structure := _structure_problem(text, _UniqueKeyLoader):
            return None, [Problem(str(path), structure[0], structure[1])]
        return yaml.load(text, Loader=_UniqueKeyLoader), []
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e)
        return None, [Problem(str(path), where, f"not valid YAML: {what}")]
    except (ValueError, TypeError, OverflowError, RecursionError) as e:  # a scalar PyYAML cannot construct
        return None, [Problem(str(path), "", f"not valid YAML: {type(e).__name__}: {e}")]


def _read_text(path: Path) -> tuple[str, str | None]:
    if path.is_symlink() and not path.exists():
        return "", f"a symlink to {os.readlink(path)}, which does not exist; fix or remove the link"
    if path.exists() and not path.is_file():
        return "", "not a regular file (a directory?); a spec or waivers file is a YAML file"
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return "", f"{path.stat().st_size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit for one YAML file; split it"
        raw = path.read_bytes()
    except OSError as e:
        return "", f"cannot read: {e.strerror}"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "", "encoded as UTF-16 (byte order mark); save it as UTF-8"
    if NUL in raw:
        return "", f"binary data (a NUL byte at offset {raw.index(NUL)}), not YAML text"
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        return "", f"not UTF-8 text: byte 0x{raw[e.start]:02x} at line {line} (offset {e.start}); save it as UTF-8"


def _structure_problem(text: str, loader=_UniqueKeyLoader) -> tuple[str, str] | None:
    """(where, message) when the document nests deeper than MAX_DEPTH or its aliases expand past
    MAX_NODES; from the parser's events, which build nothing."""
    stack: list[list] = []  # per open collection: [anchor, nodes inside]
    sizes: dict[str, int] = {}  # anchor -> nodes it expands to
    total = 0
    for event in yaml.parse(text, Loader=loader):
        mark = event.start_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                return where, f"nested more than {MAX_DEPTH} levels deep; a spec needs a handful"
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, nodes = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, nodes = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, nodes = None, sizes.get(event.anchor or "", 1)  # "": never a key, as None is not
        else:
            continue
        if anchor:
            sizes[anchor] = nodes
        if stack:
            stack[-1][1] += nodes
        else:
            total += nodes
        if (stack[0][1] if stack else total) > MAX_NODES:
            return where, (f"YAML aliases (*name) expand this document past {MAX_NODES:,} values; "
                           "write the values out or drop the aliases")
    return None


def load_spec(path: Path, packages=(PROJECT_PACKAGE,), max_case_bytes: int = DEFAULT_MAX_CASE_BYTES):
    """(Spec or None, problems) for one spec file: parsed, validated, checked (harness.core.spec_checks)."""
    from pydantic import ValidationError

    from harness.core import spec_checks as checks  # lazy: numpy: only a parsed spec is checked (a warm cache skips it)
    from harness.spec import unfinished  # lazy: only a parsed spec is checked for stubs (a warm cache skips it)
    from harness.spec.model import Spec  # lazy: pydantic: only a parsed spec needs it (a warm cache skips it)

    where = shown(path)
    data, problems = read_yaml(path)
    if problems:
        return None, [Problem(where, p.field, p.message) for p in problems]
    if not isinstance(data, dict):
        return None, [Problem(where, "", "a spec is a YAML mapping (op:, inputs:, ...); this file is not one")]
    if todo := unfinished.missing_items(data):  # a spec from `opconform new-op` that is not filled in yet
        return None, [Problem(where, f, m) for f, m in todo]
    try:
        spec = Spec.model_validate(data)
    except ValidationError as e:
        return None, from_validation_error(where, Spec, e)
    problems = [Problem(where, f, m) for f, m in checks.check(spec, packages, max_case_bytes)]
    if path.stem != spec.op:
        problems.append(Problem(where, "op", f"the file is named {path.name} but the op is {spec.op}; "
                                              f"rename the file to {spec.op}.yaml"))
    if path.parent.name != spec.domain:
        problems.append(Problem(where, "domain", f"the file is in {path.parent.name}/ but the domain is "
                                                  f"{spec.domain!r}; move it to specs/{spec.domain}/"))
    if not problems:
        problems = [Problem(where, f, m) for f, m in unfinished.stub_problems(spec)]
    return (None if problems else spec), problems


_GROUP_FIELD = re.compile(r"^cases\.(groups|invalid)\[(\d+)\](.*)$")


def apply_overlay(spec, path: Path, packages=(PROJECT_PACKAGE,), max_case_bytes: int = DEFAULT_MAX_CASE_BYTES):
    """(the spec with the overlay's groups added, or None; problems) for one overlay file. The merged
    spec is checked as a whole; a problem in an added group names the overlay file and its group."""
    from pydantic import ValidationError

    from harness.core import spec_checks as checks  # lazy: numpy: only a parsed spec is checked (a warm cache skips it)
    from harness.spec.model import Overlay  # lazy: pydantic: only a parsed spec needs it (a warm cache skips it)

    where = shown(path)
    data, problems = read_yaml(path)
    if problems:
        return None, [Problem(where, p.field, p.message) for p in problems]
    if not isinstance(data, dict):
        return None, [Problem(where, "", "an overlay is a YAML mapping (extends:, groups:, invalid:); this file is not one")]
    try:
        overlay = Overlay.model_validate(data)
    except ValidationError as e:
        return None, from_validation_error(where, Overlay, e)
    expected = path.name[:-len(OVERLAY_SUFFIX)]
    if overlay.extends != expected:
        return None, [Problem(where, "extends", f"the file is named {path.name} but extends {overlay.extends}; "
                                                f"write `extends: {expected}` or rename the file")]
    if not overlay.groups and not overlay.invalid:
        return None, [Problem(where, "groups", "no groups: an overlay adds `groups:` or `invalid:` groups to "
                                               f"{expected}'s spec")]
    own = {"groups": len(spec.cases.groups), "invalid": len(spec.cases.invalid)}
    cases = spec.cases.model_copy(update={"groups": [*spec.cases.groups, *overlay.groups],
                                          "invalid": [*spec.cases.invalid, *overlay.invalid]})
    merged = spec.model_copy(update={"cases": cases})
    problems = []
    for name, message in checks.check(merged, packages, max_case_bytes):
        if (m := _GROUP_FIELD.match(name)) and int(m[2]) >= own[m[1]]:
            name = f"{m[1]}[{int(m[2]) - own[m[1]]}]{m[3]}"
        problems.append(Problem(where, name, message))
    return (None if problems else merged), problems


# ---- the spec set ---------------------------------------------------------------------------------

@dataclass
class _Layer:
    """One spec directory's defaults: the built-in ones overridden by its own _defaults/ files."""
    root: Path
    kind: str
    tolerances: dict = field(default_factory=dict)  # dtype -> Tolerance, effective
    own_tolerances: bool = False  # its own tolerances.yaml changes the built-in defaults
    packages: tuple[str, ...] = (PROJECT_PACKAGE,)
    problems: list[Problem] = field(default_factory=list)
    key: str = ""  # what an entry of the cache depends on here: the defaults files' bytes and names


def _defaults_files(root: Path) -> list[Path]:
    return [root / "_defaults" / "tolerances.yaml", root / "_defaults" / "hooks.yaml"]


def _file_key(path: Path) -> str:
    try:
        return f"{path.name}:{path.read_bytes().hex()}" if path.exists() or path.is_symlink() else f"{path.name}:-"
    except OSError:
        return f"{path.name}:?"


class _Loader:
    """Loads the specs of given ops from an index: cache first, else parse, check and store."""

    def __init__(self, index: SpecIndex, max_case_bytes: int):
        self.index = index
        self.max_case_bytes = max_case_bytes
        self.layers: dict[int, _Layer] = {}
        self.extra: list = []  # specs loaded for by_op only (an own_saved_state producer), not selected
        self.parsed = 0  # specs parsed and checked (cache misses): what the start-up tests count
        self.cached = 0

    # -- defaults per directory
    def layer(self, number: int) -> _Layer:
        if number not in self.layers:
            self.layers[number] = self._read_layer(number)
        return self.layers[number]

    def _builtin_defaults(self) -> _Layer:
        if -1 not in self.layers:
            root = builtin_root()
            layer = _Layer(root, "builtin")
            layer.tolerances = _load_defaults(root / "_defaults" / "tolerances.yaml", layer.problems, required=True)
            layer.packages = _load_hook_packages(root, layer.problems)
            layer.key = "|".join(_file_key(p) for p in _defaults_files(root))
            self.layers[-1] = layer
        return self.layers[-1]

    def _read_layer(self, number: int) -> _Layer:
        root, kind = self.index.layers[number]
        builtin = self._builtin_defaults()
        if kind == "builtin":
            return builtin
        layer = _Layer(root, kind, dict(builtin.tolerances), packages=builtin.packages,
                       problems=list(builtin.problems))
        path = root / "_defaults" / "tolerances.yaml"
        if path.exists() or path.is_symlink():
            own = _load_defaults(path, layer.problems)
            layer.tolerances.update(own)
            layer.own_tolerances = bool(own)
        if (root / "_defaults" / "hooks.yaml").exists() or (root / "_defaults" / "hooks.yaml").is_symlink():
            layer.packages = tuple(dict.fromkeys([*builtin.packages, *_load_hook_packages(root, layer.problems)]))
        layer.key = builtin.key + "|" + "|".join(_file_key(p) for p in _defaults_files(root))
        return layer

    # -- specs
    def load_ops(self, ops, catalog: Catalog, extra: bool = False) -> list:
        """The specs of these ops, recorded in catalog (files, roots, overlays, tolerances);
        SpecError with every problem when one does not load."""
        problems: list[Problem] = []
        out = []
        for op in ops:
            for entry in self.index.specs.get(op, []):
                spec, found = self.load_entry(entry)
                problems += found
                if spec is None:
                    continue
                layer = self.layer(entry.layer)
                missing = [d for d in spec.type_constraints[spec.main_type].types
                           if d in FLOAT_DTYPES and d not in layer.tolerances]
                if missing and layer.tolerances:  # no defaults at all: their file's own problem says why
                    own = layer.root / "_defaults" / "tolerances.yaml"
                    where = own if own.exists() else builtin_root() / "_defaults" / "tolerances.yaml"
                    problems.append(Problem(shown(entry.path), "type_constraints",
                                            f"no default tolerance for {', '.join(missing)} in {where}"))
                if spec.id in catalog.files and catalog.files[spec.id] != entry.path:
                    problems.append(Problem(shown(entry.path), "op",
                                            f"{spec.id} is already defined in {shown(catalog.files[spec.id])}"))
                    continue
                catalog.files[spec.id] = entry.path
                catalog.roots[spec.id] = self.index.layers[entry.layer][0]
                if overlays := self.index.overlays.get(op):
                    catalog.overlays[spec.id] = [o.path for o in overlays if o.domain == entry.domain]
                if layer.own_tolerances and entry.layer > 0:  # the bottom directory's are default_tolerances
                    catalog.layer_tolerances[spec.id] = layer.tolerances
                out.append(spec)
        if problems:
            raise SpecError(problems)
        if extra:
            self.extra += out
        return out

    def load_entry(self, entry: SpecFile):
        """(Spec or None, problems) for one spec file with the overlays of its op: from the cache when
        nothing it depends on changed."""
        layer = self.layer(entry.layer)
        overlays = [o for o in self.index.overlays.get(entry.op, []) if o.domain == entry.domain]
        paths = [entry.path, *(o.path for o in overlays)]
        parts = [layer.key, ",".join(layer.packages), self.max_case_bytes]
        for path in paths:
            parts += [f"{path.parent.name}/{path.name}", _file_key(path)]
        # a file that is not a readable regular file (a directory, a dangling link) is explained afresh each time
        regular = all(p.is_file() and os.access(p, os.R_OK) for p in paths)
        key = spec_cache.key(*parts) if regular else None
        stored = spec_cache.get(key) if key else None
        found: list[tuple[int, str, str]] = []
        if stored is not None:
            try:
                spec, entries = stored
                found = [(int(i), str(f), str(m)) for i, f, m in entries]
            except (TypeError, ValueError):  # an entry that is not what this code writes
                stored = None
        if stored is not None:
            self.cached += 1
        else:
            self.parsed += 1
            spec, parsed = self._parse(entry, overlays, layer)
            # the problems' files as indexes into paths: a cached entry is shown relative to today's directory
            names = [str(p) for p in paths]
            found = [(names.index(p.file) if p.file in names else -1, p.field, p.message) for p in parsed]
            # only a spec that passed: a problem may come from this process's circumstances (a hook out of
            # CPU time on a loaded machine, a module that failed to import) and must be looked at afresh
            if key and spec is not None and not found:
                spec_cache.put(key, (spec, found), _hook_modules(paths))
        return spec, [*layer.problems, *(Problem(shown(paths[i]) if i >= 0 else "", f, m) for i, f, m in found)]

    def _parse(self, entry: SpecFile, overlays: list[SpecFile], layer: _Layer):
        """(Spec or None, problems whose file is a Path) for one spec file and its overlays."""
        spec, problems = load_spec(entry.path, layer.packages, self.max_case_bytes)
        problems = [_with_path(p, entry.path) for p in problems]
        if spec is None or not overlays:
            return spec, problems
        for overlay in overlays:
            packages = tuple(dict.fromkeys([*layer.packages, *self.layer(overlay.layer).packages]))
            merged, found = apply_overlay(spec, overlay.path, packages, self.max_case_bytes)
            problems += [_with_path(p, overlay.path) for p in found]
            spec = merged if merged is not None else spec
        return (None if problems else spec), problems


def _with_path(problem: Problem, path: Path) -> Problem:
    return Problem(str(path), problem.field, problem.message)


_DOTTED = re.compile(r"^([A-Za-z_][\w.]*):[A-Za-z_]\w*$")  # harness.spec.model.Dotted


def _hook_modules(paths) -> list[str]:
    """The modules of every function these files name (module.path:function values, wherever they are,
    valid or not: a spec refused because of its reference's source must be looked at again when that
    source changes). Their source is part of the cache entry."""
    found: set[str] = set()

    def walk(value):
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and (m := _DOTTED.match(value.strip())):
            found.add(m[1])

    for path in paths:
        walk(read_yaml(path)[0])
    return sorted(found)


def load_catalog(root: Path | None = None, max_case_bytes: int | None = None, *, sources: SpecSources | None = None,
                 ops: list[str] | None = None, log=None, index: SpecIndex | None = None) -> Catalog:
    """The spec set: `sources` (default: the built-in specs and $OPCONFORM_SPECS), or `root` alone (a
    complete spec tree used in place of the built-in specs). Raises SpecError listing every problem.

    ops: op names or globs; only their specs are loaded and checked (UnknownOp, from file names, before
    anything is parsed, when a pattern matches none). None: every spec, every problem reported. []: none
    yet; Catalog.by_op and Catalog.select load the ones asked for.
    max_case_bytes: the budget for one case's tensors (checked for every case, every tier).
    log: called with a line saying how many specs loaded, how fast, how many from the cache.
    index: SpecIndex.scan(sources), when the caller has it already."""
    started = time.perf_counter()
    if sources is None:
        sources = index.sources if index is not None else \
            SpecSources(base=Path(root)) if root is not None else SpecSources.resolve()
    if index is None or index.sources != sources:
        index = SpecIndex.scan(sources)
    if index.problems:
        raise SpecError([Problem(f, name, m) for f, name, m in index.problems])
    names = index.names if ops is None else index.select(ops) if ops else []  # []: none now, each on demand
    loader = _Loader(index, max_case_bytes or DEFAULT_MAX_CASE_BYTES)
    bottom_dir = index.layers[0][0]  # sources.root, the bottom directory: scan reports a set with none as a problem
    catalog = Catalog(bottom_dir, [], digest=index.digest, sources=sources, complete=len(names) == len(index.names),
                      loader=loader)
    catalog.specs = sorted(loader.load_ops(names, catalog), key=lambda s: s.op)
    bottom = loader.layer(0)
    catalog.default_tolerances = bottom.tolerances
    if log:
        log(f"loaded {len(catalog.specs)} spec{'' if len(catalog.specs) == 1 else 's'} in "
            f"{time.perf_counter() - started:.2f} s ({loader.cached} from the cache)")
    return catalog


def _load_hook_packages(root: Path, problems: list[Problem]) -> tuple[str, ...]:
    """`reference`, plus the packages <root>/_defaults/hooks.yaml declares (optional file)."""
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    class _Hooks(BaseModel):
        model_config = ConfigDict(extra="forbid")
        packages: list[str] = Field(description="top-level Python packages, besides reference, whose functions specs may name")

    path = root / "_defaults" / "hooks.yaml"
    if not path.exists() and not path.is_symlink():
        return (PROJECT_PACKAGE,)
    data, found = read_yaml(path)
    parsed = None
    if not found:
        try:
            parsed = _Hooks.model_validate(data)
        except ValidationError as e:
            found = from_validation_error(shown(path), _Hooks, e)
    if parsed is None:
        problems += [Problem(shown(path), p.field, p.message) for p in found]
        return (PROJECT_PACKAGE,)
    for index, name in enumerate(parsed.packages):
        if problem := package_problem(name):
            problems.append(Problem(shown(path), f"packages[{index}]", f"{problem}; declare the package that holds "
                                                                       "your reference functions"))
    return (PROJECT_PACKAGE, *[n for n in parsed.packages if not package_problem(n)])


def _load_defaults(path: Path, problems: list[Problem], required: bool = False) -> dict:
    """dtype -> Tolerance from a _defaults/tolerances.yaml; {} with a problem when it does not load."""
    from pydantic import ValidationError

    from harness.core import tolerance  # lazy: numpy and pydantic load only when specs load, not for --help

    data, found = read_yaml(path)
    if found and not required and not path.exists():
        return {}
    problems += found
    if found:
        return {}
    try:
        parsed = tolerance.DefaultsFile.model_validate(data)
    except ValidationError as e:
        problems += from_validation_error(shown(path), tolerance.DefaultsFile, e)
        return {}
    return tolerance.defaults(parsed)
