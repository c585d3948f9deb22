"""Two status rules that only runs against ORT used to pin, here with fake backends and no ORT:

(a) "accepted an invalid input": a backend that returns outputs for a case of `cases.invalid` fails
    (failure accepts_invalid), unless one of the spec's known divergences for that backend declares
    `result: accepts_invalid` for the case; a declaration of another kind, dtype, case or backend
    excuses nothing.
(b) ort-autograd inherits `ort`'s known divergences (OrtAutogradBackend.divergences_from = "ort": it runs
    ort's kernels): an `ort` divergence explains its failures too; but where an inherited divergence
    does not show (the case passes) that is no evidence against the spec, so neither the result nor
    the gate calls it stale; ort-autograd's own divergences must reproduce.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.backends.base import Backend, Outputs, Rejected
from harness.backends.ort_autograd import OrtAutogradBackend
from harness.core import dtypes
from harness.core.cases import expand
from harness.core.evaluate import evaluate
from harness.run import gate
from harness.run.case_checks import run_case
from harness.run.engine import prepare
from harness.spec.model import Divergence


def fake_outputs(request, wrong: bool = False) -> Outputs:
    """The reference's outputs in the case dtype (one element far off when `wrong`); for an invalid
    case, whose inputs the reference cannot take, zeros of the first input's shape."""
    spec = request.spec
    try:
        values = evaluate(spec, request.named_inputs(), request.attributes)
    except Exception:  # noqa: BLE001 - a wrong reference may raise anything; zeros then
        values = [np.zeros(request.inputs[0].shape) for _ in spec.outputs]
    out = []
    for o, v, wanted in zip(spec.outputs, values, request.outputs):
        v = np.array(v, dtype=dtypes.NUMPY[spec.dtype_of(o, request.dtype)])
        if wrong and v.size:
            v.flat[0] = v.flat[0] * 2 + 1
        out.append(v if wanted else None)
    return Outputs(out)


@dataclasses.dataclass
class Fake(Backend):
    """Returns outputs for every case, valid or not (`rejects`: rejects every case instead)."""
    rejects: bool = False

    def __post_init__(self):
        self.name = "fake"

    def run(self, request):
        return Rejected("inputs do not fit") if self.rejects else fake_outputs(request)


class FakeOrtAutograd(OrtAutogradBackend):
    """ort-autograd's name and divergence inheritance, ORT's work done by fake_outputs; `wrong`: values off."""
    wrong = False

    def run(self, request):
        return fake_outputs(request, wrong=self.wrong)


def divergence(backend: str, result: str, cases: list[str], **fields) -> Divergence:
    return Divergence(id=f"{backend}-{result.replace('_', '-')}", backend=backend, cases=cases, result=result,
                      summary="planted by tests/test_status_rules.py", evidence="a fake backend, no library", **fields)


def a_case(catalog, *, invalid: bool, divergences=(), dtype="float32"):
    spec = catalog.by_op("ReluGrad").model_copy(update={"known_divergences": list(divergences)})
    return next(c for c in expand(spec, "nightly") if c.valid != invalid and c.dtype == dtype)


def result_of(catalog, backend, *, invalid: bool, divergences=()):
    case = a_case(catalog, invalid=invalid, divergences=divergences)
    return case, run_case(catalog, prepare(case), backend)[0]


# ---- (a) accepted an invalid input ----------------------------------------------------------------

def test_an_invalid_input_a_backend_accepts_fails(catalog):
    case, r = result_of(catalog, Fake(), invalid=True)
    assert (r.status, r.failure) == ("fail", "accepts_invalid"), r.detail
    assert f"accepted an invalid input ({case.group.why})" in r.detail
    verdict = gate.verdict([r.to_json()], [])
    assert not verdict["passed"] and "1 unexpected failure(s)" in verdict["reasons"]


def test_an_invalid_input_a_backend_rejects_passes(catalog):
    _, r = result_of(catalog, Fake(rejects=True), invalid=True)
    assert (r.status, r.failure) == ("pass", None), r.detail
    assert r.detail.startswith("rejected as expected")


