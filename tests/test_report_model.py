"""The report's model: counts, worst status, baseline diff, coverage, findings, repro commands, and a
page that renders from whatever a run left behind."""
import fnmatch
import html
import json
import re
import shlex
from pathlib import Path

import pytest

from harness.report import bench as bench_mod
from harness.report import build_report, write_report
from harness.report.baseline import budget_moved, diff
from harness.report.data import RunData, describe_diagnosis, read_run, to_rec
from harness.report.model import bench_charts, build, read_capabilities
from harness.report.ops import coverage
from harness.report.render import render
from harness.report.repro import command, glob_escape, run_flags
from harness.report.status import Cell

EXAMPLE_BENCH = Path(__file__).resolve().parents[1] / "harness" / "report" / "bench_example.json"


def raw(op="ReluGrad", backend="ort", dtype="float32", case="basic/shape=7", status="pass", budget=0.01, **extra):
    record = {"spec": f"com.microsoft::{op}@1", "op": op, "backend": backend, "dtype": dtype, "case": case,
              "group": case.split("/")[0], "valid": True, "tier": "ci", "seed": 1, "params": {}, "attributes": {},
              "input_shapes": {}, "status": status, "failure": None, "detail": "", "divergence": None,
              "outputs": {} if budget is None else {"dX": {"passed": status == "pass", "size": 7, "max_abs": 1e-6,
                                                            "max_rel": 1e-5, "max_ulp": 3.0, "budget_used": budget,
                                                            "tolerance": {"atol": 1e-5, "rtol": 1e-4, "source": "default(float32)"}}},
              "check": "reference"}
    record.update(extra)
    return record


def run_of(records, summary=None, name="run") -> RunData:
    return RunData(Path(name), summary if summary is not None else {"run_id": name}, [to_rec(r) for r in records])


def test_cells_count_statuses_apart_and_keep_the_denominator():
    records = [raw(status=s, case=f"g/k={i}") for i, s in enumerate(
        ["pass", "pass", "fail", "divergent", "waived", "unsupported", "crashed"])]
    report = build(run_of(records))
    (cell,) = report.matrix[0].cells
    assert (cell.passed, cell.total) == (2, 7)
    assert cell.others == [("crashed", 1), ("fail", 1), ("divergent", 1), ("waived", 1), ("unsupported", 1)]
    assert cell.worst == "crashed" and cell.title.startswith("2 of 7 passed")


@pytest.mark.parametrize("statuses, worst", [
    (["pass", "unsupported"], "unsupported"),  # never green when something did not run
    (["pass", "divergent", "unsupported"], "divergent"),
    (["pass", "waived", "divergent"], "divergent"),
    (["divergent", "xpass"], "xpass"),  # a status from a newer harness ranks as a failure
    (["fail", "xpass"], "fail"),
    (["fail", "error", "crashed"], "error"),
    (["pass"], "pass"),
])
def test_worst_status(statuses, worst):
    cell = Cell()
    for s in statuses:
        cell.add(s)
    assert cell.worst == worst


def test_matrix_columns_are_backend_by_dtype_in_run_order():
    records = [raw(backend=b, dtype=d, case=f"g/{b}{d}") for b in ("ort", "reference") for d in ("float16", "float32")]
    records.append(raw(op="TanhGrad", backend="reference", dtype="bfloat16"))
    summary = {"backends": {"reference": {"available": True}, "ort": {"available": True}}}
    report = build(run_of(records, summary))
    assert report.columns == [("reference", "float32"), ("reference", "float16"), ("reference", "bfloat16"),
                              ("ort", "float32"), ("ort", "float16")]
    relu, tanh = report.matrix
    assert [c.total if c else None for c in relu.cells] == [1, 1, None, 1, 1]
    assert [c.total if c else None for c in tanh.cells] == [None, None, 1, None, None]
    assert relu.total.total == 4


def test_verdict_comes_from_the_summary_or_says_there_is_none():
    passed = build(run_of([raw()], {"verdict": {"passed": True, "reasons": [], "warnings": ["waiver W past review"]}}))
    assert passed.verdict_passed is True and passed.warnings == ["waiver W past review"]
    unknown = build(run_of([raw()], {}))
    assert unknown.verdict_passed is None and "no verdict" in unknown.reasons[0]
    failing = build(run_of([raw(status="fail")], {}))  # the report never judges again: only the gate decides
    assert failing.verdict_passed is None and "no verdict" in failing.reasons[0]


