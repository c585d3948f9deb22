"""Vector-Jacobian products of the unary elementwise ops whose gradient ORT's builder writes from standard ops
(Abs, Neg, Exp, Log, Sin, Cos, Sqrt, Reciprocal, Erf, Identity, Cast): dX = dY * f'(X), in float64, written
from the math. Where f has no derivative, the convention each function states is the one the comparison uses:
IEEE arithmetic on the formula (0 * inf = NaN, 1 / +-0 = +-inf), except where a docstring says otherwise."""
import math

import numpy as np

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _f64(*arrays):
    """The inputs in float64 (the harness passes the case dtype's values)."""
    return tuple(np.asarray(a, dtype=np.float64) for a in arrays)


def abs_vjp(dY, X):
    """d|x|/dx = sign(x); at x = 0 (and -0), where |x| has no derivative, the subgradient 0 (torch's and jax's)."""
    dY, X = _f64(dY, X)
    return dY * np.sign(X)


def neg_vjp(dY, X):
    (dY,) = _f64(dY)
    return -dY


def exp_vjp(dY, input):
    """d exp(x)/dx = exp(x). Where exp(x) alone overflows float64 (x > 709.78) but dY * exp(x) does not, the
    product is formed as sign(dY) exp(x + log|dY|)."""
    dY, x = _f64(dY, input)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        product = dY * np.exp(x)
        overflowed = np.isinf(product) & np.isfinite(x) & np.isfinite(dY) & (dY != 0)
        return np.where(overflowed, np.sign(dY) * np.exp(x + np.log(np.abs(dY))), product)


def log_vjp(dY, input):
    """d log(x)/dx = 1/x. For x < 0, where the real log is undefined (its forward is NaN), 1/x is still the
    derivative of log|x| and of the complex logarithm: the reference states it. At x = +-0, dY / x (+-inf)."""
    dY, x = _f64(dY, input)
    with np.errstate(divide="ignore", invalid="ignore"):
        return dY / x


def sin_vjp(dY, input):
    dY, x = _f64(dY, input)
    with np.errstate(invalid="ignore"):
        return dY * np.cos(x)


def cos_vjp(dY, input):
    dY, x = _f64(dY, input)
    with np.errstate(invalid="ignore"):
        return -dY * np.sin(x)


def sqrt_vjp(dY, X):
    """d sqrt(x)/dx = 1 / (2 sqrt(x)). At x = 0 the one-sided derivative +inf, for -0 too (the same point);
    for x < 0 (forward NaN) NaN."""
    dY, X = _f64(dY, X)
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.sqrt(np.where(X == 0, 0.0, X))  # -0 -> +0: sqrt(-0) is -0 in IEEE, the derivative's limit is +inf
        return 0.5 * dY / root


def reciprocal_vjp(dY, X):
    """d(1/x)/dx = -1/x^2, as -(dY / x) / x so that no intermediate over- or underflows where the result is
    representable; at x = +-0, -inf * sign(dY)."""
    dY, X = _f64(dY, X)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return -(dY / X) / X


def erf_vjp(dY, input):
    """d erf(x)/dx = 2/sqrt(pi) exp(-x^2)."""
    dY, x = _f64(dY, input)
    with np.errstate(over="ignore", invalid="ignore"):
        return dY * (TWO_OVER_SQRT_PI * np.exp(-(x * x)))


def identity_vjp(dY, input):
    (dY,) = _f64(dY)
    return dY


def cast_vjp(dY, input, *, to, saturate=1):
    """A cast between float types is the identity on real numbers (its rounding is not differentiated, as
    every framework's autograd treats it): dinput = dY, in the input's type."""
    (dY,) = _f64(dY)
    return dY


def cast_13_vjp(dY, input, *, to):
    """Cast-13 (no `saturate`): as cast_vjp."""
    return cast_vjp(dY, input, to=to)
