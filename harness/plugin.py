"""The pytest plugin of the generated suites; generated_tests/conftest.py loads it (elsewhere: `-p harness.plugin`).

- Markers: the tiers (smoke, ci, nightly; a smoke case carries all three), the dtypes, one per backend
  (`ort-cuda` is `ort_cuda`) and one per op, registered so that `--strict-markers` works.
- The `opconform` fixture: one per process (so one per xdist worker) holding the catalog, the
  backends (created on first use, closed at the end: ORT sessions and worker processes are reused
  across tests, crash isolation included) and a few prepared cases, shared by a case's backends.
- Each test calls harness.engine.run_case, the entry point `opconform run` uses, and maps the
  statuses: pass passes; fail, crashed and error fail; divergent and waived are xfail (a skip
  waiver skips); unsupported skips; an unavailable backend skips with its reason (counted as
  unavailable in the summary, never as a pass).
- Every result record goes to a per-worker JSONL file; at the end the controller merges them in
  `opconform run`'s order and format (`--opconform-results DIR` keeps results.jsonl and
  summary.json) and applies the gate's verdict (harness.gate), which also covers stale waivers,
  expired waivers and stale generated files. A failed verdict makes the session exit 1.
- Under pytest-split (`--splits N --group K`) stale waivers and divergences are left to
  `opconform merge`; the plugin points pytest-split at generated_tests/.test_durations unless
  `--durations-path` is given.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
import time
from collections import Counter, OrderedDict
from pathlib import Path

import pytest

TIERS = {"smoke": ("smoke", "ci", "nightly"), "ci": ("ci", "nightly"), "nightly": ("nightly",)}
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")
PREPARED_CACHE = 16
_SUITE_DIR = pytest.StashKey[Path]()
_SPECS_DIR = pytest.StashKey[Path]()


def marker(name: str) -> str:
    """The marker of a backend or op name (markers are identifiers)."""
    return name.replace("-", "_").replace(".", "_")


# ---- helpers the generated files call ------------------------------------------------------

def case(tier: str, dtype: str, case_id: str):
    """One (dtype, case id) parameter with its tier and dtype markers."""
    marks = [getattr(pytest.mark, m) for m in TIERS[tier]] + [getattr(pytest.mark, dtype)]
    return pytest.param(dtype, case_id, marks=marks, id=f"{dtype}-{case_id}")


def backends(*names: str):
    return [pytest.param(name, marks=getattr(pytest.mark, marker(name)), id=name) for name in names]


def use_generated_suite(config, suite_dir: Path, specs_dir: Path) -> None:
    """Called by the generated conftest: where the suite and its specs are; registers the op markers."""
    config.stash[_SUITE_DIR] = Path(suite_dir).resolve()
    config.stash[_SPECS_DIR] = Path(specs_dir).resolve()
    manifest = Path(suite_dir) / "MANIFEST.json"
    if manifest.is_file():
        for name in json.loads(manifest.read_text())["files"]:
            op = name[len("test_"):-len(".py")]
            config.addinivalue_line("markers", f"{marker(op)}: the generated tests of {op}")


# ---- pytest hooks -------------------------------------------------------------------------

def pytest_addoption(parser):
    group = parser.getgroup("opconform", "opconform generated conformance tests")
    group.addoption("--opconform-results", metavar="DIR", type=Path,
                    help="write results.jsonl and summary.json (the format of `opconform run`) to DIR")
    group.addoption("--opconform-specs", metavar="DIR", type=Path,
                    help="spec directory (default: $OPCONFORM_SPECS, else the one the suite was generated from)")
    group.addoption("--opconform-seed", type=int, default=0, help="global seed mixed into every case seed (default 0)")
    group.addoption("--opconform-threads", type=int, default=1, help="threads each backend may use (default 1)")
    group.addoption("--opconform-timeout", type=float, default=20.0,
                    help="seconds before a backend call counts as a hang (default 20)")
    group.addoption("--opconform-today", metavar="YYYY-MM-DD", type=datetime.date.fromisoformat,
                    help="judge waiver review dates as of this day (default: today)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    from harness import backends as registry
    from harness.spec.checks import BACKEND_NAMES

    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: cases of the {tier} tier (smoke within ci within nightly)")
    for dtype in DTYPES:
        config.addinivalue_line("markers", f"{dtype}: cases in {dtype}")
    for name in dict.fromkeys([*registry.FACTORIES, *BACKEND_NAMES]):
        config.addinivalue_line("markers", f"{marker(name)}: results of the {name} backend")
    config.addinivalue_line("markers", "opconform: a generated opconform conformance test")
    _default_durations_path(config)
    config.pluginmanager.register(Suite(config), "opconform-suite")


def _default_durations_path(config) -> None:
    """pytest-split: use generated_tests/.test_durations when the user gave no --durations-path."""
    current = getattr(config.option, "durations_path", None)
    if current is None or Path(current) != Path(os.getcwd()) / ".test_durations":
        return
    for arg in config.args:
        path = Path(arg.split("::")[0])
        folder = path if path.is_dir() else path.parent
        if (folder / ".test_durations").is_file() and (folder / "MANIFEST.json").is_file():
            config.option.durations_path = str(folder / ".test_durations")
            return


@pytest.fixture(scope="session")
def opconform(request):
    return request.config.pluginmanager.get_plugin("opconform-suite")


class SpecsInvalid(Exception):
    pass


class Suite:
    """Per-process state: catalog, backends, prepared cases, this process's results file."""

    def __init__(self, config):
        self.config = config
        self.worker = getattr(config, "workerinput", {}).get("workerid", "main")
        self.controller = not hasattr(config, "workerinput")
        parts = getattr(config, "workerinput", {}).get("opconform_parts")
        self.parts = Path(parts) if parts else Path(tempfile.mkdtemp(prefix="opconform-parts-"))
        self._catalog = None
        self._specs = {}
        self._cases = {}
        self._backends = {}  # name -> Backend, or the reason it is unavailable
        self._prepared = OrderedDict()
        self._file = None
        self.unavailable = Counter()
        self.started = time.time()
        self.summary = None

    # -- xdist: the workers write their records where the controller merges them
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        node.workerinput["opconform_parts"] = str(self.parts)

    @property
    def catalog(self):
        if self._catalog is None:
            from harness.spec.errors import SpecError
            from harness.spec.loader import load_catalog

            try:
                self._catalog = load_catalog(self.specs_dir())
            except SpecError as e:
                raise SpecsInvalid(f"the specs do not validate (`opconform validate` lists the problems):\n{e}") from None
            self._specs = {s.id: s for s in self._catalog.specs}
        return self._catalog

    def specs_dir(self) -> Path | None:
        option = self.config.getoption("opconform_specs")
        if option:
            return option
        if os.environ.get("OPCONFORM_SPECS"):
            return Path(os.environ["OPCONFORM_SPECS"])
        return self.config.stash.get(_SPECS_DIR, None)

    def backend(self, name: str):
        if name not in self._backends:
            from harness import backends as registry

            if name not in registry.FACTORIES:
                self._backends[name] = f"not registered in harness/backends/__init__.py (known: {', '.join(registry.FACTORIES)})"
            else:
                backend = registry.create(name, threads=self.config.getoption("opconform_threads"),
                                          timeout=self.config.getoption("opconform_timeout"))
                reason = backend.availability()
                if reason:
                    backend.close()
                    self._backends[name] = reason
                else:
                    self._backends[name] = backend
        return self._backends[name]

    def prepared(self, case):
        from harness.engine import prepare

        seed = self.config.getoption("opconform_seed")
        key = (case.spec.id, case.full_id, seed)
        if key not in self._prepared:
            self._prepared[key] = prepare(case, seed)
            while len(self._prepared) > PREPARED_CACHE:
                self._prepared.popitem(last=False)
        return self._prepared[key]

    def find(self, spec_id: str, dtype: str, case_id: str):
        from harness.cases import expand
        from harness.engine import CaseNotFound, find_case

        catalog = self.catalog
        spec = self._specs.get(spec_id)
        if spec is None:
            raise CaseNotFound(f"{spec_id} is not in {catalog.root}: its spec was removed or renamed; "
                               "run `opconform gen-tests`")
        if spec_id not in self._cases:
            self._cases[spec_id] = {c.full_id: c for c in expand(spec)}
        return find_case(self._cases[spec_id], spec_id, dtype, case_id)

    def check(self, spec_id: str, dtype: str, case_id: str, backend_name: str) -> None:
        """Run one generated test: the case on the backend through the engine, then the pytest outcome."""
        from harness.engine import UNEXPECTED, CaseNotFound, run_case

        try:
            self.catalog
        except SpecsInvalid as e:
            pytest.fail(str(e), pytrace=False)
        backend = self.backend(backend_name)
        if isinstance(backend, str):
            self.unavailable[backend_name] += 1
            pytest.skip(f"backend {backend_name} unavailable: {backend}")
        try:
            case = self.find(spec_id, dtype, case_id)
        except CaseNotFound as e:
            pytest.fail(str(e), pytrace=False)
        results = run_case(self.catalog, self.prepared(case), backend)
        for result in results:
            self.record(result.to_json())
        named = [(r, "" if r.check == "reference" else f"{r.check}: ") for r in results]
        unexpected = [f"{r.status}: {label}{r.detail}" for r, label in named if r.status in UNEXPECTED]
        if unexpected:
            pytest.fail("\n".join(unexpected), pytrace=False)
        first = results[0]
        if first.status == "unsupported":
            pytest.skip(f"unsupported: {first.detail}")
        if first.status == "waived" and first.detail.startswith("not run"):
            pytest.skip(first.detail)
        excused = [f"{r.status}: {label}{r.detail}" for r, label in named if r.status in ("divergent", "waived")]
        if excused:
            pytest.xfail("\n".join(excused))

    def record(self, record: dict) -> None:
        if self._file is None:
            self._file = (self.parts / f"{self.worker}.jsonl").open("a", encoding="utf-8")
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def _write_meta(self) -> None:
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

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self._write_meta()
        self.close()
        if self.controller:
            try:
                self._finish(session, exitstatus)
            finally:
                shutil.rmtree(self.parts, ignore_errors=True)

    def _finish(self, session, exitstatus) -> None:
        records = []
        for part in sorted(self.parts.glob("*.jsonl")):
            records += [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines() if line.strip()]
        backends, skips = {}, Counter()
        for meta_file in sorted(self.parts.glob("*.meta.json")):
            meta = json.loads(meta_file.read_text())
            for name, info in meta["backends"].items():
                if name not in backends or info["available"]:
                    backends[name] = info
            skips.update(meta["unavailable_skips"])
        if not records and not skips:
            return  # no generated test ran in this session
        from harness import codegen, gate
        from harness.environment import describe

        try:
            catalog = self.catalog
        except SpecsInvalid as e:
            self.summary = {"results": len(records), "totals": {}, "backends": backends,
                            "verdict": {"passed": False, "reasons": [str(e).splitlines()[0]]}}
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        for name, count in skips.items():
            backends.setdefault(name, {"available": False})["skipped_tests"] = count
        splits, group = getattr(self.config.option, "splits", None), getattr(self.config.option, "group", None)
        suite_dir = self.config.stash.get(_SUITE_DIR, None)
        complete = exitstatus not in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR) \
            and not session.shouldstop
        records = gate.order(records, catalog)
        summary = {"run_id": None, "tier": None, "selection": {"markers": self.config.option.markexpr or None,
                                                                "keywords": self.config.option.keyword or None},
                   "seed": self.config.getoption("opconform_seed"), "threads": self.config.getoption("opconform_threads"),
                   "ops": sorted({r["op"] for r in records}), "backends": backends,
                   "environment": describe(catalog.root), "spec_set": catalog.digest,
                   "shard": {"splits": splits, "group": group} if splits else None,
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
                   "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.time() - self.started, 1),
                   "complete": complete}
        summary.update(gate.summarize(records, catalog, today=self.config.getoption("opconform_today"),
                                      complete=complete, deferred=bool(splits),
                                      stale_generated=codegen.stale(catalog, suite_dir) if suite_dir else None))
        out = self.config.getoption("opconform_results")
        if out:
            summary["run_id"] = out.name
            gate.write_run(out, records, summary)
        self.summary = summary
        if not summary["verdict"]["passed"] and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.summary:
            return
        from harness import gate

        tr = terminalreporter
        tr.section("opconform gate")
        for name, info in sorted(self.summary["backends"].items()):
            if not info.get("available"):
                tr.write_line(f"backend {name} unavailable ({info.get('skipped_tests', 0)} tests skipped): "
                              f"{info.get('reason')}")

        class _Writer:
            def write(self, text):
                tr.write(text)

        gate.print_verdict(self.summary, _Writer())
        out = self.config.getoption("opconform_results")
        if out:
            tr.write_line(f"results: {out}/results.jsonl, {out}/summary.json")
