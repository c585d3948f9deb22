"""The one-line command that reruns one result: `opconform run --ops OP --backends B --cases 'GLOB'`.

The --cases glob is the case's dtype-qualified id with fnmatch's special characters escaped, so it
matches that case and no other. The flags that change a case's data or its outcome (tier for
nightly groups, seed, threads, timeout, the spec directories beside or instead of the built-in ones, the command
backends and waiver files given on the command line) follow the run.
The browser builds the same command for rows of the case table (report.js: reproCommand); keep both
in step.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from harness.backends.limits import DEFAULT_TIMEOUT

DEFAULT_THREADS, DEFAULT_SEED = 1, 0  # DEFAULT_TIMEOUT: harness.backends.limits


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def run_flags(summary: dict, default_specs: Path | None) -> list[str]:
    """The flags every repro command of this run shares (after --ops/--backends/--cases)."""
    flags = []
    sources = summary.get("spec_sources")
    specs = summary.get("specs")
    if isinstance(sources, dict) and isinstance(sources.get("dirs"), list):  # the built-in specs and team directories
        flags += [flag for d in sources["dirs"] if isinstance(d, str) for flag in ("--specs", d)]
        flags += [] if sources.get("builtin", True) else ["--no-builtin-specs"]
    elif isinstance(specs, str) and specs and (default_specs is None or Path(specs).resolve() != default_specs.resolve()):
        flags += ["--specs", specs, "--no-builtin-specs"]  # a run before team directories: one complete spec tree
    seed = summary.get("seed")
    if isinstance(seed, int) and seed != DEFAULT_SEED:
        flags += ["--seed", str(seed)]
    threads = summary.get("threads")
    if isinstance(threads, int) and threads != DEFAULT_THREADS:
        flags += ["--threads", str(threads)]
    timeout = summary.get("timeout")
    if isinstance(timeout, (int, float)) and float(timeout) != DEFAULT_TIMEOUT:
        flags += ["--timeout", f"{timeout:g}"]
    for name, template in (summary.get("command_backends") or {}).items():  # third-party backends, defined per run
        flags += ["--command-backend", f"{name}={template}"]
    for path in summary.get("waiver_files") or []:
        flags += ["--waivers", path]
    return flags


def command(op: str, backend: str, dtype: str, case: str, tier: str, flags: list[str]) -> str:
    argv = ["opconform", "run", "--ops", glob_escape(op), "--backends", backend,
            "--cases", glob_escape(f"{dtype}-{case}")]
    if tier == "nightly":  # smoke and ci groups both run in the default tier, ci
        argv += ["--tier", "nightly"]
    return shlex.join(argv + flags)
