"""One op's part of the report: its contract as documentation, then its results.

Everything here is computed from the spec (when the report could load it) and the op's records;
nothing assumes a field the results may lack.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from harness.core.status import Status
from harness.report import repro, svg
from harness.report.data import Rec, as_dict, number
from harness.report.findings import shown_diagnoses, unexpected, with_details, without_noise
from harness.report.status import Cell, rank
from harness.spec.vocabulary import NUMERIC_DTYPES

WORST_CASES = 6
NEAR_ZERO = "near0"  # the case table's max rel and ULP of a passing result whose reference is near zero (near_zero)
DETAIL_CHARS = 400  # the case table's detail column; the full text stays in results.jsonl.gz
DTYPE_ORDER = NUMERIC_DTYPES
# Capability states (a probe's, or what the results show) that mean the backend runs the dtype, or does not.
RUNS = ("kernel", "function", "function_body", "cast", "runs", "supported", "reference", "assumed", "declared", "yes", "ok")
DOES_NOT_RUN = ("not_registered", "no_kernel", "unavailable", "unsupported", "no", "false")


def runs(state: str) -> bool | None:
    state = state.lower()
    if state in RUNS or state.startswith("cast"):
        return True
    return False if state in DOES_NOT_RUN else None


def dtype_key(dtype: str) -> tuple:
    return (DTYPE_ORDER.index(dtype), "") if dtype in DTYPE_ORDER else (len(DTYPE_ORDER), dtype)


def show_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value, separators=(", ", ": "))


@dataclass
class AttributeCoverage:
    name: str
    type: str = ""
    default: str = ""
    declared: str = ""  # allowed values or range, from the spec
    exercised: list[tuple[str, int]] = field(default_factory=list)  # value -> distinct cases (valid)
    rejected: list[tuple[str, int]] = field(default_factory=list)  # values written on invalid cases
    never: list[str] = field(default_factory=list)  # declared allowed values no valid case used


@dataclass
class Capability:
    backend: str
    dtype: str
    state: str  # runs, unsupported, not run, or a probe's class
    runs: bool | None
    detail: str = ""


@dataclass
class OpView:
    name: str
    anchor: str
    spec: Any = None  # harness.spec.model.Spec when it could be loaded
    spec_path: str = ""
    spec_note: str = ""
    cell: Cell = field(default_factory=Cell)
    by_backend: list[tuple[str, Cell]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    capability: list[tuple[str, list[Capability]]] = field(default_factory=list)
    worst: list[tuple[Rec, str]] = field(default_factory=list)
    histograms: list[tuple[str, Markup]] = field(default_factory=list)
    coverage: list[AttributeCoverage] = field(default_factory=list)
    diagnoses: list[tuple[str, str, int, Rec, str]] = field(default_factory=list)
    # (spec Divergence, results it explained, covered results where it did not reproduce)
    divergences: list[tuple[Any, int, int]] = field(default_factory=list)
    graphs: list[tuple[str, str, int, str, Rec]] = field(default_factory=list)  # see gradient_graphs
    table: dict = field(default_factory=dict)  # what report.js needs to draw the case table
    evidence: dict[str, str] = field(default_factory=dict)  # divergence id -> anchor of its finding

    @property
    def checks(self) -> list[str]:
        return self.table.get("checks", [])

    @property
    def open(self) -> bool:
        """Shown open on the page: the op has an unexpected result. The others are one line until opened."""
        return any(unexpected(s) for s in self.cell.counts)

    @property
    def worst_shown(self) -> list[tuple[Rec, str, str, list[str]]]:
        """worst, with each result's detail and the diagnoses not already in it, as findings show them."""
        return with_details(self.worst, without_noise)


def json_metric(x: float | None):
    if x is None:
        return None
    return x if math.isfinite(x) else str(x)


def _tolerance_text(tol: dict | None) -> tuple[str, str]:
    if not tol:
        return "", ""
    atol, rtol = tol.get("atol"), tol.get("rtol")
    text = f"{atol:.3g} + {rtol:.3g}·|ref|" if isinstance(atol, (int, float)) and isinstance(rtol, (int, float)) else ""
    return text, str(tol.get("source", ""))