def test_environment_names_versions_compiler_and_thread_settings():
    summary = {"environment": {"python": "3.11.7", "numpy": "2.4.6"}, "spec_set": "abc", "tier": "ci", "seed": 0,
               "env_vars": {"OMP_NUM_THREADS": "2"},
               "backends": {"openmp": {"available": True, "build": {"compiler": "gcc 12.2.0", "flags": "-O3 -fopenmp",
                                                                     "omp_max_threads": 2}}}}
    rows = dict(build(run_of([raw(backend="openmp")], summary)).environment)
    assert rows["onnxruntime-training"] == "unavailable" and rows["numpy"] == "2.4.6"
    assert rows["compiler and flags (openmp)"] == "compiler gcc 12.2.0 · flags -O3 -fopenmp · omp_max_threads 2"
    assert rows["OMP_NUM_THREADS"] == "2" and rows["OPENBLAS_NUM_THREADS"] == "unset"
    assert rows["spec set (sha256)"] == "abc" and rows["tier"] == "ci" and rows["seed"] == "0"
    no_build = dict(build(run_of([raw()], {"backends": {"ort": {"available": True}}})).environment)
    assert no_build["compiler and flags"].startswith("— (no compiled backend")


def test_baseline_diff_sorts_every_change():
    old = run_of([raw(case="a", status="pass"), raw(case="b", status="fail"), raw(case="c", status="pass", budget=0.2),
                  raw(case="d", status="pass"), raw(case="e", status="pass", budget=1e-6),
                  raw(case="gone", status="pass"), raw(case="f", status="divergent")], name="old")
    new = run_of([raw(case="a", status="fail"), raw(case="b", status="pass"), raw(case="c", status="pass", budget=0.7),
                  raw(case="d", status="unsupported", budget=None), raw(case="e", status="pass", budget=1e-5),
                  raw(case="new", status="pass"), raw(case="f", status="crashed")], name="new")
    d = diff(old, new)
    cases = lambda changes: sorted(c.rec.case for c in changes)  # noqa: E731
    assert cases(d.newly_failing) == ["a", "f"]  # divergent -> crashed is newly failing too
    assert cases(d.newly_passing) == ["b"]
    assert cases(d.other_changes) == ["d"]
    assert cases(d.budget_changes) == ["c"]  # 0.2 -> 0.7; 1e-6 -> 1e-5 is below the floor
    assert cases(d.added) == ["new"] and cases(d.removed) == ["gone"]
    assert d.unchanged == 1 and not d.empty


@pytest.mark.parametrize("old, new, moved", [
    (0.2, 0.5, True), (0.5, 0.2, True), (0.3, 0.5, False), (1e-6, 1e-5, False), (0.0, 0.2, True),
    (0.0, 0.05, False), (None, 0.9, False), (0.9, float("inf"), True),
])
def test_budget_change_threshold(old, new, moved):
    assert budget_moved(old, new) is moved


def test_ops_only_one_run_ran_are_not_cases_added_or_removed():
    old = run_of([raw(op="ReluGrad"), raw(op="TanhGrad"), raw(op="TanhGrad", case="b")])
    new = run_of([raw(op="ReluGrad"), raw(op="GeluGrad")])
    d = diff(old, new)
    assert d.ops_removed == {"TanhGrad": 2} and d.ops_added == {"GeluGrad": 1}
    assert not d.added and not d.removed and d.unchanged == 1


def test_baseline_diff_names_environment_changes():
    old = run_of([raw()], {"environment": {"onnxruntime-training": "1.19.2"}, "spec_set": "aaa"})
    new = run_of([raw()], {"environment": {"onnxruntime-training": "1.20.0"}, "spec_set": "bbb"})
    assert ("onnxruntime-training", "1.19.2", "1.20.0") in diff(old, new).environment
    assert ("spec_set", "aaa", "bbb") in diff(old, new).environment


