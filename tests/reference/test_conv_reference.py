"""Proofs for the Conv forward and ConvGrad references (float64, fixed seeds).

The forward is checked against onnx.reference's Conv (an independent implementation); the gradient
against central differences of the forward (the vector-Jacobian identity) and by the adjoint identity
(Conv is linear in X and in W). Mutated references must fail the same checks.
"""
import numpy as np
import onnx_oracle  # onnx.reference, with the gaps of the pinned onnx releases filled (tests/reference)
import pytest

from reference.forward.conv import conv, conv_check, conv_output_shape, conv_resolved_pads
from reference.ops.conv_grad import conv_case_shapes, conv_grad, conv_grad_magnitude, conv_grad_reduction_lengths

ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def case(X, M, kernel_shape, **attrs):
    return dict(X=X, M=M, kernel_shape=kernel_shape, **attrs)


CONFIGS = {
    # 1-D
    "1d_basic": case([2, 3, 9], 4, [3]),
    "1d_asym_pads_stride_dil": case([2, 3, 11], 4, [3], pads=[2, 1], strides=[2], dilations=[2]),
    "1d_depthwise": case([1, 3, 8], 3, [3], group=3, pads=[1, 1]),
    "1d_depthwise_mult2": case([2, 3, 8], 6, [2], group=3, strides=[3]),
    "1d_pointwise": case([2, 5, 6], 3, [1]),
    "1d_stride_gt_kernel": case([1, 2, 10], 2, [2], strides=[3], pads=[0, 2]),
    "1d_same_upper": case([2, 2, 7], 3, [4], auto_pad="SAME_UPPER", strides=[2]),
    "1d_same_lower": case([2, 2, 7], 3, [4], auto_pad="SAME_LOWER", strides=[2]),
    "1d_same_lower_dil": case([1, 2, 9], 2, [3], auto_pad="SAME_LOWER", dilations=[2]),
    "1d_valid": case([2, 2, 7], 3, [3], auto_pad="VALID", strides=[2]),
    "1d_kernel_eq_input": case([2, 2, 5], 3, [5]),
    "1d_big_pads": case([1, 1, 3], 2, [2], pads=[4, 3]),
    # 2-D
    "2d_basic": case([2, 4, 7, 6], 6, [3, 3]),
    "2d_batch1": case([1, 3, 5, 5], 2, [2, 3]),
    "2d_asym_pads": case([2, 2, 6, 5], 3, [3, 2], pads=[1, 0, 2, 1]),
    "2d_stride_dil": case([2, 3, 9, 8], 4, [3, 2], strides=[2, 1], dilations=[1, 2], pads=[0, 1, 1, 0]),
    "2d_group2": case([2, 4, 6, 6], 6, [3, 3], group=2, pads=[1, 1, 1, 1]),
    "2d_depthwise": case([2, 4, 6, 5], 4, [3, 3], group=4, strides=[2, 2]),
    "2d_depthwise_mult2": case([1, 4, 6, 6], 8, [2, 2], group=4, dilations=[2, 1]),
    "2d_pointwise": case([2, 6, 4, 3], 5, [1, 1]),
    "2d_pointwise_stride": case([2, 3, 5, 7], 4, [1, 1], strides=[2, 3]),
    "2d_same_upper": case([1, 2, 7, 8], 3, [3, 2], auto_pad="SAME_UPPER", strides=[2, 3]),
    "2d_same_lower": case([1, 2, 7, 8], 3, [3, 2], auto_pad="SAME_LOWER", strides=[2, 3]),
    "2d_same_upper_group": case([2, 4, 5, 6], 4, [2, 4], auto_pad="SAME_UPPER", group=2),
    "2d_valid": case([1, 2, 7, 8], 3, [3, 2], auto_pad="VALID", strides=[2, 3]),
    "2d_stride_gt_kernel": case([1, 2, 9, 9], 2, [2, 2], strides=[4, 3]),
    "2d_output_1x1": case([2, 2, 4, 3], 3, [4, 3]),
    # 3-D
    "3d_basic": case([1, 2, 4, 5, 4], 3, [2, 3, 2]),
    "3d_asym_pads_stride": case([2, 2, 5, 4, 6], 2, [3, 2, 3], pads=[1, 0, 2, 0, 1, 1], strides=[2, 1, 2]),
    "3d_group2_dil": case([1, 4, 6, 5, 5], 4, [2, 2, 2], group=2, dilations=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1]),
    "3d_depthwise": case([2, 3, 4, 4, 5], 3, [3, 3, 3], group=3, pads=[1, 1, 1, 1, 1, 1]),
    "3d_pointwise": case([2, 3, 3, 4, 2], 2, [1, 1, 1]),
    "3d_same_lower": case([1, 2, 5, 6, 4], 2, [3, 2, 2], auto_pad="SAME_LOWER", strides=[2, 2, 1]),
    "3d_same_upper_group": case([1, 4, 4, 5, 3], 6, [2, 3, 2], auto_pad="SAME_UPPER", group=2),
}


