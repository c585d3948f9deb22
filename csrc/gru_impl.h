/* GRU forward (GRUTraining) and backward (GRUGrad) for one element type; included by gru.c with
 * T, SFX(name), SIGM, TANH and DT defined. Not a standalone header.
 *
 * Forward, per direction d and step t (processing order t = 0..S-1, or S-1..0 for a reverse
 * direction), with f, g the direction's activations (Sigmoid, Tanh by default):
 *   z = f(xw_z + Hp Rz^T + Wbz + Rbz), r = f(xw_r + Hp Rr^T + Wbr + Rbr)
 *   lbr=0: h~ = g(xw_h + (r*Hp) Rh^T + Rbh + Wbh);  lbr=1: h~ = g(xw_h + r*(Hp Rh^T + Rbh) + Wbh)
 *   H = (1-z)*h~ + z*Hp, with xw = X W^T computed for all steps in one GEMM and pre-activations
 *   clipped to [-clip, clip] when clip is given.
 * Directions run one after the other (bidirectional: forward, then reverse), each writing its slice
 * [t, d] of HAll and ZRH. With sequence_lens, a batch row is live at step t when t < len[b]: rows
 * past their length are computed like the others (fixed GEMM shapes) and then overwritten, HAll and
 * ZRH with 0 and the carried state with the previous one, so a reverse direction starts from
 * initial_h at its row's last valid step. The carried state then lives in two [B, H] buffers
 * (without sequence_lens it is the previous step's HAll slice).
 * Backward walks the steps in reverse processing order; the per-step work is the recurrence
 * through dH (one or two [B,*] GEMMs); dX, dW, dR and the bias sums are large GEMMs (opc_gemm_par's
 * fixed blocks) / column sums over all steps afterwards, dX summed over the directions in order.
 * Rows past their length get zero gate gradients and pass the state gradient through unchanged.
 * Activation slopes come from the saved outputs (f'(z), f'(r), g'(h~)); for Sigmoid/Tanh inline,
 * for the other activations from a slope array computed before the recurrence, the clip mask
 * folded in. The recurrence works on fixed column blocks (gru_blocks), each block's step GEMM one
 * BLAS call of a fixed shape. */

#define GRU_PAR_MIN 4096 /* B*H below which the recurrence runs on one thread */

#include "rnn_impl.h"

/* Everything a per-step gate loop needs; each loop runs over the hidden columns [j0, j1) of all
 * batch rows, one column block (see gru_blocks in gru.c). The forward loops read
 * the step GEMM's result g in the block-major layout of the permuted R: the block's gate q column
 * j at g[b * 3H + 3 * j0 + q * (j1 - j0) + (j - j0)]. */
typedef struct {
    int64_t B, H;
    T cl;
    bool clip;
    const gru_act *f, *g; /* NULL: Sigmoid and Tanh, the vectorised rows */
    const int32_t *lens;  /* NULL: every row live */
    int64_t t;            /* the step's time index, for lens */
    const T *xwt, *g_, *hp, *wbz, *wbr, *wbh, *rbz, *rbr, *rbh;
    T *zt, *rh, *ht;
    T *hn; /* with lens: the next carried state */
    /* backward */
    const T *dn, *dhall_t, *aux_t, *pre_t;
    const T *sl_t;  /* slopes [f'(z) | f'(r) | g'(h~)] (clip mask folded in), or NULL */
    const T *zero3; /* 3H zeros: stands in for an absent dHAll or unclipped pre-activations */
    T *dat, *dh, *t3, *dq_t;
} SFX(gctx);

static inline bool SFX(live)(const SFX(gctx) *x, int64_t b) { return !x->lens || x->t < x->lens[b]; }

static inline void SFX(zero)(T *a, int64_t w) { memset(a, 0, (size_t)w * sizeof(T)); }

/* Each gate loop's row is a function of its own with restrict parameters: GCC keeps restrict
 * there (not on block-scope pointers), and without it the stores would force reloads and keep the
 * loops scalar. */

#define RP(name) const T *restrict name
static __attribute__((noinline)) void SFX(zr_row)(int64_t w, T cl, RP(xz), RP(xr), RP(gz), RP(gr), RP(wbz),
                                                  RP(rbz), RP(wbr), RP(rbr), RP(hp), T *restrict oz,
                                                  T *restrict orr, T *restrict rh) {
    for (int64_t j = 0; j < w; j++) {
        T z = SIGM(SFX(clipv)(xz[j] + gz[j] + wbz[j] + rbz[j], cl));
        T r = SIGM(SFX(clipv)(xr[j] + gr[j] + wbr[j] + rbr[j], cl));
        oz[j] = z;
        orr[j] = r;
        rh[j] = r * hp[j];
    }
}

