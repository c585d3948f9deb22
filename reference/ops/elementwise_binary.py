"""Vector-Jacobian products of the broadcasting elementwise ops (Add, Sub, Mul, Div, Pow, Max, Min, Where, Clip),
as a training graph computes them: each input's gradient summed back over the axes broadcasting stretched
(reference._math.unbroadcast). The case-shape and validity hooks of their specs live here too, once for all, and the DivGrad kernel spec's
(div_grad*, at the end: div_vjp under the kernel's name)."""
import math

import numpy as np

from reference._math import unbroadcast


def _f64(*values):
    return [None if v is None else np.asarray(v, dtype=np.float64) for v in values]


def add_vjp(dY, A, B):
    dY, = _f64(dY)
    return unbroadcast(dY, np.shape(A)), unbroadcast(dY, np.shape(B))


def sub_vjp(dY, A, B):
    dY, = _f64(dY)
    return unbroadcast(dY, np.shape(A)), unbroadcast(-dY, np.shape(B))


def mul_vjp(dY, A, B):
    dY, = _f64(dY)
    return unbroadcast(dY * B, np.shape(A)), unbroadcast(dY * A, np.shape(B))


def div_vjp(dY, A, B):
    """Y = A / B: dA = dY / B, dB = -dY * A / B^2 (B = 0 gives the IEEE limits: inf or NaN)."""
    dY, A, B = _f64(dY, A, B)
    return unbroadcast(dY / B, A.shape), unbroadcast(-dY * A / (B * B), B.shape)


def pow_vjp(dY, A, B):
    """Y = A ** B: dA = dY * B * A^(B-1); dB = dY * Y * log(A), real only for A > 0 (A < 0 gives NaN: a group
    with a negative A asks for dA only). At A = 0, B * A^(B-1) is 0 for B > 1 and A^B * log A -> 0 for B > 0."""
    dY, A, B = _f64(dY, A, B)
    Y = np.power(A, B)
    dA = dY * np.where(B == 0, 0.0, B * np.power(A, B - 1))
    dB = dY * np.where(A == 0, np.where(B > 0, 0.0, -np.inf), Y * np.log(np.where(A == 0, 1.0, A)))
    return unbroadcast(dA, A.shape), unbroadcast(dB, B.shape)


def _select_vjp(dY, inputs, pick):
    """Max and Min: dY goes to the inputs equal to Y = pick(inputs); where several tie, it is split evenly
    among them (the subgradient torch.maximum / torch.minimum give: half to each of two)."""
    dY, = _f64(dY)
    present = [np.asarray(x, dtype=np.float64) for x in inputs if x is not None]
    Y = present[0]
    for x in present[1:]:
        Y = pick(Y, x)
    masks = [(x == Y).astype(np.float64) for x in present]
    share = dY / sum(masks)
    grads = iter(unbroadcast(share * m, x.shape) for x, m in zip(present, masks))
    return tuple(None if x is None else next(grads) for x in inputs)


def max_vjp(dY, A, B=None, C=None):
    return _select_vjp(dY, (A, B, C), np.maximum)


def min_vjp(dY, A, B=None, C=None):
    return _select_vjp(dY, (A, B, C), np.minimum)


def where_vjp(dOutput, condition, X, Y):
    """output = condition ? X : Y: dX = dOutput where condition, dY = dOutput elsewhere; the bool condition
    has no gradient."""
    dOutput, = _f64(dOutput)
    cond = np.broadcast_to(np.asarray(condition) != 0, dOutput.shape)
    return unbroadcast(np.where(cond, dOutput, 0.0), np.shape(X)), unbroadcast(np.where(cond, 0.0, dOutput), np.shape(Y))


