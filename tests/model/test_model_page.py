"""The model report page of `opconform model` (harness/report/model_page.py): a hand-made model.json document with
one configuration of each status and a build failure, rendered; the figures, the escaping, the rerun commands, the
spec's evidence of a divergence, and nothing fetched from elsewhere."""
from __future__ import annotations

import re

from harness.report.model_page import page_model, render_model_page, write_model_page

RERUN = "opconform run --specs /tmp/m/specs --ops {op} --cases '{group}/*' --tier nightly"


def config(spec, status, nodes, group=None, **extra):
    row = {"spec": spec, "domain": "ai.onnx", "kind": "forward", "op": spec.removesuffix("Gradient"), "nodes": nodes,
           "layers": ["/encoder/layer.0/Mul"], "attributes": {}, "shapes": {"dY": [2, 3], "A": [2, 3], "B": [3]},
           "dtypes": {"dY": "float32", "A": "float32", "B": "float32"}, "outputs": ["dA", "dB"],
           "dynamic_axes": {"A": {"0": "batch"}}, "group": group, "status": status, "reason": "", "backends": {},
           "divergences": [], "rerun": RERUN.format(op=spec, group=group) if group else None}
    row.update(extra)
    return row


def model_doc() -> dict:
    rows = [
        config("AddGradient", "verified", ["/a/Add_Grad/Identity_0", "/a/Add_Grad/ReduceSum_1"], "model_001",
               backends={"reference": "pass", "ort-autograd": "pass"}, tier="ci", params={"shapes": [[2, 3], [3]]}),
        config("MulGradient", "failed", ["/encoder/layer.0/Mul_Grad/Mul_0", "onnx::Mul::7_Grad/Mul_1", "<script>alert(1)</script>"],
               "model_001", backends={"reference": "pass", "ort-autograd": "fail"}, attributes={"alpha": 1.7020000219345093},
               reason="ort-autograd: fail (dA: max abs 0.5 > tolerance)",
               known=[{"id": "ort-autograd-empty-broadcast-reshape-fails", "backend": "ort-autograd", "summary": "a zero-size axis"}]),
        config("MulGradient", "divergent", ["/m/Mul_Grad/Mul_2"], "model_002", backends={"reference": "pass", "ort-autograd": "divergent"},
               divergences=["ort-autograd-empty-broadcast-reshape-fails"]),
        config("DivGradient", "divergent", ["/d/Div_Grad/Div_0"], "model_001", backends={"reference": "pass", "ort-autograd": "divergent"},
               divergences=[{"id": "made-up-divergence", "backend": "ort-autograd", "summary": "returns the wrong sign here",
                             "evidence": "Forward model Div(A, B) opset 14 ... onnxruntime-training 1.19.2, CPU, verified 2026-11-28"}]),
        config("SubGradient", "uncovered", ["/s/Sub_Grad/Neg_0"], reason="A [2, 3] with B [5]: not broadcastable (outside the contract)"),
        config("PowGradient", "not run", ["/p/Pow_Grad/Pow_0"], "model_001", backends={"ort-autograd": "unsupported"},
               reason="no backend ran it: ort-autograd: unsupported"),
    ]
    return {"model": "tiny<bert>", "source": "/tmp/tiny bert.onnx", "kind": "forward", "dims": {"batch": 2}, "out": "/tmp/m",
            "loss": "mse", "graph_nodes": 60, "gradient_nodes": 40, "opset": 17,
            "configurations": rows,
            "uncovered": [{"op": "InPlaceAccumulatorV2", "domain": "com.microsoft",
                           "reason": "no spec for com.microsoft::InPlaceAccumulatorV2",
                           "nodes": ["GradientAccumulator1", "GradientAccumulator2", "GradientAccumulator3"]}],
            "totals": {}, "error": None, "seconds": 3.2, "verdict": "FAIL"}


