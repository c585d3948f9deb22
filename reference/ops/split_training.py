"""SplitTraining (com.microsoft): input cut along `axis` into three parts whose sizes are the int64 `split`
input's values.

Not the gradient of a forward op: ORT's gradient builder writes it for ConcatTraining's (Concat's) gradient,
with the forward inputs' lengths along the axis as the split input. The spec fixes the arity at three
outputs (GPT-2's fused QKV projection split into 3 x 768). The reference copies element by element through
flat indices; tests/test_split_training.py proves it against numpy.split.
"""
import numpy as np


def split_training_shapes(params):
    """{input, split, output0..2} from `x` (input's shape), `sizes` (the split values) and the axis."""
    x = tuple(int(d) for d in params["x"])
    axis = params.get("axis", 0)
    ax = axis % len(x) if x and -len(x) <= axis < len(x) else 0
    out = {"input": x, "split": (len(params["sizes"]),)}
    for i, n in enumerate(params["sizes"]):
        shape = list(x)
        if shape:
            shape[ax] = int(n)
        out[f"output{i}"] = tuple(shape)
    return out


def split_training_valid_values(inputs, attributes):
    """valid_values: three non-negative sizes summing to input's dim along axis."""
    x = np.asarray(inputs["input"])
    s = [int(v) for v in np.asarray(inputs["split"]).reshape(-1)]
    axis = int(attributes.get("axis", 0))
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        return f"axis {axis} is outside [-{x.ndim}, {x.ndim - 1}]"
    if len(s) != 3:
        return f"split holds {len(s)} sizes; there are 3 outputs"
    if any(v < 0 for v in s):
        return f"split {s} holds a negative size"
    if sum(s) != x.shape[axis]:
        return f"split {s} sums to {sum(s)}, not input's dim {x.shape[axis]} along axis {axis}"
    return None


def split_training(input, split, *, axis=0):
    """The three parts, in float64 (for a float input), by flat index arithmetic: element (o, j, i) of part k
    (o over the dims before the axis, j < size_k, i over the dims after it) is input's flat element
    (o * dim + start_k + j) * inner + i."""
    x = np.asarray(input)
    sizes = [int(v) for v in np.asarray(split).reshape(-1)]
    ax = int(axis) % x.ndim
    dim = x.shape[ax]
    outer = int(np.prod(x.shape[:ax], dtype=np.int64))
    inner = int(np.prod(x.shape[ax + 1:], dtype=np.int64))
    flat = x.reshape(-1)
    outs, start = [], 0
    for n in sizes:
        o, j, i = np.meshgrid(np.arange(outer), np.arange(n), np.arange(inner), indexing="ij")
        idx = ((o * dim + start + j) * inner + i).reshape(-1)
        part = flat[idx].reshape(x.shape[:ax] + (n,) + x.shape[ax + 1:])
        outs.append(part.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else part)
        start += n
    return tuple(outs)


def bench_bytes(shapes, attributes):
    """input read, the parts written, float32."""
    return 8 * int(np.prod(shapes["input"], dtype=np.int64))


def from_node(node):
    """input's shape and the split sizes: the split input's values when the graph holds them as a constant, else
    (ConcatTraining's per_input_length, computed) the outputs' lengths along the axis, written into the group."""
    x = list(node.shape("input"))
    if "split" in node.values:
        return {"x": x, "sizes": [int(v) for v in node.value("split")]}
    ax = int(node.attributes.get("axis", 0)) % len(x)
    parts = [name for name in ("output0", "output1", "output2") if name in node.output_shapes]
    if len(parts) != 3:
        raise ValueError(f"the node has {len(parts)} of its outputs; the spec states SplitTraining with three outputs")
    sizes = [int(node.output_shapes[name][ax]) for name in parts]
    return {"x": x, "sizes": sizes, "inputs": {"split": {"values": sizes}}}
