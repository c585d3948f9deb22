"""The ort backend: one-node models ORT 1.19.2 accepts, bfloat16 through Casts, errors classified."""
import importlib.metadata

import ml_dtypes
import numpy as np
import onnx

from harness.backends.base import Outputs, Rejected, Request, Unsupported
from harness.backends.onnx_model import IR_VERSION, build
from harness.backends.ort import OrtBackend, classify_error


def relu_request(catalog, dtype, x=None, dy=None, **kw):
    spec = catalog.by_op("ReluGrad")
    x = np.array([-1.0, 0.5, 2.0], dtype) if x is None else x
    dy = np.array([3.0, 4.0, 5.0], dtype) if dy is None else dy
    return Request(spec, kw.get("case_dtype", np.dtype(dtype).name), [dy, x], {}, (True,))


def test_model_respects_ort_1_19_limits(catalog):
    model = onnx.load_from_string(build(relu_request(catalog, np.float32)).model)
    assert model.ir_version == IR_VERSION <= 10
    assert {o.domain: o.version for o in model.opset_import} == {"": 17, "com.microsoft": 1}
    assert [i.name for i in model.graph.input] == ["dY", "X"] and model.graph.node[0].domain == "com.microsoft"


def test_model_imports_the_specs_onnx_opset(catalog):
    """NegativeLogLikelihoodLossInternal runs as a function body written for ai.onnx 12: its spec's onnx_opset."""
    spec = catalog.by_op("NegativeLogLikelihoodLossInternal")
    assert spec.onnx_opset == 12
    request = Request(spec, "float32", [np.zeros((2, 3), np.float32), np.zeros(2, np.int64), None, None],
                      {"reduction": "mean"}, (True,))
    model = onnx.load_from_string(build(request).model)
    assert {o.domain: o.version for o in model.opset_import} == {"": 12, "com.microsoft": 1}


def test_bfloat16_travels_through_casts(catalog):
    request = Request(catalog.by_op("ReluGrad"), "bfloat16",
                      [np.ones(3, ml_dtypes.bfloat16), np.ones(3, ml_dtypes.bfloat16)], {}, (True,))
    built = build(request)
    graph = onnx.load_from_string(built.model).graph
    assert [n.op_type for n in graph.node] == ["Cast", "Cast", "ReluGrad", "Cast"]
    assert all(v.dtype == np.float32 for v in built.feeds.values())
    assert built.fetch_dtypes == ["bfloat16"]


def test_float32_runs(ort, catalog):
    outcome = ort.run(relu_request(catalog, np.float32))
    assert isinstance(outcome, Outputs)
    np.testing.assert_array_equal(outcome.values[0], [0.0, 4.0, 5.0])
    assert outcome.values[0].dtype == np.float32


def test_float64_has_no_kernel_and_is_unsupported(ort, catalog):
    outcome = ort.run(relu_request(catalog, np.float64))
    assert isinstance(outcome, Unsupported) and "Could not find an implementation" in outcome.reason


def test_a_bad_attribute_is_rejected_not_unsupported(ort, catalog):
    request = Request(catalog.by_op("BiasGeluGrad_dX"), "float32",
                      [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), np.ones(4, np.float32)], {}, (True,))
    outcome = ort.run(request)
    assert isinstance(outcome, Rejected) and "RuntimeException" in outcome.message


def test_error_classification():
    assert isinstance(classify_error("session", "NotImplemented", "Could not find an implementation for X"), Unsupported)
    assert isinstance(classify_error("session", "InvalidGraph", "Type Error: Type 'tensor(bfloat16)' is invalid"), Unsupported)
    assert isinstance(classify_error("run", "RuntimeException", "axis 3 is not in valid range"), Rejected)
    assert isinstance(classify_error("session", "Fail", "[ShapeInferenceError] rank"), Rejected)


def test_missing_package_makes_the_backend_unavailable(monkeypatch):
    real = importlib.metadata.version

    def version(name):
        if name == "onnxruntime-training":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert OrtBackend().availability() == "onnxruntime-training is not installed (pip install onnxruntime-training==1.19.2)"
