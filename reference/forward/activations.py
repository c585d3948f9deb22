"""Forward activation ops (ONNX Relu, Sigmoid, Tanh, LeakyRelu, Gelu; com.microsoft QuickGelu, FastGelu, BiasGelu)."""
import numpy as np

from reference._math import SQRT_2_OVER_PI, normal_cdf
from reference._math import sigmoid as _sigmoid

FAST_GELU_COEFF = 0.044715


def relu(X):
    return np.where(X > 0, X, 0.0)


def sigmoid(X):
    return _sigmoid(X)


def tanh(X):
    return np.tanh(X)


def leaky_relu(X, *, alpha):
    return np.where(X > 0, X, alpha * X)


def quick_gelu(X, *, alpha):
    return X * _sigmoid(alpha * X)


def gelu(X):
    """Exact GELU: x * Phi(x)."""
    return X * normal_cdf(X)


def fast_gelu(X):
    """The tanh approximation of GELU."""
    with np.errstate(over="ignore", invalid="ignore"):
        return 0.5 * X * (1.0 + np.tanh(SQRT_2_OVER_PI * (X + FAST_GELU_COEFF * X**3)))


def bias_gelu(X, B):
    return gelu(X + B)


def bias_fast_gelu(X, B):
    return fast_gelu(X + B)
