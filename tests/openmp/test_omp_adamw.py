"""The AdamW list kernel (opc_adamw_f32/_f64, csrc/seq_optim.c) against the float64 reference: both adam_modes,
correct_bias, weight decay, several steps fed back; float32 within one rounding of the double result, float64 to
1e-13; the same bits at 1-4 threads; every malformed call rejected with its status and nothing changed."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.adamw import adamw as ref_adamw

from . import seq_optim_lib as so

DTYPES = {"float32": np.float32, "float64": np.float64}
RTOL = {"float32": 2.0 ** -23, "float64": 1e-13}
SHAPES = [(7, 5), (13,), (2, 3, 4), (1,), (0,), (33,)]
CONFIGS = [
    dict(adam_mode=0, correct_bias=1, weight_decay=0.01),
    dict(adam_mode=0, correct_bias=1, weight_decay=0.0, alpha=0.5, beta=0.6, epsilon=0.1),
    dict(adam_mode=1, correct_bias=1, weight_decay=0.3),
    dict(adam_mode=1, correct_bias=0, weight_decay=0.01, alpha=0.8, beta=0.95, epsilon=1e-3),
]


def _state(rng, dt, shapes=SHAPES):
    w = [rng.normal(0, 1, s).astype(dt) for s in shapes]
    g = [rng.normal(0, 1, s).astype(dt) for s in shapes]
    m1 = [rng.normal(0, 0.1, s).astype(dt) for s in shapes]
    m2 = [np.abs(rng.normal(0, 0.01, s)).astype(dt) for s in shapes]
    return w, g, m1, m2


def _copy(lst):
    return [a.copy() for a in lst]


def _close(got, want, dtype, what):
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=RTOL[dtype], atol=1e-300, err_msg=f"{what}[{i}]")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("step", [1, 5])
def test_one_step_is_the_reference(lib, rng, dtype, cfg, step):
    w, g, m1, m2 = _state(rng, DTYPES[dtype])
    lr = 1e-2
    _, rw, r1, r2 = ref_adamw(np.array([lr]), np.array([step]), w, g, m1, m2, **cfg)
    kw, k1, k2 = _copy(w), _copy(m1), _copy(m2)
    so.adamw(kw, g, k1, k2, lr=lr, step=step, **cfg)
    _close(kw, rw, dtype, "weights")
    _close(k1, r1, dtype, "momentums_1")
    _close(k2, r2, dtype, "momentums_2")


@pytest.mark.parametrize("cfg", CONFIGS)
def test_ten_steps_fed_back_float64(lib, rng, cfg):
    w, _, _, _ = _state(rng, np.float64)
    m1 = [np.zeros_like(a) for a in w]
    m2 = [np.zeros_like(a) for a in w]
    kw, k1, k2 = _copy(w), _copy(m1), _copy(m2)
    for step in range(1, 11):
        g = [rng.normal(0, 1, a.shape) for a in w]
        _, w, m1, m2 = ref_adamw(np.array([0.05]), np.array([step]), w, g, m1, m2, **cfg)
        so.adamw(kw, g, k1, k2, lr=0.05, step=step, **cfg)
    _close(kw, w, "float64", "weights")
    _close(k1, m1, "float64", "momentums_1")
    _close(k2, m2, "float64", "momentums_2")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [0, 1])
def test_thread_counts_give_the_same_bits(lib, rng, dtype, mode):
    # sizes that put slice boundaries inside tensors, at their edges and across many small ones
    shapes = [(1000,), (3,), (50001,), (17,)] + [(5,)] * 40 + [(4096,), (0,), (7777,)]
    w, g, m1, m2 = _state(rng, DTYPES[dtype], shapes)
    outs = []
    with lib.force_split():
        for t in (1, 2, 3, 4):
            kw, k1, k2 = _copy(w), _copy(m1), _copy(m2)
            so.adamw(kw, g, k1, k2, lr=1e-3, step=3, adam_mode=mode, weight_decay=0.1, threads=t)
            outs.append(b"".join(a.tobytes() for a in kw + k1 + k2))
    assert all(o == outs[0] for o in outs[1:])
    # and without forcing the split, at a size that splits on its own
    big = _state(rng, DTYPES[dtype], [(300000,), (70000,)])
    res = []
    for t in (1, 2):
        kw, k1, k2 = _copy(big[0]), _copy(big[2]), _copy(big[3])
        so.adamw(kw, big[1], k1, k2, lr=1e-3, step=3, adam_mode=mode, threads=t)
        res.append(b"".join(a.tobytes() for a in kw + k1 + k2))
    assert res[0] == res[1]


def _bad_calls(w, g, m1, m2):
    ok = dict(lr=0.1, step=1)
    return [
        ("count 0", dict(ok, count=0), 2, "at least one tensor"),
        ("count -1", dict(ok, count=-1), 2, "negative"),
        ("negative size", dict(ok, sizes=[-1] + [a.size for a in w[1:]]), 2, "out of range"),
        ("size 2^48 + 1", dict(ok, sizes=[2 ** 48 + 1] + [a.size for a in w[1:]]), 2, "out of range"),
        ("adam_mode 2", dict(ok, adam_mode=2), 5, "adam_mode"),
        ("correct_bias 2", dict(ok, correct_bias=2), 5, "correct_bias"),
        ("mode 0 without bias correction", dict(ok, adam_mode=0, correct_bias=0), 5, "requires correct_bias 1"),
        ("step 0", dict(ok, step=0), 2, "step >= 1"),
        ("step -3", dict(ok, step=-3, adam_mode=1), 2, "step >= 1"),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(9))
def test_malformed_calls_are_rejected_and_change_nothing(lib, rng, dtype, which):
    w, g, m1, m2 = _state(rng, DTYPES[dtype], [(3, 4), (5,)])
    what, kwargs, status, msg = _bad_calls(w, g, m1, m2)[which]
    kw, k1, k2 = _copy(w), _copy(m1), _copy(m2)
    with pytest.raises(so.KernelError, match=msg) as e:
        so.adamw(kw, g, k1, k2, check_shapes=False, **kwargs)
    assert e.value.status == status, what
    for a, b in zip(kw + k1 + k2, w + m1 + m2):
        np.testing.assert_array_equal(a, b)


def test_null_pointers_are_rejected(lib, rng):
    w, g, m1, m2 = _state(rng, np.float32, [(3,), (4,)])
    with pytest.raises(so.KernelError, match="gradients is NULL"):
        so.adamw(w, None, m1, m2, lr=0.1, step=1, check_shapes=False)
    with pytest.raises(so.KernelError, match=r"momentums_2\[1\] is NULL"):
        so.adamw(w, g, m1, [m2[0], None], lr=0.1, step=1, check_shapes=False)
    # an empty tensor's pointer is never read: NULL is fine there
    so.adamw([w[0], np.zeros(0, np.float32)], [g[0], None], [m1[0], None], [m2[0], None], lr=0.1, step=1,
             sizes=[3, 0], check_shapes=False)


def test_shape_mismatch_is_the_wrappers(lib, rng):
    w, g, m1, m2 = _state(rng, np.float32, [(3, 4), (5,)])
    with pytest.raises(ValueError, match="shape"):
        so.adamw(w, [g[0].T, g[1]], m1, m2, lr=0.1, step=1)
    with pytest.raises(ValueError, match="tensors"):
        so.adamw(w, g[:1], m1, m2, lr=0.1, step=1)
