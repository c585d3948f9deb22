"""The report as a user sees it: a real small run opened in headless Chromium."""
import json

import pytest
from playwright.sync_api import expect

from harness.cli import main
from harness.core.spec_loader import default_root
from harness.report import build_report, write_report
from harness.report.repro import command, run_flags


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("browser") / "run"
    assert main(["run", "--tier", "smoke", "--ops", "ReluGrad,GeluGrad", "--out", str(out), "--no-progress"]) == 0
    return out


def watch_errors(page) -> list[str]:
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


def test_report_renders_and_filters(page, run_dir, tmp_path):
    errors = watch_errors(page)
    model = build_report(run_dir)
    page.goto((run_dir / "index.html").as_uri())
    expect(page.locator("#verdict .big")).to_have_text("PASS")

    # The matrix: one row per op, every cell showing passed/total as the model counts them.
    rows = page.locator("table.matrix tbody tr")
    expect(rows).to_have_count(len(model.matrix))
    for i, row in enumerate(model.matrix):
        cells = rows.nth(i).locator("td.cell")
        expect(cells).to_have_count(len(model.columns) + 1)
        for j, cell in enumerate(row.cells):
            expect(cells.nth(j).locator(".frac")).to_have_text(f"{cell.passed}/{cell.total}")

    # An op section that reads like the op's documentation: one line until opened (the run passed).
    section = page.locator("#op-GeluGrad")
    expect(section).not_to_have_attribute("open", "")
    section.locator("summary").first.click()
    expect(section).to_have_attribute("open", "")
    expect(section.locator("h2")).to_contain_text("GeluGrad")
    expect(section.locator("pre.formula")).to_contain_text("Phi(X)")
    expect(section.locator("table.doc").first).to_contain_text("grad output")

    # A chart: the error histograms are drawn, with visible bars.
    charts = section.locator("svg.histogram")
    expect(charts).to_have_count(len(dict(next(o for o in model.ops if o.name == "GeluGrad").histograms)))
    bar = charts.first.locator("rect.bar").first
    box = bar.bounding_box()
    assert box and box["width"] > 1 and box["height"] > 0

    # The case table: the status filter and the text filter change the row count.
    gelu = [r for r in model.run.records if r.op == "GeluGrad"]
    table = section.locator(".cases")
    table.scroll_into_view_if_needed()  # tables are drawn as they come near the viewport
    body = table.locator("tbody tr.row")
    expect(body).to_have_count(min(len(gelu), 50))  # one page of 50 rows
    expect(table.locator(".count")).to_have_text(f"{len(gelu)} of {len(gelu)} results")
    unsupported = sum(r.status == "unsupported" for r in gelu)
    assert 0 < unsupported < len(gelu)
    table.locator("select.f-status").select_option("unsupported")
    expect(body).to_have_count(unsupported)
    expect(table.locator(".count")).to_have_text(f"{unsupported} of {len(gelu)} results")
    table.locator("select.f-status").select_option("")
    table.locator("input.f-text").fill("shape=7")
    expect(body).to_have_count(sum("shape=7" in r.case for r in gelu))

    # Sorting by tolerance used puts the largest first; a row opens its repro command.
    table.locator("input.f-text").fill("")
    table.locator("th[data-col='9']").click()
    worst = max((r for r in gelu if r.budget is not None), key=lambda r: r.budget)
    first = body.first
    expect(first.locator("td").nth(2)).to_have_text(worst.case)
    first.click()
    flags = run_flags(model.run.summary, default_root())
    expect(table.locator("tr.more code.repro")).to_have_text(
        command("GeluGrad", first.locator("td").nth(0).inner_text(), first.locator("td").nth(1).inner_text(),
                worst.case, worst.tier, flags))

    # A matrix cell opens the op's section (closed until then) and its table filtered to its backend and dtype.
    expect(page.locator("#op-ReluGrad")).not_to_have_attribute("open", "")
    page.locator('a.jump[data-op="ReluGrad"][data-backend="ort"][data-dtype="float64"]').click()
    expect(page.locator("#op-ReluGrad")).to_have_attribute("open", "")
    expect(page.locator("#op-ReluGrad .cases .count")).to_be_in_viewport()
    relu_f64 = sum(r.op == "ReluGrad" and r.backend == "ort" and r.dtype == "float64" for r in model.run.records)
    relu = sum(r.op == "ReluGrad" for r in model.run.records)
    expect(page.locator("#op-ReluGrad .cases .count")).to_have_text(f"{relu_f64} of {relu} results")

    page.locator("#matrix").scroll_into_view_if_needed()
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 20_000
    assert errors == []


def test_browser_builds_the_same_repro_command_as_python(page, tmp_path):
    """Case ids with glob and shell metacharacters: the JavaScript command equals repro.command's."""
    run = tmp_path / "tricky"
    run.mkdir()
    ids = ["odd/x=[1, 2];y=*", "quote/it's=?"]
    records = [{"spec": "com.microsoft::ReluGrad@1", "op": "ReluGrad", "backend": "ort", "dtype": "float16", "case": c,
                "tier": "nightly", "check": "reference", "status": "fail", "detail": "synthetic", "outputs": {}}
               for c in ids]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"run_id": "tricky", "seed": 3, "threads": 2}
    (run / "summary.json").write_text(json.dumps(summary))
    errors = watch_errors(page)
    page.goto(write_report(run).as_uri())
    page.locator("#op-ReluGrad .cases").scroll_into_view_if_needed()
    body = page.locator("#op-ReluGrad .cases tbody tr.row")
    expect(body).to_have_count(2)
    for i, case in enumerate(ids):
        body.nth(i).click()
        expected = command("ReluGrad", "ort", "float16", case, "nightly", run_flags(summary, default_root()))
        expect(page.locator("#op-ReluGrad tr.more code.repro").nth(i)).to_have_text(expected)
    assert errors == []
