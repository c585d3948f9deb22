"""Gradients of Softmax and LogSoftmax: SoftmaxGrad, LogSoftmaxGrad (legacy coerce-to-2-D axis) and
SoftmaxGrad_13, LogSoftmaxGrad_13 (one axis).

    Softmax:     dX = Y * (dY - sum(Y * dY))      Y = softmax(X)
    LogSoftmax:  dX = dY - exp(Y) * sum(dY)       Y = log_softmax(X)

The sums run over the reduced part: dims[axis:] flattened (legacy) or the one dim `axis` (opset 13).
Evaluated literally in IEEE float64, so NaN or inf in dY spreads over its reduction group as the
formula says. Also here: the spec hooks (reduction length, magnitude, validity) and the plausible
wrong semantics that `alternative_semantics` lists for diagnosing failures.
"""
import numpy as np

from reference._math import normalize_axis
from reference.forward.softmax import as_legacy_2d


def _grouped(fn, dY, Y, axis, legacy):
    """Apply fn(dY, Y) -> dX on views whose last axis is the reduced part, then undo the view."""
    if legacy:
        return fn(as_legacy_2d(dY, axis), as_legacy_2d(Y, axis)).reshape(np.shape(Y))
    axis = normalize_axis(axis, np.ndim(Y))
    moved = fn(np.moveaxis(dY, axis, -1), np.moveaxis(Y, axis, -1))
    return np.moveaxis(moved, -1, axis)


def _softmax_rows(dY, Y):
    return Y * (dY - np.sum(Y * dY, axis=-1, keepdims=True))


def _log_softmax_rows(dY, Y):
    return dY - np.exp(Y) * np.sum(dY, axis=-1, keepdims=True)


def softmax_grad(dY, Y, *, axis):
    return _grouped(_softmax_rows, dY, Y, axis, legacy=True)


def softmax_grad_13(dY, Y, *, axis):
    return _grouped(_softmax_rows, dY, Y, axis, legacy=False)


def log_softmax_grad(dY, Y, *, axis):
    return _grouped(_log_softmax_rows, dY, Y, axis, legacy=True)


def log_softmax_grad_13(dY, Y, *, axis):
    return _grouped(_log_softmax_rows, dY, Y, axis, legacy=False)


# ---- accuracy hooks: K, and the formula on absolute values (where it cancels, the bound widens) ----

def reduced_length(dY, Y, *, axis):
    """K for the legacy ops: every dim from `axis` on."""
    return int(np.prod(np.shape(Y)[normalize_axis(axis, np.ndim(Y)):], dtype=np.int64))


def reduced_length_13(dY, Y, *, axis):
    return int(np.shape(Y)[normalize_axis(axis, np.ndim(Y))])


def _softmax_magnitude_rows(dY, Y):
    return np.abs(Y) * (np.abs(dY) + np.sum(np.abs(Y * dY), axis=-1, keepdims=True))


def _log_softmax_magnitude_rows(dY, Y):
    return np.abs(dY) + np.exp(Y) * np.sum(np.abs(dY), axis=-1, keepdims=True)


def softmax_grad_magnitude(dY, Y, *, axis):
    return _grouped(_softmax_magnitude_rows, dY, Y, axis, legacy=True)


def softmax_grad_magnitude_13(dY, Y, *, axis):
    return _grouped(_softmax_magnitude_rows, dY, Y, axis, legacy=False)


def log_softmax_grad_magnitude(dY, Y, *, axis):
    return _grouped(_log_softmax_magnitude_rows, dY, Y, axis, legacy=True)


def log_softmax_grad_magnitude_13(dY, Y, *, axis):
    return _grouped(_log_softmax_magnitude_rows, dY, Y, axis, legacy=False)


def axis_problem(shapes, attributes):
    """valid_if: the axis in force (written or default) must be in [-rank, rank - 1] of dY.

    Written axes are range-checked from `axis_of`; this also catches the legacy default axis 1 on a
    rank-1 input, which ORT rejects at run time."""
    rank = len(shapes["dY"])
    axis = attributes["axis"]
    if not -rank <= axis < rank:
        return f"axis {axis} (the default when not written) is outside [{-rank}, {rank - 1}] for dY of rank {rank}"
    return None


# ---- alternative semantics: plausible wrong kernels a failure is scored against ----

def log_softmax_formula_on_softmax(dY, Y, *, axis):
    """SoftmaxGrad computed with LogSoftmax's formula (legacy axis)."""
    return log_softmax_grad(dY, Y, axis=axis)


def log_softmax_formula_on_softmax_13(dY, Y, *, axis):
    return log_softmax_grad_13(dY, Y, axis=axis)


def softmax_formula_on_log_softmax(dY, Y, *, axis):
    """LogSoftmaxGrad computed with Softmax's formula (legacy axis)."""
    return softmax_grad(dY, Y, axis=axis)


def softmax_formula_on_log_softmax_13(dY, Y, *, axis):
    return softmax_grad_13(dY, Y, axis=axis)


def log_softmax_grad_without_exp(dY, Y, *, axis):
    """dY - Y * sum(dY): Y taken as probabilities instead of log-probabilities (legacy axis)."""
    return _grouped(lambda d, y: d - y * np.sum(d, axis=-1, keepdims=True), dY, Y, axis, legacy=True)


def log_softmax_grad_without_exp_13(dY, Y, *, axis):
    return _grouped(lambda d, y: d - y * np.sum(d, axis=-1, keepdims=True), dY, Y, axis, legacy=False)


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_bytes(shapes, attributes):
    """dY and Y read, dX written."""
    return 3 * int(np.prod(shapes["dY"])) * 4


def _torch_peer(inputs, attributes, log: bool, legacy: bool):
    import torch

    from reference._torch import tensors

    dy, y = tensors(*inputs)
    dim = normalize_axis(attributes["axis"], dy.dim())
    if legacy:  # the legacy op reduces over everything from axis on: torch sees the 2-D view
        rows = int(np.prod(dy.shape[:dim]))
        dy, y, dim = dy.reshape(rows, -1), y.reshape(rows, -1), 1
    fn = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
    return lambda: fn(dy, y, dim, torch.float32)


def bench_torch_softmax_grad(inputs, attributes):
    return _torch_peer(inputs, attributes, log=False, legacy=True)


def bench_torch_softmax_grad_13(inputs, attributes):
    return _torch_peer(inputs, attributes, log=False, legacy=False)


def bench_torch_log_softmax_grad(inputs, attributes):
    return _torch_peer(inputs, attributes, log=True, legacy=True)


def bench_torch_log_softmax_grad_13(inputs, attributes):
    return _torch_peer(inputs, attributes, log=True, legacy=False)
