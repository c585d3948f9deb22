"""The report fits a screen, checked in Chromium at 1366 and 1920 px: the verdict above the matrix, the matrix's
op and "all" columns pinned and the rest reachable in a visible scroll container, a ci-sized passing run's
page under 10,000 px with every finding one click away, and links that land on their sections.

Two runs: a real `--tier ci` run of three ops (four backends, every dtype, declared crashes and divergences),
and a synthetic run the size of the full ci tier (27 ops, 16 columns, about 14,000 results, about 140 declared
divergences with long messages), written as `opconform run` writes one. Screenshots go to tmp_path, or to
$OPCONFORM_SCREENSHOTS when set (to look at them).
"""
import json
import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from harness.cli import main
from harness.report import build_report, write_report
from harness.report.ops import near_zero

WIDTHS = (1366, 1920)
HEIGHT = 900
PAGE_LIMIT = 10_000  # px: a passing ci run's page
BACKENDS = ("reference", "openmp", "ort", "ort-autograd")
DTYPES = ("float32", "float64", "float16", "bfloat16")


@pytest.fixture(scope="module")
def ci_subset(tmp_path_factory):
    out = tmp_path_factory.mktemp("layout") / "ci"
    assert main(["run", "--tier", "ci", "--ops", "GeluGrad,MaxPoolGrad,GatherGrad", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def synthetic_ci_run(out: Path, catalog) -> Path:
    """A passing run the size of the full ci tier, with the shape of its results: every op on four backends and
    four dtypes, ort's declared divergences inherited by ort-autograd, unsupported dtypes, gradient checks."""
    specs = [s for s in catalog.specs if s.subject == "kernel"][:27]  # the kernel specs: every backend runs them
    assert len(specs) == 27
    tol = {"atol": 1e-5, "rtol": 1e-4, "source": "default(float32)"}
    records = []
    for i, spec in enumerate(specs):  # 72 divergences, 144 lines with ort-autograd's (the full ci run: 137)
        divergences = [f"ort-{spec.op.lower()}-divergence-{k}" for k in range(3 if i % 3 else 2)]
        for backend in BACKENDS:
            for dtype in DTYPES:
                for k in range(32):
                    case = f"group{k % 5}/shape={k}x{k + 3}"
                    status, divergence, detail = "pass", None, ""
                    if backend in ("ort", "ort-autograd"):
                        if dtype == "bfloat16" or (dtype == "float64" and k % 3 == 0):
                            status, detail = "unsupported", "no kernel registered for this type"
                        elif dtype == "float32" and k < 2 * len(divergences):
                            status, divergence = "divergent", divergences[k % len(divergences)]
                            detail = (f"known divergence {divergence}: the backend does something else | observed: "
                                      + "ORT raised: " + "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code " * 12)
                    records.append({"spec": spec.id, "op": spec.op, "backend": backend, "dtype": dtype, "case": case,
                                    "group": case.split("/")[0], "valid": True, "tier": "ci", "seed": k,
                                    "params": {}, "attributes": {}, "status": status,
                                    "failure": "wrong_values" if divergence else None, "detail": detail,
                                    "divergence": divergence, "check": "reference",
                                    "outputs": {"dX": {"passed": status == "pass", "max_abs": 1e-7, "max_rel": 1e-6,
                                                       "max_ulp": 2.0, "budget_used": 0.01, "tolerance": tol}}})
        records += [{"spec": spec.id, "op": spec.op, "backend": "reference", "dtype": "float64", "case": f"g/{k}",
                     "tier": "ci", "check": "gradient", "status": "pass", "detail": "gradient", "outputs": {}}
                    for k in range(10)]
    out.mkdir(parents=True)
    with (out / "results.jsonl").open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    summary = {"run_id": "synthetic-ci", "tier": "ci", "seed": 0, "threads": 1, "results": len(records),
               "backends": {b: {"available": True} for b in BACKENDS}, "verdict": {"passed": True, "reasons": []},
               "environment": {"python": "3.11.7", "onnxruntime-training": "1.19.2"}}
    (out / "summary.json").write_text(json.dumps(summary))
    write_report(out)
    return out


@pytest.fixture(scope="module")
def ci_sized(tmp_path_factory, catalog):
    return synthetic_ci_run(tmp_path_factory.mktemp("layout") / "ci-sized", catalog)


@pytest.fixture
def shots(tmp_path) -> Path:
    where = os.environ.get("OPCONFORM_SCREENSHOTS")
    path = Path(where) if where else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_report(page, run: Path, width: int) -> list[str]:
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.set_viewport_size({"width": width, "height": HEIGHT})
    page.goto((run / "index.html").as_uri())
    return errors


RECTS = """() => {
  const rect = el => { const b = el.getBoundingClientRect(); return {top: b.top, bottom: b.bottom, left: b.left, right: b.right}; };
  const box = document.querySelector('.matrix-scroll');
  const style = getComputedStyle(box);
  return {
    box: rect(box), scrollWidth: box.scrollWidth, clientWidth: box.clientWidth, overflowX: style.overflowX,
    scrollbar: box.offsetHeight - box.clientHeight,
    opHead: rect(document.querySelector('table.matrix thead th.opname')),
    allHead: rect(document.querySelector('table.matrix thead th.all')),
    opCell: rect(document.querySelector('table.matrix tbody tr th.opname')),
    allCell: rect(document.querySelector('table.matrix tbody tr td.all')),
    firstDtype: rect(document.querySelector('table.matrix thead tr.h2 th:first-child')),
    lastDtype: rect(document.querySelector('table.matrix thead tr.h2 th:last-child')),
    header: rect(document.querySelector('header.top')),
    viewport: {width: innerWidth, height: innerHeight},
  };
}"""


def inside(r: dict, outer: dict, slack: float = 1.0) -> bool:
    return (r["left"] >= outer["left"] - slack and r["right"] <= outer["right"] + slack
            and r["top"] >= outer["top"] - slack and r["bottom"] <= outer["bottom"] + slack)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("which", ["ci_subset", "ci_sized"])
def test_the_matrix_fits_the_window_with_its_op_and_all_columns_pinned(page, request, which, width, shots):
    run = request.getfixturevalue(which)
    errors = open_report(page, run, width)
    # The verdict first, then the matrix, then the environment (collapsed).
    order = page.evaluate("""() => ['#verdict', '#matrix', '#environment'].map(s => {
        const b = document.querySelector(s).getBoundingClientRect(); return [b.top, b.bottom]; })""")
    (_, verdict_bottom), (matrix_top, matrix_bottom), (env_top, _) = order
    assert verdict_bottom <= matrix_top and matrix_bottom <= env_top
    expect(page.locator("#environment")).not_to_have_attribute("open", "")

    page.evaluate("document.querySelector('.matrix-scroll').scrollIntoView({block: 'start'})")
    m = page.evaluate(RECTS)
    viewport = {"left": 0, "top": 0, "right": m["viewport"]["width"], "bottom": m["viewport"]["height"]}
    # The whole scroll container, its scrollbars included, is on screen below the page's header.
    assert inside(m["box"], viewport) and m["box"]["top"] >= m["header"]["bottom"] - 1
    overflows = m["scrollWidth"] > m["clientWidth"]
    if overflows:
        assert m["overflowX"] in ("auto", "scroll") and m["scrollbar"] > 0  # a scrollbar takes room: visible
        expect(page.locator("#matrix .scroll-hint")).to_be_visible()
        expect(page.locator(".matrix-scroll")).to_have_class("matrix-scroll more-right")
    else:
        expect(page.locator("#matrix .scroll-hint")).to_be_hidden()
    if which == "ci_sized" and width == 1366:
        assert overflows  # 16 columns do not fit 1366 px: this run checks the scrolling path
    for name in ("opHead", "allHead", "opCell", "allCell"):
        assert inside(m[name], m["box"]) and inside(m[name], viewport), (name, m[name], m["box"])
    assert m["firstDtype"]["left"] >= m["opHead"]["right"] - 1  # no column starts under the pinned op column
    page.screenshot(path=str(shots / f"{which}-{width}-matrix.png"))

    # Scrolled to the far side, the last backend's last column shows between the pinned columns.
    page.evaluate("const b = document.querySelector('.matrix-scroll'); b.scrollLeft = b.scrollWidth")
    m = page.evaluate(RECTS)
    assert inside(m["lastDtype"], m["box"]) and m["lastDtype"]["right"] <= m["allHead"]["left"] + 1
    assert m["lastDtype"]["left"] >= m["opHead"]["right"] - 1
    if overflows:
        expect(page.locator(".matrix-scroll")).to_have_class("matrix-scroll more-left")
        page.screenshot(path=str(shots / f"{which}-{width}-matrix-scrolled.png"))
    assert errors == []


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("which", ["ci_subset", "ci_sized"])
def test_a_passing_ci_page_is_short_with_every_finding_one_click_away(page, request, which, width, shots):
    run = request.getfixturevalue(which)
    report = build_report(run)
    assert report.verdict_passed is True and len(report.declared) >= (130 if which == "ci_sized" else 10)
    errors = open_report(page, run, width)
    height = page.evaluate("document.documentElement.scrollHeight")
    page_width = page.evaluate("document.documentElement.scrollWidth")
    print(f"{which} at {width} px: page {height} px tall, {page_width} px wide")
    assert height < PAGE_LIMIT
    assert page_width <= width  # nothing pushes the page sideways
    # Every declared finding is a visible line (no closed section around it); one click opens its examples.
    lines = page.locator("details.finding-line")
    expect(lines).to_have_count(len(report.declared))
    hidden = page.evaluate("""() => [...document.querySelectorAll('details.finding-line > summary')]
        .filter(s => !s.getClientRects().length || s.parentElement.parentElement.closest('details:not([open])'))
        .map(s => s.parentElement.id)""")
    assert hidden == []
    line = lines.nth(len(report.declared) // 2)
    expect(line.locator("code.repro").first).to_be_hidden()
    line.locator("summary").click()
    expect(line.locator("code.repro").first).to_be_visible()
    # No id twice in the live page.
    dupes = page.evaluate("""() => { const seen = {}; const out = [];
        document.querySelectorAll('[id]').forEach(e => { if (seen[e.id]) out.push(e.id); seen[e.id] = 1; }); return out; }""")
    assert dupes == []
    page.screenshot(path=str(shots / f"{which}-{width}-full.png"), full_page=True)
    assert errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_gradient_proof_link_lands_on_its_section(page, ci_sized, width):
    errors = open_report(page, ci_sized, width)

    def lands():
        page.evaluate("window.scrollTo(0, 0)")
        page.locator('header.top nav a[href="#gradient"]').click()
        page.wait_for_timeout(400)  # anything that would move the page afterwards has had its chance
        at = page.evaluate("""() => {
            const s = document.getElementById('gradient'), b = s.getBoundingClientRect();
            const margin = parseFloat(getComputedStyle(s).scrollMarginTop);
            const end = document.documentElement.scrollHeight - innerHeight;
            return {scrollY, want: Math.min(b.top + scrollY - margin, end), top: b.top, bottom: b.bottom,
                    header: document.querySelector('header.top').getBoundingClientRect().bottom, height: innerHeight};
        }""")
        # where the section's top sits just below the sticky header, or as near as the page's end allows
        assert abs(at["scrollY"] - at["want"]) <= 2, at
        assert at["top"] >= at["header"] - 1 and at["top"] < at["height"] - 100, at

    page.evaluate("window.scrollTo(0, 0)")

    lands()
    # With the op section right above it open (its case table is drawn then), the link still lands.
    last = page.locator("details.op").last
    last.locator("summary").first.click()
    expect(last.locator(".cases tbody tr.row").first).to_be_attached()
    lands()
    assert errors == []


def test_a_matrix_cell_opens_its_op_and_near_zero_figures_explain_themselves(page, ci_subset, shots):
    """A passing GeluGrad result on ort whose reference is near zero: its max rel and ULP show a dash with
    a tooltip naming the absolute error that decided the verdict."""
    report = build_report(ci_subset)
    near = [r for r in report.run.records if r.op == "GeluGrad" and r.backend == "ort" and r.dtype == "float32"
            and near_zero(r)[2] and near_zero(r)[0] is None]
    assert near, "the ci tier's GeluGrad wide_range cases have passing values near zero"
    errors = open_report(page, ci_subset, 1366)
    op = page.locator("#op-GeluGrad")
    expect(op).not_to_have_attribute("open", "")
    page.locator('a.jump[data-op="GeluGrad"][data-backend="ort"][data-dtype="float32"]').click()
    expect(op).to_have_attribute("open", "")
    op.locator("input.f-text").fill(near[0].case)
    row = op.locator("tbody tr.row").filter(has=page.locator(f'td.mono:text-is("{near[0].case}")'))
    expect(row).to_have_count(1)
    cells = row.locator("td.near0")
    expect(cells).to_have_count(2)  # max rel and ULP
    expect(cells.first).to_have_text("—")
    title = cells.first.get_attribute("title")
    assert "near zero" in title and "max abs err" in title and "1e-05 + 0.0001·|ref|" in title
    assert "e+45" not in row.inner_text() and "e+7" not in row.inner_text()
    row.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "ci_subset-1366-near-zero.png"))
    assert errors == []


def test_links_into_closed_sections_open_them(page, ci_subset):
    """The environment, an op and a finding's case table are closed until a link leads into them."""
    report = build_report(ci_subset)
    errors = open_report(page, ci_subset, 1366)
    env = page.locator("#environment")
    expect(env.locator("dl.env")).to_be_hidden()
    page.locator('header.top nav a[href="#environment"]').click()
    expect(env).to_have_attribute("open", "")
    expect(env.locator("dl.env")).to_be_in_viewport()
    # a declared finding's "more in the case table" link opens the op's section at its table
    f = next(f for f in report.declared if f.count > len(f.examples))
    line = page.locator(f"#{f.anchor}")
    line.locator("summary").click()
    expect(page.locator(f"#op-{f.op}")).not_to_have_attribute("open", "")
    line.locator(f'a[href="#cases-{f.op}"]').click()
    expect(page.locator(f"#op-{f.op}")).to_have_attribute("open", "")
    expect(page.locator(f"#cases-{f.op}")).to_be_in_viewport()
    expect(page.locator(f"#op-{f.op} .cases tbody tr.row").first).to_be_visible()
    assert errors == []
