"""The builder table of `opconform inventory` (harness.run.builder_table): ORT's gradient builder asked for a
few forward ops in the isolated worker, the spec each row maps to, and what a crash or an error becomes."""
import importlib.util

import pytest

from harness.backends.base import Crashed, TimedOut
from harness.backends.worker import HandlerError
from harness.run import builder_table as bt

pytestmark = pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")


@pytest.fixture(scope="module")
def answers():
    """The builder's answers for five ops at every opset (facts of onnxruntime-training 1.19.2), asked afresh."""
    probes = bt.plan(["Gemm", "MatMul", "Add", "Einsum", "CumSum"])
    prober = bt.Prober(timeout=60)
    try:
        return bt.probe_all(probes, prober, use_cache=False)
    finally:
        prober.close()


@pytest.mark.parametrize("key", ["ai.onnx::Gemm@13", "ai.onnx::Gemm@11", "ai.onnx::MatMul@13", "ai.onnx::Add@14",
                                 "ai.onnx::Add@7"])
def test_the_builder_differentiates(answers, key):
    status, detail = answers[key]
    assert status == bt.GRADIENT, (key, detail)


@pytest.mark.parametrize("key", ["ai.onnx::Einsum@12", "ai.onnx::CumSum@14", "ai.onnx::CumSum@11"])
def test_the_builder_has_no_gradient_for(answers, key):
    status, detail = answers[key]
    assert status == bt.NO_GRADIENT and "has not been registered" in detail, (key, detail)


def test_gemm_before_opset_11_writes_an_invalid_graph(answers):
    # the builder writes Gemm nodes without C, which Gemm before 11 requires: a graph that does not resolve
    assert answers["ai.onnx::Gemm@9"][0] == bt.GRADIENT_INVALID


def test_every_default_domain_version_up_to_21_is_probed():
    keys = {p.key for p in bt.plan(["ReduceSum", "Split"])}
    assert {"ai.onnx::ReduceSum@1", "ai.onnx::ReduceSum@11", "ai.onnx::ReduceSum@13"} <= keys
    assert {"ai.onnx::Split@13", "ai.onnx::Split@18"} <= keys
    assert all(int(k.rsplit("@", 1)[1]) <= bt.MAX_OPSET for k in keys)


def test_rewrites_are_probed_through_generate_artifacts():
    (bn,) = [p for p in bt.plan(["BatchNormalization"]) if p.via == "generate_artifacts"]
    assert bn.wrt == ["in_scale", "in_B"] and bn.model


@pytest.fixture(scope="module")
def few_specs():
    """Three specs with a forward op, loaded alone (fast, and whatever the other specs hold)."""
    from harness.run.catalog import load

    return load(ops=["MulGradient", "ReluGrad", "BatchNormalizationGrad"]).specs


def test_rows_map_to_the_covering_spec(few_specs):
    index, table = bt.forward_specs(few_specs), bt.probe_file()
    spec, how = bt.coverage("ai.onnx", "Mul", 14, index, table)
    assert spec == "ai.onnx::MulGradient@14" and "this version" in how  # a training-graph spec
    spec, how = bt.coverage("ai.onnx", "Relu", 14, index, table)
    assert spec == "com.microsoft::ReluGrad@1"  # a kernel spec whose forward op is Relu
    spec, how = bt.coverage("ai.onnx", "Relu", 6, index, table)  # Relu-6 has Relu-14's inputs and attributes
    assert spec == "com.microsoft::ReluGrad@1" and "same inputs" in how
    spec, how = bt.coverage("ai.onnx", "Mul", 6, index, {})  # Mul-6 has the broadcast attribute: another form
    assert spec == "" and "no spec of this form" in how and "MulGradient" in how
    spec, how = bt.coverage("ai.onnx", "Mul", 6, index, table)  # the probe file's reason replaces that
    assert spec == "" and "broadcast" in how and "MulGradient" in how
    spec, _ = bt.coverage("ai.onnx", "BatchNormalization", 15, index, table)  # the rewrite's op: BatchNormInternal
    assert spec == "com.microsoft::BatchNormalizationGrad@1"


