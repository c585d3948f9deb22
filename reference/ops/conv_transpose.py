"""The VJP of ONNX ConvTranspose-11 with respect to X, W and B (training-graph spec ConvTransposeGradient).

ConvTranspose scatters X[n, c, i] * W[c, m, k] to the full output at i * stride + k * dilation, and Y is the
full output cropped by the begin pads (Y[o] = full[o + pad_begin]). Its adjoint gathers: the incoming gradient
is put back into the full output's coordinates (dfull, zero where Y does not reach), and then
    dX[n, c, i] = sum_{m in c's group, k} W[c, m, k] * dfull[n, m, i * stride + k * dilation]   (a Conv of dfull)
    dW[c, m, k] = sum_{n, i} X[n, c, i] * dfull[n, m, i * stride + k * dilation]
    dB[m]       = sum of dY over the batch and spatial axes.
The gather is one strided window view of dfull (reference.forward.conv.patches), no loop over pixels.
"""
import numpy as np

from reference.forward.conv import ConvGeometry, patches
from reference.forward.conv_transpose import ATTRIBUTE_NAMES, crop_window, geometry, output_shape


def _attrs(**kw):
    return {k: kw.get(k) for k in ATTRIBUTE_NAMES}


def conv_transpose_vjp(dY, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                       output_padding=None, output_shape=None, pads=None, strides=None):
    """(dX, dW, dB) for Y = ConvTranspose(X, W, B); dB has shape [M] (None when B is absent)."""
    dY, X, W = (np.asarray(a, dtype=np.float64) for a in (dY, X, W))
    g = geometry(X.shape, W.shape, _attrs(auto_pad=auto_pad, dilations=dilations, group=group,
                                          kernel_shape=kernel_shape, output_padding=output_padding,
                                          output_shape=output_shape, pads=pads, strides=strides))
    n, c = X.shape[:2]
    G, mg = g.group, W.shape[1]
    m = G * mg
    if dY.shape != (n, m) + g.out:
        raise ValueError(f"dY shape {list(dY.shape)} != ConvTranspose's output shape {[n, m, *g.out]}")
    dfull = np.zeros((n, m) + g.full)
    yi, fi = crop_window(g)
    dfull[(slice(None),) * 2 + fi] = dY[(slice(None),) * 2 + yi]
    nd = len(g.kernel)
    view = patches(dfull, ConvGeometry(g.kernel, g.strides, g.dilations, (0,) * (2 * nd), G))  # [N, M, *in, *k]
    pixels, taps = int(np.prod(X.shape[2:])), int(np.prod(g.kernel))
    P = view.reshape(n, G, mg, pixels, taps)
    Xg = X.reshape(n, G, c // G, pixels)
    Wg = W.reshape(G, c // G, mg, taps)
    dX = np.einsum("gcmk,ngmik->ngci", Wg, P).reshape(X.shape)
    dW = np.einsum("ngci,ngmik->gcmk", Xg, P).reshape(W.shape)
    dB = None if B is None else dY.sum(axis=(0,) + tuple(range(2, dY.ndim)))
    return dX, dW, dB


def conv_transpose_magnitude(dY, X, W, B=None, **attributes):
    """The same sums over |dY|, |X|, |W| (the accumulated terms' size), per output element."""
    return conv_transpose_vjp(np.abs(dY), np.abs(X), np.abs(W), B, **attributes)


def conv_transpose_reduction_lengths(dY, X, W, B=None, **attributes):
    """Terms summed into one element: dX (M/group * kernel taps), dW (N * input pixels), dB (N * output pixels)."""
    dY, X, W = np.asarray(dY), np.asarray(X), np.asarray(W)
    taps = int(np.prod(W.shape[2:]))
    return W.shape[1] * taps, X.shape[0] * int(np.prod(X.shape[2:])), dY.shape[0] * int(np.prod(dY.shape[2:]))


def case_shapes(params):
    """{X, W, dY, B} from case params {X: shape, M: output channels, kernel_shape, group, <attributes>}: W is
    [C, M/group, *kernel_shape] and dY ConvTranspose's output shape; an explicit W or dY param wins (invalid
    cases build mismatches that way). B is [M]."""
    x = tuple(int(d) for d in params["X"])
    group = 1 if params.get("group") is None else int(params["group"])
    m = int(params.get("M") or 1)
    if params.get("W") is not None:
        w = tuple(int(d) for d in params["W"])
    else:
        w = (x[1], max(m // group, 1)) + tuple(int(k) for k in params["kernel_shape"])
    if params.get("dY") is not None:
        dy = tuple(int(d) for d in params["dY"])
    else:
        try:
            dy = output_shape(x, w, {k: params.get(k) for k in ATTRIBUTE_NAMES})
        except ValueError:  # an invalid group's combination: any dY will do, valid_if names the problem
            dy = (x[0], w[1] * group) + x[2:]
    return {"X": x, "W": w, "dY": dy, "B": (w[1] * group,)}
