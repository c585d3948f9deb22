"""`opconform run`: every case of the selected specs on the selected backends, streamed to disk.

Every valid case of an op with a forward op also gets the gradient check of its reference
(harness.run.case_checks.gradient_case), whatever --backends says: the reference judges every backend.
The expected backends (harness.backends.EXPECTED) must be available unless --backends names the
ones to run or --allow-missing-backends says a missing one is fine: one missing fails the verdict."""
from __future__ import annotations

import fnmatch
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from harness import backends as registry
from harness.backends.limits import DEFAULT_TIMEOUT
from harness.core.cases import Case, expand
from harness.core.spec_loader import Catalog
from harness.core.status import STATUSES, UNEXPECTED
from harness.run import environment, probe, rundir, signals
from harness.run.case_checks import gradient_case, run_case
from harness.run.catalog import RunCatalog
from harness.run.engine import prepare
from harness.run.results import Tally, format_table
from harness.run.rundir import ResultsWriter, write_json

# Environment that changes what the backends compute or how fast (threads, ISA levels, libraries):
# recorded with every run.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "MKL_NUM_THREADS",
                    "OPCONFORM_KERNELS_LIB", "OPCONFORM_ISA", "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY",
                    "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "LD_PRELOAD")


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
    timeout: float = DEFAULT_TIMEOUT  # harness.backends.limits
    out: Path | None = None
    reports: Path | None = None  # None: rundir.default_reports()
    progress: bool | None = None  # None: a bar on a terminal, a line per op otherwise
    allow_missing_backends: bool = False  # an unavailable expected backend is recorded, not a failed verdict
    waiver_files: list[str] = field(default_factory=list)  # --waivers: recorded, so a repro command loads them too


@dataclass
class RunOutcome:
    run_dir: Path
    tally: Tally
    summary: dict = field(default_factory=dict)
    unexpected: list[dict] = field(default_factory=list)  # records of unexpected results, for the printout

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
    names = options.backends or registry.defaults()
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
    """--out, or a new directory under ./reports of the current directory (the checkout's own reports/ from one of
    its subfolders; never inside the package)."""
    return options.out or rundir.new_run_dir(options.reports or rundir.default_reports(), options.tier)


Terminated = signals.Terminated  # SIGTERM during a run: it ends like Ctrl-C; the CLI exits 143


def run(catalog: RunCatalog, options: RunOptions) -> RunOutcome:
    """Run the selection into its run directory, held (harness.run.rundir.claim) for the run's life: a second
    writer is refused with RunDirBusy. SIGTERM and SIGINT end the run with a summary that says so."""
    cases = select_cases(catalog, options)
    if not cases:
        raise RunError("no case matches the selection (check --ops, --tier and --cases)")
    run_dir = rundir.claim(new_run_dir(options))
    held = signals.hold()  # `opconform run` holds them from its start; a caller of run() gets the same
    try:
        signals.arm()
        return _run(catalog, options, cases, run_dir)
    finally:
        rundir.release(run_dir)
        if held:
            signals.release()


