"""Sequence values: the inputs and outputs of a type variable declared `sequence: true` (ONNX's seq(tensor(T)),
e.g. AdamWOptimizer's parameter list).

A sequence value is a Python list of arrays, one per element, all of the variable's element dtype; its shape is the
tuple of the elements' shapes (`shape: [[[768, 768], [768]]]` in a case's params). Everything that reads a value
goes through these helpers, so a tensor and a sequence are told apart in one place: judging compares a sequence
element by element as one flat array (after its length and every element's shape agree), a backend builds it as
its runtime expects (a list feed for onnxruntime, a pointer array for the C kernels).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

Shape = tuple  # a tensor's tuple of ints, or a sequence's tuple of such tuples
# A tensor (np.ndarray) or a sequence's list of tensors: typed Any, since the two share no interface a type checker
# could hold them to; the helpers here are what tell them apart.
Value = Any


def is_seq(value: Any) -> bool:
    return isinstance(value, list)


def shape_of(value) -> Shape:
    """A tensor's shape, or a sequence's tuple of element shapes."""
    return tuple(tuple(np.shape(t)) for t in value) if is_seq(value) else tuple(np.shape(value))


def json_shape(value) -> list | None:
    """The shape as results JSON writes it: a list of ints, a list of lists for a sequence, None when absent."""
    if value is None:
        return None
    return [list(s) for s in shape_of(value)] if is_seq(value) else list(np.shape(value))


def size_of(shape: Shape, sequence: bool) -> int:
    """How many elements a tensor (or all of a sequence's tensors) of this shape holds."""
    return sum(math.prod(s) for s in shape) if sequence else math.prod(shape)


def apply(value, fn: Callable[[np.ndarray], np.ndarray]):
    """fn of a tensor, or of each element of a sequence (a list again); None stays None."""
    if value is None:
        return None
    return [fn(t) for t in value] if is_seq(value) else fn(value)


def astype(value, dtype):
    return apply(value, lambda t: np.asarray(t).astype(dtype))


def float64(value):
    return apply(value, lambda t: np.asarray(t, dtype=np.float64))


def flat(value) -> np.ndarray:
    """A sequence's elements raveled and joined (a tensor as it is): what judging compares element by element."""
    if not is_seq(value):
        return value
    return np.concatenate([np.ravel(t) for t in value]) if value else np.zeros(0)


def dtype_of(value) -> np.dtype | None:
    """The dtype of a tensor, or of a sequence's elements (None for an empty sequence or elements that differ)."""
    if not is_seq(value):
        return np.asarray(value).dtype
    kinds = {np.asarray(t).dtype for t in value}
    return kinds.pop() if len(kinds) == 1 else None


def copy(value):
    return apply(value, lambda t: np.array(t, copy=True))


def form_problem(sequence: bool, actual, expected) -> str:
    """Why an output cannot be compared value by value: a tensor where a sequence belongs or the reverse, or a
    sequence of another length or element shapes (a tensor's shape is compare's to judge); '' when it can."""
    if sequence != is_seq(actual):
        return "returned a tensor, expected a sequence of tensors" if sequence else "returned a sequence, expected a tensor"
    if not sequence:
        return ""
    if len(actual) != len(expected):
        return f"a sequence of {len(actual)} tensors, expected {len(expected)}"
    got, want = shape_of(actual), shape_of(expected)
    wrong = next((k for k in range(len(got)) if got[k] != want[k]), None)
    return "" if wrong is None else f"element {wrong} has shape {list(got[wrong])}, expected {list(want[wrong])}"


def unflat(values: np.ndarray, shapes: tuple) -> list[np.ndarray]:
    """flat's inverse: the joined values split back into tensors of these shapes."""
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        out.append(values[start:start + size].reshape(shape))
        start += size
    return out
