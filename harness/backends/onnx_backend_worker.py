"""The part of the onnx-backend adapter that runs inside its isolated worker: the module under test
is imported here only.

Requests: {'call': 'info', 'module', 'device'} -> {'version', ...} or {'error'};
{'call': 'run', 'module', 'device', 'model', 'feeds', 'fetches', 'threads'} -> list of arrays in
graph-output order, or ('unsupported', message) / ('failed', phase, class, message).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import unittest
from typing import Any, Protocol

from harness.backends.ort_session import _keep_torch_out


class _Rep(Protocol):
    """What an ONNX backend module's prepare() returns (onnx.backend.base.BackendRep, duck-typed)."""

    def run(self, inputs: Any, **kwargs: Any) -> Any: ...


_reps: dict[tuple, _Rep] = {}


def _module(name: str):
    # onnxruntime.backend skips every model with a com.microsoft opset unless this is 0 at import time
    os.environ.setdefault("ALLOW_RELEASED_ONNX_OPSET_ONLY", "0")
    if name.startswith("onnxruntime"):
        _keep_torch_out()
    return importlib.import_module(name)


def is_onnxruntime(name: str) -> bool:
    return name.split(".")[0] == "onnxruntime"


def handle(request: dict):
    if request["call"] == "info":
        return info(request["module"], request["device"])
    return run(request)


def info(name: str, device: str) -> dict:
    try:
        module = _module(name)
    except Exception as e:  # noqa: BLE001 - any import error is why it is unavailable
        return {"error": f"import {name} failed: {type(e).__name__}: {e}"}
    if not callable(getattr(module, "prepare", None)):
        return {"error": f"{name} has no prepare(model, device): not an ONNX backend module"}
    supports = getattr(module, "supports_device", None)
    if callable(supports) and not supports(device) and not _ort_on_cpu(name, device):
        return {"error": f"{name}.supports_device({device!r}) is False"}
    top = name.split(".")[0]
    version = getattr(importlib.import_module(top), "__version__", "")
    return {"version": str(version), "module": name, "device": device}


def _ort_on_cpu(name: str, device: str) -> bool:
    """onnxruntime.backend's supports_device compares with get_device(), which names the build's best
    device: a CUDA build says "GPU" and refuses "CPU", though its CPU provider runs. Such a module gets
    device None (no check) and the CPU provider alone through ORT_ONNX_BACKEND_EXCLUDE_PROVIDERS."""
    return is_onnxruntime(name) and device == "CPU"


def _prepare_kwargs(name: str, device: str, threads: int) -> dict:
    """For onnxruntime, the `ort` backend's session options (the rep copies kwargs onto SessionOptions)
    and on CPU the CPU provider alone (it takes every available provider otherwise; an env var is its
    only switch, read at each prepare)."""
    if not is_onnxruntime(name):
        return {}
    import onnxruntime

    if device == "CPU":
        others = [p for p in onnxruntime.get_available_providers() if p != "CPUExecutionProvider"]
        os.environ["ORT_ONNX_BACKEND_EXCLUDE_PROVIDERS"] = ",".join(others)
    return {"intra_op_num_threads": threads, "inter_op_num_threads": 1, "log_severity_level": 4,
            "graph_optimization_level": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL}


def run(request: dict):
    import onnx

    name, device = request["module"], request["device"]
    key = (hashlib.sha256(request["model"]).hexdigest(), request["threads"])
    rep = _reps.get(key)
    if rep is None:
        module = _module(name)
        kwargs = {**_prepare_kwargs(name, device, request["threads"]), **request.get("prepare_kwargs", {})}
        try:
            # onnxruntime.backend runs onnx.checker on a ModelProto, which refuses graph outputs without a
            # shape (ORT accepts them, and `ort` is given the same bytes): it gets the bytes
            model = request["model"] if is_onnxruntime(name) else onnx.load_from_string(request["model"])
            rep = module.prepare(model, None if _ort_on_cpu(name, device) else device, **kwargs)
        except (unittest.SkipTest, NotImplementedError) as e:
            return ("unsupported", f"{name}.prepare: {type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - the module refused the model: classified by the parent
            return ("failed", "session", type(e).__name__, str(e))
        _reps[key] = rep
    try:
        outputs = rep.run([request["feeds"][n] for n in request["inputs"]])
    except NotImplementedError as e:
        return ("unsupported", f"{name} run: {e}")
    except Exception as e:  # noqa: BLE001
        return ("failed", "run", type(e).__name__, str(e))
    return ("outputs", [outputs[i] for i in range(len(request["fetches"]))])
