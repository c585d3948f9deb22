"""Worker templates: a process that has imported a backend's libraries once and forks workers on request.

Importing onnxruntime takes 0.4 s, and 3 s where torch is installed (onnxruntime's training build
imports its ORTModule, which imports torch). A crash-heavy op restarts its worker dozens of times per
run; forking a template that already holds the imports makes each restart cost milliseconds.

A template is started once per (handler, preload, environment): the environment decides what the
libraries load (OPCONFORM_ISA picks the C library's ISA level, OPCONFORM_KERNELS_LIB another build),
so two environments never share one. It imports the handler's module and PRELOAD and then only
forks: it never runs a kernel or an OpenMP region, because fork() after libgomp's threads exist
leaves the child with a pool it cannot use (numpy's OpenBLAS threads are shut down across fork by
OpenBLAS's own atfork handler).

Lifecycle: the template and every worker get SIGKILL when their parent dies (PR_SET_PDEATHSIG, set
through ctypes); a worker also runs a watchdog thread on its parent's pid, and a template kills its
workers when the harness's end of the control socket closes. A SIGKILL of the harness therefore
takes every worker down within milliseconds, even one stuck in a kernel.

Protocol (SOCK_SEQPACKET, pickled tuples): ('fork',) with the worker's socket and stderr fds ->
('pid', pid); ('wait', pid, seconds) -> ('status', returncode or None); returncode as Popen's
(negative: killed by that signal).
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness.spec.dotted import resolve

PR_SET_PDEATHSIG = 1
WATCHDOG_INTERVAL = 0.2  # seconds between a worker's checks that its parent is still there
START_TIMEOUT = 180.0  # seconds for a template to import its libraries
DISABLE_ENV = "OPCONFORM_WORKER_FORK"  # "0": spawn every worker as a fresh interpreter (the old way)

_watched_parent: dict[int, int] = {}  # this process's pid -> the parent pid its watchdog watches


class TemplateError(Exception):
    """The template could not start or died; the caller spawns a worker instead."""


def die_with_parent(watchdog: bool = True) -> None:
    """SIGKILL this process when its parent dies; exit at once if it already has."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog alone
        pass
    if parent == 1:  # the parent died before prctl took effect (we were reparented)
        os._exit(1)
    if watchdog and _watched_parent.get(os.getpid()) is None:
        _watched_parent[os.getpid()] = parent
        threading.Thread(target=_watch, args=(parent,), name="opconform-watchdog", daemon=True).start()


def _watch(parent: int) -> None:
    while True:
        time.sleep(WATCHDOG_INTERVAL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


# ---- inside the template -------------------------------------------------------------------------


def serve_template(handler: str, preload: str, fd: int) -> None:
    die_with_parent(watchdog=False)  # no thread may exist when it forks
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    control = socket.socket(fileno=fd)

    resolve(handler)  # imports the handler's module
    for name in filter(None, preload.split(",")):
        if ":" in name:
            resolve(name)()
        else:
            __import__(name)
    # Every object so far moves to the permanent generation: a worker's collections then never walk
    # (and copy-on-write) the imported libraries' objects, torch's hundreds of thousands included.
    gc.collect()
    gc.freeze()
    control.send(pickle.dumps(("ready", os.getpid())))
    children: set[int] = set()
    finished: dict[int, int] = {}
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 4096, 4)
        except OSError:
            data, fds = b"", []
        if not data:  # the harness closed the template or is gone: its workers go with it
            for pid in children:
                _kill(pid)
            for pid in children:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
            os._exit(0)
        message = pickle.loads(data)
        _reap(children, finished)
        reply: tuple
        if message[0] == "fork":
            conn_fd, err_fd = fds
            pid = os.fork()
            if pid == 0:
                _become_worker(handler, control, conn_fd, err_fd)
            os.close(conn_fd)
            os.close(err_fd)
            children.add(pid)
            reply = ("pid", pid)
        elif message[0] == "wait":
            _, pid, seconds = message
            deadline = time.monotonic() + seconds
            while pid not in finished and pid in children and time.monotonic() < deadline:
                time.sleep(0.002)
                _reap(children, finished)
            reply = ("status", finished.pop(pid) if pid in finished else (0 if pid not in children else None))
        else:
            reply = ("error", f"unknown request {message[0]!r}")
        control.send(pickle.dumps(reply))


