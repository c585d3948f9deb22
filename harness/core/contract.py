"""What a spec says about valid inputs, checked on concrete tensors and attributes.

The engine checks every valid case here before any backend sees it, and the reference backend uses
the same checks to reject invalid inputs, so one function defines validity for the whole harness.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from harness.core import dtypes, sequences
from harness.core.shapes import resolve_attributes
from harness.spec.dotted import resolve
from harness.spec.model import Attribute, Spec


def input_problems(spec: Spec, inputs: dict[str, np.ndarray | None], written: dict, values: bool = True) -> list[str]:
    """Every way these inputs and written attributes break the spec's contract (empty when valid); values=False:
    shapes, dtypes and attributes only (the values are placeholders, as for a graph's node configuration)."""
    problems = attribute_problems(spec, inputs, written)
    shapes = {name: (None if v is None else sequences.shape_of(v)) for name, v in inputs.items()}
    bound: dict[str, str] = {}
    for inp in spec.inputs:
        value = inputs.get(inp.name)
        if value is None:
            if not inp.optional:
                problems.append(f"input {inp.name} is required")
            continue
        if spec.is_sequence(inp) != sequences.is_seq(value):
            must = "a sequence of tensors" if spec.is_sequence(inp) else "a tensor, not a sequence"
            problems.append(f"input {inp.name} must be {must}")
            continue
        element = sequences.dtype_of(value)
        if element is None and value:  # an empty sequence's type is the model's, not its elements'
            problems.append(f"input {inp.name} is a sequence whose elements' dtypes differ")
        dtype = dtypes.name_of(element) if element is not None else None
        allowed = spec.type_constraints[inp.type].types
        if dtype is None:
            pass
        elif dtype not in allowed:
            problems.append(f"input {inp.name} has dtype {dtype}; {inp.type} allows {', '.join(allowed)}")
        elif bound.setdefault(inp.type, dtype) != dtype:
            problems.append(f"input {inp.name} has dtype {dtype} but {inp.type} is already {bound[inp.type]}")
        value_shape = sequences.shape_of(value)
        ranks = [len(s) for s in value_shape] if sequences.is_seq(value) else [len(value_shape)]
        if inp.rank and (bad := [r for r in ranks if not inp.rank.min <= r <= inp.rank.max]):
            problems.append(f"input {inp.name} has rank {bad[0]}; allowed {inp.rank.min}..{inp.rank.max}")
        if inp.shape_from and (other := shapes.get(inp.shape_from)) is not None and other != value_shape:
            problems.append(f"input {inp.name} has shape {_text(value_shape)} but must equal "
                            f"{inp.shape_from}'s shape {_text(other)}")
        if inp.shape is not None and tuple(inp.shape) != value_shape:
            must = "a scalar (rank 0)" if not inp.shape else f"of shape {list(inp.shape)}"
            problems.append(f"input {inp.name} has shape {_text(value_shape)} but must be {must}")
        if inp.shape_fn:
            earlier = {i.name: shapes.get(i.name) for i in spec.inputs[: spec.inputs.index(inp)]}
            try:
                want = tuple(resolve(inp.shape_fn)(earlier, resolve_attributes(spec, written)))
            except Exception as e:  # noqa: BLE001 - the inputs it depends on are themselves malformed
                problems.append(f"input {inp.name}: shape rule {inp.shape_fn} does not apply ({e})")
            else:
                if want != value_shape:
                    problems.append(f"input {inp.name} has shape {_text(value_shape)}; expected {_text(want)}")
    if not problems and spec.valid_if:
        problem = resolve(spec.valid_if)(shapes, resolve_attributes(spec, written))
        if problem:
            problems.append(problem)
    if not problems and values:
        problems += value_problems(spec, inputs, written)
    return problems


def _text(shape: tuple) -> str:
    """A shape in a problem line: [2, 3], or a sequence's [[2, 3], [4]]."""
    return str([list(s) if isinstance(s, tuple) else s for s in shape])


def value_problems(spec: Spec, inputs: dict[str, np.ndarray | None], written: dict) -> list[str]:
    """Input values outside the declared ranges (`values`), then the spec's valid_values hook."""
    problems = []
    for inp in spec.inputs:
        value, rule = inputs.get(inp.name), inp.values
        if rule is None or value is None:
            continue
        v = sequences.flat(sequences.float64(value))
        if v.size == 0:
            continue
        with np.errstate(invalid="ignore"):
            bad = np.isnan(v)
            if rule.min is not None:
                bad |= (v <= rule.min) if rule.min_exclusive else (v < rule.min)
            if rule.max is not None:
                bad |= (v >= rule.max) if rule.max_exclusive else (v > rule.max)
        if bad.any():
            low = "-inf" if rule.min is None else f"{'(' if rule.min_exclusive else '['}{rule.min:g}"
            high = "inf" if rule.max is None else f"{rule.max:g}{')' if rule.max_exclusive else ']'}"
            problems.append(f"input {inp.name} holds {v[bad].ravel()[0]:g}, outside {low}, {high}")
    if not problems and spec.valid_values:
        problem = resolve(spec.valid_values)(dict(inputs), resolve_attributes(spec, written))
        if problem:
            problems.append(problem)
    return problems


def attribute_problems(spec: Spec, inputs: dict[str, np.ndarray | None], written: dict) -> list[str]:
    declared = spec.declared_shapes()  # model-declared output shapes travel with the attributes
    problems = [f"unknown attribute {name}" for name in written if name not in spec.attributes and name not in declared]
    for name, attr in spec.attributes.items():
        if name not in written:
            if attr.required:
                problems.append(f"attribute {name} is required")
            continue
        problem = value_problem(attr, written[name])
        if problem is None and attr.axis_of and (tensor := inputs.get(attr.axis_of)) is not None:
            rank = tensor.ndim
            if not -rank <= written[name] < rank:
                problem = f"is {written[name]}, outside [{-rank}, {rank - 1}] for {attr.axis_of} of rank {rank}"
        if problem:
            problems.append(f"attribute {name} {problem}")
    return problems


def value_problem(attr: Attribute, value) -> str | None:
    """Why `value` is not a valid value of `attr` (type, range, allowed set), or None."""
    scalar = {"int": numbers.Integral, "float": numbers.Real, "string": str}
    if attr.type in scalar:
        items = [value]
        if not isinstance(value, scalar[attr.type]) or isinstance(value, bool):
            return f"must be a {attr.type}, got {value!r}"
    else:
        kind = {"ints": numbers.Integral, "floats": numbers.Real, "strings": str}[attr.type]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, kind) for v in value):
            return f"must be a list of {attr.type[:-1]}s, got {value!r}"
        items = list(value)
    if attr.type in ("float", "floats") and any(not math.isfinite(v) for v in items):
        return f"must be finite, got {value!r}"
    if attr.min is not None and any(v < attr.min for v in items):
        return f"is {value!r}, below the minimum {attr.min:g}"
    if attr.max is not None and any(v > attr.max for v in items):
        return f"is {value!r}, above the maximum {attr.max:g}"
    if attr.allowed is not None and value not in attr.allowed:
        return f"is {value!r}; allowed: {', '.join(map(repr, attr.allowed))}"
    return None
