"""Known divergences declared `intermittent: {reruns: N}` (an output ORT leaves uninitialised shows wrong in some
runs only), with fake backends and no ORT:

(a) a covered case that passes is rerun on the same backend up to N times: the first rerun the declaration
    explains makes it divergent (reproduced), one it does not explain fails, and a case that passes all 1 + N
    runs passes with the declaration unreproduced, which the gate calls stale;
(b) a declaration without `intermittent` keeps its one run: a pass is not rerun and leaves it unreproduced;
(c) the outputs it names are not held bitwise repeatable (output_subset, thread_invariance) on its backend, and
    on no other: an intermittent declaration for ort exempts nothing on openmp.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pydantic import ValidationError

from harness.backends.base import Backend, Crashed
from harness.core.cases import expand
from harness.run import gate
from harness.run.case_checks import run_case
from harness.run.engine import prepare
from harness.spec.model import Divergence
from tests.test_status_rules import fake_outputs as outputs


@dataclasses.dataclass
class Flaky(Backend):
    """Wrong values (or a crash) on every `every`-th run, right ones otherwise (every=0: always right)."""
    every: int = 3
    crash: bool = False
    label: str = "ort"
    runs: int = 0

    def __post_init__(self):
        self.name = self.label

    def run(self, request):
        self.runs += 1
        bad = bool(self.every) and self.runs % self.every == 0
        if bad and self.crash:
            return Crashed("SIGSEGV")
        return outputs(request, wrong=bad)


def declared(backend: str = "ort", reruns: int | None = 10, result: str = "wrong_values", **fields) -> Divergence:
    extra = {"intermittent": {"reruns": reruns}} if reruns is not None else {}
    return Divergence(id=f"{backend}-planted", backend=backend, cases=["*"], result=result,
                      summary="planted by tests/test_intermittent_divergences.py", evidence="a fake backend, no library",
                      **extra, **fields)


def a_case(catalog, op: str = "ReluGrad", divergences=(), requested: set[str] | None = None):
    """A float32 valid case of op asking for all its outputs, or for `requested` only."""
    spec = catalog.by_op(op).model_copy(update={"known_divergences": list(divergences)})
    wanted = requested or {o.name for o in spec.outputs}
    return next(c for c in expand(spec, "nightly") if c.valid and c.dtype == "float32"
                and set(c.requested_outputs) == wanted)


def judged(catalog, backend, divergences, op: str = "ReluGrad", requested: set[str] | None = None):
    return run_case(catalog, prepare(a_case(catalog, op, divergences, requested)), backend)


# ---- (a) reruns --------------------------------------------------------------------------------------

def test_a_backend_wrong_one_run_in_three_is_divergent_as_declared(catalog):
    backend = Flaky(every=3)
    first, *_ = judged(catalog, backend, [declared(reruns=10)])
    assert backend.runs == 3, "rerun until it showed, no further"
    assert (first.status, first.failure, first.divergence, first.divergence_reproduced) == \
        ("divergent", "wrong_values", "ort-planted", True), first.detail
    assert "run 3 of up to 11" in first.detail
    assert gate.verdict([first.to_json()], []) == {"passed": True, "reasons": []}


def test_a_declaration_that_never_shows_in_its_reruns_is_stale(catalog):
    backend = Flaky(every=0)
    first, *_ = judged(catalog, backend, [declared(reruns=4)])
    assert backend.runs == 5, "the first run and every rerun"
    assert (first.status, first.divergence, first.divergence_reproduced) == ("pass", "ort-planted", False)
    assert "passed all 5 runs" in first.detail
    verdict = gate.verdict([first.to_json()], [])
    assert not verdict["passed"] and any("ort-planted did not reproduce" in r for r in verdict["reasons"])


def test_too_few_reruns_to_show_it_leave_it_stale(catalog):
    """reruns bounds the runs: a backend wrong one run in 5 passes a declaration of 3 reruns (4 runs)."""
    backend = Flaky(every=5)
    first, *_ = judged(catalog, backend, [declared(reruns=3)])
    assert backend.runs == 4 and (first.status, first.divergence_reproduced) == ("pass", False)


def test_a_rerun_the_declaration_does_not_explain_fails(catalog):
    backend = Flaky(every=2, crash=True)
    first, *_ = judged(catalog, backend, [declared(reruns=10)])
    assert (first.status, first.failure, first.divergence_reproduced) == ("crashed", "crash", False), first.detail
    assert not gate.verdict([first.to_json()], [])["passed"]


def test_a_first_run_that_shows_it_is_not_rerun(catalog):
    backend = Flaky(every=1)
    first, *_ = judged(catalog, backend, [declared(reruns=10)])
    assert backend.runs == 1 and (first.status, first.divergence_reproduced) == ("divergent", True)


def test_another_backends_intermittent_declaration_reruns_nothing(catalog):
    backend = Flaky(every=3, label="openmp")
    first, *_ = judged(catalog, backend, [declared("ort", reruns=10)])
    assert backend.runs == 1 and (first.status, first.divergence) == ("pass", None)


@dataclasses.dataclass
class Unwritten(Flaky):
    """Wrong only when the outputs are asked for in poisoned buffers (what a kernel leaving them unwritten does)."""
    poisoned: list = dataclasses.field(default_factory=list)

    def run(self, request):
        self.runs += 1
        self.poisoned.append(request.poison_outputs)
        return outputs(request, wrong=request.poison_outputs)


def test_reruns_ask_for_poisoned_output_buffers_and_the_first_run_does_not(catalog):
    backend = Unwritten()
    first, *_ = judged(catalog, backend, [declared(reruns=5)])
    assert backend.poisoned == [False, True], "a plain first run, then a poisoned rerun that shows it"
    assert (first.status, first.divergence_reproduced) == ("divergent", True), first.detail


def test_ort_returns_what_a_kernel_leaves_unwritten_as_nan_in_a_poisoned_run(catalog):
    """FusedMatMul with K = 0 and three output matrices leaves Y unwritten (spec FusedMatMul,
    ort-fusedmatmul-empty-k-batched-uninitialized): a plain run returns whatever memory held, often zeros; a run
    into NaN-filled buffers returns NaN wherever ORT did not write, every time. A correct kernel overwrites it."""
    from harness.backends.ort import OrtBackend
    from harness.run.engine import request_for

    backend = OrtBackend()
    if backend.availability():
        pytest.skip(backend.availability())
    spec = catalog.by_op("FusedMatMul")
    empty = next(c for c in expand(spec, "ci") if c.id.startswith("empty_k_batched/") and c.dtype == "float32")
    full = next(c for c in expand(spec, "ci") if c.valid and c.dtype == "float32" and "empty" not in c.id)
    for _ in range(3):
        (y,) = backend.run(request_for(prepare(empty), 1, poison_outputs=True)).values
        assert y.shape == (3, 2, 4) and np.isnan(y[1:]).all(), "matrices 2 and 3 of Y are never written"
    (y,) = backend.run(request_for(prepare(full), 1, poison_outputs=True)).values
    assert y.size and not np.isnan(y).any()


# ---- (b) a declaration without intermittent -----------------------------------------------------------

def test_a_plain_declaration_is_judged_on_one_run(catalog):
    backend = Flaky(every=3)
    first, *_ = judged(catalog, backend, [declared(reruns=None)])
    assert backend.runs == 1
    assert (first.status, first.divergence, first.divergence_reproduced) == ("pass", "ort-planted", False)
    assert "intermittent" not in first.detail
    assert not gate.verdict([first.to_json()], [])["passed"]


@pytest.mark.parametrize("fields, says", [
    ({"intermittent": {"reruns": 0}}, "greater than or equal to 1"),
    ({"intermittent": {}}, "reruns"),
    ({"intermittent": {"reruns": 10}, "result": "unsupported"}, "so in every run"),
])
def test_what_an_intermittent_declaration_must_say(fields, says):
    base = {"id": "x-y", "backend": "ort", "cases": ["*"], "result": "wrong_values", "summary": "a summary line",
            "evidence": "some evidence"}
    with pytest.raises(ValidationError, match=says):
        Divergence(**{**base, **fields})


# ---- (c) bitwise repeatability ------------------------------------------------------------------------

@dataclasses.dataclass
class Unrepeatable(Backend):
    """Right values, but the last element of every output one bit off on every other run (an unwritten
    buffer's leftovers) or, THREAD_INVARIANT, at more than one thread."""
    label: str = "ort"
    runs: int = 0

    def __post_init__(self):
        self.name = self.label
        self.THREAD_INVARIANT = self.label == "openmp"

    def run(self, request):
        self.runs += 1
        out = outputs(request)
        if (request.threads > 1) if self.THREAD_INVARIANT else (self.runs % 2 == 0):
            for v in out.values:
                if v is not None and v.size:
                    v.reshape(-1).view(f"u{v.itemsize}")[-1] ^= 1
        return out


def checks(results) -> dict:
    return {r.check: (r.status, r.detail) for r in results}


def test_an_output_declared_intermittent_is_not_held_bitwise_repeatable_on_its_backend(catalog):
    """ConvGrad asked for dX and dW: a one-bit wobble between ORT's runs fails output_subset, unless ort declares
    the outputs intermittent; one declared output exempts only itself."""
    op, requested = "ConvGrad", {"dX", "dW"}
    plain = checks(judged(catalog, Unrepeatable(), [], op, requested))
    assert plain["output_subset"][0] == "fail", plain
    every = checks(judged(catalog, Unrepeatable(), [declared()], op, requested))
    assert "output_subset" not in every, every
    status, detail = checks(judged(catalog, Unrepeatable(), [declared(outputs=["dX"])], op, requested))["output_subset"]
    assert status == "fail" and "dW:" in detail and "dX not compared: declared intermittent on ort" in detail, detail


def test_an_ort_intermittent_declaration_never_loosens_openmp_thread_invariance(catalog):
    for_ort = checks(judged(catalog, Unrepeatable(label="openmp"), [declared("ort")]))
    assert for_ort["thread_invariance"][0] == "fail", for_ort
    for_openmp = checks(judged(catalog, Unrepeatable(label="openmp"), [declared("openmp")]))
    assert "thread_invariance" not in for_openmp, for_openmp
