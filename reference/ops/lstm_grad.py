"""LSTMGrad (com.microsoft): backpropagation through time for the LSTM of reference.forward.lstm.

The vector-Jacobian product of LSTMTraining's (HAll, Ht, Ct) with respect to X, W, R, B, initial_h,
initial_c and P, **at P = 0**: LSTMGrad takes no P (and no B), so it is the gradient of an LSTM without
peepholes, and dP is the gradient with respect to P evaluated at P = 0. It works from the saved state as a
training step does: the previous states of each step are read from HAll and CAll (or initial_h /
initial_c), the gates i, o, f_, c~ from IOFC (post-activation), the gate slopes from those outputs
(f'(i) from i, g'(c~) from c~) and h'(C) from C itself (CAll). So LeakyRelu / Elu with alpha < 0 are fine as
h but raise as f or g (their output does not tell the branch, as in GRUGrad). No clip (lstm_grad_check
rejects it).
Per step, with dH and dC the gradients reaching the step's H' and C' (C' also feeds H' = o h(C')):
    do = dH h(C')      dC += dH o h'(C')      di = dC c~      dc~ = dC i      df = dC C      dC_prev = dC f_
    input_forget = 1 (f_ = 1 - i): di -= df and the forget gate has no pre-activation gradient
    da = [di f'(i), do f'(o), df f'(f_), dc~ g'(c~)]      dH_prev = da R      dX_t = da W
    dPi += da_i C      dPo += da_o C'      dPf += da_f C   (summed over batch and steps)
Missing initial_h, initial_c, grad_HAll, grad_Ht, grad_Ct are zeros; steps skipped by sequence_lens pass
both state gradients through unchanged.
"""
import numpy as np

from reference.forward.gru import step_order
from reference.forward.lstm import as_state, lstm_case_shapes, lstm_config, lstm_grad_check


def _slope_at_input(act, x, y):
    """h'(C) from C itself (CAll is h's input): unlike the gate slopes, which only have their outputs, this
    also holds for LeakyRelu and Elu with alpha < 0, whose output does not determine the branch."""
    name = act.name.lower()
    if name == "leakyrelu":
        return np.where(x >= 0, 1.0, act.alpha)
    if name == "elu":
        return np.where(x >= 0, 1.0, act.alpha * np.exp(np.minimum(x, 0.0)))
    return act.slope(y)


def _declared(shape):
    """A declared output shape as a stand-in array (its shape is all the check reads), or None."""
    return None if shape is None else np.broadcast_to(0.0, tuple(int(v) for v in shape))


def lstm_grad(X, W, R, sequence_lens, initial_h, initial_c, HAll, CAll, IOFC, grad_HAll, grad_Ht, grad_Ct, *,
              hidden_size, direction="forward", activations=None, activation_alpha=None, activation_beta=None,
              clip=None, input_forget=0, dB_shape=None, dP_shape=None):
    """(dX [S, B, I], dW [D, 4H, I], dR [D, 4H, H], dB [D, 8H], dH0 [D, B, H], dC0 [D, B, H], dP [D, 3H]).

    dB_shape and dP_shape are the shapes the harness declares for dB and dP (B and P are not inputs); they
    must agree with hidden_size and direction."""
    X, W, R, initial_h, initial_c, HAll, CAll, IOFC, grad_HAll, grad_Ht, grad_Ct = (
        None if a is None else np.asarray(a, dtype=np.float64)
        for a in (X, W, R, initial_h, initial_c, HAll, CAll, IOFC, grad_HAll, grad_Ht, grad_Ct))
    if HAll is None or CAll is None or IOFC is None:
        raise ValueError("LSTMGrad needs the saved HAll, CAll and IOFC")
    cfg = lstm_config(X, W, R, sequence_lens, hidden_size=hidden_size, direction=direction, activations=activations,
                      activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                      input_forget=input_forget, check=lstm_grad_check, initial_h=initial_h, initial_c=initial_c,
                      HAll=HAll, CAll=CAll, IOFC=IOFC, grad_HAll=grad_HAll, grad_Ht=grad_Ht, grad_Ct=grad_Ct,
                      B=_declared(dB_shape), P=_declared(dP_shape))
    S, Bn, H, D = cfg.seq, cfg.batch, cfg.hidden, cfg.directions
    H0, C0 = as_state(initial_h, cfg), as_state(initial_c, cfg)
    gY = np.zeros(HAll.shape) if grad_HAll is None else grad_HAll
    gHt = np.zeros((D, Bn, H)) if grad_Ht is None else grad_Ht
    gCt = np.zeros((D, Bn, H)) if grad_Ct is None else grad_Ct

    dX = np.zeros(X.shape)
    dW, dR = np.zeros(W.shape), np.zeros(R.shape)
    dB, dP = np.zeros((D, 8 * H)), np.zeros((D, 3 * H))
    dH0, dC0 = np.zeros((D, Bn, H)), np.zeros((D, Bn, H))
    for d in range(D):
        f, g, h = cfg.acts[d]
        dA = np.zeros((S, Bn, 4 * H))      # gradients of the gate pre-activations, [i | o | f | c]
        prev_h = np.zeros((S, Bn, H))      # H_prev of each step (the input of R)
        order = list(step_order(cfg, d))
        dh_next, dc_next = gHt[d], gCt[d]
        for pos in range(len(order) - 1, -1, -1):
            t = order[pos]
            live = cfg.valid[t][:, None]
            if pos == 0:
                h_prev, c_prev = H0[d], C0[d]
            else:
                # A skipped previous step (only possible at the start of a reverse run) means the initial state.
                t_prev = order[pos - 1]
                was = cfg.valid[t_prev][:, None]
                h_prev = np.where(was, HAll[t_prev, d], H0[d])
                c_prev = np.where(was, CAll[t_prev, d], C0[d])
            i, o, forget, cand = (IOFC[t, d, :, k * H:(k + 1) * H] for k in range(4))
            c = CAll[t, d]
            hc = h(c)
            dh = np.where(live, dh_next + gY[t, d], 0.0)
            dc = np.where(live, dc_next, 0.0) + dh * o * _slope_at_input(h, c, hc)
            da_o = dh * hc * f.slope(o)
            di = dc * cand
            df = dc * c_prev
            if cfg.input_forget:
                di = di - df
                da_f = np.zeros_like(df)
            else:
                da_f = df * f.slope(forget)
            da_i = di * f.slope(i)
            da_c = dc * i * g.slope(cand)
            dA[t] = np.concatenate([da_i, da_o, da_f, da_c], axis=1)
            prev_h[t] = h_prev
            # P = 0: the peephole paths add nothing to dC_prev, but their weights get the gradients
            dP[d, :H] += np.sum(da_i * c_prev, axis=0)
            dP[d, H:2 * H] += np.sum(da_o * c, axis=0)
            dP[d, 2 * H:] += np.sum(da_f * c_prev, axis=0)
            dh_next = np.where(live, dA[t] @ R[d], dh_next)
            dc_next = np.where(live, dc * forget, dc_next)
        dH0[d], dC0[d] = dh_next, dc_next
        dX += dA @ W[d]
        dW[d] = np.einsum("tbg,tbi->gi", dA, X)
        dR[d] = np.einsum("tbg,tbh->gh", dA, prev_h)
        dB[d, :4 * H] = dB[d, 4 * H:] = dA.sum(axis=(0, 1))
    return dX, dW, dR, dB, dH0, dC0, dP


