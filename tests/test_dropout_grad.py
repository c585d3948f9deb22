"""DropoutGrad's reference: the gradient check proves it against forward Dropout and catches the plausible wrong
semantics (training_mode ignored, mask applied at ratio 0, scale left out); the select gives 0 at a dropped inf."""
import re

import numpy as np
import pytest

from harness.core.cases import expand
from harness.core.gradcheck import gradient_check
from harness.run.engine import prepare
from reference.forward.dropout import dropout
from reference.ops.dropout_grad import dropout_grad


def dropout_grad_without_scale(dy, mask, ratio=None, training_mode=None):
    """Wrong: the kept elements are passed through unscaled (scale 1 instead of 1 / (1 - ratio))."""
    return np.where(np.asarray(mask) != 0, np.asarray(dy, dtype=np.float64), 0.0)


def _case(catalog, which, dtype="float64"):
    """The first case of a group, or the case of that id."""
    return next(c for c in expand(catalog.by_op("DropoutGrad"), "ci")
                if which in (c.group.name, c.id) and c.dtype == dtype)


def _check(case, reference=None):
    prepared = prepare(case)
    return gradient_check(case, prepared.inputs, prepared.forward_inputs, reference=reference)


@pytest.mark.parametrize("group", ["basic", "ratio_high", "ratio_one_element", "ratio_zero", "inference", "defaults", "all_kept"])
def test_the_reference_is_dropouts_gradient(catalog, group):
    result = _check(_case(catalog, group))
    assert result.passed and not result.skipped, result.detail()


@pytest.mark.parametrize("which, wrong", [
    ("inference", "reference.ops.dropout_grad:dropout_grad_ignoring_training_mode"),
    ("defaults/shape=4x16;omit=training_mode", "reference.ops.dropout_grad:dropout_grad_ignoring_training_mode"),
    ("ratio_zero", "reference.ops.dropout_grad:dropout_grad_mask_at_ratio_zero"),
    ("ratio_high", "test_dropout_grad:dropout_grad_without_scale"),
])
def test_the_check_catches_a_wrong_gradient(catalog, which, wrong):
    result = _check(_case(catalog, which), reference=wrong)
    assert not result.passed, result.detail()


def test_dropped_elements_are_exactly_zero_and_identity_modes_copy():
    dy = np.array([np.inf, np.nan, -np.inf, 2.0, np.nan])
    mask = np.array([0.0, 0.0, 1.0, 1.0, 1.0])  # float64 0 / 1, as the harness passes a bool tensor
    got = dropout_grad(dy, mask, np.array(0.75), np.array(1.0))
    np.testing.assert_array_equal(got, [0.0, 0.0, -np.inf, 8.0, np.nan])
    for ratio, training in ((np.array(0.0), np.array(1.0)), (np.array(0.5), np.array(0.0)), (np.array(0.5), None)):
        np.testing.assert_array_equal(dropout_grad(dy, mask, ratio, training), dy)
    np.testing.assert_array_equal(dropout_grad(dy[3:4], mask[3:4], None, np.array(1.0)), [4.0])  # ratio 0.5
    np.testing.assert_array_equal(dropout(np.array([3.0, np.inf]), np.array(0.5), np.array(1.0), np.array([1.0, 0.0])),
                                  [6.0, 0.0])


@pytest.mark.parametrize("kwargs, words", [
    ({"ratio": np.array(1.0)}, "ratio must lie in [0, 1)"),
    ({"ratio": np.array(np.nan)}, "ratio must lie in [0, 1)"),
    ({"ratio": np.array([0.5, 0.5])}, "ratio must hold one value (shape [] or [1]), got shape [2]"),
    ({"ratio": np.array([[0.5]])}, "ratio must hold one value (shape [] or [1]), got shape [1, 1]"),
    ({"training_mode": np.array([1.0, 0.0])}, "training_mode must be a scalar"),
    ({"mask": np.ones(3)}, "mask shape [3] != data shape [4]"),
])
def test_the_reference_refuses_what_the_contract_refuses(kwargs, words):
    args = {"dy": np.ones(4), "mask": np.ones(4), "ratio": np.array(0.5), "training_mode": np.array(1.0), **kwargs}
    with pytest.raises(ValueError, match=re.escape(words)):
        dropout_grad(**args)


def test_a_ratio_of_shape_1_is_its_one_value():
    dy, mask = np.array([1.0, -2.0, 3.0, 4.0]), np.array([1.0, 0.0, 1.0, 1.0])
    dx = dropout_grad(dy, mask, np.array([0.75]), np.array(1.0))
    np.testing.assert_array_equal(dx, [4.0, 0.0, 12.0, 16.0])  # kept: dy / (1 - 0.75), dropped: 0
