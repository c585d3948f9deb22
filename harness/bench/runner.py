"""`opconform bench`: time every selected workload on every backend in one process run, print the
table and write the figures (schema opconform-bench/1, read by harness.report.bench).

openmp and ort time inside their isolated workers (a crash or hang is a reported problem, not the
end of the run); reference and torch time in this process. The JSON is rewritten after each
workload, so an interrupted run keeps what it measured.

ISA levels: each level runs with the openmp kernels forced to it (OPCONFORM_ISA), the OpenBLAS they
call held to a core of that level (BLAS_CORETYPE), and torch forced to the same level (TORCH_ISA_ENV:
ATen's ATEN_CPU_CAPABILITY, and the caps of the oneDNN and MKL inside torch, all read once), so a ratio
compares like with like. Several levels (`--isa baseline,avx2`) run one after another, each in a child process of its own
(torch cannot change level once imported), and their rows land in one JSON, each tagged with its
level. onnxruntime picks its own code path (MLAS dispatch) and cannot be forced: its column is what
it chose on this CPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.backends import create, openmp_lib
from harness.backends.base import Request
from harness.bench.allocator import warm_allocator
from harness.bench.limits import (
    TRIAD_ELEMENTS,
    best_triad_seconds,
    cache_sizes,
    level_triads,
    memory_level,
    sgemm_gflops,
    triad_call,
    triad_gbs,
)
from harness.bench.model import ModelListError, load_list, model_table, model_workloads
from harness.bench.workloads import ELEMENTWISE_SIZES, Workload, WorkloadError, workloads
from harness.core import dtypes, sequences
from harness.core.timing import QUICK, Budget, median_and_spread, repeat
from harness.run import environment

SCHEMA = "opconform-bench/1"
BACKENDS = ("openmp", "ort", "torch", "reference")
TORCH_PIN = "2.13.0"
# What holds torch to each of our ISA levels. ATen's own kernels read ATEN_CPU_CAPABILITY, but the oneDNN
# (LSTM, GRU, convolution) and MKL (matrix products) inside torch dispatch on their own and ignore it: under
# ATEN_CPU_CAPABILITY=avx2 alone, torch's LSTM ran oneDNN's AVX-512 code (ONEDNN_VERBOSE). Their lowest
# levels, SSE4.1 and SSE4.2, are the nearest to our x86-64 baseline.
TORCH_ISA_ENV = {
    "baseline": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
               "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}
ATEN_CAPABILITY = {level: env["ATEN_CPU_CAPABILITY"] for level, env in TORCH_ISA_ENV.items()}
# The OpenBLAS our kernels call (GEMMs of ConvGrad, GRU, LSTM; the sgemm limit) dispatches on the CPU by itself,
# as MKL does: on an AVX-512 CPU its SkylakeX kernels ran under OPCONFORM_ISA=avx2 as well, and LSTMGrad's avx2
# row read 0.68x torch where AVX2 kernels give 0.99x. OPENBLAS_CORETYPE holds it to the level; Prescott is the
# build's oldest core (OpenBLAS names it Katmai: SSE kernels), the nearest to our x86-64 baseline.
BLAS_CORETYPE = {"baseline": "Prescott", "avx2": "Haswell", "avx512": "SkylakeX"}
# OpenBLAS cores above a level: one of them at that level means the hold failed (OpenBLAS was loaded before)
_BLAS_CORES_ABOVE = {"avx2": {"SkylakeX", "Cooperlake", "SapphireRapids"}}
_BLAS_CORES_ABOVE["baseline"] = _BLAS_CORES_ABOVE["avx2"] | {"Haswell", "Zen", "Sandybridge", "Excavator",
                                                             "Steamroller", "Piledriver", "Bulldozer"}


def torch_isa_env_text(level: str) -> str:
    return " ".join(f"{k}={v}" for k, v in TORCH_ISA_ENV[level].items())


def level_env(level: str) -> dict[str, str]:
    """Everything that holds the openmp kernels, their OpenBLAS and torch to one ISA level."""
    return {"OPCONFORM_ISA": level, "OPENBLAS_CORETYPE": BLAS_CORETYPE[level], **TORCH_ISA_ENV[level]}


def blas_core_problem(level: str, core: str | None, what: str) -> str | None:
    """Why `what` did not run at `level`: OpenBLAS chose a core above it."""
    if core in _BLAS_CORES_ABOVE.get(level, ()):
        return (f"{what} ran OpenBLAS's {core} kernels, above the {level} level (OpenBLAS was loaded before "
                f"OPENBLAS_CORETYPE={BLAS_CORETYPE[level]} was set): its figures are not at that level")
    return None


class BenchError(Exception):
    pass


@dataclass
class BenchOptions:
    ops: list[str] | None = None  # op names or globs
    sizes: list[str] | None = None  # size labels or globs (small, medium, large, large-*)
    backends: list[str] = field(default_factory=lambda: list(BACKENDS))
    threads: int = 1  # one thread by default: on a shared 2-core machine two threads measure the neighbours
    bandwidth: bool = False  # also measure the triad and sgemm limits
    quick: bool = False  # a few repetitions only (smoke-testing the command)
    out: Path | None = None
    isa: list[str] | None = None  # ISA levels to measure (default: the openmp backend's selected level)
    dtypes: list[str] = field(default_factory=lambda: ["float32"])  # each workload runs in each of these
    model: Path | None = None  # a workload list (harness.bench.model): its configurations instead of the specs' sizes


def check_dtypes(options: BenchOptions) -> None:
    unknown = [d for d in options.dtypes if d not in dtypes.FLOATS]
    if unknown or not options.dtypes:
        raise BenchError(f"--dtype {','.join(unknown or options.dtypes) or '(none)'}: use {', '.join(dtypes.FLOATS)}")


def select(options: BenchOptions, catalog) -> list[Workload]:
    """The workloads the options select, from the specs' bench sections (harness.bench.workloads), or the
    configurations of a model's workload list (harness.bench.model)."""
    if options.model is not None:
        try:
            chosen = model_workloads(catalog, load_list(options.model), options.ops)
        except ModelListError as e:
            raise BenchError(str(e)) from None
        if not chosen:
            raise BenchError(f"--model {options.model}: no configuration of op {', '.join(options.ops or [])}")
        return chosen
    chosen = workloads(catalog, options.ops, options.sizes)
    if not chosen:
        known = sorted({w.op for w in workloads(catalog)})
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


