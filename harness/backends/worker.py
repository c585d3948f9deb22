"""Crash isolation: a reusable child process that serves requests with a handler function.

The parent sends a request and waits at most `timeout` seconds. A child killed by a signal (SIGSEGV,
SIGFPE, SIGABRT) becomes Crashed, one that does not answer in time is killed and becomes TimedOut;
either way the next call starts a fresh child. The child's stderr goes to a file whose tail explains
a crash ("terminate called without an active exception").

The child runs worker_template.serve(HANDLER, FD): HANDLER is module:function taking one request and returning a
picklable reply, FD the socket to the parent.

A fresh child's imports never count against a call's `timeout`: the child says it is ready once it has
imported the handler's module (and, when spawned, PRELOAD), and the parent waits for that under the
library-load limit (limits.INFO_TIMEOUT) before it sends the request and starts the call's clock. Without
this, a worker spawned after a crash (no template: OPCONFORM_WORKER_FORK=0, or one that failed) imported
onnxruntime inside the next case's limit (1.3-1.7 s at load 12, 3 s and more with torch, against a spec
group's `timeout: 3`), and a worker whose imports outlast the limit never answered at all.

A restart costs a fork, not an import (harness.backends.worker_template): each worker is forked from
a template process, one per (handler, preloaded modules, environment), that has imported the
handler's module and PRELOAD (onnxruntime: 0.4 s, 3 s where torch is installed) but has never run a
kernel or an OpenMP region. Every worker dies with the harness: the template and its workers get
SIGKILL when their parent dies (PR_SET_PDEATHSIG, plus a watchdog on the parent's pid), even in the
middle of a kernel.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import IO, ClassVar

from harness.backends import worker_template
from harness.backends.base import Backend, Crashed, TimedOut
from harness.backends.limits import DEFAULT_TIMEOUT, INFO_LIMIT, INFO_TIMEOUT


class HandlerError(Exception):
    """The handler raised: (exception class name, message) travel back to the parent."""

    def __init__(self, cls: str, message: str):
        self.cls, self.message = cls, message
        super().__init__(f"{cls}: {message}")


_CHILD = "import sys; from harness.backends.worker_template import serve; serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])"


class IsolatedWorker:
    def __init__(self, handler: str, timeout: float = DEFAULT_TIMEOUT, env: dict | None = None,
                 preload: tuple[str, ...] = ()):
        self.handler, self.timeout, self.preload = handler, timeout, tuple(preload)
        self.env = {**os.environ, **(env or {})}
        self._proc: subprocess.Popen | worker_template.Forked | None = None
        self._conn: Connection | None = None
        self._stderr: IO[bytes] | None = None

    def call(self, request, timeout: float | None = None):
        """The handler's reply, or Crashed / TimedOut; raises HandlerError if the handler raised. A fresh
        worker's imports are waited for first, under INFO_TIMEOUT: `timeout` counts the call alone."""
        if self._proc is None:
            failed = self._start()
            if failed is not None:
                return failed
        proc, conn = self._running()
        try:
            conn.send(request)
            if not conn.poll(timeout or self.timeout):
                if proc.poll() is None:
                    self._kill()
                    return TimedOut(timeout or self.timeout)
            status, *payload = conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            return self._crashed()
        if status == "error":
            raise HandlerError(*payload)
        return payload[0]

    def _running(self) -> tuple[subprocess.Popen | worker_template.Forked, Connection]:
        """The worker's process and connection, which _start sets and _reset clears."""
        if self._proc is None or self._conn is None:
            raise RuntimeError(f"no worker is running for {self.handler}")
        return self._proc, self._conn

    def _start(self) -> Crashed | TimedOut | None:
        """A fresh worker, forked from the template or spawned, once it has its imports (see _ready)."""
        parent, child = socket.socketpair()
        self._stderr = stderr = tempfile.TemporaryFile()
        template = worker_template.get(self.handler, self.preload, self.env)
        if template is not None:
            try:
                self._proc = template.fork(child.fileno(), stderr.fileno())
            except worker_template.TemplateError:
                self._proc = None  # the template died: spawn this one, a fresh template next time
            if self._proc is not None:
                child.close()
                self._conn = Connection(parent.detach())
                return self._ready()
        # spawned: it imports the handler's module and PRELOAD itself, which the template would have held
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, self.handler, str(child.fileno()), ",".join(self.preload)],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
            env=self.env)
        child.close()
        self._conn = Connection(parent.detach())
        return self._ready()

    def _ready(self) -> Crashed | TimedOut | None:
        """Wait, under the library-load limit, for the new worker's ('ready',): its imports are done and the
        caller's timeout may start. Crashed if it died importing, TimedOut(INFO_TIMEOUT) if it never finished."""
        proc, conn = self._running()
        try:
            if not conn.poll(INFO_TIMEOUT) and proc.poll() is None:
                self._kill()
                return TimedOut(INFO_TIMEOUT, INFO_LIMIT)
            message = conn.recv()
        except (EOFError, OSError):
            return self._crashed()
        if message != ("ready",):
            self._kill()
            return Crashed("protocol", f"the worker's first message was {message!r}, not ('ready',)")
        return None

    def _crashed(self) -> Crashed:
        proc, _ = self._running()
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            # killed here, not by _kill(): its _reset() would drop the process and the stderr read below
            proc.kill()
            code = proc.wait()
        detail = self._stderr_tail()
        self._reset()
        if code is not None and code < 0:
            return Crashed(signal.Signals(-code).name, detail)
        return Crashed(f"exit {code}", detail)

    def _stderr_tail(self, limit: int = 600) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip()
        return text[-limit:]

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        self._reset()

    def _reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._stderr is not None:
            self._stderr.close()
        self._proc = self._conn = self._stderr = None

    def close(self) -> None:
        if self._proc is not None:
            self._kill()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best-effort close of a dead worker
            pass


