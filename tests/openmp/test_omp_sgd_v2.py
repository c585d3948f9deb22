"""SGDOptimizerV2 through the op table (openmp_lib.run with Python lists; csrc/seq_optim.c) against the float64
reference: float32 within its two float32 roundings, float16 rounded once, float64 exact; update_completed has lr's
shape; update_signal false copies; in place the same; the same bits at 1-4 threads; malformed calls and sequences
rejected."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.sgd_v2 import sgd_v2 as ref_sgd

from .seq_helpers import Raw, copies, elements, flat

OP = "SGDOptimizerV2"
DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}


@pytest.mark.parametrize("dtype", DTYPES)
def test_is_the_reference_rounded_once(lib, rng, dtype):
    dt = DTYPES[dtype]
    shapes = [(7, 5), (13,), (), (0,), (2, 3, 4)]
    w = [np.array(rng.normal(0, 1, s), dt) for s in shapes]
    g = [np.array(rng.normal(0, 1, s), dt) for s in shapes]
    lr = np.array([0.1], np.float32)
    flag, want = ref_sgd(lr, w, g)
    before = flat([w, g])
    done, kw = lib.run(OP, [lr, w, g])
    assert flat([w, g]) == before
    assert done.shape == flag.shape and done.dtype == bool and done[0]
    for a, b, wi, gi in zip(kw, want, w, g, strict=True):
        assert a.shape == b.shape
        if dtype == "float32":  # float32 arithmetic (the product, then the difference): two roundings of the terms
            bound = 2 * 2.0 ** -24 * (np.abs(wi.astype(np.float64)) + 0.1 * np.abs(gi.astype(np.float64)))
            assert np.all(np.abs(a.astype(np.float64) - b) <= bound)
        else:
            np.testing.assert_array_equal(a, b.astype(dt))  # one rounding of the double result
    # in place: the weights' own arrays as the output
    iw = copies(w)
    lib.run(OP, [lr, iw, g], out=[None, iw])
    assert flat([iw]) == flat([kw])
    # update_signal false: a copy, flag false (with lr's shape)
    done, kw = lib.run(OP, [np.array(0.1, np.float32), w, g, np.array([False])])
    assert done.shape == () and not done and flat([kw]) == flat([w])


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    shapes = [(1000,), (3,), (150001,)] + [(5,)] * 30
    w = [rng.normal(0, 1, s).astype(DTYPES[dtype]) for s in shapes]
    g = [rng.normal(0, 1, s).astype(DTYPES[dtype]) for s in shapes]
    outs = []
    with lib.force_split():
        for t in (1, 2, 3, 4):
            outs.append(flat([lib.run(OP, [np.array([0.3], np.float32), w, g], threads=t)[1]]))
    assert all(o == outs[0] for o in outs[1:])


@pytest.mark.parametrize("inputs, status, msg", [
    (lambda w: [w, [], []], 2, "at least one tensor"),
    (lambda w: [w, w, w[:1]], 2, "gradients has 1 tensors, weights has 2"),
    (lambda w: [w, w, [w[0], np.zeros(4, np.float32)]], 2, r"gradients\[1\] has shape \[4\], weights\[1\] has \[3\]"),
    (lambda w: [w, w, [a.astype(np.float64) for a in w]], 3, "must be equal"),
    (lambda w: [w, w[0], w], 2, "input weights is a tensor"),
    (lambda w: [np.array([0.1, 0.2], np.float32), w, w], 2, "exactly one value"),
    (lambda w: [w, None, w], 2, "weights"),
], ids=["empty", "lengths", "shapes", "dtypes", "tensor", "lr-two-values", "missing"])
def test_malformed_calls_are_rejected(lib, inputs, status, msg):
    w = [np.zeros(2, np.float32), np.zeros(3, np.float32)]
    args = inputs(w)
    if args[0] is w:
        args[0] = np.array([0.1], np.float32)
    with pytest.raises(lib.KernelError, match=msg) as e:
        lib.run(OP, args)
    assert e.value.status == status


def test_malformed_sequences_from_ctypes_are_rejected(lib):
    w = [np.zeros(2, np.float32), np.zeros(3, np.float32)]
    for corrupt, status, msg in [
        (lambda r: r.inputs[1].shape.__setitem__(0, -5), 2, "sequence of -5 elements"),
        (lambda r: elements(r.inputs[2]).__getitem__(0).shape.__setitem__(0, -2), 2, "negative dimension -2"),
        (lambda r: setattr(elements(r.inputs[2])[1], "dtype", 7), 3, "gradients[1] has dtype int64"),
        (lambda r: setattr(r.inputs[1], "data", None), 2, "weights is a sequence of 2 elements with NULL data"),
        (lambda r: setattr(elements(r.inputs[1])[1], "data", None), 2, "weights[1] has 3 elements and NULL data"),
    ]:
        raw = Raw(OP, [np.array([0.1], np.float32), w, copies(w)], outputs=[None, copies(w)])
        corrupt(raw)
        for s, m in (raw.infer()[:2], raw.run()):
            assert s == status and msg in m, (s, m)


def test_float16_is_rounded_once_not_through_float32(lib):
    """1 + 2^-11 + 2^-30 lies just above the float16 midpoint of 1 and 1 + 2^-10: rounded once it is 1 + 2^-10;
    through float32 first (1 + 2^-11, the midpoint exactly) it would round to even, 1."""
    lr = np.array([2.0 ** -11 + 2.0 ** -30], np.float32)
    assert float(lr[0]) == 2.0 ** -11 + 2.0 ** -30
    w, g = [np.ones(20, np.float16)], [-np.ones(20, np.float16)]
    _, (out,) = lib.run(OP, [lr, w, g])
    np.testing.assert_array_equal(out, np.float16(1 + 2.0 ** -10))


def test_the_bench_call_writes_over_the_inputs_a_judged_call_never(lib, rng):
    """prepare(in_place=True), the bench's call (harness/backends/openmp.py), writes each sequence output over the
    input it mirrors, as ORT's optimizers alias them, so both bench the same bytes; run() leaves the inputs alone."""
    w = [np.array(rng.normal(0, 1, s), np.float32) for s in [(4, 3), (5,)]]
    g = [np.array(rng.normal(0, 1, s), np.float32) for s in [(4, 3), (5,)]]
    lr = np.array(0.5, np.float32)
    before = flat([w])
    _, judged = lib.run(OP, [lr, w, g])
    assert flat([w]) == before and all(a is not b for a, b in zip(judged, w))
    call, (_, benched) = lib.prepare(OP, [lr, w, g], in_place=True)
    call()
    assert all(a is b for a, b in zip(benched, w))  # the inputs' own arrays
    assert flat([w]) == flat([judged])  # updated once, as the judged call computed
