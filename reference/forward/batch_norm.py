"""Forward BatchNormalization in training mode, as onnxruntime-training runs it: com.microsoft BatchNormInternal.

ORT's training graphs rewrite ai.onnx BatchNormalization (which in training mode returns only Y and the
running statistics) into BatchNormInternal, which also returns the batch statistics the gradient takes
(orttraining/orttraining/core/optimizer/batchnorm_replacement.cc); its gradient builder pairs it with
BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std).

X is [N, C, D1, ..., Dk] (k >= 0); every statistic is per channel C, over the N * D1 * ... * Dk values:
    saved_mean    = mean(X)
    var           = mean((X - saved_mean)^2)                   (the biased, population variance)
    saved_inv_std = 1 / sqrt(var + epsilon)
    Y             = (X - saved_mean) * saved_inv_std * scale + B
    running_mean  = momentum * input_mean + (1 - momentum) * saved_mean
    running_var   = momentum * input_var + (1 - momentum) * var
An empty batch (N or a spatial dim 0) gives mean 0 and variance 0 rather than 0/0.
"""
import numpy as np


def channel_axes(rank: int) -> tuple[int, ...]:
    """The dims every per-channel statistic reduces over: N and the spatial dims."""
    return (0,) + tuple(range(2, rank))


def channel_view(rank: int) -> tuple[int, ...]:
    """The shape that broadcasts a [C] vector over X: [1, C, 1, ..., 1]."""
    return (1, -1) + (1,) * (rank - 2)


def check_channels(X, **per_channel):
    """Raise ValueError naming the first problem: X of rank < 2, or a per-channel input that is not [C]."""
    if np.ndim(X) < 2:
        raise ValueError(f"X has rank {np.ndim(X)}; BatchNormalization needs [N, C, ...] (rank >= 2)")
    channels = np.shape(X)[1]
    for name, value in per_channel.items():
        if value is not None and np.shape(value) != (channels,):
            raise ValueError(f"{name} shape {list(np.shape(value))} != [C] = [{channels}]")


def batch_norm_internal(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9):
    """(Y, running_mean, running_var, saved_mean, saved_inv_std) in float64."""
    check_channels(X, scale=scale, B=B, input_mean=input_mean, input_var=input_var)
    X = np.asarray(X, dtype=np.float64)
    axes, view = channel_axes(X.ndim), channel_view(X.ndim)
    count = max(1, X.size // max(1, X.shape[1]))  # an empty batch has mean 0 and variance 0, not NaN
    mean = np.sum(X, axis=axes) / count
    var = np.sum(np.square(X - mean.reshape(view)), axis=axes) / count
    inv_std = 1.0 / np.sqrt(var + epsilon)
    Y = (X - mean.reshape(view)) * (inv_std * np.asarray(scale, dtype=np.float64)).reshape(view)
    Y = Y + np.asarray(B, dtype=np.float64).reshape(view)
    running_mean = momentum * np.asarray(input_mean, dtype=np.float64) + (1.0 - momentum) * mean
    running_var = momentum * np.asarray(input_var, dtype=np.float64) + (1.0 - momentum) * var
    return Y, running_mean, running_var, mean, inv_std
