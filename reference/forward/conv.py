"""ONNX Conv-11 in float64: N-D (1 to 3 spatial dims), groups, asymmetric pads, strides, dilations, auto_pad.

im2col as a strided view (sliding_window_view, then every stride-th window and every dilation-th tap),
one batched matmul per group: no Python loop over output pixels.

Shape rules: `attrs` is a dict with any of auto_pad, dilations, group, kernel_shape, pads, strides; a missing
key or None means the ONNX default (kernel_shape from W, strides and dilations 1, pads 0, group 1, NOTSET).
Pads are ONNX-ordered: all begins, then all ends.
"""
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

AUTO_PAD_VALUES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
ATTRIBUTE_NAMES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


class ConvGeometry(NamedTuple):
    """Resolved attributes: every list has one entry per spatial dim (pads: 2 per dim)."""

    kernel_shape: tuple
    strides: tuple
    dilations: tuple
    pads: tuple
    group: int


def _ints(value):
    return None if value is None else tuple(int(v) for v in value)


def conv_check(shapes, attrs):
    """One-line message naming what makes this Conv/ConvGrad combination invalid, or None if it is valid.

    `shapes` holds X and W (and dY when checking the gradient: it must equal the conv output shape).
    """
    x, w = tuple(shapes["X"]), tuple(shapes["W"])
    if not 3 <= len(x) <= 5:
        return f"X has rank {len(x)}; Conv needs rank 3 to 5 (N, C and 1 to 3 spatial dims)"
    if len(w) != len(x):
        return f"W has rank {len(w)}, X has rank {len(x)}; they must be equal"
    if any(d < 0 for d in x + w):
        return f"negative dimension in X {x} or W {w}"
    nd = len(x) - 2
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if auto_pad not in AUTO_PAD_VALUES:
        return f"auto_pad={auto_pad!r} is not one of {', '.join(AUTO_PAD_VALUES)}"
    group = attrs.get("group")
    group = 1 if group is None else int(group)
    if group < 1:
        return f"group={group} must be >= 1"
    for name, length in (("kernel_shape", nd), ("strides", nd), ("dilations", nd), ("pads", 2 * nd)):
        value = _ints(attrs.get(name))
        if value is not None and len(value) != length:
            return f"{name} has {len(value)} entries, {length} needed for {nd} spatial dim(s)"
    kernel_shape = _ints(attrs.get("kernel_shape"))
    if kernel_shape is not None and kernel_shape != w[2:]:
        return f"kernel_shape {list(kernel_shape)} differs from W's spatial dims {list(w[2:])}"
    for name in ("strides", "dilations"):
        value = _ints(attrs.get(name))
        if value is not None and min(value, default=1) < 1:
            return f"{name} {list(value)} must all be >= 1"
    pads = _ints(attrs.get("pads"))
    if pads is not None and min(pads, default=0) < 0:
        return f"pads {list(pads)} must all be >= 0"
    if pads is not None and auto_pad != "NOTSET" and any(pads):
        return f"pads {list(pads)} cannot be combined with auto_pad={auto_pad}"
    if min(w[2:], default=1) < 1:
        return f"W's spatial dims {list(w[2:])} must all be >= 1"
    c, m = x[1], w[0]
    if c % group:
        return f"X channels C={c} are not divisible by group={group}"
    if m % group:
        return f"W's output channels M={m} are not divisible by group={group}"
    if w[1] * group != c:
        return f"W channels {w[1]} != C/group = {c}/{group}"
    out = _output_shape(x, w, conv_geometry(x, w, attrs, checked=True))
    if min(out[2:]) < 1:
        return f"empty spatial output {list(out[2:])} for X {list(x)} and the dilated kernel"
    if "dY" in shapes and shapes["dY"] is not None and tuple(shapes["dY"]) != out:
        return f"dY shape {list(shapes['dY'])} != conv output shape {list(out)}"
    return None


