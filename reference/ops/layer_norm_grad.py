"""LayerNormalizationGrad and SimplifiedLayerNormalizationGrad (com.microsoft): the VJPs of the forward ops in
reference.forward.layer_norm, given the saved statistics (mean, inv_std_var) rather than recomputing them.

With xhat = (X - mean) * inv_std_var (LayerNorm) or X * inv_std_var (RMSNorm), g = dY * scale and means
taken over the row (the dims from `axis` on):
    LayerNorm: dX = inv_std_var * (g - mean(g) - xhat * mean(g * xhat))
    RMSNorm:   dX = inv_std_var * (g - xhat * mean(g * xhat))
    scale_grad = sum over rows of dY * xhat;  bias_grad = sum over rows of dY
"""
import math

import numpy as np

from reference._math import normalize_axis


def _rows(Y_grad, X, scale, axis):
    """float64 views [N, M] of dY and X, scale as [M], and the original shapes."""
    X = np.asarray(X, dtype=np.float64)
    dY = np.asarray(Y_grad, dtype=np.float64)
    axis = normalize_axis(axis, X.ndim)
    if dY.shape != X.shape:
        raise ValueError(f"Y_grad shape {list(dY.shape)} != X shape {list(X.shape)}")
    row = X.shape[axis:]
    if np.shape(scale) != row:
        raise ValueError(f"scale shape {list(np.shape(scale))} != X's normalised dims {list(row)}")
    n, m = int(np.prod(X.shape[:axis], dtype=np.int64)), int(np.prod(row, dtype=np.int64))
    return dY.reshape(n, m), X.reshape(n, m), np.asarray(scale, dtype=np.float64).reshape(m), n, m


def _stat(name, value, n):
    value = np.asarray(value, dtype=np.float64)
    if value.size != n:
        raise ValueError(f"{name} has {value.size} elements; one per row ({n}) needed")
    return value.reshape(n, 1)


def layer_normalization_grad(Y_grad, X, scale, mean, inv_std_var, *, axis=-1):
    dY, x, s, n, m = _rows(Y_grad, X, scale, axis)
    mu, inv = _stat("mean", mean, n), _stat("inv_std_var", inv_std_var, n)
    xhat = (x - mu) * inv
    g = dY * s
    with np.errstate(invalid="ignore", divide="ignore"):
        dX = inv * (g - np.mean(g, axis=1, keepdims=True) - xhat * np.mean(g * xhat, axis=1, keepdims=True))
    shape = np.shape(X)
    row = shape[normalize_axis(axis, len(shape)):]
    return dX.reshape(shape), np.sum(dY * xhat, axis=0).reshape(row), np.sum(dY, axis=0).reshape(row)


def simplified_layer_normalization_grad(Y_grad, X, scale, inv_std_var, *, axis=-1):
    dY, x, s, n, m = _rows(Y_grad, X, scale, axis)
    inv = _stat("inv_std_var", inv_std_var, n)
    xhat = x * inv
    g = dY * s
    with np.errstate(invalid="ignore", divide="ignore"):
        dX = inv * (g - xhat * np.mean(g * xhat, axis=1, keepdims=True))
    shape = np.shape(X)
    row = shape[normalize_axis(axis, len(shape)):]
    return dX.reshape(shape), np.sum(dY * xhat, axis=0).reshape(row)


# ---- accuracy hooks ----

def _lengths(X, axis):
    shape = np.shape(X)
    a = normalize_axis(axis, len(shape))
    return int(np.prod(shape[:a], dtype=np.int64)), int(np.prod(shape[a:], dtype=np.int64))


def layer_norm_grad_reduction_lengths(Y_grad, X, scale, mean, inv_std_var, *, axis=-1):
    """K per output: X_grad sums one row (M terms); scale_grad and bias_grad sum over the N rows."""
    n, m = _lengths(X, axis)
    return m, n, n


