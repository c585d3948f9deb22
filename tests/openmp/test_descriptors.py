"""Every op the C library registers, held against its spec: the descriptor (csrc/<op file>.c, read through
opc_op_at) must name the spec's inputs and outputs in order, mark the same inputs optional, take exactly the
spec's attributes (plus the `<output>_shape` ones a model declares), and compute only dtypes the spec's type
constraint allows (the rest are the library's extras, declared apart and never offered to runs)."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from harness.core.spec_loader import load_catalog

from .omp_helpers import C_OP_TABLE, c_op_table

SPECS = C_OP_TABLE.parents[1] / "specs"


def descriptor_problems(info: dict, spec) -> list[str]:
    """What an op's C descriptor (openmp_lib.op_info) says that its spec does not; [] when they agree."""
    problems = []
    inputs = [i.name for i in spec.inputs]
    if info["inputs"] != inputs:
        problems.append(f"inputs {info['inputs']} != spec's {inputs}")
    optional = [i.name for i in spec.inputs if i.optional]
    if info["optional_inputs"] != optional:
        problems.append(f"optional inputs {info['optional_inputs']} != spec's {optional}")
    outputs = [o.name for o in spec.outputs]
    if info["outputs"] != outputs:
        problems.append(f"outputs {info['outputs']} != spec's {outputs}")
    # The node's attributes, and the shapes a model declares for outputs the op cannot size (MaxPoolGrad's
    # dX_shape), which travel beside them.
    attributes = set(spec.attributes) | set(spec.declared_shapes())
    if len(set(info["attributes"])) != len(info["attributes"]):
        problems.append(f"attributes {info['attributes']} name one twice")
    if set(info["attributes"]) != attributes:
        problems.append(f"attributes {sorted(info['attributes'])} != spec's {sorted(attributes)}")
    if stray := set(info["extra_attributes"]) & attributes:
        problems.append(f"extra attributes {sorted(stray)} are the spec's: list them with the attributes")
    # The dtype a case runs in binds the spec's main type variable (Spec.main_type); the others (indices,
    # masks) are fixed by the kernel's own input checks.
    variable = spec.main_type
    allowed = spec.type_constraints[variable].types
    if not info["dtypes"]:
        problems.append("no dtypes")
    if outside := [d for d in info["dtypes"] if d not in allowed]:
        problems.append(f"dtypes {outside} are not in the spec's {variable} {allowed}: move them to the extra "
                        "dtypes (computed for the library's tests, never offered to runs) or drop them")
    if stray := [d for d in info["extra_dtypes"] if d in allowed]:
        problems.append(f"extra dtypes {stray} are in the spec's {variable}: list them with the dtypes")
    return problems


@pytest.fixture(scope="module")
def specs():
    return {spec.op: spec for spec in load_catalog(SPECS).specs}


def test_the_registry_is_the_op_table_in_order(lib, specs):
    """api.c's registry is built from csrc/ops.def, every op in it has a spec, and its file defines it."""
    table = c_op_table()
    assert len(table) >= 27 and len({op for op, _ in table}) == len(table), table
    assert lib.ops() == [op for op, _ in table]
    assert [op for op, _ in table if op not in specs] == []
    for op, source in table:
        text = (C_OP_TABLE.parent / source).read_text()
        assert re.search(rf"\b(OPC_DEFINE_OP\({op}\)|[A-Z_]+_OP\({op},)", text), f"{source} does not define {op}"


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
