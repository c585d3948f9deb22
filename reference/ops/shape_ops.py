"""Vector-Jacobian products of the data-movement ops (Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand,
Tile), as a training graph computes them, with their case-shape hooks and validity rules.

Every one of these ops moves or copies elements without arithmetic, so its VJP moves dY back: Reshape,
Flatten, Squeeze and Unsqueeze give dY the data input's shape (the same elements in the same row-major
order); Transpose applies the inverse permutation; Expand sums dY over the axes it stretched
(reference._math.unbroadcast); Tile sums the copies of each element. The integer inputs (shape, axes,
repeats) are not differentiable.

The shape rules below are ONNX's, written out (onnx's reference evaluator, the forward in
reference.forward.shape_ops, accepts some inputs the schemas forbid, e.g. a Reshape entry of -2 or a Tile
repeats of the wrong length): each raises ShapeError with what is wrong; the `*_check` hooks (valid_values)
turn that into the reason an input is invalid, and also hold dY to the forward output's shape.
"""
from __future__ import annotations

import math

import numpy as np

from reference._math import unbroadcast


class ShapeError(ValueError):
    pass


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values, dtype=np.float64).ravel()]


# ---- shape rules (ONNX's) ---------------------------------------------------------------------------------

def reshape_shape(x, to, allowzero=0) -> tuple[int, ...]:
    """Reshape-14: 0 copies the input's dim at that index (allowzero=0) or is a literal 0 (allowzero=1);
    one -1 at most takes what is left; allowzero=1 forbids a 0 beside a -1."""
    x, to = tuple(x), list(to)
    if any(v < -1 for v in to):
        raise ShapeError(f"shape {to} holds a value below -1")
    if to.count(-1) > 1:
        raise ShapeError(f"shape {to} holds more than one -1")
    if allowzero and 0 in to and -1 in to:
        raise ShapeError(f"shape {to} holds both 0 and -1, which allowzero=1 forbids")
    out = []
    for i, v in enumerate(to):
        if v == 0 and not allowzero:
            if i >= len(x):
                raise ShapeError(f"shape {to}: the 0 at index {i} copies dim {i} of a rank-{len(x)} input")
            v = x[i]
        out.append(v)
    size = math.prod(x)
    if -1 in out:
        known = math.prod(v for v in out if v != -1)
        if known == 0 or size % known:
            raise ShapeError(f"shape {to}: no size for -1 makes {out} hold the input's {size} elements")
        out[out.index(-1)] = size // known
    if math.prod(out) != size:
        raise ShapeError(f"shape {to} gives {out} ({math.prod(out)} elements); the input {list(x)} has {size}")
    return tuple(out)


def flatten_shape(x, axis=1) -> tuple[int, int]:
    """Flatten-13: axis in [-r, r]; the dims before it make the rows, the rest the columns."""
    x, r = tuple(x), len(x)
    if not -r <= axis <= r:
        raise ShapeError(f"axis {axis} is outside [{-r}, {r}] for a rank-{r} input")
    axis = axis + r if axis < 0 else axis
    return math.prod(x[:axis]), math.prod(x[axis:])


def _axes(axes, rank: int) -> list[int]:
    normalized = []
    for a in axes:
        if not -rank <= a < rank:
            raise ShapeError(f"axis {a} is outside [{-rank}, {rank - 1}] for rank {rank}")
        normalized.append(a % rank)
    if len(set(normalized)) != len(normalized):
        raise ShapeError(f"axes {list(axes)} name one axis twice")
    return normalized


def squeeze_shape(x, axes=None) -> tuple[int, ...]:
    """Squeeze-13: the named axes (each of size 1) removed, or every size-1 axis when axes is omitted."""
    x = tuple(x)
    if axes is None:
        return tuple(d for d in x if d != 1)
    gone = _axes(axes, len(x))
    for a in gone:
        if x[a] != 1:
            raise ShapeError(f"axis {a} has size {x[a]}, not 1: it cannot be squeezed")
    return tuple(d for i, d in enumerate(x) if i not in gone)


