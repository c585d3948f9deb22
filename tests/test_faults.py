"""Faults never corrupt a run: each test injects one (a SIGTERM in the first instants of a run, a second run
writing the same directory, a SIGKILLed harness under a command backend) and checks what is left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO

SLOW_PROGRAM = textwrap.dedent("""\
    #!/bin/sh
    # a command backend's program that never answers: a child in its group, one that left it (setsid)
    sleep 300 &
    in_group=$!
    setsid sleep 301 &
    escaped=$!
    echo "$$ $in_group $escaped" > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"
    sleep 302
""")


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, not yet reaped by a container's init) is gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_for(predicate, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def _opconform(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_a_command_program_and_its_children_die_with_a_sigkilled_harness(tmp_path):
    program = tmp_path / "slow.sh"
    program.write_text(SLOW_PROGRAM)
    program.chmod(0o755)
    pidfile = tmp_path / "pids"
    harness = _opconform("run", "--ops", "ReluGrad", "--tier", "smoke", "--cases", "float32-*",
                         "--command-backend", f"slow={program} {{dataset}}", "--backends", "slow",
                         "--timeout", "900", "--no-progress", "--no-report", "--out", str(tmp_path / "run"),
                         cwd=tmp_path, env={**os.environ, "PIDFILE": str(pidfile)})
    try:
        assert _wait_for(lambda: pidfile.is_file() or harness.poll() is not None, 180), "the program never started"
        assert harness.poll() is None, harness.communicate()
        pids = [int(p) for p in pidfile.read_text().split()]
        assert len(pids) == 3 and all(_alive(p) for p in pids)
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        assert _wait_for(lambda: not any(_alive(p) for p in pids), 10), \
            f"still running 10 s after the harness died: {[p for p in pids if _alive(p)]}"
    finally:
        if harness.poll() is None:
            harness.kill()
        harness.communicate()
        for pid in pidfile.read_text().split() if pidfile.is_file() else []:
            if _alive(int(pid)):
                os.kill(int(pid), signal.SIGKILL)
