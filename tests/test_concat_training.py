"""ConcatTraining has no forward op to check it against: its reference (flat index arithmetic) is proven here
against numpy.concatenate, bit for bit, on every valid case of the spec's nightly tier, with per_input_length
the inputs' sizes along the axis; plus the validity rules the spec's hook enforces."""
import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference.ops.concat_training import concat_training, concat_training_valid


def test_reference_is_numpy_concatenate_bit_for_bit(catalog):
    checked = 0
    for case in cases_of(catalog, "ConcatTraining", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        xs = [inputs[n] for n in ("input0", "input1", "input2", "input3") if inputs.get(n) is not None]
        axis = int(case.attributes["axis"])
        y, lens = concat_training(*[x.astype(np.float64) for x in xs], axis=axis)  # as the harness passes them
        want = np.concatenate([x.astype(np.float64) for x in xs], axis=axis)
        assert y.dtype == np.float64 and y.shape == want.shape and y.tobytes() == want.tobytes(), case.id
        assert lens.dtype == np.int64 and lens.tolist() == [x.shape[axis] for x in xs], case.id
        checked += 1
    assert checked >= 12


def test_the_tiers_cover_the_contract(catalog):
    cases = [c for c in cases_of(catalog, "ConcatTraining", "nightly") if c.valid]
    assert {c.dtype for c in cases} == {"float32", "float64", "float16", "int32", "int64"}
    assert {len(c.params["sizes"]) for c in cases} == {1, 2, 3, 4}
    assert any(0 in c.params["sizes"] for c in cases) and any(c.attributes["axis"] < 0 for c in cases)
    assert len(cases_of(catalog, "ConcatTraining", "ci")) <= 25


def test_integer_inputs_keep_their_type():
    y, lens = concat_training(np.arange(2, dtype=np.int32), np.arange(3, dtype=np.int32), np.arange(1, dtype=np.int32), axis=0)
    assert y.dtype == np.int32 and y.tolist() == [0, 1, 0, 1, 2, 0] and lens.tolist() == [2, 3, 1]


@pytest.mark.parametrize("shapes, axis, ok", [
    ([(2, 1), (2, 2), (2, 3)], 1, True), ([(2, 1), (2, 0), (2, 3)], -1, True), ([(1, 6), (2, 6), (3, 5)], 0, False),
    ([(2, 1), (2, 2), (2, 3, 1)], 1, False), ([(2, 1), (2, 2), (2, 3)], 2, False), ([(), (), ()], 0, False),
    ([(1,)], 0, True), ([(1,), (1,)], 0, True), ([(1,), (1,), (1,), (3,)], -1, True), ([(1,), None, (1,)], 0, False)])
def test_validity(shapes, axis, ok):
    named = dict(zip(("input0", "input1", "input2", "input3"), shapes))
    assert (concat_training_valid(named, {"axis": axis}) is None) == ok


def test_an_int64_shape_built_for_reshape():
    y, lens = concat_training(np.array([8.0]), np.array([-1.0]), axis=0)
    assert y.tolist() == [8, -1] and lens.tolist() == [1, 1]
