"""Counting result records: per op, backend and status, and which declared divergences reproduced.

Files on disk (results.jsonl.gz, summary.json) belong to harness.run.rundir; the verdict to harness.run.gate.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from harness.core.status import STATUSES, Check, Status

# What the checks beside a case's own result are, for the line under the table: why one op's backends
# show different totals (the reference's gradient proofs, openmp's thread-invariance checks, ...).
CHECK_NOTES = {Check.GRADIENT: "the reference proven the gradient of its forward op",
               Check.THREAD_INVARIANCE: "the same bits at 1 thread and at more",
               Check.OUTPUT_SUBSET: "a subset of the outputs equal to the same outputs of a full call",
               Check.OWN_SAVED_STATE: "the backend's own saved activations fed back to its gradient"}


@dataclass
class Tally:
    counts: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(Counter)))  # op -> backend -> status
    reproduced: Counter = field(default_factory=Counter)  # divergence id -> results it explained
    not_reproduced: Counter = field(default_factory=Counter)  # divergence id -> covered results it did not explain
    checks: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(Counter)))  # op -> backend -> check

    def add(self, record: dict) -> None:
        """Count one result record (Result.to_json())."""
        self.counts[record["op"]][record["backend"]][record["status"]] += 1
        self.checks[record["op"]][record["backend"]][record.get("check") or str(Check.REFERENCE)] += 1
        if record.get("divergence"):
            if record.get("divergence_reproduced"):
                self.reproduced[record["divergence"]] += 1
            else:
                self.not_reproduced[record["divergence"]] += 1

    def totals(self) -> Counter:
        total: Counter = Counter()
        for backends in self.counts.values():
            for statuses in backends.values():
                total.update(statuses)
        return total

    def stale_divergences(self) -> list[str]:
        """Declared divergences that covered cases in this run and explained none of them."""
        return sorted(d for d in self.not_reproduced if not self.reproduced[d])

    def table(self) -> list[dict]:
        rows = []
        for op in sorted(self.counts):
            for backend in sorted(self.counts[op]):
                c, kinds = self.counts[op][backend], self.checks[op][backend]
                rows.append({"op": op, "backend": backend, **{s: c[s] for s in STATUSES}, "total": sum(c.values()),
                             "cases": kinds[str(Check.REFERENCE)],
                             "checks": {k: n for k, n in sorted(kinds.items()) if k != str(Check.REFERENCE)}})
        return rows


def format_table(rows: list[dict]) -> str:
    columns = [("op", "op"), ("backend", "backend"), (Status.PASS, "passed"), (Status.FAIL, "failed"),
               (Status.DIVERGENT, "divergent"), (Status.WAIVED, "waived"), (Status.UNSUPPORTED, "unsupported"),
               (Status.CRASHED, "crashed"), (Status.ERROR, "errors"), ("total", "total")]
    columns = [(str(key), title) for key, title in columns]
    cells = [[title for _, title in columns]] + [[str(row[key]) for key, _ in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for index, row in enumerate(rows, start=2):  # what each total holds besides the cases judged
        if row.get("checks"):
            lines[index] += "  = " + " + ".join([f"{row.get('cases', 0)} cases"]
                                                + [f"{n} {k}" for k, n in row["checks"].items()])
    kinds = sorted({k for row in rows for k in row.get("checks", {})})
    if kinds:
        lines.append("total: every case judged against the reference, plus each backend's own checks: "
                     + "; ".join(f"{k}: {CHECK_NOTES.get(k, k)}" for k in kinds))
    return "\n".join(lines)
