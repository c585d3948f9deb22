/* GRU forward (GRUTraining) and backward (GRUGrad) for one element type; included by gru.c with
 * T, SFX(name), SIGM, TANH and DT defined. Not a standalone header.
 *
 * Forward, per step t (processing order t = 0..S-1, or S-1..0 for direction=reverse):
 *   z = sig(xw_z + Hp Rz^T + Wbz + Rbz), r = sig(xw_r + Hp Rr^T + Wbr + Rbr)
 *   lbr=0: h~ = tanh(xw_h + (r*Hp) Rh^T + Rbh + Wbh);  lbr=1: h~ = tanh(xw_h + r*(Hp Rh^T + Rbh) + Wbh)
 *   H = (1-z)*h~ + z*Hp, with xw = X W^T computed for all steps in one GEMM and pre-activations
 *   clipped to [-clip, clip] when clip is given.
 * Backward walks the steps in reverse processing order; the per-step work is the recurrence
 * through dH (one or two [B,*] GEMMs); dX, dW, dR and the bias sums are single large GEMMs /
 * column sums over all steps afterwards. */

#define GRU_PAR_MIN 4096 /* B*H below which the recurrence runs on one thread */

static inline T SFX(clipv)(T a, T cl) { return a > cl ? cl : (a < -cl ? -cl : a); }

/* rows x cols block -> acc[j] = sum over rows of A[r*ld + j] (rows in order: deterministic) */
static void SFX(colsum)(const T *A, int64_t rows, int64_t cols, int64_t ld, T *acc) {
    for (int64_t j = 0; j < cols; j++) acc[j] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const T *a = A + r * ld;
        for (int64_t j = 0; j < cols; j++) acc[j] += a[j];
    }
}

/* Everything a per-step gate loop needs; each loop is a CLONES function over the hidden columns
 * [j0, j1) of all batch rows (one thread's share, see the time loops below). */
typedef struct {
    int64_t B, H;
    T cl;
    bool clip;
    const T *xwt, *g, *hp, *wbz, *wbr, *wbh, *rbz, *rbr, *rbh;
    T *zt, *rh, *ht;
    /* backward */
    const T *dn, *dhall_t, *aux_t, *pre_t;
    T *dat, *dh, *t3, *dq_t;
} SFX(gctx);

/* forward, lbr = 0, part 1: z, r and r * Hp (g = Hp [Rz;Rr]^T, ld 3H) */
CLONES static void SFX(fw_zr)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H;
    for (int64_t b = 0; b < x->B; b++) {
        const T *x_ = x->xwt + b * H3, *g_ = x->g + b * H3, *hp_ = x->hp + b * H;
        T *z_ = x->zt + b * H3, *rh_ = x->rh + b * H;
        for (int64_t j = j0; j < j1; j++) {
            T z = SIGM(SFX(clipv)(x_[j] + g_[j] + x->wbz[j] + x->rbz[j], x->cl));
            T r = SIGM(SFX(clipv)(x_[H + j] + g_[H + j] + x->wbr[j] + x->rbr[j], x->cl));
            z_[j] = z;
            z_[H + j] = r;
            rh_[j] = r * hp_[j];
        }
    }
}

/* forward, lbr = 0, part 2: h~ and H (g = (r*Hp) Rh^T, ld H) */
CLONES static void SFX(fw_h)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H;
    for (int64_t b = 0; b < x->B; b++) {
        const T *x_ = x->xwt + b * H3 + 2 * H, *g_ = x->g + b * H, *hp_ = x->hp + b * H;
        T *z_ = x->zt + b * H3, *h_ = x->ht + b * H;
        for (int64_t j = j0; j < j1; j++) {
            T hh = TANH(SFX(clipv)(x_[j] + g_[j] + x->rbh[j] + x->wbh[j], x->cl));
            T z = z_[j];
            z_[2 * H + j] = hh;
            h_[j] = (1 - z) * hh + z * hp_[j];
        }
    }
}

/* forward, lbr = 1: all gates (g = Hp R^T, ld 3H) */
CLONES static void SFX(fw_lbr)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H;
    for (int64_t b = 0; b < x->B; b++) {
        const T *x_ = x->xwt + b * H3, *g_ = x->g + b * H3, *hp_ = x->hp + b * H;
        T *z_ = x->zt + b * H3, *h_ = x->ht + b * H;
        for (int64_t j = j0; j < j1; j++) {
            T z = SIGM(SFX(clipv)(x_[j] + g_[j] + x->wbz[j] + x->rbz[j], x->cl));
            T r = SIGM(SFX(clipv)(x_[H + j] + g_[H + j] + x->wbr[j] + x->rbr[j], x->cl));
            T hh = TANH(SFX(clipv)(x_[2 * H + j] + r * (g_[2 * H + j] + x->rbh[j]) + x->wbh[j], x->cl));
            z_[j] = z;
            z_[H + j] = r;
            z_[2 * H + j] = hh;
            h_[j] = (1 - z) * hh + z * hp_[j];
        }
    }
}

