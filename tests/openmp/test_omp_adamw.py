"""AdamWOptimizer through the op table (openmp_lib.run with Python lists; csrc/seq_optim.c) against the float64
reference: both adam_modes, correct_bias, weight decay, several steps fed back; float32 within a few float32
roundings of its terms (float32 arithmetic, as torch's fused AdamW), float64 to 1e-13; update_signal false (copies,
flag false); the outputs computed out of place, in place (the inputs' own arrays as outputs) and partly wanted all
the same; the same bits at 1-4 threads; every malformed call rejected with its status, the inputs unchanged, and
malformed sequences from ctypes (a count of -1, an element of another dtype, NULL element data) rejected by the
library itself."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from reference.ops.adamw import adamw as ref_adamw

from .seq_helpers import Raw, copies, elements, flat

OP = "AdamWOptimizer"
DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
RTOL = {"float32": 2.0 ** -23, "float64": 1e-13, "float16": 2.0 ** -10}
ATOL = {"float32": 1e-300, "float64": 1e-300, "float16": 2.0 ** -25}  # float16: half its smallest subnormal
SHAPES = [(7, 5), (13,), (2, 3, 4), (1,), (0,), (33,), ()]
CONFIGS = [
    dict(adam_mode=0, correct_bias=1, weight_decay=0.01),
    dict(adam_mode=0, correct_bias=1, weight_decay=0.0, alpha=0.5, beta=0.6, epsilon=0.1),
    dict(adam_mode=1, correct_bias=1, weight_decay=0.3),
    dict(adam_mode=1, correct_bias=0, weight_decay=0.01, alpha=0.8, beta=0.95, epsilon=1e-3),
]
LR = np.array([1e-2], np.float32)


def _state(rng, dt, shapes=SHAPES):
    w = [np.array(rng.normal(0, 1, s), dt) for s in shapes]
    g = [np.array(rng.normal(0, 1, s), dt) for s in shapes]
    m1 = [np.array(rng.normal(0, 0.1, s), dt) for s in shapes]
    m2 = [np.array(np.abs(rng.normal(0, 0.01, s)), dt) for s in shapes]
    return w, g, m1, m2


def _run(lib, lr, step, w, g, m1, m2, signal=None, threads=1, **attrs):
    inputs = [np.asarray(lr), np.asarray(step, np.int64), w, g, m1, m2] + ([np.asarray(signal)] if signal is not None
                                                                           else [])
    return lib.run(OP, inputs, attrs, threads=threads)


def _close(got, want, dtype, what, terms=None):
    """float64 and float16 within one rounding of the double result. float32 is float32 arithmetic (csrc/seq_optim.c,
    as torch's fused AdamW): within 4 float32 roundings of `terms`, the magnitudes its few operations round (per
    element, in the reference's float64), where the test gives them."""
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape and a.dtype == np.dtype(dtype)
        if dtype == "float32" and terms is not None:
            bound = 4 * 2.0 ** -24 * terms[i]
            assert np.all(np.abs(a.astype(np.float64) - b) <= bound), f"{what}[{i}]"
            continue
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=RTOL[dtype], atol=ATOL[dtype], err_msg=f"{what}[{i}]")


def _terms(lr, step, w, g, m1, m2, alpha=0.9, beta=0.999, epsilon=1e-8, weight_decay=0.01, correct_bias=1, adam_mode=0):
    """Per output and element, the sum of the magnitudes the float32 update rounds: the moments' two products, the
    weight's decayed value and its step (the quotient's own three roundings, scaled by the step size)."""
    t = int(np.asarray(step).reshape(-1)[0])
    c1, c2 = (1 - alpha ** t, 1 - beta ** t) if correct_bias else (1.0, 1.0)
    lr = float(np.asarray(lr).reshape(-1)[0])
    out_w, out_1, out_2 = [], [], []
    for wi, gi, ai, bi in zip(w, g, m1, m2):
        wi, gi, ai, bi = (np.asarray(x, np.float64) for x in (wi, gi, ai, bi))
        n1 = alpha * ai + (1 - alpha) * gi
        n2 = beta * bi + (1 - beta) * gi * gi
        out_1.append(np.abs(alpha * ai) + np.abs((1 - alpha) * gi))
        out_2.append(np.abs(beta * bi) + np.abs((1 - beta) * gi * gi))
        size = lr / c1 if adam_mode == 0 else lr * np.sqrt(c2) / c1
        root = np.sqrt(n2) / (np.sqrt(c2) if adam_mode == 0 else 1.0)
        step_ = size * (np.abs(n1) + out_1[-1]) / (root + epsilon)  # n1's own error carried by the quotient
        out_w.append(np.abs(wi) + 3 * step_)
    return out_w, out_1, out_2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("step", [1, 5])
