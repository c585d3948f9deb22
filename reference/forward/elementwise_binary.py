"""Forward of the broadcasting binary ops whose gradient ORT's builder writes from standard ops (Add, Sub, Mul,
Div, Pow, Max, Min, Where): onnx's reference evaluator in float64."""
from reference._onnx import run


def mul(A, B):
    return run("Mul", 14, {"A": A, "B": B})