/* backward step, part 1: dz, dh~ (and for lbr = 1 dr, dq) from dH = dHnext + dHAll[t] */
CLONES static void SFX(bw_1)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H;
    const bool lbr = x->dq_t != NULL, clip = x->clip;
    for (int64_t b = 0; b < x->B; b++) {
        const T *z_ = x->zt + b * H3, *hp_ = x->hp + b * H, *dn_ = x->dn + b * H;
        const T *da_ = x->dhall_t ? x->dhall_t + b * H : NULL, *q_ = x->aux_t + b * H;
        const T *a_ = clip ? x->pre_t + b * H3 : NULL;
        T *o_ = x->dat + b * H3, *dh_ = x->dh + b * H, *t3_ = x->t3 + b * H3;
        for (int64_t j = j0; j < j1; j++) {
            T dH = dn_[j] + (da_ ? da_[j] : 0);
            T z = z_[j], r = z_[H + j], hh = z_[2 * H + j], hp = hp_[j];
            T mz = 1, mr = 1, mh = 1;
            if (clip) {
                mz = fabs(a_[j]) > x->cl ? 0 : 1;
                mr = fabs(a_[H + j]) > x->cl ? 0 : 1;
                mh = fabs(a_[2 * H + j]) > x->cl ? 0 : 1;
            }
            T dah = dH * (1 - z) * (1 - hh * hh) * mh;
            T daz = dH * (hp - hh) * z * (1 - z) * mz; /* dH'/dz = Hp - h~ */
            o_[j] = daz;
            o_[2 * H + j] = dah;
            dh_[j] = dH * z;
            if (lbr) {
                T dq = dah * r;
                T dar = dah * q_[j] * r * (1 - r) * mr;
                o_[H + j] = dar;
                x->dq_t[b * H + j] = dq;
                t3_[j] = daz;
                t3_[H + j] = dar;
                t3_[2 * H + j] = dq;
            }
        }
    }
}

/* backward step, lbr = 0, part 2: dr from d(r*Hp) = dah Rh (in t3, ld H), and its dHp term */
CLONES static void SFX(bw_2)(const SFX(gctx) *x, int64_t j0, int64_t j1) {
    const int64_t H = x->H, H3 = 3 * H;
    const bool clip = x->clip;
    for (int64_t b = 0; b < x->B; b++) {
        const T *z_ = x->zt + b * H3, *hp_ = x->hp + b * H, *drh = x->t3 + b * H;
        const T *a_ = clip ? x->pre_t + b * H3 : NULL;
        T *o_ = x->dat + b * H3, *dh_ = x->dh + b * H;
        for (int64_t j = j0; j < j1; j++) {
            T r = z_[H + j];
            T mr = (clip && fabs(a_[H + j]) > x->cl) ? 0 : 1;
            o_[H + j] = drh[j] * hp_[j] * r * (1 - r) * mr;
            dh_[j] += drh[j] * r;
        }
    }
}

