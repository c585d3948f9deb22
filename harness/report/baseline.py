"""What changed between a baseline run and this one.

Results are matched by (spec, backend, dtype, case id, check): case ids and seeds are stable, so the
same key is the same data unless the spec changed (the spec-set hashes are compared too). An op that
only one run ran is listed as such, not as hundreds of cases added or removed. Failing
means fail, crashed or error. A change in tolerance used counts when it moved by at least
BUDGET_FACTOR either way and the larger of the two is at least BUDGET_FLOOR: 1e-6 -> 1e-5 of the
tolerance is noise, 0.2 -> 0.9 is a kernel drifting towards failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.status import Status
from harness.report.data import Rec, RunData
from harness.report.status import FAILING

BUDGET_FACTOR = 2.0
BUDGET_FLOOR = 0.1
ENVIRONMENT_KEYS = ("python", "numpy", "onnx", "onnxruntime-training", "ml_dtypes", "opconform", "git_commit", "cpu")


@dataclass
class Change:
    old: Rec | None
    new: Rec | None

    @property
    def rec(self) -> Rec:
        rec = self.new or self.old
        if rec is None:
            raise ValueError("a change with neither an old nor a new result")
        return rec


@dataclass
class Diff:
    baseline: str
    newly_failing: list[Change] = field(default_factory=list)
    newly_passing: list[Change] = field(default_factory=list)
    other_changes: list[Change] = field(default_factory=list)  # e.g. pass -> unsupported, fail -> divergent
    added: list[Change] = field(default_factory=list)
    removed: list[Change] = field(default_factory=list)
    budget_changes: list[Change] = field(default_factory=list)
    environment: list[tuple[str, str, str]] = field(default_factory=list)  # (what, baseline, now)
    # Ops that only one of the runs ran (a different --ops selection, not cases added or removed): op -> results
    ops_added: dict[str, int] = field(default_factory=dict)
    ops_removed: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0
    factor: float = BUDGET_FACTOR
    floor: float = BUDGET_FLOOR

    @property
    def empty(self) -> bool:
        return not (self.newly_failing or self.newly_passing or self.other_changes or self.added
                    or self.removed or self.budget_changes)


def _budget(rec: Rec | None) -> float:
    """The budget of one side of a budget change (budget_moved keeps only changes with both)."""
    if rec is None or rec.budget is None:
        raise ValueError("a budget change without a budget on both sides")
    return rec.budget


def budget_moved(old: float | None, new: float | None, factor: float = BUDGET_FACTOR, floor: float = BUDGET_FLOOR) -> bool:
    if old is None or new is None:
        return False
    hi, lo = max(old, new), min(old, new)
    return hi >= floor and (lo == 0 or hi / lo >= factor)


def diff(baseline: RunData, current: RunData, factor: float = BUDGET_FACTOR, floor: float = BUDGET_FLOOR) -> Diff:
    result = Diff(baseline.name, factor=factor, floor=floor)
    old = {r.key: r for r in baseline.records}
    new = {r.key: r for r in current.records}
    old_ops, new_ops = {r.op for r in baseline.records}, {r.op for r in current.records}
    for key, n in new.items():
        o = old.get(key)
        if n.op not in old_ops:
            result.ops_added[n.op] = result.ops_added.get(n.op, 0) + 1
        elif o is None:
            result.added.append(Change(None, n))
        elif n.status in FAILING and o.status not in FAILING:
            result.newly_failing.append(Change(o, n))
        elif n.status == Status.PASS and o.status != Status.PASS:
            result.newly_passing.append(Change(o, n))
        elif n.status != o.status:
            result.other_changes.append(Change(o, n))
        elif budget_moved(o.budget, n.budget, factor, floor):
            result.budget_changes.append(Change(o, n))
        else:
            result.unchanged += 1
    for key, o in old.items():
        if o.op not in new_ops:
            result.ops_removed[o.op] = result.ops_removed.get(o.op, 0) + 1
        elif key not in new:
            result.removed.append(Change(o, None))
    result.budget_changes.sort(key=lambda c: -max(_budget(c.old), _budget(c.new)))
    b_env, c_env = baseline.summary.get("environment") or {}, current.summary.get("environment") or {}
    pairs = [(k, b_env.get(k), c_env.get(k)) for k in ENVIRONMENT_KEYS]
    pairs += [(k, baseline.summary.get(k), current.summary.get(k)) for k in ("spec_set", "tier", "seed")]
    result.environment = [(k, str(a), str(b)) for k, a, b in pairs if a != b]
    return result