def prestart(backend_classes) -> None:
    """Start the worker templates of these backend classes now, in the background (harness.run.runner's
    caller does this before loading the specs, so that importing onnxruntime overlaps it)."""
    for cls in backend_classes:
        if isinstance(cls, type) and issubclass(cls, WorkerBackend) and cls.HANDLER:
            worker_template.prestart(cls.HANDLER, cls.PRELOAD, dict(os.environ))


@dataclass
class WorkerBackend(Backend):
    """A backend whose library lives in an IsolatedWorker serving HANDLER (module:function). The
    handler answers {'call': 'info'} with what the backend needs to know about its library; a failure
    to answer is recorded as {'error': ...}, which availability() turns into its reason."""
    HANDLER: ClassVar[str] = ""
    LOADING: ClassVar[str] = "loading the backend's library"  # what the worker was doing if it died
    # Imported (module) or called (module:function) once in the worker template, so that a restart
    # after a crash does not pay for it; nothing that runs a kernel or starts an OpenMP pool.
    PRELOAD: ClassVar[tuple[str, ...]] = ()
    _worker: IsolatedWorker | None = field(default=None, init=False, repr=False)
    _info: dict | None = field(default=None, init=False, repr=False)

    @property
    def worker(self) -> IsolatedWorker:
        if self._worker is None:
            self._worker = IsolatedWorker(self.HANDLER, self.timeout, preload=self.PRELOAD)
        return self._worker

    def info_request(self) -> dict:
        return {"call": "info"}

    def info(self) -> dict:
        if self._info is None:
            try:
                reply = self.worker.call(self.info_request(), timeout=INFO_TIMEOUT)
            except HandlerError as e:
                reply = {"error": str(e)}
            if isinstance(reply, TimedOut):
                reply = {"error": f"worker: {TimedOut(reply.seconds, INFO_LIMIT)}; killed"}
            elif isinstance(reply, Crashed):
                reply = {"error": f"worker died while {self.LOADING}: {reply}"}
            self._info = reply
        return self._info

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
