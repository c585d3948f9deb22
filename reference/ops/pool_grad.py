"""MaxPoolGrad and AveragePoolGrad (ai.onnx domain, onnxruntime-training) in float64, with their spec hooks.

Neither op can derive dX's shape from its inputs (MaxPoolGrad takes only dY and Indices; a pooled dY
fits several input sizes): the model declares it as the output's static shape, and the harness passes
it here as `dX_shape` (specs: `outputs[dX].shape_from: X`, a forward input the op does not take).
"""
from __future__ import annotations

import math

import numpy as np

from reference.forward.pool import average_pool_divisors, output_shape, pool_geometry, pool_problem, windows

POOL_ATTRIBUTES = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad")


def max_pool_grad(dY, Indices, *, dX_shape):
    """dX = zeros(dX_shape); dX.flat[Indices[i]] += dY[i]: windows sharing an argmax add up."""
    dx = np.zeros(math.prod(dX_shape), dtype=np.float64)
    np.add.at(dx, np.asarray(Indices, dtype=np.int64).ravel(), np.asarray(dY, dtype=np.float64).ravel())
    return dx.reshape(tuple(dX_shape))


def average_pool_grad(dY, *, kernel_shape, strides, auto_pad, pads, count_include_pad, ceil_mode, dX_shape):
    """Each dY element spread evenly over its window's input elements, divided as the forward divides."""
    x_shape = tuple(int(d) for d in dX_shape)
    attrs = dict(kernel_shape=kernel_shape, strides=strides, pads=pads, ceil_mode=ceil_mode, auto_pad=auto_pad)
    geom = pool_geometry(x_shape[2:], **attrs)
    flat, inside, _ = windows(x_shape[2:], geom)
    divisors = average_pool_divisors(x_shape[2:], geom, count_include_pad)
    planes = x_shape[0] * x_shape[1]
    share = np.asarray(dY, dtype=np.float64).reshape(planes, divisors.size) / divisors.reshape(1, -1)  # [planes, out]
    k = flat.shape[-1]
    flat, inside = flat.reshape(-1, k), inside.reshape(-1, k)
    dx = np.zeros((planes, math.prod(x_shape[2:])), dtype=np.float64)
    for j in range(k):  # one kernel position at a time: np.add.at sums the windows that overlap there
        rows = inside[:, j]
        np.add.at(dx, (slice(None), flat[rows, j]), share[:, rows])
    return dx.reshape(x_shape)


# ---- hooks ---------------------------------------------------------------------------------------

def _pool_attrs(params: dict, names=POOL_ATTRIBUTES) -> dict:
    defaults = {"ceil_mode": 0, "auto_pad": "NOTSET"}
    return {n: params.get(n, defaults.get(n)) for n in names}


def max_pool_case_shapes(params):
    """{X, dY}: X from the `shape` param, dY the MaxPool output shape (an invalid one: X's shape)."""
    x = tuple(int(d) for d in params["shape"])
    try:
        return {"X": x, "dY": output_shape(x, **_pool_attrs(params))}
    except Exception:  # noqa: BLE001 - an invalid pooling: the group's own shapes or the attribute check reports it
        return {"X": x, "dY": x}


def average_pool_case_shapes(params):
    x = tuple(int(d) for d in params["shape"])
    try:
        return {"X": x, "dY": output_shape(x, **_pool_attrs(params, AVERAGE_POOL_ATTRIBUTES))}
    except Exception:  # noqa: BLE001 - an invalid pooling: the group's own shapes report it
        return {"X": x, "dY": x}


AVERAGE_POOL_ATTRIBUTES = ("kernel_shape", "strides", "pads", "ceil_mode", "auto_pad")


def max_pool_grad_check(shapes, attrs):
    """dY must hold one entry per element of a pooled dX: rank 3 to 5 and the same batch as dX."""
    dy, x = shapes.get("dY"), attrs.get("dX_shape")
    if dy is None or x is None:
        return None
    if not 3 <= len(dy) <= 5 or len(x) != len(dy):
        return f"dY has rank {len(dy)} and dX {list(x)} rank {len(x)}; MaxPool outputs have rank 3 to 5, like their input"
    if tuple(dy[:2]) != tuple(x[:2]):
        return f"dY's batch and channels {list(dy[:2])} differ from dX's {list(x[:2])}"
    return None


def max_pool_indices_check(inputs, attrs):
    """Every index must address an element of dX: [0, prod(dX_shape))."""
    idx, x = inputs.get("Indices"), attrs.get("dX_shape")
    if idx is None or x is None or idx.size == 0:
        return None
    size = math.prod(x)
    bad = (idx < 0) | (idx >= size)
    if bad.any():
        return f"Indices holds {int(idx[bad].ravel()[0])}, outside [0, {size}) for dX {list(x)}"
    return None


