"""Third-party backends as installed plugins (entry-point group `opconform.backends`): discovered without
running their code here, run in the isolated worker (a segfault or a hang is a result), judged by
the same engine, and never expected unless named.

The plugins of tests/plugins/ are registered as the entry points of a throwaway distribution (a
dist-info directory on sys.path and, for the workers, PYTHONPATH); the example plugin of
examples/example-backend is installed with pip, as a kernel team would, in test_example_plugin.py."""
import os
import sys
from pathlib import Path

import pytest

from harness import backends as registry
from harness.backends.plugin import PluginBackend, discover
from harness.run.catalog import load as load_catalog
from harness.run.runner import RunError, RunOptions, run

HERE = Path(__file__).parent
PLUGINS = {
    "plugin-correct": "misbehaving:Correct",
    "plugin-segfaults": "misbehaving:Segfaults",
    "plugin-hangs": "misbehaving:Hangs",
    "plugin-raises": "misbehaving:RaisesEverywhere",
    "plugin-returns-text": "misbehaving:ReturnsText",
    "plugin-wrong-dtype": "misbehaving:WrongDtype",
    "plugin-old-api": "misbehaving:OldApi",
    "plugin-needs-gpu": "misbehaving:NeedsGpu",
    "plugin-broken-import": "broken_import:Anything",
}


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    dist = site / "opconform_test_plugins-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: opconform-test-plugins\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[opconform.backends]\n" + "".join(f"{name} = {target}\n" for name, target in PLUGINS.items()))
    paths = [str(site), str(HERE / "plugins")]
    with pytest.MonkeyPatch.context() as mp:
        for path in reversed(paths):
            mp.syspath_prepend(path)
        mp.setenv("PYTHONPATH", os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
        discover.cache_clear()
        yield
    discover.cache_clear()


@pytest.fixture(scope="module")
def relu_catalog(tmp_path_factory):
    specs = tmp_path_factory.mktemp("specs")
    source = HERE.parent / "specs"
    for name in ("_defaults/tolerances.yaml", "com.microsoft/ReluGrad.yaml"):
        (specs / name).parent.mkdir(parents=True, exist_ok=True)
        (specs / name).write_bytes((source / name).read_bytes())
    return load_catalog(specs)


def run_on(catalog, tmp_path, *backends, tier="smoke", timeout=20.0, cases=None):
    outcome = run(catalog, RunOptions(backends=list(backends) or None, tier=tier, out=tmp_path / "run", progress=False,
                                      timeout=timeout, cases=cases))
    from harness.run.rundir import read_results

    return outcome, read_results(outcome.run_dir)


def test_discovered_but_not_built_in_or_expected():
    for name in PLUGINS:
        assert name in registry.known() and name in registry.defaults()
        assert name not in registry.FACTORIES and name not in registry.EXPECTED
    backend = registry.create("plugin-correct")
    try:
        assert isinstance(backend, PluginBackend) and backend.availability() is None
    finally:
        backend.close()
    assert "misbehaving" not in sys.modules  # the plugin's code ran in the worker only


def test_correct_plugin_is_judged_like_any_backend(relu_catalog, tmp_path):
    outcome, records = run_on(relu_catalog, tmp_path, "plugin-correct", tier="ci")
    mine = [r for r in records if r["backend"] == "plugin-correct" and r.get("check", "reference") == "reference"]
    assert outcome.passed, outcome.summary["verdict"]
    assert {r["status"] for r in mine if r["dtype"] == "float32"} == {"pass"}
    assert any(not r["valid"] for r in mine if r["dtype"] == "float32")  # its Rejected answered the invalid cases
    others = [r for r in mine if r["dtype"] != "float32"]
    assert others and all(r["status"] == "unsupported" and "declares ReluGrad for float32 only" in r["detail"]
                          for r in others)
    assert outcome.summary["backends"]["plugin-correct"]["plugin"] == "misbehaving:Correct"


@pytest.mark.parametrize("name, status, failure, says", [
    ("plugin-segfaults", "crashed", "crash", "SIGSEGV"),
    ("plugin-hangs", "crashed", "hang", "1"),
    ("plugin-raises", "fail", "rejects_valid", "raised KeyError (not plugin_api.Rejected)"),
    ("plugin-returns-text", "crashed", "crash", "returned str"),
    ("plugin-wrong-dtype", "fail", "wrong_shape", "float64"),
])
def test_misbehaving_plugin_is_a_result_and_the_run_goes_on(relu_catalog, tmp_path, name, status, failure, says):
    outcome, records = run_on(relu_catalog, tmp_path, name, timeout=1.0, cases="basic/*")
    mine = [r for r in records if r["backend"] == name and r["dtype"] == "float32"]
    assert len(mine) == 3  # every case ran, the ones after a crash or a hang too
    for r in mine:
        assert (r["status"], r["failure"]) == (status, failure), r["detail"]
        assert says in r["detail"]
    assert not outcome.passed


@pytest.mark.parametrize("name, says", [
    ("plugin-old-api", "backend API version 0; this opconform speaks version 1"),
    ("plugin-needs-gpu", "no GPU here"),
    ("plugin-broken-import", "ImportError: libmykernels.so"),
])
def test_unavailable_plugin_says_why_and_fails_only_when_named(relu_catalog, tmp_path, name, says):
    backend = registry.create(name)
    try:
        assert says in backend.availability()
    finally:
        backend.close()
    with pytest.raises(RunError, match=f"backend '{name}' is unavailable here: .*{says.split(':')[0]}"):
        run_on(relu_catalog, tmp_path, "reference", name)


def test_unnamed_unavailable_plugins_do_not_fail_the_default_run(relu_catalog, tmp_path):
    outcome, _ = run_on(relu_catalog, tmp_path, cases="basic/shape=7", timeout=2.0)
    backends = outcome.summary["backends"]
    assert not backends["plugin-needs-gpu"]["available"]
    assert backends["plugin-correct"]["available"]
    assert not any(m["name"].startswith("plugin-") for m in outcome.summary["missing_backends"])


def gate(*args):
    import subprocess

    return subprocess.run([sys.executable, "-m", "pytest", str(HERE.parent / "generated_tests" / "test_ReluGrad.py"),
                           "-p", "no:cacheprovider", "-q", "-n", "0", "-m", "smoke and plugin_needs_gpu", *args],
                          cwd=HERE.parent, capture_output=True, text=True)


def test_the_generated_suite_skips_an_unavailable_plugin_unless_it_is_named():
    quiet = gate()
    assert quiet.returncode == 0, quiet.stdout[-2000:]
    assert "backend plugin-needs-gpu unavailable" in quiet.stdout and "no GPU here" in quiet.stdout
    named = gate("--opconform-backend", "plugin-needs-gpu")
    assert named.returncode == 1, named.stdout[-2000:]
    assert "expected backend plugin-needs-gpu is unavailable: no GPU here" in named.stdout
