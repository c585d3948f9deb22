"""Gradients of the activation family: ReluGrad, SigmoidGrad, TanhGrad, QuickGeluGrad, LeakyReluGrad,
GeluGrad, FastGeluGrad, BiasGeluGrad_dX, BiasFastGeluGrad_dX.

Each returns the true derivative times dY, with the exact limits at x = +/-inf where a literal
evaluation of the formula would give inf * 0 = NaN.
"""
import numpy as np

from reference._math import SQRT_2_OVER_PI, at_infinity, normal_cdf, normal_pdf, sigmoid
from reference.forward.activations import FAST_GELU_COEFF


def relu_grad(dY, X):
    # A select, not a product: X = 0, -0 or NaN gives 0 even when dY is inf or NaN.
    return np.where(X > 0, dY, 0.0)


def sigmoid_grad(dY, Y):
    return dY * Y * (1.0 - Y)


def tanh_grad(dY, Y):
    return dY * (1.0 - Y * Y)


def leaky_relu_grad(dY, Y, *, alpha):
    # Selected on the forward *output*, as the op is defined: for alpha < 0 this differs from d/dX.
    return np.where(Y > 0, dY, alpha * dY)


def leaky_relu_derivative(dY, X, *, alpha):
    """d/dX of LeakyRelu: what a training graph must compute (forward.derivative), selected on X."""
    return np.where(X > 0, dY, alpha * dY)


def quick_gelu_derivative(X, alpha):
    if alpha == 0:
        return np.where(np.isnan(X), np.nan, 0.5)  # x * sigmoid(0) = x / 2: slope 1/2, also at +/-inf
    v = alpha * X
    s = sigmoid(v)
    with np.errstate(invalid="ignore"):
        d = s * (1.0 + v * sigmoid(-v))
    return at_infinity(v, d, 1.0, 0.0)


def quick_gelu_grad(dY, X, *, alpha):
    return dY * quick_gelu_derivative(X, alpha)


def gelu_derivative(X):
    with np.errstate(invalid="ignore"):
        d = normal_cdf(X) + X * normal_pdf(X)
    return at_infinity(X, d, 1.0, 0.0)


def gelu_grad(dY, X):
    return dY * gelu_derivative(X)


def fast_gelu_derivative(X):
    a, c = SQRT_2_OVER_PI, FAST_GELU_COEFF
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.tanh(a * (X + c * X**3))
        slope = 0.5 * (1.0 - t * t) * a * X * (1.0 + 3.0 * c * X * X)
    # Beyond |x| = 100 the tanh argument exceeds 3e4 and sech^2 is exactly 0 in float64; dropping the
    # term avoids 0 * inf where x^3 overflows.
    slope = np.where(np.abs(X) > 100.0, 0.0, slope)
    return at_infinity(X, 0.5 * (1.0 + t) + slope, 1.0, 0.0)


def fast_gelu_grad(dY, X):
    return dY * fast_gelu_derivative(X)


def bias_gelu_grad_dx(dY, X, B):
    return gelu_grad(dY, X + B)


def bias_fast_gelu_grad_dx(dY, X, B):
    return fast_gelu_grad(dY, X + B)


def bias_shape(shapes, attributes):
    """Shape rule of the Bias* ops: B is 1-D, as long as X's last axis."""
    return (shapes["X"][-1],)


# ---- alternative semantics
# Plausible wrong semantics of the gradients above, for diagnosing failures. Specs list them under
# `alternative_semantics`; a failing backend output that matches one of them is reported as "matches <name>".
# Each takes the same arguments as the op's reference. They are wrong on purpose: none of them is the
# contract of any op here.


def relu_grad_as_product(dY, X):
    """dY * (X > 0): a product, so NaN or inf in dY leaks through where X <= 0 (the op selects)."""
    with np.errstate(invalid="ignore"):
        return dY * (X > 0)


def relu_grad_one_at_zero(dY, X):
    """X >= 0 selects dY: the subgradient 1 at X = 0 instead of 0."""
    return np.where(X >= 0, dY, 0.0)