def unsqueeze_shape(x, axes) -> tuple[int, ...]:
    """Unsqueeze-13: size-1 axes inserted at the given positions of the output (rank r + len(axes))."""
    x = list(x)
    rank = len(x) + len(axes)
    new = _axes(axes, rank)
    rest = iter(x)
    return tuple(1 if i in new else next(rest) for i in range(rank))


def transpose_perm(rank: int, perm=None) -> list[int]:
    """Transpose-13's permutation: perm as given (a permutation of 0..r-1), reversed axes when omitted."""
    if perm is None:
        return list(range(rank))[::-1]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"perm {perm} is not a permutation of the axes 0..{rank - 1} of a rank-{rank} input")
    return perm


def transpose_shape(x, perm=None) -> tuple[int, ...]:
    x = tuple(x)
    return tuple(x[p] for p in transpose_perm(len(x), perm))


def expand_shape(x, to) -> tuple[int, ...]:
    """Expand-13: x broadcast against shape (numpy's multidirectional rule): aligned from the right, each pair of
    dims equal or one of them 1; shape of lower rank than x is allowed."""
    x, to = tuple(x), list(to)
    if any(v < 0 for v in to):
        raise ShapeError(f"shape {to} holds a negative dim")
    rank = max(len(x), len(to))
    a, b = (1,) * (rank - len(x)) + x, [1] * (rank - len(to)) + to
    out = []
    for i, (p, q) in enumerate(zip(a, b)):
        if p != q and 1 not in (p, q):
            raise ShapeError(f"input {list(x)} cannot be expanded to {to}: dims {p} and {q} at output axis {i}")
        out.append(q if p == 1 else p)
    return tuple(out)


def tile_shape(x, repeats) -> tuple[int, ...]:
    """Tile-13: one repeat per input axis, each >= 0; output dim i = x[i] * repeats[i]."""
    x, repeats = tuple(x), list(repeats)
    if len(repeats) != len(x):
        raise ShapeError(f"repeats {repeats} has {len(repeats)} entries; the input has rank {len(x)}")
    if any(r < 0 for r in repeats):
        raise ShapeError(f"repeats {repeats} holds a negative value")
    return tuple(d * r for d, r in zip(x, repeats))


# ---- the VJPs ---------------------------------------------------------------------------------------------

def _f64(a):
    return np.asarray(a, dtype=np.float64)


def reshape_vjp(dY, data, shape, *, allowzero=0):
    """ddata = dY read in row-major order into data's shape."""
    return _f64(dY).reshape(np.shape(data))


def flatten_vjp(dY, input, *, axis=1):
    return _f64(dY).reshape(np.shape(input))


def squeeze_vjp(dY, data, axes=None):
    return _f64(dY).reshape(np.shape(data))


def unsqueeze_vjp(dY, data, axes):
    return _f64(dY).reshape(np.shape(data))


def transpose_vjp(dY, data, *, perm=None):
    """ddata = dY transposed by the inverse permutation: Y's axis i is data's axis perm[i]."""
    perm = transpose_perm(np.ndim(data), perm)
    return np.transpose(_f64(dY), np.argsort(perm))


def expand_vjp(dY, input, shape):
    """dinput = dY summed over the axes the broadcast added or stretched from 1."""
    return unbroadcast(dY, np.shape(input))


def tile_vjp(dY, input, repeats):
    """dinput[j] = the sum of dY over the repeats[i] copies along every axis i: dY viewed as
    [r0, d0, r1, d1, ...] summed over the r axes."""
    dims, reps = np.shape(input), _ints(repeats)
    interleaved = [n for pair in zip(reps, dims) for n in pair]
    return _f64(dY).reshape(interleaved).sum(axis=tuple(range(0, 2 * len(dims), 2))).reshape(dims)


# ---- accuracy (Expand and Tile sum several elements of dY into one) -------------------------------------

