"""Command backends: kernels in any language, run as a program per case.

    opconform run --command-backend my-gelu='./gelu_grad {dataset} --threads {threads}' --backends reference,my-gelu

For each case the harness writes an ONNX backend-test directory (harness.backends.backend_test_dir:
{case}/model.onnx, {dataset}/input_K.pb), runs the template and reads {dataset}/output_K.pb, one per
graph output. The program is its own process (in its own session), so its crash or hang is a result:

    exit 0                    outputs written: judged like any backend's (a missing or unreadable
                              output_K.pb is a crash, "malformed output")
    exit 65 (EX_DATAERR)      the inputs are invalid: rejected (the last stderr line is the message)
    exit 69 (EX_UNAVAILABLE)  no kernel for this op, dtype or feature: unsupported (last stderr line)
    any other exit, a signal  crashed, with the last stderr line
    no exit within the case's timeout: the process group is killed, a hang

The program dies with the harness: it runs in a process group of its own, which is killed when its case
ends (a background child it left included) and, should the harness itself be killed (SIGKILL, an OOM
kill), by a small reaper process each command backend starts: it holds the read end of a pipe from the
harness, and when that closes it kills the registered groups and every process whose environment carries
this backend's OPCONFORM_COMMAND_TOKEN (children that left the group, and a program started in the
instant before its group was registered).

65 and 69 are sysexits.h codes that a shell, an interpreter or argparse never exit with by accident
(a program that cannot even start must not count as rejecting an invalid input).

Placeholders (each expands to one argument; the template is split like a shell command line, not
run by a shell): {case} {model} {dataset} {threads} {op} {domain} {dtype}. The environment also
carries OPCONFORM_OP, OPCONFORM_DOMAIN, OPCONFORM_DTYPE, OPCONFORM_THREADS, OMP_NUM_THREADS and
OPCONFORM_PYTHON (this interpreter, for scripts that want numpy and onnx).
"""
from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import string
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.backends import backend_test_dir
from harness.backends.base import Backend, Crashed, Outputs, Rejected, Request, TimedOut, Unsupported

PLACEHOLDERS = ("case", "model", "dataset", "threads", "op", "domain", "dtype")
TOKEN_VARIABLE = "OPCONFORM_COMMAND_TOKEN"

# The reaper (run as `python -I -S -c REAPER TOKEN`, stdlib only): lines "+PGID" / "-PGID" on stdin register
# and forget a program's process group; at end of input (the harness closed it, or died) it kills what is
# left: the registered groups, then every process whose environment holds TOKEN_VARIABLE=TOKEN, until a scan
# finds none.
REAPER = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
needle = b"%s=" + sys.argv[1].encode()
groups = set()
for line in sys.stdin.buffer:
    try:
        pgid = int(line[1:])
    except ValueError:
        continue
    if line[:1] == b"+":
        groups.add(pgid)
    else:
        groups.discard(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
me = os.getpid()
for _ in range(50):
    found = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/" + name + "/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if needle in environ:
            found += 1
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass
    if not found:
        break
""" % TOKEN_VARIABLE


class Reaper:
    """The process that kills a command backend's programs if the harness dies (see the module's doc)."""

    def __init__(self):
        self.token = secrets.token_hex(12)
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", REAPER, self.token], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                      env={k: v for k, v in os.environ.items() if k != TOKEN_VARIABLE})

    def _send(self, line: str) -> None:
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # the reaper is gone: the token scan can no longer run
            pass

    def register(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def close(self) -> None:
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
EXIT_REJECTED = 65  # EX_DATAERR
EXIT_UNSUPPORTED = 69  # EX_UNAVAILABLE


def parse_template(template: str) -> list[str]:
    """The template's arguments; ValueError for quoting that does not close or an unknown placeholder."""
    try:
        argv = shlex.split(template)
    except ValueError as e:
        raise ValueError(f"template {template!r} does not split into arguments ({e})") from None
    if not argv:
        raise ValueError("empty command template")
    for arg in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as e:
            raise ValueError(f"argument {arg!r}: {e} (write {{{{ and }}}} for literal braces)") from None
        for name in fields:
            if name not in PLACEHOLDERS:
                raise ValueError(f"unknown placeholder {{{name}}} in {arg!r}; known: "
                                 + " ".join(f"{{{p}}}" for p in PLACEHOLDERS))
    return argv


