"""The checked-in ORT training-op table, its generator, the spec/table cross-check and `opconform inventory`."""
import json
import shutil
import sys

import numpy as np
import onnx
import pytest
from conftest import REPO

from harness.backends.base import Crashed, Outputs
from harness.backends.ort import OrtBackend
from harness.backends.worker import HandlerError
from harness.cli import main
from harness.data import ORT_TRAINING_OPS, ort_op, ort_training_ops
from harness.run import inventory

sys.path.insert(0, str(REPO / "tools"))
import make_ort_op_table

# Real differences between a spec and the schema table, each checked to still be there (a fix
# to either side makes the test fail until the entry is removed).
KNOWN_DIFFERENCES = {
    # The schema names LogSoftmaxGrad's second input X, but it is the log-softmax output.
    "LogSoftmaxGrad": ["input 1: spec 'Y', schema 'X'"],
    "LogSoftmaxGrad_13": ["input 1: spec 'Y', schema 'X'"],
    # The table's source revision names it inv_std_dev; the forward LayerNormalization's output is
    # inv_std_var. ORT binds inputs by position, so only the name differs.
    "LayerNormalizationGrad": ["input 4: spec 'inv_std_var', schema 'inv_std_dev'"],
    # The LSTM specs use ONNX LSTM's input names and the GRU specs' output names (shared with the C library's
    # contract); ORT binds by position, so only the names differ.
    "LSTMGrad": ["input 3: spec 'sequence_lens', schema 'SL'", "input 4: spec 'initial_h', schema 'Ht0'",
                 "input 5: spec 'initial_c', schema 'Ct0'", "input 8: spec 'IOFC', schema 'iofc'",
                 "input 9: spec 'grad_HAll', schema 'dHAll'", "input 10: spec 'grad_Ht', schema 'dHFinal'",
                 "input 11: spec 'grad_Ct', schema 'dCFinal'"],
    "LSTMTraining": ["input 4: spec 'sequence_lens', schema 'SL'", "input 5: spec 'initial_h', schema 'Ht0'",
                     "input 6: spec 'initial_c', schema 'Ct0'", "output 1: spec 'Ht', schema 'HFinal'",
                     "output 2: spec 'Ct', schema 'CFinal'", "output 4: spec 'IOFC', schema 'iofc'"],
    # The schema's outputs are variadic ('outputs'), the spec states output0 and optional output1..output3 (1 to 4
    # parts); the table's type list all_tensor_types (inventory.TYPE_GROUPS) holds every type the spec lists.
    "SplitTraining": ["outputs: spec has 4, schema 1", "output 0: spec 'output0', schema 'outputs'"],
    # Likewise ConcatTraining's variadic inputs ('inputs'): input0 and optional input1..input3.
    "ConcatTraining": ["inputs: spec has 4, schema 1", "input 0: spec 'input0', schema 'inputs'"],
    # The schema's optional last input `bias`, added to d_logits (what ORT's own fusions write), is not stated: no
    # input role expresses a tensor that is neither the forward op's nor an incoming gradient (the spec says so).
    "SoftmaxCrossEntropyLossInternalGrad": ["inputs: spec has 5, schema 6"],
    # The schema types updated_flag T2 (int64, step's type); ORT's kernel writes a bool and its session refuses a
    # model that declares int64 ("Type (tensor(int64)) of output arg (updated_flag) ... does not match expected type
    # (tensor(bool))"): the spec states what runs.
    "AdamWOptimizer": ["output 0 (updated_flag): dtypes ['bool'] not in the schema's ['int64']"],
}


def test_table_loads_with_the_fields_every_entry_needs():
    ops = ort_training_ops()
    assert len(ops) > 40
    for name, entry in ops.items():
        assert entry["kind"] in ("gradient", "training"), name
        assert entry["domain"] in ("", "com.microsoft"), name
        for formal in entry["inputs"] + entry["outputs"]:
            assert formal.get("option", "single") in ("single", "optional", "variadic"), name
            assert formal["type"] in entry["type_constraints"] or "(" not in formal["type"], (name, formal)
    assert ops["MaxPoolGrad"]["domain"] == "" and ops["MaxPoolGrad"]["since_version"] == 9
    assert ops["SoftmaxGrad_13"]["attributes"] == {"axis": {"type": "int", "default": -1}}
    assert ops["DropoutGrad"]["type_constraints"]["T2"] == ["bool"]