def _torch_capability(torch) -> str | None:
    try:
        return str(torch.backends.cpu.get_cpu_capability()).lower()
    except Exception:  # noqa: BLE001 - an older torch: the level it took is unknown
        return None


def isa_levels(options: BenchOptions) -> list[str]:
    """The levels to measure, each checked against this CPU and the build (BenchError names why not)."""
    try:
        levels = options.isa or [openmp_lib.selected_isa()]
        for level in levels:
            if level not in openmp_lib.ISA_LEVELS:
                raise BenchError(f"--isa {level}: not a level; use {', '.join(openmp_lib.ISA_LEVELS)}")
            openmp_lib.check_cpu_supports(level)
    except (openmp_lib.IsaUnavailable, FileNotFoundError) as e:
        raise BenchError(f"--isa: {e}") from None
    return list(dict.fromkeys(levels))


def run_bench(catalog, options: BenchOptions, log=print) -> dict:
    """Every selected workload in every requested dtype at every requested ISA level (see the module docstring)."""
    check_dtypes(options)
    levels = isa_levels(options)
    if len(levels) == 1:
        return _run_level(catalog, options, levels[0], log)
    doc: dict[str, Any] = {}  # the bench JSON document (SCHEMA), merged from the levels' children
    for level in levels:
        log(f"ISA level {level}: a child process with {' '.join(f'{k}={v}' for k, v in level_env(level).items())}")
        part = _run_child(catalog, options, level, log)
        if not doc:
            doc = {**part, "results": [], "problems": [], "isa_levels": []}
            doc["environment"] = {k: v for k, v in part["environment"].items() if not k.startswith("isa")}
        doc["isa_levels"].append({"isa": level, "limits": part["limits"],
                                  **{k: v for k, v in part["environment"].items()
                                     if k.startswith(("isa", "torch", "kernels", "blas"))}})
        doc["results"] += part["results"]
        doc["problems"] += [f"[{level}] {p}" for p in part["problems"]]
        doc["load_average"] = {"start": doc["load_average"].get("start"), "end": part["load_average"].get("end")}
        if not doc["limits"]:
            doc["limits"] = part["limits"]
        doc["environment"]["isa"] = ", ".join(e["isa"] for e in doc["isa_levels"])
        _save(doc, options.out)
    return doc


