"""Statuses as the report ranks and counts them.

A matrix cell is coloured by its worst status. Severity, worst first: error (the harness or spec is
broken), crashed, fail, any status this report does not know (a newer harness's), divergent,
waived, unsupported, pass. Unsupported ranks above pass because it is never a pass: a cell of
passes and unsupported cases is grey, not green, and its denominator says how much did not run.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from harness.core.status import SEVERITY, UNEXPECTED, Status

ORDER = SEVERITY
UNKNOWN_RANK = ORDER.index(Status.FAIL) + 0.5
# The matrix's short labels; a status left out shows in full.
SHORT = {Status.DIVERGENT: "div", Status.UNSUPPORTED: "unsup", Status.CRASHED: "crash"}
FAILING = UNEXPECTED  # what a baseline diff calls failing


def js_rank() -> tuple[dict[str, int], int]:
    """report.js's integer sort ranks: ORDER's per status, with the place after fail left to a status the
    report does not know (UNKNOWN_RANK), and that place."""
    unknown = ORDER.index(Status.FAIL) + 1
    return {s: i if i < unknown else i + 1 for i, s in enumerate(ORDER)}, unknown


def rank(status: str) -> float:
    return ORDER.index(status) if status in ORDER else UNKNOWN_RANK


def css(status: str) -> str:
    """The CSS class of a status; unknown statuses share one."""
    return f"st-{status}" if status in ORDER else "st-other"


@dataclass
class Cell:
    counts: Counter = field(default_factory=Counter)

    def add(self, status: str, n: int = 1) -> None:
        self.counts[status] += n

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def passed(self) -> int:
        return self.counts[Status.PASS]

    @property
    def worst(self) -> str:
        return min(self.counts, key=rank) if self.counts else "none"

    @property
    def others(self) -> list[tuple[str, int]]:
        """The non-pass statuses with their counts, worst first."""
        return sorted(((s, n) for s, n in self.counts.items() if s != Status.PASS and n), key=lambda sn: rank(sn[0]))

    @property
    def title(self) -> str:
        return f"{self.passed} of {self.total} passed" + "".join(f"; {n} {s}" for s, n in self.others)
