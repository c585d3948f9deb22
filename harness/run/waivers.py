"""Waivers: a backend team's accepted, tracked deviations, in specs/_waivers/<backend>.yaml.

A spec's `known_divergences` and a waiver answer different questions. A known divergence is a fact
about a backend and the math (ORT returns inf where the limit is 1), written by whoever owns the
spec, with evidence, and permanent until the backend changes. A waiver is a decision by the team
that owns a backend to accept a deviation for now: it names the person-readable reason, a tracking
link and a review date, and it expires. Known divergences are applied first (the result becomes
`divergent`); waivers only ever touch results that are still unexpected, so a waiver that repeats a
known divergence matches nothing and is reported stale.

Kinds (all match op, dtypes, case globs and outputs on the file's backend):
  xfail       an expected failure, strict per case: a covered case that passes fails the gate
              ("expected failure X passed: remove waiver X").
  divergence  an accepted disagreement with the math on some of the covered cases: it must reproduce
              at least once in a run that covers it, like a spec's known divergence.
  tolerance   a widened tolerance: values outside the spec's tolerance by at most `budget_multiplier`
              are waived; `observed_budget` records the error seen when the waiver was written.
  skip        the covered cases are not run at all (`because`: crash, hang, too_slow,
              nondeterministic), for what would take a run down or cannot be judged.
A waived result has status `waived`: counted apart, never as a pass.
"""
from __future__ import annotations

import datetime
import fnmatch
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from harness.core.cases import expand
from harness.core.spec_loader import read_yaml, shown
from harness.core.status import Failure, Status
from harness.core.status import Problem as Comparison  # what one output comparison found wrong
from harness.spec.errors import Problem, from_validation_error
from harness.spec.model import DType, Identifier
from harness.spec.names import unknown_name

GRACE_DAYS = 14  # after review_by: this many days of warnings, then the gate fails
FailureKind = Literal["wrong_values", "wrong_shape", "rejects_valid", "accepts_invalid", "crash", "hang"]
KINDS = ("xfail", "divergence", "tolerance", "skip")
WAIVABLE = (Status.FAIL.value, Status.CRASHED.value)  # statuses a waiver may turn into `waived`; never `error`
TOLERANCE_PROBLEM = Comparison.OUT_OF_TOLERANCE.value  # the one comparison problem a tolerance waiver covers


def _iso_date(value):
    """Only a written YYYY-MM-DD: pydantic would read 20300101 as seconds since 1970."""
    if isinstance(value, datetime.date):
        return value
    if not isinstance(value, str) or len(value) != 10:
        raise ValueError(f"{value!r} is not a date written YYYY-MM-DD")
    try:
        return datetime.date.fromisoformat(value)
    except ValueError as e:
        raise ValueError(f"'{value}' is not a calendar date ({e})") from None


