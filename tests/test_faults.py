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
from conftest import alive

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
        assert len(pids) == 3 and all(alive(p) for p in pids)
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        assert _wait_for(lambda: not any(alive(p) for p in pids), 10), \
            f"still running 10 s after the harness died: {[p for p in pids if alive(p)]}"
    finally:
        if harness.poll() is None:
            harness.kill()
        harness.communicate()
        for pid in pidfile.read_text().split() if pidfile.is_file() else []:
            if alive(int(pid)):
                os.kill(int(pid), signal.SIGKILL)


# ---- SIGTERM from the first instant ------------------------------------------------------------------


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler installed (SigCgt of /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def _records(run_dir: Path) -> list[dict]:
    from harness.run.rundir import read_results

    return read_results(run_dir)


def _assert_interrupted(out: Path, proc: subprocess.Popen, how: str) -> dict:
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, f"{how}: exit {proc.returncode}\n{stderr}"
    assert "Traceback" not in stderr and "terminated (SIGTERM)" in stderr, stderr
    summary = json.loads((out / "summary.json").read_text())
    records = _records(out)
    assert summary["complete"] is False and summary["verdict"]["passed"] is False, summary["verdict"]
    assert summary["verdict"]["interrupted"] == "SIGTERM", summary["verdict"]
    assert summary["results"] == len(records) == sum(summary["totals"].values()), how
    assert not summary.get("provisional")
    return summary


@pytest.mark.parametrize("when", ["before the run directory exists", "0.2 s later", "while the specs load"])
def test_sigterm_in_the_first_instants_leaves_an_interrupted_summary(tmp_path, when):
    """SIGTERM as soon as the process catches it (still importing, no run directory yet), 0.2 s later, and
    once the provisional summary is on disk (the specs and backends are loading): each time exit 143, and
    a summary saying the run was interrupted, consistent with the results file. (Before the fix the handler
    came with the first real summary, 5-7 s into a run: a SIGTERM before it left nothing at all.)"""
    out = tmp_path / "run"
    proc = _opconform("run", "--ops", "ReluGrad", "--tier", "smoke", "--backends", "reference", "--no-progress",
                      "--no-report", "--out", str(out), cwd=tmp_path)
    try:
        assert _wait_for(lambda: _catches_sigterm(proc.pid) or proc.poll() is not None, 120, step=0.001)
        if when == "before the run directory exists":
            assert not out.exists(), "SIGTERM is caught only once the run directory is there"
        elif when == "0.2 s later":
            time.sleep(0.2)
        else:
            assert _wait_for(lambda: (out / "summary.json").is_file() or proc.poll() is not None, 120, step=0.005)
            early = json.loads((out / "summary.json").read_text())
            assert early["provisional"] is True and early["verdict"]["passed"] is False and early["results"] == 0
            assert early["pid"] == proc.pid and early["complete"] is False
        assert proc.poll() is None, "the run ended before it could be terminated"
        proc.send_signal(signal.SIGTERM)
        summary = _assert_interrupted(out, proc, when)
        assert summary["tier"] == "smoke" and summary["run_id"] == "run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_held_signal_is_acted_on_when_armed_and_a_critical_write_finishes_first():
    """harness.run.signals in-process: held before arm(), deferred inside critical(), a second SIGTERM
    ignored once the first has been acted on."""
    from harness.run import signals

    assert signals.hold()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # nothing raised: held
        with pytest.raises(signals.Terminated):
            signals.arm()
        assert signals.fired() == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # ignored now: the summary being written must finish
        time.sleep(0.01)
        written = []
        with pytest.raises(KeyboardInterrupt):
            with signals.critical():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.01)
                written.append("whole")  # reached: the interrupt waits for the end of the section
        assert written == ["whole"]
    finally:
        signals.release()
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None) or not signals.installed()


# ---- one writer per run directory ---------------------------------------------------------------------

GATED_PROGRAM = textwrap.dedent("""\
    #!/bin/sh
    # holds its case (and so the run) until the test creates $GATE; then: unsupported
    touch "$STARTED"
    while [ ! -e "$GATE" ]; do sleep 0.05; done
    echo "no kernel" >&2
    exit 69
""")


def _gated_run(tmp_path: Path, out: Path) -> tuple[subprocess.Popen, Path, Path]:
    program = tmp_path / "gated.sh"
    program.write_text(GATED_PROGRAM)
    program.chmod(0o755)
    started, gate = tmp_path / "started", tmp_path / "gate"
    proc = _opconform("run", "--ops", "ReluGrad", "--tier", "smoke", "--cases", "float32-*", "--command-backend",
                      f"gated={program} {{dataset}}", "--backends", "reference,gated", "--no-progress", "--no-report",
                      "--out", str(out), cwd=tmp_path, env={**os.environ, "STARTED": str(started), "GATE": str(gate)})
    assert _wait_for(lambda: started.is_file() or proc.poll() is not None, 180), "the gated program never ran"
    assert proc.poll() is None, proc.communicate()
    return proc, started, gate


def test_a_second_run_into_the_same_directory_is_refused(tmp_path):
    out = tmp_path / "shared"
    first, _, gate = _gated_run(tmp_path, out)
    try:
        second = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--ops", "GeluGrad", "--tier", "smoke",
                                 "--backends", "reference", "--no-progress", "--out", str(out)],
                                cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip().splitlines() == [
            f"opconform: error: {out} is being written by another opconform run (pid {first.pid})"]
        gate.touch()
        stdout, stderr = first.communicate(timeout=300)
        assert first.returncode == 0, stdout + stderr
    finally:
        gate.touch()
        if first.poll() is None:
            first.kill()
            first.communicate()
    summary, records = json.loads((out / "summary.json").read_text()), _records(out)
    assert summary["complete"] is True and summary["verdict"]["passed"] is True
    assert summary["results"] == len(records) > 0 and {r["op"] for r in records} == {"ReluGrad"}
    assert {r["backend"] for r in records} == {"reference", "gated"}
    assert summary["ops"] == ["ReluGrad"]