def test_ort_op_names_a_missing_op():
    with pytest.raises(KeyError, match="'NoSuchGrad' is not in ort_training_ops.yaml"):
        ort_op("NoSuchGrad")


def test_table_header_says_source_tag_and_how_to_regenerate():
    head = ORT_TRAINING_OPS.read_text(encoding="utf-8")[:2500]
    assert "training_op_defs.cc" in head and "v1.19.2" in head and "tools/make_ort_op_table.py" in head


def test_every_spec_agrees_with_the_table(catalog):
    found = {}
    for spec in catalog.specs:
        if spec.subject == "training_graph":  # a standard op's gradient as the builder writes it: the builder table's
            assert ort_training_ops().get(spec.op) is None, spec.op
            continue
        entry = ort_training_ops().get(spec.op)
        assert entry is not None, f"{spec.op} has a spec but is not in the table"
        # the table writes the default domain as '', specs as ai.onnx (their directory name)
        assert (entry["domain"] or "ai.onnx") == spec.domain and entry["since_version"] == spec.since_version, spec.op
        diffs = inventory.schema_differences(spec, entry)
        if diffs:
            found[spec.op] = diffs
    assert found == KNOWN_DIFFERENCES


def test_cross_check_names_each_kind_of_difference(catalog):
    spec = next(s for s in catalog.specs if s.op == "SoftmaxGrad_13")
    entry = json.loads(json.dumps(ort_op("SoftmaxGrad_13")))
    entry["inputs"][1]["name"] = "Z"
    entry["type_constraints"]["T"] = ["float32"]
    entry["attributes"]["axis"]["default"] = 1
    entry["attributes"]["extra"] = {"type": "int"}
    entry["outputs"].append({"name": "dW", "type": "T"})
    diffs = inventory.schema_differences(spec, entry)
    assert "input 1: spec 'Y', schema 'Z'" in diffs
    assert any(d.startswith("input 0 (dY): dtypes ['bfloat16', 'float16', 'float64'] not in") for d in diffs)
    assert "attribute 'axis': spec default -1, schema 1" in diffs
    assert "attribute 'extra' of the schema is not declared" in diffs
    assert "outputs: spec has 1, schema 2" in diffs


TOY = r'''
  ONNX_CONTRIB_OPERATOR_SCHEMA(ToyGrad)
      .SetDomain(kMSDomain)
      .SinceVersion(1)
      .SetDoc(R"DOC(a (doc) with "quotes" and ; )DOC")
      .Attr("alpha", "a " "b", AttributeProto::FLOAT, 1.5f)
      .Attr("axis", "x", AttributeProto::INT, static_cast<int64_t>(-1))
      .Attr("mode", "x", AttributeProto::STRING, std::string("mean"))
      .Attr("k", "x", AttributeProto::INTS)
      .Attr("seed", "x", AttributeProto::INT, OPTIONAL_VALUE)
      .AllowUncheckedAttributes()
      .Input(0, "dY", "Gradient (of) Y", "T")
      .Input(1, "mask", "m", "tensor(bool)", OpSchema::Optional)
      .Output(0, "dX", "g", "T", OpSchema::Variadic, false)
      .TypeConstraint("T", {"tensor(float16)", "tensor(float)", "tensor(double)"}, "floats")
      .TypeAndShapeInferenceFunction([](InferenceContext& ctx) { if (a) { f(ctx, ")"); } });

  ONNX_CONTRIB_OPERATOR_SCHEMA(ToyPoolGrad)
      .SinceVersion(9)
      .Input(0, "dY", "d", "T")
#ifdef _DEBUG
      .Output(0, "dX", "d", "T")
#endif
      .TypeConstraint("T", OpSchema::all_tensor_types(), "any");
  ONNX_CONTRIB_OPERATOR_SCHEMA(Send)
      .SetDomain(kMSDomain);
'''