def conv_geometry(x_shape, w_shape, attrs, *, checked=False):
    """Attributes with ONNX defaults filled in and auto_pad resolved into explicit pads."""
    if not checked:
        problem = conv_check({"X": x_shape, "W": w_shape}, attrs)
        if problem:
            raise ValueError(problem)
    nd = len(x_shape) - 2
    kernel = tuple(int(k) for k in w_shape[2:])
    strides = _ints(attrs.get("strides")) or (1,) * nd
    dilations = _ints(attrs.get("dilations")) or (1,) * nd
    group = 1 if attrs.get("group") is None else int(attrs["group"])
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if auto_pad == "NOTSET":
        pads = _ints(attrs.get("pads")) or (0,) * (2 * nd)
    elif auto_pad == "VALID":
        pads = (0,) * (2 * nd)
    else:
        begins, ends = [], []
        for size, k, s, d in zip(x_shape[2:], kernel, strides, dilations):
            target = -(-size // s)  # ceil: SAME keeps ceil(input / stride) outputs
            total = max(0, (target - 1) * s + (k - 1) * d + 1 - size)
            # SAME_UPPER puts the odd extra pad at the end, SAME_LOWER at the beginning.
            begin = total // 2 if auto_pad == "SAME_UPPER" else (total + 1) // 2
            begins.append(begin)
            ends.append(total - begin)
        pads = tuple(begins + ends)
    return ConvGeometry(kernel, strides, dilations, pads, group)


def _output_shape(x_shape, w_shape, geom):
    nd = len(x_shape) - 2
    spatial = tuple(
        (size + geom.pads[i] + geom.pads[i + nd] - ((k - 1) * d + 1)) // s + 1
        for i, (size, k, s, d) in enumerate(zip(x_shape[2:], geom.kernel_shape, geom.strides, geom.dilations))
    )
    return (int(x_shape[0]), int(w_shape[0])) + spatial


def conv_resolved_pads(x_shape, w_shape, attrs):
    """The explicit pads (begins, then ends) Conv uses, with auto_pad applied."""
    return conv_geometry(tuple(x_shape), tuple(w_shape), attrs).pads


def conv_output_shape(x_shape, w_shape, attrs):
    """Y's (and so dY's) shape; raises ValueError naming the problem for an invalid combination."""
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    problem = conv_check({"X": x_shape, "W": w_shape}, attrs)
    if problem:
        raise ValueError(problem)
    return _output_shape(x_shape, w_shape, conv_geometry(x_shape, w_shape, attrs, checked=True))


def resolve(X_shape, W_shape, attrs, dY_shape=None):
    """Validated geometry; ValueError naming the problem otherwise."""
    shapes = {"X": tuple(X_shape), "W": tuple(W_shape)}
    if dY_shape is not None:
        shapes["dY"] = tuple(dY_shape)
    problem = conv_check(shapes, attrs)
    if problem:
        raise ValueError(problem)
    return conv_geometry(shapes["X"], shapes["W"], attrs, checked=True)


def pad_input(X, geom):
    nd = X.ndim - 2
    widths = [(0, 0), (0, 0)] + [(geom.pads[i], geom.pads[i + nd]) for i in range(nd)]
    return np.pad(X, widths)


def patches(Xp, geom):
    """View [N, C, *out, *kernel] of the padded input: patches[n, c, o..., k...] = Xp[n, c, o*s + k*d]."""
    nd = Xp.ndim - 2
    span = tuple((k - 1) * d + 1 for k, d in zip(geom.kernel_shape, geom.dilations))
    windows = sliding_window_view(Xp, span, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in geom.strides)
    index += tuple(slice(None, None, d) for d in geom.dilations)
    return windows[index]


def grouped_columns(X, geom):
    """im2col matrix per group: [G, N*P, Cg*Kp] (P output pixels, Kp kernel taps), plus the output dims."""
    n, c = X.shape[:2]
    g = geom.group
    view = patches(pad_input(X, geom), geom)
    nd = X.ndim - 2
    out = view.shape[2:2 + nd]
    view = view.reshape((n, g, c // g) + view.shape[2:])
    # [N, G, Cg, *out, *kernel] -> [G, N, *out, Cg, *kernel]
    order = (1, 0) + tuple(range(3, 3 + nd)) + (2,) + tuple(range(3 + nd, 3 + 2 * nd))
    cols = view.transpose(order).reshape(g, n * int(np.prod(out)), (c // g) * int(np.prod(geom.kernel_shape)))
    return cols, out


def grouped_weights(W, geom):
    """[M, Cg, *kernel] -> [G, Mg, Cg*Kp]."""
    g = geom.group
    return W.reshape(g, W.shape[0] // g, int(np.prod(W.shape[1:])))


def from_grouped_output(Yg, n, out):
    """[G, N*P, Mg] -> [N, M, *out]."""
    g, _, mg = Yg.shape
    nd = len(out)
    Y = Yg.reshape((g, n) + tuple(out) + (mg,))
    order = (1, 0, 2 + nd) + tuple(range(2, 2 + nd))
    return Y.transpose(order).reshape((n, g * mg) + tuple(out))


def to_grouped_output(dY, g):
    """[N, M, *out] -> [G, N*P, Mg], the inverse of from_grouped_output."""
    n, m = dY.shape[:2]
    out = dY.shape[2:]
    nd = len(out)
    view = dY.reshape((n, g, m // g) + out)
    order = (1, 0) + tuple(range(3, 3 + nd)) + (2,)
    return view.transpose(order).reshape(g, n * int(np.prod(out)), m // g)


def conv(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    X = np.asarray(X, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    geom = resolve(X.shape, W.shape, attrs)
    cols, out = grouped_columns(X, geom)
    Y = from_grouped_output(cols @ grouped_weights(W, geom).transpose(0, 2, 1), X.shape[0], out)
    if B is not None:
        B = np.asarray(B, dtype=np.float64)
        if B.shape != (W.shape[0],):
            raise ValueError(f"B shape {list(B.shape)} != [M] = [{W.shape[0]}]")
        Y = Y + B.reshape((1, -1) + (1,) * len(out))
    return Y