def _run_child(catalog, options: BenchOptions, level: str, log) -> dict:
    """One level in a fresh interpreter: torch and the kernels load there at that level."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        argv = [sys.executable, "-m", "harness.cli", "bench", "--isa", level, "--threads", str(options.threads),
                "--out", str(out), "--backends", ",".join(options.backends)]
        argv += catalog.sources.flags() if getattr(catalog, "sources", None) else []  # the same spec directories
        argv += ["--ops", ",".join(options.ops)] if options.ops else []
        argv += ["--sizes", ",".join(options.sizes)] if options.sizes else []
        argv += ["--model", str(options.model)] if options.model is not None else []
        argv += ["--bandwidth"] if options.bandwidth else []
        argv += ["--quick"] if options.quick else []
        argv += ["--dtype", ",".join(options.dtypes)]
        env = {**os.environ, **level_env(level)}
        child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in child.stderr or ():  # its progress, as it comes (stderr=PIPE: never None)
            log(line.rstrip("\n"))
        child.wait()
        if not out.exists():
            raise BenchError(f"the {level} bench child exited {child.returncode} without figures")
        return json.loads(out.read_text())


def _run_level(catalog, options: BenchOptions, level: str, log) -> dict:
    # The workers (openmp, with their OpenBLAS) and torch read these when they start or import: set before
    # either, and put back afterwards (the backends' workers are closed by then).
    saved = {k: os.environ.get(k) for k in level_env(level)}
    try:
        return _measure_level(catalog, options, level, log)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _measure_level(catalog, options: BenchOptions, level: str, log) -> dict:
    wanted_capability = ATEN_CAPABILITY[level]
    if "torch" in sys.modules and any(os.environ.get(k) != v for k, v in TORCH_ISA_ENV[level].items()):
        log(f"torch was imported before the bench set {torch_isa_env_text(level)}: its level is "
            f"recorded as it is")
    os.environ.update(level_env(level))
    selected = select(options, catalog)
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
    doc: dict[str, Any] = {"schema": SCHEMA, "threads": options.threads, "quick": options.quick, "load_average": {"start": load_average()},
           "environment": {**environment.describe(Path.cwd()), "torch": torch_version,
                           "repetitions": ", ".join(f"{k} {v}" for k, v in budget.as_dict().items()),
                           "isa": level, "isa_forced_torch": wanted_capability,
                           "torch_isa_env": torch_isa_env_text(level),
                           "torch_cpu_capability": _torch_capability(torch) if torch else "not run",
                           "ort_isa": "its own dispatch (MLAS), not forced",
                           "blas_forced": f"OPENBLAS_CORETYPE={BLAS_CORETYPE[level]}",
                           **_kernel_build(backends.get("openmp"))},
           "limits": {}, "results": [], "problems": problems}
    for p in problems:
        log(f"unavailable: {p}")
    _flag(problems, log, blas_core_problem(level, doc["environment"].get("kernels BLAS core"), "the openmp backend"))
    try:
        if options.bandwidth:
            _measure_limits(doc, options.threads, budget, log)
            _flag(problems, log, blas_core_problem(level, doc["limits"].get("sgemm_core"), "the sgemm limit"))
            _save(doc, options.out)
        with warm_allocator() as allocator:  # the in-process peers' outputs, as openmp's and ort's
            doc["environment"]["peer_allocator"] = allocator
            for w, dtype in ((w, d) for w in selected for d in options.dtypes):
                spec = catalog.by_op(w.op)
                if dtype not in spec.type_constraints[spec.main_type].types:
                    log(f"  {w.op} {w.size}: its spec has no {dtype}, skipped")
                    continue
                row = _bench_one(catalog, w, backends, torch, budget, problems, log, options.threads,
                                 options.bandwidth, dtype, doc["limits"].get("caches"))
                if w.model:
                    row.update(model=w.model, count=w.count)
                if row["flops"] and "sgemm_gflops" in doc["limits"]:  # this level's, rows of all levels in one file
                    row["sgemm_gflops"] = doc["limits"]["sgemm_gflops"]
                doc["results"].append({**row, "isa": level})
                _save(doc, options.out)
    finally:
        for backend in backends.values():
            backend.close()
        doc["load_average"]["end"] = load_average()
        _save(doc, options.out)
    return doc


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes), None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def header(options: BenchOptions) -> str:
    """The line a bench starts with: what the figures are measured under."""
    load = load_average()
    text = (f"bench: {options.threads} thread(s) on {os.cpu_count()} CPU(s), 1-minute load average "
            f"{'unknown' if load is None else f'{load:.2f}'}")
    if load is not None and load + options.threads > (os.cpu_count() or 1):
        text += " (the machine is busy: figures will be noisy)"
    return text + ("; --quick: a few repetitions only, rough figures" if options.quick else "")


def _flag(problems: list, log, problem: str | None) -> None:
    if problem:
        problems.append(problem)
        log(problem)


def _kernel_build(openmp) -> dict:
    """The C library's build, flat (the report shows scalar environment entries only)."""
    if openmp is None:
        return {}
    build = openmp.environment()
    return {"isa_kernels": build.get("isa", "unknown"),
            "kernels compiler": f"{build.get('compiler')} {build.get('flags')}",
            "kernels BLAS": build.get("blas_config", build.get("blas", "")),
            "kernels BLAS core": build.get("blas_core", "unknown"), "kernels library": build.get("path", "")}


