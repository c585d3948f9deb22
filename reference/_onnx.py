"""onnx's own reference evaluator as a float64 forward reference.

The forward of a training-graph spec (subject: training_graph) is a standard ONNX op; onnx.reference's
ReferenceEvaluator is a well-kept implementation of every one of them, so a forward module may write
    def gemm(A, B, C=None, *, alpha, beta, transA, transB):
        return run("Gemm", 13, {"A": A, "B": B, "C": C}, alpha=alpha, beta=beta, transA=transA, transB=transB)
Inputs are passed in the op's schema order (None: an omitted optional input); attributes left None are not
written. The evaluator is built once per op, opset, input pattern and attribute values, and run in the
inputs' own dtypes (float64 from the harness). An op that returns one output gives an array, else a tuple.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from onnx import helper
from onnx.helper import np_dtype_to_tensor_dtype
from onnx.reference import ReferenceEvaluator

IR_VERSION = 10  # what onnxruntime-training 1.19.2 loads; the evaluator does not care


def run(op: str, opset: int, inputs: dict, outputs: int = 1, domain: str = "", **attributes):
    names = list(inputs)
    while names and inputs[names[-1]] is None:
        names.pop()
    feeds = {n: np.asarray(inputs[n]) for n in names if inputs[n] is not None}
    signature = tuple((n, str(feeds[n].dtype), feeds[n].ndim) if n in feeds else (n, None, None) for n in names)
    attrs = tuple(sorted((k, _hashable(v)) for k, v in attributes.items() if v is not None))
    evaluator = _evaluator(op, opset, domain, signature, outputs, attrs)
    result = evaluator.run(None, feeds)
    return result[0] if outputs == 1 else tuple(result)


def _hashable(value):
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return tuple(value) if isinstance(value, list) else value


@lru_cache(maxsize=512)
def _evaluator(op: str, opset: int, domain: str, signature: tuple, outputs: int, attrs: tuple) -> ReferenceEvaluator:
    node_inputs = [n if dtype is not None else "" for n, dtype, _ in signature]
    graph_inputs = [helper.make_tensor_value_info(n, np_dtype_to_tensor_dtype(np.dtype(dtype)), None)
                    for n, dtype, _ in signature if dtype is not None]
    out_names = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op, node_inputs, out_names, domain=domain,
                            **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs})
    graph = helper.make_graph([node], op, graph_inputs, [helper.make_value_info(n, helper.TypeProto()) for n in out_names])
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid(domain, opset)])
    return ReferenceEvaluator(model)