static __attribute__((noinline)) void SFX(h_row)(int64_t w, T cl, RP(xh), RP(gh), RP(rbh), RP(wbh), RP(hp),
                                                 RP(zz), T *restrict oh, T *restrict ht) {
    for (int64_t j = 0; j < w; j++) {
        T hh = TANH(SFX(clipv)(xh[j] + gh[j] + rbh[j] + wbh[j], cl));
        T z = zz[j];
        oh[j] = hh;
        ht[j] = (1 - z) * hh + z * hp[j];
    }
}

static __attribute__((noinline)) void SFX(lbr_row)(int64_t w, T cl, RP(xz), RP(xr), RP(xh), RP(gz), RP(gr),
                                                   RP(gh), RP(wbz), RP(rbz), RP(wbr), RP(rbr), RP(wbh),
                                                   RP(rbh), RP(hp), T *restrict oz, T *restrict orr,
                                                   T *restrict oh, T *restrict ht) {
    for (int64_t j = 0; j < w; j++) {
        T z = SIGM(SFX(clipv)(xz[j] + gz[j] + wbz[j] + rbz[j], cl));
        T r = SIGM(SFX(clipv)(xr[j] + gr[j] + wbr[j] + rbr[j], cl));
        T hh = TANH(SFX(clipv)(xh[j] + r * (gh[j] + rbh[j]) + wbh[j], cl));
        oz[j] = z;
        orr[j] = r;
        oh[j] = hh;
        ht[j] = (1 - z) * hh + z * hp[j];
    }
}

/* The same rows for any activations: pre-activations first, then f or g over the row. */
static void SFX(zr_row_any)(const gru_act *f, int64_t w, T cl, RP(xz), RP(xr), RP(gz), RP(gr), RP(wbz), RP(rbz),
                            RP(wbr), RP(rbr), RP(hp), T *restrict oz, T *restrict orr, T *restrict rh) {
    for (int64_t j = 0; j < w; j++) {
        oz[j] = SFX(clipv)(xz[j] + gz[j] + wbz[j] + rbz[j], cl);
        orr[j] = SFX(clipv)(xr[j] + gr[j] + wbr[j] + rbr[j], cl);
    }
    SFX(act_apply)(f, oz, w);
    SFX(act_apply)(f, orr, w);
    if (rh)
        for (int64_t j = 0; j < w; j++) rh[j] = orr[j] * hp[j];
}

/* h~ and H from the pre-activation a_h already in oh */
static void SFX(h_row_any)(const gru_act *g, int64_t w, RP(hp), RP(zz), T *restrict oh, T *restrict ht) {
    SFX(act_apply)(g, oh, w);
    for (int64_t j = 0; j < w; j++) ht[j] = (1 - zz[j]) * oh[j] + zz[j] * hp[j];
}
#undef RP

/* A row past its sequence length at this step, columns [j0, j0 + w): HAll and ZRH 0, the carried
 * state unchanged. */
static void SFX(fw_dead)(const SFX(gctx) *x, int64_t b, int64_t j0, int64_t w) {
    const int64_t H = x->H;
    T *z = x->zt + b * 3 * H + j0;
    SFX(zero)(z, w);
    SFX(zero)(z + H, w);
    SFX(zero)(z + 2 * H, w);
    SFX(zero)(x->ht + b * H + j0, w);
    memcpy(x->hn + b * H + j0, x->hp + b * H + j0, (size_t)w * sizeof(T));
}

/* forward, lbr = 0, part 1: z, r and r * Hp */
static void SFX(fw_zr)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H, w = j1 - j0;
    for (int64_t b = 0; b < x->B; b++) {
        const T *xz = x->xwt + b * H3 + j0, *gz = x->g_ + b * H3 + 3 * j0;
        T *oz = x->zt + b * H3 + j0;
        if (x->f)
            SFX(zr_row_any)(x->f, w, x->cl, xz, xz + H, gz, gz + w, x->wbz + j0, x->rbz + j0, x->wbr + j0, x->rbr + j0,
                            x->hp + b * H + j0, oz, oz + H, x->rh + b * H + j0);
        else
            SFX(zr_row)(w, x->cl, xz, xz + H, gz, gz + w, x->wbz + j0, x->rbz + j0, x->wbr + j0, x->rbr + j0,
                        x->hp + b * H + j0, oz, oz + H, x->rh + b * H + j0);
    }
}