def make_inputs(params, seed):
    rng = np.random.default_rng(seed)
    shapes = conv_case_shapes(params)
    X = rng.normal(size=shapes["X"])
    W = rng.normal(size=shapes["W"])
    B = rng.normal(size=(shapes["W"][0],))
    dY = rng.normal(size=shapes["dY"])
    return X, W, B, dY


def attrs_of(params):
    """Every attribute, defaults as None, as the harness passes them."""
    out = {k: params.get(k) for k in ATTRS}
    out["auto_pad"] = out["auto_pad"] or "NOTSET"
    out["group"] = out["group"] or 1
    return out


def vjp_gap(grad_fn, params, seed, eps=1e-3):
    """|<grads, tangents> - <dY, central difference of conv along the tangents>|, relative."""
    X, W, B, dY = make_inputs(params, seed)
    attrs = attrs_of(params)
    rng = np.random.default_rng(seed + 1)
    tX, tW, tB = rng.normal(size=X.shape), rng.normal(size=W.shape), rng.normal(size=B.shape)
    dX, dW, dB = grad_fn(dY, X, W, **attrs)
    lhs = np.vdot(dX, tX) + np.vdot(dW, tW) + np.vdot(dB, tB)
    plus = conv(X + eps * tX, W + eps * tW, B + eps * tB, **attrs)
    minus = conv(X - eps * tX, W - eps * tW, B - eps * tB, **attrs)
    rhs = np.vdot(dY, (plus - minus) / (2 * eps))
    scale = np.linalg.norm(dY) * (np.linalg.norm(tX) + np.linalg.norm(tW) + np.linalg.norm(tB))
    return abs(lhs - rhs) / scale


