"""Vector-Jacobian products of the indexing ops whose gradient ORT's builder writes from other ops (GatherND,
ScatterElements, ScatterND, TopK, Trilu), in float64, from the math: an index picks which element of the
input an output element is (or, for the reductions, is computed from); the indices themselves are not
differentiable. Integer inputs arrive as float64 and are used as int64; negative indices count from the end.
Also the case-shape hooks and the value checks of their specs, and the GatherNDGrad kernel spec's (gathernd_grad*, at
the end: the same VJP with data's shape given as values)."""
from __future__ import annotations

import math

import numpy as np

from reference.forward.indexing import as_int, elements_target, nd_target, topk_order


def _wrap(idx: np.ndarray, dims) -> np.ndarray:
    """idx[..., j] indexes a dim of size dims[j]: negatives wrapped."""
    dims = np.asarray(dims, dtype=np.int64)
    return np.where(idx < 0, idx + dims, idx)


def _out_of_range(idx: np.ndarray, dims) -> str | None:
    dims = np.broadcast_to(np.asarray(dims, dtype=np.int64), idx.shape)
    bad = (idx < -dims) | (idx >= dims)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        d = int(dims[at])
        return f"indices{list(at)} = {int(idx[at])} is outside [{-d}, {d - 1}]"
    return None


# --- GatherND -------------------------------------------------------------------------------------------------

def _gather_nd_lin(data_shape, indices, batch_dims: int) -> tuple[np.ndarray, int, int]:
    """(nb, m) linear positions into data viewed as [nb, prod(indexed dims), rest], with nb and rest."""
    idx = as_int(indices)
    b, k = batch_dims, idx.shape[-1]
    nb = math.prod(data_shape[:b])
    indexed = data_shape[b:b + k]
    rest = math.prod(data_shape[b + k:])
    tuples = _wrap(idx.reshape(nb, -1, k), indexed)
    lin = np.ravel_multi_index(tuple(np.moveaxis(tuples, -1, 0)), indexed) if k else np.zeros(tuples.shape[:2], np.int64)
    return lin, nb, rest


def gather_nd_vjp(dY, data, indices, *, batch_dims=0):
    """ddata = zeros(data); ddata[batch, indices[batch, m]] += dY[batch, m] (a slice when k < r - b)."""
    shape = tuple(np.shape(data))
    lin, nb, rest = _gather_nd_lin(shape, indices, batch_dims)
    dd = np.zeros((nb, math.prod(shape[batch_dims:batch_dims + as_int(indices).shape[-1]]), rest))
    dy = np.asarray(dY, dtype=np.float64).reshape(nb, lin.shape[1], rest)
    np.add.at(dd, (np.arange(nb)[:, None], lin), dy)
    return dd.reshape(shape)


def gather_nd_output_shape(data, idx, batch_dims) -> tuple[int, ...]:
    return (*idx[:-1], *data[batch_dims + idx[-1]:])


def gather_nd_shapes(params):
    """{data, indices, dY} from the case params `data` and `idx` (indices' shape, its last dim the tuple length)."""
    data, idx = (tuple(int(d) for d in params[p]) for p in ("data", "idx"))
    b = int(params.get("batch_dims", 0))
    return {"data": data, "indices": idx, "dY": gather_nd_output_shape(data, idx, b)}


def gather_nd_check(inputs, attributes) -> str | None:
    """valid_values: ranks, batch dims, the tuple length, dY's shape and every index in range."""
    data, idx, dy = inputs["data"], inputs["indices"], inputs["dY"]
    b, r, q = attributes["batch_dims"], data.ndim, idx.ndim
    if r < 1 or q < 1:
        return f"data (rank {r}) and indices (rank {q}) need rank >= 1"
    if not 0 <= b < min(q, r):
        return f"batch_dims {b} must lie in [0, min(rank(indices), rank(data))) = [0, {min(q, r)})"
    k = idx.shape[-1]
    if not 1 <= k <= r - b:
        return f"indices' last dim {k} must lie in [1, rank(data) - batch_dims] = [1, {r - b}]"
    if idx.shape[:b] != data.shape[:b]:
        return f"the batch dims of indices {list(idx.shape[:b])} and data {list(data.shape[:b])} differ"
    want = gather_nd_output_shape(data.shape, idx.shape, b)
    if tuple(dy.shape) != want:
        return f"dY has shape {list(dy.shape)}; GatherND gives {list(want)}"
    return _out_of_range(as_int(idx), data.shape[b:b + k])


