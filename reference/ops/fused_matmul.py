"""FusedMatMul (com.microsoft): Y = alpha * matmul(op(A), op(B)), numpy matmul semantics after the transposes.

Not the gradient of a forward op: ORT's gradient builder writes it for half of every MatMul gradient
(dA = FusedMatMul(dY, B, transB=1), dB = FusedMatMul(A, dY, transA=1)) and in attention's batched products.
op(X) for an operand of rank r (the schema's shape inference, contrib_defs.cc FusedMatMulShapeInference):
  - r == 1: X itself (transX and transBatchX change nothing on a vector; matmul then promotes it);
  - r == 2: X, or X^T with transX (transBatchX moves nothing: a matrix has no batch axes);
  - r >= 3: transBatchX moves axis 0 to position r-2 ([M, b0..bn, K] -> [b0..bn, M, K]), then transX swaps the
    last two axes.
The reference is proven against onnx's ReferenceEvaluator (Transpose, MatMul, Mul) in tests/test_fused_matmul.py.
"""
import numpy as np


def _rank_ok(shape) -> bool:
    return len(shape) >= 1


def op_shape(shape, trans, trans_batch):
    """The shape of op(X) for X of `shape` (see the module docstring)."""
    s = list(shape)
    if len(s) >= 3 and trans_batch:
        s = s[1:-1] + [s[0], s[-1]]
    if len(s) >= 2 and trans:
        s[-2], s[-1] = s[-1], s[-2]
    return tuple(int(d) for d in s)


def op_view(X, trans, trans_batch):
    """op(X) as an array (a view)."""
    if X.ndim >= 3 and trans_batch:
        X = np.moveaxis(X, 0, -2)
    if X.ndim >= 2 and trans:
        X = np.swapaxes(X, -1, -2)
    return X


def output_shape(A_shape, B_shape, attributes):
    """Y's shape, or raises ValueError naming what does not fit."""
    a = op_shape(A_shape, int(attributes.get("transA", 0)), int(attributes.get("transBatchA", 0)))
    b = op_shape(B_shape, int(attributes.get("transB", 0)), int(attributes.get("transBatchB", 0)))
    am = a if len(a) >= 2 else (1,) + a
    bm = b if len(b) >= 2 else b + (1,)
    if am[-1] != bm[-2]:
        raise ValueError(f"inner dimensions differ: op(A) is {list(a)} (K = {am[-1]}), op(B) is {list(b)} (K = {bm[-2]})")
    try:
        batch = np.broadcast_shapes(am[:-2], bm[:-2])
    except ValueError:
        raise ValueError(f"the batch axes of op(A) {list(a)} and op(B) {list(b)} do not broadcast") from None
    out = tuple(batch) + ((am[-2],) if len(a) >= 2 else ()) + ((bm[-1],) if len(b) >= 2 else ())
    return tuple(int(d) for d in out)


def fused_matmul(A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """Return Y = alpha * matmul(op(A), op(B)) in float64 (alpha * 0 for an empty K: IEEE, NaN for alpha inf/NaN)."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    a = op_view(A, int(transA), int(transBatchA))
    b = op_view(B, int(transB), int(transBatchB))
    with np.errstate(all="ignore"):
        return np.float64(alpha) * np.matmul(a, b)


# ---- hooks -------------------------------------------------------------------------------------------------

def stored_shape(op_shape_, trans, trans_batch):
    """The inverse of op_shape: the stored shape whose op() has shape op_shape_."""
    s = list(op_shape_)
    if len(s) >= 2 and trans:
        s[-2], s[-1] = s[-1], s[-2]
    if len(s) >= 3 and trans_batch:
        s = [s[-2]] + s[:-2] + [s[-1]]
    return tuple(int(d) for d in s)


def case_shapes(params):
    """{A, B} from the case param `shapes: [A's shape, B's shape]` (as the operands are stored, before op()), or
    from `op_shapes: [op(A)'s shape, op(B)'s shape]` stored back through the case's transA / transBatchA / transB /
    transBatchB (so that one group crosses every attribute value with the same product)."""
    if "shapes" in params:
        a, b = (tuple(int(d) for d in s) for s in params["shapes"])
    else:
        oa, ob = params["op_shapes"]
        a = stored_shape(oa, int(params.get("transA", 0)), int(params.get("transBatchA", 0)))
        b = stored_shape(ob, int(params.get("transB", 0)), int(params.get("transBatchB", 0)))
    return {"A": a, "B": b}


def y_shape(shapes, attributes):
    """shape_fn of Y; an invalid case (K or batch mismatch) gets A's batch with op(A)'s M and op(B)'s N."""
    try:
        return output_shape(shapes["A"], shapes["B"], attributes)
    except ValueError:
        return tuple(int(d) for d in shapes["A"])


def problem(shapes, attributes):
    """valid_if: both operands of rank >= 1, equal K after the transposes, batch axes that broadcast."""
    a, b = tuple(shapes["A"]), tuple(shapes["B"])
    if not _rank_ok(a) or not _rank_ok(b):
        return f"FusedMatMul needs operands of rank >= 1, got A {list(a)} and B {list(b)}"
    try:
        output_shape(a, b, attributes)
    except ValueError as e:
        return str(e)
    return None


def reduction_length(A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """K: the products summed into one element of Y."""
    a = op_shape(np.shape(A), int(transA), int(transBatchA))
    return int(a[-1])


def magnitude(A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    return fused_matmul(np.abs(A), np.abs(B), alpha=abs(alpha), transA=transA, transB=transB,
                        transBatchA=transBatchA, transBatchB=transBatchB)


def bench_flops(shapes, attributes):
    """2 * M * N * K per output matrix (a multiply and an add per term)."""
    y = output_shape(shapes["A"], shapes["B"], attributes)
    k = op_shape(shapes["A"], int(attributes.get("transA", 0)), int(attributes.get("transBatchA", 0)))[-1]
    return 2 * int(np.prod(y)) * int(k)


def bench_torch(inputs, attributes):
    """torch.matmul on the transposed views (torch's matmul reads strided operands; alpha scales the result
    only when it is not 1, as a scaled attention score would)."""
    import torch

    from reference._torch import tensors

    a, b = tensors(*inputs)
    if a.dim() >= 3 and attributes.get("transBatchA", 0):
        a = torch.movedim(a, 0, -2)
    if a.dim() >= 2 and attributes.get("transA", 0):
        a = a.transpose(-1, -2)
    if b.dim() >= 3 and attributes.get("transBatchB", 0):
        b = torch.movedim(b, 0, -2)
    if b.dim() >= 2 and attributes.get("transB", 0):
        b = b.transpose(-1, -2)
    alpha = float(attributes.get("alpha", 1.0))
    if alpha == 1.0:
        return lambda: torch.matmul(a, b)
    return lambda: torch.matmul(a, b).mul_(alpha)


def from_node(node) -> dict:
    """cases.from_node: `shapes` = [A's, B's] as stored; the node's attributes as written (every one a spec
    attribute, so match() takes them from the node)."""
    return {"shapes": [list(node.shape("A")), list(node.shape("B"))]}
