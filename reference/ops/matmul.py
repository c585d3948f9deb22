"""Vector-Jacobian products of MatMul (numpy matmul semantics: 1-D operands, batch broadcasting) and Gemm
(transA, transB, alpha, beta, C broadcast to [M, N]), written from the math; with their case-shape,
validity and accuracy hooks."""
import numpy as np

from reference._math import unbroadcast

# ---- MatMul ----------------------------------------------------------------------------------------------

def _as_matrices(A_shape, B_shape):
    """(A's shape, B's shape) as matmul sees them: a 1-D A is a row [1, K], a 1-D B a column [K, 1]."""
    a = tuple(A_shape) if len(A_shape) >= 2 else (1,) + tuple(A_shape)
    b = tuple(B_shape) if len(B_shape) >= 2 else tuple(B_shape) + (1,)
    return a, b


def matmul_shape(A_shape, B_shape, check=True):
    """Y's shape under numpy matmul semantics. check=False: batch axes that do not broadcast take A's size
    and K is not compared (the shape an invalid case's dY is given)."""
    a, b = _as_matrices(A_shape, B_shape)
    if check:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    else:
        rank = max(len(a), len(b)) - 2
        pa, pb = (1,) * (rank - len(a) + 2) + a[:-2], (1,) * (rank - len(b) + 2) + b[:-2]
        batch = tuple(y if x == 1 else x for x, y in zip(pa, pb))
    out = tuple(batch) + (a[-2], b[-1])
    if len(B_shape) < 2:
        out = out[:-1]
    if len(A_shape) < 2:
        out = out[:-2] + out[-1:] if len(B_shape) >= 2 else out[:-1]
    return tuple(int(d) for d in out)


def matmul_vjp(dY, A, B):
    """dA = dY B^T and dB = A^T dY on the matrix views (1-D operands promoted as matmul does, dY given the
    axes they drop back), each summed over the batch axes broadcasting stretched, then reshaped to its input."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    dY = np.asarray(dY, dtype=np.float64)
    a_shape, b_shape = _as_matrices(A.shape, B.shape)
    a, b = A.reshape(a_shape), B.reshape(b_shape)
    g = dY
    if B.ndim < 2:
        g = g[..., None]
    if A.ndim < 2:
        g = np.expand_dims(g, -2)
    dA = unbroadcast(g @ np.swapaxes(b, -1, -2), a_shape).reshape(A.shape)
    dB = unbroadcast(np.swapaxes(a, -1, -2) @ g, b_shape).reshape(B.shape)
    return dA, dB


def matmul_case_shapes(params):
    """{A, B, dY} from the case param `shapes: [A's shape, B's shape]`; dY has Y's shape (unchecked, so that
    an invalid case with mismatched K or batch axes still gets one)."""
    a, b = (tuple(int(d) for d in s) for s in params["shapes"])
    return {"A": a, "B": b, "dY": matmul_shape(a, b, check=False)}


def matmul_problem(shapes, attributes):
    """valid_if: A and B at least 1-D, equal inner dimensions K, batch axes that broadcast, dY of Y's shape."""
    a, b, dy = (tuple(shapes[n]) for n in ("A", "B", "dY"))
    if len(a) < 1 or len(b) < 1:
        return f"MatMul needs operands of rank >= 1, got A {list(a)} and B {list(b)}"
    ka, kb = a[-1], (b[0] if len(b) == 1 else b[-2])
    if ka != kb:
        return f"inner dimensions differ: A {list(a)} has K = {ka}, B {list(b)} has K = {kb}"
    try:
        y = matmul_shape(a, b)
    except ValueError:
        return f"the batch axes of A {list(a)} and B {list(b)} do not broadcast"
    if dy != y:
        return f"dY shape {list(dy)} != Y's shape {list(y)}"
    return None


