/* The call helpers every op file uses: errors, tensors, dtypes, attributes, thread and streaming knobs. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "call.h"

/* ---- errors -------------------------------------------------------------------------------- */

int32_t opc_fail(opc_call *c, int32_t status, const char *fmt, ...) {
    if (c->err && c->err_len > 0) {
        int k = snprintf(c->err, c->err_len, "%s: ", c->desc ? c->desc->name : "opconform");
        if (k < 0) k = 0;
        if ((size_t)k < c->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + k, c->err_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return status;
}

/* ---- tensors ------------------------------------------------------------------------------- */

size_t opc_dtype_size(int32_t dt) {
    switch (dt) {
    case OPC_FLOAT: case OPC_INT32: return 4;
    case OPC_DOUBLE: case OPC_INT64: return 8;
    case OPC_BOOL: return 1;
    case OPC_FLOAT16: case OPC_BFLOAT16: return 2;
    default: return 0;
    }
}

const char *opc_dtype_name(int32_t dt) {
    switch (dt) {
    case OPC_FLOAT: return "float32";
    case OPC_DOUBLE: return "float64";
    case OPC_FLOAT16: return "float16";
    case OPC_BFLOAT16: return "bfloat16";
    case OPC_INT32: return "int32";
    case OPC_INT64: return "int64";
    case OPC_BOOL: return "bool";
    default: return "unknown-dtype";
    }
}

int64_t opc_numel(const opc_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

bool opc_same_shape(const opc_tensor *a, const opc_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *opc_dims_str(const int64_t *dims, int32_t rank, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    k += (size_t)snprintf(buf, len, "[");
    for (int32_t i = 0; i < rank && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}

const char *opc_shape_str(const opc_tensor *t, char *buf, size_t len) {
    return opc_dims_str(t->shape, t->rank, buf, len);
}

int32_t opc_check_dense(opc_call *c, const opc_tensor *t, const char *what, const char *name) {
    if (t->rank < 0 || t->rank > OPC_MAX_RANK)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has rank %d; at most %d is supported (and at least 0)",
                        what, name, (int)t->rank, OPC_MAX_RANK);
    if (t->rank > 0 && !t->shape)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has rank %d but a NULL shape", what,
                        name, (int)t->rank);
    if (opc_dtype_size(t->dtype) == 0)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s %s has unknown dtype code %d", what, name,
                        (int)t->dtype);
    int64_t n = 1;
    for (int32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has negative dimension %lld at axis %d",
                            what, name, (long long)t->shape[i], (int)i);
        if (!opc_mul_ok(n, t->shape[i], &n) || n > OPC_MAX_ELEMS)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s is too large (element count overflows)",
                            what, name);
    }
    return OPC_OK;
}

void opc_seq_output(opc_shape *out, int32_t dtype, int32_t input) {
    memset(out, 0, sizeof *out);
    out->dtype = dtype;
    out->rank = OPC_SEQUENCE;
    out->shape[0] = input;
}

