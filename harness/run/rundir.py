"""A run directory: results.jsonl.gz (one JSON line per result, flushed as it comes), summary.json and a lock.

`opconform run`, the pytest plugin (`--opconform-results DIR`) and `opconform merge` all write here,
and build their summary.json with the one function `build_summary`, so the three have the same keys
and the same verdict (harness.run.gate). The results hold no timings or dates, so the same run writes
the same file; summary.json holds the run's metadata, counts and verdict.

Faults never corrupt a run directory:
- One writer at a time: a writer holds an exclusive flock on LOCK_FILE in the directory for as long as
  it writes (a run: from the moment its options are parsed and checked to its exit; a pytest session given
  --opconform-results: from its configuration to its end). A second writer is refused
  with RunDirBusy naming the first's pid. The lock dies with its process, so a killed run's stale lock
  file blocks nobody.
- The results are gzip-compressed (a ci run's 17 MB of JSON lines take under 1 MB) and each record is
  flushed whole (a zlib sync flush, inside harness.run.signals.critical): a killed run's file reads back up
  to its last whole record (`read_lines` reads a stream that ends early). An older run's plain
  results.jsonl reads the same way.
- summary.json is replaced atomically (written beside, then renamed), and a run writes a provisional one
  (an unfinished run: a failed verdict) as soon as its options are parsed and checked, so a run killed at
  any moment leaves a summary that says so. A usage error the options show (cli.check_run_options) comes
  before the claim, so an old run's directory given as --out is left as it was.
"""
from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import threading
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from harness import backends as registry
from harness.run import signals
from harness.run.results import Tally
from harness.spec import sources  # read as sources.checkout_root() at call time (tests replace it)

if TYPE_CHECKING:  # the annotation only: reading a run directory loads no specs
    from harness.run.catalog import RunCatalog

# harness.backends, harness.run.gate and harness.core.cases are imported where used: a run claims its
# directory and writes its provisional summary before the heavy imports (numpy, pydantic) are done.

RESULTS, PLAIN_RESULTS, SUMMARY, LOCK_FILE = "results.jsonl.gz", "results.jsonl", "summary.json", ".opconform.lock"
RESULT_FILES = (RESULTS, PLAIN_RESULTS)  # what a reader looks for, in this order
COMPRESSION_LEVEL = 6  # per-record sync flushes: ~52 bytes a result at 6, ~73 at 1, ~51 at 9
# Every summary.json has these metadata keys (None where the source has no value), then the counts and verdict.
METADATA = ("run_id", "tier", "selection", "case_filter", "seed", "threads", "ops", "backends", "missing_backends",
            "environment", "spec_set", "shard", "merged_from", "started", "finished", "seconds", "complete")


class MergeError(ValueError):
    """Shard directories that cannot be merged (missing files, the same result twice)."""


class RunDirError(Exception):
    """A run directory that cannot be written: another writer holds it, or it would land inside the package."""


class RunDirBusy(RunDirError):
    """Another process is writing the run directory."""


# ---- one writer per directory ---------------------------------------------------------------------

_claims: dict[str, list] = {}  # real path -> [lock fd, claims held by this process]
_claims_lock = threading.Lock()


