"""The CLI as a user meets it: exit codes, one-line errors, results on disk, determinism."""
import json
from dataclasses import dataclass

import pytest
from conftest import edit

from harness import backends as registry
from harness.backends.base import Backend
from harness.cli import main
from harness.run.rundir import read_results


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_smoke_writes_results_and_exits_zero(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--ops", "ReluGrad,*GeluGrad", "--tier", "smoke", "--out", str(tmp_path / "r"))
    assert code == 0, out + err
    records = read_results(tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert {r["op"] for r in records} == {"ReluGrad", "GeluGrad", "FastGeluGrad", "QuickGeluGrad"}
    assert {r["backend"] for r in records} == {"reference", "openmp", "ort", "ort-autograd"}
    assert summary["complete"] and summary["verdict"] == {"passed": True, "reasons": []}
    assert summary["results"] == len(records)
    assert "verdict: PASS" in out and "ReluGrad" in out


def test_same_run_same_results_file(capsys, tmp_path):
    for name in ("a", "b"):
        assert run_cli(capsys, "run", "--ops", "*Gelu*", "--tier", "smoke", "--out", str(tmp_path / name))[0] == 0
    assert (tmp_path / "a" / "results.jsonl.gz").read_bytes() == (tmp_path / "b" / "results.jsonl.gz").read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["run", "--ops", "ReluGard"], "opconform: error: unknown op 'ReluGard'; did you mean 'ReluGrad'?"),
    (["run", "--backends", "onnxruntime"], "opconform: error: unknown backend 'onnxruntime' "
                                           "(known: reference, openmp, ort, ort-cuda, ort-autograd); or onnx-backend:MODULE"),
    (["run-onnx", "x", "--backend", "cuda"], "opconform: error: unknown backend 'cuda'; did you mean 'ort-cuda'? (known: "),
    (["run", "--specs", "/nonexistent"], "opconform: spec error: /nonexistent: no such spec directory"),
])
def test_usage_errors_are_one_line_with_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1, err


def test_malformed_spec_is_one_line_with_exit_2_for_a_run_that_selects_it(capsys, spec_copy):
    # (a run of other ops goes on: tests/test_spec_dirs.py)
    edit(spec_copy / "com.microsoft" / "TanhGrad.yaml", "type: T, role: grad_output", "type: T, role: gradient")
    code, out, err = run_cli(capsys, "run", "--specs", str(spec_copy), "--no-builtin-specs", "--ops", "ReluGrad,TanhGrad",
                             "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "TanhGrad.yaml: inputs[0].role: got 'gradient'" in err and "Traceback" not in err


def test_unexpected_failure_exits_1(capsys, spec_copy, tmp_path):
    # A reference that disagrees with ORT (and with the math): ORT's correct outputs now fail.
    edit(spec_copy / "com.microsoft" / "TanhGrad.yaml", "activations:tanh_grad", "activations:sigmoid_grad")
    code, out, err = run_cli(capsys, "run", "--specs", str(spec_copy), "--no-builtin-specs", "--ops", "TanhGrad", "--tier", "smoke",
                             "--out", str(tmp_path / "r"))
    assert code == 1 and "verdict: FAIL" in out and "unexpected failure(s)" in out
    assert "FAIL TanhGrad [ort] float32-basic/shape=7: dX:" in out


def test_a_divergence_that_stops_reproducing_fails_the_run(capsys, spec_copy, tmp_path):
    # Declare a divergence on cases where ORT is right: the verdict must call it stale.
    edit(spec_copy / "com.microsoft" / "GeluGrad.yaml", 'cases: ["infinities/*"]', 'cases: ["infinities/*", "basic/*"]')
    code, out, _ = run_cli(capsys, "run", "--specs", str(spec_copy), "--no-builtin-specs", "--ops", "GeluGrad", "--backends", "ort",
                           "--tier", "smoke", "--out", str(tmp_path / "r"))
    assert code == 1 and "known divergence ort-gelugrad-inf did not reproduce in 6 case(s)" in out


@dataclass
class InterruptingBackend(Backend):
    """Raises KeyboardInterrupt on its fourth call, as Ctrl-C would in the middle of a run."""
    calls: int = 0

    def __post_init__(self):
        self.name = "interrupting"

    def run(self, request):
        self.calls += 1
        if self.calls == 4:
            raise KeyboardInterrupt
        return registry.ReferenceBackend().run(request)


def test_interrupted_run_keeps_its_results(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(registry.FACTORIES, "interrupting", InterruptingBackend)
    code, out, err = run_cli(capsys, "run", "--ops", "ReluGrad", "--backends", "interrupting", "--out", str(tmp_path / "r"))
    assert code == 130 and "interrupted" in err
    lines = read_results(tmp_path / "r")
    assert len([r for r in lines if r["check"] != "gradient"]) == 3  # and each case's gradient check before it
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["complete"] is False and summary["verdict"]["passed"] is False


def test_validate_ok(capsys):
    code, out, _ = run_cli(capsys, "validate")
    assert code == 0 and "specs valid" in out