def test_generator_reads_the_builder_chain():
    ops, excluded = make_ort_op_table.parse(TOY)
    assert excluded == ["Send"]
    toy, pool = ops
    assert toy == {
        "op": "ToyGrad", "domain": "com.microsoft", "since_version": 1, "kind": "gradient",
        "inputs": [{"name": "dY", "type": "T"}, {"name": "mask", "type": "bool", "option": "optional"}],
        "outputs": [{"name": "dX", "type": "T", "option": "variadic"}],
        "attributes": {"alpha": {"type": "float", "default": 1.5}, "axis": {"type": "int", "default": -1},
                       "mode": {"type": "string", "default": "mean"}, "k": {"type": "ints", "required": True},
                       "seed": {"type": "int"}},
        "type_constraints": {"T": ["float16", "float32", "float64"]}, "allow_unchecked_attributes": True}
    assert pool["domain"] == "" and pool["since_version"] == 9
    assert pool["outputs"] == [{"name": "dX", "type": "T"}]
    assert pool["type_constraints"] == {"T": ["all_tensor_types"]}


class Sequence(list):
    """Replies to successive calls for the same op."""


class FakeOrt:
    """Stands in for OrtBackend: spec'd ops run or crash by name; table models reply by op name."""

    def __init__(self, replies):
        self.replies = replies
        self.worker = self

    def run(self, request):
        return self.replies[request.spec.op]

    def call(self, request, timeout=None):
        import onnx

        op = onnx.load_from_string(request["model"]).graph.node[0].op_type
        reply = self.replies[op]
        if isinstance(reply, Sequence):  # one reply per attempt
            reply = reply.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_rows_classify_each_outcome_and_count_coverage(catalog):
    fake = FakeOrt({
        "ReluGrad": Outputs([None]),
        "TanhGrad": Crashed(signal="SIGSEGV"),
        "BitmaskDropoutGrad": HandlerError("OrtError", "session|NotImplemented|Could not find an implementation for BitmaskDropoutGrad(1)"),
        "ConvTransposeGrad": HandlerError("OrtError", "run|InvalidArgument|bad values"),
        "SoftmaxDropoutGrad": [],
        "BiasSoftmaxDropout": HandlerError("OrtError", "session|Fail|Dimension mismatch"),
    })
    rows = inventory.rows(catalog.specs, fake, only=list(fake.replies))
    by_op = {r.op: r for r in rows}
    assert (by_op["ReluGrad"].cpu, by_op["ReluGrad"].spec) == (inventory.RUNS, "com.microsoft::ReluGrad@1")
    assert by_op["TanhGrad"].cpu == inventory.CRASHED
    assert by_op["BitmaskDropoutGrad"].cpu == inventory.NO_KERNEL and by_op["BitmaskDropoutGrad"].spec == ""
    assert by_op["ConvTransposeGrad"].cpu == inventory.REGISTERED  # the session was built; only the values were refused
    assert by_op["SoftmaxDropoutGrad"].cpu == inventory.REGISTERED
    assert by_op["BiasSoftmaxDropout"].cpu == inventory.FAILED
    assert inventory.covered(rows) == (1, 3)
    text = inventory.format_text(rows)
    assert "1 of 3 CPU ops covered (6 ops in the table)" in text
    assert "BitmaskDropoutGrad: no CPU kernel: Could not find an implementation" in text
    markdown = inventory.format_markdown(rows)
    assert "| com.microsoft | BitmaskDropoutGrad | gradient | no | - |" in markdown
    assert "| com.microsoft | TanhGrad | gradient | crashed | yes |" in markdown
    assert json.loads(inventory.format_json(rows))["covered"] == 1


def test_sequence_inputs_are_fed_lists_of_tensors():
    """An optimizer's parameter list (seq(float32)) is a sequence input fed a list, as ORT's Python API takes it."""
    model_bytes, feeds, fetches = inventory.table_model(ort_op("AdamWOptimizer"))
    model = onnx.load_from_string(model_bytes)
    kinds = {i.name: i.type.WhichOneof("value") for i in model.graph.input}
    assert kinds == {"lr": "tensor_type", "step": "tensor_type", "weights": "sequence_type", "gradients": "sequence_type",
                     "momentums_1": "sequence_type", "momentums_2": "sequence_type"}
    assert isinstance(feeds["weights"], list) and len(feeds["weights"]) == inventory.SEQUENCE_LENGTH
    assert feeds["weights"][0].dtype == np.float32 and feeds["lr"].shape == () and feeds["step"].dtype == np.int64


