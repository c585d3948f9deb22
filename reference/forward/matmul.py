"""Forward of the matrix products whose gradient ORT's builder writes from standard and com.microsoft ops
(MatMul: Gemm, FusedMatMul, ReduceSum, Reshape; Gemm: Gemm, ReduceSum, Mul, Identity): onnx's reference
evaluator in float64."""
from reference._onnx import run


def matmul(A, B):
    return run("MatMul", 13, {"A": A, "B": B})


def gemm(A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    return run("Gemm", 13, {"A": A, "B": B, "C": C}, alpha=alpha, beta=beta, transA=transA, transB=transB)
