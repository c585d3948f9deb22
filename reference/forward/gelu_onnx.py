"""Forward of ONNX Gelu-20 (ai.onnx; approximate none or tanh) in float64. The com.microsoft Gelu family lives in
reference/forward/activations.py.

approximate = none runs through onnx's reference evaluator. approximate = tanh is written out here: the evaluator
expands Gelu's function body, whose constants 2/pi and 0.044715 are float32 literals (0.636619747,
0.0447149984...), so in float64 it computes a slightly different function (relative 1e-8) from the operator's
definition 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), which is the math the gradient is held to."""
import numpy as np

from reference._onnx import run
from reference.forward.activations import fast_gelu


def gelu(X, *, approximate="none"):
    X = np.asarray(X)
    if X.size == 0:  # onnx's Erf (np.vectorize) refuses an empty tensor
        return np.zeros(X.shape, dtype=X.dtype)
    if approximate == "tanh":
        return fast_gelu(X.astype(np.float64))
    return run("Gelu", 20, {"X": X}, approximate=approximate)
