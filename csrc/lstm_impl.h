/* LSTM forward (LSTMTraining) and backward (LSTMGrad) for one element type; included by lstm.c with
 * T, SFX(name), SIGM, TANH and DT defined. Not a standalone header.
 *
 * Forward, per direction d and step t (processing order t = 0..S-1, or S-1..0 for a reverse
 * direction), with f, g, h the direction's activations (Sigmoid, Tanh, Tanh by default), a_q the
 * gate pre-activations xw_q + Hp Rq^T + Wbq + Rbq (clipped to [-clip, clip] when clip is given):
 *   i = f(a_i + Pi*Cp), f_ = f(a_f + Pf*Cp) (input_forget: 1 - i), c~ = g(a_c),
 *   C = f_*Cp + i*c~, o = f(a_o + Po*C), H = o*h(C).
 * Hidden columns are cut into fixed blocks (rnn_blocks, by H alone), each thread owning whole blocks;
 * W's and R's rows are permuted block-major (block [j0, j1) holds rows i j0..j1, o j0..j1, f j0..j1,
 * c j0..j1), so one product gives a block's columns of all four gates. Steps go in chunks of about 768 KiB
 * of products (lstm_chunk_steps, by the shapes alone): per chunk each thread computes its blocks' X W^T for the
 * chunk's steps into xw (a chunk-sized buffer that stays in cache), then per step adds Hp R^T into its
 * columns of xw (beta = 1) and runs its gate loop there; the end-of-step barrier is the only point
 * where threads meet (the next products read all of H). float32 products use opc_sgemm_packed with
 * R and W packed once per call (AVX2 and up), each thread packing its own blocks, instead of a BLAS call
 * that repacks R every step. Each step writes its states straight into HAll and CAll when they are wanted
 * (state_slot), else into two [B, H] buffers per quantity; with sequence_lens a row past its length
 * carries its state unchanged and its HAll, CAll and IOFC rows are 0.
 * Backward walks the steps in reverse processing order. Per step, phase 1 (each thread its own
 * columns): dH = dHnext + dHAll_t, the gate gradients da (into dA, [S*B, 4H] gate-major) and the cell
 * gradient dC (carried, column-local: no GEMM); a barrier; phase 2: dHprev[:, block] = da R[:, block]
 * (one GEMM per block). Phase 1 of the next step needs only the thread's own columns, so one barrier
 * per step. dX, dB and [dW | dR] = dA^T [X | Hp] (one GEMM; a subset computes both, so its bits are
 * the full run's) are GEMMs / column sums over all steps afterwards; dP (at P = 0:
 * dPi = sum da_i Cp, dPo = sum da_o C, dPf = sum da_f Cp) accumulates per column in step order.
 * Gate slopes come from the saved IOFC, h(C) and its slope from CAll. */

#define LSTM_PAR_MIN (1 << 19) /* multiply-adds per step (B*H*4H) below which the recurrence runs on one thread */
#define LSTM_MIN_BLOCK 64     /* least columns of a block (rnn_blocks) */

#include "rnn_impl.h"

/* s = h'(x) for the cell output from its input x and output y: act_slope's formulas, except that
 * LeakyRelu and Elu branch on x (their outputs do not tell the sides apart for alpha < 0). */
static void SFX(act_slope_x)(const rnn_act *a, const T *restrict x, const T *restrict y, T *restrict s, int64_t w) {
    if (a->kind == ACT_LEAKYRELU) {
        const T al = (T)a->alpha;
        for (int64_t j = 0; j < w; j++) s[j] = x[j] > 0 ? 1 : al;
    } else if (a->kind == ACT_ELU) {
        const T al = (T)a->alpha;
        for (int64_t j = 0; j < w; j++) s[j] = x[j] > 0 ? 1 : y[j] + al;
    } else {
        SFX(act_slope)(a, y, s, w);
    }
}

#define RP(name) const T *restrict name

/* ---- forward gate rows ---------------------------------------------------------------------- */

/* One batch row, w columns of a block, Sigmoid / Tanh / Tanh. x*: the block's columns of xw_t (Hp R^T
 * added), b*: the summed biases, p*: the peepholes (peep), cp: the previous cell state. */
static inline __attribute__((always_inline)) void SFX(fw_row_body)(bool peep, bool ifg, bool clip, int64_t w, T cl,
                                                                  RP(xi), RP(xo), RP(xf), RP(xc), RP(bi), RP(bo),
                                                                  RP(bf), RP(bc), RP(pi), RP(po), RP(pf), RP(cp),
                                                                  T *restrict oi, T *restrict oo, T *restrict of,
                                                                  T *restrict oc, T *restrict cn, T *restrict hn) {
#define CLIPV(a) (clip ? SFX(clipv)((a), cl) : (a))
    for (int64_t j = 0; j < w; j++) {
        T c_p = cp[j];
        T ai = xi[j] + bi[j];
        if (peep) ai = ai + pi[j] * c_p;
        T i = SIGM(CLIPV(ai));
        T f;
        if (ifg) {
            f = 1 - i;
        } else {
            T af = xf[j] + bf[j];
            if (peep) af = af + pf[j] * c_p;
            f = SIGM(CLIPV(af));
        }
        T cc = TANH(CLIPV(xc[j] + bc[j]));
        T C = f * c_p + i * cc;
        T ao = xo[j] + bo[j];
        if (peep) ao = ao + po[j] * C;
        T o = SIGM(CLIPV(ao));
        oi[j] = i;
        oo[j] = o;
        of[j] = f;
        oc[j] = cc;
        cn[j] = C;
        hn[j] = o * TANH(C);
    }
#undef CLIPV
}