def test_attribute_coverage_lists_values_never_exercised(catalog):
    spec = catalog.by_op("ConvGrad")
    records = [raw(op="ConvGrad", case="a", attributes={"auto_pad": "VALID", "group": 2}),
               raw(op="ConvGrad", case="b", attributes={}),  # auto_pad left out: its default NOTSET
               raw(op="ConvGrad", case="b", backend="reference", attributes={}),  # same case: counted once
               raw(op="ConvGrad", case="bad", valid=False, attributes={"auto_pad": "BOGUS"})]
    by_name = {a.name: a for a in coverage([to_rec(r) for r in records], spec)}
    auto_pad = by_name["auto_pad"]
    assert dict(auto_pad.exercised) == {"VALID": 1, "NOTSET (default)": 1}
    assert auto_pad.never == ["SAME_UPPER", "SAME_LOWER"]
    assert auto_pad.rejected == [("BOGUS", 1)]
    assert dict(by_name["group"].exercised) == {"2": 1, "1 (default)": 1}
    assert by_name["group"].never == []  # no list of allowed values to miss
    assert set(by_name) == set(spec.attributes)


def test_coverage_without_a_spec_lists_what_the_results_used():
    records = [raw(case="a", attributes={"alpha": 0.5}), raw(case="b", attributes={"alpha": 0.5})]
    (alpha,) = coverage([to_rec(r) for r in records], None)
    assert alpha.exercised == [("0.5", 2)] and alpha.never == []


@pytest.mark.parametrize("case_id", ["basic/shape=7", "odd/x=[1, 2];y=*", "q/a=?;b=[[]", "bad_strides/strides=-1x1;k=3x3"])
def test_repro_glob_matches_exactly_its_case(case_id):
    glob = glob_escape(f"float32-{case_id}")
    assert fnmatch.fnmatchcase(f"float32-{case_id}", glob)
    assert not fnmatch.fnmatchcase(f"float32-{case_id}x", glob)
    assert not fnmatch.fnmatchcase(f"float16-{case_id}", glob)


def test_repro_command_carries_the_run_flags(tmp_path):
    flags = run_flags({"specs": str(tmp_path), "seed": 7, "threads": 2, "timeout": 5.0}, default_specs=Path("specs"))
    cmd = command("ConvGrad", "ort", "float32", "bad/strides=0x0;k=3", "nightly", flags)
    argv = shlex.split(cmd)
    assert argv[:4] == ["opconform", "run", "--ops", "ConvGrad"]
    assert argv[argv.index("--cases") + 1] == "float32-bad/strides=0x0;k=3"
    assert argv[argv.index("--tier") + 1] == "nightly"
    assert argv[argv.index("--specs") + 1] == str(tmp_path)
    assert (argv[argv.index("--seed") + 1], argv[argv.index("--threads") + 1], argv[argv.index("--timeout") + 1]) == ("7", "2", "5")
    default = command("ReluGrad", "ort", "float32", "basic/shape=7", "smoke", run_flags({"seed": 0, "threads": 1}, None))
    assert default == "opconform run --ops ReluGrad --backends ort --cases float32-basic/shape=7"


def test_repro_command_defines_the_command_backend_and_loads_the_team_waivers(tmp_path):
    template = "sh run.sh {inputs} {outputs}"
    flags = run_flags({"command_backends": {"relu-sh": template}, "waiver_files": ["/team/waivers.yaml"]}, None)
    argv = shlex.split(command("ReluGrad", "relu-sh", "float32", "basic/shape=7", "smoke", flags))
    assert argv[argv.index("--command-backend") + 1] == f"relu-sh={template}"
    assert argv[argv.index("--waivers") + 1] == "/team/waivers.yaml"


def test_worst_cases_put_unexpected_statuses_first_then_tolerance_used():
    records = [raw(case="a", budget=0.5), raw(case="b", budget=0.9), raw(case="c", status="fail", budget=3.0),
               raw(case="d", status="unsupported", budget=None), raw(case="e", status="crashed", budget=None)]
    op = build(run_of(records)).ops[0]
    assert [r.case for r, _ in op.worst] == ["e", "c", "b", "a"]
    assert op.worst[1][1].endswith("--cases float32-c")


