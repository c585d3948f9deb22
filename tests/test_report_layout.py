"""The report's layout and wording, checked on the rendered HTML: the order of the page, declared findings one
line each, the failing banner, the noise left out (a diagnosis that matched nothing, relative errors near
zero), and ids that are unique and that every in-page link lands on."""
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.report import build_report
from harness.report.data import RunData, to_rec
from harness.report.model import build
from harness.report.ops import NEAR_ZERO
from harness.report.render import render
from harness.report.repro import command

GELU = "com.microsoft::GeluGrad@1"
POOL = "ai.onnx::MaxPoolGrad@9"


def raw(op="GeluGrad", spec=GELU, backend="ort", dtype="float32", case="basic/shape=7", status="pass", **extra):
    outputs = extra.pop("outputs", None)
    if outputs is None:
        outputs = {"dX": {"passed": status == "pass", "size": 7, "max_abs": 1e-6, "max_rel": 1e-5, "max_ulp": 3.0,
                          "budget_used": 0.01, "tolerance": {"atol": 1e-5, "rtol": 1e-4, "source": "default(float32)"}}}
    record = {"spec": spec, "op": op, "backend": backend, "dtype": dtype, "case": case, "group": case.split("/")[0],
              "valid": True, "tier": "ci", "seed": 1, "params": {}, "attributes": {}, "status": status,
              "failure": None, "detail": "", "divergence": None, "outputs": outputs, "check": "reference"}
    record.update(extra)
    return record


def page_of(records, catalog=None, summary=None, baseline=None) -> str:
    summary = summary if summary is not None else {"run_id": "r", "verdict": {"passed": True, "reasons": []}}
    run = RunData(Path("r"), summary, [to_rec(r) for r in records])
    base = RunData(Path("b"), {"run_id": "b"}, [to_rec(r) for r in baseline]) if baseline is not None else None
    specs = {s.id: s for s in catalog.specs} if catalog is not None else {}
    return render(build(run, specs, baseline=base))


class Ids(HTMLParser):
    """Every id="..." in the page, every href="#..." and the tags in order (tag, id, class, open)."""

    def __init__(self, page: str):
        super().__init__()
        self.ids, self.links, self.tags = [], [], []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") is not None:
            self.ids.append(a["id"])
        if (a.get("href") or "").startswith("#"):
            self.links.append(a["href"][1:])
        self.tags.append((tag, a.get("id"), a.get("class") or "", "open" in a))


def section(page: str, start: str, end: str) -> str:
    return page[page.index(start):page.index(end, page.index(start))]


def declared_divergences(catalog) -> list[dict]:
    """A run like the real ones: ort's divergences on GeluGrad, inherited by ort-autograd, and one on MaxPoolGrad
    that crashed in some cases and returned wrong values in others (it once gave two elements one id)."""
    recs = []
    for backend in ("ort", "ort-autograd"):
        recs += [raw(backend=backend, case=f"infinities/shape={k}", status="divergent", failure="wrong_values",
                     divergence="ort-gelugrad-inf",
                     detail="known divergence ort-gelugrad-inf: At X = +/-inf ... | observed: dX: 2 of 4 element(s) "
                            "outside tolerance | diagnosis: matches none of the 2 alternative semantics tried",
                     diagnosis={"summary": "matches none of the 2 alternative semantics tried", "matches": None})
                 for k in range(12)]
    recs += [raw(op="MaxPoolGrad", spec=POOL, case=f"bad_indices/k={k}", status="divergent",
                 failure="crash" if k % 2 else "wrong_values", divergence="ort-unchecked-indices",
                 detail="worker killed by SIGSEGV" if k % 2 else "known divergence ort-unchecked-indices: ... | observed: x")
             for k in range(4)]
    recs += [raw(case=f"basic/shape={k}") for k in range(5)]
    recs.append(raw(op="MaxPoolGrad", spec=POOL))
    return recs


