"""Hooks of the fixture specs in tests/test_spec_format_features.py: a row-centering op with a saved
statistic, a forward-only bias and attribute, and a scalar input; and a masked op with bool and int inputs."""
import numpy as np


def row_center(X, alpha, B, *, epsilon=0.0):
    """Y = alpha * (X - mean) + B; the saved `mean` carries epsilon so a test can see it arrived."""
    mean = np.mean(X, axis=-1, keepdims=True)
    return alpha * (X - mean) + B, mean + epsilon


def row_center_grad(dY, X, alpha, mean):
    return alpha * (dY - np.mean(dY, axis=-1, keepdims=True))


def last_axis(shapes, params):
    return [shapes["X"][-1]]


def masked(X, mask, index, ratio):
    if not 0 <= ratio < 1:
        raise ValueError("ratio must lie in [0, 1)")  # as a reference would: the contract must catch it first
    return np.where(mask, X, 0.0), index


def masked_grad(dY, mask, index, ratio):
    if not 0 <= ratio < 1:
        raise ValueError("ratio must lie in [0, 1)")
    return np.where(mask, dY, 0.0)


def index_not_all_negative(inputs, attributes):
    return "every index is negative" if (inputs["index"] < 0).all() else None