def test_one_step_is_the_reference(lib, rng, dtype, cfg, step):
    w, g, m1, m2 = _state(rng, DTYPES[dtype])
    flag, rw, r1, r2 = ref_adamw(LR, np.array([step]), w, g, m1, m2, **cfg)
    before = flat([w, g, m1, m2])
    kf, kw, k1, k2 = _run(lib, LR, [step], w, g, m1, m2, **cfg)
    assert flat([w, g, m1, m2]) == before  # out of place: the inputs are read only
    assert kf.dtype == bool and kf.shape == flag.shape == (1,) and kf[0]
    tw, t1, t2 = _terms(LR, [step], w, g, m1, m2, **cfg)
    _close(kw, rw, dtype, "weights", tw)
    _close(k1, r1, dtype, "momentums_1", t1)
    _close(k2, r2, dtype, "momentums_2", t2)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_ten_steps_fed_back_float64(lib, rng, cfg):
    w, _, _, _ = _state(rng, np.float64)
    m1 = [np.zeros_like(a) for a in w]
    m2 = [np.zeros_like(a) for a in w]
    kw, k1, k2 = copies(w), copies(m1), copies(m2)
    lr = np.array(0.05, np.float32)  # one value of any shape: updated_flag has step's
    for step in range(1, 11):
        g = [rng.normal(0, 1, a.shape) for a in w]
        _, w, m1, m2 = ref_adamw(lr, np.array(step), w, g, m1, m2, **cfg)
        flag, kw, k1, k2 = _run(lib, lr, np.array(step), kw, g, k1, k2, **cfg)
        assert flag.shape == () and flag
    _close(kw, w, "float64", "weights")
    _close(k1, m1, "float64", "momentums_1")
    _close(k2, m2, "float64", "momentums_2")


@pytest.mark.parametrize("dtype", DTYPES)
def test_update_signal_false_copies_the_inputs(lib, rng, dtype):
    w, g, m1, m2 = _state(rng, DTYPES[dtype])
    flag, kw, k1, k2 = _run(lib, LR, [3], w, g, m1, m2, signal=[False])
    want = ref_adamw(LR, np.array([3]), w, g, m1, m2, update_signal=np.array([False]))
    assert flag.shape == want[0].shape and not flag[0]
    assert flat([kw, k1, k2]) == flat([w, m1, m2])
    flag, kw, _, _ = _run(lib, LR, [3], w, g, m1, m2, signal=np.array(True))
    assert flag[0] and flat([kw]) != flat([w])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("signal", [None, True, False])
