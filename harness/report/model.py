"""The report's content, computed once from a run (and optionally a baseline, bench figures and the
specs); the templates only lay it out."""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.status import Status
from harness.report import baseline as baseline_diff
from harness.report import findings as findings_mod
from harness.report import ops as ops_mod
from harness.report import repro, svg
from harness.report.bench import PEERS, Bench
from harness.report.data import Rec, RunData, as_dict
from harness.report.status import ORDER, Cell

DTYPES = ops_mod.DTYPE_ORDER
# The environment rows, in reading order: (label, where in summary.json).
ENVIRONMENT = (("Python", ("environment", "python")), ("numpy", ("environment", "numpy")),
               ("onnx", ("environment", "onnx")), ("onnxruntime-training", ("environment", "onnxruntime-training")),
               ("ml_dtypes", ("environment", "ml_dtypes")), ("opconform", ("environment", "opconform")),
               ("CPU", ("environment", "cpu")), ("CPU count", ("environment", "cpu_count")),
               ("platform", ("environment", "platform")), ("git commit", ("environment", "git_commit")),
               ("spec set (sha256)", ("spec_set",)), ("spec directory", ("specs",)), ("tier", ("tier",)),
               ("seed", ("seed",)), ("threads per backend", ("threads",)), ("timeout (s)", ("timeout",)),
               ("case filter", ("case_filter",)))
BUILD_KEYS = ("isa", "compiler", "flags", "build_type", "openmp", "omp_max_threads", "blas", "blas_core", "sanitizers")


@dataclass
class MatrixRow:
    op: str
    anchor: str
    cells: list[Cell | None]
    total: Cell