int32_t opc_check_sequence(opc_call *c, const opc_tensor *t, const char *what, const char *name,
                           const opc_tensor *like) {
    const int32_t bad = like ? OPC_ERR_OUTPUT_MISMATCH : OPC_ERR_INVALID_ARGUMENT;
    if (!t->shape)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s is a sequence with a NULL shape (its element count)", what,
                        name);
    const int64_t n = t->shape[0];
    if (n < 0 || n > OPC_MAX_SEQUENCE)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s is a sequence of %lld elements; 0 to %lld are allowed",
                        what, name, (long long)n, (long long)OPC_MAX_SEQUENCE);
    if (opc_dtype_size(t->dtype) == 0)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s %s is a sequence of unknown dtype code %d", what, name,
                        (int)t->dtype);
    if (n > 0 && !t->data)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s is a sequence of %lld elements with NULL data", what, name,
                        (long long)n);
    if (like && n != like->shape[0])
        return opc_fail(c, bad, "%s %s must be a sequence of %lld elements (as the input it mirrors), got %lld", what,
                        name, (long long)like->shape[0], (long long)n);
    const opc_tensor *el = t->data;
    char ename[96], a[200], b[200];
    for (int64_t i = 0; i < n; i++) {
        const opc_tensor *x = &el[i];
        snprintf(ename, sizeof ename, "%s[%lld]", name, (long long)i);
        if (x->rank < 0)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has rank %d: a sequence's elements are tensors", what,
                            ename, (int)x->rank);
        int32_t s = opc_check_dense(c, x, what, ename);
        if (s) return s;
        if (x->dtype != t->dtype)
            return opc_fail(c, like ? OPC_ERR_OUTPUT_MISMATCH : OPC_ERR_UNSUPPORTED_DTYPE,
                            "%s %s has dtype %s; the sequence's elements are %s", what, ename,
                            opc_dtype_name(x->dtype), opc_dtype_name(t->dtype));
        if (!x->data && opc_numel(x) > 0)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has %lld elements and NULL data", what, ename,
                            (long long)opc_numel(x));
        if (like && !opc_same_shape(x, opc_seq_at(like, i)))
            return opc_fail(c, OPC_ERR_OUTPUT_MISMATCH, "%s %s must have shape %s, got %s", what, ename,
                            opc_shape_str(opc_seq_at(like, i), a, sizeof a), opc_shape_str(x, b, sizeof b));
    }
    return OPC_OK;
}

void opc_shape_from(opc_shape *s, const opc_tensor *t) {
    s->dtype = t->dtype;
    s->rank = t->rank;
    for (int32_t i = 0; i < t->rank; i++) s->shape[i] = t->shape[i];
}

int32_t opc_require(opc_call *c, int32_t i) {
    if (i >= c->n_inputs || !c->in[i])
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "required input %d (%s) is missing", i,
                        c->desc->input_names[i]);
    return OPC_OK;
}

int32_t opc_check_supported_dtype(opc_call *c, int32_t dt) {
    const opc_op_desc *d = c->desc;
    char names[160] = "";
    size_t p = 0;
    for (int32_t i = 0; i < d->n_dtypes + d->n_extra_dtypes; i++) {
        int32_t code = i < d->n_dtypes ? d->dtypes[i] : d->extra_dtypes[i - d->n_dtypes];
        if (code == dt) return OPC_OK;
        if (p < sizeof names)
            p += (size_t)snprintf(names + p, sizeof names - p, i ? ", %s" : "%s", opc_dtype_name(code));
    }
    return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "dtype %s is not supported (supported: %s)", opc_dtype_name(dt),
                    names);
}

/* Blocks of values tested branch-free (the loop vectorises); only a block with an offender is searched. */
#define OUTSIDE_BLOCK 4096

static bool block_outside(const void *data, int32_t dtype, int64_t i0, int64_t i1, int64_t lo, uint64_t span,
                          bool has_skip, int64_t skip) {
    unsigned bad = 0;
    if (dtype == OPC_INT64) {
        const int64_t *v = data;
        for (int64_t i = i0; i < i1; i++)
            bad |= ((uint64_t)v[i] - (uint64_t)lo >= span) & !(has_skip & (v[i] == skip));
    } else {
        const int32_t *v = data;
        for (int64_t i = i0; i < i1; i++)
            bad |= ((uint64_t)(int64_t)v[i] - (uint64_t)lo >= span) & !(has_skip & ((int64_t)v[i] == skip));
    }
    return bad != 0;
}