def note_of(rec: Rec) -> str:
    parts = []
    if rec.divergence:
        parts.append(f"divergence {rec.divergence}")
    if rec.waiver:
        parts.append(f"waiver {rec.waiver}")
    parts += shown_diagnoses(rec)
    return "; ".join(parts)


def near_zero(rec: Rec) -> tuple[float | None, float | None, bool]:
    """(max rel, max ULP, whether some were left out) as the case table shows them. An output that passed
    with a relative error above its rtol passed on the absolute term of its tolerance (atol): where that
    error is largest the reference is near zero (|ref| < atol / rtol), and a relative error of 5e45 or a
    ULP distance of 2e7 there says nothing about accuracy. Such outputs' figures are left out; the max abs
    error is what decided their verdict. Figures of failing results are all shown."""
    outputs = rec.raw.get("outputs") if isinstance(rec.raw.get("outputs"), dict) else {}
    if rec.status != Status.PASS or not outputs:
        return rec.max_rel, rec.max_ulp, False
    rel = ulp = None
    hidden = False
    for o in outputs.values():
        if not isinstance(o, dict):
            continue
        r, u = number(o.get("max_rel")), number(o.get("max_ulp"))
        tol = as_dict(o.get("tolerance"))
        rtol = number(tol.get("rtol"))
        if r is not None and not math.isnan(r) and r > (rtol if rtol else 1.0):
            hidden = True
            continue
        if r is not None and not math.isnan(r):
            rel = r if rel is None else max(rel, r)
        if u is not None and not math.isnan(u):
            ulp = u if ulp is None else max(ulp, u)
    return rel, ulp, hidden


def table_data(records: list[Rec], backends: list[str], dtypes: list[str], flags: list[str]) -> dict:
    rows = []
    for r in records:
        tol, source = _tolerance_text(r.tolerance)
        rel, ulp, hidden = near_zero(r)
        near0 = hidden and rel is None
        detail = without_noise(r)
        rows.append([r.backend, r.dtype, r.case, r.check, r.status, r.failure or "", json_metric(r.max_abs),
                     NEAR_ZERO if near0 else json_metric(rel), NEAR_ZERO if near0 else json_metric(ulp),
                     json_metric(r.budget), tol, source,
                     detail[:DETAIL_CHARS] + ("…" if len(detail) > DETAIL_CHARS else ""), note_of(r), r.tier])
    statuses = sorted({r.status for r in records}, key=rank)
    checks = sorted({r.check for r in records}, key=lambda c: (c != "reference", c))
    return {"rows": rows, "backends": backends, "dtypes": dtypes, "statuses": statuses, "checks": checks,
            "flags": flags}


def worst_cases(records: list[Rec], flags: list[str]) -> list[tuple[Rec, str]]:
    """The results nearest to (or beyond) failing: unexpected statuses first, then most tolerance used."""
    candidates = [r for r in records if r.status != Status.UNSUPPORTED
                  and (r.status != Status.PASS or r.budget is not None)]
    candidates.sort(key=lambda r: (rank(r.status), -(r.budget if r.budget is not None else -1.0), r.case))
    return [(r, repro.command(r.op, r.backend, r.dtype, r.case, r.tier, flags)) for r in candidates[:WORST_CASES]]


def histograms(records: list[Rec], backends: list[str], dtypes: list[str], op: str) -> list[tuple[str, Markup]]:
    out = []
    for dtype in dtypes:
        counts: dict[str, list[int]] = {}
        for r in records:
            if r.dtype == dtype and r.budget is not None:
                counts.setdefault(r.backend, [0] * len(svg.BUDGET_LABELS))[svg.budget_bin(r.budget)] += 1
        if counts:
            series = [b for b in backends if b in counts]
            out.append((dtype, svg.histogram(counts, series, f"{op} {dtype}: tolerance used per result")))
    return out


