"""DropoutGrad (com.microsoft): the VJP of reference.forward.dropout:dropout in its data input.

The forward op is linear in data for a given mask, so its gradient is the same map applied to dy:
dx = mask * dy / (1 - ratio) in training mode with ratio > 0, else dx = dy. A dropped element's
forward output is the constant 0, so its dx is exactly 0 even where dy is inf or NaN.
"""
import numpy as np

from reference.forward.dropout import RATIO_SHAPES, kept, ratio_value, training


def case_shapes(params):
    """{ratio: the group's `ratio_shape` param, a scalar when absent}; dy and mask follow the `shape` param."""
    return {"ratio": tuple(int(d) for d in params.get("ratio_shape", ()))}


def dropout_grad_check(shapes, attributes):
    """ratio holds one value: shape [] or [1] ([2], [1, 1] and the like are invalid)."""
    ratio = shapes.get("ratio")
    if ratio is not None and tuple(ratio) not in RATIO_SHAPES:
        return f"ratio has shape {list(ratio)}; it must hold one value (shape [] or [1])"
    return None


def dropout_grad(dy, mask, ratio=None, training_mode=None):
    """Return dx in float64."""
    dy = np.asarray(dy, dtype=np.float64)
    r, train = ratio_value(ratio), training(training_mode)
    keep = kept(mask, dy.shape)
    if not train or r == 0.0:
        return dy.copy()
    return np.where(keep, dy / (1.0 - r), 0.0)


def dropout_grad_mask_at_ratio_zero(dy, mask, ratio=None, training_mode=None):
    """A plausible wrong semantics: the mask applied even at ratio 0 (dx = mask * dy)."""
    dy = np.asarray(dy, dtype=np.float64)
    r, train = ratio_value(ratio), training(training_mode)
    if not train:
        return dy.copy()
    return np.where(kept(mask, dy.shape), dy / (1.0 - r), 0.0)


def dropout_grad_ignoring_training_mode(dy, mask, ratio=None, training_mode=None):
    """A plausible wrong semantics: training_mode ignored, the mask always applied (but not at ratio 0)."""
    dy = np.asarray(dy, dtype=np.float64)
    r = ratio_value(ratio)
    if r == 0.0:
        return dy.copy()
    return np.where(kept(mask, dy.shape), dy / (1.0 - r), 0.0)


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_bytes(shapes, attributes):
    """dy read, the bool mask read (1 byte an element), dx written."""
    return int(np.prod(shapes["dy"])) * (2 * 4 + 1)


def bench_fixed_bytes(shapes, attributes):
    """The mask's bytes, whatever the float type."""
    return int(np.prod(shapes["mask"]))


def bench_torch(inputs, attributes):
    import torch

    from reference._torch import tensors

    dy, mask = tensors(*inputs[:2])
    scale = 1.0 / (1.0 - float(inputs[2]))
    return lambda: torch.ops.aten.native_dropout_backward(dy, mask, scale)


# ---- model: a real graph's node -> case params (cases.from_node) -----------------------------------------------

def from_node(node):
    """dy's shape, and ratio's when it is a one-element tensor rather than a scalar (absent ratio: match omits it)."""
    params = {"shape": list(node.shape("dy"))}
    ratio = node.shapes.get("ratio")
    if ratio:
        params["ratio_shape"] = list(ratio)
    return params
