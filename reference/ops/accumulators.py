"""InPlaceAccumulatorV2, InPlaceAccumulator and ZeroGradient (com.microsoft): the gradient-accumulation ops of
ORT's training graphs, float64 NumPy.

Not gradients of forward ops: each is proven against an independent formulation in tests/test_accumulators.py
(exact rational sums, and N iterated accumulations against the sum of the gradients). Every case is one call;
across steps a training loop feeds accumulation_buffer_out back as accumulation_buffer (V2), new_sum back as
old_sum (V1), and zero_gradient back as the accumulator its graph resets.

value must have the buffer's shape (no broadcasting: an accumulator adds a gradient of its parameter's shape).
The flags (overwrite_flag, update_signal) hold one bool: shape [] or [1]. reset_signal is any tensor: ZeroGradient
never reads it (it orders the reset after the step that consumed the gradient).
"""
import numpy as np


def _flag(t, default: bool) -> bool:
    if t is None:
        return default
    return bool(np.asarray(t).reshape(-1)[0])


def in_place_accumulator_v2(accumulation_buffer, value, overwrite_flag=None):
    """Return (updated_flag, accumulation_buffer_out): [True] (shape [1]) and value when overwrite_flag is true,
    else accumulation_buffer + value, in float64."""
    b = np.asarray(accumulation_buffer, dtype=np.float64)
    v = np.asarray(value, dtype=np.float64)
    with np.errstate(all="ignore"):  # inf + -inf is NaN, a sum past the range inf: IEEE
        out = v.copy() if _flag(overwrite_flag, False) else b + v
    return np.ones([1], dtype=bool), out


def in_place_accumulator(old_sum, value, update_signal=None):
    """Return new_sum: old_sum + value, or old_sum unchanged when update_signal is false (absent: true)."""
    b = np.asarray(old_sum, dtype=np.float64)
    if not _flag(update_signal, True):
        return b.copy()
    with np.errstate(all="ignore"):
        return b + np.asarray(value, dtype=np.float64)


def zero_gradient(old_gradient, reset_signal):
    """Return zero_gradient: +0.0 of old_gradient's shape (NaN and inf in old_gradient included)."""
    return np.zeros(np.shape(old_gradient), dtype=np.float64)


# ---- plausible wrong semantics (alternative_semantics) ----

def v2_overwrite_inverted(accumulation_buffer, value, overwrite_flag=None):
    """overwrite_flag read the other way round (absent: overwrite)."""
    flag = None if overwrite_flag is None else np.logical_not(np.asarray(overwrite_flag))
    if overwrite_flag is None:
        flag = np.array(True)
    return in_place_accumulator_v2(accumulation_buffer, value, flag)


def v2_always_adds(accumulation_buffer, value, overwrite_flag=None):
    """overwrite_flag ignored: always accumulation_buffer + value."""
    return in_place_accumulator_v2(accumulation_buffer, value, None)


def v1_signal_ignored(old_sum, value, update_signal=None):
    """update_signal ignored: always old_sum + value."""
    return in_place_accumulator(old_sum, value, None)


def v1_false_returns_value(old_sum, value, update_signal=None):
    """update_signal false returns value (ORT's ENABLE_TRAINING_ON_DEVICE build), not old_sum."""
    if not _flag(update_signal, True):
        return np.asarray(value, dtype=np.float64).copy()
    return in_place_accumulator(old_sum, value, None)


# ---- case hooks ----

def case_shapes_v2(params):
    """overwrite_flag: the group's `flag_shape` param (a scalar when absent)."""
    return {"overwrite_flag": tuple(int(d) for d in params.get("flag_shape", ()))}


def case_shapes_v1(params):
    """update_signal: the group's `flag_shape` param (a scalar when absent)."""
    return {"update_signal": tuple(int(d) for d in params.get("flag_shape", ()))}


def case_shapes_zero(params):
    """reset_signal: the group's `signal_shape` param (a scalar when absent)."""
    return {"reset_signal": tuple(int(d) for d in params.get("signal_shape", ()))}


def _check(shapes, buffer, flag):
    b, v, f = shapes.get(buffer), shapes.get("value"), shapes.get(flag)
    if b is not None and v is not None and tuple(b) != tuple(v):
        return f"value has shape {list(v)}, {buffer} {list(b)}: they must be equal"
    if f is not None and int(np.prod(f, dtype=np.int64)) != 1:
        return f"{flag} has shape {list(f)}; it must hold exactly one bool"
    return None


def check_v2(shapes, attributes):
    """valid_if: value of the buffer's shape; overwrite_flag one value."""
    return _check(shapes, "accumulation_buffer", "overwrite_flag")


def check_v1(shapes, attributes):
    """valid_if: value of old_sum's shape; update_signal one value."""
    return _check(shapes, "old_sum", "update_signal")


# ---- bench ----

def bench_bytes_v2(shapes, attributes):
    """buffer and value read, buffer written: a triad's traffic (float32)."""
    return 12 * int(np.prod(shapes["accumulation_buffer"], dtype=np.int64))


def bench_bytes_v1(shapes, attributes):
    """old_sum and value read, new_sum written (float32)."""
    return 12 * int(np.prod(shapes["old_sum"], dtype=np.int64))


def bench_bytes_zero(shapes, attributes):
    """zero_gradient written (float32)."""
    return 4 * int(np.prod(shapes["old_gradient"], dtype=np.int64))


def bench_torch_add(inputs, attributes):
    """torch's in-place accumulation, buf.add_(g) (what autograd does to .grad)."""
    from reference._torch import tensors

    b, g = tensors(inputs[0], inputs[1])
    return lambda: b.add_(g)


def bench_torch_zero(inputs, attributes):
    """torch's optimizer.zero_grad(set_to_none=False): grad.zero_()."""
    from reference._torch import tensors

    (b,) = tensors(inputs[0])
    return lambda: b.zero_()


# ---- real graphs ----

def _from_node(node, buffer, flag):
    params = {"shape": list(node.shape(buffer))}
    if node.shapes.get(flag) is None:
        params["omit"] = [flag]
    elif node.shapes[flag]:
        params["flag_shape"] = list(node.shapes[flag])
    vt = node.dtypes.get("value")
    if vt and vt != node.dtypes.get(buffer):
        params["T_GRAD"] = vt
    return params


def from_node_v2(node):
    """the buffer's shape; overwrite_flag left out or its shape; value's dtype when it differs from the buffer's."""
    return _from_node(node, "accumulation_buffer", "overwrite_flag")


def from_node_v1(node):
    """old_sum's shape; update_signal left out or its shape; value's dtype when it differs from old_sum's."""
    return _from_node(node, "old_sum", "update_signal")


def from_node(node):
    """ZeroGradient: old_gradient's shape, reset_signal's shape and dtype."""
    params = {"shape": list(node.shape("old_gradient"))}
    s = node.shapes.get("reset_signal")
    if s:
        params["signal_shape"] = list(s)
    dt = node.dtypes.get("reset_signal")
    if dt:
        params["T2"] = dt
    return params
