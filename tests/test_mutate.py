"""`opconform mutate`: the catalogue changes what it says, the judging catches what a spec can see, and
a spec that cannot see an error is reported as weak."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from harness.cli import main
from harness.core.compare import Tolerance
from harness.report import write_report
from harness.run import mutate


def test_ulp_mutant_moves_one_element_by_k_representable_steps():
    v = np.array([1.0, -3.0, 2.0], dtype=np.float32)
    m = mutate._ulp(v, 4, "float32")
    assert np.count_nonzero(m != v) == 1
    assert m[1] == np.float32(-3.0) - 4 * np.spacing(np.float32(3.0))  # the largest magnitude, away from zero


@pytest.mark.parametrize("name", mutate.STRUCTURAL)
def test_each_structural_mutant_changes_a_2d_output(name):
    v = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    m = mutate._structural(name, v)
    assert m.shape == v.shape and mutate._changed(m, v).any()


def test_a_bool_output_gets_one_element_flipped_and_no_float_mutants():
    """FakeQuant's quantization_mask: `-` on a bool raised and stopped `opconform mutate`."""
    v = np.array([[True, False, True]])
    m = mutate._structural("sign flipped", v)
    assert m.dtype == np.bool_ and np.count_nonzero(m != v) == 1
    assert mutate._structural("one NaN", v) is None and mutate._structural("one inf", v) is None


def test_an_integer_output_gets_no_nan_or_inf_mutant():
    """AdamOptimizer's step count new_T: writing NaN into an int64 raised and stopped `opconform mutate`."""
    v = np.array([7], dtype=np.int64)
    assert mutate._structural("one NaN", v) is None and mutate._structural("one inf", v) is None
    flipped = mutate._structural("sign flipped", v)
    assert flipped.dtype == np.int64 and flipped.tolist() == [-7]


def test_a_spec_with_an_integer_output_is_mutated(catalog):
    figures = mutate.mutate(catalog, ["AdamOptimizer"], tier="smoke")
    assert any(g["op"] == "AdamOptimizer" for g in figures["groups"])


def test_a_spec_with_a_bool_output_is_mutated(catalog):
    figures = mutate.mutate(catalog, ["FakeQuant"], tier="smoke")
    assert any(g["op"] == "FakeQuant" for g in figures["groups"]) and not mutate.weaknesses(figures)


def test_size_is_error_over_allowed_on_changed_elements():
    expected = np.array([1.0, 2.0])
    assert mutate._size(np.array([1.5]), expected[:1], np.array([0.25]), structural=False) == pytest.approx(2.0)
    assert mutate._size(np.array([1.0]), expected[:1], np.array([0.25]), structural=True) == np.inf


def test_real_specs_have_no_weakness(catalog):
    figures = mutate.mutate(catalog, ["ReluGrad", "SoftmaxGrad_13"], tier="smoke")
    assert not mutate.weaknesses(figures)
    # the catch is real: every structural mutant is caught by some case of each op
    caught = {(s["op"], s["mutant"]) for s in figures["survivors"]}
    assert not any(name in mutate.STRUCTURAL for _, name in caught)
    rows = {(g["op"], g["dtype"], g["group"]): g for g in figures["groups"]}
    assert rows[("ReluGrad", "float32", "basic")]["smallest_caught_ulp"] is not None


def test_a_tolerance_too_loose_to_see_errors_is_a_weakness(catalog):
    loose = {d: Tolerance(1e6, 0.0, "loose on purpose") for d in catalog.default_tolerances}
    figures = mutate.mutate(dataclasses.replace(catalog, default_tolerances=loose), ["ReluGrad"], tier="smoke")
    weak = {s["mutant"] for s in mutate.weaknesses(figures)}
    assert {"sign flipped", "two swapped", "all zeros"} <= weak
    assert "one NaN" not in weak  # special values are patterns: no tolerance hides a NaN


def test_cli_writes_figures_and_the_report_shows_them(tmp_path, capsys):
    out = tmp_path / "run" / "mutate.json"
    assert main(["mutate", "--ops", "ReluGrad", "--tier", "smoke", "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["ops"][0]["op"] == "ReluGrad"
    assert "no mutant larger than x2" in capsys.readouterr().out
    assert main(["run", "--ops", "ReluGrad", "--tier", "smoke", "--backends", "reference", "--out",
                 str(tmp_path / "run"), "--no-progress", "--no-report"]) == 0
    page = write_report(tmp_path / "run").read_text()
    assert 'id="mutation"' in page and 'id="gradient"' in page
