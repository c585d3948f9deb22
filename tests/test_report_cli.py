"""`opconform run` ends with index.html and junit.xml; `opconform report` compares two real runs; the
repro commands the report prints really rerun their case."""
import json
import shlex
import xml.etree.ElementTree as ET

import pytest

from harness.cli import main
from harness.report import build_report
from harness.run.rundir import read_results


def edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def records(run_dir):
    return read_results(run_dir)


def test_run_writes_the_report_and_junit(capsys, tmp_path):
    code = main(["run", "--tier", "smoke", "--ops", "ReluGrad,GeluGrad", "--out", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0 and f"report: {tmp_path / 'r' / 'index.html'}" in out
    page = (tmp_path / "r" / "index.html").read_text()
    assert 'id="op-GeluGrad"' in page and 'id="op-ReluGrad"' in page and "<svg" in page
    testcases = list(ET.parse(tmp_path / "r" / "junit.xml").getroot().iter("testcase"))
    assert len(testcases) == len(records(tmp_path / "r")) > 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["timeout"] == 60.0 and summary["specs"] and isinstance(summary["env_vars"], dict)


def test_no_report_flag(capsys, tmp_path):
    assert main(["run", "--tier", "smoke", "--ops", "ReluGrad", "--no-report", "--out", str(tmp_path / "r")]) == 0
    assert not (tmp_path / "r" / "index.html").exists() and not (tmp_path / "r" / "junit.xml").exists()


def rerun(cmd: str, out) -> list[dict]:
    argv = shlex.split(cmd)
    assert argv[:2] == ["opconform", "run"]
    assert main(argv[1:] + ["--out", str(out), "--no-report", "--no-progress"]) in (0, 1)
    return records(out)


def test_repro_commands_rerun_exactly_their_case(capsys, tmp_path):
    assert main(["run", "--ops", "GeluGrad", "--backends", "ort", "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    report = build_report(tmp_path / "a")
    (ort_findings,) = [items for backend, items in report.findings if backend == "ort"]
    inf = next(f for f in ort_findings if f.key == "ort-gelugrad-inf")
    chosen = [inf.examples[0], report.ops[0].worst[0]]  # a known divergence, and the pass nearest to failing
    for i, (rec, cmd) in enumerate(chosen):
        again = rerun(cmd, tmp_path / f"again{i}")
        assert {(r["backend"], r["dtype"], r["case"]) for r in again} == {(rec.backend, rec.dtype, rec.case)}
        assert [r["status"] for r in again if r["check"] == "reference"] == [rec.status]
    assert chosen[0][0].status == "divergent"


def test_baseline_diff_between_two_runs(capsys, tmp_path, spec_copy):
    common = ["--specs", str(spec_copy), "--no-builtin-specs", "--ops", "TanhGrad,ReluGrad", "--tier", "smoke", "--no-progress",
              "--backends", "reference,ort"]
    assert main(["run", *common, "--out", str(tmp_path / "before")]) == 0
    # Break TanhGrad's reference (ORT's right answers now fail) and change ReluGrad's case list.
    edit(spec_copy / "com.microsoft" / "TanhGrad.yaml", "activations:tanh_grad", "activations:sigmoid_grad")
    edit(spec_copy / "com.microsoft" / "ReluGrad.yaml", "params: {shape: [[7], [3, 4], [2, 3, 5]]}",
         "params: {shape: [[7], [3, 4], [6, 6]]}")
    assert main(["run", *common, "--out", str(tmp_path / "after")]) == 1
    capsys.readouterr()
    assert main(["report", str(tmp_path / "after"), "--baseline", str(tmp_path / "before"), "--specs", str(spec_copy), "--no-builtin-specs",
                 "--out", str(tmp_path / "diff.html")]) == 0
    assert f"report: {tmp_path / 'diff.html'}" in capsys.readouterr().out

    d = build_report(tmp_path / "after", baseline=tmp_path / "before").diff
    failing_now = {(r["op"], r["backend"], r["dtype"], r["case"]) for r in records(tmp_path / "after") if r["status"] == "fail"}
    assert failing_now and {(c.rec.op, c.rec.backend, c.rec.dtype, c.rec.case) for c in d.newly_failing} == failing_now
    assert {c.rec.op for c in d.newly_failing} == {"TanhGrad"}
    # ort against the broken reference, and the reference's own gradient check, which catches it
    assert {(c.rec.backend, c.rec.check) for c in d.newly_failing} == {("ort", "reference"), ("reference", "gradient")}
    assert {(c.rec.case, c.rec.backend) for c in d.added} == {("basic/shape=6x6", b) for b in ("reference", "ort")}
    assert {(c.rec.case, c.rec.backend) for c in d.removed} == {("basic/shape=2x3x5", b) for b in ("reference", "ort")}
    assert len(d.added) == len(d.removed) == 12  # 4 dtypes x (2 backends + the reference's gradient check)
    assert not d.newly_passing and any(k == "spec_set" for k, _, _ in d.environment)

    page = (tmp_path / "diff.html").read_text()
    assert f"Newly failing ({len(failing_now)})" in page and "Added (12)" in page and "Removed (12)" in page
    assert "float32-basic/shape=6x6" in page


@pytest.mark.parametrize("argv, message", [
    (["report", "/nonexistent/run"], "opconform: error: /nonexistent/run: no results.jsonl.gz here"),
    (["report", ".", "--baseline", "/nonexistent/old"], "opconform: error: --baseline /nonexistent/old: no results.jsonl.gz"),
])
def test_report_usage_errors_are_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and len(err.strip().splitlines()) == 1
