"""The InplaceClipGradNorm list kernel (opc_clip_grad_norm_f32/_f64) against the float64 reference: the norm summed
in double (to 1e-14 of the exact float64 norm of the inputs), the scaled gradients rounded once; an empty list; the
same bits (norm included) at 1-4 threads; norm_type other than "fro" and malformed calls rejected."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference.ops.clip_grad_norm import clip_grad_norm as ref_clip

from . import seq_optim_lib as so

DTYPES = {"float32": np.float32, "float64": np.float64}
RTOL = {"float32": 2.0 ** -23, "float64": 1e-14}


def _exact_norm(lst):
    return math.sqrt(math.fsum(float(v) ** 2 for a in lst for v in a.reshape(-1).astype(np.float64)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_norm", [1.0, 0.25, 1e6, 0.0, -1.0])
def test_is_the_reference(lib, rng, dtype, max_norm):
    dt = DTYPES[dtype]
    g = [rng.normal(0, 1, s).astype(dt) for s in [(7, 5), (13,), (), (0,), (20000,), (2, 3, 4)]]
    want = ref_clip(g, max_norm=max_norm)
    kg = [a.copy() for a in g]
    norm = so.clip_grad_norm(kg, max_norm=max_norm)
    assert norm == pytest.approx(_exact_norm(g), rel=1e-14)
    for a, b in zip(kg, want):
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=RTOL[dtype], atol=1e-300)


def test_empty_list_zero_and_inf(lib):
    assert so.clip_grad_norm([]) == 0.0
    z = [np.zeros(5, np.float32)]
    assert so.clip_grad_norm(z) == 0.0
    np.testing.assert_array_equal(z[0], 0.0)
    x = [np.array([np.inf, 1.0], np.float32)]
    assert so.clip_grad_norm(x) == np.inf
    np.testing.assert_array_equal(x[0], ref_clip([np.array([np.inf, 1.0])])[0])  # [nan, 0]
    y = [np.array([np.nan, 1.0])]
    so.clip_grad_norm(y)
    assert np.isnan(y[0]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    shapes = [(40000,), (3,), (16384,), (16385,), (0,), (100001,)] + [(7,)] * 30
    g = [rng.normal(0, 1, s).astype(DTYPES[dtype]) for s in shapes]
    outs = []
    with lib.force_split():
        for t in (1, 2, 3, 4):
            kg = [a.copy() for a in g]
            norm = so.clip_grad_norm(kg, max_norm=1.0, threads=t)
            outs.append(np.float64(norm).tobytes() + b"".join(a.tobytes() for a in kg))
    assert all(o == outs[0] for o in outs[1:])


def test_malformed_calls_are_rejected(lib):
    g = [np.ones(3, np.float32)]
    with pytest.raises(so.KernelError, match="norm_type 'inf'") as e:
        so.clip_grad_norm(g, norm_type="inf")
    assert e.value.status == 5
    so.clip_grad_norm(g, norm_type=None)  # NULL means "fro"
    with pytest.raises(so.KernelError, match="negative") as e:
        so.clip_grad_norm(g, count=-1)
    assert e.value.status == 2
    with pytest.raises(so.KernelError, match="out of range"):
        so.clip_grad_norm(g, sizes=[-1])
    np.testing.assert_array_equal(g[0], np.float32(1.0) * np.float32(1.0 / (math.sqrt(3) + 1e-6)))
