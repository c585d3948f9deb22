"""Case expansion: a spec's groups become cases with stable ids and seeds.

A group's `params` is a Cartesian product in YAML order; a list of dicts is a zipped axis whose keys
vary together. A case id reads `group/key=value;key=value`; its seed hashes the spec id, the case id
and the dtype only, so adding or removing a case never changes another case's data.
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from harness.core.shapes import OMIT, OUTPUTS, STEPS, declared_output_shapes
from harness.spec.model import Group, InvalidGroup, Spec
from harness.spec.vocabulary import TIERS

__all__ = ["Case", "case_for", "case_id", "expand", "group_params", "stable_seed"]


@dataclass(frozen=True)
class Case:
    spec: Spec
    group: Group
    dtype: str
    id: str
    params: dict[str, Any] = field(hash=False)

    @property
    def valid(self) -> bool:
        return not isinstance(self.group, InvalidGroup)

    @property
    def full_id(self) -> str:
        """Unique within a spec: the dtype and the case id."""
        return f"{self.dtype}-{self.id}"

    @property
    def node_attributes(self) -> dict[str, Any]:
        """The attributes written on the node; attributes left out fall back to their defaults."""
        written = {k: v for k, v in self.params.items() if k in self.spec.attributes}
        if isinstance(self.group, InvalidGroup):
            written.update(self.group.attributes)
        return written

    @property
    def attributes(self) -> dict[str, Any]:
        """The node's attributes, plus the shapes the model declares for outputs the op cannot size from its
        inputs (`dX_shape`, Spec.declared_shapes): backends write those on the graph output, never on the node."""
        written = self.node_attributes
        if self.spec.declared_shapes():
            written.update(declared_output_shapes(self))
        return written

    @property
    def omitted_inputs(self) -> tuple[str, ...]:
        return tuple(self.params.get(OMIT, ()))

    def input_dtype(self, inp) -> str:
        """An input's dtype: a case param named after its type variable picks it (`Tind: [int32, int64]`, for a
        variable the case dtype does not bind); otherwise Spec.dtype_of."""
        chosen = self.params.get(inp.type)
        return chosen if chosen is not None and inp.type != self.spec.main_type else self.spec.dtype_of(inp, self.dtype)

    @property
    def steps(self) -> int:
        """How many calls the case runs (a stateful spec's `steps` param; 1 otherwise)."""
        return int(self.params.get(STEPS, 1))

    @property
    def requested_outputs(self) -> tuple[str, ...]:
        return tuple(self.params.get(OUTPUTS) or [o.name for o in self.spec.outputs])

    def seed(self, global_seed: int = 0) -> int:
        return stable_seed(self.spec.id, self.id, self.dtype, self.spec.cases.seed, global_seed)


def stable_seed(*parts) -> int:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        if not value:
            return "scalar"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return "x".join(map(str, value))
        return ",".join(format_value(v) for v in value)
    return str(value)


def case_id(group: str, params: dict[str, Any]) -> str:
    body = ";".join(f"{k}={format_value(v)}" for k, v in params.items())
    return f"{group}/{body}" if body else group


def group_params(group: Group) -> list[dict[str, Any]]:
    """The Cartesian product of a group's params, zipped axes merged in place."""
    axes = []
    for key, values in group.params.items():
        if values and all(isinstance(v, dict) for v in values):
            axes.append(list(values))
        else:
            axes.append([{key: v} for v in values])
    return [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)]


def runs_in(group: Group, tier: str | None) -> bool:
    return tier is None or TIERS.index(group.tier) <= TIERS.index(tier)


def expand(spec: Spec, tier: str | None = None) -> list[Case]:
    """Every case of the spec that the tier runs (tier None: all), in spec order, dtype-major per group."""
    cases = []
    for group in [*spec.cases.groups, *spec.cases.invalid]:
        if not runs_in(group, tier):
            continue
        # Invalid inputs are about shapes and attributes: one dtype is enough unless the group says otherwise.
        dtypes = group.dtypes or (spec.cases.dtypes[:1] if isinstance(group, InvalidGroup) else spec.cases.dtypes)
        for dtype in dtypes:
            for params in group_params(group):
                cases.append(Case(spec, group, dtype, case_id(group.name, params), params))
    return cases


def case_for(spec: Spec, params: dict[str, Any], dtype: str, name: str, inputs: dict | None = None) -> Case:
    """The one case a group `name` with these params (a single zipped entry) and input generators expands to: a
    configuration stated outside the spec's own groups (a real graph's node, a bench model's layer)."""
    group = Group(name=name, dtypes=[dtype], params={"config": [params]}, inputs=inputs or {})
    return Case(spec, group, dtype, case_id(name, params), params)
