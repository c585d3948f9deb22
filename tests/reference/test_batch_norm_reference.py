"""BatchNormalizationGrad's references: the forward statistics follow their definitions, the gradient takes the
saved inverse std (not the variance) and no epsilon, and the gradient check tells the right gradient from the
plausible wrong ones."""
import numpy as np
import pytest

from harness.core.cases import expand
from harness.core.gradcheck import gradient_check
from harness.run.engine import prepare
from reference.forward.batch_norm import batch_norm_internal
from reference.ops.batch_norm_grad import batch_norm_stats_check, batch_normalization_grad

OP = "BatchNormalizationGrad"


def _inputs(rng, shape):
    c = shape[1]
    return (rng.normal(0.5, 2.0, shape), rng.normal(1.0, 0.5, c), rng.normal(size=c), rng.normal(size=c),
            rng.uniform(0.5, 2.0, c))


def test_forward_statistics_follow_their_definitions():
    rng = np.random.default_rng(3)
    X, scale, B, input_mean, input_var = _inputs(rng, (4, 3, 5, 2))
    Y, running_mean, running_var, mean, inv_std = batch_norm_internal(X, scale, B, input_mean, input_var,
                                                                      epsilon=0.01, momentum=0.8)
    per_channel = X.transpose(1, 0, 2, 3).reshape(3, -1)  # [C, N*H*W], another route to the same numbers
    np.testing.assert_allclose(mean, per_channel.mean(axis=1), rtol=1e-14)
    np.testing.assert_allclose(inv_std, 1 / np.sqrt(per_channel.var(axis=1) + 0.01), rtol=1e-14)  # biased variance
    np.testing.assert_allclose(running_mean, 0.8 * input_mean + 0.2 * per_channel.mean(axis=1), rtol=1e-14)
    np.testing.assert_allclose(running_var, 0.8 * input_var + 0.2 * per_channel.var(axis=1), rtol=1e-14)
    normalized = (Y - B[None, :, None, None]) / scale[None, :, None, None]
    np.testing.assert_allclose(normalized.transpose(1, 0, 2, 3).reshape(3, -1).mean(axis=1), 0, atol=1e-13)


def test_empty_batch_has_zero_statistics_and_sums():
    X = np.zeros((0, 3, 4))
    *_, mean, inv_std = batch_norm_internal(X, np.ones(3), np.zeros(3), np.zeros(3), np.ones(3), epsilon=0.25)
    np.testing.assert_array_equal(mean, 0)
    np.testing.assert_array_equal(inv_std, 2.0)
    dX, dscale, dbias = batch_normalization_grad(X, X, np.ones(3), mean, inv_std, epsilon=0.25)
    assert dX.shape == (0, 3, 4)
    np.testing.assert_array_equal(dscale, 0)
    np.testing.assert_array_equal(dbias, 0)


def test_gradient_reads_the_inverse_std_and_ignores_epsilon():
    rng = np.random.default_rng(4)
    X, scale, B, input_mean, input_var = _inputs(rng, (3, 2, 7))
    dY = rng.normal(size=X.shape)
    *_, mean, inv_std = batch_norm_internal(X, scale, B, input_mean, input_var, epsilon=0.5)
    outs = batch_normalization_grad(dY, X, scale, mean, inv_std, epsilon=0.5)
    for a, b in zip(outs, batch_normalization_grad(dY, X, scale, mean, inv_std, epsilon=0.0)):
        np.testing.assert_array_equal(a, b)
    # the directional derivative of the forward op, by central differences, matches <dY, dY/dX . t>
    t = rng.normal(size=X.shape)
    h = 1e-6
    plus = batch_norm_internal(X + h * t, scale, B, input_mean, input_var, epsilon=0.5)[0]
    minus = batch_norm_internal(X - h * t, scale, B, input_mean, input_var, epsilon=0.5)[0]
    assert np.sum(dY * (plus - minus)) / (2 * h) == pytest.approx(np.sum(outs[0] * t), rel=1e-7)


def test_stats_check_names_the_statistic():
    assert batch_norm_stats_check({"X": (2, 3, 4), "mean": (3,), "variance": (3,)}, {}) is None
    assert "mean" in batch_norm_stats_check({"X": (2, 3, 4), "mean": (2,), "variance": (3,)}, {})
    assert "variance" in batch_norm_stats_check({"X": (2, 3), "mean": (3,), "variance": (3, 1)}, {})


@pytest.mark.parametrize("wrong", ["reference.ops.batch_norm_grad:batch_norm_grad_reading_variance",
                                   "reference.ops.batch_norm_grad:batch_norm_grad_inference_mode"])
def test_the_check_catches_the_alternative_semantics(catalog, wrong):
    case = next(c for c in expand(catalog.by_op(OP), "ci") if c.group.name == "ranks" and c.valid)
    prepared = prepare(case)
    assert gradient_check(case, prepared.inputs, prepared.forward_inputs).passed
    result = gradient_check(case, prepared.inputs, prepared.forward_inputs, reference=wrong)
    assert not result.passed, result.detail()
