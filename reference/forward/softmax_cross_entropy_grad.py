"""Forward com.microsoft SoftmaxCrossEntropy (the legacy loss with a dense label): the loss and log_prob outputs.

logits [d0..dk-1, C] (the class axis is the LAST), label of logits' shape (a one-hot or probability row per
element, any real values allowed), R = d0 * .. * dk-1 rows:
    log_prob = log_softmax(logits, axis=-1)
    l_r = -sum_c label[r, c] * log_prob[r, c]
    none: l (shape d0..dk-1);  sum: sum_r l_r;  mean: sum_r l_r / R  (0/0 = NaN with no rows)
"""
import numpy as np

REDUCTIONS = ("none", "sum", "mean")


def log_softmax_last(logits):
    x = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if x.shape[-1] == 0:
            return x.copy()
        top = np.max(x, axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        shifted = x - top
        return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def shape_problem(logits_shape, label_shape) -> str | None:
    if len(logits_shape) < 1:
        return f"logits must have rank >= 1 ([..., C]), got shape {list(logits_shape)}"
    if tuple(label_shape) != tuple(logits_shape):
        return f"label shape {list(label_shape)} != logits shape {list(logits_shape)}"
    return None


def reduction_problem(reduction) -> str | None:
    return None if reduction in REDUCTIONS else f"reduction {reduction!r} is not none, sum or mean"


def softmax_cross_entropy(logits, label, *, reduction="mean"):
    """Return (Y, log_prob) in float64."""
    x = np.asarray(logits, dtype=np.float64)
    problem = shape_problem(x.shape, np.shape(label)) or reduction_problem(reduction)
    if problem:
        raise ValueError(problem)
    y = np.asarray(label, dtype=np.float64)
    log_prob = log_softmax_last(x)
    with np.errstate(invalid="ignore"):
        loss = -np.sum(y * log_prob, axis=-1)
        if reduction == "none":
            return loss, log_prob
        total = np.sum(loss)
        if reduction == "sum":
            return np.asarray(total), log_prob
        with np.errstate(divide="ignore"):
            return np.asarray(total / loss.size), log_prob