int64_t opc_first_outside(const void *data, int32_t dtype, int64_t count, int64_t lo, int64_t hi,
                          bool has_skip, int64_t skip, int32_t threads) {
    if (count <= 0) return -1;
    const uint64_t span = hi > lo ? (uint64_t)hi - (uint64_t)lo : 0; /* [lo, hi) empty: every value is outside */
    const int64_t blocks = (count + OUTSIDE_BLOCK - 1) / OUTSIDE_BLOCK;
    int64_t want = count / opc_grain(1 << 20) + 1; /* a thread per million values at most */
    int nt = (int)(want < threads ? want : threads);
    if (nt > blocks) nt = (int)blocks;
    int64_t first = blocks; /* the first block holding an offender */
#pragma omp parallel num_threads(nt > 1 ? nt : 1) reduction(min : first)
    {
        int64_t b0, b1;
        opc_split(blocks, omp_get_num_threads(), omp_get_thread_num(), 1, &b0, &b1);
        for (int64_t b = b0; b < b1; b++) {
            int64_t i1 = (b + 1) * OUTSIDE_BLOCK < count ? (b + 1) * OUTSIDE_BLOCK : count;
            if (block_outside(data, dtype, b * OUTSIDE_BLOCK, i1, lo, span, has_skip, skip)) {
                first = b;
                break;
            }
        }
    }
    if (first == blocks) return -1;
    int64_t end = (first + 1) * OUTSIDE_BLOCK < count ? (first + 1) * OUTSIDE_BLOCK : count;
    for (int64_t i = first * OUTSIDE_BLOCK; i < end; i++) {
        int64_t v = opc_int_at(data, dtype, i);
        if ((uint64_t)v - (uint64_t)lo >= span && !(has_skip && v == skip)) return i;
    }
    return -1; /* not reached: the block held one */
}

int32_t opc_check_dtypes(opc_call *c, int32_t dt, const int32_t *idx, int32_t n) {
    for (int32_t k = 0; k < n; k++) {
        int32_t i = idx[k];
        if (i < c->n_inputs && c->in[i] && c->in[i]->dtype != dt)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE,
                            "input %s has dtype %s but %s has %s: all float inputs must share one dtype",
                            c->desc->input_names[i], opc_dtype_name(c->in[i]->dtype),
                            c->desc->input_names[idx[0]], opc_dtype_name(dt));
    }
    return OPC_OK;
}

/* ---- attributes ---------------------------------------------------------------------------- */

static const char *kind_name(int32_t k) {
    switch (k) {
    case OPC_ATTR_INT: return "int";
    case OPC_ATTR_FLOAT: return "float";
    case OPC_ATTR_STRING: return "string";
    case OPC_ATTR_INTS: return "ints";
    case OPC_ATTR_FLOATS: return "floats";
    case OPC_ATTR_STRINGS: return "strings";
    default: return "unknown-kind";
    }
}

const opc_attr *opc_attr_get(const opc_call *c, const char *name) {
    for (int32_t i = 0; i < c->n_attrs; i++)
        if (strcmp(c->attrs[i].name, name) == 0) return &c->attrs[i];
    return NULL;
}

static int32_t wrong_kind(opc_call *c, const opc_attr *a, const char *want) {
    return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' must be of type %s, got %s",
                    a->name, want, kind_name(a->kind));
}

int32_t opc_attr_int(opc_call *c, const char *name, int64_t dflt, int64_t *out) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = dflt;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_INT) return wrong_kind(c, a, "int");
    *out = a->i;
    return OPC_OK;
}

int32_t opc_attr_float(opc_call *c, const char *name, double dflt, double *out, bool *given) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = dflt;
    if (given) *given = a != NULL;
    if (!a) return OPC_OK;
    if (a->kind == OPC_ATTR_FLOAT) *out = a->f;
    else if (a->kind == OPC_ATTR_INT) *out = (double)a->i;
    else return wrong_kind(c, a, "float");
    return OPC_OK;
}

int32_t opc_attr_ints(opc_call *c, const char *name, const int64_t **out, int64_t *n) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = NULL;
    *n = -1;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_INTS) return wrong_kind(c, a, "ints");
    *out = a->ints;
    *n = a->n;
    return OPC_OK;
}