def test_a_declared_accepts_invalid_divergence_excuses_it(catalog):
    declared = divergence("fake", "accepts_invalid", [f"{a_case(catalog, invalid=True).group.name}/*"])
    _, r = result_of(catalog, Fake(), invalid=True, divergences=[declared])
    assert (r.status, r.failure, r.divergence, r.divergence_reproduced) == \
        ("divergent", "accepts_invalid", "fake-accepts-invalid", True), r.detail
    assert gate.verdict([r.to_json()], [])["passed"]


@pytest.mark.parametrize("declared", [
    lambda group: divergence("fake", "wrong_values", [f"{group}/*"]),  # another kind of divergence
    lambda group: divergence("fake", "crash", [f"{group}/*"]),
    lambda group: divergence("other", "accepts_invalid", [f"{group}/*"]),  # another backend's
    lambda group: divergence("fake", "accepts_invalid", ["basic/*"]),  # other cases
    lambda group: divergence("fake", "accepts_invalid", [f"{group}/*"], dtypes=["float16"]),  # another dtype
], ids=["wrong_values", "crash", "other-backend", "other-cases", "other-dtype"])
def test_a_declaration_that_does_not_say_accepts_invalid_for_this_case_excuses_nothing(catalog, declared):
    _, r = result_of(catalog, Fake(), invalid=True, divergences=[declared(a_case(catalog, invalid=True).group.name)])
    assert (r.status, r.failure) == ("fail", "accepts_invalid"), r.detail


# ---- (b) divergences ort-autograd inherits from ort ------------------------------------------------

def test_ort_autograd_runs_ort_kernels_and_inherits_their_divergences():
    backend = OrtAutogradBackend()
    assert backend.name == "ort-autograd" and backend.divergences_from == "ort"
    assert backend.inherited_must_reproduce is False


def test_an_inherited_ort_divergence_explains_an_ort_autograd_failure(catalog):
    backend = FakeOrtAutograd()
    backend.wrong = True
    _, r = result_of(catalog, backend, invalid=False, divergences=[divergence("ort", "wrong_values", ["*"])])
    assert (r.backend, r.status, r.failure, r.divergence, r.divergence_reproduced) == \
        ("ort-autograd", "divergent", "wrong_values", "ort-wrong-values", True), r.detail


def test_an_inherited_divergence_of_another_kind_or_dtype_excuses_nothing(catalog):
    backend = FakeOrtAutograd()
    backend.wrong = True
    for declared in (divergence("ort", "crash", ["*"]), divergence("ort", "wrong_values", ["*"], dtypes=["float16"])):
        _, r = result_of(catalog, backend, invalid=False, divergences=[declared])
        assert (r.status, r.failure) == ("fail", "wrong_values"), r.detail


def test_a_backend_that_inherits_nothing_is_not_excused_by_ort_divergences(catalog):
    backend = FakeOrtAutograd()
    backend.wrong = True
    backend.divergences_from = None
    _, r = result_of(catalog, backend, invalid=False, divergences=[divergence("ort", "wrong_values", ["*"])])
    assert (r.status, r.failure, r.divergence) == ("fail", "wrong_values", None), r.detail


def test_an_inherited_divergence_that_does_not_show_is_not_stale(catalog):
    """ort-autograd passes where ort's divergence is declared: the ort-only run of the gate stays PASS
    (the divergence is ort's to reproduce); ort-autograd's own declaration that does not show is stale."""
    _, r = result_of(catalog, FakeOrtAutograd(), invalid=False, divergences=[divergence("ort", "wrong_values", ["*"])])
    assert (r.status, r.divergence) == ("pass", None), r.detail
    assert gate.verdict([r.to_json()], []) == {"passed": True, "reasons": []}

    _, own = result_of(catalog, FakeOrtAutograd(), invalid=False,
                       divergences=[divergence("ort-autograd", "wrong_values", ["*"])])
    assert (own.status, own.divergence, own.divergence_reproduced) == ("pass", "ort-autograd-wrong-values", False)
    verdict = gate.verdict([own.to_json()], [])
    assert not verdict["passed"] and any("ort-autograd-wrong-values did not reproduce" in x for x in verdict["reasons"])
