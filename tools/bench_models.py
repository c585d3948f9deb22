"""Write the workload lists `opconform bench --model NAME` ships (harness/data/bench_models/NAME.json).

    python tools/bench_models.py [--models resnet18,mobilenet_v2,bert_layer,lstm_classifier] [--out DIR] [--keep DIR]

Each model is built with plain torch.nn (no torchvision: its wheel for torch 2.13 CPU does not import; the layouts are
torchvision's, from tools/real_models.py), exported with the TorchScript exporter in training mode, its training graph
built with onnxruntime.training.artifacts.generate_artifacts (AdamW; every float parameter trainable, BN statistics
frozen), run once by `opconform model`'s census (harness.model.census, harness.model.match), and written as its
distinct gradient-node configurations: op, the case params its spec's from_node hook gives, how many nodes share it
(configurations only, no weights).

    resnet18         ResNet-18 at 224x224, batch 2, 1000 classes (cross-entropy)
    mobilenet_v2     MobileNetV2 (width 1.0) at 224x224, batch 2, 1000 classes (cross-entropy)
    bert_layer       one BERT-base encoder layer: hidden 768, 12 heads, intermediate 3072, GELU, seq 128, batch 4
                     (opset 16: torch decomposes layer_norm; ORT 1.19.2's builder refuses opset 17's LayerNormalization)
    lstm_classifier  embedding 10000x128, batch_first LSTM hidden 256, seq 64, batch 8, last step, linear to 10
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import real_models  # noqa: E402  (tools/real_models.py: the torch.nn ResNet-18 and MobileNetV2, export, generate)

IMAGE = 224
CNN_BATCH = 2


def _images(built: real_models.Built, classes_note: str) -> real_models.Built:
    import torch

    built.args = (torch.randn(CNN_BATCH, 3, IMAGE, IMAGE),)
    built.dims = {"batch": CNN_BATCH}
    built.what = built.what.replace("3x64x64 images, 10 classes", f"3x{IMAGE}x{IMAGE} images, batch {CNN_BATCH}, "
                                    + classes_note)
    return built


def resnet18() -> real_models.Built:
    return _images(real_models.resnet18(num_classes=1000), "1000 classes")


def mobilenet_v2() -> real_models.Built:
    return _images(real_models.mobilenet_v2(num_classes=1000), "1000 classes")


def bert_layer(batch: int = 4, seq: int = 128, hidden: int = 768, heads: int = 12, inner: int = 3072) -> real_models.Built:
    """One post-LN BERT encoder layer (BertLayer's computation, eager attention, dropout 0.1 in training mode)."""
    import torch
    from torch import nn

    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.up = nn.Linear(hidden, inner)
            self.down = nn.Linear(inner, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (lin(x).view(b, s, heads, hidden // heads).transpose(1, 2) for lin in self.qkv)
            scores = torch.matmul(q, k.transpose(-1, -2)) / (hidden // heads) ** 0.5
            probs = self.drop(torch.softmax(scores, dim=-1))
            ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, hidden)
            x = self.ln1(x + self.drop(self.out(ctx)))
            return self.ln2(x + self.drop(self.down(nn.functional.gelu(self.up(x)))))

    x = torch.randn(batch, seq, hidden)
    return real_models.Built(BertLayer(), (x,), ["hidden_states"], {}, {},
                             f"one BERT-base encoder layer (hidden {hidden}, {heads} heads, intermediate {inner}, GELU, "
                             f"post-LN, dropout 0.1), seq {seq}, batch {batch}, MSE on its output", "mse",
                             opset=real_models.TRANSFORMER_OPSET)


def lstm_classifier(batch: int = 8, seq: int = 64, hidden: int = 256, vocab: int = 10000, embed: int = 128) -> real_models.Built:
    import torch
    from torch import nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, embed)
            self.lstm = nn.LSTM(embed, hidden, batch_first=True)
            self.fc = nn.Linear(hidden, 10)

        def forward(self, ids):
            out, _ = self.lstm(self.embedding(ids))
            return self.fc(out[:, -1])

    ids = torch.randint(0, vocab, (batch, seq))
    return real_models.Built(Classifier(), (ids,), ["input_ids"], {}, {},
                             f"LSTM classifier: embedding {vocab}x{embed}, batch_first LSTM hidden {hidden}, seq {seq}, "
                             f"batch {batch}, last step, linear to 10 classes", "crossentropy")


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert_layer": bert_layer, "lstm_classifier": lstm_classifier}


def write_list(name: str, out_dir: Path, work: Path, catalog) -> Path:
    import onnx
    import onnxruntime
    import torch

    from harness.model.workload_list import census_of, from_census

    torch.manual_seed(real_models.SEED)
    built = MODELS[name]()
    path = work / f"{name}.onnx"
    real_models.export(built, path, built.opset)
    _, frozen = real_models.split_params(onnx.load(str(path)))
    real_models.generate(path, built.loss, frozen, work / f"{name}_artifacts")
    found, specs = census_of(work / f"{name}_artifacts", built.dims, catalog, work / f"{name}_census",
                             log=lambda line: print(f"  {line}", file=sys.stderr))
    doc, _ = from_census(found, specs, name, what=built.what)
    doc["generated_by"] = (f"tools/bench_models.py (torch {torch.__version__.split('+')[0]}, onnxruntime-training "
                           f"{onnxruntime.__version__}, opset {real_models.opset_of(path)})")
    doc.pop("dims", None)
    out = out_dir / f"{name}.json"
    out.write_text(list_text(doc))
    nodes = sum(e["count"] for e in doc["configurations"])
    print(f"{name}: {len(doc['configurations'])} configurations of {nodes} nodes -> {out}")
    for line in doc["left_out"]:
        print(f"  left out: {line}")
    return out


def list_text(doc: dict) -> str:
    """The list as JSON with one configuration (and one left-out line) a line: small diffs when it is written again."""
    head = {k: v for k, v in doc.items() if k not in ("configurations", "left_out")}
    lines = ["{", *(f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()), ' "configurations": [']
    lines += [f"  {json.dumps(e)}," for e in doc["configurations"]]
    lines[-1] = lines[-1].rstrip(",")
    lines += [" ],", ' "left_out": [']
    lines += [f"  {json.dumps(e)}," for e in doc["left_out"]]
    if doc["left_out"]:
        lines[-1] = lines[-1].rstrip(",")
    lines += [" ]", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--out", type=Path, default=ROOT / "harness" / "data" / "bench_models")
    ap.add_argument("--keep", type=Path, help="keep the exported models and artifacts in this directory")
    a = ap.parse_args(argv)
    from harness.run.catalog import load

    catalog = load()
    a.out.mkdir(parents=True, exist_ok=True)
    names = [n.strip() for n in a.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory() as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            write_list(name, a.out, work, catalog)
    return 0


if __name__ == "__main__":
    sys.exit(main())
