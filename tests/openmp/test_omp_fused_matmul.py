"""FusedMatMul of the C library: alpha * matmul(op(A), op(B)) with every transA / transB / transBatchA / transBatchB
folded into the BLAS call, broadcast batch axes, 1-D operands, float16 / bfloat16 through float32 rounded once, an
empty K as alpha * 0, the same bits at any thread count, and every malformed input rejected with its status."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from harness.backends import openmp_lib

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
FLAGS = ("transA", "transB", "transBatchA", "transBatchB")


def _op(x, t, tb):
    """op(X) written out with explicit index permutations (not the reference module)."""
    if x.ndim >= 3 and tb:
        x = x.transpose(list(range(1, x.ndim - 1)) + [0, x.ndim - 1])
    if x.ndim >= 2 and t:
        x = x.transpose(list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2])
    return x


def _stored(rng, eff, t, tb, dtype):
    """A random operand stored so that op() of it has shape eff."""
    s = list(eff)
    if len(s) >= 2 and t:
        s[-2], s[-1] = s[-1], s[-2]
    if len(s) >= 3 and tb:
        s = [s[-2]] + s[:-2] + [s[-1]]
    return rng.normal(0, 1, s).astype(dtype)


def _formula(A, B, alpha, flags):
    a = _op(A.astype(np.float64), flags[0], flags[2])
    b = _op(B.astype(np.float64), flags[1], flags[3])
    return alpha * np.matmul(a, b)


@pytest.mark.parametrize("flags", list(itertools.product((0, 1), repeat=4)))
@pytest.mark.parametrize("eff", [([2, 3, 4], [2, 4, 5]), ([2, 1, 3, 4], [1, 3, 4, 5]), ([3, 4], [4, 5]),
                                 ([4], [2, 4, 5]), ([2, 3, 4], [4]), ([4], [4]), ([3, 2, 5, 4], [4, 6])])
def test_every_attribute_combination(lib, rng, flags, eff):
    """transBatch on any rank too (ranks that differ, a matrix, a vector: the schema's shape inference)."""
    A = _stored(rng, eff[0], flags[0], flags[2], np.float32)
    B = _stored(rng, eff[1], flags[1], flags[3], np.float32)
    [y] = lib.run("FusedMatMul", [A, B], dict(zip(FLAGS, flags), alpha=0.125))
    want = _formula(A, B, 0.125, flags)
    assert y.shape == want.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-5), ("float64", 1e-13), ("float16", 2e-3), ("bfloat16", 2e-2)])
def test_dtypes(lib, rng, dtype, rtol):
    A = rng.normal(0, 1, (3, 4, 2, 16)).astype(DTYPES[dtype])
    B = rng.normal(0, 1, (4, 5, 16)).astype(DTYPES[dtype])
    [y] = lib.run("FusedMatMul", [A, B], {"transBatchA": 0, "transB": 1, "alpha": -1.5})
    want = -1.5 * np.matmul(A.astype(np.float64), np.swapaxes(B.astype(np.float64), -1, -2))
    assert y.dtype == A.dtype and y.shape == (3, 4, 2, 5)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=rtol, atol=rtol * 4)


def test_float64_is_computed_in_float64(lib, rng):
    A, B = rng.normal(0, 1, (7, 33)), rng.normal(0, 1, (33, 5))
    [y] = lib.run("FusedMatMul", [A, B], {"alpha": 0.1})
    np.testing.assert_allclose(y, 0.1 * (A @ B), rtol=1e-14, atol=1e-14)


def test_transa_with_a_vector_b_reads_the_transpose(lib):
    """ORT's defect (ort-fusedmatmul-transa-vector-b-ignores-transa): here A^T B."""
    A = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    [y] = lib.run("FusedMatMul", [A, np.array([1, 10, 100], np.float32)], {"transA": 1})
    np.testing.assert_array_equal(y, [531, 642])


def test_empty_k_is_alpha_times_zero_everywhere(lib):
    [y] = lib.run("FusedMatMul", [np.zeros((3, 2, 0), np.float32), np.zeros((3, 0, 4), np.float32)], {"alpha": -2.0})
    assert y.shape == (3, 2, 4) and not y.any() and np.signbit(y).all()
    [y] = lib.run("FusedMatMul", [np.zeros((4, 3, 0), np.float16), np.zeros(0, np.float16)])
    assert y.shape == (4, 3) and not y.any()


