"""`opconform new-op`: scaffold, see what is missing, fill it in, and watch the generated tests pass.

Everything happens in a temporary copy of specs/ and reference/, run in subprocesses whose PYTHONPATH
puts the copy's `reference` package first, so the repository's own specs and CI never see the toy op.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, SPECS

from harness.backends import openmp_lib
from harness.cli import main
from harness.codegen.scaffold import snake
from harness.spec.unfinished import is_stub, missing_items

SQUARE = '''import numpy as np


def square(X):
    return X * X


def square_grad(dY, X):
    return 2.0 * X * dY
'''
ORT_HAS_NO_SQUAREGRAD = """
known_divergences:
  - id: ort-has-no-squaregrad
    backend: ort
    cases: ["*"]
    result: unsupported
    summary: onnxruntime-training has no SquareGrad op; every session fails to build.
    evidence: "onnxruntime-training 1.19.2 CPU: 'com.microsoft:SquareGrad(-1) is not a registered function/op'"
"""


@pytest.fixture
def project(tmp_path) -> Path:
    shutil.copytree(SPECS, tmp_path / "specs")
    shutil.copytree(REPO / "reference", tmp_path / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    for path in (tmp_path / "specs" / "com.microsoft").glob("*.yaml"):
        if path.stem not in ("ReluGrad", "TanhGrad"):
            path.unlink()  # a small catalog: faster, and untouched by other ops' edits
    shutil.rmtree(tmp_path / "specs" / "ai.onnx", ignore_errors=True)
    for path in (tmp_path / "specs").glob("_waivers/*.yaml"):
        path.unlink()
    return tmp_path


# The editable install's import finder maps `reference` to the repository's own package ahead of
# sys.path; the subprocesses drop it so that PYTHONPATH (the copy, then the repository) decides, and
# point the openmp backend at the installed kernel library explicitly.
BOOT = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
        "if not type(f).__name__.startswith('ScikitBuild')]; ")


def _env(project: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPCONFORM_SPECS"}
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(REPO)])
    env.setdefault(openmp_lib.ENV_LIB, openmp_lib.library_path())
    return env


def opconform(project: Path, *args) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter that imports the copy's reference package, on the copy's specs alone."""
    code = BOOT + "from harness.cli import main; sys.exit(main())"
    args = (*args, "--specs", str(project / "specs"), "--no-builtin-specs")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=project, env=_env(project),
                          capture_output=True, text=True, timeout=300)


def pytest_in(project: Path, *args) -> subprocess.CompletedProcess:
    code = BOOT + "import pytest; sys.exit(pytest.main())"
    return subprocess.run([sys.executable, "-c", code, "generated_tests", "-p", "no:cacheprovider", *args],
                          cwd=project, env=_env(project), capture_output=True, text=True, timeout=300)


