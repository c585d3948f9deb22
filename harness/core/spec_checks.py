"""Rules across fields that the schema cannot express: names that must exist, defaults in range,
hooks inside the allowed packages whose signatures take what the harness passes, case globs that
match cases; then every case built as far as its shapes (shape hooks, valid_if, ranks, the memory
budget per case), so that a spec validate accepts is one run can run."""
from __future__ import annotations

import contextlib
import fnmatch
import inspect
import math
import re
import signal
import threading
from typing import Any

from harness.core import dtypes
from harness.core.bench_spec import bench_problems
from harness.core.cases import expand, group_params
from harness.core.contract import value_problem, value_problems
from harness.core.reference_check import reference_problems
from harness.core.shapes import BUILTIN_PARAMS, OMIT, OUTPUTS, SHAPE, STEPS, input_shapes, resolve_attributes
from harness.core.tensors import make_inputs
from harness.spec.dotted import PROJECT_PACKAGE, DottedError, call_problem, resolve, resolve_hook
from harness.spec.errors import exception_text
from harness.spec.model import BUILTIN_TRANSFORMS, Forward, InvalidGroup, Spec
from harness.spec.names import unknown_name

MAX_CASES = 100_000  # per spec: a params product beyond this is a typo, and expanding it would hang
DEFAULT_MAX_CASE_BYTES = 1 << 30  # a case's tensors (inputs and outputs) in its dtypes; --max-case-memory


