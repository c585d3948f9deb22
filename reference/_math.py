"""Helpers shared by the references of several ops: numerically careful scalar functions (float64, exact limits
at +/-inf) and axis normalisation. An op's own hooks live in its module pair, reference/ops/<op>.py and
reference/forward/<op>.py, never here."""
import math

import numpy as np

_erfc = np.vectorize(math.erfc, otypes=[np.float64])
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def sigmoid(v):
    """Logistic function without overflow warnings: exp of a non-positive argument only."""
    v = np.asarray(v, dtype=np.float64)
    e = np.exp(-np.abs(v))
    return np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def normal_cdf(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2: accurate in the lower tail, where 1 + erf loses digits."""
    return 0.5 * _erfc(-np.asarray(x, dtype=np.float64) / math.sqrt(2.0))


def normal_pdf(x):
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return INV_SQRT_2PI * np.exp(-0.5 * x * x)


def at_infinity(x, derivative, at_pos_inf, at_neg_inf):
    """Replace a derivative evaluated literally (inf * 0 = NaN) by its true limits at x = +/-inf."""
    return np.where(np.isposinf(x), at_pos_inf, np.where(np.isneginf(x), at_neg_inf, derivative))


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is outside [{-rank}, {rank - 1}] for rank {rank}")
    return axis % rank


def unbroadcast(grad, shape):
    """The gradient of a tensor of `shape` that was broadcast to grad's shape (numpy/ONNX multidirectional
    broadcasting): grad summed over the axes the broadcast added or stretched from 1, reshaped to `shape`."""
    grad = np.asarray(grad, dtype=np.float64)
    shape = tuple(shape)
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    return np.sum(grad, axis=axes).reshape(shape) if axes else grad.reshape(shape)
