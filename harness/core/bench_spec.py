"""A spec's benchmark sizes as cases, and its thread-split groups.

A bench size (Spec.bench.sizes) is a one-case group built like any other group's cases (harness.core.cases,
harness.core.shapes, harness.core.tensors): its inputs come from the spec's generators and derived from the forward reference, so a
benchmark times inputs that pass the spec's valid_if and value contracts. The bytes, fixed_bytes and flops hooks
take (shapes, attributes[, params]) of that case; the torch hook takes its inputs in ONNX order, its attributes[ and params].
"""
from __future__ import annotations

import re
from typing import Any

from harness.core.cases import Case, case_id
from harness.core.contract import value_problem
from harness.core.shapes import BUILTIN_PARAMS, OMIT, input_shapes, resolve_attributes
from harness.spec.dotted import PROJECT_PACKAGE, DottedError, call_problem, resolve, resolve_hook
from harness.spec.errors import exception_text
from harness.spec.model import Group, Spec
from harness.spec.names import unknown_name
from harness.spec.vocabulary import THREAD_SPLIT

BENCH_DTYPE = "float32"  # bench inputs are drawn in float32; `opconform bench --dtype` casts them
COST_HOOKS = ("bytes", "fixed_bytes", "flops")


def bench_group(spec: Spec, size: str) -> Group:
    """The one-case group of a bench size (named bench_<size>, in float32)."""
    assert spec.bench is not None
    chosen = spec.bench.sizes[size]
    return Group(name="bench_" + re.sub(r"[^a-z0-9]", "_", size), tier="nightly", dtypes=[BENCH_DTYPE],
                 params={key: [value] for key, value in chosen.params.items()},
                 inputs={**spec.bench.inputs, **chosen.inputs})


def bench_case(spec: Spec, size: str) -> Case:
    group = bench_group(spec, size)
    params = dict(spec.bench.sizes[size].params) if spec.bench else {}
    return Case(spec, group, BENCH_DTYPE, case_id(group.name, params), params)


def _takes_params(fn, path: str) -> bool:
    return call_problem(fn, path, 3) is None


def cost(spec: Spec, case: Case, hook: str) -> float | None:
    """The bench hook `hook` (bytes, fixed_bytes or flops) on a bench case: None when the spec gives none."""
    path = getattr(spec.bench, hook) if spec.bench else None
    if path is None:
        return None
    fn = resolve(path)
    args: tuple[Any, ...] = (input_shapes(case), resolve_attributes(spec, case.attributes))
    return fn(*args, case.params) if _takes_params(fn, path) else fn(*args)


def torch_peer(spec: Spec, case: Case, inputs: list):
    """The spec's torch hook on a bench case's inputs (ONNX order): a zero-argument call of torch's kernel, or
    None when the spec names no peer."""
    path = spec.bench.torch if spec.bench else None
    if path is None:
        return None
    fn = resolve(path)
    args = (inputs, resolve_attributes(spec, case.attributes))
    return fn(*args, case.params) if _takes_params(fn, path) else fn(*args)


