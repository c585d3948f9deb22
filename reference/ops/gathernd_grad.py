"""GatherNDGrad (com.microsoft): GatherND's gradient scattered into a zero tensor whose shape the `shape` input
holds as values (the builder feeds it Shape(data)). The math is GatherND's vector-Jacobian product, written once
in reference.ops.indexing (gather_nd_vjp, the training-graph spec's reference); this module adapts it to the
kernel's signature (shape values instead of data) and holds the kernel spec's hooks."""
from __future__ import annotations

import math

import numpy as np

from reference.ops.indexing import gather_nd_check, gather_nd_output_shape, gather_nd_reduction_length, gather_nd_vjp


def _dims(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in np.asarray(shape).ravel())


def gathernd_grad(shape, indices, update, *, batch_dims=0):
    """output = zeros(shape); output[batch, wrap(indices[batch, m]), ...] += update[batch, m, ...]."""
    return gather_nd_vjp(update, np.broadcast_to(0.0, _dims(shape)), indices, batch_dims=batch_dims)


def gathernd_grad_check(inputs, attributes) -> str | None:
    """valid_values: shape a 1-D list of non-negative dims; then GatherND's rules (batch dims, tuple length,
    update of GatherND's output shape, every index in range)."""
    shape = inputs["shape"]
    if shape.ndim != 1 or shape.size < 1:
        return f"shape must be 1-D with at least one dim (data's dims), got shape {list(shape.shape)}"
    dims = _dims(shape)
    if min(dims) < 0:
        return f"shape holds a negative dim: {list(dims)}"
    views = {"data": np.broadcast_to(0.0, dims), "indices": inputs["indices"], "dY": inputs["update"]}
    return gather_nd_check(views, attributes)


def gathernd_grad_shapes(params):
    """{data, indices, shape, update} from `data` (data's shape) and `idx` (indices' shape); update takes
    GatherND's output shape unless the case gives `update` (invalid cases)."""
    data, idx = (tuple(int(d) for d in params[p]) for p in ("data", "idx"))
    b = int(params.get("batch_dims", 0))
    upd = params.get("update")
    upd = tuple(int(d) for d in upd) if upd is not None else gather_nd_output_shape(data, idx, b)
    return {"data": data, "indices": idx, "shape": (len(data),), "update": upd}


def gathernd_grad_reduction_length(shape, indices, update, *, batch_dims=0) -> int:
    """The most slices of update one element of the output sums (the most a tuple repeats)."""
    return gather_nd_reduction_length(update, np.broadcast_to(0.0, _dims(shape)), indices, batch_dims=batch_dims)


# ---- bench --------------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes, params):
    """output written, update read (4 bytes each), the int64 indices read."""
    return (math.prod(params["data"]) + math.prod(shapes["update"])) * 4 + math.prod(shapes["indices"]) * 8


def bench_indices_bytes(shapes, attributes):
    return math.prod(shapes["indices"]) * 8


def bench_torch(inputs, attributes):
    """torch's scatter-add of the same slices: index_put_ with accumulate=True into zeros (what autograd runs for
    x[idx0, idx1] indexing), batch_dims 0, tuples of length k into data's first k dims."""
    import torch

    from reference._torch import tensors

    shape, indices, update = inputs
    dims = [int(d) for d in shape]
    _, idx, upd = tensors(*inputs)
    k = idx.shape[-1]
    cols = tuple(idx[..., j].reshape(-1) for j in range(k))
    upd = upd.reshape(-1, *dims[k:])

    def run():
        return torch.zeros(dims, dtype=upd.dtype).index_put_(cols, upd, accumulate=True)
    return run


# ---- cases.from_node: a real graph's GatherNDGrad node -> case params -------------------------------------------

def from_node(node) -> dict:
    """`data` = the shape input's values (Shape(data), folded by shape inference), `idx` = indices' shape;
    batch_dims is the node's attribute (match()'s)."""
    try:
        data = [int(d) for d in node.value("shape")]
    except KeyError:
        raise KeyError("GatherNDGrad's shape input is not a value of the graph: data's shape is unknown") from None
    return {"data": data, "idx": list(node.shape("indices"))}

