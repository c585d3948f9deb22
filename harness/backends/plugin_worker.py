"""The part of a plugin backend that runs inside its isolated worker: the plugin's code lives here only.

Requests: {'call': 'info', 'entry': name} -> what the parent needs to know (harness.backends.plugin);
{'call': 'run', 'entry': name, 'call_obj': plugin_api.Call} -> ('outputs', [array or None, ...]) in
the call's output order, ('rejected', message) or ('unsupported', message).
"""
from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping

import numpy as np

from harness.backends.plugin_api import API_VERSION, ENTRY_POINT_GROUP, Call, Rejected, Unsupported

_instances: dict[str, object] = {}


class PluginError(Exception):
    """The plugin could not be loaded or broke the interface."""


def entry_point(name: str) -> importlib.metadata.EntryPoint:
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise PluginError(f"no entry point {name!r} in group {ENTRY_POINT_GROUP} (is its package installed here?)")
    return found[0]


def instance(name: str):
    if name not in _instances:
        factory = entry_point(name).load()
        _instances[name] = factory() if callable(factory) else factory
    return _instances[name]


def handle(request: dict):
    if request["call"] == "info":
        return info(request["entry"])
    return run(instance(request["entry"]), request["call_obj"])


def info(name: str) -> dict:
    try:
        ep = entry_point(name)
        plugin = instance(name)
    except Exception as e:  # noqa: BLE001 - any import or construction error is the reason it is unavailable
        return {"error": f"loading {name} failed: {type(e).__name__}: {e}"}
    version = getattr(plugin, "api_version", None)
    if version != API_VERSION:
        return {"error": f"{ep.value} implements backend API version {version!r}; this opconform speaks version "
                         f"{API_VERSION} (see harness.backends.plugin_api)"}
    if not callable(getattr(plugin, "run", None)):
        return {"error": f"{ep.value} has no run(call) method"}
    reply = {"api_version": version, "target": ep.value, "thread_invariant": bool(getattr(plugin, "thread_invariant", False)),
             "distribution": _distribution(ep), "ops": None, "availability": None, "environment": {}}
    ops = getattr(plugin, "ops", None)
    if ops is not None:
        reply["ops"] = {str(op): sorted(str(d) for d in dtypes) for op, dtypes in dict(ops).items()}
    try:
        if callable(getattr(plugin, "availability", None)):
            reply["availability"] = plugin.availability()
        if callable(getattr(plugin, "environment", None)):
            reply["environment"] = {str(k): str(v) for k, v in dict(plugin.environment()).items()}
    except Exception as e:  # noqa: BLE001
        reply["availability"] = f"{ep.value}: availability()/environment() raised {type(e).__name__}: {e}"
    return reply


def _distribution(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ""


def run(plugin, call: Call):
    try:
        returned = plugin.run(call)
    except Unsupported as e:
        return ("unsupported", str(e) or "unsupported")
    except Rejected as e:
        return ("rejected", str(e) or "rejected")
    except Exception as e:  # noqa: BLE001 - documented: any other exception is a rejection, named
        return ("rejected", f"raised {type(e).__name__} (not plugin_api.Rejected): {e}")
    return ("outputs", _in_order(returned, call.outputs))


def _in_order(returned, names: tuple[str, ...]) -> list:
    """The returned outputs as arrays in `names` order; None for one not returned (reported missing)."""
    if isinstance(returned, Mapping):
        values = [returned.get(name) for name in names]
    elif isinstance(returned, (list, tuple)):
        values = list(returned[:len(names)]) + [None] * (len(names) - len(returned))
    elif isinstance(returned, np.ndarray) and len(names) == 1:
        values = [returned]
    else:
        raise PluginError(f"run() returned {type(returned).__name__}; return a dict of arrays by output name "
                          f"or a list in the order {list(names)}")
    return [None if v is None else np.asarray(v) for v in values]
