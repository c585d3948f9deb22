"""The thread_invariance self-consistency check: a backend that promises bitwise identical outputs at
any thread count (openmp) is run at 1 and 2 threads with the split forced, on every valid case; one
ulp of difference fails it, and a backend that makes no such promise is not held to it."""
import numpy as np

from harness.backends.base import Backend, Outputs
from harness.backends.reference import ReferenceBackend
from harness.core.cases import expand
from harness.run.engine import judge, prepare
from harness.run.self_consistency import THREAD_INVARIANCE, follow_ups


class SplitDrift(Backend):
    """Like a kernel whose partial sums are combined in a thread-count-dependent order."""
    THREAD_INVARIANT = True

    def __init__(self):
        super().__init__()
        self.name = "drift"
        self.seen = []

    def run(self, request):
        self.seen.append((request.threads, request.force_split))
        values = ReferenceBackend().run(request).values
        if request.threads > 1:
            values = [None if v is None else v.copy() for v in values]
            first = next(v for v in values if v is not None and v.size)
            first.flat[0] = np.nextafter(first.flat[0], np.inf)
        return Outputs(values)


class Honest(SplitDrift):
    def run(self, request):
        self.seen.append((request.threads, request.force_split))
        return ReferenceBackend().run(request)


def _first_valid(catalog, op):
    return next(c for c in expand(catalog.by_op(op), "smoke") if c.valid and c.dtype == "float32")


def _checks(backend, catalog, case):
    prepared = prepare(case)
    tolerance = catalog.tolerance(case.spec, case.dtype)
    first = judge(prepared, backend, tolerance)
    return first, [r for r in follow_ups(prepared, backend, first, tolerance, catalog) if r.check == THREAD_INVARIANCE]


def test_one_ulp_between_thread_counts_fails_the_check(catalog):
    for op in ("GeluGrad", "SoftmaxGrad_13", "ConvGrad"):
        backend = SplitDrift()
        first, checks = _checks(backend, catalog, _first_valid(catalog, op))
        assert first.status == "pass"  # one ulp is within tolerance: only the bitwise check sees it
        assert len(checks) == 1 and checks[0].status == "fail" and checks[0].failure == "wrong_values", op
        assert "2 threads differ from 1 thread" in checks[0].detail and "1 of" in checks[0].detail
        assert (1, True) in backend.seen and (2, True) in backend.seen  # both runs asked to split


def test_identical_outputs_pass_and_a_backend_without_the_promise_is_not_checked(catalog):
    case = _first_valid(catalog, "ConvGrad")
    _, checks = _checks(Honest(), catalog, case)
    assert [c.status for c in checks] == ["pass"] and "bitwise equal at 1 and 2 threads" in checks[0].detail
    _, checks = _checks(ReferenceBackend(), catalog, case)  # THREAD_INVARIANT False
    assert checks == []
