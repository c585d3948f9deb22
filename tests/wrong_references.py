"""Deliberately wrong kernels, for tests that show a check or a diagnosis catches them."""
from reference._math import sigmoid


def quick_gelu_grad_without_alpha_inside(dY, X, *, alpha):
    s = sigmoid(alpha * X)
    return dY * s * (1.0 + X * (1.0 - s))  # forgets alpha in the second term
