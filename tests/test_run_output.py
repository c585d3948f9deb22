"""Run output sized to use: a ci run's directory (results, junit.xml, index.html) stays under 10 MB for the
~14,000 results of a full ci run (it was ~30 MB), readable by `report`, `merge` and the baseline diff, an
older run's plain results.jsonl too; and a run writes under ./reports of the current directory, never
inside the installed package."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from harness.cli import main
from harness.report.baseline import diff
from harness.report.data import read_run
from harness.run import rundir

FULL_CI_RESULTS, FULL_CI_OPS = 14_000, 27  # a full ci run today
LIMIT = 10_000_000
# A full ci run's results are bigger and compress less than these three ops' (RNN and conv records): measured
# at 14,012 results, 8.5 MB (results.jsonl.gz 110 B a result, junit.xml 155, index.html 330, summary 12 KB an
# op) where these ops extrapolate to 7.3 MB; the per-result part is scaled up by MIX to match.
MIX = 1.2
# bytes per result (index.html: its case tables' data; the rest of the page is counted per op)
BUDGET = {"results.jsonl.gz": 90, "junit.xml": 200, "table": 260}
PAGE_PER_OP = 80_000  # index.html outside the case tables, per op (documentation, charts, findings)
SUMMARY_PER_OP = 12_000


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    """A ci-tier run of a few ops on every default backend, with its report and junit.xml."""
    out = tmp_path_factory.mktemp("ci") / "run"
    main(["run", "--ops", "ReluGrad,GatherGrad,MaxPoolGrad", "--tier", "ci", "--no-progress", "--out", str(out)])
    return out


def _tables(page: str) -> list[str]:
    return re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)


def test_a_ci_run_directory_fits_ten_megabytes_at_full_size(ci_run):
    summary = json.loads((ci_run / "summary.json").read_text())
    n, ops = summary["results"], len(summary["ops"])
    assert n > 500 and ops == 3
    page = (ci_run / "index.html").read_text(encoding="utf-8")
    tables = sum(len(t.encode()) for t in _tables(page))
    per_result = {"results.jsonl.gz": (ci_run / "results.jsonl.gz").stat().st_size / n,
                  "junit.xml": (ci_run / "junit.xml").stat().st_size / n, "table": tables / n}
    page_per_op = ((ci_run / "index.html").stat().st_size - tables) / ops
    summary_per_op = (ci_run / "summary.json").stat().st_size / ops
    over = {f: round(b) for f, b in per_result.items() if b > BUDGET[f]}
    assert not over, f"bytes per result over budget: {over} (budget {BUDGET})"
    assert page_per_op <= PAGE_PER_OP and summary_per_op <= SUMMARY_PER_OP, (page_per_op, summary_per_op)
    full = FULL_CI_RESULTS * MIX * sum(per_result.values()) + FULL_CI_OPS * (page_per_op + summary_per_op)
    assert full < LIMIT, f"a full ci run would write {full / 1e6:.1f} MB"
    assert not (ci_run / "results.jsonl").exists()


def _plain_copy(run: Path, dest: Path, keep=lambda r: True) -> Path:
    """An older run's directory: the same records as a plain results.jsonl."""
    dest.mkdir(parents=True)
    records = [r for r in rundir.read_results(run) if keep(r)]
    (dest / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (dest / "summary.json").write_text((run / "summary.json").read_text())
    return dest


def test_report_merge_and_baseline_read_the_compressed_file_and_an_old_plain_one(ci_run, tmp_path, capsys):
    records = rundir.read_results(ci_run)
    with gzip.open(ci_run / "results.jsonl.gz", "rt") as f:  # a standard gzip file, for zcat and friends
        assert [json.loads(line) for line in f] == records
    plain = _plain_copy(ci_run, tmp_path / "old")
    assert rundir.read_results(plain) == records and rundir.results_path(plain).name == "results.jsonl"

    # report: the same records either way; the baseline diff of the two sees no change
    new, old = read_run(ci_run), read_run(plain)
    assert [r.raw for r in new.records] == [r.raw for r in old.records] == records and not new.problems
    change = diff(old, new)
    assert change.empty and change.unchanged == len(records)
    assert main(["report", str(ci_run), "--baseline", str(plain), "--out", str(tmp_path / "diff.html")]) == 0
    assert main(["report", str(plain), "--out", str(tmp_path / "old.html")]) == 0
    assert _tables((tmp_path / "old.html").read_text()) == _tables((ci_run / "index.html").read_text())

    # merge: one shard plain (an older run), one compressed; the merged directory is compressed
    gather = _plain_copy(ci_run, tmp_path / "gather", keep=lambda r: r["op"] == "GatherGrad")
    rest = tmp_path / "rest"
    rundir.write_run(rest, [r for r in records if r["op"] != "GatherGrad"], json.loads((ci_run / "summary.json").read_text()))
    capsys.readouterr()
    main(["merge", str(gather), str(rest), "--out", str(tmp_path / "merged")])
    assert rundir.read_results(tmp_path / "merged") == records
    assert (tmp_path / "merged" / "results.jsonl.gz").is_file() and not (tmp_path / "merged" / "results.jsonl").exists()


def test_a_killed_writers_gzip_stream_reads_up_to_its_last_whole_record(tmp_path):
    records = [{"op": "ReluGrad", "case": f"c{i}", "detail": "x" * (i * 37 % 300)} for i in range(40)]
    path = tmp_path / "results.jsonl.gz"
    writer = rundir.ResultsWriter(path)
    ends = []  # the file's size after each record: where a killed writer's file can end
    for r in records:
        writer.write(r)
        ends.append(path.stat().st_size)
    whole = path.read_bytes()  # before close(): no gzip trailer yet, as a SIGKILLed run leaves it
    writer.close()
    cut = tmp_path / "cut.jsonl.gz"
    for size in range(0, len(whole) + 1, 7):
        cut.write_bytes(whole[:size])
        lines, complete = rundir.read_lines(cut)
        k = sum(1 for e in ends if e <= size)  # records flushed whole before the cut
        read = [json.loads(line) for line in lines]  # never part of a record: a prefix of the records
        assert read == records[:len(read)] and k <= len(read) <= k + 1, size  # (+1: all but the flush marker)
        assert not complete or size == 0
    for k, size in enumerate(ends, 1):  # a cut exactly after a record's flush keeps exactly that record
        cut.write_bytes(whole[:size])
        assert rundir.read_results(cut) == records[:k]
    assert rundir.read_lines(path) == ([json.dumps(r) for r in records], True)
    # the report counts the record cut short as unreadable, and shows the rest
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl.gz").write_bytes(whole[:(ends[9] + ends[10]) // 2])
    run = read_run(tmp_path / "run")
    assert [r.case for r in run.records] == [f"c{i}" for i in range(10)]
    assert any("1 line(s) of results.jsonl.gz are not JSON records" in p for p in run.problems)


def test_the_default_output_is_reports_under_the_current_directory(tmp_path):
    cwd = tmp_path / "somewhere" / "deeper"
    cwd.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--ops", "ReluGrad", "--tier", "smoke",
                           "--backends", "reference", "--no-progress", "--no-report"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (run,) = (cwd / "reports").iterdir()
    assert re.fullmatch(r"\d{8}-\d{6}-smoke", run.name) and rundir.read_results(run)
    assert f"results: reports/{run.name}/results.jsonl.gz" in done.stdout


def test_a_run_from_inside_the_installed_package_is_refused(monkeypatch, capsys):
    """An installed wheel (no source checkout): a run from inside the package is refused, writing nothing."""
    from harness.cli import main
    from harness.spec import sources

    inside = Path(rundir.__file__).resolve().parent  # harness/run, in the package (editable or not)
    assert inside.parent in rundir.package_dirs()
    monkeypatch.setattr(sources, "checkout_root", lambda: None)
    monkeypatch.chdir(inside)
    code = main(["run", "--ops", "ReluGrad", "--tier", "smoke", "--backends", "reference", "--no-progress",
                 "--no-report"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"opconform: error: the current directory {inside} is inside the installed package {inside.parent}: "
        "run from another directory or pass --out DIR"]
    assert not (inside / "reports").exists()


def test_from_a_subfolder_of_the_checkout_reports_go_to_the_checkout_s_own(tmp_path, monkeypatch):
    from harness.spec import sources

    clone = tmp_path / "clone"
    (clone / "examples" / "command-backend").mkdir(parents=True)
    monkeypatch.setattr(sources, "checkout_root", lambda: clone)
    monkeypatch.chdir(clone / "examples" / "command-backend")
    assert rundir.default_reports() == clone / "reports"  # never examples/command-backend/reports
    monkeypatch.chdir(clone)
    assert rundir.default_reports() == Path("reports")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert rundir.default_reports() == Path("reports")  # outside the checkout: the current directory's
    monkeypatch.setattr(sources, "checkout_root", lambda: None)  # an installed wheel
    monkeypatch.chdir(clone / "examples")
    assert rundir.default_reports() == Path("reports")


def test_the_checkout_is_found_from_a_source_tree_and_not_from_a_wheel(monkeypatch, tmp_path):
    from harness.spec import sources

    assert sources.checkout_root() == Path(sources.__file__).resolve().parents[2]  # this test runs from a clone
    monkeypatch.setattr(sources, "_HARNESS", tmp_path / "site-packages" / "harness")
    assert sources.checkout_root() is None


@pytest.mark.parametrize("args, error", [
    (["--backends", "nosuch"], "opconform: error: unknown backend 'nosuch' (known: "),
    (["--ops", "ReluGrd"], "opconform: error: unknown op 'ReluGrd'; did you mean 'ReluGrad'?"),
    (["--tier", "bogus"], "opconform run: error: argument --tier: invalid choice: 'bogus'"),
    (["--threads", "0"], "opconform: error: --threads must be >= 1, got 0"),
    (["--timeout", "0"], "opconform: error: --timeout must be > 0 seconds, got 0"),
    (["--command-backend", "bad"], "opconform: error: command backend 'bad': write NAME=TEMPLATE"),
    (["--specs", "/no/such/specs"], "opconform: spec error: /no/such/specs: no such spec directory"),
    (["--waivers", "/no/such/waivers.yaml"], "opconform: spec error: /no/such/waivers.yaml: no such waiver file"),
], ids=["backend", "op", "tier", "threads", "timeout", "command-backend", "specs", "waivers"])
def test_a_usage_error_leaves_an_old_run_directory_given_as_out_as_it_was(tmp_path, capsys, args, error):
    """`run --out OLD` with a mistake the options show: exit 2 with one line, before OLD is claimed or touched
    (it was cleared first, and its summary said the run did not start)."""
    old = tmp_path / "old-run"
    rundir.write_run(old, [{"op": "ReluGrad", "backend": "reference", "status": "pass"}],
                     {"run_id": "old-run", "complete": True, "verdict": {"passed": True, "reasons": []}})
    (old / "index.html").write_text("<html>the old run's report</html>")
    (old / rundir.LOCK_FILE).unlink()  # a claim would create it again
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    try:
        code = main(["run", "--out", str(old), "--tier", "smoke", "--no-progress", "--no-report", *args])
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    assert code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("usage:", " "))]
    assert len(lines) == 1 and lines[0].startswith(error), lines
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before


