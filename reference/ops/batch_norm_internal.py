"""BatchNormInternal (com.microsoft): training-mode BatchNormalization as onnxruntime-training's graphs run it.

A forward computation of the training graph, not a gradient: ORT's batchnorm_replacement rewrite puts it in
place of ai.onnx BatchNormalization (training_mode 1) because it also returns the batch statistics its
gradient (BatchNormalizationGrad) takes. X is [N, C, D1, ..., Dk]; per channel, over m = N * D1 * ... * Dk:
    saved_mean    = sum(X) / m
    var           = sum((X - saved_mean)^2) / m            (biased, population variance)
    saved_inv_std = 1 / sqrt(var + epsilon)
    Y             = (X - saved_mean) * saved_inv_std * scale + B
    running_mean  = momentum * input_mean + (1 - momentum) * saved_mean
    running_var   = momentum * input_var + (1 - momentum) * var
training_mode 0 is inference: Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B and no other output.
The training-mode math is reference.forward.batch_norm:batch_norm_internal (BatchNormalizationGrad's forward op);
tests/test_batch_norm_internal.py proves it against onnx's BatchNormalization-15 (training_mode 1) evaluator.
"""
import math

import numpy as np

from reference.forward.batch_norm import batch_norm_internal as _training
from reference.forward.batch_norm import channel_view, check_channels


def batch_norm_internal(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9, training_mode=1):
    """(Y, running_mean, running_var, saved_mean, saved_inv_std) in float64; training_mode 0: Y and four NaN [C] placeholders
    (the node has no such outputs)."""
    if int(training_mode) == 1:
        return _training(X, scale, B, input_mean, input_var, epsilon=epsilon, momentum=momentum)
    check_channels(X, scale=scale, B=B, input_mean=input_mean, input_var=input_var)
    X = np.asarray(X, dtype=np.float64)
    view = channel_view(X.ndim)
    mean, var, scale, B = (np.asarray(v, dtype=np.float64).reshape(view) for v in (input_mean, input_var, scale, B))
    with np.errstate(divide="ignore", invalid="ignore"):
        Y = (X - mean) * (scale / np.sqrt(var + epsilon)) + B
    absent = np.full(np.shape(X)[1], np.nan)  # not outputs of an inference node: never requested
    return Y, absent, absent, absent, absent


def batch_norm_internal_unbiased_running_var(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
                                            training_mode=1):
    """A plausible wrong semantics: running_var updated with the unbiased (m - 1) variance, as PyTorch does."""
    out = list(batch_norm_internal(X, scale, B, input_mean, input_var, epsilon=epsilon, momentum=momentum,
                                   training_mode=training_mode))
    if int(training_mode) == 1:
        m = math.prod(np.shape(X)) // max(1, np.shape(X)[1])
        var = 1.0 / np.square(out[4]) - epsilon
        out[2] = momentum * np.asarray(input_var, dtype=np.float64) + (1 - momentum) * var * m / max(1, m - 1)
    return tuple(out)


def batch_norm_internal_momentum_swapped(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
                                         training_mode=1):
    """A plausible wrong semantics: momentum weighting the batch statistics (PyTorch's convention)."""
    return batch_norm_internal(X, scale, B, input_mean, input_var, epsilon=epsilon, momentum=1.0 - momentum,
                               training_mode=training_mode)


def channel_shape(shapes, context):
    """scale's, B's, input_mean's and input_var's shape: [C], X's dim 1 (X's own shape if X has rank < 2)."""
    x = tuple(shapes["X"])
    return (x[1],) if len(x) >= 2 else x


def stats_check(shapes, attrs):
    """valid_if: X has rank >= 2 and every per-channel input is [C]."""
    x = tuple(shapes["X"])
    if len(x) < 2:
        return f"X has shape {list(x)}; BatchNormalization needs [N, C, ...] (rank >= 2)"
    for name in ("scale", "B", "input_mean", "input_var"):
        if shapes.get(name) is not None and tuple(shapes[name]) != (x[1],):
            return f"{name} shape {list(shapes[name])} != [C] = [{x[1]}]"
    return None


def reduction_lengths(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9, training_mode=1):
    """K per output: the batch statistics (and Y through them) are sums over the m values of a channel."""
    m = max(1, math.prod(np.shape(X)) // max(1, np.shape(X)[1])) if int(training_mode) == 1 else 1
    return m, m, m, m, m


def magnitude(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9, training_mode=1):
    """The formula on absolute values: |X - mean| + |mean| scaled, so a large mean next to a small spread widens
    the allowance of Y (whose mean is subtracted) and of the variance."""
    X64 = np.asarray(X, dtype=np.float64)
    Y, rm, rv, mean, inv = batch_norm_internal(X, scale, B, input_mean, input_var, epsilon=epsilon,
                                               momentum=momentum, training_mode=training_mode)
    view = channel_view(X64.ndim)
    sc, b = (np.abs(np.asarray(v, dtype=np.float64)).reshape(view) for v in (scale, B))
    if int(training_mode) != 1:
        mu, var = (np.asarray(v, dtype=np.float64).reshape(view) for v in (input_mean, input_var))
        with np.errstate(all="ignore"):
            return (np.abs(X64) + np.abs(mu)) * sc / np.sqrt(var + epsilon) + b, rm, rv, mean, inv
    axes = (0,) + tuple(range(2, X64.ndim))
    count = max(1, X64.size // max(1, X64.shape[1]))
    absmean = np.sum(np.abs(X64), axis=axes) / count
    with np.errstate(all="ignore"):
        Ymag = (np.abs(X64) + absmean.reshape(view)) * (np.abs(inv).reshape(view) * sc) + b
        varmag = np.abs(1.0 / np.square(inv) - epsilon)  # the two-pass variance sums squares: |var| itself
        rmm = np.abs(momentum * np.asarray(input_mean, dtype=np.float64)) + np.abs((1 - momentum) * absmean)
        rvm = np.abs(momentum * np.asarray(input_var, dtype=np.float64)) + np.abs((1 - momentum) * varmag)
    return Ymag, rmm, rvm, absmean, np.abs(inv)


# ---- bench: the cost of one call and torch's kernel for `opconform bench` ---------------------------------------

def bench_bytes(shapes, attributes):
    """X read (twice: the statistics, then Y) and Y written; the per-channel vectors are small."""
    return 3 * math.prod(shapes["X"]) * 4


def bench_torch(inputs, attributes):
    """torch.nn.functional.batch_norm(training=True): batch statistics, running statistics updated in place."""
    import torch

    from reference._torch import tensors

    x, scale, b, mean, var = tensors(*inputs)
    mean, var = mean.clone(), var.clone()
    momentum = 1.0 - float(attributes.get("momentum", 0.9))  # torch weights the batch statistics
    eps = float(attributes.get("epsilon", 1e-5))
    return lambda: torch.nn.functional.batch_norm(x, mean, var, scale, b, True, momentum, eps)


def from_node(node):
    """X's shape and the node's epsilon, momentum and training_mode (those it writes)."""
    params = {"shape": list(node.shape("X"))}
    for name in ("epsilon", "momentum", "training_mode"):
        if name in node.attributes:
            params[name] = node.attributes[name]
    return params
