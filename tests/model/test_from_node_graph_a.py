"""cases.from_node hooks of the training-graph specs for Add/Sub/Mul/Div/Pow/Max/Min/Where, Concat, Pad, Expand,
Flatten, Reshape, GatherND, Gemm, MatMul, GlobalAveragePool and the Reduce* family: a forward node as a real graph
(BERT, a torch Linear, a ResNet head) shows it maps to the params expected; where no constant input is read, match()
rebuilds it in the spec too."""
from __future__ import annotations

import numpy as np
import pytest

from harness.core.spec_loader import load_catalog
from harness.model.match import match
from harness.model.node import NodeConfig
from reference.ops import concat_split, elementwise_binary, indexing, matmul, reductions, shape_ops

SPECS = {s.op: s for s in load_catalog().specs}
F32 = "float32"
INTEGER = {"condition": "bool", "shape": "int64", "axes": "int64", "pads": "int64", "indices": "int64"}


def node(op, shapes, values=None, attributes=None):
    return NodeConfig(op=op, shapes=shapes, dtypes={n: INTEGER.get(n, F32) for n, s in shapes.items() if s is not None},
                      values={k: np.asarray(v, np.int64) for k, v in (values or {}).items()},
                      attributes=attributes or {})


# (hook, node, params expected; match() run too when True)
CASES = {
    "bert_ffn_matmul": (matmul.matmul_from_node,
                        node("MatMulGradient", {"dY": (2, 8, 3072), "A": (2, 8, 768), "B": (768, 3072)}),
                        {"shapes": [[2, 8, 768], [768, 3072]]}, True),
    "bert_attention_matmul": (matmul.matmul_from_node,
                              node("MatMulGradient", {"dY": (2, 12, 8, 8), "A": (2, 12, 8, 64), "B": (2, 12, 64, 8)}),
                              {"shapes": [[2, 12, 8, 64], [2, 12, 64, 8]]}, True),
    "bert_bias_add": (elementwise_binary.from_node,
                      node("AddGradient", {"dY": (2, 8, 768), "A": (2, 8, 768), "B": (768,)}),
                      {"shapes": [[2, 8, 768], [768]]}, True),
    "max_of_one_input": (elementwise_binary.from_node,
                         node("MaxGradient", {"dY": (3, 4), "A": (3, 4), "B": None, "C": None}),
                         {"shapes": [[3, 4]]}, True),
    "where_mask": (elementwise_binary.from_node,
                   node("WhereGradient", {"dOutput": (2, 12, 8, 8), "condition": (1, 1, 8, 8), "X": (2, 12, 8, 8),
                                          "Y": ()}),
                   {"shapes": [[1, 1, 8, 8], [2, 12, 8, 8], []]}, True),
    "torch_linear_gemm": (matmul.gemm_from_node,
                          node("GemmGradient", {"dY": (2, 1000), "A": (2, 512), "B": (1000, 512), "C": (1000,)},
                               attributes={"transB": 1}),
                          {"mkn": [2, 512, 1000], "c_shape": [1000]}, True),
    "gemm_no_c_trans_a": (matmul.gemm_from_node,
                          node("GemmGradient", {"dY": (3, 5), "A": (4, 3), "B": (4, 5), "C": None},
                               attributes={"transA": 1}),
                          {"mkn": [3, 4, 5]}, True),
    "reshape_to_heads": (shape_ops.reshape_from_node,
                         node("ReshapeGradient", {"dY": (2, 8, 12, 64), "data": (2, 8, 768), "shape": (4,)},
                              values={"shape": [0, 0, 12, 64]}),
                         {"x": [2, 8, 768], "to": [0, 0, 12, 64]}, False),
    "reshape_back_minus_one": (shape_ops.reshape_from_node,
                               node("ReshapeGradient", {"dY": (2, 8, 768), "data": (2, 8, 12, 64), "shape": (3,)},
                                    values={"shape": [2, -1, 768]}),
                               {"x": [2, 8, 12, 64], "to": [2, -1, 768]}, False),
    "reshape_computed_shape": (shape_ops.reshape_from_node,  # the shape input computed in the graph: dY's shape
                               node("ReshapeGradient", {"dY": (2, 768), "data": (2, 768, 1, 1), "shape": (2,)}),
                               {"x": [2, 768, 1, 1], "to": [2, 768],
                                "inputs": {"shape": {"kind": "shape_of", "of": "dY"}}}, True),
    "expand_mask": (shape_ops.expand_from_node,
                    node("ExpandGradient", {"dY": (2, 12, 8, 8), "input": (2, 1, 1, 8), "shape": (4,)},
                         values={"shape": [2, 12, 8, 8]}),
                    {"x": [2, 1, 1, 8], "to": [2, 12, 8, 8]}, False),
    "resnet_flatten": (shape_ops.flatten_from_node,
                       node("FlattenGradient", {"dY": (2, 512), "input": (2, 512, 1, 1)}),
                       {"x": [2, 512, 1, 1]}, True),
    "resnet_gap": (reductions.gap_from_node,
                   node("GlobalAveragePoolGradient", {"dY": (2, 512, 1, 1), "X": (2, 512, 7, 7)}),
                   {"shape": [2, 512, 7, 7]}, True),
    "reduce_mean_opset17": (reductions.from_node,
                            node("ReduceMeanGradient_13", {"dY": (2, 8, 1), "data": (2, 8, 768)},
                                 attributes={"axes": [-1]}),
                            {"shape": [2, 8, 768]}, True),
    "reduce_mean_opset18": (reductions.from_node,
                            node("ReduceMeanGradient", {"dY": (2, 8, 1), "data": (2, 8, 768), "axes": (1,)},
                                 values={"axes": [-1]}),
                            {"shape": [2, 8, 768], "axes": [-1]}, False),
    "reduce_sum_all": (reductions.from_node,
                       node("ReduceSumGradient", {"dY": (), "data": (2, 8), "axes": None},
                            attributes={"keepdims": 0}),
                       {"shape": [2, 8]}, True),
    "concat_kv_cache": (concat_split.concat_from_node,
                        node("ConcatGradient", {"dY": (2, 12, 9, 64), "A": (2, 12, 8, 64), "B": (2, 12, 1, 64),
                                                "C": None}, attributes={"axis": 2}),
                        {"shapes": [[2, 12, 8, 64], [2, 12, 1, 64]]}, True),
    "pad_image": (concat_split.pad_from_node,
                  node("PadGradient", {"dY": (2, 3, 10, 10), "X": (2, 3, 8, 8), "pads": (8,), "constant_value": None,
                                       "axes": None}, values={"pads": [0, 0, 1, 1, 0, 0, 1, 1]}),
                  {"x": [2, 3, 8, 8], "padding": [[0, 0, 1, 1, 0, 0, 1, 1], None]}, False),
    "gather_nd_batch": (indexing.gather_nd_from_node,
                        node("GatherNDGradient", {"dY": (2, 5, 4), "data": (2, 3, 4), "indices": (2, 5, 1)},
                             attributes={"batch_dims": 1}),
                        {"data": [2, 3, 4], "idx": [2, 5, 1]}, True),
}


@pytest.mark.parametrize("name", CASES)
def test_real_graph_node_maps_to_params(name):
    hook, config, expected, rebuild = CASES[name]
    assert hook(config) == expected
    if rebuild:
        found = match(SPECS[config.op], config)
        assert found.params is not None, found.why
        params = {k: v for k, v in expected.items() if k != "inputs"}
        assert {k: found.params[k] for k in params} == params
        assert {k: (found.inputs or {})[k] for k in expected.get("inputs", {})} == expected.get("inputs", {})
