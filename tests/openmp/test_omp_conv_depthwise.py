"""ConvGrad's depthwise path (group = C, csrc/conv.c dw_exec: direct loops along the output row, no im2col or
GEMM) against the float64 direct-loop conv-transpose / weight correlation of test_omp_conv, its thread
invariance, and its agreement with the im2col + GEMM path (OPCONFORM_CONV_DEPTHWISE=0)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from harness.backends import openmp_lib

from .test_omp_conv import conv_forward, conv_grads, make

# (X shape, W shape, attrs): group = C always; W.shape[0] / C is the channel multiplier
DW_CASES = {
    "k3_s1_pad": ((2, 5, 9, 10), (5, 1, 3, 3), {"group": 5, "pads": [1, 1, 1, 1]}),
    "k3_s2_pad": ((3, 4, 9, 11), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "k3_s2_nopad_odd": ((1, 3, 8, 7), (3, 1, 3, 3), {"group": 3, "strides": [2, 2]}),
    "k5_s1_pad2": ((2, 3, 11, 9), (3, 1, 5, 5), {"group": 3, "pads": [2, 2, 2, 2]}),
    "k5_s2_asym": ((1, 4, 12, 13), (4, 1, 5, 5), {"group": 4, "pads": [2, 1, 0, 2], "strides": [2, 2]}),
    "k3_dil2": ((2, 3, 10, 12), (3, 1, 3, 3), {"group": 3, "pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "k3_dil2_s2": ((1, 2, 13, 11), (2, 1, 3, 3), {"group": 2, "pads": [1, 2, 1, 0], "dilations": [2, 2],
                                                  "strides": [2, 2]}),
    "mult2": ((2, 3, 8, 8), (6, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    "mult2_s2": ((3, 2, 9, 8), (4, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "mult3_rect": ((1, 2, 7, 9), (6, 1, 2, 4), {"group": 2, "strides": [1, 3], "pads": [0, 1, 1, 2]}),
    "stride_gt_kernel": ((2, 3, 10, 10), (3, 1, 2, 2), {"group": 3, "strides": [3, 3]}),
    "same_upper_s2": ((2, 3, 9, 8), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "same_lower": ((1, 3, 7, 6), (3, 1, 4, 4), {"group": 3, "auto_pad": "SAME_LOWER"}),
    "1d": ((2, 4, 40), (8, 1, 5), {"group": 4, "pads": [2, 3], "strides": [2]}),
    "1d_dil": ((3, 2, 37), (2, 1, 3), {"group": 2, "pads": [2, 2], "dilations": [2]}),
    "long_rows": ((2, 3, 5, 67), (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),  # 16-lane blocks + tail
    "long_rows_s2": ((1, 2, 4, 75), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1], "strides": [1, 2]}),
    "kernel_eq_input": ((2, 3, 4, 5), (3, 1, 4, 5), {"group": 3}),
    "one_channel": ((2, 1, 6, 6), (1, 1, 3, 3), {"pads": [1, 1, 1, 1]}),  # group = C = 1
    "s3_mult2_dil": ((2, 2, 14, 13), (4, 1, 3, 2), {"group": 2, "strides": [3, 3], "pads": [2, 1, 1, 2],
                                                    "dilations": [2, 3]}),
    "s1x2_rect": ((1, 3, 9, 40), (3, 1, 3, 3), {"group": 3, "strides": [1, 2], "pads": [1, 1, 1, 1]}),
    "pads_past_kernel": ((1, 2, 5, 6), (2, 1, 2, 2), {"group": 2, "pads": [3, 4, 2, 3]}),
    "over_64_phases": ((1, 2, 20, 19), (2, 1, 2, 3), {"group": 2, "strides": [9, 8], "pads": [1, 1, 0, 2]}),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(DW_CASES))
def test_depthwise_values(lib, rng, name, dtype):
    xs, ws, attrs = DW_CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, dtype)
    dx, dw, db = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    rdx, rdw, rdb = conv_grads(dy, x, w, attrs)
    k = max(1, int(np.prod(ws[1:])) * ws[0])
    tol = (1e-5 * math.sqrt(k * xs[0] * np.prod(dy.shape[2:]))) if dtype == np.float32 else 1e-11
    for a, r, nm in ((dx, rdx, "dX"), (dw, rdw, "dW"), (db, rdb, "dB")):
        assert a.dtype == dtype and a.shape == r.shape, nm
        np.testing.assert_allclose(a, r, atol=tol, rtol=1e-5 if dtype == np.float32 else 1e-10, err_msg=nm)
    if dtype == np.float64:  # adjoint identity: <conv(x, w), dy> = <x, dX> = <w, dW>
        lhs = float((conv_forward(x, w, attrs) * dy).sum())
        assert math.isclose(lhs, float((x * dx).sum()), rel_tol=1e-10, abs_tol=1e-9)
        assert math.isclose(lhs, float((w * dw).sum()), rel_tol=1e-10, abs_tol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["k3_s1_pad", "k5_s2_asym", "mult2_s2", "1d", "long_rows", "s3_mult2_dil"])
def test_depthwise_threads_bitwise(lib, rng, name, dtype):
    xs, ws, attrs = DW_CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, dtype)
    for split in (False, True):
        with openmp_lib.force_split(split):
            runs = [lib.run("ConvGrad", [dy, x, w], attrs, threads=t) for t in (1, 2, 3, 4)]
        for r in runs[1:]:
            for i in range(3):
                np.testing.assert_array_equal(r[i], runs[0][i], err_msg=("dX", "dW", "dB")[i])


@pytest.mark.parametrize("name", ["k3_s2_pad", "mult2", "1d_dil"])
def test_depthwise_output_subsets_bitwise(lib, rng, name):
    xs, ws, attrs = DW_CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, np.float32)
    full = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    for want in ([True, False, False], [False, True, False], [False, True, True], [True, False, True]):
        part = lib.run("ConvGrad", [dy, x, w], attrs, want_outputs=want, threads=2)
        for i in range(3):
            assert (part[i] is None) if not want[i] else np.array_equal(part[i], full[i]), (want, i)


@pytest.mark.parametrize("name", ["k3_s1_pad", "k3_dil2_s2", "mult3_rect", "over_64_phases"])
def test_depthwise_matches_gemm_path(lib, rng, monkeypatch, name):
    """OPCONFORM_CONV_DEPTHWISE=0 sends the same call through im2col + GEMM: the two agree to rounding."""
    xs, ws, attrs = DW_CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, np.float64)
    direct = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    monkeypatch.setenv("OPCONFORM_CONV_DEPTHWISE", "0")
    gemm = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    for a, b in zip(direct, gemm):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_depthwise_float16(lib, rng):
    xs, ws, attrs = DW_CASES["mult2_s2"]
    dy, x, w = make(rng, xs, ws, attrs, np.float16)
    got = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    ref = conv_grads(dy, x, w, attrs)
    for a, r in zip(got, ref):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float64), r, rtol=2e-2, atol=0.05 * float(np.abs(r).max()) + 1e-3)


def test_depthwise_empty(lib, rng):
    # empty spatial input with padding: dX empty, dW zero (only padding under the taps), dB the sums
    x = np.zeros((1, 2, 0, 4), np.float32)
    w = rng.normal(size=(4, 1, 1, 1)).astype(np.float32)
    dy = rng.normal(size=(1, 4, 2, 4)).astype(np.float32)
    dx, dw, db = lib.run("ConvGrad", [dy, x, w], {"group": 2, "pads": [1, 0, 1, 0]}, threads=2)
    assert dx.shape == (1, 2, 0, 4) and dw.shape == w.shape and not dw.any()
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-6)
    # empty batch
    x = np.zeros((0, 3, 5, 5), np.float32)
    w = rng.normal(size=(3, 1, 3, 3)).astype(np.float32)
    dx, dw, db = lib.run("ConvGrad", [np.zeros((0, 3, 3, 3), np.float32), x, w], {"group": 3}, threads=2)
    assert dx.shape == x.shape and dw.shape == w.shape and not dw.any() and not db.any()


@pytest.mark.parametrize("name", ["k3_s1_pad", "k3_s2_nopad_odd", "long_rows"])
def test_depthwise_dw_nonfinite_x_stays_in_its_taps(lib, rng, name):
    """An inf in X reaches only the dW taps whose windows cover it (the masked row tails and the zero
    frame never multiply it): the finite / non-finite pattern of the float64 reference."""
    xs, ws, attrs = DW_CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, np.float32)
    x[0, 0, 1, -1] = np.inf
    x[-1, -1, -1, 0] = -np.inf
    with np.errstate(invalid="ignore"):
        rdw = conv_grads(dy, x, w, attrs)[1]
    dw = lib.run("ConvGrad", [dy, x, w], attrs, want_outputs=[False, True, False], threads=2)[1]
    np.testing.assert_array_equal(np.isfinite(dw), np.isfinite(rdw))
    fin = np.isfinite(rdw)
    np.testing.assert_allclose(dw[fin], rdw[fin], rtol=1e-4, atol=1e-3)
