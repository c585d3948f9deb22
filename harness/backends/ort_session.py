"""The part of the `ort` backend that runs inside the isolated worker: sessions, cached and reused.

Kept apart from ort.py so that the parent process never imports onnxruntime: whatever onnxruntime
does to its process (crash, hang, abort) happens to the worker only.
"""
from __future__ import annotations

import hashlib

_sessions: dict[tuple, object] = {}


class OrtError(Exception):
    """An error onnxruntime raised, with the phase it happened in ('session' or 'run')."""


def handle(request: dict):
    """The worker's entry point: {'call': 'info'} or {'call': 'run', ...}."""
    return info() if request["call"] == "info" else run(request)


def info() -> dict:
    import onnxruntime as ort

    return {"version": ort.__version__, "providers": ort.get_available_providers(),
            "training": hasattr(ort.capi._pybind_state, "GradientGraphBuilder")}


def run(request: dict) -> list:
    import onnxruntime as ort

    key = (hashlib.sha256(request["model"]).hexdigest(), request["threads"], request["provider"])
    session = _sessions.get(key)
    if session is None:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # kernels print [E:onnxruntime...] even at 3
        options.intra_op_num_threads = request["threads"]
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            session = ort.InferenceSession(request["model"], options, providers=[request["provider"]])
        except Exception as e:
            raise OrtError(f"session|{type(e).__name__}|{e}") from None
        if request["provider"] not in session.get_providers():
            raise OrtError(f"session|ProviderUnavailable|{request['provider']} did not load")
        _sessions[key] = session
    try:
        return session.run(request["fetches"], request["feeds"])
    except Exception as e:
        raise OrtError(f"run|{type(e).__name__}|{e}") from None