# --- ScatterElements and ScatterND -----------------------------------------------------------------------------

def _scatter_vjp(dY, data, updates, target: np.ndarray, reduction: str):
    """(ddata, dupdates) of output = data with each update element reduced into data.flat[target[j]]."""
    dy = np.asarray(dY, dtype=np.float64).ravel()
    d = np.asarray(data, dtype=np.float64).ravel()
    u = np.asarray(updates, dtype=np.float64).ravel()
    target = target.ravel()
    if reduction in ("none", "add"):
        du = dy[target]
        dd = dy.copy()
        if reduction == "none":  # each written element is replaced: data has no say there
            dd[target] = 0.0
        return dd.reshape(np.shape(data)), du.reshape(np.shape(updates))
    dd, du = dy.copy(), np.zeros_like(u)
    for t in np.unique(target):
        js = np.flatnonzero(target == t)
        if reduction == "mul":  # y = d * prod u: each factor's derivative is the product of the others
            dd[t] = dy[t] * np.prod(u[js])
            for n, j in enumerate(js):
                du[j] = dy[t] * d[t] * np.prod(np.delete(u[js], n))
        else:  # max / min: the extreme's element takes dY (shared evenly where several attain it)
            y = (np.max if reduction == "max" else np.min)(np.append(u[js], d[t]))
            winners = (u[js] == y).sum() + (d[t] == y)
            dd[t] = dy[t] / winners if d[t] == y else 0.0
            du[js] = np.where(u[js] == y, dy[t] / winners, 0.0)
    return dd.reshape(np.shape(data)), du.reshape(np.shape(updates))


def scatter_elements_vjp(dY, data, indices, updates, *, axis=0, reduction="none"):
    """none: ddata = dY zeroed where written, dupdates = dY at the written positions; add: ddata = dY;
    mul: the product rule; max/min: dY to the element attaining the extreme."""
    shape = tuple(np.shape(data))
    return _scatter_vjp(dY, data, updates, elements_target(shape, indices, axis % len(shape)), reduction)


def scatter_nd_vjp(dY, data, indices, updates, *, reduction="none"):
    """As ScatterElements, each index tuple naming a slice data[tuple] that updates[m] is written into."""
    return _scatter_vjp(dY, data, updates, nd_target(tuple(np.shape(data)), indices), reduction)


def scatter_elements_shapes(params):
    """{data, indices, updates, dY} from `data` and `idx` (indices' and updates' shape)."""
    data, idx = (tuple(int(d) for d in params[p]) for p in ("data", "idx"))
    return {"data": data, "indices": idx, "updates": idx, "dY": data}


def scatter_nd_shapes(params):
    """{data, indices, updates, dY} from `data` and `idx`: updates = idx[:-1] + data[idx[-1]:]."""
    data, idx = (tuple(int(d) for d in params[p]) for p in ("data", "idx"))
    return {"data": data, "indices": idx, "updates": (*idx[:-1], *data[idx[-1]:]), "dY": data}


def _duplicates(target: np.ndarray, what: str) -> str | None:
    values, counts = np.unique(target.ravel(), return_counts=True)
    if (counts > 1).any():
        return (f"{int((counts > 1).sum())} {what} written more than once: with reduction none indices must not "
                "repeat (the result would depend on the order of the writes)")
    return None


def scatter_elements_check(inputs, attributes) -> str | None:
    """valid_values: ranks and shapes, every index in range, no repeated target with reduction none."""
    data, idx, upd, dy = inputs["data"], inputs["indices"], inputs["updates"], inputs["dY"]
    r = data.ndim
    if r < 1:
        return "data needs rank >= 1"
    axis = attributes["axis"]
    if not -r <= axis < r:
        return f"axis {axis} is outside [{-r}, {r - 1}]"
    axis %= r
    if idx.ndim != r or upd.shape != idx.shape:
        return f"indices {list(idx.shape)} and updates {list(upd.shape)} need data's rank {r} and one shape"
    if any(i > d for a, (i, d) in enumerate(zip(idx.shape, data.shape)) if a != axis):
        return f"off the axis, indices' dims {list(idx.shape)} may not exceed data's {list(data.shape)}"
    if dy.shape != data.shape:
        return f"dY has shape {list(dy.shape)}, not data's {list(data.shape)}"
    problem = _out_of_range(as_int(idx), data.shape[axis])
    if problem or attributes["reduction"] != "none":
        return problem
    return _duplicates(elements_target(data.shape, idx, axis), "elements of data")


