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
