"""The gate as CI runs it: pytest on the generated suites gives `opconform run`'s results and verdict,
fails on XPASS, stale and expired waivers and stale generated files, and shards merge into one run."""
import json
import xml.etree.ElementTree as ET

import yaml
from conftest import edit
from test_codegen import make_project, run_pytest

from harness import backends as registry
from harness.cli import main
from harness.core.cases import expand
from harness.core.spec_loader import load_catalog
from harness.pytest_plugin.plugin import marker
from harness.run.rundir import read_results

# Only ort's waivers are under test: openmp, which also fails against the edited reference, stays out.
SELECT = "smoke and (TanhGrad or ReluGrad or SigmoidGrad) and not openmp and not ort_autograd"
OPS = ("TanhGrad", "ReluGrad", "SigmoidGrad")


def waiver(wid, op, cases, kind="xfail", review_by="2099-01-31", **extra):
    return {"id": wid, "kind": kind, "match": {"op": op, "cases": cases, **extra.pop("match", {})},
            "reason": "the test double: the spec's reference is deliberately wrong here",
            "tracking": "https://github.com/example/opconform/issues/7", "review_by": review_by, **extra}


def write_ort_waivers(project, *waivers):
    folder = project / "specs" / "_waivers"
    folder.mkdir(exist_ok=True)
    (folder / "ort.yaml").write_text(yaml.safe_dump({"backend": "ort", "waivers": list(waivers)}, sort_keys=False))


def records(run_dir):
    return read_results(run_dir)


def test_generated_tests_give_the_results_of_opconform_run(tmp_path, capsys):
    project = make_project(tmp_path)
    assert main(["run", "--specs", str(project / "specs"), "--no-builtin-specs", "--tier", "smoke", "--out", str(tmp_path / "run"),
                 "--no-progress"]) == 0
    capsys.readouterr()
    defaults = " or ".join(marker(name) for name in registry.DEFAULT)  # the backends `opconform run` picks
    result = run_pytest(project, "-m", f"smoke and ({defaults})", "-n", "2", "--opconform-results", str(tmp_path / "pytest"),
                        "--junitxml", str(tmp_path / "junit.xml"))
    assert result.returncode == 0, result.stdout[-3000:]
    # the same statuses, details, metrics and order: one engine. A training_graph spec (MulGradient) has no test
    # items on backends that run single kernels: `run` reports those cells unsupported from the probe alone.
    run = records(tmp_path / "run")
    kernel_only = [r for r in run if r["op"].endswith("Gradient") and r["backend"] not in ("reference", "ort-autograd")]
    assert kernel_only and all(r["status"] == "unsupported" and "training_graph spec" in r["detail"] for r in kernel_only)
    assert records(tmp_path / "pytest") == [r for r in run if r not in kernel_only]
    summary = json.loads((tmp_path / "pytest" / "summary.json").read_text())
    assert summary["verdict"] == {"passed": True, "reasons": []}
    assert "verdict: PASS" in result.stdout
    for name, info in summary["backends"].items():  # ort-cuda without a GPU: skipped with its reason, never a pass
        if not info["available"]:
            assert info["skipped_tests"] > 0 and info["reason"] and f"backend {name} unavailable" in result.stdout
            assert not any(r["backend"] == name for r in records(tmp_path / "pytest"))
    names = {(tc.get("classname"), tc.get("name")) for tc in ET.parse(tmp_path / "junit.xml").iter("testcase")}
    case = next(c for c in expand(load_catalog(project / "specs").by_op("SoftmaxGrad_13"), "smoke") if c.dtype == "float16")
    assert ("generated_tests.test_SoftmaxGrad_13", f"test_SoftmaxGrad_13[float16-{case.id}-ort]") in names


def test_the_pytest_gate_applies_waivers_and_fails_on_each_stale_thing(tmp_path):
    project = make_project(tmp_path, ops=OPS)
    # A reference that disagrees with ORT (and the math) for TanhGrad: ORT's results now fail there.
    edit(project / "specs" / "com.microsoft" / "TanhGrad.yaml", "activations:tanh_grad", "activations:sigmoid_grad")
    assert main(["gen-tests", "--specs", str(project / "specs"), "--no-builtin-specs"]) == 0
    write_ort_waivers(project, waiver("ORT-0001", "TanhGrad", ["basic/*"], failure="wrong_values"))
    result = run_pytest(project, "-m", SELECT, "-n", "2", "--opconform-results", str(tmp_path / "ok"))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "xfailed" in result.stdout and "verdict: PASS" in result.stdout
    waived = [r for r in records(tmp_path / "ok") if r["status"] == "waived"]
    assert waived and {r["waiver"] for r in waived} == {"ORT-0001"} and {r["op"] for r in waived} == {"TanhGrad"}

    write_ort_waivers(project,
                      waiver("ORT-0001", "TanhGrad", ["basic/*"], failure="wrong_values", review_by="2000-01-01"),
                      waiver("ORT-0002", "ReluGrad", ["basic/*"], match={"dtypes": ["float32"]}),  # ORT is right there
                      waiver("ORT-0003", "SigmoidGrad", ["basic/*"], kind="divergence"))
    edit(project / "specs" / "com.microsoft" / "ReluGrad.yaml", "summary: Gradient", "summary: The gradient")
    result = run_pytest(project, "-m", SELECT, "-n", "2")
    assert result.returncode == 1
    out = result.stdout
    assert "FAILED generated_tests/test_ReluGrad.py::test_ReluGrad[float32-basic/shape=7-ort]" in out
    assert "verdict: FAIL" in out
    for reason in ("expected failure ORT-0002 passed in 3 case(s): remove waiver ORT-0002",
                   "stale waiver ORT-0003 (divergence): it covered",
                   "expired waiver ORT-0001: review_by 2000-01-01 passed",
                   "stale generated tests: test_ReluGrad.py: run `opconform gen-tests`"):
        assert reason in out, reason
    assert "unexpected failure" not in out  # an XPASS is reported as such, not as a plain failure