def test_every_id_is_unique_and_every_in_page_link_lands(catalog):
    records = declared_divergences(catalog)
    records.append(raw(case="x", status="fail", failure="wrong_values", detail="dX: 1 of 7 element(s) outside tolerance"))
    records.append(raw(case="y", status="waived", waiver="wrong_values", detail="waived"))  # a waiver named like a failure kind
    records.append(raw(check="gradient", backend="reference", case="g", detail="gradient"))
    page = page_of(records, catalog)
    parsed = Ids(page)
    assert [i for i, n in Counter(parsed.ids).items() if n > 1] == []
    assert all(re.fullmatch(r"\S+", i) for i in parsed.ids)
    missing = sorted(set(parsed.links) - set(parsed.ids))
    assert missing == []
    # The divergence that crashed and returned wrong values is one finding, counted once.
    assert page.count('id="finding-ort-MaxPoolGrad-ort-unchecked-indices"') == 1


def test_the_gradient_proof_link_lands_on_its_section(catalog):
    records = [raw(check="gradient", backend="reference", case=f"g{k}", detail="gradient ok") for k in range(3)]
    records += declared_divergences(catalog)
    page = page_of(records, catalog)
    parsed = Ids(page)
    assert parsed.ids.count("gradient") == 1 and "gradient" in parsed.links
    tag, _, _, _ = next(t for t in parsed.tags if t[1] == "gradient")
    assert tag == "section"
    assert re.search(r'<section id="gradient">\s*<h2>Gradient proof', page)
    # Every check passed: the table per op is one click away, not laid out.
    proof = section(page, '<section id="gradient">', "</section>")
    assert "3 case(s) of 1 op(s) checked:\n    every one passed" in proof
    assert '<details class="block">\n  <summary>per op</summary>' in proof


def test_the_page_reads_verdict_then_matrix_then_environment_collapsed(catalog):
    page = page_of(declared_divergences(catalog), catalog)
    parsed = Ids(page)
    order = [i for i in parsed.ids if i in ("verdict", "matrix", "environment", "findings", "ops")]
    assert order == ["verdict", "matrix", "environment", "findings", "ops"]
    env = next(t for t in parsed.tags if t[1] == "environment")
    assert env[0] == "details" and env[3] is False  # collapsed
    # The matrix: the op column and an "all" column are marked to stay in place, in a scroll container.
    matrix = section(page, '<section id="matrix">', "</section>")
    assert 'class="matrix-scroll"' in matrix
    assert matrix.count('<th class="opname">') == 2 and matrix.count(' all" title=') == 2  # one row per op


def test_declared_divergences_are_one_line_each_with_a_count(catalog):
    page = page_of(declared_divergences(catalog), catalog)
    findings = section(page, '<section id="findings">', "</section>")
    lines = re.findall(r'<details class="finding-line[^"]*" id="([^"]+)" role="listitem">', findings)
    # one per (op, backend, divergence): GeluGrad on ort and on ort-autograd, MaxPoolGrad on ort
    assert lines == ["finding-ort-GeluGrad-ort-gelugrad-inf", "finding-ort-autograd-GeluGrad-ort-gelugrad-inf",
                     "finding-ort-MaxPoolGrad-ort-unchecked-indices"]
    assert "<details open" not in findings and " open>" not in findings  # collapsed
    counts = re.findall(r'<span class="n" title="([^"]*)">(\d+)</span>', findings)
    assert [n for _, n in counts] == ["12", "12", "4"]
    assert counts[2][0].startswith("2 crash, 2 wrong values")
    assert "Nothing unexpected: every result that is not a pass is declared below." in findings
    # The examples stay one click away, inside each line.
    line = findings[findings.index('id="finding-ort-GeluGrad-ort-gelugrad-inf"'):]
    line = line[:line.index("</details>")]
    assert line.count('<code class="repro">') == 2 and "Evidence:" in line  # two examples of its one dtype
    assert '10 more in the <a href="#cases-GeluGrad">case table of GeluGrad</a>' in line


def test_unexpected_and_new_findings_come_first_in_full(catalog):
    records = declared_divergences(catalog)
    records.append(raw(op="MaxPoolGrad", spec=POOL, case="odd/k=1", status="crashed", failure="crash",
                       detail="worker killed by SIGSEGV"))
    baseline = [r for r in records if r["op"] != "GeluGrad" or r["backend"] != "ort-autograd"]
    page = page_of(records, catalog, baseline=baseline)
    findings = section(page, '<section id="findings">', "</section>")
    attention = findings[:findings.index('class="declared-head"')]
    # the undeclared crash, and the divergence ort-autograd did not have in the baseline, shown in full first
    assert 'id="finding-ort-MaxPoolGrad-crash"' in attention
    assert 'id="finding-ort-autograd-GeluGrad-ort-gelugrad-inf"' in attention and "new since the baseline" in attention
    declared = findings[findings.index('class="declared-head"'):]
    assert 'id="finding-ort-GeluGrad-ort-gelugrad-inf"' in declared
    assert "finding-ort-autograd-GeluGrad" not in declared