#define FW_ROW_ARGS                                                                                          \
    int64_t w, T cl, RP(xi), RP(xo), RP(xf), RP(xc), RP(bi), RP(bo), RP(bf), RP(bc), RP(pi), RP(po), RP(pf), \
        RP(cp), T *restrict oi, T *restrict oo, T *restrict of, T *restrict oc, T *restrict cn, T *restrict hn
#define FW_ROW_PASS w, cl, xi, xo, xf, xc, bi, bo, bf, bc, pi, po, pf, cp, oi, oo, of, oc, cn, hn
/* one vectorised row function per (peepholes, input_forget, clip): no unused term costs a vector op */
#define FW_ROW(name, peep, ifg, clip) \
    static __attribute__((noinline)) void SFX(name)(FW_ROW_ARGS) { SFX(fw_row_body)(peep, ifg, clip, FW_ROW_PASS); }
FW_ROW(fw_row_000, false, false, false)
FW_ROW(fw_row_100, true, false, false)
FW_ROW(fw_row_010, false, true, false)
FW_ROW(fw_row_110, true, true, false)
FW_ROW(fw_row_001, false, false, true)
FW_ROW(fw_row_101, true, false, true)
FW_ROW(fw_row_011, false, true, true)
FW_ROW(fw_row_111, true, true, true)
#undef FW_ROW
typedef void (*SFX(fw_row_fn))(FW_ROW_ARGS);
static const SFX(fw_row_fn) SFX(fw_rows)[8] = {SFX(fw_row_000), SFX(fw_row_100), SFX(fw_row_010), SFX(fw_row_110),
                                               SFX(fw_row_001), SFX(fw_row_101), SFX(fw_row_011), SFX(fw_row_111)};

/* The same row for any activations: pre-activations into the gate outputs, then f, g and h over them. */
static void SFX(fw_row_any)(const rnn_act *fa, const rnn_act *ga, const rnn_act *ha, bool ifg, FW_ROW_ARGS) {
    for (int64_t j = 0; j < w; j++) {
        T ai = xi[j] + bi[j];
        if (pi) ai = ai + pi[j] * cp[j];
        oi[j] = SFX(clipv)(ai, cl);
        oc[j] = SFX(clipv)(xc[j] + bc[j], cl);
    }
    SFX(act_apply)(fa, oi, w);
    SFX(act_apply)(ga, oc, w);
    if (ifg) {
        for (int64_t j = 0; j < w; j++) of[j] = 1 - oi[j];
    } else {
        for (int64_t j = 0; j < w; j++) {
            T af = xf[j] + bf[j];
            if (pf) af = af + pf[j] * cp[j];
            of[j] = SFX(clipv)(af, cl);
        }
        SFX(act_apply)(fa, of, w);
    }
    for (int64_t j = 0; j < w; j++) {
        T C = of[j] * cp[j] + oi[j] * oc[j];
        T ao = xo[j] + bo[j];
        if (po) ao = ao + po[j] * C;
        cn[j] = C;
        oo[j] = SFX(clipv)(ao, cl);
        hn[j] = C;
    }
    SFX(act_apply)(fa, oo, w);
    SFX(act_apply)(ha, hn, w);
    for (int64_t j = 0; j < w; j++) hn[j] = oo[j] * hn[j];
}
#undef FW_ROW_ARGS
#undef FW_ROW_PASS

typedef struct {
    int64_t B, H, D, d;
    T cl;
    bool ifg, clip;
    const rnn_act *f, *g, *h; /* NULL: Sigmoid, Tanh, Tanh, the vectorised rows */
    const int32_t *lens;      /* NULL: every row live */
    int64_t t;
    const T *bias;            /* [4H] Wb + Rb, gate-major */
    const T *pi, *po, *pf;    /* NULL without P */
    T *xwt;                   /* [B, 4H] block-major, Hp R^T added; rows xld apart */
    int64_t xld;
    const T *hp, *cp;         /* previous state [B, H] */
    T *hn, *cn;               /* next state [B, H] */
    T *gates;                 /* [B, 4H] gate-major: IOFC's step slice, or scratch */
    T *hall_t, *call_t;       /* [B, H] step slices, or NULL when not wanted */
} SFX(fctx);