def check(spec: Spec, packages=(PROJECT_PACKAGE,), max_case_bytes: int = DEFAULT_MAX_CASE_BYTES
          ) -> list[tuple[str, str]]:
    """(field, message) for every cross-field problem; when there is none, every case is built as far
    as its shapes (hooks, valid_if, memory budget), so that what validates also runs."""
    if too_many := _case_count_problems(spec):
        return too_many
    out: list[tuple[str, str]] = []
    in_names = [i.name for i in spec.inputs]
    out_names = [o.name for o in spec.outputs]
    fwd_in = spec.forward.inputs if spec.forward else []
    fwd_out = spec.forward.outputs if spec.forward else []

    for kind, names in (("input", in_names), ("output", out_names)):
        for name in {n for n in names if names.count(n) > 1}:
            out.append((f"{kind}s", f"the name '{name}' is used twice; give each {kind} its own name"))

    for i, inp in enumerate(spec.inputs):
        where = f"inputs[{i}]"
        if inp.type not in spec.type_constraints:
            out.append((f"{where}.type", unknown_name("type variable", inp.type, spec.type_constraints)))
        if inp.shape_from and inp.shape_from not in in_names:
            out.append((f"{where}.shape_from", unknown_name("input", inp.shape_from, in_names)))
        if sum(x is not None for x in (inp.shape_from, inp.shape_fn, inp.shape)) > 1:
            out.append((where, "give one of shape_from, shape_fn or shape, not several"))
        if inp.role == "grad_output":
            if not spec.forward:
                out.append((where, "a grad_output needs a `forward:` section naming the forward op"))
            elif inp.grad_of not in fwd_out:
                out.append((f"{where}.grad_of", f"write the forward output this is the gradient of: one of {', '.join(fwd_out)}"))
        elif inp.grad_of:
            out.append((f"{where}.grad_of", "only a grad_output input has grad_of"))
        if inp.role in ("forward_input", "forward_output", "saved_activation") and spec.forward:
            pool = fwd_in if inp.role == "forward_input" else fwd_out
            name = inp.forward_name or inp.name
            # a shape_of input (GatherGrad's `shape`) holds a forward tensor's shape, not a forward tensor
            shape_of = inp.role == "forward_input" and getattr(spec.cases.inputs.get(inp.name), "kind", "") == "shape_of"
            if name not in pool and not shape_of:
                section = "inputs" if inp.role == "forward_input" else "outputs"
                out.append((f"{where}.forward_name", f"{inp.role} '{name}' is not among forward.{section} "
                            f"({', '.join(pool)}); set forward_name to one of them"))
        elif inp.role in ("forward_output", "saved_activation"):
            out.append((where, f"a {inp.role} is made by the forward op: add a `forward:` section"))

    for i, o in enumerate(spec.outputs):
        where = f"outputs[{i}]"
        if o.type not in spec.type_constraints:
            out.append((f"{where}.type", unknown_name("type variable", o.type, spec.type_constraints)))
        shape_sources = [*in_names, *(spec.forward.inputs if spec.forward else [])]
        if o.shape_from and o.shape_from not in shape_sources:
            out.append((f"{where}.shape_from", unknown_name("input", o.shape_from, shape_sources)))
        if o.grad_of and o.grad_of not in fwd_in:
            out.append((f"{where}.grad_of", "write the forward input this is the gradient of: one of "
                        f"{', '.join(fwd_in) or '(no forward section)'}"))

    for name, attr in spec.attributes.items():
        where = f"attributes.{name}"
        if attr.required and attr.default is not None:
            out.append((where, "a required attribute has no default; drop `default` or `required`"))
        if attr.default is not None and (problem := value_problem(attr, attr.default)):
            out.append((f"{where}.default", f"the default {problem}"))
        if attr.axis_of and attr.axis_of not in in_names:
            out.append((f"{where}.axis_of", unknown_name("input", attr.axis_of, in_names)))
    if spec.forward:
        for name in spec.forward.attributes:
            if name not in spec.attributes:
                out.append(("forward.attributes", unknown_name("attribute", name, spec.attributes)))
        out += _check_forward(spec, spec.forward, in_names)
    if spec.own_saved_state:
        for name in spec.own_saved_state.outputs:
            if name not in in_names:
                out.append(("own_saved_state.outputs", unknown_name("input", name, in_names)))
            elif spec.input(name).role not in ("saved_activation", "forward_output"):
                out.append(("own_saved_state.outputs", f"input {name} is a {spec.input(name).role}; only saved_activation "
                                                       "or forward_output inputs come from the forward op"))

    out += _check_training_graph(spec)
    out += _check_hooks(spec, packages)
    out += _check_state(spec, in_names, out_names)
    out += _check_cases(spec, in_names, out_names, fwd_in)
    out = list(dict.fromkeys(out))  # one mistake in a group is one line, not one per parameter combination
    if not out:
        out += _walk_cases(spec, max_case_bytes)
    if not out:  # the bench sizes, each a case of the spec (harness.core.bench_spec), under the hooks' CPU limit
        _import_bench_hooks(spec, packages)  # a heavy module's first import (onnx, via reference._onnx) is no hook's time
        try:
            with _cpu_limit(BENCH_CPU_SECONDS):
                out += bench_problems(spec, packages)
        except HookTimeout as e:
            out.append(("bench", f"a hook did not return on a bench size: it {e}"))
    if not out:  # the reference on each group's smallest case: a shape rule that does not fit the op
        out += reference_problems(spec, lambda: _cpu_limit(HOOK_CPU_SECONDS), HookTimeout)
    return out


def _import_bench_hooks(spec: Spec, packages) -> None:
    """Import the bench hooks' modules before the CPU limit starts: the limit measures hook calls (HOOK_CPU_SECONDS),
    and a first import of onnx or torch under a loaded machine's page faults took more than all of it. A module that
    does not import is bench_problems' to report."""
    for path in (getattr(spec.bench, hook, None) for hook in ("bytes", "fixed_bytes", "flops")):
        if path:
            with contextlib.suppress(Exception):
                resolve_hook(path, packages)


