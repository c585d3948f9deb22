/* ConcatTraining (com.microsoft): 1 to 4 inputs (input0..input3, the present ones leading) joined along
 * `axis` (concat_result), and each one's size along it (per_input_length, int64 [number of inputs], optional).
 * The inputs share a dtype, a rank >= 1 and every dim but axis'; a size 0 along axis is valid. Exact copies
 * of any element size: float32, float64, float16, int32 and int64 (shape tensors built for Reshape), through
 * csrc/axis_copy.h, shared with SplitTraining. */
#include "axis_copy.h"

int32_t opc_prep_concat_training(opc_call *c, void *plan_v, opc_shape *outs) {
    opc_axis_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0))) return s;
    int32_t n = 1;
    while (n < OPC_AXIS_PARTS && n < c->n_inputs && c->in[n]) n++;
    for (int32_t k = n; k < c->n_inputs && k < OPC_AXIS_PARTS; k++)
        if (c->in[k])
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input%d is given but input%d is missing: the inputs are "
                            "variadic, the present ones first", (int)k, (int)n);
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
    p->parts = n;
    for (int32_t k = 0; k < n; k++) {
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
        total += t->shape[ax];  /* each numel checked by the dispatcher; the sum of four stays far from overflow */
    }
    p->es = opc_dtype_size(x0->dtype);
    p->total = total;
    opc_axis_rows(p, x0, ax);
    int64_t m;
    if (!opc_mul_ok(p->outer, total, &m) || !opc_mul_ok(m, p->inner, &m) || m > OPC_MAX_ELEMS)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "concat_result would have too many elements");
    opc_shape_from(&outs[0], x0);
    outs[0].shape[ax] = total;
    outs[1].dtype = OPC_INT64;
    outs[1].rank = 1;
    outs[1].shape[0] = n;
    return OPC_OK;
}

int32_t opc_exec_concat_training(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const opc_axis_plan *p = plan_v;
    if (outs[1].data)
        for (int32_t k = 0; k < p->parts; k++) ((int64_t *)outs[1].data)[k] = p->size[k];
    char *parts[OPC_AXIS_PARTS] = {0};
    for (int32_t k = 0; k < p->parts; k++) parts[k] = (char *)c->in[k]->data; /* read only: to_parts is false */
    opc_axis_copy(p, outs[0].data, parts, false, c->threads);
    return OPC_OK;
}

/* ---- registry entry (listed in ops.def; held against the spec by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_CT[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_INT32, OPC_INT64};
static const char *const CT_IN[] = {"input0", "input1", "input2", "input3"};
static const uint8_t CT_OPT[] = {0, 1, 1, 1};
static const char *const CT_OUT[] = {"concat_result", "per_input_length"};
static const char *const CT_ATTR[] = {"axis"};

OPC_DEFINE_OP(ConcatTraining) = {
    .desc = {.name = "ConcatTraining", OPC_INPUTS(CT_IN, CT_OPT), OPC_OUTPUTS(CT_OUT), OPC_DTYPES(DT_CT),
             OPC_ATTRS(CT_ATTR),
             .notes = "1 to 4 inputs joined along axis (exact copies), and per_input_length: their int64 sizes along it"},
    .prepare = opc_prep_concat_training, .exec = opc_exec_concat_training, .check = NULL};