def sigmoid_grad_of_input(dY, Y):
    """The second input taken as Sigmoid's input X: dY * sigmoid(Y) * (1 - sigmoid(Y))."""
    s = sigmoid(Y)
    return dY * s * (1.0 - s)


def tanh_grad_of_input(dY, Y):
    """The second input taken as Tanh's input X: dY * (1 - tanh(Y)^2)."""
    t = np.tanh(Y)
    return dY * (1.0 - t * t)


def leaky_relu_grad_without_alpha(dY, Y, *, alpha):
    """alpha ignored: ReluGrad on Y."""
    return np.where(Y > 0, dY, 0.0)


def leaky_relu_grad_branches_swapped(dY, Y, *, alpha):
    return np.where(Y > 0, alpha * dY, dY)


def quick_gelu_grad_alpha_outside(dY, X, *, alpha):
    """alpha only inside the sigmoid: s * (1 + X (1 - s)) instead of s * (1 + alpha X (1 - s)); the
    limits at X = +/-inf are kept as the op's (1 and 0 for alpha > 0), so it differs only where meant."""
    v = alpha * X
    s = sigmoid(v)
    with np.errstate(invalid="ignore"):
        d = s * (1.0 + X * (1.0 - s))
    return dY * at_infinity(v, d, 1.0, 0.0)


def gelu_grad_ignoring_alpha(dY, X, *, alpha):
    """The exact GELU gradient in place of QuickGelu's sigmoid approximation."""
    return gelu_grad(dY, X)


def bias_gelu_grad_dx_without_bias(dY, X, B):
    return gelu_grad(dY, X)


def bias_fast_gelu_grad_dx_without_bias(dY, X, B):
    return fast_gelu_grad(dY, X)


def fast_gelu_grad_float32_coefficient(dY, X):
    """FastGeluGrad with 0.044715 rounded to float32 (0.044714998...), as a float64 kernel built from
    float32 constants computes it; the limits at +/-inf are the op's."""
    a, c = SQRT_2_OVER_PI, float(np.float32(FAST_GELU_COEFF))
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.tanh(a * (X + c * X**3))
        slope = np.where(np.abs(X) > 100.0, 0.0, 0.5 * (1.0 - t * t) * a * X * (1.0 + 3.0 * c * X * X))
    return dY * at_infinity(X, 0.5 * (1.0 + t) + slope, 1.0, 0.0)


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_bytes(shapes, attributes):
    """dY and the second input read, dX written (a bias is small)."""
    return 3 * int(np.prod(shapes["dY"])) * 4


def _torch_call(kernel, inputs):
    from reference._torch import tensors

    args = tensors(*inputs)
    return lambda: kernel(*args)


def bench_torch_relu_grad(inputs, attributes):
    import torch

    return _torch_call(lambda dy, x: torch.ops.aten.threshold_backward(dy, x, 0.0), inputs)


def bench_torch_sigmoid_grad(inputs, attributes):
    import torch

    return _torch_call(torch.ops.aten.sigmoid_backward, inputs)


def bench_torch_tanh_grad(inputs, attributes):
    import torch

    return _torch_call(torch.ops.aten.tanh_backward, inputs)


def bench_torch_leaky_relu_grad(inputs, attributes):
    import torch

    return _torch_call(lambda dy, y: torch.ops.aten.leaky_relu_backward(dy, y, attributes["alpha"], True), inputs)


def bench_torch_gelu_grad(inputs, attributes):
    import torch

    return _torch_call(torch.ops.aten.gelu_backward, inputs)


def bench_torch_fast_gelu_grad(inputs, attributes):
    import torch

    return _torch_call(lambda dy, x: torch.ops.aten.gelu_backward(dy, x, approximate="tanh"), inputs)


# torch has no fused bias + GELU backward: its peer adds the bias, then runs gelu_backward
def bench_torch_bias_gelu_grad_dx(inputs, attributes):
    import torch

    return _torch_call(lambda dy, x, b: torch.ops.aten.gelu_backward(dy, x + b), inputs)


def bench_torch_bias_fast_gelu_grad_dx(inputs, attributes):
    import torch

    return _torch_call(lambda dy, x, b: torch.ops.aten.gelu_backward(dy, x + b, approximate="tanh"), inputs)