def test_alpha_zero_keeps_nan_of_inf_inputs(lib):
    A = np.array([[1, np.inf], [2, 3]], np.float32)
    [y] = lib.run("FusedMatMul", [A, np.ones((2, 2), np.float32)], {"alpha": 0.0})
    assert np.isnan(y[0]).all() and (y[1] == 0).all()


@pytest.mark.parametrize("shapes, attrs, out", [
    (((0, 2, 3), (2, 3, 4)), {"transBatchA": 1}, (2, 0, 4)),  # ORT: SIGFPE
    (((0, 4, 3), (1, 5, 4)), {"transA": 1, "transB": 1}, (0, 3, 5)),  # ORT: rejected
    (((0, 3), (3, 4)), {}, (0, 4)),
    (((2, 3), (3, 0)), {}, (2, 0)),
])
def test_empty_outputs(lib, shapes, attrs, out):
    [y] = lib.run("FusedMatMul", [np.zeros(shapes[0], np.float32), np.zeros(shapes[1], np.float32)], attrs)
    assert y.shape == out


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shapes, attrs", [
    (((300, 96), (96, 129)), {}),                                    # one GEMM cut into blocks
    (((3, 130, 64), (70, 64)), {"transB": 1}),                       # batched A folded into one GEMM
    (((7, 9, 33), (7, 33, 17)), {"alpha": 0.5}),                     # 7 matrices over the threads
    (((9, 7, 33), (7, 17, 33)), {"transBatchA": 1, "transB": 1}),    # strided rows
    (((2, 3, 200, 40), (3, 40, 150)), {}),                           # broadcast B, blocks per matrix
])
def test_thread_counts_give_the_same_bits(lib, rng, dtype, shapes, attrs):
    A = rng.normal(0, 1, shapes[0]).astype(DTYPES[dtype])
    B = rng.normal(0, 1, shapes[1]).astype(DTYPES[dtype])
    outs = []
    for t in (1, 2, 3, 4):
        for forced in (False, True):
            with openmp_lib.force_split(forced):
                outs.append(lib.run("FusedMatMul", [A, B], attrs, threads=t)[0])
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


@pytest.mark.parametrize("ins, attrs, status, words", [
    ((np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)), {}, "OPC_ERR_INVALID_ARGUMENT", "inner dimensions differ"),
    ((np.ones(3, np.float32), np.ones(4, np.float32)), {}, "OPC_ERR_INVALID_ARGUMENT", "inner dimensions differ"),
    ((np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)), {}, "OPC_ERR_INVALID_ARGUMENT", "inner dimensions differ"),
    ((np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32)), {}, "OPC_ERR_INVALID_ARGUMENT", "do not broadcast"),
    ((np.ones((2, 3, 4), np.float32), np.ones((0, 4, 5), np.float32)), {}, "OPC_ERR_INVALID_ARGUMENT", "do not broadcast"),
    ((np.array(2.0, np.float32), np.ones(3, np.float32)), {}, "OPC_ERR_INVALID_ARGUMENT", "rank >= 1"),
    ((np.ones((3, 2), np.float32), np.ones((3, 4), np.float32)), {"transA": 2}, "OPC_ERR_INVALID_ATTRIBUTE",
     "transA 2 must be 0 or 1"),
    ((np.ones((2, 3, 4), np.float32), np.ones((4, 2, 5), np.float32)), {"transBatchB": -1}, "OPC_ERR_INVALID_ATTRIBUTE",
     "transBatchB -1 must be 0 or 1"),
    ((np.ones((2, 3), np.float32), np.ones((3, 4), np.float64)), {}, "OPC_ERR_UNSUPPORTED_DTYPE", ""),
    ((np.ones((2, 3), np.int32), np.ones((3, 4), np.int32)), {}, "OPC_ERR_UNSUPPORTED_DTYPE", ""),
    ((np.ones((2, 3), np.float32), None), {}, "OPC_ERR_INVALID_ARGUMENT", "required input 1 (B) is missing"),
])
def test_malformed_inputs_are_rejected(lib, ins, attrs, status, words):
    with pytest.raises(lib.KernelError) as e:
        lib.run("FusedMatMul", list(ins), attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
