"""`opconform new-op`: scaffold, see what is missing, fill it in, and watch the generated tests pass.

Everything happens in a temporary copy of specs/ and reference/, run in subprocesses whose PYTHONPATH
puts the copy's `reference` package first, so the repository's own specs and CI never see the toy op.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, copy_specs

from harness.backends import openmp_lib
from harness.cli import main
from harness.codegen.scaffold import snake
from harness.spec.unfinished import is_stub, missing_items

SQUARE = "def square_grad(dY, X):\n    return 2.0 * X * dY\n"  # reference/ops/square_grad.py
SQUARE_FORWARD = "def square(X):\n    return X * X\n"  # reference/forward/square.py
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
    copy_specs(tmp_path / "specs")  # without the repository's waivers
    shutil.copytree(REPO / "reference", tmp_path / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    for path in (tmp_path / "specs" / "com.microsoft").glob("*.yaml"):
        if path.stem not in ("ReluGrad", "TanhGrad"):
            path.unlink()  # a small catalog: faster, and untouched by other ops' edits
    shutil.rmtree(tmp_path / "specs" / "ai.onnx", ignore_errors=True)
    return tmp_path


# The editable install's import finder maps `reference` to the repository's own package ahead of
# sys.path; the subprocesses drop it so that PYTHONPATH (the copy, then the repository) decides, and
# point the openmp backend at the installed kernel library explicitly.
BOOT = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
        "if not type(f).__name__.startswith('ScikitBuild')]; ")


def _env(project: Path, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPCONFORM_SPECS"}
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(REPO)])
    env.setdefault(openmp_lib.ENV_LIB, openmp_lib.library_path())
    env.update(extra or {})
    return env


def opconform(project: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter that imports the copy's reference package, on the copy's specs alone."""
    code = BOOT + "from harness.cli import main; sys.exit(main())"
    args = (*args, "--specs", str(project / "specs"), "--no-builtin-specs")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=project, env=_env(project, env),
                          capture_output=True, text=True, timeout=300)


def pytest_in(project: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    code = BOOT + "import pytest; sys.exit(pytest.main())"
    return subprocess.run([sys.executable, "-c", code, "generated_tests", "-p", "no:cacheprovider", *args],
                          cwd=project, env=_env(project, env), capture_output=True, text=True, timeout=300)


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
                         ("reference", "reference.forward.square:square")):
        todo = next(line for line in text.splitlines() if line.strip().startswith(f"{field}: \"TODO"))
        text = text.replace(todo, f"{todo.split(':')[0]}: \"{value}\"", 1)
    text = text.replace(next(line for line in text.splitlines() if '- "TODO' in line), "  - the opconform tests' toy op")
    spec_path.write_text(text)
    (project / "reference" / "forward" / "square.py").write_text(SQUARE_FORWARD)  # the module pair's forward half
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


LINEAR = '''import numpy as np


def linear(X, W):
    """Y = X @ W.T (W is out x in, as torch.nn.Linear keeps it)."""
    return X @ W.T


def linear_grad(dY, X, W):
    return dY @ W, dY.T @ X


def w_shape(shapes, attributes):
    n = shapes["dY"][-1]
    return [n, n]
'''


def _fill_in(spec_path: Path, **values) -> None:
    """Replace each scaffolded `field: "TODO..."` (or `field: 'TODO...'` in a flow mapping) line's value."""
    text = spec_path.read_text()
    for field, value in values.items():
        text = re.sub(rf"""^(\s*-?\s*){field}: ["']TODO[^\n]*$""", rf"\g<1>{field}: {value}", text, count=1,
                      flags=re.MULTILINE)
    spec_path.write_text(text)


