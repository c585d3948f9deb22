"""Checked-in facts the harness reads: ort_training_ops.yaml, the training ops' schemas of
onnxruntime-training 1.19.2 (made by tools/make_ort_op_table.py; see the file's header)."""
from __future__ import annotations

import functools
from pathlib import Path

import yaml

ORT_TRAINING_OPS = Path(__file__).with_name("ort_training_ops.yaml")


@functools.lru_cache(maxsize=None)
def ort_training_ops() -> dict[str, dict]:
    """op name -> its table entry (op, domain, since_version, kind, inputs, outputs, attributes,
    type_constraints, ...), in the table's order."""
    table = yaml.safe_load(ORT_TRAINING_OPS.read_text(encoding="utf-8"))
    return {entry["op"]: entry for entry in table["ops"]}


def ort_op(name: str) -> dict:
    """The table entry for `name`; KeyError with the known names' count when it is not there."""
    ops = ort_training_ops()
    if name not in ops:
        raise KeyError(f"{name!r} is not in {ORT_TRAINING_OPS.name} ({len(ops)} ops; see `opconform inventory`)")
    return ops[name]
