"""The limit on spec hooks (harness.core.spec_checks) counts CPU time, not wall time: a hook that burns
CPU is stopped with a message naming the hook and the limit, one that waits (sleeps, or is starved on a
loaded machine) is not; and an exception with an empty message still gives a reason."""
from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
import yaml

from harness.core import spec_checks
from harness.spec.errors import exception_text
from harness.spec.model import Spec

REPO = Path(__file__).resolve().parents[1]

HOOKS = '''
import time


def burn(params):
    while True:
        pass


def burn_catching(params):
    # a hook's own broad handler (the harness wraps the forward reference in one too) must not
    # swallow the limit and turn it into an error with an empty reason
    try:
        while True:
            pass
    except Exception:
        return {"dY": [3], "X": [3]}


def sleep(params):
    time.sleep(params["n"] * 0.7)  # 2.1 s of wall time, next to no CPU
    return {"dY": [3], "X": [3]}


def raise_blank(params):
    raise ValueError()


def forward_burns(X):
    try:
        while True:
            pass
    except Exception:
        return X


def reference_any(**inputs_and_attributes):
    return inputs_and_attributes["dY"]


def burn_when_large(params):
    # fine on the spec's cases (n = 3), loops on the bench size's (n = 1000)
    while params["n"] > 100:
        pass
    return {"dY": [3], "X": [3]}


def valid_if_burns(shapes, attributes):
    while True:
        pass
'''


@pytest.fixture
def hooks(tmp_path, monkeypatch):
    (tmp_path / "limit_hooks.py").write_text(textwrap.dedent(HOOKS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return ("reference", "limit_hooks")


def one_case_spec(shapes_hook: str | None, valid_if: str | None = None) -> Spec:
    """ReluGrad with one case whose shapes come from `shapes_hook` (None: a `shape` param)."""
    data = yaml.safe_load((REPO / "specs/com.microsoft/ReluGrad.yaml").read_text())
    if shapes_hook:
        data["cases"]["params"] = {"n": "how long the sleeping hook sleeps, in units of 0.7 s"}
        data["cases"]["shapes"] = shapes_hook
    params = {"n": [3]} if shapes_hook else {"shape": [[3]]}
    data["cases"]["groups"] = [{"name": "one", "tier": "smoke", "dtypes": ["float32"], "params": params}]
    data["cases"]["invalid"] = []
    data["known_divergences"] = []
    data.pop("bench", None)  # its sizes are ReluGrad's shapes, not this one case's params
    if valid_if:
        data["valid_if"] = valid_if
    return Spec.model_validate(data)


def problems(spec: Spec, packages) -> list[str]:
    return [f"{field}: {message}" for field, message in spec_checks.check(spec, packages)]


def test_a_hook_burning_cpu_is_stopped_and_the_message_names_it(hooks, monkeypatch):
    monkeypatch.setattr(spec_checks, "HOOK_CPU_SECONDS", 0.3)
    start = time.process_time()
    found = problems(one_case_spec("limit_hooks:burn"), hooks)
    assert time.process_time() - start < 5
    assert len(found) == 1, found
    assert "shape hook limit_hooks:burn ran out of its 0.3 s of CPU" in found[0], found


def test_a_hook_catching_exception_cannot_swallow_the_limit(hooks, monkeypatch):
    monkeypatch.setattr(spec_checks, "HOOK_CPU_SECONDS", 0.3)
    found = problems(one_case_spec("limit_hooks:burn_catching"), hooks)
    assert len(found) == 1 and "limit_hooks:burn_catching ran out of its 0.3 s of CPU" in found[0], found


def test_a_forward_reference_run_for_shapes_is_stopped_with_its_name(hooks, monkeypatch):
    """The case of issue 31: the forward reference run on zeros to give a saved output's shape; the
    harness wraps it in `except Exception`, which once turned the limit into an empty reason."""
    monkeypatch.setattr(spec_checks, "HOOK_CPU_SECONDS", 0.3)
    spec = one_case_spec(None)
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["forward"]["reference"] = "limit_hooks:forward_burns"
    data["reference"] = "limit_hooks:reference_any"
    data["inputs"].append({"name": "Y", "type": "T", "role": "forward_output", "description": "Relu's output."})
    data["alternative_semantics"] = []
    found = problems(Spec.model_validate(data), hooks)
    assert len(found) == 1, found
    assert ("forward reference limit_hooks:forward_burns (run on zeros for the shapes) ran out of its 0.3 s of CPU"
            in found[0]), found


def test_valid_if_burning_cpu_is_stopped(hooks, monkeypatch):
    monkeypatch.setattr(spec_checks, "HOOK_CPU_SECONDS", 0.3)
    found = problems(one_case_spec(None, valid_if="limit_hooks:valid_if_burns"), hooks)
    assert found == ["valid_if: limit_hooks:valid_if_burns did not return: it ran out of its 0.3 s of CPU "
                     "(case float32-one/shape=3)"], found


def test_a_hook_that_waits_is_not_stopped(hooks, monkeypatch):
    """Sleeping uses wall time, not CPU: 2.1 s, longer than the old 2 s wall-clock limit and 7x the
    CPU limit set here, passes. Under a wall-clock limit this would fail."""
    monkeypatch.setattr(spec_checks, "HOOK_CPU_SECONDS", 0.3)
    start = time.perf_counter()
    assert problems(one_case_spec("limit_hooks:sleep"), hooks) == []
    assert time.perf_counter() - start >= 2.1


def test_an_exception_with_an_empty_message_still_names_its_type(hooks):
    found = problems(one_case_spec("limit_hooks:raise_blank"), hooks)
    assert len(found) == 1 and found[0].endswith("its shapes cannot be built: ValueError"), found
    assert exception_text(RuntimeError()) == "RuntimeError"
    assert exception_text(KeyError("x")) == "KeyError: 'x'"


def test_the_limit_leaves_no_timer_or_handler_behind(hooks, monkeypatch):
    import signal

    monkeypatch.setattr(spec_checks, "HOOK_CPU_SECONDS", 0.3)
    before = signal.getsignal(signal.SIGPROF)
    problems(one_case_spec("limit_hooks:burn"), hooks)
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGPROF) == before


def test_a_hook_burning_cpu_on_a_bench_size_is_stopped(hooks, monkeypatch):
    """The bench sizes are cases of the spec too (harness.core.bench_spec): their shape hooks run under the
    CPU limit (spec_checks.BENCH_CPU_SECONDS for all of a spec's sizes), so a hook that loops only on a bench size's
    params is one line, not a hung validate."""
    monkeypatch.setattr(spec_checks, "BENCH_CPU_SECONDS", 0.3)
    spec = one_case_spec("limit_hooks:burn_when_large")
    data = spec.model_dump(exclude_unset=True)
    data["bench"] = {"sizes": {"small": {"label": "n=1000", "params": {"n": 1000}}},
                     "bytes": "reference.ops.activations:bench_bytes"}
    start = time.process_time()
    found = problems(Spec.model_validate(data), hooks)
    assert time.process_time() - start < 5
    assert len(found) == 1 and found[0].startswith("bench: a hook did not return on a bench size"), found
    assert "0.3 s of CPU" in found[0], found
