"""ONNX Conv-11 in float64: N-D (1 to 3 spatial dims), groups, asymmetric pads, strides, dilations, auto_pad.

im2col as a strided view (sliding_window_view, then every stride-th window and every dilation-th tap),
one batched matmul per group: no Python loop over output pixels.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from reference.shapes import conv_check, conv_geometry


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
