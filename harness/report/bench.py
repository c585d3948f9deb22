"""The benchmark figures the report shows: the JSON that `opconform bench` writes.

The report reads `--bench FILE`, else RUN_DIR/bench.json when present. Schema (version 1); only
`results[].op` and `results[].median_s` are required, everything else is shown when present:

    {
      "schema": "opconform-bench/1",
      "threads": 2,                                  # threads each backend used
      "environment": {"cpu": "...", "torch": "2.13.0", ...},   # free-form, shown as a table
      "limits": {"triad_gbs": 28.0,                  # the machine's measured limits (bench --bandwidth):
                 "sgemm_gflops": 270.0},             #   STREAM-like triad GB/s and sgemm GFLOP/s
      "results": [
        {"op": "ReluGrad", "size": "large",          # size label: small, medium, large, ...
         "dtype": "float32", "shape": "4194304",     # shape: text or a list of ints
         "bytes": 50331648,                          # bytes one call moves (memory-bound ops)
         "flops": null,                              # floating-point operations of one call (ConvGrad, GRU)
         "median_s": {"openmp": 0.0021, "ort": 0.019, "torch": 0.0025, "reference": 0.03},
         "spread": {"openmp": 0.04},                 # relative spread of the repetitions, e.g. IQR / median
         "gbs": {"openmp": 24.0},                    # optional: derived as bytes / median_s / 1e9
         "gflops": {"openmp": 0.0},                  # optional: derived as flops / median_s / 1e9
         "isa": "avx2",                              # optional: the ISA level openmp (and torch) ran at
         "triad_gbs": 40.0,                          # optional: the triad on the row's bytes, timed beside it
         "sgemm_gflops": 200.0}                      # optional: sgemm at the row's level (else the limits')
      ]
    }

Ratios are median-time ratios openmp / ort and openmp / torch: below 1, openmp is faster. A
`median_s` entry may also be an object with `median_s` (or `median`) inside; unknown keys are ignored.
bench_example.json beside this file is a complete example (the tests render it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.report.data import number

SUBJECT = "openmp"
PEERS = ("ort", "torch")


@dataclass
class BenchRow:
    op: str
    size: str
    dtype: str
    shape: str
    median_s: dict[str, float]
    spread: dict[str, float] = field(default_factory=dict)
    gbs: dict[str, float] = field(default_factory=dict)
    gflops: dict[str, float] = field(default_factory=dict)
    isa: str = ""
    triad_gbs: float | None = None     # the limits openmp's throughput is held against (see limit)
    sgemm_gflops: float | None = None
    level: str = ""                    # the memory level its bytes fit in (L1, L2, L3, DRAM; "" in older files)

    def ratio(self, peer: str, subject: str = SUBJECT) -> float | None:
        a, b = self.median_s.get(subject), self.median_s.get(peer)
        return a / b if a and b else None

    def throughput(self, backend: str) -> tuple[float, str] | None:
        """(value, unit): GFLOP/s for compute-bound rows (flops given), else GB/s."""
        if backend in self.gflops:
            return self.gflops[backend], "GFLOP/s"
        if backend in self.gbs:
            return self.gbs[backend], "GB/s"
        return None

    def limit(self) -> tuple[float, str] | None:
        """(value, name) of the machine limit for openmp's throughput: sgemm at the row's ISA level for
        compute-bound rows, else the triad on the row's bytes (each the bench-wide figure when the row has none)."""
        t = self.throughput(SUBJECT)
        if t is None:
            return None
        value, name = ((self.sgemm_gflops, "sgemm") if t[1] == "GFLOP/s"
                       else (self.triad_gbs, f"{self.level} triad" if self.level else "triad"))
        return (value, name) if value else None

    @property
    def label(self) -> str:
        return " ".join(p for p in (self.op, self.size, self.dtype if self.dtype != "float32" else "", self.isa) if p)


@dataclass
class Bench:
    source: str
    rows: list[BenchRow]
    backends: list[str]
    threads: int | None = None
    triad_gbs: float | None = None
    sgemm_gflops: float | None = None
    environment: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def sgemm_by_isa(self) -> dict[str, float]:
        """The sgemm limit of each ISA level the rows ran at (a file of several levels holds one per level)."""
        return {r.isa: r.sgemm_gflops for r in self.rows if r.isa and r.sgemm_gflops and SUBJECT in r.gflops}


def _per_backend(value) -> dict[str, float]:
    out = {}
    if isinstance(value, dict):
        for backend, v in value.items():
            if isinstance(v, dict):
                v = v.get("median_s", v.get("median"))
            x = number(v)
            if x is not None and x > 0:
                out[str(backend)] = x
    return out


def _shape(value) -> str:
    if isinstance(value, list):
        return "x".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k} {_shape(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def _level_triad(limits: dict, level, dram: float | None) -> float | None:
    """The bench's triad at a row's memory level; the DRAM triad only for DRAM rows (or older rows without a level),
    never for a cache-sized one."""
    levels = limits.get("levels")
    entry = levels.get(level) if isinstance(levels, dict) and isinstance(level, str) else None
    if isinstance(entry, dict):
        return number(entry.get("triad_gbs"))
    return dram if level in (None, "", "DRAM") else None


def parse(data, source: str) -> Bench:
    bench = Bench(source, [], [])
    if not isinstance(data, dict):
        bench.problems.append(f"{source}: not a JSON object; no benchmark figures shown")
        return bench
    limits: dict = data["limits"] if isinstance(data.get("limits"), dict) else {}
    bench.triad_gbs, bench.sgemm_gflops = number(limits.get("triad_gbs")), number(limits.get("sgemm_gflops"))
    bench.threads = data.get("threads") if isinstance(data.get("threads"), int) else None
    bench.environment = {str(k): v for k, v in data.get("environment", {}).items()
                         if isinstance(v, (str, int, float))} if isinstance(data.get("environment"), dict) else {}
    skipped = 0
    for item in data.get("results") or []:
        if not isinstance(item, dict) or not isinstance(item.get("op"), str):
            skipped += 1
            continue
        times = _per_backend(item.get("median_s"))
        if not times:
            skipped += 1
            continue
        row = BenchRow(item["op"], _shape(item.get("size")), _shape(item.get("dtype")) or "float32",
                       _shape(item.get("shape")), times, _per_backend(item.get("spread")),
                       _per_backend(item.get("gbs")), _per_backend(item.get("gflops")), _shape(item.get("isa")),
                       number(item.get("triad_gbs")) or _level_triad(limits, item.get("level"), bench.triad_gbs),
                       number(item.get("sgemm_gflops")) or bench.sgemm_gflops, _shape(item.get("level")))
        size_bytes, flops = number(item.get("bytes")), number(item.get("flops"))
        for backend, t in times.items():
            if size_bytes and backend not in row.gbs:
                row.gbs[backend] = size_bytes / t / 1e9
            if flops and backend not in row.gflops:
                row.gflops[backend] = flops / t / 1e9
        bench.rows.append(row)
    if skipped:
        bench.problems.append(f"{source}: {skipped} result(s) without an op name or median times were skipped")
    seen = {b for r in bench.rows for b in r.median_s}
    bench.backends = [b for b in (SUBJECT, *PEERS, "reference") if b in seen] + sorted(seen - {SUBJECT, *PEERS, "reference"})
    return bench


def load(path: Path) -> Bench:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        return Bench(str(path), [], [], problems=[f"{path}: cannot read benchmark figures ({e})"])
    return parse(data, str(path))
