"""The InplaceClipGradNorm reference against torch.nn.utils.clip_grad_norm_ (norm_type 2.0, foreach False) in
float64: single calls over max_norm values that clip and that do not, and a 10-step clip-then-SGD trajectory
(clipped gradients feed SGDOptimizerV2's reference) against clip_grad_norm_ + torch.optim.SGD."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.clip_grad_norm import clip_grad_norm, total_norm
from reference.ops.sgd_v2 import sgd_v2

torch = pytest.importorskip("torch")

SHAPES = [(7, 5), (13,), (2, 3, 4), (), (0,)]


def _torch_clip(g, max_norm):
    params = [torch.zeros(np.shape(x), dtype=torch.float64, requires_grad=True) for x in g]
    for p, x in zip(params, g):
        p.grad = torch.tensor(x)
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=2.0, foreach=False)
    return [p.grad.numpy() for p in params], float(norm)


@pytest.mark.parametrize("max_norm", [1.0, 0.5, 1e-3, 100.0, 0.0])
@pytest.mark.parametrize("scale", [1.0, 1e-4])
def test_one_call_is_torch(max_norm, scale):
    rng = np.random.default_rng(11)
    g = [rng.normal(0, scale, s) for s in SHAPES]
    want, norm = _torch_clip(g, max_norm)
    assert total_norm(g) == pytest.approx(norm, rel=1e-14)
    for a, b in zip(clip_grad_norm(g, max_norm=max_norm), want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def test_ten_steps_clip_then_sgd_are_torch():
    rng = np.random.default_rng(12)
    shapes = SHAPES[:4]
    w0 = [rng.normal(0, 1, s) for s in shapes]
    grads = [[rng.normal(0, 2, s) for s in shapes] for _ in range(10)]
    params = [torch.tensor(x, requires_grad=True) for x in w0]
    opt = torch.optim.SGD(params, lr=0.05, foreach=False)
    w = w0
    for g in grads:
        for p, gi in zip(params, g):
            p.grad = torch.tensor(gi)
        torch.nn.utils.clip_grad_norm_(params, 1.5, foreach=False)
        opt.step()
        _, w = sgd_v2(np.array([0.05]), w, clip_grad_norm(g, max_norm=1.5))
    for a, p in zip(w, params):
        np.testing.assert_allclose(a, p.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_empty_list_and_zero_and_inf():
    assert clip_grad_norm([]) == []
    np.testing.assert_array_equal(clip_grad_norm([np.zeros(3)])[0], np.zeros(3))
    out = clip_grad_norm([np.array([np.inf, 1.0])])[0]
    want, _ = _torch_clip([np.array([np.inf, 1.0])], 1.0)
    np.testing.assert_array_equal(out, want[0])  # [nan, 0]: coefficient 0 times inf


def test_norm_type_other_than_fro_is_rejected():
    with pytest.raises(ValueError, match="fro"):
        clip_grad_norm([np.ones(2)], norm_type="inf")
