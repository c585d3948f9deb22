"""Every op the C library registers, held against its spec: the descriptor (csrc/<op file>.c, read through
opc_op_at) must name the spec's inputs and outputs in order, mark the same inputs optional, take exactly the
spec's attributes (plus the `<output>_shape` ones a model declares), and compute only dtypes the spec's type
constraint allows (the rest are the library's extras, declared apart and never offered to runs). The comparison
is harness.run.op_table's, which `opconform validate` runs too; so are the op table's own checks, tested here."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from harness.core.spec_loader import load_catalog
from harness.run import op_table
from harness.run.op_table import descriptor_problems

from .omp_helpers import C_OP_TABLE, c_op_table

SPECS = C_OP_TABLE.parents[1] / "specs"


@pytest.fixture(scope="module")
def specs():
    return {spec.op: spec for spec in load_catalog(SPECS).specs}


def test_the_registry_is_the_op_table_in_order(lib, specs):
    """api.c's registry is built from csrc/ops.def, every op in it has a spec, and its file defines it."""
    table = c_op_table()
    assert len(table) >= 27 and len({op for op, _ in table}) == len(table), table
    assert lib.ops() == [op for op, _ in table]
    assert [op for op, _ in table if op not in specs] == []
    assert op_table.read_table(C_OP_TABLE) == table
    for op, source in table:
        text = (C_OP_TABLE.parent / source).read_text()
        assert re.search(rf"\b(OPC_DEFINE_OP\({op}\)|[A-Z_]+_OP\({op},)", text), f"{source} does not define {op}"
    assert op_table.table_problems(C_OP_TABLE, specs) == []
    assert op_table.library_problems(C_OP_TABLE, specs, lib) == []


def test_every_descriptor_agrees_with_its_spec(lib, specs):
    problems = {op: p for op in lib.ops() if (p := descriptor_problems(lib.op_info(op), specs[op]))}
    assert problems == {}


def test_a_spec_that_disagrees_with_the_library_is_a_mismatch(lib, specs):
    """The other side: a spec changed under an unchanged library (copies of the loaded specs)."""
    log_softmax = specs["LogSoftmaxGrad"]
    renamed = [log_softmax.inputs[0], log_softmax.inputs[1].model_copy(update={"name": "Z"})]
    problems = descriptor_problems(lib.op_info("LogSoftmaxGrad"), log_softmax.model_copy(update={"inputs": renamed}))
    assert problems[0] == "inputs ['dY', 'Y'] != spec's ['dY', 'Z']"  # and dX, shaped from Y, is no longer sized
    gru = specs["GRUGrad"]
    swapped = gru.inputs[:6] + [gru.inputs[7], gru.inputs[6]] + gru.inputs[8:]
    (problem,) = descriptor_problems(lib.op_info("GRUGrad"), gru.model_copy(update={"inputs": swapped}))
    assert problem.startswith("inputs [") and "'ZRH', 'HAll', 'grad_HAll'" in problem
    sce = specs["SoftmaxCrossEntropyLossGrad"]
    attributes = {"reduce" if k == "reduction" else k: v for k, v in sce.attributes.items()}
    assert descriptor_problems(lib.op_info(sce.op), sce.model_copy(update={"attributes": attributes})) == [
        "attributes ['ignore_index', 'reduction'] != spec's ['ignore_index', 'reduce']"]
    conv = specs["ConvGrad"]
    narrower = {**conv.type_constraints, "T": conv.type_constraints["T"].model_copy(update={"types": ["float32"]})}
    (problem,) = descriptor_problems(lib.op_info("ConvGrad"), conv.model_copy(update={"type_constraints": narrower}))
    assert problem.startswith("dtypes ['float64', 'float16'] are not in the spec's T ['float32']")


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["optional_inputs"].remove("weight"), "optional inputs [] != spec's ['weight']"),
    (lambda d: d["optional_inputs"].append("log_prob"), "optional inputs ['weight', 'log_prob'] != spec's"),
    (lambda d: d["outputs"].append("d_weight"), "outputs ['d_logits', 'd_weight'] != spec's ['d_logits']"),
    (lambda d: d["attributes"].append("axis"), "attributes ['axis', 'ignore_index', 'reduction'] != spec's"),
    (lambda d: d["attributes"].remove("ignore_index"), "attributes ['reduction'] != spec's"),
    (lambda d: d["attributes"].append("reduction"), "name one twice"),
    (lambda d: d["extra_attributes"].append("reduction"), "extra attributes ['reduction'] are the spec's"),
    (lambda d: d["dtypes"].append("int64"), "dtypes ['int64'] are not in the spec's T"),
    (lambda d: d["dtypes"].clear(), "no dtypes"),
    (lambda d: d["extra_dtypes"].append("float32"), "extra dtypes ['float32'] are in the spec's T"),
], ids=["optional-dropped", "optional-added", "output-added", "attribute-added", "attribute-dropped",
        "attribute-twice", "extra-attribute-in-spec", "dtype-outside", "no-dtypes", "extra-dtype-in-spec"])
