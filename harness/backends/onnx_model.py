"""One-node ONNX models for a request, in the form onnxruntime-training 1.19.2 accepts.

IR version 10 and ai.onnx opset 17 at most (newer onnx writes IR 11+, which 1.19.2 refuses), or the spec's onnx_opset. Shapes
are symbolic (one name per dimension), so one session serves every shape of a given rank. bfloat16 cannot cross ORT's Python boundary, so
bfloat16 tensors enter and leave as float32 through Cast nodes inside the graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from harness.backends.base import Request
from harness.core import dtypes, sequences
from harness.spec.model import declared_shape_key

IR_VERSION = 10
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]  # a spec's onnx_opset replaces 17
_AS_FLOAT32 = "__f32"


@dataclass(frozen=True)
class OneNodeModel:
    model: bytes
    feeds: dict[str, np.ndarray | list[np.ndarray]]  # a list for a sequence input
    fetches: list[str]  # graph output names, in the order of the spec outputs requested
    fetch_dtypes: list[str]  # the dtype each fetched array must be cast back to


def _dims(name: str, value: np.ndarray) -> list[str]:
    return [f"{name}_d{i}" for i in range(value.ndim)]


def _attribute_value(kind: str | None, value):
    # Write floats as floats even when YAML gave an int (alpha: 1), so ORT sees the declared type.
    if kind == "float":
        return float(value)
    if kind == "floats":
        return [float(v) for v in value]
    return value


def build(request: Request, bfloat16_as_float32: bool = True) -> OneNodeModel:
    """The request as a one-node model; with bfloat16_as_float32 (for ORT) bfloat16 goes through Casts."""
    spec = request.spec
    casts_in, casts_out, graph_inputs, graph_outputs, feeds = [], [], [], [], {}
    node_inputs = []
    for inp, value in zip(spec.inputs, request.inputs):
        if value is None:
            node_inputs.append("")
            continue
        node_inputs.append(inp.name)
        if sequences.is_seq(value):  # a list feed (a copy: ORT's optimizers write list feeds in place)
            element = sequences.dtype_of(value)
            dtype = dtypes.name_of(element) if element is not None else spec.dtype_of(inp, request.dtype)
            graph_inputs.append(helper.make_tensor_sequence_value_info(inp.name, dtypes.ONNX[dtype], None))
            feeds[inp.name] = sequences.copy(value)
            continue
        dtype = dtypes.name_of(value.dtype)
        if dtype == "bfloat16" and bfloat16_as_float32:
            graph_inputs.append(helper.make_tensor_value_info(inp.name + _AS_FLOAT32, TensorProto.FLOAT, _dims(inp.name, value)))
            casts_in.append(helper.make_node("Cast", [inp.name + _AS_FLOAT32], [inp.name], to=TensorProto.BFLOAT16))
            feeds[inp.name + _AS_FLOAT32] = value.astype(np.float32)
        else:
            graph_inputs.append(helper.make_tensor_value_info(inp.name, dtypes.ONNX[dtype], _dims(inp.name, value)))
            feeds[inp.name] = value
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()

    node_outputs, fetches, fetch_dtypes = [], [], []
    declared = spec.declared_shapes()
    for out, wanted in zip(spec.outputs, request.outputs):
        if not wanted:  # a required output is still written on the node (the op must produce it), just not fetched
            node_outputs.append("" if out.optional else out.name)
            continue
        node_outputs.append(out.name)
        dtype = spec.dtype_of(out, request.dtype)
        # An output the op cannot size from its inputs gets its static shape here (ORT's pool gradients read
        # the node's output type; without one, session creation dereferences a null shape): one session per shape.
        key = declared_shape_key(out.name)
        shape = request.attributes.get(key) if key in declared else None
        if spec.is_sequence(out):
            graph_outputs.append(helper.make_tensor_sequence_value_info(out.name, dtypes.ONNX[dtype], None))
            fetches.append(out.name)
        elif dtype == "bfloat16" and bfloat16_as_float32:
            as_float32 = out.name + _AS_FLOAT32
            graph_outputs.append(helper.make_tensor_value_info(as_float32, TensorProto.FLOAT, shape))
            casts_out.append(helper.make_node("Cast", [out.name], [as_float32], to=TensorProto.FLOAT))
            fetches.append(as_float32)
        else:
            graph_outputs.append(helper.make_tensor_value_info(out.name, dtypes.ONNX[dtype], shape))
            fetches.append(out.name)
        fetch_dtypes.append(dtype)
    while node_outputs and node_outputs[-1] == "":
        node_outputs.pop()

    attributes = {}
    for name, value in request.attributes.items():
        if name in declared:
            continue
        kind = spec.attributes[name].type if name in spec.attributes else None
        attributes[name] = _attribute_value(kind, value)
    op = helper.make_node(spec.op, node_inputs, node_outputs, domain=spec.domain, **attributes)
    graph = helper.make_graph([*casts_in, op, *casts_out], spec.op, graph_inputs, graph_outputs)
    opsets = OPSETS if spec.onnx_opset is None else [helper.make_opsetid("", spec.onnx_opset), *OPSETS[1:]]
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=opsets, producer_name="opconform")
    return OneNodeModel(model.SerializeToString(), feeds, fetches, fetch_dtypes)
