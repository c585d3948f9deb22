"""`opconform mutate`: how strong is a spec? Wrong outputs it must catch, through the normal judging.

Each valid case of the selected ops runs on the reference backend; then one output at a time is
replaced by a mutant from a fixed catalogue, and the case is judged exactly as a backend's outputs
would be (harness.run.engine.judge: dtype, shape, special values, tolerance and reduction allowance):
- `ulp x k`: one element off by k ulp (k = 1, 2, 4, ... 2^20), the element with the largest magnitude;
- `scale 1+c*u`: every element scaled by (1 + c * u), u the dtype's unit roundoff (c = 1, 4, ... 2^16);
- structural: one sign flipped, one NaN, one inf, two different elements swapped, the output
  transposed (its data laid out transposed in the same shape) or shifted by one element, all zeros;
- each of the spec's `alternative_semantics`, rounded to the case dtype.
A mutant's size in a case is max |m - r| / allowed over the elements it changed (r the float64
reference, allowed the tolerance the judging uses there); the structural ones count as large (inf).
A mutant that no case of an op catches survives: with a size above SURVIVOR_LIMIT it is a weakness
of that spec (its cases cannot see that kind of error), and `opconform mutate` exits 1.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from harness.backends.base import Backend, Outputs, Request
from harness.backends.reference import ReferenceBackend
from harness.core import dtypes, sequences
from harness.core.cases import expand
from harness.core.compare import judged_expected
from harness.core.evaluate import evaluate
from harness.core.status import Status
from harness.core.tolerance import allowed_error
from harness.run.engine import Prepared, judge, prepare, request_for

SURVIVOR_LIMIT = 2.0  # a surviving mutant larger than this many tolerances is a weakness of the spec
ULP_STEPS = tuple(2 ** i for i in range(0, 21, 2))  # 1, 4, 16, ... 2^20
SCALE_STEPS = tuple(2 ** i for i in range(0, 17, 2))  # 1, 4, 16, ... 2^16
STRUCTURAL = ("sign flipped", "one NaN", "one inf", "two swapped", "transposed", "shifted by one", "all zeros")
LARGE = math.inf


@dataclass
class _Replay(Backend):
    """Returns the outputs it is given: the judging sees a mutant as any backend's answer."""
    values: list = field(default_factory=list)

    def __post_init__(self):
        self.name = "mutant"

    def run(self, request: Request):
        return Outputs(self.values)


def _largest(v: np.ndarray) -> int | None:
    """Flat index of the finite element with the largest magnitude (None when there is none)."""
    flat = v.reshape(-1).astype(np.float64)
    finite = np.isfinite(flat)
    if not finite.any():
        return None
    return int(np.argmax(np.where(finite, np.abs(flat), -1.0)))


def _ulp(v: np.ndarray, k: int, dtype: str):
    i = _largest(v)
    if i is None or dtype not in dtypes.FLOATS:
        return None
    bits = np.dtype(f"u{v.dtype.itemsize}")
    out = np.array(v, copy=True).reshape(-1)
    raw = out.view(bits)
    limit = np.iinfo(bits).max
    if int(raw[i]) + k > limit:
        return None
    raw[i] = raw[i] + bits.type(k)  # away from zero, k representable steps
    with np.errstate(all="ignore"):
        finite = np.isfinite(out[i].astype(np.float64))
    if not finite:
        return None
    return out.reshape(v.shape)


def _scale(v: np.ndarray, c: int, dtype: str):
    if dtype not in dtypes.FLOATS:
        return None
    u = float(dtypes.finfo(dtype).eps) / 2
    with np.errstate(all="ignore"):
        return (v.astype(np.float64) * (1 + c * u)).astype(v.dtype)


