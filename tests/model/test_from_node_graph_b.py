"""cases.from_node hooks of the shape/indexing training-graph specs (Resize, ScatterElements, ScatterND, Slice, Split,
Squeeze, Tile, TopK, Transpose, Trilu, Unsqueeze gradients) on hand-written configurations as real graphs show them:
the forward node's inputs by spec name, grad_outputs shaped as the forward outputs, exported constants in values."""
from __future__ import annotations

import numpy as np
import pytest

from harness.core.spec_loader import load_catalog
from harness.model.match import match
from harness.model.node import NodeConfig
from reference.ops import concat_split, indexing, resize, shape_ops

INT64_MAX = int(np.iinfo(np.int64).max)
INTEGER = {"starts", "ends", "axes", "steps", "split", "repeats", "K", "k", "sizes", "indices"}
SPECS = {s.op: s for s in load_catalog().specs}


def node(op, shapes, values=None, attributes=None, **dtypes):
    values = {k: np.asarray(v, dtype=np.float32 if k == "scales" else np.int64) for k, v in (values or {}).items()}
    kinds = {k: ("int64" if k in INTEGER else "float32") for k, s in shapes.items() if s is not None}
    return NodeConfig(op=op, shapes=shapes, dtypes={**kinds, **dtypes}, values=values, attributes=attributes or {})


