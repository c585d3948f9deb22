"""FusedMatMul has no forward op to check it against: its reference is proven here against onnx's ReferenceEvaluator
(reference._onnx.run of Transpose, MatMul and Mul, the ONNX ops FusedMatMul fuses) on every valid case of the spec's
nightly tier (every transA x transB x transBatchA x transBatchB among them), and its output shapes against a
transcription of the schema's shape inference (contrib_defs.cc FusedMatMulShapeInference)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference._onnx import run
from reference.ops.fused_matmul import case_shapes, fused_matmul, op_shape, output_shape, problem, stored_shape

FLAGS = ("transA", "transB", "transBatchA", "transBatchB")


def _perm(rank: int, trans: int, trans_batch: int) -> list[int] | None:
    """The Transpose perm of op(X): axis 0 behind the batch axes (transBatch, rank >= 3), then the last two swapped."""
    if rank < 2:
        return None
    perm = list(range(rank))
    if rank >= 3 and trans_batch:
        perm = perm[1:-1] + [0, rank - 1]
    if trans:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    return None if perm == list(range(rank)) else perm


def _onnx_fused_matmul(A, B, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """Transpose -> MatMul -> Mul in onnx's reference evaluator, float64."""
    a, b = np.asarray(A, np.float64), np.asarray(B, np.float64)
    pa, pb = _perm(a.ndim, transA, transBatchA), _perm(b.ndim, transB, transBatchB)
    if pa:
        a = run("Transpose", 13, {"data": a}, perm=pa)
    if pb:
        b = run("Transpose", 13, {"data": b}, perm=pb)
    y = run("MatMul", 13, {"A": a, "B": b})
    with np.errstate(all="ignore"):
        return run("Mul", 14, {"A": y, "B": np.array(alpha, np.float64)})


def test_reference_is_onnx_transpose_matmul_mul(catalog):
    checked, combos = 0, set()
    for case in cases_of(catalog, "FusedMatMul", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        attrs = {k: case.attributes[k] for k in ("alpha",) + FLAGS if k in case.attributes}
        got = fused_matmul(inputs["A"], inputs["B"], **attrs)
        want = _onnx_fused_matmul(inputs["A"], inputs["B"], **attrs)
        assert got.dtype == np.float64 and got.shape == want.shape, case.id
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, equal_nan=True, err_msg=case.id)
        combos.add(tuple(int(case.attributes.get(f, 0)) for f in FLAGS))
        checked += 1
    assert checked >= 100
    assert combos == set(itertools.product((0, 1), repeat=4)), "every attribute combination proven"


@pytest.mark.parametrize("flags", list(itertools.product((0, 1), repeat=4)))
@pytest.mark.parametrize("op_shapes", [([2, 3, 4], [2, 4, 5]), ([2, 1, 3, 4], [1, 3, 4, 2]), ([3, 4], [4, 5]),
                                       ([4], [2, 4, 5]), ([2, 3, 4], [4]), ([4], [4])])
def test_every_attribute_combination_against_onnx(flags, op_shapes):
    attrs = dict(zip(FLAGS, flags))
    shapes = case_shapes({"op_shapes": op_shapes, **attrs})
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal(shapes["A"]), rng.standard_normal(shapes["B"])
    got = fused_matmul(A, B, alpha=0.125, **attrs)
    np.testing.assert_allclose(got, _onnx_fused_matmul(A, B, alpha=0.125, **attrs), rtol=1e-13, atol=1e-13)
    assert got.shape == output_shape(shapes["A"], shapes["B"], attrs)


def _ort_shape_inference(s0, s1, ta, tb, tba, tbb):
    """contrib_defs.cc FusedMatMulShapeInference, transcribed (static dims only)."""
    def one(s, t, tbat):
        r = len(s)
        if r == 1:
            return list(s)
        start, end = (1, r - 1) if tbat else (0, r - 2)
        out = [s[i] for i in range(start, end)]
        out.append(s[r - 1 if t else (0 if tbat else r - 2)])
        out.append(s[(0 if tbat else r - 2) if t else r - 1])
        return out
    a, b = one(s0, ta and len(s0) > 1, tba), one(s1, tb and len(s1) > 1, tbb)
    L = [1] + a if len(a) == 1 else a
    R = b + [1] if len(b) == 1 else b
    assert L[-1] == R[-2]
    batch = list(np.broadcast_shapes(tuple(L[:-2]), tuple(R[:-2])))
    return tuple(batch + ([L[-2]] if len(a) != 1 else []) + ([R[-1]] if len(b) != 1 else []))


@pytest.mark.parametrize("flags", list(itertools.product((0, 1), repeat=4)))
@pytest.mark.parametrize("shapes", [([3, 2, 4], [3, 4, 5]), ([4, 2, 3, 4], [2, 3, 4, 4]), ([4, 4], [4, 4]), ([4], [4, 4]),
                                    ([3, 4, 4], [4]), ([4, 1, 4], [4, 4]), ([2, 4, 4], [1, 2, 4, 4])])
def test_shapes_follow_the_schemas_shape_inference(flags, shapes):
    a, b = shapes
    attrs = dict(zip(FLAGS, flags))
    try:
        want = _ort_shape_inference(a, b, *flags)
    except (AssertionError, ValueError):
        assert problem({"A": a, "B": b}, attrs) is not None
        return
    assert problem({"A": a, "B": b}, attrs) is None
    assert output_shape(a, b, attrs) == want


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 3, 4), (5, 2, 3, 4)])
@pytest.mark.parametrize("t, tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_stored_shape_inverts_op_shape(shape, t, tb):
    assert op_shape(stored_shape(shape, t, tb), t, tb) == shape


@pytest.mark.parametrize("a, b, attrs, words", [
    ((2, 3), (4, 5), {}, "inner dimensions differ"),
    ((3, 2), (3, 4), {"transB": 1}, "inner dimensions differ"),
    ((3,), (4,), {}, "inner dimensions differ"),
    ((2, 3, 4), (3, 4, 5), {}, "do not broadcast"),
    ((2, 3, 4), (0, 4, 5), {}, "do not broadcast"),
    ((), (3,), {}, "rank >= 1"),
])
def test_invalid_shapes_are_named(a, b, attrs, words):
    assert words in problem({"A": a, "B": b}, attrs)


def test_empty_k_is_alpha_times_zero():
    y = fused_matmul(np.zeros((3, 2, 0)), np.zeros((3, 0, 4)), alpha=-2.0)
    assert y.shape == (3, 2, 4) and not y.any() and np.signbit(y).all()
