"""The `openmp` backend adapter: the C library behind the harness's Backend interface, in a worker."""
import numpy as np
import pytest

from harness.backends import DEFAULT, create
from harness.backends.base import Crashed, Outputs, Rejected, Request, Unsupported
from harness.backends.openmp import OpenmpBackend


@pytest.fixture(scope="module")
def omp():
    backend = OpenmpBackend(threads=2)
    assert backend.availability() is None  # the package build must have produced the library
    yield backend
    backend.close()


def request(catalog, op, inputs, attributes=None, outputs=None, dtype="float32"):
    spec = catalog.by_op(op)
    return Request(spec, dtype, inputs, attributes or {}, outputs or (True,) * len(spec.outputs))


def test_is_a_default_backend():
    assert "openmp" in DEFAULT and create("openmp").name == "openmp"


def test_runs_in_a_worker_and_returns_the_c_result(omp, catalog):
    x = np.array([-1.0, 0.0, 2.0, np.nan], np.float32)
    dy = np.array([3.0, 4.0, 5.0, 6.0], np.float32)
    outcome = omp.run(request(catalog, "ReluGrad", [dy, x]))
    assert isinstance(outcome, Outputs)
    np.testing.assert_array_equal(outcome.values[0], [0.0, 0.0, 5.0, 0.0])
    assert outcome.values[0].dtype == np.float32
    assert omp._worker._proc is not None  # the library ran in the child, not in this process


def test_unrequested_outputs_are_none(omp, catalog):
    rng = np.random.default_rng(0)
    dy, x, w = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 3, 3), (1, 1, 5, 5), (2, 1, 3, 3)))
    outcome = omp.run(request(catalog, "ConvGrad", [dy, x, w], {"kernel_shape": [3, 3]}, (False, True, False)))
    assert isinstance(outcome, Outputs)
    assert outcome.values[0] is None and outcome.values[2] is None and outcome.values[1].shape == (2, 1, 3, 3)


def test_invalid_attribute_is_rejected_with_the_c_message(omp, catalog):
    dy, x, w = np.ones((1, 2, 3, 3), np.float32), np.ones((1, 1, 5, 5), np.float32), np.ones((2, 1, 3, 3), np.float32)
    outcome = omp.run(request(catalog, "ConvGrad", [dy, x, w], {"kernel_shape": [3, 3], "strides": [0, 1]}))
    assert isinstance(outcome, Rejected)
    assert outcome.message.startswith("OPC_ERR_INVALID_ATTRIBUTE") and "strides" in outcome.message


def test_wrong_shape_is_rejected(omp, catalog):
    outcome = omp.run(request(catalog, "SigmoidGrad", [np.ones(3, np.float32), np.ones(4, np.float32)]))
    assert isinstance(outcome, Rejected) and outcome.message.startswith("OPC_ERR_INVALID_ARGUMENT")


def test_a_valid_feature_the_library_lacks_is_unsupported(omp, catalog):
    H, I = 2, 3
    X, W, R = np.ones((2, 1, I), np.float32), np.ones((1, 3 * H, I), np.float32), np.ones((1, 3 * H, H), np.float32)
    outcome = omp.run(request(catalog, "GRUTraining", [X, W, R, None, None, None],
                              {"hidden_size": H, "layout": 1}))
    assert isinstance(outcome, Unsupported) and "layout=1" in outcome.reason


def test_probe_follows_the_library_dtypes(omp, catalog):
    assert omp.probe(request(catalog, "GRUGrad", [], dtype="float16")).status == "no_kernel"
    assert omp.probe(request(catalog, "ReluGrad", [], dtype="float16")).status == "supported"
    assert omp.probe(request(catalog, "SoftmaxGrad_13", [], dtype="bfloat16")).status == "supported"


def test_environment_names_the_build(omp):
    env = omp.environment()
    assert env["compiler"].startswith("gcc") and "-fopenmp" in env["flags"] and env["threads"] == 2


def test_a_missing_library_is_unavailable_with_the_reason(monkeypatch):
    monkeypatch.setenv("OPCONFORM_KERNELS_LIB", "/nonexistent/libopconform_kernels.so")
    backend = OpenmpBackend()
    try:
        reason = backend.availability()
        assert reason and "does not load" in reason and "/nonexistent/libopconform_kernels.so" in reason
    finally:
        backend.close()


def test_a_crash_in_the_worker_is_a_result(omp, catalog, monkeypatch):
    # the library does not crash on bad input, so kill the worker the way a kernel bug would
    import os
    import signal

    omp.run(request(catalog, "ReluGrad", [np.ones(2, np.float32), np.ones(2, np.float32)]))
    os.kill(omp._worker._proc.pid, signal.SIGSEGV)
    outcome = omp.run(request(catalog, "ReluGrad", [np.ones(2, np.float32), np.ones(2, np.float32)]))
    assert isinstance(outcome, Crashed) and outcome.signal == "SIGSEGV"
    again = omp.run(request(catalog, "ReluGrad", [np.ones(2, np.float32), np.ones(2, np.float32)]))
    assert isinstance(again, Outputs)  # a fresh worker serves the next case