def size_problems(spec: Spec, size: str) -> list[str]:
    """Why a bench size is no valid case of its spec: unknown params, attribute values out of range, unknown
    generator names, shapes that cannot be built or break a rank, or valid_if's answer."""
    chosen = spec.bench.sizes[size] if spec.bench else None
    if chosen is None:
        return [f"no bench size {size}"]
    own = spec.forward.own_attributes if spec.forward else {}
    type_params = [t for t in spec.type_constraints if t != spec.main_type]
    known = [*BUILTIN_PARAMS, *spec.attributes, *own, *spec.cases.params, *type_params]
    problems = []
    for key, value in chosen.params.items():
        if key not in known:
            problems.append(f"params.{key}: " + unknown_name("case parameter", key, known))
        elif key in spec.attributes and (problem := value_problem(spec.attributes[key], value)):
            problems.append(f"params.{key}: {problem}")
        elif key in own and (problem := value_problem(own[key], value)):
            problems.append(f"params.{key}: {problem}")
        elif key == OMIT and any(n not in {i.name for i in spec.inputs} or not spec.input(n).optional for n in value):
            problems.append(f"params.{key}: only optional inputs can be omitted, got {value}")
    names = {i.name for i in spec.inputs} | set(spec.forward.inputs if spec.forward else ())
    for name in [*(spec.bench.inputs if spec.bench else {}), *chosen.inputs]:
        if name not in names:
            problems.append(f"inputs.{name}: " + unknown_name("input", name, sorted(names)))
    if problems:
        return problems
    case = bench_case(spec, size)
    try:
        shapes = input_shapes(case)
    except Exception as e:  # noqa: BLE001 - a shape rule the params do not fit: a spec problem, one line
        return [f"its shapes cannot be built: {exception_text(e)}"]
    for inp in spec.inputs:
        shape = shapes.get(inp.name)
        if inp.rank and shape is not None and not inp.rank.min <= len(shape) <= inp.rank.max:
            return [f"input {inp.name} gets rank {len(shape)}, outside its declared {inp.rank.min}..{inp.rank.max}"]
    if spec.valid_if:
        try:
            answer = resolve(spec.valid_if)(dict(shapes), resolve_attributes(spec, case.attributes))
        except Exception as e:  # noqa: BLE001 - the hook's own error is a spec problem
            return [f"valid_if {spec.valid_if} raised {exception_text(e)}"]
        if answer:
            return [f"valid_if rejects it ({answer})"]
    return []


def bench_problems(spec: Spec, packages=(PROJECT_PACKAGE,)) -> list[tuple[str, str]]:
    """(field, message) for every problem of a spec's bench section: its hooks, then each size as a case."""
    bench = spec.bench
    if bench is None:
        return []
    out = []
    if (bench.bytes is None) == (bench.flops is None):
        out.append(("bench", "give exactly one of bytes (memory-bound ops) or flops (compute-bound ops)"))
    if bench.fixed_bytes and not bench.bytes:
        out.append(("bench.fixed_bytes", "fixed_bytes is a part of bytes: give bytes too"))
    for hook in (*COST_HOOKS, "torch"):
        path = getattr(bench, hook)
        if path is None:
            continue
        try:
            fn = resolve_hook(path, packages)
        except DottedError as e:
            out.append((f"bench.{hook}", f"{e}; write module.path:function of an existing function"))
            continue
        except Exception as e:  # noqa: BLE001 - importing the module itself failed: its own bug, one line
            out.append((f"bench.{hook}", f"importing {path.partition(':')[0]} raised {exception_text(e)}"))
            continue
        problem = None if _takes_params(fn, path) else call_problem(fn, path, 2)
        if problem:
            takes = "inputs, attributes[, params]" if hook == "torch" else "shapes, attributes[, params]"
            out.append((f"bench.{hook}", f"{problem} (it takes {takes})"))
    for size in bench.sizes:
        out += [(f"bench.sizes.{size}", message) for message in size_problems(spec, size)]
    return out


def thread_split_groups(spec: Spec) -> list[Group]:
    """The spec's groups tagged thread_split: shapes chosen to cross the C kernels' work splits."""
    return [g for g in spec.cases.groups if THREAD_SPLIT in g.tags]


def thread_split_problems(c_ops, by_op: dict[str, Spec]) -> list[tuple[str, str]]:
    """(op, message) for each op of the C library (csrc/ops.def) whose spec has no thread_split group (ops without
    a loaded spec are left to the op table's own check)."""
    return [(op, "its spec has no case group tagged thread_split (shapes that cross its C kernel's work splits): "
                 "add one with `tags: [thread_split]`, tier nightly")
            for op in c_ops if op in by_op and not thread_split_groups(by_op[op])]


def missing_thread_split(specs, c_ops) -> list[str]:
    """One line per op of the C library whose spec has no thread_split group, or no spec."""
    by_op = {s.op: s for s in specs}
    return ([f"{op}: the C library has it but no spec does" for op in c_ops if op not in by_op]
            + [f"{op}: {message}" for op, message in thread_split_problems(c_ops, by_op)])
