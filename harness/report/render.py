"""Rendering the report model to one self-contained HTML file: the stylesheet and script are inlined,
charts are inline SVG, the case tables travel as JSON inside the page. Nothing is fetched."""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from harness.report import ops as ops_mod
from harness.report.model import Report
from harness.report.status import SHORT, css

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


def table_json(table: dict) -> Markup:
    # "<" escaped so that no "</script>" inside a detail can end the script element.
    return Markup(json.dumps(table, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c"))


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
    return Markup(css_text), Markup(js_text.replace("</script", "<\\/script"))


def render(report: Report) -> str:
    css_text, js_text = assets()
    return environment().get_template("report.html.j2").render(r=report, css_text=css_text, js_text=js_text)