def _structural(name: str, v: np.ndarray):
    flat = np.array(v, copy=True).reshape(-1)
    i = _largest(v)
    if name == "all zeros":
        return np.zeros_like(v)
    if name == "shifted by one":
        return None if flat.size < 2 else np.roll(flat, 1).reshape(v.shape)
    if name == "transposed":
        if v.ndim < 2:
            return None
        return np.ascontiguousarray(np.swapaxes(v, -1, -2)).reshape(v.shape)
    if i is None:
        return None
    if v.dtype == np.bool_:  # a mask: one element flipped is its only single-element mutant
        if name != "sign flipped":
            return None
        flat[i] = not flat[i]
    elif name == "sign flipped":
        if flat[i] == 0:  # the largest is a zero (an all-zero output): -0 equals it, no judge can tell them apart
            return None
        flat[i] = -flat[i]
    elif name in ("one NaN", "one inf") and v.dtype.kind in "iu":  # an integer (a step count) holds neither
        return None
    elif name == "one NaN":
        flat[i] = np.nan
    elif name == "one inf":
        flat[i] = np.inf if flat[i].astype(np.float64) >= 0 else -np.inf
    elif name == "two swapped":
        as64 = flat.astype(np.float64)
        finite = np.flatnonzero(np.isfinite(as64))
        j = finite[np.argmin(as64[finite])]
        if as64[j] == as64[i]:
            return None
        flat[i], flat[j] = flat[j], flat[i]
    return flat.reshape(v.shape)