static int32_t SFX(gru_forward)(opc_call *c, const gru_plan *p, opc_tensor *outs) {
    const int64_t S = p->S, B = p->B, I = p->I, H = p->H, H3 = 3 * H;
    const T *X = c->in[0]->data, *W = c->in[1]->data, *R = c->in[2]->data;
    const T *bias = c->in[3] ? c->in[3]->data : NULL, *h0 = c->in[5] ? c->in[5]->data : NULL;
    const T cl = p->has_clip ? (T)p->clip : (T)INFINITY;
    int nt = c->threads;
    T *hall = outs[0].data, *zrh = outs[2].data;
    T *own_hall = NULL, *own_zrh = NULL;
    if (!hall) hall = own_hall = malloc((size_t)(S * B * H + 1) * sizeof(T));
    if (!zrh) zrh = own_zrh = malloc((size_t)(S * B * H3 + 1) * sizeof(T));
    T *xw = malloc((size_t)(S * B * H3 + 1) * sizeof(T));
    T *g = malloc((size_t)(B * H3 + 1) * sizeof(T));
    T *rh = malloc((size_t)(2 * B * H + 1) * sizeof(T));
    T *zero = calloc((size_t)((6 * H > B * H ? 6 * H : B * H) + 1), sizeof(T));
    int32_t status = OPC_OK;
    if (!hall || !zrh || !xw || !g || !rh || !zero) {
        status = opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for GRU work buffers");
        goto done;
    }
    if (!bias) bias = zero;
    const T *wbz = bias, *wbr = bias + H, *wbh = bias + 2 * H, *rbz = bias + 3 * H, *rbr = bias + 4 * H,
            *rbh = bias + 5 * H;
    opc_gemm_par(DT, false, true, S * B, H3, I, 1.0, X, I, W, I, 0.0, xw, H3, nt);
    /* One parallel region for the whole recurrence: each thread owns hidden columns [j0, j1) of
     * every gate, computes its slice of the step GEMMs (OpenBLAS held to 1 thread) and its gates;
     * barriers separate the phases that read other threads' columns. */
    const T *h_init = h0 ? h0 : zero;
    T *gh = rh + B * H; /* [B, H] after rh in the same allocation */
    int nth = (int)(B * H >= GRU_PAR_MIN ? nt : 1);
#pragma omp parallel num_threads(nth)
    {
        int64_t j0, j1;
        opc_split(H, omp_get_num_threads(), omp_get_thread_num(), 16, &j0, &j1);
        int64_t nj = j1 - j0;
        SFX(gctx) gx = {.B = B, .H = H, .cl = cl, .g = g, .rh = rh, .wbz = wbz, .wbr = wbr, .wbh = wbh,
                        .rbz = rbz, .rbr = rbr, .rbh = rbh};
        const T *hp = h_init;
        for (int64_t step = 0; step < S; step++) {
            int64_t t = p->reverse ? S - 1 - step : step;
            gx.ht = hall + t * B * H;
            gx.zt = zrh + t * B * H3;
            gx.xwt = xw + t * B * H3;
            gx.hp = hp;
            if (nj > 0) { /* g[:, gate cols j0..j1) = Hp . R[gate rows j0..j1)^T, ld 3H */
                for (int k = 0; k < (p->lbr ? 3 : 2); k++)
                    opc_gemm(DT, false, true, B, nj, H, 1.0, hp, H, R + (k * H + j0) * H, H, 0.0,
                             g + k * H + j0, H3);
            }
            if (!p->lbr) {
                SFX(fw_zr)(&gx, j0, j1);
#pragma omp barrier
                gx.g = gh;
                if (nj > 0)
                    opc_gemm(DT, false, true, B, nj, H, 1.0, rh, H, R + (2 * H + j0) * H, H, 0.0, gh + j0, H);
                SFX(fw_h)(&gx, j0, j1);
                gx.g = g;
            } else {
                SFX(fw_lbr)(&gx, j0, j1);
            }
#pragma omp barrier
            hp = gx.ht;
        }
    }
    const T *hp = S > 0 ? hall + (p->reverse ? 0 : S - 1) * B * H : h_init;
    if (outs[1].data) memcpy(outs[1].data, hp, (size_t)(B * H) * sizeof(T));
done:
    free(own_hall);
    free(own_zrh);
    free(xw);
    free(g);
    free(rh);
    free(zero);
    return status;
}