int32_t opc_attr_floats(opc_call *c, const char *name, const double **out, int64_t *n) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = NULL;
    *n = -1;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_FLOATS) return wrong_kind(c, a, "floats");
    *out = a->floats;
    *n = a->n;
    return OPC_OK;
}

int32_t opc_attr_string(opc_call *c, const char *name, const char *dflt, const char **out) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = dflt;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_STRING) return wrong_kind(c, a, "string");
    *out = a->s;
    return OPC_OK;
}

int32_t opc_attr_strings(opc_call *c, const char *name, const char *const **out, int64_t *n) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = NULL;
    *n = -1;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_STRINGS) return wrong_kind(c, a, "strings");
    *out = a->strings;
    *n = a->n;
    return OPC_OK;
}

int32_t opc_force_split = 0;

int32_t opc_set_force_split(int32_t force) {
    int32_t previous = opc_force_split;
    opc_force_split = force != 0;
    return previous;
}

/* The last-level cache's size: an output larger than it cannot stay in cache for the next op anyway, so
 * writing it with non-temporal stores saves the read-for-ownership traffic; a smaller one is better left
 * in cache. glibc reads it from CPUID; some VMs report 0, then sysfs, then a typical 32 MiB. */
static int64_t last_level_cache_bytes(void) {
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v <= 0) {
        FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
        char unit = 0;
        if (f && fscanf(f, "%ld%c", &v, &unit) >= 1) v *= unit == 'M' ? 1 << 20 : unit == 'K' ? 1 << 10 : 1;
        if (f) fclose(f);
    }
    return v > 0 ? (int64_t)v : (int64_t)32 << 20;
}

static int64_t stream_override = -1; /* set by opc_set_stream_bytes; -1: the last-level cache's size */
static int64_t llc_bytes = 0;        /* measured once */

int64_t opc_stream_bytes(void) {
    int64_t forced = __atomic_load_n(&stream_override, __ATOMIC_RELAXED);
    if (forced >= 0) return forced;
    int64_t llc = __atomic_load_n(&llc_bytes, __ATOMIC_RELAXED);
    if (llc == 0) { /* a race only measures it twice, with the same result */
        llc = last_level_cache_bytes();
        __atomic_store_n(&llc_bytes, llc, __ATOMIC_RELAXED);
    }
    return llc;
}

int64_t opc_set_stream_bytes(int64_t bytes) {
    return __atomic_exchange_n(&stream_override, bytes < 0 ? -1 : bytes, __ATOMIC_RELAXED);
}

int32_t opc_read_shape_input(opc_call *c, int32_t which, bool allow_int32, const char *of, int64_t *dims,
                             int32_t *rank) {
    const opc_tensor *t = c->in[which];
    char a[200];
    if (t->dtype != OPC_INT64 && !(allow_int32 && t->dtype == OPC_INT32))
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "shape has dtype %s; %s needed", opc_dtype_name(t->dtype),
                        allow_int32 ? "int64 or int32" : "int64");
    if (t->rank != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape must be 1-D (the forward input's dims), got shape %s",
                        opc_shape_str(t, a, sizeof a));
    int64_t r = t->shape[0];
    if (r < 1 || r > OPC_MAX_RANK)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape holds %lld dims; the forward input needs 1 to %d",
                        (long long)r, OPC_MAX_RANK);
    if (!t->data) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape has no data: its values are %s", of);
    int64_t total = 1;
    for (int64_t i = 0; i < r; i++) {
        dims[i] = t->dtype == OPC_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
        if (dims[i] < 0)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape holds a negative dim (%lld at position %lld)",
                            (long long)dims[i], (long long)i);
        if (!opc_mul_ok(total, dims[i], &total) || total > OPC_MAX_ELEMS)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape %s has too many elements",
                            opc_dims_str(dims, (int32_t)r, a, sizeof a));
    }
    *rank = (int32_t)r;
    return OPC_OK;
}
