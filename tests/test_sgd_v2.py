"""The SGDOptimizerV2 reference against torch.optim.SGD (momentum 0) in float64 over a 10-step trajectory (updated
weights fed back), and its contract: update_signal false changes nothing, malformed lists are rejected."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.sgd_v2 import sgd_v2

torch = pytest.importorskip("torch")

SHAPES = [(7, 5), (13,), (2, 3, 4), ()]


@pytest.mark.parametrize("lr", [1e-3, 0.1, 2.5])
def test_ten_steps_are_torch_sgd(lr):
    rng = np.random.default_rng(7)
    w0 = [rng.normal(0, 1, s) for s in SHAPES]
    grads = [[rng.normal(0, 1, s) for s in SHAPES] for _ in range(10)]
    lr = float(np.float32(lr))
    params = [torch.tensor(x, requires_grad=True) for x in w0]
    opt = torch.optim.SGD(params, lr=lr, momentum=0.0, foreach=False)
    w = w0
    for g in grads:
        for p, gi in zip(params, g):
            p.grad = torch.tensor(gi)
        opt.step()
        flag, w = sgd_v2(np.array([lr]), w, g)
        assert flag.dtype == bool and bool(flag.all())
    for a, p in zip(w, params):
        np.testing.assert_allclose(a, p.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_update_signal():
    w = [np.arange(3.0)]
    g = [np.ones(3)]
    flag, out = sgd_v2(np.array([0.5]), w, g, np.array([False]))
    assert not flag.any()
    np.testing.assert_array_equal(out[0], w[0])
    flag, out = sgd_v2(np.array([0.5]), w, g, np.array([True]))
    assert flag.all()
    np.testing.assert_array_equal(out[0], w[0] - 0.5)


@pytest.mark.parametrize("w, g, why", [
    ([], [], "empty"),
    ([np.zeros(3)], [], "tensors"),
    ([np.zeros((2, 3))], [np.zeros((3, 2))], "shape"),
])
def test_invalid(w, g, why):
    with pytest.raises(ValueError, match=why):
        sgd_v2(np.array([0.1]), w, g)