def lstm_grad_case_shapes(params):
    """LSTMGrad shapes: lstm_case_shapes, with the forward-only B and P always given (LSTMGrad takes neither;
    its spec draws P as zeros, the point its dP is the gradient at)."""
    return lstm_case_shapes({**params, "with_peepholes": True})


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------
# LSTMTraining's hooks are here too: it is the forward-with-state half of this op.

def bench_training_flops(shapes, attributes):
    """Per step X W^T and H R^T: 2 * batch * 4H * (I + H) for each of seq steps."""
    seq, batch, size = shapes["X"]
    hidden = attributes["hidden_size"]
    return 2 * seq * batch * 4 * hidden * (size + hidden)


def bench_flops(shapes, attributes):
    """About twice the forward's: dX, dW, dR and dH each take a product of the forward's size."""
    return 2 * bench_training_flops(shapes, attributes)


def _torch_lstm(inputs, attributes, h0_at: int):
    """torch.nn.LSTM: the same computation (gate order i, f, g, o; weights drawn by torch)."""
    import torch

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(inputs[0].shape[2], attributes["hidden_size"])
    x = torch.from_numpy(inputs[0]).requires_grad_(True)
    h0 = torch.from_numpy(inputs[h0_at]).requires_grad_(True)
    c0 = torch.from_numpy(inputs[h0_at + 1]).requires_grad_(True)
    return lstm, x, h0, c0


def bench_torch_training(inputs, attributes):
    lstm, x, h0, c0 = _torch_lstm(inputs, attributes, h0_at=5)
    return lambda: lstm(x, (h0, c0))


def bench_torch(inputs, attributes):
    import torch

    lstm, x, h0, c0 = _torch_lstm(inputs, attributes, h0_at=4)
    out, _ = lstm(x, (h0, c0))  # the forward once, outside the timing
    grad = torch.from_numpy(inputs[9].reshape(out.shape))
    wrt = [x, h0, c0, *lstm.parameters()]
    return lambda: torch.autograd.grad(out, wrt, grad, retain_graph=True)


# ---- model: a real graph's node -> case params (cases.from_node) -----------------------------------------------

def from_node(node):
    """LSTMGrad and LSTMTraining: seq, batch and input_size from X [seq, batch, input_size] (layout 0, the only
    one the specs have), hidden_size from R when the node does not write it, with_peepholes when P is given
    (LSTMTraining; LSTMGrad takes no P)."""
    from reference.ops.gru_grad import from_node as recurrent_params  # lazy: the GRU module only for a graph's node

    params = recurrent_params(node)  # the same X, R and sequence_lens rules
    if node.shapes.get("P") is not None:
        params["with_peepholes"] = True
    return params
