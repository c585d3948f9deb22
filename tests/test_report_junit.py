"""junit.xml: one testcase per result, named by op, backend, dtype and case; statuses mapped as the
verdict counts them."""
import xml.etree.ElementTree as ET

from test_report_model import raw

from harness.report.junit import outcome, write_junit


def parse(path):
    root = ET.parse(path).getroot()
    return root, {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}


def test_every_status_maps_as_documented(tmp_path):
    records = [raw(case="p", status="pass"),
               raw(case="f", status="fail", failure="wrong_values", detail="dX: 2 of 7 element(s) outside tolerance\nmore"),
               raw(case="c", status="crashed", failure="crash", detail="worker killed by SIGSEGV"),
               raw(case="e", status="error", detail="spec bug"),
               raw(case="u", status="unsupported", detail="no kernel registered"),
               raw(case="d", status="divergent", divergence="ort-x", detail="known divergence ort-x: summary"),
               raw(case="w", status="waived", waiver="OMP-1", detail="waived by OMP-1"),
               raw(case="x", status="brand_new")]
    root, cases = parse(write_junit(records, tmp_path / "junit.xml", {"started": "2026-11-22T08:00:00"}))
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("8", "3", "1", "3")
    get = lambda c: cases[("opconform.ReluGrad.ort", f"float32-{c}")]  # noqa: E731
    assert list(get("p")) == [] and list(get("u")) == [get("u").find("skipped")]  # passed, unsupported: the name says it
    failure = get("f").find("failure")
    assert failure.get("type") == "wrong_values" and failure.get("message") == "dX: 2 of 7 element(s) outside tolerance"
    assert failure.text.endswith("rerun: opconform run --ops ReluGrad --backends ort --cases float32-f")
    assert get("c").find("failure").get("type") == "crash"
    assert get("e").find("error").get("type") == "harness_error"
    for case, kind in (("u", "unsupported"), ("d", "divergent"), ("w", "waived")):
        assert get(case).find("skipped").get("type") == kind
    assert get("d").find("skipped").get("message") == "known divergence ort-x: summary"
    assert get("x").find("failure").get("type") == "brand_new"  # an unknown status is not assumed harmless
    props = {p.get("name"): p.get("value") for p in get("d").iter("property")}
    assert props["op"] == "ReluGrad" and props["backend"] == "ort" and props["dtype"] == "float32"
    assert props["case"] == "d" and props["status"] == "divergent" and props["divergence"] == "ort-x"
    (suite,) = root.iter("testsuite")
    assert suite.get("name") == "opconform.ReluGrad" and suite.get("timestamp") == "2026-11-22T08:00:00"


def test_one_suite_per_op_and_checks_in_the_name(tmp_path):
    records = [raw(op="GeluGrad", case="basic/shape=7"), raw(op="GeluGrad", case="basic/shape=7", check="output_subset"),
               raw(op="ReluGrad", backend="reference")]
    root, cases = parse(write_junit(records, tmp_path / "j.xml"))
    assert [s.get("name") for s in root.iter("testsuite")] == ["opconform.GeluGrad", "opconform.ReluGrad"]
    assert ("opconform.GeluGrad.ort", "float32-basic/shape=7 [output_subset]") in cases
    assert ("opconform.ReluGrad.reference", "float32-basic/shape=7") in cases and len(cases) == 3


def test_control_characters_from_a_crashed_worker_stay_valid_xml(tmp_path):
    detail = "worker killed by SIGABRT: \x00\x07stderr tail\x1b[0m é"
    root, cases = parse(write_junit([raw(status="crashed", failure="crash", detail=detail)], tmp_path / "j.xml"))
    (case,) = cases.values()
    assert case.find("failure").text.startswith("worker killed by SIGABRT: \ufffd\ufffdstderr tail\ufffd[0m é")


def test_outcome_table():
    assert outcome("pass") == (None, None)
    assert outcome("unsupported") == ("skipped", "unsupported") and outcome("waived") == ("skipped", "waived")
    assert outcome("fail") == ("failure", None) and outcome("error") == ("error", "harness_error")
