"""Build the small real models whose training graphs `opconform model` checks (issue 35).

    python tools/real_models.py OUTDIR [--models a,b,...] [--list] [--artifacts] [--opset N]

writes OUTDIR/<name>.onnx (forward models, random weights, torch.manual_seed(0), no downloads) and
OUTDIR/models.json:

    {name: {"file", "dims": {"batch": 2, ...}, "what", "loss": "mse" | "crossentropy",
            "frozen": [initializers that are not trainable], "opset", "default_opset",
            "builder_at_default_opset": "ok" | "<ORT's message, one line>"}}

resnet18 and mobilenet_v2 are written here with torch.nn (the torchvision wheel that pairs with torch 2.13 CPU does
not import: its compiled ops need a CUDA build); BERT, DistilBERT, GPT-2 and ViT come from transformers configuration
classes (real widths: hidden 768, 12 heads, intermediate 3072; 2 layers, vocabulary 1024, 64 positions), eager
attention (the softmax and the attention-probability dropout as separate nodes, as torch writes them for training).
Export: the TorchScript exporter (dynamo=False; the default exporter needs onnxscript), TrainingMode.TRAINING,
no constant folding, dynamic batch (and seq for the text models).

Opset: torch 2.13's TorchScript exporter writes opset 20 by default. From opset 17 torch writes layer_norm as ONNX
LayerNormalization with its Y output only, and onnxruntime-training 1.19.2's gradient builder refuses that node
(gradient_builder_base.h "i < node_->OutputDefs().size() was false"): the transformer models are kept at opset 16,
where torch decomposes layer_norm into ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add. Each model's entry records the default
opset and whether generate_artifacts accepts the model written at it ("builder_at_default_opset"), a finding
`opconform model` reports.

--artifacts also writes OUTDIR/<name>_artifacts/ with onnxruntime.training.artifacts.generate_artifacts
(AdamW; MSELoss or CrossEntropyLoss as the entry says; every float initializer trainable except "frozen").
Needs the [torch] and [models] extras.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

SEED = 0
BATCH = 2
SEQ = 16
VOCAB = 1024
POSITIONS = 64
#: opset for the models without LayerNorm: what torch 2.13 writes by default (None = its default)
CNN_OPSET: int | None = None
#: opset for the transformers models: below 17, where LayerNormalization (Y only) appears
TRANSFORMER_OPSET = 16


@dataclass
class Built:
    module: Any
    args: tuple
    input_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    dims: dict[str, int]
    what: str
    loss: str  # "mse" | "crossentropy"
    opset: int | None = CNN_OPSET
    output_names: list[str] = field(default_factory=lambda: ["output"])


# --------------------------------------------------------------------------------------------- torch.nn models


def _nn():
    import torch
    from torch import nn

    return torch, nn


def resnet18(num_classes: int = 10) -> Built:
    """ResNet-18 (He et al. 2015, torchvision's layout): 7x7/2 stem, 3x3/2 max pool, 4 stages of 2 BasicBlocks
    (64, 128, 256, 512; 1x1/2 conv + BN downsample), adaptive average pool, fc."""
    torch, nn = _nn()

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    x = torch.randn(BATCH, 3, 64, 64)
    return Built(ResNet18(), (x,), ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}, {"batch": BATCH},
                 "ResNet-18 (torch.nn, torchvision layout), 3x64x64 images, 10 classes", "crossentropy")


def mobilenet_v2(num_classes: int = 10) -> Built:
    """MobileNetV2 (Sandler et al. 2018, torchvision's layout, width 1.0): 3x3/2 stem conv-BN-ReLU6, 17 inverted
    residuals (1x1 expand, depthwise 3x3 with group = C up to 960, 1x1 linear projection, residual where the
    stride is 1 and the widths agree), 1x1 conv to 1280, global average pool, dropout 0.2, classifier."""
    torch, nn = _nn()

    def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1, act: bool = True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int):
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, 1)]
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, 1, act=False)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                        (6, 320, 1, 1)]
            layers, cin = [conv_bn(3, 32, 3, 2)], 32
            for t, c, n, s in settings:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(conv_bn(cin, 1280, 1, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    x = torch.randn(BATCH, 3, 64, 64)
    return Built(MobileNetV2(), (x,), ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}, {"batch": BATCH},
                 "MobileNetV2 (torch.nn, torchvision layout), 3x64x64 images, 10 classes", "crossentropy")


def _rnn_classifier(kind: str, hidden: int) -> Built:
    torch, nn = _nn()

    class RNNClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, 32)
            self.rnn = getattr(nn, kind)(32, hidden, batch_first=True)
            self.fc = nn.Linear(hidden, 5)

        def forward(self, ids):
            out, _ = self.rnn(self.embedding(ids))
            return self.fc(out[:, -1])

    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return Built(RNNClassifier(), (ids,), ["input_ids"], {"input_ids": {0: "batch", 1: "seq"}, "output": {0: "batch"}},
                 {"batch": BATCH, "seq": SEQ},
                 f"{kind} classifier: embedding {VOCAB}x32, batch_first {kind} hidden {hidden}, last step, linear to 5",
                 "crossentropy")


def lstm() -> Built:
    """LSTM classifier: embedding, batch_first LSTM hidden 64, last time step (Gather of index -1), linear."""
    return _rnn_classifier("LSTM", 64)


def gru() -> Built:
    """GRU classifier: embedding, batch_first GRU hidden 48, last time step (Gather of index -1), linear."""
    return _rnn_classifier("GRU", 48)


def conv1d() -> Built:
    """A 1-D signal net: k5/s2/p2 and k3/p1 (symmetric padding) convolutions, BN, LeakyReLU(0.1), average pool
    k3/s2/p1 with count_include_pad, global average pool, linear regression head."""
    torch, nn = _nn()

    class Conv1dNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv1d(4, 16, 5, stride=2, padding=2)
            self.bn1 = nn.BatchNorm1d(16)
            self.act = nn.LeakyReLU(0.1)
            self.pool = nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=True)
            self.conv2 = nn.Conv1d(16, 32, 3, padding=1)
            self.conv3 = nn.Conv1d(32, 32, 3, padding=2, dilation=2)
            self.fc = nn.Linear(32, 3)

        def forward(self, x):
            x = self.pool(self.act(self.bn1(self.conv1(x))))
            x = self.act(self.conv3(self.act(self.conv2(x))))
            return self.fc(x.mean(dim=2))

    x = torch.randn(BATCH, 4, 64)
    return Built(Conv1dNet(), (x,), ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}, {"batch": BATCH},
                 "Conv1d net: 4x64 signals, k5/s2/p2 and k3/p1 convs, BN, LeakyReLU(0.1), AvgPool1d count_include_pad, 3 outputs",
                 "mse")


def conv3d() -> Built:
    """A small video/volume net: Conv3d 3x3x3 (padding 1, then stride 2), BN, ReLU, MaxPool3d 2, global average
    pool, linear classifier."""
    torch, nn = _nn()

    class Conv3dNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv3d(3, 8, 3, padding=1)
            self.bn1 = nn.BatchNorm3d(8)
            self.pool = nn.MaxPool3d(2)
            self.conv2 = nn.Conv3d(8, 16, 3, stride=2, padding=1)
            self.bn2 = nn.BatchNorm3d(16)
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
            x = torch.relu(self.bn2(self.conv2(x)))
            return self.fc(x.mean(dim=(2, 3, 4)))

    x = torch.randn(BATCH, 3, 8, 16, 16)
    return Built(Conv3dNet(), (x,), ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}, {"batch": BATCH},
                 "Conv3d net: 3x8x16x16 clips, 3x3x3 convs (s1 p1, s2 p1), BN, ReLU, MaxPool3d 2, 4 classes",
                 "crossentropy")


# --------------------------------------------------------------------------------------------- transformers models

_TRANSFORMER = dict(num_hidden_layers=2, num_attention_heads=12, hidden_size=768, intermediate_size=3072)


def _text(module, what: str) -> Built:
    torch, _ = _nn()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return Built(module, (ids,), ["input_ids"], {"input_ids": {0: "batch", 1: "seq"}, "output": {0: "batch"}},
                 {"batch": BATCH, "seq": SEQ}, what, "crossentropy", opset=TRANSFORMER_OPSET)


def bert() -> Built:
    """BERT (BertModel, 2 layers at BERT-base widths) + pooler (CLS, dense, tanh) + classifier."""
    import transformers as tf

    torch, nn = _nn()
    cfg = tf.BertConfig(vocab_size=VOCAB, max_position_embeddings=POSITIONS, attn_implementation="eager", **_TRANSFORMER)

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = tf.BertModel(cfg, add_pooling_layer=True)
            self.classifier = nn.Linear(768, 2)

        def forward(self, ids):
            return self.classifier(self.bert(input_ids=ids).pooler_output)

    return _text(Bert(), "BERT-base widths (768/12 heads/3072), 2 layers, vocab 1024: pooler (CLS, tanh) + 2-way classifier")


def distilbert() -> Built:
    """DistilBERT (DistilBertModel, 2 layers at base widths), CLS hidden state + classifier."""
    import transformers as tf

    torch, nn = _nn()
    cfg = tf.DistilBertConfig(vocab_size=VOCAB, max_position_embeddings=POSITIONS, n_layers=2, n_heads=12, dim=768,
                              hidden_dim=3072, attn_implementation="eager")

    class DistilBert(nn.Module):
        def __init__(self):
            super().__init__()
            self.distilbert = tf.DistilBertModel(cfg)
            self.classifier = nn.Linear(768, 2)

        def forward(self, ids):
            return self.classifier(self.distilbert(input_ids=ids).last_hidden_state[:, 0])

    return _text(DistilBert(), "DistilBERT widths (768/12/3072), 2 layers, vocab 1024: CLS hidden state + 2-way classifier")


def gpt2() -> Built:
    """GPT-2 (GPT2LMHeadModel, 2 layers at GPT-2 small widths, causal mask, tied LM head), last token's logits."""
    import transformers as tf

    torch, nn = _nn()
    cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_layer=2, n_head=12, n_embd=768, n_inner=3072,
                        bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, attn_implementation="eager")

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = tf.GPT2LMHeadModel(cfg)

        def forward(self, ids):
            return self.lm(input_ids=ids).logits[:, -1]

    return _text(GPT2(), "GPT-2 widths (768/12/3072), 2 layers, vocab 1024: LM head (tied) logits of the last token")


def vit() -> Built:
    """ViT (ViTModel, 2 layers at ViT-Base widths, 16x16/16 patch conv on 64x64 images), CLS + classifier."""
    import transformers as tf

    torch, nn = _nn()
    cfg = tf.ViTConfig(image_size=64, patch_size=16, num_channels=3, attn_implementation="eager", **_TRANSFORMER)

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = tf.ViTModel(cfg, add_pooling_layer=False)
            self.classifier = nn.Linear(768, 10)

        def forward(self, x):
            return self.classifier(self.vit(pixel_values=x).last_hidden_state[:, 0])

    x = torch.randn(BATCH, 3, 64, 64)
    return Built(ViT(), (x,), ["pixel_values"], {"pixel_values": {0: "batch"}, "output": {0: "batch"}}, {"batch": BATCH},
                 "ViT-Base widths (768/12/3072), 2 layers, 3x64x64 images, 16x16/16 patch conv: CLS + 10-way classifier",
                 "crossentropy", opset=TRANSFORMER_OPSET)


MODELS: dict[str, Callable[[], Built]] = {
    "resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert": bert, "distilbert": distilbert, "gpt2": gpt2,
    "vit": vit, "lstm": lstm, "gru": gru, "conv1d": conv1d, "conv3d": conv3d,
}


# --------------------------------------------------------------------------------------------- export and artifacts


def export(built: Built, path: Path, opset: int | None) -> None:
    import torch

    built.module.train()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(built.module, built.args, str(path), dynamo=False, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=built.input_names, output_names=built.output_names,
                          dynamic_axes=built.dynamic_axes)


def split_params(model) -> tuple[list[str], list[str]]:
    """(trainable, frozen) initializer names: the float initializers that are parameters of the torch module are
    trainable; every other initializer (BN running statistics and batch counters, integer buffers) is frozen."""
    from onnx import TensorProto

    floats = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    trainable, frozen = [], []
    for init in model.graph.initializer:
        is_param = init.data_type in floats and not any(s in init.name for s in ("running_mean", "running_var"))
        (trainable if is_param else frozen).append(init.name)
    return trainable, frozen


@contextlib.contextmanager
def _quiet_fd2():
    """Drop what C++ writes to stderr meanwhile: ORT's optimizer pass (get_optimized_model) logs every graph
    transformer at INFO whatever the Python-side logger severity."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def generate(path: Path, loss: str, frozen: list[str], directory: Path) -> None:
    import onnx
    from onnxruntime.training import artifacts

    model = onnx.load(str(path))
    trainable, _ = split_params(model)
    directory.mkdir(parents=True, exist_ok=True)
    loss_type = artifacts.LossType.CrossEntropyLoss if loss == "crossentropy" else artifacts.LossType.MSELoss
    with contextlib.redirect_stdout(io.StringIO()), _quiet_fd2():
        artifacts.generate_artifacts(model, requires_grad=trainable, frozen_params=frozen, loss=loss_type,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=str(directory))


def one_line(exc: BaseException) -> str:
    """ORT's message on one line, shortened as opconform's reports shorten it (ort_autograd.short_message)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness.backends.ort_autograd import short_message

    return short_message(f"{type(exc).__name__}: {exc}")


def opset_of(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def build(name: str, outdir: Path, artifacts: bool, opset_override: int | None) -> dict:
    import onnx
    import torch

    torch.manual_seed(SEED)
    built = MODELS[name]()
    path = outdir / f"{name}.onnx"
    opset = opset_override if opset_override is not None else built.opset
    export(built, path, opset)
    trainable, frozen = split_params(onnx.load(str(path)))
    entry = {"file": path.name, "dims": built.dims, "what": built.what, "loss": built.loss, "frozen": frozen,
             "opset": opset_of(path), "inputs": built.input_names}
    # the finding: does the builder accept the model as torch writes it by default?
    with tempfile.TemporaryDirectory() as tmp:
        default = Path(tmp) / f"{name}.onnx"
        torch.manual_seed(SEED)
        export(MODELS[name](), default, None)
        entry["default_opset"] = opset_of(default)
        try:
            generate(default, built.loss, frozen, Path(tmp) / "artifacts")
            entry["builder_at_default_opset"] = "ok"
        except Exception as exc:  # noqa: BLE001 - ORT's refusal is the finding recorded
            entry["builder_at_default_opset"] = one_line(exc)
    if artifacts:
        try:
            generate(path, built.loss, frozen, outdir / f"{name}_artifacts")
            entry["artifacts"] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported, and the exit status says so
            entry["artifacts"] = one_line(exc)
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", type=Path)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--artifacts", action="store_true", help="also write OUTDIR/<name>_artifacts/ (generate_artifacts)")
    ap.add_argument("--opset", type=int, help="export every model at this opset instead of the script's choice")
    a = ap.parse_args(argv)
    if a.list:
        for name, fn in MODELS.items():
            print(f"{name:14s} {' '.join((fn.__doc__ or '').split())}")
        return 0
    if a.outdir is None:
        ap.error("OUTDIR is required (or --list)")
    names = [n.strip() for n in a.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    a.outdir.mkdir(parents=True, exist_ok=True)
    index_path = a.outdir / "models.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    failed = []
    for name in names:
        entry = index[name] = build(name, a.outdir, a.artifacts, a.opset)
        index_path.write_text(json.dumps(index, indent=1) + "\n")
        line = f"{name}: {entry['file']} opset {entry['opset']}"
        if a.artifacts:
            line += f", artifacts: {entry['artifacts']}"
            if entry["artifacts"] != "ok":
                failed.append(name)
        print(f"{line}; builder at torch's default opset {entry['default_opset']}: {entry['builder_at_default_opset']}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