def test_multi_input_shapes_are_left_todo_and_a_wrong_rule_is_a_spec_error(project, capsys):
    """A matmul-like op: new-op guesses no shape for its second and third inputs; validate lists them as
    still missing. Filled in wrongly (every input dY's shape, the guess the scaffold used to make), validate
    calls the reference once per group and reports its NumPy error as one spec line naming group and inputs."""
    specs = project / "specs"
    assert main(["new-op", "LinearGrad", "--inputs", "dY,X,W", "--outputs", "dX,dW", "--specs", str(specs),
                 "--no-builtin-specs"]) == 0
    capsys.readouterr()
    spec_path = specs / "com.microsoft" / "LinearGrad.yaml"
    missing = _only_still_missing(spec_path, capsys)
    assert {"inputs[1].shape_from", "inputs[2].shape_from"} <= set(missing)
    data = yaml.safe_load(spec_path.read_text())
    assert [o["shape_from"] for o in data["outputs"]] == ["X", "W"]  # a gradient has its input's shape: not a guess

    text = spec_path.read_text()
    text = re.sub(r"shape_from: 'TODO(?:[^']|'')*'", "shape_from: dY", text)  # the wrong rule: dY's shape
    text = re.sub(r"""description: ["']TODO[^"']*["']""", "description: a float tensor", text)
    text = text.replace("params: {shape: [[3, 4], [2, 3, 5]]}", "params: {shape: [[3, 4], [5, 2]]}")
    spec_path.write_text(text)
    _fill_in(spec_path, summary='"Gradient of a linear layer."', formula='"dX = dY W, dW = dY^T X"',
             op="MatMul", reference='"reference.ops.linear_grad:linear"')
    text = spec_path.read_text()
    spec_path.write_text(text.replace(next(line for line in text.splitlines() if '- "TODO' in line),
                                      "  - the opconform tests' toy op"))
    (project / "reference" / "ops" / "linear_grad.py").write_text(LINEAR)
    result = opconform(project, "validate")
    assert result.returncode == 1, result.stdout
    (line, total) = result.stderr.strip().splitlines()[-2:]
    assert len(result.stderr.strip().splitlines()) == 2, result.stderr
    assert line.startswith("specs/com.microsoft/LinearGrad.yaml: cases.groups[0]: case float32-basic/shape=5x2: the "
                           "reference reference.ops.linear_grad:linear_grad raised ValueError: matmul: "), line
    # the group's smallest case (5x2, not 3x4): once per group
    assert line.endswith("on inputs dY [5, 2], X [5, 2], W [5, 2]; check the shape rule of X (shape_from dY gives "
                         "[5, 2]), W (shape_from dY gives [5, 2]), or the reference"), line
    assert total == "1 problem(s) found"

    # W (out x in) has its own rule: valid
    spec_path.write_text(spec_path.read_text().replace("name: W, type: T, role: forward_input, shape_from: dY",
                                                       "name: W, type: T, role: forward_input, "
                                                       "shape_fn: 'reference.ops.linear_grad:w_shape'"))
    result = opconform(project, "validate")
    assert result.returncode == 0, result.stderr


def test_an_output_the_reference_returns_in_another_shape_is_a_spec_error(project):
    """The reference runs, but an output's shape rule disagrees with what it returns: named with the rules."""
    specs = project / "specs" / "com.microsoft"
    tanh = specs / "TanhGrad.yaml"
    text = tanh.read_text()
    module = project / "reference" / "ops" / "wrong_shape.py"
    module.write_text("from reference.ops.activations import tanh_grad as _right\n\n\n"
                      "def tanh_grad(dY, Y):\n    return _right(dY, Y)[..., :1]\n")
    tanh.write_text(re.sub(r'^reference: .*$', 'reference: "reference.ops.wrong_shape:tanh_grad"', text,
                           flags=re.MULTILINE))
    result = opconform(project, "validate")
    assert result.returncode == 1
    line = result.stderr.splitlines()[0]
    assert re.fullmatch(r"specs/com.microsoft/TanhGrad.yaml: cases.groups\[0\]: case float32-basic/shape=\w+: the "
                        r"reference returns output dX of shape \[.*\], but its shape_from dY gives \[.*\]; check the "
                        r"shape rule of Y \(shape_from dY gives \[.*\]\), the output's, or the reference", line), line


# ---- an op with a C kernel: its own files and one line in csrc/ops.def -----------------------------------------

