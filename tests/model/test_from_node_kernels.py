"""The kernel specs' cases.from_node hooks on configurations as real training graphs show them (onnxruntime-training
1.19.2 generate_artifacts on torch exports): BERT/GPT-2 embeddings and CLS pooling (GatherGrad), attention dropout
(DropoutGrad), ResNet pools, LSTM/GRU layers, the LM loss, and the kernels the default rules already map."""
from __future__ import annotations

import numpy as np
import pytest

from harness.core.spec_loader import load_catalog
from harness.model.match import match
from harness.model.node import NodeConfig
from harness.spec.dotted import resolve

CATALOG = load_catalog(ops=["GatherGrad", "GatherElementsGrad", "DropoutGrad", "MaxPoolGrad", "AveragePoolGrad",
                            "LSTMGrad", "LSTMTraining", "GRUGrad", "GRUTraining", "SoftmaxCrossEntropyLossGrad",
                            "BatchNormalizationGrad", "LayerNormalizationGrad", "ConvGrad"])
F, I64, B = "float32", "int64", "bool"


def hook(op: str, node: NodeConfig) -> dict:
    return dict(resolve(CATALOG.by_op(op).cases.from_node)(node))


def matched(node: NodeConfig) -> dict:
    found = match(CATALOG.by_op(node.op), node)
    assert found.params is not None, found.why
    return found.params


def test_gather_grad_embedding_and_cls_pooling():
    bert = NodeConfig("GatherGrad", {"shape": (2,), "indices": (8, 128), "dY": (8, 128, 768)},
                      {"shape": I64, "indices": I64, "dY": F}, {"shape": np.array([30522, 768])})
    assert hook("GatherGrad", bert) == {"data": [30522, 768], "idx": [8, 128]}
    cls = NodeConfig("GatherGrad", {"shape": (3,), "indices": (), "dY": (2, 64)}, {"shape": I64, "indices": I64, "dY": F},
                     {"shape": np.array([2, 16, 64])}, {"axis": 1})  # h[:, 0]; the index itself left out (see report)
    assert matched(cls) == {"data": [2, 16, 64], "idx": [], "axis": 1}
    int32 = NodeConfig("GatherGrad", {"shape": (2,), "indices": (5,), "dY": (5, 4)}, {"shape": I64, "indices": "int32", "dY": F},
                       {"shape": np.array([6, 4])})
    assert matched(int32) == {"data": [6, 4], "idx": [5], "Tind": "int32"}
    with pytest.raises(KeyError, match="not a value of the graph"):
        hook("GatherGrad", NodeConfig("GatherGrad", {"shape": (2,), "indices": (5,), "dY": (5, 4)}))


def test_gather_elements_grad():
    node = NodeConfig("GatherElementsGrad", {"dY": (4, 2), "shape": (2,), "indices": (4, 2)},
                      {"dY": F, "shape": I64, "indices": I64}, {"shape": np.array([4, 5])}, {"axis": 1})
    assert matched(node) == {"data": [4, 5], "idx": [4, 2], "axis": 1}


def test_dropout_grad_attention_probabilities():
    shape = (2, 12, 16, 16)
    node = NodeConfig("DropoutGrad", {"dy": shape, "mask": shape, "ratio": (), "training_mode": ()},
                      {"dy": F, "mask": B, "ratio": F, "training_mode": B}, {"training_mode": np.array(True)})
    assert matched(node) == {"shape": list(shape)}
    one = NodeConfig("DropoutGrad", {"dy": (2, 8, 32), "mask": (2, 8, 32), "ratio": (1,), "training_mode": None})
    assert hook("DropoutGrad", one) == {"shape": [2, 8, 32], "ratio_shape": [1]}


def test_pool_grads_from_resnet_and_a_1d_average_pool():
    stem = NodeConfig("MaxPoolGrad", {"dY": (2, 64, 56, 56), "Indices": (2, 64, 56, 56)}, {"dY": F, "Indices": I64},
                      attributes={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 0})
    assert matched(stem)["shape"] == [2, 64, 112, 112]
    avg = NodeConfig("AveragePoolGrad", {"dY": (4, 8, 16)}, {"dY": F},
                     attributes={"kernel_shape": [3], "strides": [1], "pads": [1, 1], "count_include_pad": 1})
    assert matched(avg) == {"shape": [4, 8, 16], "kernel_shape": [3], "strides": [1], "pads": [1, 1], "count_include_pad": 1}
    odd = NodeConfig("MaxPoolGrad", {"dY": (1, 2, 4, 4), "Indices": (1, 2, 4, 4)}, attributes={"kernel_shape": [3, 3], "strides": [2, 2]})
    assert hook("MaxPoolGrad", odd) == {"shape": [1, 2, 9, 9]}  # 8 pools to 3: the smallest that pools to 4
    # the graph's dX shape wins: 10 and 9 pool to 4 as well
    assert hook("MaxPoolGrad", NodeConfig("MaxPoolGrad", {"dY": (1, 2, 4, 4), "Indices": (1, 2, 4, 4)},
                                          attributes={"kernel_shape": [3, 3], "strides": [2, 2]},
                                          output_shapes={"dX": (1, 2, 10, 9)})) == {"shape": [1, 2, 10, 9]}