def copies(dY, input, *rest, **attributes) -> int:
    """K: how many elements of dY add into each element of the input's gradient."""
    return max(1, np.size(dY) // max(1, np.size(input)))


def expand_magnitude(dY, input, shape):
    return expand_vjp(np.abs(_f64(dY)), input, shape)


def tile_magnitude(dY, input, repeats):
    return tile_vjp(np.abs(_f64(dY)), input, repeats)


# ---- case shapes: one hook per op; the float input's shape is the case param `x` ------------------------

def _y(rule, fallback, *args):
    """The forward output's shape, or for an invalid case (the rule raises) the group's `dY` param / a fallback."""
    try:
        return tuple(rule(*args))
    except ShapeError:
        return tuple(fallback)


def _fallback(params, values=()):
    return params.get("dY", [max(1, int(v)) for v in values] or [1])


def reshape_case_shapes(params):
    """{data, shape, dY} from `x` (data's shape) and `to` (the shape input's values; the group's generator
    writes the same values), with `allowzero` when the group sets it."""
    x, to = list(params["x"]), list(params["to"])
    return {"data": x, "shape": [len(to)],
            "dY": _y(reshape_shape, _fallback(params, to), x, to, params.get("allowzero", 0))}


def flatten_case_shapes(params):
    x = list(params["x"])
    return {"input": x, "dY": _y(flatten_shape, _fallback(params), x, params.get("axis", 1))}


def squeeze_case_shapes(params):
    """`ax`: the axes input's values (left out when the group omits the input)."""
    x, axes = list(params["x"]), params.get("ax")
    return {"data": x, "axes": None if axes is None else [len(axes)],
            "dY": _y(squeeze_shape, _fallback(params), x, axes)}


def unsqueeze_case_shapes(params):
    x, axes = list(params["x"]), list(params["ax"])
    return {"data": x, "axes": [len(axes)], "dY": _y(unsqueeze_shape, _fallback(params), x, axes)}


def transpose_case_shapes(params):
    x = list(params["x"])
    return {"data": x, "dY": _y(transpose_shape, _fallback(params), x, params.get("perm"))}


def expand_case_shapes(params):
    x, to = list(params["x"]), list(params["to"])
    return {"input": x, "shape": [len(to)], "dY": _y(expand_shape, _fallback(params, to), x, to)}


def tile_case_shapes(params):
    x, reps = list(params["x"]), list(params["reps"])
    return {"input": x, "repeats": [len(reps)], "dY": _y(tile_shape, _fallback(params, x), x, reps)}


# ---- validity (valid_values): the op's rules on the case's values, and dY of the forward output's shape --

def _check(rule, dY, *args) -> str | None:
    try:
        want = tuple(rule(*args))
    except ShapeError as e:
        return str(e)
    if tuple(np.shape(dY)) != want:
        return f"dY has shape {list(np.shape(dY))}; the forward output has shape {list(want)}"
    return None


def _values(tensor, name: str) -> list[int]:
    if np.ndim(tensor) != 1:
        raise ShapeError(f"{name} must be 1-D, got shape {list(np.shape(tensor))}")
    return _ints(tensor)


def _guarded(check):
    def run(inputs, attributes):
        try:
            return check(inputs, attributes)
        except ShapeError as e:
            return str(e)
    run.__name__, run.__doc__ = check.__name__, check.__doc__
    return run


@_guarded
def reshape_check(inputs, attributes):
    """valid_values: Reshape-14's rules on the shape input, and dY of the reshaped shape."""
    return _check(reshape_shape, inputs["dY"], np.shape(inputs["data"]), _values(inputs["shape"], "shape"),
                  attributes["allowzero"])


@_guarded
def flatten_check(inputs, attributes):
    """valid_values: axis in [-r, r], and dY of the flattened shape."""
    return _check(flatten_shape, inputs["dY"], np.shape(inputs["input"]), attributes["axis"])


@_guarded
def squeeze_check(inputs, attributes):
    """valid_values: each axis in range, named once, of size 1; dY of the squeezed shape."""
    axes = inputs.get("axes")
    return _check(squeeze_shape, inputs["dY"], np.shape(inputs["data"]), None if axes is None else _values(axes, "axes"))


@_guarded
def unsqueeze_check(inputs, attributes):
    """valid_values: each axis in [-R, R - 1] of the output rank R, named once; dY of the unsqueezed shape."""
    return _check(unsqueeze_shape, inputs["dY"], np.shape(inputs["data"]), _values(inputs["axes"], "axes"))


@_guarded
def transpose_check(inputs, attributes):
    """valid_values: perm a permutation of the input's axes; dY of the transposed shape."""
    return _check(transpose_shape, inputs["dY"], np.shape(inputs["data"]), attributes["perm"])


@_guarded
def expand_check(inputs, attributes):
    """valid_values: the input broadcastable against shape; dY of the broadcast shape."""
    return _check(expand_shape, inputs["dY"], np.shape(inputs["input"]), _values(inputs["shape"], "shape"))


@_guarded
def tile_check(inputs, attributes):
    """valid_values: one non-negative repeat per input axis; dY of the tiled shape."""
    return _check(tile_shape, inputs["dY"], np.shape(inputs["input"]), _values(inputs["repeats"], "repeats"))


# ---- cases.from_node hooks for Reshape, Expand and Flatten (training graph; one per case_shapes hook) --------

def _shape_values(node) -> list[int]:
    """The `shape` input's constant values; when the graph computes them (Shape -> ... -> Concat), the forward
    output's own shape (dY's), which writes the same result with no 0 or -1."""
    return node.value("shape") if "shape" in node.values else list(node.shape("dY"))


def _computed_shape(node) -> dict:
    """The group generator for a `shape` input the graph computes: dY's shape (a constant one is match()'s literal)."""
    return {} if "shape" in node.values else {"inputs": {"shape": {"kind": "shape_of", "of": "dY"}}}


def reshape_from_node(node) -> dict:
    """`x` = data's shape, `to` = the shape input's values (0 and -1 as written); allowzero is match()'s."""
    return {"x": list(node.shape("data")), "to": _shape_values(node), **_computed_shape(node)}


def expand_from_node(node) -> dict:
    return {"x": list(node.shape("input")), "to": _shape_values(node), **_computed_shape(node)}


def flatten_from_node(node) -> dict:
    return {"x": list(node.shape("input"))}


# ---- cases.from_node hooks for Squeeze, Unsqueeze, Transpose and Tile (training graph; graph_b block) ----------

def _added_axes(short, long) -> list[int]:
    """The positions of `long` that are size-1 dims absent from `short` (matched from the left): Squeeze's or
    Unsqueeze's axes when the graph computes them; any consistent choice is the same reshape."""
    added, j = [], 0
    for i, d in enumerate(long):
        if j < len(short) and short[j] == d:  # the earliest match: a subsequence if any is
            j += 1
        else:
            added.append(i)
    if j != len(short) or any(long[i] != 1 for i in added):
        raise ValueError(f"{list(long)} is not {list(short)} with size-1 dims added")
    return added


def squeeze_from_node(node) -> dict:
    """`x` = data's shape, `ax` = the axes constant (computed axes: the dims of data dY lacks)."""
    x = list(node.shape("data"))
    if node.shapes.get("axes") is None:
        return {"x": x}
    if "axes" in node.values:
        return {"x": x, "ax": node.value("axes")}
    ax = _added_axes(node.shape("dY"), x)
    return {"x": x, "ax": ax, "inputs": {"axes": {"values": ax}}}  # computed in the graph: the group writes them


def unsqueeze_from_node(node) -> dict:
    """`x` = data's shape, `ax` = the axes constant (computed axes: the dims of dY data lacks)."""
    x = list(node.shape("data"))
    if "axes" in node.values:
        return {"x": x, "ax": node.value("axes")}
    ax = _added_axes(x, node.shape("dY"))
    return {"x": x, "ax": ax, "inputs": {"axes": {"values": ax}}}  # computed in the graph: the group writes them


def transpose_from_node(node) -> dict:
    """`x` = data's shape (perm is match()'s, from the node's attribute)."""
    return {"x": list(node.shape("data"))}


def tile_from_node(node) -> dict:
    """`x` = the input's shape, `reps` = the repeats constant (computed repeats: dY / input per axis)."""
    x = list(node.shape("input"))
    if "repeats" in node.values:
        return {"x": x, "reps": node.value("repeats")}
    y = node.shape("dY")
    if 0 in x:
        raise ValueError(f"repeats of an empty input {x} are not read from dY {list(y)}")
    return {"x": x, "reps": [n // d for n, d in zip(y, x)]}