def _measure_limits(doc: dict, threads: int, budget: Budget, log) -> None:
    gbs, spread = triad_gbs(threads, budget)
    doc["limits"]["triad_gbs"], doc["limits"]["triad_spread"] = gbs, spread
    log(f"limit: triad {gbs:.1f} GB/s (spread {spread:.0%})")
    # The large elementwise rows move 48 MB, which a big last-level cache partly holds: the triad on
    # the same working set says what "at the limit" means for them.
    gbs, _ = triad_gbs(threads, budget, n=ELEMENTWISE_SIZES["large"])
    doc["limits"]["triad_4m_gbs"] = gbs
    log(f"limit: triad on 4M floats (the large elementwise working set) {gbs:.1f} GB/s")
    caches = cache_sizes()
    doc["limits"]["caches"] = caches
    levels = level_triads(threads, budget, caches, dram=False)
    levels["DRAM"] = {"bytes": 3 * 4 * TRIAD_ELEMENTS, "triad_gbs": doc["limits"]["triad_gbs"], "threads": threads}
    doc["limits"]["levels"] = levels
    log("limit: triad by memory level (half of each cache, from /sys/devices/system/cpu/cpu0/cache): "
        + ", ".join(f"{k} {v['triad_gbs']:.1f} GB/s on {_kb(v['bytes'])}" for k, v in levels.items()))
    gflops, spread, core = sgemm_gflops(threads, budget)
    doc["limits"]["sgemm_gflops"], doc["limits"]["sgemm_spread"], doc["limits"]["sgemm_core"] = gflops, spread, core
    log(f"limit: sgemm {gflops:.1f} GFLOP/s (spread {spread:.0%}, OpenBLAS core {core})")


def cast_inputs(spec, inputs: list, dtype: str) -> list:
    """The drawn float32 inputs in the case dtype `dtype`: each float input takes the dtype the spec binds it
    to (LayerNormalizationGrad's statistics stay float32 for float16 data); integer and bool inputs stay."""
    def cast(tensor, value):
        element = None if value is None else sequences.dtype_of(value)  # a sequence: its elements' (None when empty)
        if element is None or element.kind != "f":
            return value
        return sequences.astype(value, dtypes.NUMPY[spec.dtype_of(tensor, dtype)])
    return [cast(t, v) for t, v in zip(spec.inputs, inputs)]


def _kb(nbytes: int) -> str:
    return f"{nbytes / 2 ** 20:.1f} MB" if nbytes >= 2 ** 20 else f"{nbytes / 1024:.0f} KB"


