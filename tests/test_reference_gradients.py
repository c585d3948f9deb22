"""Every reference is the gradient of its forward op (the Taylor-remainder test of harness.core.gradcheck,
which `opconform run` and the generated tests also run on every case), and gives the derivative's
true limits where a literal formula would give NaN."""
import numpy as np
import pytest
from conftest import SPECS

from harness.core.cases import expand
from harness.core.gradcheck import applies, gradient_check
from harness.core.spec_loader import load_catalog
from harness.run.engine import prepare
from reference.ops import activations as ops


def check(case, reference=None):
    prepared = prepare(case)
    return gradient_check(case, prepared.inputs, prepared.forward_inputs, reference=reference)


def vjp_cases():
    catalog = load_catalog(SPECS)
    seen = set()
    for spec in catalog.specs:
        if spec.forward is None:
            continue
        for case in expand(spec, "ci"):
            if applies(case) and (spec.op, case.id) not in seen:
                seen.add((spec.op, case.id))  # one dtype per case id: the check runs in float64 anyway
                yield pytest.param(case, id=f"{spec.op}-{case.full_id}")


@pytest.mark.parametrize("case", list(vjp_cases()))
def test_reference_is_the_gradient_of_its_forward(case):
    result = check(case)
    assert result.passed, result.detail()


@pytest.mark.parametrize("op, wrong", [
    ("GeluGrad", "reference.ops.activations:fast_gelu_grad"),  # tanh approximation instead of erf
    ("FastGeluGrad", "reference.ops.activations:gelu_grad"),
    ("SigmoidGrad", "reference.ops.activations:tanh_grad"),
    ("QuickGeluGrad", "wrong_references:quick_gelu_grad_without_alpha_inside"),
])
def test_the_check_catches_a_wrong_gradient(catalog, op, wrong):
    case = next(c for c in expand(catalog.by_op(op), "ci") if c.group.name in ("basic", "alphas") and c.valid)
    result = check(case, reference=wrong)
    assert not result.passed, result.detail()


def test_limits_at_infinity():
    x = np.array([np.inf, -np.inf])
    dy = np.array([2.0, 2.0])
    np.testing.assert_array_equal(ops.gelu_grad(dy, x), [2.0, 0.0])
    np.testing.assert_array_equal(ops.fast_gelu_grad(dy, x), [2.0, 0.0])
    np.testing.assert_array_equal(ops.quick_gelu_grad(dy, x, alpha=1.702), [2.0, 0.0])
    np.testing.assert_array_equal(ops.quick_gelu_grad(dy, x, alpha=-1.702), [0.0, 2.0])
    np.testing.assert_array_equal(ops.quick_gelu_grad(dy, x, alpha=0.0), [1.0, 1.0])


def test_huge_inputs_stay_finite():
    x = np.array([1e38, -1e38, 3.4e38, -3.4e38, 1e300, -1e300])
    for fn in (ops.gelu_grad, ops.fast_gelu_grad):
        np.testing.assert_array_equal(fn(np.ones_like(x), x), [1, 0, 1, 0, 1, 0])


def test_relu_grad_is_a_select_not_a_product():
    x = np.array([0.0, -0.0, np.nan, -1.0, 1.0])
    dy = np.array([np.inf, np.nan, np.inf, np.nan, np.inf])
    np.testing.assert_array_equal(ops.relu_grad(dy, x), [0.0, 0.0, 0.0, 0.0, np.inf])


def test_leaky_relu_grad_selects_on_the_output():
    y = np.array([0.0, -0.0, np.nan, 2.0, -2.0])
    np.testing.assert_array_equal(ops.leaky_relu_grad(np.ones(5), y, alpha=0.5), [0.5, 0.5, 0.5, 1.0, 0.5])
