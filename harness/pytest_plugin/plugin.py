"""The pytest plugin of the generated suites: pytest's hooks and the `opconform` fixture only; the
suite's state and results are harness.pytest_plugin.suite. generated_tests/conftest.py loads it (elsewhere:
`-p harness.pytest_plugin.plugin`).

- Markers: the tiers (smoke, ci, nightly; a smoke case carries all three), the dtypes, one per backend
  (`ort-cuda` is `ort_cuda`), `gradient` and one per op, registered so that `--strict-markers` works.
- Each backend test calls harness.run.case_checks.run_case, the entry point `opconform run` uses, and maps
  the statuses: pass passes; fail, crashed and error fail; divergent and waived are xfail (a skip
  waiver skips); unsupported skips; an unavailable backend skips with its reason. Each gradient test
  runs the reference's gradient check (harness.run.case_checks.gradient_case) and fails when it fails.
- At the end the controller builds summary.json (harness.run.rundir.build_summary: `--opconform-results
  DIR` keeps it with results.jsonl.gz) and applies the gate's verdict, which also fails on stale or
  expired waivers, stale generated files and an expected backend (reference, openmp, ort) whose
  selected tests skipped as unavailable (`--opconform-allow-missing-backends`, or a marker selection
  that leaves the backend out, says that is intended).
- `--opconform-results DIR` is claimed when pytest configures (on the controller; xdist's workers never write
  it) and held to the session's end, by the rule `opconform run --out` follows (harness.run.rundir.claim): a
  second pytest or `opconform run` given DIR meanwhile is refused with one line before any test runs, and
  so is this session (a usage error, exit 4) when another writer holds DIR.
- One rule ties the printed verdict to the exit status: the verdict is FAIL when the gate fails or when
  pytest's own outcome is not a pass (a failed test or a setup or teardown error, a collection error,
  a spec that does not load in a worker, an internal error, an interrupted session, the gate itself
  failing), each with a reason line; the session exits non-zero exactly when the verdict is FAIL.
  A session of the generated suite that fails before any generated test ran still prints a FAIL verdict.
- Under pytest-split (`--splits N --group K`) stale waivers and divergences are left to
  `opconform merge`; the plugin points pytest-split at generated_tests/.test_durations unless
  `--durations-path` is given.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from harness import backends as registry
from harness.backends.limits import DEFAULT_TIMEOUT
from harness.core.status import UNEXPECTED, Check, Status
from harness.pytest_plugin.suite import DTYPES, TIERS, SpecsInvalid, Suite, backends, generated_sources, marker, specs_dir_from
from harness.run import rundir
from harness.run.rundir import RESULTS, SUMMARY
from harness.spec.errors import exception_text

_SUITE_DIR = pytest.StashKey[Path]()
_SPECS_DIR = pytest.StashKey[object]()  # harness.core.spec_loader.SpecSources
_CLAIMED = pytest.StashKey[tuple]()  # (--opconform-results DIR held by this session, whether it created DIR)
# the exit statuses after which pytest prints its terminal summary (and with it the gate's block)
_SUMMARY_EXIT_CODES = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED,
                       pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED)


def use_generated_suite(config, suite_dir: Path, specs_dir: Path, dirs=(), builtin: bool | None = None) -> None:
    """Called by the generated conftest: where the suite and its specs are (suite.generated_sources);
    registers the op markers."""
    config.stash[_SUITE_DIR] = Path(suite_dir).resolve()
    config.stash[_SPECS_DIR] = generated_sources(Path(specs_dir).resolve(), [Path(d).resolve() for d in dirs], builtin)
    manifest = Path(suite_dir) / "MANIFEST.json"
    if manifest.is_file():
        for name, entry in json.loads(manifest.read_text())["files"].items():
            # the op from the spec id (domain::Op@version): files of other domains carry a domain prefix
            spec_id = entry.get("spec", "") if isinstance(entry, dict) else ""
            op = spec_id.split("::")[-1].split("@")[0] if "::" in spec_id else name[len("test_"):-len(".py")]
            config.addinivalue_line("markers", f"{marker(op)}: the generated tests of {op}")


def pytest_addoption(parser):
    group = parser.getgroup("opconform", "opconform generated conformance tests")
    group.addoption("--opconform-results", metavar="DIR", type=Path,
                    help="write results.jsonl.gz and summary.json (the format of `opconform run`) to DIR, which "
                         "this session holds from its start: another writer of DIR is refused")
    group.addoption("--opconform-specs", metavar="DIR", type=Path, action="append",
                    help="a spec directory of your own on top of the built-in specs and those the suite was "
                         "generated from (repeatable; also $OPCONFORM_SPECS), as `opconform run --specs`")
    group.addoption("--opconform-no-builtin-specs", action="store_true",
                    help="leave the built-in specs out, as `opconform run --no-builtin-specs`")
    group.addoption("--opconform-seed", type=int, default=0, help="global seed mixed into every case seed (default 0)")
    group.addoption("--opconform-threads", type=int, default=1, help="threads each backend may use (default 1)")
    group.addoption("--opconform-timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds before a backend call counts as a hang (default {DEFAULT_TIMEOUT:g}; docs/limits.md)")
    group.addoption("--opconform-today", metavar="YYYY-MM-DD", type=datetime.date.fromisoformat,
                    help="judge waiver review dates as of this day (default: today)")
    group.addoption("--opconform-allow-missing-backends", action="store_true",
                    help="an expected backend (reference, openmp, ort) that is unavailable skips its tests "
                         "without failing the verdict")
    group.addoption("--opconform-backend", action="append", default=[], metavar="NAME",
                    help="also run this backend (repeatable), e.g. onnx-backend:onnxruntime.backend; a backend named "
                         "here is expected: unavailable, it fails the verdict")
    group.addoption("--opconform-command-backend", action="append", default=[], metavar="NAME=TEMPLATE",
                    help="define and run a command backend (repeatable; docs/bring-your-own-backend.md)")
    group.addoption("--opconform-waivers", action="append", default=[], type=Path, metavar="FILE",
                    help="also load this waivers file (repeatable); specs/_waivers/*.yaml always load")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: cases of the {tier} tier (smoke within ci within nightly)")
    for dtype in DTYPES:
        config.addinivalue_line("markers", f"{dtype}: cases in {dtype}")
    for definition in config.getoption("opconform_command_backend", None) or []:
        try:
            registry.define_command(definition)
        except registry.UnknownBackend as e:
            raise pytest.UsageError(f"--opconform-command-backend: {e}") from None
    for name in config.getoption("opconform_backend", None) or []:
        try:
            registry.check(name)
        except registry.UnknownBackend as e:
            raise pytest.UsageError(f"--opconform-backend: {e}") from None
    for name in suite_backends(config):
        config.addinivalue_line("markers", f"{marker(name)}: results of the {name} backend")
    config.addinivalue_line("markers", "gradient: the reference's gradient check (carries every backend's marker)")
    config.addinivalue_line("markers", "opconform: a generated opconform conformance test")
    _default_durations_path(config)
    config.pluginmanager.register(Hooks(config), "opconform-suite")
    _claim_results_dir(config)  # last: a usage error above leaves DIR untouched


def _claim_results_dir(config) -> None:
    """Hold --opconform-results DIR for the session (the controller only: the workers' records reach it through
    the controller), so that a clash is a one-line usage error before any test runs, not a RunDirBusy when the
    results are written at the session's end."""
    out = config.getoption("opconform_results", None)
    if out is None or hasattr(config, "workerinput"):
        return
    created = not Path(out).exists()
    try:
        rundir.claim(out, holder="a pytest session")
    except (rundir.RunDirError, OSError) as e:
        raise pytest.UsageError(f"--opconform-results: {e}") from None
    config.stash[_CLAIMED] = (Path(out).absolute(), created)  # released by the same path, wherever the cwd is then