def declared_text(attr) -> str:
    if attr.allowed is not None:
        return "one of " + ", ".join(show_value(v) for v in attr.allowed)
    bits = []
    if attr.min is not None:
        bits.append(f"≥ {attr.min:g}")
    if attr.max is not None:
        bits.append(f"≤ {attr.max:g}")
    if attr.axis_of:
        bits.append(f"an axis of {attr.axis_of}: [-rank, rank)")
    return ", ".join(bits) + (" (each element)" if bits and attr.type in ("ints", "floats") else "")


def coverage(records: list[Rec], spec) -> list[AttributeCoverage]:
    """Attribute values exercised by valid cases (distinct dtype-case ids), and declared values never used."""
    valid: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    rejected: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    attributes = dict(spec.attributes) if spec is not None else {}
    names = list(attributes) + sorted({k for r in records for k in r.attributes} - set(attributes))
    for r in records:
        if r.check != "reference":
            continue
        target = valid if r.valid else rejected
        for name in names:
            if name in r.attributes:
                target[name][show_value(r.attributes[name])].add(r.full_id)
            elif name in attributes and r.valid:
                default = attributes[name].default
                label = "absent" if default is None else f"{show_value(default)} (default)"
                target[name][label].add(r.full_id)
    out = []
    for name in names:
        attr = attributes.get(name)
        item = AttributeCoverage(name)
        exercised = valid.get(name, {})
        item.exercised = sorted(((v, len(ids)) for v, ids in exercised.items()), key=lambda vn: (-vn[1], vn[0]))
        item.rejected = sorted(((v, len(ids)) for v, ids in rejected.get(name, {}).items()), key=lambda vn: vn[0])
        if attr is not None:
            item.type, item.declared = attr.type, declared_text(attr)
            item.default = "required" if attr.required else ("none" if attr.default is None else show_value(attr.default))
            if attr.allowed is not None:
                used = {v.removesuffix(" (default)") for v in exercised}
                item.never = [show_value(v) for v in attr.allowed if show_value(v) not in used]
        out.append(item)
    return out


def _unbracketed(text: str) -> str:
    while True:  # innermost parentheses first: "(5 element(s) off, max abs err 0.38)"
        stripped = re.sub(r"\s*\([^()]*\)", "", text)
        if stripped == text:
            return text.strip()
        text = stripped


def diagnosis_kind(text: str) -> str:
    """A diagnosis without its figures, so that results with the same finding group together:
    'matches X (max abs err 3e-08)' and 'matches X (max abs err 2e-08)' are one line of the report.
    A key, never shown: its integers are the placeholder N."""
    return re.sub(r"\b\d+\b", "N", _unbracketed(text))


def diagnosis_text(texts: list[str]) -> str:
    """The line shown for diagnoses of one kind: its text without the bracketed figures, each integer the
    range the group spans ('matches none of the 2-3 alternative semantics tried')."""
    bare = [_unbracketed(t) for t in texts]
    parts = re.split(r"\b\d+\b", bare[0])
    values = [[int(n) for n in re.findall(r"\b\d+\b", t)] for t in bare]
    out = [parts[0]]
    for i, part in enumerate(parts[1:]):
        column = [v[i] for v in values if len(v) > i]
        lo, hi = min(column), max(column)
        out.append(f"{lo}" if lo == hi else f"{lo}–{hi}")
        out.append(part)
    return "".join(out)


def diagnoses(records: list[Rec]) -> list[tuple[str, str, int, Rec, str]]:
    """(backend, diagnosis without per-result figures, results, first example, its diagnosis with figures)
    for each kind of diagnosis. One that matched nothing counts only on unexpected failures
    (findings.shown_diagnoses)."""
    found: dict[tuple[str, str], list[tuple[Rec, str]]] = defaultdict(list)
    for r in records:
        for d in shown_diagnoses(r):
            found[(r.backend, diagnosis_kind(d))].append((r, d))
    return [(b, diagnosis_text([d for _, d in rds]), len(rds), rds[0][0], rds[0][1])
            for (b, _), rds in sorted(found.items(), key=lambda kv: (kv[0][0], -len(kv[1])))]