/* forward, lbr = 0, part 2: h~ and H (g's gate-h part = (r*Hp) Rh^T) */
static void SFX(fw_h)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H, w = j1 - j0;
    for (int64_t b = 0; b < x->B; b++) {
        T *z = x->zt + b * H3 + j0, *ht = x->ht + b * H + j0;
        const T *xh = x->xwt + b * H3 + 2 * H + j0, *gh = x->g_ + b * H3 + 3 * j0 + 2 * w, *hp = x->hp + b * H + j0;
        if (!SFX(live)(x, b)) {
            SFX(fw_dead)(x, b, j0, w);
            continue;
        }
        if (x->g) {
            T *oh = z + 2 * H;
            for (int64_t j = 0; j < w; j++) oh[j] = SFX(clipv)(xh[j] + gh[j] + x->rbh[j0 + j] + x->wbh[j0 + j], x->cl);
            SFX(h_row_any)(x->g, w, hp, z, oh, ht);
        } else {
            SFX(h_row)(w, x->cl, xh, gh, x->rbh + j0, x->wbh + j0, hp, z, z + 2 * H, ht);
        }
        if (x->hn) memcpy(x->hn + b * H + j0, ht, (size_t)w * sizeof(T));
    }
}

/* forward, lbr = 1: all gates (g = Hp R^T) */
static void SFX(fw_lbr)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H, w = j1 - j0;
    for (int64_t b = 0; b < x->B; b++) {
        const T *xz = x->xwt + b * H3 + j0, *gz = x->g_ + b * H3 + 3 * j0, *hp = x->hp + b * H + j0;
        T *oz = x->zt + b * H3 + j0, *ht = x->ht + b * H + j0;
        if (!SFX(live)(x, b)) {
            SFX(fw_dead)(x, b, j0, w);
            continue;
        }
        if (x->f) {
            SFX(zr_row_any)(x->f, w, x->cl, xz, xz + H, gz, gz + w, x->wbz + j0, x->rbz + j0, x->wbr + j0,
                            x->rbr + j0, hp, oz, oz + H, NULL);
            const T *xh = xz + 2 * H, *gh = gz + 2 * w, *r = oz + H;
            T *oh = oz + 2 * H;
            for (int64_t j = 0; j < w; j++)
                oh[j] = SFX(clipv)(xh[j] + r[j] * (gh[j] + x->rbh[j0 + j]) + x->wbh[j0 + j], x->cl);
            SFX(h_row_any)(x->g, w, hp, oz, oh, ht);
        } else {
            SFX(lbr_row)(w, x->cl, xz, xz + H, xz + 2 * H, gz, gz + w, gz + 2 * w, x->wbz + j0, x->rbz + j0,
                         x->wbr + j0, x->rbr + j0, x->wbh + j0, x->rbh + j0, hp, oz, oz + H, oz + 2 * H, ht);
        }
        if (x->hn) memcpy(x->hn + b * H + j0, ht, (size_t)w * sizeof(T));
    }
}

/* backward step, part 1 (everything but the R products): with dH = dn + dHAll_t, da_h, da_z (and
 * for lbr = 1 da_r and dq = da_h * r, the gradient of Hp Rh^T + Rbh) into dat / dq_t, and
 * dh = dH * z, the direct part of the previous state's gradient. lbr = 1 also copies
 * [da_z | da_r | dq] into t3 for the one fused GEMM with R. The clip masks read the saved
 * pre-activations (pre_t); without clip those pointers are zero3 and the comparisons are against
 * infinity; without dHAll da points at zeros (dn + 0, as before). */
#define RP(name) const T *restrict name
#define BW1_COMMON                                                                                 \
    T dH = dn[j] + da[j];                                                                          \
    T z = zz[j], r = zr[j], hh = zh[j], hpj = hp[j];                                               \
    T mz = fabs(az[j]) > cl ? 0 : 1, mr = fabs(ar[j]) > cl ? 0 : 1, mh = fabs(ah[j]) > cl ? 0 : 1; \
    T dah = dH * (1 - z) * (1 - hh * hh) * mh;                                                     \
    T daz = dH * (hpj - hh) * z * (1 - z) * mz; /* dH'/dz = Hp - h~ */                             \
    oz[j] = daz;                                                                                   \
    oh[j] = dah;                                                                                   \
    dh[j] = dH * z;                                                                                \
    (void)r;                                                                                       \
    (void)mr;
