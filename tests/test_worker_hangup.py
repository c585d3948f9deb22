"""A worker that hangs up but lives on: the parent sees the connection end, waits 5 s for the exit that never
comes, kills it and reports the crash with its stderr (it once raised AttributeError there instead)."""
import os

import pytest
from conftest import alive

from harness.backends import worker_template
from harness.backends.base import Crashed
from harness.backends.worker import IsolatedWorker

TESTS = os.path.dirname(__file__)


@pytest.mark.parametrize("fork", ["1", "0"], ids=["forked-from-template", "spawned"])
def test_a_worker_that_closes_its_connection_and_lives_on_is_killed_and_reported(monkeypatch, fork):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(worker_template.DISABLE_ENV, fork)
    worker = IsolatedWorker("worker_handlers:handle", timeout=30)
    try:
        pid = worker.call({"action": "echo"})["pid"]
        outcome = worker.call({"action": "hangup"})
        assert isinstance(outcome, Crashed), outcome
        assert outcome.signal == "SIGKILL"
        assert "closing every descriptor" in outcome.detail
        assert not alive(pid)
        assert worker.call({"action": "echo", "value": 2})["value"] == 2  # a fresh worker serves the next call
    finally:
        worker.close()