def test_matches_none_is_said_only_for_unexpected_failures_and_never_with_a_placeholder(catalog):
    records = declared_divergences(catalog)
    failing = [raw(case=f"basic/shape={k}", backend="openmp", status="fail", failure="wrong_values",
                   detail=f"dX: 3 of 7 element(s) outside tolerance | diagnosis: matches none of the {k} alternative "
                          "semantics tried",
                   diagnosis={"summary": f"matches none of the {k} alternative semantics tried", "matches": None})
               for k in (2, 3)]
    page = page_of(records + failing, catalog, {"verdict": {"passed": False, "reasons": ["2 unexpected failure(s)"]}})
    assert "matches none of the N" not in page and "alternative semantics tried" in page
    op = section(page, 'id="op-GeluGrad"', "</details>\n")
    diagnosis = section(op, "<h4>Diagnosis", "</ul>")
    # the failures' diagnosis, with the figures it spans; nothing for the 24 declared divergences
    assert re.findall(r"<li><b>(\S+)</b>: ([^<]+) <span", diagnosis) == [
        ("openmp", "matches none of the 2–3 alternative semantics tried")]
    findings = section(page, '<section id="findings">', "</section>")
    declared = findings[findings.index('class="declared-head"'):]
    assert "matches none" not in declared and "outside tolerance" in declared
    assert "matches none of the 2 alternative semantics tried" in findings[:findings.index('class="declared-head"')]
    # the case table: no "matches none" on the declared rows, kept on the failures'
    table = json.loads(re.search(r'<script type="application/json" id="data-op-GeluGrad">(.*?)</script>', page).group(1))
    for row in table["rows"]:
        text = row[12] + " " + row[13]
        assert ("matches none" in text) == (row[4] == "fail"), row


def test_max_rel_and_ulp_are_not_figures_where_a_pass_has_a_reference_near_zero():
    tol = {"atol": 1e-5, "rtol": 1e-4, "source": "default(float32)"}
    near = {"passed": True, "max_abs": 1.03e-7, "max_rel": 5.08e45, "max_ulp": 23989402.0, "budget_used": 0.0083,
            "tolerance": tol}
    fine = {"passed": True, "max_abs": 2e-7, "max_rel": 3e-6, "max_ulp": 12.0, "budget_used": 0.02, "tolerance": tol}
    records = [raw(case="near_zero", outputs={"dX": near}),
               raw(case="fine", outputs={"dX": fine}),
               raw(case="both", outputs={"dX": near, "dB": fine}),
               raw(case="failing", status="fail", failure="wrong_values", outputs={"dX": {**near, "passed": False}})]
    page = page_of(records)
    table = json.loads(re.search(r'<script type="application/json" id="data-op-GeluGrad">(.*?)</script>', page).group(1))
    rows = {row[2]: row for row in table["rows"]}
    assert rows["near_zero"][6:9] == [1.03e-7, NEAR_ZERO, NEAR_ZERO]  # max abs kept: it decided the verdict
    assert rows["fine"][6:9] == [2e-7, 3e-6, 12.0]
    assert rows["both"][6:9] == [2e-7, 3e-6, 12.0]  # the other output's figures still mean something
    # a failure's figures are all shown (to the 4 significant digits the page's data keeps)
    assert rows["failing"][6:9] == pytest.approx([1.03e-7, 5.08e45, 23989402.0], rel=5e-4)
    assert page.count("5.08e+45") == 1  # the failing row's, nowhere else
    # the column heads say what a dash means
    assert re.search(r'<th data-col="7" class="n" title="[^"]*near zero[^"]*">max rel</th>', page)