def test_the_pytest_gate_prints_the_names_of_the_files_it_wrote(tmp_path, capsys):
    """pytest --opconform-results DIR: the gate's block names results.jsonl.gz (it said results.jsonl), and
    the files are there."""
    from test_codegen import make_project
    from test_gate_verdict import run_pytest

    project = make_project(tmp_path, ops=("ReluGrad",))
    capsys.readouterr()
    out = project / "results"
    code, verdict, text = run_pytest(project, "--opconform-results", str(out))
    assert (code, verdict) == (0, "PASS"), text[-3000:]
    assert f"results: {out}/{rundir.RESULTS}, {out}/{rundir.SUMMARY}" in text.splitlines()
    assert rundir.results_path(out) == out / "results.jsonl.gz" and rundir.read_results(out)
    assert json.loads((out / "summary.json").read_text())["verdict"]["passed"] is True


@pytest.mark.parametrize("argv", [["bench", "--ops", "ReluGrad", "--backends", "reference", "--quick"],
                                  ["mutate", "--ops", "ReluGrad", "--tier", "smoke"]], ids=["bench", "mutate"])
def test_bench_and_mutate_refuse_a_default_output_inside_the_installed_package(monkeypatch, capsys, argv):
    """bench and mutate default to ./reports/<kind>-<date>-<time>/ as `run` does, by its rule (rundir's
    check_outside_package): from inside the package, one line and exit 2 before any work."""
    from harness.spec import sources

    inside = Path(rundir.__file__).resolve().parent
    existed = (inside / "reports").exists()
    monkeypatch.setattr(sources, "checkout_root", lambda: None)  # an installed wheel: no checkout to fall back on
    monkeypatch.chdir(inside)
    try:
        assert main(argv) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"opconform: error: the current directory {inside} is inside the installed package {inside.parent}: "
            "run from another directory or pass --out FILE"]
        assert not (inside / "reports").exists()
    finally:
        if not existed and (inside / "reports").exists():  # what a broken check leaves in the package
            shutil.rmtree(inside / "reports")


