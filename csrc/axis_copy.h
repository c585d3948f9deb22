/* Copying whole rows of parts along one axis, shared by SplitTraining (one tensor cut into parts) and
 * ConcatTraining (parts joined into one tensor): the same loop run in either direction. The tensor viewed as
 * [outer, total, inner] holds part k at [:, start_k : start_k + size_k, :]; for each of the rows o before the
 * axis, part k's piece is one memcpy of size_k * inner elements. Any element size (float16 to int64): exact
 * copies, no arithmetic. Row by row, the parts in order (the whole tensor one front-to-back stream). Work is
 * split over the rows, each row's bytes written by one thread, so results are bitwise the same at any thread
 * count. */
#ifndef OPC_AXIS_COPY_H
#define OPC_AXIS_COPY_H

#include <omp.h>

#include "call.h"

#define OPC_AXIS_PARTS 4 /* the most parts the specs state (inputs or outputs of the variadic op) */

typedef struct {
    size_t es;                  /* element size in bytes */
    int32_t parts;              /* how many parts (1..OPC_AXIS_PARTS) */
    int64_t outer, total, inner; /* rows before the axis, the axis' length, elements after it */
    int64_t size[OPC_AXIS_PARTS], start[OPC_AXIS_PARTS];
} opc_axis_plan;

/* Rows [lo, hi): to_parts copies the tensor's pieces into the parts (split), else the parts into the tensor
 * (concat). A NULL part (an output not wanted) or an empty one is skipped. */
static inline void opc_axis_copy_rows(const opc_axis_plan *p, char *whole, char *const parts[], bool to_parts,
                                      int64_t lo, int64_t hi) {
    size_t row = (size_t)(p->total * p->inner) * p->es;
    size_t bytes[OPC_AXIS_PARTS], at[OPC_AXIS_PARTS];
    for (int32_t k = 0; k < p->parts; k++) {
        bytes[k] = parts[k] ? (size_t)(p->size[k] * p->inner) * p->es : 0;
        at[k] = (size_t)(p->start[k] * p->inner) * p->es;
    }
    /* row by row, the parts in order: the whole tensor is read (split) or written (concat) front to back, one
     * stream, rather than once per part at a stride */
    for (int64_t o = lo; o < hi; o++) {
        char *w = whole + (size_t)o * row;
        for (int32_t k = 0; k < p->parts; k++) {
            if (bytes[k] == 0) continue;
            if (to_parts)
                memcpy(parts[k] + (size_t)o * bytes[k], w + at[k], bytes[k]);
            else
                memcpy(w + at[k], parts[k] + (size_t)o * bytes[k], bytes[k]);
        }
    }
}

/* Every row, on up to `threads` threads: one per ~256 KiB (below that, thread start-up costs more than it
 * saves; opc_grain forces the split for thread-invariance checks). */
static inline void opc_axis_copy(const opc_axis_plan *p, char *whole, char *const parts[], bool to_parts,
                                 int32_t threads) {
    if (!whole || p->outer == 0 || p->total == 0 || p->inner == 0) return;
    int64_t bytes = p->outer * p->total * p->inner * (int64_t)p->es;
    int64_t want = bytes / opc_grain(262144) + 1;
    if (want > p->outer) want = p->outer;
    int nt = (int)(want < threads ? want : threads);
    if (nt <= 1) {
        opc_axis_copy_rows(p, whole, parts, to_parts, 0, p->outer);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(p->outer, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        opc_axis_copy_rows(p, whole, parts, to_parts, lo, hi);
    }
}

/* outer and inner of a tensor's shape around axis ax (numel checked by the dispatcher) */
static inline void opc_axis_rows(opc_axis_plan *p, const opc_tensor *t, int32_t ax) {
    p->outer = 1;
    p->inner = 1;
    for (int32_t i = 0; i < ax; i++) p->outer *= t->shape[i];
    for (int32_t i = ax + 1; i < t->rank; i++) p->inner *= t->shape[i];
}

#endif
