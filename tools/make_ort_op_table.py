"""Build harness/data/ort_training_ops.yaml from onnxruntime's training_op_defs.cc.

    git -C onnxruntime show v1.19.2:orttraining/orttraining/core/graph/training_op_defs.cc > defs.cc
    python tools/make_ort_op_table.py defs.cc --tag v1.19.2 > harness/data/ort_training_ops.yaml

Reads each `ONNX_CONTRIB_OPERATOR_SCHEMA(Name)` / `ONNX_OPERATOR_SCHEMA(Name)` builder chain and keeps
the facts: domain, since version, .Input/.Output (name, type, option), .Attr (type, default or
required), .TypeConstraint and AllowUncheckedAttributes. Function bodies, docs and inference
functions are skipped. Schemas that are not gradient or training computation are listed under
`excluded` (EXCLUDED below) rather than described. A second source, OBSERVED below, adds the contrib ops
(onnxruntime/core/graph/contrib_ops/contrib_defs.cc, not training_op_defs.cc) that ORT's gradient builder
writes into real training graphs, each with `source: observed` and the reason it is in the table.
"""
from __future__ import annotations

import argparse
import re
import sys

import yaml

EXCLUDED = {
    "NcclAllReduce", "NcclAllGather", "NcclReduceScatter", "AdasumAllReduce", "Send", "Recv", "MegatronF",
    "MegatronG", "LambOptimizer", "SummaryScalar", "SummaryHistogram", "SummaryMerge", "SummaryText", "Group",
    "PassThrough", "YieldOp", "PythonOp", "PythonOpGrad", "RecordEvent", "WaitEvent", "View",
    "MixedPrecisionScale", "IsFinite", "All", "ReduceAllL2", "BroadcastGradientArgs", "PadAndUnflatten",
    "TritonOp", "GatherND",
}
# Contrib ops of onnxruntime/core/graph/contrib_ops/contrib_defs.cc (not in training_op_defs.cc) that the
# gradient builder writes into real training graphs: appended after the parsed schemas, as written here.
OBSERVED = [
    {"op": "FusedMatMul", "domain": "com.microsoft", "since_version": 1, "kind": "training", "source": "observed",
     "reason": "found in real transformers' training graphs (half of every MatMul gradient: "
               "GetMatMulGradient writes dA = FusedMatMul(dY, B, transB=1), dB = FusedMatMul(A, dY, transA=1)); "
               "schema in onnxruntime/core/graph/contrib_ops/contrib_defs.cc",
     "inputs": [{"name": "A", "type": "T"}, {"name": "B", "type": "T"}], "outputs": [{"name": "Y", "type": "T"}],
     "attributes": {"alpha": {"type": "float", "default": 1.0}, "transA": {"type": "int", "default": 0},
                    "transB": {"type": "int", "default": 0}, "transBatchA": {"type": "int", "default": 0},
                    "transBatchB": {"type": "int", "default": 0}},
     "type_constraints": {"T": ["float16", "float32", "float64", "bfloat16"]}},
]
DOMAINS = {"kMSDomain": "com.microsoft", "kOnnxDomain": ""}
DTYPES = {"float": "float32", "double": "float64"}
ATTR_TYPES = {"INT": "int", "FLOAT": "float", "STRING": "string", "INTS": "ints", "FLOATS": "floats",
              "STRINGS": "strings", "TENSOR": "tensor"}
OPTIONS = {"OpSchema::Optional": "optional", "OpSchema::Variadic": "variadic"}
SCHEMA = re.compile(r"ONNX_(?:CONTRIB_)?OPERATOR_SCHEMA\((\w+)\)")