def test_scaffold_fill_in_and_run(project, capsys):
    specs = project / "specs"
    assert main(["new-op", "SquareGrad", "--specs", str(specs), "--no-builtin-specs"]) == 0
    out = capsys.readouterr().out
    spec_path, stub_path = specs / "com.microsoft" / "SquareGrad.yaml", project / "reference" / "ops" / "square_grad.py"
    assert "SquareGrad.yaml (5 value(s) marked TODO)" in out and "square_grad.py" in out
    assert 'reference: "reference.ops.square_grad:square_grad"' in spec_path.read_text()

    # validate lists what is still missing, one item a line
    assert main(["validate", "--specs", str(specs), "--no-builtin-specs"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    fields = [line.split(": ")[1] for line in lines[:-1]]
    assert fields == ["summary", "formula", "references[0]", "forward.op", "forward.reference"]
    assert all(": still missing: " in line and line.startswith(str(spec_path)) for line in lines[:-1])

    # gen-tests refuses while the spec is incomplete: the catalog does not load
    assert main(["gen-tests", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert "SquareGrad.yaml: summary: still missing" in capsys.readouterr().err

    # fill in the spec; the forward reference goes beside the (still unwritten) gradient
    text = spec_path.read_text()
    for field, value in (("summary", "Gradient of Square (X * X) with respect to X, given dY and X."),
                         ("formula", "dX = 2 * X * dY"), ("op", "Square"),
                         ("reference", "reference.ops.square_grad:square")):
        todo = next(line for line in text.splitlines() if line.strip().startswith(f"{field}: \"TODO"))
        text = text.replace(todo, f"{todo.split(':')[0]}: \"{value}\"", 1)
    text = text.replace(next(line for line in text.splitlines() if '- "TODO' in line), "  - the opconform tests' toy op")
    spec_path.write_text(text)
    stub = stub_path.read_text()
    stub_path.write_text(stub + "\n\ndef square(X):\n    return X * X\n")
    result = opconform(project, "validate")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        "specs/com.microsoft/SquareGrad.yaml: reference: still missing: reference.ops.square_grad:square_grad only "
        "raises NotImplementedError; write the float64 NumPy reference (docs/adding-an-op.md)")

    # write the reference: valid; gen-tests adds the op's file; its tests run and pass on the reference backend
    stub_path.write_text(SQUARE)
    result = opconform(project, "validate")
    assert result.returncode == 0 and "SquareGrad" in result.stdout, result.stderr
    result = opconform(project, "gen-tests")
    assert result.returncode == 0 and "generated_tests/test_SquareGrad.py" in result.stdout
    result = pytest_in(project, "-m", "SquareGrad and reference", "-q")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "failed" not in result.stdout and " passed" in result.stdout and "verdict: PASS" in result.stdout

    # ORT has no such op: the gate fails on it until the spec says so, with evidence
    result = pytest_in(project, "-m", "SquareGrad and smoke and ort", "-q")
    assert result.returncode == 1 and "is not a registered function/op" in result.stdout
    spec_path.write_text(spec_path.read_text() + ORT_HAS_NO_SQUAREGRAD)
    assert opconform(project, "gen-tests").returncode == 0
    result = pytest_in(project, "-m", "SquareGrad and smoke", "-q")
    assert result.returncode == 0 and "verdict: PASS" in result.stdout, result.stdout[-3000:]


def test_like_copies_the_structure_and_resets_what_describes_the_op(project, capsys):
    specs = project / "specs"
    assert main(["new-op", "ScaledTanhGrad", "--like", "TanhGrad", "--specs", str(specs), "--no-builtin-specs"]) == 0
    capsys.readouterr()
    data = yaml.safe_load((specs / "com.microsoft" / "ScaledTanhGrad.yaml").read_text())
    tanh = yaml.safe_load((specs / "com.microsoft" / "TanhGrad.yaml").read_text())
    assert data["op"] == "ScaledTanhGrad" and data["inputs"] == tanh["inputs"] and data["cases"] == tanh["cases"]
    assert data["reference"] == "reference.ops.scaled_tanh_grad:scaled_tanh_grad"
    assert "known_divergences" not in data  # evidence about TanhGrad's backends, not this op's
    todo = dict(missing_items(data))
    assert set(todo) == {"summary", "formula", "references[0]", "forward.op", "forward.reference"}
    assert "TanhGrad's is Tanh" in todo["forward.op"]
    stub = (project / "reference" / "ops" / "scaled_tanh_grad.py").read_text()
    assert "def scaled_tanh_grad(dY, Y):" in stub


def test_new_op_refuses_to_overwrite_and_names_unknown_ops(project, capsys):
    specs = project / "specs"
    assert main(["new-op", "TanhGrad", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert "TanhGrad.yaml already exists" in capsys.readouterr().err
    assert main(["new-op", "NewGrad", "--like", "TanhGard", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert "unknown op 'TanhGard'; did you mean 'TanhGrad'?" in capsys.readouterr().err
    assert main(["new-op", "2Grad", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert not (specs / "com.microsoft" / "NewGrad.yaml").exists()


def test_stub_detection_and_names():
    def stub(dY, X):
        """Docstring."""
        raise NotImplementedError("later")

    def written(dY, X):
        if dY is None:
            raise NotImplementedError
        return dY

    assert is_stub(stub) and not is_stub(written)
    assert [snake(n) for n in ("SoftmaxGrad_13", "BiasGeluGrad_dX", "GRUGrad", "Conv2DGrad")] == \
        ["softmax_grad_13", "bias_gelu_grad_dx", "gru_grad", "conv2d_grad"]


def _only_still_missing(spec_path: Path, capsys) -> list[str]:
    """validate's lines for the scaffold: every one a TODO still missing (the file parses and checks)."""
    assert main(["validate", "--specs", str(spec_path.parents[1]), "--no-builtin-specs"]) == 1
    lines = [line for line in capsys.readouterr().err.strip().splitlines()[:-1] if line.startswith(str(spec_path))]
    assert lines and all(": still missing: " in line for line in lines), lines
    return [line.split(": ")[1] for line in lines]


def test_from_schema_takes_the_signature_from_the_ort_table(project, capsys):
    from harness.data import ort_op

    specs = project / "specs"
    assert main(["new-op", "LayerNormalizationGrad", "--from-schema", "--specs", str(specs), "--no-builtin-specs"]) == 0
    capsys.readouterr()
    spec_path = specs / "com.microsoft" / "LayerNormalizationGrad.yaml"
    data = yaml.safe_load(spec_path.read_text())
    entry = ort_op("LayerNormalizationGrad")
    assert [(i["name"], i["type"]) for i in data["inputs"]] == [(i["name"], i["type"]) for i in entry["inputs"]]
    assert [o["name"] for o in data["outputs"]] == ["X_grad", "scale_grad", "bias_grad"]
    assert data["attributes"] == {"axis": {"type": "int", "default": -1}}
    assert {k: v["types"] for k, v in data["type_constraints"].items()} == entry["type_constraints"]
    assert data["inputs"][0]["role"] == "grad_output" and data["inputs"][0]["grad_of"] == "Y"
    assert data["outputs"][0]["grad_of"] == "X"
    stub = (project / "reference" / "ops" / "layer_normalization_grad.py").read_text()
    assert "def layer_normalization_grad(Y_grad, X, scale, mean, inv_std_dev, *, axis):" in stub
    missing = _only_still_missing(spec_path, capsys)
    # only what the table cannot say is left: the op's prose, forward op, references, descriptions
    assert {"summary", "formula", "references[0]", "forward.op", "forward.reference"} <= set(missing)
    assert not any(m.startswith(("attributes", "cases")) for m in missing)


def test_from_schema_bool_inputs_get_a_mask_generator(project, capsys):
    specs = project / "specs"
    (project / "reference" / "ops" / "dropout_grad.py").unlink()  # scaffolded as if the repository had none
    assert main(["new-op", "DropoutGrad", "--from-schema", "--specs", str(specs), "--no-builtin-specs"]) == 0
    data = yaml.safe_load((specs / "com.microsoft" / "DropoutGrad.yaml").read_text())
    assert data["type_constraints"]["T2"]["types"] == ["bool"]
    assert data["cases"]["inputs"]["mask"] == {"kind": "mask", "keep": 0.5}
    assert [i.get("optional", False) for i in data["inputs"]] == [False, False, True, True]
    capsys.readouterr()
    _only_still_missing(specs / "com.microsoft" / "DropoutGrad.yaml", capsys)


def test_inputs_and_outputs_any_signature(project, capsys):
    specs = project / "specs"
    assert main(["new-op", "ScaleGrad", "--inputs", "dY,X,scale", "--outputs", "dX,dscale", "--specs", str(specs),
                 "--no-builtin-specs"]) == 0
    capsys.readouterr()
    spec_path = specs / "com.microsoft" / "ScaleGrad.yaml"
    text = spec_path.read_text()
    data = yaml.safe_load(text)
    assert [(i["name"], i["role"]) for i in data["inputs"]] == [
        ("dY", "grad_output"), ("X", "forward_input"), ("scale", "forward_input")]
    assert [(o["name"], o.get("grad_of")) for o in data["outputs"]] == [("dX", "X"), ("dscale", "scale")]
    assert "role guessed from the name" in text  # the guess is said where it is made
    assert "def scale_grad(dY, X, scale):" in (project / "reference" / "ops" / "scale_grad.py").read_text()
    _only_still_missing(spec_path, capsys)


def test_signature_options_are_checked(project, capsys):
    specs = project / "specs"
    assert main(["new-op", "NoSuchGrad", "--from-schema", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert "'NoSuchGrad' is not in ort_training_ops.yaml" in capsys.readouterr().err
    assert main(["new-op", "XGrad", "--inputs", "dY", "--like", "TanhGrad", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert "use one of --like, --inputs/--outputs" in capsys.readouterr().err
    assert main(["new-op", "XGrad", "--inputs", "dY,X", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert "--inputs and --outputs each need at least one name" in capsys.readouterr().err
    assert main(["new-op", "AdamWOptimizer", "--from-schema", "--specs", str(specs), "--no-builtin-specs"]) == 2
    assert "is a sequence or variadic" in capsys.readouterr().err
