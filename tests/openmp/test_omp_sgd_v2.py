"""The SGDOptimizerV2 list kernel (opc_sgd_v2_f32/_f64) against the float64 reference: float32 rounded once,
float64 exact; the same bits at 1-4 threads; malformed calls rejected."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.sgd_v2 import sgd_v2 as ref_sgd

from . import seq_optim_lib as so

DTYPES = {"float32": np.float32, "float64": np.float64}


@pytest.mark.parametrize("dtype", DTYPES)
def test_is_the_reference_rounded_once(lib, rng, dtype):
    dt = DTYPES[dtype]
    shapes = [(7, 5), (13,), (), (0,), (2, 3, 4)]
    w = [rng.normal(0, 1, s).astype(dt) for s in shapes]
    g = [rng.normal(0, 1, s).astype(dt) for s in shapes]
    _, want = ref_sgd(np.array([0.1]), w, g)
    kw = [a.copy() for a in w]
    so.sgd_v2(kw, g, lr=0.1)
    for a, b in zip(kw, want):
        np.testing.assert_array_equal(a, b.astype(dt))  # one rounding of the double result


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    shapes = [(1000,), (3,), (150001,)] + [(5,)] * 30
    w = [rng.normal(0, 1, s).astype(DTYPES[dtype]) for s in shapes]
    g = [rng.normal(0, 1, s).astype(DTYPES[dtype]) for s in shapes]
    outs = []
    with lib.force_split():
        for t in (1, 2, 3, 4):
            kw = [a.copy() for a in w]
            so.sgd_v2(kw, g, lr=0.3, threads=t)
            outs.append(b"".join(a.tobytes() for a in kw))
    assert all(o == outs[0] for o in outs[1:])


@pytest.mark.parametrize("kwargs, msg", [
    (dict(count=0), "at least one tensor"),
    (dict(count=-5), "negative"),
    (dict(sizes=[-2, 3]), "out of range"),
])
def test_malformed_calls_are_rejected(lib, kwargs, msg):
    w = [np.zeros(2, np.float32), np.zeros(3, np.float32)]
    with pytest.raises(so.KernelError, match=msg) as e:
        so.sgd_v2(w, [a.copy() for a in w], lr=0.1, check_shapes=False, **kwargs)
    assert e.value.status == 2
    with pytest.raises(so.KernelError, match="weights is NULL"):
        so.sgd_v2(None, w, lr=0.1, sizes=[2, 3], check_shapes=False)
