"""Forward of ONNX Resize (opset 19 and the opset-13 form) in float64: onnx's reference evaluator."""
import numpy as np

from reference._onnx import run


def _f32(v):
    return None if v is None else np.asarray(v, dtype=np.float32)


def _i64(v):
    return None if v is None else np.asarray(v, dtype=np.int64)


def resize(X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
           mode="nearest", nearest_mode="round_prefer_floor"):
    return run("Resize", 19, {"X": X, "roi": None if roi is None else np.asarray(roi, dtype=np.float64),
                              "scales": _f32(scales), "sizes": _i64(sizes)},
               antialias=antialias, axes=None if axes is None else [int(a) for a in axes],
               coordinate_transformation_mode=coordinate_transformation_mode, cubic_coeff_a=cubic_coeff_a,
               exclude_outside=exclude_outside, extrapolation_value=extrapolation_value,
               keep_aspect_ratio_policy=keep_aspect_ratio_policy, mode=mode, nearest_mode=nearest_mode)
