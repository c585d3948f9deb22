"""The AdamWOptimizer reference against torch in float64 over 10-step trajectories: the reference is iterated the
way ORT's training API runs the op (updated weights/moments fed back, step = completed steps + 1, so 1, 2, ...,
10) on the same initial weights and per-step gradients as
* adam_mode 0: torch.optim.AdamW (amsgrad False, maximize False, foreach False);
* adam_mode 1: the update rule of HuggingFace transformers' (<= 4.x) AdamW, written out here in torch ops
  (bias correction folded into the step size, weight decay after the update), correct_bias 1 and 0.
Agreement to 1e-12 relative. Plus the contract: update_signal false changes nothing, the validity rules."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference.ops.adamw import adamw

torch = pytest.importorskip("torch")

SHAPES = [(7, 5), (13,), (2, 3, 4), (1,)]
STEPS = 10


def _problem(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    w0 = [rng.normal(0, 1, s) for s in SHAPES]
    grads = [[rng.normal(0, scale, s) for s in SHAPES] for _ in range(STEPS)]
    return w0, grads


def _run_reference(w0, grads, lr, **attrs):
    w = [x.copy() for x in w0]
    m1 = [np.zeros_like(x) for x in w0]
    m2 = [np.zeros_like(x) for x in w0]
    completed = 0
    for g in grads:
        flag, w, m1, m2 = adamw(np.array([lr], np.float32).astype(np.float64), np.array([completed + 1], np.int64),
                                w, g, m1, m2, **attrs)
        if flag.all():
            completed += 1
    return w, m1, m2


def _hf_adamw(w0, grads, lr, alpha, beta, epsilon, weight_decay, correct_bias):
    """transformers.optimization.AdamW.step, written out (an independent formulation of adam_mode 1)."""
    params = [torch.tensor(x) for x in w0]
    state = [{"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)} for p in params]
    for g in grads:
        for p, s, gi in zip(params, state, g):
            grad = torch.tensor(gi)
            s["step"] += 1
            s["exp_avg"].mul_(alpha).add_(grad, alpha=1.0 - alpha)
            s["exp_avg_sq"].mul_(beta).addcmul_(grad, grad, value=1.0 - beta)
            denom = s["exp_avg_sq"].sqrt().add_(epsilon)
            step_size = lr
            if correct_bias:
                step_size = step_size * math.sqrt(1.0 - beta ** s["step"]) / (1.0 - alpha ** s["step"])
            p.addcdiv_(s["exp_avg"], denom, value=-step_size)
            if weight_decay > 0.0:
                p.add_(p, alpha=-lr * weight_decay)
    return [p.numpy() for p in params], [s["exp_avg"].numpy() for s in state], [s["exp_avg_sq"].numpy() for s in state]


def _torch_adamw(w0, grads, lr, alpha, beta, epsilon, weight_decay):
    params = [torch.tensor(x, requires_grad=True) for x in w0]
    opt = torch.optim.AdamW(params, lr=lr, betas=(alpha, beta), eps=epsilon, weight_decay=weight_decay,
                            amsgrad=False, foreach=False)
    for g in grads:
        for p, gi in zip(params, g):
            p.grad = torch.tensor(gi)
        opt.step()
    st = [opt.state[p] for p in params]
    return ([p.detach().numpy() for p in params], [s["exp_avg"].numpy() for s in st],
            [s["exp_avg_sq"].numpy() for s in st])


def _close(got, want, what):
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15, err_msg=f"{what}[{i}]")


CONFIGS = [
    dict(alpha=0.9, beta=0.999, epsilon=1e-8, weight_decay=0.01),
    dict(alpha=0.9, beta=0.999, epsilon=1e-8, weight_decay=0.0),
    dict(alpha=0.8, beta=0.95, epsilon=1e-3, weight_decay=0.3),
    dict(alpha=0.0, beta=0.5, epsilon=1e-6, weight_decay=0.1),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("lr", [1e-3, 0.1])
def test_mode0_is_torch_adamw(cfg, lr):
    w0, grads = _problem(1)
    lr = float(np.float32(lr))
    want = _torch_adamw(w0, grads, lr, **cfg)
    got = _run_reference(w0, grads, lr, adam_mode=0, correct_bias=1, **cfg)
    for what, a, b in zip(("weights", "momentums_1", "momentums_2"), got, want):
        _close(a, b, what)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("correct_bias", [1, 0])
def test_mode1_is_transformers_adamw(cfg, correct_bias):
    w0, grads = _problem(2, scale=3.0)
    lr = float(np.float32(1e-2))
    want = _hf_adamw(w0, grads, lr, correct_bias=correct_bias, **cfg)
    got = _run_reference(w0, grads, lr, adam_mode=1, correct_bias=correct_bias, **cfg)
    for what, a, b in zip(("weights", "momentums_1", "momentums_2"), got, want):
        _close(a, b, what)


def test_the_two_modes_differ():
    """Guard against a test that cannot tell the modes apart: with weight decay they give different weights."""
    w0, grads = _problem(3)
    a = _run_reference(w0, grads, 0.1, adam_mode=0, correct_bias=1, weight_decay=0.3)[0]
    b = _run_reference(w0, grads, 0.1, adam_mode=1, correct_bias=1, weight_decay=0.3)[0]
    assert max(float(np.max(np.abs(x - y))) for x, y in zip(a, b)) > 1e-4


def test_update_signal_false_changes_nothing_and_the_counter_stays():
    w0, grads = _problem(4)
    m = [np.full_like(x, 0.5) for x in w0]
    flag, w, m1, m2 = adamw(np.array([0.1]), np.array([3]), w0, grads[0], m, m, np.array([False]), weight_decay=0.1)
    assert flag.dtype == bool and flag.shape == (1,) and not flag.any()
    for a, b in zip(w, w0):
        np.testing.assert_array_equal(a, b)
    flag, *_ = adamw(np.array(0.1), np.array(3), w0, grads[0], m, m, np.array([True]))
    assert flag.shape == () and bool(flag)


@pytest.mark.parametrize("bad, why", [
    (dict(adam_mode=0, correct_bias=0), "requires correct_bias 1"),
    (dict(adam_mode=2), "adam_mode"),
    (dict(correct_bias=2), "correct_bias"),
    (dict(step=0), "step >= 1"),
    (dict(lists="empty"), "empty"),
    (dict(lists="short"), "tensors"),
    (dict(lists="shape"), "shape"),
])
def test_invalid(bad, why):
    w0, grads = _problem(5)
    g = grads[0]
    step = bad.pop("step", 1)
    lists = bad.pop("lists", None)
    w, m = w0, [np.zeros_like(x) for x in w0]
    if lists == "empty":
        w = g = m = []
    elif lists == "short":
        g = g[:-1]
    elif lists == "shape":
        g = [g[0].T] + g[1:]
    with pytest.raises(ValueError, match=why):
        adamw(np.array([0.1]), np.array([step]), w, g, m, m, **bad)


def test_step_zero_is_valid_without_bias_correction():
    w0, grads = _problem(6)
    m = [np.zeros_like(x) for x in w0]
    flag, w, _, _ = adamw(np.array([0.1]), np.array([0]), w0, grads[0], m, m, adam_mode=1, correct_bias=0)
    assert bool(flag.all()) and all(np.isfinite(x).all() for x in w)
