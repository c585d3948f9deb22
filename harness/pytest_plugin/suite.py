"""The generated suites' state and results, apart from pytest's hooks (those are in harness.pytest_plugin.plugin).

- Parameters the generated files use: `case` (a dtype and case id with its tier and dtype markers),
  `backends` (one parameter per backend, with its marker) and `gradient_case` (a case of the gradient
  check: marked with every backend, since the reference it proves judges them all).
- `Suite`: one per process (so one per xdist worker): the catalog, the backends (created on first use,
  closed at the end: ORT sessions and worker processes are reused across tests), a few prepared cases
  shared by a case's backends, and this process's results file. `finish` merges the workers' records
  in `opconform run`'s order and builds summary.json with harness.run.rundir.build_summary, the builder
  `opconform run` and `opconform merge` use.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import IO, TYPE_CHECKING

import pytest

from harness import backends as registry
from harness.core.spec_loader import SpecSources
from harness.run import rundir
from harness.run.environment import describe
from harness.spec import vocabulary
from harness.spec.errors import SpecError
from harness.spec.sources import builtin_root, same_dir
from harness.spec.vocabulary import NUMERIC_DTYPES, tiers_running

if TYPE_CHECKING:  # for the annotations only: the suite imports them where first used (pytest's start-up)
    from harness.backends.base import Backend
    from harness.core.cases import Case
    from harness.run.engine import Prepared
    from harness.spec.model import Spec

TIERS = {tier: tiers_running(tier) for tier in vocabulary.TIERS}  # a case's tier markers
DTYPES = NUMERIC_DTYPES
PREPARED_CACHE = 16


def marker(name: str) -> str:
    """The marker of a backend or op name (markers are identifiers): onnx-backend:onnxruntime.backend is
    onnx_backend_onnxruntime_backend."""
    return re.sub(r"\W", "_", name)


def case(tier: str, dtype: str, case_id: str):
    """One (dtype, case id) parameter with its tier and dtype markers."""
    marks = [getattr(pytest.mark, m) for m in TIERS[tier]] + [getattr(pytest.mark, dtype)]
    return pytest.param(dtype, case_id, marks=marks, id=f"{dtype}-{case_id}")


def gradient_case(tier: str, dtype: str, case_id: str):
    """A case of the gradient check: any backend selection keeps it, as the reference judges every
    backend (the plugin adds every backend's marker at collection)."""
    marks = [getattr(pytest.mark, m) for m in TIERS[tier]] + [getattr(pytest.mark, dtype), pytest.mark.gradient]
    return pytest.param(dtype, case_id, marks=marks, id=f"{dtype}-{case_id}")


def backends(*names: str):
    return [pytest.param(name, marks=getattr(pytest.mark, marker(name)), id=name) for name in names]


class SpecsInvalid(Exception):
    pass


class Suite:
    """Per-process state: catalog, backends, prepared cases, this process's results file."""

    def __init__(self, options: dict, worker: str, parts: str | None, specs_dir):
        self.options = options  # seed, threads, timeout, today, allow_missing_backends, named_backends, waivers
        self.worker = worker
        self.parts = Path(parts) if parts else Path(tempfile.mkdtemp(prefix="opconform-parts-"))
        self.specs_dir = specs_dir  # SpecSources (specs_dir_from), or a complete spec tree (a Path)
        self._catalog = None
        self._specs: dict[str, Spec] = {}
        self._cases: dict[str, dict[str, Case]] = {}  # spec id -> full case id -> case
        self._backends: dict[str, Backend | str] = {}  # name -> Backend, or the reason it is unavailable
        self._prepared: OrderedDict[tuple[str, str, int], Prepared] = OrderedDict()
        self._file: IO[str] | None = None
        self.unavailable: Counter[str] = Counter()
        self.started = time.time()

    @property
    def catalog(self):
        if self._catalog is None:
            from harness.run.catalog import load as load_catalog  # lazy: pydantic loads only in a process that reads the specs

            sources = self.specs_dir if isinstance(self.specs_dir, SpecSources) else None
            root = None if sources is not None else self.specs_dir
            try:
                self._catalog = load_catalog(root, sources=sources, waiver_files=self.options.get("waivers") or ())
            except SpecError as e:
                raise SpecsInvalid(f"the specs do not validate (`opconform validate` lists the problems):\n{e}") from None
            self._specs = {s.id: s for s in self._catalog.specs}
        return self._catalog

    def backend(self, name: str):
        """The backend, or the reason it is unavailable (a str)."""
        if name not in self._backends:
            try:
                registry.check(name)
            except registry.UnknownBackend as e:
                self._backends[name] = str(e)
            else:
                backend = registry.create(name, threads=self.options["threads"], timeout=self.options["timeout"])
                reason = backend.availability()
                if reason:
                    backend.close()
                    self._backends[name] = reason
                else:
                    self._backends[name] = backend
        return self._backends[name]

    def prepared(self, case):
        from harness.run.engine import prepare  # lazy: numpy and the engine load only in a process that runs cases

        key = (case.spec.id, case.full_id, self.options["seed"])
        if key not in self._prepared:
            self._prepared[key] = prepare(case, self.options["seed"])
            while len(self._prepared) > PREPARED_CACHE:
                self._prepared.popitem(last=False)
        return self._prepared[key]

    def find(self, spec_id: str, dtype: str, case_id: str):
        from harness.core.cases import expand  # lazy: the spec model (pydantic) loads only in a process that reads the specs
        from harness.run.engine import CaseNotFound, find_case  # lazy: numpy and the engine load only in a process that runs cases

        catalog = self.catalog
        spec = self._specs.get(spec_id)
        if spec is None:
            raise CaseNotFound(f"{spec_id} is not in {catalog.root}: its spec was removed or renamed; "
                               "run `opconform gen-tests`")
        if spec_id not in self._cases:
            self._cases[spec_id] = {c.full_id: c for c in expand(spec)}
        return find_case(self._cases[spec_id], spec_id, dtype, case_id)

    def run(self, spec_id: str, dtype: str, case_id: str, backend_name: str):
        """The results of one generated test (list of Result), or the reason its backend is unavailable."""
        from harness.run.case_checks import run_case  # lazy: numpy and the engine load only in a process that runs cases

        backend = self.backend(backend_name)
        if isinstance(backend, str):
            self.unavailable[backend_name] += 1
            return backend
        case = self.find(spec_id, dtype, case_id)
        results = run_case(self.catalog, self.prepared(case), backend)
        for result in results:
            self.record(result.to_json())
        return results

    def gradient(self, spec_id: str, dtype: str, case_id: str):
        """The gradient check's Result for one case (None where it does not apply)."""
        from harness.run.case_checks import gradient_case as check  # lazy: numpy and the engine load only in a process that runs cases

        result = check(self.prepared(self.find(spec_id, dtype, case_id)))
        if result is not None:
            self.record(result.to_json())
        return result

    def record(self, record: dict) -> None:
        if self._file is None:
            self._file = (self.parts / f"{self.worker}.jsonl").open("a", encoding="utf-8")
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def write_meta(self) -> None:
        backends = {}
        for name, backend in self._backends.items():
            if isinstance(backend, str):
                backends[name] = {"available": False, "reason": backend}
            else:
                backends[name] = {"available": True, "reason": None, **backend.environment()}
        meta = {"backends": backends, "unavailable_skips": dict(self.unavailable)}
        (self.parts / f"{self.worker}.meta.json").write_text(json.dumps(meta))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        for backend in self._backends.values():
            if not isinstance(backend, str):
                backend.close()

    def finish(self, complete: bool, selection: dict, shard: dict | None, stale_generated):
        """(summary.json, records in run order) over every worker's records; None when no generated test ran."""
        records = []
        for part in sorted(self.parts.glob("*.jsonl")):
            records += [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines() if line.strip()]
        backends: dict[str, dict] = {}
        skips: Counter[str] = Counter()
        for meta_file in sorted(self.parts.glob("*.meta.json")):
            meta = json.loads(meta_file.read_text())
            for name, info in meta["backends"].items():
                if name not in backends or info["available"]:
                    backends[name] = info
            skips.update(meta["unavailable_skips"])
        if not records and not skips:
            return None

        try:
            catalog = self.catalog
        except SpecsInvalid as e:
            return {"results": len(records), "totals": {}, "backends": backends,
                    "verdict": {"passed": False, "reasons": [str(e).splitlines()[0]]}}, None
        for name, count in skips.items():
            backends.setdefault(name, {"available": False})["skipped_tests"] = count
        # an expected backend whose tests were selected but skipped as unavailable; one the marker
        # selection left out has no test here and is not missing
        missing = [] if self.options["allow_missing_backends"] else \
            rundir.missing_expected({n: i for n, i in backends.items() if n in skips},
                                    named=tuple(self.options.get("named_backends") or ()))
        records = rundir.order(records, catalog)
        meta = {"selection": selection, "seed": self.options["seed"], "threads": self.options["threads"],
                "ops": sorted({r["op"] for r in records}), "backends": backends, "missing_backends": missing,
                "environment": describe(catalog.root), "spec_set": catalog.digest, "shard": shard,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.time() - self.started, 1),
                "complete": complete}
        summary = rundir.build_summary(meta, records, catalog, today=self.options["today"], complete=complete,
                                       deferred=bool(shard), stale_generated=stale_generated)
        return summary, records


