/* Public entry points: op registry, argument validation, dispatch, build facts. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "blas.h"
#include "call.h"
#include "ops.h"

/* ---- registry ------------------------------------------------------------------------------ */

/* Every op's entry, defined in the op's own C file (OPC_DEFINE_OP) and listed once in ops.def. */
static const opc_op_entry *const OPS[] = {
#define OPC_OP(NAME, SOURCE) &opc_op_##NAME,
#include "ops.def"
#undef OPC_OP
};

#define N_OPS ((int32_t)(sizeof(OPS) / sizeof(OPS[0])))

int32_t opc_op_count(void) { return N_OPS; }

const opc_op_desc *opc_op_at(int32_t index) {
    return (index >= 0 && index < N_OPS) ? &OPS[index]->desc : NULL;
}

static const opc_op_entry *find_entry(const char *name) {
    if (!name) return NULL;
    for (int32_t i = 0; i < N_OPS; i++)
        if (strcmp(OPS[i]->desc.name, name) == 0) return OPS[i];
    return NULL;
}

const opc_op_desc *opc_find_op(const char *name) {
    const opc_op_entry *e = find_entry(name);
    return e ? &e->desc : NULL;
}

int32_t opc_abi_version(void) { return OPC_ABI_VERSION; }

const char *opc_status_name(int32_t s) {
    switch (s) {
    case OPC_OK: return "OPC_OK";
    case OPC_ERR_UNKNOWN_OP: return "OPC_ERR_UNKNOWN_OP";
    case OPC_ERR_INVALID_ARGUMENT: return "OPC_ERR_INVALID_ARGUMENT";
    case OPC_ERR_UNSUPPORTED_DTYPE: return "OPC_ERR_UNSUPPORTED_DTYPE";
    case OPC_ERR_UNKNOWN_ATTRIBUTE: return "OPC_ERR_UNKNOWN_ATTRIBUTE";
    case OPC_ERR_INVALID_ATTRIBUTE: return "OPC_ERR_INVALID_ATTRIBUTE";
    case OPC_ERR_NOT_IMPLEMENTED: return "OPC_ERR_NOT_IMPLEMENTED";
    case OPC_ERR_OUT_OF_MEMORY: return "OPC_ERR_OUT_OF_MEMORY";
    case OPC_ERR_OUTPUT_MISMATCH: return "OPC_ERR_OUTPUT_MISMATCH";
    case OPC_ERR_INTERNAL: return "OPC_ERR_INTERNAL";
    default: return "OPC_ERR_UNKNOWN_STATUS";
    }
}

/* ---- dispatch ------------------------------------------------------------------------------ */

/* attribute k of the schema's, then of the extra ones */
static const char *attr_name_at(const opc_op_desc *d, int32_t k) {
    return k < d->n_attrs ? d->attr_names[k] : d->extra_attr_names[k - d->n_attrs];
}

