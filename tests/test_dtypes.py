"""Dtypes as first-class case parameters: the four float dtypes reach the backends, the reference
rounds once, and a result beyond a dtype's range is expected to round to infinity."""
import ml_dtypes
import numpy as np
import pytest

from harness.backends.base import Request
from harness.backends.ort import OrtBackend
from harness.backends.reference import ReferenceBackend
from harness.core.cases import expand
from harness.core.compare import Tolerance, compare
from harness.run.engine import judge, prepare, request_for

TOL = Tolerance(1e-5, 1e-4, "test")


@pytest.mark.parametrize("op", ["SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"])
def test_softmax_cases_run_in_every_dtype_their_contract_allows(catalog, op):
    spec = catalog.by_op(op)
    counts = {}
    for case in expand(spec, "ci"):
        counts[case.dtype] = counts.get(case.dtype, 0) + 1
    assert set(counts) == set(spec.type_constraints["T"].types)
    assert min(counts.values()) >= 20, counts


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_inputs_are_stored_in_the_case_dtype_and_the_reference_rounds_once(catalog, dtype):
    spec = catalog.by_op("SoftmaxGrad_13")
    case = next(c for c in expand(spec, "ci") if c.dtype == dtype and c.group.name == "rank3")
    prepared = prepare(case)
    assert {v.dtype for v in prepared.inputs.values()} == {np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)}
    out = ReferenceBackend().run(request_for(prepared)).values[0]
    np.testing.assert_array_equal(out, prepared.expected[0].astype(out.dtype))
    assert judge(prepared, ReferenceBackend(), catalog.tolerance(spec, dtype)).status == "pass"


def test_a_result_beyond_the_dtype_s_range_is_expected_as_infinity():
    expected = np.array([3.66e38, -4e38, 1.0])
    assert compare(np.array([np.inf, -np.inf, 1.0], np.float32), expected, "float32", TOL).passed
    finite = compare(np.array([3.4028235e38, -np.inf, 1.0], np.float32), expected, "float32", TOL)
    assert not finite.passed and "infinity expected" in finite.problems[0]
    # In float64 the same numbers are ordinary values.
    assert compare(expected, expected, "float64", TOL).passed
    assert compare(np.array([np.inf], np.float16), np.array([7e4]), "float16", TOL).passed  # above float16 max


def test_ort_float16_through_inserted_casts_is_the_float32_kernel_rounded_once(catalog):
    ort = OrtBackend()
    if reason := ort.availability():
        pytest.skip(reason)
    try:
        spec = catalog.by_op("SoftmaxGrad_13")
        rng = np.random.default_rng(5)
        dY = rng.normal(size=(3, 7)).astype(np.float16)
        Y = rng.uniform(size=(3, 7)).astype(np.float16)
        half = ort.run(Request(spec, "float16", [dY, Y], {"axis": 0}, (True,))).values[0]
        single = ort.run(Request(spec, "float32", [dY.astype(np.float32), Y.astype(np.float32)], {"axis": 0}, (True,))).values[0]
    finally:
        ort.close()
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, single.astype(np.float16))
