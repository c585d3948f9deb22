"""BatchNormalizationGrad (com.microsoft): the VJP of training-mode BatchNormalization
(reference.forward.batch_norm:batch_norm_internal) given the saved per-channel statistics.

The fifth input is named `variance` in ORT's schema, but what the forward op saves and the gradient reads is
the inverse standard deviation 1 / sqrt(var + epsilon); epsilon is therefore already in it and enters no
formula here. With m = N * D1 * ... * Dk values per channel, xhat = (X - mean) * inv_std and sums over
N and the spatial dims:
    bias_grad  = sum(dY)
    scale_grad = sum(dY * xhat)
    X_grad     = scale * inv_std * (dY - bias_grad / m - xhat * scale_grad / m)
"""
import math

import numpy as np

from reference.forward.batch_norm import channel_axes, channel_view, check_channels


def _prepared(dY, X, scale, mean, variance):
    """float64 dY, X, xhat and the per-channel vectors, after the shape checks."""
    if np.shape(dY) != np.shape(X):
        raise ValueError(f"dY shape {list(np.shape(dY))} != X shape {list(np.shape(X))}")
    check_channels(X, scale=scale, mean=mean, variance=variance)
    dY, X = np.asarray(dY, dtype=np.float64), np.asarray(X, dtype=np.float64)
    view = channel_view(X.ndim)
    mean, inv_std = (np.asarray(v, dtype=np.float64).reshape(view) for v in (mean, variance))
    with np.errstate(invalid="ignore"):
        xhat = (X - mean) * inv_std
    return dY, X, xhat, np.asarray(scale, dtype=np.float64).reshape(view), inv_std


def _count(X) -> int:
    """m: the values per channel; 1 for an empty batch (its sums are 0, so X_grad's terms are too)."""
    return max(1, math.prod(np.shape(X)) // max(1, np.shape(X)[1]))


def batch_normalization_grad(dY, X, scale, mean, variance, *, epsilon=None):
    dY, X, xhat, scale, inv_std = _prepared(dY, X, scale, mean, variance)
    axes, view, m = channel_axes(X.ndim), channel_view(X.ndim), _count(X)
    with np.errstate(invalid="ignore", over="ignore"):
        bias_grad = np.sum(dY, axis=axes)
        scale_grad = np.sum(dY * xhat, axis=axes)
        X_grad = scale * inv_std * (dY - bias_grad.reshape(view) / m - xhat * scale_grad.reshape(view) / m)
    return X_grad, scale_grad, bias_grad


# ---- plausible wrong semantics (the spec's alternative_semantics) ----

def batch_norm_grad_reading_variance(dY, X, scale, mean, variance, *, epsilon=None):
    """The fifth input taken for what its schema name says: the variance, inv_std = 1 / sqrt(variance + epsilon)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        inv_std = 1.0 / np.sqrt(np.asarray(variance, dtype=np.float64) + (epsilon or 0.0))
    return batch_normalization_grad(dY, X, scale, mean, inv_std, epsilon=epsilon)


def batch_norm_grad_inference_mode(dY, X, scale, mean, variance, *, epsilon=None):
    """The statistics held constant (inference-mode BatchNormalization): X_grad = scale * inv_std * dY."""
    dY, X, xhat, scale, inv_std = _prepared(dY, X, scale, mean, variance)
    axes = channel_axes(X.ndim)
    return scale * inv_std * dY, np.sum(dY * xhat, axis=axes), np.sum(dY, axis=axes)


def batch_norm_stats_check(shapes, attrs):
    """valid_if: the saved statistics (mean, variance) hold one value per channel, shape [C]."""
    x = tuple(shapes["X"])
    if len(x) < 2:
        return None  # the rank check reports it
    for name in ("mean", "variance"):
        if shapes.get(name) is not None and tuple(shapes[name]) != (x[1],):
            return f"{name} shape {list(shapes[name])} != [C] = [{x[1]}]: one saved statistic per channel"
    return None


def channel_shape(shapes, context):
    """scale's (and the forward op's B, input_mean, input_var) shape: [C], X's dim 1; X's own shape if X has
    rank < 2 (an invalid case the rank check reports)."""
    x = tuple(shapes["X"])
    return (x[1],) if len(x) >= 2 else x


# ---- accuracy hooks ----

def batch_norm_grad_reduction_lengths(dY, X, scale, mean, variance, *, epsilon=None):
    """K per output: every output rests on sums over the m values of a channel."""
    m = _count(X)
    return m, m, m


def batch_norm_grad_magnitude(dY, X, scale, mean, variance, *, epsilon=None):
    """The formula on absolute values, so the allowance widens where the channel sums cancel."""
    dY, X, xhat, scale, inv_std = _prepared(dY, X, scale, mean, variance)
    axes, view, m = channel_axes(X.ndim), channel_view(X.ndim), _count(X)
    dY, xhat = np.abs(dY), np.abs(xhat)
    bias = np.sum(dY, axis=axes)
    sc = np.sum(dY * xhat, axis=axes)
    X_grad = np.abs(scale * inv_std) * (dY + bias.reshape(view) / m + xhat * sc.reshape(view) / m)
    return X_grad, sc, bias


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_bytes(shapes, attributes):
    """dY and X read, X_grad written (the per-channel vectors are small)."""
    return 3 * math.prod(shapes["X"]) * 4


def bench_torch(inputs, attributes):
    """ATen's training-mode backward from the saved mean and inverse std, all three gradients."""
    import torch

    from reference._torch import tensors

    dy, x, scale, mean, inv = tensors(*inputs)
    return lambda: torch.ops.aten.native_batch_norm_backward(dy, x, scale, None, None, mean, inv, True,
                                                              attributes["epsilon"], [True, True, True])
