"""FakeQuant and FakeQuantGrad (com.microsoft): per-tensor fake quantization and its straight-through gradient.

FakeQuant (reference.forward.fake_quant:fake_quant) is the forward computation quantization-aware training inserts
(ORT's QDQ fusion turns a QuantizeLinear -> DequantizeLinear pair into it); its reference is proven against exact
rational arithmetic in tests/test_fake_quant.py. FakeQuantGrad is what ORT's gradient builder writes for it
(GetFakeQuantGradient: FakeQuantGrad(dY, FakeQuant's mask)): the straight-through estimator
    dX = mask ? dY : 0
which is not the derivative of the rounding (zero almost everywhere): its groups carry `vjp` with that reason.
"""
import numpy as np

from reference.forward.fake_quant import fake_quant


def fake_quant_op(input, scale, zero_point, *, quant_min=0, quant_max=255):
    """FakeQuant's reference: (output, mask)."""
    return fake_quant(input, scale, zero_point, quant_min=quant_min, quant_max=quant_max)


def fake_quant_grad(dY, gradient_mask):
    """FakeQuantGrad's reference: dY where the mask is true, 0 elsewhere (selected, not multiplied: NaN and inf in
    dY under a false mask give 0)."""
    dY = np.asarray(dY, dtype=np.float64)
    if np.shape(gradient_mask) != dY.shape:
        raise ValueError(f"gradient_mask shape {list(np.shape(gradient_mask))} != dY shape {list(dY.shape)}")
    return np.where(np.asarray(gradient_mask, dtype=bool), dY, 0.0)


# ---- plausible wrong semantics ----

def fake_quant_half_away(input, scale, zero_point, *, quant_min=0, quant_max=255):
    """Ties rounded away from zero (C's round / np.round's school rounding), not to even."""
    x = np.asarray(input, dtype=np.float64)
    s, zp = float(np.asarray(scale).reshape(-1)[0]), float(np.asarray(zero_point).reshape(-1)[0])
    with np.errstate(all="ignore"):
        q = np.sign(x / s) * np.floor(np.abs(x / s) + 0.5) + zp
        return (np.clip(q, quant_min, quant_max) - zp) * s, (q >= quant_min) & (q <= quant_max)


def fake_quant_mask_after_clamp(input, scale, zero_point, *, quant_min=0, quant_max=255):
    """The mask taken from the clamped value (always true)."""
    out, mask = fake_quant(input, scale, zero_point, quant_min=quant_min, quant_max=quant_max)
    return out, np.ones_like(mask)


def fake_quant_grad_multiplied(dY, gradient_mask):
    """dY * mask: NaN and inf under a false mask stay NaN (0 * inf)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(dY, dtype=np.float64) * np.asarray(gradient_mask, dtype=np.float64)


# ---- hooks ----

def case_shapes(params):
    """scale's and zero_point's shape: the `qparam_shape` param, a scalar when absent."""
    shape = tuple(int(d) for d in params.get("qparam_shape", ()))
    return {"scale": shape, "zero_point": shape}


def qparams_check(shapes, attributes):
    """valid_if: scale and zero_point hold one value each, shape [] or [1]; quant_min <= quant_max."""
    for name in ("scale", "zero_point"):
        s = shapes.get(name)
        if s is not None and tuple(s) not in ((), (1,)):
            return f"{name} has shape {list(s)}; it must be a scalar or [1]"
    lo, hi = attributes.get("quant_min", 0), attributes.get("quant_max", 255)
    if lo > hi:
        return f"quant_min {lo} > quant_max {hi}"
    return None


def qparams_values_check(inputs, attributes):
    """valid_values: scale finite and > 0; zero_point an integer value."""
    s = float(np.asarray(inputs["scale"]).reshape(-1)[0])
    zp = float(np.asarray(inputs["zero_point"]).reshape(-1)[0])
    if not (np.isfinite(s) and s > 0):
        return f"scale {s} must be finite and > 0"
    if not (np.isfinite(zp) and zp == np.round(zp)):
        return f"zero_point {zp} must be an integer value"
    return None


def grad_shape_check(shapes, attributes):
    """valid_if (FakeQuantGrad): the mask has dY's shape."""
    if shapes.get("gradient_mask") is not None and tuple(shapes["gradient_mask"]) != tuple(shapes["dY"]):
        return f"gradient_mask shape {list(shapes['gradient_mask'])} != dY shape {list(shapes['dY'])}"
    return None


def bench_bytes(shapes, attributes):
    """FakeQuant: input read (float32), output (float32) and mask (bool) written."""
    return 9 * int(np.prod(shapes["input"], dtype=np.int64))


def grad_bench_bytes(shapes, attributes):
    """FakeQuantGrad: dY (float32) and the mask (bool) read, dX written."""
    return 9 * int(np.prod(shapes["dY"], dtype=np.int64))


def bench_torch(inputs, attributes):
    """torch.fake_quantize_per_tensor_affine (output only; its mask variant is internal)."""
    import torch

    from reference._torch import tensors

    x, s, zp = tensors(*inputs)
    scale, zero = float(s.reshape(-1)[0]), int(zp.reshape(-1)[0])
    lo, hi = int(attributes.get("quant_min", 0)), int(attributes.get("quant_max", 255))
    return lambda: torch.fake_quantize_per_tensor_affine(x, scale, zero, lo, hi)


def grad_bench_torch(inputs, attributes):
    """The straight-through gradient as torch computes it: dY * mask."""
    import torch

    from reference._torch import tensors

    dy, mask = tensors(*inputs)
    return lambda: torch.where(mask, dy, torch.zeros((), dtype=dy.dtype))


def from_node(node):
    """input's shape, the scale's when not a scalar, quant_min and quant_max as written."""
    params = {"shape": list(node.shape("input"))}
    if node.shapes.get("scale"):
        params["qparam_shape"] = list(node.shapes["scale"])
    for name in ("quant_min", "quant_max"):
        if name in node.attributes:
            params[name] = node.attributes[name]
    return params


def grad_from_node(node):
    """dY's shape."""
    return {"shape": list(node.shape("dY"))}