def scatter_nd_check(inputs, attributes) -> str | None:
    """valid_values: ranks and shapes, every index in range, no repeated index tuple with reduction none."""
    data, idx, upd, dy = inputs["data"], inputs["indices"], inputs["updates"], inputs["dY"]
    if data.ndim < 1 or idx.ndim < 1:
        return f"data (rank {data.ndim}) and indices (rank {idx.ndim}) need rank >= 1"
    k = idx.shape[-1]
    if not 1 <= k <= data.ndim:
        return f"indices' last dim {k} must lie in [1, rank(data)] = [1, {data.ndim}]"
    want = (*idx.shape[:-1], *data.shape[k:])
    if tuple(upd.shape) != want:
        return f"updates has shape {list(upd.shape)}; indices {list(idx.shape)} into data {list(data.shape)} need {list(want)}"
    if dy.shape != data.shape:
        return f"dY has shape {list(dy.shape)}, not data's {list(data.shape)}"
    problem = _out_of_range(as_int(idx), data.shape[:k])
    if problem or attributes["reduction"] != "none":
        return problem
    return _duplicates(nd_target(data.shape, idx), "elements of data")


# --- TopK ------------------------------------------------------------------------------------------------------

def topk_vjp(dValues, X, K, *, axis=-1, largest=1, sorted=1):
    """dX = zeros(X); dX[the j-th selected position] = dValues[j] along axis (equal values: the lower index
    is selected, and comes first)."""
    X = np.asarray(X, dtype=np.float64)
    axis = axis % X.ndim
    dx = np.zeros_like(X)
    order = topk_order(X, int(as_int(K).ravel()[0]), axis, largest)
    np.put_along_axis(dx, order, np.asarray(dValues, dtype=np.float64), axis=axis)
    return dx


def topk_shapes(params):
    """{X, K, dValues} from `shape` (X's) and `k`: Values has X's shape with the axis k long."""
    x = tuple(int(d) for d in params["shape"])
    axis = int(params.get("axis", -1))
    values = list(x)
    if x and -len(x) <= axis < len(x):
        values[axis] = int(params["k"])
    return {"X": x, "K": (1,), "dValues": tuple(values)}


def topk_check(inputs, attributes) -> str | None:
    """valid_values: K one value in [0, dim of the axis], dValues of Values' shape."""
    X, K, dv = inputs["X"], inputs["K"], inputs["dValues"]
    r = X.ndim
    axis = attributes["axis"]
    if r < 1 or not -r <= axis < r:
        return f"axis {axis} is outside [{-r}, {r - 1}] for X of rank {r}"
    if K.shape != (1,):
        return f"K must hold one value (shape [1]), got shape {list(K.shape)}"
    k, dim = int(K.ravel()[0]), X.shape[axis]
    if not 0 <= k <= dim:
        return f"k = {k} must lie in [0, {dim}], the length of axis {axis}"
    want = list(X.shape)
    want[axis] = k
    if list(dv.shape) != want:
        return f"dValues has shape {list(dv.shape)}; Values has {want}"
    return None


# --- Trilu -----------------------------------------------------------------------------------------------------

def trilu_mask(shape, k: int, upper: int) -> np.ndarray:
    n, m = shape[-2], shape[-1]
    rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
    return (cols - rows >= k) if upper else (cols - rows <= k)


def trilu_vjp(dY, input, k=None, *, upper=1):
    """dinput = dY where Trilu keeps the element (upper: col - row >= k; lower: col - row <= k), 0 elsewhere."""
    dy = np.asarray(dY, dtype=np.float64)
    kk = 0 if k is None else int(as_int(k).ravel()[0])
    return np.where(trilu_mask(dy.shape, kk, upper), dy, 0.0)


def trilu_valid(shapes, attributes) -> str | None:
    """valid_if: input of rank >= 2 ([*, N, M]), dY of its shape, k a scalar."""
    x = shapes.get("input")
    if x is None or len(x) < 2:
        return f"Trilu's input needs rank >= 2 ([*, N, M]), got shape {list(x) if x is not None else None}"
    k = shapes.get("k")
    if k is not None and len(k) != 0:
        return f"k must be a scalar (shape []), got shape {list(k)}"
    return None