@pytest.mark.parametrize("op", ["AdamWOptimizer", "SGDOptimizerV2", "InplaceClipGradNorm"])
def test_sequence_ops_run_on_cpu(op):
    pytest.importorskip("onnxruntime")
    backend = OrtBackend()
    try:
        assert inventory._table_status(backend, ort_op(op), True, False) == (inventory.REGISTERED, "ran with placeholder inputs")
    finally:
        backend.close()


def test_inventory_on_ort_runs_specs_and_table_models_with_int64_shapes(capsys, tmp_path):
    """GatherGrad's CPU kernel takes an int64 shape only: the spec's case runs, and so does the table's
    one-node model (int64 where int32 or int64 is allowed); an earlier int32 placeholder read 'no kernel'."""
    pytest.importorskip("onnxruntime")
    assert main(["inventory", "--ops", "ReluGrad,GatherGrad", "--json"]) == 0
    rows = {r["op"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["ReluGrad"]["cpu_yes"] and rows["ReluGrad"]["spec"] == "com.microsoft::ReluGrad@1"
    assert rows["GatherGrad"]["cpu"] == inventory.RUNS and rows["GatherGrad"]["spec"] == "com.microsoft::GatherGrad@1"
    (tmp_path / "specs").mkdir()
    shutil.copytree(REPO / "specs" / "_defaults", tmp_path / "specs" / "_defaults")
    assert main(["inventory", "--specs", str(tmp_path / "specs"), "--no-builtin-specs", "--ops", "GatherGrad", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["cpu"] == inventory.REGISTERED and row["spec"] == "", row


def test_table_models_try_int32_when_int64_has_no_kernel(catalog):
    no_kernel = HandlerError("OrtError", "session|NotImplemented|Could not find an implementation for SliceGrad(1)")
    fake = FakeOrt({"SliceGrad": Sequence([no_kernel, []]), "GatherNDGrad": Sequence([no_kernel, []])})
    # no specs: the table's one-node models speak for every op (these two have specs now)
    by_op = {r.op: r for r in inventory.rows([], fake, only=["SliceGrad", "GatherNDGrad"])}
    assert by_op["SliceGrad"].cpu == inventory.REGISTERED  # Tind allows int32 and int64: the second try ran
    assert by_op["GatherNDGrad"].cpu == inventory.NO_KERNEL  # int64 only: nothing else to try
    entry = ort_training_ops()["SliceGrad"]
    types = {i.name: i.type.tensor_type.elem_type for i in __import__("onnx").load_from_string(
        inventory.table_model(entry)[0]).graph.input}
    assert types["starts"] == 7 and types["shape"] == 7  # INT64
    types = {i.name: i.type.tensor_type.elem_type for i in __import__("onnx").load_from_string(
        inventory.table_model(entry, integer="int32")[0]).graph.input}
    assert types["starts"] == 6 and types["shape"] == 7  # Tind int32; I allows int64 only


def test_placeholder_model_variants_are_tried_until_one_answers(catalog):
    refused = HandlerError("OrtError", "session|Fail|[ShapeInferenceError] Input tensor must have rank 3")
    fake = FakeOrt({"ConvTransposeGrad": Sequence([refused, Crashed(signal="SIGSEGV"), []]),
                    "BatchNormInternal": Sequence([refused, refused, refused])})
    by_op = {r.op: r for r in inventory.rows([], fake, only=["ConvTransposeGrad", "BatchNormInternal"])}
    assert by_op["ConvTransposeGrad"].cpu == inventory.REGISTERED
    assert by_op["ConvTransposeGrad"].detail.endswith("(inputs declared without shapes)")
    assert by_op["BatchNormInternal"].cpu == inventory.FAILED and "rank 3" in by_op["BatchNormInternal"].detail
