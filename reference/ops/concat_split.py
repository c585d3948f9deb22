"""Vector-Jacobian products of the ops that cut and join tensors (Concat, Split, Slice, Pad), as a training graph
computes them, and their case hooks.

All four forwards are linear selections: every output element is one input element (or, for Pad's constant
mode, the constant). The VJP sends each incoming-gradient element back to the input element it was read from,
adding where several outputs read one element (Pad's reflect, edge and wrap modes). Integer inputs (split,
starts, ends, axes, steps, pads) arrive in float64 and are used as int64; they have no gradient. At the end, the
SliceGrad kernel spec's hooks (slice_grad*: slice_vjp with X's shape given as values).
"""
from __future__ import annotations

import math

import numpy as np

from reference._math import normalize_axis


def _f64(x):
    return None if x is None else np.asarray(x, dtype=np.float64)


def _ints(values):
    return None if values is None else [int(v) for v in np.asarray(values).ravel()]


# --- Concat ------------------------------------------------------------------------------------------------------

def concat_vjp(dY, A, B, C=None, *, axis):
    """dA, dB, dC: the slices of dY along axis that each input filled, in input order (dC None without C)."""
    dY = _f64(dY)
    parts = [p for p in (A, B, C) if p is not None]
    ax = normalize_axis(axis, dY.ndim)
    bounds = np.cumsum([np.shape(p)[ax] for p in parts])[:-1]
    grads = np.split(dY, bounds, axis=ax)
    return grads[0], grads[1], grads[2] if C is not None else None


def concat_shapes(params):
    """{A, B, C, dY} from `shapes: [A's, B's(, C's)]` and the axis; dY is the concatenation (best effort for the
    invalid groups, whose inputs do not concatenate)."""
    shapes = [tuple(int(d) for d in s) for s in params["shapes"]]
    out = {"A": shapes[0], "B": shapes[1], "C": shapes[2] if len(shapes) > 2 else None}
    rank = len(shapes[0])
    axis = params.get("axis", 0)  # an invalid group may write it as an attribute instead
    ax = axis % rank if rank and -rank <= axis < rank else 0
    dy = list(shapes[0])
    if rank:
        dy[ax] = sum(s[ax] if len(s) > ax else 0 for s in shapes)
    out["dY"] = tuple(dy)
    return out


def concat_valid(shapes, attributes):
    axis = attributes["axis"]
    parts = [(n, shapes[n]) for n in ("A", "B", "C") if shapes.get(n) is not None]
    rank = len(parts[0][1])
    if rank == 0:
        return "Concat's inputs must have rank >= 1"
    ax = axis % rank
    for name, shape in parts[1:]:
        if len(shape) != rank:
            return f"{name} has rank {len(shape)}, A has rank {rank}: Concat's inputs must have one rank"
        if any(a != b for i, (a, b) in enumerate(zip(shape, parts[0][1])) if i != ax):
            return f"{name}'s shape {list(shape)} differs from A's {list(parts[0][1])} off the axis {axis}"
    want = list(parts[0][1])
    want[ax] = sum(s[ax] for _, s in parts)
    if shapes.get("dY") is not None and list(shapes["dY"]) != want:
        return f"dY has shape {list(shapes['dY'])}; Concat's output has {want}"
    return None


# --- Split -------------------------------------------------------------------------------------------------------

def _split_sizes(dim, split, num_outputs, outputs=3):
    if split is not None:
        return _ints(split)
    n = num_outputs or outputs
    chunk = math.ceil(dim / n)
    return [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]


def split_vjp(dY0, dY1, dY2, X, split=None, *, axis=0, num_outputs=None):
    """dX: the incoming gradients joined along axis; an output given no gradient (None) contributes zeros."""
    X = np.asarray(X)
    ax = normalize_axis(axis, X.ndim)
    sizes = _split_sizes(X.shape[ax], split, num_outputs)
    parts = []
    for d, n in zip((dY0, dY1, dY2), sizes):
        shape = list(X.shape)
        shape[ax] = n
        parts.append(np.zeros(shape) if d is None else _f64(d))
    return np.concatenate(parts, axis=ax)


