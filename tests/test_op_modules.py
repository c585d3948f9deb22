"""One convention for an op's Python (issue 33): every hook a spec names (reference, valid_if, valid_values,
shape_fn, cases.shapes, accuracy hooks, alternative semantics, forward.reference, bench hooks) lies in the
op's own module pair, reference/ops/<op>.py and reference/forward/<op>.py, or in a shared module named
below. A spec naming a second ops or forward module, a catch-all module beside them (the old
reference/shapes.py, reference/ops/alternatives.py), or a forward module that pairs with two ops modules
fails here.
"""
from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest
import yaml
from conftest import REPO, SPECS

import harness.spec.model as model

REFERENCE = REPO / "reference"
# Modules shared by the references of several ops, each with why it is shared. Helpers only today (no spec
# names a function in them), but a hook genuinely shared by unrelated ops (a generic shape rule) goes here.
SHARED = {
    "reference._math": "numerically careful scalar functions and axis normalisation used by several ops' references",
    "reference._torch": "numpy arrays as torch tensors, for every op's bench.torch peer",
    "reference._onnx": "onnx's reference evaluator run in float64: the forward of the training-graph specs' standard ops",
}
# Reference modules whose specs wait for a harness feature, each with the reason; an entry whose module a spec names
# fails test_pending_modules_are_still_pending until it is removed.
PENDING: dict[str, str] = {}  # module -> why no spec names it yet (none since the sequence optimizers got theirs)
DOTTED = re.compile(r"^([A-Za-z_][\w.]*):([A-Za-z_]\w*)$")  # harness.spec.model.Dotted
# The spec fields that name a function: every field of the spec model typed Dotted (a new hook field counts
# without an edit here). A module:function-looking string under another key (a generator's dim: "X:axis") is not one.
HOOK_FIELDS = {field for cls in vars(model).values()
               if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel) and cls.__module__ == model.__name__
               for field, info in cls.model_fields.items()
               if ":[A-Za-z_]" in repr(info.annotation) + repr(info.metadata)}
SPEC_FILES = sorted(p for p in SPECS.rglob("*.yaml") if not any(part.startswith("_") for part in p.relative_to(SPECS).parts))


def hooks(value, where: str = "", key: str = "") -> list[tuple[str, str]]:
    """(field path, module) of every hook in a parsed spec, wherever it is."""
    if isinstance(value, dict):
        return [h for k, item in value.items() for h in hooks(item, f"{where}.{k}" if where else str(k), str(k))]
    if isinstance(value, list):
        return [h for i, item in enumerate(value) for h in hooks(item, f"{where}[{i}]", key)]
    if key in HOOK_FIELDS and isinstance(value, str) and (m := DOTTED.match(value.strip())):
        return [(where, m[1])]
    return []


def kind(module: str) -> str | None:
    """'ops' or 'forward' for a module of an op's pair, 'shared' for a shared module, None otherwise."""
    parts = module.split(".")
    if len(parts) == 3 and parts[0] == "reference" and parts[1] in ("ops", "forward") and parts[2] != "__init__":
        return parts[1]
    return "shared" if module in SHARED else None


def pair_of(spec: dict) -> tuple[dict[str, set[str]], list[str]]:
    """The ops and forward modules a spec's hooks name, and one line per hook outside any pair or shared module."""
    found: dict[str, set[str]] = {"ops": set(), "forward": set()}
    problems = []
    for where, module in hooks(spec):
        k = kind(module)
        if k is None:
            problems.append(f"{where}: {module} is neither reference/ops/<op>.py, reference/forward/<op>.py nor a "
                            f"shared module ({', '.join(SHARED)})")
        elif k != "shared":
            found[k].add(module)
    for k, modules in found.items():
        if len(modules) > 1:
            problems.append(f"hooks in {len(modules)} {k} modules ({', '.join(sorted(modules))}); an op has one")
    return found, problems


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", SPEC_FILES, ids=[p.stem for p in SPEC_FILES])
def test_every_hook_lies_in_the_ops_module_pair(path):
    _, problems = pair_of(load(path))
    assert not problems, f"{path.relative_to(REPO)}:\n" + "\n".join(problems)


def test_each_ops_module_pairs_with_one_forward_module_and_back():
    partners: dict[str, set[str]] = {}
    for path in SPEC_FILES:
        found, _ = pair_of(load(path))
        for ops in found["ops"]:
            partners.setdefault(ops, set()).update(found["forward"])
        for forward in found["forward"]:
            partners.setdefault(forward, set()).update(found["ops"])
    shared = {m: sorted(p) for m, p in partners.items() if len(p) > 1}
    assert not shared, f"modules paired with more than one module: {shared}"


def test_the_reference_package_holds_only_module_pairs_and_shared_modules():
    """A catch-all module (the old reference/shapes.py) or a module no spec names is a place hooks drift to."""
    named = {m for path in SPEC_FILES for _, m in hooks(load(path))}
    stray = []
    for path in sorted(REFERENCE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if path.name == "__init__.py" or module in SHARED or module in PENDING:
            continue
        if kind(module) is None:
            stray.append(f"{path.relative_to(REPO)}: not an op's module nor a shared module")
        elif module not in named:
            stray.append(f"{path.relative_to(REPO)}: no spec names a function in it")
    assert not stray, "\n".join(stray)


def test_pending_modules_are_still_pending():
    named = {m for path in SPEC_FILES for _, m in hooks(load(path))}
    assert not set(PENDING) & named, "a spec names them now: remove them from PENDING"
    assert all((REPO / (m.replace(".", "/") + ".py")).is_file() for m in PENDING)


def test_the_walk_sees_every_kind_of_hook():
    """Guard against a vacuous pass: the hooks found include every field that names one."""
    assert {"reference", "valid_if", "valid_values", "shape_fn", "shapes", "magnitude", "reduction_length"} <= HOOK_FIELDS
    fields = {re.sub(r"\[\d+\]", "[]", where) for path in SPEC_FILES for where, _ in hooks(load(path))}
    fields = {re.sub(r"^inputs\[\]\.|^forward\.shapes\.\w+\.", "", f) for f in fields}
    for expected in ("reference", "valid_if", "valid_values", "shape_fn", "cases.shapes", "forward.reference",
                     "accuracy.magnitude", "alternative_semantics[].reference"):
        assert expected in fields, f"no spec hook found under {expected}: {sorted(fields)}"


@pytest.mark.parametrize("planted, expected", [
    ({"valid_if": "reference.shapes:conv_check"}, "reference.shapes is neither"),
    ({"alternative_semantics": [{"reference": "reference.ops.alternatives:relu_grad_as_product"}]},
     "hooks in 2 ops modules"),
    ({"forward": {"reference": "reference.forward.lstm:lstm_training"}}, "hooks in 2 forward modules"),
    ({"cases": {"shapes": "reference.ops.__init__:f"}}, "reference.ops.__init__ is neither"),
])
def test_a_hook_outside_the_pair_is_reported(planted, expected):
    spec = {"reference": "reference.ops.conv_grad:conv_grad", "forward": {"reference": "reference.forward.conv:conv"},
            "valid_if": "reference.forward.conv:conv_check"}
    _, problems = pair_of(spec)
    assert problems == []
    _, problems = pair_of({**spec, **planted})
    assert any(expected in p for p in problems), problems
