"""Forward of the broadcasting elementwise ops whose gradient ORT's builder writes from standard ops (Add, Sub,
Mul, Div, Pow, Max, Min, Where, Clip): onnx's reference evaluator in float64."""
import numpy as np

from reference._onnx import run


def add(A, B):
    return run("Add", 14, {"A": A, "B": B})


def sub(A, B):
    return run("Sub", 14, {"A": A, "B": B})


def mul(A, B):
    return run("Mul", 14, {"A": A, "B": B})


def div(A, B):
    return run("Div", 14, {"A": A, "B": B})


def pow(A, B):  # the ONNX op's name
    return run("Pow", 15, {"X": A, "Y": B})


def _variadic(op, inputs):
    present = {f"data_{i}": x for i, x in enumerate(inputs) if x is not None}
    return run(op, 13, present)


def max(A, B=None, C=None):  # the ONNX op's name
    return _variadic("Max", (A, B, C))


def min(A, B=None, C=None):  # the ONNX op's name
    return _variadic("Min", (A, B, C))


def where(condition, X, Y):
    return run("Where", 16, {"condition": np.asarray(condition) != 0, "X": X, "Y": Y})


def clip(X, min=None, max=None):  # the ONNX input names
    return run("Clip", 13, {"input": X, "min": min, "max": max})