def _check_forward(spec: Spec, forward: Forward, in_names) -> list[tuple[str, str]]:
    """Forward-only attributes and the shape rules of forward inputs the gradient op does not take."""
    out: list[tuple[str, str]] = []
    for name, attr in forward.own_attributes.items():
        where = f"forward.own_attributes.{name}"
        if name in spec.attributes:
            out.append((where, f"'{name}' is an attribute of {spec.op}: list it in forward.attributes instead"))
        if attr.default is None:
            out.append((where, "give it a default: the forward reference needs a value when no param sets it"))
        elif problem := value_problem(attr, attr.default):
            out.append((f"{where}.default", f"the default {problem}"))
    taken = {i.forward_name or i.name for i in spec.inputs if i.role == "forward_input"}
    for name in forward.inputs:
        if name not in taken and name not in forward.shapes and not spec.cases.shapes:
            out.append(("forward.shapes", f"forward input '{name}' is not an input of {spec.op}: give it a shape "
                                          f"rule, e.g. shapes: {{{name}: {{shape_from: {in_names[0]}}}}}"))
    for name in forward.draws:
        if name not in forward.inputs:
            out.append(("forward.draws", unknown_name("forward input", name, forward.inputs)))
    for name, rule in forward.shapes.items():
        where = f"forward.shapes.{name}"
        if name not in forward.inputs or name in taken:
            out.append((where, f"'{name}' is not a forward-only input (those are: "
                               f"{', '.join(n for n in forward.inputs if n not in taken) or 'none'})"))
        if sum(x is not None for x in (rule.shape_from, rule.shape_fn, rule.shape)) != 1:
            out.append((where, "give exactly one of shape_from, shape_fn or shape"))
        if rule.shape_from and rule.shape_from not in [*in_names, *forward.inputs]:
            out.append((f"{where}.shape_from", unknown_name("input", rule.shape_from, [*in_names, *forward.inputs])))
    return out


def _case_count_problems(spec: Spec) -> list[tuple[str, str]]:
    total = 0
    for kind, groups in (("groups", spec.cases.groups), ("invalid", spec.cases.invalid)):
        for index, group in enumerate(groups):
            per_dtype = math.prod(len(v) for v in group.params.values())
            total += per_dtype * len(group.dtypes or spec.cases.dtypes)
            if total > MAX_CASES:
                return [(f"cases.{kind}[{index}].params", f"the cases multiply past {MAX_CASES:,} (this group alone: "
                         f"{per_dtype:,} per dtype); split the group or drop values")]
    return []


# How the harness calls each hook a spec names: field -> (path, positional arguments, keyword names).
def _hook_calls(spec: Spec) -> dict[str, tuple[str | None, int, tuple]]:
    """A path is None where the spec names no such hook."""
    read = [name for name, attr in spec.attributes.items() if not attr.copied_by_builder]
    inputs_and_attributes = (*[i.name for i in spec.inputs], *read, *spec.declared_shapes())
    calls: dict[str, tuple[str | None, int, tuple]] = {"reference": (spec.reference, 0, inputs_and_attributes),
             "valid_if": (spec.valid_if, 2, ()),  # (shapes, attributes)
             "valid_values": (spec.valid_values, 2, ()),  # (inputs, attributes)
             "cases.shapes": (spec.cases.shapes, 1, ())}  # (params)
    if spec.accuracy:
        calls["accuracy.reduction_length"] = (spec.accuracy.reduction_length, 0, inputs_and_attributes)
        calls["accuracy.magnitude"] = (spec.accuracy.magnitude, 0, inputs_and_attributes)
    if spec.forward:
        calls["forward.reference"] = (spec.forward.reference, 0, (*spec.forward.inputs, *spec.forward.attributes,
                                                                  *spec.forward.own_attributes))
        grads = [i.name for i in spec.inputs if i.role == "grad_output"]
        calls["forward.derivative"] = (spec.forward.derivative, 0, (*grads, *spec.forward.inputs, *spec.attributes))
        for name, rule in spec.forward.shapes.items():
            calls[f"forward.shapes.{name}.shape_fn"] = (rule.shape_fn, 2, ())  # (op input shapes, params)
    for i, inp in enumerate(spec.inputs):
        calls[f"inputs[{i}].shape_fn"] = (inp.shape_fn, 2, ())  # (shapes of earlier inputs, attributes)
    for i, alt in enumerate(spec.alternative_semantics):
        calls[f"alternative_semantics[{i}].reference"] = (alt.reference, 0, inputs_and_attributes)
    return calls


