"""The run's table: each backend's total is its cases plus its own checks, and the table says which."""
from harness.run.results import Tally, format_table


def _record(backend: str, check: str, status: str = "pass") -> dict:
    return {"op": "GeluGrad", "backend": backend, "check": check, "status": status}


def test_totals_name_the_checks_they_count():
    tally = Tally()
    for _ in range(3):
        tally.add(_record("reference", "reference"))
        tally.add(_record("openmp", "reference"))
        tally.add(_record("ort", "reference"))
    tally.add(_record("reference", "gradient"))
    tally.add(_record("reference", "gradient", "fail"))
    tally.add(_record("openmp", "thread_invariance"))
    rows = {row["backend"]: row for row in tally.table()}
    assert rows["reference"]["total"] == 5 and rows["reference"]["cases"] == 3
    assert rows["reference"]["checks"] == {"gradient": 2}
    assert rows["openmp"]["checks"] == {"thread_invariance": 1} and rows["ort"]["checks"] == {}
    text = format_table(tally.table()).splitlines()
    line = {ln.split()[1]: ln for ln in text[2:5]}
    assert line["reference"].endswith("= 3 cases + 2 gradient")
    assert line["openmp"].endswith("= 3 cases + 1 thread_invariance")
    assert "=" not in line["ort"]  # only cases: nothing to explain
    assert "gradient: the reference proven the gradient of its forward op" in text[-1]
    assert "thread_invariance: the same bits at 1 thread and at more" in text[-1]


def test_a_record_without_a_check_counts_as_a_case():
    tally = Tally()
    tally.add({"op": "ReluGrad", "backend": "ort", "status": "pass"})  # an older results.jsonl
    [row] = tally.table()
    assert row["cases"] == 1 and row["checks"] == {}
