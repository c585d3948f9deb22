"""InPlaceAccumulatorV2, InPlaceAccumulator and ZeroGradient have no forward op to check them against: their
reference is proven here against independent formulations: exact rational sums (fractions.Fraction) rounded once
to float64 on every valid nightly case; N iterated accumulations (the outputs fed back as the next step's buffer,
overwrite on the first step) against the exactly rounded sum of the gradients; and against torch's own gradient
accumulation into .grad (backward N times after zero_grad) and optimizer.zero_grad(set_to_none=False)."""
import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference.ops.accumulators import check_v1, check_v2, in_place_accumulator, in_place_accumulator_v2, zero_gradient


def _exact_sum(a: float, b: float) -> float:
    """a + b as the math rounded once to float64; inf and NaN as IEEE defines them."""
    if not (math.isfinite(a) and math.isfinite(b)):
        with np.errstate(all="ignore"):
            return float(np.float64(a) + np.float64(b))
    q = Fraction(a) + Fraction(b)
    if q == 0:
        return -0.0 if (math.copysign(1, a) < 0 and math.copysign(1, b) < 0) else 0.0
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def _same(got, want):
    return got.shape == want.shape and (got.tobytes() == want.tobytes() or np.array_equal(got, want, equal_nan=True))


def _flag(inputs, name, default):
    f = inputs.get(name)
    return default if f is None else bool(np.asarray(f).reshape(-1)[0])


