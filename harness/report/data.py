"""Reading a run directory for the report.

The report must render from whatever a run left behind: an interrupted run's partial results.jsonl.gz,
a summary.json from an older or newer harness, records with fields this module has never heard of.
So every field is read with a fallback, a malformed line is counted and skipped, and each such
problem is kept to be shown in the report instead of ending it.
"""
from __future__ import annotations

import gc
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.run.rundir import read_lines, results_path


@contextmanager
def paused_gc():
    """A run's results are tens of thousands of small acyclic dicts: while they are read and tallied the
    cyclic collector rescans them again and again (up to half the time of a 10,000-result report) and
    finds nothing to free. Reference counting still frees everything as usual."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class ReportError(Exception):
    """The run directory cannot be reported on at all (no results file)."""


def number(value: Any) -> float | None:
    """A JSON metric as a float: results write inf and NaN as strings ("inf", "nan")."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


@dataclass(slots=True)
class Rec:
    """One result, with the metrics of its worst output pulled up for tables and charts."""
    op: str
    spec: str
    backend: str
    dtype: str
    case: str
    check: str
    group: str
    valid: bool
    tier: str
    status: str
    failure: str | None
    detail: str
    divergence: str | None
    waiver: str | None
    attributes: dict
    params: dict
    seed: Any
    diagnoses: list[str]
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulp: float | None = None
    budget: float | None = None  # largest error / allowed error over the outputs; > 1 fails
    tolerance: dict | None = None  # {"atol", "rtol", "source"} of the output that used most budget
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def key(self) -> tuple:
        """Identifies the same check of the same case on the same backend across two runs."""
        return (self.spec, self.backend, self.dtype, self.case, self.check)

    @property
    def full_id(self) -> str:
        return f"{self.dtype}-{self.case}"


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else (default if value is None else str(value))


def as_dict(value: Any) -> dict:
    """A mapping read from a results file or summary, or {} where it holds anything else (or nothing)."""
    return value if isinstance(value, dict) else {}


def describe_diagnosis(value: Any) -> list[str]:
    """Diagnoses as lines of text, whatever shape the engine gives them (text, a dict, a list)."""
    if value is None or value == "" or value == [] or value == {}:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [line for item in value for line in describe_diagnosis(item)]
    if isinstance(value, dict):
        name = next((value[k] for k in ("summary", "text", "message", "matches", "alternative", "name")
                     if isinstance(value.get(k), str)), None)
        extras = [f"{k.replace('_', ' ')} {v:.3g}" if isinstance(v, float) else f"{k.replace('_', ' ')} {v}"
                  for k, v in value.items()
                  if k not in ("summary", "text", "message", "matches", "alternative", "name")
                  and isinstance(v, (int, float, str)) and not isinstance(v, bool)]
        if name is None:
            return [", ".join(extras)] if extras else []
        return [name + (f" ({', '.join(extras)})" if extras else "")]
    return [str(value)]


def to_rec(raw: dict) -> Rec:
    spec = _text(raw.get("spec"))
    op = _text(raw.get("op")) or (spec.split("::")[-1].split("@")[0] if spec else "?")
    rec = Rec(op=op, spec=spec or op, backend=_text(raw.get("backend"), "?"), dtype=_text(raw.get("dtype"), "?"),
              case=_text(raw.get("case"), "?"), check=_text(raw.get("check"), "reference") or "reference",
              group=_text(raw.get("group")), valid=raw.get("valid") is not False, tier=_text(raw.get("tier")),
              status=_text(raw.get("status"), "?") or "?", failure=raw.get("failure") or None,
              detail=_text(raw.get("detail")), divergence=raw.get("divergence") or None,
              waiver=raw.get("waiver") or None,
              attributes=as_dict(raw.get("attributes")), params=as_dict(raw.get("params")),
              seed=raw.get("seed"), diagnoses=describe_diagnosis(raw.get("diagnosis")), raw=raw)
    outputs = as_dict(raw.get("outputs"))
    worst_budget = -1.0
    for name, o in outputs.items():
        if not isinstance(o, dict):
            continue
        rec.diagnoses += [f"{name}: {d}" for d in describe_diagnosis(o.get("diagnosis"))]
        for attr, key in (("max_abs", "max_abs"), ("max_rel", "max_rel"), ("max_ulp", "max_ulp")):
            v = number(o.get(key))
            if v is not None and not math.isnan(v):
                current = getattr(rec, attr)
                setattr(rec, attr, v if current is None else max(current, v))
        budget = number(o.get("budget_used"))
        if budget is not None and not math.isnan(budget) and budget > worst_budget:
            worst_budget, rec.budget = budget, budget
            rec.tolerance = o.get("tolerance") if isinstance(o.get("tolerance"), dict) else None
        elif rec.tolerance is None and isinstance(o.get("tolerance"), dict):
            rec.tolerance = o["tolerance"]
    return rec


@dataclass
class RunData:
    path: Path
    summary: dict
    records: list[Rec]
    problems: list[str] = field(default_factory=list)  # what was missing or unreadable

    @property
    def name(self) -> str:
        return _text(self.summary.get("run_id")) or self.path.name


def read_run(run_dir: Path) -> RunData:
    """A run directory's results (results.jsonl.gz, or an older run's plain results.jsonl) and summary."""
    run_dir = Path(run_dir)
    results = results_path(run_dir)
    if results is None:
        raise ReportError(f"{run_dir}: no results.jsonl.gz here (nor an older run's results.jsonl); pass a directory written by "
                          "`opconform run`")
    problems = []
    summary: dict = {}
    summary_path = run_dir / "summary.json"
    if summary_path.is_file():
        try:
            loaded = json.loads(summary_path.read_text(encoding="utf-8"))
            summary = loaded if isinstance(loaded, dict) else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            problems.append(f"summary.json is not valid JSON ({e}); the run's metadata and verdict are missing")
    else:
        problems.append("no summary.json: the run's metadata and verdict are missing")
    records, bad = [], 0
    with paused_gc():
        lines, whole = read_lines(results)
        bad += not whole  # a last record cut short
        for line in lines:
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(raw, dict):
                records.append(to_rec(raw))
            else:
                bad += 1
    if bad:
        problems.append(f"{bad} line(s) of {results.name} are not JSON records (a run killed mid-write?) and were skipped")
    if summary and summary.get("complete") is False:
        problems.append("the run did not complete: this report shows the results written before it stopped")
    return RunData(run_dir, summary, records, problems)