def simplified_layer_norm_grad_reduction_lengths(Y_grad, X, scale, inv_std_var, *, axis=-1):
    n, m = _lengths(X, axis)
    return m, n


def layer_norm_grad_magnitude(Y_grad, X, scale, mean, inv_std_var, *, axis=-1):
    dY, x, s, n, m = _rows(Y_grad, X, scale, axis)
    inv = np.abs(_stat("inv_std_var", inv_std_var, n))
    xhat = np.abs((x - _stat("mean", mean, n)) * inv)
    g = np.abs(dY * s)
    dX = inv * (g + np.mean(g, axis=1, keepdims=True) + xhat * np.mean(g * xhat, axis=1, keepdims=True))
    shape = np.shape(X)
    row = shape[normalize_axis(axis, len(shape)):]
    return dX.reshape(shape), np.sum(np.abs(dY) * xhat, axis=0).reshape(row), np.sum(np.abs(dY), axis=0).reshape(row)


def simplified_layer_norm_grad_magnitude(Y_grad, X, scale, inv_std_var, *, axis=-1):
    dY, x, s, n, m = _rows(Y_grad, X, scale, axis)
    inv = np.abs(_stat("inv_std_var", inv_std_var, n))
    xhat = np.abs(x * inv)
    g = np.abs(dY * s)
    dX = inv * (g + xhat * np.mean(g * xhat, axis=1, keepdims=True))
    shape = np.shape(X)
    row = shape[normalize_axis(axis, len(shape)):]
    return dX.reshape(shape), np.sum(np.abs(dY) * xhat, axis=0).reshape(row)


def layer_norm_row_shape(shapes, context):
    """scale's (and LayerNormalization's B's) shape: X's dims from `axis` on; X's own shape if axis is out of range
    (an invalid case the axis check reports)."""
    x = tuple(shapes["X"])
    axis = int(context.get("axis", -1))
    return x[axis % len(x):] if x and -len(x) <= axis < len(x) else x


def layer_norm_stats_check(shapes, attrs):
    """valid_if for the LayerNorm gradients: each saved statistic (mean, inv_std_var) holds one value per row."""
    x = tuple(shapes["X"])
    axis = int(attrs.get("axis", -1))
    if not -len(x) <= axis < len(x):
        return None  # the axis check reports it
    rows = math.prod(x[: axis % len(x)])
    for name in ("mean", "inv_std_var"):
        if shapes.get(name) is not None and math.prod(shapes[name]) != rows:
            return f"{name} has {math.prod(shapes[name])} elements; one per row of X ({rows}) needed"
    return None


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_bytes(shapes, attributes):
    """dY and X read, X_grad written (the row-sized scale and statistics are small)."""
    return 3 * math.prod(shapes["X"]) * 4


def bench_torch(inputs, attributes):
    """ATen's own LayerNorm backward kernel, all three gradients."""
    import torch

    from reference._torch import tensors

    dy, x, scale, mean, inv = tensors(*inputs)
    mean, inv = mean.to(x.dtype), inv.to(x.dtype)  # ATen's CPU kernel keeps a float16 X's statistics in float16
    bias = torch.zeros_like(scale)
    normalized = list(x.shape[normalize_axis(attributes["axis"], x.dim()):])
    return lambda: torch.ops.aten.native_layer_norm_backward(dy, x, normalized, mean, inv, scale, bias, [True, True, True])


def bench_torch_simplified(inputs, attributes):
    """RMSNorm: torch.nn.functional.rms_norm's backward under autograd (forward built once, outside the timing)."""
    import torch

    from reference._torch import tensors

    dy, x, scale, _ = tensors(*inputs)
    x, scale = x.requires_grad_(True), scale.requires_grad_(True)
    y = torch.nn.functional.rms_norm(x, list(scale.shape), scale, eps=1e-5)
    return lambda: torch.autograd.grad(y, (x, scale), dy, retain_graph=True)
