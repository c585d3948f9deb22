"""The `ort` backend: onnxruntime-training's CPU kernels, one-node models, in an isolated worker."""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field

from harness import dtypes
from harness.backends import onnx_model
from harness.backends.base import Backend, Crashed, Outputs, Rejected, Request, TimedOut, Unsupported
from harness.backends.worker import HandlerError, IsolatedWorker

INSTALL_HINT = "pip install onnxruntime-training==1.19.2"


def classify_error(phase: str, cls: str, message: str) -> Rejected | Unsupported:
    """ORT's refusal to build a kernel for a dtype is a capability gap, not a verdict on the inputs."""
    message = " ".join(message.split())
    if phase == "session" and cls == "NotImplemented" and "Could not find an implementation" in message:
        return Unsupported(f"no kernel registered: {message}")
    if phase == "session" and cls == "InvalidGraph" and "Type Error" in message:
        return Unsupported(f"type not accepted by the op schema: {message}")
    if cls == "ProviderUnavailable":
        return Unsupported(message)
    return Rejected(f"{cls} at {phase}: {message}")


@dataclass
class OrtBackend(Backend):
    provider: str = "CPUExecutionProvider"
    _worker: IsolatedWorker | None = field(default=None, init=False, repr=False)
    _info: dict | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.name = "ort"

    @property
    def worker(self) -> IsolatedWorker:
        if self._worker is None:
            self._worker = IsolatedWorker("harness.backends.ort_session:handle", self.timeout)
        return self._worker

    def availability(self) -> str | None:
        try:
            importlib.metadata.version("onnxruntime-training")
        except importlib.metadata.PackageNotFoundError:
            return f"onnxruntime-training is not installed ({INSTALL_HINT})"
        info = self.info()
        if "error" in info:
            return f"onnxruntime does not load: {info['error']}"
        if not info["training"]:
            return f"the installed onnxruntime is not the training build ({INSTALL_HINT}; uninstall plain onnxruntime)"
        return None

    def info(self) -> dict:
        if self._info is None:
            try:
                reply = self.worker.call({"call": "info"}, timeout=60)
            except HandlerError as e:
                reply = {"error": str(e)}
            if isinstance(reply, (Crashed, TimedOut)):
                reply = {"error": f"worker died while importing onnxruntime: {reply}"}
            self._info = reply
        return self._info

    def run(self, request: Request):
        model = onnx_model.build(request)
        try:
            reply = self.worker.call({"call": "run", "model": model.model, "feeds": model.feeds,
                                      "fetches": model.fetches, "threads": self.threads, "provider": self.provider})
        except HandlerError as e:
            phase, cls, message = e.message.split("|", 2) if e.cls == "OrtError" else ("run", e.cls, e.message)
            return classify_error(phase, cls, message)
        if isinstance(reply, (Crashed, TimedOut)):
            return reply
        fetched = iter(a.astype(dtypes.NUMPY[d], copy=False) for a, d in zip(reply, model.fetch_dtypes))
        return Outputs([next(fetched) if wanted else None for wanted in request.outputs])

    def environment(self) -> dict:
        info = self.info()
        return {"onnxruntime-training": info.get("version", "unavailable"), "provider": self.provider,
                "intra_op_num_threads": self.threads}

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