def clip_vjp(dY, X, min=None, max=None):  # the ONNX input names
    """Y = min(max(X, min), max): dX = dY where min <= X <= max (the bounds themselves pass, as torch.clamp's
    gradient does), else 0; dmin = sum of dY where X < min, dmax = sum of dY where X > max (when min > max
    every Y is max: dmax takes all). An omitted bound bounds nothing and has no gradient (0 returned)."""
    dY, X, lo, hi = _f64(dY, X, min, max)
    above_lo = np.ones(X.shape, bool) if lo is None else X >= lo
    below_hi = np.ones(X.shape, bool) if hi is None else X <= hi
    if lo is not None and hi is not None and lo > hi:
        return np.zeros_like(dY), np.zeros(()), np.sum(dY)
    dX = np.where(above_lo & below_hi, dY, 0.0)
    dmin = np.zeros(()) if lo is None else np.sum(np.where(above_lo, 0.0, dY))
    dmax = np.zeros(()) if hi is None else np.sum(np.where(below_hi, 0.0, dY))
    return dX, dmin, dmax


def _broadcast(shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _case_shapes(params, names, grad):
    """{names..., grad} from the case param `shapes: [one shape per forward input]`: fewer shapes than names
    leave the last inputs out (None: the variadic Max and Min); the incoming gradient has the broadcast shape
    (for an invalid case whose shapes do not broadcast: the first input's)."""
    given = [tuple(int(d) for d in s) for s in params["shapes"]]
    if not 1 <= len(given) <= len(names):
        raise ValueError(f"shapes: give 1 to {len(names)} shapes, one per input of {', '.join(names)}")
    out = dict(zip(names, given + [None] * (len(names) - len(given))))
    out[grad] = _broadcast(given) or given[0]
    return out


def case_shapes(params):
    """{A, B, dY} from the case param `shapes: [A's shape, B's shape]`; dY has their broadcast shape."""
    return _case_shapes(params, ("A", "B"), "dY")


def variadic_shapes(params):
    """{A, B, C, dY} from `shapes: [A's shape(, B's(, C's))]` (Max and Min take 1 to 3 inputs here)."""
    return _case_shapes(params, ("A", "B", "C"), "dY")


def where_shapes(params):
    """{condition, X, Y, dOutput} from `shapes: [condition's shape, X's, Y's]`."""
    return _case_shapes(params, ("condition", "X", "Y"), "dOutput")


def broadcastable(shapes, attributes):
    """valid_if: the forward inputs must broadcast together (ONNX multidirectional broadcasting), and the
    incoming gradient must have their broadcast shape."""
    grads = [n for n in shapes if n.startswith("d")]
    given = [s for n, s in shapes.items() if n not in grads and s is not None]
    target = _broadcast(given)
    if target is None:
        return f"the input shapes {', '.join(str(list(s)) for s in given)} do not broadcast together"
    for g in grads:
        if shapes[g] is not None and tuple(shapes[g]) != target:
            return f"{g} has shape {list(shapes[g])}, not the inputs' broadcast shape {list(target)}"
    return None


def from_node(node) -> dict:
    """cases.from_node (Add, Sub, Mul, Div, Pow, Max, Min, Where): `shapes` = the forward inputs' shapes in
    input order (Max and Min: only those the node has)."""
    names = ("condition", "X", "Y") if "condition" in node.shapes else ("A", "B", "C")
    return {"shapes": [list(node.shapes[n]) for n in names if node.shapes.get(n) is not None]}


# ==== DivGrad (com.microsoft), the kernel the builder writes for Div: div_vjp above; the kernel spec's hooks (its
# shapes, validity and from_node are case_shapes, broadcastable and from_node above) ===========================

def div_grad(dY, A, B):
    """(dA, dB) = (unbroadcast(dY / B, A), unbroadcast(-dY * A / B^2, B))."""
    return div_vjp(dY, A, B)


# ---- DivGrad bench --------------------------------------------------------------------------------------------------------

def div_grad_bench_bytes(shapes, attributes, params):
    """dY, A and B read, dA and dB written (4 bytes each)."""
    a, b = (math.prod(s) for s in params["shapes"])
    return (math.prod(shapes["dY"]) + 2 * a + 2 * b) * 4


def div_grad_bench_torch(inputs, attributes):
    """torch autograd's two formulas for div (grad / b and -grad * a / b^2), each reduced to its input's shape
    with sum_to_size, as torch's div backward does."""
    from reference._torch import tensors

    dy, a, b = tensors(*inputs)

    def run():
        return (dy / b).sum_to_size(a.shape), (-dy * a / (b * b)).sum_to_size(b.shape)
    return run
