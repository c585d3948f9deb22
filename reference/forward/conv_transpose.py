"""ONNX ConvTranspose-11 in float64, NumPy (1 to 3 spatial dims, groups, strides, dilations, pads, output_padding,
output_shape, auto_pad).

onnx's reference evaluator is not used: onnx 1.17's ConvTranspose fails on group > 1 with more than one output
channel per group ("cannot reshape array") and returns other values than the operator's definition for depthwise
(group = C) kernels with strides and dilations. Written here as the operator defines it, a scatter: input pixel i
of channel c adds X[n, c, i] * W[c, m, k] to the full output at i * stride + k * dilation, for every output channel
m of c's group; the full output (length stride * (in - 1) + (kernel - 1) * dilation + 1) is then cropped by the
begin pads and extended with zeros (output_padding, negative pads), so that Y[o] = full[o + pad_begin].

Geometry (the ONNX schema): pads default 0, or computed from output_shape (or, with auto_pad SAME_*, from
output_shape = in * stride) as total = stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - out,
SAME_UPPER: begin = total // 2, else begin = total - total // 2; VALID: pads 0.
"""
import itertools
from typing import NamedTuple

import numpy as np

AUTO_PAD_VALUES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
ATTRIBUTE_NAMES = ("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads",
                   "strides")


class Geometry(NamedTuple):
    kernel: tuple
    strides: tuple
    dilations: tuple
    begins: tuple     # pads at the start of each spatial axis (negative: zeros added)
    full: tuple       # the uncropped output's spatial dims
    out: tuple        # Y's spatial dims
    group: int


def _ints(value):
    return None if value is None else tuple(int(v) for v in value)


