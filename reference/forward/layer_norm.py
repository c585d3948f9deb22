"""Forward LayerNormalization (ONNX opset 17; ORT's contrib op) and SimplifiedLayerNormalization (RMSNorm).

Both normalise over the dims from `axis` on (the "row"), for every position of the leading dims. The
saved statistics keep the row dims as size 1 (shape [*X.shape[:axis], 1, ..., 1]), as ORT's forward
kernels write them; the gradient ops take them as inputs.

    LayerNormalization:           Y = (X - mean) * inv_std_var * scale + B,  inv_std_var = 1 / sqrt(var + epsilon)
    SimplifiedLayerNormalization: Y = X * inv_std_var * scale,               inv_std_var = 1 / sqrt(mean(X^2) + epsilon)
"""
import numpy as np

from reference._math import normalize_axis


def row_axes(rank: int, axis: int) -> tuple[int, ...]:
    """The normalised dims: every dim from `axis` on."""
    return tuple(range(normalize_axis(axis, rank), rank))


def _check_scale(name, value, X, axis):
    row = X.shape[normalize_axis(axis, X.ndim):]
    if value is not None and np.shape(value) != row:
        raise ValueError(f"{name} shape {list(np.shape(value))} != X's normalised dims {list(row)}")


def layer_normalization(X, scale, B=None, *, axis=-1, epsilon=1e-5):
    X = np.asarray(X, dtype=np.float64)
    _check_scale("scale", scale, X, axis)
    _check_scale("B", B, X, axis)
    dims = row_axes(X.ndim, axis)
    mean = np.mean(X, axis=dims, keepdims=True)
    inv_std_var = 1.0 / np.sqrt(np.mean(np.square(X - mean), axis=dims, keepdims=True) + epsilon)
    Y = (X - mean) * inv_std_var * np.asarray(scale, dtype=np.float64)
    if B is not None:
        Y = Y + np.asarray(B, dtype=np.float64)
    return Y, mean, inv_std_var


def simplified_layer_normalization(X, scale, *, axis=-1, epsilon=1e-5):
    X = np.asarray(X, dtype=np.float64)
    _check_scale("scale", scale, X, axis)
    dims = row_axes(X.ndim, axis)
    inv_std_var = 1.0 / np.sqrt(np.mean(np.square(X), axis=dims, keepdims=True) + epsilon)
    return X * inv_std_var * np.asarray(scale, dtype=np.float64), inv_std_var
