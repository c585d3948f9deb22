"""VJP of ONNX Gelu-20 (ai.onnx), written from the math:
    approximate none: Y = x Phi(x),                       dY/dx = Phi(x) + x phi(x)
    approximate tanh: Y = x (1 + tanh(u)) / 2, u = sqrt(2/pi) (x + 0.044715 x^3),
                      dY/dx = (1 + t) / 2 + x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2,  t = tanh(u)
with the exact limits 1 and 0 at x = +inf and -inf (reference/_math.py's helpers, as the com.microsoft Gelu
family's kernels use them in reference/ops/activations.py)."""
import numpy as np

from reference.ops.activations import fast_gelu_derivative, gelu_derivative

APPROXIMATIONS = ("none", "tanh")


def gelu_derivative_of(X, approximate="none"):
    X = np.asarray(X, dtype=np.float64)
    if X.size == 0:
        return np.zeros(X.shape)
    if approximate == "none":
        return gelu_derivative(X)
    if approximate == "tanh":
        return fast_gelu_derivative(X)
    raise ValueError(f"approximate={approximate!r} is not one of {', '.join(APPROXIMATIONS)}")


def gelu_vjp(dY, X, *, approximate="none"):
    return np.asarray(dY, dtype=np.float64) * gelu_derivative_of(X, approximate)


# Plausible wrong semantics (alternative_semantics): the exact-GELU gradient whatever `approximate` says.
def gelu_vjp_exact_always(dY, X, *, approximate="none"):
    return np.asarray(dY, dtype=np.float64) * gelu_derivative(np.asarray(X, dtype=np.float64))
