"""Scale (com.microsoft): output = input * scale, or input / scale when scale_down is 1.

Not the gradient of a forward op: ORT's gradient builder writes it as a forward computation of the
gradient graph (ReduceMean's and GlobalAveragePool's gradients divide the expanded dY by the element
count). The reference is proven against an independent float64 formula in tests/test_scale.py.
`scale` holds one value (any shape of one element: [] as the builder writes it, [1], [1, 1]); it may be
a float or an integer tensor. Division by zero (scale_down 1, scale 0 or -0) is invalid.
"""
import numpy as np


def case_shapes(params):
    """{scale: the group's `scale_shape` param, a scalar when absent}; input follows the `shape` param."""
    return {"scale": tuple(int(d) for d in params.get("scale_shape", ()))}


def scale_shape_check(shapes, attributes):
    """valid_if: scale holds exactly one value."""
    s = shapes.get("scale")
    if s is not None and int(np.prod(s, dtype=np.int64)) != 1:
        return f"scale has shape {list(s)}; it must hold exactly one value"
    return None


def scale_value_check(inputs, attributes):
    """valid_values: no division by zero."""
    s = np.asarray(inputs["scale"])
    if s.size == 1 and int(attributes.get("scale_down", 0)) == 1 and float(s.reshape(-1)[0]) == 0.0:
        return "scale_down 1 with scale 0: division by zero"
    return None


def scale_op(input, scale, scale_down=0):
    """Return output in float64: input * s, or input / s when scale_down is 1 (s = scale's one value)."""
    x = np.asarray(input, dtype=np.float64)
    s = float(np.asarray(scale).reshape(-1)[0])  # int32/int64 and every float type widen exactly
    with np.errstate(all="ignore"):
        return x / s if int(scale_down) == 1 else x * s


def scale_op_reciprocal_f32(input, scale, scale_down=0):
    """A plausible wrong semantics: scale read as float32 and its float32 reciprocal multiplied in (ORT's CPU kernel)."""
    x = np.asarray(input, dtype=np.float64)
    s = np.float32(np.asarray(scale).reshape(-1)[0])
    with np.errstate(all="ignore"):
        f = np.float32(1) / s if int(scale_down) == 1 else s
    return x * np.float64(f)


def scale_op_inverted(input, scale, scale_down=0):
    """A plausible wrong semantics: scale_down read the other way round."""
    return scale_op(input, scale, 1 - int(scale_down))


def bench_bytes(shapes, attributes):
    """input read, output written, float32."""
    return 8 * int(np.prod(shapes["input"], dtype=np.int64))


def bench_torch(inputs, attributes):
    """torch's x / n (ReduceMean's and GlobalAveragePool's backward divide by the count), or x * s."""
    from reference._torch import tensors

    (x,) = tensors(inputs[0])
    s = np.asarray(inputs[1]).reshape(-1)[0].item()
    if int(attributes.get("scale_down", 0)) == 1:
        return lambda: x / s
    return lambda: x * s


def from_node(node):
    """input's shape, and scale's when it is not a scalar (the builder writes a scalar)."""
    params = {"shape": list(node.shape("input"))}
    if node.shapes.get("scale"):
        params["scale_shape"] = list(node.shapes["scale"])
    return params