def gradient_graphs(records: list[Rec]) -> list[tuple[str, str, int, str, Rec]]:
    """(backend, the nodes that computed the outputs, results, dtypes, first example) for each distinct node
    list a backend reported (ort-autograd: the gradient nodes ORT's builder inserted for the forward op)."""
    found: dict[tuple[str, tuple], list[Rec]] = defaultdict(list)
    for r in records:
        if r.raw.get("nodes"):
            found[(r.backend, tuple(r.raw["nodes"]))].append(r)
    return [(b, " ; ".join(nodes), len(rs), ", ".join(sorted({r.dtype for r in rs}, key=dtype_key)), rs[0])
            for (b, nodes), rs in sorted(found.items(), key=lambda kv: (kv[0][0], -len(kv[1])))]


def capability(records: list[Rec], backends: list[str], dtypes: list[str],
               probed: dict[tuple[str, str], tuple[str, str]]) -> list[tuple[str, list[Capability]]]:
    """Per backend and dtype: a probe's verdict when the run recorded one, else what the results show."""
    seen: dict[tuple[str, str], Cell] = defaultdict(Cell)
    reasons: dict[tuple[str, str], str] = {}
    for r in records:
        seen[(r.backend, r.dtype)].add(r.status)
        if r.status == Status.UNSUPPORTED and (r.backend, r.dtype) not in reasons:
            reasons[(r.backend, r.dtype)] = r.detail
    rows = []
    for b in backends:
        caps = []
        for d in dtypes:
            if (b, d) in probed:
                state, detail = probed[(b, d)]
                caps.append(Capability(b, d, state.replace("_", " ").replace("+", " > "), runs(state), detail))
                continue
            cell = seen.get((b, d))
            if cell is None:
                caps.append(Capability(b, d, "not run", None))
            elif cell.counts[Status.UNSUPPORTED] == cell.total:
                caps.append(Capability(b, d, "unsupported", False, reasons.get((b, d), "")))
            else:
                caps.append(Capability(b, d, "runs", True, cell.title))
        rows.append((b, caps))
    return rows


def build(op: str, records: list[Rec], spec, spec_path: str, spec_note: str, backends: list[str],
          probed: dict, flags: list[str]) -> OpView:
    view = OpView(op, "op-" + op, spec, spec_path, spec_note)
    per_backend: dict[str, Cell] = defaultdict(Cell)
    for r in records:
        view.cell.add(r.status)
        per_backend[r.backend].add(r.status)
    op_backends = [b for b in backends if b in per_backend] + sorted(set(per_backend) - set(backends))
    view.by_backend = [(b, per_backend[b]) for b in op_backends]
    declared_dtypes = list(spec.type_constraints[spec.inputs[0].type].types) if spec is not None else []
    view.dtypes = sorted(set(declared_dtypes) | {r.dtype for r in records}, key=dtype_key)
    op_probed = {(b, d): v for (o, b, d), v in probed.items() if o == op}
    cap_backends = op_backends + sorted({b for b, _ in op_probed} - set(op_backends))
    view.capability = capability(records, cap_backends, view.dtypes, op_probed)
    view.worst = worst_cases(records, flags)
    view.histograms = histograms(records, op_backends, view.dtypes, op)
    view.coverage = coverage(records, spec)
    view.diagnoses = diagnoses(records)
    view.graphs = gradient_graphs(records)
    if spec is not None:
        explained = Counter(r.divergence for r in records if r.divergence and r.status != Status.PASS)
        refuted = Counter(r.divergence for r in records if r.divergence and r.status == Status.PASS)
        view.divergences = [(d, explained[d.id], refuted[d.id]) for d in spec.known_divergences]
    view.table = table_data(records, op_backends, sorted({r.dtype for r in records}, key=dtype_key), flags)
    return view
