"""The reference called once per case group, by validate (harness.core.spec_checks): a shape rule that does not
fit the op (a matmul's B given dY's shape) fails here as one spec error naming the group, the case and the
inputs' shapes with the rule each came from, instead of later as a NumPy error inside a run.

One case per valid group, the one with the fewest elements among the group's first dtype (shapes are cheap;
the reference is not), run as the reference backend runs it (harness.core.evaluate); then each output that has
a shape rule must come back in that shape. A group whose smallest case holds more than MAX_ELEMENTS input
elements (SoftmaxCrossEntropyLossGrad's 256x32000 vocabulary, 1.2 s) is left to the runs: its shape rules are
the spec's, which its other groups exercise.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, ContextManager

from harness.core import sequences
from harness.core.cases import Case, expand
from harness.core.evaluate import evaluate
from harness.core.shapes import DERIVED_ROLES, OUTPUTS, input_shapes
from harness.core.tensors import make_inputs
from harness.spec.dotted import DottedError, resolve
from harness.spec.errors import exception_text
from harness.spec.model import InvalidGroup, Spec
from harness.spec.unfinished import is_stub

MAX_ELEMENTS = 1 << 20


def _stubbed(spec: Spec) -> bool:
    """A reference still the scaffold's stub: stub_problems says so ("still missing"), not this check."""
    for path in (spec.reference, spec.forward.reference if spec.forward else None):
        try:
            if path and is_stub(resolve(path)):
                return True
        except DottedError:
            return True  # the hook checks report a path that does not resolve
    return False


def _size(shape: Any, sequence: bool) -> int:
    """A tensor's element count, or all of a sequence's tensors' (its shape the tuple of their shapes)."""
    return sum(math.prod(e) for e in shape) if sequence else math.prod(shape)


def smallest_cases(spec: Spec) -> list[tuple[int, Case, dict]]:
    """(group index, case, its input shapes) for the smallest case of each valid group."""
    index = {g.name: i for i, g in enumerate(spec.cases.groups)}
    best: dict[str, tuple[int, Case, dict]] = {}
    first_dtype: dict[str, str] = {}
    for case in expand(spec):
        if isinstance(case.group, InvalidGroup) or first_dtype.setdefault(case.group.name, case.dtype) != case.dtype:
            continue
        shapes = input_shapes(case)
        size = sum(_size(s, spec.is_sequence(spec.input(n))) for n, s in shapes.items() if s is not None)
        if case.group.name not in best or size < best[case.group.name][0]:
            best[case.group.name] = (size, case, shapes)
    return [(index[name], case, shapes) for name, (size, case, shapes) in best.items() if size <= MAX_ELEMENTS]


def _rule(spec: Spec, name: str) -> str:
    """Where an input's shape comes from, as the spec says it."""
    inp = spec.input(name)
    if spec.cases.shapes:
        return f"cases.shapes {spec.cases.shapes}"
    if inp.shape_from:
        return f"shape_from {inp.shape_from}"
    if inp.shape_fn:
        return f"shape_fn {inp.shape_fn}"
    if inp.shape is not None:
        return "its fixed shape"
    if inp.role in DERIVED_ROLES:
        return "the forward reference's output"
    return "the `shape` param"


def _shown(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def reference_problems(spec: Spec, guard: Callable[[], ContextManager] = contextlib.nullcontext,
                       stop: type[BaseException] | tuple[type[BaseException], ...] = ()) -> list[tuple[str, str]]:
    """(field, message) per group whose smallest case the reference cannot compute, or computes in another
    shape than an output's rule says. guard: the limit each call runs under (spec_checks' CPU limit), which
    raises `stop` in a reference that does not return."""
    if _stubbed(spec):
        return []
    out = []
    for index, case, shapes in smallest_cases(spec):
        where, label = f"cases.groups[{index}]", f"case {case.full_id}"
        given = [(i.name, shapes[i.name]) for i in spec.inputs if shapes.get(i.name) is not None]
        ruled = [f"{name} ({_rule(spec, name)} gives {_shown(shape)})" for name, shape in given
                 if _rule(spec, name) != "the `shape` param"]
        try:
            with guard():
                inputs = make_inputs(case)
                values = evaluate(spec, inputs, case.attributes)
        except stop as e:
            out.append((where, f"{label}: the reference {spec.reference} did not return: it {e}"))
            break  # the next group would take as long
        except Exception as e:  # noqa: BLE001 - the reference's own error on a case the spec built: a spec problem
            inputs_text = ", ".join(f"{name} {_shown(shape)}" for name, shape in given)
            fix = (f"check the shape rule of {', '.join(ruled)}" if ruled else "check the group's `shape` param")
            out.append((where, f"{label}: the reference {spec.reference} raised {exception_text(e)} on inputs "
                               f"{inputs_text}; {fix}, or the reference"))
            continue
        wanted = case.params.get(OUTPUTS) or [o.name for o in spec.outputs]
        for o, value in zip(spec.outputs, values):
            expected = shapes.get(o.shape_from) if o.shape_from else None
            if o.name in wanted and expected is not None and sequences.shape_of(value) != tuple(expected):
                inputs_rules = f"the shape rule of {', '.join(ruled)}, " if ruled else ""
                out.append((where, f"{label}: the reference returns output {o.name} of shape {_shown(sequences.shape_of(value))}, "
                                   f"but its shape_from {o.shape_from} gives {_shown(expected)}; check {inputs_rules}"
                                   f"the output's, or the reference"))
                break
    return out
