"""The LSTMTraining and LSTMGrad specs through the harness: saved activations derived from the multi-output
forward (run with the drawn B and P = 0, which LSTMGrad does not take), the gradient check covering dP and
dB, case coverage, and the own-saved-state check (a backend whose LSTMTraining writes IOFC in another gate
order must fail it)."""
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import cases_of, run_on

from harness.backends.base import Backend, Outputs
from harness.backends.reference import ReferenceBackend
from harness.core.gradcheck import gradient_check
from harness.core.tensors import make_tensors
from harness.run.engine import prepare
from harness.run.self_consistency import OUTPUT_SUBSET, OWN_SAVED_STATE
from reference.forward.lstm import lstm_training
from reference.ops.lstm_grad import lstm_grad


def test_ci_tier_has_the_cases_the_issue_asks_for(catalog):
    grad = [c for c in cases_of(catalog, "LSTMGrad") if c.valid]
    training = [c for c in cases_of(catalog, "LSTMTraining") if c.valid]
    omitted = {tuple(c.omitted_inputs) for c in grad}
    assert {(), ("initial_h",), ("initial_c",), ("grad_Ct",), ("grad_HAll", "grad_Ht")} <= omitted
    assert {tuple(c.omitted_inputs) for c in training} >= {("B",), ("initial_c",), ("B", "initial_h", "initial_c")}
    assert any(c.params.get("with_peepholes") for c in training) and any(not c.params.get("with_peepholes") for c in training)
    for cases in (grad, training):
        assert {c.attributes.get("direction", "forward") for c in cases} == {"forward", "reverse", "bidirectional"}
        assert {c.attributes.get("input_forget", 0) for c in cases} == {0, 1}
        assert any(c.params.get("with_sequence_lens") for c in cases)
        assert any(c.params["seq"] == 0 for c in cases) and any(c.params["batch"] == 0 for c in cases)
    assert any(c.attributes.get("clip") == 0.85 for c in training)
    assert not any(c.attributes.get("clip") for c in grad)  # clip is invalid on LSTMGrad
    invalid = {c.group.name for c in cases_of(catalog, "LSTMGrad") if not c.valid}
    assert {"clip_given", "input_forget_out_of_range", "bad_attribute_value"} <= invalid
    nightly_only = {c.id for c in cases_of(catalog, "LSTMGrad", "nightly")} - {c.id for c in grad}
    assert any("seq=400" in i for i in nightly_only)


def test_saved_activations_come_from_the_forward_with_b_drawn_and_p_zero(catalog):
    case = next(c for c in cases_of(catalog, "LSTMGrad") if c.id.startswith("optional_inputs/")
                and c.omitted_inputs == ("initial_c",))
    inputs, forward_inputs = make_tensors(case)
    assert "B" not in inputs and "P" not in inputs and inputs["initial_c"] is None and inputs["sequence_lens"] is None
    assert forward_inputs["B"] is not None and np.abs(forward_inputs["B"]).max() > 0
    assert forward_inputs["P"].shape == (1, 15) and not forward_inputs["P"].any()
    h_all, _, _, c_all, iofc = lstm_training(**forward_inputs, hidden_size=case.attributes["hidden_size"])
    np.testing.assert_array_equal(inputs["HAll"], h_all.astype(np.float32))
    np.testing.assert_array_equal(inputs["CAll"], c_all.astype(np.float32))
    np.testing.assert_array_equal(inputs["IOFC"], iofc.astype(np.float32))
    assert case.attributes["dB_shape"] == [1, 40] and case.attributes["dP_shape"] == [1, 15]


def test_sequence_lens_and_peepholes_are_given_only_where_asked(catalog):
    for case in cases_of(catalog, "LSTMTraining"):
        if not case.valid:
            continue
        inputs = make_tensors(case)[0]
        lens = inputs["sequence_lens"]
        if case.params.get("with_sequence_lens"):
            assert lens.dtype == np.int32 and lens.tolist() == [5, 3, 1, 0]
        else:
            assert lens is None, case.id
        assert (inputs["P"] is not None) == bool(case.params.get("with_peepholes")), case.id


