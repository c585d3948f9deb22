"""ConvGrad (com.microsoft): the VJP of ONNX Conv-11 with respect to X, W and B.

dW = per group cols^T @ dY (im2col); dX = per group dY @ W, scattered back by col2im (one strided
accumulation per kernel tap, never per output pixel); dB = dY summed over all axes but the channel.
auto_pad is applied as ONNX Conv does (not as onnxruntime-training 1.19.2's ConvGrad, which ignores it).
"""
import itertools

import numpy as np

from reference.forward.conv import ATTRIBUTE_NAMES, conv_output_shape, grouped_columns, grouped_weights, resolve, to_grouped_output


def _attrs(auto_pad, dilations, group, kernel_shape, pads, strides):
    return dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                strides=strides)


def _col2im(dcols, x_shape, out, geom):
    """Adjoint of im2col: dcols [G, N*P, Cg*Kp] summed back into dX [N, C, *spatial]."""
    n, c = x_shape[:2]
    g, nd = geom.group, len(out)
    kernel = geom.kernel_shape
    # [G, N*P, Cg*Kp] -> [N, G, Cg, *kernel, *out]
    view = dcols.reshape((g, n) + tuple(out) + (c // g,) + tuple(kernel))
    order = (1, 0, 2 + nd) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(2, 2 + nd))
    view = view.transpose(order)
    padded_dims = tuple(x_shape[2 + i] + geom.pads[i] + geom.pads[i + nd] for i in range(nd))
    padded = np.zeros((n, g, c // g) + padded_dims)
    for taps in itertools.product(*(range(k) for k in kernel)):
        # Tap k of output o reads input o*s + k*d: within one tap the targets are distinct.
        target = tuple(slice(k * d, k * d + s * (o - 1) + 1, s)
                       for k, d, s, o in zip(taps, geom.dilations, geom.strides, out))
        padded[(slice(None),) * 3 + target] += view[(slice(None),) * 3 + taps]
    crop = tuple(slice(geom.pads[i], geom.pads[i] + x_shape[2 + i]) for i in range(nd))
    return padded[(slice(None),) * 3 + crop].reshape(x_shape)


def conv_grad(dY, X, W, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
              strides=None):
    """(dX, dW, dB) for Y = conv(X, W, B); dB has shape [M]."""
    dY, X, W = (np.asarray(a, dtype=np.float64) for a in (dY, X, W))
    geom = resolve(X.shape, W.shape, _attrs(auto_pad, dilations, group, kernel_shape, pads, strides), dY.shape)
    cols, out = grouped_columns(X, geom)
    dYg = to_grouped_output(dY, geom.group)                    # [G, N*P, Mg]
    Wg = grouped_weights(W, geom)                              # [G, Mg, Cg*Kp]
    dW = (dYg.transpose(0, 2, 1) @ cols).reshape(W.shape)     # [G, Mg, Cg*Kp] -> [M, Cg, *kernel]
    dX = _col2im(dYg @ Wg, X.shape, out, geom)
    dB = dY.sum(axis=(0,) + tuple(range(2, dY.ndim)))
    return dX, dW, dB


def conv_grad_magnitude(dY, X, W, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                        strides=None):
    """Bounds on the accumulated terms, (|dX|, |dW|, |dB|)-shaped: the same sums over |dY|, |X|, |W|."""
    return conv_grad(np.abs(dY), np.abs(X), np.abs(W), auto_pad=auto_pad, dilations=dilations, group=group,
                     kernel_shape=kernel_shape, pads=pads, strides=strides)


def conv_grad_reduction_lengths(dY, X, W, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                                pads=None, strides=None):
    """Largest number of products summed into one element of (dX, dW, dB), as ints.

    dX: counted exactly (conv_grad of all-ones dY and W counts the (output channel, tap, pixel) terms
    reaching each input element); dW: N times the output pixels; dB: N times the output pixels.
    """
    dY, X, W = (np.asarray(a) for a in (dY, X, W))
    counts, _, _ = conv_grad(np.ones(dY.shape), np.zeros(X.shape), np.ones(W.shape), auto_pad=auto_pad,
                             dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                             strides=strides)
    k_dx = int(round(counts.max())) if counts.size else 0
    k_dw = int(dY.shape[0] * np.prod(dY.shape[2:]))
    return k_dx, k_dw, k_dw


def conv_weight_shape(x_shape, m, kernel_shape, group=1):
    return (int(m), int(x_shape[1]) // int(group)) + tuple(int(k) for k in kernel_shape)


def conv_case_shapes(params):
    """{"X", "W", "dY", "B"} shapes from case parameters {X: shape, M: int, kernel_shape, group, <attrs>}.

    An explicit "W" or "dY" in params wins (error cases use this to build invalid combinations);
    otherwise W is [M, C/group, *kernel_shape] and dY is the conv output shape, and a combination whose
    output shape is undefined raises ValueError naming the problem. B ([M]) is the forward Conv's bias:
    not a ConvGrad input, but the VJP check perturbs it to prove dB.
    """
    x = tuple(int(d) for d in params["X"])
    group = 1 if params.get("group") is None else int(params["group"])
    if params.get("W") is not None:
        w = tuple(int(d) for d in params["W"])
    else:
        if params.get("kernel_shape") is None:
            raise ValueError("conv case needs kernel_shape (or an explicit W shape) to build W")
        if group < 1 or len(x) < 2 or x[1] % group:
            raise ValueError(f"X channels of {list(x)} are not divisible by group={group}; give W explicitly")
        w = conv_weight_shape(x, params["M"], params["kernel_shape"], group)
    if params.get("dY") is not None:
        dy = tuple(int(d) for d in params["dY"])
    else:
        dy = conv_output_shape(x, w, {k: params.get(k) for k in ATTRIBUTE_NAMES})
    return {"X": x, "W": w, "dY": dy, "B": (w[0],)}


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_flops(shapes, attributes):
    """dX and dW are each one GEMM of 2 * N * M * (C / group) * prod(kernel) * prod(out) operations; dB is a sum."""
    return 2 * 2 * int(np.prod(shapes["dY"])) * int(np.prod(shapes["W"][1:]))


def bench_torch(inputs, attributes):
    import torch

    from reference._torch import tensors

    dy, x, w = tensors(*inputs)
    dims = x.dim() - 2
    strides = attributes.get("strides") or [1] * dims
    pads = (attributes.get("pads") or [0] * (2 * dims))[:dims]  # torch pads symmetrically: the begin pads
    dilations = attributes.get("dilations") or [1] * dims
    group = attributes.get("group") or 1
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, [w.shape[0]], strides, pads, dilations, False,
                                                       [0] * dims, group, [True, True, True])
