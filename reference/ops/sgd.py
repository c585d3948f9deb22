"""SGDOptimizer (com.microsoft): one plain SGD step, new_weights = weights - ETA * gradients.

Not the gradient of a forward op: the optimizer graph of ORT's (legacy) training frontend runs it once per parameter
and step. ETA is the learning rate, one float32 value. new_gradients is the update applied, -ETA * gradients
(what ORT's kernel writes there, aliased onto the gradient buffer), not the gradient. Over a trajectory,
new_weights feeds weights at the next step; gradients and ETA are fresh inputs each step. The reference is proven
against torch.optim.SGD(lr=ETA) over 10 float64 steps in tests/test_sgd.py.
"""
import numpy as np


def sgd(ETA, W, G):
    """Return (NW, NG) in float64: NW = W - eta * G, NG = -eta * G."""
    eta = float(np.asarray(ETA, dtype=np.float64).reshape(-1)[0])
    w = np.asarray(W, dtype=np.float64)
    g = np.asarray(G, dtype=np.float64)
    delta = -eta * g
    return w + delta, delta


def sgd_ng_gradient(ETA, W, G):
    """A plausible wrong semantics: NG is G passed through rather than the update."""
    nw, _ = sgd(ETA, W, G)
    return nw, np.asarray(G, dtype=np.float64)


def sgd_shape_check(shapes, attributes):
    """valid_if: G has W's shape; ETA holds one value."""
    if tuple(shapes["W"]) != tuple(shapes["G"]):
        return f"G has shape {list(shapes['G'])}, W {list(shapes['W'])}: they must be equal"
    if int(np.prod(shapes["ETA"], dtype=np.int64)) != 1:
        return f"ETA has shape {list(shapes['ETA'])}; it must hold one value"
    return None


def bench_bytes(shapes, attributes):
    """W and G read, NW and NG written, float32 (ETA negligible)."""
    return 4 * 4 * int(np.prod(shapes["W"], dtype=np.int64))


def bench_torch(inputs, attributes):
    """torch.optim.SGD(lr).step() on one float32 parameter whose .grad is G (updates in place: W drifts, as in training)."""
    import torch

    from reference._torch import tensors

    eta = float(np.asarray(inputs[0]).reshape(-1)[0])
    (w, g) = tensors(inputs[1], inputs[2])
    p = torch.nn.Parameter(w.clone())
    p.grad = g.clone()
    opt = torch.optim.SGD([p], lr=eta, foreach=True)
    return opt.step


def from_node(node):
    """W's shape (G has it too)."""
    return {"shape": list(node.shape("W"))}
