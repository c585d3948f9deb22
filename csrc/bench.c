/* The machine's memory-bandwidth limit as our own OpenMP code reaches it: a STREAM-style triad
 * a = b + s * c (two reads, one write per element), split across threads the way the elementwise
 * kernels split their work, so `opconform bench` can state each kernel's GB/s as a fraction of it. */
#include <omp.h>

#include "call.h"

void opc_triad_f32(float *a, const float *b, const float *c, float s, int64_t n, int32_t threads) {
    if (!a || !b || !c || n <= 0) return;
    int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(n, omp_get_num_threads(), omp_get_thread_num(), 16, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
    }
}