def test_in_place_and_partial_outputs_are_the_same(lib, rng, dtype, signal):
    """The inputs' own arrays as outputs (the caller's in-place update), and any subset of outputs wanted, give the
    bits of the out-of-place call."""
    w, g, m1, m2 = _state(rng, DTYPES[dtype], SHAPES + [(3000,), (5000,)])
    inputs = [LR, np.array([2]), w, g, m1, m2] + ([np.array([signal])] if signal is not None else [])
    attrs = dict(adam_mode=1, weight_decay=0.1)
    want = lib.run(OP, inputs, attrs)
    iw, i1, i2 = copies(w), copies(m1), copies(m2)
    in_place = [LR, np.array([2]), iw, g, i1, i2] + inputs[6:]
    got = lib.run(OP, in_place, attrs, out=[None, iw, i1, i2], threads=2)
    assert got[1] is iw and got[1][0] is iw[0]
    assert flat([iw, i1, i2]) == flat(want[1:])
    for k in range(1, 4):
        wanted = [k == j for j in range(4)]
        part = lib.run(OP, inputs, attrs, want_outputs=wanted, threads=2)
        assert [o is None for o in part] == [not x for x in wanted]
        assert flat([part[k]]) == flat([want[k]])
    flag_only = lib.run(OP, inputs, attrs, want_outputs=[True, False, False, False])
    assert flag_only[0][0] == (signal is not False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [0, 1])
def test_thread_counts_give_the_same_bits(lib, rng, dtype, mode):
    # sizes that put slice boundaries inside tensors, at their edges and across many small ones
    shapes = [(1000,), (3,), (50001,), (17,)] + [(5,)] * 40 + [(4096,), (0,), (7777,)]
    w, g, m1, m2 = _state(rng, DTYPES[dtype], shapes)
    outs = []
    with lib.force_split():
        for t in (1, 2, 3, 4):
            o = _run(lib, np.array([1e-3], np.float32), [3], w, g, m1, m2, threads=t, adam_mode=mode,
                     weight_decay=0.1)
            outs.append(flat(o[1:]))
            # want_outputs subsets take the scratch path: same bits too
            part = lib.run(OP, [np.array([1e-3], np.float32), np.array([3]), w, g, m1, m2],
                           dict(adam_mode=mode, weight_decay=0.1), want_outputs=[False, False, True, False],
                           threads=t)
            assert flat([part[2]]) == flat([o[2]])
    assert all(o == outs[0] for o in outs[1:])
    # and without forcing the split, at a size that splits on its own
    big = _state(rng, DTYPES[dtype], [(300000,), (70000,)])
    res = [flat(_run(lib, np.array([1e-3], np.float32), [3], *big, threads=t, adam_mode=mode)[1:]) for t in (1, 2)]
    assert res[0] == res[1]


def _bad_calls(w, g, m1, m2):
    """(what, inputs, attrs, status, message) of calls the op table's own marshalling can express."""
    lr, step = LR, np.array([1])
    ok = [lr, step, w, g, m1, m2]
    other = np.float32 if w[0].dtype != np.float32 else np.float64
    return [
        ("empty lists", [lr, step, [], [], [], []], {}, 2, "at least one tensor"),
        ("adam_mode 2", ok, dict(adam_mode=2), 5, "adam_mode"),
        ("correct_bias 2", ok, dict(correct_bias=2), 5, "correct_bias"),
        ("mode 0 without bias correction", ok, dict(adam_mode=0, correct_bias=0), 5, "requires correct_bias 1"),
        ("step 0", [lr, np.array([0]), w, g, m1, m2], {}, 2, "step >= 1"),
        ("step -3", [lr, np.array([-3]), w, g, m1, m2], dict(adam_mode=1), 2, "step >= 1"),
        ("lengths differ", [lr, step, w, g[:1], m1, m2], {}, 2, "gradients has 1 tensors, weights has 2"),
        ("shapes differ", [lr, step, w, [g[0].T, g[1]], m1, m2], {}, 2, r"gradients\[0\] has shape \[4, 3\]"),
        ("element dtypes differ", [lr, step, w, g, m1, [m2[0], m2[1].astype(other)]], {}, 3, "dtype"),
        ("lists of two dtypes", [lr, step, w, g, m1, [a.astype(other) for a in m2]], {}, 3, "must be equal"),
        ("bfloat16 lists", [lr, step] + [[a.astype(ml_dtypes.bfloat16) for a in x] for x in (w, g, m1, m2)], {}, 3,
         "not supported"),
        ("a tensor for weights", [lr, step, w[0], g, m1, m2], {}, 2, "the op takes a sequence there"),
        ("a sequence for lr", [[lr], step, w, g, m1, m2], {}, 2, "input lr is a sequence"),
        ("lr of two values", [np.array([0.1, 0.2], np.float32), step, w, g, m1, m2], {}, 2, "exactly one value"),
        ("step int32", [lr, np.array([1], np.int32), w, g, m1, m2], {}, 3, "int64"),
        ("update_signal float", ok + [np.array([1.0])], {}, 3, "bool"),
        ("missing momentums_2", [lr, step, w, g, m1, None], {}, 2, "momentums_2"),
        ("unknown attribute", ok, dict(lambda_=0.1), 4, "unknown attribute"),
    ]