def test_v2_is_the_exact_sum_or_the_value(catalog):
    checked = set()
    for case in cases_of(catalog, "InPlaceAccumulatorV2", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        b, v = inputs["accumulation_buffer"], inputs["value"]
        overwrite = _flag(inputs, "overwrite_flag", False)
        flag, out = in_place_accumulator_v2(b, v, inputs.get("overwrite_flag"))
        assert flag.dtype == bool and flag.shape == (1,) and flag[0], case.id
        if overwrite:
            want = v.astype(np.float64)
        else:
            pairs = zip(b.astype(np.float64).reshape(-1).tolist(), v.astype(np.float64).reshape(-1).tolist())
            want = np.array([_exact_sum(x, y) for x, y in pairs], np.float64).reshape(b.shape)
        assert out.dtype == np.float64 and _same(out, want), case.id
        checked.add((case.dtype, str(v.dtype), overwrite))
    assert {(d, g, o) for d in ("float32", "float64", "float16") for g in ("float32", "float64", "float16")
            for o in (False, True)} <= checked


def test_v1_is_the_exact_sum_or_old_sum(catalog):
    checked = set()
    for case in cases_of(catalog, "InPlaceAccumulator", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        b, v = inputs["old_sum"], inputs["value"]
        update = _flag(inputs, "update_signal", True)
        got = in_place_accumulator(b, v, inputs.get("update_signal"))
        if update:
            pairs = zip(b.astype(np.float64).reshape(-1).tolist(), v.astype(np.float64).reshape(-1).tolist())
            want = np.array([_exact_sum(x, y) for x, y in pairs], np.float64).reshape(b.shape)
        else:
            want = b.astype(np.float64)
        assert got.dtype == np.float64 and _same(got, want), case.id
        checked.add((case.dtype, update))
    assert {(d, u) for d in ("float32", "float64", "float16", "bfloat16") for u in (False, True)} <= checked


def test_zero_gradient_is_positive_zero_whatever_the_inputs(catalog):
    n = 0
    for case in cases_of(catalog, "ZeroGradient", "nightly"):
        inputs, _ = make_tensors(case)
        g = inputs["old_gradient"]
        z = zero_gradient(g, inputs["reset_signal"])
        assert z.shape == g.shape and z.dtype == np.float64 and not np.signbit(z).any() and not z.any(), case.id
        n += 1
    assert n >= 15


def _steps_v2(grads, overwrite_first=True, buffer=None):
    """Iterate the reference: accumulation_buffer_out feeds accumulation_buffer at the next step."""
    buf = np.full_like(grads[0], np.nan) if buffer is None else buffer  # garbage: the first step overwrites it
    for k, g in enumerate(grads):
        flag = np.array(k == 0 and overwrite_first)
        updated, buf = in_place_accumulator_v2(buf, g, flag)
        assert updated.tolist() == [True]
    return buf


def test_n_accumulations_with_overwrite_first_are_the_sum_of_the_gradients():
    rng = np.random.default_rng(7)
    # dyadic gradients: every partial sum is exact in float64, so the iteration must equal the sum bitwise
    grads = [rng.integers(-2 ** 20, 2 ** 20, (5, 7)).astype(np.float64) / 2 ** 10 for _ in range(10)]
    np.testing.assert_array_equal(_steps_v2(grads), np.sum(grads, axis=0))
    # random normal gradients: the sequential float64 sum within a few ulp of the exactly rounded sum (math.fsum)
    grads = [rng.normal(0, 1, (4, 6)) for _ in range(16)]
    got = _steps_v2(grads)
    want = np.array([math.fsum(col) for col in np.stack(grads).reshape(16, -1).T]).reshape(4, 6)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
    # V1 from a ZeroGradient-reset sum: the same sum; update_signal false steps leave it unchanged
    s = zero_gradient(np.full((4, 6), np.nan), np.array(True))
    for k, g in enumerate(grads):
        s = in_place_accumulator(s, g, np.array(True))
        s = in_place_accumulator(s, rng.normal(0, 1, (4, 6)), np.array(False))
    np.testing.assert_allclose(s, want, rtol=1e-13, atol=1e-14)


def test_overwrite_restarts_the_accumulation_window():
    rng = np.random.default_rng(8)
    grads = [rng.normal(0, 1, (3, 3)) for _ in range(6)]
    buf = _steps_v2(grads[:3])
    buf = _steps_v2(grads[3:], buffer=buf)  # the next window overwrites on its first step
    want = grads[3] + grads[4] + grads[5]
    np.testing.assert_array_equal(buf, want)


def test_equals_torch_gradient_accumulation():
    """torch: p.grad accumulates across backward() calls (zero_grad(set_to_none=True) first = overwrite), and
    zero_grad(set_to_none=False) zeroes it: the reference trajectory equals torch's in float64."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    grads = [rng.normal(0, 1, (4, 5)) for _ in range(10)]
    w = torch.zeros((4, 5), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.0)
    for window in (grads[:4], grads[4:]):
        opt.zero_grad(set_to_none=True)
        for g in window:
            (w * torch.from_numpy(g)).sum().backward()  # d/dw = g, added into w.grad
        ours = _steps_v2(window)
        np.testing.assert_allclose(ours, w.grad.numpy(), rtol=1e-12, atol=0)
    opt.zero_grad(set_to_none=False)
    z = zero_gradient(w.grad.numpy(), np.array(True))
    np.testing.assert_array_equal(z, w.grad.numpy())


@pytest.mark.parametrize("shapes, problem", [
    ({"accumulation_buffer": (3,), "value": (3,), "overwrite_flag": ()}, False),
    ({"accumulation_buffer": (3,), "value": (3,), "overwrite_flag": (1,)}, False),
    ({"accumulation_buffer": (3,), "value": (3,)}, False),
    ({"accumulation_buffer": (3,), "value": (1,)}, True),
    ({"accumulation_buffer": (2, 3), "value": (3,)}, True),
    ({"accumulation_buffer": (3,), "value": (3,), "overwrite_flag": (2,)}, True),
    ({"accumulation_buffer": (3,), "value": (3,), "overwrite_flag": (0,)}, True),
])
def test_validity_rules(shapes, problem):
    assert (check_v2(shapes, {}) is not None) == problem
    v1 = {{"accumulation_buffer": "old_sum", "overwrite_flag": "update_signal"}.get(k, k): s for k, s in shapes.items()}
    assert (check_v1(v1, {}) is not None) == problem


def test_the_ci_tier_stays_small(catalog):
    for op in ("InPlaceAccumulatorV2", "InPlaceAccumulator", "ZeroGradient"):
        assert len(list(cases_of(catalog, op, "ci"))) <= 16, op  # 15 one-call cases and one 10-call accumulation
