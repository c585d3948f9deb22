"""Thread invariance: every op of the C library returns bitwise identical outputs at 1, 2, 3 and 4
threads, at every ISA level the CPU runs and under each OpenBLAS core type it supports.

The shapes are chosen to cross the library's work splits: sizes just above block boundaries (the
fixed GEMM blocks of csrc/blas.c, the GRU and LSTM column blocks, ConvGrad's position chunks, the softmax
inner blocks), odd sizes, N = 1, C = 1, B = 1, and sizes large enough that every op actually runs
threaded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from harness.backends import openmp_lib

THREADS = (1, 2, 3, 4)
ROOT = Path(__file__).resolve().parents[2]


def _normal(rng, *shape, scale=1.0):
    return rng.normal(0.0, scale, shape)


# ---- inputs per op family: (case id, make(rng) -> (float64 inputs, attrs)) -------------------------

def _ew(with_bias=False, attrs=None):
    def cases():
        # 1 element; 65537 (one past the size where a second thread starts, odd); 3 x 40001 with bias
        for shape in ((1,), (65537,), (3, 40001), (2, 3, 17, 1031)):
            def make(rng, shape=shape):
                x = _normal(rng, *shape, scale=3.0)
                x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, 0.0][: x.size]  # special values stay put
                ins = [_normal(rng, *shape), x]
                if with_bias:
                    ins.append(_normal(rng, shape[-1]))
                return ins, dict(attrs or {})
            yield f"shape={list(shape)}", make
    return cases


def _sigmoid_like(lo, hi):
    def cases():
        for shape in ((1,), (65537,), (5, 30011)):
            def make(rng, shape=shape):
                return [_normal(rng, *shape), rng.uniform(lo, hi, shape)], {}
            yield f"shape={list(shape)}", make
    return cases


def _softmax(v13, log):
    def cases():
        # (shape, axis): rows (inner 1) and, for _13, a middle axis whose inner size crosses the
        # 256-position blocks (301 = 256 + 45)
        shapes = [((1, 7), -1), ((4099, 33), 1), ((3, 130, 257), 1 if not v13 else -1)]
        if v13:
            shapes += [((5, 67, 301), 1), ((2, 3, 65, 513), 2)]
        for shape, axis in shapes:
            def make(rng, shape=shape, axis=axis):
                r = len(shape)
                a = axis % r
                axes = tuple(range(a, r)) if not v13 else (a,)
                x = _normal(rng, *shape, scale=2.0)
                e = np.exp(x - x.max(axis=axes, keepdims=True))
                y = e / e.sum(axis=axes, keepdims=True)
                return [_normal(rng, *shape), np.log(y) if log else y], {"axis": axis}
            yield f"shape={list(shape)}/axis={axis}", make
    return cases


CONV_CASES = {
    # one image, one channel: the GEMMs are the whole work (no per-image parallelism)
    "n1_c1": ((1, 1, 67, 65), (64, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
    # Kf = 29 * 9 = 261 and M = 257 just above the 128-row GEMM blocks; P = 1023 over two chunks
    "blocks_plus_one": ((1, 29, 33, 31), (257, 29, 3, 3), {"pads": [1, 1, 1, 1]}),
    # P = 449 = one position past a float32 chunk of 448 (Kf = 576)
    "chunk_plus_one": ((2, 64, 1, 449), (16, 64, 1, 9), {"pads": [0, 4, 0, 4]}),
    "1d_batch9_odd": ((9, 17, 130), (33, 17, 3), {"pads": [1, 1]}),
    "3d_group_stride": ((2, 6, 9, 8, 7), (10, 3, 3, 2, 3),
                        {"group": 2, "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0], "dilations": [1, 2, 1]}),
    "pointwise": ((3, 130, 20, 21), (129, 130, 1, 1), {}),
    "depthwise": ((2, 8, 33, 35), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
}


def _conv():
    for name, (xs, ws, attrs) in CONV_CASES.items():
        def make(rng, xs=xs, ws=ws, attrs=attrs):
            from .test_omp_conv import geometry

            out = geometry(xs, ws, attrs)[4]
            return [_normal(rng, xs[0], ws[0], *out), _normal(rng, *xs), _normal(rng, *ws)], dict(attrs)
        yield name, make


# S, B, I, H, attributes, bias and initial_h present. H = 193 is two column blocks (112 + 81), 300
# two of 160 + 140, 520 four (3 x 144 + 88), 97 one; B = 1 runs on one thread whatever is asked.
GRU_CASES = {
    "h193_b32": (5, 32, 17, 193, {}, True),
    "h300_b40_lbr_reverse": (4, 40, 16, 300, {"linear_before_reset": 1, "direction": "reverse"}, True),
    "h97_b64_clip": (3, 64, 5, 97, {"clip": 2.0}, True),
    "h520_b9_lbr_clip_bare": (2, 9, 130, 520, {"linear_before_reset": 1, "clip": 1.5}, False),
    "b1": (7, 1, 3, 257, {}, True),
    # the features past forward Sigmoid/Tanh: both directions (the second with other activations) and
    # sequence lengths 0..S over the batch
    "h193_b32_bidi_lens": (5, 32, 17, 193, {"direction": "bidirectional", "linear_before_reset": 1,
                                            "activations": ["Sigmoid", "Tanh", "HardSigmoid", "Softsign"]}, True),
    "h300_b40_reverse_lens_acts_clip": (4, 40, 16, 300, {"direction": "reverse", "clip": 1.5,
                                                         "activations": ["Relu", "Elu"], "activation_alpha": [0.7]}, True),
    "h97_b64_bidi_bare": (3, 64, 5, 97, {"direction": "bidirectional"}, False),
}
GRU_SEQUENCE_LENS = ("h193_b32_bidi_lens", "h300_b40_reverse_lens_acts_clip")  # cases given lengths b % (S + 1)


def _gru(grad):
    for name, (S, B, I, H, extra, full) in GRU_CASES.items():
        def make(rng, name=name, S=S, B=B, I=I, H=H, extra=extra, full=full):
            scale = 1.0 / np.sqrt(H)
            D = 2 if extra.get("direction") == "bidirectional" else 1
            lens = (np.arange(B) % (S + 1)).astype(np.int32) if name in GRU_SEQUENCE_LENS else None
            ins = [_normal(rng, S, B, I), _normal(rng, D, 3 * H, I, scale=scale),
                   _normal(rng, D, 3 * H, H, scale=scale),
                   _normal(rng, D, 6 * H, scale=scale) if full else None, lens,
                   _normal(rng, D, B, H) if full else None]
            attrs = {"hidden_size": H, **extra}
            if grad:  # saved state: the float64 forward of this library, then the incoming gradients
                hall, _, zrh = openmp_lib.run("GRUTraining", ins, attrs)
                ins += [hall, zrh, _normal(rng, S, D, B, H), _normal(rng, D, B, H) if full else None]
            return ins, attrs
        yield name, make


# S, B, I, H, attributes, with B / initial_h / initial_c / P, sequence lengths b % (S + 1). Column blocks as the GRU's.
LSTM_CASES = {
    "h193_b32": (5, 32, 17, 193, {}, True, False),
    "h300_b40_reverse_ifg_clip": (4, 40, 16, 300, {"direction": "reverse", "input_forget": 1, "clip": 1.5}, True, False),
    "h97_b64_bare": (3, 64, 5, 97, {}, False, False),
    "h520_b9_acts": (2, 9, 130, 520, {"activations": ["HardSigmoid", "Softsign", "Elu"], "activation_alpha": [0.3, 0.8],
                                      "activation_beta": [0.4]}, True, False),
    "b1": (7, 1, 3, 257, {}, True, False),
    "h193_b32_bidi_lens": (5, 32, 17, 193, {"direction": "bidirectional",
                                            "activations": ["Sigmoid", "Tanh", "Tanh", "Relu", "Tanh", "Softsign"]},
                           True, True),
    "h300_b40_reverse_lens": (4, 40, 16, 300, {"direction": "reverse"}, True, True),
}


def _lstm(grad):
    for name, (S, B, I, H, extra, full, with_lens) in LSTM_CASES.items():
        def make(rng, S=S, B=B, I=I, H=H, extra=extra, full=full, with_lens=with_lens):
            scale = 1.0 / np.sqrt(H)
            D = 2 if extra.get("direction") == "bidirectional" else 1
            lens = (np.arange(B) % (S + 1)).astype(np.int32) if with_lens else None
            opt = (lambda *shape: _normal(rng, *shape, scale=scale)) if full else (lambda *shape: None)
            ins = [_normal(rng, S, B, I), _normal(rng, D, 4 * H, I, scale=scale), _normal(rng, D, 4 * H, H, scale=scale),
                   opt(D, 8 * H), lens, opt(D, B, H), opt(D, B, H), opt(D, 3 * H)]
            attrs = {"hidden_size": H, **extra}
            if grad:  # saved state: the float64 forward of this library, then the incoming gradients
                attrs.pop("clip", None)
                hall, _, _, call, iofc = openmp_lib.run("LSTMTraining", ins, attrs)
                ins = [ins[0], ins[1], ins[2], lens, ins[5], ins[6], hall, call, iofc, _normal(rng, S, D, B, H),
                       _normal(rng, D, B, H) if full else None, _normal(rng, D, B, H)]
            return ins, attrs
        yield name, make


def _layer_norm(simplified):
    def cases():
        # (shape, axis): one row; rows of 1031 (odd, past the 16-lane blocks); 97 rows of 33 over 4 row chunks
        # (32 rows each, the last partial); a 3-D input normalised over its last two dims
        for shape, axis in (((1, 7), -1), ((67, 1031), -1), ((97, 33), 1), ((5, 9, 130), 1)):
            def make(rng, shape=shape, axis=axis):
                x = _normal(rng, *shape, scale=2.0)
                dims = tuple(range(axis % len(shape), len(shape)))
                mean = np.zeros_like(x.mean(axis=dims, keepdims=True)) if simplified else x.mean(axis=dims, keepdims=True)
                inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=dims, keepdims=True) + 1e-5)
                scale = 1.0 + 0.1 * _normal(rng, *shape[axis % len(shape):])
                stats = [inv] if simplified else [mean, inv]
                return [_normal(rng, *shape), x, scale, *stats], {"axis": axis}
            yield f"shape={list(shape)}/axis={axis}", make
    return cases


def _batch_norm():
    def cases():
        # plane mode (spatial >= 16): a 5x7 plane (tail past the 16 lanes), C = 3 below 4 threads, C = 1,
        # 70 channels in cache-sized blocks of several channels (block edges move with the thread split);
        # column mode (spatial < 16): 2-D input with C = 2 and [N, 37, 3], both large enough to run threaded
        for shape in ((1, 3, 5, 7), (4, 3, 67, 131), (2, 1, 40001), (3, 70, 20, 20), (70001, 2), (1000, 37, 3)):
            def make(rng, shape=shape):
                x = _normal(rng, *shape, scale=2.0)
                axes = (0,) + tuple(range(2, len(shape)))
                mean = x.mean(axis=axes)
                inv = 1.0 / np.sqrt(x.var(axis=axes) + 1e-5)
                return [_normal(rng, *shape), x, 1.0 + 0.1 * _normal(rng, shape[1]), mean, inv], {"epsilon": 1e-5}
            yield f"shape={list(shape)}", make
    return cases


def _pool(op):
    from reference.forward.pool import max_pool

    def cases():
        # ResNet's stem pool (k3 s2 p1: windows share maxima), 1-D and 3-D, (MaxPoolGrad) indices that all
        # point into the first plane (the serial path), and 2x2 stride-2 windows (AveragePoolGrad's pair rows)
        for x_shape, attrs in (((3, 5, 17, 18), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
                               ((4, 3, 40), {"kernel_shape": [3], "strides": [1], "pads": [1, 1]}),
                               ((2, 3, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2]}),
                               ((3, 4, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "cross": True}),
                               ((2, 3, 14, 15), {"kernel_shape": [2, 2], "strides": [2, 2]})):
            def make(rng, x_shape=x_shape, attrs=attrs):
                geometry = {k: v for k, v in attrs.items() if k != "cross"}
                y, indices = max_pool(_normal(rng, *x_shape), **geometry)
                if attrs.get("cross"):
                    indices = rng.integers(0, 5, indices.shape)
                dy = _normal(rng, *y.shape)
                if op == "MaxPoolGrad":
                    return [dy, indices], {"dX_shape": list(x_shape)}
                return [dy], {**geometry, "count_include_pad": 1, "dX_shape": list(x_shape)}
            yield f"X={list(x_shape)}/{attrs}", make
    return cases


def _dropout():
    def cases():
        # 1 element; 65537 and 3 x 40001 (past the size where a second thread starts, odd), inf and NaN in dy;
        # training off (a copy)
        for shape, ratio, training in (((1,), 0.5, True), ((65537,), 0.1, True), ((3, 40001), 0.9, True),
                                       ((65537,), 0.5, False)):
            def make(rng, shape=shape, ratio=ratio, training=training):
                dy = _normal(rng, *shape)
                dy.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, 0.0][: dy.size]
                return [dy, rng.random(shape) >= ratio, np.array(ratio), np.array(training)], {}
            yield f"shape={list(shape)}/ratio={ratio}/training={training}", make
    return cases


def _sce():
    def cases():
        # rows (D = 1) past the size where a second thread starts; the class axis in the middle with D crossing the
        # 512-element blocks; one element; int32 labels; ignored labels and NaN in dY (reduction none)
        for shape, reduction, weighted, label_type in (((3000, 37), "mean", True, np.int64), ((3, 5, 1100), "none", False, np.int64),
                                                       ((1, 1), "mean", False, np.int64), ((70001, 2), "sum", True, np.int32)):
            def make(rng, shape=shape, reduction=reduction, weighted=weighted, label_type=label_type):
                x = _normal(rng, *shape, scale=3.0)
                log_prob = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
                label_shape = (shape[0], *shape[2:])
                label = rng.integers(0, shape[1], label_shape)
                label.reshape(-1)[::7] = -100
                dy = _normal(rng, *label_shape) if reduction == "none" else np.array(1.7)
                if reduction == "none":
                    dy.reshape(-1)[:3] = [np.nan, np.inf, -np.inf][: dy.size]
                weight = rng.uniform(0.2, 2.0, shape[1]) if weighted else None
                return [dy, log_prob, label.astype(label_type), weight], {"reduction": reduction, "ignore_index": -100}
            yield f"shape={list(shape)}/{reduction}/weighted={weighted}/{np.dtype(label_type).name}", make
    return cases


def _gather(elements):
    def cases():
        # an embedding-like table (rows past where a second thread starts, hot rows named many times, negative
        # indices), a middle axis, and every index naming one row (all the work on one thread's rows); int32 indices
        geometries = (((4000, 24), 0, (3000, 24) if elements else (3000,), np.int64),
                      ((6, 700, 5), 1, (6, 900, 5) if elements else (2, 450), np.int64),
                      ((50, 40), -1, (50, 300) if elements else (300,), np.int32),
                      ((3000, 8), 0, (2000, 8) if elements else (5000,), np.int64),
                      # GatherElementsGrad's column mode in several tiles per thread
                      ((2000, 300), 0, (2500, 300) if elements else (2500,), np.int64))
        for x_shape, axis, idx_shape, idx_type in geometries:
            def make(rng, x_shape=x_shape, axis=axis, idx_shape=idx_shape, idx_type=idx_type):
                dim = x_shape[axis]
                idx = rng.integers(-dim, dim, idx_shape) if x_shape[0] != 3000 else np.full(idx_shape, -1)
                idx.reshape(-1)[::5] = 7  # duplicates
                y_shape = idx_shape if elements else (*x_shape[:axis % len(x_shape)], *idx_shape, *x_shape[axis % len(x_shape) + 1:])
                dy = _normal(rng, *y_shape)
                dy.reshape(-1)[:2] = [np.inf, np.nan]
                shape = np.array(x_shape, np.int64)
                ins = [dy, shape, idx.astype(idx_type)] if elements else [shape, idx.astype(idx_type), dy]
                return ins, {"axis": axis}
            yield f"X={list(x_shape)}/axis={axis}/indices={list(idx_shape)}/{np.dtype(idx_type).name}", make
    return cases


# inputs that stay float32 when the case runs in a 16-bit dtype (the statistics' type U has no 16-bit types)
FLOAT32_INPUTS = {"LayerNormalizationGrad": (3, 4), "SimplifiedLayerNormalizationGrad": (3,)}


CASES = {
    "LayerNormalizationGrad": _layer_norm(False), "SimplifiedLayerNormalizationGrad": _layer_norm(True),
    "ReluGrad": _ew(), "GeluGrad": _ew(), "FastGeluGrad": _ew(),
    "QuickGeluGrad": _ew(attrs={"alpha": 1.702}), "LeakyReluGrad": _ew(attrs={"alpha": 0.03}),
    "BiasGeluGrad_dX": _ew(with_bias=True), "BiasFastGeluGrad_dX": _ew(with_bias=True),
    "SigmoidGrad": _sigmoid_like(-0.5, 1.5), "TanhGrad": _sigmoid_like(-1.5, 1.5),
    "SoftmaxGrad": _softmax(False, False), "SoftmaxGrad_13": _softmax(True, False),
    "LogSoftmaxGrad": _softmax(False, True), "LogSoftmaxGrad_13": _softmax(True, True),
    "ConvGrad": _conv, "GRUTraining": lambda: _gru(False), "GRUGrad": lambda: _gru(True),
    "LSTMTraining": lambda: _lstm(False), "LSTMGrad": lambda: _lstm(True),
    "MaxPoolGrad": _pool("MaxPoolGrad"), "AveragePoolGrad": _pool("AveragePoolGrad"),
    "DropoutGrad": _dropout(), "BatchNormalizationGrad": _batch_norm(),
    "SoftmaxCrossEntropyLossGrad": _sce(),
    "GatherGrad": _gather(False), "GatherElementsGrad": _gather(True),
}
# the ops whose work goes through OpenBLAS, rerun under other OpenBLAS core types
BLAS_OPS = ("ConvGrad", "GRUTraining", "GRUGrad", "LSTMTraining", "LSTMGrad")

_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _cast(ins, dtype):
    # integer and bool inputs (MaxPoolGrad's Indices, DropoutGrad's mask) keep their type
    return [None if a is None else a if np.asarray(a).dtype.kind in "biu" else np.asarray(a).astype(_NUMPY[dtype])
            for a in ins]


def thread_mismatches(op: str) -> list[str]:
    """One line per (dtype, case, thread count, output) whose bytes differ from the 1-thread run;
    the multi-thread runs are made both as they come and with the split forced on small work too
    (openmp_lib.force_split), which must not change a bit either."""
    bad = []
    for dtype in openmp_lib.supported_dtypes(op):
        for case_id, make in CASES[op]():
            ins, attrs = make(np.random.default_rng(zlib.crc32(f"{op}/{case_id}".encode())))
            ins = _cast(ins, dtype)
            if dtype in ("float16", "bfloat16"):
                ins = [a.astype(np.float32) if i in FLOAT32_INPUTS.get(op, ()) else a for i, a in enumerate(ins)]
            first = openmp_lib.run(op, ins, attrs, threads=THREADS[0])
            for t, forced in [(t, f) for t in THREADS[1:] for f in (False, True)]:
                with openmp_lib.force_split(forced):
                    again = openmp_lib.run(op, ins, attrs, threads=t)
                for name, a, b in zip(openmp_lib.op_info(op)["outputs"], first, again):
                    if a.tobytes() != b.tobytes():
                        differ = int((a.view(np.uint8).reshape(-1, a.itemsize) != b.view(np.uint8).reshape(
                            -1, b.itemsize)).any(axis=1).sum())
                        bad.append(f"{op} {dtype} {case_id}: {name} at {t} threads{' (split forced)' * forced} "
                                   f"differs from 1 thread in {differ} of {a.size} elements")
    return bad


def test_every_op_has_cases(lib):
    missing = sorted(set(lib.ops()) - set(CASES))
    assert not missing, f"no thread-invariance cases for {missing}: add them to CASES"


@pytest.mark.parametrize("op", sorted(CASES))
def test_bitwise_across_thread_counts(lib, op):
    if op not in lib.ops():
        pytest.fail(f"{op} has cases here but the library has no such op")
    assert thread_mismatches(op) == []


# ---- OpenBLAS core types ----------------------------------------------------------------------

# OPENBLAS_CORETYPE names and the CPU flags (/proc/cpuinfo) their kernels need.
CORE_TYPES = {
    "SkylakeX": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"),
    "Haswell": ("avx2", "fma"),
    "Sandybridge": ("avx",),
}

_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from harness.backends import openmp_lib
openmp_lib.use({level!r})
openmp_lib.load()
from tests.openmp.test_omp_threads import BLAS_OPS, thread_mismatches
bad = [line for op in BLAS_OPS for line in thread_mismatches(op)]
print(json.dumps({{"core": openmp_lib.build_info()["blas_core"], "bad": bad}}))
"""


@pytest.mark.parametrize("core", sorted(CORE_TYPES))
def test_bitwise_under_openblas_core_type(lib, core):
    missing = [f for f in CORE_TYPES[core] if f not in openmp_lib.cpu_flags()]
    if missing:
        pytest.skip(f"OpenBLAS core {core} needs CPU features this CPU lacks: {', '.join(missing)}")
    level = openmp_lib.selected_isa()
    env = dict(os.environ, OPENBLAS_CORETYPE=core)
    child = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT), level=level)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, f"child under OPENBLAS_CORETYPE={core} failed:\n{child.stderr[-2000:]}"
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["core"].lower() == core.lower(), (
        f"OPENBLAS_CORETYPE={core} but OpenBLAS picked {report['core']!r}")
    assert report["bad"] == []
