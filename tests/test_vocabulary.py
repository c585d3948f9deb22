"""Each vocabulary once: the dtypes and the tiers are written out in harness/spec/vocabulary.py only, the statuses,
checks and failure kinds in harness/core/status.py only, and every other module imports them (the C kernels' dtype
enum is the one copy left, as C cannot import Python; report.css colours each status by its class name)."""
from __future__ import annotations

import ast
from pathlib import Path

from harness.core import status
from harness.spec import vocabulary

HARNESS = Path(__file__).resolve().parents[1] / "harness"
DEFINING = "harness/spec/vocabulary.py"
STATUS_DEFINING = "harness/core/status.py"
# The words of a result: a literal collection of two or more of one of these, and nothing else, is a list
# written out again (`r.status in ("fail", "crashed")`); name the members (Status.FAIL) or import the tuple.
RESULT_WORDS = {"statuses": {s.value for s in status.Status}, "checks": {c.value for c in status.Check},
                "failure kinds": {f.value for f in status.Failure}}
# tables keyed by dtype hold a property per dtype (its NumPy type, its bits, its code in the C enum), not the list
PER_DTYPE_TABLES = {"harness/core/dtypes.py", "harness/backends/openmp_lib.py"}


def _strings(node) -> list[str] | None:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = node.elts
    elif isinstance(node, ast.Dict):
        items = node.keys
    else:
        return None
    if len(items) < 2 or not all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        return None
    return [i.value for i in items]


def _literal_members(tree) -> set[int]:
    """ids of the collections inside a typing.Literal[...]: a file format's allowed values, which pydantic lists
    by their words when a file has another (checked against the vocabulary by literal_words_not_in_it)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", getattr(node.value, "attr", "")) == "Literal":
            inside |= {id(n) for n in ast.walk(node.slice)}
    return inside


def restated(source: str, module: str) -> list[str]:
    """'module:line what' for each literal collection that writes out a vocabulary: every float dtype, every tier,
    or two or more statuses, checks or failure kinds (and no other word) outside harness/core/status.py."""
    found = []
    tree = ast.parse(source)
    in_literal = _literal_members(tree)
    for node in ast.walk(tree):
        words = _strings(node)
        if words is None:
            continue
        if module != STATUS_DEFINING and id(node) not in in_literal:
            for name, vocab in RESULT_WORDS.items():
                if set(words) <= vocab and len(set(words)) >= 2:
                    found.append(f"{module}:{node.lineno} writes out {name} {words}: name the members or import the "
                                 "tuple from harness.core.status")
        if (isinstance(node, ast.Dict) and module in PER_DTYPE_TABLES) or module == DEFINING:  # the definitions
            continue
        for name, vocab in (("the float dtypes", vocabulary.FLOAT_DTYPES), ("the tiers", vocabulary.TIERS)):
            if set(vocab) <= set(words):
                found.append(f"{module}:{node.lineno} writes out {name} {words}: import them from harness.spec.vocabulary")
    return found


def literal_words_not_in_it(source: str, module: str) -> list[str]:
    """A Literal[...] of result words (a file format's allowed values) may name only words of the vocabulary."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "Literal"):
            continue
        words = [n.value for n in ast.walk(node.slice) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for name, vocab in RESULT_WORDS.items():
            if len(set(words) & vocab) >= 2 and not set(words) <= vocab | vocabulary_extras(name):
                found.append(f"{module}:{node.lineno} Literal of {name} {words}: {sorted(set(words) - vocab)} "
                             "are not in harness.core.status")
    return found


def vocabulary_extras(name: str) -> set[str]:
    """Words a Literal may add to a vocabulary's: a declared divergence's result `unsupported` is a status, not a
    failure kind; a skip waiver's reasons too_slow and nondeterministic are not failures."""
    return {"failure kinds": {"unsupported", "too_slow", "nondeterministic"}}.get(name, set())


def test_no_module_but_the_vocabularies_writes_out_the_dtypes_tiers_statuses_checks_or_failure_kinds():
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        module = path.relative_to(HARNESS.parent).as_posix()
        found += restated(path.read_text(), module)
    assert not found, "\n".join(found)


def test_a_file_formats_literal_of_result_words_names_only_words_of_the_vocabulary():
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        found += literal_words_not_in_it(path.read_text(), path.relative_to(HARNESS.parent).as_posix())
    assert not found, "\n".join(found)


def test_the_status_check_sees_status_lists_written_out_again():
    planted = ('UNEXPECTED = ("fail", "crashed", "error")\nif s in ("pass", "unsupported"): pass\n'
               'CHECKS = ["output_subset", "own_saved_state"]\nif f in {"crash", "hang"}: pass\n')
    assert len(restated(planted, "harness/report/x.py")) == 4
    assert restated('return "error", "error"\n', "harness/report/x.py") == []  # one word twice is no list
    assert restated(planted, STATUS_DEFINING) == []  # the definitions may
    assert restated('PHASES = ("pass", "warmup")\nKIND = ("error", "warning")\n', "harness/x.py") == []  # other words
    fmt = 'kind: Literal["crash", "hang", "too_slow"]\ncheck: Literal["reference", "output_subset"]\n'
    assert restated(fmt, "harness/run/x.py") == [] and literal_words_not_in_it(fmt, "harness/run/x.py") == []
    typo = 'check: Literal["reference", "output_subset", "thread_invariant"]\n'
    assert "thread_invariant" in literal_words_not_in_it(typo, "harness/run/x.py")[0]


def test_the_report_ranks_what_core_defines():
    """The report's severity, its short labels and report.js's ranks cover exactly harness.core.status's statuses."""
    from harness.report import status as report_status
    from harness.report.render import assets
    assert sorted(report_status.ORDER) == sorted(status.STATUSES)
    ranks, unknown = report_status.js_rank()
    assert set(ranks) == set(status.STATUSES) and unknown not in ranks.values()
    assert [s for s, _ in sorted(ranks.items(), key=lambda kv: kv[1])] == list(report_status.ORDER)
    script = str(assets()[1])
    assert "__STATUS_RANK__" not in script and '"crashed": 1' in script and "UNKNOWN_RANK = 3" in script
    assert set(report_status.SHORT) <= set(status.STATUSES)


def test_the_check_sees_a_list_written_out_again():
    planted = 'ORDER = ("float32", "float64", "float16", "bfloat16")\nmarks = {"smoke": 1, "ci": 2, "nightly": 3}\n'
    assert len(restated(planted, "harness/report/x.py")) == 2
    assert restated('HALF = ("float16", "bfloat16")\n', "harness/report/x.py") == []  # a subset with a meaning of its own
    assert len(restated((HARNESS / "spec" / "vocabulary.py").read_text(), "harness/x.py")) >= 2  # the definitions are seen
    assert restated((HARNESS / "spec" / "vocabulary.py").read_text(), DEFINING) == []  # where they may be


def test_the_vocabulary_is_what_the_rest_reads():
    from harness.core import cases, dtypes
    from harness.pytest_plugin import suite
    from harness.report import ops
    from harness.spec.model import Spec
    assert dtypes.FLOATS == vocabulary.FLOAT_DTYPES and cases.TIERS == vocabulary.TIERS
    assert ops.DTYPE_ORDER == suite.DTYPES == vocabulary.NUMERIC_DTYPES
    assert suite.TIERS == {"smoke": ("smoke", "ci", "nightly"), "ci": ("ci", "nightly"), "nightly": ("nightly",)}
    schema = Spec.model_json_schema()
    assert schema["$defs"]["TypeConstraint"]["properties"]["types"]["items"]["enum"] == list(vocabulary.DTYPES)