def pytest_unconfigure(config):
    """Release --opconform-results DIR; a directory this session created and left holding nothing but its lock
    file (no generated test ran) goes."""
    claimed = config.stash.get(_CLAIMED, None)
    if claimed is None:
        return
    del config.stash[_CLAIMED]
    out, created = claimed
    try:
        if created and [p.name for p in out.iterdir()] == [rundir.LOCK_FILE]:
            (out / rundir.LOCK_FILE).unlink()
            out.rmdir()
    except OSError:
        pass
    finally:
        rundir.release(out)


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


def suite_backends(config) -> list[str]:
    """The backends each generated test runs on, decided at collection: the built-ins, installed
    plugins, defined command backends and those named with --opconform-backend."""
    named = [*(config.getoption("opconform_backend", None) or []), *registry.commands()]
    return list(dict.fromkeys([*registry.known(), *named]))


@pytest.hookimpl(trylast=True)  # after the case parametrization: ids read [dtype-case-backend]
def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker("opconform"):
        # a training_graph spec's module says so: backends that run single kernels get no items for it at all
        subject = getattr(metafunc.module, "SUBJECT", "kernel")
        names = [name for name in suite_backends(metafunc.config) if subject in registry.subjects(name)]
        metafunc.parametrize("backend", backends(*names))


