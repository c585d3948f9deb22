"""The VJP of ONNX Resize (opset 19) with respect to X, written from the operator's definition.

Resize (without antialias or with it) is separable and linear in X: along each axis a, output position o reads
a weighted sum of input positions, Y = X x_0 A_0 x_1 A_1 ... with A_a the [out, in] interpolation matrix of
axis a. So dX = dY x_0 A_0^T x_1 A_1^T ..., with every A_a built here from the math, row by row:
- the output coordinate o is mapped to x_original by coordinate_transformation_mode (half_pixel:
  (o + 0.5) / scale - 0.5; half_pixel_symmetric: the same shifted by in / 2 (1 - out / (scale in));
  pytorch_half_pixel: half_pixel, or -0.5 when scale in = 1; align_corners: o (in - 1) / (scale in - 1);
  asymmetric: o / scale; tf_crop_and_resize: start (in - 1) + o (end - start) (in - 1) / (scale in - 1),
  and a coordinate outside [0, in - 1] takes extrapolation_value: a zero row);
- nearest reads one element (nearest_mode rounds x_original's fraction); linear and cubic read the
  neighbours base + j, base = floor(x) (x - 1 when x is an integer, the fraction r then 1), with the weights
  of the triangle 1 - |t| and of Keys' cubic (coefficient cubic_coeff_a) at t = j - r; antialias
  (downscaling) stretches the kernel by 1 / scale: t = scale (j - r) over more neighbours, weights normalised;
- neighbours outside [0, in) read the edge element, or with exclude_outside get weight 0 (the others
  renormalised).
scales (or sizes / in, or with keep_aspect_ratio_policy the smallest / largest of them) give each axis its scale
and output length (floor(in * scale); round-half-up(scale * in) under a keep_aspect_ratio_policy); axes names
the axes scales, sizes and roi are given for.
"""
import math

import numpy as np

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize")


def _ints(values):
    return None if values is None else [int(v) for v in np.asarray(values).reshape(-1)]


def _floats(values):
    return None if values is None else [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def plan(x_shape, roi=None, scales=None, sizes=None, axes=None, keep_aspect_ratio_policy="stretch"):
    """Per axis: (scale, out length, roi start, roi end). ValueError naming what is invalid."""
    r = len(x_shape)
    axes = list(range(r)) if axes is None else [int(a) % r for a in _ints(axes)]
    scales, sizes, roi = _floats(scales), _ints(sizes), _floats(roi)
    if (scales is None) == (sizes is None):
        raise ValueError("exactly one of scales and sizes must be given")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise ValueError(f"{'scales' if scales is not None else 'sizes'} has {len(given)} entries for {len(axes)} axes")
    scale = [1.0] * r
    out = list(x_shape)
    if scales is not None:
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ValueError(f"scale {s} must be > 0")
            scale[a], out[a] = s, int(s * x_shape[a])
    else:
        for a, n in zip(axes, sizes):
            if n < 0 or x_shape[a] == 0:
                raise ValueError(f"size {n} for an axis of length {x_shape[a]}")
            scale[a], out[a] = n / x_shape[a], n
        if keep_aspect_ratio_policy != "stretch":
            pick = {"not_larger": min, "not_smaller": max}[keep_aspect_ratio_policy]
            s = pick(scale[a] for a in axes)
            for a in axes:
                scale[a], out[a] = s, int(s * x_shape[a] + 0.5)
    starts, ends = [0.0] * r, [1.0] * r
    if roi is not None and len(roi) == 2 * len(axes):
        for i, a in enumerate(axes):
            starts[a], ends[a] = roi[i], roi[len(axes) + i]
    return [(scale[a], out[a], starts[a], ends[a]) for a in range(r)]


def _cubic(t, A):
    t = abs(t)
    if t <= 1:
        return (A + 2) * t**3 - (A + 3) * t**2 + 1
    if t < 2:
        return A * t**3 - 5 * A * t**2 + 8 * A * t - 4 * A
    return 0.0


def _original(o, n_in, n_out, scale, mode, start, end):
    width = scale * n_in  # the output length before flooring, as the operator's formulas use it
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return -0.5 if width == 1 else (o + 0.5) / scale - 0.5
    if mode == "align_corners":
        return 0.0 if width == 1 else o * (n_in - 1) / (width - 1)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_crop_and_resize":
        if width == 1:
            return (end - start) * (n_in - 1) / 2 + start * (n_in - 1)
        return o * (end - start) * (n_in - 1) / (width - 1) + start * (n_in - 1)
    raise ValueError(f"coordinate_transformation_mode={mode!r} is not one of {', '.join(COORDINATE_MODES)}")


def axis_matrix(n_in, n_out, scale, start, end, *, mode, coordinate_transformation_mode, nearest_mode,
                cubic_coeff_a, exclude_outside, antialias):
    """A [n_out, n_in]: output position o = sum_i A[o, i] * input position i along one axis."""
    A = np.zeros((n_out, n_in))
    for o in range(n_out):
        x = _original(o, n_in, n_out, scale, coordinate_transformation_mode, start, end)
        if coordinate_transformation_mode == "tf_crop_and_resize" and not 0 <= x <= n_in - 1:
            continue  # extrapolation_value: a constant
        base = math.floor(x)
        r = x - base
        if r == 0:
            base, r = base - 1, 1.0  # an integer coordinate: the neighbour to the left, fraction 1
        if mode == "nearest":
            up = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5, "floor": r == 1.0,
                  "ceil": True}[nearest_mode]
            A[o, min(max(base + (1 if up else 0), 0), n_in - 1)] += 1.0
            continue
        s = min(scale, 1.0) if antialias else 1.0
        if mode == "linear":
            first = math.floor(-1 / s) + 1
            offsets = range(first, 2 - first)
            weights = [max(0.0, 1 - abs(s * (j - r))) for j in offsets]
        elif mode == "cubic":
            first = math.floor(-2 / s) + 1
            offsets = range(first, 2 - first)
            weights = [_cubic(s * (j - r), cubic_coeff_a) for j in offsets]
        else:
            raise ValueError(f"mode={mode!r} is not one of nearest, linear, cubic")
        if antialias:
            total = sum(weights)
            weights = [w / total for w in weights]
        index = [base + j for j in offsets]
        if exclude_outside:
            weights = [w if 0 <= i < n_in else 0.0 for w, i in zip(weights, index)]
            total = sum(weights)
            weights = [w / total for w in weights]
        for i, w in zip(index, weights):
            A[o, min(max(i, 0), n_in - 1)] += w
    return A


