"""ConvGrad of the C library against a direct-loop float64 NumPy conv / conv-transpose."""
from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest


def geometry(xshape, wshape, attrs):
    """(pads_begin, pads_end, strides, dilations, out) per ONNX Conv, auto_pad included."""
    nd = len(xshape) - 2
    k = list(wshape[2:])
    s = list(attrs.get("strides", [1] * nd))
    d = list(attrs.get("dilations", [1] * nd))
    p = list(attrs.get("pads", [0] * (2 * nd)))
    mode = attrs.get("auto_pad", "NOTSET")
    pb, pe, out = [], [], []
    for j in range(nd):
        n, eff = xshape[2 + j], (k[j] - 1) * d[j] + 1
        if mode in ("SAME_UPPER", "SAME_LOWER"):
            o = math.ceil(n / s[j])
            total = max(0, (o - 1) * s[j] + eff - n)
            b = total // 2 if mode == "SAME_UPPER" else total - total // 2
            pb.append(b)
            pe.append(total - b)
        elif mode == "VALID":
            pb.append(0)
            pe.append(0)
        else:
            pb.append(p[j])
            pe.append(p[nd + j])
        out.append((n + pb[j] + pe[j] - eff) // s[j] + 1)
    return pb, pe, s, d, out


def _slices(kappa, s, d, out):
    return tuple(slice(kappa[j] * d[j], kappa[j] * d[j] + (out[j] - 1) * s[j] + 1, s[j]) for j in range(len(out)))


def conv_forward(x, w, attrs):
    x, w = x.astype(np.float64), w.astype(np.float64)
    g = attrs.get("group", 1)
    pb, pe, s, d, out = geometry(x.shape, w.shape, attrs)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pb, pe)))
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // g, m // g
    y = np.zeros((n, m, *out))
    for kappa in itertools.product(*[range(k) for k in w.shape[2:]]):
        sl = _slices(kappa, s, d, out)
        for gi in range(g):
            xs = xp[(slice(None), slice(gi * cg, (gi + 1) * cg)) + sl]
            wk = w[(slice(gi * mg, (gi + 1) * mg), slice(None)) + kappa]
            y[:, gi * mg:(gi + 1) * mg] += np.einsum("nc...,mc->nm...", xs, wk)
    return y


def conv_grads(dy, x, w, attrs):
    """Conv-transpose and weight correlation by kernel offset, in float64."""
    dy, x, w = dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64)
    g = attrs.get("group", 1)
    pb, pe, s, d, out = geometry(x.shape, w.shape, attrs)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pb, pe)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    c, m = x.shape[1], w.shape[0]
    cg, mg = c // g, m // g
    for kappa in itertools.product(*[range(k) for k in w.shape[2:]]):
        sl = _slices(kappa, s, d, out)
        for gi in range(g):
            cs, ms = slice(gi * cg, (gi + 1) * cg), slice(gi * mg, (gi + 1) * mg)
            dyg = dy[:, ms]
            xs = xp[(slice(None), cs) + sl]
            dw[(ms, slice(None)) + kappa] += np.einsum(
                "nmp,ncp->mc", dyg.reshape(dyg.shape[0], mg, -1), xs.reshape(xs.shape[0], cg, -1))
            dxp[(slice(None), cs) + sl] += np.einsum("nm...,mc->nc...", dyg, w[(ms, slice(None)) + kappa])
    crop = tuple(slice(pb[j], pb[j] + x.shape[2 + j]) for j in range(len(out)))
    dx = dxp[(slice(None), slice(None)) + crop]
    db = dy.sum(axis=tuple(i for i in range(dy.ndim) if i != 1))
    return dx, dw, db