N_BAD = 18


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", range(N_BAD))
def test_malformed_calls_are_rejected_and_change_nothing(lib, rng, dtype, which):
    w, g, m1, m2 = _state(rng, DTYPES[dtype], [(3, 4), (5,)])
    cases = _bad_calls(w, g, m1, m2)
    assert len(cases) == N_BAD
    what, inputs, attrs, status, msg = cases[which]
    before = flat([w, g, m1, m2])
    with pytest.raises(lib.KernelError, match=msg) as e:
        lib.run(OP, inputs, attrs)
    assert e.value.status == status, what
    with pytest.raises(lib.KernelError, match=msg):  # in place too: a rejected call writes nothing
        lib.run(OP, inputs, attrs, out=[None, w, m1, m2] if isinstance(inputs[2], list) and inputs[2] else None)
    assert flat([w, g, m1, m2]) == before


def test_malformed_sequences_from_ctypes_are_rejected(lib, rng):
    """What openmp_lib never builds, built by hand: the library's generic validation answers with a status."""
    w, g, m1, m2 = _state(rng, np.float32, [(3,), (4,)])
    inputs = [LR, np.array([1]), w, g, m1, m2]

    def rejected(corrupt, status, msg):
        raw = Raw(OP, inputs)
        corrupt(raw)
        for s, m in (raw.infer()[:2], raw.run()):
            assert s == status and msg in m, (s, m)

    rejected(lambda r: r.inputs[2].shape.__setitem__(0, -1), 2, "sequence of -1 elements")
    rejected(lambda r: r.inputs[3].shape.__setitem__(0, 1 << 40), 2, "sequence of 1099511627776 elements")
    rejected(lambda r: setattr(elements(r.inputs[4])[1], "dtype", 11), 3, "momentums_1[1] has dtype float64")
    rejected(lambda r: setattr(elements(r.inputs[4])[1], "dtype", 99), 3, "unknown dtype code 99")
    rejected(lambda r: setattr(r.inputs[2], "dtype", 11), 3, "weights[0] has dtype float32")
    rejected(lambda r: setattr(elements(r.inputs[5])[0], "data", None), 2, "momentums_2[0] has 3 elements and NULL")
    rejected(lambda r: setattr(r.inputs[3], "data", None), 2, "gradients is a sequence of 2 elements with NULL data")
    rejected(lambda r: setattr(r.inputs[3], "shape", None), 2, "gradients is a sequence with a NULL shape")
    rejected(lambda r: setattr(elements(r.inputs[2])[0], "rank", -2), 2, "weights[0] has rank -2")
    rejected(lambda r: setattr(elements(r.inputs[2])[0], "rank", 13), 2, "weights[0] has rank 13")
    rejected(lambda r: elements(r.inputs[2])[1].shape.__setitem__(0, -4), 2, "negative dimension -4")
    rejected(lambda r: elements(r.inputs[2])[1].shape.__setitem__(0, 2 ** 48 + 1), 2, "too large")
    rejected(lambda r: setattr(r.inputs[0], "rank", -2), 2, "input lr is a sequence")
    # an empty tensor's data is never read: NULL is fine there
    raw = Raw(OP, [LR, np.array([1]), [w[0], np.zeros(0, np.float32)], [g[0], np.zeros(0, np.float32)],
                   [m1[0], np.zeros(0, np.float32)], [m2[0], np.zeros(0, np.float32)]])
    for k in range(2, 6):
        elements(raw.inputs[k])[1].data = None
    assert raw.infer()[0] == 0 and raw.run()[0] == 0


