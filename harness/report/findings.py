"""Findings: what each backend gets wrong, grouped so that one entry is one thing to report upstream.

Known divergences carry the spec's summary, evidence and links; crashes and hangs carry the signal
and stderr tail the worker saw; every entry has example cases with the command that reproduces them.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from harness.report import repro
from harness.report.data import Rec

EXAMPLES = 4
# Display order of the kinds of finding, most urgent first.
KINDS = ("crash", "failure", "error", "other", "stale divergence", "known crash", "known divergence", "waived")
TITLES = {"crash": "Crashes and hangs not declared in any spec", "failure": "Unexpected failures",
          "error": "Harness or spec errors", "other": "Results with a status this report does not know",
          "stale divergence": "Declared divergences that did not reproduce",
          "known crash": "Known crashes and hangs (declared, with evidence)",
          "known divergence": "Known divergences (declared, with evidence)", "waived": "Waived by a backend team"}


@dataclass
class Finding:
    kind: str
    backend: str
    op: str
    key: str  # divergence id, waiver id or failure kind
    divergence: Any = None  # the spec's Divergence, when it could be loaded
    records: list[Rec] = field(default_factory=list)
    examples: list[tuple[Rec, str]] = field(default_factory=list)
    # For a known divergence that reproduced: the covered results where it did not (they passed).
    not_reproduced: list[tuple[Rec, str]] = field(default_factory=list)
    not_reproduced_count: int = 0

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def dtypes(self) -> list[str]:
        return sorted({r.dtype for r in self.records})


def kind_of(r: Rec) -> tuple[str, str] | None:
    if r.status == "pass":
        return ("stale divergence", r.divergence) if r.divergence else None
    if r.status == "unsupported":
        if r.divergence and r.raw.get("divergence_reproduced"):  # a declared `unsupported` divergence
            return "known divergence", r.divergence
        return None
    if r.status == "divergent":
        return ("known crash" if r.failure in ("crash", "hang") else "known divergence"), r.divergence or "?"
    if r.status == "crashed":
        return "crash", r.failure or "crash"
    if r.status == "fail":
        return "failure", r.failure or "fail"
    if r.status == "error":
        return "error", "error"
    if r.status == "waived":
        return "waived", r.waiver or "?"
    return "other", r.status


def collect(records: list[Rec], backends: list[str], specs: dict, flags: list[str]) -> list[tuple[str, list[Finding]]]:
    """[(backend, findings in KINDS order)] for backends with anything to report."""
    groups: dict[tuple, Finding] = {}
    for r in records:
        kind = kind_of(r)
        if kind is None:
            continue
        k = (r.backend, kind[0], r.op, kind[1])
        if k not in groups:
            spec = specs.get(r.spec)
            divergence = None
            if spec is not None and kind[0] in ("known divergence", "known crash", "stale divergence"):
                divergence = next((d for d in spec.known_divergences if d.id == kind[1]), None)
            groups[k] = Finding(kind[0], r.backend, r.op, kind[1], divergence)
        groups[k].records.append(r)
    # A divergence that reproduced somewhere is not stale: its passing cases are a note on it.
    for k in [k for k in groups if k[1] == "stale divergence"]:
        reproduced = groups.get((k[0], "known divergence", k[2], k[3])) or groups.get((k[0], "known crash", k[2], k[3]))
        if reproduced is not None:
            stale = groups.pop(k)
            reproduced.not_reproduced = [(r, repro.command(r.op, r.backend, r.dtype, r.case, r.tier, flags))
                                         for r in stale.records[:EXAMPLES]]
            reproduced.not_reproduced_count = stale.count
    by_backend: dict[str, list[Finding]] = defaultdict(list)
    for f in groups.values():
        # The most instructive examples first: different dtypes and cases, failures before checks.
        ordered = sorted(f.records, key=lambda r: (r.check != "reference", r.dtype, r.case))
        picked, dtypes_seen = [], set()
        for r in ordered:
            if r.dtype not in dtypes_seen or len(picked) < EXAMPLES // 2:
                picked.append(r)
                dtypes_seen.add(r.dtype)
            if len(picked) == EXAMPLES:
                break
        f.examples = [(r, repro.command(r.op, r.backend, r.dtype, r.case, r.tier, flags)) for r in picked]
        by_backend[f.backend].append(f)
    order = [b for b in backends if b in by_backend] + sorted(set(by_backend) - set(backends))
    return [(b, sorted(by_backend[b], key=lambda f: (KINDS.index(f.kind), f.op, f.key))) for b in order]
