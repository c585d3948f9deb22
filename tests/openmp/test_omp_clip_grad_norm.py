"""InplaceClipGradNorm through the op table (openmp_lib.run with Python lists; csrc/seq_optim.c) against the float64
reference (float32 and float16 rounded once): the norm summed in double (to 1e-14 of the exact float64 norm of the
inputs, read back from the clipped float64 gradients), the scaled gradients rounded once; an empty list; in place the
same; the same bits at 1-4 threads; norm_type other than "fro" and malformed calls rejected."""
from __future__ import annotations

import math

import numpy as np
import pytest

from reference.ops.clip_grad_norm import clip_grad_norm as ref_clip

from .seq_helpers import Raw, copies, elements, flat

OP = "InplaceClipGradNorm"
DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
RTOL = {"float32": 2.0 ** -23, "float64": 1e-14, "float16": 2.0 ** -11}
ATOL = {"float32": 1e-300, "float64": 1e-300, "float16": 2.0 ** -25}  # float16: half its smallest subnormal


def _exact_norm(lst):
    return math.sqrt(math.fsum(float(v) ** 2 for a in lst for v in np.asarray(a).reshape(-1).astype(np.float64)))


def _clip(lib, g, threads=1, **attrs):
    (out,) = lib.run(OP, [g], attrs, threads=threads)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_norm", [1.0, 0.25, 1e6, 0.0])
def test_is_the_reference(lib, rng, dtype, max_norm):
    dt = DTYPES[dtype]
    g = [np.array(rng.normal(0, 1, s), dt) for s in [(7, 5), (13,), (), (0,), (20000,), (2, 3, 4)]]
    want = ref_clip(g, max_norm=max_norm)
    before = flat([g])
    kg = _clip(lib, g, max_norm=max_norm)
    assert flat([g]) == before
    for a, b in zip(kg, want, strict=True):
        assert a.shape == b.shape and a.dtype == dt
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=RTOL[dtype], atol=ATOL[dtype])
    norm = _exact_norm(g)
    if dtype == "float64" and 0 < max_norm < norm:  # the kernel's norm, read back: |clipped| = max_norm n / (n + eps)
        assert _exact_norm(kg) == pytest.approx(max_norm * norm / (norm + 1e-6), rel=1e-14)
    ig = copies(g)  # in place: the gradients' own arrays as the output
    lib.run(OP, [ig], {"max_norm": max_norm}, out=[ig])
    assert flat([ig]) == flat([kg])


def test_empty_list_zero_and_inf(lib):
    assert lib.run(OP, [[]]) == [[]]
    assert lib.infer(OP, [[]]) == [(np.dtype(np.float32), [])]
    z = [np.zeros(5, np.float32)]
    np.testing.assert_array_equal(_clip(lib, z)[0], 0.0)
    x = [np.array([np.inf, 1.0], np.float32)]
    np.testing.assert_array_equal(_clip(lib, x)[0], ref_clip([np.array([np.inf, 1.0])])[0])  # [nan, 0]
    y = [np.array([np.nan, 1.0])]
    assert np.isnan(_clip(lib, y)[0]).all()
    small = [np.array([0.1, 0.2])]  # norm below max_norm: copied unchanged
    assert flat([_clip(lib, small)]) == flat([small])


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    shapes = [(40000,), (3,), (16384,), (16385,), (0,), (100001,)] + [(7,)] * 30
    g = [rng.normal(0, 1, s).astype(DTYPES[dtype]) for s in shapes]
    outs = []
    with lib.force_split():
        for t in (1, 2, 3, 4):
            outs.append(flat([_clip(lib, g, threads=t, max_norm=1.0)]))
    assert all(o == outs[0] for o in outs[1:])


def test_malformed_calls_are_rejected(lib):
    g = [np.ones(3, np.float32)]
    for bad in (-1.0, float("nan")):  # the spec's max_norm >= 0: a negative one would flip every gradient
        with pytest.raises(lib.KernelError, match="max_norm .* must be >= 0") as e:
            _clip(lib, [np.ones(3, np.float32)], max_norm=bad)
        assert e.value.status_name == "OPC_ERR_INVALID_ATTRIBUTE"
    with pytest.raises(lib.KernelError, match="norm_type 'inf'") as e:
        lib.run(OP, [g], {"norm_type": "inf"})
    assert e.value.status == 5
    with pytest.raises(lib.KernelError, match="must be of type string") as e:
        lib.run(OP, [g], {"norm_type": 2})
    assert e.value.status == 5
    np.testing.assert_array_equal(_clip(lib, g, norm_type="fro")[0],
                                  np.float32(1.0) * np.float32(1.0 / (math.sqrt(3) + 1e-6)))
    with pytest.raises(lib.KernelError, match="takes a sequence there") as e:
        lib.run(OP, [g[0]])
    assert e.value.status == 2
    with pytest.raises(lib.KernelError, match=r"gradients\[1\] has dtype float64") as e:
        lib.run(OP, [[g[0], np.ones(2)]])
    assert e.value.status == 3
    for corrupt, status, msg in [
        (lambda r: r.inputs[0].shape.__setitem__(0, -1), 2, "sequence of -1 elements"),
        (lambda r: elements(r.inputs[0])[0].shape.__setitem__(0, -1), 2, "negative dimension -1"),
        (lambda r: setattr(elements(r.inputs[0])[0], "dtype", 1234), 3, "unknown dtype code 1234"),
        (lambda r: setattr(elements(r.inputs[0])[0], "rank", -2), 2, "gradients[0] has rank -2"),
    ]:
        raw = Raw(OP, [g], outputs=[copies(g)])
        corrupt(raw)
        for s, m in (raw.infer()[:2], raw.run()):
            assert s == status and msg in m, (s, m)
    np.testing.assert_array_equal(g[0], 1.0)  # the input never written
