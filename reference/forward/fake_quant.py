"""FakeQuant (com.microsoft): per-tensor fake quantization, the forward op of FakeQuantGrad.

Quantize, clamp, dequantize, with a per-tensor scale (> 0) and an integer-valued zero point (one value each):
    q      = round_half_to_even(input / scale) + zero_point      (the exact quotient of the given values)
    output = (clamp(q, quant_min, quant_max) - zero_point) * scale
    mask   = quant_min <= q <= quant_max                          (the straight-through estimator's mask)
+-inf quantize to the clamped ends (mask false); NaN gives a NaN output and a false mask.
"""
import numpy as np


def _one(v) -> float:
    return float(np.asarray(v, dtype=np.float64).reshape(-1)[0])


def fake_quant(input, scale, zero_point, *, quant_min=0, quant_max=255):
    """(output, mask): output float64, mask bool, both of input's shape."""
    x = np.asarray(input, dtype=np.float64)
    s, zp = _one(scale), _one(zero_point)
    with np.errstate(all="ignore"):
        # float32 values divided in float64: the quotient's rounding never moves it across a half-integer for
        # |q| < 2^13, so np.rint (round half to even) decides as the exact quotient would
        q = np.rint(x / s) + zp
        mask = (q >= quant_min) & (q <= quant_max)
        output = (np.clip(q, quant_min, quant_max) - zp) * s
    return np.asarray(output, dtype=np.float64), np.asarray(mask, dtype=bool)  # 0-d arrays, not NumPy scalars