SQUARE_C = r'''/* SquareGrad: dX = 2 * X * dY (the opconform tests' toy op, tests/test_new_op.py). float32 and float64. */
#include "call.h"

typedef struct {
    int32_t dtype;
    int64_t n;
} square_plan;

static int32_t prep_square_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    square_plan *p = plan_v;
    static const int32_t both[] = {0, 1};
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *dy = c->in[0], *x = c->in[1];
    if ((s = opc_check_supported_dtype(c, dy->dtype)) || (s = opc_check_dtypes(c, dy->dtype, both, 2))) return s;
    char a[200], b[200];
    if (!opc_same_shape(dy, x))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X shape %s differs from dY shape %s", opc_shape_str(x, a, sizeof a),
                        opc_shape_str(dy, b, sizeof b));
    p->dtype = dy->dtype;
    p->n = opc_numel(dy);
    opc_shape_from(&outs[0], dy);
    return OPC_OK;
}

static int32_t exec_square_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const square_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    if (p->dtype == OPC_FLOAT) {
        const float *dy = c->in[0]->data, *x = c->in[1]->data;
        float *dx = outs[0].data;
        for (int64_t i = 0; i < p->n; i++) dx[i] = 2.0f * x[i] * dy[i];
    } else {
        const double *dy = c->in[0]->data, *x = c->in[1]->data;
        double *dx = outs[0].data;
        for (int64_t i = 0; i < p->n; i++) dx[i] = 2.0 * x[i] * dy[i];
    }
    return OPC_OK;
}

static const int32_t DT_SQUARE[] = {OPC_FLOAT, OPC_DOUBLE};
static const char *const SQUARE_IN[] = {"dY", "X"};
static const uint8_t SQUARE_OPT[] = {0, 0};
static const char *const SQUARE_OUT[] = {"dX"};

OPC_DEFINE_OP(SquareGrad) = {
    .desc = {.name = "SquareGrad", OPC_INPUTS(SQUARE_IN, SQUARE_OPT), OPC_OUTPUTS(SQUARE_OUT), OPC_DTYPES(DT_SQUARE),
             .notes = "dX = 2 * X * dY"},
    .prepare = prep_square_grad, .exec = exec_square_grad};
'''
SQUARE_LINE = 'OPC_OP(SquareGrad, "square_grad.c")\n'
# The C kernel's thread-invariance cases, in its spec (validate requires one such group for every op of ops.def)
THREAD_SPLIT = """
    - name: thread_split
      tier: nightly
      tags: [thread_split]
      description: one element, and an odd length
      dtypes: [float32]
      params: {shape: [[1], [65537]]}
"""
# What a build of the C library needs from the repository (CMakeLists.txt reads csrc/ only; specs/ only when pip builds)
BUILD_FILES = ("CMakeLists.txt", "csrc")
# What adding an op may touch, compared file by file with the repository after the op is in
COMPARED = ("specs", "reference", "csrc", "generated_tests", "CMakeLists.txt")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


@pytest.fixture
def c_project(tmp_path) -> Path:
    """A copy of everything adding an op may touch, the whole spec set (the op table holds every op to a spec)."""
    for name in COMPARED:
        source = REPO / name
        if name == "specs":
            copy_specs(tmp_path / name)  # without the repository's waivers
        elif source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=IGNORED)
        else:
            shutil.copy2(source, tmp_path / name)
    return tmp_path


def _files(root: Path) -> dict[str, bytes]:
    out = {}
    for name in COMPARED:
        base = root / name
        paths = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for path in paths:
            rel = path.relative_to(root)
            if "__pycache__" in rel.parts or (rel.parts[:2] == ("specs", "_waivers") and rel.suffix == ".yaml"):
                continue
            out[str(rel)] = path.read_bytes()
    return out


def configure(project: Path, build: Path) -> subprocess.CompletedProcess:
    """CMake's configure step at the baseline ISA level (seconds: the op table's checks run here)."""
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    return subprocess.run(["cmake", "-S", str(project), "-B", str(build), *generator, "-DOPCONFORM_ISA_LEVELS=baseline",
                           f"-DPython_EXECUTABLE={sys.executable}"], capture_output=True, text=True, timeout=300)


