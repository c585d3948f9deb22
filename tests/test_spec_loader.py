"""A bad spec gets one line per problem naming the file, the field and the fix; never a traceback."""
import pytest
from conftest import edit

from harness.cli import main
from harness.core.spec_loader import UnknownOp, load_catalog
from harness.spec.errors import SpecError


def problems(root) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_catalog(root)
    return [str(p) for p in e.value.problems]


def test_the_shipped_specs_are_valid(catalog):
    assert {"ReluGrad", "GeluGrad", "BiasFastGeluGrad_dX"} <= {s.op for s in catalog.specs}


def relu(root):
    return root / "com.microsoft" / "ReluGrad.yaml"


def test_yaml_syntax_error_names_line(spec_copy):
    edit(relu(spec_copy), "op: ReluGrad", "op: [ReluGrad")
    (line,) = problems(spec_copy)
    assert "ReluGrad.yaml" in line and "line 3, column 7" in line and "not valid YAML" in line


def test_unknown_field_suggests_the_right_one(spec_copy):
    edit(relu(spec_copy), "role: forward_input,", "rol: forward_input,")
    lines = problems(spec_copy)
    assert any("inputs[1].rol: unknown field; did you mean `role`?" in line for line in lines), lines


def test_bad_enum_lists_allowed_values(spec_copy):
    edit(relu(spec_copy), "role: forward_input,", "role: forward,")
    (line,) = problems(spec_copy)
    assert "inputs[1].role" in line and "'forward'" in line and "forward_input" in line


def test_missing_required_field_says_what_to_add(spec_copy):
    edit(relu(spec_copy), 'reference: "reference.ops.activations:relu_grad"\n', "")
    (line,) = problems(spec_copy)
    assert line.endswith("reference: missing; add `reference:` (the NumPy reference, module.path:function)")


def test_default_outside_allowed_range(spec_copy):
    path = spec_copy / "com.microsoft" / "LeakyReluGrad.yaml"
    edit(path, "alpha: {type: float, default: 0.01,", "alpha: {type: float, default: 0.01, min: 0.5,")
    lines = problems(spec_copy)
    assert any("attributes.alpha.default: the default is 0.01, below the minimum 0.5" in line for line in lines), lines


def test_shape_rule_must_name_a_real_input(spec_copy):
    edit(relu(spec_copy), "role: forward_input, shape_from: dY", "role: forward_input, shape_from: dy")
    lines = problems(spec_copy)
    assert any("inputs[1].shape_from: unknown input 'dy'; did you mean 'dY'?" in line for line in lines), lines


def test_reference_function_must_exist(spec_copy):
    edit(relu(spec_copy), "activations:relu_grad", "activations:relu_gard")
    (line,) = problems(spec_copy)
    assert "reference: module 'reference.ops.activations' has no function 'relu_gard'" in line


def test_reference_must_take_the_inputs(spec_copy):
    edit(relu(spec_copy), "activations:relu_grad", "activations:sigmoid_grad")
    (line,) = problems(spec_copy)
    assert "does not take X" in line


def test_divergence_globs_must_match_cases(spec_copy):
    edit(relu(spec_copy), 'cases: ["x_much_smaller/*"]', 'cases: ["x_much_smaler/*"]')
    (line,) = problems(spec_copy)
    assert "known_divergences[1].cases: 'x_much_smaler/*' matches no case id" in line


def test_duplicate_keys_are_rejected(spec_copy):
    edit(relu(spec_copy), "since_version: 1\n", "since_version: 1\nsince_version: 2\n")
    (line,) = problems(spec_copy)
    assert "appears twice" in line and "line 5" in line


def test_unknown_case_parameter(spec_copy):
    edit(relu(spec_copy), "params: {shape: [[7], [3, 4], [2, 3, 5]]}", "params: {shape: [[7]], alhpa: [1.0]}")
    lines = problems(spec_copy)
    assert any("cases.groups[0].params.alhpa: unknown case parameter 'alhpa'" in line for line in lines), lines


def test_valid_group_attribute_out_of_range_is_caught(spec_copy):
    path = spec_copy / "com.microsoft" / "QuickGeluGrad.yaml"
    edit(path, "alpha: {type: float, default: 1.702,", "alpha: {type: float, default: 1.702, max: 2.0,")
    edit(path, "alpha: [1.702, 1.0, -1.702, 0.5, 0.0]", "alpha: [1.702, 3.0]")
    lines = problems(spec_copy)
    assert any("params.alpha: is 3.0, above the maximum 2 (out-of-range values belong in cases.invalid)" in line
               for line in lines), lines


def test_file_name_must_match_op(spec_copy):
    relu(spec_copy).rename(relu(spec_copy).with_name("Relu.yaml"))
    (line,) = problems(spec_copy)
    assert "rename the file to ReluGrad.yaml" in line


def test_validate_prints_one_line_per_problem_and_no_traceback(spec_copy, capsys):
    edit(relu(spec_copy), "role: forward_input,", "role: forward,")
    assert main(["validate", "--specs", str(spec_copy), "--no-builtin-specs"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0].startswith(f"{relu(spec_copy)}: inputs[1].role: got 'forward'")
    assert err.splitlines()[-1] == "1 problem(s) found"


def test_op_selection(catalog):
    assert [s.op for s in catalog.select(["*GeluGrad"])] == ["FastGeluGrad", "GeluGrad", "QuickGeluGrad"]
    with pytest.raises(UnknownOp, match="unknown op 'ReluGard'; did you mean 'ReluGrad'"):
        catalog.select(["ReluGard"])
    with pytest.raises(UnknownOp, match="'Lamb\\*' matches no op"):
        catalog.select(["Lamb*"])
