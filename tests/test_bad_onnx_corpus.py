"""run-onnx judges each directory on its own: a mix of good and broken backend-test directories
(tests/corpus/make_bad_onnx.py) gives every good one its verdict and every broken one one ERROR line."""
import sys
from pathlib import Path

import pytest
from conftest import SPECS

from harness.cli import main

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from make_bad_onnx import broken_variants, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx_corpus")
    return out, write_corpus(out, SPECS)


@pytest.mark.parametrize("backend", ["reference", "ort"])
def test_every_good_directory_is_judged_and_every_broken_one_is_its_own_error(corpus, backend, capsys):
    out, expected = corpus
    names = sorted(expected["good"] + list(expected["broken"]))  # good and broken interleaved
    assert len(expected["broken"]) == len(broken_variants()) >= 15
    code = main(["run-onnx", *[str(out / n) for n in names], "--backend", backend])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1  # the broken ones fail the command, after everything ran
    for name in expected["good"]:
        mine = [line for line in lines if f" {name}/" in line or line.startswith(f"PASS {name}")]
        assert len(mine) == 1 and mine[0].startswith("PASS "), (name, mine)
    for name, words in expected["broken"].items():
        mine = [line for line in lines if f"{name}/" in line or line.endswith(name) or f"/{name}:" in line
                or f" {name}:" in line]
        assert len(mine) == 1, (name, mine)
        assert mine[0].startswith("ERROR "), mine[0]
        for word in words:
            assert word in mine[0], (word, mine[0])
    assert lines[-1] == (f"{len(expected['good'])} passed, {len(expected['broken'])} failed "
                         f"({len(expected['broken'])} error), 0 unsupported")
    assert not any("Traceback" in line for line in lines)
