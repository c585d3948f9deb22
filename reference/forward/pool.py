"""ONNX MaxPool-12 (with its Indices output) and AveragePool-11 in float64, 1 to 3 spatial dims.

Window geometry follows the ONNX operator docs: output size floor (or, with ceil_mode, ceil) of
(in + pad_begin + pad_end - dilated_kernel) / stride + 1, where a ceil-mode window that would start in
the end padding is dropped; auto_pad SAME_* keeps ceil(in / stride) outputs and puts the odd extra pad
at the end (UPPER) or the beginning (LOWER); VALID pads nothing. Pads are ONNX-ordered: all begins,
then all ends.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

AUTO_PAD_VALUES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


class PoolGeometry(NamedTuple):
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads: tuple  # begins, then ends
    out: tuple  # output spatial dims


def _ints(value, default):
    return default if value is None or len(value) == 0 else tuple(int(v) for v in value)


def pool_problem(in_spatial, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=0,
                 auto_pad="NOTSET") -> str | None:
    """One line naming what makes this pooling invalid, or None."""
    nd = len(in_spatial)
    if not 1 <= nd <= 3:
        return f"{nd} spatial dim(s); pooling takes 1 to 3 (rank 3 to 5 with N and C)"
    if kernel_shape is None or len(kernel_shape) != nd:
        return f"kernel_shape {kernel_shape} needs {nd} entries, one per spatial dim"
    for name, value, length, low in (("kernel_shape", kernel_shape, nd, 1), ("strides", strides, nd, 1),
                                     ("dilations", dilations, nd, 1), ("pads", pads, 2 * nd, 0)):
        if value is not None and len(value) not in (0, length):
            return f"{name} has {len(value)} entries, {length} needed for {nd} spatial dim(s)"
        if value is not None and min(value, default=low) < low:
            return f"{name} {list(value)} must all be >= {low}"
    if auto_pad not in AUTO_PAD_VALUES:
        return f"auto_pad={auto_pad!r} is not one of {', '.join(AUTO_PAD_VALUES)}"
    if auto_pad != "NOTSET" and pads is not None and any(pads):
        return f"pads {list(pads)} cannot be combined with auto_pad={auto_pad}"
    if ceil_mode not in (0, 1):
        return f"ceil_mode={ceil_mode} must be 0 or 1"
    geom = pool_geometry(in_spatial, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)
    for i in range(nd):
        k = (geom.kernel[i] - 1) * geom.dilations[i] + 1
        if geom.pads[i] >= k or geom.pads[i + nd] >= k:
            return f"pads {list(geom.pads)} must be smaller than the (dilated) kernel {k} on every side"
    if min(geom.out) < 1:
        return f"the window {list(kernel_shape)} does not fit the padded input {list(in_spatial)}: no output"
    return None


def pool_geometry(in_spatial, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=0,
                  auto_pad="NOTSET") -> PoolGeometry:
    nd = len(in_spatial)
    kernel = tuple(int(k) for k in kernel_shape)
    strides = _ints(strides, (1,) * nd)
    dilations = _ints(dilations, (1,) * nd)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out, begins, ends = [], [], []
        for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
            o = -(-size // s)
            total = max(0, (o - 1) * s + (k - 1) * d + 1 - size)
            begin = total // 2 if auto_pad == "SAME_UPPER" else (total + 1) // 2
            out.append(o)
            begins.append(begin)
            ends.append(total - begin)
        return PoolGeometry(kernel, strides, dilations, tuple(begins + ends), tuple(out))
    pads = (0,) * (2 * nd) if auto_pad == "VALID" else _ints(pads, (0,) * (2 * nd))
    out = []
    for i, (size, k, s, d) in enumerate(zip(in_spatial, kernel, strides, dilations)):
        span = size + pads[i] + pads[i + nd] - ((k - 1) * d + 1)
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= size + pads[i]:
            o -= 1  # a window starting in the end padding holds no input
        out.append(o)
    return PoolGeometry(kernel, strides, dilations, pads, tuple(out))


def output_shape(x_shape, **attrs) -> tuple:
    x_shape = tuple(int(d) for d in x_shape)
    return x_shape[:2] + pool_geometry(x_shape[2:], **attrs).out


def windows(in_spatial, geom: PoolGeometry):
    """(flat in-plane input index, inside-the-input mask, inside-the-padded-extent mask), each shaped
    [*out, kernel positions] with kernel positions in row-major order (the scan order of the argmax)."""
    nd = len(in_spatial)
    axes = []
    for i in range(nd):
        o = np.arange(geom.out[i])[:, None]
        pos = o * geom.strides[i] - geom.pads[i] + np.arange(geom.kernel[i])[None, :] * geom.dilations[i]
        axes.append(pos)  # [out_i, k_i]
    flat = np.zeros((*geom.out, *geom.kernel), dtype=np.int64)
    inside = np.ones_like(flat, dtype=bool)
    padded = np.ones_like(flat, dtype=bool)
    stride = 1
    for i in reversed(range(nd)):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = geom.out[i], geom.kernel[i]
        pos = axes[i].reshape(shape)
        inside = inside & (pos >= 0) & (pos < in_spatial[i])
        padded = padded & (pos >= -geom.pads[i]) & (pos < in_spatial[i] + geom.pads[i + nd])
        flat = flat + np.clip(pos, 0, max(in_spatial[i] - 1, 0)) * stride
        stride *= in_spatial[i]
    k = math.prod(geom.kernel)
    return flat.reshape(*geom.out, k), inside.reshape(*geom.out, k), padded.reshape(*geom.out, k)


def _attrs(kernel_shape, strides, pads, dilations, ceil_mode, auto_pad):
    return dict(kernel_shape=kernel_shape, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode,
                auto_pad=auto_pad)


def max_pool(X, *, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=0, auto_pad="NOTSET",
             storage_order=0):
    """(Y, Indices): Indices flat over the whole X (row-major, storage_order 0), the first maximum in
    window scan order; padding never wins."""
    if storage_order != 0:
        raise ValueError("storage_order=1 (column-major Indices) is not modelled: MaxPoolGrad reads row-major indices")
    x = np.asarray(X, dtype=np.float64)
    attrs = _attrs(kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)
    if problem := pool_problem(x.shape[2:], **attrs):
        raise ValueError(problem)
    geom = pool_geometry(x.shape[2:], **attrs)
    flat, inside, _ = windows(x.shape[2:], geom)
    planes = x.reshape(x.shape[0] * x.shape[1], math.prod(x.shape[2:]))
    values = np.where(inside, planes[:, flat], -np.inf)  # [planes, *out, k]
    arg = np.argmax(values, axis=-1)
    y = np.take_along_axis(values, arg[..., None], axis=-1)[..., 0]
    plane_size = planes.shape[1]
    within = np.take_along_axis(np.broadcast_to(flat, values.shape), arg[..., None], axis=-1)[..., 0]
    offsets = (np.arange(planes.shape[0]) * plane_size).reshape(-1, *([1] * len(geom.out)))
    out_shape = x.shape[:2] + geom.out
    return y.reshape(out_shape), (within + offsets).reshape(out_shape).astype(np.int64)


def average_pool(X, *, kernel_shape, strides=None, pads=None, ceil_mode=0, auto_pad="NOTSET",
                 count_include_pad=0):
    """Y: the window mean over the input elements it covers, or (count_include_pad) over every position
    inside the padded extent, padding counting as zeros."""
    x = np.asarray(X, dtype=np.float64)
    attrs = _attrs(kernel_shape, strides, pads, None, ceil_mode, auto_pad)
    if problem := pool_problem(x.shape[2:], **attrs):
        raise ValueError(problem)
    geom = pool_geometry(x.shape[2:], **attrs)
    flat, inside, padded = windows(x.shape[2:], geom)
    planes = x.reshape(x.shape[0] * x.shape[1], math.prod(x.shape[2:]))
    sums = np.where(inside, planes[:, flat], 0.0).sum(axis=-1)
    counts = (padded if count_include_pad else inside).sum(axis=-1)
    return (sums / counts).reshape(x.shape[:2] + geom.out)


def average_pool_divisors(in_spatial, geom: PoolGeometry, count_include_pad) -> np.ndarray:
    _, inside, padded = windows(in_spatial, geom)
    return (padded if count_include_pad else inside).sum(axis=-1)

