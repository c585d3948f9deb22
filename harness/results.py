"""Results on disk: one JSON line per result, flushed as it comes, and the run's summary.

results.jsonl holds no timings or dates, so the same run writes the same file; summary.json holds
the run's metadata, counts and verdict.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from harness.engine import STATUSES, UNEXPECTED, Result


class ResultsWriter:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("w", encoding="utf-8")

    def write(self, result: Result) -> None:
        self._file.write(json.dumps(result.to_json(), allow_nan=False) + "\n")
        self._file.flush()  # a killed run keeps every result written so far

    def close(self) -> None:
        self._file.close()


def read_results(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class Tally:
    counts: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(Counter)))  # op -> backend -> status
    reproduced: Counter = field(default_factory=Counter)  # divergence id -> results it explained
    not_reproduced: Counter = field(default_factory=Counter)  # divergence id -> covered results that passed
    unexpected: list[Result] = field(default_factory=list)

    def add(self, result: Result) -> None:
        self.counts[result.op][result.backend][result.status] += 1
        if result.divergence:
            if result.status in ("divergent", "unsupported") and result.detail.startswith("known divergence"):
                self.reproduced[result.divergence] += 1
            else:
                self.not_reproduced[result.divergence] += 1
        if result.status in UNEXPECTED:
            self.unexpected.append(result)

    def totals(self) -> Counter:
        total = Counter()
        for backends in self.counts.values():
            for statuses in backends.values():
                total.update(statuses)
        return total

    def stale_divergences(self) -> list[str]:
        """Declared divergences that covered cases in this run and explained none of them."""
        return sorted(d for d in self.not_reproduced if not self.reproduced[d])

    def verdict(self) -> dict:
        totals = self.totals()
        reasons = []
        for status, what in (("fail", "unexpected failure(s)"), ("crashed", "crash(es) or hang(s) not declared in a spec"),
                             ("error", "harness or spec error(s)")):
            if totals[status]:
                reasons.append(f"{totals[status]} {what}")
        for d in self.stale_divergences():
            reasons.append(f"known divergence {d} did not reproduce in {self.not_reproduced[d]} case(s): "
                           "fix the spec's case globs or remove it")
        return {"passed": not reasons, "reasons": reasons}

    def table(self) -> list[dict]:
        rows = []
        for op in sorted(self.counts):
            for backend in sorted(self.counts[op]):
                c = self.counts[op][backend]
                rows.append({"op": op, "backend": backend, **{s: c[s] for s in STATUSES}, "total": sum(c.values())})
        return rows


def format_table(rows: list[dict]) -> str:
    columns = [("op", "op"), ("backend", "backend"), ("pass", "passed"), ("fail", "failed"),
               ("divergent", "divergent"), ("waived", "waived"), ("unsupported", "unsupported"), ("crashed", "crashed"),
               ("error", "errors"), ("total", "total")]
    cells = [[title for _, title in columns]] + [[str(row[key]) for key, _ in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