def figure(page: str, status: str, what: str) -> int:
    found = re.search(rf'data-status="{status}" data-what="{what}"><b>(\d+)</b>', page)
    assert found, (status, what)
    return int(found.group(1))


def rows(page: str) -> list[tuple[str, str, str]]:
    """The configuration table's rows: (status attribute, status shown, spec)."""
    return re.findall(r'<tr class="config [^"]*" data-status="([^"]*)" data-spec="([^"]*)">'
                      r'\s*<td><span class="status [^"]*">([^<]*)</span>', page)


def no_external(page: str) -> None:
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page), "a resource from elsewhere"
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "http://" not in page and "https://" not in page


def test_figures_per_status():
    page = render_model_page(model_doc())
    for status, configurations, nodes in (("verified", 1, 2), ("failed", 1, 3), ("divergent", 2, 2), ("uncovered", 1, 1 + 3)):
        assert figure(page, status, "configurations") == configurations, status
        assert figure(page, status, "nodes") == nodes, status  # uncovered nodes: outside the contract + without a spec
    assert figure(page, "not run", "configurations") == 1
    assert ">FAIL</div>" in page


def test_failed_row_shown_failed_and_first():
    shown = rows(render_model_page(model_doc()))
    assert [(s, spec) for s, spec, _ in shown][0] == ("failed", "MulGradient")
    for attribute, spec, label in shown:
        assert attribute == label, spec
    assert ("failed", "MulGradient", "failed") in shown and ("verified", "MulGradient", "verified") not in shown
    assert [s for s, _, _ in shown].count("verified") == 1
    m = page_model(model_doc())
    assert m["counts"]["verified"]["configurations"] == 1 and m["rows"][-1]["status"] == "verified"


def test_escaping_and_rerun_commands():
    page = render_model_page(model_doc())
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "/encoder/layer.0/Mul_Grad/Mul_0" in page and "onnx::Mul::7_Grad/Mul_1" in page
    assert "tiny&lt;bert&gt;" in page and "tiny<bert>" not in page
    for group, spec in (("model_001", "MulGradient"), ("model_002", "MulGradient"), ("model_001", "AddGradient")):
        command = RERUN.format(op=spec, group=group).replace("'", "&#39;")
        assert f'<code class="repro">{command}</code>' in page
    assert "opconform model &#39;/tmp/tiny bert.onnx&#39; --dim batch=2 --loss mse --out /tmp/m" in page
    assert "alpha=1.702" in page  # a float32 attribute as written, not 1.7020000219345093
    assert "outside the contract" in page and "InPlaceAccumulatorV2" in page and "GradientAccumulator3" in page
    no_external(page)


def test_divergence_evidence():
    page = render_model_page(model_doc())
    assert "made-up-divergence" in page and "onnxruntime-training 1.19.2, CPU, verified 2026-11-28" in page
    # a record's divergence id: the built-in spec's evidence is shown
    assert "ort-autograd-empty-broadcast-reshape-fails" in page and "requested shape:{2,1,3}" in page


def test_build_error(tmp_path):
    doc = {"model": "broken", "source": "/tmp/broken.onnx", "kind": "forward", "dims": {}, "out": str(tmp_path), "loss": "mse",
           "configurations": [], "uncovered": [],
           "totals": {"verified": 0, "failed": 0, "divergent": 0, "uncovered": 0, "not run": 0},
           "error": "the training graph could not be built: [ONNXRuntimeError] : 1 : FAIL : No gradient for <Op> 'X::Y'",
           "seconds": 0.4, "verdict": "FAIL"}
    path = write_model_page(doc, tmp_path / "model.html")
    page = path.read_text(encoding="utf-8")
    assert "could not be built: [ONNXRuntimeError] : 1 : FAIL : No gradient for &lt;Op&gt; &#39;X::Y&#39;" in page
    assert page.index("No gradient for") < page.index('id="configurations"')  # the finding heads the page
    assert ">FAIL</div>" in page and figure(page, "failed", "configurations") == 0
    no_external(page)
