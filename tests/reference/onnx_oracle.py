"""onnx.reference as an independent oracle under every onnx release the project allows (pyproject pins
onnx>=1.16,<1.18 for onnxruntime-training 1.19.2). Those releases' reference evaluator:

- runs GRU and LSTM forward whatever `direction` says (the argument is unused), and its LSTM returns Y and
  Y_h only (no Y_c);
- sizes Conv with auto_pad SAME_UPPER / SAME_LOWER / VALID and strides wrongly with several channels (in 7,
  kernel 4, stride 2, SAME_UPPER gives 3 outputs where ONNX defines ceil(7 / 2) = 4).

Where a probe shows the installed evaluator has such a gap, these functions ask it only what it computes
right and build the rest from the ONNX definitions: a reverse direction is the forward recurrence over the
time-reversed sequence, bidirectional the two stacked; auto_pad is the explicit pads ONNX's Conv defines.
Where it has none (newer onnx), the evaluator answers the whole question itself.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator


def _rnn_model(op: str, inputs: list[str], outputs: list[str], **attrs):
    node = helper.make_node(op, inputs, outputs, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None)
                                            for n in inputs if n],
                              [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@functools.cache
def rnn_directions_honoured() -> bool:
    """Does the installed evaluator's GRU run `direction=reverse` backwards in time?"""
    rng = np.random.default_rng(0)
    X, W, R = rng.normal(size=(3, 1, 2)), rng.normal(size=(1, 6, 2)), rng.normal(size=(1, 6, 2))
    run = lambda direction: ReferenceEvaluator(_rnn_model("GRU", ["X", "W", "R"], ["Y"], hidden_size=2,  # noqa: E731
                                                          direction=direction)).run(None, {"X": X, "W": W, "R": R})[0]
    return not np.allclose(run("reverse"), run("forward"))


@functools.cache
def lstm_has_y_c() -> bool:
    rng = np.random.default_rng(0)
    feeds = {"X": rng.normal(size=(2, 1, 2)), "W": rng.normal(size=(1, 8, 2)), "R": rng.normal(size=(1, 8, 2))}
    try:
        ReferenceEvaluator(_rnn_model("LSTM", list(feeds), ["Y", "Y_h", "Y_c"], hidden_size=2)).run(None, feeds)
    except RuntimeError:
        return False
    return True


def rnn(op: str, names: list[str], feeds: dict, direction: str, **attrs) -> tuple:
    """(Y, Y_h, Y_c) of ONNX GRU or LSTM (Y_c None for GRU, or where the evaluator has none). names: the op's
    inputs in order, '' for absent ones; no sequence_lens (a reversed sequence would then reverse only its
    valid part)."""
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" and lstm_has_y_c() else [])
    assert len(names) < 5 or not names[4], "sequence_lens is not supported here"
    if rnn_directions_honoured():
        got = ReferenceEvaluator(_rnn_model(op, names, outputs, direction=direction, **attrs)).run(None, feeds)
        return (*got, None) if len(got) == 2 else tuple(got)
    per_direction = []
    for d, backwards in enumerate({"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]):
        # every input but X carries a leading num_directions axis: take this direction's slice
        sliced = {n: (v[::-1] if backwards else v) if n == "X" else v[d:d + 1] for n, v in feeds.items()}
        got = ReferenceEvaluator(_rnn_model(op, names, outputs, direction="forward", **attrs)).run(None, sliced)
        y = got[0][::-1] if backwards else got[0]  # Y [S, 1, B, H] back in input time order
        per_direction.append((y, *got[1:]))
    stacked = [np.concatenate(parts, axis=1 if k == 0 else 0) for k, parts in enumerate(zip(*per_direction))]
    return (*stacked, None) if len(stacked) == 2 else tuple(stacked)


def _conv(X, W, B, attrs: dict) -> np.ndarray:
    node = helper.make_node("Conv", ["X", "W", "B"], ["Y"], **{k: v for k, v in attrs.items() if v is not None})
    return ReferenceEvaluator(node).run(None, {"X": X, "W": W, "B": B})[0]


@functools.cache
def conv_auto_pad_honoured() -> bool:
    """Does the installed evaluator size auto_pad as ONNX defines: SAME_UPPER ceil(in / stride) outputs, VALID
    floor((in - kernel) / stride) + 1? (Tried with two input and three output channels, where onnx 1.17 errs.)"""
    x, w, b = np.ones((1, 2, 7, 8)), np.ones((3, 2, 4, 2)), np.zeros(3)
    same = _conv(x, w, b, {"auto_pad": "SAME_UPPER", "strides": [2, 3]}).shape[2:]
    valid = _conv(x, w, b, {"auto_pad": "VALID", "strides": [2, 3]}).shape[2:]
    return same == (4, 3) and valid == (2, 3)


def explicit_pads(x_shape, w_shape, attrs: dict) -> list[int]:
    """The pads ONNX's Conv defines for auto_pad (begins, then ends): SAME_* keep ceil(in / stride) outputs, the
    odd pad at the end (UPPER) or the beginning (LOWER); VALID none."""
    spatial = len(x_shape) - 2
    strides = attrs.get("strides") or [1] * spatial
    dilations = attrs.get("dilations") or [1] * spatial
    if attrs["auto_pad"] == "VALID":
        return [0] * (2 * spatial)
    begins, ends = [], []
    for n, k, s, d in zip(x_shape[2:], w_shape[2:], strides, dilations):
        total = (math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n
        assert total >= 0, "a SAME pad below 0 is not defined here"
        small, large = total // 2, total - total // 2
        begins.append(small if attrs["auto_pad"] == "SAME_UPPER" else large)
        ends.append(large if attrs["auto_pad"] == "SAME_UPPER" else small)
    return begins + ends


def conv(X, W, B, attrs: dict) -> np.ndarray:
    """ONNX Conv by the evaluator, auto_pad turned into explicit pads where the evaluator mis-sizes it."""
    if attrs.get("auto_pad") not in (None, "NOTSET") and not conv_auto_pad_honoured():
        attrs = {**attrs, "auto_pad": None, "pads": explicit_pads(X.shape, W.shape, attrs)}
    return _conv(X, W, B, attrs)