def test_findings_group_by_backend_kind_and_divergence(catalog):
    gelu = "com.microsoft::GeluGrad@1"
    records = [raw(op="GeluGrad", spec=gelu, case=f"infinities/shape={s}", status="divergent", divergence="ort-gelugrad-inf",
                   failure="wrong_values", detail="known divergence ort-gelugrad-inf: ...") for s in (2, 4)]
    records.append(raw(op="GeluGrad", spec=gelu, case="infinities/shape=9", status="pass", divergence="ort-gelugrad-inf"))
    records.append(raw(op="GeluGrad", spec=gelu, case="huge_magnitude/shape=6", status="pass", divergence="ort-gelugrad-huge-x-drift"))
    records += [raw(op="GeluGrad", spec=gelu, case=f"x/{i}", status="crashed", failure="crash", detail="worker killed by SIGSEGV")
                for i in range(3)]
    records.append(raw(op="GeluGrad", spec=gelu, backend="reference", case="y", status="error", detail="spec bug"))
    report = build(run_of(records), specs={s.id: s for s in catalog.specs})
    by_backend = dict(report.findings)
    assert list(by_backend) == ["ort", "reference"]
    kinds = [(f.kind, f.key, f.count) for f in by_backend["ort"]]
    assert kinds == [("crash", "crash", 3), ("stale divergence", "ort-gelugrad-huge-x-drift", 1),
                     ("known divergence", "ort-gelugrad-inf", 2)]
    inf = by_backend["ort"][-1]
    assert inf.divergence.id == "ort-gelugrad-inf" and inf.divergence.evidence.startswith("onnxruntime-training 1.19.2")
    assert [cmd.split("--cases ")[1] for _, cmd in inf.examples] == ["float32-infinities/shape=2", "float32-infinities/shape=4"]
    assert inf.not_reproduced_count == 1 and inf.not_reproduced[0][0].case == "infinities/shape=9"
    assert [f.kind for f in by_backend["reference"]] == ["error"]


def test_capabilities_from_probe_rows_and_from_nested_mappings():
    rows = [{"backend": "ort", "op": "GeluGrad", "spec": "com.microsoft::GeluGrad@1", "dtype": "float64",
             "status": "no_kernel", "how": "", "reason": "no double kernel"},
            {"backend": "ort", "op": "GeluGrad", "dtype": "float16", "status": "supported", "how": "cast+kernel", "reason": ""}]
    assert read_capabilities(rows, {"ort"}) == {("GeluGrad", "ort", "float64"): ("no_kernel", "no double kernel"),
                                                ("GeluGrad", "ort", "float16"): ("cast+kernel", "")}
    nested = {"ort": {"GeluGrad": {"float32": "kernel", "bfloat16": {"status": "not_registered", "reason": "r"}}}}
    assert read_capabilities(nested, {"ort"}) == {("GeluGrad", "ort", "float32"): ("kernel", ""),
                                                  ("GeluGrad", "ort", "bfloat16"): ("not_registered", "r")}
    assert read_capabilities(None, {"ort"}) == {} and read_capabilities("junk", {"ort"}) == {}


def test_probed_capability_overrides_what_results_show():
    summary = {"capabilities": [{"backend": "ort", "op": "ReluGrad", "dtype": "float64", "status": "no_kernel",
                                 "how": "", "reason": "no double kernel"}]}
    records = [raw(dtype="float32"), raw(dtype="float64", status="unsupported", budget=None, detail="no kernel registered")]
    op = build(run_of(records, summary)).ops[0]
    caps = {c.dtype: c for _, row in op.capability for c in row}
    assert (caps["float32"].state, caps["float32"].runs) == ("runs", True)
    assert (caps["float64"].state, caps["float64"].runs, caps["float64"].detail) == ("no kernel", False, "no double kernel")


@pytest.mark.parametrize("value, text", [
    ("matches legacy axis (max abs err 3e-08)", ["matches legacy axis (max abs err 3e-08)"]),
    ({"summary": "matches output_negated (max abs err 1e-08)", "matches": "output_negated", "candidates": []},
     ["matches output_negated (max abs err 1e-08)"]),
    ({"matches": "legacy axis", "max_abs": 3e-8}, ["legacy axis (max abs 3e-08)"]),
    ([{"name": "a"}, "b"], ["a", "b"]),
    (None, []),
])
def test_diagnosis_in_any_shape_becomes_text(value, text):
    assert describe_diagnosis(value) == text


