"""The pytest gate's printed verdict and the session's exit status agree, always (issue 31: a spec that
failed to load in one xdist worker failed its tests, pytest exited 1, and the gate printed PASS).

Each test runs pytest on a small generated suite (ReluGrad on the reference backend) in a subprocess."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_codegen import make_project

SELECT = "smoke and ReluGrad and reference and float32"


@pytest.fixture
def project(tmp_path, capsys) -> Path:
    path = make_project(tmp_path, ops=("ReluGrad",))
    capsys.readouterr()
    return path


def run_pytest(project: Path, *args) -> tuple[int, str, str]:
    """(exit status, the printed verdict PASS/FAIL, the whole output); exactly one verdict line."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPCONFORM_SPECS", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(project), XDG_CACHE_HOME=str(project / "cache"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "generated_tests", "-p", "no:cacheprovider", "-q",
                           "-m", SELECT, *args], cwd=project, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    verdicts = re.findall(r"^verdict: (PASS|FAIL)$", out, re.MULTILINE)
    assert len(verdicts) == 1, out[-3000:]
    return proc.returncode, verdicts[0], out


def gate_block(out: str) -> str:
    return out[out.index("opconform gate"):]


def test_a_passing_suite_prints_pass_and_exits_0(project):
    code, verdict, out = run_pytest(project)
    assert (code, verdict) == (0, "PASS"), out[-3000:]


def test_a_collection_error_prints_fail_and_exits_nonzero(project):
    (project / "generated_tests" / "test_Broken.py").write_text("import no_such_module_anywhere\n")
    code, verdict, out = run_pytest(project)
    assert code != 0 and verdict == "FAIL", out[-3000:]
    assert ("pytest: 1 error(s) during collection (first: generated_tests/test_Broken.py: ModuleNotFoundError: "
            "No module named 'no_such_module_anywhere')") in gate_block(out)


def test_specs_that_fail_to_load_in_one_worker_fail_the_verdict(project):
    """The case of issue 31: the controller and one worker load the specs, the other worker does not;
    the tests it ran fail without result records, so the gate's own checks see only passes."""
    (project / "flaky_hooks.py").write_text(
        "import os\n\n"
        "def valid_if(shapes, attributes):\n"
        "    if os.environ.get('PYTEST_XDIST_WORKER') == 'gw1':\n"
        "        raise ValueError()\n")
    (project / "specs" / "_defaults" / "hooks.yaml").write_text("packages: [flaky_hooks]\n")
    spec = project / "specs" / "com.microsoft" / "ReluGrad.yaml"
    spec.write_text(spec.read_text() + 'valid_if: "flaky_hooks:valid_if"\n')
    code, verdict, out = run_pytest(project, "-n", "2", "--opconform-results", str(project / "results"))
    assert code != 0 and verdict == "FAIL", out[-3000:]
    assert re.search(r"pytest: \d+ failed test\(s\) \(first: generated_tests/test_ReluGrad.py::\S+: the specs do "
                     r"not validate .*flaky_hooks:valid_if raised ValueError", gate_block(out)), gate_block(out)


def test_an_internal_error_prints_fail(project):
    (project / "breaking_plugin.py").write_text(
        "def pytest_runtest_logfinish(nodeid, location):\n"
        "    raise RuntimeError('a plugin hook broke')\n")
    code, verdict, out = run_pytest(project, "-p", "breaking_plugin")
    assert code == pytest.ExitCode.INTERNAL_ERROR and verdict == "FAIL", out[-3000:]
    assert "pytest: 1 internal error(s) (first: RuntimeError: a plugin hook broke)" in gate_block(out)