def onnx_conv(X, W, B, attrs):
    return onnx_oracle.conv(X, W, B, attrs)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_matches_onnx_reference(name):
    params = CONFIGS[name]
    X, W, B, _ = make_inputs(params, 11)
    attrs = attrs_of(params)
    expected = onnx_conv(X, W, B, attrs)
    got = conv(X, W, B, **attrs)
    assert got.shape == expected.shape == conv_output_shape(X.shape, W.shape, attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_vjp_identity(name):
    for seed in (0, 1):
        assert vjp_gap(conv_grad, CONFIGS[name], seed) < 1e-10


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_adjoint_identity(name):
    params = CONFIGS[name]
    X, W, _, dY = make_inputs(params, 5)
    attrs = attrs_of(params)
    Y = conv(X, W, **attrs)
    dX, dW, dB = conv_grad(dY, X, W, **attrs)
    inner = np.vdot(Y, dY)
    scale = np.abs(Y).ravel() @ np.abs(dY).ravel()
    assert abs(np.vdot(X, dX) - inner) <= 1e-12 * scale
    assert abs(np.vdot(W, dW) - inner) <= 1e-12 * scale
    np.testing.assert_allclose(dB, dY.sum(axis=(0,) + tuple(range(2, dY.ndim))), rtol=1e-13, atol=1e-13)
    assert dX.shape == X.shape and dW.shape == W.shape and dB.shape == (W.shape[0],)


# --- the checks can fail: mutated references -----------------------------------------------------------

def grad_with_swapped_pads(dY, X, W, **attrs):
    nd = X.ndim - 2
    pads = conv_resolved_pads(X.shape, W.shape, attrs)
    attrs = dict(attrs, auto_pad="NOTSET", pads=list(pads[nd:]) + list(pads[:nd]))
    return conv_grad(dY, X, W, **attrs)


def grad_with_flipped_kernel(dY, X, W, **attrs):
    dX, dW, dB = conv_grad(dY, X, W[(slice(None), slice(None)) + (slice(None, None, -1),) * (X.ndim - 2)], **attrs)
    return dX, dW, dB


def grad_ignoring_auto_pad(dY, X, W, **attrs):
    # onnxruntime-training 1.19.2's behaviour: SAME_* computed as if pads were 0.
    attrs = dict(attrs, auto_pad="NOTSET", pads=None)
    dY_valid = conv(X, W, **attrs)  # shape of the pads = 0 output
    crop = tuple(slice(0, n) for n in dY_valid.shape)
    return conv_grad(dY[crop], X, W, **attrs)


def grad_with_transposed_groups(dY, X, W, **attrs):
    g = attrs["group"]
    m = W.shape[0]
    perm = np.arange(m).reshape(m // g, g).T.ravel() if g > 1 else np.arange(m)[::-1]
    return conv_grad(dY[:, perm], X, W, **attrs)


@pytest.mark.parametrize("mutant, names", [
    (grad_with_swapped_pads, ["1d_asym_pads_stride_dil", "2d_asym_pads", "3d_asym_pads_stride",
                              "1d_same_upper", "1d_same_lower", "3d_same_lower"]),
    (grad_with_flipped_kernel, ["1d_basic", "2d_group2", "3d_depthwise"]),
    (grad_ignoring_auto_pad, ["2d_same_upper", "2d_same_lower", "3d_same_lower"]),
    (grad_with_transposed_groups, ["2d_group2", "2d_depthwise_mult2", "2d_basic"]),
])
def test_vjp_identity_catches_mutants(mutant, names):
    for name in names:
        assert vjp_gap(mutant, CONFIGS[name], 0) > 1e-3, name


def test_forward_check_catches_swapped_pads():
    params = CONFIGS["2d_asym_pads"]
    X, W, B, _ = make_inputs(params, 3)
    swapped = dict(attrs_of(params), pads=[2, 1, 1, 0])
    assert np.abs(conv(X, W, B, **swapped) - onnx_conv(X, W, B, attrs_of(params))).max() > 1e-2


# --- helpers for tolerances -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["2d_stride_dil", "3d_group2_dil", "1d_depthwise_mult2", "2d_same_lower"])
def test_magnitude_bounds_every_output(name):
    params = CONFIGS[name]
    X, W, _, dY = make_inputs(params, 9)
    attrs = attrs_of(params)
    grads = conv_grad(dY, X, W, **attrs)
    bounds = conv_grad_magnitude(dY, X, W, **attrs)
    for g, m in zip(grads, bounds):
        assert g.shape == m.shape
        assert np.all(np.abs(g) <= m * (1 + 1e-12))
    # All-positive inputs: no cancellation, so the bound is attained.
    same = conv_grad(np.abs(dY), np.abs(X), np.abs(W), **attrs)
    for g, m in zip(same, bounds):
        np.testing.assert_array_equal(g, m)


def brute_force_dx_terms(x_shape, w_shape, attrs):
    """Counts (m, tap, output pixel) terms per input element with explicit loops (small shapes only)."""
    out = conv_output_shape(x_shape, w_shape, attrs)
    nd = len(x_shape) - 2
    pads = conv_resolved_pads(x_shape, w_shape, attrs)
    strides = attrs.get("strides") or [1] * nd
    dilations = attrs.get("dilations") or [1] * nd
    mg = w_shape[0] // (attrs.get("group") or 1)
    counts = np.zeros(x_shape[2:], dtype=int)
    for o in np.ndindex(*out[2:]):
        for k in np.ndindex(*w_shape[2:]):
            pos = [o[i] * strides[i] + k[i] * dilations[i] - pads[i] for i in range(nd)]
            if all(0 <= p < n for p, n in zip(pos, x_shape[2:])):
                counts[tuple(pos)] += mg
    return int(counts.max())


@pytest.mark.parametrize("name", ["1d_asym_pads_stride_dil", "2d_stride_dil", "2d_group2", "3d_asym_pads_stride",
                                  "2d_stride_gt_kernel", "2d_same_upper", "3d_depthwise"])
def test_reduction_lengths(name):
    params = CONFIGS[name]
    X, W, _, dY = make_inputs(params, 2)
    attrs = attrs_of(params)
    k_dx, k_dw, k_db = conv_grad_reduction_lengths(dY, X, W, **attrs)
    assert k_dx == brute_force_dx_terms(X.shape, W.shape, attrs)
    assert k_dw == k_db == dY.shape[0] * int(np.prod(dY.shape[2:]))


# --- shape rules ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x, w, attrs, pads, out", [
    # SAME: ceil(7/2) = 4 outputs, total pad (4-1)*2 + 4 - 7 = 3; UPPER puts the extra 1 at the end.
    ([1, 1, 7], [1, 1, 4], {"auto_pad": "SAME_UPPER", "strides": [2]}, (1, 2), (1, 1, 4)),
    ([1, 1, 7], [1, 1, 4], {"auto_pad": "SAME_LOWER", "strides": [2]}, (2, 1), (1, 1, 4)),
    # Dilated kernel span 5: total pad 4 either way.
    ([1, 1, 9], [1, 1, 3], {"auto_pad": "SAME_LOWER", "dilations": [2]}, (2, 2), (1, 1, 9)),
    # Stride larger than the kernel: the needed pad would be negative, clamped to 0.
    ([1, 1, 7], [1, 1, 1], {"auto_pad": "SAME_UPPER", "strides": [5]}, (0, 0), (1, 1, 2)),
    ([2, 3, 7, 8], [4, 3, 3, 2], {"auto_pad": "VALID", "strides": [2, 3]}, (0, 0, 0, 0), (2, 4, 3, 3)),
    ([2, 4, 6, 5], [6, 2, 3, 2], {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1]}, (1, 0, 2, 1), (2, 6, 4, 5)),
    ([1, 2, 5, 6, 4], [2, 2, 3, 2, 2], {"pads": [0, 1, 0, 1, 0, 1], "dilations": [2, 1, 1]},
     (0, 1, 0, 1, 0, 1), (1, 2, 2, 6, 4)),
])
def test_resolved_pads_and_output_shape(x, w, attrs, pads, out):
    assert conv_resolved_pads(x, w, attrs) == pads
    assert conv_output_shape(x, w, attrs) == out
    assert conv_check({"X": x, "W": w, "dY": out}, attrs) is None