static __attribute__((noinline)) void SFX(bw1_row)(int64_t w, T cl, RP(dn), RP(da), RP(zz), RP(zr), RP(zh), RP(hp),
                                                   RP(az), RP(ar), RP(ah), T *restrict oz, T *restrict oh,
                                                   T *restrict dh) {
    for (int64_t j = 0; j < w; j++) {
        BW1_COMMON
    }
}
static __attribute__((noinline)) void SFX(bw1_row_lbr)(int64_t w, T cl, RP(dn), RP(da), RP(zz), RP(zr), RP(zh),
                                                       RP(hp), RP(q), RP(az), RP(ar), RP(ah), T *restrict oz,
                                                       T *restrict orr, T *restrict oh, T *restrict dh,
                                                       T *restrict dq, T *restrict tz, T *restrict tr,
                                                       T *restrict tq) {
    for (int64_t j = 0; j < w; j++) {
        BW1_COMMON
        T dqj = dah * r;
        T dar = dah * q[j] * r * (1 - r) * mr;
        orr[j] = dar;
        dq[j] = dqj;
        tz[j] = daz;
        tr[j] = dar;
        tq[j] = dqj;
    }
}
#undef BW1_COMMON

/* The same for any activations, with the slopes (clip mask folded in) from sz / sr / sh; orr, dq and
 * the t3 parts are NULL for lbr = 0. */
static void SFX(bw1_row_any)(int64_t w, RP(dn), RP(da), RP(zz), RP(zr), RP(zh), RP(hp), RP(q), RP(sz), RP(sr),
                             RP(sh), T *restrict oz, T *restrict orr, T *restrict oh, T *restrict dh, T *restrict dq,
                             T *restrict tz, T *restrict tr, T *restrict tq) {
    for (int64_t j = 0; j < w; j++) {
        T dH = dn[j] + da[j], z = zz[j];
        T dah = dH * (1 - z) * sh[j];
        T daz = dH * (hp[j] - zh[j]) * sz[j];
        oz[j] = daz;
        oh[j] = dah;
        dh[j] = dH * z;
        if (orr) {
            T dqj = dah * zr[j], dar = dah * q[j] * sr[j];
            orr[j] = dar;
            dq[j] = dqj;
            tz[j] = daz;
            tr[j] = dar;
            tq[j] = dqj;
        }
    }
}
#undef RP

static void SFX(bw_1)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H, w = j1 - j0;
    const bool lbr = x->dq_t != NULL, clip = x->clip;
    const T cl = clip ? x->cl : (T)INFINITY;
    for (int64_t b = 0; b < x->B; b++) {
        const T *z = x->zt + b * H3 + j0, *a = clip ? x->pre_t + b * H3 + j0 : x->zero3;
        const T *da = x->dhall_t ? x->dhall_t + b * H + j0 : x->zero3;
        const T *dn = x->dn + b * H + j0, *hp = x->hp + b * H + j0;
        T *o = x->dat + b * H3 + j0, *dh = x->dh + b * H + j0;
        T *t3 = lbr ? x->t3 + b * H3 + j0 : NULL, *dq = lbr ? x->dq_t + b * H + j0 : NULL;
        if (!SFX(live)(x, b)) { /* zero gate gradients; the state gradient passes (bw_pass restores it) */
            SFX(zero)(o, w);
            SFX(zero)(o + H, w);
            SFX(zero)(o + 2 * H, w);
            memcpy(dh, dn, (size_t)w * sizeof(T));
            if (lbr) {
                SFX(zero)(dq, w);
                SFX(zero)(t3, w);
                SFX(zero)(t3 + H, w);
                SFX(zero)(t3 + 2 * H, w);
            }
            continue;
        }
        if (x->sl_t) {
            const T *s = x->sl_t + b * H3 + j0;
            SFX(bw1_row_any)(w, dn, da, z, z + H, z + 2 * H, hp, lbr ? x->aux_t + b * H + j0 : NULL, s, s + H, s + 2 * H,
                             o, lbr ? o + H : NULL, o + 2 * H, dh, dq, t3, lbr ? t3 + H : NULL, lbr ? t3 + 2 * H : NULL);
        } else if (lbr) {
            SFX(bw1_row_lbr)(w, cl, dn, da, z, z + H, z + 2 * H, hp, x->aux_t + b * H + j0, a, a + H, a + 2 * H, o,
                             o + H, o + 2 * H, dh, dq, t3, t3 + H, t3 + 2 * H);
        } else {
            SFX(bw1_row)(w, cl, dn, da, z, z + H, z + 2 * H, hp, a, a + H, a + 2 * H, o, o + 2 * H, dh);
        }
    }
}