@pytest.mark.parametrize("hook, config, expected", [
    # GPT-2's c_attn output [b, s, 2304] split into q, k, v along axis 2 (opset 18, split a constant)
    (concat_split.split_from_node,
     node("SplitGradient", {"dY0": (2, 16, 768), "dY1": (2, 16, 768), "dY2": (2, 16, 768), "X": (2, 16, 2304),
                            "split": (3,)}, {"split": [768, 768, 768]}, {"axis": 2}),
     {"x": [2, 16, 2304], "sizes": [768, 768, 768]}),
    # the same as torch.chunk at opset 18: num_outputs, no split input; v unused (no incoming gradient)
    (concat_split.split_from_node,
     node("SplitGradient", {"dY0": (2, 16, 768), "dY1": (2, 16, 768), "dY2": None, "X": (2, 16, 2304),
                            "split": None}, attributes={"axis": -1, "num_outputs": 3}),
     {"x": [2, 16, 2304], "sizes": [768, 768, 768]}),
    # split computed in the graph (no constant), the first output unused: its length is what the others leave
    (concat_split.split_from_node,
     node("SplitGradient_13", {"dY0": None, "dY1": (2, 5), "dY2": (2, 3), "X": (2, 9), "split": (3,)},
          attributes={"axis": 1}),
     {"x": [2, 9], "sizes": [1, 5, 3]}),
    # GPT-2's causal mask bias[:, :, 0:s, :s] on [1, 1, 1024, 1024]
    (concat_split.slice_from_node,
     node("SliceGradient", {"dY": (1, 1, 16, 16), "X": (1, 1, 1024, 1024), "starts": (2,), "ends": (2,),
                            "axes": (2,), "steps": (2,)},
          {"starts": [0, 0], "ends": [16, 16], "axes": [2, 3], "steps": [1, 1]}),
     {"x": [1, 1, 1024, 1024], "slicing": [[0, 0], [16, 16], [2, 3], [1, 1]]}),
    # ViT's h[:, 1:] (ends INT64_MAX, steps left out)
    (concat_split.slice_from_node,
     node("SliceGradient", {"dY": (2, 196, 768), "X": (2, 197, 768), "starts": (1,), "ends": (1,), "axes": (1,),
                            "steps": None}, {"starts": [1], "ends": [INT64_MAX], "axes": [1]}),
     {"x": [2, 197, 768], "slicing": [[1], [INT64_MAX], [1], None]}),
    # BERT/GPT-2's attention mask [b, s] -> [b, 1, 1, s]: axes a constant, or computed (read from the shapes)
    (shape_ops.unsqueeze_from_node,
     node("UnsqueezeGradient", {"dY": (2, 1, 1, 16), "data": (2, 16), "axes": (2,)}, {"axes": [1, 2]}),
     {"x": [2, 16], "ax": [1, 2]}),
    (shape_ops.unsqueeze_from_node,
     node("UnsqueezeGradient", {"dY": (2, 1, 1, 16), "data": (2, 16), "axes": (2,)}),
     {"x": [2, 16], "ax": [1, 2], "inputs": {"axes": {"values": [1, 2]}}}),
    (shape_ops.squeeze_from_node,
     node("SqueezeGradient", {"dY": (8, 64), "data": (8, 1, 64, 1), "axes": (2,)}, {"axes": [1, 3]}),
     {"x": [8, 1, 64, 1], "ax": [1, 3]}),
    (shape_ops.squeeze_from_node,
     node("SqueezeGradient", {"dY": (8, 64), "data": (8, 1, 64, 1), "axes": (2,)}),
     {"x": [8, 1, 64, 1], "ax": [1, 3], "inputs": {"axes": {"values": [1, 3]}}}),
    # GPT-2's heads split: [b, s, 12, 64] by perm [0, 2, 1, 3] (perm is match()'s)
    (shape_ops.transpose_from_node,
     node("TransposeGradient", {"dY": (2, 12, 16, 64), "data": (2, 16, 12, 64)}, attributes={"perm": [0, 2, 1, 3]}),
     {"x": [2, 16, 12, 64]}),
    (shape_ops.tile_from_node,
     node("TileGradient", {"dY": (4, 16, 64), "input": (1, 16, 64), "repeats": (3,)}, {"repeats": [4, 1, 1]}),
     {"x": [1, 16, 64], "reps": [4, 1, 1]}),
    (shape_ops.tile_from_node,
     node("TileGradient", {"dY": (4, 16, 64), "input": (1, 16, 64), "repeats": (3,)}),
     {"x": [1, 16, 64], "reps": [4, 1, 1]}),
    # torch.topk(logits, 5) on [b, vocab]; K computed: Values' length along axis
    (indexing.topk_from_node,
     node("TopKGradient", {"dValues": (2, 5), "X": (2, 50257), "K": (1,)}, {"K": [5]}), {"shape": [2, 50257], "k": 5}),
    (indexing.topk_from_node,
     node("TopKGradient", {"dValues": (3, 4), "X": (10, 4), "K": (1,)}, attributes={"axis": 0}),
     {"shape": [10, 4], "k": 3}),
    # scatter_ (ScatterElements) with int32 indices, index_put (ScatterND)
    (indexing.scatter_from_node,
     node("ScatterElementsGradient", {"dY": (4, 8), "data": (4, 8), "indices": (4, 2), "updates": (4, 2)},
          attributes={"axis": 1}, indices="int32"),
     {"data": [4, 8], "idx": [4, 2], "Tind": "int32"}),
    (indexing.scatter_from_node,
     node("ScatterNDGradient", {"dY": (16, 64), "data": (16, 64), "indices": (3, 1), "updates": (3, 64)},
          indices="int64"),
     {"data": [16, 64], "idx": [3, 1]}),
    # torch.tril(ones) on a [s, s] causal mask, k left out
    (indexing.trilu_from_node,
     node("TriluGradient", {"dY": (16, 16), "input": (16, 16), "k": None}, attributes={"upper": 0}),
     {"shape": [16, 16]}),
    # F.interpolate(scale_factor=2) (scales a constant), and a 3 -> 7 resize whose scales the graph computes
    (resize.from_node,
     node("ResizeGradient", {"dY": (1, 3, 16, 16), "X": (1, 3, 8, 8), "roi": None, "scales": (4,), "sizes": None},
          {"scales": [1.0, 1.0, 2.0, 2.0]}, {"mode": "linear"}),
     {"x": [1, 3, 8, 8], "resize": [[1.0, 1.0, 2.0, 2.0], None]}),
    (resize.from_node,
     node("ResizeGradient", {"dY": (1, 7, 4), "X": (1, 3, 4), "roi": None, "scales": (1,), "sizes": None},
          attributes={"axes": [1]}),
     {"x": [1, 3, 4], "resize": [[7 / 3], None]}),
    (resize.from_node,
     node("ResizeGradient", {"dY": (1, 3, 5, 2), "X": (1, 3, 3, 4), "roi": None, "scales": None, "sizes": (4,)},
          {"sizes": [1, 3, 5, 2]}),
     {"x": [1, 3, 3, 4], "resize": [None, [1, 3, 5, 2]]}),
], ids=lambda v: getattr(v, "__name__", None) or (v.op if isinstance(v, NodeConfig) else ""))
def test_hook_states_a_real_node(hook, config, expected):
    got = hook(config)
    if "resize" in expected and expected["resize"][0] is not None:
        assert got["resize"][0] == pytest.approx(expected["resize"][0]) and got["x"] == expected["x"]
    else:
        assert got == expected


