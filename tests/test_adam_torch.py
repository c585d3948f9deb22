"""The AdamOptimizer reference (reference/ops/adam.py) held over 10-step float64 trajectories: each step feeds the
reference's new_T, new_moment_1, new_moment_2 and new_weights back as T, moment_1, moment_2 and weights, with fresh
per-step gradients, starting from T = 1 and zero moments.

- weight_decay_mode 0, do_bias_correction 1: torch.optim.Adam (lambda 0) and torch.optim.AdamW (lambda > 0).
- loss_scale and global_gradient_norm: torch.optim.AdamW fed the unscaled gradients clipped by their global norm
  (the clip written out in torch: torch.nn.utils.clip_grad_norm_ adds 1e-6 to the norm, ORT's rule does not).
- weight_decay_mode 1: no torch.optim equivalent; an independent torch formulation of transformers' former AdamW
  (transformers/optimization.py before its removal), written step by step as that code did.
- do_bias_correction 0: an independent torch formulation (Adam's moments, no correction).
- update_signal false: a skipped step changes nothing and the trajectory equals torch's without it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference.ops.adam import adam

torch = pytest.importorskip("torch")

STEPS = 10
RTOL = 1e-12


def _run_reference(w0, grads, lr, attrs, loss_scale=None, norms=None, skip=()):
    """The reference iterated: yields (new_T, m1, m2, w) after each step."""
    T = np.array([1], np.int64)
    w, m1, m2 = w0, np.zeros_like(w0), np.zeros_like(w0)
    for i, g in enumerate(grads):
        ls = None if loss_scale is None else np.array([loss_scale])
        gn = None if norms is None else np.array(norms[i])
        us = np.array(i not in skip) if skip else None
        T, m1, m2, w, delta, _ = adam(np.array([lr]), T, w, g, m1, m2, None, ls, gn, us, **attrs)
        yield T, m1, m2, w


def _case(seed=5, shape=(4, 6)):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 1, shape), [rng.normal(0, 1, shape) for _ in range(STEPS)]


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-300)


@pytest.mark.parametrize("lam", [0.0, 0.01, 0.3])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.9)])
@pytest.mark.parametrize("eps", [1e-8, 1e-3])
def test_mode0_is_torch_adamw(lam, betas, eps):
    w0, grads = _case()
    lr = 0.05
    p = torch.nn.Parameter(torch.tensor(w0))
    if lam == 0.0:
        opt = torch.optim.Adam([p], lr=lr, betas=betas, eps=eps, foreach=False)
    else:
        opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=lam, foreach=False)
    attrs = {"alpha": betas[0], "beta": betas[1], "epsilon": eps, "lambda": lam, "weight_decay_mode": 0}
    for step, (T, m1, m2, w) in enumerate(_run_reference(w0, grads, lr, attrs), start=1):
        p.grad = torch.tensor(grads[step - 1])
        opt.step()
        st = opt.state[p]
        assert int(T[0]) == step + 1 == int(st["step"]) + 1
        _close(m1, st["exp_avg"].numpy())
        _close(m2, st["exp_avg_sq"].numpy())
        _close(w, p.detach().numpy())


@pytest.mark.parametrize("max_norm", [0.5, 3.0, 1e9])
def test_loss_scale_and_clipping_is_clip_then_adamw(max_norm):
    """gradients carry loss_scale 1024; global_gradient_norm is their norm; the true gradient is clipped to
    max_norm_clip (some steps clip at 3.0, all at 0.5, none at 1e9)."""
    w0, grads = _case(seed=8)
    scale, lr, lam = 1024.0, 0.02, 0.01
    scaled = [g * scale * (1 + i % 3) for i, g in enumerate(grads)]  # true norms vary across max_norm 3
    norms = [float(np.sqrt((g * g).sum())) for g in scaled]
    p = torch.nn.Parameter(torch.tensor(w0))
    opt = torch.optim.AdamW([p], lr=lr, weight_decay=lam, foreach=False)
    attrs = {"lambda": lam, "max_norm_clip": max_norm}
    for i, (T, m1, m2, w) in enumerate(_run_reference(w0, scaled, lr, attrs, loss_scale=scale, norms=norms)):
        g = torch.tensor(scaled[i]) / scale
        total = torch.linalg.vector_norm(g)
        if total > max_norm:
            g = g * (max_norm / total)
        p.grad = g
        opt.step()
        _close(m1, opt.state[p]["exp_avg"].numpy())
        _close(w, p.detach().numpy())


class LegacyTransformersAdamW:
    """transformers' former AdamW (optimization.py), one tensor, written the way that code did: bias correction in
    the step size, epsilon outside it, the decay applied to the already-updated weight."""

    def __init__(self, p, lr, betas, eps, weight_decay, correct_bias):
        self.p, self.lr, self.betas, self.eps, self.wd, self.correct_bias = p, lr, betas, eps, weight_decay, correct_bias
        self.step_count, self.exp_avg, self.exp_avg_sq = 0, torch.zeros_like(p), torch.zeros_like(p)

    def step(self, grad):
        beta1, beta2 = self.betas
        self.step_count += 1
        self.exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = self.exp_avg_sq.sqrt().add_(self.eps)
        step_size = self.lr
        if self.correct_bias:
            step_size = step_size * math.sqrt(1.0 - beta2 ** self.step_count) / (1.0 - beta1 ** self.step_count)
        self.p.addcdiv_(self.exp_avg, denom, value=-step_size)
        if self.wd > 0.0:
            self.p.add_(self.p, alpha=-self.lr * self.wd)


@pytest.mark.parametrize("lam", [0.0, 0.01, 0.3])
@pytest.mark.parametrize("correct_bias", [1, 0])
def test_mode1_is_transformers_former_adamw(lam, correct_bias):
    w0, grads = _case(seed=9)
    lr, betas, eps = 0.05, (0.9, 0.999), 1e-6
    ref = LegacyTransformersAdamW(torch.tensor(w0), lr, betas, eps, lam, correct_bias)
    attrs = {"alpha": betas[0], "beta": betas[1], "epsilon": eps, "lambda": lam, "weight_decay_mode": 1,
             "do_bias_correction": correct_bias}
    for i, (T, m1, m2, w) in enumerate(_run_reference(w0, grads, lr, attrs)):
        ref.step(torch.tensor(grads[i]))
        _close(m1, ref.exp_avg.numpy())
        _close(m2, ref.exp_avg_sq.numpy())
        _close(w, ref.p.numpy())


def test_mode0_without_bias_correction():
    """An independent torch formulation: the moments as Adam's, the step R * (m1 / (sqrt(m2) + eps) + lambda w)."""
    w0, grads = _case(seed=10)
    lr, lam, eps = 0.05, 0.01, 1e-8
    p, m, v = torch.tensor(w0), torch.zeros(w0.shape, dtype=torch.float64), torch.zeros(w0.shape, dtype=torch.float64)
    attrs = {"lambda": lam, "epsilon": eps, "do_bias_correction": 0}
    for i, (T, m1, m2, w) in enumerate(_run_reference(w0, grads, lr, attrs)):
        g = torch.tensor(grads[i])
        m = torch.lerp(m, g, 0.1)  # 0.9 m + 0.1 g
        v = 0.999 * v + 0.001 * g * g
        p = p - lr * (m / (v.sqrt() + eps) + lam * p)
        _close(m1, m.numpy())
        _close(w, p.numpy())


def test_skipped_step_changes_nothing():
    w0, grads = _case(seed=12)
    lr = 0.05
    out = list(_run_reference(w0, grads, lr, {}, skip={3, 7}))
    assert int(out[3][0][0]) == int(out[2][0][0])  # new_T = T on a skipped step
    for k in range(1, 4):
        np.testing.assert_array_equal(out[3][k], out[2][k])
    p = torch.nn.Parameter(torch.tensor(w0))
    opt = torch.optim.Adam([p], lr=lr, foreach=False)
    for i, (T, m1, m2, w) in enumerate(out):
        if i not in (3, 7):
            p.grad = torch.tensor(grads[i])
            opt.step()
        _close(w, p.detach().numpy())
        assert int(T[0]) == int(opt.state[p]["step"]) + 1
