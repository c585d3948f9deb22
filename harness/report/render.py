"""Rendering the report model to one self-contained HTML file: the stylesheet and script are inlined,
charts are inline SVG, the case tables travel as JSON inside the page. Nothing is fetched."""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from harness.core.status import Status
from harness.report import ops as ops_mod
from harness.report.model import Report
from harness.report.status import SHORT, css, js_rank

HERE = Path(__file__).parent
DIFF_LIMIT = 300  # rows per list in the baseline diff; the rest are counted


def fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.2e}" if abs(x) >= 1e4 or abs(x) < 1e-3 else f"{x:.3g}"


def seconds(x: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"


def observed(detail: str) -> str:
    """A divergent result's detail without the divergence's summary, which its finding already shows."""
    head, sep, rest = detail.partition(" | observed: ")
    return rest if sep and head.startswith("known divergence") else detail


# The case table's row, as harness/report/ops.py table_data builds it and report.js reads it (by position).
ROW_STATUS, ROW_SOURCE, ROW_DETAIL = 4, 11, 12
ROW_FIGURES = (6, 7, 8, 9)  # max abs, max rel, max ULP, tolerance used
ROW_BUDGET = 9
FIGURE_DIGITS = 4  # significant digits the page carries; the table shows 3
UNSUPPORTED_DETAIL = 140  # characters of an unsupported result's reason: the cell's width (the capability table has it all)


def _figure(value, is_budget: bool):
    if not isinstance(value, float) or not math.isfinite(value):
        return value
    short = float(f"{value:.{FIGURE_DIGITS}g}")
    if is_budget and (short > 1) != (value > 1):
        return value  # over the tolerance or not: the table marks it, so no rounding may cross 1
    return int(short) if short.is_integer() and abs(short) < 1e15 else short


def compact_rows(rows: list) -> list:
    """The case table's rows as the page carries them, sized for a ci run's thousands of results: figures
    to FIGURE_DIGITS significant digits; a passed result's detail "within tolerance (xB of SOURCE)" cut to
    "within tolerance", since B and SOURCE are columns of its own; an unsupported result's reason cut to
    what its cell shows; a divergent result's detail without the divergence's summary, which the op's
    section shows once (the row's note names the divergence). The full texts stay in the results file."""
    out = []
    for row in rows:
        row = list(row)
        for i in ROW_FIGURES:
            row[i] = _figure(row[i], i == ROW_BUDGET)
        detail = row[ROW_DETAIL]
        if row[ROW_STATUS] == Status.PASS and isinstance(detail, str) and detail.startswith("within tolerance (x") \
                and (not row[ROW_SOURCE] or detail.endswith(f" of {row[ROW_SOURCE]})")):
            row[ROW_DETAIL] = "within tolerance"
        elif row[ROW_STATUS] == Status.DIVERGENT and isinstance(detail, str):
            row[ROW_DETAIL] = observed(detail)  # the divergence's summary is the op's (its note names it)
        elif row[ROW_STATUS] == Status.UNSUPPORTED and isinstance(detail, str) and len(detail) > UNSUPPORTED_DETAIL:
            row[ROW_DETAIL] = detail[:UNSUPPORTED_DETAIL] + "…"
        out.append(row)
    return out


def table_json(table: dict) -> Markup:
    """The case table's data for report.js: compact JSON (compact_rows); "<" escaped so that no
    "</script>" inside a detail can end the script element."""
    if isinstance(table.get("rows"), list):
        table = {**table, "rows": compact_rows(table["rows"])}
    text = json.dumps(table, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return Markup(text.replace("<", "\\u003c"))


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=False, lstrip_blocks=False)
    env.globals.update(fmt=fmt, css=css, short=lambda s: SHORT.get(s, s), show=ops_mod.show_value,
                       declared=ops_mod.declared_text, seconds=seconds, table_json=table_json, observed=observed, diff_limit=DIFF_LIMIT)
    return env


@lru_cache(maxsize=1)
def assets() -> tuple[Markup, Markup]:
    css_text = (HERE / "assets" / "report.css").read_text(encoding="utf-8")
    js_text = (HERE / "assets" / "report.js").read_text(encoding="utf-8")
    ranks, unknown = js_rank()
    js_text = js_text.replace("__STATUS_RANK__", json.dumps(ranks)).replace("__UNKNOWN_RANK__", str(unknown))
    return Markup(css_text), Markup(js_text.replace("</script", "<\\/script"))


def render(report: Report) -> str:
    css_text, js_text = assets()
    return environment().get_template("report.html.j2").render(r=report, css_text=css_text, js_text=js_text)
