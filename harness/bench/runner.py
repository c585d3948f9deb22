"""`opconform bench`: time every selected workload on every backend in one process run, print the
table and write the figures (schema opconform-bench/1, read by harness.report.bench).

openmp and ort time inside their isolated workers (a crash or hang is a reported problem, not the
end of the run); reference and torch time in this process. The JSON is rewritten after each
workload, so an interrupted run keeps what it measured.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import environment
from harness.backends import create
from harness.backends.base import Request
from harness.bench.limits import sgemm_gflops, triad_call, triad_gbs
from harness.bench.timing import QUICK, Budget, median_and_spread, repeat
from harness.bench.workloads import ELEMENTWISE_SIZES, WORKLOADS, Workload

SCHEMA = "opconform-bench/1"
BACKENDS = ("openmp", "ort", "torch", "reference")
TORCH_PIN = "2.13.0"


class BenchError(Exception):
    pass


@dataclass
class BenchOptions:
    ops: list[str] | None = None  # op names or globs
    sizes: list[str] | None = None  # size labels or globs (small, medium, large, large-*)
    backends: list[str] = field(default_factory=lambda: list(BACKENDS))
    threads: int = 2
    bandwidth: bool = False  # also measure the triad and sgemm limits
    quick: bool = False  # a few repetitions only (smoke-testing the command)
    out: Path | None = None


def select(options: BenchOptions) -> list[Workload]:
    chosen = [w for w in WORKLOADS
              if (not options.ops or any(fnmatch.fnmatchcase(w.op, p) for p in options.ops))
              and (not options.sizes or any(fnmatch.fnmatchcase(w.size, p) for p in options.sizes))]
    if not chosen:
        known = sorted({w.op for w in WORKLOADS})
        raise BenchError(f"no benchmark matches --ops {options.ops} --sizes {options.sizes}; ops with "
                         f"benchmarks: {', '.join(known)}; sizes: small, medium, large, large-*")
    return chosen


def _torch_status(threads: int) -> tuple[object | None, str]:
    try:
        import torch
    except ImportError:
        return None, f"not installed (pip install -e '.[torch]', which pins torch=={TORCH_PIN})"
    torch.set_num_threads(threads)
    return torch, torch.__version__


def run_bench(catalog, options: BenchOptions, log=print) -> dict:
    workloads = select(options)
    budget = QUICK if options.quick else Budget()
    unknown = [b for b in options.backends if b not in BACKENDS]
    if unknown:
        raise BenchError(f"unknown bench backend(s) {', '.join(unknown)}; known: {', '.join(BACKENDS)}")
    torch, torch_version = _torch_status(options.threads) if "torch" in options.backends else (None, "not selected")
    backends, problems = {}, []
    for name in options.backends:
        if name == "torch":
            if torch is None:
                problems.append(f"torch: {torch_version}")
            continue
        backend = create(name, threads=options.threads)
        reason = backend.availability()
        if reason:
            problems.append(f"{name}: {reason}")
            backend.close()
        else:
            backends[name] = backend
    doc = {"schema": SCHEMA, "threads": options.threads,
           "environment": {**environment.describe(Path.cwd()), "torch": torch_version,
                           "repetitions": ", ".join(f"{k} {v}" for k, v in budget.as_dict().items()),
                           **_kernel_build(backends.get("openmp"))},
           "limits": {}, "results": [], "problems": problems}
    for p in problems:
        log(f"unavailable: {p}")
    try:
        if options.bandwidth:
            _measure_limits(doc, options.threads, budget, log)
            _save(doc, options.out)
        for w in workloads:
            doc["results"].append(_bench_one(catalog, w, backends, torch, budget, problems, log,
                                             options.threads, options.bandwidth))
            _save(doc, options.out)
    finally:
        for backend in backends.values():
            backend.close()
    return doc


def _kernel_build(openmp) -> dict:
    """The C library's build, flat (the report shows scalar environment entries only)."""
    if openmp is None:
        return {}
    build = openmp.environment()
    return {"kernels compiler": f"{build.get('compiler')} {build.get('flags')}",
            "kernels BLAS": build.get("blas_config", build.get("blas", "")), "kernels library": build.get("path", "")}


def _measure_limits(doc: dict, threads: int, budget: Budget, log) -> None:
    gbs, spread = triad_gbs(threads, budget)
    doc["limits"]["triad_gbs"], doc["limits"]["triad_spread"] = gbs, spread
    log(f"limit: triad {gbs:.1f} GB/s (spread {spread:.0%})")
    # The large elementwise rows move 48 MB, which a big last-level cache partly holds: the triad on
    # the same working set says what "at the limit" means for them.
    gbs, _ = triad_gbs(threads, budget, n=ELEMENTWISE_SIZES["large"])
    doc["limits"]["triad_4m_gbs"] = gbs
    log(f"limit: triad on 4M floats (the large elementwise working set) {gbs:.1f} GB/s")
    gflops, spread = sgemm_gflops(threads, budget)
    doc["limits"]["sgemm_gflops"], doc["limits"]["sgemm_spread"] = gflops, spread
    log(f"limit: sgemm {gflops:.1f} GFLOP/s (spread {spread:.0%})")


def _seed(w: Workload) -> int:
    return int.from_bytes(hashlib.sha256(f"{w.op}/{w.size}".encode()).digest()[:8], "little")