def test_an_op_without_a_spec_gets_a_reason():
    table = {"reasons": {"com.microsoft::MegatronF": "a distributed-training op"}}
    assert bt.coverage("com.microsoft", "MegatronF", 1, {}, table) == ("", "a distributed-training op")
    assert bt.coverage("ai.onnx", "Einsum", 12, {}, {}) == ("", "no spec yet")


class CrashingWorker:
    def __init__(self, reply):
        self.reply, self.calls = reply, 0

    def call(self, request, timeout=None):
        self.calls += 1
        return self.reply

    def close(self):
        pass


@pytest.mark.parametrize("reply", [Crashed("SIGSEGV", "segfault in the builder"), TimedOut(60)])
def test_a_crashing_probe_is_a_result(reply):
    probes = bt.plan(["Abs", "Einsum"])
    prober = bt.Prober()
    worker = CrashingWorker(reply)
    prober._workers[bt.HANDLER] = worker
    answers = bt.probe_all(probes, prober, use_cache=False)
    assert worker.calls == len(probes)  # every probe asked: the crash ended none but its own
    assert {status for status, _ in answers.values()} == {bt.CRASHED}
    assert all(detail.startswith("probe crashed") for _, detail in answers.values())


def test_classify():
    registered = {"ok": False, "message": "RuntimeError: /onnxruntime_src/orttraining/orttraining/core/graph/"
                  "gradient_builder_registry.cc:29 onnxruntime::training::GradientDef f(const Node*) gradient_builder "
                  "!= nullptr was false. The gradient builder has not been registered: Einsum for node forward"}
    status, detail = bt.classify(registered)
    assert status == bt.NO_GRADIENT and detail.startswith("RuntimeError: gradient_builder != nullptr was false. The")
    assert bt.classify({"ok": True, "nodes": ["Identity", "Identity"]}) == (bt.GRADIENT, "writes Identity")
    assert bt.classify({"ok": False, "message": "Node (forward) Op (X) [ShapeInferenceError] rank"})[0] == bt.FAILED
    assert bt.classify(HandlerError("ValueError", "boom"))[0] == bt.FAILED


