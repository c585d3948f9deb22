"""Forward of the unary elementwise ops whose gradient ORT's builder writes from standard ops (Abs, Neg, Exp,
Log, Sin, Cos, Sqrt, Reciprocal, Erf, Identity, Cast): onnx's reference evaluator in float64, each at the
newest opset of its schema that onnxruntime-training 1.19.2 loads (<= 21). Inputs are named as in the schema."""
import numpy as np
from onnx import TensorProto

from reference._onnx import run


def _unary(op: str, opset: int, name: str, value):
    return run(op, opset, {name: value})


def abs(X):
    return _unary("Abs", 13, "X", X)


def neg(X):
    return _unary("Neg", 13, "X", X)


def exp(input):
    return _unary("Exp", 13, "input", input)


def log(input):
    return _unary("Log", 13, "input", input)


def sin(input):
    return _unary("Sin", 7, "input", input)


def cos(input):
    return _unary("Cos", 7, "input", input)


def sqrt(X):
    return _unary("Sqrt", 13, "X", X)


def reciprocal(X):
    return _unary("Reciprocal", 13, "X", X)


def erf(input):
    if np.asarray(input).size == 0:  # onnx's evaluator vectorizes math.erf without otypes: it fails on empty tensors
        return np.empty(np.shape(input), np.asarray(input).dtype)
    return _unary("Erf", 13, "input", input)


def identity(input):
    return _unary("Identity", 21, "input", input)


def cast(input, *, to, saturate=1):
    """Cast as the real-valued map it is (the identity): always to float64, whatever `to` names, so that the
    gradient check differentiates the map and not the rounding to float16 or float32."""
    return run("Cast", 21, {"input": input}, to=TensorProto.DOUBLE)


def cast_13(input, *, to):
    """Cast-13 (no `saturate`), as cast: the real-valued map, always to float64."""
    return run("Cast", 13, {"input": input}, to=TensorProto.DOUBLE)