def geometry(x_shape, w_shape, attrs) -> Geometry:
    """Resolved geometry; ValueError naming what makes the combination invalid."""
    x, w = tuple(int(d) for d in x_shape), tuple(int(d) for d in w_shape)
    if not 3 <= len(x) <= 5:
        raise ValueError(f"X has rank {len(x)}; ConvTranspose needs rank 3 to 5 (N, C and 1 to 3 spatial dims)")
    if len(w) != len(x):
        raise ValueError(f"W has rank {len(w)}, X has rank {len(x)}; they must be equal")
    nd = len(x) - 2
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if auto_pad not in AUTO_PAD_VALUES:
        raise ValueError(f"auto_pad={auto_pad!r} is not one of {', '.join(AUTO_PAD_VALUES)}")
    group = 1 if attrs.get("group") is None else int(attrs["group"])
    if group < 1:
        raise ValueError(f"group={group} must be >= 1")
    for name, length in (("kernel_shape", nd), ("strides", nd), ("dilations", nd), ("pads", 2 * nd),
                         ("output_padding", nd), ("output_shape", nd)):
        value = _ints(attrs.get(name))
        if value is not None and len(value) != length:
            raise ValueError(f"{name} has {len(value)} entries, {length} needed for {nd} spatial dim(s)")
    kernel = w[2:]
    if _ints(attrs.get("kernel_shape")) not in (None, kernel):
        raise ValueError(f"kernel_shape {list(attrs['kernel_shape'])} differs from W's spatial dims {list(kernel)}")
    if min(kernel, default=1) < 1:
        raise ValueError(f"W's spatial dims {list(kernel)} must all be >= 1")
    strides = _ints(attrs.get("strides")) or (1,) * nd
    dilations = _ints(attrs.get("dilations")) or (1,) * nd
    out_pad = _ints(attrs.get("output_padding")) or (0,) * nd
    if min(strides + dilations) < 1:
        raise ValueError(f"strides {list(strides)} and dilations {list(dilations)} must all be >= 1")
    if min(out_pad, default=0) < 0 or any(p >= max(s, d) for p, s, d in zip(out_pad, strides, dilations)):
        raise ValueError(f"output_padding {list(out_pad)} must be >= 0 and smaller than the stride or the dilation")
    if x[1] % group:
        raise ValueError(f"X channels C={x[1]} are not divisible by group={group}")
    if w[0] != x[1]:
        raise ValueError(f"W's first dim {w[0]} != X's channels C={x[1]} (W is [C, M/group, *kernel])")
    if min(x[2:], default=1) < 1 or x[0] < 1:
        raise ValueError(f"X {list(x)} has an empty axis")
    full = tuple(s * (i - 1) + (k - 1) * d + 1 for i, k, s, d in zip(x[2:], kernel, strides, dilations))
    pads = _ints(attrs.get("pads"))
    output_shape = _ints(attrs.get("output_shape"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and output_shape is None:
        output_shape = tuple(i * s for i, s in zip(x[2:], strides))
    if output_shape is not None:
        if pads is not None and any(pads):
            raise ValueError("pads cannot be combined with output_shape or auto_pad SAME_*")
        begins = []
        for f, p, o in zip(full, out_pad, output_shape):
            total = f + p - o
            begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        out = output_shape
    else:
        pads = (0,) * (2 * nd) if pads is None or auto_pad == "VALID" else pads
        if min(pads) < 0:
            raise ValueError(f"pads {list(pads)} must all be >= 0")
        if auto_pad == "VALID" and any(_ints(attrs.get("pads")) or ()):
            raise ValueError("pads cannot be combined with auto_pad VALID")
        begins = pads[:nd]
        out = tuple(f + p - pads[i] - pads[nd + i] for i, (f, p) in enumerate(zip(full, out_pad)))
    if min(out) < 1:
        raise ValueError(f"empty output {list(out)}: the pads crop away the whole of {list(full)}")
    return Geometry(kernel, strides, dilations, tuple(begins), full, tuple(out), group)


def output_shape(x_shape, w_shape, attrs) -> tuple:
    g = geometry(x_shape, w_shape, attrs)
    return (int(x_shape[0]), int(w_shape[1]) * g.group) + g.out


def check(shapes, attrs):
    """valid_if: the problem with this X, W, dY (and B) combination, or None."""
    try:
        y = output_shape(shapes["X"], shapes["W"], attrs)
    except ValueError as e:
        return str(e)
    if shapes.get("dY") is not None and tuple(shapes["dY"]) != y:
        return f"dY shape {list(shapes['dY'])} != ConvTranspose's output shape {list(y)}"
    if shapes.get("B") is not None and tuple(shapes["B"]) != (y[1],):
        return f"B shape {list(shapes['B'])} != [M] = [{y[1]}]"
    return None


def crop_window(g: Geometry):
    """For each spatial axis: (the slice of Y, the slice of the full output) that coincide."""
    yi, fi = [], []
    for b, f, o in zip(g.begins, g.full, g.out):
        lo, hi = max(0, b), min(f, b + o)  # full coordinates kept in Y
        yi.append(slice(lo - b, max(lo - b, hi - b)))
        fi.append(slice(lo, max(lo, hi)))
    return tuple(yi), tuple(fi)


def conv_transpose(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                 output_padding=output_padding, output_shape=output_shape, pads=pads, strides=strides)
    X = np.asarray(X, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    g = geometry(X.shape, W.shape, attrs)
    n, c = X.shape[:2]
    G, mg = g.group, W.shape[1]
    Xg = X.reshape((n, G, c // G) + X.shape[2:])
    Wg = W.reshape((G, c // G, mg) + g.kernel)
    full = np.zeros((n, G, mg) + g.full)
    for taps in itertools.product(*(range(k) for k in g.kernel)):
        # input pixel i lands on i * stride + tap * dilation
        contribution = np.einsum("ngc...,gcm->ngm...", Xg, Wg[(Ellipsis,) + taps])
        target = tuple(slice(t * d, t * d + s * (i - 1) + 1, s)
                       for t, d, s, i in zip(taps, g.dilations, g.strides, X.shape[2:]))
        full[(slice(None),) * 3 + target] += contribution
    full = full.reshape((n, G * mg) + g.full)
    Y = np.zeros((n, G * mg) + g.out)
    yi, fi = crop_window(g)
    Y[(slice(None),) * 2 + yi] = full[(slice(None),) * 2 + fi]
    if B is not None:
        B = np.asarray(B, dtype=np.float64)
        if B.shape != (G * mg,):
            raise ValueError(f"B shape {list(B.shape)} != [M] = [{G * mg}]")
        Y = Y + B.reshape((1, -1) + (1,) * len(g.out))
    return Y
