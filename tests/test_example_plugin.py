"""The worked example of docs/bring-your-own-backend.md, as a kernel team would run it: the plugin in
examples/example-backend is installed with pip (into a directory on PYTHONPATH, so this venv stays
as it was), then `opconform run`, `opconform probe` and the generated pytest suite find it by its
entry point and the gate catches its deliberate ReluGrad bug, with a diagnosis that names it."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.rundir import read_results

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "example-backend"
BUG = "X >= 0 selects dY (subgradient 1 at X = 0)"  # ReluGrad's alternative semantics in its spec


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("source") / EXAMPLE.name  # setuptools builds in the tree: keep ours clean
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}


def opconform(env, *args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], env=env, cwd=cwd, capture_output=True, text=True)


def test_the_gate_catches_the_bug_and_the_diagnosis_names_it(env, tmp_path):
    done = opconform(env, "run", "--backends", "example-kernels", "--ops", "ReluGrad,GeluGrad,TanhGrad",
                     "--out", str(tmp_path / "run"), "--no-progress", "--no-report")
    assert done.returncode == 1, done.stdout + done.stderr
    records = read_results(tmp_path / "run")
    mine = [r for r in records if r["backend"] == "example-kernels"]
    failed = [r for r in mine if r["status"] != "pass" and r["status"] != "unsupported"]
    assert failed and all(r["op"] == "ReluGrad" and r["case"].startswith("special_values/") for r in failed)
    assert all(r["diagnosis"]["matches"] == BUG for r in failed)
    assert f"matches {BUG}" in done.stdout
    # what it declares it has kernels for runs and passes; the rest is unsupported, never failed
    assert {r["status"] for r in mine if r["op"] == "GeluGrad" and r["dtype"] in ("float32", "float64")} == {"pass"}
    assert {r["status"] for r in mine if r["op"] == "TanhGrad"} == {"unsupported"}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backends"]["example-kernels"]["distribution"] == "opconform-example-backend 0.1.0"


def test_a_team_waiver_file_accepts_the_bug(env, tmp_path):
    waivers = tmp_path / "our-waivers.yaml"
    waivers.write_text(
        "backend: example-kernels\nwaivers:\n"
        "  - id: EX-0001\n    kind: xfail\n"
        "    match: {op: ReluGrad, dtypes: [float32], cases: ['special_values/*']}\n"
        "    failure: wrong_values\n"
        "    reason: dX is dY at X = 0; the fix to X > 0 ships in 0.2\n"
        "    tracking: https://example.com/kernels/issues/7\n    review_by: 2099-01-01\n")
    done = opconform(env, "run", "--backends", "example-kernels", "--ops", "ReluGrad", "--waivers", str(waivers),
                     "--out", str(tmp_path / "run"), "--no-progress", "--no-report")
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = {r["status"] for r in read_results(tmp_path / "run")}
    assert "waived" in statuses and "fail" not in statuses


def test_probe_lists_what_it_declares(env):
    done = opconform(env, "probe", "--backends", "example-kernels", "--ops", "ReluGrad,TanhGrad")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^ReluGrad\s+float32\s+declared$", done.stdout, re.M), done.stdout
    assert re.search(r"^ReluGrad\s+float16\s+no kernel$", done.stdout, re.M), done.stdout
    assert "TanhGrad float32 [example-kernels] not registered" in done.stdout


def test_the_generated_suite_runs_it_without_regenerating(env):
    done = subprocess.run([sys.executable, "-m", "pytest", "generated_tests/test_ReluGrad.py", "-m", "ci and example_kernels",
                           "-p", "no:cacheprovider", "-q", "-n", "0"], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout[-3000:]
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    assert failed and all("special_values/" in line and "-example-kernels]" in line for line in failed)
    assert "passed" in done.stdout.splitlines()[-1]