def split_13_vjp(dY0, dY1, dY2, X, split=None, *, axis=0):
    return split_vjp(dY0, dY1, dY2, X, split, axis=axis)


def split_shapes(params):
    """{X, split, dY0, dY1, dY2} from `x` (X's shape), `sizes` (the three outputs' sizes along the axis) and the
    axis; split, when the group does not omit it, holds `sizes` (its generator's literal values)."""
    x = tuple(int(d) for d in params["x"])
    axis = params.get("axis", 0)
    ax = axis % len(x) if x and -len(x) <= axis < len(x) else 0
    out = {"X": x, "split": (len(params["sizes"]),)}
    for i, n in enumerate(params["sizes"]):
        shape = list(x)
        shape[ax] = int(n)
        out[f"dY{i}"] = tuple(shape)
    return out


def split_valid_values(inputs, attributes):
    X, split = inputs["X"], inputs.get("split")
    num_outputs = attributes.get("num_outputs")
    ax = attributes["axis"] % X.ndim
    dim = X.shape[ax]
    if split is not None and num_outputs is not None:
        return "Split-18 takes either the split input or num_outputs, not both"
    if split is None and num_outputs is None and "num_outputs" in attributes:
        return "Split-18 needs the split input or num_outputs"
    if split is not None:
        sizes = _ints(split)
        if len(sizes) != 3:
            return f"split has {len(sizes)} entries for 3 outputs"
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            return f"split {sizes} does not sum to the axis' size {dim}"
    elif num_outputs is not None and num_outputs != 3:
        return f"num_outputs is {num_outputs}, the node has 3 outputs"
    elif num_outputs is None and dim % 3:
        return f"Split-13 without split cuts the axis' size {dim} into 3 equal parts"
    sizes = _split_sizes(dim, split, num_outputs)
    if num_outputs is not None and sizes[-1] <= 0:
        return f"num_outputs {num_outputs} leaves an empty last output for the axis' size {dim}"
    for i, n in enumerate(sizes):
        d = inputs.get(f"dY{i}")
        want = list(X.shape)
        want[ax] = n
        if d is not None and list(d.shape) != want:
            return f"dY{i} has shape {list(d.shape)}; output {i} has {want}"
    return None


# --- Slice -------------------------------------------------------------------------------------------------------

def _slice_index(shape, starts, ends, axes, steps):
    """The Python slices Slice-13 takes, from the ONNX clamping rules: start into [0, dim] ([0, dim - 1] for a
    negative step), end into [0, dim] ([-1, dim - 1] for a negative step, -1 meaning before the first element)."""
    rank = len(shape)
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, rank) for a in _ints(axes)]
    steps = [1] * len(starts) if steps is None else _ints(steps)
    index = [slice(None)] * rank
    for s, e, a, k in zip(starts, ends, axes, steps):
        dim = shape[a]
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if k > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        index[a] = slice(s, None if e < 0 else e, k)
    return tuple(index)


def slice_vjp(dY, X, starts, ends, axes=None, steps=None):
    """dX: zeros of X's shape with dY written back where Slice read it (each X element is read at most once)."""
    dX = np.zeros(np.shape(X))
    dX[_slice_index(np.shape(X), starts, ends, axes, steps)] = _f64(dY)
    return dX