def _check_hooks(spec: Spec, packages) -> list[tuple[str, str]]:
    out = []
    for where, (path, positional, keywords) in _hook_calls(spec).items():
        if path is None:
            continue
        try:
            fn = resolve_hook(path, packages)
        except DottedError as e:
            out.append((where, f"{e}; write module.path:function of an existing function"))
            continue
        except Exception as e:  # noqa: BLE001 - importing the module itself failed: its own bug, one line
            out.append((where, f"importing {path.partition(':')[0]} raised {exception_text(e)}"))
            continue
        if keywords:
            params = _parameters(fn)
            takes_any = params is None or any(p.kind == p.VAR_KEYWORD for p in params.values())
            missing = [n for n in keywords if not takes_any and n not in params]
            if missing:
                like = "forward inputs and attributes" if where == "forward.reference" else "inputs and attributes"
                out.append((where, f"{path} does not take {', '.join(missing)}; its parameters must be named like the {like}"))
                continue
        if problem := call_problem(fn, path, positional, keywords):
            out.append((where, problem))
    names = [a.name for a in spec.alternative_semantics]
    for name in sorted({n for n in names if names.count(n) > 1 or n in BUILTIN_TRANSFORMS}):
        out.append(("alternative_semantics", f"the name '{name}' is used twice (built-ins: {', '.join(BUILTIN_TRANSFORMS)}); "
                                             "a diagnosis must say which one matched"))
    return out


def _steps_problem(spec: Spec, value, params: dict) -> str | None:
    """What is wrong with a case's `steps` param (the calls of a stateful case), or None."""
    if spec.state is None:
        return "steps needs a `state:` section saying which outputs feed which inputs at the next call"
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return f"steps must be a whole number of calls, 1 or more, got {value!r}"
    unrequested = [o for o in spec.state.carry if params.get(OUTPUTS) and o not in params[OUTPUTS]]
    if value > 1 and unrequested:
        return f"{', '.join(unrequested)} feed the next call: request them (outputs) or run one step"
    return None


def _check_state(spec: Spec, in_names, out_names) -> list[tuple[str, str]]:
    """The state section names real outputs and inputs, and a carried output has its input's type."""
    if spec.state is None:
        return []
    out = []
    for output, inp in spec.state.carry.items():
        if output not in out_names:
            out.append((f"state.carry.{output}", unknown_name("output", output, out_names)))
        elif inp not in in_names:
            out.append((f"state.carry.{output}", unknown_name("input", inp, in_names)))
        elif spec.output(output).type != spec.input(inp).type:
            out.append((f"state.carry.{output}", f"{output} is {spec.output(output).type} but {inp} is "
                        f"{spec.input(inp).type}: a carried output must have its input's type"))
    for field, names in (("advance", list(spec.state.advance)), ("redraw", spec.state.redraw)):
        for name in names:
            if name not in in_names:
                out.append((f"state.{field}.{name}", unknown_name("input", name, in_names)))
            elif name in spec.state.carry.values():
                out.append((f"state.{field}.{name}", f"{name} is carried from an output; it cannot also be in state.{field}"))
    return out


