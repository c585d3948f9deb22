"""Workers die with the harness, restarts are forks, and SIGTERM ends a run like Ctrl-C with a verdict."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, alive

from harness.backends import worker_template
from harness.backends.base import Crashed
from harness.backends.worker import IsolatedWorker
from harness.run.rundir import read_results, results_path

TESTS = Path(__file__).parent
PARENT = textwrap.dedent("""
    import sys, time
    from harness.backends.worker import IsolatedWorker
    w = IsolatedWorker("worker_handlers:handle", timeout=600)
    pid = w.call({"action": "echo"})["pid"]
    template = getattr(w._proc, "template", None)
    print(pid, template.proc.pid if template else 0, flush=True)
    w.call({"action": "spin"})
""")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
@pytest.mark.parametrize("fork", ["1", "0"], ids=["forked-from-template", "spawned"])
def test_killing_the_parent_of_a_busy_worker_leaves_no_worker(fork):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=REPO,
                              env={**_env(), worker_template.DISABLE_ENV: fork})
    try:
        worker, template = map(int, parent.stdout.readline().split())
        assert (template != 0) == (fork == "1")
        busy_since = _cpu_ticks(worker)
        deadline = time.monotonic() + 10
        while _cpu_ticks(worker) - busy_since < 20 and time.monotonic() < deadline:  # 0.2 s of CPU: spinning
            time.sleep(0.05)
        assert _cpu_ticks(worker) - busy_since >= 20, "the worker never got busy"
        parent.kill()
        parent.wait()
        killed = time.monotonic()
        while (alive(worker) or (template and alive(template))) and time.monotonic() - killed < 2:
            time.sleep(0.02)
        assert not alive(worker), "the worker outlived its parent by 2 s"
        assert not template or not alive(template), "the worker template outlived the harness by 2 s"
    finally:
        parent.kill()


def test_a_restart_after_a_crash_is_a_fork_not_an_import(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    monkeypatch.delenv(worker_template.DISABLE_ENV, raising=False)
    worker = IsolatedWorker("worker_handlers:handle", timeout=10, preload=("onnxruntime",))
    try:
        worker.call({"action": "echo"})  # starts the template: imports onnxruntime once
        template = worker._proc.template
        restarts = []
        for _ in range(3):
            assert isinstance(worker.call({"action": "segfault"}), Crashed)
            started = time.monotonic()
            assert worker.call({"action": "echo", "value": 1})["value"] == 1
            restarts.append(time.monotonic() - started)
            assert worker._proc.template is template  # the same template, never a new interpreter
        # an import of onnxruntime takes 0.4 s (3 s with torch); a fork takes milliseconds
        assert sorted(restarts)[1] < 0.25, restarts
    finally:
        worker.close()


def test_the_template_has_the_preload_imported_before_any_worker_runs(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    monkeypatch.delenv(worker_template.DISABLE_ENV, raising=False)
    with_ort = IsolatedWorker("worker_handlers:handle", preload=("onnxruntime",))
    plain = IsolatedWorker("worker_handlers:handle")
    try:
        assert with_ort.call({"action": "has_module", "name": "onnxruntime"}) is True
        assert plain.call({"action": "has_module", "name": "onnxruntime"}) is False
    finally:
        with_ort.close()
        plain.close()


def test_templates_are_kept_apart_by_environment(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    monkeypatch.delenv(worker_template.DISABLE_ENV, raising=False)
    a = IsolatedWorker("worker_handlers:handle", env={"OPCONFORM_ISA": "baseline"})
    b = IsolatedWorker("worker_handlers:handle", env={"OPCONFORM_ISA": "avx2"})
    try:
        a.call({"action": "echo"})
        b.call({"action": "echo"})
        assert a._proc.template is not b._proc.template
    finally:
        a.close()
        b.close()


def test_sigterm_ends_a_run_with_totals_and_an_interrupted_verdict(tmp_path):
    out = tmp_path / "run"
    run = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--backends", "reference", "--tier", "ci",
                            "--no-progress", "--no-report", "--out", str(out)], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (results_path(out) and read_results(out)) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before it could be terminated"
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 143, err
    assert "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    lines = read_results(out)
    assert summary["complete"] is False and summary["results"] == len(lines) > 0
    assert sum(summary["totals"].values()) == len(lines)
    assert summary["verdict"]["passed"] is False and summary["verdict"]["interrupted"] == "SIGTERM"
    assert any("interrupted" in reason for reason in summary["verdict"]["reasons"])
