"""A crash or hang in a backend is a result; the run goes on with a fresh worker."""
import os
from pathlib import Path

import pytest

from harness.backends.base import Crashed, TimedOut
from harness.backends.worker import HandlerError, IsolatedWorker
from harness.run.rundir import read_results
from harness.run.runner import RunOptions, run


@pytest.fixture
def worker(monkeypatch):
    # The worker is a fresh interpreter: it finds tests/worker_handlers.py through PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    w = IsolatedWorker("worker_handlers:handle", timeout=10)
    yield w
    w.close()


def test_worker_is_reused_between_calls(worker):
    first, second = worker.call({"action": "echo", "value": 1}), worker.call({"action": "echo", "value": 2})
    assert first["pid"] == second["pid"] and second["value"] == 2


@pytest.mark.parametrize("action, signal_name", [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_crash_is_reported_and_the_next_call_gets_a_new_worker(worker, action, signal_name):
    before = worker.call({"action": "echo"})["pid"]
    outcome = worker.call({"action": action})
    assert isinstance(outcome, Crashed) and outcome.signal == signal_name
    if action == "abort":
        assert "terminate called without an active exception" in outcome.detail
    after = worker.call({"action": "echo", "value": "alive"})
    assert after["value"] == "alive" and after["pid"] != before


def test_a_hang_is_killed_after_the_timeout(worker):
    outcome = worker.call({"action": "hang"}, timeout=0.5)
    assert isinstance(outcome, TimedOut) and outcome.seconds == 0.5
    assert worker.call({"action": "echo", "value": 3})["value"] == 3


def test_an_exit_code_is_a_crash_too(worker):
    outcome = worker.call({"action": "exit"})
    assert isinstance(outcome, Crashed) and outcome.signal == "exit 3"


def test_a_handler_exception_travels_back_without_killing_the_worker(worker):
    pid = worker.call({"action": "echo"})["pid"]
    with pytest.raises(HandlerError, match="ValueError: bad input shape"):
        worker.call({"action": "raise"})
    assert worker.call({"action": "echo"})["pid"] == pid


def test_the_run_survives_an_onnxruntime_sigfpe(catalog, tmp_path):
    """BiasGeluGrad_dX with an empty last axis kills ORT with SIGFPE; the results before and after stay."""
    outcome = run(catalog, RunOptions(ops=["BiasGeluGrad_dX"], backends=["ort"], tier="ci",
                                      cases="float32-*", out=tmp_path / "run", progress=False))
    records = read_results(tmp_path / "run")
    records = [r for r in records if r["check"] != "gradient"]  # the reference's gradient checks come first
    names = [r["case"] for r in records]
    crash = records[names.index("empty_last_axis/shape=2x3x0")]
    assert crash["status"] == "divergent" and crash["failure"] == "crash" and "SIGFPE" in crash["detail"]
    assert crash["divergence"] == "ort-biasgelugraddx-empty-bias-sigfpe"
    after = records[names.index("empty_last_axis/shape=2x3x0") + 1:]
    assert after and all(r["status"] in ("pass", "divergent") for r in after)
    assert outcome.summary["complete"] and outcome.passed
