"""GRUGrad (com.microsoft): backpropagation through time for the GRU of reference.forward.gru.

Works from the saved state as a training step does: the previous hidden state of each step is read from
HAll (or initial_h), the gate values z, r, h~ from ZRH, and activation slopes are taken from those
outputs (sigmoid: z(1 - z), tanh: 1 - h~^2). Only linear_before_reset = 1 needs a product with the saved
state, H_prev Rh^T + Rbh, which ZRH does not hold. With clip, an entry's slope is zero where the forward
clipped: the pre-activations are recomputed from X, W, R, B, H_prev and r for that (comparing the saved
outputs with f(+-clip) would miss clipped entries of a float32 forward, whose outputs are rounded).
Per step, with dH' the gradient reaching the step's output H':
    dh~ = dH' (1 - z)    dz = dH' (H_prev - h~)    dH_prev = dH' z + (gate terms through R)
Missing B, initial_h, grad_HAll, grad_Ht are zeros; steps skipped by sequence_lens pass the state
gradient through unchanged.
"""
import numpy as np

from reference.forward.gru import as_inputs, gru_config, step_order


def _slope(act, y, pre, cfg):
    """Slope of the activation at its output y; zero where the pre-activation was clipped."""
    slope = act.slope(y)
    return slope if cfg.clip is None else np.where(np.abs(pre) > cfg.clip, 0.0, slope)


def gru_grad(X, W, R, B, sequence_lens, initial_h, HAll, ZRH, grad_HAll, grad_Ht, *, hidden_size,
             direction="forward", activations=None, activation_alpha=None, activation_beta=None, clip=None,
             linear_before_reset=0):
    """(dX [S, B, I], dW [D, 3H, I], dR [D, 3H, H], dB [D, 6H], dH0 [D, B, H])."""
    X, W, R, B, initial_h, HAll, ZRH, grad_HAll, grad_Ht = (
        None if a is None else np.asarray(a, dtype=np.float64)
        for a in (X, W, R, B, initial_h, HAll, ZRH, grad_HAll, grad_Ht))
    if HAll is None or ZRH is None:
        raise ValueError("GRUGrad needs the saved HAll and ZRH")
    cfg = gru_config(X, W, R, B, sequence_lens, initial_h, hidden_size=hidden_size, direction=direction,
                     activations=activations, activation_alpha=activation_alpha, activation_beta=activation_beta,
                     clip=clip, linear_before_reset=linear_before_reset, HAll=HAll, ZRH=ZRH, grad_HAll=grad_HAll,
                     grad_Ht=grad_Ht)
    X, W, R, B, H0 = as_inputs(X, W, R, B, initial_h, cfg)
    S, Bn, H, D = cfg.seq, cfg.batch, cfg.hidden, cfg.directions
    gY = np.zeros(HAll.shape) if grad_HAll is None else grad_HAll
    gHt = np.zeros((D, Bn, H)) if grad_Ht is None else grad_Ht

    dX = np.zeros(X.shape)
    dW, dR, dB = np.zeros(W.shape), np.zeros(R.shape), np.zeros(B.shape)
    dH0 = np.zeros((D, Bn, H))
    for d in range(D):
        f, g = cfg.acts[d]
        Rz, Rr, Rh = R[d, :H], R[d, H:2 * H], R[d, 2 * H:]
        Rbh = B[d, 5 * H:]
        Wz, Wr, Wh = W[d, :H], W[d, H:2 * H], W[d, 2 * H:]
        Wbz, Wbr, Wbh, Rbz, Rbr = (B[d, k * H:(k + 1) * H] for k in range(5))
        dA = np.zeros((S, Bn, 3 * H))      # gradients of the gate pre-activations, [z | r | h]
        dN = np.zeros((S, Bn, H))          # lbr = 1: gradient of H_prev Rh^T + Rbh
        prev = np.zeros((S, Bn, H))        # H_prev of each step
        reset_prev = np.zeros((S, Bn, H))  # lbr = 0: r * H_prev, the input of Rh
        order = list(step_order(cfg, d))
        state_grad = gHt[d]
        for pos in range(len(order) - 1, -1, -1):
            t = order[pos]
            live = cfg.valid[t][:, None]
            if pos == 0:
                h_prev = H0[d]
            else:
                # A skipped previous step (only possible at the start of a reverse run) means H0.
                t_prev = order[pos - 1]
                h_prev = np.where(cfg.valid[t_prev][:, None], HAll[t_prev, d], H0[d])
            z, r, h_cand = ZRH[t, d, :, :H], ZRH[t, d, :, H:2 * H], ZRH[t, d, :, 2 * H:]
            d_out = np.where(live, state_grad + gY[t, d], 0.0)
            pre_z = pre_r = pre_h = None
            if cfg.clip is not None:
                pre_z = X[t] @ Wz.T + Wbz + h_prev @ Rz.T + Rbz
                pre_r = X[t] @ Wr.T + Wbr + h_prev @ Rr.T + Rbr
                recur = r * (h_prev @ Rh.T + Rbh) if cfg.lbr else (r * h_prev) @ Rh.T + Rbh
                pre_h = X[t] @ Wh.T + Wbh + recur
            da_h = d_out * (1.0 - z) * _slope(g, h_cand, pre_h, cfg)
            d_prev = d_out * z
            if cfg.lbr:
                n = h_prev @ Rh.T + Rbh
                dr = da_h * n
                dN[t] = da_h * r
                d_prev = d_prev + dN[t] @ Rh
            else:
                d_rh = da_h @ Rh
                dr = d_rh * h_prev
                d_prev = d_prev + d_rh * r
                reset_prev[t] = r * h_prev
            da_z = d_out * (h_prev - h_cand) * _slope(f, z, pre_z, cfg)
            da_r = dr * _slope(f, r, pre_r, cfg)
            d_prev = d_prev + da_z @ Rz + da_r @ Rr
            dA[t] = np.concatenate([da_z, da_r, da_h], axis=1)
            prev[t] = h_prev
            state_grad = np.where(live, d_prev, state_grad)
        dH0[d] = state_grad
        dX += dA @ W[d]
        dW[d] = np.einsum("tbg,tbi->gi", dA, X)
        dR[d, :2 * H] = np.einsum("tbg,tbh->gh", dA[:, :, :2 * H], prev)
        dB[d, :3 * H] = dA.sum(axis=(0, 1))
        dB[d, 3 * H:5 * H] = dA[:, :, :2 * H].sum(axis=(0, 1))
        if cfg.lbr:
            dR[d, 2 * H:] = np.einsum("tbg,tbh->gh", dN, prev)
            dB[d, 5 * H:] = dN.sum(axis=(0, 1))
        else:
            dR[d, 2 * H:] = np.einsum("tbg,tbh->gh", dA[:, :, 2 * H:], reset_prev)
            dB[d, 5 * H:] = dA[:, :, 2 * H:].sum(axis=(0, 1))
    return dX, dW, dR, dB, dH0


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------
# GRUTraining's hooks are here too: it is the forward-with-state half of this op.