def _check_cases(spec: Spec, in_names, out_names, fwd_in) -> list[tuple[str, str]]:
    out = []
    allowed_types = set(spec.type_constraints[spec.main_type].types) if spec.main_type in spec.type_constraints else set()
    own_attributes = spec.forward.own_attributes if spec.forward else {}
    type_params = {t: c.types for t, c in spec.type_constraints.items() if t != spec.main_type}  # Case.input_dtype
    known_params = [*BUILTIN_PARAMS, *spec.attributes, *own_attributes, *spec.cases.params, *type_params]
    generator_names = set(in_names) | set(fwd_in)
    for where, dtypes_ in [("cases.dtypes", spec.cases.dtypes)]:
        for d in dtypes_:
            if allowed_types and d not in allowed_types:
                out.append((where, f"{d} is not allowed by the type constraint ({', '.join(sorted(allowed_types))})"))
    for name, gen in spec.cases.inputs.items():
        if name not in generator_names:
            out.append((f"cases.inputs.{name}", unknown_name("input", name, sorted(generator_names))))
        if gen.kind == "shape_of" and gen.of not in generator_names:
            out.append((f"cases.inputs.{name}.of", unknown_name("input", gen.of, sorted(generator_names))))

    groups = [("groups", g) for g in spec.cases.groups] + [("invalid", g) for g in spec.cases.invalid]
    seen = set()
    for index, (kind, group) in enumerate(groups):
        where = f"cases.{kind}[{index if kind == 'groups' else index - len(spec.cases.groups)}]"
        if group.name in seen:
            out.append((f"{where}.name", f"group name '{group.name}' is used twice"))
        seen.add(group.name)
        for d in group.dtypes or []:
            if allowed_types and d not in allowed_types:
                out.append((f"{where}.dtypes", f"{d} is not allowed by the type constraint ({', '.join(sorted(allowed_types))})"))
        for name, gen in group.inputs.items():
            if name not in generator_names:
                out.append((f"{where}.inputs.{name}", unknown_name("input", name, sorted(generator_names))))
            if gen.kind == "shape_of" and gen.of not in generator_names:
                out.append((f"{where}.inputs.{name}.of", unknown_name("input", gen.of, sorted(generator_names))))
        for params in group_params(group):
            for key, value in params.items():
                if key not in known_params:
                    out.append((f"{where}.params.{key}", unknown_name("case parameter", key, known_params)
                                + "; declare hook parameters under cases.params"))
                elif key in spec.attributes and kind == "groups" and (problem := value_problem(spec.attributes[key], value)):
                    out.append((f"{where}.params.{key}", f"{problem} (out-of-range values belong in cases.invalid)"))
                elif key in type_params and key not in spec.attributes and value not in type_params[key]:
                    out.append((f"{where}.params.{key}", f"{value!r} is not a type {key} allows ({', '.join(type_params[key])})"))
                elif key in own_attributes and (problem := value_problem(own_attributes[key], value)):
                    out.append((f"{where}.params.{key}", f"{problem} (a forward-only attribute must fit the forward op)"))
                elif key == OMIT and any(n not in in_names or not spec.input(n).optional for n in value):
                    out.append((f"{where}.params.{key}", f"only optional inputs can be omitted, got {value}"))
                elif key == OUTPUTS and any(n not in out_names for n in value):
                    out.append((f"{where}.params.{key}", f"unknown output in {value}; outputs are {', '.join(out_names)}"))
                elif key == STEPS and (problem := _steps_problem(spec, value, params)):
                    out.append((f"{where}.params.{key}", problem))
            if SHAPE not in params and not spec.cases.shapes and not any(i.shape_fn or i.shape is not None
                                                                          for i in spec.inputs):
                out.append((f"{where}.params", "no `shape` param: add `shape: [[...], ...]` or a cases.shapes hook"))
                break
        out += _check_group_graph(spec, group, where)
        if kind == "invalid" and isinstance(group, InvalidGroup):  # cases.invalid holds InvalidGroups
            for name in group.shapes:
                if name not in in_names:
                    out.append((f"{where}.shapes.{name}", unknown_name("input", name, in_names)))
            for name in group.attributes:
                if name not in spec.attributes:
                    out.append((f"{where}.attributes.{name}", unknown_name("attribute", name, spec.attributes)))

    ids = [c.id for c in expand(spec)]
    for index, divergence in enumerate(spec.known_divergences):
        where = f"known_divergences[{index}]"  # its backend is checked against the registry by harness.run.catalog
        for pattern in divergence.cases:
            if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
                out.append((f"{where}.cases", f"'{pattern}' matches no case id; ids look like '{ids[0] if ids else 'group/param=value'}'"))
        for name in divergence.outputs or []:
            if name not in out_names:
                out.append((f"{where}.outputs", unknown_name("output", name, out_names)))
    for pattern in spec.own_saved_state.cases if spec.own_saved_state else []:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
            example = ids[0] if ids else "group/param=value"
            out.append(("own_saved_state.cases", f"'{pattern}' matches no case id; ids look like '{example}'"))
    return out


def _check_training_graph(spec: Spec) -> list[tuple[str, str]]:
    """A training_graph spec is named after its forward op and takes the forward op's inputs and incoming gradients."""
    forward = spec.forward
    out = []
    if forward:
        for name in forward.optional_outputs:
            if name not in forward.outputs:
                out.append(("forward.optional_outputs", unknown_name("forward output", name, forward.outputs)))
    if spec.subject != "training_graph":
        return out
    if forward is None:
        return [("forward", "a training_graph spec differentiates a forward op: add a `forward:` section")]
    if not re.fullmatch(re.escape(forward.op) + r"Gradient(_\w+)?", spec.op):
        out.append(("op", f"name a training_graph spec after its forward op: {forward.op}Gradient (or "
                          f"{forward.op}Gradient_<opset> for an older form)"))
    if (forward.domain or "ai.onnx") != spec.domain:
        out.append(("domain", f"a training_graph spec lives in its forward op's domain ({forward.domain or 'ai.onnx'})"))
    for i, inp in enumerate(spec.inputs):
        if inp.role not in ("grad_output", "forward_input"):
            out.append((f"inputs[{i}].role", "a training_graph spec takes the forward op's inputs and the incoming "
                                             "gradients only (the graph makes the saved tensors itself)"))
    return out