def claim(run_dir: Path, holder: str | None = None) -> Path:
    """Create run_dir if needed and hold its lock; RunDirBusy if another process holds it. A process may
    claim a directory it holds again (each claim is released once). holder: what a refused writer is told
    holds it (default: another opconform run), kept in the lock file after the pid."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(run_dir)
    with _claims_lock:
        if key in _claims:
            _claims[key][1] += 1
            return run_dir
        fd = os.open(os.path.join(key, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            pid, _, who = os.pread(fd, 256, 0).decode(errors="replace").strip().partition("\n")
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunDirBusy(f"{run_dir} is being written by {who.strip() or 'another opconform run'} "
                                 f"(pid {pid.strip() or 'unknown'})") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, (f"{os.getpid()}\n" + (f"{holder}\n" if holder else "")).encode(), 0)
        _claims[key] = [fd, 1]
    return run_dir


def release(run_dir: Path) -> None:
    key = os.path.realpath(run_dir)
    with _claims_lock:
        held = _claims.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del _claims[key]
            os.close(held[0])  # the flock goes with the last descriptor (the lock file stays: see the module doc)


# ---- results files --------------------------------------------------------------------------------


def results_path(run_dir: Path) -> Path | None:
    """The run directory's results file (results.jsonl.gz, or an older run's results.jsonl), if any."""
    for name in RESULT_FILES:
        path = Path(run_dir) / name
        if path.is_file():
            return path
    return None


def _remove_results(run_dir: Path) -> None:
    for name in RESULT_FILES:
        try:
            (Path(run_dir) / name).unlink()
        except FileNotFoundError:
            pass


class ResultsWriter:
    """results.jsonl.gz, written a record at a time: each record compressed and flushed whole."""

    def __init__(self, path: Path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name == RESULTS:
            _remove_results(path.parent)  # a previous run's results (either name) must not outlive this one's start
        self.path = path
        self._file = path.open("wb")
        self._z = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, 31)  # 31: gzip header and trailer

    def write(self, record: dict) -> None:
        line = (json.dumps(record, allow_nan=False) + "\n").encode()
        with signals.critical():  # a record's bytes reach the file whole, or not at all
            self._file.write(self._z.compress(line) + self._z.flush(zlib.Z_SYNC_FLUSH))
            self._file.flush()  # a killed run keeps every result written so far

    def close(self) -> None:
        if self._file.closed:
            return
        with signals.critical():
            self._file.write(self._z.flush(zlib.Z_FINISH))
            self._file.close()


def _gunzip(raw: bytes) -> tuple[bytes, bool]:
    """What a gzip stream holds, and whether it is whole: a killed writer's stream ends early, and everything
    before its cut is returned (fed a block at a time, so a damaged block costs only what follows it)."""
    out, whole = [], True
    while raw:
        z = zlib.decompressobj(47)  # gzip (or zlib) header, detected
        try:
            for i in range(0, len(raw), 1 << 16):
                out.append(z.decompress(raw[i:i + (1 << 16)]))
                if z.eof:
                    break
        except zlib.error:
            return b"".join(out), False
        if not z.eof:
            out.append(z.flush())
            return b"".join(out), False
        raw = z.unused_data.lstrip(b"\0")  # another member (concatenated gzip files), or padding
    return b"".join(out), whole


def read_lines(path: Path) -> tuple[list[str], bool]:
    """The text lines of a results file (gzip or plain; path may be a run directory) and whether it ended
    cleanly. A last line without its newline, from a writer killed mid-record, is left out (whole=False)."""
    path = Path(path)
    if path.is_dir():
        found = results_path(path)
        if found is None:
            raise FileNotFoundError(f"{path}: no {RESULTS} or {PLAIN_RESULTS}")
        path = found
    raw = path.read_bytes()
    whole = True
    if raw[:2] == b"\x1f\x8b":
        raw, whole = _gunzip(raw)
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines[-1]:
        whole = False  # a record cut short
    return [line for line in lines[:-1] if line.strip()], whole


def read_results(path: Path) -> list[dict]:
    """The records of a results file, or of a run directory's; ValueError naming the line of a record that is
    not JSON."""
    lines, _ = read_lines(path)
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: line {number} is not a JSON record ({e})") from None
    return records


def read_summary(run_dir: Path) -> dict:
    path = Path(run_dir) / SUMMARY
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_json(path: Path, data: dict) -> None:
    """Replace path atomically: a reader (or a killed writer) never sees half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with signals.critical():
        tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def write_run(run_dir: Path, records: list[dict], summary: dict) -> None:
    """A whole run directory at once (the pytest plugin, `opconform merge`), under its lock."""
    run_dir = claim(Path(run_dir))
    try:
        tmp = run_dir / f".{RESULTS}.{os.getpid()}.tmp"
        writer = ResultsWriter(tmp)
        try:
            for r in records:
                writer.write(r)
        finally:
            writer.close()
        with signals.critical():
            os.replace(tmp, run_dir / RESULTS)
            try:
                (run_dir / PLAIN_RESULTS).unlink()
            except FileNotFoundError:
                pass
        write_json(run_dir / SUMMARY, summary)
    finally:
        release(run_dir)


# ---- where a run writes, and its provisional summary ------------------------------------------------


