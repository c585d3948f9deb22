"""The softmax-family contracts: references against an independent loop, the two axis conventions,
the case coverage the specs promise, and the reduction term of their tolerance."""
import itertools
import math

import numpy as np
import pytest

from harness.backends.reference import ReferenceBackend
from harness.core.cases import expand
from harness.core.compare import compare
from harness.core.shapes import input_shapes
from harness.core.tolerance import allowances
from harness.run.engine import judge, prepare
from reference.forward import softmax as fwd
from reference.ops import softmax as ops

OPS = ["SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"]
REFERENCES = {"SoftmaxGrad": ops.softmax_grad, "SoftmaxGrad_13": ops.softmax_grad_13,
              "LogSoftmaxGrad": ops.log_softmax_grad, "LogSoftmaxGrad_13": ops.log_softmax_grad_13}


def loop_grad(op: str, dY: np.ndarray, Y: np.ndarray, axis: int) -> np.ndarray:
    """The formula element by element with exact sums (math.fsum), one reduction group at a time."""
    rank = dY.ndim
    axis %= rank
    reduced = list(range(axis, rank)) if not op.endswith("_13") else [axis]
    kept = [d for d in range(rank) if d not in reduced]
    dX = np.empty_like(dY)
    for outer in itertools.product(*(range(dY.shape[d]) for d in kept)):
        group = []
        for inner in itertools.product(*(range(dY.shape[d]) for d in reduced)):
            index = [0] * rank
            for d, i in zip(kept, outer):
                index[d] = i
            for d, i in zip(reduced, inner):
                index[d] = i
            group.append(tuple(index))
        if op.startswith("Log"):
            total = math.fsum(dY[i] for i in group)
            for i in group:
                dX[i] = dY[i] - math.exp(Y[i]) * total
        else:
            total = math.fsum(Y[i] * dY[i] for i in group)
            for i in group:
                dX[i] = Y[i] * (dY[i] - total)
    return dX


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -2, -3, -4])
def test_reference_equals_the_formula_evaluated_element_by_element(op, axis):
    rng = np.random.default_rng(3)
    dY = rng.normal(size=(2, 3, 1, 4))
    X = rng.normal(scale=2.0, size=dY.shape)
    forward = {"SoftmaxGrad": fwd.softmax_legacy, "SoftmaxGrad_13": fwd.softmax_13,
               "LogSoftmaxGrad": fwd.log_softmax_legacy, "LogSoftmaxGrad_13": fwd.log_softmax_13}[op]
    Y = forward(X, axis=axis)
    np.testing.assert_allclose(REFERENCES[op](dY, Y, axis=axis), loop_grad(op, dY, Y, axis), rtol=1e-13, atol=1e-15)


def test_forward_normalises_over_the_convention_s_axes():
    X = np.random.default_rng(0).normal(size=(2, 3, 4))
    np.testing.assert_allclose(fwd.softmax_13(X, axis=1).sum(axis=1), 1.0)
    np.testing.assert_allclose(fwd.softmax_legacy(X, axis=1).sum(axis=(1, 2)), 1.0)
    np.testing.assert_allclose(np.exp(fwd.log_softmax_legacy(X, axis=0)).sum(), 1.0)
    # A -inf input (an attention mask) gets probability exactly 0, and huge inputs do not overflow.
    masked = fwd.softmax_13(np.array([0.0, -np.inf, 1e308]), axis=0)
    np.testing.assert_array_equal(masked, [0.0, 0.0, 1.0])


def test_the_two_axis_conventions_agree_on_the_last_axis_only():
    rng = np.random.default_rng(1)
    dY, X = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5))
    Y = fwd.softmax_13(X, axis=-1)
    np.testing.assert_allclose(ops.softmax_grad(dY, Y, axis=2), ops.softmax_grad_13(dY, Y, axis=2), rtol=1e-14)
    Y1 = fwd.softmax_13(X, axis=1)
    assert np.max(np.abs(ops.softmax_grad(dY, Y1, axis=1) - ops.softmax_grad_13(dY, Y1, axis=1))) > 0.1


def test_accuracy_hooks():
    dY, Y = np.ones((2, 3, 5)), np.full((2, 3, 5), 0.1)
    assert ops.reduced_length(dY, Y, axis=1) == 15 and ops.reduced_length_13(dY, Y, axis=1) == 3
    assert ops.reduced_length(dY, Y, axis=-3) == 30 and ops.reduced_length_13(dY, Y, axis=-1) == 5
    rng = np.random.default_rng(2)
    dY, Y = rng.normal(size=(4, 6)), fwd.softmax_13(rng.normal(size=(4, 6)), axis=0)
    # The magnitude bounds the result: |formula| <= the same formula on absolute values.
    assert np.all(np.abs(ops.softmax_grad_13(dY, Y, axis=0)) <= ops.softmax_grad_magnitude_13(dY, Y, axis=0) + 1e-15)
    L = np.log(Y)
    assert np.all(np.abs(ops.log_softmax_grad(dY, L, axis=0)) <= ops.log_softmax_grad_magnitude(dY, L, axis=0) + 1e-15)


