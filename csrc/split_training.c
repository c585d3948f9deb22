/* SplitTraining (com.microsoft): input cut along `axis` into as many parts as the int64 `split` input holds
 * sizes (1 to 4: the outputs output0..output3; non-negative, summing to input's dim along axis; a size 0 gives
 * an empty part). The library's call always has the four outputs: one past the split's length is empty (size 0
 * along axis; a node has one output per size, and ORT rejects one with more outputs than sizes). Exact copies of any element size: float32, float64,
 * float16, int32 and int64 (shape tensors), through csrc/axis_copy.h, shared with ConcatTraining. */
#include "axis_copy.h"

int32_t opc_prep_split_training(opc_call *c, void *plan_v, opc_shape *outs) {
    opc_axis_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *x = c->in[0], *sp = c->in[1];
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    char a[200];
    if (x->rank < 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input must have rank >= 1, got shape %s", opc_shape_str(x, a, sizeof a));
    if (sp->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "split has dtype %s; int64 needed", opc_dtype_name(sp->dtype));
    if (sp->rank != 1 || sp->shape[0] < 1 || sp->shape[0] > OPC_AXIS_PARTS)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split must hold 1 to %d sizes (one per output), got shape %s",
                        OPC_AXIS_PARTS, opc_shape_str(sp, a, sizeof a));
    if (!sp->data) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split has no data: its values are the parts' sizes");
    int64_t v;
    if ((s = opc_attr_int(c, "axis", 0, &v))) return s;
    if (v < -(int64_t)x->rank || v >= x->rank)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "axis %lld is not in the valid range [%d, %d] for rank %d",
                        (long long)v, -(int)x->rank, (int)x->rank - 1, (int)x->rank);
    int32_t ax = (int32_t)(v < 0 ? v + x->rank : v);
    p->es = opc_dtype_size(x->dtype);
    p->parts = (int32_t)sp->shape[0];
    p->total = x->shape[ax];
    opc_axis_rows(p, x, ax);
    const int64_t *sv = sp->data;
    int64_t total = 0;
    for (int32_t k = 0; k < p->parts; k++) {
        if (sv[k] < 0 || sv[k] > p->total)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split holds %lld at position %d; sizes must be in [0, %lld]",
                            (long long)sv[k], (int)k, (long long)p->total);
        p->size[k] = sv[k];
        p->start[k] = total;
        total += sv[k];
    }
    if (total != p->total)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "split's %d sizes sum to %lld, not input's dim %lld along axis %d",
                        (int)p->parts, (long long)total, (long long)p->total, (int)ax);
    for (int32_t k = 0; k < OPC_AXIS_PARTS; k++) {
        opc_shape_from(&outs[k], x);
        outs[k].shape[ax] = k < p->parts ? p->size[k] : 0; /* a part past the split's length: empty */
    }
    return OPC_OK;
}

int32_t opc_exec_split_training(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const opc_axis_plan *p = plan_v;
    char *parts[OPC_AXIS_PARTS];
    for (int32_t k = 0; k < OPC_AXIS_PARTS; k++) parts[k] = outs[k].data;
    opc_axis_copy(p, (char *)c->in[0]->data, parts, true, c->threads);
    return OPC_OK;
}

/* ---- registry entry (listed in ops.def; held against the spec by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_ST[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_INT32, OPC_INT64};
static const char *const ST_IN[] = {"input", "split"};
static const uint8_t ST_OPT[] = {0, 0};
static const char *const ST_OUT[] = {"output0", "output1", "output2", "output3"};
static const char *const ST_ATTR[] = {"axis"};

OPC_DEFINE_OP(SplitTraining) = {
    .desc = {.name = "SplitTraining", OPC_INPUTS(ST_IN, ST_OPT), OPC_OUTPUTS(ST_OUT), OPC_DTYPES(DT_ST),
             OPC_ATTRS(ST_ATTR),
             .notes = "input cut along axis into one part per value of the int64 split input (1 to 4; non-negative, "
                      "summing to the axis' dim); exact copies"},
    .prepare = opc_prep_split_training, .exec = opc_exec_split_training, .check = NULL};
