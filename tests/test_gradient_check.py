"""The gradient proof in every run, and the expected backends: a wrong reference or a missing backend
fails the gate, through `opconform run` and through the generated pytest suite."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.core.cases import expand
from harness.core.gradcheck import gradient_check
from harness.run.case_checks import gradient_case
from harness.run.engine import prepare
from harness.run.rundir import read_results
from harness.run.runner import RunOptions, run

REPO = Path(__file__).resolve().parent.parent

SCALED = [  # (op, a reference with one term scaled by 1 + 1e-6, a case glob)
    ("GeluGrad", "wrong_references:gelu_grad_one_term_scaled", "basic/*"),
    ("SoftmaxGrad_13", "wrong_references:softmax_grad_13_one_term_scaled", "basic/*"),
    ("ConvGrad", "wrong_references:conv_grad_dw_scaled", "*"),
]


def with_reference(catalog, op: str, reference: str):
    specs = [s.model_copy(update={"reference": reference}) if s.op == op else s for s in catalog.specs]
    return dataclasses.replace(catalog, specs=specs)


@pytest.mark.parametrize("op, wrong, cases", SCALED, ids=[s[0] for s in SCALED])
def test_a_reference_off_by_1e_6_fails_the_gate(catalog, tmp_path, op, wrong, cases):
    """Even with --backends naming another backend: the reference judges them all."""
    outcome = run(with_reference(catalog, op, wrong),
                  RunOptions(ops=[op], backends=["reference"], tier="smoke", cases=cases, out=tmp_path / "run",
                             progress=False))
    records = read_results(tmp_path / "run")
    gradient = [r for r in records if r["check"] == "gradient"]
    assert gradient and all(r["backend"] == "reference" for r in gradient)
    assert any(r["failure"] == "not_a_gradient" for r in gradient)
    assert not outcome.passed
    assert any("not the gradient of its forward op" in reason for reason in outcome.summary["verdict"]["reasons"])


@pytest.mark.parametrize("op", [s[0] for s in SCALED])
def test_the_right_reference_passes(catalog, tmp_path, op):
    outcome = run(catalog, RunOptions(ops=[op], backends=["reference"], tier="smoke", out=tmp_path / "run",
                                      progress=False))
    records = read_results(tmp_path / "run")
    assert any(r["check"] == "gradient" for r in records)
    assert outcome.passed, outcome.summary["verdict"]


def _softmax_case(catalog):
    return next(c for c in expand(catalog.by_op("SoftmaxGrad_13"), "ci")
                if c.valid and c.dtype == "float64" and c.id.startswith("basic/"))


@pytest.mark.parametrize("offset", [0.0, 1000.0, -1e4])
def test_inputs_far_from_zero_are_judged_like_any_others(catalog, offset):
    """X = 1000 +- 1: no fixed epsilon, so the right reference passes and a 1e-6 error still fails."""
    case = _softmax_case(catalog)
    prepared = prepare(case)
    x = {"X": prepared.forward_inputs["X"] + offset}
    assert gradient_check(case, prepared.inputs, x).passed
    wrong = gradient_check(case, prepared.inputs, x, reference="wrong_references:softmax_grad_13_one_term_scaled")
    assert not wrong.passed, wrong.detail()


def test_exact_kink_is_caught_unless_declared(catalog):
    """ReLU at X = 0 has no derivative: an undeclared group there fails (the spec must say `vjp: "why not"`)."""
    case = next(c for c in expand(catalog.by_op("ReluGrad"), "ci") if c.valid and c.group.vjp is True)
    prepared = prepare(case)
    x = {"X": np.zeros_like(prepared.forward_inputs["X"])}
    assert not gradient_check(case, prepared.inputs, x).passed
    declared = next(c for c in expand(catalog.by_op("ReluGrad"), "ci") if c.group.name == "special_values")
    assert gradient_case(prepare(declared)) is None


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return {**env, **extra}


def test_missing_c_library_fails_opconform_run(tmp_path):
    cli = Path(sys.executable).parent / "opconform"
    done = subprocess.run([str(cli), "run", "--ops", "ReluGrad", "--tier", "smoke", "--out", str(tmp_path / "r"),
                           "--no-report", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=_env(OPCONFORM_KERNELS_LIB="/nonexistent.so"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "expected backend openmp is unavailable" in done.stdout and "/nonexistent.so" in done.stdout
    left_out = subprocess.run([str(cli), "run", "--ops", "ReluGrad", "--tier", "smoke", "--out", str(tmp_path / "s"),
                               "--no-report", "--no-progress", "--allow-missing-backends"], cwd=REPO,
                              capture_output=True, text=True, timeout=300, env=_env(OPCONFORM_KERNELS_LIB="/nonexistent.so"))
    assert left_out.returncode == 0, left_out.stdout + left_out.stderr


def test_missing_c_library_fails_the_pytest_gate(tmp_path):
    args = [sys.executable, "-m", "pytest", "generated_tests/test_ReluGrad.py", "-m", "smoke", "-q", "-p",
            "no:cacheprovider", "-p", "no:randomly", "--opconform-results", str(tmp_path / "gate")]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=_env(OPCONFORM_KERNELS_LIB="/nonexistent.so"))
    assert done.returncode == 1, done.stdout[-2000:]
    assert "expected backend openmp is unavailable" in done.stdout
    summary = json.loads((tmp_path / "gate" / "summary.json").read_text())
    assert [m["name"] for m in summary["missing_backends"]] == ["openmp"]
    # a marker selection that leaves openmp out is a choice, not a missing backend
    chosen = subprocess.run(args[:5] + ["smoke and not openmp"] + args[6:], cwd=REPO, capture_output=True,
                            text=True, timeout=300, env=_env(OPCONFORM_KERNELS_LIB="/nonexistent.so"))
    assert chosen.returncode == 0, chosen.stdout[-2000:]


def test_an_overflowed_remainder_is_still_strict_json():
    """dY near the largest float64 overflows the remainders: the result record must still be written
    (results.jsonl is strict JSON), not end the run."""
    import json

    from harness.core.gradcheck import GradientCheck, InputCheck

    check = GradientCheck([InputCheck("X", [1e-3], [float("inf")], [float("nan")], None, False)])
    record = json.loads(json.dumps(check.to_json(), allow_nan=False))
    assert record["X"]["remainders"] == ["inf"] and record["X"]["roundoff"] == ["nan"]
