"""Every spec can state each of its own valid cases as a real graph would show it: the round trip
case -> NodeConfig (shapes, dtypes, small integer constants, attributes, outputs) -> harness.model.match -> params
rebuilds the same shapes and constants. A spec whose hook (cases.from_node) or default loses a configuration fails
here, so `opconform model` can state any configuration a spec's own cases can."""
from __future__ import annotations

import pytest

from harness.core.cases import expand
from harness.core.shapes import input_shapes
from harness.core.spec_loader import load_catalog
from harness.model.match import case_for, match, node_of_case

CATALOG = load_catalog()
PER_SPEC = 40  # cases per spec: every group's first cases, enough to reach each group


def _sample(spec):
    cases, seen = [], {}
    for case in expand(spec):
        if not case.valid or seen.get(case.group.name, 0) >= 3:
            continue
        seen[case.group.name] = seen.get(case.group.name, 0) + 1
        cases.append(case)
    return cases[:PER_SPEC]


@pytest.mark.parametrize("spec", CATALOG.specs, ids=lambda s: s.op)
def test_every_case_round_trips(spec):
    lost = []
    for case in _sample(spec):
        node = node_of_case(case)
        found = match(spec, node)
        if found.params is None:
            lost.append(f"{case.full_id}: {found.why}")
            continue
        rebuilt = input_shapes(case_for(spec, found.params, found.dtype, inputs=found.inputs))
        assert {k: v for k, v in rebuilt.items()} == {k: v for k, v in input_shapes(case).items()}, case.full_id
    assert not lost, f"{len(lost)} of {len(_sample(spec))} cases lost:\n" + "\n".join(lost[:8])
