"""The gate's verdict over a run's result records, and merging shard runs into one run directory.

One function decides for `opconform run`, the generated pytest suites (harness.plugin) and
`opconform merge`, so all three say the same thing. The verdict fails, with one reason a line, on:
  unexpected failures; expected failures that passed (XPASS: remove the waiver); undeclared crashes
  or hangs; harness or spec errors; known divergences and waivers that covered cases in the run but
  explained none of them (stale); waivers past review_by by more than the grace period (expired);
  stale generated tests; an interrupted or incomplete run (a missing shard).
Waivers past review_by but within the grace period, and tolerance waivers whose recorded error no
longer matches what is observed, are warnings.
"""
from __future__ import annotations

import datetime
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from harness import backends as registry
from harness import waivers as waiver_rules
from harness.cases import expand
from harness.results import Tally, read_results, write_json

RATCHET = 0.8  # a tolerance waiver whose worst observed error fell below this share of the recorded one: lower it


class MergeError(ValueError):
    """Shard directories that cannot be merged (missing files, the same result twice)."""


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
            deferred: bool = False, stale_generated: list[str] | None = None, extra: list[str] = ()) -> dict:
    """{"passed", "reasons"[, "warnings"]}: the gate's decision over these records.

    deferred: a shard of a split run; run-level checks (stale divergences and waivers) wait for the merge.
    """
    today = today or waiver_rules.today()
    statuses = Counter(r["status"] for r in records)
    xpass = Counter(r["waiver"] for r in records if r.get("failure") == "xpass")
    by_id = {w.id: w for w in waivers}
    reasons, warnings = [], []
    if not records:
        reasons.append("no result: nothing was judged (is every selected backend unavailable?)")
    failures = statuses["fail"] - sum(xpass.values())
    if failures:
        reasons.append(f"{failures} unexpected failure(s)")
    for wid, n in sorted(xpass.items()):
        where = by_id[wid].file if wid in by_id else "specs/_waivers/"
        reasons.append(f"expected failure {wid} passed in {n} case(s): remove waiver {wid} from {where} (or narrow its match)")
    if statuses["crashed"]:
        reasons.append(f"{statuses['crashed']} crash(es) or hang(s) not declared in a spec or waived")
    if statuses["error"]:
        reasons.append(f"{statuses['error']} harness or spec error(s)")
    if not deferred:
        tally = Tally()
        for r in records:
            tally.add(SimpleNamespace(**r))
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
        reasons.append("the run was interrupted; results.jsonl holds what finished")
    if deferred:
        warnings.append("shard of a split run: stale divergences and waivers are judged by `opconform merge`")
    verdict = {"passed": not reasons, "reasons": reasons}
    if warnings:  # only when there are some: {"passed": true, "reasons": []} reads as a clean pass
        verdict["warnings"] = warnings
    return verdict


def summarize(records: list[dict], catalog, **verdict_options) -> dict:
    """The counts, divergences, waiver health and verdict a summary.json holds."""
    today = verdict_options.get("today") or waiver_rules.today()
    tally = Tally()
    for r in records:
        tally.add(SimpleNamespace(**r))
    return {"results": len(records), "totals": dict(tally.totals()), "table": tally.table(),
            "divergences": {"reproduced": dict(tally.reproduced), "not_reproduced": dict(tally.not_reproduced)},
            "waivers": waiver_health(records, catalog.waivers, today),
            "verdict": verdict(records, catalog.waivers, **verdict_options)}


def order(records: list[dict], catalog) -> list[dict]:
    """`opconform run`'s order: op, then the case's place in its spec, then the backend; stable otherwise."""
    place = {}
    for spec in catalog.specs:
        for index, case in enumerate(expand(spec)):
            place[(spec.id, case.full_id)] = index
    names = [*registry.DEFAULT, *(n for n in registry.FACTORIES if n not in registry.DEFAULT)]
    backends = {name: i for i, name in enumerate(names)}
    return sorted(records, key=lambda r: (r["op"], r["spec"], place.get((r["spec"], f"{r['dtype']}-{r['case']}"), 1 << 30),
                                          backends.get(r["backend"], len(backends)), r["backend"]))


def key(record: dict) -> tuple:
    return record["spec"], record["backend"], record["dtype"], record["case"], record.get("check", "reference")


def write_run(run_dir: Path, records: list[dict], summary: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "results.jsonl").open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, allow_nan=False) + "\n")
    write_json(run_dir / "summary.json", summary)


def merge(dirs: list[Path], out: Path, catalog, today: datetime.date | None = None,
          stale_generated: list[str] | None = None) -> dict:
    """Merge the run directories of shards (or of separate runs) into out; returns the summary."""
    records, seen, parts = [], {}, []
    for d in dirs:
        path = Path(d) / "results.jsonl"
        if not path.is_file():
            raise MergeError(f"{d}: no results.jsonl (pass run directories written by `opconform run` or "
                             f"`pytest --opconform-results DIR`)")
        summary_path = Path(d) / "summary.json"
        parts.append(json.loads(summary_path.read_text()) if summary_path.is_file() else {})
        for r in read_results(path):
            k = key(r)
            if k in seen:
                raise MergeError(f"{d}: {r['op']} [{r['backend']}] {r['dtype']}-{r['case']} is also in {seen[k]}: "
                                 "the shards overlap (or a directory was given twice)")
            seen[k] = str(d)
            records.append(r)
    extra = []
    shards = [p["shard"] for p in parts if p.get("shard")]
    if shards:
        splits = {s["splits"] for s in shards}
        groups = {s["group"] for s in shards}
        if len(splits) != 1:
            extra.append(f"the shards come from different splits ({', '.join(map(str, sorted(splits)))})")
        else:
            missing = sorted(set(range(1, splits.pop() + 1)) - groups)
            if missing:
                extra.append(f"shard(s) {', '.join(map(str, missing))} of {max(groups | set(missing))} missing: "
                             "stale waivers and divergences cannot be judged on part of a run")
    spec_sets = {p.get("spec_set") for p in parts if p.get("spec_set")}
    if len(spec_sets) > 1:
        extra.append("the parts ran different spec sets; merge runs of one commit")
    backends = {}
    for p in parts:
        for name, info in (p.get("backends") or {}).items():
            if name not in backends or info.get("available"):
                backends[name] = info
    complete = all(p.get("complete", True) for p in parts)
    records = order(records, catalog)
    summary = {"run_id": Path(out).name, "merged_from": [str(d) for d in dirs],
               "tier": next(iter({p.get("tier") for p in parts})) if len({p.get("tier") for p in parts}) == 1 else None,
               "ops": sorted({r["op"] for r in records}), "backends": backends,
               "environment": next((p["environment"] for p in parts if p.get("environment")), {}),
               "spec_set": catalog.digest, "complete": complete}
    summary.update(summarize(records, catalog, today=today, complete=complete, stale_generated=stale_generated,
                             extra=extra))
    write_run(Path(out), records, summary)
    return summary


def print_verdict(summary: dict, out) -> None:
    totals = summary.get("totals", {})
    from harness.engine import STATUSES

    print(f"{summary.get('results', 0)} results: " + (", ".join(f"{totals[s]} {s}" for s in STATUSES if totals.get(s))
                                                       or "none"), file=out)
    v = summary["verdict"]
    print(f"verdict: {'PASS' if v['passed'] else 'FAIL'}" + "".join(f"\n  - {r}" for r in v["reasons"])
          + "".join(f"\n  warning: {w}" for w in v.get("warnings", [])), file=out)
