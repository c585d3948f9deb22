"""Forward ops of the gather gradients: ONNX Gather and GatherElements, float64.

Indices arrive as float64 (the reference convention) and are used as integers; negative indices count
from the end of the indexed dim ([-dim, -1] is valid), anything outside [-dim, dim) raises.
"""
from __future__ import annotations

import numpy as np


def as_indices(indices, dim: int) -> np.ndarray:
    """int64 indices with negatives wrapped; IndexError when one lies outside [-dim, dim)."""
    idx = np.asarray(indices).astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        bad = idx[(idx < -dim) | (idx >= dim)].ravel()[0]
        raise IndexError(f"index {bad} is outside [{-dim}, {dim - 1}]")
    return np.where(idx < 0, idx + dim, idx)


def gather(X, indices, *, axis=0):
    """Y = X indexed along axis by indices: Y.shape = X.shape[:axis] + indices.shape + X.shape[axis+1:]."""
    axis = axis % X.ndim
    return np.take(X, as_indices(indices, X.shape[axis]), axis=axis)


def element_grid(indices, axis: int, dim: int) -> tuple[np.ndarray, ...]:
    """The X position each element of indices selects: its own coordinates, with the axis one replaced."""
    idx = as_indices(indices, dim)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


def gather_elements(X, indices, *, axis=0):
    """Y[p] = X[p with p[axis] replaced by indices[p]]; Y.shape = indices.shape (each dim <= X's off the axis)."""
    axis = axis % X.ndim
    return X[element_grid(indices, axis, X.shape[axis])]
