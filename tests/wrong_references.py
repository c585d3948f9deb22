"""Deliberately wrong kernels, for tests that show a check or a diagnosis catches them."""
from reference._math import sigmoid


def quick_gelu_grad_without_alpha_inside(dY, X, *, alpha):
    s = sigmoid(alpha * X)
    return dY * s * (1.0 + X * (1.0 - s))  # forgets alpha in the second term


def softmax_grad_13_with_legacy_axis(dY, Y, *, axis):
    """SoftmaxGrad_13 implemented like the legacy op: every dim from `axis` on reduced together."""
    from reference.ops.softmax import softmax_grad

    return softmax_grad(dY, Y, axis=axis)


def softmax_grad_13_next_axis(dY, Y, *, axis):
    """Reduces over the dimension after `axis` (an off-by-one in the axis normalisation)."""
    from reference.ops.softmax import softmax_grad_13

    return softmax_grad_13(dY, Y, axis=(axis + 1) % dY.ndim)


def tanh_grad_transposed(dY, Y):
    """The right values, written out in the transposed layout."""
    return (dY * (1.0 - Y * Y)).T


# References off by a relative 1e-6 on one term: the gradient check must fail each (tests/test_gradient_check.py).
def gelu_grad_one_term_scaled(dY, X):
    from reference._math import normal_cdf, normal_pdf

    return dY * (normal_cdf(X) + X * normal_pdf(X) * (1 + 1e-6))


def softmax_grad_13_one_term_scaled(dY, Y, *, axis):
    import numpy as np

    moved_dY, moved_Y = np.moveaxis(dY, axis, -1), np.moveaxis(Y, axis, -1)
    dX = moved_Y * (moved_dY - np.sum(moved_Y * moved_dY, axis=-1, keepdims=True) * (1 + 1e-6))
    return np.moveaxis(dX, -1, axis)


def conv_grad_dw_scaled(dY, X, W, **attributes):
    from reference.ops.conv_grad import conv_grad

    dX, dW, dB = conv_grad(dY, X, W, **attributes)
    return dX, dW * (1 + 1e-6), dB