def matmul_reduction_lengths(dY, A, B):
    """Products summed into one element of (dA, dB): N (K for dB) times the batch entries broadcasting folds."""
    dA, dB = matmul_vjp(np.ones(np.shape(dY)), np.ones(np.shape(A)), np.ones(np.shape(B)))
    return (int(dA.max()) if dA.size else 0), (int(dB.max()) if dB.size else 0)


def matmul_magnitude(dY, A, B):
    return matmul_vjp(np.abs(dY), np.abs(A), np.abs(B))


# ---- Gemm -----------------------------------------------------------------------------------------------

def gemm_vjp(dY, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    """Y = alpha op(A) op(B) + beta C: dA = alpha dY op(B)^T (transposed back when transA), dB = alpha op(A)^T dY
    (transposed back when transB), dC = beta dY summed over the axes C was broadcast along."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    dY = np.asarray(dY, dtype=np.float64)
    a = A.T if transA else A
    b = B.T if transB else B
    da = alpha * (dY @ b.T)
    db = alpha * (a.T @ dY)
    dA = da.T if transA else da
    dB = db.T if transB else db
    if C is None:
        return dA, dB, None
    return dA, dB, beta * unbroadcast(dY, np.shape(C))


def gemm_case_shapes(params):
    """{A, B, C, dY} from `mkn: [M, K, N]`, transA / transB and `c_shape` (default [M, N])."""
    m, k, n = (int(d) for d in params["mkn"])
    a = (k, m) if params.get("transA", 0) else (m, k)
    b = (n, k) if params.get("transB", 0) else (k, n)
    c = tuple(int(d) for d in params.get("c_shape", (m, n)))
    return {"A": a, "B": b, "C": c, "dY": (m, n)}


def gemm_problem(shapes, attributes):
    """valid_if: A and B 2-D with equal K after transA / transB, C unidirectionally broadcastable to [M, N],
    dY of shape [M, N]."""
    a, b, dy = (tuple(shapes[n]) for n in ("A", "B", "dY"))
    if len(a) != 2 or len(b) != 2:
        return f"Gemm needs 2-D A and B, got A {list(a)} and B {list(b)}"
    m, ka = (a[1], a[0]) if attributes.get("transA") else a
    kb, n = (b[1], b[0]) if attributes.get("transB") else b
    if ka != kb:
        return f"inner dimensions differ: op(A) is [{m}, {ka}], op(B) is [{kb}, {n}]"
    c = shapes.get("C")
    if c is not None:
        c = tuple(c)
        if len(c) > 2 or any(d not in (1, want) for d, want in zip(c[::-1], (n, m))):
            return f"C {list(c)} does not broadcast to [M, N] = [{m}, {n}]"
    if dy != (m, n):
        return f"dY shape {list(dy)} != Y's shape [{m}, {n}]"
    return None


def gemm_reduction_lengths(dY, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    """Products summed into one element of (dA, dB, dC): N, M, and dY's elements per element of C."""
    m, n = np.shape(dY)
    return int(n), int(m), (int(m * n // max(1, np.size(C))) if C is not None else 0)


def gemm_magnitude(dY, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    dA, dB, dC = gemm_vjp(np.abs(dY), np.abs(A), np.abs(B), None if C is None else np.abs(C), alpha=abs(alpha),
                          beta=abs(beta), transA=transA, transB=transB)
    return dA, dB, dC


def matmul_from_node(node) -> dict:
    """cases.from_node (MatMul): `shapes` = [A's, B's]."""
    return {"shapes": [list(node.shape("A")), list(node.shape("B"))]}


def gemm_from_node(node) -> dict:
    """cases.from_node (Gemm): M, K, N read through the node's transA / transB; `c_shape` when C is present
    (an absent C is the `omit` match() adds)."""
    a, b = node.shape("A"), node.shape("B")
    (k, m) = a if node.attributes.get("transA", 0) else a[::-1]
    n = b[0] if node.attributes.get("transB", 0) else b[1]
    params = {"mkn": [m, k, n]}
    if node.shapes.get("C") is not None:
        params["c_shape"] = list(node.shape("C"))
    return params
