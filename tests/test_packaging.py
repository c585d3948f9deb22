"""The wheel works away from the source tree: built at one ISA level (baseline, to keep the test short),
installed into a fresh venv, run from an empty directory with the built-in specs it ships, then with a
team's spec directory beside them.

The fresh venv has no pip and no site packages of its own: the wheel goes in with `pip --python VENV
install --no-deps`, and the dependencies (numpy, onnxruntime-training, ...) come from the main venv's
site-packages through a directory of links to each of its entries except this project's own (the
editable install's finder and .pth files, harness/ with its built libraries, opconform's metadata): the
installed package cannot fall back on the repository. The CMake build directory is kept in build/ so
that a second run rebuilds only what changed (the first builds the kernels: ~35 s of CPU). One test function,
so that `pytest -n 2` builds once.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO, SPECS

pytestmark = pytest.mark.packaging
BUILD_DIR = REPO / "build" / "wheel-test-baseline"
OURS = ("harness", "reference", "opconform", "_editable", "__editable__", "_opconform", "__pycache__")


def sh(*argv, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def install(tmp: Path) -> Path:
    """A fresh venv holding the wheel, and nothing of the repository: returns its bin/ directory."""
    # Without build isolation (scikit-build-core is in the dev extra) the build directory stays valid between
    # runs: an isolated build environment is a new path each time, and its BLAS headers with it.
    isolation = [] if importlib.util.find_spec("scikit_build_core") is None else ["--no-build-isolation"]
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", tmp / "dist",
       "-C", f"build-dir={BUILD_DIR}", "-C", "cmake.define.OPCONFORM_ISA_LEVELS=baseline", REPO, timeout=900)
    (wheel,) = (tmp / "dist").glob("opconform-*.whl")
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv)
    deps = tmp / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        # the core install: no torch (the [torch] extra), so what needs it says so
        if not entry.name.startswith((*OURS, "torch", "functorch")) and not entry.name.endswith(".pth"):
            (deps / entry.name).symlink_to(entry)
    site = Path(sh(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "_opconform_test_deps.pth").write_text(f"{deps}\n")
    sh(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps", "--no-index", wheel)
    return venv / "bin"


def test_the_wheel_in_a_fresh_venv(tmp_path):
    installed = install(tmp_path)
    empty = working_directory(tmp_path)
    specs_found_through_the_package(installed, empty)
    validate_and_a_smoke_run_from_an_empty_directory(installed, empty)
    a_team_directory_beside_the_built_in_specs(installed, empty)
    a_training_graph_checked_by_the_installed_package(installed, empty)


def working_directory(tmp_path) -> tuple[Path, dict]:
    """An empty working directory and an environment that points nowhere near the repository."""
    where = tmp_path / "empty"
    where.mkdir()
    drop = ("OPCONFORM_SPECS", "OPCONFORM_KERNELS_LIB", "OPCONFORM_ISA", "OPCONFORM_NO_CACHE", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return where, env


def specs_found_through_the_package(installed, empty):
    where, env = empty
    done = sh(installed / "python", "-c", "import harness.cli, reference, harness.spec.sources as s; "
              "print(harness.cli.__file__); print(reference.__file__); print(s.builtin_root())", cwd=where, env=env)
    cli, reference, specs = done.stdout.split()
    site = str(installed.parent)
    assert cli.startswith(site) and reference.startswith(site), done.stdout  # not the repository's
    assert Path(specs) == Path(cli).parent / "specs" and (Path(specs) / "_defaults" / "tolerances.yaml").is_file()
    shipped = sorted(p.relative_to(specs).as_posix() for p in Path(specs).glob("*/*.yaml"))
    assert shipped == sorted(p.relative_to(SPECS).as_posix() for p in SPECS.glob("*/*.yaml"))
    helped = sh(installed / "opconform", "run", "--help", cwd=where, env=env).stdout
    assert "built-in specs" in " ".join(helped.split()) and "site-packages/harness/specs" in "".join(helped.split())


def validate_and_a_smoke_run_from_an_empty_directory(installed, empty):
    where, env = empty
    done = sh(installed / "opconform", "validate", cwd=where, env=env)
    count = len([p for p in SPECS.glob("*/*.yaml") if not p.parent.name.startswith("_")])
    assert done.stdout.startswith(f"{count} specs valid:"), done.stdout
    # every op of the smoke tier on every default backend, as a new user's first `opconform run --tier smoke`
    sh(installed / "opconform", "run", "--tier", "smoke", "--no-report", "--out", where / "run", cwd=where, env=env)
    summary = json.loads((where / "run" / "summary.json").read_text())
    assert summary["verdict"]["passed"] and summary["totals"]["pass"] > 0, summary["verdict"]
    assert len(summary["ops"]) == count
    for name in ("reference", "openmp", "ort", "ort-autograd"):
        assert summary["backends"][name]["available"], summary["backends"][name]
    assert summary["spec_sources"] == {"builtin": True, "dirs": []}
    assert sorted(p.name for p in where.iterdir()) == ["run"]  # nothing else written into the working directory
    shutil.rmtree(where / "run")


def a_team_directory_beside_the_built_in_specs(installed, empty):
    where, env = empty
    team = where.parent / "team"
    (team / "com.microsoft").mkdir(parents=True)
    text = (SPECS / "com.microsoft" / "ReluGrad.yaml").read_text()
    (team / "com.microsoft" / "TeamReluGrad.yaml").write_text(text.replace("\nop: ReluGrad\n", "\nop: TeamReluGrad\n"))
    (team / "com.microsoft" / "TanhGrad.overlay.yaml").write_text(
        "extends: TanhGrad\ngroups:\n  - {name: team_wide, tier: smoke, dtypes: [float32], params: {shape: [[3, 257]]}}\n")
    sh(installed / "opconform", "run", "--specs", team, "--tier", "smoke", "--ops", "TeamReluGrad,TanhGrad",
       "--backends", "reference", "--no-report", "--out", where / "team-run", cwd=where, env=env)
    summary = json.loads((where / "team-run" / "summary.json").read_text())
    assert summary["verdict"]["passed"] and summary["ops"] == ["TanhGrad", "TeamReluGrad"]
    done = sh(installed / "python", "-c", "import sys; from harness.run.rundir import read_results; "
              "print(sorted({r['case'] for r in read_results(sys.argv[1]) if r['op'] == 'TanhGrad'}))",
              where / "team-run", cwd=where, env=env)
    assert "team_wide/shape=3x257" in done.stdout
    clash = subprocess.run([installed / "opconform", "validate", "--specs", team], cwd=where, env=env,
                           capture_output=True, text=True)
    assert clash.returncode == 0  # the team's own spec and overlay validate beside the built-in specs
    shutil.copy(SPECS / "com.microsoft" / "GeluGrad.yaml", team / "com.microsoft" / "GeluGrad.yaml")
    clash = subprocess.run([installed / "opconform", "run", "--specs", team, "--ops", "ReluGrad"], cwd=where, env=env,
                           capture_output=True, text=True)
    assert clash.returncode == 2 and "GeluGrad is a built-in spec in" in clash.stderr, clash.stderr


def training_graph(path: Path) -> Path:
    """A small training graph as ORT's builder names it (Relu, a ReduceSum loss, their gradients), runnable by ORT."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Relu", ["x"], ["y"], name="/act/Relu"),
             helper.make_node("ReduceSum", ["y"], ["loss"], name="/loss/ReduceSum", keepdims=0),
             helper.make_node("Shape", ["y"], ["y_shape"], name="/loss/ReduceSum_Grad/Shape_0"),
             helper.make_node("Expand", ["loss_grad", "y_shape"], ["y_grad"], name="/loss/ReduceSum_Grad/Expand_1"),
             helper.make_node("ReluGrad", ["y_grad", "x"], ["x_grad"], name="/act/Relu_Grad/ReluGrad_0",
                              domain="com.microsoft")]
    graph = helper.make_graph(nodes, "training", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("x_grad", TensorProto.FLOAT, ["batch", 5])],
                              initializer=[numpy_helper.from_array(__import__("numpy").ones((), "float32"), "loss_grad")])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17),
                                                                  helper.make_opsetid("com.microsoft", 1)])
    path.write_bytes(model.SerializeToString())
    return path


def a_training_graph_checked_by_the_installed_package(installed, empty):
    """`opconform model` from the wheel, without torch: a training graph file is checked; a forward model says in
    one line that building its training graph needs torch."""
    where, env = empty
    graph = training_graph(where.parent / "training_model.onnx")
    sh(installed / "opconform", "model", graph, "--dim", "batch=4", "--backends", "reference,openmp,ort",
       "--out", where / "model", "--no-progress", cwd=where, env=env)
    doc = json.loads((where / "model" / "model.json").read_text())
    assert doc["verdict"] == "PASS" and [r["spec"] for r in doc["configurations"] if r["status"] == "verified"] \
        == ["ReluGrad", "ReduceSumGradient"], doc["configurations"]
    assert (where / "model" / "model.html").is_file()
    forward = where.parent / "forward.onnx"
    from onnx import load_model_from_string

    model = load_model_from_string(graph.read_bytes())
    del model.graph.node[2:]
    forward.write_bytes(model.SerializeToString())
    done = subprocess.run([installed / "opconform", "model", forward, "--dim", "batch=4", "--out", where / "fwd"],
                          cwd=where, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "needs torch" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    shutil.rmtree(where / "model")