def test_the_gradient_check_covers_dp_and_db_and_catches_a_wrong_dp(catalog):
    case = next(c for c in cases_of(catalog, "LSTMGrad") if c.group.name == "basic" and c.params["seq"] == 3)
    prepared = prepare(case)
    result = gradient_check(case, prepared.inputs, prepared.forward_inputs)
    assert result.passed and {i.name for i in result.inputs} == {"X", "W", "R", "B", "initial_h", "initial_c", "P"}
    for wrong in ("test_lstm_spec:grad_with_dp_halved", "test_lstm_spec:grad_with_db_halves_swapped"):
        bad = gradient_check(case, prepared.inputs, prepared.forward_inputs, reference=wrong)
        failed = {i.name for i in bad.inputs if not i.passed}
        assert failed == ({"P"} if "dp" in wrong else {"B"}), bad.detail()


def grad_with_dp_halved(**kwargs):
    out = lstm_grad(**kwargs)
    return (*out[:6], out[6] / 2)


def grad_with_db_halves_swapped(**kwargs):
    out = list(lstm_grad(**kwargs))
    h = out[3].shape[1] // 8
    out[3] = out[3] * np.r_[np.full(4 * h, 1.5), np.full(4 * h, 0.5)]
    return tuple(out)


@pytest.mark.parametrize("op", ["LSTMTraining", "LSTMGrad"])
def test_every_case_passes_on_the_reference_with_its_checks(catalog, op):
    checks = set()
    for case in cases_of(catalog, op):
        results = run_on(ReferenceBackend(), catalog, case)
        assert all(r.status == "pass" for r in results), [(r.check, r.detail) for r in results]
        checks |= {r.check for r in results}
        if not case.valid:
            assert results[0].detail.startswith("rejected as expected")
    assert checks == ({"reference", OUTPUT_SUBSET, OWN_SAVED_STATE} if op == "LSTMGrad" else {"reference", OUTPUT_SUBSET})


# --- a backend whose LSTMTraining writes the saved state in another layout --------------------------------------

@dataclass
class SwappedGates(Backend):
    """LSTMTraining writes IOFC as [i | f | o | c~] (ONNX's weight order is i, o, f, c)."""

    def __post_init__(self):
        self.name = "swapped"

    def run(self, request):
        outcome = ReferenceBackend().run(request)
        if request.spec.op == "LSTMTraining":
            h = request.attributes["hidden_size"]
            values = list(outcome.values)
            iofc = values[4]
            values[4] = np.concatenate([iofc[..., :h], iofc[..., 2 * h:3 * h], iofc[..., h:2 * h], iofc[..., 3 * h:]], -1)
            return Outputs(values)
        return outcome


def test_a_saved_state_in_the_wrong_gate_order_fails_the_own_saved_state_check(catalog):
    case = next(c for c in cases_of(catalog, "LSTMGrad") if c.group.name == "basic" and c.params["seq"] == 3)
    first, own = run_on(SwappedGates(), catalog, case)
    assert first.status == "pass"
    assert own.check == OWN_SAVED_STATE and own.status == "fail" and own.failure == "wrong_values"
    assert "saved state differs from LSTMTraining's reference" in own.detail and "IOFC:" in own.detail
    assert "HAll:" not in own.detail and "CAll:" not in own.detail


# --- onnxruntime-training, when installed ------------------------------------------------------------------------

def test_ort_lstm_pair_agrees_on_its_saved_state(ort, catalog):
    case = next(c for c in cases_of(catalog, "LSTMGrad") if c.group.name == "shapes" and c.params["hidden_size"] == 33)
    first, own = run_on(ort, catalog, case)
    assert first.status == own.status == "pass", (first.detail, own.detail)
    assert own.check == OWN_SAVED_STATE