static int32_t setup(opc_call *c, const char *op, int32_t n_inputs, const opc_tensor *inputs,
                     int32_t n_attrs, const opc_attr *attrs, int32_t n_outputs, char *err,
                     size_t err_len, const opc_op_entry **entry) {
    memset(c, 0, sizeof *c);
    c->err = err;
    c->err_len = err_len;
    if (err && err_len) err[0] = 0;
    const opc_op_entry *e = find_entry(op);
    if (!e)
        return opc_fail(c, OPC_ERR_UNKNOWN_OP, "unknown op '%s' (opc_op_count/opc_op_at list the ops)",
                        op ? op : "(null)");
    *entry = e;
    c->desc = &e->desc;
    if (n_inputs < 0 || n_inputs > e->desc.n_inputs)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "got %d inputs; the op takes at most %d",
                        (int)n_inputs, (int)e->desc.n_inputs);
    if (n_inputs > 0 && !inputs)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "inputs array is NULL");
    if (n_outputs != e->desc.n_outputs)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "got %d outputs; the op has exactly %d",
                        (int)n_outputs, (int)e->desc.n_outputs);
    c->n_inputs = e->desc.n_inputs;
    for (int32_t i = 0; i < n_inputs; i++) {
        const opc_tensor *t = &inputs[i];
        const bool seq = (e->seq_inputs >> i) & 1u;
        if (t->rank == OPC_SEQUENCE) {
            if (!seq)
                return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input %s is a sequence; the op takes a tensor there",
                                e->desc.input_names[i]);
            int32_t s = opc_check_sequence(c, t, "input", e->desc.input_names[i], NULL);
            if (s) return s;
            c->in[i] = t;
            continue;
        }
        if (t->rank < 0 || !t->data) continue;
        if (seq)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT,
                            "input %s is a tensor (rank %d); the op takes a sequence there (rank OPC_SEQUENCE)",
                            e->desc.input_names[i], (int)t->rank);
        int32_t s = opc_check_dense(c, t, "input", e->desc.input_names[i]);
        if (s) return s;
        c->in[i] = t;
    }
    if (n_attrs < 0 || (n_attrs > 0 && !attrs))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "bad attribute array (count %d)", (int)n_attrs);
    for (int32_t i = 0; i < n_attrs; i++) {
        const opc_attr *a = &attrs[i];
        if (!a->name) return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute %d has a NULL name", (int)i);
        bool known = false;
        const int32_t n_known = e->desc.n_attrs + e->desc.n_extra_attrs;
        for (int32_t k = 0; k < n_known; k++)
            if (strcmp(attr_name_at(&e->desc, k), a->name) == 0) known = true;
        if (!known) {
            char names[256] = "none";
            size_t p = 0;
            for (int32_t k = 0; k < n_known && p < sizeof names; k++)
                p += (size_t)snprintf(names + p, sizeof names - p, k ? ", %s" : "%s", attr_name_at(&e->desc, k));
            return opc_fail(c, OPC_ERR_UNKNOWN_ATTRIBUTE, "unknown attribute '%s' (accepted: %s)",
                            a->name, names);
        }
        for (int32_t k = 0; k < i; k++)
            if (strcmp(attrs[k].name, a->name) == 0)
                return opc_fail(c, OPC_ERR_UNKNOWN_ATTRIBUTE, "attribute '%s' is given twice", a->name);
        switch (a->kind) {
        case OPC_ATTR_INT: case OPC_ATTR_FLOAT: break;
        case OPC_ATTR_STRING:
            if (!a->s) return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has a NULL string", a->name);
            break;
        case OPC_ATTR_INTS: case OPC_ATTR_FLOATS: case OPC_ATTR_STRINGS: {
            const void *p = a->kind == OPC_ATTR_INTS ? (const void *)a->ints
                          : a->kind == OPC_ATTR_FLOATS ? (const void *)a->floats : (const void *)a->strings;
            if (a->n < 0 || a->n > 4096 || (a->n > 0 && !p))
                return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has a bad list (length %lld)",
                                a->name, (long long)a->n);
            if (a->kind == OPC_ATTR_STRINGS)
                for (int64_t k = 0; k < a->n; k++)
                    if (!a->strings[k])
                        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has a NULL string", a->name);
            break;
        }
        default:
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has unknown kind %d", a->name,
                            (int)a->kind);
        }
    }
    c->n_attrs = n_attrs;
    c->attrs = attrs;
    return OPC_OK;
}

int32_t opc_infer(const char *op, int32_t n_inputs, const opc_tensor *inputs, int32_t n_attrs,
                  const opc_attr *attrs, int32_t n_outputs, opc_shape *out_shapes, char *err,
                  size_t err_len) {
    opc_call c;
    const opc_op_entry *e = NULL;
    int32_t s = setup(&c, op, n_inputs, inputs, n_attrs, attrs, n_outputs, err, err_len, &e);
    if (s) return s;
    if (!out_shapes) return opc_fail(&c, OPC_ERR_INVALID_ARGUMENT, "out_shapes is NULL");
    _Alignas(64) unsigned char plan[OPC_PLAN_BYTES];
    memset(plan, 0, sizeof plan);
    opc_shape shapes[OPC_MAX_OUTPUTS];
    memset(shapes, 0, sizeof shapes);
    s = e->prepare(&c, plan, shapes);
    if (s) return s;
    for (int32_t i = 0; i < n_outputs; i++) out_shapes[i] = shapes[i];
    return OPC_OK;
}