def build(project: Path, build_dir: Path) -> subprocess.CompletedProcess:
    result = configure(project, build_dir)
    if result.returncode != 0:
        return result
    return subprocess.run(["cmake", "--build", str(build_dir), "-j", "2"], capture_output=True, text=True, timeout=900)


needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None and not os.environ.get("CI"),
                                 reason="cmake is not installed (CI installs it: .ci/run)")


@needs_cmake
def test_an_op_with_a_c_kernel_touches_its_own_files_and_one_line_of_ops_def(c_project, tmp_path, capsys):
    """docs/adding-an-op.md's path with a C kernel: spec and reference module pair (new-op, filled in), the C file
    and its line in csrc/ops.def, a build (baseline ISA only), validate (the op table against the specs and the
    built library), gen-tests, the op's smoke tests on openmp; then the copy differs from the repository only by
    the op's own files, the generated test (and the manifest gen-tests keeps), and the one ops.def line."""
    project = c_project
    specs = project / "specs"
    # generated_tests/ as gen-tests writes it for the copied specs (CI's `gen-tests --check` holds the repository's
    # to the same), so that the comparison below sees what adding the op changes, not another edit in progress
    assert opconform(project, "gen-tests").returncode == 0
    before = _files(project)
    assert main(["new-op", "SquareGrad", "--specs", str(specs), "--no-builtin-specs"]) == 0
    capsys.readouterr()
    spec_path = specs / "com.microsoft" / "SquareGrad.yaml"
    _fill_in(spec_path, summary='"Gradient of Square (X * X) with respect to X, given dY and X."',
             formula='"dX = 2 * X * dY"', op='"Square"', reference='"reference.forward.square:square"')
    text = spec_path.read_text()
    spec_path.write_text(text.replace(next(line for line in text.splitlines() if '- "TODO' in line),
                                      "  - the opconform tests' toy op") + ORT_HAS_NO_SQUAREGRAD)
    text = spec_path.read_text()
    assert "\n  invalid:\n" in text
    spec_path.write_text(text.replace("\n  invalid:\n", THREAD_SPLIT + "  invalid:\n", 1))
    (project / "reference" / "ops" / "square_grad.py").write_text(SQUARE)
    (project / "reference" / "forward" / "square.py").write_text(SQUARE_FORWARD)
    (project / "csrc" / "square_grad.c").write_text(SQUARE_C)
    with (project / "csrc" / "ops.def").open("a") as table:
        table.write(SQUARE_LINE)

    # before the build: validate says the library is stale, in seconds
    result = opconform(project, "validate")
    assert result.returncode == 1 and result.stderr.splitlines()[0] == (
        "csrc/ops.def: the loaded C library was built from another op table (lacks SquareGrad): rebuild it, "
        "pip install --no-build-isolation -e . (docs/install.md)"), result.stderr

    build_dir = tmp_path / "build"
    result = build(project, build_dir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    library = build_dir / "libopconform_kernels_baseline.so"
    env = {openmp_lib.ENV_LIB: str(library)}
    result = opconform(project, "validate", env=env)
    assert result.returncode == 0 and "SquareGrad" in result.stdout, result.stderr
    assert opconform(project, "gen-tests", env=env).returncode == 0
    result = pytest_in(project, "-m", "SquareGrad and smoke and openmp", "-v", env=env)
    assert result.returncode == 0 and "verdict: PASS" in result.stdout, result.stdout[-3000:]
    ran = [line for line in result.stdout.splitlines() if "::" in line and "openmp" in line]
    assert ran and all(" PASSED" in line for line in ran if "float32" in line or "float64" in line), ran
    assert any("float32" in line and " PASSED" in line for line in ran), ran

    # what changed: the op's own files, its generated test and manifest entry, one ops.def line
    after = _files(project)
    added = sorted(set(after) - set(before))
    changed = sorted(p for p in set(after) & set(before) if after[p] != before[p])
    assert set(before) <= set(after)
    assert added == ["csrc/square_grad.c", "generated_tests/test_SquareGrad.py", "reference/forward/square.py",
                     "reference/ops/square_grad.py", "specs/com.microsoft/SquareGrad.yaml"], added
    assert changed == ["csrc/ops.def", "generated_tests/MANIFEST.json"], changed
    assert sorted(added + changed) == guide_files(domain="com.microsoft", Op="SquareGrad", op="square_grad",
                                                  forward="square")  # what docs/adding-an-op.md lists
    assert after["csrc/ops.def"] == before["csrc/ops.def"] + SQUARE_LINE.encode()
    manifest_before, manifest_after = (json.loads(m["generated_tests/MANIFEST.json"]) for m in (before, after))
    assert set(manifest_after["files"]) - set(manifest_before["files"]) == {"test_SquareGrad.py"}
    del manifest_after["files"]["test_SquareGrad.py"]
    assert manifest_after == manifest_before  # generated by gen-tests: no one edits it

    # a symbol that no source defines fails the link (-Wl,--no-undefined), naming it, not the first load
    c_file = project / "csrc" / "square_grad.c"
    c_file.write_text(c_file.read_text().replace("OPC_DEFINE_OP(SquareGrad) = {", "#if 0\nOPC_DEFINE_OP(SquareGrad) = {")
                      + "#endif\n")
    result = subprocess.run(["cmake", "--build", str(build_dir)], capture_output=True, text=True, timeout=600)
    assert result.returncode != 0 and "undefined reference to `opc_op_SquareGrad'" in result.stdout + result.stderr


@needs_cmake
@pytest.mark.parametrize("left_out", ["c file", "ops.def line"])
def test_a_c_file_and_its_table_line_go_together_or_configure_fails(tmp_path, left_out):
    """An ops.def line whose file does not define the op, or an entry no line lists, fails CMake's configure
    step with what to do (never a library that builds and then fails to load, or never registers the op)."""
    project = tmp_path / "src"
    project.mkdir()
    for name in BUILD_FILES:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, project / name)
    if left_out == "c file":
        with (project / "csrc" / "ops.def").open("a") as table:
            table.write(SQUARE_LINE)
        expected = ("csrc/ops.def lists SquareGrad in csrc/square_grad.c, which does not define it. Define its entry "
                    "there, next to its kernel: OPC_DEFINE_OP(SquareGrad)")
    else:
        (project / "csrc" / "square_grad.c").write_text(SQUARE_C)
        expected = ("csrc/square_grad.c defines OPC_DEFINE_OP(SquareGrad) but csrc/ops.def does not list it, so the "
                    'library would never register it: add the line OPC_OP(SquareGrad, "square_grad.c") to csrc/ops.def')
    result = configure(project, tmp_path / "build")
    assert result.returncode != 0
    assert expected in " ".join(result.stderr.split()), result.stderr