def resize_vjp(dY, X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
               coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
               extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
               nearest_mode="round_prefer_floor"):
    dY = np.asarray(dY, dtype=np.float64)
    x_shape = np.shape(X)
    per_axis = plan(x_shape, roi, scales, sizes, axes, keep_aspect_ratio_policy)
    if dY.shape != tuple(n for _, n, _, _ in per_axis):
        raise ValueError(f"dY shape {list(dY.shape)} != Resize's output shape {[n for _, n, _, _ in per_axis]}")
    dX = dY
    for a, (scale, n_out, start, end) in enumerate(per_axis):
        if scale == 1.0 and n_out == x_shape[a] and coordinate_transformation_mode != "tf_crop_and_resize":
            continue  # an identity axis (every mode maps o to o)
        A = axis_matrix(x_shape[a], n_out, scale, start, end, mode=mode,
                        coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode,
                        cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside, antialias=antialias)
        dX = np.moveaxis(np.tensordot(A.T, np.moveaxis(dX, a, 0), axes=1), 0, a)
    return dX.reshape(x_shape)


def case_shapes(params):
    """{X, roi, scales, sizes, dY} from `x` (X's shape) and `resize: [scales, sizes]` (the values the group's
    literal generators write, one of them null), `axes` and keep_aspect_ratio_policy; roi has 2 entries per
    resized axis when the group gives one."""
    x = tuple(int(d) for d in params["x"])
    scales, sizes = params["resize"]
    given = scales if scales is not None else sizes
    try:
        per_axis = plan(x, None, scales, sizes, params.get("axes"), params.get("keep_aspect_ratio_policy") or "stretch")
        dy = tuple(n for _, n, _, _ in per_axis)
    except ValueError:
        dy = x  # an invalid group's values: any dY will do
    return {"X": x, "roi": (2 * len(given),), "scales": None if scales is None else (len(scales),),
            "sizes": None if sizes is None else (len(sizes),), "dY": dy}


def _scale_for(n_in: int, n_out: int) -> float:
    """A float32 scale giving n_out from n_in (floor(n_in * scale) = n_out, in float32 and float64): n_out / n_in,
    nudged up past rounding."""
    if n_in == 0:
        return 1.0
    scale = np.float32(n_out / n_in)
    while int(scale * np.float32(n_in)) < n_out or int(float(scale) * n_in) < n_out:
        scale = np.nextafter(scale, np.float32(np.inf))
    return float(scale)


def from_node(node):
    """`x` and `resize: [scales, sizes]` from a real Resize: the constants when the graph has them; else sizes from
    dY's shape, scales as dY / X per resized axis (the same shapes; a constant scale such as 2.5 on 3 -> 7 then
    reads 7 / 3, which moves the sampling coordinates: only the constant states the node exactly)."""
    x, y = node.shape("X"), node.shape("dY")
    axes = node.attributes.get("axes")
    axes = list(range(len(x))) if axes is None else [int(a) % len(x) for a in axes]
    scales = sizes = None
    if node.shapes.get("scales") is not None:
        scales = (_floats(node.values["scales"]) if "scales" in node.values
                  else [_scale_for(x[a], y[a]) for a in axes])
    if node.shapes.get("sizes") is not None:
        sizes = node.value("sizes") if "sizes" in node.values else [y[a] for a in axes]
    return {"x": list(x), "resize": [scales, sizes]}
