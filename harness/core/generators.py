"""Values of bool and integer tensors: masks, class labels and indices, drawn as integers (never rounded floats).

Bounds (a label's class count, an index's dimension) are an int, a case param's name, or `input:axis`, the
size of another input's axis, so that they follow the case's shapes.
"""
from __future__ import annotations

import math

import numpy as np

from harness.spec.model import IndicesGenerator, LabelsGenerator, MaskGenerator, ShapeOfGenerator


class BoundError(ValueError):
    pass


def resolve_bound(bound, shapes: dict, params: dict) -> int:
    if isinstance(bound, int):
        return bound
    name, _, axis = bound.partition(":")
    if axis:
        shape = shapes.get(name)
        if shape is None:
            raise BoundError(f"'{bound}': input '{name}' has no shape in this case")
        if not axis.lstrip("-").isdigit():  # an attribute or case param holding the axis, e.g. X:axis
            if not isinstance(params.get(axis), int):
                raise BoundError(f"'{bound}': '{axis}' is neither an int attribute nor a case param of this group")
            axis = params[axis]
        try:
            return int(shape[int(axis)])
        except IndexError:
            raise BoundError(f"'{bound}': input '{name}' has rank {len(shape)}") from None
    if name not in params:
        raise BoundError(f"'{bound}' is neither a case param of this group nor input:axis")
    return int(params[name])


def draw_mask(gen: MaskGenerator, shape, rng: np.random.Generator) -> np.ndarray:
    # compared before the reshape: a 0-d comparison would give a NumPy scalar, not a 0-d array
    return (rng.random(math.prod(shape)) < gen.keep).reshape(shape)


def draw_labels(gen: LabelsGenerator, shape, rng, shapes: dict, params: dict) -> np.ndarray:
    classes = resolve_bound(gen.classes, shapes, params)
    if classes < 1:
        raise BoundError(f"labels need at least one class, got classes={classes}")
    size = math.prod(shape)
    labels = rng.integers(0, classes, size, dtype=np.int64)
    if gen.ignore_index is not None and size:
        ignored = rng.random(size) < gen.ignore_fraction
        labels[ignored] = gen.ignore_index
    return labels.reshape(shape)


def draw_indices(gen: IndicesGenerator, shape, rng, shapes: dict, params: dict) -> np.ndarray:
    if gen.range is not None:
        low, high = gen.range
    elif gen.dim is not None:
        dim = resolve_bound(gen.dim, shapes, params)
        low, high = (-dim if gen.negative else 0), dim
    else:
        raise BoundError("indices need a dim or a range")
    size = math.prod(shape)
    if high <= low and gen.out_of_range < 1 and size:  # an empty dim is fine when no index is drawn
        raise BoundError(f"no valid index in [{low}, {high})")
    values = rng.integers(low, max(high, low + 1), size, dtype=np.int64)
    if gen.out_of_range and size:
        outside = rng.random(size) < gen.out_of_range
        # Just past either end, and far past: off-by-one bugs and unchecked reads both show.
        offsets = rng.choice([0, 1, 1000], size)
        above = rng.random(size) < 0.5
        values[outside] = np.where(above, high + offsets, low - 1 - offsets)[outside]
    return values.reshape(shape)


def draw_shape_of(gen: ShapeOfGenerator, shape, shapes: dict) -> np.ndarray:
    """The shape of input `gen.of` as values, filling a tensor of `shape` (which must hold one per dim)."""
    of = shapes.get(gen.of)
    if of is None:
        raise BoundError(f"input '{gen.of}' has no shape in this case")
    if math.prod(shape) != len(of):
        raise BoundError(f"{gen.of} has rank {len(of)}, so the tensor needs {len(of)} element(s), not shape {list(shape)}")
    return np.array(of, dtype=np.int64).reshape(shape)