def generated_sources(specs_dir: Path, dirs=(), builtin: bool | None = None):
    """The spec directories a generated suite was written from (its conftest.py calls
    harness.pytest_plugin.plugin.use_generated_suite): the built-in specs plus `dirs`, or, with
    builtin False, specs_dir then `dirs` alone. builtin None (a conftest written before team
    directories): specs_dir is the built-in specs, or a complete spec tree used alone."""
    if builtin is None:
        return SpecSources() if same_dir(specs_dir, builtin_root()) else SpecSources((Path(specs_dir),), builtin=False)
    if builtin:
        return SpecSources(tuple(Path(d) for d in dirs))
    return SpecSources((Path(specs_dir), *(Path(d) for d in dirs)), builtin=False)


def specs_dir_from(option, stashed, no_builtin: bool = False):
    """The suite's SpecSources, resolved as the CLI resolves them: $OPCONFORM_SPECS, the generated suite's
    own directories (stashed; None: the built-in specs), then --opconform-specs DIR (repeatable);
    --opconform-no-builtin-specs leaves the built-in specs out. None while nothing says where (the
    generated conftest has not run yet)."""
    options = [option] if isinstance(option, (str, Path)) else list(option or [])
    if stashed is None and not options and not os.environ.get("OPCONFORM_SPECS") and not no_builtin:
        return None
    if isinstance(stashed, (str, Path)):
        stashed = generated_sources(Path(stashed))
    base = stashed or SpecSources()
    return SpecSources.resolve([*base.dirs, *options], no_builtin=no_builtin or not base.builtin)