/* backward step, lbr = 0, part 2: dr from d(r*Hp) = dah Rh (in t3, ld H), and its dHp term */
CLONES static void SFX(bw_2)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H;
    const bool clip = x->clip;
    for (int64_t b = 0; b < x->B; b++) {
        if (!SFX(live)(x, b)) continue;
        const T *z_ = x->zt + b * H3, *hp_ = x->hp + b * H, *drh = x->t3 + b * H;
        const T *a_ = clip ? x->pre_t + b * H3 : NULL;
        T *o_ = x->dat + b * H3, *dh_ = x->dh + b * H;
        if (x->sl_t) {
            const T *sr = x->sl_t + b * H3 + H;
            for (int64_t j = j0; j < j1; j++) {
                o_[H + j] = drh[j] * hp_[j] * sr[j];
                dh_[j] += drh[j] * z_[H + j];
            }
            continue;
        }
        for (int64_t j = j0; j < j1; j++) {
            T r = z_[H + j];
            T mr = (clip && fabs(a_[H + j]) > x->cl) ? 0 : 1;
            o_[H + j] = drh[j] * hp_[j] * r * (1 - r) * mr;
            dh_[j] += drh[j] * r;
        }
    }
}

/* backward step, last: rows past their length keep the incoming state gradient exactly (the R
 * products added 0 * R there, which an infinite R would turn into NaN) */
static void SFX(bw_pass)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    for (int64_t b = 0; b < x->B; b++)
        if (!SFX(live)(x, b)) memcpy(x->dh + b * x->H + j0, x->dn + b * x->H + j0, (size_t)(j1 - j0) * sizeof(T));
}

static int32_t SFX(gru_forward)(opc_call *c, const gru_plan *p, opc_tensor *outs) {
    const int64_t S = p->S, B = p->B, I = p->I, H = p->H, H3 = 3 * H, D = p->D;
    const T *X = c->in[0]->data;
    const T *bias_all = c->in[3] ? c->in[3]->data : NULL, *h0_all = c->in[5] ? c->in[5]->data : NULL;
    const int32_t *lens = p->varlen ? c->in[4]->data : NULL;
    const T cl = p->has_clip ? (T)p->clip : (T)INFINITY;
    int nt = c->threads;
    T *hall = outs[0].data, *zrh = outs[2].data;
    T *own_hall = NULL, *own_zrh = NULL;
    if (!hall) hall = own_hall = malloc((size_t)(S * D * B * H + 1) * sizeof(T));
    if (!zrh) zrh = own_zrh = malloc((size_t)(S * D * B * H3 + 1) * sizeof(T));
    T *xw = malloc((size_t)(S * B * H3 + 1) * sizeof(T));
    T *g = malloc((size_t)(B * H3 + 1) * sizeof(T));
    T *rh = malloc((size_t)(B * H + 1) * sizeof(T));
    T *rp = malloc((size_t)(H3 * H + 1) * sizeof(T));
    T *zero = calloc((size_t)((6 * H > B * H ? 6 * H : B * H) + 1), sizeof(T));
    T *st = lens ? malloc((size_t)(2 * B * H + 1) * sizeof(T)) : NULL; /* carried state, two buffers */
    int32_t status = OPC_OK;
    if (!hall || !zrh || !xw || !g || !rh || !rp || !zero || (lens && !st)) {
        status = opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for GRU work buffers");
        goto done;
    }
    int64_t hb, nblk;
    gru_blocks(H, &hb, &nblk);
    int nth = (int)(B * H >= opc_grain(GRU_PAR_MIN) ? (nt < nblk ? nt : nblk) : 1);
    for (int64_t d = 0; d < D; d++) {
        const bool reverse = D == 2 ? d == 1 : p->reverse, any = !p->sigmoid_tanh[d];
        const T *W = (const T *)c->in[1]->data + d * H3 * I, *R = (const T *)c->in[2]->data + d * H3 * H;
        const T *bias = bias_all ? bias_all + d * 6 * H : zero;
        const T *h_init = h0_all ? h0_all + d * B * H : zero;
        opc_gemm_par(DT, false, true, S * B, H3, I, 1.0, X, I, W, I, 0.0, xw, H3, nt);
        /* R permuted block-major: block [j0, j1) holds rows z j0..j1, r j0..j1, h j0..j1, so one GEMM
         * per block gives its columns of all gates (lbr = 1) or of z and r (lbr = 0). */
        for (int64_t j0 = 0; j0 < H; j0 += hb) {
            int64_t w = j0 + hb < H ? hb : H - j0;
            for (int q = 0; q < 3; q++)
                memcpy(rp + (3 * j0 + q * w) * H, R + (q * H + j0) * H, (size_t)(w * H) * sizeof(T));
        }
        /* One parallel region for the whole recurrence: each thread owns whole column blocks (their
         * boundaries fixed by H alone, so every GEMM has the same shape for any thread count), computes
         * their step GEMMs (OpenBLAS held to 1 thread) and gates; barriers separate the phases that
         * read other threads' columns. */
#pragma omp parallel num_threads(nth)
        {
            int64_t k0, k1;
            opc_split(nblk, omp_get_num_threads(), omp_get_thread_num(), 1, &k0, &k1);
            SFX(gctx) gx = {.B = B, .H = H, .cl = cl, .g_ = g, .rh = rh, .wbz = bias, .wbr = bias + H,
                            .wbh = bias + 2 * H, .rbz = bias + 3 * H, .rbr = bias + 4 * H, .rbh = bias + 5 * H,
                            .f = any ? &p->act[d][0] : NULL, .g = any ? &p->act[d][1] : NULL, .lens = lens};
            const T *hp = h_init;
            for (int64_t step = 0; step < S; step++) {
                int64_t t = reverse ? S - 1 - step : step;
                gx.t = t;
                gx.ht = hall + (t * D + d) * B * H;
                gx.zt = zrh + (t * D + d) * B * H3;
                gx.xwt = xw + t * B * H3;
                gx.hp = hp;
                gx.hn = lens ? st + (step % 2) * B * H : NULL;
                for (int64_t k = k0; k < k1; k++) {
                    int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
                    opc_gemm(DT, false, true, B, (p->lbr ? 3 : 2) * w, H, 1.0, hp, H, rp + 3 * j0 * H, H, 0.0,
                             g + 3 * j0, H3);
                    if (p->lbr) SFX(fw_lbr)(&gx, j0, j0 + w);
                    else SFX(fw_zr)(&gx, j0, j0 + w);
                }
                if (!p->lbr) {
#pragma omp barrier
                    for (int64_t k = k0; k < k1; k++) { /* gate h: (r * Hp) Rh^T, all of r * Hp needed */
                        int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
                        opc_gemm(DT, false, true, B, w, H, 1.0, rh, H, rp + (3 * j0 + 2 * w) * H, H, 0.0,
                                 g + 3 * j0 + 2 * w, H3);
                        SFX(fw_h)(&gx, j0, j0 + w);
                    }
                }
#pragma omp barrier
                hp = lens ? gx.hn : gx.ht;
            }
        }
        const T *last = h_init; /* the state after the last step */
        if (S > 0) last = lens ? st + ((S - 1) % 2) * B * H : hall + ((reverse ? 0 : S - 1) * D + d) * B * H;
        if (outs[1].data) memcpy((T *)outs[1].data + d * B * H, last, (size_t)(B * H) * sizeof(T));
    }
done:
    free(own_hall);
    free(own_zrh);
    free(xw);
    free(g);
    free(rh);
    free(rp);
    free(zero);
    free(st);
    return status;
}

