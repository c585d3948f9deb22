"""The part of the `ort` backend that runs inside the isolated worker: sessions, cached and reused.

Kept apart from ort.py so that the parent process never imports onnxruntime: whatever onnxruntime
does to its process (crash, hang, abort) happens to the worker only.
"""
from __future__ import annotations

import hashlib
import sys

from harness.core.timing import Budget, repeat

_sessions: dict[tuple, object] = {}


def preload() -> None:
    """What the worker template imports once (harness.backends.worker_template)."""
    _keep_torch_out()
    import onnxruntime  # noqa: F401


def _keep_torch_out() -> None:
    """onnxruntime-training imports its ORTModule, and with it torch (3 s), wherever torch is installed;
    a one-node InferenceSession uses neither, and ORT skips ORTModule when `import torch` fails, as
    it does where torch is absent. Only in this worker process, and only before onnxruntime loads."""
    if "onnxruntime" not in sys.modules:
        sys.modules.setdefault("torch", None)  # type: ignore[arg-type]  # None here makes `import torch` fail, on purpose


class OrtError(Exception):
    """An error onnxruntime raised, with the phase it happened in ('session' or 'run')."""


def handle(request: dict):
    """The worker's entry point: {'call': 'info'}, {'call': 'run', ...}, {'call': 'probe', ...} or {'call': 'cuda'}."""
    _keep_torch_out()
    if request["call"] == "probe":
        return probe(request)
    if request["call"] == "bench":
        return bench(request)
    if request["call"] == "cuda":
        return cuda_check(request.get("session", False))
    return info() if request["call"] == "info" else run(request)


def info() -> dict:
    import onnxruntime as ort

    return {"version": ort.__version__, "providers": ort.get_available_providers(),
            "training": hasattr(ort.capi._pybind_state, "GradientGraphBuilder")}


def _cached_session(request: dict):
    import onnxruntime as ort

    key = (hashlib.sha256(request["model"]).hexdigest(), request["threads"], request["provider"])
    session = _sessions.get(key)
    if session is None:
        session = _session(ort, request, _options(ort, request))
        _sessions[key] = session
    return session


def run(request: dict) -> list:
    session = _cached_session(request)
    try:
        plain = session.run(request["fetches"], request["feeds"])
        # ORT's optimizers write list feeds in place: a second run would start from the first one's results
        sequence_fed = any(isinstance(v, list) for v in request["feeds"].values())
        if not request.get("poison") or request["provider"] != "CPUExecutionProvider" or sequence_fed:
            return plain
        return _poisoned_run(session, request, plain)
    except Exception as e:  # noqa: BLE001 - any ORT error is the op's result, sent back as OrtError
        raise OrtError(f"run|{type(e).__name__}|{e}") from None


# What an output buffer holds before the kernel writes it (Request.poison_outputs): NaN, or the type's most
# negative integer. A kernel that leaves part of an output unwritten returns these there on every such run,
# instead of whatever the allocator's memory happened to hold (zeros in one run, NaN in the next: FusedMatMul with
# K = 0). Only on request (reruns of an intermittent divergence's cases): ORT checks bound outputs' shapes against
# the model's declared ones, which a plain run does not, so it is no way to run every case.


def _poisoned_run(session, request: dict, plain: list) -> list:
    """Run again with every float or signed-integer output bound to a buffer of the first run's shape filled with
    the poison above, and return that run's outputs: what the kernel does not write shows, the same way every run. Other
    outputs (bool, unset, non-array) are the first run's."""
    import numpy as np

    binding = session.io_binding()
    for name, value in request["feeds"].items():
        binding.bind_cpu_input(name, np.ascontiguousarray(value))
    buffers = []
    for name, value in zip(request["fetches"], plain):
        if isinstance(value, np.ndarray) and value.dtype.kind in "fi" and value.dtype.itemsize in (2, 4, 8):
            poison = np.nan if value.dtype.kind == "f" else np.iinfo(value.dtype).min
            buffer = np.full(value.shape, poison, value.dtype)
            binding.bind_output(name, "cpu", 0, value.dtype, list(value.shape), buffer.ctypes.data)
        else:
            buffer = None
            binding.bind_output(name, "cpu")
        buffers.append(buffer)
    try:
        session.run_with_iobinding(binding)
    except Exception:  # noqa: BLE001 - a bound output's shape is not the model's declared one: the plain run stands
        return plain
    return [value if buffer is None else buffer for value, buffer in zip(plain, buffers)]


def bench(request: dict) -> list[float]:
    """Seconds per session.run of the request (opconform bench), after one checked run."""
    run(request)
    session = _cached_session(request)
    return repeat(lambda: session.run(request["fetches"], request["feeds"]), Budget(**request["budget"]))


def _options(ort, request: dict):
    options = ort.SessionOptions()
    options.log_severity_level = 4  # kernels print [E:onnxruntime...] even at 3
    options.intra_op_num_threads = request["threads"]
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def _session(ort, request: dict, options):
    try:
        session = ort.InferenceSession(request["model"], options, providers=[request["provider"]])
    except Exception as e:  # noqa: BLE001 - any ORT error is the op's result, sent back as OrtError
        raise OrtError(f"session|{type(e).__name__}|{e}") from None
    if request["provider"] not in session.get_providers():
        raise OrtError(f"session|ProviderUnavailable|{request['provider']} did not load")
    return session


def probe(request: dict) -> dict:
    """Run the request once in a fresh, profiled session: every kernel that ran, with its provider and
    its input and output types, is the evidence harness.backends.ort_probe classifies."""
    import json
    import os
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="opconform-probe-") as tmp:
        options = _options(ort, request)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "probe")
        session = _session(ort, request, options)
        try:
            session.run(request["fetches"], request["feeds"])
        except Exception as e:  # noqa: BLE001 - any ORT error is the op's result, sent back as OrtError
            raise OrtError(f"run|{type(e).__name__}|{e}") from None
        with open(session.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    kernels = []
    for event in events:
        args = event.get("args", {})
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time") and "op_name" in args:
            kernels.append({"op": args["op_name"], "provider": args.get("provider", ""),
                            "inputs": [t for shape in args.get("input_type_shape", []) for t in shape],
                            "outputs": [t for shape in args.get("output_type_shape", []) for t in shape]})
    return {"providers": session.get_providers(), "kernels": kernels}


def cuda_check(session: bool = False) -> dict:
    """Whether onnxruntime's CUDA provider library loads here (without importing onnxruntime): the
    dlopen error names the missing CUDA library (e.g. libcublasLt.so.11). With session=True, also
    the providers a one-node session asking for CUDA really gets (ORT falls back to CPU silently)."""
    import ctypes
    import importlib.util
    import os

    found = importlib.util.find_spec("onnxruntime")
    if found is None or not found.submodule_search_locations:
        return {"library": None, "error": "onnxruntime is not installed"}
    capi = os.path.join(list(found.submodule_search_locations)[0], "capi")
    library = os.path.join(capi, "libonnxruntime_providers_cuda.so")
    if not os.path.exists(library):
        return {"library": None, "error": "this onnxruntime build has no CUDA provider library"}
    try:
        ctypes.CDLL(os.path.join(capi, "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(library)
    except OSError as e:
        return {"library": library, "error": str(e)}
    reply = {"library": library, "error": None}
    if session:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "cuda_check", [x],
                                                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]),
                                  ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
        options = ort.SessionOptions()
        options.log_severity_level = 4
        reply["session_providers"] = ort.InferenceSession(model.SerializeToString(), options,
                                                          providers=["CUDAExecutionProvider"]).get_providers()
    return reply