static int32_t SFX(gru_backward)(opc_call *c, const gru_plan *p, opc_tensor *outs) {
    const int64_t S = p->S, B = p->B, I = p->I, H = p->H, H3 = 3 * H, SB = S * B;
    const T *X = c->in[0]->data, *W = c->in[1]->data, *R = c->in[2]->data;
    const T *bias = c->in[3] ? c->in[3]->data : NULL, *h0 = c->in[5] ? c->in[5]->data : NULL;
    const T *hall = c->in[6]->data, *zrh = c->in[7]->data;
    const T *dhall = c->in[8] ? c->in[8]->data : NULL, *dht = c->in[9] ? c->in[9]->data : NULL;
    T *dX = outs[0].data, *dW = outs[1].data, *dR = outs[2].data, *dB = outs[3].data, *dH0 = outs[4].data;
    const bool clip = p->has_clip, lbr = p->lbr;
    const T cl = clip ? (T)p->clip : (T)INFINITY;
    int nt = c->threads;
    if (!dX && !dW && !dR && !dB && !dH0) return OPC_OK;

    size_t es = sizeof(T);
    T *hp_all = malloc((size_t)(SB * H + 1) * es);
    T *dA = malloc((size_t)(SB * H3 + 1) * es);
    T *aux = malloc((size_t)(SB * H + 1) * es);             /* lbr0: r*Hp; lbr1: Hp Rh^T + Rbh */
    T *dq_all = lbr ? malloc((size_t)(SB * H + 1) * es) : NULL;
    T *t3 = malloc((size_t)(B * H3 + 1) * es);
    T *dh = malloc((size_t)(B * H + 1) * es), *dhn = calloc((size_t)(B * H + 1), es);
    T *pre = clip ? malloc((size_t)(SB * H3 + 1) * es) : NULL;
    T *zero = calloc((size_t)(6 * H + 1), es);
    int32_t status = OPC_OK;
    if (!hp_all || !dA || !aux || (lbr && !dq_all) || !t3 || !dh || !dhn || (clip && !pre) || !zero) {
        status = opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for GRU work buffers");
        goto done;
    }
    if (!bias) bias = zero;
    const T *wbz = bias, *wbr = bias + H, *wbh = bias + 2 * H, *rbz = bias + 3 * H, *rbr = bias + 4 * H,
            *rbh = bias + 5 * H;
    (void)wbz;
    (void)wbr;
    (void)rbz;
    (void)rbr;

    /* the state each step started from */
    for (int64_t t = 0; t < S; t++) {
        int64_t first = p->reverse ? S - 1 : 0;
        const T *src = t == first ? h0 : hall + (p->reverse ? t + 1 : t - 1) * B * H;
        if (src) memcpy(hp_all + t * B * H, src, (size_t)(B * H) * es);
        else memset(hp_all + t * B * H, 0, (size_t)(B * H) * es);
    }
    if (!lbr) {
        for (int64_t t = 0; t < S; t++)
            for (int64_t b = 0; b < B; b++) {
                const T *r_ = zrh + (t * B + b) * H3 + H, *hp_ = hp_all + (t * B + b) * H;
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
        for (int64_t rr = 0; rr < SB; rr++) {
            T *a_ = pre + rr * H3;
            const T *r_ = zrh + rr * H3 + H, *q_ = aux + rr * H;
            for (int64_t j = 0; j < H; j++) {
                a_[j] = a_[j] + wbz[j] + rbz[j];
                a_[H + j] = a_[H + j] + wbr[j] + rbr[j];
                a_[2 * H + j] = lbr ? a_[2 * H + j] + r_[j] * q_[j] + wbh[j] : a_[2 * H + j] + rbh[j] + wbh[j];
            }
        }
    }
    if (dht) memcpy(dhn, dht, (size_t)(B * H) * es);

    /* The recurrence through dH, partitioned by hidden columns as in the forward pass. */
    int nth = (int)(B * H >= GRU_PAR_MIN ? nt : 1);
#pragma omp parallel num_threads(nth)
    {
        int64_t j0, j1;
        opc_split(H, omp_get_num_threads(), omp_get_thread_num(), 16, &j0, &j1);
        int64_t nj = j1 - j0;
        SFX(gctx) gx = {.B = B, .H = H, .cl = cl, .clip = clip, .t3 = t3};
        T *dn = dhn, *dcur = dh;
        for (int64_t step = S - 1; step >= 0; step--) {
            int64_t t = p->reverse ? S - 1 - step : step;
            gx.zt = (T *)(zrh + t * B * H3);
            gx.hp = hp_all + t * B * H;
            gx.dhall_t = dhall ? dhall + t * B * H : NULL;
            gx.aux_t = aux + t * B * H;
            gx.pre_t = clip ? pre + t * B * H3 : NULL;
            gx.dat = dA + t * B * H3;
            gx.dq_t = lbr ? dq_all + t * B * H : NULL;
            gx.dn = dn;
            gx.dh = dcur;
            SFX(bw_1)(&gx, j0, j1);
#pragma omp barrier
            if (!lbr) {
                /* d(r*Hp)[:, j0..j1) = dah . Rh[:, j0..j1) -> t3 (as [B, H]) */
                if (nj > 0)
                    opc_gemm(DT, false, false, B, nj, H, 1.0, gx.dat + 2 * H, H3, R + 2 * H * H + j0, H, 0.0,
                             t3 + j0, H);
                SFX(bw_2)(&gx, j0, j1);
#pragma omp barrier
                if (nj > 0)
                    opc_gemm(DT, false, false, B, nj, 2 * H, 1.0, gx.dat, H3, R + j0, H, 1.0, dcur + j0, H);
            } else if (nj > 0) {
                opc_gemm(DT, false, false, B, nj, H3, 1.0, t3, H3, R + j0, H, 1.0, dcur + j0, H);
            }
#pragma omp barrier
            T *tmp = dn;
            dn = dcur;
            dcur = tmp;
        }
    }
    if (S % 2 == 1) { /* the threads swapped their private pointers S times */
        T *tmp = dhn;
        dhn = dh;
        dh = tmp;
    }
    if (dH0) memcpy(dH0, dhn, (size_t)(B * H) * es);
    if (dX) opc_gemm_par(DT, false, false, SB, I, H3, 1.0, dA, H3, W, I, 0.0, dX, I, nt);
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
