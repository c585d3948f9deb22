"""Thread invariance: every op of the C library returns bitwise identical outputs at 1, 2, 3 and 4
threads, at every ISA level the CPU runs and under each OpenBLAS core type it supports.

The shapes are chosen to cross the library's work splits: sizes just above block boundaries (the
fixed GEMM blocks of csrc/blas.c, the GRU column blocks, ConvGrad's position chunks, the softmax
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
}


def _gru(grad):
    for name, (S, B, I, H, extra, full) in GRU_CASES.items():
        def make(rng, S=S, B=B, I=I, H=H, extra=extra, full=full):
            scale = 1.0 / np.sqrt(H)
            ins = [_normal(rng, S, B, I), _normal(rng, 1, 3 * H, I, scale=scale),
                   _normal(rng, 1, 3 * H, H, scale=scale),
                   _normal(rng, 1, 6 * H, scale=scale) if full else None, None,
                   _normal(rng, 1, B, H) if full else None]
            attrs = {"hidden_size": H, **extra}
            if grad:  # saved state: the float64 forward of this library, then the incoming gradients
                hall, _, zrh = openmp_lib.run("GRUTraining", ins, attrs)
                ins += [hall, zrh, _normal(rng, S, 1, B, H), _normal(rng, 1, B, H) if full else None]
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
}
# the ops whose work goes through OpenBLAS, rerun under other OpenBLAS core types
BLAS_OPS = ("ConvGrad", "GRUTraining", "GRUGrad")

_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _cast(ins, dtype):
    return [None if a is None else np.asarray(a).astype(_NUMPY[dtype]) for a in ins]


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