def _run(catalog: RunCatalog, options: RunOptions, cases: list[Case], run_dir: Path) -> RunOutcome:
    backends, availability = open_backends(options)
    writer = ResultsWriter(run_dir / rundir.RESULTS)
    tally = Tally()
    records: list[dict] = []
    started = time.time()
    backend_info = {b.name: {**availability[b.name], **b.environment()} for b in backends} \
        | {n: a for n, a in availability.items() if not a["available"]}
    summary: dict[str, Any] = {  # summary.json: JSON values
        "run_id": run_dir.name, "tier": options.tier, "seed": options.seed, "threads": options.threads,
        "ops": sorted({c.spec.op for c in cases}), "case_filter": options.cases,
        "backends": backend_info,
        # left out on purpose: --backends named the ones to run, or --allow-missing-backends
        "missing_backends": [] if options.backends or options.allow_missing_backends
        else rundir.missing_expected(backend_info),
        "environment": environment.describe(catalog.root), "spec_set": catalog.digest,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)), "complete": False,
        # what a report needs to document the ops and to write commands that rerun one case
        "specs": str(Path(catalog.root).resolve()), "timeout": options.timeout,
        "spec_sources": catalog.sources.describe() if catalog.sources is not None else None,
        "waiver_files": [str(Path(f).resolve()) for f in options.waiver_files],
        "command_backends": {b.name: registry.commands()[b.name] for b in backends if b.name in registry.commands()},
        "env_vars": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
    }
    # Once per run: what each backend really runs per op x dtype; the engine reports the cases of
    # what it does not run as unsupported (harness.run.probe), from the same per-backend cache.
    summary["capabilities"] = probe.matrix(backends, probe.pairs_of(cases), unavailable={
        name: a["reason"] for name, a in availability.items() if not a["available"]})
    # until the final one: a failed verdict, so that a run killed from here on leaves a summary saying so
    write_json(run_dir / rundir.SUMMARY, rundir.provisional_summary(summary))
    bar = tqdm(total=len(cases) * len(backends), unit="result", file=sys.stderr, dynamic_ncols=True,
               disable=not options.progress if options.progress is not None else None)
    per_op_lines = bar.disable and options.progress is not False
    interrupted = None
    try:
        current_op, op_results = None, 0

        def keep(results):
            nonlocal op_results
            for r in results:
                record = r.to_json()
                with signals.critical():  # on disk and counted together: a SIGTERM never lands between them
                    writer.write(record)
                    tally.add(record)
                    records.append(record)
                op_results += 1

        for case in cases:
            if per_op_lines and case.spec.op != current_op:
                if current_op:
                    print(f"  {current_op}: {op_results} results", file=sys.stderr, flush=True)
                current_op, op_results = case.spec.op, 0
            prepared = prepare(case, options.seed)
            # the same entry points the generated tests call: the reference's gradient check, then per
            # backend the judgement, self-consistency checks and waivers
            gradient = gradient_case(prepared)
            keep([gradient] if gradient else [])
            for backend in backends:
                keep(run_case(catalog, prepared, backend))
                bar.set_description_str(f"{case.spec.op} {backend.name}", refresh=False)
                bar.update()
        if per_op_lines and current_op:
            print(f"  {current_op}: {op_results} results", file=sys.stderr, flush=True)
        summary["complete"] = True
    except KeyboardInterrupt as e:
        interrupted = "SIGTERM" if isinstance(e, Terminated) else "SIGINT"
        raise
    finally:
        # a signal now waits for the summary to be written (and a second SIGTERM is ignored: harness.run.signals)
        with signals.critical():
            bar.close()
            writer.close()
            for backend in backends:
                backend.close()
            summary.update(finished=time.strftime("%Y-%m-%dT%H:%M:%S"), seconds=round(time.time() - started, 1))
            # the one summary builder and verdict the generated suites and `opconform merge` use too
            summary = rundir.build_summary(summary, records, catalog, complete=summary["complete"])
            if interrupted:
                summary["verdict"]["interrupted"] = interrupted
            write_json(run_dir / rundir.SUMMARY, summary)
    return RunOutcome(run_dir, tally, summary, [r for r in records if r["status"] in UNEXPECTED])


def print_summary(outcome: RunOutcome, out=None, started: float | None = None) -> None:
    """started: when the command started (time.time()), so that the time printed counts its start-up."""
    out = out or sys.stdout
    print(format_table(outcome.tally.table()), file=out)
    totals = outcome.tally.totals()
    seconds = round(time.time() - started, 1) if started else outcome.summary.get("seconds", 0)
    print(f"\n{sum(totals.values())} results in {seconds:g} s: "
          + ", ".join(f"{totals[s]} {s}" for s in STATUSES if totals[s]), file=out)
    for r in outcome.unexpected[:20]:
        check = "" if r.get("check", "reference") == "reference" else f" ({r['check']})"
        print(f"  {r['status'].upper()} {r['op']} [{r['backend']}]{check} {r['dtype']}-{r['case']}: "
              f"{r['detail'][:300]}", file=out)
        if r.get("diagnosis") and r["diagnosis"]["summary"] not in r["detail"][:300]:
            print(f"      diagnosis: {r['diagnosis']['summary']}", file=out)
    if len(outcome.unexpected) > 20:
        print(f"  ... and {len(outcome.unexpected) - 20} more in {rundir.RESULTS}", file=out)
    verdict = outcome.summary["verdict"]
    print(f"\nverdict: {'PASS' if verdict['passed'] else 'FAIL'}"
          + "".join(f"\n  - {r}" for r in verdict["reasons"])
          + "".join(f"\n  warning: {w}" for w in verdict.get("warnings", [])), file=out)
    print(f"results: {outcome.run_dir}/{rundir.RESULTS}, {outcome.run_dir}/{rundir.SUMMARY}", file=out)