CASES = {
    "1d": ((2, 3, 11), (4, 3, 3), {"pads": [1, 2], "strides": [2], "dilations": [2]}),
    "2d_basic": ((2, 4, 7, 6), (6, 4, 3, 3), {}),
    "2d_pad_stride": ((2, 4, 7, 6), (6, 4, 2, 3), {"pads": [1, 0, 1, 0], "strides": [2, 1]}),
    "2d_dilation": ((1, 3, 9, 8), (5, 3, 3, 3), {"dilations": [2, 2], "pads": [2, 1, 0, 3]}),
    "2d_kernel_shape_attr": ((2, 3, 6, 6), (4, 3, 3, 2), {"kernel_shape": [3, 2], "strides": [1, 2]}),
    "group2": ((2, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise": ((2, 4, 6, 6), (4, 1, 3, 3), {"group": 4}),
    "depthwise_x2": ((2, 4, 6, 6), (8, 1, 3, 3), {"group": 4, "strides": [2, 2]}),
    "same_upper": ((1, 2, 7, 8), (3, 2, 3, 2), {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    "same_lower": ((1, 2, 7, 8), (3, 2, 3, 2), {"strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    "same_dilated": ((1, 2, 7, 8), (3, 2, 3, 2), {"dilations": [2, 2], "auto_pad": "SAME_LOWER"}),
    "valid": ((1, 2, 7, 8), (3, 2, 3, 2), {"strides": [2, 3], "auto_pad": "VALID"}),
    "3d": ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}),
    "3d_group": ((2, 4, 4, 5, 3), (4, 2, 3, 3, 1), {"group": 2, "pads": [1, 1, 0, 1, 1, 0]}),
    "stride_gt_kernel": ((1, 2, 9, 9), (2, 2, 2, 2), {"strides": [3, 3]}),
    "kernel_eq_input": ((2, 3, 4, 5), (2, 3, 4, 5), {}),
    "pointwise": ((2, 8, 5, 5), (4, 8, 1, 1), {}),
    "pointwise_group": ((2, 8, 5, 5), (4, 4, 1, 1), {"group": 2}),
    "pointwise_strided": ((2, 8, 5, 5), (4, 8, 1, 1), {"strides": [2, 2]}),
    "chunked": ((1, 64, 30, 30), (8, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "batch8_chunked": ((8, 32, 20, 20), (16, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}),
    "one_image_one_channel": ((1, 1, 64, 64), (64, 1, 3, 3), {"pads": [1, 1, 1, 1]}),  # serial items, split GEMMs
    "4d_spatial": ((1, 2, 3, 4, 3, 4), (2, 2, 2, 2, 1, 2), {"pads": [0, 1, 0, 0, 1, 0, 0, 1]}),
    # eight or more dW items: float32 dW^T through opc_sgemm_packed (CONV_PACKED), pointwise, grouped, and
    # 40 filters (a whole and a partial panel at AVX-512)
    "pointwise_batch8": ((8, 8, 5, 5), (4, 8, 1, 1), {}),
    "group2_batch8": ((8, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "3d_batch8_m40": ((8, 4, 6, 5, 4), (40, 4, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
}


def make(rng, xs, ws, attrs, dtype):
    out = geometry(xs, ws, attrs)[4]
    x = rng.normal(size=xs).astype(dtype)
    w = rng.normal(size=ws).astype(dtype)
    dy = rng.normal(size=(xs[0], ws[0], *out)).astype(dtype)
    return dy, x, w


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_adjoint(lib, rng, name, dtype):
    xs, ws, attrs = CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, dtype)
    dx, dw, db = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    rdx, rdw, rdb = conv_grads(dy, x, w, attrs)
    k = max(1, int(np.prod(ws[1:])) * ws[0])  # generous reduction length
    tol = (1e-5 * math.sqrt(k * xs[0] * np.prod(dy.shape[2:]))) if dtype == np.float32 else 1e-11
    for a, r, nm in ((dx, rdx, "dX"), (dw, rdw, "dW"), (db, rdb, "dB")):
        assert a.dtype == dtype and a.shape == r.shape, nm
        np.testing.assert_allclose(a, r, atol=tol, rtol=1e-5 if dtype == np.float32 else 1e-10, err_msg=nm)
    if dtype == np.float64:  # adjoint identity against the forward: <conv(x, w), dy> = <x, dX> = <w, dW>
        y = conv_forward(x, w, attrs)
        lhs = float((y * dy).sum())
        assert math.isclose(lhs, float((x * dx).sum()), rel_tol=1e-10, abs_tol=1e-9)
        assert math.isclose(lhs, float((w * dw).sum()), rel_tol=1e-10, abs_tol=1e-9)


@pytest.mark.parametrize("name", ["1d", "2d_pad_stride", "group2", "depthwise_x2", "same_upper", "3d_group",
                                  "pointwise", "chunked", "batch8_chunked", "one_image_one_channel"])
def test_float16_within_spec_tolerance(lib, rng, catalog, name):
    """float16 is computed in float32 and rounded once: within the spec's float16 tolerance (its
    default plus the float32-accumulation reduction term) of the float64 reference."""
    from harness.core.compare import compare
    from harness.core.tolerance import allowances
    from reference.ops.conv_grad import conv_grad

    xs, ws, attrs = CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, np.float16)
    got = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    expected = list(conv_grad(dy, x, w, **attrs))
    spec = catalog.by_op("ConvGrad")
    tol = catalog.tolerance(spec, "float16")
    extra, _ = allowances(spec, {"dY": dy, "X": x, "W": w}, attrs, "float16", expected)
    for out, a, e, allowance in zip(("dX", "dW", "dB"), got, expected, extra):
        assert a.dtype == np.float16, out
        verdict = compare(a, e, "float16", tol, allowance)
        assert verdict.passed, f"{out}: {verdict.problems}"


@pytest.mark.parametrize("name", ["2d_basic", "group2", "chunked", "pointwise", "3d", "same_lower"])
def test_output_subsets_bitwise(lib, rng, name):
    xs, ws, attrs = CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, np.float32)
    full = lib.run("ConvGrad", [dy, x, w], attrs, threads=2)
    for want in itertools.product([True, False], repeat=3):
        part = lib.run("ConvGrad", [dy, x, w], attrs, want_outputs=list(want), threads=2)
        for i in range(3):
            if want[i]:
                assert np.array_equal(part[i], full[i]), (want, i)
            else:
                assert part[i] is None


@pytest.mark.parametrize("name", ["batch8_chunked", "chunked", "pointwise_group", "one_image_one_channel",
                                  "pointwise_batch8", "3d_batch8_m40"])
def test_threads(lib, rng, name):
    xs, ws, attrs = CASES[name]
    dy, x, w = make(rng, xs, ws, attrs, np.float32)
    runs = [lib.run("ConvGrad", [dy, x, w], attrs, threads=t) for t in (1, 2, 3, 4)]
    for r in runs[1:]:  # fixed work items, GEMM blocks and summation order: bitwise, dW and dB too
        for i in range(3):
            np.testing.assert_array_equal(r[i], runs[0][i], err_msg=("dX", "dW", "dB")[i])


def test_empty_batch_and_channels(lib, rng):
    x = np.zeros((0, 2, 5, 5), np.float32)
    w = rng.normal(size=(3, 2, 3, 3)).astype(np.float32)
    dx, dw, db = lib.run("ConvGrad", [np.zeros((0, 3, 3, 3), np.float32), x, w], {})
    assert dx.shape == (0, 2, 5, 5) and not dw.any() and dw.shape == w.shape and not db.any()
    x = rng.normal(size=(2, 2, 5, 5)).astype(np.float32)
    dx, dw, db = lib.run("ConvGrad", [np.zeros((2, 0, 3, 3), np.float32), x, np.zeros((0, 2, 3, 3), np.float32)], {})
    assert not dx.any() and dx.shape == x.shape and dw.shape == (0, 2, 3, 3) and db.shape == (0,)


def test_empty_spatial_input_with_padding(lib, rng):
    x = np.zeros((1, 2, 0, 4), np.float32)
    w = rng.normal(size=(3, 2, 1, 1)).astype(np.float32)
    dy = rng.normal(size=(1, 3, 2, 4)).astype(np.float32)
    dx, dw, db = lib.run("ConvGrad", [dy, x, w], {"pads": [1, 0, 1, 0]})
    assert dx.shape == (1, 2, 0, 4) and not dw.any()
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-6)


# ---- invalid inputs ---------------------------------------------------------------------------

X2 = np.zeros((2, 4, 6, 6), np.float32)
W2 = np.zeros((6, 4, 3, 3), np.float32)
DY2 = np.zeros((2, 6, 4, 4), np.float32)

BAD = [
    ("dy_wrong_n", [np.zeros((1, 6, 4, 4), np.float32), X2, W2], {}, "INVALID_ARGUMENT", "conv output shape [2, 6, 4, 4]"),
    ("dy_wrong_m", [np.zeros((2, 5, 4, 4), np.float32), X2, W2], {}, "INVALID_ARGUMENT", "differs from the conv output"),
    ("dy_wrong_spatial", [np.zeros((2, 6, 4, 5), np.float32), X2, W2], {}, "INVALID_ARGUMENT", "differs from the conv output"),
    ("dy_rank", [np.zeros((2, 6, 16), np.float32), X2, W2], {}, "INVALID_ARGUMENT", "dY rank 3"),
    ("pads_len", [DY2, X2, W2], {"pads": [1, 1]}, "INVALID_ATTRIBUTE", "'pads' must have 4 entries"),
    ("pads_too_long", [DY2, X2, W2], {"pads": [0] * 6}, "INVALID_ATTRIBUTE", "'pads' must have 4 entries"),
    ("strides_len", [DY2, X2, W2], {"strides": [1]}, "INVALID_ATTRIBUTE", "'strides' must have 2 entries"),
    ("dilations_len", [DY2, X2, W2], {"dilations": [1]}, "INVALID_ATTRIBUTE", "'dilations' must have 2 entries"),
    ("strides_zero", [DY2, X2, W2], {"strides": [0, 0]}, "INVALID_ATTRIBUTE", "'strides'[0] = 0 is out of range"),
    ("dilations_zero", [DY2, X2, W2], {"dilations": [1, 0]}, "INVALID_ATTRIBUTE", "'dilations'[1] = 0"),
    ("pads_negative", [DY2, X2, W2], {"pads": [0, -1, 0, 0]}, "INVALID_ATTRIBUTE", "'pads'[1] = -1"),
    ("group_c", [DY2, X2, np.zeros((6, 1, 3, 3), np.float32)], {"group": 3}, "INVALID_ARGUMENT", "C=4 are not divisible by group=3"),
    ("group_m", [np.zeros((2, 5, 4, 4), np.float32), X2, np.zeros((5, 2, 3, 3), np.float32)], {"group": 2},
     "INVALID_ARGUMENT", "M=5 (W.shape[0]) are not divisible by group=2"),
    ("group_zero", [DY2, X2, W2], {"group": 0}, "INVALID_ATTRIBUTE", "group must be >= 1"),
    ("w_channels", [DY2, X2, np.zeros((6, 3, 3, 3), np.float32)], {}, "INVALID_ARGUMENT", "W.shape[1]=3 must equal C/group=4"),
    ("kernel_shape", [DY2, X2, W2], {"kernel_shape": [3, 2]}, "INVALID_ATTRIBUTE", "kernel_shape [3, 2] differs"),
    ("x_rank2", [np.zeros((2, 6), np.float32), np.zeros((2, 4), np.float32), np.zeros((6, 4), np.float32)], {},
     "INVALID_ARGUMENT", "X must have rank >= 3"),
    ("w_rank", [DY2, X2, np.zeros((6, 4, 3), np.float32)], {}, "INVALID_ARGUMENT", "W rank 3 differs"),
    ("auto_pad_bad", [DY2, X2, W2], {"auto_pad": "SAME"}, "INVALID_ATTRIBUTE", "auto_pad 'SAME' is not one of"),
    ("auto_pad_with_pads", [DY2, X2, W2], {"auto_pad": "SAME_UPPER", "pads": [1, 1, 1, 1]}, "INVALID_ATTRIBUTE",
     "cannot be combined"),
    ("kernel_too_big", [np.zeros((2, 6, 1, 1), np.float32), np.zeros((2, 4, 2, 2), np.float32), W2], {},
     "INVALID_ARGUMENT", "exceeds the padded input"),
    ("kernel_zero", [DY2, X2, np.zeros((6, 4, 0, 3), np.float32)], {}, "INVALID_ARGUMENT", "kernel dims must be >= 1"),
    ("dtype_mix", [DY2, X2.astype(np.float64), W2], {}, "UNSUPPORTED_DTYPE", "share one dtype"),
    ("bfloat16", [DY2.astype(ml_dtypes.bfloat16), X2.astype(ml_dtypes.bfloat16), W2.astype(ml_dtypes.bfloat16)], {},
     "UNSUPPORTED_DTYPE", "bfloat16 is not supported"),
    ("missing_w", [DY2, X2, None], {}, "INVALID_ARGUMENT", "required input 2 (W) is missing"),
    ("unknown_attr", [DY2, X2, W2], {"padding": [1, 1]}, "UNKNOWN_ATTRIBUTE", "unknown attribute 'padding'"),
    ("strides_type", [DY2, X2, W2], {"strides": 1}, "INVALID_ATTRIBUTE", "'strides' must be of type ints"),
    ("huge_dilation", [DY2, X2, W2], {"dilations": [1 << 40, 1]}, "INVALID_ATTRIBUTE", "out of range"),
]


@pytest.mark.parametrize("name,ins,attrs,status,frag", BAD, ids=[b[0] for b in BAD])
def test_invalid(lib, name, ins, attrs, status, frag):
    with pytest.raises(lib.KernelError) as e:
        lib.run("ConvGrad", ins, attrs)
    assert e.value.status_name == "OPC_ERR_" + status, e.value
    assert frag in e.value.message, e.value.message
