"""Forward Softmax and LogSoftmax in both ONNX axis conventions.

Legacy (Softmax-1/11, which ORT's SoftmaxGrad / LogSoftmaxGrad differentiate): the input is viewed as
2-D [prod(dims[:axis]), prod(dims[axis:])] and normalised over the whole second part.
Opset 13: normalised over the single dimension `axis`.
"""
import numpy as np

from reference._math import normalize_axis


def as_legacy_2d(x: np.ndarray, axis: int) -> np.ndarray:
    """The legacy 2-D view: rows are the leading dims before `axis`, columns everything from it."""
    axis = normalize_axis(axis, x.ndim)
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)))


def _log_softmax_rows(x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:
        return np.array(x, dtype=np.float64, copy=True)
    # Shifting by the maximum keeps exp() in range; a slice holding +inf shifts to NaN, as the math does.
    shift = np.max(x, axis=axis, keepdims=True)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    z = x - shift
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def log_softmax_13(X, *, axis):
    return _log_softmax_rows(np.asarray(X, dtype=np.float64), normalize_axis(axis, np.ndim(X)))


def softmax_13(X, *, axis):
    return np.exp(log_softmax_13(X, axis=axis))


def log_softmax_legacy(X, *, axis):
    X = np.asarray(X, dtype=np.float64)
    return _log_softmax_rows(as_legacy_2d(X, axis), 1).reshape(X.shape)


def softmax_legacy(X, *, axis):
    return np.exp(log_softmax_legacy(X, axis=axis))
