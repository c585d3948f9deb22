"""BatchNormInternal has no forward op to check it against: its reference is proven here against onnx's own
BatchNormalization-15 evaluator (training_mode 1: Y, running_mean, running_var; training_mode 0: Y) on every valid
case of the spec's nightly tier, and saved_mean / saved_inv_std against a per-channel formulation of their own
(X moved to [C, m], np.mean and np.var). The empty-batch convention (mean 0, variance 0) is checked apart: onnx
gives 0 / 0 there."""
import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference._onnx import run
from reference.ops.batch_norm_internal import batch_norm_internal, stats_check


def _attrs(case):
    a = {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1}
    a.update({k: v for k, v in case.attributes.items() if k in a})
    # an ONNX float attribute is a float32: the evaluator sees momentum 0.9 as 0.8999999761581421
    return {k: float(np.float32(v)) if k != "training_mode" else int(v) for k, v in a.items()}


def test_reference_agrees_with_onnx_batchnormalization_15(catalog):
    checked = 0
    seen_modes = set()
    for case in cases_of(catalog, "BatchNormInternal", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x = np.asarray(inputs["X"], np.float64)
        if x.size == 0:
            continue  # the empty batch: test_empty_batch_has_zero_statistics
        ins = {k: np.asarray(inputs[k], np.float64) for k in ("X", "scale", "B", "input_mean", "input_var")}
        a = _attrs(case)
        got = batch_norm_internal(*ins.values(), **a)
        want = run("BatchNormalization", 15, dict(zip(["X", "scale", "B", "input_mean", "input_var"], ins.values())),
                   outputs=3 if a["training_mode"] else 1, **a)
        want = want if isinstance(want, tuple) else (want,)
        for name, g, w in zip(("Y", "running_mean", "running_var"), got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"{case.id} {name}")
        if a["training_mode"]:
            per_channel = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)
            with np.errstate(invalid="ignore"):
                np.testing.assert_allclose(got[3], per_channel.mean(axis=1), rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(got[4], 1 / np.sqrt(per_channel.var(axis=1) + a["epsilon"]), rtol=1e-12)
        seen_modes.add(a["training_mode"])
        checked += 1
    assert checked >= 30 and seen_modes == {0, 1}, (checked, seen_modes)


def test_empty_batch_has_zero_statistics():
    x = np.zeros((0, 3, 4))
    one, zero = np.ones(3), np.zeros(3)
    y, rm, rv, mean, inv = batch_norm_internal(x, one, zero, np.full(3, 2.0), one, epsilon=0.25, momentum=0.5)
    assert y.shape == (0, 3, 4)
    np.testing.assert_array_equal(mean, zero)
    np.testing.assert_array_equal(inv, np.full(3, 2.0))
    np.testing.assert_array_equal(rm, np.full(3, 1.0))
    np.testing.assert_array_equal(rv, np.full(3, 0.5))


@pytest.mark.parametrize("shapes, ok", [
    ({"X": (2, 3, 4), "scale": (3,), "B": (3,), "input_mean": (3,), "input_var": (3,)}, True),
    ({"X": (4,)}, False),
    ({"X": (2, 3, 4), "scale": (2,)}, False),
    ({"X": (2, 3, 4), "input_var": (3, 1)}, False),
])
def test_shape_rules(shapes, ok):
    assert (stats_check(shapes, {}) is None) == ok


def test_the_nightly_tier_covers_the_contract(catalog):
    cases = [c for c in cases_of(catalog, "BatchNormInternal", "nightly") if c.valid]
    assert {c.dtype for c in cases} == {"float32", "float64", "float16"}
    assert {c.attributes.get("training_mode", 1) for c in cases} == {0, 1}
    assert {c.attributes.get("momentum", 0.9) for c in cases} >= {0.0, 0.3, 1.0, 0.9}
    assert len([c for c in cases_of(catalog, "BatchNormInternal", "ci")]) <= 25
