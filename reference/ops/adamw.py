"""AdamWOptimizer (com.microsoft): one AdamW step over a sequence (list) of parameter tensors.

ORT's training API (orttraining/training_api/optimizer.cc, Optimizer::Step) runs it once per optimizer step with
`step` = the number of completed steps + 1 (so the first call has step 1) and feeds the updated weights and moments
back: updated_weights -> weights, updated_momentums_1 -> momentums_1, updated_momentums_2 -> momentums_2 at the next
call; the step counter advances only when updated_flag is true. Two formulations (attribute adam_mode):

* adam_mode 0 (torch.optim.AdamW, weight decay decoupled and applied first, bias correction on the moments):
      w  <- w - lr * weight_decay * w
      m1 <- alpha * m1 + (1 - alpha) * g
      m2 <- beta  * m2 + (1 - beta)  * g^2
      w  <- w - lr * (m1 / c1) / (sqrt(m2 / c2) + epsilon),  c1 = 1 - alpha^step, c2 = 1 - beta^step
  correct_bias must be 1 in this mode (the schema's contract: ORT rejects correct_bias 0 with adam_mode 0).
* adam_mode 1 (the AdamW of HuggingFace transformers <= 4.x, transformers.optimization.AdamW: bias correction folded
  into the step size, weight decay applied last to the already-updated weight):
      m1, m2 as above
      w  <- w - lr_t * m1 / (sqrt(m2) + epsilon),  lr_t = lr * sqrt(c2) / c1 (correct_bias 1) or lr (correct_bias 0)
      w  <- w - lr * weight_decay * w
With update_signal present and false nothing is updated: the outputs are the inputs and updated_flag is false.
Bias correction needs step >= 1 (c1 = 0 at step 0: a division by zero), so step < 1 with correct_bias 1 is invalid.
All arithmetic in float64 whatever the input dtypes; the lists must have equal lengths (>= 1) and matching shapes.
"""
from __future__ import annotations

import numpy as np


def _as_list(name, seq):
    if seq is None or isinstance(seq, np.ndarray):
        raise ValueError(f"{name} must be a sequence (list) of tensors")
    return [np.asarray(t, dtype=np.float64) for t in seq]


def check_lists(names_and_lists):
    """Raise ValueError unless the lists have the same length >= 1 and the same shape at each index."""
    (n0, l0), *rest = names_and_lists
    if len(l0) == 0:
        raise ValueError(f"{n0} is an empty sequence; at least one tensor is required")
    for n, lst in rest:
        if len(lst) != len(l0):
            raise ValueError(f"{n} has {len(lst)} tensors, {n0} has {len(l0)}")
    for i in range(len(l0)):
        for n, lst in rest:
            if lst[i].shape != l0[i].shape:
                raise ValueError(f"{n}[{i}] has shape {list(lst[i].shape)}, {n0}[{i}] has {list(l0[i].shape)}")


def validate(step, *, alpha, beta, epsilon, weight_decay, correct_bias, adam_mode):
    """None when the attributes and step are valid, else the reason."""
    if int(adam_mode) not in (0, 1):
        return f"adam_mode {adam_mode} must be 0 or 1"
    if int(correct_bias) not in (0, 1):
        return f"correct_bias {correct_bias} must be 0 or 1"
    if int(adam_mode) == 0 and int(correct_bias) != 1:
        return "adam_mode 0 (torch AdamW) requires correct_bias 1"
    if int(correct_bias) == 1 and int(np.asarray(step).reshape(-1)[0]) < 1:
        return f"step {int(np.asarray(step).reshape(-1)[0])} with correct_bias 1: bias correction needs step >= 1"
    return None


