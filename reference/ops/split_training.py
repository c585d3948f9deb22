"""SplitTraining (com.microsoft): input cut along `axis` into one part per value of the int64 `split` input.

Not the gradient of a forward op: ORT's gradient builder writes it for ConcatTraining's (Concat's) gradient,
with the forward inputs' lengths along the axis as the split input. The schema's outputs are variadic; the spec
states 1 to 4 of them (output0..output3, as many as split holds sizes; the node writes the first len(split)
outputs: a case with fewer than four names them in its `outputs` param). The reference copies element by element
through flat indices; tests/test_split_training.py proves it against numpy.split.
"""
import numpy as np

NAMES = ("output0", "output1", "output2", "output3")


def split_training_shapes(params):
    """{input, split, output0..k-1} from `x` (input's shape), `sizes` (the split values, one per output) and the
    axis. The node's outputs are the first len(sizes): the last one the case asks for (its `outputs` param,
    all four when left out) must be output{len(sizes) - 1}."""
    x = tuple(int(d) for d in params["x"])
    sizes = list(params["sizes"])
    if not 1 <= len(sizes) <= len(NAMES):
        raise ValueError(f"sizes {sizes}: SplitTraining's spec states 1 to {len(NAMES)} outputs")
    asked = params.get("outputs") or NAMES
    last = max(NAMES.index(name) for name in asked)
    if last + 1 != len(sizes):
        raise ValueError(f"sizes {sizes} make {len(sizes)} outputs but the case asks for {NAMES[last]}: write "
                         f"`outputs: [{', '.join(NAMES[:len(sizes)])}]` beside them")
    axis = params.get("axis", 0)
    ax = axis % len(x) if x and -len(x) <= axis < len(x) else 0
    out = {"input": x, "split": (len(sizes),)}
    for name, n in zip(NAMES, sizes):
        shape = list(x)
        if shape:
            shape[ax] = int(n)
        out[name] = tuple(shape)
    return out


def split_training_valid_values(inputs, attributes):
    """valid_values: 1 to 4 non-negative sizes summing to input's dim along axis."""
    x = np.asarray(inputs["input"])
    s = [int(v) for v in np.asarray(inputs["split"]).reshape(-1)]
    axis = int(attributes.get("axis", 0))
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        return f"axis {axis} is outside [-{x.ndim}, {x.ndim - 1}]"
    if not 1 <= len(s) <= len(NAMES):
        return f"split holds {len(s)} sizes; the spec states 1 to {len(NAMES)} outputs"
    if any(v < 0 for v in s):
        return f"split {s} holds a negative size"
    if sum(s) != x.shape[axis]:
        return f"split {s} sums to {sum(s)}, not input's dim {x.shape[axis]} along axis {axis}"
    return None


def split_training(input, split, *, axis=0):
    """output0..output3: the len(split) parts (None past them), in float64 for a float input (the harness passes
    integer inputs as float64 too: exact below 2**53), by flat index arithmetic: element (o, j, i) of part k
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
    return tuple(outs) + (None,) * (len(NAMES) - len(outs))


def bench_bytes(shapes, attributes):
    """input read, the parts written, float32."""
    return 8 * int(np.prod(shapes["input"], dtype=np.int64))


def bench_torch(inputs, attributes):
    """torch.split's views made contiguous: each part copied out, as SplitTraining writes them."""
    import torch

    from reference._torch import tensors

    (x,) = tensors(inputs[0])
    sizes = [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
    axis = int(attributes.get("axis", 0))
    return lambda: [t.contiguous() for t in torch.split(x, sizes, dim=axis)]


def from_node(node):
    """input's shape and the split sizes: the split input's values when the graph holds them as a constant, else
    (ConcatTraining's per_input_length, computed) the outputs' lengths along the axis, written into the group.
    The node's outputs set the arity (harness.model.match writes the `outputs` param for fewer than four)."""
    x = list(node.shape("input"))
    data = {"input": {"kind": "indices", "range": [-1000, 1000]}} if node.dtypes.get("input", "").startswith("int") else {}
    if "split" in node.values:  # integer data drawn as integers (the spec's default draws floats)
        return {"x": x, "sizes": [int(v) for v in node.value("split")], **({"inputs": data} if data else {})}
    ax = int(node.attributes.get("axis", 0)) % len(x)
    parts = [name for name in NAMES if name in node.output_shapes]
    if not parts or parts != list(NAMES[:len(parts)]):
        raise ValueError(f"the node's outputs {parts} are not output0..output{len(parts) - 1}: the spec states "
                         f"SplitTraining with 1 to {len(NAMES)} outputs, their sizes from their shapes")
    sizes = [int(node.output_shapes[name][ax]) for name in parts]
    return {"x": x, "sizes": sizes, "inputs": {"split": {"values": sizes}, **data}}
