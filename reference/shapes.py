"""Shape rules for ONNX Conv-11 and its gradient: attribute defaults, auto_pad, output shape, validity.

`attrs` is a dict with any of auto_pad, dilations, group, kernel_shape, pads, strides; a missing key or
None means the ONNX default (kernel_shape from W, strides and dilations 1, pads 0, group 1, NOTSET).
Pads are ONNX-ordered: all begins, then all ends.
"""
import math
from typing import NamedTuple

from reference.forward.gru import gru_shapes
from reference.forward.lstm import lstm_shapes

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


def conv_weight_shape(x_shape, m, kernel_shape, group=1):
    return (int(m), int(x_shape[1]) // int(group)) + tuple(int(k) for k in kernel_shape)


def conv_bias_shape(w_shape):
    return (int(w_shape[0]),)


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


def gru_case_shapes(params):
    """GRUTraining / GRUGrad shapes from case parameters {seq, batch, input_size, hidden_size, direction?}.

    The sequence_lens input is left out (None) unless params has `with_sequence_lens: true`: most backends
    reject it, so cases give it only where they mean to.
    """
    directions = 2 if params.get("direction") == "bidirectional" else 1
    shapes = gru_shapes(params["seq"], params["batch"], params["input_size"], params["hidden_size"], directions)
    if not params.get("with_sequence_lens"):
        shapes["sequence_lens"] = None
    return shapes


def lstm_case_shapes(params):
    """LSTMTraining shapes from case parameters {seq, batch, input_size, hidden_size, direction?}.

    sequence_lens is left out (None) unless params has `with_sequence_lens: true`, and the peepholes P
    unless `with_peepholes: true` (ONNX's default LSTM has none), so cases give them only where they mean to.
    """
    directions = 2 if params.get("direction") == "bidirectional" else 1
    shapes = lstm_shapes(params["seq"], params["batch"], params["input_size"], params["hidden_size"], directions)
    if not params.get("with_sequence_lens"):
        shapes["sequence_lens"] = None
    if not params.get("with_peepholes"):
        shapes["P"] = None
    return shapes


def lstm_grad_case_shapes(params):
    """LSTMGrad shapes: lstm_case_shapes, with the forward-only B and P always given (LSTMGrad takes neither;
    its spec draws P as zeros, the point its dP is the gradient at)."""
    return lstm_case_shapes({**params, "with_peepholes": True})


def layer_norm_row_shape(shapes, context):
    """scale's (and LayerNormalization's B's) shape: X's dims from `axis` on; X's own shape if axis is out of range
    (an invalid case the axis check reports)."""
    x = tuple(shapes["X"])
    axis = int(context.get("axis", -1))
    return x[axis % len(x):] if x and -len(x) <= axis < len(x) else x


def layer_norm_stats_check(shapes, attrs):
    """valid_if for the LayerNorm gradients: each saved statistic (mean, inv_std_var) holds one value per row."""
    x = tuple(shapes["X"])
    axis = int(attrs.get("axis", -1))
    if not -len(x) <= axis < len(x):
        return None  # the axis check reports it
    rows = math.prod(x[: axis % len(x)])
    for name in ("mean", "inv_std_var"):
        if shapes.get(name) is not None and math.prod(shapes[name]) != rows:
            return f"{name} has {math.prod(shapes[name])} elements; one per row of X ({rows}) needed"
    return None
