"""Findings: what each backend gets wrong, grouped so that one entry is one thing to report upstream.

Known divergences carry the spec's summary, evidence and links; crashes and hangs carry the signal
and stderr tail the worker saw; every entry has example cases with the command that reproduces them.

The page shows what needs attention first, in full: unexpected findings (failures, undeclared crashes,
errors, stale divergences) and, against a baseline, declared ones the baseline did not have. Declared
findings are one line each (op, backend, divergence, count), opened for their evidence and examples.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from harness.core.status import STATUSES, UNEXPECTED, Failure, Status
from harness.report import repro
from harness.report.data import Rec

EXAMPLES = 4
# Display order of the kinds of finding, most urgent first.
KINDS = ("crash", "failure", "error", "other", "stale divergence", "known crash", "known divergence", "waived")
# Kinds a spec or waiver declared: expected, shown one line each.
DECLARED = ("known crash", "known divergence", "waived")
TITLES = {"crash": "Crashes and hangs not declared in any spec", "failure": "Unexpected failures",
          "error": "Harness or spec errors", "other": "Results with a status this report does not know",
          "stale divergence": "Declared divergences that did not reproduce",
          "known crash": "Known crashes and hangs (declared, with evidence)",
          "known divergence": "Known divergences (declared, with evidence)", "waived": "Waived by a backend team"}
SHORT_KIND = {"known crash": "crash", "known divergence": "divergence", "waived": "waiver"}
# A diagnosis that found nothing is worth saying only for the statuses a user must act on (UNEXPECTED).
_NONE_MATCHED = re.compile(r"matches none of the \d+ alternative semantics tried")
_DIAGNOSIS_SUFFIX = re.compile(r" \| diagnosis: matches none of the \d+ alternative semantics tried.*$", re.S)


def unexpected(status: str) -> bool:
    """A status nothing declared: fail, crashed, error, or one this report does not know."""
    return status in UNEXPECTED or status not in STATUSES


def shown_diagnoses(r: Rec) -> list[str]:
    """The diagnoses worth showing: "matches none of the alternatives tried" only where the result is an
    unexpected failure (it rules out the known kinds of mistake); on a declared divergence the spec's
    summary already says what the backend does, and the line is noise."""
    if unexpected(r.status):
        return list(r.diagnoses)
    return [d for d in r.diagnoses if not _NONE_MATCHED.search(d)]


def without_noise(r: Rec) -> str:
    """A result's detail without a diagnosis that matched nothing, unless the result is an unexpected failure."""
    return r.detail if unexpected(r.status) else _DIAGNOSIS_SUFFIX.sub("", r.detail).rstrip(" |")


def with_details(examples, detail=None) -> list[tuple[Rec, str, str, list[str]]]:
    """(result, command, detail, diagnoses not already in the detail) per (result, command): what findings and
    an op's worst cases show. detail: how a result's detail is shown (default shown_detail)."""
    out = []
    for r, cmd in examples:
        text = (detail or shown_detail)(r)
        out.append((r, cmd, text, [d for d in shown_diagnoses(r) if d not in text]))
    return out


def shown_detail(r: Rec) -> str:
    """without_noise, and without what the result's finding already shows (the divergence's summary)."""
    detail = without_noise(r)
    head, sep, rest = detail.partition(" | observed: ")
    if sep and head.startswith("known divergence"):
        detail = rest
    return detail.rstrip(" |")


def slug(text: str) -> str:
    """An HTML id fragment: no whitespace, nothing a URL fragment would need escaped."""
    return re.sub(r"[^A-Za-z0-9_.:-]+", "-", text).strip("-") or "x"


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
    anchor: str = ""  # the element id of this finding on the page, unique
    new: bool = False  # a declared finding the baseline run did not have
    reason: str = ""  # a waiver's reason, from the run's waiver health

    @property
    def line(self) -> str:
        """What the finding's one line says: the divergence's summary, the waiver's reason, else an example."""
        if self.divergence is not None:
            return self.divergence.summary
        if self.reason:
            return self.reason
        return shown_detail(self.examples[0][0]) if self.examples else ""

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def dtypes(self) -> list[str]:
        return sorted({r.dtype for r in self.records})

    @property
    def declared(self) -> bool:
        return self.kind in DECLARED

    @property
    def attention(self) -> bool:
        """Shown in full at the top: unexpected, or declared but new since the baseline."""
        return not self.declared or self.new

    @property
    def outcomes(self) -> list[tuple[str, int]]:
        """How the results came out, most frequent first: crash, hang, wrong_values, unsupported, ..."""
        counts = Counter(r.failure or r.status for r in self.records)
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    @property
    def short_kind(self) -> str:
        return SHORT_KIND.get(self.kind, self.kind)

    @property
    def shown_examples(self) -> list[tuple[Rec, str, str, list[str]]]:
        """(result, command, detail, diagnoses not already in the detail) per example."""
        return with_details(self.examples)


def kind_of(r: Rec) -> tuple[str, str] | None:
    if r.status == Status.PASS:
        return ("stale divergence", r.divergence) if r.divergence else None
    if r.status == Status.UNSUPPORTED:
        if r.divergence and r.raw.get("divergence_reproduced"):  # a declared `unsupported` divergence
            return "known divergence", r.divergence
        return None
    if r.status == Status.DIVERGENT:
        return ("known crash" if r.failure in (Failure.CRASH, Failure.HANG) else "known divergence"), r.divergence or "?"
    if r.status == Status.CRASHED:
        return "crash", r.failure or "crash"
    if r.status == Status.FAIL:
        return "failure", r.failure or "fail"
    if r.status == Status.ERROR:
        return "error", "error"
    if r.status == Status.WAIVED:
        return "waived", r.waiver or "?"
    return "other", r.status