@dataclass
class Report:
    title: str
    run: RunData
    generated: str
    verdict_passed: bool | None
    reasons: list[str]
    totals: Cell
    environment: list[tuple[str, str]]
    backends: list[dict]
    columns: list[tuple[str, str]]
    backend_spans: list[tuple[str, int]]
    matrix: list[MatrixRow]
    ops: list[ops_mod.OpView]
    findings: list[tuple[str, list[findings_mod.Finding]]]
    diff: baseline_diff.Diff | None = None
    bench: Bench | None = None
    bench_charts: list[tuple[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the verdict's warnings (e.g. a waiver near expiry)
    waivers: list[dict] = field(default_factory=list)  # waiver health, when the run recorded it
    statuses: tuple = ORDER
    gradient: list[dict] = field(default_factory=list)  # per op: the reference's gradient checks (check: gradient)
    mutation: dict | None = None  # `opconform mutate` figures (RUN_DIR/mutate.json or --mutate FILE)
    # What fails the verdict, per op, with a case to rerun (findings.blockers); the failing banner names them.
    blockers: list[dict] = field(default_factory=list)

    @property
    def kinds(self) -> dict:
        return findings_mod.TITLES

    @property
    def attention(self) -> list[tuple[str, list[findings_mod.Finding]]]:
        """Findings shown in full: unexpected, or declared but new since the baseline."""
        return findings_mod.attention(self.findings)

    @property
    def declared(self) -> list[findings_mod.Finding]:
        """Declared findings, one line each."""
        return findings_mod.declared_lines(self.findings)

    @property
    def gradient_failed(self) -> int:
        return sum(g["checked"] - g["passed"] for g in self.gradient)

    @property
    def environment_line(self) -> str:
        """The environment's summary line: the versions and machine a reader checks first."""
        env = dict(self.environment)
        picks = [("onnxruntime-training", "onnxruntime-training"), ("Python", "Python"), ("numpy", "numpy"),
                 ("CPU", ""), ("git commit", "git")]
        parts = [f"{label} {env[key]}".strip() for key, label in picks if env.get(key) not in (None, "", "—")]
        return " · ".join(parts)


def _dig(data: dict, path: tuple) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _find_keys(data: Any, keys: tuple) -> dict[str, Any]:
    """Build facts (compiler, flags, ...) wherever a backend's environment nests them."""
    found = {}
    if isinstance(data, dict):
        for k, v in data.items():
            if k in keys and isinstance(v, (str, int, float)) and v != "":
                found[k] = v
            elif isinstance(v, dict):
                found.update({k2: v2 for k2, v2 in _find_keys(v, keys).items() if k2 not in found})
    return found


def _flatten(data: dict, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for k, v in data.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}.")
        elif v is not None and not isinstance(v, list):
            out.append((f"{prefix}{k}", str(v)))
        elif isinstance(v, list):
            out.append((f"{prefix}{k}", ", ".join(map(str, v))))
    return out


def environment(summary: dict) -> list[tuple[str, str]]:
    rows = []
    for label, path in ENVIRONMENT:
        value = _dig(summary, path)
        if value is None or value == "":
            value = "unavailable" if label in ("onnxruntime-training", "onnx", "numpy") else "—"
        rows.append((label, str(value)))
    env_vars = as_dict(summary.get("env_vars"))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OPCONFORM_ISA",
                 "OPENBLAS_CORETYPE"):
        rows.append((name, str(env_vars.get(name, "unset"))))
    builds = []
    for name, info in (summary.get("backends") or {}).items():
        facts = _find_keys(info, BUILD_KEYS)
        if facts:
            builds.append((name, facts))
    if builds:
        for name, facts in builds:
            rows.append((f"compiler and flags ({name})", " · ".join(f"{k} {v}" for k, v in facts.items())))
    else:
        rows.append(("compiler and flags", "— (no compiled backend in this run)"))
    known = {path[-1] for _, path in ENVIRONMENT if path[0] == "environment"}
    rows += [(k, str(v)) for k, v in (summary.get("environment") or {}).items()
             if k not in known and isinstance(v, (str, int, float))]
    for label, key in (("run id", "run_id"), ("started", "started"), ("finished", "finished"), ("seconds", "seconds")):
        if summary.get(key) is not None:
            rows.append((label, str(summary[key])))
    return rows


def backends_table(summary: dict, seen: list[str]) -> list[dict]:
    info = as_dict(summary.get("backends"))
    rows = []
    for name in list(info) + [b for b in seen if b not in info]:
        entry = as_dict(info.get(name))
        available = entry.get("available", name in seen)
        facts = [(k, v) for k, v in _flatten({k: v for k, v in entry.items() if k not in ("available", "reason")})]
        rows.append({"name": name, "available": bool(available), "reason": entry.get("reason") or "", "facts": facts})
    return rows


def read_capabilities(data: Any, backends: set[str]) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(op, backend, dtype) -> (state, detail) from a probe's capability matrix, in whichever nesting it
    comes: a list of records with op/backend/dtype keys, or nested mappings keyed by op, backend and dtype
    in any order, with a state string or an object holding one at the leaves."""
    out: dict = {}
    state_keys = ("status", "state", "capability", "class", "kind", "result", "how")
    detail_keys = ("detail", "reason", "message", "note")

    def leaf(keys: list[str], node: Any) -> None:
        if isinstance(node, str):
            state, detail = node, ""
        elif isinstance(node, bool):
            state, detail = ("runs" if node else "unsupported"), ""
        else:
            found = next((node[k] for k in state_keys if isinstance(node.get(k), str)), None)
            if found is None:
                return
            state = found
            if state == "supported" and isinstance(node.get("how"), str) and node["how"]:
                state = node["how"]  # how it runs: kernel, function_body, cast+kernel, ...
            detail = next((str(node[k]) for k in detail_keys if node.get(k)), "")
        dtype = next((k for k in keys if k in DTYPES), None)
        backend = next((k for k in keys if k in backends and k != dtype), None)
        rest = [k for k in keys if k not in (dtype, backend)]
        if dtype and backend and rest:
            op = rest[-1].split("::")[-1].split("@")[0]
            out[(op, backend, dtype)] = (state, detail)

    def visit(node: Any, keys: list[str]) -> None:
        if isinstance(node, list):
            for item in node:
                if isinstance(item, dict) and {"op", "backend", "dtype"} <= set(item):
                    leaf([str(item["op"]), str(item["backend"]), str(item["dtype"])], item)
                else:
                    visit(item, keys)
        elif isinstance(node, dict):
            if any(isinstance(node.get(k), str) for k in state_keys) and len(keys) >= 3:
                leaf(keys, node)
            else:
                for k, v in node.items():
                    visit(v, keys + [str(k)])
        elif isinstance(node, (str, bool)) and len(keys) >= 3:
            leaf(keys, node)

    visit(data, [])
    return out


def verdict(summary: dict, totals: Cell) -> tuple[bool | None, list[str]]:
    """The verdict summary.json records (harness.run.gate decided it); the report never judges again."""
    v = summary.get("verdict")
    if isinstance(v, dict) and isinstance(v.get("passed"), bool):
        return v["passed"], [str(r) for r in v.get("reasons") or []]
    return None, ["no verdict in summary.json (an interrupted run, or a run written by another tool): "
                  "`opconform merge DIR --out OUT` gives it one"]


def gradient_rows(records: list[Rec]) -> list[dict]:
    """Per op: how many cases the reference's gradient check ran and passed, and the failures."""
    by_op: dict[str, list[Rec]] = defaultdict(list)
    for r in records:
        if r.check == "gradient":
            by_op[r.op].append(r)
    return [{"op": op, "checked": len(rs), "passed": sum(1 for r in rs if r.status == Status.PASS),
             "failed": [r for r in rs if r.status != Status.PASS][:5]} for op, rs in sorted(by_op.items())]


def waiver_health(summary: dict) -> list[dict]:
    """summary["waivers"]: waiver id -> {kind, backend, op, state, covered, waived, xpass, stale, ...}."""
    data = summary.get("waivers")
    if not isinstance(data, dict):
        return []
    rows = []
    for wid, entry in data.items():
        if isinstance(entry, dict):
            rows.append({"id": str(wid), **{k: v for k, v in entry.items() if isinstance(v, (str, int, float, bool))}})
    return rows


def bench_charts(bench: Bench) -> list[tuple[str, Any]]:
    charts = []
    speed = []
    for row in bench.rows:
        bars = []
        for peer in PEERS:
            ratio = row.ratio(peer)
            if ratio:  # coloured as the peer is in the legend
                bars.append((bench.backends.index(peer), 1 / ratio, f"{row.label}: openmp is {1 / ratio:.3g}× as fast "
                                                                   f"as {peer} (time ratio openmp/{peer} = {ratio:.3g})"))
        if bars:
            speed.append((row.label, bars))
    if speed:
        charts.append(("Speed-up of openmp over each peer (bar colour = the peer); right of 1× openmp is faster",
                       svg.hbars(speed, "speed-up over peers", "speed-up (peer time / openmp time), log scale",
                                 log=True, limit=1.0, limit_label="1×")))
    # sgemm differs by ISA level: a line for one level would misplace the others' rows
    sgemm = bench.sgemm_gflops if len(set(bench.sgemm_by_isa.values())) <= 1 else None
    for unit, attr, limit, limit_name in (("GB/s", "gbs", bench.triad_gbs, "triad"),
                                          ("GFLOP/s", "gflops", sgemm, "sgemm")):
        groups = []
        for row in bench.rows:
            values = getattr(row, attr)
            bars = [(k, values[b], f"{row.label} {b}: {values[b]:.3g} {unit}") for k, b in enumerate(bench.backends)
                    if b in values]
            if bars:
                groups.append((row.label, bars))
        if groups:
            charts.append((f"Throughput in {unit}" + (f"; the line is the machine's measured {limit_name} "
                                                      f"({limit:.3g} {unit})" if limit else ""),
                           svg.hbars(groups, f"throughput {unit}", unit, limit=limit,
                                     limit_label=f"{limit_name} {limit:.3g}" if limit else "")))
    return charts


def build(run: RunData, specs: dict | None = None, spec_paths: dict | None = None, spec_note: str = "",
          baseline: RunData | None = None, bench: Bench | None = None, default_specs: Path | None = None,
          mutation: dict | None = None) -> Report:
    """specs: spec id -> Spec (those the report could load); spec_paths: spec id -> file shown."""
    specs, spec_paths = specs or {}, spec_paths or {}
    summary = run.summary
    flags = repro.run_flags(summary, default_specs)
    declared = [b for b in (summary.get("backends") or {}) if isinstance(summary["backends"].get(b), dict)
                and summary["backends"][b].get("available", True)]
    seen = []
    by_op: dict[str, list[Rec]] = defaultdict(list)
    totals = Cell()
    cells: dict[tuple[str, str, str], Cell] = defaultdict(Cell)
    for r in run.records:
        by_op[r.op].append(r)
        totals.add(r.status)
        cells[(r.op, r.backend, r.dtype)].add(r.status)
        if r.backend not in seen:
            seen.append(r.backend)
    backends = [b for b in declared if b in seen] + [b for b in seen if b not in declared]
    columns = [(b, d) for b in backends for d in sorted({d for (_, b2, d) in cells if b2 == b}, key=ops_mod.dtype_key)]
    spans = [(b, sum(1 for b2, _ in columns if b2 == b)) for b in backends]
    probed = read_capabilities(summary.get("capabilities"), set(backends) | set(summary.get("backends") or {}))
    matrix, views = [], []
    for op in sorted(by_op):
        records = by_op[op]
        row_cells = [cells.get((op, b, d)) for b, d in columns]
        total = Cell()
        for c in row_cells:
            if c:
                total.counts.update(c.counts)
        matrix.append(MatrixRow(op, "op-" + op, row_cells, total))
        spec_id = records[0].spec
        spec = specs.get(spec_id)
        note = "" if spec is not None else (spec_note or f"the contract of {spec_id} could not be loaded")
        views.append(ops_mod.build(op, records, spec, spec_paths.get(spec_id, ""), note, backends, probed, flags))
    passed, reasons = verdict(summary, totals)
    findings = findings_mod.collect(run.records, backends, specs, flags,
                                    findings_mod.keys(baseline.records) if baseline is not None else None)
    anchors: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)  # (op, key) -> [(backend, anchor)]
    for _, items in findings:
        for f in items:
            anchors[(f.op, f.key)].append((f.backend, f.anchor))
    reasons_of = {w["id"]: str(w.get("reason") or "") for w in waiver_health(summary)}
    for f in (f for _, items in findings for f in items if f.kind == "waived"):
        f.reason = reasons_of.get(f.key, "")
    for view in views:  # an op's declared divergence links to its finding: the declaring backend's, else another's
        for d, _, _ in view.divergences:
            found = sorted(anchors.get((view.name, d.id), []), key=lambda ba: ba[0] != d.backend)
            if found:
                view.evidence[d.id] = found[0][1]
    report = Report(
        title=f"opconform report: {run.name}", run=run, generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        verdict_passed=passed, reasons=reasons, totals=totals, environment=environment(summary),
        backends=backends_table(summary, backends), columns=columns, backend_spans=spans, matrix=matrix, ops=views,
        findings=findings, problems=list(run.problems),
        warnings=[str(w) for w in (summary.get("verdict") or {}).get("warnings") or []]
        if isinstance(summary.get("verdict"), dict) else [], waivers=waiver_health(summary),
        gradient=gradient_rows(run.records), mutation=mutation if isinstance(mutation, dict) else None,
        blockers=findings_mod.blockers(findings, flags))
    if baseline is not None:
        report.diff = baseline_diff.diff(baseline, run)
        report.problems += [f"baseline: {p}" for p in baseline.problems]
    if bench is not None:
        report.bench = bench
        report.bench_charts = bench_charts(bench)
        report.problems += bench.problems
    return report