def test_a_planted_descriptor_mismatch_is_reported(lib, specs, change, expected):
    info = lib.op_info("SoftmaxCrossEntropyLossGrad")
    assert descriptor_problems(info, specs["SoftmaxCrossEntropyLossGrad"]) == []
    change(info)
    problems = descriptor_problems(info, specs["SoftmaxCrossEntropyLossGrad"])
    assert len(problems) == 1 and expected in problems[0], problems


def test_extras_are_accepted_but_not_offered(lib):
    """LogSoftmaxGrad's schema has no bfloat16 and GRUGrad's no float64 or layout: the kernels take them (the
    library's own tests use them), the descriptor keeps them apart from the schema's."""
    info = lib.op_info("LogSoftmaxGrad_13")
    assert info["dtypes"] == ["float32", "float64", "float16"] and info["extra_dtypes"] == ["bfloat16"]
    assert lib.supported_dtypes("LogSoftmaxGrad_13") == ["float32", "float64", "float16", "bfloat16"]
    gru = lib.op_info("GRUGrad")
    assert gru["dtypes"] == ["float32"] and gru["extra_dtypes"] == ["float64"]
    assert "layout" not in gru["attributes"] and gru["extra_attributes"] == ["layout"]
    x = np.zeros((2, 3), ml_dtypes.bfloat16)
    assert lib.run("LogSoftmaxGrad_13", [x, x], {})[0].dtype == x.dtype
    with pytest.raises(lib.KernelError, match=r"unknown attribute 'beta' \(accepted: hidden_size, .*, layout\)"):
        lib.run("GRUTraining", [np.zeros((1, 1, 2)), np.zeros((1, 3, 2)), np.zeros((1, 3, 1))],
                {"hidden_size": 1, "layout": 0, "beta": 1})
    with pytest.raises(lib.KernelError, match=r"dtype int32 is not supported \(supported: float32, float64\)"):
        lib.run("GRUTraining", [np.zeros((1, 1, 2), np.int32), np.zeros((1, 3, 2), np.int32),
                                np.zeros((1, 3, 1), np.int32)], {"hidden_size": 1})


# ---- the op table's checks, as `opconform validate` runs them (seconds, no build) --------------------------------

@pytest.fixture
def csrc_copy(tmp_path):
    """A copy of csrc/ (C files and ops.def only) that a test may break; its ops.def is read as validate reads it."""
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    for path in C_OP_TABLE.parent.iterdir():
        if path.suffix in (".c", ".h", ".def"):
            (csrc / path.name).write_text(path.read_text())
    return csrc / "ops.def"


def _lines(problems) -> list[str]:
    return [str(p) for p in problems]


def test_the_op_tables_own_problems_name_op_and_fix(csrc_copy, specs):
    assert op_table.table_problems(csrc_copy, specs) == []
    text = csrc_copy.read_text()
    csrc_copy.write_text(text + 'OPC_OP(SquareGrad, "square_grad.c")\nOPC_OP(ReluGrad, "softmax.c")\nOPC_OP(Oops)\n')
    lines = _lines(op_table.table_problems(csrc_copy, specs))
    assert len(lines) == 5, lines
    assert lines[0].endswith("cannot read 'OPC_OP(Oops)'; write OPC_OP(<Op>, \"<file>.c\")")
    assert ": SquareGrad: no spec for SquareGrad: write specs/<domain>/SquareGrad.yaml" in lines[1]
    assert ": SquareGrad: its file csrc/square_grad.c does not exist" in lines[2]
    assert ": ReluGrad: listed twice; keep one line per op" in lines[3]
    assert ": ReluGrad: csrc/softmax.c does not define ReluGrad: add OPC_DEFINE_OP(ReluGrad)" in lines[4]
    # a selection of specs cannot tell a missing spec from one not loaded
    assert not any("no spec" in line for line in _lines(op_table.table_problems(csrc_copy, specs, complete=False)))