def _bench_one(catalog, w: Workload, backends: dict, torch, budget: Budget, problems: list, log,
               threads: int = 1, bandwidth: bool = False) -> dict:
    spec = catalog.by_op(w.op)
    inputs = w.make(np.random.default_rng(_seed(w)))
    request = Request(spec, "float32", inputs, dict(w.attributes), (True,) * len(spec.outputs))
    row = {"op": w.op, "size": w.size, "dtype": "float32", "shape": w.shape, "bytes": w.bytes, "flops": w.flops,
           "median_s": {}, "spread": {}, "gbs": {}, "gflops": {}}
    # Rounds interleave the backends (openmp, ort, ..., torch, then again), so a change in the
    # machine's load during one workload shifts every backend's samples alike, not one ratio.
    samples: dict[str, list[float]] = {}
    failed: set[str] = set()
    triad = triad_call(threads, w.bytes // 12) if bandwidth and w.bytes else None
    for round_ in range(budget.rounds):
        share = budget.per_round(first=round_ == 0)
        for name, backend in backends.items():
            if name in failed or (name == "reference" and round_ > 0):  # the reference: one quick round
                continue
            times = backend.time(request, (QUICK if name == "reference" else share).as_dict())
            if isinstance(times, list):
                samples.setdefault(name, []).extend(times)
            else:
                failed.add(name)
                samples.pop(name, None)
                problems.append(f"{w.op} {w.size} on {name}: {times}")
                log(f"  {w.op} {w.size} on {name}: {times}")
        if torch is not None and w.torch is not None:
            samples.setdefault("torch", []).extend(repeat(w.torch(inputs), share))
        if triad is not None:
            samples.setdefault("triad", []).extend(repeat(triad, share))
    for name in [*backends, "torch"]:
        if name in samples:
            _record(row, name, samples[name])
    if triad is not None:  # the machine's bandwidth on the same bytes, measured in the same rounds
        row["triad_gbs"] = w.bytes / median_and_spread(samples["triad"])[0] / 1e9
    log(_line(row))
    return row


def _record(row: dict, backend: str, times: list[float]) -> None:
    median, spread = median_and_spread(times)
    row["median_s"][backend], row["spread"][backend] = median, spread
    if row["bytes"]:
        row["gbs"][backend] = row["bytes"] / median / 1e9
    if row["flops"]:
        row["gflops"][backend] = row["flops"] / median / 1e9


def _save(doc: dict, out: Path | None) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(out)


def _ms(row: dict, backend: str) -> str:
    s = row["median_s"].get(backend)
    return f"{s * 1e3:9.3f}" if s is not None else f"{'-':>9}"


def _ratio(row: dict, peer: str) -> str:
    a, b = row["median_s"].get("openmp"), row["median_s"].get(peer)
    return f"{a / b:6.2f}" if a and b else f"{'-':>6}"


def _throughput(row: dict, limits: dict | None = None) -> str:
    if "openmp" in row["gflops"]:
        value, unit, limit = row["gflops"]["openmp"], "GFLOP/s", (limits or {}).get("sgemm_gflops")
    elif "openmp" in row["gbs"]:  # against the triad on the same bytes when it ran beside the row
        value, unit, limit = row["gbs"]["openmp"], "GB/s", row.get("triad_gbs", (limits or {}).get("triad_gbs"))
    else:
        return ""
    return f"{value:7.1f} {unit}" + (f" ({value / limit:4.0%} of limit)" if limit else "")


def _line(row: dict) -> str:
    return (f"{row['op']:20s} {row['size']:11s} openmp {_ms(row, 'openmp').strip()} ms  ort {_ms(row, 'ort').strip()} ms"
            f"  torch {_ms(row, 'torch').strip()} ms  {_throughput(row)}")


def table(doc: dict) -> str:
    """The figures as a text table: medians in ms, ratios openmp / peer (below 1: openmp faster)."""
    head = (f"{'op':20s} {'size':11s} {'shape':34s} {'openmp ms':>9} {'ort ms':>9} {'torch ms':>9} {'ref ms':>9} "
            f"{'/ort':>6} {'/torch':>6}  openmp throughput")
    lines = [head, "-" * len(head)]
    for row in doc["results"]:
        lines.append(f"{row['op']:20s} {row['size']:11s} {str(row['shape'])[:34]:34s} {_ms(row, 'openmp')} "
                     f"{_ms(row, 'ort')} {_ms(row, 'torch')} {_ms(row, 'reference')} {_ratio(row, 'ort')} "
                     f"{_ratio(row, 'torch')}  {_throughput(row, doc['limits'])}")
    limits = doc["limits"]
    if limits:
        lines.append(f"limits at {doc['threads']} thread(s): triad {limits['triad_gbs']:.1f} GB/s "
                     f"(on 4M floats: {limits['triad_4m_gbs']:.1f} GB/s), sgemm {limits['sgemm_gflops']:.1f} GFLOP/s; "
                     f"'% of limit': memory-bound rows against a "
                     f"triad on the same bytes timed in the same rounds, the others against sgemm")
    lines.append("medians of repeated calls; /ort and /torch are openmp's median over the peer's (below 1: openmp faster)")
    return "\n".join(lines)


def main_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