IsoDate = Annotated[datetime.date, BeforeValidator(_iso_date)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Match(_Section):
    op: Identifier = Field(description="the op name, exactly as in its spec, e.g. SoftmaxGrad_13")
    dtypes: list[DType] | None = Field(None, min_length=1, description="the case dtypes covered; omit for all")
    cases: list[str] = Field(min_length=1, description="globs over case ids, e.g. 'large_channels/*'")
    outputs: list[str] | None = Field(None, min_length=1, description="the outputs allowed to be wrong; omit for any")
    check: Literal["reference", "output_subset", "own_saved_state", "thread_invariance"] = Field(
        "reference", description="the check it covers: reference (the default), output_subset "
                                                "or own_saved_state")


class Waiver(_Section):
    id: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$", description="a unique id such as OMP-0009")]
    kind: Literal["xfail", "divergence", "tolerance", "skip"] = Field(
        description="xfail, divergence, tolerance or skip")
    match: Match
    failure: FailureKind | list[FailureKind] | None = Field(
        None, description="xfail/divergence: the failure kinds expected (wrong_values, crash, ...); omit for any")
    because: Literal["crash", "hang", "too_slow", "nondeterministic"] | None = Field(
        None, description="skip only: why the cases cannot run (crash, hang, too_slow, nondeterministic)")
    budget_multiplier: float | None = Field(
        None, gt=1, description="tolerance only: how many times the spec's tolerance is allowed, e.g. 1.5")
    observed_budget: float | None = Field(
        None, gt=0, description="tolerance only: the worst error seen, as a multiple of the spec's tolerance")
    reason: str = Field(description="why this deviation is accepted, for the person who reviews it")
    tracking: str = Field(description="a link to the issue tracking the fix, e.g. https://github.com/org/repo/issues/44")
    review_by: IsoDate = Field(description="the date (YYYY-MM-DD) by which someone reviews it again")
    backend: str = Field("", description="set from the file; leave it out")
    file: str = Field("", description="set by the loader; leave it out")

    @property
    def failures(self) -> list[FailureKind]:
        if self.failure is None:
            return []
        return self.failure if isinstance(self.failure, list) else [self.failure]

    def covers(self, op: str, backend: str, dtype: str, case: str, check: str = "reference") -> bool:
        m = self.match
        return (op == m.op and backend == self.backend and check == m.check
                and (not m.dtypes or dtype in m.dtypes) and any(fnmatch.fnmatchcase(case, p) for p in m.cases))

    def state(self, today: datetime.date) -> str:
        """active, grace (past review_by, still within the grace period) or expired."""
        if today <= self.review_by:
            return "active"
        return "grace" if today <= self.review_by + datetime.timedelta(days=GRACE_DAYS) else "expired"


class WaiverFile(_Section):
    backend: str = Field(description="the backend these waivers apply to; the file is named after it")
    waivers: list[Waiver] = []


# ---- loading and validation -------------------------------------------------------------------

def file_name(backend: str) -> str:
    """specs/_waivers/<this>: the backend's name with characters other than letters, digits, '.', '-'
    and '_' written '_' (onnx-backend:onnxruntime.backend -> onnx-backend_onnxruntime.backend.yaml)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", backend) + ".yaml"


def load(root, specs, backend_names, problems: list, extra_files=(), is_known=None, all_ops=None) -> list[Waiver]:
    """Every waiver under root/_waivers/*.yaml (root: a spec directory or a list of them) and in
    `extra_files` (a team's own files, named anything); appends one Problem per mistake (file, field,
    fix). is_known(name) accepts a backend name beyond backend_names (the open-ended onnx-backend:MODULE).
    all_ops: every op of the spec set when `specs` holds only the loaded ones: a waiver of another
    known op is checked no further than its op's name."""
    out: list[Waiver] = []
    seen: dict[str, str] = {}  # waiver id -> the file that uses it first
    by_op = {s.op: s for s in specs}
    roots = [Path(r) for r in root] if isinstance(root, (list, tuple)) else [Path(root)]
    own = [p for r in roots for p in sorted((r / "_waivers").glob("*.yaml"))]
    for path in [*own, *(Path(f) for f in extra_files)]:
        where = shown(path)
        if path not in own and not path.exists():
            problems.append(Problem(where, "", "no such waiver file (--waivers)"))
            continue
        data, found = read_yaml(path)
        if found:
            problems += [Problem(where, p.field, p.message) for p in found]
            continue
        if data is None:
            continue  # an empty file waives nothing
        if not isinstance(data, dict):
            problems.append(Problem(where, "", "a waivers file is a mapping with `backend:` and `waivers:`"))
            continue
        try:
            parsed = WaiverFile.model_validate(data)
        except ValidationError as e:
            problems += from_validation_error(where, WaiverFile, e)
            continue
        if parsed.backend not in backend_names and not (is_known and is_known(parsed.backend)):
            problems.append(Problem(where, "backend", unknown_name("backend", parsed.backend, backend_names)
                                    + " (a plugin's waivers validate where the plugin is installed)"))
        if path in own and path.name != file_name(parsed.backend):
            problems.append(Problem(where, "backend", f"the file is named {path.name} but holds waivers for "
                                                      f"{parsed.backend!r}; name it {file_name(parsed.backend)}"))
        for index, waiver in enumerate(parsed.waivers):
            field = f"waivers[{index}]"
            for name, message in _problems(waiver, parsed.backend, by_op, all_ops):
                problems.append(Problem(where, f"{field}.{name}" if name else field, message))
            if waiver.id in seen:
                problems.append(Problem(where, f"{field}.id", f"{waiver.id} is already used in {seen[waiver.id]}"))
            seen.setdefault(waiver.id, where)
            out.append(waiver.model_copy(update={"backend": parsed.backend, "file": where}))
    return out


def _problems(w: Waiver, backend: str, by_op: dict, all_ops=None) -> list[tuple[str, str]]:
    out = []
    if not w.reason.strip() or w.reason.strip().upper().startswith("TODO"):
        out.append(("reason", "empty: write why this deviation is accepted, for the person who reviews it"))
    elif len(w.reason.strip()) < 15:
        out.append(("reason", f"{w.reason.strip()!r} is too short to explain anything; say what goes wrong and why it is accepted"))
    if not w.tracking.strip() or w.tracking.strip().upper().startswith("TODO"):
        out.append(("tracking", "empty: link the issue that tracks the fix (a URL or owner/repo#N)"))
    elif any(c.isspace() for c in w.tracking.strip()):
        out.append(("tracking", f"{w.tracking!r} is not a link; write a URL or owner/repo#N"))
    if w.file:
        out.append(("file", "set by the loader; leave it out"))
    if w.backend and w.backend != backend:
        out.append(("backend", f"this file holds waivers for {backend}; move the waiver to {w.backend}.yaml"))
    if w.kind == "skip" and not w.because:
        out.append(("because", "a skip says why the cases cannot run: crash, hang, too_slow or nondeterministic "
                               "(anything else is an xfail)"))
    if w.kind == "skip" and w.match.check != "reference":
        out.append(("match.check", "a skip keeps the whole case off the backend; leave `check` out"))
    if w.kind != "skip" and w.because:
        out.append(("because", "only a skip waiver has `because`"))
    if w.kind == "tolerance":
        if w.budget_multiplier is None:
            out.append(("budget_multiplier", "missing; write how many times the spec's tolerance is allowed, e.g. 1.5"))
        if w.observed_budget is None:
            out.append(("observed_budget", "missing; write the worst error seen, as a multiple of the tolerance "
                                           "(the `tolerance used` figure of the failing result)"))
        elif w.budget_multiplier is not None and w.observed_budget > w.budget_multiplier:
            out.append(("budget_multiplier", f"x{w.budget_multiplier:g} does not cover the observed x{w.observed_budget:g}"))
        if w.failure is not None:
            out.append(("failure", "a tolerance waiver covers wrong_values only; drop `failure`"))
    elif w.budget_multiplier is not None or w.observed_budget is not None:
        out.append(("kind", "budget_multiplier and observed_budget belong to kind: tolerance"))
    spec = by_op.get(w.match.op)
    if spec is None:
        if all_ops is None or w.match.op not in all_ops:
            out.append(("match.op", unknown_name("op", w.match.op, sorted(all_ops or by_op))))
        return out  # an op the selection did not load: its cases are checked when it is
    cases = expand(spec)
    dtypes_used = sorted({c.dtype for c in cases})
    for d in w.match.dtypes or []:
        if d not in dtypes_used:
            out.append(("match.dtypes", f"{spec.op} has no {d} cases (its cases use {', '.join(dtypes_used)})"))
    wanted = [d for d in w.match.dtypes or [] if d in dtypes_used]
    ids = {c.id for c in cases if not wanted or c.dtype in wanted}
    for pattern in w.match.cases:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
            example = next(iter(sorted(ids)), "group/param=value")
            out.append(("match.cases", f"'{pattern}' matches no case id of {spec.op}; ids look like '{example}'"))
    names = [o.name for o in spec.outputs]
    for name in w.match.outputs or []:
        if name not in names:
            out.append(("match.outputs", unknown_name("output", name, names)))
    return out


# ---- applying waivers to a result (called by harness.run.engine.judge) -------------------------

def skipping(case, backend: str, waivers) -> Waiver | None:
    """The skip waiver that keeps this case off the backend, if any."""
    return next((w for w in waivers if w.kind == "skip"
                 and w.covers(case.spec.op, backend, case.dtype, case.id)), None)


def apply(result, waivers) -> None:
    """Turn a covered, still-unexpected result into `waived`, or a covered pass into an XPASS failure."""
    check = getattr(result, "check", "reference")
    covering = [w for w in waivers if w.kind != "skip"
                and w.covers(result.op, result.backend, result.dtype, result.case, check)]
    if not covering:
        return
    if result.status == "pass":
        strict = next((w for w in covering if w.kind == "xfail"), None)
        if strict:
            result.status, result.failure, result.waiver = "fail", "xpass", strict.id
            result.detail = (f"expected failure {strict.id} passed: remove waiver {strict.id} from "
                             f"{strict.file or 'specs/_waivers/' + file_name(strict.backend)} (or narrow its match) "
                             f"| observed: {result.detail}")
        return
    if result.status not in WAIVABLE:
        return  # unsupported, divergent (a spec's known divergence already explains it) or a harness error
    notes = []
    for w in covering:
        why_not = _mismatch(w, result)
        if why_not is None:
            result.status, result.waiver = "waived", w.id
            result.detail = f"waived by {w.id} ({w.kind}): {w.reason} | observed: {result.detail}"
            return
        notes.append(f"waiver {w.id} does not cover it: {why_not}")
    result.detail += "".join(f" [{n}]" for n in notes)


def failing_outputs(result) -> set[str]:
    return {name for name, o in result.outputs.items() if not o.get("passed", True)}


def _mismatch(w: Waiver, result) -> str | None:
    """None when w explains this failed result, else why not."""
    failing = failing_outputs(result)
    if w.match.outputs and not failing <= set(w.match.outputs):
        return f"outputs {', '.join(sorted(failing - set(w.match.outputs)))} are wrong too"
    if w.kind == "tolerance":
        if result.failure != "wrong_values":
            return f"a tolerance waiver covers wrong values, observed {result.failure}"
        assert w.budget_multiplier is not None  # the loader refuses a tolerance waiver without one
        for name in sorted(failing):
            o = result.outputs[name]
            others = [p for p, kind in zip(o["problems"], o["kinds"]) if kind != TOLERANCE_PROBLEM]
            if others:
                return f"{name}: {'; '.join(others)}"
            if not isinstance(o["budget_used"], float) or o["budget_used"] > w.budget_multiplier:
                return f"{name} uses x{o['budget_used']} of the tolerance, the waiver allows x{w.budget_multiplier:g}"
        return None
    if w.failures and result.failure not in w.failures:
        return f"it expects {', '.join(w.failures)}, observed {result.failure}"
    return None


def observed_budget(record: dict) -> float:
    """The worst budget used over the outputs of a result record (for the tolerance ratchet)."""
    values = [o["budget_used"] for o in record.get("outputs", {}).values() if isinstance(o.get("budget_used"), float)]
    return max(values, default=0.0)


def today() -> datetime.date:
    return datetime.date.today()


# ---- drafts for a person to complete -----------------------------------------------------------

def propose(records: list[dict], existing, today_: datetime.date | None = None, source: str = "") -> str:
    """Draft waiver entries (YAML text) for the unexpected failures in records, reason left empty.

    Validation rejects every draft until a person has investigated it and written the reason and the
    tracking link; nothing here writes a file.
    """
    review_by = (today_ or today()) + datetime.timedelta(days=90)
    failing = [r for r in records if r["status"] in WAIVABLE and r.get("failure") not in (None, "xpass")]
    if not failing:
        return f"# No unexpected failures{' in ' + source if source else ''}: nothing to waive.\n"
    groups: dict[tuple, list[dict]] = {}
    for r in failing:
        groups.setdefault((r["backend"], r["op"], r.get("check", "reference"), r["failure"], r["group"]), []).append(r)
    used = {w.id for w in existing}
    blocks = []
    for backend in sorted({k[0] for k in groups}):
        prefix = "".join(c for c in backend.upper() if c.isalnum())
        number = max([int(i.rsplit("-", 1)[1]) for i in used if i.startswith(prefix + "-") and i.rsplit("-", 1)[1].isdigit()],
                     default=0)
        lines = [f"# Draft waivers for backend {backend}{' from ' + source if source else ''}.",
                 "# Investigate each failure first: fix the kernel, or the spec if the spec is wrong. Only then",
                 f"# paste what stays into specs/_waivers/{file_name(backend)} (or your own --waivers file) and write reason "
                 "and tracking: validation",
                 "# rejects a waiver until both are filled in.",
                 f"backend: {backend}", "waivers:"]
        for (b, op, check, failure, group), rs in sorted(groups.items()):
            if b != backend:
                continue
            number += 1
            dtypes = sorted({r["dtype"] for r in rs})
            siblings = [r for r in records if r["backend"] == b and r["op"] == op and r["group"] == group
                        and r["dtype"] in dtypes and r.get("check", "reference") == check]
            ids = sorted({r["case"] for r in rs})
            cases = [f"{group}/*"] if all(s in rs for s in siblings) else ids
            outputs = sorted({name for r in rs for name, o in r.get("outputs", {}).items() if not o.get("passed", True)})
            match = f"{{op: {op}, dtypes: [{', '.join(dtypes)}], cases: [{', '.join(_quoted(c) for c in cases)}]"
            match += (f", outputs: [{', '.join(outputs)}]" if outputs else "") + (f", check: {check}" if check != "reference" else "") + "}"
            worst = max((observed_budget(r) for r in rs), default=0.0)
            detail = " ".join(rs[0]["detail"].split())[:160]
            lines.append(f"  # {len(rs)} failing result(s), e.g. {rs[0]['dtype']}-{rs[0]['case']}: {detail}")
            if failure == "wrong_values" and worst:
                lines.append(f"  # worst error x{worst:.3g} of the tolerance: if that is the whole story, kind: tolerance "
                             f"with budget_multiplier and observed_budget: {worst:.3g}")
            lines.append(f"  - id: {prefix}-{number:04d}")
            if failure in (Failure.CRASH, Failure.HANG):
                lines += ["    kind: skip", f"    because: {failure}"]
            else:
                lines += ["    kind: xfail"]
            lines.append(f"    match: {match}")
            if failure not in (Failure.CRASH, Failure.HANG):
                lines.append(f"    failure: {failure}")
            lines += ['    reason: ""', '    tracking: ""', f"    review_by: {review_by.isoformat()}"]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