@pytest.mark.parametrize("shapes, attrs, words", [
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3], "dY": [2, 6, 4, 5]}, {}, "dY shape"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3], "dY": [2, 6, 4]}, {}, "dY shape"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"pads": [1, 1]}, "pads has 2 entries"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"strides": [1]}, "strides has 1 entries"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"dilations": [1]}, "dilations has 1 entries"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"kernel_shape": [3]}, "kernel_shape has 1 entries"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"kernel_shape": [3, 2]}, "kernel_shape [3, 2] differs"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"strides": [0, 1]}, "strides [0, 1] must all be >= 1"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"dilations": [1, 0]}, "dilations [1, 0] must all be >= 1"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"pads": [0, -1, 0, 0]}, "pads [0, -1, 0, 0] must all be >= 0"),
    ({"X": [2, 4, 6, 6], "W": [6, 2, 3, 3]}, {"group": 3}, "C=4 are not divisible by group=3"),
    ({"X": [2, 4, 6, 6], "W": [5, 2, 3, 3]}, {"group": 2}, "M=5 are not divisible by group=2"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"group": 2}, "W channels 4 != C/group"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"group": 0}, "group=0"),
    ({"X": [2, 4, 2, 6], "W": [6, 4, 3, 3]}, {}, "empty spatial output"),
    ({"X": [2, 4, 5, 6], "W": [6, 4, 3, 3]}, {"dilations": [3, 1]}, "empty spatial output"),
    ({"X": [2, 4], "W": [6, 4]}, {}, "rank 2"),
    ({"X": [1, 1, 2, 2, 2, 2], "W": [1, 1, 1, 1, 1, 1]}, {}, "rank 6"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3]}, {}, "W has rank 3"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"auto_pad": "SAME"}, "auto_pad='SAME'"),
    ({"X": [2, 4, 6, 6], "W": [6, 4, 3, 3]}, {"auto_pad": "SAME_UPPER", "pads": [1, 1, 1, 1]}, "cannot be combined"),
])
def test_conv_check_names_the_problem(shapes, attrs, words):
    message = conv_check(shapes, attrs)
    assert message is not None and words in message, message
    if "dY" not in shapes:
        with pytest.raises(ValueError, match=words.split()[0]):
            conv_output_shape(shapes["X"], shapes["W"], attrs)