def test_a_waiver_in_its_grace_period_only_warns(tmp_path):
    project = make_project(tmp_path, ops=OPS)
    edit(project / "specs" / "com.microsoft" / "TanhGrad.yaml", "activations:tanh_grad", "activations:sigmoid_grad")
    assert main(["gen-tests", "--specs", str(project / "specs"), "--no-builtin-specs"]) == 0
    write_ort_waivers(project, waiver("ORT-0001", "TanhGrad", ["basic/*"], review_by="2030-01-01"))
    # `not gradient`: the gradient check rightly fails the broken reference; this test is about the waiver
    result = run_pytest(project, "-m", "smoke and TanhGrad and ort and not gradient", "--opconform-today", "2030-01-10")
    assert result.returncode == 0 and "warning: waiver ORT-0001 is past its review date 2030-01-01" in result.stdout
    result = run_pytest(project, "-m", "smoke and TanhGrad and ort and not gradient", "--opconform-today", "2030-01-16")
    assert result.returncode == 1 and "expired waiver ORT-0001" in result.stdout


def test_shards_merge_into_the_run_they_split(tmp_path, capsys):
    project = make_project(tmp_path, ops=OPS)
    write_ort_waivers(project, waiver("ORT-0003", "SigmoidGrad", ["basic/*"], kind="divergence"))  # stale
    whole = run_pytest(project, "-m", SELECT, "--opconform-results", str(tmp_path / "whole"))
    assert whole.returncode == 1 and "stale waiver ORT-0003" in whole.stdout
    for group in (1, 2):
        shard = run_pytest(project, "-m", SELECT, "--splits", "2", "--group", str(group),
                           "--opconform-results", str(tmp_path / f"shard{group}"))
        # a shard cannot tell a stale waiver from one that waives in the other shard: the merge judges
        assert shard.returncode == 0, shard.stdout[-2000:]
        assert "stale divergences and waivers are judged by `opconform merge`" in shard.stdout
    parts = [records(tmp_path / f"shard{g}") for g in (1, 2)]
    assert parts[0] and parts[1]
    code = main(["merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out", str(tmp_path / "merged"),
                 "--specs", str(project / "specs"), "--no-builtin-specs"])
    out = capsys.readouterr().out
    assert code == 1 and "stale waiver ORT-0003" in out
    assert (tmp_path / "merged" / "results.jsonl.gz").read_bytes() == (tmp_path / "whole" / "results.jsonl.gz").read_bytes()
    summary = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert summary["totals"] == json.loads((tmp_path / "whole" / "summary.json").read_text())["totals"]

    code = main(["merge", str(tmp_path / "shard1"), "--out", str(tmp_path / "half"), "--specs", str(project / "specs"),
                 "--no-builtin-specs"])
    assert code == 1 and "shard(s) 2 of 2 missing" in capsys.readouterr().out
    code = main(["merge", str(tmp_path / "shard1"), str(tmp_path / "shard1"), "--out", str(tmp_path / "twice"),
                 "--specs", str(project / "specs"), "--no-builtin-specs"])
    assert code == 2 and "the shards overlap" in capsys.readouterr().err


def test_a_crashing_backend_costs_one_test_not_the_session(tmp_path):
    # ORT dies with SIGFPE on some empty SoftmaxGrad_13 inputs (a known divergence of the spec): those
    # tests are xfail, and the tests after them run on a fresh worker process and pass.
    project = make_project(tmp_path, ops=("SoftmaxGrad_13",))
    result = run_pytest(project, "-m", "SoftmaxGrad_13 and ort and float32", "--opconform-results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stdout[-3000:]
    found = records(tmp_path / "r")
    crashes = [i for i, r in enumerate(found) if r["failure"] == "crash"]
    assert crashes and all(found[i]["status"] == "divergent" for i in crashes)
    assert any(r["status"] == "pass" for r in found[crashes[0] + 1:])  # the session went on