def _check_group_graph(spec: Spec, group, where: str) -> list[tuple[str, str]]:
    """A group's `export` and `derivative_differs` against the forward section."""
    out = []
    forward = spec.forward
    if (group.export or group.derivative_differs) and forward is None:
        return [(where, "export and derivative_differs describe a training graph: the spec needs a `forward:` section")]
    if group.derivative_differs and forward and forward.derivative is None:
        out.append((f"{where}.derivative_differs", "give forward.derivative: the vector-Jacobian product ort-autograd "
                                                   "is judged by in this group"))
    export = group.export
    if export is None or forward is None:
        return out
    if isinstance(export.dynamic_axes, dict):
        for name in export.dynamic_axes:
            if name not in forward.inputs:
                out.append((f"{where}.export.dynamic_axes.{name}", unknown_name("forward input", name, forward.inputs)))
    for name in export.constants:
        if name not in forward.inputs:
            out.append((f"{where}.export.constants", unknown_name("forward input", name, forward.inputs)))
    constant_grads = [o.name for o in spec.outputs if o.grad_of in export.constants]
    for params in group_params(group) if constant_grads else []:
        if asked := [n for n in params.get(OUTPUTS) or constant_grads if n in constant_grads]:
            out.append((f"{where}.params.{OUTPUTS}", f"{', '.join(asked)}: the gradient of a constant; request the "
                                                     "other outputs only (`outputs: [[...]]`)"))
            break
    if export.outputs == "required":
        if not forward.optional_outputs:
            out.append((f"{where}.export.outputs", f"{forward.op} has no forward.optional_outputs to leave off"))
        unwritten = [i.name for i in spec.inputs if i.role == "grad_output" and i.grad_of in forward.optional_outputs]
        for params in group_params(group):
            if missing := [n for n in unwritten if n not in params.get(OMIT, ())]:
                out.append((f"{where}.params.{OMIT}", f"omit {', '.join(missing)}: the forward node built with its required "
                                                      "outputs only has no output for them to be the gradient of"))
                break
    return out


def _parameters(fn):
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None


# ---- every case as far as its shapes: hooks run, valid_if answers, the tensors fit the budget ----

def _shape_problem(shape, sequence: bool = False) -> str | None:
    if sequence:  # a sequence's shape: the list of its tensors' shapes
        if not isinstance(shape, (list, tuple)):
            return f"{shape!r} is not a sequence's shape: write a list of shapes such as [[2, 3], [3]]"
        return next((f"element {k}: {problem}" for k, s in enumerate(shape) if (problem := _shape_problem(s))), None)
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return f"{shape!r} is not a shape: write a list of non-negative ints such as [2, 3]"
    if any(d < 0 for d in shape):
        return f"{list(shape)} has a negative dimension"
    return None


def _ranks(shape: Any, sequence: bool) -> list[int]:
    """A tensor's rank, or each of a sequence's tensors' ranks."""
    return [len(e) for e in shape] if sequence else [len(shape)]


def case_bytes(spec: Spec, dtype: str, shapes: dict) -> int:
    """The bytes of a case's tensors in their dtypes: its inputs, and the outputs that follow one."""
    def size(name: str, tensor) -> int:
        shape = shapes.get(name)
        if shape is None:
            return 0
        count = sum(math.prod(s) for s in shape) if spec.is_sequence(tensor) else math.prod(shape)
        return count * dtypes.NUMPY[spec.dtype_of(tensor, dtype)].itemsize

    return (sum(size(i.name, i) for i in spec.inputs)
            + sum(size(o.shape_from, o) for o in spec.outputs if o.shape_from))