# ---- the guide says what the tests enforce -----------------------------------------------------------------------

GUIDE = REPO / "docs" / "adding-an-op.md"


def _block(text: str, after: str, kind: str) -> list[str]:
    """The lines of the first ```kind block after the text `after`."""
    rest = text[text.index(after):]
    body = rest[rest.index(f"```{kind}\n") + len(kind) + 4:]
    return body[:body.index("```")].strip().splitlines()


def guide_files(**names) -> list[str]:
    """The files the guide says adding an op with a C kernel touches, for one op's names."""
    text = "\n".join(_block(GUIDE.read_text(), "files and nothing else:", "text"))
    for key, value in (("<domain>", names["domain"]), ("<Op>", names["Op"]), ("<op>", names["op"]),
                       ("<forward op>", names["forward"])):
        text = text.replace(key, value)
    files = [line.split()[0] for line in text.splitlines()] + re.findall(r"generated_tests/MANIFEST\.json", text)
    return sorted(files)


def test_the_guides_file_list_names_each_kind_of_file_once():
    assert guide_files(domain="d", Op="Op", op="op", forward="fwd") == [
        "csrc/op.c", "csrc/ops.def", "generated_tests/MANIFEST.json", "generated_tests/test_Op.py",
        "reference/forward/fwd.py", "reference/ops/op.py", "specs/d/Op.yaml"]


