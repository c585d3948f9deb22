"""The SGDOptimizer reference (reference/ops/sgd.py) against torch.optim.SGD: 10 float64 steps from the same initial
weights with the same per-step gradients, the reference's NW fed back as the next step's W."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.sgd import sgd

torch = pytest.importorskip("torch")

STEPS = 10


@pytest.mark.parametrize("lr", [0.1, 1.0e-3, 2.5])
@pytest.mark.parametrize("shape", [(7,), (3, 5), ()])
def test_trajectory_equals_torch_sgd(lr, shape):
    rng = np.random.default_rng(11)
    w0 = rng.normal(0, 1, shape)
    grads = [rng.normal(0, 1, shape) for _ in range(STEPS)]
    p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=lr, momentum=0, dampening=0, weight_decay=0, nesterov=False)
    eta = np.array([lr], np.float32).astype(np.float64)  # ETA is float32: torch gets the same value
    for group in opt.param_groups:
        group["lr"] = float(eta[0])
    w = w0
    for g in grads:
        nw, ng = sgd(eta, w, g)
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        np.testing.assert_allclose(nw, p.detach().numpy(), rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(ng, -eta[0] * g)  # the update applied, not the gradient
        np.testing.assert_allclose(w + ng, nw, rtol=0, atol=0)
        w = nw


def test_zero_learning_rate_keeps_the_weights():
    w = np.array([1.0, -2.0, np.inf])
    nw, ng = sgd(np.array([0.0]), w, np.array([3.0, 4.0, 5.0]))
    np.testing.assert_array_equal(nw, w)
    assert (ng == 0).all()