# A shape hook or valid_if answers in microseconds; one that loops must not hang validate. The limit
# counts the CPU time of the process (ITIMER_PROF: user + system, all threads), never wall time, so
# that a loaded machine cannot make a spec invalid. Slowest hook call over every case of every spec
# and tier (nightly included), measured 2026-11-28: 0.08 s of CPU (SoftmaxCrossEntropyLossGrad
# float32-vocab/shape=256x32000: its forward reference run on zeros for the shapes of log_prob; 0.17 s
# wall on an idle 2-core machine), next LogSoftmaxGrad at 0.03 s, every other hook under 0.002 s: 2 s
# of CPU is 24x the slowest.
HOOK_CPU_SECONDS = 2.0
# The bench sizes are real models' sizes (a 512 x 30522 vocabulary), and a size whose derived inputs have no shape
# rule runs the forward reference on zeros of that size: SoftmaxCrossEntropyLossInternalGrad's sizes took 1.5 s of
# CPU together (measured 2026-11-28, on a machine running a test suite beside it), within sight of the hook limit.
# Checking every size of a spec gets 10 s: still a stop for a hook that never returns.
BENCH_CPU_SECONDS = 10.0


class HookTimeout(BaseException):
    """Raised in a hook that used up its CPU time. A BaseException, like KeyboardInterrupt, so that a
    hook's own `except Exception` (or the harness's around the forward reference) cannot swallow it."""