def _lstm(seq, batch, size, hidden, dirs=1):
    g = 4 * hidden
    return {"X": (seq, batch, size), "W": (dirs, g, size), "R": (dirs, g, hidden), "sequence_lens": None,
            "initial_h": (dirs, batch, hidden), "initial_c": (dirs, batch, hidden), "HAll": (seq, dirs, batch, hidden),
            "CAll": (seq, dirs, batch, hidden), "IOFC": (seq, dirs, batch, g), "grad_HAll": (seq, dirs, batch, hidden),
            "grad_Ht": None, "grad_Ct": None}


def test_lstm_and_gru_layers():
    grad = NodeConfig("LSTMGrad", _lstm(10, 4, 32, 48), {"X": F}, attributes={"hidden_size": 48})
    assert matched(grad) == {"seq": 10, "batch": 4, "input_size": 32, "hidden_size": 48,
                             "omit": ["sequence_lens", "grad_Ht", "grad_Ct"]}
    train = NodeConfig("LSTMTraining", {"X": (10, 4, 32), "W": (1, 192, 32), "R": (1, 192, 48), "B": (1, 384),
                                        "sequence_lens": None, "initial_h": (1, 4, 48), "initial_c": (1, 4, 48), "P": None})
    assert hook("LSTMTraining", train) == {"seq": 10, "batch": 4, "input_size": 32, "hidden_size": 48}
    gru = NodeConfig("GRUTraining", {"X": (7, 3, 16), "W": (2, 192, 16), "R": (2, 192, 64), "B": (2, 384),
                                     "sequence_lens": None, "initial_h": (2, 3, 64)}, {"X": F},
                     attributes={"hidden_size": 64, "direction": "bidirectional", "linear_before_reset": 1})
    assert matched(gru)["seq"] == 7 and matched(gru)["hidden_size"] == 64
    # a batch-first node that writes `layout` is outside the specs (they have no layout attribute)
    batch_first = NodeConfig("LSTMGrad", _lstm(10, 4, 32, 48), {"X": F}, attributes={"hidden_size": 48, "layout": 1})
    assert "layout" in match(CATALOG.by_op("LSTMGrad"), batch_first).why


def test_softmax_cross_entropy_loss_grad_lm_loss():
    node = NodeConfig("SoftmaxCrossEntropyLossGrad", {"dY": (), "log_prob": (4, 100, 8), "label": (4, 8), "weight": None},
                      {"dY": F, "log_prob": F, "label": I64}, attributes={"reduction": "mean", "ignore_index": -100})
    assert matched(node) == {"shape": [4, 100, 8], "reduction": "mean", "ignore_index": -100, "omit": ["weight"]}


def test_default_rules_map_batch_norm_layer_norm_and_conv():
    bn = NodeConfig("BatchNormalizationGrad", {"dY": (2, 64, 8, 8), "X": (2, 64, 8, 8), "scale": (64,), "mean": (64,),
                                               "variance": (64,)}, {"dY": F}, attributes={"epsilon": 1e-5})
    assert matched(bn) == {"shape": [2, 64, 8, 8], "epsilon": 1e-5}
    ln = NodeConfig("LayerNormalizationGrad", {"Y_grad": (2, 16, 768), "X": (2, 16, 768), "scale": (768,),
                                               "mean": (2, 16, 1), "inv_std_var": (2, 16, 1)}, {"Y_grad": F}, attributes={"axis": -1})
    assert matched(ln) == {"shape": [2, 16, 768], "axis": -1}
    conv = NodeConfig("ConvGrad", {"dY": (2, 64, 16, 16), "X": (2, 3, 32, 32), "W": (64, 3, 7, 7)}, {"dY": F},
                      attributes={"kernel_shape": [7, 7], "strides": [2, 2], "pads": [3, 3, 3, 3]})
    assert matched(conv)["X"] == [2, 3, 32, 32]
