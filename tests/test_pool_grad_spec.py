"""The pool gradients through the harness: dX's shape declared by the model (never a node attribute), the
ai.onnx spec directory, and why the declaration is needed: ORT's kernel reads the node's output type."""
from dataclasses import replace

import numpy as np
import onnx
import pytest

from harness.backends import onnx_model
from harness.backends.base import Crashed, Outputs
from harness.backends.ort import OrtBackend
from harness.core.cases import expand
from harness.core.contract import input_problems
from harness.run.engine import prepare, request_for


def first_case(catalog, op, group):
    return next(c for c in expand(catalog.by_op(op), "ci") if c.group.name == group)


@pytest.mark.parametrize("op", ["MaxPoolGrad", "AveragePoolGrad"])
def test_specs_live_in_the_ai_onnx_directory(catalog, op):
    spec = catalog.by_op(op)
    assert spec.domain == "ai.onnx" and spec.declared_shapes() == {"dX_shape": "X"}


def test_dx_shape_follows_the_forward_x_and_stays_off_the_node(catalog):
    case = first_case(catalog, "MaxPoolGrad", "overlapping")
    assert "dX_shape" not in case.node_attributes
    assert case.attributes["dX_shape"] == list(case.params["shape"])
    request = request_for(prepare(case))
    model = onnx.load_from_string(onnx_model.build(request).model)
    node = model.graph.node[0]
    # MaxPool's attributes are on the node, as ORT's builder copies them (copied_by_builder); dX_shape never is
    written = {a.name for a in node.attribute}
    assert (node.op_type, node.domain) == ("MaxPoolGrad", "ai.onnx")
    assert "dX_shape" not in written and {"kernel_shape", "strides"} <= written
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == list(case.params["shape"])


def test_average_pool_attributes_reach_the_node_beside_the_declared_shape(catalog):
    case = first_case(catalog, "AveragePoolGrad", "pads_and_count_include_pad")
    model = onnx.load_from_string(onnx_model.build(request_for(prepare(case))).model)
    written = {a.name for a in model.graph.node[0].attribute}
    assert "dX_shape" not in written and {"kernel_shape", "pads", "count_include_pad"} <= written


def test_out_of_range_indices_are_invalid_against_the_declared_shape(catalog):
    prepared = prepare(first_case(catalog, "MaxPoolGrad", "basic"))
    inputs = dict(prepared.inputs)
    size = int(np.prod(prepared.case.params["shape"]))
    assert input_problems(prepared.case.spec, inputs, prepared.case.attributes) == []
    inputs["Indices"] = inputs["Indices"].copy()
    inputs["Indices"].flat[3] = size
    problems = input_problems(prepared.case.spec, inputs, prepared.case.attributes)
    assert problems == [f"Indices holds {size}, outside [0, {size}) for dX {prepared.case.params['shape']}"]


@pytest.fixture(scope="module")
def ort():
    backend = OrtBackend()
    if reason := backend.availability():
        pytest.fail(f"ort is an expected backend: {reason}")
    yield backend
    backend.close()


def test_ort_needs_the_declared_shape(catalog, ort):
    """Without a static output shape onnxruntime-training 1.19.2 dereferences a null shape while creating the
    MaxPoolGrad kernel (SIGSEGV); the worker dies, the harness goes on. With it, the kernel runs."""
    request = request_for(prepare(first_case(catalog, "MaxPoolGrad", "basic")))
    assert isinstance(ort.run(request), Outputs)
    undeclared = replace(request, attributes={k: v for k, v in request.attributes.items() if k != "dX_shape"})
    outcome = ort.run(undeclared)
    assert isinstance(outcome, Crashed) and outcome.signal == "SIGSEGV"
    assert isinstance(ort.run(request), Outputs)  # a fresh worker


def test_generated_files_of_other_domains_register_their_op_marker():
    """test_ai_onnx_MaxPoolGrad.py marks its tests `MaxPoolGrad`: --strict-markers must know that marker."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "--strict-markers", "-p", "no:cacheprovider",
                           "generated_tests/test_ai_onnx_MaxPoolGrad.py", "-m", "MaxPoolGrad"],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
