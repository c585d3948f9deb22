/* SplitTraining (com.microsoft): input cut along `axis` into three parts whose sizes are the int64 `split`
 * input's values (three non-negative sizes summing to input's dim along axis; a size 0 gives an empty part).
 * Exact copies of any element size: float32, float64 and float16 (no arithmetic). The split values set the
 * output shapes, so prepare reads and checks them. Work is split over the rows before the axis; each row's
 * part is one memcpy, so results are bitwise the same at any thread count. */
#include <omp.h>

#include "call.h"

#define ST_PARTS 3

typedef struct {
    size_t es;
    int64_t outer, dim, inner;
    int64_t size[ST_PARTS], start[ST_PARTS];
} st_plan;

int32_t opc_prep_split_training(opc_call *c, void *plan_v, opc_shape *outs) {
    st_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *x = c->in[0], *sp = c->in[1];
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    char a[200];
    if (x->rank < 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input must have rank >= 1, got shape %s", opc_shape_str(x, a, sizeof a));
    if (sp->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "split has dtype %s; int64 needed", opc_dtype_name(sp->dtype));
    if (sp->rank != 1 || sp->shape[0] != ST_PARTS)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split must hold %d sizes (one per output), got shape %s", ST_PARTS,
                        opc_shape_str(sp, a, sizeof a));
    if (!sp->data) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split has no data: its values are the parts' sizes");
    int64_t v;
    if ((s = opc_attr_int(c, "axis", 0, &v))) return s;
    if (v < -(int64_t)x->rank || v >= x->rank)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "axis %lld is not in the valid range [%d, %d] for rank %d",
                        (long long)v, -(int)x->rank, (int)x->rank - 1, (int)x->rank);
    int32_t ax = (int32_t)(v < 0 ? v + x->rank : v);
    p->es = opc_dtype_size(x->dtype);
    p->dim = x->shape[ax];
    p->outer = 1;
    p->inner = 1;
    for (int32_t i = 0; i < ax; i++) p->outer *= x->shape[i];  /* numel checked by the dispatcher */
    for (int32_t i = ax + 1; i < x->rank; i++) p->inner *= x->shape[i];
    const int64_t *sv = sp->data;
    int64_t total = 0;
    for (int32_t k = 0; k < ST_PARTS; k++) {
        if (sv[k] < 0 || sv[k] > p->dim)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split holds %lld at position %d; sizes must be in [0, %lld]",
                            (long long)sv[k], (int)k, (long long)p->dim);
        p->size[k] = sv[k];
        p->start[k] = total;
        total += sv[k];
    }
    if (total != p->dim)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split [%lld, %lld, %lld] sums to %lld, not input's dim %lld along axis %d",
                        (long long)sv[0], (long long)sv[1], (long long)sv[2], (long long)total, (long long)p->dim, (int)ax);
    for (int32_t k = 0; k < ST_PARTS; k++) {
        opc_shape_from(&outs[k], x);
        outs[k].shape[ax] = p->size[k];
    }
    return OPC_OK;
}

static void copy_rows(const st_plan *p, const char *x, opc_tensor *outs, int64_t lo, int64_t hi) {
    for (int32_t k = 0; k < ST_PARTS; k++) {
        char *y = outs[k].data;
        if (!y || p->size[k] == 0) continue;
        size_t bytes = (size_t)(p->size[k] * p->inner) * p->es;
        for (int64_t o = lo; o < hi; o++)
            memcpy(y + (size_t)o * bytes, x + (size_t)((o * p->dim + p->start[k]) * p->inner) * p->es, bytes);
    }
}

int32_t opc_exec_split_training(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const st_plan *p = plan_v;
    if (p->outer == 0 || p->dim == 0 || p->inner == 0) return OPC_OK;
    const char *x = c->in[0]->data;
    /* below ~256 KiB per thread, thread start-up costs more than it saves */
    int64_t bytes = p->outer * p->dim * p->inner * (int64_t)p->es;
    int64_t want = bytes / opc_grain(262144) + 1;
    if (want > p->outer) want = p->outer;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        copy_rows(p, x, outs, 0, p->outer);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(p->outer, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        copy_rows(p, x, outs, lo, hi);
    }
    return OPC_OK;
}

/* ---- registry entry (listed in ops.def; held against the spec by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_ST[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const ST_IN[] = {"input", "split"};
static const uint8_t ST_OPT[] = {0, 0};
static const char *const ST_OUT[] = {"output0", "output1", "output2"};
static const char *const ST_ATTR[] = {"axis"};

OPC_DEFINE_OP(SplitTraining) = {
    .desc = {.name = "SplitTraining", OPC_INPUTS(ST_IN, ST_OPT), OPC_OUTPUTS(ST_OUT), OPC_DTYPES(DT_ST),
             OPC_ATTRS(ST_ATTR),
             .notes = "input cut along axis into three parts of the int64 split input's sizes (non-negative, summing "
                      "to the axis' dim); exact copies"},
    .prepare = opc_prep_split_training, .exec = opc_exec_split_training, .check = NULL};