def package_dirs() -> list[Path]:
    """The directories of the installed packages (harness, reference): no run writes inside them."""
    import importlib.util

    dirs = []
    for name in ("harness", "reference"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(Path(location).resolve())
    return dirs


def default_reports() -> Path:
    """Where runs, benches and mutation figures go unless told: ./reports under the current directory; from a
    subfolder of the source checkout the harness runs from, the checkout's own reports/, never the subfolder's."""
    root = sources.checkout_root()
    if root is not None and root.resolve() in Path.cwd().resolve().parents:
        return root / "reports"
    return Path("reports")


def check_outside_package(reports: Path, option: str = "--out DIR") -> None:
    """RunDirError when reports (./reports, a default output folder) would land inside the installed package;
    option: what the user can pass instead (`run`: --out DIR; bench and mutate: --out FILE)."""
    where = Path(reports).resolve()
    for package in package_dirs():
        if where == package or package in where.parents:
            raise RunDirError(f"the current directory {Path.cwd()} is inside the installed package {package}: "
                              f"run from another directory or pass {option}")


def new_run_dir(reports: Path, tier: str, now: float | None = None) -> Path:
    """A new directory reports/<date>-<time>-<tier>[-N], created here (two runs started in the same second
    get two directories); reports is ./reports under the current directory unless told otherwise."""
    check_outside_package(reports)
    base = Path(reports) / f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{tier}"
    Path(reports).mkdir(parents=True, exist_ok=True)
    run_dir, n = base, 1
    while True:
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            n += 1
            run_dir = base.with_name(f"{base.name}-{n}")


def provisional_summary(meta: dict) -> dict:
    """The summary of a run that has not finished: written before anything else, so that a run killed
    before its first real summary still leaves a run directory that says it did not finish."""
    summary = {key: meta.get(key) for key in METADATA}
    summary.update({k: v for k, v in meta.items() if k not in summary})
    summary.update(missing_backends=meta.get("missing_backends") or [], complete=False, provisional=True,
                   pid=os.getpid(), results=0, totals={}, table=[],
                   verdict={"passed": False, "reasons": [
                       "the run has not finished: still running, or stopped before it could write its summary"]})
    return summary


def start(run_dir: Path, meta: dict) -> Path:
    """Claim run_dir for a run, clear a previous run's results and write the provisional summary and an
    empty results file. Returns run_dir (held: release() it at the end)."""
    run_dir = claim(run_dir)
    try:
        ResultsWriter(run_dir / RESULTS).close()
        write_json(run_dir / SUMMARY, provisional_summary({"run_id": run_dir.name, **meta}))
    except BaseException:
        release(run_dir)
        raise
    return run_dir


def interrupted(run_dir: Path, signal_name: str) -> dict | None:
    """A run stopped by signal_name before it wrote its final summary: its summary.json then says so, with
    the counts of the results it left (whole records only). Returns the summary written, or None when the
    run's own final summary is there already."""
    summary = read_summary(run_dir)
    if summary.get("finished") and not summary.get("provisional"):
        return None
    try:
        lines, _ = read_lines(run_dir)
    except FileNotFoundError:
        lines = []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    tally = Tally()
    for r in records:
        tally.add(r)
    summary.pop("provisional", None)
    summary.pop("pid", None)
    summary.update(complete=False, finished=time.strftime("%Y-%m-%dT%H:%M:%S"), results=len(records),
                   totals=dict(tally.totals()), table=tally.table(),
                   verdict={"passed": False, "reasons": [f"the run was interrupted ({signal_name}) before it "
                                                         f"finished; {len(records)} result(s) written"],
                            "interrupted": signal_name})
    write_json(Path(run_dir) / SUMMARY, summary)
    return summary


def abandon(run_dir: Path, created: bool, reason: str) -> None:
    """A run that never started (a usage error after its directory was claimed): a directory it created
    holding nothing else goes; otherwise its summary says why it did not run."""
    run_dir = Path(run_dir)
    ours = {RESULTS, SUMMARY, LOCK_FILE}
    if created and run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= ours:
        for name in ours:
            try:
                (run_dir / name).unlink()
            except FileNotFoundError:
                pass
        try:
            run_dir.rmdir()
        except OSError:
            pass
        return
    summary = read_summary(run_dir)
    if summary.get("provisional"):
        summary.pop("provisional", None)
        summary.pop("pid", None)
        summary["verdict"] = {"passed": False, "reasons": [f"the run did not start: {reason}"]}
        write_json(run_dir / SUMMARY, summary)


def missing_expected(backends: dict, left_out: set[str] | None = None, named: tuple[str, ...] = ()) -> list[dict]:
    """The expected backends (harness.backends.EXPECTED, and those the user named) listed as
    unavailable in `backends` (name -> {"available", "reason"}) and not left out on purpose: each
    fails the verdict. An installed plugin nobody named is not expected."""
    left_out = left_out or set()
    return [{"name": name, "reason": backends[name].get("reason") or "unavailable"}
            for name in dict.fromkeys([*registry.EXPECTED, *named])
            if name in backends and not backends[name].get("available") and name not in left_out]


def build_summary(meta: dict, records: list[dict], catalog: RunCatalog, **verdict_options) -> dict:
    """summary.json: the metadata keys (METADATA, None where missing), then counts, divergences,
    waiver health and the gate's verdict over `records`."""
    from harness.run import gate  # lazy: the gate (pydantic, waivers) loads only when a summary is built, never to read a run

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
    from harness.core.cases import expand  # lazy: the spec model (pydantic) loads only to order a run's records, never to read a run

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


def merge(dirs: list[Path], out: Path, catalog: RunCatalog, today: datetime.date | None = None,
          stale_generated: list[str] | None = None) -> dict:
    """Merge the run directories of shards (or of separate runs) into out; returns the summary."""
    records: list[dict] = []
    seen: dict = {}
    parts: list = []
    for d in dirs:
        path = results_path(d)
        if path is None:
            raise MergeError(f"{d}: no {RESULTS} or {PLAIN_RESULTS} (pass run directories written by `opconform "
                             f"run` or `pytest --opconform-results DIR`)")
        parts.append(read_summary(d))
        try:
            shard_records = read_results(path)
        except ValueError as e:
            raise MergeError(str(e)) from None
        for r in shard_records:
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
    missing_backends: dict = {}
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