def test_malformed_outputs_are_rejected(lib, rng):
    w, g, m1, m2 = _state(rng, np.float32, [(3,), (4,)])
    inputs = [LR, np.array([1]), w, g, m1, m2]

    def status(outputs, corrupt=None):
        raw = Raw(OP, inputs, outputs=outputs)
        if corrupt:
            corrupt(raw)
        return raw.run()

    flag = np.zeros(1, bool)
    assert status([flag, copies(w), copies(m1), copies(m2)]) == (0, "")
    assert status([flag, None, None, None]) == (0, "")
    s, m = status([flag, copies(w)[:1], None, None])
    assert s == 8 and "updated_weights must be a sequence of 2 elements" in m
    s, m = status([flag, [w[0].copy(), np.zeros(5, np.float32)], None, None])
    assert s == 8 and "updated_weights[1] must have shape [4], got [5]" in m
    s, m = status([flag, [a.astype(np.float64) for a in w], None, None])
    assert s == 8 and "sequence of float32, got float64" in m
    s, m = status([flag, None, None, w[0].copy()])
    assert s == 8 and "must be a sequence, got a tensor" in m
    s, m = status([[flag], None, None, None])
    assert s == 8 and "must be a tensor, got a sequence" in m
    s, m = status([flag, copies(w), None, None], lambda r: setattr(elements(r.outputs[1])[1], "data", None))
    assert s == 2 and "updated_weights[1] has 4 elements and NULL data" in m
    s, m = status([flag, copies(w), None, None], lambda r: setattr(elements(r.outputs[1])[1], "dtype", 11))
    assert s == 8 and "updated_weights[1] has dtype float64" in m


def test_infer_and_prepared_calls_take_lists(lib, rng):
    w, g, m1, m2 = _state(rng, np.float64, [(3, 2), (), (0,)])
    inputs = [LR, np.array(4), w, g, m1, m2]
    assert lib.infer(OP, inputs) == [(np.dtype(bool), ())] + [(np.dtype(np.float64), [(3, 2), (), (0,)])] * 3
    call, outs = lib.prepare(OP, inputs, {"adam_mode": 1}, threads=2)
    call()
    first = flat(outs[1:])
    call()  # the bench's repeated call into the same outputs
    assert flat(outs[1:]) == first == flat(lib.run(OP, inputs, {"adam_mode": 1})[1:])


def test_the_backend_worker_passes_lists_through(lib, rng):
    """harness.backends.openmp's worker handler (what a run and a bench call in the worker): lists in, lists out,
    through pickle; the bench repeats the call into the same outputs."""
    import pickle

    from harness.backends import openmp
    from harness.core.timing import Budget

    w, g, m1, m2 = _state(rng, np.float32, [(3, 2), (5,)])
    request = {"call": "run", "op": OP, "inputs": [LR, np.array([2]), w, g, m1, m2, None],
               "attributes": {"adam_mode": 1}, "outputs": [True, True, False, True], "threads": 2,
               "force_split": True}
    reply = pickle.loads(pickle.dumps(openmp.handle(pickle.loads(pickle.dumps(request)))))
    want = lib.run(OP, request["inputs"][:6], {"adam_mode": 1})
    assert reply[2] is None and flat([reply[1], reply[3]]) == flat([want[1], want[3]]) and reply[0][0]
    timing = openmp.handle({**request, "call": "bench", "budget": Budget(warmup=1, min_reps=2, max_reps=3,
                                                                          seconds=0.01, rounds=1).as_dict()})
    assert timing is not None
    with pytest.raises(openmp.KernelError, match="OPC_ERR_INVALID_ARGUMENT|weights"):
        openmp.handle({**request, "inputs": [LR, np.array([2]), w[0], g, m1, m2, None]})