def test_the_guides_gate_is_ci_s_gate():
    """docs/adding-an-op.md section 7 lists exactly the commands .ci/run runs after the install, in order."""
    gate = _block(GUIDE.read_text(), "## 7. The gate", "sh")
    script = (REPO / ".ci" / "run").read_text().splitlines()
    after_install = script[next(i for i, line in enumerate(script) if line.startswith("pip install")) + 1:]
    commands = [line.strip() for line in after_install if line.strip() and not line.lstrip().startswith("#")]
    assert gate == commands


def test_a_reference_that_does_not_return_is_stopped_by_the_hook_limit(project, capsys):
    """validate's reference call runs under the CPU limit of every spec hook (spec_checks.HOOK_CPU_SECONDS)."""
    specs = project / "specs" / "com.microsoft"
    (project / "reference" / "ops" / "burns.py").write_text("def tanh_grad(dY, Y):\n    while True:\n        pass\n")
    tanh = specs / "TanhGrad.yaml"
    tanh.write_text(re.sub(r"^reference: .*$", 'reference: "reference.ops.burns:tanh_grad"', tanh.read_text(),
                           flags=re.MULTILINE))
    result = opconform(project, "validate")
    assert result.returncode == 1
    assert re.match(r"specs/com.microsoft/TanhGrad.yaml: cases.groups\[0\]: case float32-basic/shape=\w+: the reference "
                    r"reference.ops.burns:tanh_grad did not return: it ran out of its 2 s of CPU$",
                    result.stderr.splitlines()[0]), result.stderr


def test_forward_scaffolds_a_computation_without_gradient_placeholders(project, capsys):
    """new-op --forward: no forward: section, no grad_output or grad_of, every input the op's own; filled in, it
    validates and its generated tests pass on the reference with no gradient check to run."""
    specs = project / "specs"
    assert main(["new-op", "Twice", "--forward", "--specs", str(specs), "--no-builtin-specs"]) == 0
    capsys.readouterr()
    spec_path = specs / "com.microsoft" / "Twice.yaml"
    data = yaml.safe_load(spec_path.read_text())
    assert "forward" not in data
    assert [(i["name"], i["role"]) for i in data["inputs"]] == [("X", "forward_input")]
    assert all("grad_of" not in entry for entry in [*data["inputs"], *data["outputs"]])
    assert data["outputs"] == [{"name": "Y", "type": "T", "shape_from": "X", "description": "The result."}]
    assert [f for f, _ in missing_items(data)] == ["summary", "formula", "references[0]"]
    text = spec_path.read_text()
    for field, value in (("summary", "Twice its input: a toy computation."), ("formula", "Y = 2 * X")):
        todo = next(line for line in text.splitlines() if line.strip().startswith(f"{field}: \"TODO"))
        text = text.replace(todo, f"{todo.split(':')[0]}: \"{value}\"", 1)
    text = text.replace(next(line for line in text.splitlines() if '- "TODO' in line), "  - the opconform tests' toy op")
    spec_path.write_text(text)
    (project / "reference" / "ops" / "twice.py").write_text("def twice(X):\n    return 2.0 * X\n")
    result = opconform(project, "validate")
    assert result.returncode == 0 and "Twice" in result.stdout, result.stderr
    assert opconform(project, "gen-tests").returncode == 0
    result = pytest_in(project, "-m", "Twice and reference and smoke", "-q")
    assert result.returncode == 0 and " passed" in result.stdout and "verdict: PASS" in result.stdout, result.stdout[-2000:]
    # --forward with --inputs/--outputs: names that look like gradients are still the op's own inputs
    assert main(["new-op", "Scaled", "--forward", "--inputs", "dX,scale", "--outputs", "Y", "--specs", str(specs),
                 "--no-builtin-specs"]) == 0
    data = yaml.safe_load((specs / "com.microsoft" / "Scaled.yaml").read_text())
    assert [i["role"] for i in data["inputs"]] == ["forward_input", "forward_input"] and "forward" not in data
    assert main(["new-op", "Other", "--forward", "--like", "ReluGrad", "--specs", str(specs), "--no-builtin-specs"]) == 2