def _bench_one(catalog, w: Workload, backends: dict, torch, budget: Budget, problems: list, log,
               threads: int = 1, bandwidth: bool = False, dtype: str = "float32",
               caches: dict | None = None) -> dict:
    spec = catalog.by_op(w.op)
    try:
        inputs = cast_inputs(spec, w.inputs(), dtype)
    except WorkloadError as e:
        raise BenchError(str(e)) from None
    wanted = set(w.case.requested_outputs)  # a size's `outputs` param (SplitTraining's node has as many as parts)
    request = Request(spec, dtype, inputs, dict(w.attributes), tuple(o.name in wanted for o in spec.outputs))
    nbytes = w.bytes_at(np.dtype(dtypes.NUMPY[dtype]).itemsize)
    row: dict[str, Any] = {"op": w.op, "size": w.size, "dtype": dtype, "shape": w.shape, "bytes": nbytes, "flops": w.flops,
           "median_s": {}, "spread": {}, "rounds_differ": {}, "gbs": {}, "gflops": {}}
    label = f"{w.op} {w.size}" + (f" {dtype}" if dtype != "float32" else "")
    # Rounds interleave the backends (openmp, ort, ..., torch, then again), so a change in the
    # machine's load during one workload shifts every backend's samples alike, not one ratio.
    samples: dict[str, list[float]] = {}
    round_medians: dict[str, list[float]] = {}  # one median per round and backend: do repeated runs agree?
    failed: set[str] = set()
    triad = None
    if nbytes:  # the memory level its bytes fit in (cpu0's caches), and the triad on the same bytes
        row["level"] = memory_level(nbytes, caches if caches is not None else cache_sizes())
    if bandwidth and nbytes:  # at one thread or `threads`, the faster (limits.best_triad_seconds)
        _, triad_threads = best_triad_seconds(threads, max(1, nbytes // 12), QUICK)
        triad = triad_call(triad_threads, max(1, nbytes // 12))
        row["triad_threads"] = triad_threads
    peer = _torch_peer(w, inputs, label, problems, log) if torch is not None else None
    for round_ in range(budget.rounds):
        share = budget.per_round(first=round_ == 0)
        for name, backend in backends.items():
            if name in failed or (name == "reference" and round_ > 0):  # the reference: one quick round
                continue
            times = backend.time(request, (QUICK if name == "reference" else share).as_dict())
            if isinstance(times, list):
                samples.setdefault(name, []).extend(times)
                if times and name != "reference":
                    round_medians.setdefault(name, []).append(float(np.median(times)))
            else:
                failed.add(name)
                samples.pop(name, None)
                problems.append(f"{label} on {name}: {times}")
                log(f"  {label} on {name}: {times}")
        if peer is not None:
            times = repeat(peer, share)
            samples.setdefault("torch", []).extend(times)
            round_medians.setdefault("torch", []).append(float(np.median(times)))
        if triad is not None:
            samples.setdefault("triad", []).extend(repeat(triad, share))
    for name in [*backends, "torch"]:
        if name in samples:
            _record(row, name, samples[name])
            medians = round_medians.get(name, [])
            if len(medians) > 1:
                row["rounds_differ"][name] = (max(medians) - min(medians)) / row["median_s"][name]
    if triad is not None and nbytes:  # (triad is None without bytes) the machine's bandwidth on the same bytes, measured in the same rounds
        row["triad_gbs"] = nbytes / median_and_spread(samples["triad"])[0] / 1e9
    log(_line(row))
    return row


def _torch_peer(w: Workload, inputs: list, label: str, problems: list, log):
    """torch's call on these inputs, run once to see that torch takes them (not every ATen CPU kernel has
    every dtype): a refusal is a problem of the row, not the end of the bench."""
    if w.torch is None:
        return None
    try:
        call = w.torch(inputs)
        call()
        return call
    except Exception as e:  # noqa: BLE001 - torch's own error, whatever its type
        problems.append(f"{label} on torch: {type(e).__name__}: {e}")
        log(f"  {problems[-1]}")
        return None


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


NOISY = 0.10  # repeated runs of one figure that disagree by more than this are flagged


def _noise(row: dict, backend: str) -> float | None:
    """How far repeated runs of one figure disagree: the larger of the interquartile spread of its calls
    and the gap between its rounds' medians, over the median."""
    if backend not in row["median_s"]:
        return None
    return max(row.get("spread", {}).get(backend, 0.0), row.get("rounds_differ", {}).get(backend, 0.0))


def _fig(row: dict, backend: str) -> str:
    """A median in ms with its spread: `1.234 ±3%`."""
    noise = _noise(row, backend)
    if noise is None:
        return f"{'-':>15}"
    return f"{_ms(row, backend)} ±{min(noise, 9.99):4.0%}"


def noise_warnings(doc: dict) -> list[str]:
    """One line per figure whose repeated runs disagree by more than NOISY."""
    lines = []
    for row in doc["results"]:
        for backend in row["median_s"]:
            noise = _noise(row, backend)
            if noise is not None and noise > NOISY and backend != "reference":
                lines.append(f"warning: {row['op']} {row['size']} {row.get('dtype', 'float32')} "
                             f"{row.get('isa', '-')} on {backend}: repeated runs disagree by {noise:.0%} "
                             f"(over {NOISY:.0%}); its ratios are not to be trusted: rerun on a quieter machine")
    return lines


def _ratio(row: dict, peer: str) -> str:
    a, b = row["median_s"].get("openmp"), row["median_s"].get(peer)
    return f"{a / b:6.2f}" if a and b else f"{'-':>6}"


def row_limit(row: dict, limits: dict | None = None) -> tuple[float, str, float | None, str] | None:
    """(openmp's throughput, its unit, the limit it is held against or None, the limit's name): sgemm at the row's level
    for compute-bound rows; for memory-bound ones the triad of the memory level its bytes fit in (row["level"]): the
    triad on the same bytes timed beside it, else the level's triad of the bench's limits; never the DRAM triad for
    a cache-sized row (older rows without a level: the bench's triad)."""
    limits = limits or {}
    if "openmp" in row["gflops"]:
        return row["gflops"]["openmp"], "GFLOP/s", row.get("sgemm_gflops", limits.get("sgemm_gflops")), "sgemm"
    if "openmp" not in row["gbs"]:
        return None
    level = row.get("level")
    if row.get("triad_gbs"):
        limit = row["triad_gbs"]
    elif level and level in (limits.get("levels") or {}):
        limit = limits["levels"][level]["triad_gbs"]
    elif level in (None, "DRAM"):
        limit = limits.get("triad_gbs")
    else:
        limit = None
    return row["gbs"]["openmp"], "GB/s", limit, f"{level} triad" if level else "triad"


def _throughput(row: dict, limits: dict | None = None) -> str:
    found = row_limit(row, limits)
    if found is None:
        return ""
    value, unit, limit, name = found
    if limit:
        return f"{value:7.1f} {unit} ({value / limit:4.0%} of limit)" + (f" {name}" if unit == "GB/s" else "")
    return f"{value:7.1f} {unit}" + (f" ({row['level']})" if row.get("level") else "")


def _row_limits(doc: dict, row: dict) -> dict:
    """The limits of the row's ISA level (a file of several levels holds one set per level)."""
    for e in doc.get("isa_levels") or []:
        if e.get("isa") == row.get("isa"):
            return e.get("limits") or {}
    return doc.get("limits") or {}


def _limit_cell(row: dict, limits: dict) -> str:
    """The model table's limit column: "L1 triad 68%", "sgemm 55%", or the level alone without a measured limit."""
    found = row_limit(row, limits)
    if found is None:
        return row.get("level", "")
    value, unit, limit, name = found
    return f"{value:.1f} {unit}, {value / limit:.0%} of {name}" if limit else f"{value:.1f} {unit} ({row.get('level', '-')})"


def _line(row: dict) -> str:
    return (f"{row['op']:20s} {row['size']:11s} {row['dtype']:8s} openmp {_ms(row, 'openmp').strip()} ms"
            f"  ort {_ms(row, 'ort').strip()} ms  torch {_ms(row, 'torch').strip()} ms  {_throughput(row)}")


def table(doc: dict) -> str:
    """The figures as a text table: medians in ms, ratios openmp / peer (below 1: openmp faster)."""
    head = (f"{'op':20s} {'size':11s} {'dtype':8s} {'isa':8s} {'shape':34s} {'openmp ms':>15} {'ort ms':>15} "
            f"{'torch ms':>15} {'ref ms':>9} {'/ort':>6} {'/torch':>6}  openmp throughput")
    load = doc.get("load_average") or {}
    shown = " -> ".join(f"{v:.2f}" for v in (load.get("start"), load.get("end")) if v is not None) or "unknown"
    lines = [f"{doc['threads']} thread(s); 1-minute load average {shown} (start -> end)"
             + ("; --quick: a few repetitions only, rough figures" if doc.get("quick") else ""),
             head, "-" * len(head)]
    models = [r for r in doc["results"] if "model" in r]
    if models:  # `bench --model`: the per-layer tables and per-model totals instead (harness.bench.model)
        lines[1:] = [model_table(doc, lambda r: _limit_cell(r, _row_limits(doc, r)))]
    for row in (r for r in doc["results"] if "model" not in r):
        lines.append(f"{row['op']:20s} {row['size']:11s} {row.get('dtype', 'float32'):8s} {row.get('isa', '-'):8s} "
                     f"{str(row['shape'])[:34]:34s} {_fig(row, 'openmp')} "
                     f"{_fig(row, 'ort')} {_fig(row, 'torch')} {_ms(row, 'reference')} {_ratio(row, 'ort')} "
                     f"{_ratio(row, 'torch')}  {_throughput(row, _row_limits(doc, row))}")
    for e in doc.get("isa_levels") or [{"isa": doc.get("environment", {}).get("isa", "-"), "limits": doc["limits"]}]:
        limits = e.get("limits") or {}
        if limits:
            lines.append(f"limits at isa {e['isa']}, {doc['threads']} thread(s): triad {limits['triad_gbs']:.1f} GB/s "
                         f"(on 4M floats: {limits['triad_4m_gbs']:.1f} GB/s), sgemm {limits['sgemm_gflops']:.1f} GFLOP/s"
                         f" (OpenBLAS {limits.get('sgemm_core', 'core not recorded')})")
    for e in doc.get("isa_levels") or [{"isa": doc.get("environment", {}).get("isa", "-"), "limits": doc["limits"]}]:
        levels = (e.get("limits") or {}).get("levels") or {}
        if levels:
            caches = (e.get("limits") or {}).get("caches") or {}
            lines.append(f"triad by memory level at isa {e['isa']}: " + ", ".join(
                f"{k} {v['triad_gbs']:.1f} GB/s (on {_kb(v['bytes'])}"
                + (f" of {_kb(caches[k])}" if k in caches else "") + ")" for k, v in levels.items()))
    if doc["limits"]:
        lines.append("'% of limit': memory-bound rows against the triad of the memory level their bytes fit in (cpu0's "
                     "L1, L2, L3 from sysfs, else DRAM), timed on the same bytes in the same rounds (at one thread or "
                     "the bench's, the faster), the others against sgemm at their level")
    lines.append("medians of repeated calls, +-: how far repeated runs disagree (interquartile spread, or the gap between "
                 "interleaved rounds, whichever is larger); /ort and /torch are openmp's median over the peer's (below 1: "
                 "openmp faster); "
                 "isa: the level openmp ran at, its OpenBLAS and torch forced to the same (OPENBLAS_CORETYPE; ATen, "
                 "and the oneDNN and MKL inside torch), ort its own dispatch")
    allocator = doc.get("environment", {}).get("peer_allocator")
    if allocator:
        lines.append(f"torch and reference allocate per call, in this process: {allocator}")
    torch_levels = [e for e in doc.get("isa_levels", [doc.get("environment", {})])
                    if e.get("torch_cpu_capability") not in (None, "not run")]
    for e in torch_levels:
        forced = e.get("torch_isa_env") or f"ATEN_CPU_CAPABILITY={e.get('isa_forced_torch')}"  # older files
        lines.append(f"torch at isa {e.get('isa')}: {forced}, torch reports {e.get('torch_cpu_capability')}")
    lines += noise_warnings(doc)
    return "\n".join(lines)


def main_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
