"""SliceGrad (com.microsoft): Slice's gradient, dY written back into zeros of X's shape at the positions Slice-13
read, X's shape given as values (the builder feeds Shape(X)). The clamping rules and the VJP are written once in
reference.ops.concat_split (slice_vjp, the SliceGradient training-graph spec's reference); this module adapts them
to the kernel's signature and holds the kernel spec's hooks."""
from __future__ import annotations

import math

import numpy as np

from reference.ops.concat_split import slice_shapes, slice_valid_values, slice_vjp


def _dims(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in np.asarray(shape).ravel())


def slice_grad(dY, shape, starts, ends, axes=None, steps=None):
    """dX = zeros(shape); dX[Slice-13's index of (starts, ends, axes, steps)] = dY."""
    return slice_vjp(dY, np.broadcast_to(0.0, _dims(shape)), starts, ends, axes, steps)


def slice_grad_check(inputs, attributes) -> str | None:
    """valid_values: shape a 1-D list of non-negative dims; starts/ends/axes/steps as Slice-13 takes them; dY of
    the slice's shape."""
    shape = inputs["shape"]
    if shape.ndim != 1 or shape.size < 1:
        return f"shape must be 1-D with at least one dim (X's dims), got shape {list(shape.shape)}"
    dims = _dims(shape)
    if min(dims) < 0:
        return f"shape holds a negative dim: {list(dims)}"
    return slice_valid_values({**inputs, "X": np.broadcast_to(0.0, dims)}, attributes)


def slice_grad_shapes(params):
    """{X, shape, starts, ends, axes, steps, dY} from `x` (X's shape) and `slicing` (SliceGradient's params)."""
    shapes = dict(slice_shapes(params))
    shapes["shape"] = (len(shapes["X"]),)
    return shapes


# ---- bench --------------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes, params):
    """dX written, dY read (4 bytes each)."""
    return (math.prod(params["x"]) + math.prod(shapes["dY"])) * 4


def bench_torch(inputs, attributes):
    """torch's slice_backward (what autograd runs for x[..., a:b:s]); one axis, a positive step."""
    import torch

    from reference._torch import tensors

    dy, shape, starts, ends, axes, steps = inputs
    dims = [int(d) for d in shape]
    (dy_t,) = tensors(dy)
    axis = int(axes[0]) % len(dims) if axes is not None else 0
    step = int(steps[0]) if steps is not None else 1
    start = int(starts[0])
    start = start + dims[axis] if start < 0 else start
    end = min(int(ends[0]), dims[axis])
    return lambda: torch.ops.aten.slice_backward(dy_t, dims, axis, start, end, step)


# ---- cases.from_node: a real graph's SliceGrad node -> case params ----------------------------------------------

def from_node(node) -> dict:
    """`x` = the shape input's values (Shape(X), folded), `slicing` = the node's starts, ends, axes and steps
    constants (axes or steps null when the node leaves them out). starts and ends computed in the graph (a
    dynamic sequence length): the slice [0, len) of each axis with dY's length (steps 1), the same shapes;
    `Tind` int32 when the node's index inputs are."""
    try:
        x = [int(d) for d in node.value("shape")]
    except KeyError:
        raise KeyError("SliceGrad's shape input is not a value of the graph: X's shape is unknown") from None

    def const(name):
        return [int(v) for v in node.value(name)] if node.shapes.get(name) is not None else None
    extra = {"Tind": "int32"} if node.dtypes.get("starts") == "int32" else {}
    if "starts" in node.values and "ends" in node.values:
        return {"x": x, "slicing": [const("starts"), const("ends"), const("axes"), const("steps")], **extra}
    k = node.shape("starts")[0]
    axes, steps = const("axes"), const("steps")
    if steps is not None and any(s != 1 for s in steps):
        raise ValueError(f"starts and ends are not constants and steps {steps} are not all 1: no slice to state")
    dims = [a % len(x) for a in (axes if axes is not None else range(k))]
    y = node.shape("dY")
    return {"x": x, "slicing": [[0] * k, [y[a] for a in dims], axes, steps], **extra}