def gather_nd_reduction_length(dY, data, indices, *, batch_dims=0) -> int:
    """K of the accuracy term: the most slices of dY one element of ddata sums (the most a tuple repeats)."""
    lin, nb, _ = _gather_nd_lin(tuple(np.shape(data)), indices, batch_dims)
    keys = (np.arange(nb)[:, None] * (lin.max() + 1 if lin.size else 1) + lin).ravel()
    return int(np.unique(keys, return_counts=True)[1].max()) if keys.size else 1


# ---- cases.from_node hook for GatherND (training graph) -------------------------------------------------------

def gather_nd_from_node(node) -> dict:
    """`data` and `idx` = data's and indices' shapes; batch_dims is match()'s, from the node's attribute."""
    return {"data": list(node.shape("data")), "idx": list(node.shape("indices"))}


# ---- cases.from_node hooks for ScatterElements, ScatterND, TopK and Trilu (training graph; graph_b block) ------

def scatter_from_node(node) -> dict:
    """ScatterElements and ScatterND: `data` and `idx` = data's and indices' shapes (updates follow from them);
    `Tind` int32 when the graph's indices are (axis and reduction are match()'s, from the node's attributes)."""
    params = {"data": list(node.shape("data")), "idx": list(node.shape("indices"))}
    if node.dtypes.get("indices") == "int32":
        params["Tind"] = "int32"
    return params


def topk_from_node(node) -> dict:
    """`shape` = X's shape, `k` = K's constant, else Values' (dValues') length along axis."""
    x = node.shape("X")
    if "K" in node.values:
        k = int(np.asarray(node.values["K"]).reshape(-1)[0])
    else:
        k = node.shape("dValues")[int(node.attributes.get("axis", -1)) % len(x)]
    return {"shape": list(x), "k": k}


def trilu_from_node(node) -> dict:
    """`shape` = the input's shape; k is the node's own input (its constant, or left out: match()'s omit)."""
    return {"shape": list(node.shape("input"))}


# ==== GatherNDGrad (com.microsoft), the kernel the builder writes for GatherND: gather_nd_vjp above with data's
# shape given as values (the `shape` input, Shape(data) in a training graph); the kernel spec's hooks ==========

def _shape_values(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in np.asarray(shape).ravel())


def gathernd_grad(shape, indices, update, *, batch_dims=0):
    """output = zeros(shape); output[batch, wrap(indices[batch, m]), ...] += update[batch, m, ...]."""
    return gather_nd_vjp(update, np.broadcast_to(0.0, _shape_values(shape)), indices, batch_dims=batch_dims)


def gathernd_grad_check(inputs, attributes) -> str | None:
    """valid_values: shape a 1-D list of non-negative dims; then GatherND's rules (batch dims, tuple length,
    update of GatherND's output shape, every index in range)."""
    shape = inputs["shape"]
    if shape.ndim != 1 or shape.size < 1:
        return f"shape must be 1-D with at least one dim (data's dims), got shape {list(shape.shape)}"
    dims = _shape_values(shape)
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
    return gather_nd_reduction_length(update, np.broadcast_to(0.0, _shape_values(shape)), indices, batch_dims=batch_dims)


# ---- GatherNDGrad bench --------------------------------------------------------------------------------------------------------

def gathernd_grad_bench_bytes(shapes, attributes, params):
    """output written, update read (4 bytes each), the int64 indices read."""
    return (math.prod(params["data"]) + math.prod(shapes["update"])) * 4 + math.prod(shapes["indices"]) * 8


def gathernd_grad_bench_indices_bytes(shapes, attributes):
    return math.prod(shapes["indices"]) * 8


def gathernd_grad_bench_torch(inputs, attributes):
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


# ---- GatherNDGrad cases.from_node: a real graph's GatherNDGrad node -> case params -------------------------------------------

def gathernd_grad_from_node(node) -> dict:
    """`data` = the shape input's values (Shape(data), folded by shape inference), `idx` = indices' shape;
    batch_dims is the node's attribute (match()'s)."""
    try:
        data = [int(d) for d in node.value("shape")]
    except KeyError:
        raise KeyError("GatherNDGrad's shape input is not a value of the graph: data's shape is unknown") from None
    return {"data": data, "idx": list(node.shape("indices"))}

