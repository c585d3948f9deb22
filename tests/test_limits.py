"""The wall-clock limits that stay (docs/limits.md): one default for every way a backend call is limited,
and a case that hits a limit names it."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from harness import backends as registry
from harness.backends import limits, worker
from harness.backends.base import Backend, TimedOut
from harness.cli import build_parser
from harness.core.cases import expand
from harness.report import repro
from harness.run.case_checks import run_case
from harness.run.engine import prepare
from harness.run.runner import RunOptions


@dataclasses.dataclass
class Hangs(Backend):
    """Answers every call as the worker does when its limit fires."""

    def __post_init__(self):
        self.name = "stub"

    def run(self, request):
        return TimedOut(request.timeout or self.timeout)


def test_every_entry_point_has_the_same_default_call_limit():
    assert limits.DEFAULT_TIMEOUT >= 10 * 4.37  # the slowest passing call measured under load (ort)
    parser = build_parser()
    assert parser.parse_args(["run"]).timeout == limits.DEFAULT_TIMEOUT
    assert parser.parse_args(["probe"]).timeout == limits.DEFAULT_TIMEOUT
    assert registry.create("reference").timeout == limits.DEFAULT_TIMEOUT
    assert RunOptions().timeout == limits.DEFAULT_TIMEOUT == repro.DEFAULT_TIMEOUT
    assert worker.IsolatedWorker("x:y").timeout == limits.DEFAULT_TIMEOUT


def test_a_hang_names_the_backend_timeout(catalog):
    case = next(c for c in expand(catalog.by_op("ReluGrad"), "smoke") if c.full_id == "float32-basic/shape=7")
    result = run_case(catalog, prepare(case), Hangs())[0]
    assert (result.status, result.failure) == ("crashed", "hang")
    assert result.detail == ("stub: no answer within its 60 s --timeout (pytest: --opconform-timeout) (a hang); "
                             "killed"), result.detail


def test_a_hang_names_the_group_timeout_when_that_one_fired(catalog):
    spec = catalog.by_op("ReluGrad")
    groups = [g.model_copy(update={"timeout": 3.0}) if g.name == "basic" else g for g in spec.cases.groups]
    spec = spec.model_copy(update={"cases": spec.cases.model_copy(update={"groups": groups})})
    case = next(c for c in expand(spec, "smoke") if c.full_id == "float32-basic/shape=7")
    result = run_case(catalog, prepare(case), Hangs())[0]
    assert result.detail == "stub: no answer within its 3 s `timeout` of group basic (a hang); killed", result.detail


def test_a_library_that_never_loads_names_its_limit(monkeypatch):
    """The worker's first answer (loading the library) has its own limit; its message says which."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(worker, "INFO_TIMEOUT", 0.5)

    @dataclasses.dataclass
    class NeverLoads(worker.WorkerBackend):
        HANDLER = "worker_handlers:handle"

        def info_request(self):
            return {"action": "hang"}

    backend = NeverLoads()
    try:
        error = backend.info()["error"]
    finally:
        backend.close()
    assert error == "worker: no answer within its 0.5 s limit on loading the backend's library (a hang); killed", error


@pytest.mark.parametrize("seconds", [limits.INFO_TIMEOUT, limits.BENCH_TIMEOUT])
def test_the_other_backend_limits_are_far_above_what_they_bound(seconds):
    assert seconds >= 10 * 5.7  # the slowest library load measured under load (openmp)
