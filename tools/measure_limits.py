"""Measure what the time limits bound (docs/limits.md), to set them at least 10x above it.

    python tools/measure_limits.py hooks                       # CPU and wall time of every spec-hook call
    python tools/measure_limits.py calls --backends openmp,ort,ort-autograd [--tier nightly] [--top 8]

`hooks` loads every spec with the hook limit replaced by a timer. `calls` runs each case of the tier
once per backend (with a 600 s limit, so that nothing slow is cut short) and reports the slowest
answered calls per backend and tier. The wall time is taken as `--timeout` sees it. Run it beside the
load you want to measure under (e.g. a few `python -c "while True: pass"`); it prints the load average.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def hooks(top: int) -> None:
    from harness.core import spec_checks
    from harness.core.spec_loader import load_catalog

    rows, current = [], [""]

    @contextlib.contextmanager
    def timed(_seconds):
        before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        yield
        after = resource.getrusage(resource.RUSAGE_SELF)
        rows.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                     time.perf_counter() - wall, current[0]))

    walk = spec_checks._walk_cases

    def named_walk(spec, max_case_bytes):
        current[0] = spec.op
        return walk(spec, max_case_bytes)

    spec_checks._cpu_limit, spec_checks._walk_cases = timed, named_walk
    os.environ["OPCONFORM_NO_CACHE"] = "1"  # checked specs from the cache would run no hook
    load_catalog(REPO / "specs")
    print(f"{len(rows)} hook calls, load {os.getloadavg()[0]:.1f}; limit {spec_checks.HOOK_CPU_SECONDS:g} s of CPU")
    for cpu, wall, op in sorted(rows, reverse=True)[:top]:
        print(f"  {cpu:.3f} s CPU  {wall:.3f} s wall  {op}")


def calls(backend_names: list[str], tier: str, top: int) -> None:
    from harness import backends as registry
    from harness.backends.base import Outputs, Rejected
    from harness.core.cases import expand
    from harness.core.spec_loader import load_catalog
    from harness.run.engine import prepare, request_for

    catalog = load_catalog(REPO / "specs")
    backends = {}
    for name in backend_names:
        backend = registry.create(name, timeout=600)
        start = time.perf_counter()
        reason = backend.availability()
        print(f"{name}: {'available' if reason is None else reason}; library load {time.perf_counter() - start:.2f} s, "
              f"load {os.getloadavg()[0]:.1f}")
        if reason is None:
            backends[name] = backend
    seen = {name: [] for name in backends}  # (seconds, tier, case)
    for spec in catalog.specs:
        ci = {c.full_id for c in expand(spec, "ci")}
        for case in expand(spec, tier):
            prepared = prepare(case)
            if prepared.problem:
                continue
            request = request_for(prepared)
            for name, backend in backends.items():
                start = time.perf_counter()
                outcome = backend.run(request)
                if isinstance(outcome, (Outputs, Rejected)):  # answered: what a limit must never cut short
                    seen[name].append((time.perf_counter() - start, "ci" if case.full_id in ci else "nightly",
                                       f"{spec.op} {case.full_id}", os.getloadavg()[0]))
    for name, rows in seen.items():
        for which in ("ci", "nightly"):
            for seconds, _, label, load in sorted((r for r in rows if r[1] == which), reverse=True)[:top]:
                print(f"{name:13s} {which:8s} {seconds:7.3f} s  load {load:4.1f}  {label}")
    for backend in backends.values():
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("hooks")
    p.add_argument("--top", type=int, default=8)
    p = sub.add_parser("calls")
    p.add_argument("--backends", default="openmp,ort,ort-autograd")
    p.add_argument("--tier", default="nightly", choices=("smoke", "ci", "nightly"))
    p.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    if args.what == "hooks":
        hooks(args.top)
    else:
        calls(args.backends.split(","), args.tier, args.top)


if __name__ == "__main__":
    main()
