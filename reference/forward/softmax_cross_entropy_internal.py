"""Forward SoftmaxCrossEntropyLossInternal (com.microsoft): ai.onnx SoftmaxCrossEntropyLoss with ignore_index an
optional int64 scalar INPUT instead of an attribute (ORTModule's export symbolic for torch's cross_entropy and ORT's
loss rewriter write it) and an output_type attribute (the outputs' element type; this harness runs one dtype per case,
so output_type, when written, names the case dtype).

The math is reference.forward.softmax_cross_entropy's: log_prob = log_softmax(scores, axis 1); l_i = -log_prob[i,
label_i] * w_i, exactly 0 for an ignored element; none: l, sum: sum(l), mean: sum(l) / sum(w_i) (0/0 = NaN when every
element is ignored). Absent ignore_index, no label is ignored.
"""
import numpy as np

from reference.forward.softmax_cross_entropy import softmax_cross_entropy_loss

# ONNX TensorProto element types of the dtypes T and TOut allow (output_type's values)
ONNX_TYPES = {"float32": 1, "float16": 10, "float64": 11, "bfloat16": 16}


def ignore_value(ignore_index):
    """The int the optional ignore_index input holds (a scalar tensor), or None when it is left out."""
    if ignore_index is None:
        return None
    a = np.asarray(ignore_index)
    if a.shape != ():
        raise ValueError(f"ignore_index must be a scalar, got shape {list(a.shape)}")
    return int(a)


def softmax_cross_entropy_loss_internal(scores, labels, weights=None, ignore_index=None, *, reduction="mean",
                                        output_type=None):
    """(output, log_prob) in float64."""
    return softmax_cross_entropy_loss(scores, labels, weights, reduction=reduction,
                                      ignore_index=ignore_value(ignore_index))
