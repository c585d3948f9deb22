/* ConcatTraining (com.microsoft): three inputs joined along `axis` (concat_result), and each input's size
 * along it (per_input_length, int64 [3], optional). The inputs share a rank >= 1 and every dim but axis';
 * a size 0 along axis is valid. Exact copies of any element size: float32, float64 and float16 (no
 * arithmetic). Work is split over the rows before the axis; each row's piece of an input is one memcpy, so
 * results are bitwise the same at any thread count. */
#include <omp.h>

#include "call.h"

#define CT_PARTS 3

typedef struct {
    size_t es;
    int64_t outer, total, inner;
    int64_t size[CT_PARTS], start[CT_PARTS];
} ct_plan;

int32_t opc_prep_concat_training(opc_call *c, void *plan_v, opc_shape *outs) {
    ct_plan *p = plan_v;
    int32_t s;
    for (int32_t k = 0; k < CT_PARTS; k++)
        if ((s = opc_require(c, k))) return s;
    const opc_tensor *x0 = c->in[0];
    if ((s = opc_check_supported_dtype(c, x0->dtype))) return s;
    char a[200], b[200];
    if (x0->rank < 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input0 must have rank >= 1 (scalars cannot be concatenated), got shape %s",
                        opc_shape_str(x0, a, sizeof a));
    if (!opc_attr_get(c, "axis")) return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "axis is required");
    int64_t v;
    if ((s = opc_attr_int(c, "axis", 0, &v))) return s;
    if (v < -(int64_t)x0->rank || v >= x0->rank)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "axis %lld is not in the valid range [%d, %d] for rank %d",
                        (long long)v, -(int)x0->rank, (int)x0->rank - 1, (int)x0->rank);
    int32_t ax = (int32_t)(v < 0 ? v + x0->rank : v);
    int64_t total = 0;
    for (int32_t k = 0; k < CT_PARTS; k++) {
        const opc_tensor *t = c->in[k];
        if (t->dtype != x0->dtype)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input%d has dtype %s, input0 %s", (int)k,
                            opc_dtype_name(t->dtype), opc_dtype_name(x0->dtype));
        bool same = t->rank == x0->rank;
        for (int32_t i = 0; same && i < x0->rank; i++) same = i == ax || t->shape[i] == x0->shape[i];
        if (!same)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input%d has shape %s, input0 %s: they must match outside axis %d",
                            (int)k, opc_shape_str(t, a, sizeof a), opc_shape_str(x0, b, sizeof b), (int)ax);
        p->size[k] = t->shape[ax];
        p->start[k] = total;
        total += t->shape[ax];  /* each numel checked by the dispatcher; the sum of three stays far from overflow */
    }
    p->es = opc_dtype_size(x0->dtype);
    p->total = total;
    p->outer = 1;
    p->inner = 1;
    for (int32_t i = 0; i < ax; i++) p->outer *= x0->shape[i];
    for (int32_t i = ax + 1; i < x0->rank; i++) p->inner *= x0->shape[i];
    int64_t n;
    if (!opc_mul_ok(p->outer, total, &n) || !opc_mul_ok(n, p->inner, &n) || n > OPC_MAX_ELEMS)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "concat_result would have too many elements");
    opc_shape_from(&outs[0], x0);
    outs[0].shape[ax] = total;
    outs[1].dtype = OPC_INT64;
    outs[1].rank = 1;
    outs[1].shape[0] = CT_PARTS;
    return OPC_OK;
}

static void copy_rows(const ct_plan *p, const opc_call *c, char *y, int64_t lo, int64_t hi) {
    size_t row = (size_t)(p->total * p->inner) * p->es;
    for (int32_t k = 0; k < CT_PARTS; k++) {
        if (p->size[k] == 0) continue;
        const char *x = c->in[k]->data;
        size_t bytes = (size_t)(p->size[k] * p->inner) * p->es, at = (size_t)(p->start[k] * p->inner) * p->es;
        for (int64_t o = lo; o < hi; o++) memcpy(y + (size_t)o * row + at, x + (size_t)o * bytes, bytes);
    }
}

int32_t opc_exec_concat_training(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const ct_plan *p = plan_v;
    if (outs[1].data)
        for (int32_t k = 0; k < CT_PARTS; k++) ((int64_t *)outs[1].data)[k] = p->size[k];
    char *y = outs[0].data;
    if (!y || p->outer == 0 || p->total == 0 || p->inner == 0) return OPC_OK;
    /* below ~256 KiB per thread, thread start-up costs more than it saves */
    int64_t bytes = p->outer * p->total * p->inner * (int64_t)p->es;
    int64_t want = bytes / opc_grain(262144) + 1;
    if (want > p->outer) want = p->outer;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        copy_rows(p, c, y, 0, p->outer);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(p->outer, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        copy_rows(p, c, y, lo, hi);
    }
    return OPC_OK;
}

/* ---- registry entry (listed in ops.def; held against the spec by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_CT[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const CT_IN[] = {"input0", "input1", "input2"};
static const uint8_t CT_OPT[] = {0, 0, 0};
static const char *const CT_OUT[] = {"concat_result", "per_input_length"};
static const char *const CT_ATTR[] = {"axis"};

OPC_DEFINE_OP(ConcatTraining) = {
    .desc = {.name = "ConcatTraining", OPC_INPUTS(CT_IN, CT_OPT), OPC_OUTPUTS(CT_OUT), OPC_DTYPES(DT_CT),
             OPC_ATTRS(CT_ATTR),
             .notes = "three inputs joined along axis (exact copies), and per_input_length: their int64 sizes along it"},
    .prepare = opc_prep_concat_training, .exec = opc_exec_concat_training, .check = NULL};