def test_the_failing_banner_names_the_ops_and_a_case_with_its_rerun_command(catalog):
    records = declared_divergences(catalog)
    records += [raw(backend="openmp", case=f"basic/shape={k}", status="fail", failure="wrong_values",
                    detail="dX: 3 of 7 element(s) outside tolerance") for k in (11, 12)]
    records.append(raw(op="MaxPoolGrad", spec=POOL, backend="openmp", case="odd/k=1", status="crashed",
                       failure="crash", detail="worker killed by SIGSEGV"))
    summary = {"run_id": "r", "verdict": {"passed": False, "reasons": ["2 unexpected failure(s)",
                                                                     "1 crash(es) or hang(s) not declared in a spec or waived"]}}
    page = page_of(records, catalog, summary)
    verdict = section(page, '<section id="verdict"', "</section>")
    assert '<div class="big">FAIL</div>' in verdict
    banner = section(verdict, 'class="blockers"', "</div>")
    assert "2 op(s) with unexpected results" in banner
    items = re.findall(r"<li>.*?</li>", banner, re.S)
    assert len(items) == 2
    gelu, pool = items  # most results first
    assert '<a href="#finding-openmp-GeluGrad-wrong_values"><b>GeluGrad</b></a> on openmp: 2 wrong values' in gelu
    assert "float32-basic/shape=11" in gelu
    assert command("GeluGrad", "openmp", "float32", "basic/shape=11", "ci", []) in gelu
    assert "<b>MaxPoolGrad</b></a> on openmp: 1 crash" in pool and "float32-odd/k=1" in pool
    # no banner on a passing run
    passing = page_of(declared_divergences(catalog), catalog)
    assert 'class="blockers"' not in section(passing, '<section id="verdict"', "</section>")


def test_an_op_with_an_unexpected_result_is_open_and_the_others_are_one_line(catalog):
    records = declared_divergences(catalog)
    records.append(raw(op="MaxPoolGrad", spec=POOL, backend="openmp", case="odd", status="error", detail="spec bug"))
    parsed = Ids(page_of(records, catalog))
    ops = {t[1]: t for t in parsed.tags if t[1] and t[1].startswith("op-")}
    assert ops["op-GeluGrad"][0] == "details" and ops["op-GeluGrad"][3] is False
    assert ops["op-MaxPoolGrad"][3] is True


def test_a_real_small_run_renders_with_unique_ids(tmp_path):
    """A real run of the two ops whose findings once shared ids (a declared divergence that crashed in some cases
    and returned wrong values in others)."""
    from harness.cli import main

    out = tmp_path / "run"
    assert main(["run", "--tier", "ci", "--ops", "GeluGrad,MaxPoolGrad", "--out", str(out), "--no-progress"]) == 0
    report = build_report(out)
    page = render(report)
    parsed = Ids(page)
    assert [i for i, n in Counter(parsed.ids).items() if n > 1] == []
    assert sorted(set(parsed.links) - set(parsed.ids)) == []
    assert "matches none of the N" not in page
    declared = [f for f in report.declared]
    assert declared and all(f.count >= 1 for f in declared)
    # every declared finding is a line of the page, collapsed
    for f in declared:
        assert re.search(rf'<details class="finding-line[^"]*" id="{re.escape(f.anchor)}" role="listitem">', page)


def test_a_waived_finding_line_says_the_waivers_reason():
    records = [raw(case=f"basic/shape={k}", status="waived", waiver="ort-gelu-slow-path", failure="wrong_values",
                   detail="dX: 1 of 7 element(s) outside tolerance") for k in range(3)]
    summary = {"run_id": "r", "verdict": {"passed": True, "reasons": []},
               "waivers": {"ort-gelu-slow-path": {"kind": "values", "backend": "ort", "op": "GeluGrad", "state": "active",
                                                  "covered": 3, "waived": 3, "xpass": 0, "stale": False,
                                                  "reason": "the team's vectorised path rounds twice (tracked upstream)"}}}
    page = page_of(records, summary=summary)
    line = section(page, 'id="finding-ort-GeluGrad-ort-gelu-slow-path"', "</details>")
    assert '<span class="tag">waiver</span>' in line and '<span class="n" title="3 wrong values · float32">3</span>' in line
    assert '<span class="sum-c">the team&#39;s vectorised path rounds twice (tracked upstream)</span>' in line
    assert '(<a href="#waivers">waiver health</a>)' in line and 'id="waivers"' in page