int32_t opc_run(const char *op, int32_t n_inputs, const opc_tensor *inputs, int32_t n_attrs,
                const opc_attr *attrs, int32_t n_outputs, opc_tensor *outputs, int32_t threads,
                char *err, size_t err_len) {
    opc_call c;
    const opc_op_entry *e = NULL;
    int32_t s = setup(&c, op, n_inputs, inputs, n_attrs, attrs, n_outputs, err, err_len, &e);
    if (s) return s;
    if (!outputs) return opc_fail(&c, OPC_ERR_INVALID_ARGUMENT, "outputs array is NULL");
    if (threads < 0 || threads > 4096)
        return opc_fail(&c, OPC_ERR_INVALID_ARGUMENT, "threads must be in [0, 4096], got %d", (int)threads);
    c.threads = threads == 0 ? omp_get_max_threads() : threads;
    if (c.threads < 1) c.threads = 1;
    _Alignas(64) unsigned char plan[OPC_PLAN_BYTES];
    memset(plan, 0, sizeof plan);
    opc_shape shapes[OPC_MAX_OUTPUTS];
    memset(shapes, 0, sizeof shapes);
    s = e->prepare(&c, plan, shapes);
    if (s) return s;
    /* The one "no output wanted" return, after the same validation a call with outputs gets: exec checks the
     * input values with the op's check function (or in its own pass, reporting through it). */
    bool wanted = false;
    for (int32_t i = 0; i < n_outputs; i++) wanted = wanted || outputs[i].data != NULL;
    if (!wanted) return e->check ? e->check(&c, plan) : OPC_OK;
    for (int32_t i = 0; i < n_outputs; i++) {
        opc_tensor *o = &outputs[i];
        if (!o->data) continue;
        const opc_shape *w = &shapes[i];
        if (w->rank == OPC_SEQUENCE || o->rank == OPC_SEQUENCE) {
            if (w->rank != OPC_SEQUENCE || o->rank != OPC_SEQUENCE)
                return opc_fail(&c, OPC_ERR_OUTPUT_MISMATCH, "output %d (%s) must be a %s, got a %s", (int)i,
                                e->desc.output_names[i], w->rank == OPC_SEQUENCE ? "sequence" : "tensor",
                                o->rank == OPC_SEQUENCE ? "sequence" : "tensor");
            if (o->dtype != w->dtype)
                return opc_fail(&c, OPC_ERR_OUTPUT_MISMATCH, "output %d (%s) must be a sequence of %s, got %s",
                                (int)i, e->desc.output_names[i], opc_dtype_name(w->dtype), opc_dtype_name(o->dtype));
            const int64_t m = w->shape[0];
            if (m < 0 || m >= c.n_inputs || !c.in[m] || c.in[m]->rank != OPC_SEQUENCE)
                return opc_fail(&c, OPC_ERR_INTERNAL, "output %d (%s) mirrors no input sequence", (int)i,
                                e->desc.output_names[i]);
            s = opc_check_sequence(&c, o, "output", e->desc.output_names[i], c.in[m]);
            if (s) return s;
            continue;
        }
        bool ok = o->dtype == w->dtype && o->rank == w->rank && (o->rank == 0 || o->shape);
        for (int32_t k = 0; ok && k < o->rank; k++) ok = o->shape[k] == w->shape[k];
        if (!ok) {
            char want[200], got[200] = "?";
            opc_dims_str(w->shape, w->rank, want, sizeof want);
            if (o->rank >= 0 && o->rank <= OPC_MAX_RANK && (o->rank == 0 || o->shape))
                opc_dims_str(o->shape, o->rank, got, sizeof got);
            return opc_fail(&c, OPC_ERR_OUTPUT_MISMATCH,
                            "output %d (%s) must be %s %s, got %s %s", (int)i, e->desc.output_names[i],
                            opc_dtype_name(w->dtype), want, opc_dtype_name(o->dtype), got);
        }
    }
    return e->exec(&c, plan, outputs);
}

/* ---- build facts --------------------------------------------------------------------------- */

#ifndef OPC_COMPILE_FLAGS
#define OPC_COMPILE_FLAGS "unknown"
#endif
#ifndef OPC_BUILD_TYPE
#define OPC_BUILD_TYPE "unknown"
#endif
#ifndef OPC_ISA
#define OPC_ISA "baseline"
#endif
/* The ISA level this build targets, readable (ctypes in_dll) before any of its code runs, so the
 * loader can refuse a level the CPU lacks instead of dying of SIGILL. */
__attribute__((visibility("default"))) const char opc_isa[] = OPC_ISA;

#ifdef OPC_SANITIZE
#define OPC_SANITIZERS "address,undefined"
#else
#define OPC_SANITIZERS ""
#endif

static char build_info[2048];
static pthread_once_t build_once = PTHREAD_ONCE_INIT;

static void make_build_info(void) {
    const char *cfg = scipy_openblas_get_config();
    const char *core = scipy_openblas_get_corename();
    char cfg_clean[512];
    size_t k = 0;
    for (const char *p = cfg ? cfg : ""; *p && k + 1 < sizeof cfg_clean; p++)
        if (*p != '"' && *p != '\\') cfg_clean[k++] = *p;
    cfg_clean[k] = 0;
    snprintf(build_info, sizeof build_info,
             "{\"library\": \"opconform_kernels\", \"abi_version\": %d, \"compiler\": \"gcc %s\", "
             "\"flags\": \"%s\", \"build_type\": \"%s\", \"openmp\": %d, \"omp_max_threads\": %d, "
             "\"blas\": \"scipy-openblas32\", \"blas_config\": \"%s\", \"blas_core\": \"%s\", "
             "\"blas_threads\": %d, \"sanitizers\": \"%s\", \"isa\": \"%s\"}",
             OPC_ABI_VERSION, __VERSION__, OPC_COMPILE_FLAGS, OPC_BUILD_TYPE, _OPENMP,
             omp_get_max_threads(), cfg_clean, core ? core : "", scipy_openblas_get_num_threads(),
             OPC_SANITIZERS, OPC_ISA);
}

const char *opc_build_info(void) {
    pthread_once(&build_once, make_build_info);
    return build_info;
}