def slice_shapes(params):
    """{X, starts, ends, axes, steps, dY} from `x` (X's shape) and `slicing: [starts, ends, axes, steps]` (the same
    values the group's literal generators write; axes or steps null when omitted)."""
    x = tuple(int(d) for d in params["x"])
    starts, ends, axes, steps = params["slicing"]
    k = (len(starts),)
    try:
        dy = np.zeros(x)[_slice_index(x, starts, ends, axes, steps)].shape
    except (ValueError, IndexError, TypeError):
        dy = x  # an invalid group's slicing: any dY will do, the forward op must refuse it first
    return {"X": x, "starts": k, "ends": k, "axes": k if axes is not None else None,
            "steps": k if steps is not None else None, "dY": tuple(dy)}


def slice_valid_values(inputs, attributes):
    X = inputs["X"]
    starts, ends = _ints(inputs["starts"]), _ints(inputs["ends"])
    axes, steps = _ints(inputs.get("axes")), _ints(inputs.get("steps"))
    if len(ends) != len(starts) or any(v is not None and len(v) != len(starts) for v in (axes, steps)):
        return "starts, ends, axes and steps must have one length"
    if axes is not None:
        if any(not -X.ndim <= a < X.ndim for a in axes):
            return f"axes {axes} outside [{-X.ndim}, {X.ndim - 1}]"
        if len({a % X.ndim for a in axes}) != len(axes):
            return f"axes {axes} repeat an axis"
    elif len(starts) > X.ndim:
        return f"{len(starts)} starts for X of rank {X.ndim}"
    if steps is not None and 0 in steps:
        return "a step of 0"
    want = np.zeros(X.shape)[_slice_index(X.shape, starts, ends, axes, steps)].shape
    if inputs.get("dY") is not None and tuple(inputs["dY"].shape) != want:
        return f"dY has shape {list(inputs['dY'].shape)}; Slice's output has {list(want)}"
    return None


# --- Pad ---------------------------------------------------------------------------------------------------------

def _pad_axes(rank, pads, axes):
    pads = _ints(pads)
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in _ints(axes)]
    n = len(axes)
    return {a: (pads[i], pads[i + n]) for i, a in enumerate(axes)}


