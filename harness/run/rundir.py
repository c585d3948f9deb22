"""A run directory: results.jsonl (one JSON line per result, flushed as it comes) and summary.json.

`opconform run`, the pytest plugin (`--opconform-results DIR`) and `opconform merge` all write here,
and build their summary.json with the one function `build_summary`, so the three have the same keys
and the same verdict (harness.run.gate). results.jsonl holds no timings or dates, so the same run writes
the same file; summary.json holds the run's metadata, counts and verdict.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path

from harness import backends as registry
from harness.run import gate
from harness.core.cases import expand
from harness.run.results import Tally

RESULTS, SUMMARY = "results.jsonl", "summary.json"
# Every summary.json has these metadata keys (None where the source has no value), then the counts and verdict.
METADATA = ("run_id", "tier", "selection", "case_filter", "seed", "threads", "ops", "backends", "missing_backends",
            "environment", "spec_set", "shard", "merged_from", "started", "finished", "seconds", "complete")


class MergeError(ValueError):
    """Shard directories that cannot be merged (missing files, the same result twice)."""


class ResultsWriter:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("w", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()  # a killed run keeps every result written so far

    def close(self) -> None:
        self._file.close()


def read_results(path: Path) -> list[dict]:
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_summary(run_dir: Path) -> dict:
    path = Path(run_dir) / SUMMARY
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_json(path: Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def write_run(run_dir: Path, records: list[dict], summary: dict) -> None:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / RESULTS).open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, allow_nan=False) + "\n")
    write_json(run_dir / SUMMARY, summary)


def missing_expected(backends: dict, left_out: set[str] | None = None, named: tuple[str, ...] = ()) -> list[dict]:
    """The expected backends (harness.backends.EXPECTED, and those the user named) listed as
    unavailable in `backends` (name -> {"available", "reason"}) and not left out on purpose: each
    fails the verdict. An installed plugin nobody named is not expected."""
    left_out = left_out or set()
    return [{"name": name, "reason": backends[name].get("reason") or "unavailable"}
            for name in dict.fromkeys([*registry.EXPECTED, *named])
            if name in backends and not backends[name].get("available") and name not in left_out]


def build_summary(meta: dict, records: list[dict], catalog, **verdict_options) -> dict:
    """summary.json: the metadata keys (METADATA, None where missing), then counts, divergences,
    waiver health and the gate's verdict over `records`."""
    today = verdict_options.get("today") or gate.waiver_rules.today()
    tally = Tally()
    for r in records:
        tally.add(r)
    missing = meta.get("missing_backends") or []
    summary = {key: meta.get(key) for key in METADATA}
    summary["missing_backends"] = missing
    summary.update({k: v for k, v in meta.items() if k not in summary})
    summary.update(results=len(records), totals=dict(tally.totals()), table=tally.table(),
                   divergences={"reproduced": dict(tally.reproduced), "not_reproduced": dict(tally.not_reproduced)},
                   waivers=gate.waiver_health(records, catalog.waivers, today),
                   verdict=gate.verdict(records, catalog.waivers, missing_backends=missing, **verdict_options))
    return summary


def order(records: list[dict], catalog) -> list[dict]:
    """`opconform run`'s order: op, then the case's place in its spec, then the backend and check."""
    place = {}
    for spec in catalog.specs:
        for index, case in enumerate(expand(spec)):
            place[(spec.id, case.full_id)] = index
    backends = {name: i for i, name in enumerate(registry.known())}
    return sorted(records, key=lambda r: (r["op"], r["spec"], place.get((r["spec"], f"{r['dtype']}-{r['case']}"), 1 << 30),
                                          r.get("check") != "gradient", backends.get(r["backend"], len(backends)),
                                          r["backend"]))


def key(record: dict) -> tuple:
    return record["spec"], record["backend"], record["dtype"], record["case"], record.get("check", "reference")


def merge(dirs: list[Path], out: Path, catalog, today: datetime.date | None = None,
          stale_generated: list[str] | None = None) -> dict:
    """Merge the run directories of shards (or of separate runs) into out; returns the summary."""
    records, seen, parts = [], {}, []
    for d in dirs:
        path = Path(d) / RESULTS
        if not path.is_file():
            raise MergeError(f"{d}: no results.jsonl (pass run directories written by `opconform run` or "
                             f"`pytest --opconform-results DIR`)")
        parts.append(read_summary(d))
        for r in read_results(path):
            k = key(r)
            if k in seen:
                if r.get("check") == "gradient" and records[seen[k][1]] == r:
                    continue  # the same gradient check, run by two shards: one result
                raise MergeError(f"{d}: {r['op']} [{r['backend']}] {r['dtype']}-{r['case']} is also in {seen[k][0]}: "
                                 "the shards overlap (or a directory was given twice)")
            seen[k] = (str(d), len(records))
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
    missing_backends = {}
    for p in parts:  # a part that missed an expected backend makes the merged run miss it
        for m in p.get("missing_backends") or []:
            missing_backends.setdefault(m["name"], m)
    complete = all(p.get("complete", True) for p in parts)
    records = order(records, catalog)
    tiers = {p.get("tier") for p in parts}
    meta = {"run_id": Path(out).name, "merged_from": [str(d) for d in dirs],
            "tier": next(iter(tiers)) if len(tiers) == 1 else None,
            "ops": sorted({r["op"] for r in records}), "backends": backends,
            "missing_backends": list(missing_backends.values()),
            "environment": next((p["environment"] for p in parts if p.get("environment")), {}),
            "spec_set": catalog.digest, "complete": complete}
    summary = build_summary(meta, records, catalog, today=today, complete=complete,
                            stale_generated=stale_generated, extra=extra)
    write_run(Path(out), records, summary)
    return summary
