"""SplitTraining has no forward op to check it against: its reference (flat index arithmetic) is proven here
against numpy.split at the cumulative sizes, bit for bit, on every valid case of the spec's nightly tier; plus
the validity rules the spec's hook enforces."""
import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference.ops.split_training import split_training, split_training_shapes, split_training_valid_values


def test_reference_is_numpy_split_bit_for_bit(catalog):
    checked = 0
    for case in cases_of(catalog, "SplitTraining", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x, s = inputs["input"], inputs["split"]
        axis = int(case.attributes.get("axis", 0))
        got = split_training(x.astype(np.float64), s, axis=axis)  # as the harness passes it (evaluate)
        want = np.split(x.astype(np.float64), np.cumsum(s)[:-1], axis=axis)
        assert len(got) == 4 and len(want) == len(s) and got[len(s):] == (None,) * (4 - len(s)), case.id
        for g, w in zip(got, want):
            assert g.dtype == np.float64 and g.shape == w.shape, case.id
            assert g.tobytes() == w.tobytes(), case.id
        checked += 1
    assert checked >= 12


def test_the_tiers_cover_the_contract(catalog):
    cases = [c for c in cases_of(catalog, "SplitTraining", "nightly") if c.valid]
    assert {c.dtype for c in cases} == {"float32", "float64", "float16", "int32", "int64"}
    assert {len(c.params["sizes"]) for c in cases} == {1, 2, 3, 4}
    assert any(0 in c.params["sizes"] for c in cases)
    assert any(c.attributes.get("axis", 0) < 0 for c in cases)
    assert len(cases_of(catalog, "SplitTraining", "ci")) <= 25


def test_integer_input_keeps_its_type():
    x = np.arange(12, dtype=np.int64).reshape(2, 6)
    parts = split_training(x, np.array([1, 2, 3]), axis=-1)
    assert [p.dtype for p in parts[:3]] == [np.int64] * 3 and parts[3] is None
    np.testing.assert_array_equal(parts[2], [[3, 4, 5], [9, 10, 11]])


@pytest.mark.parametrize("split, axis, ok", [
    ([1, 2, 3], 1, True), ([0, 6, 0], -1, True), ([1, 2, 2], 1, False), ([-1, 4, 3], 1, False),
    ([3, 3], 1, True), ([6], 1, True), ([1, 1, 1, 3], 1, True), ([1, 1, 1, 1, 2], 1, False), ([], 1, False),
    ([1, 2, 3], 2, False), ([1, 0, 1], 0, True)])
def test_validity(split, axis, ok):
    inputs = {"input": np.zeros((2, 6)), "split": np.array(split, np.int64)}
    assert (split_training_valid_values(inputs, {"axis": axis}) is None) == ok


@pytest.mark.parametrize("params, says", [
    ({"x": [2, 6], "sizes": [1, 2, 3]}, "make 3 outputs but the case asks for output3"),
    ({"x": [2, 6], "sizes": [6], "outputs": ["output0", "output1"]}, "make 1 outputs but the case asks for output1"),
    ({"x": [2, 6], "sizes": [1, 1, 1, 1, 2]}, "1 to 4 outputs"),
])
def test_a_case_whose_outputs_and_sizes_disagree_is_a_spec_error(params, says):
    with pytest.raises(ValueError, match=says):
        split_training_shapes({**params, "axis": 1})


def test_the_last_output_asked_for_sets_the_arity():
    shapes = split_training_shapes({"x": [2, 6], "sizes": [1, 2, 3], "axis": 1, "outputs": ["output0", "output2"]})
    assert shapes["output2"] == (2, 3) and "output3" not in shapes
