"""The `ort` backend: onnxruntime-training's CPU kernels, one-node models, in an isolated worker."""
from __future__ import annotations

import glob
import importlib.metadata
from dataclasses import dataclass

from harness.backends import onnx_model, ort_probe
from harness.backends.base import Crashed, Outputs, Rejected, Request, Support, TimedOut, Unsupported
from harness.backends.limits import BENCH_LIMIT, BENCH_TIMEOUT, INFO_LIMIT, INFO_TIMEOUT
from harness.backends.worker import HandlerError, WorkerBackend
from harness.core import dtypes, sequences

INSTALL_HINT = "pip install onnxruntime-training==1.19.2"
CUDA = "CUDAExecutionProvider"


def classify_error(phase: str, cls: str, message: str) -> Rejected | Unsupported:
    """ORT's refusal to build a kernel for a dtype is a capability gap, not a verdict on the inputs."""
    message = " ".join(message.split())
    # "Failed to find kernel": a kernel exists, but not for these types (GatherGrad's float16 dY with an int32 shape)
    if phase == "session" and cls == "NotImplemented" and any(
            s in message for s in ("Could not find an implementation", "Failed to find kernel for")):
        return Unsupported(f"no kernel registered: {message}")
    if phase == "session" and cls == "InvalidGraph" and "Type Error" in message:
        return Unsupported(f"type not accepted by the op schema: {message}")
    if cls == "ProviderUnavailable":
        return Unsupported(message)
    return Rejected(f"{cls} at {phase}: {message}")



@dataclass
class OrtBackend(WorkerBackend):
    HANDLER = "harness.backends.ort_session:handle"
    LOADING = "importing onnxruntime"
    PRELOAD = ("harness.backends.ort_session:preload",)  # onnxruntime, once, in the worker template
    provider: str = "CPUExecutionProvider"

    def __post_init__(self):
        self.name = "ort"

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

    def run(self, request: Request):
        model = onnx_model.build(request)
        try:
            reply = self.worker.call({"call": "run", "model": model.model, "feeds": model.feeds,
                                      "fetches": model.fetches, "threads": self.threads, "provider": self.provider,
                                      "poison": request.poison_outputs},
                                     timeout=min(self.timeout, request.timeout or self.timeout))
        except HandlerError as e:
            return classify_error(*_error_parts(e))
        if isinstance(reply, (Crashed, TimedOut)):
            return reply
        # an output ORT leaves unwritten comes back None (ConcatTraining's per_input_length for an empty result)
        fetched = iter(sequences.astype(a, dtypes.NUMPY[d]) for a, d in zip(reply, model.fetch_dtypes))  # (a list: a sequence)
        return Outputs([next(fetched) if wanted else None for wanted in request.outputs])

    def time(self, request: Request, budget: dict):
        model = onnx_model.build(request)
        try:
            reply = self.worker.call({"call": "bench", "model": model.model, "feeds": model.feeds,
                                      "fetches": model.fetches, "threads": self.threads, "provider": self.provider,
                                      "budget": budget}, timeout=BENCH_TIMEOUT)
        except HandlerError as e:
            return classify_error(*_error_parts(e))
        return TimedOut(reply.seconds, BENCH_LIMIT) if isinstance(reply, TimedOut) else reply

    def probe(self, request: Request) -> Support:
        """Kernel, function body or inserted casts, from a profiled run of the request (harness.backends.ort_probe)."""
        model = onnx_model.build(request)
        try:
            reply = self.worker.call({"call": "probe", "model": model.model, "feeds": model.feeds,
                                      "fetches": model.fetches, "threads": self.threads, "provider": self.provider})
        except HandlerError as e:
            return ort_probe.classify_error(request.spec.op, request.dtype, *_error_parts(e))
        if isinstance(reply, (Crashed, TimedOut)):
            return Support("error", reason=f"the probe case killed the worker: {reply}")
        return ort_probe.classify_run(request.spec, request.dtype, reply["kernels"], self.provider)

    def environment(self) -> dict:
        info = self.info()
        return {"onnxruntime-training": info.get("version", "unavailable"), "provider": self.provider,
                "intra_op_num_threads": self.threads}



def _error_parts(e: HandlerError) -> tuple[str, str, str]:
    """(phase, exception class, message) of an error the worker sent back."""
    if e.cls != "OrtError":
        return "run", e.cls, e.message
    phase, cls, message = e.message.split("|", 2)  # the session worker writes OrtError("phase|class|message")
    return phase, cls, message


def gpu_devices() -> list[str]:
    """The NVIDIA GPUs the driver exposes here (/dev/nvidia0, /dev/nvidia1, ...)."""
    return sorted(glob.glob("/dev/nvidia[0-9]*"))


def cuda_unavailable(library_error: str | None, gpus: list[str], session_providers: list[str] | None = None) -> str | None:
    """Why ort-cuda cannot run here (every reason found), or None when it can. session_providers: what
    a session asking for CUDA really got (None: not tried), since ORT falls back to CPU silently."""
    reasons = []
    if library_error:
        reasons.append(f"onnxruntime's CUDA provider does not load: {library_error}")
    if not gpus:
        reasons.append("no NVIDIA GPU (no /dev/nvidia[0-9]* device)")
    if not reasons and session_providers is not None and CUDA not in session_providers:
        reasons.append(f"a session asking for {CUDA} got {', '.join(session_providers) or 'no provider'} instead")
    return "; ".join(reasons) or None


@dataclass
class OrtCudaBackend(OrtBackend):
    """The same backend on CUDAExecutionProvider: enabled only where that provider loads and a GPU is present."""
    provider: str = CUDA

    def __post_init__(self):
        self.name = "ort-cuda"

    def availability(self) -> str | None:
        try:
            importlib.metadata.version("onnxruntime-training")
        except importlib.metadata.PackageNotFoundError:
            return f"onnxruntime-training is not installed ({INSTALL_HINT})"
        check = self._cuda_check(session=False)  # cheap: no onnxruntime import
        if reason := cuda_unavailable(check.get("error"), gpu_devices()):
            return reason
        if reason := super().availability():
            return reason
        return cuda_unavailable(None, gpu_devices(), self._cuda_check(session=True).get("session_providers", []))

    def _cuda_check(self, session: bool) -> dict:
        try:
            reply = self.worker.call({"call": "cuda", "session": session}, timeout=INFO_TIMEOUT)
        except HandlerError as e:
            return {"error": str(e)}
        if isinstance(reply, TimedOut):
            return {"error": f"the worker: {TimedOut(reply.seconds, INFO_LIMIT)} while loading the CUDA provider"}
        if isinstance(reply, Crashed):
            return {"error": f"the worker died while loading the CUDA provider: {reply}"}
        return reply