def test_diagnoses_group_by_what_they_found_not_their_figures():
    records = [raw(case=f"c{i}", status="fail", diagnosis={"summary": f"matches legacy axis (max abs err {e})"})
               for i, e in enumerate(["3e-08", "2e-08"])]
    records.append(raw(case="x", status="fail", diagnosis="matches none of the 4 alternative semantics tried"))
    records.append(raw(case="y", status="fail", diagnosis="matches none of the 3 alternative semantics tried"))
    records += [raw(case=f"z{k}", status="fail", diagnosis=f"matches none of the 3 alternative semantics tried; nearest: "
                                                           f"output negated ({k} element(s) off, max abs err 2.{k})") for k in (1, 2)]
    op = build(run_of(records)).ops[0]
    # One line per kind of diagnosis, with the figures it spans (never a placeholder), and one example's own text.
    assert [(b, text, n, r.case, example) for b, text, n, r, example in op.diagnoses] == [
        ("ort", "matches legacy axis", 2, "c0", "matches legacy axis (max abs err 3e-08)"),
        ("ort", "matches none of the 3–4 alternative semantics tried", 2, "x",
         "matches none of the 4 alternative semantics tried"),
        ("ort", "matches none of the 3 alternative semantics tried; nearest: output negated", 2, "z1",
         "matches none of the 3 alternative semantics tried; nearest: output negated (1 element(s) off, max abs err 2.1)")]


def test_histogram_bins_each_result_once_per_dtype():
    records = [raw(case=f"c{i}", budget=b) for i, b in enumerate([0.0, 5e-7, 0.05, 0.5, 2.0, "inf"])]
    records.append(raw(case="x", dtype="float16", budget=0.5))
    op = build(run_of(records)).ops[0]
    charts = dict(op.histograms)
    assert set(charts) == {"float32", "float16"}
    titles = re.findall(r"<title>ort: (\d+) result\(s\) with tolerance used ([^<]+)</title>", str(charts["float32"]))
    assert {html.unescape(label): int(n) for n, label in titles} == {"0": 1, "≤1e-6": 1, "≤0.1": 1, "≤1": 1, ">1": 2}


def _self_contained(page: str) -> None:
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_renders_from_a_minimal_or_damaged_run(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    lines = [json.dumps({"op": "ReluGrad", "status": "pass"}), "{not json", json.dumps([1, 2]),
             json.dumps(raw(status="fail", detail="</script><script>alert(1)</script>", diagnosis={"summary": "matches x"})),
             json.dumps(raw(status="weird", budget="nan"))]
    (run_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
    page = write_report(run_dir).read_text()
    _self_contained(page)
    assert "</script><script>alert(1)" not in page
    assert "2 line(s) of results.jsonl are not JSON records" in page and "no summary.json" in page
    assert '<div class="big">NO VERDICT</div>' in page and "no verdict in summary.json" in page
    assert 'class="chip st-other" title="1 weird"' in page


def test_an_interrupted_run_says_so(tmp_path):
    (tmp_path / "results.jsonl").write_text(json.dumps(raw()) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"complete": False, "verdict": {
        "passed": False, "reasons": ["the run was interrupted; results.jsonl holds what finished"]}}))
    report = build_report(tmp_path)
    assert report.verdict_passed is False and "interrupted" in report.reasons[0]
    assert any("did not complete" in p for p in report.problems)


def test_a_run_dir_without_results_is_an_error(tmp_path):
    from harness.report import ReportError

    with pytest.raises(ReportError, match="no results.jsonl"):
        read_run(tmp_path)


def test_bench_example_parses_with_derived_figures():
    bench = bench_mod.load(EXAMPLE_BENCH)
    assert not bench.problems and bench.backends == ["openmp", "ort", "torch", "reference"]
    relu, softmax, conv = bench.rows
    assert relu.ratio("ort") == pytest.approx(0.0021 / 0.0194)
    assert relu.gbs["openmp"] == pytest.approx(50331648 / 0.0021 / 1e9)  # derived from bytes
    assert conv.gflops["openmp"] == 185.0 and conv.gflops["ort"] == pytest.approx(3699376128 / 0.37 / 1e9)
    assert conv.throughput("openmp") == (185.0, "GFLOP/s") and relu.throughput("torch")[1] == "GB/s"
    assert (bench.triad_gbs, bench.sgemm_gflops, bench.threads) == (28.0, 270.0, 2)
    assert relu.shape == "4194304" and relu.spread["openmp"] == 0.04


