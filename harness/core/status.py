"""What a result's status, failure kind and check mean: the one place they are defined.

Status and Failure are `str` enums, so a record read back from results.jsonl.gz ("fail") equals the
member (Status.FAIL) and JSON writes them as their plain values. Everything that decides something
from a result (the verdict, waivers, the report, the pytest outcome) reads these fields, never the
result's prose `detail`.
"""
from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    PASS = "pass"  # agrees with the reference within tolerance (or rejected an invalid input)
    FAIL = "fail"  # an unexpected disagreement with the spec
    DIVERGENT = "divergent"  # a disagreement the spec declares as a known divergence, with evidence
    WAIVED = "waived"  # a failure (or a case not run) a backend team accepts in specs/_waivers/
    UNSUPPORTED = "unsupported"  # the backend cannot run this dtype or feature
    CRASHED = "crashed"  # the backend's process died or hung
    ERROR = "error"  # the harness or the spec could not build or check the case: a bug to fix

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # Enum hashes the member's name: a dict keyed by "fail" must find FAIL


STATUSES = tuple(s.value for s in Status)
UNEXPECTED = (Status.FAIL.value, Status.CRASHED.value, Status.ERROR.value)  # these fail the verdict
# Worst first, as the report ranks a matrix cell: a broken harness or spec, then what fails the verdict, then the
# declared outcomes. Unsupported ranks above pass because it is never a pass.
SEVERITY = tuple(s.value for s in (Status.ERROR, Status.CRASHED, Status.FAIL, Status.DIVERGENT, Status.WAIVED,
                                    Status.UNSUPPORTED, Status.PASS))


class Failure(str, Enum):
    """Why a result did not pass; None on a pass."""
    WRONG_VALUES = "wrong_values"
    WRONG_SHAPE = "wrong_shape"  # a wrong shape or dtype, or a requested output missing
    REJECTS_VALID = "rejects_valid"
    ACCEPTS_INVALID = "accepts_invalid"
    CRASH = "crash"
    HANG = "hang"
    XPASS = "xpass"  # covered by an xfail waiver, yet passed
    NOT_A_GRADIENT = "not_a_gradient"  # the gradient check: the reference is not its forward op's gradient

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # Enum hashes the member's name: a dict keyed by "fail" must find FAIL


class Problem(str, Enum):
    """What one output comparison found wrong (harness.core.compare); tolerance waivers cover OUT_OF_TOLERANCE only."""
    SHAPE = "shape"
    DTYPE = "dtype"
    MISSING_NAN = "missing_nan"
    EXTRA_NAN = "extra_nan"
    WRONG_INF = "wrong_inf"
    OUT_OF_TOLERANCE = "out_of_tolerance"

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # Enum hashes the member's name: a dict keyed by "fail" must find FAIL


class Check(str, Enum):
    """Which check a result records; every check is a result of its own for the same case id."""
    REFERENCE = "reference"  # the backend against the float64 reference
    GRADIENT = "gradient"  # the reference against its forward op (harness.core.gradcheck); backend `reference`
    OUTPUT_SUBSET = "output_subset"  # harness.run.self_consistency
    OWN_SAVED_STATE = "own_saved_state"
    THREAD_INVARIANCE = "thread_invariance"  # harness.run.self_consistency: 2 threads bitwise equal to 1

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # Enum hashes the member's name: a dict keyed by "fail" must find FAIL


# Which declared divergence results explain which observed failure kinds.
EXPLAINS = {"wrong_values": (Failure.WRONG_VALUES, Failure.WRONG_SHAPE), "crash": (Failure.CRASH,),
            "hang": (Failure.HANG,), "accepts_invalid": (Failure.ACCEPTS_INVALID,),
            "unsupported": (Failure.REJECTS_VALID,), "rejects_valid": (Failure.REJECTS_VALID,)}