def test_an_entry_without_its_line_in_the_table_is_reported(csrc_copy, specs):
    """The reverse: OPC_DEFINE_OP in a C file whose op ops.def does not list would compile and never register."""
    dropout = csrc_copy.parent / "dropout.c"
    dropout.write_text(dropout.read_text() + "\nOPC_DEFINE_OP(DropoutGrad2) = {0};\n")
    (line,) = _lines(op_table.table_problems(csrc_copy, specs))
    assert line.endswith("dropout.c: DropoutGrad2: OPC_DEFINE_OP(DropoutGrad2) has no line in csrc/ops.def, so the "
                         'library never registers it: add OPC_OP(DropoutGrad2, "dropout.c")'), line
    # an entry macro's own body (eltwise.c's EW_OP) is not an entry
    assert op_table.entries((C_OP_TABLE.parent / "eltwise.c").read_text())[:2] == ["ReluGrad", "SigmoidGrad"]


class _Library:
    """A stand-in for openmp_lib: the registry and the descriptors a test makes up."""

    def __init__(self, lib, ops=None, change=None):
        self._lib, self._ops, self._change = lib, ops, change

    def ops(self):
        return self._ops if self._ops is not None else self._lib.ops()

    def op_info(self, op):
        info = self._lib.op_info(op)
        if self._change and op == "DropoutGrad":
            self._change(info)
        return info


def test_the_library_is_held_against_the_table_and_the_specs(lib, specs):
    table = [op for op, _ in c_op_table()]
    stale = op_table.library_problems(C_OP_TABLE, specs, _Library(lib, ops=table[:-1]))
    assert _lines(stale) == [f"{op_table.shown(C_OP_TABLE)}: the loaded C library was built from another op table "
                             f"(lacks {table[-1]}): rebuild it, pip install --no-build-isolation -e . (docs/install.md)"]
    wrong = op_table.library_problems(C_OP_TABLE, specs, _Library(lib, change=lambda d: d["optional_inputs"].pop()))
    assert [line.split(": ", 2)[1:] for line in _lines(wrong)] == [[
        "OPC_DEFINE_OP(DropoutGrad)", "optional inputs ['ratio'] != spec's ['ratio', 'training_mode']; make the "
        "descriptor and the spec agree (then rebuild)"]]
    assert _lines(wrong)[0].startswith(op_table.shown(C_OP_TABLE.parent / "dropout.c"))


def test_validate_checks_the_table_and_says_when_the_library_is_not_there(specs):
    root = C_OP_TABLE.parents[1] / "specs"
    problems, notes = op_table.check(root, list(specs.values()))
    assert problems == [] and notes == []

    def missing():
        raise FileNotFoundError("no baseline build of the kernel library in the package")

    problems, notes = op_table.check(root, list(specs.values()), load_library=missing)
    assert problems == [] and notes == ["the C kernel library cannot be loaded (no baseline build of the kernel "
                                        "library in the package); its descriptor checks are skipped"]
    # an installed wheel's specs have no csrc/ beside them: nothing to check
    assert op_table.check(root / "com.microsoft", list(specs.values())) == ([], [])


def test_validate_names_an_op_of_the_table_without_thread_split_cases(specs):
    """Every op of ops.def has a case group tagged thread_split in its spec (its thread-invariance cases)."""
    relu = specs["ReluGrad"]
    untagged = [g.model_copy(update={"tags": []}) for g in relu.cases.groups]
    changed = {**specs, "ReluGrad": relu.model_copy(update={"cases": relu.cases.model_copy(update={"groups": untagged})})}
    problems, _ = op_table.check(C_OP_TABLE.parents[1] / "specs", list(changed.values()))
    assert _lines(problems) == [f"{op_table.shown(C_OP_TABLE)}: ReluGrad: its spec has no case group tagged thread_split "
                                "(shapes that cross its C kernel's work splits): add one with `tags: [thread_split]`, "
                                "tier nightly"]
