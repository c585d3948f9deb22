"""Inline SVG charts, drawn by hand: small, deterministic, no plotting dependency.

Colours are CSS classes (`s0`..`s7` for series, `limit` for reference lines), so the stylesheet
decides the palette and every bar carries a <title> tooltip.
"""
from __future__ import annotations

import math
from html import escape

from markupsafe import Markup

# Error histogram bins over "tolerance used" (error / allowed error): exact, then decades up to the
# limit 1, then everything beyond it (which fails unless a divergence or waiver explains it).
BUDGET_EDGES = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
BUDGET_LABELS = ("0", "≤1e-6", "≤1e-5", "≤1e-4", "≤1e-3", "≤0.01", "≤0.1", "≤1", ">1")


def budget_bin(budget: float) -> int:
    if budget == 0:
        return 0
    for i, edge in enumerate(BUDGET_EDGES):
        if budget <= edge:
            return i + 1
    return len(BUDGET_EDGES) + 1


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def histogram(counts: dict[str, list[int]], series: list[str], title: str) -> Markup:
    """Stacked bars: one bar per budget bin, one colour per series (backend). counts[series][bin]."""
    width, height, left, bottom, top = 420, 150, 34, 30, 18
    n = len(BUDGET_LABELS)
    slot = (width - left - 8) / n
    totals = [sum(counts.get(s, [0] * n)[i] for s in series) for i in range(n)]
    peak = max(totals) or 1
    scale = (height - bottom - top) / peak
    parts = [f'<svg class="chart histogram" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>']
    base = height - bottom
    parts.append(f'<line class="axis" x1="{left}" y1="{base}" x2="{width - 8}" y2="{base}"/>')
    parts.append(f'<text class="tick" x="{left - 4}" y="{top + 4}" text-anchor="end">{peak}</text>')
    parts.append(f'<text class="tick" x="{left - 4}" y="{base}" text-anchor="end">0</text>')
    limit_x = left + slot * (n - 1)  # the edge between "≤1" and ">1"
    parts.append(f'<line class="limit" x1="{_fmt(limit_x)}" y1="{top - 6}" x2="{_fmt(limit_x)}" y2="{base}"/>'
                 f'<text class="tick" x="{_fmt(limit_x - 3)}" y="{top - 8}" text-anchor="end">tolerance</text>')
    for i, label in enumerate(BUDGET_LABELS):
        x = left + slot * i + 2
        y: float = base
        for k, s in enumerate(series):
            c = counts.get(s, [0] * n)[i]
            if not c:
                continue
            h = c * scale
            y -= h
            parts.append(f'<rect class="bar s{k % 8}" x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(slot - 4)}" '
                         f'height="{_fmt(max(h, 0.5))}"><title>{escape(s)}: {c} result(s) with tolerance used '
                         f'{escape(label)}</title></rect>')
        parts.append(f'<text class="tick" x="{_fmt(x + (slot - 4) / 2)}" y="{base + 13}" text-anchor="middle">'
                     f'{escape(label)}</text>')
    parts.append(f'<text class="tick" x="{_fmt(left + (width - left) / 2)}" y="{height - 2}" text-anchor="middle">'
                 'tolerance used (error / allowed error)</text></svg>')
    return Markup("".join(parts))


def hbars(groups: list[tuple[str, list[tuple[int, float, str]]]], title: str, axis: str,
          log: bool = False, limit: float | None = None, limit_label: str = "") -> Markup:
    """Horizontal grouped bars. groups: (label, [(series index, value, tooltip)]); values > 0 on a log axis."""
    values = [v for _, bars in groups for _, v, _ in bars if v is not None and (v > 0 or not log)]
    if not values:
        return Markup("")
    bar_h, gap, left, right, top = 9, 8, 170, 16, 22
    rows = sum(max(len(bars), 1) for _, bars in groups)
    height = top + rows * bar_h + len(groups) * gap + 30
    width = 640
    plot = width - left - right
    if log:
        lo = math.floor(math.log10(min(values + ([limit] if limit else []))))
        hi = math.ceil(math.log10(max(values + ([limit] if limit else []))))
        hi = hi if hi > lo else lo + 1
        pos = lambda v: left + plot * (math.log10(v) - lo) / (hi - lo)  # noqa: E731
        ticks = [10.0 ** e for e in range(lo, hi + 1)]
    else:
        span = max(values + ([limit] if limit else [])) * 1.05
        pos = lambda v: left + plot * v / span  # noqa: E731
        step = 10 ** math.floor(math.log10(span)) if span > 0 else 1
        ticks = [step * k for k in range(0, int(span / step) + 1)]
    parts = [f'<svg class="chart hbars" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>']
    origin = pos(ticks[0]) if log else left
    y = top
    for label, bars in groups:
        group_h = max(len(bars), 1) * bar_h
        parts.append(f'<text class="label" x="{left - 6}" y="{_fmt(y + group_h / 2 + 4)}" text-anchor="end">'
                     f'{escape(label)}</text>')
        for k, value, tip in bars:
            if value is None or (log and value <= 0):
                continue
            x1 = pos(value)
            parts.append(f'<rect class="bar s{k % 8}" x="{_fmt(min(origin, x1))}" y="{_fmt(y)}" '
                         f'width="{_fmt(max(abs(x1 - origin), 1))}" height="{bar_h - 1}"><title>{escape(tip)}</title></rect>')
            y += bar_h
        y += gap + (0 if bars else bar_h)
    base = y
    parts.append(f'<line class="axis" x1="{left}" y1="{base}" x2="{width - right}" y2="{base}"/>')
    for t in ticks:
        x = pos(t)
        text = f"{t:g}" + ("×" if log else "")
        parts.append(f'<line class="grid" x1="{_fmt(x)}" y1="{top}" x2="{_fmt(x)}" y2="{base}"/>'
                     f'<text class="tick" x="{_fmt(x)}" y="{base + 13}" text-anchor="middle">{text}</text>')
    if limit:
        x = pos(limit)
        parts.append(f'<line class="limit" x1="{_fmt(x)}" y1="{top - 8}" x2="{_fmt(x)}" y2="{base}"/>'
                     f'<text class="tick" x="{_fmt(x)}" y="{top - 10}" text-anchor="middle">{escape(limit_label)}</text>')
    parts.append(f'<text class="tick" x="{_fmt(left + plot / 2)}" y="{base + 27}" text-anchor="middle">'
                 f'{escape(axis)}</text></svg>')
    return Markup("".join(parts))
