"""InvertibleLayerNormalizationGrad (com.microsoft): the VJP of LayerNormalization computed from its output Y
instead of its input X, so that X need not be kept for the backward pass (ORTModule's memory optimisation).

LayerNormalization's Y = xhat * scale + bias with xhat = (X - mean) * inv_std_var, so xhat = (Y - bias) / scale
(scale must have no zero). With g = Y_grad * scale and means over the row (the dims from `axis` on):
    X_grad     = inv_std_var * (g - mean(g) - xhat * mean(g * xhat))
    scale_grad = sum over rows of Y_grad * xhat;  bias_grad = sum over rows of Y_grad
"""
import math

import numpy as np

from reference._math import normalize_axis


def _prepared(Y_grad, Y, scale, bias, inv_std_var, axis):
    dY, Y = np.asarray(Y_grad, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if dY.shape != Y.shape:
        raise ValueError(f"Y_grad shape {list(dY.shape)} != Y shape {list(Y.shape)}")
    axis = normalize_axis(axis, Y.ndim)
    row = Y.shape[axis:]
    for name, v in (("scale", scale), ("bias", bias)):
        if np.shape(v) != row:
            raise ValueError(f"{name} shape {list(np.shape(v))} != Y's normalised dims {list(row)}")
    n, m = math.prod(Y.shape[:axis]), math.prod(row)
    inv = np.asarray(inv_std_var, dtype=np.float64)
    if inv.size != n:
        raise ValueError(f"inv_std_var has {inv.size} elements; one per row ({n}) needed")
    s, b = (np.asarray(v, dtype=np.float64).reshape(m) for v in (scale, bias))
    with np.errstate(divide="ignore", invalid="ignore"):
        xhat = (Y.reshape(n, m) - b) / s
    return dY.reshape(n, m), xhat, s, inv.reshape(n, 1), row


def invertible_layer_normalization_grad(Y_grad, Y, scale, bias, inv_std_var, *, axis=-1):
    dY, xhat, s, inv, row = _prepared(Y_grad, Y, scale, bias, inv_std_var, axis)
    g = dY * s
    with np.errstate(invalid="ignore", over="ignore"):
        dX = inv * (g - np.mean(g, axis=1, keepdims=True) - xhat * np.mean(g * xhat, axis=1, keepdims=True))
    return dX.reshape(np.shape(Y_grad)), np.sum(dY * xhat, axis=0).reshape(row), np.sum(dY, axis=0).reshape(row)


def invertible_grad_ignoring_bias(Y_grad, Y, scale, bias, inv_std_var, *, axis=-1):
    """A plausible wrong semantics: xhat = Y / scale, the bias not subtracted."""
    return invertible_layer_normalization_grad(Y_grad, Y, scale, np.zeros_like(np.asarray(bias, dtype=np.float64)),
                                               inv_std_var, axis=axis)


def invertible_grad_y_as_xhat(Y_grad, Y, scale, bias, inv_std_var, *, axis=-1):
    """A plausible wrong semantics: Y taken for xhat (neither bias nor scale undone)."""
    ones = np.ones(np.shape(scale))
    dY, xhat, s, inv, row = _prepared(Y_grad, Y, ones, np.zeros(np.shape(scale)), inv_std_var, axis)
    g = dY * np.asarray(scale, dtype=np.float64).reshape(-1)
    dX = inv * (g - np.mean(g, axis=1, keepdims=True) - xhat * np.mean(g * xhat, axis=1, keepdims=True))
    return dX.reshape(np.shape(Y_grad)), np.sum(dY * xhat, axis=0).reshape(row), np.sum(dY, axis=0).reshape(row)


# ---- hooks ----

def row_shape(shapes, context):
    """scale's and bias's shape: Y_grad's dims from axis on."""
    y = tuple(shapes["Y_grad"])
    axis = int(context.get("axis", -1))
    return y[axis % len(y):] if y and -len(y) <= axis < len(y) else y


def scale_values_check(inputs, attributes):
    """valid_values: xhat = (Y - bias) / scale needs every scale value nonzero."""
    if np.any(np.asarray(inputs["scale"]) == 0):
        return "scale holds a 0: xhat = (Y - bias) / scale cannot be recovered"
    return None


def stats_check(shapes, attrs):
    """valid_if: bias has scale's shape; inv_std_var holds one value per row."""
    y = tuple(shapes["Y_grad"])
    if not y:
        return "Y_grad is a scalar; LayerNormalization needs rank >= 1"
    try:
        axis = normalize_axis(int(attrs.get("axis", -1)), len(y))
    except ValueError:
        return None  # the axis range check reports it
    if shapes.get("bias") is not None and tuple(shapes["bias"]) != tuple(shapes["scale"]):
        return f"bias shape {list(shapes['bias'])} != scale shape {list(shapes['scale'])}"
    n = math.prod(y[:axis])
    if shapes.get("inv_std_var") is not None and math.prod(shapes["inv_std_var"]) != n:
        return f"inv_std_var has {math.prod(shapes['inv_std_var'])} elements; one per row ({n}) needed"
    return None


def reduction_lengths(Y_grad, Y, scale, bias, inv_std_var, *, axis=-1):
    """K: X_grad sums one row (M terms); scale_grad and bias_grad sum over the N rows."""
    a = normalize_axis(axis, np.ndim(Y))
    n, m = math.prod(np.shape(Y)[:a]), math.prod(np.shape(Y)[a:])
    return m, n, n


def magnitude(Y_grad, Y, scale, bias, inv_std_var, *, axis=-1):
    """The formula on absolute values, xhat's as (|Y| + |bias|) / |scale| (the reconstruction's own rounding)."""
    dY, _, s, inv, row = _prepared(Y_grad, Y, scale, bias, inv_std_var, axis)
    n, m = dY.shape
    Y2 = np.abs(np.asarray(Y, dtype=np.float64)).reshape(n, m)
    xh = (Y2 + np.abs(np.asarray(bias, dtype=np.float64)).reshape(m)) / np.abs(s)
    dY, g = np.abs(dY), np.abs(dY * s)
    dX = np.abs(inv) * (g + np.mean(g, axis=1, keepdims=True) + xh * np.mean(g * xh, axis=1, keepdims=True))
    return dX.reshape(np.shape(Y_grad)), np.sum(dY * xh, axis=0).reshape(row), np.sum(dY, axis=0).reshape(row)


def bench_bytes(shapes, attributes):
    """Y_grad and Y read, X_grad written (float32; the row vectors are small)."""
    return 12 * math.prod(shapes["Y_grad"])


def from_node(node):
    """Y_grad's shape and the node's axis."""
    params = {"shape": list(node.shape("Y_grad"))}
    if "axis" in node.attributes:
        params["axis"] = node.attributes["axis"]
    return params