static int32_t SFX(gru_backward)(opc_call *c, const gru_plan *p, opc_tensor *outs) {
    const int64_t S = p->S, B = p->B, I = p->I, H = p->H, H3 = 3 * H, SB = S * B, D = p->D;
    const T *X = c->in[0]->data;
    const T *bias_all = c->in[3] ? c->in[3]->data : NULL, *h0_all = c->in[5] ? c->in[5]->data : NULL;
    const T *hall = c->in[6]->data, *zrh = c->in[7]->data;
    const T *dhall = c->in[8] ? c->in[8]->data : NULL, *dht_all = c->in[9] ? c->in[9]->data : NULL;
    const int32_t *lens = p->varlen ? c->in[4]->data : NULL;
    T *dX = outs[0].data, *dW_all = outs[1].data, *dR_all = outs[2].data, *dB_all = outs[3].data,
      *dH0_all = outs[4].data;
    const bool clip = p->has_clip, lbr = p->lbr;
    const bool any = !p->sigmoid_tanh[0] || (D == 2 && !p->sigmoid_tanh[1]);
    const T cl = clip ? (T)p->clip : (T)INFINITY;
    int nt = c->threads;
    if (!dX && !dW_all && !dR_all && !dB_all && !dH0_all) return OPC_OK;

    size_t es = sizeof(T);
    T *hp_all = malloc((size_t)(SB * H + 1) * es);
    T *dA = malloc((size_t)(SB * H3 + 1) * es);
    T *aux = malloc((size_t)(SB * H + 1) * es);             /* lbr0: r*Hp; lbr1: Hp Rh^T + Rbh */
    T *dq_all = lbr ? malloc((size_t)(SB * H + 1) * es) : NULL;
    T *t3 = malloc((size_t)(B * H3 + 1) * es);
    T *dh = malloc((size_t)(B * H + 1) * es), *dhn = malloc((size_t)(B * H + 1) * es);
    /* clipped pre-activations, turned into slopes in place for the other activations */
    T *pre = clip || any ? malloc((size_t)(SB * H3 + 1) * es) : NULL;
    T *zero = calloc((size_t)(6 * H + 1), es);
    int32_t status = OPC_OK;
    if (!hp_all || !dA || !aux || (lbr && !dq_all) || !t3 || !dh || !dhn || ((clip || any) && !pre) || !zero) {
        status = opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for GRU work buffers");
        goto done;
    }
    int64_t hb, nblk;
    gru_blocks(H, &hb, &nblk);
    int nth = (int)(B * H >= opc_grain(GRU_PAR_MIN) ? (nt < nblk ? nt : nblk) : 1);
    for (int64_t d = 0; d < D; d++) {
        const bool reverse = D == 2 ? d == 1 : p->reverse, any_d = !p->sigmoid_tanh[d];
        const T *W = (const T *)c->in[1]->data + d * H3 * I, *R = (const T *)c->in[2]->data + d * H3 * H;
        const T *bias = bias_all ? bias_all + d * 6 * H : zero, *h0 = h0_all ? h0_all + d * B * H : NULL;
        const T *wbz = bias, *wbr = bias + H, *wbh = bias + 2 * H, *rbz = bias + 3 * H, *rbr = bias + 4 * H,
                *rbh = bias + 5 * H;
#define ZRH_ROW(t, b) (zrh + (((t) * D + d) * B + (b)) * H3)
        /* the state each step started from: the previous step's output, initial_h at the first step
         * and, with sequence_lens, where the previous step was past the row's length (the start of a
         * reverse run; elsewhere such rows are dead and their state unused) */
        for (int64_t t = 0; t < S; t++) {
            int64_t tp = reverse ? t + 1 : t - 1;
            for (int64_t b = 0; b < B; b++) {
                const T *src = tp < 0 || tp >= S || (lens && tp >= lens[b]) ? (h0 ? h0 + b * H : NULL)
                                                                             : hall + ((tp * D + d) * B + b) * H;
                if (src) memcpy(hp_all + (t * B + b) * H, src, (size_t)H * es);
                else memset(hp_all + (t * B + b) * H, 0, (size_t)H * es);
            }
        }
        if (!lbr) {
            for (int64_t t = 0; t < S; t++)
                for (int64_t b = 0; b < B; b++) {
                    const T *r_ = ZRH_ROW(t, b) + H, *hp_ = hp_all + (t * B + b) * H;
                    T *a_ = aux + (t * B + b) * H;
                    for (int64_t j = 0; j < H; j++) a_[j] = r_[j] * hp_[j];
                }
        } else {
            opc_gemm_par(DT, false, true, SB, H, H, 1.0, hp_all, H, R + 2 * H * H, H, 0.0, aux, H, nt);
            for (int64_t rr = 0; rr < SB; rr++)
                for (int64_t j = 0; j < H; j++) aux[rr * H + j] += rbh[j];
        }
        if (clip) { /* pre-activations, to know where the clip cut the gradient */
            opc_gemm_par(DT, false, true, SB, H3, I, 1.0, X, I, W, I, 0.0, pre, H3, nt);
            opc_gemm_par(DT, false, true, SB, 2 * H, H, 1.0, hp_all, H, R, H, 1.0, pre, H3, nt);
            if (!lbr) opc_gemm_par(DT, false, true, SB, H, H, 1.0, aux, H, R + 2 * H * H, H, 1.0, pre + 2 * H, H3, nt);
            for (int64_t t = 0; t < S; t++)
                for (int64_t b = 0; b < B; b++) {
                    T *a_ = pre + (t * B + b) * H3;
                    const T *r_ = ZRH_ROW(t, b) + H, *q_ = aux + (t * B + b) * H;
                    for (int64_t j = 0; j < H; j++) {
                        a_[j] = a_[j] + wbz[j] + rbz[j];
                        a_[H + j] = a_[H + j] + wbr[j] + rbr[j];
                        a_[2 * H + j] = lbr ? a_[2 * H + j] + r_[j] * q_[j] + wbh[j] : a_[2 * H + j] + rbh[j] + wbh[j];
                    }
                }
        }
        if (any_d) { /* slopes [f'(z) | f'(r) | g'(h~)], 0 where the clip cut */
            for (int64_t t = 0; t < S; t++)
                for (int64_t b = 0; b < B; b++) {
                    T *s_ = pre + (t * B + b) * H3;
                    const T *y_ = ZRH_ROW(t, b);
                    T *m_ = clip ? t3 : s_; /* with clip, slopes go via t3 and the mask reads pre */
                    SFX(act_slope)(&p->act[d][0], y_, m_, 2 * H);
                    SFX(act_slope)(&p->act[d][1], y_ + 2 * H, m_ + 2 * H, H);
                    if (clip)
                        for (int64_t j = 0; j < H3; j++) s_[j] = fabs(s_[j]) > cl ? 0 : t3[j];
                }
        }
#undef ZRH_ROW
        if (dht_all) memcpy(dhn, dht_all + d * B * H, (size_t)(B * H) * es);
        else memset(dhn, 0, (size_t)(B * H) * es);

        /* The recurrence through dH, in the forward pass's column blocks. */
        T *dres = dhn; /* where the gradient of the direction's initial state ends */
#pragma omp parallel num_threads(nth)
        {
            int64_t k0, k1;
            opc_split(nblk, omp_get_num_threads(), omp_get_thread_num(), 1, &k0, &k1);
            SFX(gctx) gx = {.B = B, .H = H, .cl = cl, .clip = clip && !any_d, .t3 = t3, .zero3 = zero, .lens = lens};
            T *dn = dhn, *dcur = dh;
            for (int64_t step = S - 1; step >= 0; step--) {
                int64_t t = reverse ? S - 1 - step : step;
                gx.t = t;
                gx.zt = (T *)(zrh + (t * D + d) * B * H3);
                gx.hp = hp_all + t * B * H;
                gx.dhall_t = dhall ? dhall + (t * D + d) * B * H : NULL;
                gx.aux_t = aux + t * B * H;
                gx.pre_t = clip && !any_d ? pre + t * B * H3 : NULL;
                gx.sl_t = any_d ? pre + t * B * H3 : NULL;
                gx.dat = dA + t * B * H3;
                gx.dq_t = lbr ? dq_all + t * B * H : NULL;
                gx.dn = dn;
                gx.dh = dcur;
                for (int64_t k = k0; k < k1; k++) SFX(bw_1)(&gx, k * hb, k * hb + hb < H ? k * hb + hb : H);
#pragma omp barrier
                if (!lbr) {
                    /* d(r*Hp)[:, block] = dah . Rh[:, block] -> t3 (as [B, H]) */
                    for (int64_t k = k0; k < k1; k++) {
                        int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
                        opc_gemm(DT, false, false, B, w, H, 1.0, gx.dat + 2 * H, H3, R + 2 * H * H + j0, H, 0.0,
                                 t3 + j0, H);
                        SFX(bw_2)(&gx, j0, j0 + w);
                    }
#pragma omp barrier
                    for (int64_t k = k0; k < k1; k++) {
                        int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
                        opc_gemm(DT, false, false, B, w, 2 * H, 1.0, gx.dat, H3, R + j0, H, 1.0, dcur + j0, H);
                        if (lens) SFX(bw_pass)(&gx, j0, j0 + w);
                    }
                } else {
                    for (int64_t k = k0; k < k1; k++) {
                        int64_t j0 = k * hb, w = j0 + hb < H ? hb : H - j0;
                        opc_gemm(DT, false, false, B, w, H3, 1.0, t3, H3, R + j0, H, 1.0, dcur + j0, H);
                        if (lens) SFX(bw_pass)(&gx, j0, j0 + w);
                    }
                }
#pragma omp barrier
                T *tmp = dn;
                dn = dcur;
                dcur = tmp;
            }
#pragma omp single
            dres = dn;
        }
        T *dW = dW_all ? dW_all + d * H3 * I : NULL, *dR = dR_all ? dR_all + d * H3 * H : NULL;
        T *dB = dB_all ? dB_all + d * 6 * H : NULL;
        if (dH0_all) memcpy(dH0_all + d * B * H, dres, (size_t)(B * H) * es);
        if (dX) opc_gemm_par(DT, false, false, SB, I, H3, 1.0, dA, H3, W, I, d == 0 ? 0.0 : 1.0, dX, I, nt);
        if (dW) opc_gemm_par(DT, true, false, H3, I, SB, 1.0, dA, H3, X, I, 0.0, dW, I, nt);
        if (dR) {
            opc_gemm_par(DT, true, false, 2 * H, H, SB, 1.0, dA, H3, hp_all, H, 0.0, dR, H, nt);
            if (!lbr) opc_gemm_par(DT, true, false, H, H, SB, 1.0, dA + 2 * H, H3, aux, H, 0.0, dR + 2 * H * H, H, nt);
            else opc_gemm_par(DT, true, false, H, H, SB, 1.0, dq_all, H, hp_all, H, 0.0, dR + 2 * H * H, H, nt);
        }
        if (dB) {
            SFX(colsum)(dA, SB, H3, H3, dB);
            memcpy(dB + H3, dB, (size_t)(2 * H) * es);
            if (!lbr) memcpy(dB + 5 * H, dB + 2 * H, (size_t)H * es);
            else SFX(colsum)(dq_all, SB, H, H, dB + 5 * H);
        }
    }
done:
    free(hp_all);
    free(dA);
    free(aux);
    free(dq_all);
    free(t3);
    free(dh);
    free(dhn);
    free(pre);
    free(zero);
    return status;
}
