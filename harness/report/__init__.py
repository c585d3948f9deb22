"""`opconform report`: one self-contained HTML page per run (docs/report.md).

write_report(run_dir) reads results.jsonl.gz and summary.json (and bench.json, mutate.json, a baseline
run and the specs when given or found), builds the model (harness.report.model) and renders it
(harness.report.render). publish(run_dir) is what `opconform run` calls at the end: junit.xml, then
index.html.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.core.spec_loader import SpecSources, UnknownOp, default_root, load_catalog, shown
from harness.report import bench as bench_mod
from harness.report.data import ReportError, RunData, paused_gc, read_run
from harness.report.junit import write_junit
from harness.report.model import Report, build
from harness.report.render import render
from harness.spec.errors import SpecError
from harness.spec.sources import builtin_root, same_dir

__all__ = ["ReportError", "build_report", "publish", "write_report"]


def _recorded_sources(summary: dict):
    """The spec directories a run recorded (spec_sources; before those, `specs`: one complete tree)."""
    recorded = summary.get("spec_sources")
    if isinstance(recorded, dict) and isinstance(recorded.get("dirs"), list):
        dirs = tuple(Path(d) for d in recorded["dirs"] if isinstance(d, str) and Path(d).is_dir())
        return SpecSources(dirs, builtin=bool(recorded.get("builtin", True)) or not dirs)
    specs = summary.get("specs")
    if isinstance(specs, str) and Path(specs).is_dir() and not same_dir(Path(specs), builtin_root()):
        return SpecSources(base=Path(specs))
    return SpecSources()


def _load_run_specs(sources, ops):
    """The catalog of the run's ops (each spec that loads; None when none does) and the first problem."""
    try:
        return load_catalog(sources=sources, ops=ops or None), None
    except (SpecError, UnknownOp) as e:
        first = e.problems[0] if isinstance(e, SpecError) and e.problems else e
    catalog = None
    for op in ops or []:  # one spec that does not load costs its own op's contract only
        try:
            one = load_catalog(sources=sources, ops=[op])
        except (SpecError, UnknownOp):
            continue
        if catalog is None:
            catalog = one
        else:
            catalog.specs += one.specs
            catalog.files.update(one.files)
    return catalog, first


def _specs(run: RunData, specs_root, catalog=None) -> tuple[dict, dict, str, Path | None]:
    """(spec id -> Spec, spec id -> file shown, note, default spec root) for the op documentation.
    specs_root: the spec directories to read (SpecSources, or one complete tree); default: the run's."""
    default = default_root()
    if catalog is not None and not run.summary.get("specs"):
        run.summary["specs"] = str(Path(catalog.root).resolve())  # merged shards: rerun commands need it
        if getattr(catalog, "sources", None) is not None:
            run.summary["spec_sources"] = catalog.sources.describe()
    if catalog is None:
        sources = specs_root if isinstance(specs_root, SpecSources) else \
            SpecSources(base=Path(specs_root)) if specs_root else _recorded_sources(run.summary)
        ops = sorted({r.op for r in run.records if isinstance(r.op, str) and r.op}
                     | {o for o in run.summary.get("ops") or [] if isinstance(o, str)})
        catalog, problem = _load_run_specs(sources, ops)
        where = ", ".join(d for d in sources.describe()["dirs"]) or str(default)
        if catalog is None:
            return {}, {}, f"the specs in {where} do not load ({problem}), so the op's contract is not shown", default
        if problem:
            run.problems.append(f"some specs in {where} do not load ({problem}): their ops' contracts are not shown")
    note = ""
    spec_set = run.summary.get("spec_set")
    if isinstance(spec_set, str) and spec_set and spec_set != catalog.digest:
        note = (f"the specs in {catalog.root} changed since this run (spec set {catalog.digest[:12]}, the run used "
                f"{spec_set[:12]}): the contract shown is today's")
    specs = {s.id: s for s in catalog.specs}
    paths = {sid: shown(path) for sid, path in catalog.files.items()}
    return specs, paths, note, default


def build_report(run_dir: Path | RunData, baseline: Path | None = None, bench: Path | None = None,
                 specs_root: Path | None = None, catalog=None, mutation: Path | None = None) -> Report:
    run = run_dir if isinstance(run_dir, RunData) else read_run(Path(run_dir))
    run_dir = run.path
    specs, paths, note, default = _specs(run, specs_root, catalog)
    base = read_run(Path(baseline)) if baseline else None
    bench_path = Path(bench) if bench else Path(run_dir) / "bench.json"
    figures = bench_mod.load(bench_path) if (bench or bench_path.is_file()) else None
    mutation_path = Path(mutation) if mutation else Path(run_dir) / "mutate.json"
    mutation_figures = None
    if mutation_path.is_file():
        try:
            mutation_figures = json.loads(mutation_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            mutation_figures = None
            run.problems.append(f"{mutation_path}: not readable as `opconform mutate` figures ({e})")
    report = build(run, specs, paths, "", base, figures, default, mutation_figures)
    if note:
        report.problems.append(note)
    elif not specs:
        report.problems.append("no specs loaded: the op contracts are not shown")
    return report


def write_report(run_dir: Path | RunData, out: Path | None = None, baseline: Path | None = None, bench: Path | None = None,
                 specs_root: Path | None = None, catalog=None, mutation: Path | None = None) -> Path:
    """Render the report of run_dir to out (default run_dir/index.html) and return its path."""
    with paused_gc():
        report = build_report(run_dir, baseline, bench, specs_root, catalog, mutation)
        page = render(report)
    out = Path(out) if out else report.run.path / "index.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def publish(run_dir: Path, catalog=None) -> tuple[Path, Path]:
    """junit.xml and index.html for a finished (or interrupted) run; returns both paths."""
    with paused_gc():
        run = read_run(Path(run_dir))
        if catalog is not None and not run.summary.get("specs"):
            run.summary["specs"] = str(Path(catalog.root).resolve())  # merged shards: rerun commands need it
        junit = write_junit(run.records, Path(run_dir) / "junit.xml", run.summary)
    return write_report(run, catalog=catalog), junit