def test_legacy_default_axis_is_invalid_for_rank_1():
    assert "outside [-1, 0]" in ops.axis_problem({"dY": (5,)}, {"axis": 1})
    assert ops.axis_problem({"dY": (5, 2)}, {"axis": 1}) is None


@pytest.mark.parametrize("op", OPS)
def test_cases_cover_what_the_issue_asks(catalog, op):
    spec = catalog.by_op(op)
    cases = [c for c in expand(spec, "ci") if c.valid]
    shapes = [(input_shapes(c)["dY"], c.attributes.get("axis")) for c in cases]
    ranks = {len(s) for s, _ in shapes}
    assert ranks >= {1, 2, 3, 4, 5, 6}
    for rank in range(1, 7):  # every valid axis of every rank, negative ones included, is written somewhere
        written = {a for s, a in shapes if len(s) == rank and a is not None}
        assert written == set(range(-rank, rank)), (rank, written)
    assert any(0 in s for s, _ in shapes) and any(1 in s for s, _ in shapes)
    lengths = [REFERENCE_K[op](s, spec.attributes["axis"].default if a is None else a) for s, a in shapes]
    assert max(lengths) >= 4096
    groups = {c.group.name for c in cases}
    assert {"saturated", "special_values", "masked", "default_axis"} <= groups
    assert {c.dtype for c in cases} == set(spec.type_constraints["T"].types)
    invalid = {c.group.name for c in expand(spec, "ci") if not c.valid}
    assert {"axis_out_of_range", "shape_mismatch"} <= invalid


REFERENCE_K = {op: (lambda s, a: int(np.prod(s[a % len(s):]))) if not op.endswith("_13") else (lambda s, a: s[a % len(s)])
               for op in OPS}


@pytest.mark.parametrize("op", ["SoftmaxGrad", "SoftmaxGrad_13"])
def test_saturated_cases_hold_exact_zeros_and_ones(catalog, op):
    case = next(c for c in expand(catalog.by_op(op), "ci") if c.group.name == "saturated" and c.dtype == "float32")
    Y = prepare(case).inputs["Y"]
    assert (Y == 0).any() and (Y == 1).any()


@pytest.mark.parametrize("op", OPS)
def test_reference_backend_passes_valid_and_rejects_invalid_cases(catalog, op):
    spec = catalog.by_op(op)
    backend = ReferenceBackend()
    statuses = {}
    for case in expand(spec, "ci"):
        result = judge(prepare(case), backend, catalog.tolerance(spec, case.dtype))
        statuses[result.status] = statuses.get(result.status, 0) + 1
        if not case.valid:
            assert result.detail.startswith("rejected as expected"), (case.id, result.detail)
    assert set(statuses) == {"pass"}, statuses


def test_reduction_allowance_admits_float32_accumulation_and_not_a_wrong_kernel(catalog):
    """65536 terms near 1e6 summed in float32 (sequentially, as a plain kernel would) miss the float64
    result by ~3x the dtype tolerance; the sqrt(K) * u * magnitude term admits exactly that rounding,
    and still rejects a kernel with the wrong axis semantics."""
    spec = catalog.by_op("SoftmaxGrad_13")
    tolerance = catalog.tolerance(spec, "float32")
    rng = np.random.default_rng(7)
    K = 1 << 16
    dY = (1e6 + rng.normal(size=(2, K))).astype(np.float32)
    Y = fwd.softmax_13(rng.normal(scale=0.1, size=(2, K)), axis=-1).astype(np.float32)
    expected = ops.softmax_grad_13(dY.astype(np.float64), Y.astype(np.float64), axis=-1)
    total = np.cumsum(Y * dY, axis=-1, dtype=np.float32)[:, -1:]
    float32_kernel = Y * (dY - total)
    (allowance,), (note,) = allowances(spec, {"dY": dY, "Y": Y}, {}, "float32", [expected])
    assert note == " + reduction(K=65536, sqrt(K)=256 * u(float32)=5.96e-08 * magnitude)"
    assert not compare(float32_kernel, expected, "float32", tolerance).passed
    assert compare(float32_kernel, expected, "float32", tolerance, allowance).passed

    dY, X = rng.normal(size=(4, 64, 64)).astype(np.float32), rng.normal(size=(4, 64, 64))
    Y = fwd.softmax_13(X, axis=1).astype(np.float32)
    args = {"dY": dY.astype(np.float64), "Y": Y.astype(np.float64)}
    expected = ops.softmax_grad_13(**args, axis=1)
    (allowance,), _ = allowances(spec, {"dY": dY, "Y": Y}, {"axis": 1}, "float32", [expected])
    legacy_kernel = ops.softmax_grad(**args, axis=1).astype(np.float32)
    assert not compare(legacy_kernel, expected, "float32", tolerance, allowance).passed


def test_every_judged_output_records_its_tolerance_provenance(catalog):
    spec = catalog.by_op("SoftmaxGrad_13")
    case = next(c for c in expand(spec, "ci") if c.group.name == "long_reduction" and c.dtype == "float16")
    result = judge(prepare(case), ReferenceBackend(), catalog.tolerance(spec, "float16"))
    source = result.outputs["dX"]["tolerance"]["source"]
    assert source.startswith("default(float16) + reduction(K=") and "u(float32)" in source  # accumulate: float16 -> float32
    assert source in result.detail