def skip_literal(text: str, i: int) -> int:
    """Index just past the string or char literal starting at text[i] (raw strings included)."""
    if text.startswith('R"', i):
        delim = text[i + 2:text.index("(", i)]
        return text.index(")" + delim + '"', i) + len(delim) + 2
    quote, i = text[i], i + 1
    while text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def balanced(text: str, i: int) -> int:
    """text[i] is an opening paren: index just past its matching close."""
    depth = 0
    while True:
        c = text[i]
        if c in "\"'" or text.startswith('R"', i):
            i = skip_literal(text, i)
            continue
        if text.startswith("//", i):
            i = text.index("\n", i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


def split_args(inner: str) -> list[str]:
    """Top-level comma-separated arguments of a call."""
    args, start, i, depth = [], 0, 0, 0
    while i < len(inner):
        c = inner[i]
        if c in "\"'" or inner.startswith('R"', i):
            i = skip_literal(inner, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(inner[start:i].strip())
            start = i + 1
        i += 1
    args.append(inner[start:].strip())
    return [a for a in args if a]


def chain(text: str, i: int):
    """(method, args) of the builder chain starting at text[i], until the statement ends."""
    while True:
        m = re.compile(r"(?:\s|//[^\n]*\n|#[^\n]*\n|/\*.*?\*/)*\.(\w+)\(", re.S).match(text, i)
        if not m:
            return
        end = balanced(text, m.end() - 1)
        yield m.group(1), split_args(text[m.end():end - 1])
        i = end


def string(arg: str) -> str:
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', arg))


def dtype(type_str: str) -> str:
    """'tensor(float)' -> 'float32'; 'seq(tensor(double))' -> 'seq(float64)'; a type variable stays."""
    m = re.fullmatch(r"(seq\()?tensor\((\w+)\)\)?", type_str) or re.fullmatch(r"()(\w+)", type_str)
    base = DTYPES.get(m.group(2), m.group(2)) if m else type_str
    return f"seq({base})" if m and m.group(1) else base


def default(expr: str, attr_type: str):
    """The attribute's default, or None when it has none (OPTIONAL_VALUE, `false`)."""
    if expr in ("OPTIONAL_VALUE", "false"):
        return None
    if attr_type == "string":
        return string(expr)
    m = re.fullmatch(r"static_cast<int64_t>\((-?\d+)\)|(-?\d+)", expr)
    if attr_type == "int" and m:
        return int(m.group(1) or m.group(2))
    m = re.fullmatch(r"(-?[\d.]+(?:e-?\d+)?)f?", expr)
    if attr_type == "float" and m:
        return float(m.group(1))
    return expr  # e.g. std::vector<float>(1024, 0.9f): kept as written


def parse_schema(name: str, calls) -> dict:
    entry = {"op": name, "domain": "", "since_version": 1, "kind": "gradient" if "Grad" in name else "training",
             "inputs": [], "outputs": [], "attributes": {}, "type_constraints": {}}
    for method, args in calls:
        if method == "SetDomain":
            entry["domain"] = DOMAINS.get(args[0], string(args[0]))
        elif method == "SinceVersion":
            entry["since_version"] = int(args[0])
        elif method == "AllowUncheckedAttributes":
            entry["allow_unchecked_attributes"] = True
        elif method in ("Input", "Output"):
            formal = {"name": string(args[1]), "type": dtype(string(args[3]))}
            if len(args) > 4 and args[4] in OPTIONS:
                formal["option"] = OPTIONS[args[4]]
            entry[method.lower() + "s"].append(formal)
        elif method == "Attr":
            attr_type = ATTR_TYPES[args[2].rsplit("::", 1)[-1]]
            attr: dict = {"type": attr_type}
            if len(args) < 4:
                attr["required"] = True
            elif (value := default(args[3], attr_type)) is not None:
                attr["default"] = value
            entry["attributes"][string(args[0])] = attr
        elif method == "TypeConstraint":
            types = re.findall(r'"([^"]+)"', args[1]) if args[1].startswith("{") else [args[1].split("::")[-1].rstrip("()")]
            entry["type_constraints"][string(args[0])] = [dtype(t) for t in types]
    return entry


def parse(text: str) -> tuple[list[dict], list[str]]:
    ops, excluded = [], []
    for m in SCHEMA.finditer(text):
        name = m.group(1)
        if name in EXCLUDED:
            excluded.append(name)
        else:
            ops.append(parse_schema(name, chain(text, m.end())))
    return ops, excluded


HEADER = """\
# onnxruntime-training {tag}: schemas of the training ops (facts, not code).
# Source: microsoft/onnxruntime orttraining/orttraining/core/graph/training_op_defs.cc at {tag},
# generated by tools/make_ort_op_table.py (see its docstring to regenerate).
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("defs", help="path to training_op_defs.cc")
    parser.add_argument("--tag", default="v1.19.2")
    args = parser.parse_args(argv)
    with open(args.defs, encoding="utf-8") as f:
        ops, excluded = parse(f.read())
    ops += [entry for entry in OBSERVED if entry["op"] not in {op["op"] for op in ops}]
    table = {"source_file": "orttraining/orttraining/core/graph/training_op_defs.cc", "tag": args.tag,
             "ops": ops, "excluded": excluded}
    sys.stdout.write(HEADER.format(tag=args.tag))
    yaml.safe_dump(table, sys.stdout, sort_keys=False, default_flow_style=None, width=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