@contextlib.contextmanager
def _cpu_limit(seconds: float):
    """Raise HookTimeout in the hook once the process has used `seconds` of CPU time inside the block
    (main thread only, and not while another SIGPROF handler, a profiler's, is installed: no limit)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    previous = signal.getsignal(signal.SIGPROF)
    if previous not in (signal.SIG_DFL, signal.SIG_IGN, None):
        yield
        return

    def expire(signum, frame):
        raise HookTimeout(f"ran out of its {seconds:g} s of CPU")

    signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous if previous is not None else signal.SIG_DFL)


def _running_hook(spec: Spec, error: BaseException) -> str:
    """Which of the spec's shape rules was running when `error` was raised in it: 'shape hook m:f' or
    'forward reference m:f (run on zeros for shapes)'; 'building its shapes' when none of them was."""
    kinds = {spec.cases.shapes: "shape hook"}
    kinds.update({i.shape_fn: "shape hook" for i in spec.inputs if i.shape_fn})
    if spec.forward:
        kinds.update({rule.shape_fn: "shape hook" for rule in spec.forward.shapes.values() if rule.shape_fn})
        kinds.setdefault(spec.forward.reference, "forward reference")
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        name = f"{frame.f_globals.get('__name__', '')}:{frame.f_code.co_qualname}"
        if kinds.get(name) == "forward reference":
            return f"forward reference {name} (run on zeros for the shapes)"
        if name in kinds:
            return f"{kinds[name]} {name}"
        tb = tb.tb_next
    return "building its shapes"


def _walk_cases(spec: Spec, max_case_bytes: int) -> list[tuple[str, str]]:
    where_of = {g.name: f"cases.groups[{i}]" for i, g in enumerate(spec.cases.groups)}
    where_of.update({g.name: f"cases.invalid[{i}]" for i, g in enumerate(spec.cases.invalid)})
    found: dict[str, list] = {}  # field -> [first message, how many cases]
    valid_if_hangs = False
    # a shape a hook computes is the hook's problem, reported once, not once per group
    hook_field = "cases.shapes" if spec.cases.shapes else None
    shape_field = {i.name: "inputs[k].shape_fn".replace("k", str(k)) for k, i in enumerate(spec.inputs) if i.shape_fn}
    if hook_field:
        shape_field = {i.name: hook_field for i in spec.inputs}

    def report(field: str, message: str) -> None:
        found.setdefault(field, [message, 0])[1] += 1

    # the `shape` param sizes the inputs without a rule of their own: a list of shapes when they are sequences
    sequence_param = any(spec.is_sequence(i) for i in spec.inputs if not (i.shape_from or i.shape_fn or i.shape is not None))
    for case in expand(spec):
        where, label = where_of[case.group.name], f"case {case.full_id}"
        if SHAPE in case.params and (problem := _shape_problem(case.params[SHAPE], sequence_param)):
            report(f"{where}.params.shape", f"{label}: {problem}")
            continue
        try:
            with _cpu_limit(HOOK_CPU_SECONDS):
                shapes = input_shapes(case)
        except HookTimeout as e:
            report(hook_field or where, f"{label}: {_running_hook(spec, e)} {e}")
            break  # the next case would take as long
        except RecursionError:
            report(hook_field or where, f"{label}: a shape rule recurses without end")
            continue
        except Exception as e:  # noqa: BLE001 - a hook's own error, or a shape rule the params do not fit
            report(hook_field or where, f"{label}: its shapes cannot be built: {exception_text(e)}")
            continue
        bad = [(n, p) for n, s in shapes.items() if s is not None and (p := _shape_problem(s, spec.is_sequence(spec.input(n))))]
        if bad:
            name, problem = bad[0]
            report(shape_field.get(name, where) if not (isinstance(case.group, InvalidGroup) and name in case.group.shapes)
                   else f"{where}.shapes.{name}", f"{label}: input {name}: {problem}")
            continue
        if not isinstance(case.group, InvalidGroup):
            wrong_rank = [(i.name, i.rank, rank) for i in spec.inputs
                          if i.rank and (given := shapes.get(i.name)) is not None
                          for rank in _ranks(given, spec.is_sequence(i))
                          if not i.rank.min <= rank <= i.rank.max]
            if wrong_rank:
                inp_name, declared, rank = wrong_rank[0]
                report(where, f"{label}: input {inp_name} gets rank {rank}, outside its declared {declared.min}.."
                              f"{declared.max}; fix the shapes or move the case to cases.invalid")
                continue
        size = case_bytes(spec, case.dtype, shapes)
        if size > max_case_bytes:
            report(where, f"{label}: its tensors take {_bytes(size)}, over the {_bytes(max_case_bytes)} budget per case; "
                          "use smaller shapes, or raise the budget with --max-case-memory")
            continue
        if spec.valid_if and not valid_if_hangs and not isinstance(case.group, InvalidGroup):
            try:
                with _cpu_limit(HOOK_CPU_SECONDS):
                    answer = resolve(spec.valid_if)(dict(shapes), resolve_attributes(spec, case.attributes))
            except HookTimeout as e:
                report("valid_if", f"{spec.valid_if} did not return: it {e} ({label})")
                valid_if_hangs = True  # asked again, it would take as long for every case
                continue
            except RecursionError:
                report("valid_if", f"{spec.valid_if} recurses without end ({label})")
                continue
            except Exception as e:  # noqa: BLE001 - a hook's own error is a spec problem, reported
                report("valid_if", f"{spec.valid_if} raised {exception_text(e)} ({label})")
                continue
            if answer is not None and not isinstance(answer, str):
                report("valid_if", f"{spec.valid_if} returned {type(answer).__name__} {answer!r:.40}; "
                                   f"return None for valid inputs or a string saying what is wrong ({label})")
            elif answer:
                report(where, f"{label}: valid_if rejects it ({answer}); move such params to cases.invalid")
        if (spec.valid_values or any(i.values for i in spec.inputs)) and not isinstance(case.group, InvalidGroup):
            try:
                inputs = make_inputs(case)
                problems = value_problems(spec, inputs, case.attributes)
            except Exception as e:  # noqa: BLE001 - a hook's own error is a spec problem, reported
                report(where, f"{label}: its inputs cannot be checked: {exception_text(e)}")
                continue
            if problems:
                report(where, f"{label}: {problems[0]}; change the group's generator or move it to cases.invalid")
    return [(field, message + (f" (and {n - 1} more case(s))" if n > 1 else "")) for field, (message, n) in found.items()]


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def parse_size(text: str) -> int:
    """'512MiB', '4GiB', '2GB', '1000000' -> bytes (ValueError with the accepted forms)."""
    units = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
             "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}
    text = text.strip().lower()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = text[len(number):].strip()
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if unit not in units or not math.isfinite(value) or value <= 0:
        raise ValueError(f"'{text}' is not a size; write e.g. 512MiB, 4GiB or a number of bytes")
    return int(value * units[unit])
