"""ConcatTraining (com.microsoft): 1 to 4 inputs joined along `axis`, plus per_input_length (int64): each
input's size along the axis.

What ORT writes in place of Concat in training graphs (its gradient, SplitTraining, cuts dY back by
per_input_length), on data (GPT-2's QKV) and on int64 shape tensors (two or four [1] tensors building a Reshape's
shape). The schema's inputs are variadic; the spec states input0 and the optional input1..input3, the present
ones first. The reference writes each output element from its source by flat index arithmetic;
tests/test_concat_training.py proves it against numpy.concatenate.
"""
import numpy as np

NAMES = ("input0", "input1", "input2", "input3")


def concat_training_shapes(params):
    """{input0..3} from `x` (the shared shape, the axis' entry ignored), `sizes` (each present input's size along
    the axis: 1 to 4 of them; the inputs past them are left out) and the axis."""
    x = [int(d) for d in params["x"]]
    sizes = list(params["sizes"])
    if not 1 <= len(sizes) <= len(NAMES):
        raise ValueError(f"sizes {sizes}: ConcatTraining's spec states 1 to {len(NAMES)} inputs")
    axis = params.get("axis", 0)
    ax = axis % len(x) if x and -len(x) <= axis < len(x) else 0
    out = {name: None for name in NAMES}
    for name, n in zip(NAMES, sizes):
        shape = list(x)
        if shape:
            shape[ax] = int(n)
        out[name] = tuple(shape)
    if "input2_shape" in params:  # an invalid group's mismatched third input
        out["input2"] = tuple(int(d) for d in params["input2_shape"])
    return out


def concat_training_valid(shapes, attributes):
    """valid_if: the present inputs come first and share a rank >= 1 and every dim but the axis'; axis within the
    rank."""
    present = [shapes.get(n) is not None for n in NAMES]
    if present != sorted(present, reverse=True):
        return f"inputs {[n for n, p in zip(NAMES, present) if p]} are given: the present ones must come first"
    ss = [tuple(shapes[n]) for n in NAMES if shapes.get(n) is not None]
    r = len(ss[0])
    axis = int(attributes.get("axis", 0))
    if r == 0:
        return "scalar inputs cannot be concatenated"
    if not -r <= axis < r:
        return f"axis {axis} is outside [-{r}, {r - 1}]"
    ax = axis % r
    for s in ss[1:]:
        if len(s) != r or any(a != b for i, (a, b) in enumerate(zip(s, ss[0])) if i != ax):
            return f"inputs of shapes {[list(t) for t in ss]} differ outside axis {axis}"
    return None


def concat_training(input0, input1=None, input2=None, input3=None, *, axis):
    """(concat_result in float64 for a float input, per_input_length int64 [number of inputs]); the harness passes
    integer inputs as float64 (exact below 2**53). Output element (o, j, i),
    o over the dims before the axis, j < the total length, i over the dims after it, comes from the input k
    whose range [start_k, start_k + n_k) holds j, at its own (o, j - start_k, i)."""
    xs = [np.asarray(t) for t in (input0, input1, input2, input3) if t is not None]
    ax = int(axis) % xs[0].ndim
    lens = np.array([t.shape[ax] for t in xs], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    total = int(lens.sum())
    shape = xs[0].shape[:ax] + (total,) + xs[0].shape[ax + 1:]
    outer = int(np.prod(xs[0].shape[:ax], dtype=np.int64))
    inner = int(np.prod(xs[0].shape[ax + 1:], dtype=np.int64))
    dtype = np.float64 if np.issubdtype(xs[0].dtype, np.floating) else xs[0].dtype
    y = np.zeros(outer * total * inner, dtype=dtype)
    for k, t in enumerate(xs):
        n = int(lens[k])
        o, j, i = np.meshgrid(np.arange(outer), np.arange(n), np.arange(inner), indexing="ij")
        y[((o * total + starts[k] + j) * inner + i).reshape(-1)] = t.reshape(-1).astype(dtype)
    return y.reshape(shape), lens


def bench_bytes(shapes, attributes):
    """the inputs read, the result written, float32."""
    return 8 * sum(int(np.prod(shapes[n], dtype=np.int64)) for n in NAMES if shapes.get(n) is not None)


def bench_torch(inputs, attributes):
    """torch.cat of the present inputs along the axis."""
    import torch

    from reference._torch import tensors

    xs = [t for t in tensors(*inputs[:len(NAMES)]) if t is not None]
    axis = int(attributes["axis"])
    return lambda: torch.cat(xs, dim=axis)


def from_node(node):
    """the inputs' shared shape (input0's) and each present input's size along the axis (1 to 4 inputs, the
    present ones first)."""
    axis = int(node.attributes.get("axis", 0))
    shapes = [node.shapes.get(n) for n in NAMES]
    present = [s is not None for s in shapes]
    if present != sorted(present, reverse=True):
        raise ValueError("the node leaves out an input before a present one: ConcatTraining's inputs are variadic")
    shapes = [list(s) for s in shapes if s is not None]
    ax = axis % len(shapes[0])
    params = {"x": shapes[0], "sizes": [s[ax] for s in shapes]}
    integers = {n: dict(INTEGER_DATA) for n, p in zip(NAMES, present) if p and node.dtypes.get(n, "").startswith("int")}
    if integers:  # integer data (the graph's constants come in as literal values instead)
        params["inputs"] = integers
    return params


# Integer inputs that are not the graph's constants: drawn as integers of either sign (the spec's defaults are floats).
INTEGER_DATA = {"kind": "indices", "range": [-1000, 1000]}