def test_conv_grad_rejects_wrong_dy_shape():
    X, W = np.zeros((2, 4, 6, 6)), np.zeros((6, 4, 3, 3))
    with pytest.raises(ValueError, match="dY shape"):
        conv_grad(np.zeros((2, 6, 4, 5)), X, W)


def test_case_shapes():
    shapes = conv_case_shapes({"X": [2, 4, 7, 6], "M": 6, "kernel_shape": [3, 2], "group": 2, "strides": [2, 1],
                               "pads": [1, 0, 1, 0]})
    assert shapes == {"X": (2, 4, 7, 6), "W": (6, 2, 3, 2), "dY": (2, 6, 4, 5), "B": (6,)}
    explicit = conv_case_shapes({"X": [2, 4, 6, 6], "M": 6, "kernel_shape": [3, 3], "dY": [2, 6, 1, 1]})
    assert explicit["dY"] == (2, 6, 1, 1)
    with pytest.raises(ValueError, match="strides has 1 entries"):
        conv_case_shapes({"X": [2, 4, 6, 6], "M": 6, "kernel_shape": [3, 3], "strides": [1]})
    with pytest.raises(ValueError, match="not divisible by group=3"):
        conv_case_shapes({"X": [2, 4, 6, 6], "M": 6, "kernel_shape": [3, 3], "group": 3})


# --- edge cases -------------------------------------------------------------------------------------------

def test_inputs_are_not_mutated():
    X, W, _, dY = make_inputs(CONFIGS["2d_group2"], 4)
    copies = [a.copy() for a in (X, W, dY)]
    conv_grad(dY, X, W, **attrs_of(CONFIGS["2d_group2"]))
    conv(X, W, **attrs_of(CONFIGS["2d_group2"]))
    for a, c in zip((X, W, dY), copies):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("x, w", [([0, 2, 5, 5], [3, 2, 3, 3]), ([2, 2, 5, 5], [0, 2, 3, 3]),
                                  ([2, 0, 5, 5], [3, 0, 3, 3])])
def test_empty_batch_or_channels(x, w):
    rng = np.random.default_rng(0)
    X, W = rng.normal(size=x), rng.normal(size=w)
    dY = rng.normal(size=conv_output_shape(x, w, {}))
    dX, dW, dB = conv_grad(dY, X, W)
    assert dX.shape == X.shape and dW.shape == W.shape and dB.shape == (w[0],)
    assert not dX.any() and not dW.any()  # empty, or sums over nothing
    np.testing.assert_array_equal(dB, dY.sum(axis=(0, 2, 3)))