def bench_training_flops(shapes, attributes):
    """Per step X W^T and H R^T: 2 * batch * 3H * (I + H) for each of seq steps."""
    seq, batch, size = shapes["X"]
    hidden = attributes["hidden_size"]
    return 2 * seq * batch * 3 * hidden * (size + hidden)


def bench_flops(shapes, attributes):
    """About twice the forward's: dX, dW, dR and dH each take a product of the forward's size."""
    return 2 * bench_training_flops(shapes, attributes)


def _torch_gru(inputs, attributes):
    """torch.nn.GRU, ONNX's linear_before_reset = 1 form, weights drawn by torch; X and initial_h the op's own."""
    import torch

    torch.manual_seed(0)
    gru = torch.nn.GRU(inputs[0].shape[2], attributes["hidden_size"])
    x = torch.from_numpy(inputs[0]).requires_grad_(True)
    h0 = torch.from_numpy(inputs[5]).requires_grad_(True)
    return gru, x, h0


def bench_torch_training(inputs, attributes):
    gru, x, h0 = _torch_gru(inputs, attributes)
    return lambda: gru(x, h0)


def bench_torch(inputs, attributes):
    import torch

    gru, x, h0 = _torch_gru(inputs, attributes)
    out, _ = gru(x, h0)  # the forward once, outside the timing
    grad = torch.from_numpy(inputs[8].reshape(out.shape))
    wrt = [x, h0, *gru.parameters()]
    return lambda: torch.autograd.grad(out, wrt, grad, retain_graph=True)


# ---- model: a real graph's node -> case params (cases.from_node) -----------------------------------------------

def from_node(node):
    """GRUGrad and GRUTraining: seq, batch and input_size from X [seq, batch, input_size] (layout 0, the only one
    the specs have), hidden_size from R [directions, 3 * hidden, hidden] when the node does not write it."""
    seq, batch, size = node.shape("X")
    params = {"seq": seq, "batch": batch, "input_size": size}
    if "hidden_size" not in node.attributes:
        params["hidden_size"] = node.shape("R")[-1]
    if node.shapes.get("sequence_lens") is not None:
        params["with_sequence_lens"] = True
    return params
