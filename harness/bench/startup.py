"""`opconform bench --startup`: what a one-op smoke run costs to start, against spec sets of every size.

The command timed is `opconform run --ops ReluGrad --backends reference --tier smoke --no-report
--out <tmp>`, in a fresh interpreter, against three spec sets:
- the built-in specs;
- a directory holding only ReluGrad's spec (`--specs DIR --no-builtin-specs`): the floor;
- a directory of 200 specs, ReluGrad's and copies of the others renamed (make_spec_set);
each with a cold cache of checked specs (an empty $XDG_CACHE_HOME) and a warm one (after a first run).
CPU time is user + sys of the whole process tree (resource.getrusage(RUSAGE_CHILDREN) around the
child, which waits for its own children); wall time is shown beside it and is only as good as the
machine is quiet. The goal (issue 31) is judged on CPU time only: warm, within 1.5 s and within 1.2x
of the one-spec directory, for the built-in specs and for 200 specs.
"""
from __future__ import annotations

import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.spec.sources import SpecIndex, SpecSources, builtin_root

OP = "ReluGrad"
GOAL_CPU = 1.5  # seconds of CPU, warm
GOAL_RATIO = 1.2  # against the one-spec directory, warm
SPEC_COUNT = 200


@dataclass
class Row:
    spec_set: str
    specs: int
    cache: str  # cold or warm
    cpu: float  # median over the repeats, seconds (user + sys, process tree)
    wall: float  # median, seconds
    cpus: list[float]
    walls: list[float]


def make_spec_set(target: Path, count: int = SPEC_COUNT, source: Path | None = None, keep: str = OP) -> int:
    """Write `count` specs into target: `keep`'s own, then renamed copies of the others (<Op>_c<N>.yaml,
    `op: <Op>_c<N>`), cycling through them; _defaults and _waivers are not copied (the built-in
    defaults apply). Returns how many were written."""
    source = Path(source or builtin_root())
    files = sorted(p for p in source.glob("*/*.yaml") if not p.parent.name.startswith("_"))
    own = next(p for p in files if p.stem == keep)
    (target / own.parent.name).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(own, target / own.parent.name / own.name)
    written, n = 1, 0
    others = [p for p in files if p.stem != keep]
    while written < count:
        original = others[n % len(others)]
        name = f"{original.stem}_c{n:03d}"
        text = re.sub(rf"^op: {re.escape(original.stem)}\s*$", f"op: {name}", original.read_text(encoding="utf-8"),
                      count=1, flags=re.MULTILINE)
        (target / original.parent.name).mkdir(parents=True, exist_ok=True)
        (target / original.parent.name / f"{name}.yaml").write_text(text, encoding="utf-8")
        written, n = written + 1, n + 1
    return written


def _environment(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPCONFORM_SPECS", "OPCONFORM_NO_CACHE")}
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def time_command(argv: list[str], env: dict, cwd: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """(CPU seconds of the child's process tree, wall seconds, the finished process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done


def measure(repeats: int = 3, log=print, count: int = SPEC_COUNT) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="opconform-startup-") as tmp_name:
        tmp = Path(tmp_name)
        one, many = tmp / "one-spec", tmp / f"{count}-specs"
        make_spec_set(one, 1)
        make_spec_set(many, count)

        sets = [("built-in", [], len(SpecIndex.scan(SpecSources()).names)),
                ("one spec", ["--specs", str(one), "--no-builtin-specs"], 1),
                (f"{count} specs", ["--specs", str(many), "--no-builtin-specs"], count)]
        runs = 0
        for label, flags, specs in sets:
            for cache in ("cold", "warm"):
                cpus, walls = [], []
                for repeat in range(repeats):
                    cache_dir = tmp / f"cache-{label}-{cache}-{repeat if cache == 'cold' else 0}"
                    env = _environment(cache_dir)
                    runs += 1
                    argv = [sys.executable, "-m", "harness.cli", "run", "--ops", OP, "--backends", "reference",
                            "--tier", "smoke", "--no-report", "--out", str(tmp / f"run-{runs}"), *flags]
                    if cache == "warm" and repeat == 0:  # a first run fills the cache
                        time_command([*argv[:argv.index("--out") + 1], str(tmp / f"prime-{runs}"),
                                      *argv[argv.index("--out") + 2:]], env, tmp)
                    cpu, wall, done = time_command(argv, env, tmp)
                    if done.returncode != 0:
                        raise RuntimeError(f"{label}, {cache} cache: `{' '.join(argv[2:])}` exited {done.returncode}: "
                                           f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
                    cpus.append(cpu)
                    walls.append(wall)
                row = Row(label, specs, cache, statistics.median(cpus), statistics.median(walls), cpus, walls)
                log(f"  {label:>10} ({specs} specs), {cache} cache: {row.cpu:.2f} s CPU, {row.wall:.2f} s wall")
                rows.append(row)
    return rows


def verdicts(rows: list[Row]) -> list[str]:
    """One line per spec set on the goal, judged on warm CPU time only."""
    warm = {r.spec_set: r for r in rows if r.cache == "warm"}
    floor = next((r for r in warm.values() if r.specs == 1), None)
    out = []
    for row in warm.values():
        if row is floor:
            continue
        ratio = row.cpu / floor.cpu if floor and floor.cpu > 0 else float("nan")
        met = row.cpu <= GOAL_CPU and ratio <= GOAL_RATIO
        out.append(f"{row.spec_set}: {row.cpu:.2f} s CPU warm, x{ratio:.2f} of one spec: goal (<= {GOAL_CPU:g} s, "
                   f"<= x{GOAL_RATIO:g}) {'met' if met else 'missed'}")
    return out


def table(rows: list[Row]) -> str:
    header = ("spec set", "specs", "cache", "CPU s", "wall s", "CPU runs")
    lines = [header] + [(r.spec_set, str(r.specs), r.cache, f"{r.cpu:.2f}", f"{r.wall:.2f}",
                         " ".join(f"{c:.2f}" for c in r.cpus)) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i in (0, 2) else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


def run(repeats: int = 3, out: Path | None = None, log=None) -> int:
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    log(f"start-up of `opconform run --ops {OP} --backends reference --tier smoke --no-report`: "
        f"{repeats} run(s) per row, load average {os.getloadavg()[0]:.2f}")
    rows = measure(repeats, log)
    print(table(rows))
    print()
    for line in verdicts(rows):
        print(line)
    if out:
        import json

        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": ["run", "--ops", OP, "--backends", "reference", "--tier", "smoke"],
                                   "load_average": os.getloadavg(), "rows": [asdict(r) for r in rows],
                                   "goal": {"cpu": GOAL_CPU, "ratio": GOAL_RATIO}}, indent=1) + "\n")
        print(f"startup figures: {out}")
    return 0