def adamw(lr, step, weights, gradients, momentums_1, momentums_2, update_signal=None, *, alpha=0.9, beta=0.999,
          epsilon=1e-8, weight_decay=0.0, correct_bias=1, adam_mode=0):
    """Return (updated_flag, updated_weights, updated_momentums_1, updated_momentums_2), the lists in float64."""
    w = _as_list("weights", weights)
    g = _as_list("gradients", gradients)
    m1 = _as_list("momentums_1", momentums_1)
    m2 = _as_list("momentums_2", momentums_2)
    check_lists([("weights", w), ("gradients", g), ("momentums_1", m1), ("momentums_2", m2)])
    if np.asarray(lr).size != 1 or np.asarray(step).size != 1:
        raise ValueError("lr and step must hold one value each")
    why = validate(step, alpha=alpha, beta=beta, epsilon=epsilon, weight_decay=weight_decay,
                   correct_bias=correct_bias, adam_mode=adam_mode)
    if why:
        raise ValueError(why)
    step_shape = np.asarray(step).shape
    if update_signal is not None and not bool(np.asarray(update_signal).reshape(-1)[0]):
        return np.zeros(step_shape, dtype=bool), w, m1, m2
    lr = float(np.asarray(lr).reshape(-1)[0])
    t = int(np.asarray(step).reshape(-1)[0])
    a, b, eps, wd = float(alpha), float(beta), float(epsilon), float(weight_decay)
    c1 = 1.0 - a ** t if int(correct_bias) else 1.0
    c2 = 1.0 - b ** t if int(correct_bias) else 1.0
    out_w, out_m1, out_m2 = [], [], []
    with np.errstate(all="ignore"):
        for wi, gi, m1i, m2i in zip(w, g, m1, m2):
            n1 = a * m1i + (1.0 - a) * gi
            n2 = b * m2i + (1.0 - b) * gi * gi
            if int(adam_mode) == 0:
                wi = wi - lr * wd * wi
                wi = wi - lr * (n1 / c1) / (np.sqrt(n2 / c2) + eps)
            else:
                lr_t = lr * np.sqrt(c2) / c1
                wi = wi - lr_t * n1 / (np.sqrt(n2) + eps)
                wi = wi - lr * wd * wi
            out_w.append(wi)
            out_m1.append(n1)
            out_m2.append(n2)
    return np.ones(step_shape, dtype=bool), out_w, out_m1, out_m2


def adamw_check(shapes, attributes):
    """valid_if: a parameter list of at least one tensor (the other lists follow its shapes: shape_from), and
    adam_mode 0 only with correct_bias 1 (torch's AdamW always corrects the bias)."""
    if shapes.get("weights") == ():
        return "weights is an empty sequence; at least one tensor is required"
    if int(attributes["adam_mode"]) == 0 and int(attributes["correct_bias"]) != 1:
        return "adam_mode 0 (torch AdamW) requires correct_bias 1"
    return None


def adamw_values(inputs, attributes):
    """valid_values: bias correction divides by 1 - alpha^step, so it needs step >= 1."""
    step = inputs.get("step")
    if step is not None and int(attributes["correct_bias"]) == 1 and int(np.asarray(step).reshape(-1)[0]) < 1:
        return f"step {int(np.asarray(step).reshape(-1)[0])} with correct_bias 1: bias correction needs step >= 1"
    return None


def from_node(node):
    """The parameter list's shapes (gradients and moments have them too)."""
    return {"shape": [list(s) for s in node.shape("weights")]}


def bert_base_shapes(layers: int = 12) -> list[list[int]]:
    """The parameter list of BERT-base (hidden 768, FFN 3072, vocabulary 30522, 512 positions) with `layers` encoder
    layers, in the order torch's module lists them: 5 + 16 per layer + 2 tensors, 109.5 M values at 12 layers."""
    h, f = 768, 3072
    embeddings = [[30522, h], [512, h], [2, h], [h], [h]]
    layer = [[h, h], [h], [h, h], [h], [h, h], [h], [h, h], [h], [h], [h], [f, h], [f], [h, f], [h], [h], [h]]
    return embeddings + layer * layers + [[h, h], [h]]


def parameter_list(params):
    """cases.shapes: `bert_layers: N` gives weights BERT-base's parameter list with N layers (bert_base_shapes)."""
    return {"weights": bert_base_shapes(int(params["bert_layers"]))} if "bert_layers" in params else {}


def bench_bytes(shapes, attributes):
    """weights, gradients and both moments read, updated weights and moments written: 7 float32 values an element."""
    return 7 * 4 * sum(int(np.prod(s, dtype=np.int64)) for s in shapes["weights"])


def bench_torch(inputs, attributes, params):
    """torch.optim.AdamW over the whole list, `torch: foreach` (the multi-tensor path) or `torch: fused` (the fused
    CPU kernel), its state set to the inputs' moments and step (adam_mode 0, torch's AdamW)."""
    import torch

    from reference._torch import tensors

    lr, step = float(np.asarray(inputs[0]).reshape(-1)[0]), float(np.asarray(inputs[1]).reshape(-1)[0])
    params_ = [torch.nn.Parameter(t.clone()) for t in tensors(*inputs[2])]
    for p, g in zip(params_, tensors(*inputs[3])):
        p.grad = g.clone()
    how = params.get("torch", "foreach")
    opt = torch.optim.AdamW(params_, lr=lr, betas=(attributes["alpha"], attributes["beta"]), eps=attributes["epsilon"],
                            weight_decay=attributes["weight_decay"], **{how: True})
    for p, m1, m2 in zip(params_, tensors(*inputs[4]), tensors(*inputs[5])):
        opt.state[p] = {"step": torch.tensor(step - 1.0), "exp_avg": m1.clone(), "exp_avg_sq": m2.clone()}
    return opt.step