def last_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass
class CommandBackend(Backend):
    label: str = ""  # the backend's name, from --command-backend NAME=TEMPLATE
    template: str = ""

    def __post_init__(self):
        self.name = self.label
        self.argv = parse_template(self.template)
        self._reaper: Reaper | None = None

    def reaper(self) -> Reaper:
        if self._reaper is None:
            self._reaper = Reaper()
        return self._reaper

    def close(self) -> None:
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None

    def availability(self) -> str | None:
        program = self.argv[0]
        if "{" in program:
            return None  # chosen per case; a missing one shows as each case's crash
        if os.sep in program:
            if not os.path.isfile(program):
                return f"{program} does not exist (relative paths start from {os.getcwd()})"
            if not os.access(program, os.X_OK):
                return f"{program} is not executable (chmod +x {program})"
            return None
        return None if shutil.which(program) else f"{program} is not on PATH"

    def run(self, request: Request):
        with tempfile.TemporaryDirectory(prefix=f"opconform-{self.name}-") as tmp:
            case = Path(tmp) / "case"
            model = backend_test_dir.write_case(request, case)
            dataset = case / backend_test_dir.DATASET
            values = {"case": case, "model": case / "model.onnx", "dataset": dataset, "threads": request.threads,
                      "op": request.spec.op, "domain": request.spec.domain, "dtype": request.dtype}
            argv = [arg.format(**values) for arg in self.argv]
            ended = self._execute(argv, request, Path(tmp) / "stderr")
            if not isinstance(ended, int):
                return ended
            try:
                return Outputs(backend_test_dir.read_outputs(request, model, case))
            except backend_test_dir.MalformedOutput as e:
                return Crashed("malformed output", str(e), cause="the command exited 0 with a malformed output")

    def _execute(self, argv: list[str], request: Request, stderr_path: Path):
        """0 after a clean exit, else the outcome the exit stands for."""
        spec = request.spec
        reaper = self.reaper()
        env = {**os.environ, "OMP_NUM_THREADS": str(request.threads), "OPCONFORM_THREADS": str(request.threads),
               "OPCONFORM_OP": spec.op, "OPCONFORM_DOMAIN": spec.domain, "OPCONFORM_DTYPE": request.dtype,
               "OPCONFORM_PYTHON": sys.executable, TOKEN_VARIABLE: reaper.token}
        timeout = min(self.timeout, request.timeout or self.timeout)
        with open(stderr_path, "w+b") as stderr:
            try:
                # its own session: a timeout kills the whole process group (a script's children too)
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, env=env,
                                        start_new_session=True)
            except OSError as e:
                return Crashed("not started", "", cause=f"the command did not start ({e.strerror}: {argv[0]})")
            reaper.register(proc.pid)  # its group dies with the harness, too
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return TimedOut(timeout)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # what it left running in the background
                except ProcessLookupError:
                    pass
                proc.wait()  # also after Ctrl-C: no zombie, and the group id is not reused while registered
                reaper.forget(proc.pid)
            stderr.seek(0)
            said = last_line(stderr.read().decode(errors="replace"))
        if code == 0:
            return 0
        if code == EXIT_REJECTED:
            return Rejected(said or f"exit {EXIT_REJECTED}")
        if code == EXIT_UNSUPPORTED:
            return Unsupported(said or f"the command exited {EXIT_UNSUPPORTED} (unsupported)")
        if code < 0:
            name = signal.Signals(-code).name
            return Crashed(name, said, cause=f"the command was killed by {name}")
        # a shell reports a child killed by signal N as exit 128 + N
        if code > 128 and code - 128 in signal.Signals._value2member_map_:
            name = signal.Signals(code - 128).name
            return Crashed(name, said, cause=f"the command exited {code} (a child killed by {name})")
        return Crashed(f"exit {code}", said, cause=f"the command exited {code}")

    def environment(self) -> dict:
        return {"command": self.template}