def _changed(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    bits = np.dtype(f"u{v.dtype.itemsize}")
    return (np.ascontiguousarray(m).view(bits) != np.ascontiguousarray(v).view(bits)).reshape(v.shape)


def _size(m: np.ndarray, expected: np.ndarray, allowed: np.ndarray, structural: bool) -> float:
    """max |m - r| / allowed over the changed elements; large for structural mutants and non-finite values."""
    if structural:
        return LARGE
    a, r = m.astype(np.float64), expected
    with np.errstate(all="ignore"):
        err = np.abs(a - r)
        ratio = np.where(allowed > 0, err / allowed, np.where(err > 0, np.inf, 0.0))
    return float(np.nan_to_num(ratio, nan=np.inf, posinf=np.inf).max()) if ratio.size else 0.0


def _expected(prepared: Prepared) -> list[np.ndarray]:
    """The reference outputs of a case prepare() built: a valid case without a problem has them."""
    if prepared.expected is None:
        raise ValueError(f"case {prepared.case.id} has no reference outputs ({prepared.problem or 'an invalid case'})")
    return prepared.expected


def allowed_for(prepared: Prepared, tolerance, index: int) -> np.ndarray:
    """The allowed error the judging uses for one output of a prepared case (its reduction allowance included)."""
    spec, dtype = prepared.case.spec, prepared.case.dtype
    expected = judged_expected(sequences.flat(_expected(prepared)[index]), spec.dtype_of(spec.outputs[index], dtype))
    return allowed_error(tolerance, expected, prepared.allowance[index] if prepared.allowance else None)


def mutants(spec, dtype: str, v: np.ndarray, prepared: Prepared, index: int):
    """(name, family, mutated output or None) for one output of one case."""
    for k in ULP_STEPS:
        yield f"ulp x {k}", "ulp", _ulp(v, k, dtype)
    for c in SCALE_STEPS:
        yield f"scale 1+{c}u", "scale", _scale(v, c, dtype)
    for name in STRUCTURAL:
        yield name, "structural", _structural(name, v)
    for alt in spec.alternative_semantics:
        try:
            with np.errstate(all="ignore"):
                values = evaluate(spec.model_copy(update={"reference": alt.reference}), prepared.inputs,
                                  prepared.case.attributes)
                value = sequences.flat(values[index])  # a sequence output is mutated joined (v is flat too)
                mutated = value.astype(v.dtype) if value.shape == v.shape else None
        except Exception:  # noqa: BLE001 - an alternative that cannot take this case's inputs does not apply to it
            mutated = None
        yield f"alternative: {alt.name}", "alternative", mutated


@dataclass
class Tally:
    applicable: int = 0
    caught: int = 0
    survivor_size: float = 0.0  # the largest size among the cases that did not catch it
    smallest_caught_ulp: int | None = None


def mutate(catalog, ops: list[str] | None = None, tier: str = "ci", seed: int = 0, log=None) -> dict:
    """The figures `opconform mutate` prints and writes: per op, dtype and group, and the survivors per op."""
    reference = ReferenceBackend()
    replay = _Replay()
    groups: dict = defaultdict(lambda: defaultdict(Tally))  # (op, dtype, group) -> mutant -> Tally
    per_op: dict = defaultdict(lambda: defaultdict(Tally))  # op -> (mutant, output) -> Tally
    for spec in catalog.select(ops):
        if log:
            log(f"  {spec.op}")
        for case in expand(spec, tier):
            if not case.valid:
                continue
            prepared = prepare(case, seed)
            if prepared.problem:
                continue
            tolerance = catalog.tolerance(spec, case.dtype)
            outcome = reference.run(request_for(prepared))
            if not isinstance(outcome, Outputs):
                continue
            for index, (out, returned) in enumerate(zip(spec.outputs, outcome.values)):
                # a sequence output is mutated as its tensors joined, and judged split back into them
                v = None if returned is None else sequences.flat(returned)
                if v is None or v.size == 0:
                    continue
                expected = sequences.flat(_expected(prepared)[index])
                allowed = allowed_for(prepared, tolerance, index)
                for name, family, m in mutants(spec, case.dtype, v, prepared, index):
                    if m is None:
                        continue
                    changed = _changed(m, v)
                    if not changed.any():
                        continue  # rounding undid it: nothing to catch
                    size = _size(m[changed], expected[changed], np.broadcast_to(allowed, v.shape)[changed],
                                 family == "structural")
                    if sequences.is_seq(returned):
                        m = sequences.unflat(m, sequences.shape_of(returned))
                    replay.values = [m if i == index else value for i, value in enumerate(outcome.values)]
                    caught = judge(prepared, replay, tolerance, diagnose_failures=False).status != Status.PASS
                    for tally in (groups[(spec.op, case.dtype, case.group.name)][name], per_op[spec.op][(name, out.name)]):
                        tally.applicable += 1
                        tally.caught += caught
                        if not caught:
                            tally.survivor_size = max(tally.survivor_size, size)
                    if caught and family == "ulp":
                        k = int(name.split()[-1])
                        g = groups[(spec.op, case.dtype, case.group.name)]["ulp"]
                        g.smallest_caught_ulp = k if g.smallest_caught_ulp is None else min(g.smallest_caught_ulp, k)
    return _figures(groups, per_op, tier)


def _figures(groups, per_op, tier) -> dict:
    rows = []
    for (op, dtype, group), by_mutant in sorted(groups.items()):
        ulp = by_mutant.pop("ulp", Tally())
        rows.append({"op": op, "dtype": dtype, "group": group,
                     "mutants": len(by_mutant), "caught": sum(1 for t in by_mutant.values() if t.caught),
                     "smallest_caught_ulp": ulp.smallest_caught_ulp,
                     "missed": sorted(n for n, t in by_mutant.items() if not t.caught)})
    survivors = []
    for op, by_key in sorted(per_op.items()):
        for (name, output), t in sorted(by_key.items()):
            if t.applicable and not t.caught:
                survivors.append({"op": op, "output": output, "mutant": name, "cases": t.applicable,
                                  "size": None if math.isinf(t.survivor_size) else t.survivor_size,
                                  "weakness": t.survivor_size > SURVIVOR_LIMIT})
    ops = sorted(per_op)
    summary = []
    for op in ops:
        mine = [s for s in survivors if s["op"] == op]
        sizes = [s["size"] for s in mine if s["size"] is not None]
        summary.append({"op": op, "mutants": len(per_op[op]), "caught": sum(1 for t in per_op[op].values() if t.caught),
                        "survivors": len(mine), "largest_survivor": max(sizes, default=None) if
                        not any(s["size"] is None for s in mine) else "large",
                        "weaknesses": sum(s["weakness"] for s in mine)})
    return {"tier": tier, "limit": SURVIVOR_LIMIT, "ops": summary, "groups": rows, "survivors": survivors}


def format_table(figures: dict) -> str:
    lines = [f"{'op':<20} {'mutants':>7} {'caught':>6} {'survive':>7} {'largest survivor':>17} {'weak':>4}"]
    for row in figures["ops"]:
        largest = row["largest_survivor"]
        shown = "-" if largest is None else (largest if isinstance(largest, str) else f"x{largest:.3g}")
        lines.append(f"{row['op']:<20} {row['mutants']:>7} {row['caught']:>6} {row['survivors']:>7} {shown:>17} "
                     f"{row['weaknesses']:>4}")
    for s in figures["survivors"]:
        if s["weakness"]:
            size = "large" if s["size"] is None else f"x{s['size']:.3g}"
            lines.append(f"  WEAKNESS {s['op']} {s['output']}: '{s['mutant']}' ({size} of the tolerance) survives "
                         f"all {s['cases']} case(s) it applies to")
    return "\n".join(lines)


def weaknesses(figures: dict) -> list[dict]:
    return [s for s in figures["survivors"] if s["weakness"]]

