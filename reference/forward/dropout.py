"""Forward Dropout (ONNX opset 13 semantics), with the random draw made an input.

In training mode with a ratio above 0, Dropout keeps each element where its mask is true and scales it
so the expectation is unchanged: output = mask * data / (1 - ratio). With training_mode false (its
default) or ratio 0, output = data whatever the mask. The mask is the op's random draw; taking it as an
argument makes the function deterministic, so the gradient check can difference it in `data`.
Absent ratio means 0.5 (the ONNX default). Bool inputs may arrive as float64 0/1 (the harness passes
every tensor to a reference in float64).
"""
import numpy as np

DEFAULT_RATIO = 0.5


RATIO_SHAPES = ((), (1,))  # one value: a scalar, or shape [1] (ORT's kernel reads either; its tests write [1])


def ratio_value(ratio) -> float:
    """The ratio's one value (default 0.5); outside [0, 1) is an error, as the op's contract says."""
    if ratio is None:
        return DEFAULT_RATIO
    ratio = np.asarray(ratio, dtype=np.float64)
    if ratio.shape not in RATIO_SHAPES:
        raise ValueError(f"ratio must hold one value (shape [] or [1]), got shape {list(ratio.shape)}")
    value = float(ratio.reshape(()))
    if not 0.0 <= value < 1.0:
        raise ValueError(f"ratio must lie in [0, 1), got {value:g}")
    return value


def training(training_mode) -> bool:
    """The scalar training_mode; absent means false."""
    if training_mode is None:
        return False
    training_mode = np.asarray(training_mode)
    if training_mode.shape != ():
        raise ValueError(f"training_mode must be a scalar, got shape {list(training_mode.shape)}")
    return bool(training_mode != 0)


def kept(mask, shape) -> np.ndarray:
    """The mask as bools, checked against the data's shape."""
    mask = np.asarray(mask)
    if mask.shape != tuple(shape):
        raise ValueError(f"mask shape {list(mask.shape)} != data shape {list(shape)}")
    return mask != 0


def dropout(data, ratio=None, training_mode=None, mask=None):
    """Return Dropout's output in float64 for the given mask (mask true = kept)."""
    data = np.asarray(data, dtype=np.float64)
    r, train = ratio_value(ratio), training(training_mode)
    if mask is None:
        raise ValueError("dropout: the mask (the random draw) is required")
    keep = kept(mask, data.shape)
    if not train or r == 0.0:
        return data.copy()
    # The dropped elements are the constant 0, not 0 * data: output there does not depend on data.
    return np.where(keep, data / (1.0 - r), 0.0)