def test_bench_rows_of_several_levels_keep_their_level_and_limits(tmp_path):
    """One bench file holds every ISA level: a row is labelled with its level and held against its own
    limits (the triad on its bytes, sgemm at its level), never the first level's."""
    data = {"limits": {"triad_gbs": 28.0, "sgemm_gflops": 300.0}, "results": [
        {"op": "LSTMGrad", "size": "large", "isa": "avx512", "flops": 3e9, "median_s": {"openmp": 0.010},
         "sgemm_gflops": 300.0},
        {"op": "LSTMGrad", "size": "large", "isa": "avx2", "flops": 3e9, "median_s": {"openmp": 0.040},
         "sgemm_gflops": 150.0},
        {"op": "ReluGrad", "size": "large", "isa": "avx2", "bytes": 4e7, "median_s": {"openmp": 0.001},
         "triad_gbs": 50.0},
        {"op": "ReluGrad", "size": "small", "bytes": 4e5, "median_s": {"openmp": 0.0001}}]}
    bench = bench_mod.parse(data, "b.json")
    wide, narrow, relu, old = bench.rows
    assert (wide.label, narrow.label) == ("LSTMGrad large avx512", "LSTMGrad large avx2")
    assert wide.limit() == (300.0, "sgemm") and narrow.limit() == (150.0, "sgemm")
    assert relu.limit() == (50.0, "triad") and old.limit() == (28.0, "triad")  # a row without its own: the file's
    assert bench.sgemm_by_isa == {"avx512": 300.0, "avx2": 150.0}
    charts = dict(bench_charts(bench))
    assert not any("sgemm (" in caption for caption in charts)  # no one sgemm line for rows of two levels
    (tmp_path / "results.jsonl").write_text(json.dumps(raw()) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"run_id": "r", "verdict": {"passed": True, "reasons": []}}))
    (tmp_path / "bench.json").write_text(json.dumps(data))
    page = render(build_report(tmp_path))
    assert "<th>isa</th>" in page and "<td>avx2</td>" in page
    assert "300 GFLOP/s at avx512, 150 GFLOP/s at avx2" in page
    # 300 GFLOP/s of avx512's 300, and 75 of avx2's 150 (25 % if held against the first level's)
    assert "100% <small>of sgemm" in page and "50% <small>of sgemm" in page


def test_bench_is_read_defensively():
    bench = bench_mod.parse({"results": [{"op": "A", "median_s": {"openmp": {"median": 0.1}, "ort": 0.2}},
                                         {"op": "B"}, "junk", {"median_s": {"ort": 1}}]}, "b.json")
    assert [r.op for r in bench.rows] == ["A"] and bench.rows[0].ratio("ort") == 0.5
    assert bench.problems == ["b.json: 3 result(s) without an op name or median times were skipped"]
    assert bench_mod.parse([], "x").problems and bench_mod.load(Path("/nonexistent.json")).problems


def test_report_with_bench_and_baseline_renders_both(tmp_path):
    for name, status in (("old", "pass"), ("new", "fail")):
        d = tmp_path / name
        d.mkdir()
        (d / "results.jsonl").write_text(json.dumps(raw(status=status)) + "\n")
        (d / "summary.json").write_text(json.dumps({"run_id": name, "verdict": {"passed": status == "pass", "reasons": []}}))
    (tmp_path / "new" / "bench.json").write_text(EXAMPLE_BENCH.read_text())
    report = build_report(tmp_path / "new", baseline=tmp_path / "old")
    assert report.bench is not None and len(report.bench_charts) == 3
    assert [c.rec.case for c in report.diff.newly_failing] == ["basic/shape=7"]
    page = render(report)
    _self_contained(page)
    assert 'id="performance"' in page and 'id="baseline"' in page and "Newly failing (1)" in page
    assert page.count("<svg") >= 3
