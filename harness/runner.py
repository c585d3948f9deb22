"""`opconform run`: every case of the selected specs on the selected backends, streamed to disk."""
from __future__ import annotations

import fnmatch
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from harness import backends as registry
from harness import environment, probe
from harness.cases import Case, expand
from harness import gate
from harness.engine import prepare, run_case
from harness.results import ResultsWriter, Tally, format_table, write_json
from harness.spec.loader import Catalog


# Environment variables that set how many threads the backends' kernels and BLAS use.
# Environment that changes what the backends compute or how fast: recorded with every run.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "MKL_NUM_THREADS",
                    "OPCONFORM_KERNELS_LIB", "LD_PRELOAD")


class RunError(Exception):
    """A problem with the run's arguments (an unavailable backend asked for by name)."""


@dataclass
class RunOptions:
    ops: list[str] | None = None
    backends: list[str] | None = None  # None: every default backend that is available here
    tier: str = "ci"
    cases: str | None = None  # glob over case ids (or dtype-case ids)
    seed: int = 0
    threads: int = 1
    timeout: float = 20.0
    out: Path | None = None
    reports: Path = Path("reports")
    progress: bool | None = None  # None: a bar on a terminal, a line per op otherwise


@dataclass
class RunOutcome:
    run_dir: Path
    tally: Tally
    summary: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.summary["verdict"]["passed"]


def select_cases(catalog: Catalog, options: RunOptions) -> list[Case]:
    cases = [c for spec in catalog.select(options.ops) for c in expand(spec, options.tier)]
    if options.cases:
        cases = [c for c in cases if fnmatch.fnmatchcase(c.id, options.cases)
                 or fnmatch.fnmatchcase(c.full_id, options.cases)]
    return cases


def open_backends(options: RunOptions) -> tuple[list, dict]:
    """The backends to run and, for every backend considered, its availability."""
    names = options.backends or list(registry.DEFAULT)
    chosen, status = [], {}
    for name in names:
        backend = registry.create(name, threads=options.threads, timeout=options.timeout)
        reason = backend.availability()
        status[name] = {"available": reason is None, "reason": reason}
        if reason is None:
            chosen.append(backend)
        elif options.backends:
            backend.close()
            raise RunError(f"backend '{name}' is unavailable here: {reason}")
        else:
            backend.close()
    return chosen, status


def new_run_dir(options: RunOptions) -> Path:
    if options.out:
        return options.out
    base = options.reports / f"{time.strftime('%Y%m%d-%H%M%S')}-{options.tier}"
    run_dir, n = base, 1
    while run_dir.exists():
        n += 1
        run_dir = base.with_name(f"{base.name}-{n}")
    return run_dir


def run(catalog: Catalog, options: RunOptions) -> RunOutcome:
    cases = select_cases(catalog, options)
    if not cases:
        raise RunError("no case matches the selection (check --ops, --tier and --cases)")
    backends, availability = open_backends(options)
    run_dir = new_run_dir(options)
    writer = ResultsWriter(run_dir / "results.jsonl")
    tally = Tally()
    records: list[dict] = []
    started = time.time()
    summary = {
        "run_id": run_dir.name, "tier": options.tier, "seed": options.seed, "threads": options.threads,
        "ops": sorted({c.spec.op for c in cases}), "case_filter": options.cases,
        "backends": {b.name: {**availability[b.name], **b.environment()} for b in backends}
        | {n: a for n, a in availability.items() if not a["available"]},
        "environment": environment.describe(catalog.root), "spec_set": catalog.digest,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)), "complete": False,
        # what a report needs to document the ops and to write commands that rerun one case
        "specs": str(Path(catalog.root).resolve()), "timeout": options.timeout,
        "env_vars": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
    }
    # Once per run: what each backend really runs per op x dtype; the engine reports the cases of
    # what it does not run as unsupported (harness.probe), from the same per-backend cache.
    summary["capabilities"] = probe.matrix(backends, probe.pairs_of(cases), unavailable={
        name: a["reason"] for name, a in availability.items() if not a["available"]})
    write_json(run_dir / "summary.json", summary)
    bar = tqdm(total=len(cases) * len(backends), unit="result", file=sys.stderr, dynamic_ncols=True,
               disable=not options.progress if options.progress is not None else None)
    per_op_lines = bar.disable and options.progress is not False
    try:
        current_op, op_results = None, 0
        for case in cases:
            if per_op_lines and case.spec.op != current_op:
                if current_op:
                    print(f"  {current_op}: {op_results} results", file=sys.stderr, flush=True)
                current_op, op_results = case.spec.op, 0
            prepared = prepare(case, options.seed)
            for backend in backends:
                # the same entry point the generated tests call: judge, self-consistency checks, waivers
                for r in run_case(catalog, prepared, backend):
                    writer.write(r)
                    tally.add(r)
                    records.append(r.to_json())
                    op_results += 1
                bar.set_description_str(f"{case.spec.op} {backend.name}", refresh=False)
                bar.update()
        if per_op_lines and current_op:
            print(f"  {current_op}: {op_results} results", file=sys.stderr, flush=True)
        summary["complete"] = True
    finally:
        bar.close()
        writer.close()
        for backend in backends:
            backend.close()
        summary.update(finished=time.strftime("%Y-%m-%dT%H:%M:%S"), seconds=round(time.time() - started, 1),
                       results=sum(tally.totals().values()), totals=dict(tally.totals()), table=tally.table(),
                       divergences={"reproduced": dict(tally.reproduced), "not_reproduced": dict(tally.not_reproduced)})
        # the gate's verdict: what the generated suites and `opconform merge` decide on the same records
        judged = gate.summarize(records, catalog, complete=summary["complete"])
        summary.update(waivers=judged["waivers"], verdict=judged["verdict"])
        write_json(run_dir / "summary.json", summary)
    return RunOutcome(run_dir, tally, summary)


def print_summary(outcome: RunOutcome, out=None) -> None:
    out = out or sys.stdout
    print(format_table(outcome.tally.table()), file=out)
    totals = outcome.tally.totals()
    print(f"\n{sum(totals.values())} results in {outcome.summary.get('seconds', 0):g} s: "
          + ", ".join(f"{totals[s]} {s}" for s in ("pass", "fail", "divergent", "waived", "unsupported", "crashed", "error")
                      if totals[s]), file=out)
    for result in outcome.tally.unexpected[:20]:
        print(f"  {result.status.upper()} {result.op} [{result.backend}] {result.dtype}-{result.case}: "
              f"{result.detail[:300]}", file=out)
        if result.diagnosis and result.diagnosis["summary"] not in result.detail[:300]:
            print(f"      diagnosis: {result.diagnosis['summary']}", file=out)
    if len(outcome.tally.unexpected) > 20:
        print(f"  ... and {len(outcome.tally.unexpected) - 20} more in results.jsonl", file=out)
    verdict = outcome.summary["verdict"]
    print(f"\nverdict: {'PASS' if verdict['passed'] else 'FAIL'}"
          + "".join(f"\n  - {r}" for r in verdict["reasons"])
          + "".join(f"\n  warning: {w}" for w in verdict.get("warnings", [])), file=out)
    print(f"results: {outcome.run_dir}/results.jsonl, {outcome.run_dir}/summary.json", file=out)
