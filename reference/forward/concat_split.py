"""Forward of the ops that cut and join tensors, whose gradients ORT's builder writes from standard ops (Concat,
Split, Slice, Pad): onnx's reference evaluator in float64.

The harness hands every forward input over in float64, the integer ones (Split's split, Slice's starts, ends,
axes and steps, Pad's pads and axes) included: they are cast back to int64 here, as the ONNX schemas want them.
"""
from __future__ import annotations

import builtins

import numpy as np

from reference._onnx import run


def _ints(values):
    return None if values is None else np.asarray(values).astype(np.int64)


def concat(A, B, C=None, *, axis):
    """Concat of two or three inputs along axis (Concat-13; C None: a two-input node)."""
    return run("Concat", 13, {"A": A, "B": B, "C": C}, axis=axis)


def split(X, split=None, *, axis=0, num_outputs=None):
    """Split-18 into three outputs: the sizes from `split`, or ceil(dim / num_outputs) each (the last one smaller)."""
    return run("Split", 18, {"X": X, "split": _ints(split)}, outputs=3, axis=axis, num_outputs=num_outputs)


def split_13(X, split=None, *, axis=0):
    """Split-13 into three outputs: the sizes from `split`, or three equal parts."""
    return run("Split", 13, {"X": X, "split": _ints(split)}, outputs=3, axis=axis)


def slice(X, starts, ends, axes=None, steps=None):
    return run("Slice", 13, {"X": X, "starts": _ints(starts), "ends": _ints(ends), "axes": _ints(axes),
                             "steps": _ints(steps)})


def pad(X, pads, constant_value=None, axes=None, *, mode="constant"):
    """Pad-18: pads [x1_begin, x2_begin, ..., x1_end, x2_end, ...] over `axes` (all axes when omitted). onnx's
    evaluator pads with np.pad, which takes no negative pads: it pads by the positive ones, and the negative ones
    (a crop, as the schema says) are cut off here afterwards."""
    X = np.asarray(X)
    pads = _ints(pads)
    cv = None if constant_value is None else np.asarray(constant_value, dtype=X.dtype)
    Y = run("Pad", 18, {"X": X, "pads": np.maximum(pads, 0), "constant_value": cv, "axes": _ints(axes)}, mode=mode)
    padded = list(range(X.ndim)) if axes is None else [int(a) % X.ndim for a in _ints(axes)]
    n = len(padded)
    if len(pads) != 2 * n:
        raise ValueError(f"pads has {len(pads)} entries for {n} axes")
    index = [builtins.slice(None)] * X.ndim  # this module's slice() is the ONNX op
    for i, a in enumerate(padded):
        begin, end = int(pads[i]), int(pads[i + n])
        if X.shape[a] + begin + end < 0:
            raise ValueError(f"pads {begin}, {end} remove more than axis {a}'s {X.shape[a]} elements")
        index[a] = builtins.slice(-begin if begin < 0 else 0, Y.shape[a] + end if end < 0 else Y.shape[a])
    return Y[tuple(index)]