def average_pool_grad_check(shapes, attrs):
    """The attributes must make a valid AveragePool of a dX-shaped input whose output has dY's shape."""
    dy, x = shapes.get("dY"), attrs.get("dX_shape")
    if dy is None or x is None:
        return None
    x = tuple(x)
    if not 3 <= len(x) <= 5:
        return f"dX {list(x)} has rank {len(x)}; AveragePool takes rank 3 to 5 (N, C and 1 to 3 spatial dims)"
    pool = {n: attrs.get(n) for n in AVERAGE_POOL_ATTRIBUTES}
    if problem := pool_problem(x[2:], **pool):
        return problem
    want = output_shape(x, **pool)
    if tuple(dy) != want:
        return f"dY shape {list(dy)} != AveragePool output shape {list(want)} for dX {list(x)}"
    return None


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_max_pool_bytes(shapes, attributes):
    """dY (4) and Indices (8) read per output element, dX written."""
    return math.prod(shapes["dY"]) * (4 + 8) + math.prod(attributes["dX_shape"]) * 4


def bench_max_pool_fixed_bytes(shapes, attributes):
    """The indices' bytes, whatever the float type."""
    return math.prod(shapes["dY"]) * 8


def bench_average_pool_bytes(shapes, attributes):
    """dY read, dX written."""
    return (math.prod(shapes["dY"]) + math.prod(attributes["dX_shape"])) * 4


def _pool_2d(geometry):
    kernel = list(geometry["kernel_shape"])
    strides = list(geometry.get("strides") or [1] * len(kernel))
    pads = list(geometry.get("pads") or [0] * (2 * len(kernel)))[:len(kernel)]  # torch pads symmetrically
    return kernel, strides, pads


def bench_torch_max_pool(inputs, attributes, params):
    """MaxPool's geometry is the forward op's (case params), not MaxPoolGrad's attributes."""
    import torch

    from reference._torch import tensors

    dy, _ = tensors(*inputs)
    kernel, strides, pads = _pool_2d(params)
    x_shape = attributes["dX_shape"]
    # ATen's indices count within each (n, c) plane; ONNX's over the whole tensor: converted here, untimed
    plane = torch.from_numpy(inputs[1] % math.prod(x_shape[2:]))
    x = torch.empty(x_shape)
    return lambda: torch.ops.aten.max_pool2d_with_indices_backward(dy, x, kernel, strides, pads, [1, 1], False, plane)


def bench_torch_average_pool(inputs, attributes):
    import torch

    from reference._torch import tensors

    (dy,) = tensors(*inputs)
    kernel, strides, pads = _pool_2d(attributes)
    x = torch.empty(attributes["dX_shape"])
    return lambda: torch.ops.aten.avg_pool2d_backward(dy, x, kernel, strides, pads, False, False, None)


# ---- model: a real graph's node -> case params (cases.from_node) -----------------------------------------------

def _input_size(out: int, i: int, nd: int, attrs: dict) -> int:
    """An input extent along spatial dim i whose pooled size is `out`: out * stride when it fits (the usual input,
    a multiple of the stride), else the smallest (dY fits several; the graph's X, when the caller shows it, wins)."""
    one = {"kernel_shape": [attrs["kernel_shape"][i]], "ceil_mode": attrs.get("ceil_mode", 0),
           "auto_pad": attrs.get("auto_pad", "NOTSET")}
    for name in ("strides", "dilations"):
        if attrs.get(name):
            one[name] = [attrs[name][i]]
    if attrs.get("pads"):
        one["pads"] = [attrs["pads"][i], attrs["pads"][i + nd]]
    stride = max(one.get("strides", [1])[0], 1)
    span = 1 + max(out, 1) * stride + one["kernel_shape"][0] * one.get("dilations", [1])[0]
    for size in (out * stride, *range(1, span + 1)):  # out * stride first: ResNet's 112 -> 56, not 111
        try:
            if pool_geometry((size,), **one).out[0] == out:
                return size
        except (ValueError, ZeroDivisionError):
            continue
    raise ValueError(f"no input extent pools to {out} along spatial dim {i} with {one}")


def from_node(node):
    """MaxPoolGrad / AveragePoolGrad: `shape` is X's (dX's) shape. The node takes only dY (and Indices): X's shape
    is dX's as the graph ran it (node.output_shapes), else one that pools to dY (_input_size)."""
    if node.output_shapes.get("dX") is not None:
        return {"shape": list(node.output_shapes["dX"])}
    dy = node.shape("dY")
    nd = len(dy) - 2
    return {"shape": [*dy[:2], *(_input_size(o, i, nd, node.attributes) for i, o in enumerate(dy[2:]))]}
