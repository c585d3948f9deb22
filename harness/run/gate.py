"""The gate's verdict over a run's result records.

One function, `verdict`, decides for `opconform run`, the generated pytest suites (harness.pytest_plugin.plugin) and
`opconform merge` (through harness.run.rundir.build_summary), so all three say the same thing. The verdict
fails, with one reason a line, on: unexpected failures (a reference that is not the gradient of its
forward op among them); expected failures that passed (XPASS: remove the waiver); undeclared crashes
or hangs; harness or spec errors; an expected backend (reference, openmp, ort) unavailable and not
left out on purpose; known divergences and waivers that covered cases in the run but explained none
of them (stale); waivers past review_by by more than the grace period (expired); stale generated
tests; an interrupted or incomplete run (a missing shard).
Waivers past review_by but within the grace period, and tolerance waivers whose recorded error no
longer matches what is observed, are warnings.
"""
from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from harness.core.status import STATUSES, Failure, Status
from harness.run import waivers as waiver_rules
from harness.run.results import Tally

RATCHET = 0.8  # a tolerance waiver whose worst observed error fell below this share of the recorded one: lower it


def waiver_health(records: list[dict], waivers, today: datetime.date) -> dict:
    """Per waiver: what it covered and waived in these records, and its review state."""
    health = {}
    for w in waivers:
        covered = [r for r in records if w.covers(r["op"], r["backend"], r["dtype"], r["case"], r.get("check", "reference"))]
        waived = [r for r in covered if r.get("waiver") == w.id and r["status"] == "waived"]
        xpass = [r for r in covered if r.get("waiver") == w.id and r.get("failure") == "xpass"]
        entry = {"kind": w.kind, "backend": w.backend, "op": w.match.op, "file": w.file, "reason": w.reason,
                 "tracking": w.tracking, "review_by": w.review_by.isoformat(), "state": w.state(today),
                 "covered": len(covered), "waived": len(waived), "xpass": len(xpass),
                 "stale": bool(covered) and not waived and not xpass}
        if w.kind == "tolerance":
            entry["observed_budget"] = max((waiver_rules.observed_budget(r) for r in waived), default=None)
            entry["recorded_budget"] = w.observed_budget
        health[w.id] = entry
    return health


def _in_scope(w, records: list[dict]) -> bool:
    """A waiver is judged (expiry) by runs that ran its backend on its op."""
    return any(r["backend"] == w.backend and r["op"] == w.match.op for r in records)


def verdict(records: list[dict], waivers, *, today: datetime.date | None = None, complete: bool = True,
            deferred: bool = False, stale_generated: list[str] | None = None, extra: Sequence[str] = (),
            missing_backends: Sequence[dict] = ()) -> dict:
    """{"passed", "reasons"[, "warnings"]}: the gate's decision over these records.

    deferred: a shard of a split run; run-level checks (stale divergences and waivers) wait for the merge.
    missing_backends: expected backends that were unavailable ({"name", "reason"}, harness.run.rundir.missing_expected).
    """
    today = today or waiver_rules.today()
    statuses = Counter(r["status"] for r in records)
    xpass = Counter(r["waiver"] for r in records if r.get("failure") == Failure.XPASS)
    not_gradients = sum(1 for r in records if r.get("failure") == Failure.NOT_A_GRADIENT)
    by_id = {w.id: w for w in waivers}
    reasons, warnings = [], []
    if not records:
        reasons.append("no result: nothing was judged (is every selected backend unavailable?)")
    for m in missing_backends:
        reasons.append(f"expected backend {m['name']} is unavailable: {m['reason']} (to run without it, leave it "
                       "out on purpose: --backends, a marker selection, or --allow-missing-backends)")
    failures = statuses[Status.FAIL] - sum(xpass.values())
    if not_gradients:
        reasons.append(f"{not_gradients} case(s) where the reference is not the gradient of its forward op "
                       "(check: gradient): fix the reference before trusting any verdict on this op")
    if failures:
        reasons.append(f"{failures} unexpected failure(s)")
    for wid, n in sorted(xpass.items()):
        where = by_id[wid].file if wid in by_id else "specs/_waivers/"
        reasons.append(f"expected failure {wid} passed in {n} case(s): remove waiver {wid} from {where} (or narrow its match)")
    if statuses[Status.CRASHED]:
        reasons.append(f"{statuses[Status.CRASHED]} crash(es) or hang(s) not declared in a spec or waived")
    if statuses[Status.ERROR]:
        reasons.append(f"{statuses[Status.ERROR]} harness or spec error(s)")
    if not deferred:
        tally = Tally()
        for r in records:
            tally.add(r)
        for d in tally.stale_divergences():
            reasons.append(f"known divergence {d} did not reproduce in {tally.not_reproduced[d]} case(s): "
                           "fix the spec's case globs or remove it")
    health = waiver_health(records, waivers, today)
    for w in waivers:
        h = health[w.id]
        if not deferred and h["stale"]:
            reasons.append(f"stale waiver {w.id} ({w.kind}): it covered {h['covered']} case(s) in this run and waived "
                           f"none: remove it from {w.file} or fix its match")
        if _in_scope(w, records) or h["covered"]:
            grace_end = w.review_by + datetime.timedelta(days=waiver_rules.GRACE_DAYS)
            if h["state"] == "expired":
                reasons.append(f"expired waiver {w.id}: review_by {w.review_by} passed and the grace period ended "
                               f"{grace_end}: review it, then renew review_by or remove it ({w.file})")
            elif h["state"] == "grace":
                warnings.append(f"waiver {w.id} is past its review date {w.review_by}: review it by {grace_end}, "
                                f"when the gate starts failing ({w.file})")
        observed, recorded = h.get("observed_budget"), h.get("recorded_budget")
        if observed is not None and recorded:
            if observed > recorded * 1.0001:
                warnings.append(f"waiver {w.id}: worst error now x{observed:.3g} of the tolerance, above the recorded "
                                f"x{recorded:.3g}: update observed_budget")
            elif observed < recorded * RATCHET:
                warnings.append(f"waiver {w.id}: worst error now x{observed:.3g} of the tolerance (recorded "
                                f"x{recorded:.3g}): lower budget_multiplier and observed_budget")
    if stale_generated:
        names = [Path(line.split(":", 1)[0]).name for line in stale_generated]
        names = [n for n in names if n != "MANIFEST.json"] or names  # it follows the test files
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        reasons.append(f"stale generated tests: {shown}: run `opconform gen-tests` "
                       f"(`opconform gen-tests --check` says why)")
    reasons += list(extra)
    if not complete:
        reasons.append("the run was interrupted; results.jsonl.gz holds what finished")
    if deferred:
        warnings.append("shard of a split run: stale divergences and waivers are judged by `opconform merge`")
    verdict = {"passed": not reasons, "reasons": reasons}
    if warnings:  # only when there are some: {"passed": true, "reasons": []} reads as a clean pass
        verdict["warnings"] = warnings
    return verdict


def print_verdict(summary: dict, out) -> None:
    totals = summary.get("totals", {})
    print(f"{summary.get('results', 0)} results: " + (", ".join(f"{totals[s]} {s}" for s in STATUSES if totals.get(s))
                                                       or "none"), file=out)
    v = summary["verdict"]
    print(f"verdict: {'PASS' if v['passed'] else 'FAIL'}" + "".join(f"\n  - {r}" for r in v["reasons"])
          + "".join(f"\n  warning: {w}" for w in v.get("warnings", [])), file=out)
