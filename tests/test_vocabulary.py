"""Each vocabulary once: the dtypes and the tiers are written out in harness/spec/vocabulary.py only, and every
other module imports them (the C kernels' dtype enum is the one copy left, as C cannot import Python)."""
from __future__ import annotations

import ast
from pathlib import Path

from harness.spec import vocabulary

HARNESS = Path(__file__).resolve().parents[1] / "harness"
DEFINING = "harness/spec/vocabulary.py"
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


def restated(source: str, module: str) -> list[str]:
    """'module:line what' for each literal collection that writes out a vocabulary: every float dtype, or every tier."""
    found = []
    for node in ast.walk(ast.parse(source)):
        words = _strings(node)
        if words is None:
            continue
        if isinstance(node, ast.Dict) and module in PER_DTYPE_TABLES:
            continue
        for name, vocab in (("the float dtypes", vocabulary.FLOAT_DTYPES), ("the tiers", vocabulary.TIERS)):
            if set(vocab) <= set(words):
                found.append(f"{module}:{node.lineno} writes out {name} {words}: import them from harness.spec.vocabulary")
    return found


def test_no_module_but_the_vocabulary_writes_out_the_dtypes_or_the_tiers():
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        module = path.relative_to(HARNESS.parent).as_posix()
        if module != DEFINING:
            found += restated(path.read_text(), module)
    assert not found, "\n".join(found)


def test_the_check_sees_a_list_written_out_again():
    planted = 'ORDER = ("float32", "float64", "float16", "bfloat16")\nmarks = {"smoke": 1, "ci": 2, "nightly": 3}\n'
    assert len(restated(planted, "harness/report/x.py")) == 2
    assert restated('HALF = ("float16", "bfloat16")\n', "harness/report/x.py") == []  # a subset with a meaning of its own
    assert len(restated((HARNESS / "spec" / "vocabulary.py").read_text(), DEFINING)) >= 2  # the definitions are seen


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
