"""A fresh worker's imports never count against a call's timeout (issue 31's wall-clock limits): without a worker
template (OPCONFORM_WORKER_FORK=0, or a template that cannot start) a worker re-spawned after a crash imports
its libraries again, and it did so inside the next case's --timeout (1.3-1.7 s for onnxruntime at load 12, 3 s
and more with torch, against ConvGrad's `timeout: 3` groups); a worker whose import outlasted the timeout never
answered at all. The import is now waited for under the library-load limit (limits.INFO_TIMEOUT) first.

The handler module tests/slow_import_handlers.py sleeps $SLOW_IMPORT_SECONDS when imported."""
import os
import time
from pathlib import Path

import pytest

from harness.backends import limits, worker, worker_template
from harness.backends.base import Crashed, TimedOut
from harness.backends.worker import IsolatedWorker

TESTS = Path(__file__).parent
IMPORT_SECONDS = 1.5
CASE_TIMEOUT = 0.5  # under the import: any import counted against it is a TimedOut


@pytest.fixture
def slow_import(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("SLOW_IMPORT_SECONDS", str(IMPORT_SECONDS))
    monkeypatch.setenv(worker_template.DISABLE_ENV, "0")  # every worker spawned as a fresh interpreter


def test_a_respawned_workers_import_does_not_count_against_the_case_timeout(slow_import):
    w = IsolatedWorker("slow_import_handlers:handle", timeout=CASE_TIMEOUT)
    try:
        first = w.call({"action": "echo", "value": 1})
        assert first["value"] == 1, first  # was: TimedOut(0.5), every time
        assert isinstance(w.call({"action": "segfault"}), Crashed)
        started = time.monotonic()
        again = w.call({"action": "echo", "value": 2})
        assert again["value"] == 2 and again["pid"] != first["pid"], again
        assert time.monotonic() - started >= IMPORT_SECONDS, "not a fresh interpreter: the test proves nothing"
        hang = w.call({"action": "hang"})  # the case's own limit still ends a real hang
        assert isinstance(hang, TimedOut) and (hang.seconds, hang.limit) == (CASE_TIMEOUT, limits.TIMEOUT_OPTION)
    finally:
        w.close()


def test_a_spawned_worker_has_its_preload_before_the_first_request(slow_import):
    """Spawned, a worker imports PRELOAD itself before it says it is ready (as a template would have), so a
    library the handler imports lazily (onnxruntime in ort_session) is not loaded inside a case's limit; a
    preload that fails is left to the handler, which reports it as it always did."""
    w = IsolatedWorker("worker_handlers:handle", timeout=CASE_TIMEOUT,
                       preload=("slow_import_handlers", "no_such_module_anywhere"))
    try:
        assert w.call({"action": "has_module", "name": "slow_import_handlers"}) is True
        assert w._proc is not None and not hasattr(w._proc, "template")  # spawned, not forked
    finally:
        w.close()


def test_a_dead_template_falls_back_to_a_spawn_whose_import_is_waited_for(slow_import, monkeypatch):
    """Templates on, but this one cannot start (its preload fails): the worker is spawned, with the same rule."""
    monkeypatch.delenv(worker_template.DISABLE_ENV)
    w = IsolatedWorker("slow_import_handlers:handle", timeout=CASE_TIMEOUT, preload=("no_such_module_anywhere",))
    try:
        assert w.call({"action": "echo", "value": 3})["value"] == 3
        assert not hasattr(w._proc, "template")
    finally:
        w.close()


def test_an_import_that_outlasts_the_library_load_limit_is_a_hang_naming_that_limit(slow_import, monkeypatch):
    monkeypatch.setattr(worker, "INFO_TIMEOUT", 0.3)
    w = IsolatedWorker("slow_import_handlers:handle", timeout=60)
    try:
        outcome = w.call({"action": "echo"})
        assert isinstance(outcome, TimedOut) and (outcome.seconds, outcome.limit) == (0.3, limits.INFO_LIMIT)
        assert w._proc is None  # killed: the next call starts afresh
    finally:
        w.close()


def test_a_worker_that_dies_importing_is_a_crash_with_its_reason(slow_import, monkeypatch):
    monkeypatch.setenv("SLOW_IMPORT_SECONDS", "not a number")
    w = IsolatedWorker("slow_import_handlers:handle", timeout=CASE_TIMEOUT)
    try:
        outcome = w.call({"action": "echo"})
        assert isinstance(outcome, Crashed) and outcome.signal == "exit 1", outcome
        assert "could not convert string to float" in outcome.detail
    finally:
        w.close()
