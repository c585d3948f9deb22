"""SoftmaxCrossEntropyLossGrad's spec and reference: int32 labels through the `Tind` type-variable param, the
label and shape checks, and the values the 0/0 corners take (decided from the math, not from a backend)."""
import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.core import spec_checks
from harness.core.cases import expand
from harness.core.contract import input_problems
from harness.core.tensors import make_inputs
from harness.spec.model import Spec
from reference.forward.softmax_cross_entropy import softmax_cross_entropy_loss
from reference.ops.softmax_cross_entropy_loss_grad import softmax_cross_entropy_loss_grad as grad

SPEC_PATH = Path(__file__).parents[1] / "specs" / "com.microsoft" / "SoftmaxCrossEntropyLossGrad.yaml"


@pytest.fixture(scope="module")
def data():
    return yaml.safe_load(SPEC_PATH.read_text())


def test_tind_param_picks_the_label_dtype(data):
    cases = [c for c in expand(Spec.model_validate(data), "ci") if c.group.name == "ignore_index" and c.dtype == "float32"]
    by_tind = {c.params["Tind"]: make_inputs(c)["label"].dtype for c in cases}
    assert by_tind == {"int64": np.dtype(np.int64), "int32": np.dtype(np.int32)}
    # the float inputs keep the case dtype
    assert {make_inputs(c)["log_prob"].dtype for c in cases} == {np.dtype(np.float32)}


def test_tind_param_outside_the_constraint_is_a_spec_error(data):
    bad = copy.deepcopy(data)
    bad["cases"]["groups"][0]["params"]["Tind"] = ["int16"]
    problems = spec_checks.check(Spec.model_validate(bad))
    assert any(field.endswith("params.Tind") and "int16" in message for field, message in problems), problems


def test_a_label_outside_the_classes_is_invalid_unless_ignored(data):
    spec = Spec.model_validate(data)
    lp = np.log(np.full((3, 4), 0.25, np.float32))
    inputs = {"dY": np.array(1.0, np.float32), "log_prob": lp, "label": np.array([0, 4, 1]), "weight": None}
    assert any("label 4 is outside [0, 4)" in p for p in input_problems(spec, inputs, {}))
    assert input_problems(spec, inputs, {"ignore_index": 4}) == []
    inputs["label"] = np.array([0, -1, 1])
    assert any("label -1" in p for p in input_problems(spec, inputs, {}))  # no ignore_index: -1 is no class


def test_dy_shape_follows_the_reduction(data):
    spec = Spec.model_validate(data)
    base = {"log_prob": np.zeros((3, 4)), "label": np.array([0, 1, 2]), "weight": None}
    assert input_problems(spec, {**base, "dY": np.zeros(3)}, {"reduction": "none"}) == []
    assert any("dY shape" in p for p in input_problems(spec, {**base, "dY": np.zeros(3)}, {"reduction": "sum"}))
    assert any("dY shape" in p for p in input_problems(spec, {**base, "dY": np.zeros(())}, {"reduction": "none"}))


def test_all_ignored_mean_gives_zero_rows_though_the_loss_is_nan():
    scores = np.random.default_rng(0).normal(size=(3, 4))
    labels = np.full(3, -100)
    loss, lp = softmax_cross_entropy_loss(scores, labels, reduction="mean", ignore_index=-100)
    assert np.isnan(loss)
    d = grad(np.array(1.0), lp, labels, reduction="mean", ignore_index=-100)
    assert np.array_equal(d, np.zeros((3, 4)))


def test_zero_weight_sum_mean_is_nan_on_rows_not_ignored():
    lp = np.log(np.full((3, 4), 0.25))
    d = grad(np.array(1.0), lp, np.array([0, -100, 2]), np.zeros(4), reduction="mean", ignore_index=-100)
    assert np.isnan(d[[0, 2]]).all() and np.array_equal(d[1], np.zeros(4))


def test_ignored_rows_are_selected_not_multiplied():
    lp = np.log(np.full((2, 3), 1 / 3))
    d = grad(np.array([np.nan, 2.0]), lp, np.array([-100, 1]), reduction="none", ignore_index=-100)
    assert np.array_equal(d[0], np.zeros(3))
    assert np.allclose(d[1], 2.0 * (np.full(3, 1 / 3) - np.eye(3)[1]))


def test_spatial_matches_the_flattened_2d_case():
    """[N, C, d] equals the [N*d, C] case with the class axis moved last (mean over every element)."""
    rng = np.random.default_rng(1)
    scores, labels, w = rng.normal(size=(2, 5, 3)), rng.integers(0, 5, (2, 3)), rng.uniform(0.5, 2, 5)
    _, lp = softmax_cross_entropy_loss(scores, labels, w)
    flat_lp = lp.transpose(0, 2, 1).reshape(6, 5)
    d = grad(np.array(1.5), lp, labels, w)
    flat = grad(np.array(1.5), flat_lp, labels.reshape(6), w)
    assert np.allclose(d.transpose(0, 2, 1).reshape(6, 5), flat, rtol=1e-14, atol=0)
