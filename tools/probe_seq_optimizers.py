"""Probe onnxruntime-training's CPU kernels of the sequence optimizers (AdamWOptimizer, SGDOptimizerV2,
InplaceClipGradNorm, com.microsoft) with one-node models (IR 10, opset 17 + com.microsoft 1) fed Python lists, and
print what they return next to the float64 references (reference/ops/adamw.py, sgd_v2.py, clip_grad_norm.py).

    python tools/probe_seq_optimizers.py            # every probe
    python tools/probe_seq_optimizers.py adamw      # one family: adamw | sgd | clip | errors | dtypes | trajectory
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from reference.ops.adamw import adamw
from reference.ops.clip_grad_norm import clip_grad_norm
from reference.ops.sgd_v2 import sgd_v2

NP2ONNX = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}


def _seq(name, elem):
    return helper.make_tensor_sequence_value_info(name, elem, None)


def _t(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(op, inputs, outputs, attrs):
    node = helper.make_node(op, [i.name for i in inputs], [o.name for o in outputs], domain="com.microsoft", **attrs)
    g = helper.make_graph([node], op, inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def session(m):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def adamw_model(attrs, signal=False, elem=TensorProto.FLOAT, flag_type=TensorProto.BOOL):
    ins = [_t("lr", TensorProto.FLOAT, [1]), _t("step", TensorProto.INT64, [1]), _seq("weights", elem),
           _seq("gradients", elem), _seq("momentums_1", elem), _seq("momentums_2", elem)]
    if signal:
        ins.append(_t("update_signal", TensorProto.BOOL, [1]))
    outs = [_t("updated_flag", flag_type, [1]), _seq("updated_weights", elem), _seq("updated_momentums_1", elem),
            _seq("updated_momentums_2", elem)]
    return model("AdamWOptimizer", ins, outs, attrs)


def _lists(rng, shapes, dt=np.float32):
    w = [rng.normal(0, 1, s).astype(dt) for s in shapes]
    g = [rng.normal(0, 1, s).astype(dt) for s in shapes]
    m1 = [rng.normal(0, 0.1, s).astype(dt) for s in shapes]
    m2 = [np.abs(rng.normal(0, 0.01, s)).astype(dt) for s in shapes]
    return w, g, m1, m2


def _maxrel(a_list, b_list):
    worst = 0.0
    for a, b in zip(a_list, b_list):
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
        d = np.abs(a - b) / np.maximum(np.abs(b), 1e-30)
        worst = max(worst, float(np.max(d)) if d.size else 0.0)
    return worst


def _copy(feeds):
    """ORT's Python binding hands list feeds to the kernel without a copy and these kernels write their inputs in
    place: every run gets fresh copies so that the caller's arrays (and the references' inputs) stay intact."""
    return {k: [np.array(x, copy=True) for x in v] if isinstance(v, list) else v for k, v in feeds.items()}


def _try(sess_fn, feeds):
    try:
        return sess_fn().run(None, _copy(feeds)), None
    except Exception as e:  # noqa: BLE001 - the probe reports whatever ORT raises
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def probe_adamw():
    print("== AdamWOptimizer (float32 lists [3,4], [5], [2,2,2]) ==")
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (5,), (2, 2, 2)]
    w, g, m1, m2 = _lists(rng, shapes)
    combos = []
    for mode in (0, 1):
        for cb in (0, 1):
            for wd in (0.0, 0.01, 0.3):
                for step in (0, 1, 5):
                    combos.append(dict(adam_mode=mode, correct_bias=cb, weight_decay=wd, step=step))
    combos.append(dict(adam_mode=1, correct_bias=1, weight_decay=0.01, step=3, alpha=0.8, beta=0.95, epsilon=1e-3))
    combos.append(dict(adam_mode=0, correct_bias=1, weight_decay=0.01, step=3, alpha=0.5, beta=0.6, epsilon=0.1))
    for c in combos:
        c = dict(c)
        step = c.pop("step")
        attrs = dict(c)
        feeds = {"lr": np.array([1e-2], np.float32), "step": np.array([step], np.int64), "weights": [x.copy() for x in w],
                 "gradients": [x.copy() for x in g], "momentums_1": [x.copy() for x in m1], "momentums_2": [x.copy() for x in m2]}
        out, err = _try(lambda: session(adamw_model(attrs)), feeds)
        fattrs = {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in attrs.items()}
        try:
            ref = adamw(feeds["lr"], feeds["step"], w, g, m1, m2, **fattrs)
            rerr = None
        except ValueError as e:
            ref, rerr = None, str(e)
        if err:
            print(f"  {attrs} step={step}: ORT error {err}; reference: {rerr or 'valid'}")
            continue
        flag = out[0]
        finite = all(np.isfinite(x).all() for x in out[1])
        line = f"  {attrs} step={step}: flag={flag!r} finite={finite}"
        if ref is not None:
            line += (f" maxrel w={_maxrel(out[1], ref[1]):.2e} m1={_maxrel(out[2], ref[2]):.2e}"
                     f" m2={_maxrel(out[3], ref[3]):.2e}")
        else:
            line += f" reference rejects: {rerr}"
        print(line)
    # inputs mutated? (the kernel writes its input buffers in place)
    feeds = {"lr": np.array([1e-2], np.float32), "step": np.array([1], np.int64), "weights": [x.copy() for x in w],
             "gradients": [x.copy() for x in g], "momentums_1": [x.copy() for x in m1], "momentums_2": [x.copy() for x in m2]}
    session(adamw_model({})).run(None, feeds)  # deliberately uncopied
    print("  numpy feeds modified in place by the run:", any((a != b).any() for a, b in zip(feeds["weights"], w)))
    feeds = dict(feeds, weights=w, gradients=g, momentums_1=m1, momentums_2=m2)
    # default attributes: weight_decay (schema default 0.01, kernel default 0.0)
    ref0 = adamw(feeds["lr"], feeds["step"], w, g, m1, m2, weight_decay=0.0)
    ref1 = adamw(feeds["lr"], feeds["step"], w, g, m1, m2, weight_decay=0.01)
    out, _ = _try(lambda: session(adamw_model({})), feeds)
    print(f"  no attributes: maxrel vs wd=0: {_maxrel(out[1], ref0[1]):.2e}, vs wd=0.01: {_maxrel(out[1], ref1[1]):.2e}")
    # update_signal
    for sig in (True, False):
        feeds2 = dict(feeds, update_signal=np.array([sig]))
        out, _ = _try(lambda: session(adamw_model({"weight_decay": 0.01}, signal=True)), feeds2)
        ref = adamw(feeds["lr"], feeds["step"], w, g, m1, m2, np.array([sig]), weight_decay=0.01)
        print(f"  update_signal={sig}: flag={out[0]!r} dtype={out[0].dtype} maxrel w={_maxrel(out[1], ref[1]):.2e}"
              f" unchanged={all((a == b).all() for a, b in zip(out[1], w))}")
    # flag declared int64 (the schema's T2)
    feeds["step"] = np.array([1], np.int64)
    out, err = _try(lambda: session(adamw_model({}, flag_type=TensorProto.INT64)), feeds)
    print("  updated_flag declared int64 (schema T2):", err or f"flag={out[0]!r}")
    # step shape [] scalar and lr scalar
    m = adamw_model({})
    m.graph.input[0].type.tensor_type.shape.ClearField("dim")
    m.graph.input[1].type.tensor_type.shape.ClearField("dim")
    m.graph.output[0].type.tensor_type.shape.ClearField("dim")
    out, err = _try(lambda: session(m), dict(feeds, lr=np.array(1e-2, np.float32), step=np.array(1, np.int64)))
    print("  scalar lr/step:", err or f"flag={out[0]!r} shape={out[0].shape}")


def probe_sgd():
    print("== SGDOptimizerV2 ==")
    rng = np.random.default_rng(1)
    shapes = [(3, 4), (5,)]
    w = [rng.normal(0, 1, s).astype(np.float32) for s in shapes]
    g = [rng.normal(0, 1, s).astype(np.float32) for s in shapes]
    for signal in (None, True, False):
        ins = [_t("lr", TensorProto.FLOAT, [1]), _seq("weights", TensorProto.FLOAT), _seq("gradients", TensorProto.FLOAT)]
        feeds = {"lr": np.array([0.1], np.float32), "weights": [x.copy() for x in w], "gradients": [x.copy() for x in g]}
        if signal is not None:
            ins.append(_t("update_signal", TensorProto.BOOL, [1]))
            feeds["update_signal"] = np.array([signal])
        outs = [_t("update_completed", TensorProto.BOOL, [1]), _seq("updated_weights", TensorProto.FLOAT)]
        out, err = _try(lambda: session(model("SGDOptimizerV2", ins, outs, {})), feeds)
        ref = sgd_v2(feeds["lr"], w, g, None if signal is None else np.array([signal]))
        print(f"  update_signal={signal}: " + (err or f"flag={out[0]!r} maxrel={_maxrel(out[1], ref[1]):.2e}"))
    # empty / mismatched
    for what, ww, gg in [("empty lists", [], []), ("lengths 2 vs 1", w, g[:1]),
                         ("shapes [3,4] vs [4,3]", w[:1], [g[0].reshape(4, 3)])]:
        ins = [_t("lr", TensorProto.FLOAT, [1]), _seq("weights", TensorProto.FLOAT), _seq("gradients", TensorProto.FLOAT)]
        outs = [_t("update_completed", TensorProto.BOOL, [1]), _seq("updated_weights", TensorProto.FLOAT)]
        out, err = _try(lambda: session(model("SGDOptimizerV2", ins, outs, {})),
                        {"lr": np.array([0.1], np.float32), "weights": ww, "gradients": gg})
        print(f"  {what}: " + (err or f"no error, flag={out[0]!r} n_out={len(out[1])}"))


def clip_model(attrs, elem=TensorProto.FLOAT):
    return model("InplaceClipGradNorm", [_seq("gradients", elem)], [_seq("clipped_gradients", elem)], attrs)


def probe_clip():
    print("== InplaceClipGradNorm ==")
    rng = np.random.default_rng(2)
    g = [rng.normal(0, 1, s).astype(np.float32) for s in [(3, 4), (5,), (2, 3, 2)]]
    for attrs in ({}, {"max_norm": 1.0}, {"max_norm": 0.5}, {"max_norm": 100.0}, {"max_norm": 0.0},
                  {"max_norm": -1.0}, {"max_norm": 1.0, "norm_type": "fro"}, {"norm_type": "l2"},
                  {"norm_type": "inf"}):
        out, err = _try(lambda: session(clip_model(attrs)), {"gradients": [x.copy() for x in g]})
        try:
            ref = clip_grad_norm(g, **{k: (float(np.float32(v)) if isinstance(v, float) else v) for k, v in attrs.items()})
        except ValueError as e:
            ref = str(e)
        if err:
            print(f"  {attrs}: ORT error {err}; reference: {ref if isinstance(ref, str) else 'valid'}")
        else:
            print(f"  {attrs}: maxrel {_maxrel(out[0], ref):.2e} out dtype {out[0][0].dtype}")
    for what, gg in [("empty list", []), ("zero gradients", [np.zeros((3,), np.float32)]),
                     ("one scalar [] tensor", [np.array(3.0, np.float32)]),
                     ("a [0]-shaped tensor among others", [np.zeros((0,), np.float32), g[0]]),
                     ("inf in a gradient", [np.array([np.inf, 1.0], np.float32)]),
                     ("nan in a gradient", [np.array([np.nan, 1.0], np.float32)])]:
        out, err = _try(lambda: session(clip_model({"max_norm": 1.0})), {"gradients": gg})
        ref = clip_grad_norm(gg, max_norm=1.0)
        print(f"  {what}: " + (err or f"out={[o.tolist() for o in out[0]][:2]} ref={[r.tolist() for r in ref][:2]}"
                                        if len(gg) < 2 or gg[0].size == 0 else
                                        err or f"maxrel {_maxrel(out[0], ref):.2e}"))


def probe_errors():
    print("== AdamW malformed lists ==")
    rng = np.random.default_rng(3)
    w, g, m1, m2 = _lists(rng, [(3, 4), (5,)])
    base = {"lr": np.array([1e-2], np.float32), "step": np.array([1], np.int64)}
    cases = {
        "empty lists": ([], [], [], []),
        "gradients shorter": (w, g[:1], m1, m2),
        "momentums_2 shorter": (w, g, m1, m2[:1]),
        "gradient shape [4,3] vs weight [3,4]": (w, [g[0].reshape(4, 3), g[1]], m1, m2),
        "momentum_2 shape [5,1] vs [5]": (w, g, m1, [m2[0], m2[1].reshape(5, 1)]),
        "gradient same size other rank [12] vs [3,4]": (w, [g[0].reshape(12), g[1]], m1, m2),
    }
    for what, (ww, gg, a, b) in cases.items():
        out, err = _try(lambda: session(adamw_model({})),
                        dict(base, weights=ww, gradients=gg, momentums_1=a, momentums_2=b))
        print(f"  {what}: " + (err or f"no error, flag={out[0]!r}"))
    full = dict(base, weights=w, gradients=g, momentums_1=m1, momentums_2=m2)
    for what, feeds in [("lr of 2 values [0.01, 5]", dict(full, lr=np.array([1e-2, 5.0], np.float32))),
                        ("step of 2 values [1, 7]", dict(full, step=np.array([1, 7], np.int64))),
                        ("NaN in a gradient", dict(full, gradients=[np.full((3, 4), np.nan, np.float32), g[1]]))]:
        m = adamw_model({})
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
        m.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "k"
        m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "k"
        out, err = _try(lambda: session(m), feeds)
        ref = adamw(feeds["lr"][:1], feeds["step"][:1], feeds["weights"], feeds["gradients"], m1, m2,
                    weight_decay=float(np.float32(0.01)), alpha=float(np.float32(0.9)),
                    beta=float(np.float32(0.999)), epsilon=float(np.float32(1e-8)))
        print(f"  {what}: " + (err or f"no error, flag={out[0]!r}, maxrel vs the first value's update"
                                      f" {_maxrel(out[1][1:], ref[1][1:]):.2e}, w[0] finite:"
                                      f" {bool(np.isfinite(out[1][0]).all())}"))
    mixed = dict(full, gradients=[x.astype(np.float64) for x in g])
    out, err = _try(lambda: session(adamw_model({})), mixed)
    print("  gradients float64, declared seq(float): " + (err or "no error"))
    for attrs in ({"adam_mode": 2}, {"correct_bias": 2}, {"adam_mode": 0, "correct_bias": 0}):
        out, err = _try(lambda: session(adamw_model(attrs)), dict(base, weights=w, gradients=g, momentums_1=m1,
                                                                     momentums_2=m2))
        print(f"  {attrs}: " + (err or f"no error, flag={out[0]!r}"))


def probe_dtypes():
    print("== element dtypes other than float32 ==")
    rng = np.random.default_rng(4)
    for dt in (np.float64, np.float16):
        w, g, m1, m2 = _lists(rng, [(3, 4)], dt)
        out, err = _try(lambda: session(adamw_model({}, elem=NP2ONNX[dt])),
                        {"lr": np.array([1e-2], np.float32), "step": np.array([1], np.int64), "weights": w,
                         "gradients": g, "momentums_1": m1, "momentums_2": m2})
        print(f"  AdamW seq({np.dtype(dt).name}): " + (err or f"ran, out dtype {out[1][0].dtype}"))
        ins = [_t("lr", TensorProto.FLOAT, [1]), _seq("weights", NP2ONNX[dt]), _seq("gradients", NP2ONNX[dt])]
        outs = [_t("update_completed", TensorProto.BOOL, [1]), _seq("updated_weights", NP2ONNX[dt])]
        out, err = _try(lambda: session(model("SGDOptimizerV2", ins, outs, {})),
                        {"lr": np.array([0.1], np.float32), "weights": w, "gradients": g})
        print(f"  SGDOptimizerV2 seq({np.dtype(dt).name}): " + (err or f"ran, out dtype {out[1][0].dtype}"))
        out, err = _try(lambda: session(clip_model({}, elem=NP2ONNX[dt])), {"gradients": g})
        print(f"  InplaceClipGradNorm seq({np.dtype(dt).name}): " + (err or f"ran, out dtype {out[0][0].dtype}"))


def probe_trajectory():
    print("== AdamW 10 steps fed back (step = completed + 1, as the training API feeds it), float32 ORT vs float64 ==")
    rng = np.random.default_rng(5)
    shapes = [(64, 32), (32,)]
    w0 = [rng.normal(0, 1, s).astype(np.float32) for s in shapes]
    grads = [[rng.normal(0, 1, s).astype(np.float32) for s in shapes] for _ in range(10)]
    for mode, cb in ((0, 1), (1, 1), (1, 0)):
        attrs = {"adam_mode": mode, "correct_bias": cb, "weight_decay": 0.01}
        sess = session(adamw_model(attrs))
        ow, om1, om2 = w0, [np.zeros_like(x) for x in w0], [np.zeros_like(x) for x in w0]
        rw, r1, r2 = w0, om1, om2
        for t, g in enumerate(grads, start=1):
            flag, ow, om1, om2 = sess.run(None, _copy({"lr": np.array([1e-2], np.float32),
                                                        "step": np.array([t], np.int64), "weights": ow,
                                                        "gradients": g, "momentums_1": om1, "momentums_2": om2}))
            _, rw, r1, r2 = adamw(np.array([np.float32(1e-2)]), np.array([t]), rw, g, r1, r2, adam_mode=mode,
                                  correct_bias=cb, weight_decay=float(np.float32(0.01)),
                                  alpha=float(np.float32(0.9)), beta=float(np.float32(0.999)),
                                  epsilon=float(np.float32(1e-8)))
        def scaled(a, b):  # max |a - b| / max |b|: the error against the list's scale
            return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b)) / max(float(np.max(np.abs(y))) for y in b)
        print(f"  adam_mode {mode} correct_bias {cb}: after 10 steps maxrel w={_maxrel(ow, rw):.2e}"
              f" m1={_maxrel(om1, r1):.2e} m2={_maxrel(om2, r2):.2e}; max abs err / max |ref|:"
              f" w={scaled(ow, rw):.2e} m1={scaled(om1, r1):.2e} m2={scaled(om2, r2):.2e}")


PROBES = {"adamw": probe_adamw, "sgd": probe_sgd, "clip": probe_clip, "errors": probe_errors, "dtypes": probe_dtypes,
          "trajectory": probe_trajectory}

if __name__ == "__main__":
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    for name in sys.argv[1:] or PROBES:
        PROBES[name]()