def _reap(children: set[int], finished: dict[int, int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.discard(pid)
            continue
        if done:
            children.discard(pid)
            finished[pid] = _returncode(status)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def serve(handler_path: str, fd: int, preload: str = "") -> None:
    """A worker's loop (forked from a template, or spawned): import the handler's module and `preload`
    (a spawned worker's PRELOAD; a forked one has the template's), say ('ready',), then answer requests on fd
    with the handler until the parent closes it; the handler's own exceptions are replies, not worker deaths.
    The parent waits for ('ready',) under the library-load limit, so the imports never count against a
    call's timeout (harness.backends.worker)."""
    from multiprocessing.connection import Connection

    die_with_parent()
    handler = resolve(handler_path)
    for name in filter(None, preload.split(",")):
        try:
            resolve(name)() if ":" in name else __import__(name)
        except Exception:  # noqa: BLE001 - the handler meets the same error when it needs the library, and says so
            pass
    conn = Connection(fd)
    conn.send(("ready",))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        reply: tuple
        try:
            reply = ("ok", handler(request))
        except Exception as e:  # noqa: BLE001 - a handler's error is the reply, not the child's end
            reply = ("error", type(e).__name__, str(e))
        conn.send(reply)
        sys.stderr.flush()


def _become_worker(handler: str, control: socket.socket, conn_fd: int, err_fd: int) -> None:
    code = 1
    try:
        control.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(err_fd, 1)
        os.dup2(err_fd, 2)
        os.close(err_fd)
        serve(handler, conn_fd)
        code = 0
    except BaseException:  # noqa: BLE001 - a worker must never return into the template's loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# ---- in the harness -----------------------------------------------------------------------------


class Forked:
    """A worker forked by a template, with the part of Popen's interface IsolatedWorker uses."""

    def __init__(self, template: "Template", pid: int):
        self.template, self.pid = template, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(timeout=0, _raise=False)

    def wait(self, timeout: float | None = None, _raise: bool = True) -> int | None:
        if self.returncode is None:
            seconds = 3600.0 if timeout is None else timeout
            try:
                self.returncode = self.template.wait(self.pid, seconds)
            except TemplateError:
                self.returncode = -signal.SIGKILL  # the template died: so did its workers
            if self.returncode is None and _raise:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", seconds)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            _kill(self.pid)


class Template:
    """Started in __init__ without waiting (its imports overlap the harness's own start-up); the first
    fork waits until it is ready."""

    def __init__(self, handler: str, preload: tuple[str, ...], env: dict):
        self.ready = False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = tempfile.TemporaryFile()
        code = "import sys; from harness.backends.worker_template import serve_template; " \
               "serve_template(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
        self.proc = subprocess.Popen([sys.executable, "-c", code, handler, ",".join(preload), str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=self._log, env=env)
        theirs.close()
        self._socket, self._lock = ours, threading.Lock()

    def wait_ready(self) -> None:
        """Returns once the template has its imports; TemplateError (with its stderr) if it never will."""
        with self._lock:
            if self.ready:
                return
            self._socket.settimeout(START_TIMEOUT)
            try:
                reply = self._receive()
            except TemplateError as e:
                raise TemplateError(f"{e}: {self._tail()}") from None
            finally:
                self._socket.settimeout(None)
            if reply[0] != "ready":
                raise TemplateError(f"unexpected reply {reply!r}")
            self.ready = True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, conn_fd: int, err_fd: int) -> Forked:
        reply = self._ask(("fork",), (conn_fd, err_fd))
        return Forked(self, reply[1])

    def wait(self, pid: int, seconds: float) -> int | None:
        return self._ask(("wait", pid, seconds))[1]

    def _ask(self, message: tuple, fds=()) -> tuple:
        with self._lock:
            try:
                socket.send_fds(self._socket, [pickle.dumps(message)], list(fds))
            except OSError as e:
                raise TemplateError(f"the worker template is gone ({e})") from None
            return self._receive()

    def _receive(self) -> tuple:
        try:
            data = self._socket.recv(4096)
        except (OSError, socket.timeout) as e:
            raise TemplateError(f"the worker template did not answer ({e})") from None
        if not data:
            raise TemplateError("the worker template died")
        return pickle.loads(data)

    def _tail(self, limit: int = 600) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()[-limit:]

    def close(self) -> None:
        self._socket.close()  # the template kills and reaps its workers, then exits
        try:
            self.proc.wait(timeout=2 if self.ready else 0)  # one still importing has no worker yet
        except subprocess.TimeoutExpired:
            self.proc.kill()  # its workers follow it (PR_SET_PDEATHSIG)
            self.proc.wait()
        self._log.close()


_templates: dict[tuple, Template | None] = {}
_registry_lock = threading.Lock()


def enabled() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork") and os.environ.get(DISABLE_ENV, "1") != "0"


def _started(handler: str, preload: tuple[str, ...], env: dict) -> tuple[tuple, Template | None]:
    key = (handler, tuple(preload), tuple(sorted(env.items())))
    with _registry_lock:
        template = _templates.get(key)
        if template is not None and not template.alive():
            template.close()
            template = None
        if template is None and (key not in _templates or _templates[key] is not None):
            try:
                template = Template(handler, tuple(preload), env)
            except OSError:
                template = None
            _templates[key] = template
        return key, template


def prestart(handler: str, preload: tuple[str, ...], env: dict) -> None:
    """Start the template now, without waiting: its imports overlap whatever the harness does next."""
    if enabled() and env.get(DISABLE_ENV) != "0":
        _started(handler, preload, env)


def get(handler: str, preload: tuple[str, ...], env: dict) -> Template | None:
    """The ready template for this handler, preload and environment (started on first use), or None
    when templates are off or this one cannot start (the caller then spawns, which reports why)."""
    if not enabled() or env.get(DISABLE_ENV) == "0":
        return None
    key, template = _started(handler, preload, env)
    if template is None:
        return None
    try:
        template.wait_ready()
    except TemplateError:
        with _registry_lock:
            template.close()
            _templates[key] = None  # failed once: spawn from now on
        return None
    return template


def close_all() -> None:
    with _registry_lock:
        for template in _templates.values():
            if template is not None:
                template.close()
        _templates.clear()


atexit.register(close_all)