def _group(kind: str) -> str:
    """One finding per declared divergence: its crashes and its wrong values are one entry upstream."""
    return "declared divergence" if kind in ("known crash", "known divergence") else kind


def keys(records: list[Rec]) -> set[tuple[str, str, str, str]]:
    """(backend, group, op, key) of every finding these records make (a baseline's, to tell what is new)."""
    out = set()
    for r in records:
        kind = kind_of(r)
        if kind is not None:
            out.add((r.backend, _group(kind[0]), r.op, kind[1]))
    return out


def collect(records: list[Rec], backends: list[str], specs: dict, flags: list[str],
            baseline: set | None = None) -> list[tuple[str, list[Finding]]]:
    """[(backend, findings in KINDS order)] for backends with anything to report. baseline: keys() of a
    baseline run; declared findings not among them are marked new."""
    groups: dict[tuple, Finding] = {}
    for r in records:
        kind = kind_of(r)
        if kind is None:
            continue
        k = (r.backend, _group(kind[0]), r.op, kind[1])
        if k not in groups:
            spec = specs.get(r.spec)
            divergence = None
            if spec is not None and kind[0] in ("known divergence", "known crash", "stale divergence"):
                divergence = next((d for d in spec.known_divergences if d.id == kind[1]), None)
            groups[k] = Finding(kind[0], r.backend, r.op, kind[1], divergence)
        elif groups[k].kind == "known crash" and kind[0] == "known divergence":
            groups[k].kind = "known divergence"  # a crash only when every result crashed or hung
        groups[k].records.append(r)
    # A divergence that reproduced somewhere (on this backend, else on another: ort-autograd inherits ort's)
    # is not stale, as the gate judges it: its passing cases are a note on it.
    for k in [k for k in groups if k[1] == "stale divergence"]:
        reproduced = groups.get((k[0], "declared divergence", k[2], k[3])) or next(
            (f for k2, f in groups.items() if k2[1:] == ("declared divergence", k[2], k[3])), None)
        if reproduced is not None:
            stale = groups.pop(k)
            room = EXAMPLES - len(reproduced.not_reproduced)
            reproduced.not_reproduced += [(r, repro.command(r.op, r.backend, r.dtype, r.case, r.tier, flags))
                                          for r in stale.records[:room]]
            reproduced.not_reproduced_count += stale.count
    by_backend: dict[str, list[Finding]] = defaultdict(list)
    for k, f in groups.items():
        # The most instructive examples first: different dtypes and cases, failures before checks.
        ordered = sorted(f.records, key=lambda r: (r.check != "reference", r.dtype, r.case))
        picked: list = []
        dtypes_seen: set = set()
        for r in ordered:
            if r.dtype not in dtypes_seen or len(picked) < EXAMPLES // 2:
                picked.append(r)
                dtypes_seen.add(r.dtype)
            if len(picked) == EXAMPLES:
                break
        f.examples = [(r, repro.command(r.op, r.backend, r.dtype, r.case, r.tier, flags)) for r in picked]
        f.new = baseline is not None and f.declared and k not in baseline
        by_backend[f.backend].append(f)
    order = [b for b in backends if b in by_backend] + sorted(set(by_backend) - set(backends))
    out = [(b, sorted(by_backend[b], key=lambda f: (KINDS.index(f.kind), f.op, f.key))) for b in order]
    used: set[str] = set()
    for _, items in out:
        for f in items:
            base = "finding-" + slug(f"{f.backend}-{f.op}-{f.key}")
            anchor, n = base, 2
            while anchor in used:  # the same key as two kinds (a waiver named like a failure kind)
                anchor, n = f"{base}-{n}", n + 1
            used.add(anchor)
            f.anchor = anchor
    return out


def attention(findings: list[tuple[str, list[Finding]]]) -> list[tuple[str, list[Finding]]]:
    """The findings shown in full, per backend: unexpected ones, and declared ones new since the baseline."""
    out = [(b, [f for f in items if f.attention]) for b, items in findings]
    return [(b, items) for b, items in out if items]


def declared_lines(findings: list[tuple[str, list[Finding]]]) -> list[Finding]:
    """The declared findings not shown in full, one line each: by op, then divergence, then backend (ort's
    line next to ort-autograd's, which inherits it)."""
    order = {b: i for i, (b, _) in enumerate(findings)}
    lines = [f for _, items in findings for f in items if not f.attention]
    return sorted(lines, key=lambda f: (f.op, f.key, order[f.backend]))


def blockers(findings: list[tuple[str, list[Finding]]], flags: list[str]) -> list[dict]:
    """Per op, what fails the verdict: its unexpected findings' backends, kinds and counts, and one case to
    rerun (the first example of its largest finding)."""
    by_op: dict[str, list[Finding]] = defaultdict(list)
    for _, items in findings:
        for f in items:
            if not f.declared:
                by_op[f.op].append(f)
    out: list[dict[str, Any]] = []
    for op, fs in by_op.items():
        fs.sort(key=lambda f: (KINDS.index(f.kind), -f.count))
        first = fs[0]
        rec, cmd = first.examples[0] if first.examples else (first.records[0], "")
        what: Counter[str] = Counter()
        for f in fs:  # crash, hang, wrong_values, xpass, not_a_gradient, error, stale divergence, ...
            what[f.key if f.kind in ("crash", "failure", "other") else f.kind] += f.count
        out.append({"op": op, "count": sum(f.count for f in fs), "backends": sorted({f.backend for f in fs}),
                    "what": sorted(what.items(), key=lambda kv: -kv[1]), "example": rec, "command": cmd,
                    "anchor": first.anchor})
    out.sort(key=lambda b: (-b["count"], b["op"]))
    return out