def test_a_killed_runs_lock_blocks_nobody(tmp_path):
    out = tmp_path / "shared"
    first, _, gate = _gated_run(tmp_path, out)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert (out / ".opconform.lock").read_text().strip() == str(first.pid)  # the stale lock file stays
    second = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--ops", "ReluGrad", "--tier", "smoke",
                             "--backends", "reference", "--no-progress", "--no-report", "--out", str(out)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    summary, records = json.loads((out / "summary.json").read_text()), _records(out)
    assert summary["results"] == len(records) > 0 and {r["backend"] for r in records} == {"reference"}


WAITING_TEST = textwrap.dedent("""\
    import os, time
    from pathlib import Path

    def test_waits():  # holds the session until the test creates $GATE
        Path(os.environ["STARTED"]).touch()
        while not Path(os.environ["GATE"]).exists():
            time.sleep(0.05)
""")


def _pytest_with_results(project: Path, out: Path, started: Path, gate: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "harness.pytest_plugin.plugin", "-p",
                             "no:cacheprovider", "-q", "test_waits.py", "--opconform-results", str(out)],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "STARTED": str(started), "GATE": str(gate)})


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_pytest_session_holds_its_results_directory_from_its_start(tmp_path):
    """--opconform-results DIR is claimed when pytest configures, not when the results are written at the end:
    while one session runs, a second pytest and an `opconform run` given DIR are each refused with one line,
    before any of their tests run (the second session's test would have created its STARTED file)."""
    project, out, gate = tmp_path / "project", tmp_path / "results", tmp_path / "gate"
    project.mkdir()
    (project / "test_waits.py").write_text(WAITING_TEST)
    first = _pytest_with_results(project, out, tmp_path / "first-started", gate)
    try:
        assert _wait_for(lambda: (tmp_path / "first-started").is_file() or first.poll() is not None, 180)
        assert first.poll() is None, first.communicate()
        second = _pytest_with_results(project, out, tmp_path / "second-started", gate)
        stdout, stderr = second.communicate(timeout=180)
        assert second.returncode == 4, stdout + stderr  # pytest's usage error
        assert _error_lines(stdout + stderr) == [
            f"ERROR: --opconform-results: {out} is being written by a pytest session (pid {first.pid})"]
        assert not (tmp_path / "second-started").exists(), "the second session ran a test"
        run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--ops", "ReluGrad", "--tier", "smoke",
                              "--backends", "reference", "--no-progress", "--out", str(out)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert run.returncode == 2 and _error_lines(run.stdout + run.stderr) == [
            f"opconform: error: {out} is being written by a pytest session (pid {first.pid})"]
        gate.touch()
        stdout, stderr = first.communicate(timeout=180)
        assert first.returncode == 0, stdout + stderr
    finally:
        gate.touch()
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert not out.exists(), "no generated test ran: the directory the session created (lock file only) goes"


def test_a_pytest_session_whose_results_directory_is_held_runs_no_test(tmp_path):
    """The other way round: DIR held by a run (here this process, as `opconform run` holds it), a pytest given
    --opconform-results DIR stops with one line before any test runs (it used to run every test and raise
    RunDirBusy inside pytest_sessionfinish)."""
    from harness.run import rundir

    project, out = tmp_path / "project", tmp_path / "results"
    project.mkdir()
    (project / "test_waits.py").write_text(WAITING_TEST)
    rundir.claim(out)
    try:
        session = _pytest_with_results(project, out, tmp_path / "started", tmp_path / "no-gate")
        try:
            stdout, stderr = session.communicate(timeout=180)
        finally:
            if session.poll() is None:  # it ran its test, which waits for a gate no one opens
                session.kill()
                session.communicate()
        assert session.returncode == 4, stdout + stderr
        assert _error_lines(stdout + stderr) == [
            f"ERROR: --opconform-results: {out} is being written by another opconform run (pid {os.getpid()})"]
        assert not (tmp_path / "started").exists()
        assert [p.name for p in out.iterdir()] == [rundir.LOCK_FILE]
    finally:
        rundir.release(out)


def test_merge_and_the_pytest_plugins_writer_refuse_a_directory_being_written(tmp_path):
    from harness.run import rundir

    shard = tmp_path / "shard"
    rundir.write_run(shard, [], {"complete": True})
    busy = tmp_path / "busy"
    rundir.claim(busy)  # this process writes it, as a run would
    try:
        assert rundir.claim(busy) == busy  # the same process may claim again
        rundir.release(busy)
        merge = subprocess.run([sys.executable, "-m", "harness.cli", "merge", str(shard), "--out", str(busy)],
                               cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert merge.returncode == 2
        assert merge.stderr.strip() == f"opconform: error: {busy} is being written by another opconform run " \
                                       f"(pid {os.getpid()})"
        plugin = subprocess.run([sys.executable, "-c", "import sys; from harness.run import rundir\n"
                                 "try:\n    rundir.write_run(sys.argv[1], [], {})\n"
                                 "except rundir.RunDirBusy as e:\n    print(e); sys.exit(3)", str(busy)],
                                capture_output=True, text=True, timeout=120)
        assert plugin.returncode == 3 and "being written by another opconform run" in plugin.stdout
        assert not (busy / "summary.json").exists() and rundir.results_path(busy) is None
    finally:
        rundir.release(busy)
    rundir.write_run(busy, [], {"complete": True})  # released: written
    assert json.loads((busy / "summary.json").read_text()) == {"complete": True}
