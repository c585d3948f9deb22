"""`onnx-backend:MODULE[@DEVICE]`: any module implementing the ONNX backend API (onnx.backend.base:
prepare(model, device) -> rep, rep.run(inputs)) runs our one-node models, in an isolated worker.

The models are the `ort` backend's (harness.backends.onnx_model). onnxruntime.backend on CPU runs
ORT's own kernels, so the specs' `ort` known divergences apply to it (divergences_from) and
tests/test_onnx_backend_adapter.py holds it to bitwise parity with `ort`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.backends import onnx_model
from harness.backends.base import Crashed, Outputs, Rejected, Request, TimedOut, Unsupported
from harness.backends.ort import classify_error
from harness.backends.worker import HandlerError, IsolatedWorker, WorkerBackend
from harness.core import dtypes, sequences

PREFIX = "onnx-backend:"
SYNTAX = re.compile(r"^onnx-backend:(?P<module>[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*)(@(?P<device>[A-Za-z0-9_:]+))?$")


def parse(name: str) -> tuple[str, str, dict]:
    """(module, device, prepare kwargs) of an onnx-backend name; ValueError with the syntax otherwise."""
    found = SYNTAX.match(name)
    if not found:
        raise ValueError(f"backend {name!r}: write onnx-backend:MODULE[@DEVICE], e.g. onnx-backend:onnxruntime.backend "
                         "or onnx-backend:my_runtime.backend@CUDA (DEVICE defaults to CPU)")
    return found["module"], found["device"] or "CPU", {}


@dataclass
class OnnxBackendAdapter(WorkerBackend):
    HANDLER = "harness.backends.onnx_backend_worker:handle"
    LOADING = "importing the ONNX backend module"
    module: str = ""
    device: str = "CPU"
    prepare_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        self.name = PREFIX + self.module + ("" if self.device == "CPU" else f"@{self.device}")
        if self.module.split(".")[0] == "onnxruntime" and self.device == "CPU":
            self.divergences_from = "ort"  # the same CPU kernels

    @property
    def worker(self) -> IsolatedWorker:
        if self._worker is None:
            # set before the module's import: onnxruntime.backend reads it then
            self._worker = IsolatedWorker(self.HANDLER, self.timeout, env={"ALLOW_RELEASED_ONNX_OPSET_ONLY": "0"})
        return self._worker

    def info_request(self) -> dict:
        return {"call": "info", "module": self.module, "device": self.device}

    def availability(self) -> str | None:
        return self.info().get("error")

    def run(self, request: Request):
        model = onnx_model.build(request)
        try:
            reply = self.worker.call({"call": "run", "module": self.module, "device": self.device, "model": model.model,
                                      "feeds": model.feeds, "inputs": list(model.feeds), "fetches": model.fetches,
                                      "threads": self.threads, "prepare_kwargs": self.prepare_kwargs},
                                     timeout=min(self.timeout, request.timeout or self.timeout))
        except HandlerError as e:
            return Crashed("interface error", f"{self.name}: {e}")
        if isinstance(reply, (Crashed, TimedOut)):
            return reply
        kind, *payload = reply
        if kind == "unsupported":
            return Unsupported(payload[0])
        if kind == "failed":
            return self._classify(*payload)
        fetched = iter(sequences.astype(a, dtypes.NUMPY[d])  # None: a requested output left unset; a list: a sequence
                       for a, d in zip(payload[0], model.fetch_dtypes))
        return Outputs([next(fetched) if wanted else None for wanted in request.outputs])

    def _classify(self, phase: str, cls: str, message: str) -> Rejected | Unsupported:
        if self.module.split(".")[0] == "onnxruntime":
            return classify_error(phase, cls, message)  # as `ort` classifies the same error
        return Rejected(f"{cls} at {phase}: {' '.join(message.split())}")

    def environment(self) -> dict:
        info = self.info()
        return {"module": self.module, "device": self.device, "version": info.get("version", "unavailable")}