def test_mutate_writes_its_default_output_under_the_current_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["mutate", "--ops", "ReluGrad", "--tier", "smoke"])
    (figures,) = (tmp_path / "reports").glob("mutate-*/mutate.json")
    assert re.fullmatch(r"mutate-\d{8}-\d{6}", figures.parent.name)
    assert f"figures: reports/{figures.parent.name}/mutate.json" in capsys.readouterr().out


def test_build_and_report_folders_are_ignored_by_git():
    for path in ("examples/command-backend/build/x.o", "examples/example-backend/build/lib/x.py", "reports/r/x",
                 "build/cp311/x.so", "examples/example-backend/src/x.egg-info/PKG-INFO"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
        assert ignored.returncode == 0, f"{path} is not ignored: a run's report would say +dirty"


def test_the_case_tables_compact_data_keeps_what_the_table_shows():
    from harness.report.render import compact_rows

    src = "default(float32)"
    row = ["ort", "float32", "basic/shape=7", "reference", "pass", "", 4.76837158203125e-07, 1.8966883347503175e-07,
           2.0, 0.0014274789147791188, "1e-05 + 0.0001·|ref|", src, f"within tolerance (x0.0014 of {src})", "", "ci"]
    (short,) = compact_rows([row])
    assert short[6:10] == [4.768e-07, 1.897e-07, 2, 0.001427] and short[12] == "within tolerance"
    assert short[:6] == row[:6] and short[10:12] == row[10:12] and short[13:] == row[13:]
    over = compact_rows([row[:4] + ["fail", "wrong_values", 1.0, None, None, 1.0000001] + row[10:12]
                         + ["dX: 1 of 7 element(s) outside tolerance", "", "ci"]])[0]
    assert over[9] > 1 and over[12] == "dX: 1 of 7 element(s) outside tolerance"  # still marked over, detail kept
    divergent = compact_rows([row[:4] + ["divergent", "wrong_values", None, None, None, None, "", "",
                                         "known divergence ort-x: a long summary | observed: dX differs", "divergence ort-x", "ci"]])[0]
    assert divergent[12] == "dX differs" and divergent[13] == "divergence ort-x"
    unsupported = compact_rows([row[:4] + ["unsupported", "", None, None, None, None, "", "", "no kernel " * 40, "", "ci"]])[0]
    assert len(unsupported[12]) == 141 and unsupported[12].endswith("…")
