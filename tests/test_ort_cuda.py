"""ort-cuda: the ort backend on CUDAExecutionProvider, enabled only where the provider loads and a GPU
is present. No GPU here, so the selection logic is tested with faked devices and provider replies."""
import numpy as np
import pytest

from harness import backends as registry
from harness.backends import ort as ort_module
from harness.backends.base import Request
from harness.backends.ort import CUDA, OrtBackend, OrtCudaBackend, cuda_unavailable
from harness.run.runner import RunError, RunOptions, open_backends

MISSING = "libcublasLt.so.11: cannot open shared object file: No such file or directory"


def test_selection_rule():
    assert cuda_unavailable(None, ["/dev/nvidia0"], [CUDA, "CPUExecutionProvider"]) is None
    both = cuda_unavailable(MISSING, [])
    assert both == (f"onnxruntime's CUDA provider does not load: {MISSING}; "
                    "no NVIDIA GPU (no /dev/nvidia[0-9]* device)")
    assert cuda_unavailable(None, []) == "no NVIDIA GPU (no /dev/nvidia[0-9]* device)"
    assert "got CPUExecutionProvider instead" in cuda_unavailable(None, ["/dev/nvidia0"], ["CPUExecutionProvider"])


class FakeWorker:
    """Answers the worker calls ort-cuda makes, and records them."""

    def __init__(self, library_error=None, session_providers=(CUDA, "CPUExecutionProvider")):
        self.library_error, self.session_providers, self.calls = library_error, list(session_providers), []

    def call(self, request, timeout=None):
        self.calls.append(request)
        if request["call"] == "cuda":
            reply = {"library": "libonnxruntime_providers_cuda.so", "error": self.library_error}
            return reply | ({"session_providers": self.session_providers} if request["session"] else {})
        if request["call"] == "info":
            return {"version": "1.19.2", "providers": [CUDA, "CPUExecutionProvider"], "training": True}
        if request["call"] == "run":
            return [np.zeros(3, np.float32)]
        raise AssertionError(request)

    def close(self):
        pass


def cuda_backend(monkeypatch, worker, gpus):
    monkeypatch.setattr(ort_module, "gpu_devices", lambda: list(gpus))
    backend = OrtCudaBackend()
    backend._worker = worker
    return backend


def test_enabled_when_the_provider_loads_and_a_gpu_is_present(monkeypatch):
    backend = cuda_backend(monkeypatch, FakeWorker(), ["/dev/nvidia0"])
    assert backend.availability() is None
    assert [c["call"] for c in backend._worker.calls] == ["cuda", "info", "cuda"]


@pytest.mark.parametrize("worker, gpus, reason", [
    (FakeWorker(library_error=MISSING), ["/dev/nvidia0"], MISSING),
    (FakeWorker(), [], "no NVIDIA GPU"),
    (FakeWorker(session_providers=["CPUExecutionProvider"]), ["/dev/nvidia0"], "got CPUExecutionProvider instead"),
])
def test_unavailable_with_the_reason(monkeypatch, worker, gpus, reason):
    backend = cuda_backend(monkeypatch, worker, gpus)
    assert reason in backend.availability()


def test_a_missing_library_is_found_without_importing_onnxruntime(monkeypatch):
    backend = cuda_backend(monkeypatch, FakeWorker(library_error=MISSING), [])
    backend.availability()
    assert [c["call"] for c in backend._worker.calls] == ["cuda"]  # no "info": onnxruntime never imported


def test_same_code_path_as_ort_on_the_cuda_provider(monkeypatch, catalog):
    assert OrtCudaBackend.run is OrtBackend.run and OrtCudaBackend.probe is OrtBackend.probe
    backend = cuda_backend(monkeypatch, FakeWorker(), ["/dev/nvidia0"])
    assert backend.name == "ort-cuda" and backend.environment()["provider"] == CUDA
    spec = catalog.by_op("ReluGrad")
    backend.run(Request(spec, "float32", [np.ones(3, np.float32)] * 2, {}, (True,)))
    assert backend._worker.calls[-1]["provider"] == CUDA


def test_default_backends_skip_it_when_unavailable_and_refuse_it_by_name(monkeypatch):
    assert "ort-cuda" in registry.DEFAULT
    monkeypatch.setattr(OrtCudaBackend, "availability", lambda self: "no NVIDIA GPU (faked)")
    chosen, status = open_backends(RunOptions(backends=None))
    try:
        assert "ort-cuda" not in [b.name for b in chosen]
        assert status["ort-cuda"] == {"available": False, "reason": "no NVIDIA GPU (faked)"}
    finally:
        for b in chosen:
            b.close()
    with pytest.raises(RunError, match="backend 'ort-cuda' is unavailable here: no NVIDIA GPU"):
        open_backends(RunOptions(backends=["ort-cuda"]))