@pytest.hookimpl(tryfirst=True)  # before -m deselects: a gradient test carries every backend's marker
def pytest_collection_modifyitems(config, items):
    markers = [getattr(pytest.mark, marker(name)) for name in suite_backends(config)]
    for item in items:
        if item.get_closest_marker("gradient") and item.get_closest_marker("opconform"):
            for mark in markers:
                item.add_marker(mark)


@pytest.fixture(scope="session")
def opconform(request):
    return request.config.pluginmanager.get_plugin("opconform-suite")


class Hooks:
    """The session's hooks around one harness.pytest_plugin.suite.Suite; the generated tests call check and gradient."""

    def __init__(self, config):
        self.config = config
        workerinput = getattr(config, "workerinput", {})
        self.controller = not hasattr(config, "workerinput")
        options = {"seed": config.getoption("opconform_seed"), "threads": config.getoption("opconform_threads"),
                   "timeout": config.getoption("opconform_timeout"), "today": config.getoption("opconform_today"),
                   "allow_missing_backends": config.getoption("opconform_allow_missing_backends"),
                   "named_backends": [*config.getoption("opconform_backend"), *registry.commands()],
                   "waivers": config.getoption("opconform_waivers")}
        self.suite = Suite(options, workerinput.get("workerid", "main"), workerinput.get("opconform_parts"),
                           specs_dir_from(config.getoption("opconform_specs"), None,
                                          config.getoption("opconform_no_builtin_specs")))
        self.summary = None
        self.written = None  # the run directory the session wrote (--opconform-results), once written
        self.outcome = PytestOutcome()

    def _suite(self) -> Suite:
        if self.suite.specs_dir is None or (_SPECS_DIR in self.config.stash and self.suite._catalog is None):
            self.suite.specs_dir = specs_dir_from(self.config.getoption("opconform_specs"),
                                                  self.config.stash.get(_SPECS_DIR, None),
                                                  self.config.getoption("opconform_no_builtin_specs"))
        return self.suite

    # -- what the generated tests call
    def check(self, spec_id: str, dtype: str, case_id: str, backend_name: str) -> None:
        """One backend test: the case on the backend through the engine, then the pytest outcome."""
        from harness.run.engine import CaseNotFound  # lazy: numpy and the engine load only in a process that runs cases

        try:
            results = self._suite().run(spec_id, dtype, case_id, backend_name)
        except (SpecsInvalid, CaseNotFound) as e:
            results = e  # failed below, outside the handler: pytest would print the message twice, chained
        if isinstance(results, Exception):
            pytest.fail(str(results), pytrace=False)
        if isinstance(results, str):
            pytest.skip(f"backend {backend_name} unavailable: {results}")
        named = [(r, "" if r.check == Check.REFERENCE else f"{r.check}: ") for r in results]
        unexpected = [f"{r.status}: {label}{r.detail}" for r, label in named if r.status in UNEXPECTED]
        if unexpected:
            pytest.fail("\n".join(unexpected), pytrace=False)
        first = results[0]
        if first.status == Status.UNSUPPORTED:
            pytest.skip(f"unsupported: {first.detail}")
        if first.status == Status.WAIVED and first.failure is None:  # a skip waiver: never run
            pytest.skip(first.detail)
        excused = [f"{r.status}: {label}{r.detail}" for r, label in named
                   if r.status in (Status.DIVERGENT, Status.WAIVED)]
        if excused:
            pytest.xfail("\n".join(excused))

    def gradient(self, spec_id: str, dtype: str, case_id: str) -> None:
        """One gradient test: the reference against its forward op on this case."""
        from harness.run.engine import CaseNotFound  # lazy: numpy and the engine load only in a process that runs cases

        try:
            result = self._suite().gradient(spec_id, dtype, case_id)
        except (SpecsInvalid, CaseNotFound) as e:
            result = e
        if isinstance(result, Exception):
            pytest.fail(str(result), pytrace=False)
        if result is None:
            pytest.fail(f"{spec_id} {dtype}-{case_id}: the gradient check does not apply to this case any more; "
                        "run `opconform gen-tests`", pytrace=False)
        if result.status != Status.PASS:
            pytest.fail(f"{result.status}: {result.detail}", pytrace=False)

    # -- hooks
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """xdist: the workers write their records where the controller merges them."""
        node.workerinput["opconform_parts"] = str(self.suite.parts)

    # pytest's own outcome, which the verdict includes (on the controller, xdist forwards the workers' reports)
    def pytest_collectreport(self, report):
        self.outcome.collected(report)

    def pytest_runtest_logreport(self, report):
        self.outcome.ran(report)

    def pytest_internalerror(self, excrepr, excinfo):
        self.outcome.internal_error(excinfo)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self.suite.write_meta()
        self.suite.close()
        if not self.controller:
            return
        try:
            self._finish(session, exitstatus)
        except Exception as e:  # noqa: BLE001 - the gate itself failed: a FAIL verdict with the reason, never silence or PASS

            self.summary = _summary_without_results([f"the gate could not judge the run: {exception_text(e)}"])
        finally:
            shutil.rmtree(self.suite.parts, ignore_errors=True)
        if self.summary and not self.summary["verdict"]["passed"] and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.summary and session.exitstatus not in _SUMMARY_EXIT_CODES:  # pytest prints no terminal summary
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                self.pytest_terminal_summary(reporter)

    def _finish(self, session, exitstatus) -> None:
        from harness.codegen import gen_tests  # lazy: jinja2 and the generator load only when the session checks its generated tests

        splits, group = getattr(self.config.option, "splits", None), getattr(self.config.option, "group", None)
        suite_dir = self.config.stash.get(_SUITE_DIR, None)
        complete = exitstatus not in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR) \
            and not session.shouldstop
        suite = self._suite()
        try:
            stale = gen_tests.stale(suite.catalog, suite_dir) if suite_dir else None
        except SpecsInvalid:
            stale = None
        finished = suite.finish(complete, {"markers": self.config.option.markexpr or None,
                                           "keywords": self.config.option.keyword or None},
                                {"splits": splits, "group": group} if splits else None, stale)
        pytest_reasons = self.outcome.reasons()
        if finished is None:  # no generated test ran in this session
            if not pytest_reasons or suite_dir is None:
                return
            summary, records = _summary_without_results([]), None  # it failed before any generated test ran
        else:
            summary, records = finished
        verdict = summary["verdict"]
        verdict["reasons"] = [*verdict["reasons"], *pytest_reasons]
        if not verdict["reasons"] and session.exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            verdict["reasons"].append(f"pytest: the session ended with exit status {_exit_name(session.exitstatus)}")
        verdict["passed"] = not verdict["reasons"]
        out = self.config.getoption("opconform_results")
        if out and records is not None:
            summary["run_id"] = out.name
            rundir.write_run(out, records, summary)  # held since pytest_configure (_claim_results_dir)
            self.written = out
        self.summary = summary

    def pytest_terminal_summary(self, terminalreporter):
        if not self.summary:
            return
        from harness.run import gate  # lazy: pydantic and the waivers load only for the gate's summary

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
        if self.written:
            tr.write_line(f"results: {self.written}/{RESULTS}, {self.written}/{SUMMARY}")


