"""Forward SoftmaxCrossEntropyLoss (ONNX opset 13): the loss and log_prob outputs.

scores [N, C, d1..dk] (class axis 1), labels [N, d1..dk] in [0, C) or equal to ignore_index, optional
per-class weights [C]. With w_i = weights[label_i] (1 without weights) and 0 for an ignored element:
    log_prob = log_softmax(scores, axis=1)
    l_i = -log_prob[i, label_i] * w_i       (exactly 0 for an ignored element: selected, not multiplied)
    none: l;  sum: sum(l);  mean: sum(l) / sum(w_i)  (0/0 = NaN when every element is ignored)
"""
import numpy as np


def label_problem(labels, classes: int, ignore_index) -> str | None:
    """Why these labels are not valid for `classes` classes (out of [0, C) and not ignore_index), or None."""
    labels = np.asarray(labels)
    bad = (labels < 0) | (labels >= classes)
    if ignore_index is not None:
        bad &= labels != ignore_index
    if bad.any():
        return f"label {int(labels[bad].ravel()[0])} is outside [0, {classes}) and not ignore_index ({ignore_index})"
    return None


def shape_problem(scores_shape, label_shape, weight_shape=None) -> str | None:
    """Why scores (or log_prob), labels and weights of these shapes do not fit together, or None."""
    if len(scores_shape) < 2:
        return f"scores must have rank >= 2 ([N, C, d1..dk]), got shape {list(scores_shape)}"
    want = (scores_shape[0], *scores_shape[2:])
    if tuple(label_shape) != want:
        return f"labels shape {list(label_shape)} != scores shape without the class axis {list(want)}"
    if weight_shape is not None and tuple(weight_shape) != (scores_shape[1],):
        return f"weights shape {list(weight_shape)} != [C] = [{scores_shape[1]}]"
    return None


def per_element(labels, classes: int, weights, ignore_index):
    """(ignored mask, labels with ignored ones set to class 0, per-element weight w_i, 0 where ignored)."""
    labels = np.asarray(labels).astype(np.int64)
    ignored = np.zeros(labels.shape, bool) if ignore_index is None else labels == ignore_index
    safe = np.where(ignored, 0, labels)
    w = np.ones(labels.shape) if weights is None else np.asarray(weights, dtype=np.float64)[safe]
    return ignored, safe, np.where(ignored, 0.0, w)


def log_softmax_classes(scores):
    x = np.asarray(scores, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        top = np.max(x, axis=1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)  # a row of -inf (or with +inf) keeps its NaN/inf as the math gives
        shifted = x - top
        return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))


def softmax_cross_entropy_loss(scores, labels, weights=None, *, reduction="mean", ignore_index=None):
    scores = np.asarray(scores, dtype=np.float64)
    problem = shape_problem(scores.shape, np.shape(labels), None if weights is None else np.shape(weights))
    if problem is None:
        problem = label_problem(labels, scores.shape[1], ignore_index)
    if problem:
        raise ValueError(problem)
    log_prob = log_softmax_classes(scores)
    ignored, safe, w = per_element(labels, scores.shape[1], weights, ignore_index)
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    with np.errstate(invalid="ignore"):
        loss = np.where(ignored, 0.0, -picked * w)
        if reduction == "none":
            return loss, log_prob
        total = np.sum(loss)
        if reduction == "sum":
            return np.asarray(total), log_prob
        with np.errstate(divide="ignore"):
            return np.asarray(total / np.sum(w)), log_prob