static inline bool SFX(flive)(const SFX(fctx) *x, int64_t b) { return !x->lens || x->t < x->lens[b]; }

/* forward gates of columns [j0, j1) for every batch row */
static void SFX(fw_gates)(const SFX(fctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H4 = 4 * H, w = j1 - j0;
    const size_t bytes = (size_t)w * sizeof(T);
    const T *bi = x->bias + j0, *bo = bi + H, *bf = bi + 2 * H, *bc = bi + 3 * H;
    const T *pi = x->pi ? x->pi + j0 : NULL, *po = x->po ? x->po + j0 : NULL, *pf = x->pf ? x->pf + j0 : NULL;
    for (int64_t b = 0; b < x->B; b++) {
        T *g = x->gates + b * H4 + j0, *cn = x->cn + b * H + j0, *hn = x->hn + b * H + j0;
        const T *cp = x->cp + b * H + j0;
        if (!SFX(flive)(x, b)) { /* past the row's length: outputs 0, the state carried unchanged */
            memset(g, 0, bytes);
            memset(g + H, 0, bytes);
            memset(g + 2 * H, 0, bytes);
            memset(g + 3 * H, 0, bytes);
            memcpy(cn, cp, bytes);
            memcpy(hn, x->hp + b * H + j0, bytes);
            if (x->hall_t) memset(x->hall_t + b * H + j0, 0, bytes);
            if (x->call_t) memset(x->call_t + b * H + j0, 0, bytes);
            continue;
        }
        const T *xi = x->xwt + b * x->xld + 4 * j0, *xo = xi + w, *xf = xi + 2 * w, *xc = xi + 3 * w;
        if (x->f)
            SFX(fw_row_any)(x->f, x->g, x->h, x->ifg, w, x->cl, xi, xo, xf, xc, bi, bo, bf, bc, pi, po, pf, cp, g, g + H,
                            g + 2 * H, g + 3 * H, cn, hn);
        else
            SFX(fw_rows)[(pi ? 1 : 0) | (x->ifg ? 2 : 0) | (x->clip ? 4 : 0)](
                w, x->cl, xi, xo, xf, xc, bi, bo, bf, bc, pi ? pi : bi, po ? po : bi, pf ? pf : bi, cp, g, g + H,
                g + 2 * H, g + 3 * H, cn, hn);
        if (x->hall_t) memcpy(x->hall_t + b * H + j0, hn, bytes);
        if (x->call_t) memcpy(x->call_t + b * H + j0, cn, bytes);
    }
}

/* Where step `step` (time t) writes a state: its slice of HAll (or CAll) when that output is wanted and every row
 * is live, so no copy is needed; else one of two [B, H] buffers of st (at `slot`, 0: h, 2: c), alternating. With
 * sequence_lens a row past its length carries its state while its HAll row is 0, so the state cannot live there. */
static inline T *SFX(state_slot)(T *st, T *all, const int32_t *lens, int slot, int64_t step, int64_t t, int64_t d,
                                 int64_t D, int64_t BH) {
    return all && !lens ? all + (t * D + d) * BH : st + (slot + step % 2) * BH;
}

static int32_t SFX(lstm_forward)(opc_call *c, const lstm_plan *p, opc_tensor *outs) {
    const int64_t S = p->S, B = p->B, I = p->I, H = p->H, H4 = 4 * H, D = p->D, BH = B * H;
    const T *X = c->in[TI_X]->data;
    const T *bias_all = c->in[TI_B] ? c->in[TI_B]->data : NULL, *h0_all = c->in[TI_H0] ? c->in[TI_H0]->data : NULL;
    const T *c0_all = c->in[TI_C0] ? c->in[TI_C0]->data : NULL, *p_all = c->in[TI_P] ? c->in[TI_P]->data : NULL;
    const int32_t *lens = p->varlen ? c->in[TI_SL]->data : NULL;
    const T cl = p->has_clip ? (T)p->clip : (T)INFINITY;
    const int nt = c->threads;
    T *hall = outs[0].data, *ht_all = outs[1].data, *ct_all = outs[2].data, *call = outs[3].data, *iofc = outs[4].data;
    const size_t es = sizeof(T);
    const int64_t tc = lstm_chunk_steps(S, B, H, es);
    const int64_t xld = rnn_padded_ld(H4, es);
    T *xw = malloc((size_t)(tc * B * xld + 1) * es); /* one chunk of steps of X W^T (+ Hp R^T), block-major */
    T *wp = malloc((size_t)(H4 * I + 1) * es);
    T *rp = malloc((size_t)(H4 * H + 1) * es);
    int64_t hb, nblk;
    rnn_blocks(H, LSTM_MIN_BLOCK, &hb, &nblk);
#if LSTM_PACKED /* each block's R^T and W^T columns packed for opc_sgemm_packed: one panel set per block */
    const int64_t pk = opc_sgemm_packed_size(H, 4 * hb), pkx = opc_sgemm_packed_size(I, 4 * hb);
    float *rpk = malloc((size_t)(nblk * pk + 1) * sizeof(float));
    float *wpk = malloc((size_t)(nblk * pkx + 1) * sizeof(float));
#else
    T *rpk = rp, *wpk = wp;
#endif
    T *st = malloc((size_t)(4 * BH + 1) * es);        /* [h0 h1 c0 c1]: the carried state, two buffers each */
    T *gs = iofc ? NULL : malloc((size_t)(B * H4 + 1) * es); /* gate scratch when IOFC is not wanted */
    T *zero = calloc((size_t)((BH > H4 ? BH : H4) + 1), es);
    T *bsum = malloc((size_t)(H4 + 1) * es);
    int32_t status = OPC_OK;
    if (!xw || !wp || !rp || !rpk || !wpk || !st || (!iofc && !gs) || !zero || !bsum) {
        status = opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for LSTM work buffers");
        goto done;
    }
    const int nth = (int)((double)BH * (double)H4 >= (double)opc_grain(LSTM_PAR_MIN) ? (nt < nblk ? nt : nblk) : 1);
    for (int64_t d = 0; d < D; d++) {
        const bool reverse = D == 2 ? d == 1 : p->reverse;
        const T *W = (const T *)c->in[TI_W]->data + d * H4 * I, *R = (const T *)c->in[TI_R]->data + d * H4 * H;
        const T *h_init = h0_all ? h0_all + d * BH : zero, *c_init = c0_all ? c0_all + d * BH : zero;
        const T *peep = p_all ? p_all + d * 3 * H : NULL;
        for (int64_t j = 0; j < H4; j++) bsum[j] = bias_all ? bias_all[d * 8 * H + j] + bias_all[d * 8 * H + H4 + j] : 0;
        /* One parallel region for the whole recurrence; each thread owns whole column blocks (fixed by H) and, per
         * chunk of tc steps (fixed by the shapes), computes its blocks' X W^T for the chunk, then per step their
         * Hp R^T and gates. Only the end-of-step barrier is shared (the next step's products read all of H). */
#pragma omp parallel num_threads(nth)
        {
            int64_t k0, k1;
            opc_split(nblk, omp_get_num_threads(), omp_get_thread_num(), 1, &k0, &k1);
            /* the thread's blocks of W and R, permuted block-major (block [j0, j1) holds rows i, o, f, c of columns
             * j0..j1) and packed: only this thread's products read them, so no barrier before the first step */
            for (int64_t k = k0; k < k1; k++) {
                const int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
                for (int q = 0; q < 4; q++) {
                    memcpy(wp + (4 * j0 + q * w) * I, W + (q * H + j0) * I, (size_t)(w * I) * es);
                    memcpy(rp + (4 * j0 + q * w) * H, R + (q * H + j0) * H, (size_t)(w * H) * es);
                }
#if LSTM_PACKED
                opc_sgemm_pack(true, H, 4 * w, rp + 4 * j0 * H, H, rpk + k * pk);
                opc_sgemm_pack(true, I, 4 * w, wp + 4 * j0 * I, I, wpk + k * pkx);
#endif
            }
            SFX(fctx) fx = {.B = B, .H = H, .D = D, .d = d, .cl = cl, .ifg = p->input_forget, .clip = p->has_clip,
                            .lens = lens, .bias = bsum, .xld = xld,
                            .pi = peep, .po = peep ? peep + H : NULL, .pf = peep ? peep + 2 * H : NULL};
            if (!p->fast[d]) {
                fx.f = &p->act[d][0];
                fx.g = &p->act[d][1];
                fx.h = &p->act[d][2];
            }
            fx.hp = h_init;
            fx.cp = c_init;
            for (int64_t s0 = 0; s0 < S; s0 += tc) {
                const int64_t n = s0 + tc < S ? tc : S - s0;           /* steps s0 .. s0 + n - 1 */
                const int64_t tlo = reverse ? S - s0 - n : s0;          /* their time indices tlo .. tlo + n - 1 */
                for (int64_t k = k0; k < k1; k++) {
                    const int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
#if LSTM_PACKED
                    opc_sgemm_packed(n * B, 4 * w, I, X + tlo * B * I, I, wpk + k * pkx, false, xw + 4 * j0, xld);
#else
                    opc_gemm(DT, false, true, n * B, 4 * w, I, 1.0, X + tlo * B * I, I, wpk + 4 * j0 * I, I, 0.0,
                             xw + 4 * j0, xld);
#endif
                }
                for (int64_t step = s0; step < s0 + n; step++) {
                    const int64_t t = reverse ? S - 1 - step : step;
                    fx.t = t;
                    fx.xwt = xw + (t - tlo) * B * xld;
                    fx.hn = SFX(state_slot)(st, hall, lens, 0, step, t, d, D, BH);
                    fx.cn = SFX(state_slot)(st, call, lens, 2, step, t, d, D, BH);
                    fx.gates = iofc ? iofc + (t * D + d) * B * H4 : gs;
                    fx.hall_t = hall && lens ? hall + (t * D + d) * BH : NULL; /* else hn is HAll's slice */
                    fx.call_t = call && lens ? call + (t * D + d) * BH : NULL;
                    for (int64_t k = k0; k < k1; k++) {
                        const int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
#if LSTM_PACKED
                        opc_sgemm_packed(B, 4 * w, H, fx.hp, H, rpk + k * pk, true, fx.xwt + 4 * j0, xld);
#else
                        opc_gemm(DT, false, true, B, 4 * w, H, 1.0, fx.hp, H, rpk + 4 * j0 * H, H, 1.0, fx.xwt + 4 * j0,
                                 xld);
#endif
                        SFX(fw_gates)(&fx, j0, j0 + w);
                    }
#pragma omp barrier
                    fx.hp = fx.hn;
                    fx.cp = fx.cn;
                }
            }
        }
        const int64_t tl = reverse ? 0 : S - 1; /* the last step's time index */
        const T *hl = S > 0 ? SFX(state_slot)(st, hall, lens, 0, S - 1, tl, d, D, BH) : h_init;
        const T *clast = S > 0 ? SFX(state_slot)(st, call, lens, 2, S - 1, tl, d, D, BH) : c_init;
        if (ht_all) memcpy(ht_all + d * BH, hl, (size_t)BH * es);
        if (ct_all) memcpy(ct_all + d * BH, clast, (size_t)BH * es);
    }
done:
    free(xw);
    free(wp);
    free(rp);
#if LSTM_PACKED
    free(rpk);
    free(wpk);
#endif
    free(st);
    free(gs);
    free(zero);
    free(bsum);
    return status;
}

/* ---- backward -------------------------------------------------------------------------------- */

/* One batch row, w columns, Sigmoid / Tanh / Tanh: dn the incoming dH (next step), da dHAll_t (or
 * zeros), g* the saved gates, c the cell state, cp the previous one, dc the carried dC (updated in
 * place to dCp); the gate gradients into o*. */
static inline __attribute__((always_inline)) void SFX(bw_row_body)(bool ifg, int64_t w, RP(dn), RP(da), RP(gi), RP(go),
                                                                  RP(gf), RP(gc), RP(c), RP(cp), T *restrict dc,
                                                                  T *restrict oi, T *restrict oo, T *restrict of,
                                                                  T *restrict oc) {
    for (int64_t j = 0; j < w; j++) {
        T dH = dn[j] + da[j];
        T i = gi[j], o = go[j], f = gf[j], cc = gc[j];
        T th = TANH(c[j]);
        T dC = dc[j] + dH * o * (1 - th * th);
        oo[j] = dH * th * (o * (1 - o));
        oc[j] = dC * i * (1 - cc * cc);
        if (ifg) {
            oi[j] = dC * (cc - cp[j]) * (i * (1 - i));
            of[j] = 0;
        } else {
            oi[j] = dC * cc * (i * (1 - i));
            of[j] = dC * cp[j] * (f * (1 - f));
        }
        dc[j] = dC * f;
    }
}

#define BW_ROW_ARGS                                                                                             \
    int64_t w, RP(dn), RP(da), RP(gi), RP(go), RP(gf), RP(gc), RP(c), RP(cp), T *restrict dc, T *restrict oi, \
        T *restrict oo, T *restrict of, T *restrict oc
#define BW_ROW_PASS w, dn, da, gi, go, gf, gc, c, cp, dc, oi, oo, of, oc
static __attribute__((noinline)) void SFX(bw_row)(BW_ROW_ARGS) { SFX(bw_row_body)(false, BW_ROW_PASS); }
static __attribute__((noinline)) void SFX(bw_row_i)(BW_ROW_ARGS) { SFX(bw_row_body)(true, BW_ROW_PASS); }

/* The same for any activations: s[0..4) the slopes of i, o, f, c~ (from the saved gates), s[4] h(C),
 * s[5] h'(C), each w long, filled by the caller */
static void SFX(bw_row_any)(bool ifg, T *const s[6], BW_ROW_ARGS) {
    const T *si = s[0], *so = s[1], *sf = s[2], *sc = s[3], *hc = s[4], *sh = s[5];
    for (int64_t j = 0; j < w; j++) {
        T dH = dn[j] + da[j];
        T dC = dc[j] + dH * go[j] * sh[j];
        oo[j] = dH * hc[j] * so[j];
        oc[j] = dC * gi[j] * sc[j];
        if (ifg) {
            oi[j] = dC * (gc[j] - cp[j]) * si[j];
            of[j] = 0;
        } else {
            oi[j] = dC * gc[j] * si[j];
            of[j] = dC * cp[j] * sf[j];
        }
        dc[j] = dC * gf[j];
    }
}
#undef BW_ROW_ARGS
#undef BW_ROW_PASS
#undef RP

typedef struct {
    int64_t B, H, D, d, S;
    bool ifg, reverse;
    const rnn_act *f, *g, *h; /* NULL: Sigmoid, Tanh, Tanh */
    const int32_t *lens;
    int64_t t;
    const T *c0;              /* initial_c of the direction, or zeros */
    const T *call, *iofc;     /* whole inputs */
    const T *dhall_t;         /* [B, H] or NULL */
    const T *zero;            /* >= H zeros */
    const T *dn;              /* incoming dH [B, H] */
    T *dc;                    /* carried dC [B, H] */
    T *dat;                   /* dA step slice [B, 4H], rows ld apart */
    int64_t ld;
    T *scr;                   /* any activations: 6 slices of [B, H] */
    T *pacc;                  /* [3H] dP accumulators (i, o, f), or NULL */
} SFX(bctx);

static void SFX(peep_acc)(int64_t w, const T *restrict gi, const T *restrict go, const T *restrict gf,
                          const T *restrict cp, const T *restrict c, T *restrict ai, T *restrict ao, T *restrict af) {
    for (int64_t j = 0; j < w; j++) {
        ai[j] += gi[j] * cp[j];
        ao[j] += go[j] * c[j];
        af[j] += gf[j] * cp[j];
    }
}

static inline bool SFX(blive)(const SFX(bctx) *x, int64_t b) { return !x->lens || x->t < x->lens[b]; }

/* the cell state row b started step t from: the previous processing step's, or initial_c at the
 * first step and where that step was past the row's length (the start of a reverse run) */
static inline const T *SFX(cprev)(const SFX(bctx) *x, int64_t t, int64_t b) {
    const int64_t tp = x->reverse ? t + 1 : t - 1;
    if (tp < 0 || tp >= x->S || (x->lens && tp >= x->lens[b])) return x->c0 + b * x->H;
    return x->call + ((tp * x->D + x->d) * x->B + b) * x->H;
}

/* backward phase 1 for columns [j0, j1) */
static void SFX(bw_gates)(const SFX(bctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H4 = 4 * H, B = x->B, w = j1 - j0, t = x->t;
    const size_t bytes = (size_t)w * sizeof(T);
    for (int64_t b = 0; b < B; b++) {
        T *o = x->dat + b * x->ld + j0;
        if (!SFX(blive)(x, b)) { /* zero gate gradients; dC and dH (phase 2) pass through */
            memset(o, 0, bytes);
            memset(o + H, 0, bytes);
            memset(o + 2 * H, 0, bytes);
            memset(o + 3 * H, 0, bytes);
            continue;
        }
        const int64_t row = (t * x->D + x->d) * B + b;
        const T *g = x->iofc + row * H4 + j0, *cr = x->call + row * H + j0, *cp = SFX(cprev)(x, t, b) + j0;
        const T *dn = x->dn + b * H + j0, *da = x->dhall_t ? x->dhall_t + b * H + j0 : x->zero;
        T *dc = x->dc + b * H + j0;
        if (x->f) {
            T *s[6];
            for (int q = 0; q < 6; q++) s[q] = x->scr + (q * B + b) * H + j0;
            SFX(act_slope)(x->f, g, s[0], w);
            SFX(act_slope)(x->f, g + H, s[1], w);
            if (!x->ifg) SFX(act_slope)(x->f, g + 2 * H, s[2], w);
            SFX(act_slope)(x->g, g + 3 * H, s[3], w);
            memcpy(s[4], cr, bytes);
            SFX(act_apply)(x->h, s[4], w);
            SFX(act_slope_x)(x->h, cr, s[4], s[5], w);
            SFX(bw_row_any)(x->ifg, s, w, dn, da, g, g + H, g + 2 * H, g + 3 * H, cr, cp, dc, o, o + H, o + 2 * H, o + 3 * H);
        } else if (x->ifg) {
            SFX(bw_row_i)(w, dn, da, g, g + H, g + 2 * H, g + 3 * H, cr, cp, dc, o, o + H, o + 2 * H, o + 3 * H);
        } else {
            SFX(bw_row)(w, dn, da, g, g + H, g + 2 * H, g + 3 * H, cr, cp, dc, o, o + H, o + 2 * H, o + 3 * H);
        }
        if (x->pacc) /* dP at P = 0: dPi += da_i Cp, dPo += da_o C, dPf += da_f Cp */
            SFX(peep_acc)(w, o, o + H, o + 2 * H, cp, cr, x->pacc + j0, x->pacc + H + j0, x->pacc + 2 * H + j0);
    }
}

/* C[M, N] = op(A) B (+ beta C) in 2 fixed blocks of rows of C (4 from M = 4096; 1 for small products), fixed by
 * the shapes alone. Every block packs all of B, which for these long-K products (the weight gradients' K = S*B,
 * dX's K = 4H) costs more than opc_gemm_par's up to 8 blocks gain. */
static void SFX(gemm_rows)(bool trans_a, int64_t M, int64_t N, int64_t K, const T *A, int64_t lda, const T *Bm,
                           int64_t ldb, double beta, T *C, int64_t ldc, int nt) {
    const double work = (double)M * (double)N * (double)K;
    const int64_t nb = work < 4e6 || M < 256 ? 1 : (M >= 4096 ? 4 : 2);
    const int64_t blk = ((M + nb - 1) / nb + 15) / 16 * 16;
    const int nth = nt < nb ? nt : (int)nb;
#pragma omp parallel for schedule(static) num_threads(nth > 1 ? nth : 1) if (nth > 1)
    for (int64_t i = 0; i < nb; i++) {
        const int64_t lo = i * blk, rows = lo + blk < M ? blk : M - lo;
        if (rows > 0)
            opc_gemm(DT, trans_a, false, rows, N, K, 1.0, A + (trans_a ? lo : lo * lda), lda, Bm, ldb, beta,
                     C + lo * ldc, ldc);
    }
}

static int32_t SFX(lstm_backward)(opc_call *c, const lstm_plan *p, opc_tensor *outs) {
    const int64_t S = p->S, B = p->B, I = p->I, H = p->H, H4 = 4 * H, SB = S * B, D = p->D, BH = B * H;
    const T *X = c->in[GI_X]->data;
    const T *h0_all = c->in[GI_H0] ? c->in[GI_H0]->data : NULL, *c0_all = c->in[GI_C0] ? c->in[GI_C0]->data : NULL;
    const T *hall = c->in[GI_HALL]->data, *call = c->in[GI_CALL]->data, *iofc = c->in[GI_IOFC]->data;
    const T *dhall = c->in[GI_DHALL] ? c->in[GI_DHALL]->data : NULL, *dht_all = c->in[GI_DHT] ? c->in[GI_DHT]->data : NULL;
    const T *dct_all = c->in[GI_DCT] ? c->in[GI_DCT]->data : NULL;
    const int32_t *lens = p->varlen ? c->in[GI_SL]->data : NULL;
    T *dX = outs[0].data, *dW_all = outs[1].data, *dR_all = outs[2].data, *dB_all = outs[3].data, *dH0_all = outs[4].data,
      *dC0_all = outs[5].data, *dP_all = outs[6].data;
    const int nt = c->threads;
    if (!dX && !dW_all && !dR_all && !dB_all && !dH0_all && !dC0_all && !dP_all) return OPC_OK;
    const bool any = !p->fast[0] || (D == 2 && !p->fast[1]);
    const size_t es = sizeof(T);
    const int64_t ld = rnn_padded_ld(H4, es); /* dA's row stride */
    T *dA = malloc((size_t)(SB * ld + 1) * es);
    /* dW and dR come from one GEMM, dA^T [X | Hp] (either wanted: both computed, so a subset gives the same bits) */
    const int64_t IH = I + H;
    const bool wr = dW_all || dR_all;
    T *xh = wr ? malloc((size_t)(SB * IH + 1) * es) : NULL;
    T *dwr = wr ? malloc((size_t)(H4 * IH + 1) * es) : NULL;
    T *dh = malloc((size_t)(2 * BH + 1) * es), *dc = malloc((size_t)(BH + 1) * es);
    T *scr = any ? malloc((size_t)(6 * BH + 1) * es) : NULL;
    T *pacc = dP_all ? malloc((size_t)(3 * H + 1) * es) : NULL;
    T *zero = calloc((size_t)(BH + 1), es);
    int64_t hb, nblk;
    rnn_blocks(H, LSTM_MIN_BLOCK, &hb, &nblk);
#if LSTM_PACKED /* each block's columns of R, packed for opc_sgemm_packed */
    const int64_t pk = opc_sgemm_packed_size(H4, hb);
    float *rk = malloc((size_t)(nblk * pk + 1) * sizeof(float));
#else
    const bool rk = true;
#endif
    int32_t status = OPC_OK;
    if (!dA || (wr && (!xh || !dwr)) || !dh || !dc || (any && !scr) || (dP_all && !pacc) || !zero || !rk) {
        status = opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for LSTM work buffers");
        goto done;
    }
    const int nth = (int)((double)BH * (double)H4 >= (double)opc_grain(LSTM_PAR_MIN) ? (nt < nblk ? nt : nblk) : 1);
    for (int64_t d = 0; d < D; d++) {
        const bool reverse = D == 2 ? d == 1 : p->reverse;
        const T *W = (const T *)c->in[GI_W]->data + d * H4 * I, *R = (const T *)c->in[GI_R]->data + d * H4 * H;
        const T *h0 = h0_all ? h0_all + d * BH : zero, *c0 = c0_all ? c0_all + d * BH : zero;
        if (dht_all) memcpy(dh, dht_all + d * BH, (size_t)BH * es);
        else memset(dh, 0, (size_t)BH * es);
        if (dct_all) memcpy(dc, dct_all + d * BH, (size_t)BH * es);
        else memset(dc, 0, (size_t)BH * es);
        if (pacc) memset(pacc, 0, (size_t)(3 * H) * es);
        T *dres = dh; /* where the gradient of the direction's initial_h ends */
#pragma omp parallel num_threads(nth)
        {
            int64_t k0, k1;
            opc_split(nblk, omp_get_num_threads(), omp_get_thread_num(), 1, &k0, &k1);
#if LSTM_PACKED /* the thread's blocks of R: only its own products read them */
            for (int64_t k = k0; k < k1; k++) {
                const int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
                opc_sgemm_pack(false, H4, w, R + j0, H, rk + k * pk);
            }
#endif
            SFX(bctx) bx = {.B = B, .H = H, .D = D, .d = d, .S = S, .ifg = p->input_forget, .reverse = reverse,
                            .lens = lens, .c0 = c0, .call = call, .iofc = iofc, .zero = zero, .dc = dc, .scr = scr,
                            .pacc = pacc, .ld = ld};
            if (!p->fast[d]) {
                bx.f = &p->act[d][0];
                bx.g = &p->act[d][1];
                bx.h = &p->act[d][2];
            }
            if (xh) { /* rows [X_t | the hidden state step t started from (as cprev)], for dW and dR afterwards */
#pragma omp for schedule(static) nowait
                for (int64_t t = 0; t < S; t++) {
                    const int64_t tp = reverse ? t + 1 : t - 1;
                    for (int64_t b = 0; b < B; b++) {
                        const T *src = tp < 0 || tp >= S || (lens && tp >= lens[b]) ? h0 + b * H
                                                                                    : hall + ((tp * D + d) * B + b) * H;
                        memcpy(xh + (t * B + b) * IH, X + (t * B + b) * I, (size_t)I * es);
                        memcpy(xh + (t * B + b) * IH + I, src, (size_t)H * es);
                    }
                }
            }
            T *din = dh, *dout = dh + BH;
            for (int64_t step = S - 1; step >= 0; step--) {
                const int64_t t = reverse ? S - 1 - step : step;
                bx.t = t;
                bx.dn = din;
                bx.dat = dA + t * B * ld;
                bx.dhall_t = dhall ? dhall + (t * D + d) * BH : NULL;
                for (int64_t k = k0; k < k1; k++) SFX(bw_gates)(&bx, k * hb, k * hb + hb < H ? k * hb + hb : H);
#pragma omp barrier
                for (int64_t k = k0; k < k1; k++) {
                    const int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
#if LSTM_PACKED
                    opc_sgemm_packed(B, w, H4, bx.dat, ld, rk + k * pk, false, dout + j0, H);
#else
                    opc_gemm(DT, false, false, B, w, H4, 1.0, bx.dat, ld, R + j0, H, 0.0, dout + j0, H);
#endif
                    if (lens) /* rows past their length pass dH through exactly (0 * R could be NaN) */
                        for (int64_t b = 0; b < B; b++)
                            if (t >= lens[b]) memcpy(dout + b * H + j0, din + b * H + j0, (size_t)w * es);
                }
                T *tmp = din;
                din = dout;
                dout = tmp;
            }
#pragma omp single
            dres = din;
        }
        T *dW = dW_all ? dW_all + d * H4 * I : NULL, *dR = dR_all ? dR_all + d * H4 * H : NULL;
        if (dH0_all) memcpy(dH0_all + d * BH, dres, (size_t)BH * es);
        if (dC0_all) memcpy(dC0_all + d * BH, dc, (size_t)BH * es);
        if (dX) SFX(gemm_rows)(false, SB, I, H4, dA, ld, W, I, d == 0 ? 0.0 : 1.0, dX, I, nt);
        if (wr) {
            SFX(gemm_rows)(true, H4, IH, SB, dA, ld, xh, IH, 0.0, dwr, IH, nt);
            for (int64_t r = 0; r < H4; r++) {
                if (dW) memcpy(dW + r * I, dwr + r * IH, (size_t)I * es);
                if (dR) memcpy(dR + r * H, dwr + r * IH + I, (size_t)H * es);
            }
        }
        if (dB_all) {
            T *dB = dB_all + d * 8 * H;
            const int64_t ncb = (H4 + 63) / 64; /* column chunks of 64, each summed over the rows in order */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && SB * H4 >= opc_grain(1 << 16))
            for (int64_t q = 0; q < ncb; q++)
                SFX(colsum)(dA + q * 64, SB, q * 64 + 64 < H4 ? 64 : H4 - q * 64, ld, dB + q * 64);
            memcpy(dB + H4, dB, (size_t)H4 * es);
        }
        if (dP_all) memcpy(dP_all + d * 3 * H, pacc, (size_t)(3 * H) * es);
    }
done:
    free(dA);
    free(xh);
    free(dwr);
    free(dh);
    free(dc);
    free(scr);
    free(pacc);
    free(zero);
#if LSTM_PACKED
    free(rk);
#endif
    return status;
}