@pytest.mark.parametrize("config, params", [
    (node("TransposeGradient", {"dY": (2, 12, 16, 64), "data": (2, 16, 12, 64)}, attributes={"perm": [0, 2, 1, 3]}),
     {"x": [2, 16, 12, 64], "perm": [0, 2, 1, 3]}),
    (node("SplitGradient", {"dY0": (2, 16, 768), "dY1": (2, 16, 768), "dY2": None, "X": (2, 16, 2304), "split": None},
          attributes={"axis": 2, "num_outputs": 3}),
     {"x": [2, 16, 2304], "sizes": [768, 768, 768], "axis": 2, "num_outputs": 3, "omit": ["dY2", "split"]}),
    (node("UnsqueezeGradient", {"dY": (2, 1, 1, 16), "data": (2, 16), "axes": (2,)}), None),
    (node("UnsqueezeGradient", {"dY": (2, 1, 1, 16), "data": (2, 16), "axes": (2,)}, {"axes": [1, 2]}),
     {"x": [2, 16], "ax": [1, 2]}),
    (node("SplitGradient", {"dY0": (2, 16, 768), "dY1": (2, 16, 768), "dY2": (2, 16, 768), "X": (2, 16, 2304),
                            "split": (3,)}, {"split": [768, 768, 768]}, {"axis": 2}),
     {"x": [2, 16, 2304], "sizes": [768, 768, 768], "axis": 2}),
    (node("SliceGradient", {"dY": (1, 1, 16, 16), "X": (1, 1, 1024, 1024), "starts": (2,), "ends": (2,),
                            "axes": (2,), "steps": (2,)}, {"starts": [0, 0], "ends": [16, 16], "axes": [2, 3],
                                                           "steps": [1, 1]}), None),
    (node("TopKGradient", {"dValues": (2, 5), "X": (2, 50257), "K": (1,)}, {"K": [5]}), {"shape": [2, 50257], "k": 5}),
    (node("TileGradient", {"dY": (4, 16, 64), "input": (1, 16, 64), "repeats": (3,)}, {"repeats": [4, 1, 1]}), None),
    (node("TriluGradient", {"dY": (16, 16), "input": (16, 16), "k": ()}, {"k": 0}, {"upper": 0}), None),
    (node("ResizeGradient", {"dY": (1, 7, 4), "X": (1, 3, 4), "roi": None, "scales": (1,), "sizes": None},
          attributes={"axes": [1], "mode": "nearest"}), None),
    (node("ScatterNDGradient", {"dY": (16, 64), "data": (16, 64), "indices": (3, 1), "updates": (3, 64)}), None),
], ids=lambda v: v.op if isinstance(v, NodeConfig) else "")
def test_match_rebuilds_the_node(config, params):
    found = match(SPECS[config.op], config)
    assert found.params is not None, found.why
    if params is not None:
        assert found.params == params


def test_a_split_into_four_is_outside_the_spec():
    config = node("SplitGradient", {"dY0": (2, 4), "dY1": (2, 4), "dY2": (2, 4), "X": (2, 16), "split": (4,)},
                  {"split": [4, 4, 4, 4]}, {"axis": 1})
    found = match(SPECS["SplitGradient"], config)
    assert found.params is None and "three outputs" in found.why


def test_a_computed_slice_states_the_same_shapes():
    """GPT-2's bias[:, :, k - q : k, :k] with a dynamic sequence length: starts and ends computed, axes and steps
    constants; the hook states the [0, len) slices of dY's lengths, which match() rebuilds."""
    config = node("SliceGradient", {"dY": (1, 1, 16, 16), "X": (1, 1, 1024, 1024), "starts": (2,), "ends": (2,),
                                    "axes": (2,), "steps": (2,)}, {"axes": [2, 3], "steps": [1, 1]})
    assert concat_split.slice_from_node(config) == {"x": [1, 1, 1024, 1024],
                                                    "slicing": [[0, 0], [16, 16], [2, 3], [1, 1]]}