def _source(n, begin, end, mode):
    """For each output index along one axis: the input index it reads, or -1 where it holds the constant."""
    j = np.arange(n + begin + end) - begin
    if mode == "constant":
        return np.where((j >= 0) & (j < n), j, -1)
    if mode == "edge":
        return np.clip(j, 0, n - 1)
    if mode == "wrap":
        return np.mod(j, n)
    period = 2 * (n - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    if period == 0:
        return np.zeros_like(j)
    j = np.mod(j, period)
    return np.where(j < n, j, period - j)


def pad_vjp(dY, X, pads, constant_value=None, axes=None, *, mode="constant"):
    """dX: each dY element added to the X element its output read (every mode a selection per axis); dconstant_value:
    the sum of dY over the elements that hold the constant (None when the node has no constant_value input)."""
    dY = _f64(dY)
    shape = np.shape(X)
    per_axis = _pad_axes(len(shape), pads, axes)
    g = dY
    for a in range(len(shape)):
        begin, end = per_axis.get(a, (0, 0))
        src = _source(shape[a], begin, end, mode)
        select = np.zeros((len(src), shape[a]))
        rows = np.nonzero(src >= 0)[0]
        select[rows, src[rows]] = 1.0
        g = np.moveaxis(np.tensordot(np.moveaxis(g, a, -1), select, axes=([-1], [0])), -1, a)
    d_constant = None
    if constant_value is not None:
        # the constant's share: all of dY less what reached X (modes other than constant never write it)
        d_constant = np.array(float(np.sum(dY) - np.sum(g)) if mode == "constant" else 0.0)
    return g, d_constant


def pad_shapes(params):
    """{X, pads, constant_value, axes, dY} from `x` (X's shape) and `padding: [pads, axes]` (the values the group's
    literal generators write; axes null when the node omits it)."""
    x = tuple(int(d) for d in params["x"])
    pads, axes = params["padding"]
    dy = list(x)
    try:
        for a, (b, e) in _pad_axes(len(x), pads, axes).items():
            dy[a] = max(x[a] + b + e, 0)
    except (ValueError, IndexError):
        pass  # an invalid group's pads: any dY will do
    return {"X": x, "pads": (len(pads),), "constant_value": (), "axes": (len(axes),) if axes is not None else None,
            "dY": tuple(dy)}


def pad_valid_values(inputs, attributes):
    X, mode = inputs["X"], attributes["mode"]
    pads, axes = _ints(inputs["pads"]), _ints(inputs.get("axes"))
    n = X.ndim if axes is None else len(axes)
    if axes is not None and any(not -X.ndim <= a < X.ndim for a in axes):
        return f"axes {axes} outside [{-X.ndim}, {X.ndim - 1}]"
    if axes is not None and len({a % X.ndim for a in axes}) != len(axes):
        return f"axes {axes} repeat an axis"
    if len(pads) != 2 * n:
        return f"pads has {len(pads)} entries; {2 * n} wanted (begin and end for {n} axes)"
    want = list(X.shape)
    for a, (b, e) in _pad_axes(X.ndim, pads, axes).items():
        want[a] = X.shape[a] + b + e
        if want[a] < 0:
            return f"pads {b}, {e} remove more than axis {a}'s {X.shape[a]} elements"
        if mode != "constant" and (b < 0 or e < 0):
            return f"negative pads in {mode} mode"
        if mode != "constant" and X.shape[a] == 0 and b + e > 0:
            return f"{mode} mode cannot pad an empty axis {a}"
        if mode == "reflect" and max(b, e) > X.shape[a] - 1:
            return f"reflect mode pads axis {a} of size {X.shape[a]} by more than {X.shape[a] - 1}"
    if inputs.get("dY") is not None and list(inputs["dY"].shape) != want:
        return f"dY has shape {list(inputs['dY'].shape)}; Pad's output has {want}"
    return None


# ---- cases.from_node hooks for Concat and Pad (training graph) ------------------------------------------------

def concat_from_node(node) -> dict:
    """`shapes` = the inputs present (A, B(, C)); axis is match()'s, from the node's attribute."""
    return {"shapes": [list(node.shapes[n]) for n in ("A", "B", "C") if node.shapes.get(n) is not None]}


def pad_from_node(node) -> dict:
    """`x` = X's shape, `padding` = [pads, axes] as the node's constants (axes null when the node omits it)."""
    axes = node.value("axes") if node.shapes.get("axes") is not None else None
    return {"x": list(node.shape("X")), "padding": [node.value("pads"), axes]}


# ---- cases.from_node hooks for Split and Slice (training graph; graph_b block) ----------------------------------

def split_from_node(node) -> dict:
    """Split (18 and 13): `x` = X's shape, `sizes` = the split constant, else the grad_outputs' lengths along axis
    (an output the graph leaves without a gradient: the rest of the axis, or num_outputs' equal parts). The spec
    has three outputs: a Split into another count is outside it."""
    x = node.shape("X")
    ax = normalize_axis(node.attributes.get("axis", 0), len(x))
    if "split" in node.values:
        sizes = node.value("split")
    elif node.shapes.get("split") is None:
        sizes = _split_sizes(x[ax], None, node.attributes.get("num_outputs"))
    else:
        sizes = [None if node.shapes.get(f"dY{i}") is None else node.shape(f"dY{i}")[ax] for i in range(3)]
        if sizes.count(None) == 1:
            sizes[sizes.index(None)] = x[ax] - sum(n for n in sizes if n is not None)
    if len(sizes) != 3 or None in sizes:
        raise ValueError(f"Split into {sizes}: the spec states Splits into three outputs")
    return {"x": list(x), "sizes": [int(n) for n in sizes]}


def slice_from_node(node) -> dict:
    """Slice: `x` = X's shape, `slicing` = [starts, ends, axes, steps] as the node's constants (axes or steps null
    when the node omits them). starts and ends computed in the graph (GPT-2's mask slice with a dynamic sequence
    length), axes and steps constants or left out: the slice [0, len) of each axis with dY's length `len` (steps 1);
    the same shapes, though not the same offsets."""
    return {"x": list(node.shape("X")), "slicing": _node_slicing(node, len(node.shape("X")))}


def _node_slicing(node, rank: int) -> list:
    """[starts, ends, axes, steps] of a Slice or SliceGrad node: its constants (axes or steps null when left out),
    or, with starts and ends computed in the graph, the slice [0, len) of each axis with dY's length (steps 1)."""
    def const(name):
        return [int(v) for v in node.value(name)] if node.shapes.get(name) is not None else None
    if "starts" in node.values and "ends" in node.values:
        return [const("starts"), const("ends"), const("axes"), const("steps")]
    k = node.shape("starts")[0]
    axes, steps = const("axes"), const("steps")
    if steps is not None and any(s != 1 for s in steps):
        raise ValueError(f"starts and ends are not constants and steps {steps} are not all 1: no slice to state")
    dims = [a % rank for a in (axes if axes is not None else range(k))]
    y = node.shape("dY")
    return [[0] * k, [y[a] for a in dims], axes, steps]


# ==== SliceGrad (com.microsoft), the kernel the builder writes for Slice: slice_vjp above with X's shape given as
# values (the `shape` input, Shape(X) in a training graph); the kernel spec's hooks ==============================

def _shape_values(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in np.asarray(shape).ravel())


def slice_grad(dY, shape, starts, ends, axes=None, steps=None):
    """dX = zeros(shape); dX[Slice-13's index of (starts, ends, axes, steps)] = dY."""
    return slice_vjp(dY, np.broadcast_to(0.0, _shape_values(shape)), starts, ends, axes, steps)


def slice_grad_check(inputs, attributes) -> str | None:
    """valid_values: shape a 1-D list of non-negative dims; starts/ends/axes/steps as Slice-13 takes them; dY of
    the slice's shape."""
    shape = inputs["shape"]
    if shape.ndim != 1 or shape.size < 1:
        return f"shape must be 1-D with at least one dim (X's dims), got shape {list(shape.shape)}"
    dims = _shape_values(shape)
    if min(dims) < 0:
        return f"shape holds a negative dim: {list(dims)}"
    return slice_valid_values({**inputs, "X": np.broadcast_to(0.0, dims)}, attributes)


def slice_grad_shapes(params):
    """{X, shape, starts, ends, axes, steps, dY} from `x` (X's shape) and `slicing` (SliceGradient's params)."""
    shapes = dict(slice_shapes(params))
    shapes["shape"] = (len(shapes["X"]),)
    return shapes


# ---- SliceGrad bench --------------------------------------------------------------------------------------------------------

def slice_grad_bench_bytes(shapes, attributes, params):
    """dX written, dY read (4 bytes each)."""
    return (math.prod(params["x"]) + math.prod(shapes["dY"])) * 4


def slice_grad_bench_torch(inputs, attributes):
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


# ---- SliceGrad cases.from_node: a real graph's SliceGrad node -> case params ----------------------------------------------

def slice_grad_from_node(node) -> dict:
    """`x` = the shape input's values (Shape(X), folded), `slicing` = the node's starts, ends, axes and steps
    constants (axes or steps null when the node leaves them out). starts and ends computed in the graph (a
    dynamic sequence length): the slice [0, len) of each axis with dY's length (steps 1), the same shapes;
    `Tind` int32 when the node's index inputs are."""
    try:
        x = [int(d) for d in node.value("shape")]
    except KeyError:
        raise KeyError("SliceGrad's shape input is not a value of the graph: X's shape is unknown") from None
    extra = {"Tind": "int32"} if node.dtypes.get("starts") == "int32" else {}
    return {"x": x, "slicing": _node_slicing(node, len(x)), **extra}