class PytestOutcome:
    """What pytest itself saw fail in the session, as verdict reasons: a count and the first example of
    each kind (a test failing without a result record, e.g. when a worker cannot load the specs, leaves
    nothing for the gate's own checks to see)."""

    KINDS = {"collection": "error(s) during collection", "call": "failed test(s)",
             "setup": "error(s) in test setup", "teardown": "error(s) in test teardown",
             "internal": "internal error(s)"}

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}

    def _add(self, kind: str, where: str, text: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first.setdefault(kind, f"{where}: {text}" if where else text)

    def collected(self, report) -> None:
        if report.failed:
            self._add("collection", report.nodeid or ".", _report_line(report))

    def ran(self, report) -> None:
        if report.failed:
            self._add(report.when if report.when in self.KINDS else "call", report.nodeid, _report_line(report))

    def internal_error(self, excinfo) -> None:
        self._add("internal", "", exception_text(excinfo.value) if excinfo is not None else "see INTERNALERROR above")

    def reasons(self) -> list[str]:
        return [f"pytest: {self.counts[kind]} {label} (first: {self.first[kind]})"
                for kind, label in self.KINDS.items() if kind in self.counts]


def _report_line(report, limit: int = 300) -> str:
    """One line saying why a report failed: its `E` lines (an exception), else its text."""
    text = getattr(report, "longreprtext", "") or str(report.longrepr or "")
    lines = [line for line in text.splitlines() if line.strip() and not re.match(r"\[gw\d+\] ", line)]  # xdist's header
    lines = [line[1:].strip() for line in lines if line.startswith("E ")] or [line.strip() for line in lines]
    line = " ".join(" ".join(lines).split()) or "no message"
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _exit_name(status) -> str:
    try:
        return f"{int(status)} ({pytest.ExitCode(status).name})"
    except ValueError:
        return str(status)


def _summary_without_results(reasons: list[str]) -> dict:
    return {"results": 0, "totals": {}, "backends": {}, "verdict": {"passed": not reasons, "reasons": reasons}}
