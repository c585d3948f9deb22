"""Third-party backends installed as packages (the `opconform.backends` entry-point group), run in an
isolated worker: the plugin's own code is imported there only, so its crash or hang is a result.

The interface a plugin implements is harness.backends.plugin_api. Discovery reads the installed
packages' metadata only (no plugin code runs in the harness's process).
"""
from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass

from harness.backends.base import Crashed, Outputs, Rejected, Request, Support, TimedOut, Unsupported
from harness.backends.plugin_api import ENTRY_POINT_GROUP, Call
from harness.backends.worker import HandlerError, IsolatedWorker, WorkerBackend


@functools.cache
def discover() -> dict[str, importlib.metadata.EntryPoint]:
    """Installed plugins by backend name (the entry point's name), in name order."""
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return dict(sorted(found.items()))


@dataclass
class PluginBackend(WorkerBackend):
    SUBJECTS = ("kernel", "training_graph")  # a training_graph spec runs when the plugin declares its op in `ops` (probe)
    HANDLER = "harness.backends.plugin_worker:handle"
    LOADING = "loading the plugin"
    entry: str = ""  # the entry point's name, which is the backend's name

    def __post_init__(self):
        self.name = self.entry

    @property
    def THREAD_INVARIANT(self) -> bool:  # type: ignore[override]  # noqa: N802 - Backend's class attribute, read-only here: the plugin declares it
        return bool(self.info().get("thread_invariant"))

    @property
    def worker(self) -> IsolatedWorker:
        if self._worker is None:
            ep = discover().get(self.entry)
            # the plugin's module is imported once in the worker template: a restart after a crash forks
            preload = (ep.module,) if ep is not None else ()
            self._worker = IsolatedWorker(self.HANDLER, self.timeout, preload=preload)
        return self._worker

    def info_request(self) -> dict:
        return {"call": "info", "entry": self.entry}

    def availability(self) -> str | None:
        if self.entry not in discover():
            return f"no installed package provides backend {self.entry!r} (entry-point group {ENTRY_POINT_GROUP})"
        info = self.info()
        return info.get("error") or info.get("availability")

    def probe(self, request: Request) -> Support:
        """What the plugin declares in `ops`: cases of an undeclared op or dtype are unsupported, not run."""
        ops = self.info().get("ops")
        spec = request.spec
        if ops is None:
            return Support("supported", "assumed", f"{self.name} declares no `ops`: handed every op and dtype")
        dtypes = ops.get(spec.op, ops.get(f"{spec.domain}::{spec.op}"))
        if dtypes is None:
            return Support("not_registered", reason=f"{self.name} declares no {spec.op} kernel (its ops: "
                                                    f"{', '.join(ops) or 'none'})")
        if request.dtype not in dtypes:
            return Support("no_kernel", reason=f"{self.name} declares {spec.op} for {', '.join(dtypes)} only")
        return Support("supported", "declared", f"{self.name} declares {spec.op} {request.dtype}")

    def run(self, request: Request):
        try:
            reply = self.worker.call({"call": "run", "entry": self.entry, "call_obj": to_call(request)},
                                     timeout=min(self.timeout, request.timeout or self.timeout))
        except HandlerError as e:
            return Crashed("interface error", f"{self.name}: {e}")
        if isinstance(reply, (Crashed, TimedOut)):
            return reply
        kind, payload = reply
        if kind == "rejected":
            return Rejected(payload)
        if kind == "unsupported":
            return Unsupported(payload)
        returned = iter(payload)
        return Outputs([next(returned) if wanted else None for wanted in request.outputs])

    def environment(self) -> dict:
        info = self.info()
        return {"plugin": info.get("target", ""), "distribution": info.get("distribution", ""),
                "api_version": info.get("api_version"), **info.get("environment", {})}


def to_call(request: Request) -> Call:
    spec = request.spec
    attributes = {name: a.default for name, a in spec.attributes.items() if a.default is not None}
    attributes.update(request.attributes)
    return Call(op=spec.op, domain=spec.domain, since_version=spec.since_version, dtype=request.dtype,
                inputs=request.named_inputs(), attributes=attributes, node_attributes=tuple(request.attributes),
                outputs=tuple(o.name for o, wanted in zip(spec.outputs, request.outputs) if wanted),
                threads=request.threads)