def test_the_cache_answers_the_second_time(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("OPCONFORM_NO_CACHE", raising=False)
    probes = bt.plan(["Abs"])
    worker = CrashingWorker({"ok": True, "nodes": ["Sign", "Mul"]})
    prober = bt.Prober()
    prober._workers[bt.HANDLER] = worker
    first = bt.probe_all(probes, prober)
    assert worker.calls == len(probes) and bt.cache_file().exists()
    assert bt.probe_all(probes, prober) == first and worker.calls == len(probes)  # no probe asked again


# ---------------------------------------------------------------- every row: a spec or a reason

def test_every_reason_names_a_probed_op_version():
    # a `reasons:` key with a typo, a version the op never had, or an empty/multi-line text
    table = bt.probe_file()
    assert table.get("reasons"), "harness/data/builder_probes.yaml lists no reasons"
    assert bt.reason_key_problems(table, bt.plan()) == []


def test_a_bad_reason_key_is_reported():
    probes = bt.plan(["Add", "MegatronF"])
    table = {"reasons": {"ai.onnx::Add@5": "x", "ai.onnx::Ad@1": "x", "com.microsoft::MegatronF": "",
                         "ai.onnx::Add@1,6": "fine"}}
    problems = bt.reason_key_problems(table, probes)
    assert [p.split(":")[2] for p in problems] == ["Add@5", "Ad@1", "MegatronF"], problems


def _forward_spec(spec_id: str, op: str, opset: int, domain: str = ""):
    from types import SimpleNamespace

    return SimpleNamespace(id=spec_id, forward=SimpleNamespace(op=op, opset=opset, domain=domain))


FIXTURE_OPS = ["Add", "Squeeze", "Clip", "MegatronF", "ScaledSum"]


@pytest.fixture(scope="module")
def fixture_rows():
    """The table's rows for a few ops, every probe answered `gradient` by a stand-in worker (no ORT call) and
    covered by stand-in specs of the newest forms, with the committed probe file's reasons: whatever other
    specs hold, these rows depend only on the probe file."""
    prober = bt.Prober()
    prober._workers[bt.HANDLER] = CrashingWorker({"ok": True, "nodes": ["Identity"]})
    specs = [_forward_spec("ai.onnx::AddGradient@14", "Add", 14),
             _forward_spec("ai.onnx::SqueezeGradient@13", "Squeeze", 13),
             _forward_spec("ai.onnx::ClipGradient@13", "Clip", 13)]
    return bt.rows(specs, only=FIXTURE_OPS, prober=prober, use_cache=False)


def test_rows_without_a_spec_are_exactly_those_with_a_reason(fixture_rows):
    grads = bt.gradient_rows(fixture_rows)
    assert {r.op for r in grads} == set(FIXTURE_OPS)
    assert bt.unexplained(fixture_rows) == []
    for r in grads:
        assert bool(r.spec) != bool(r.reason), (r.op, r.since_version, r.spec, r.reason)
    no_spec = {f"{r.op}@{r.since_version}" for r in grads if not r.spec}
    assert no_spec == {"Add@1", "Add@6", "Squeeze@1", "Squeeze@11", "Clip@1", "Clip@6", "MegatronF@1", "ScaledSum@1"}
    (megatron,) = [r for r in grads if r.op == "MegatronF"]
    assert megatron.coverage == megatron.reason and "CPU" in megatron.reason


def test_a_row_with_neither_a_spec_nor_a_reason_is_listed(fixture_rows, monkeypatch):
    table = bt.probe_file()
    reasons = {k: v for k, v in table["reasons"].items() if k != "ai.onnx::Squeeze@1,11"}
    monkeypatch.setattr(bt, "probe_file", lambda: {**table, "reasons": reasons})
    prober = bt.Prober()
    prober._workers[bt.HANDLER] = CrashingWorker({"ok": True, "nodes": ["Unsqueeze"]})
    rows = bt.rows([_forward_spec("ai.onnx::SqueezeGradient@13", "Squeeze", 13)], only=["Squeeze"], prober=prober,
                   use_cache=False)
    missing = [f"{r.op}@{r.since_version}" for r in bt.unexplained(rows)]
    assert missing == ["Squeeze@1", "Squeeze@11"]
    text = bt.format_text(rows)
    assert "neither a spec nor a reason (2 op versions" in text and "ai.onnx::Squeeze@11" in text
    assert bt.as_json(rows)["unexplained"] == ["ai.onnx::Squeeze@1", "ai.onnx::Squeeze@11"]


def test_a_reason_that_a_new_spec_makes_stale_is_found(fixture_rows):
    table = bt.probe_file()
    assert bt.stale_reasons(fixture_rows, table) == []
    covered = [bt.Row(r.domain, r.op, r.since_version, r.via, r.status, r.detail,
                      spec="com.microsoft::MegatronFGrad@1" if r.op == "MegatronF" else r.spec, reason=r.reason)
               for r in fixture_rows]
    assert bt.stale_reasons(covered, table) == ["com.microsoft::MegatronF"]


def test_a_reason_names_an_invalid_graph_rows_opsets():
    # an `invalid graph` row keeps the builder's verdict and gains the reason (which opsets show the defect)
    prober = bt.Prober()
    prober._workers[bt.HANDLER] = CrashingWorker({"ok": False, "message": "RuntimeError: This is an invalid model. "
                                                  "In Node, (\"forward_Grad/Gemm_0\", Gemm) _Grad/ has input size 2"})
    rows = bt.rows([_forward_spec("ai.onnx::GemmGradient@13", "Gemm", 13)], only=["Gemm"], prober=prober,
                   use_cache=False)
    (gemm9,) = [r for r in rows if r.since_version == 9]
    assert gemm9.status == bt.GRADIENT_INVALID and not gemm9.spec
    assert gemm9.coverage.startswith("the builder writes an invalid graph at this opset; ") and "opset" in gemm9.reason
