/*
 * soft_nms_gpu_tmpl.cuh — soft_nms's GPU kernels and their launcher (Note [Soft-NMS on a GPU] in
 * soft_nms_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h): the compute pass
 * (DK_T: float, or double for float64 boxes, as the CPU kernel computes) holds the procedure,
 * the float storage pass loads boxes and scores of any float dtype and strides and stores the
 * results.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* The live boxes, position p of each array (the CPU kernel's arrays), and a slot per box. */
struct DK_TFN(dk__snms_gpu_live) {
    DK_T *x1, *y1, *x2, *y2, *area, *sc;
    int64_t *ind, *slot;
};

__device__ DK_INLINE void DK_TFN(dk__snms_gpu_move)(const DK_TFN(dk__snms_gpu_live) &L, int64_t from, int64_t to)
{
    L.x1[to] = L.x1[from];
    L.y1[to] = L.y1[from];
    L.x2[to] = L.x2[from];
    L.y2[to] = L.y2[from];
    L.area[to] = L.area[from];
    L.sc[to] = L.sc[from];
    L.ind[to] = L.ind[from];
}

/* Exchanges the boxes at positions p and q. */
__device__ DK_INLINE void DK_TFN(dk__snms_gpu_swap)(const DK_TFN(dk__snms_gpu_live) &L, int64_t p, int64_t q)
{
    const DK_T x1 = L.x1[q], y1 = L.y1[q], x2 = L.x2[q], y2 = L.y2[q], area = L.area[q], sc = L.sc[q];
    const int64_t ind = L.ind[q];
    DK_TFN(dk__snms_gpu_move)(L, p, q);
    L.x1[p] = x1, L.y1[p] = y1, L.x2[p] = x2, L.y2[p] = y2, L.area[p] = area, L.sc[p] = sc, L.ind[p] = ind;
}

/* This thread's run [*lo, *hi) of positions [a, b) (the blocked arrangement). */
__device__ DK_INLINE void DK_TFN(dk__snms_gpu_run_of)(int64_t a, int64_t b, int64_t *lo, int64_t *hi)
{
    const int64_t T = (int64_t)blockDim.x, chunk = (b - a + T - 1) / T;
    const int64_t l = a + (int64_t)threadIdx.x * chunk;
    *lo = l < b ? l : b;
    *hi = l + chunk < b ? l + chunk : b;
}

/* Candidate (v2, p2) into the argmax (v, p) (p < 0: none yet): the larger score, the earlier
 * position on ties (-0 ties with +0, as the CPU's `top < sc[p]` has it). NaN never enters. */
__device__ DK_INLINE void DK_TFN(dk__snms_gpu_better)(DK_T *v, int64_t *p, DK_T v2, int64_t p2)
{
    if (p2 < 0 || v2 != v2) return;
    if (*p < 0 || *v < v2 || (!(v2 < *v) && p2 < *p)) *v = v2, *p = p2;
}

/* The position the CPU's scan selects among live positions [first, end) given every thread's
 * candidate: `first` itself when its score is NaN, else the best candidate; -1 when the range is
 * empty. Every thread calls it (barriers) and gets the answer. */
__device__ DK_INLINE int64_t DK_TFN(dk__snms_gpu_argmax)(DK_T v, int64_t p, DK_T *s_v, int64_t *s_p, const DK_T *sc,
                                                         int64_t first, int64_t end)
{
    /* "better" is a total order (score, then position; NaN never enters), so any tree gives the
     * CPU's answer: within each warp an xor butterfly of shuffles (Note [Warp shuffles]), then
     * every thread reduces the warps' results from shared memory itself. Two barriers, where a
     * tree in shared memory took one per level (10 at 512 threads). */
    const int t = (int)threadIdx.x, T = (int)blockDim.x, W = T < warpSize ? T : warpSize;
    for (int m = W / 2; m > 0; m >>= 1) {
        const DK_T v2 = DK_GPU_SHFL_XOR(v, m);
        const int64_t p2 = DK_GPU_SHFL_XOR(p, m);
        DK_TFN(dk__snms_gpu_better)(&v, &p, v2, p2);
    }
    if (t % W == 0) {
        s_v[t / W] = v;
        s_p[t / W] = p;
    }
    __syncthreads();
    for (int w = 0; w < T / W; w++) DK_TFN(dk__snms_gpu_better)(&v, &p, s_v[w], s_p[w]);
    const int64_t best = first >= end ? -1 : sc[first] != sc[first] ? first : p;
    __syncthreads(); /* s_v and s_p are written again by the next call */
    return best;
}

/* The exclusive prefix sum of every thread's c over the threads (Hillis-Steele, in s), and the
 * total. Every thread calls it. */
__device__ DK_INLINE int64_t DK_TFN(dk__snms_gpu_scan)(int64_t c, int64_t *s, int64_t *total)
{
    const int t = (int)threadIdx.x, T = (int)blockDim.x;
    s[t] = c;
    __syncthreads();
    for (int off = 1; off < T; off <<= 1) {
        const int64_t add = t >= off ? s[t - off] : 0;
        __syncthreads();
        s[t] += add;
        __syncthreads();
    }
    *total = s[T - 1];
    const int64_t before = s[t] - c;
    __syncthreads(); /* s is written again by the next call */
    return before;
}

/* The procedure (Note [Soft-NMS on a GPU]), one block of a power-of-two number of threads, on
 * the n0 boxes in L; the count of results into num[0]. */
__global__ void DK_TFN(dk__snms_gpu_kernel)(DK_TFN(dk__snms_gpu_live) L, int64_t n0, int method, DK_T off, DK_T thr,
                                            DK_T sigma, DK_T min_score, int64_t *__restrict__ num)
{
    __shared__ DK_T s_v[DK_SOFT_NMS_GPU_MAX_THREADS];
    __shared__ int64_t s_p[DK_SOFT_NMS_GPU_MAX_THREADS];
    __shared__ int64_t s_c[DK_SOFT_NMS_GPU_MAX_THREADS];
    int64_t n = n0, lo, hi;
    DK_T cv = 0;
    int64_t cp = -1;
    DK_TFN(dk__snms_gpu_run_of)(0, n, &lo, &hi);
    for (int64_t p = lo; p < hi; p++) DK_TFN(dk__snms_gpu_better)(&cv, &cp, L.sc[p], p);
    int64_t best = DK_TFN(dk__snms_gpu_argmax)(cv, cp, s_v, s_p, L.sc, 0, n);
    for (int64_t i = 0; i < n; i++) {
        /* 1. the selected box into position i */
        if (threadIdx.x == 0 && best != i) DK_TFN(dk__snms_gpu_swap)(L, i, best);
        __syncthreads();
        const DK_T bx1 = L.x1[i], by1 = L.y1[i], bx2 = L.x2[i], by2 = L.y2[i], barea = L.area[i];
        /* 2. decay, and count the survivors of this thread's run */
        DK_TFN(dk__snms_gpu_run_of)(i + 1, n, &lo, &hi);
        int64_t cnt = 0;
        for (int64_t p = lo; p < hi; p++) {
            const DK_T ovr = DK_TFN(dk_box_nms_overlap)(bx1, by1, bx2, by2, barea, L.x1[p], L.y1[p], L.x2[p], L.y2[p],
                                                        L.area[p], off);
            const DK_T s = L.sc[p] * DK_TFN(dk_box_soft_nms_weight)(ovr, method, thr, sigma);
            L.sc[p] = s;
            cnt += !(s < min_score);
        }
        /* 3. survivors before this run, and in all */
        int64_t total;
        int64_t S = DK_TFN(dk__snms_gpu_scan)(cnt, s_c, &total);
        const int64_t nn = i + 1 + total;
        /* 4. holes below nn take slots by rank; survivors below nn stay (argmax candidates) */
        cv = 0, cp = -1;
        const int64_t mid = hi < nn ? hi : nn > lo ? nn : lo;
        for (int64_t p = lo; p < mid; p++) {
            const DK_T s = L.sc[p];
            if (s < min_score) {
                L.slot[(p - i - 1) - S] = p; /* removed before p: (p - i - 1) - S */
            } else {
                DK_TFN(dk__snms_gpu_better)(&cv, &cp, s, p);
                S++;
            }
        }
        __syncthreads(); /* the slots are written */
        /* ... and survivors at or above nn move to them, the last first */
        for (int64_t p = mid; p < hi; p++) {
            const DK_T s = L.sc[p];
            if (s < min_score) continue;
            const int64_t dest = L.slot[total - S - 1]; /* survivors after p: total - S - 1 */
            S++;
            DK_TFN(dk__snms_gpu_move)(L, p, dest);
            DK_TFN(dk__snms_gpu_better)(&cv, &cp, s, dest);
        }
        /* 5. step i + 1's selection (its barriers also order the moves before step i + 1) */
        best = DK_TFN(dk__snms_gpu_argmax)(cv, cp, s_v, s_p, L.sc, i + 1, nn);
        n = nn;
    }
    if (threadIdx.x == 0) num[0] = n;
}

#elif DK_TMPL_PASS == DK_TMPL_FLOAT

/* The boxes and scores into the live arrays, in the compute type. */
__global__ void DK_SFN(dk__snms_gpu_load_kernel)(const DK_S *__restrict__ boxes, int64_t bs0, int64_t bs1,
                                                 const DK_S *__restrict__ scores, int64_t ss, int64_t n, DK_T off,
                                                 DK_TFN(dk__snms_gpu_live) L)
{
    for (int64_t i = DK_GPU_FIRST(); i < n; i += DK_GPU_STRIDE()) {
        const DK_S *r = boxes + i * bs0;
        L.x1[i] = DK_LOAD(r[0]);
        L.y1[i] = DK_LOAD(r[bs1]);
        L.x2[i] = DK_LOAD(r[2 * bs1]);
        L.y2[i] = DK_LOAD(r[3 * bs1]);
        L.area[i] = DK_TFN(dk_box_nms_area)(L.x1[i], L.y1[i], L.x2[i], L.y2[i], off);
        L.sc[i] = DK_LOAD(scores[i * ss]);
        L.ind[i] = i;
    }
}

/* dets[0:num] and inds[0:num] from the live arrays; num is read on the device. */
__global__ void DK_SFN(dk__snms_gpu_store_kernel)(DK_TFN(dk__snms_gpu_live) L, const int64_t *__restrict__ num,
                                                  DK_S *__restrict__ dets, int64_t ds0, int64_t ds1,
                                                  int64_t *__restrict__ inds, int64_t is0)
{
    const int64_t kept = num[0];
    for (int64_t k = DK_GPU_FIRST(); k < kept; k += DK_GPU_STRIDE()) {
        DK_S *r = dets + k * ds0;
        r[0] = DK_STORE(L.x1[k]);
        r[ds1] = DK_STORE(L.y1[k]);
        r[2 * ds1] = DK_STORE(L.x2[k]);
        r[3 * ds1] = DK_STORE(L.y2[k]);
        r[4 * ds1] = DK_STORE(L.sc[k]);
        inds[k * is0] = L.ind[k];
    }
}

static dk_status DK_SFN(dk__snms_gpu)(const dk__snms_gpu_args *a, const dk_tensor *boxes, const dk_tensor *scores,
                                      dk_tensor *dets, dk_tensor *inds, int64_t *numv, int threads, void *stream)
{
    const int64_t n = a->n; /* > 0, < 2^31 (ops/nms.c) */
    void *mem = NULL;
    /* 6 compute values, an index and a slot per box: (6 x 8 + 16) n bytes at most, no overflow */
    dk_status st = dk_device_alloc(boxes->device, (size_t)n * (6 * sizeof(DK_T) + 2 * sizeof(int64_t)), &mem);
    if (st) return st;
    DK_T *v = (DK_T *)mem;
    int64_t *iv = (int64_t *)(v + 6 * n);
    const DK_TFN(dk__snms_gpu_live) L = {v, v + n, v + 2 * n, v + 3 * n, v + 4 * n, v + 5 * n, iv, iv + n};
    const DK_T off = (DK_T)a->offset;
    DK_GPU_LAUNCH(DK_SFN(dk__snms_gpu_load_kernel), dk_gpu_blocks(n), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(boxes), dk_tensor_stride(boxes, 0), dk_tensor_stride(boxes, 1),
                  (const DK_S *)dk_tensor_data(scores), dk_tensor_stride(scores, 0), n, off, L);
    DK_GPU_LAUNCH(DK_TFN(dk__snms_gpu_kernel), 1, threads, stream, L, n, a->method, off, (DK_T)a->thr, (DK_T)a->sigma,
                  (DK_T)a->min_score, numv);
    DK_GPU_LAUNCH(DK_SFN(dk__snms_gpu_store_kernel), dk_gpu_blocks(n), DK_GPU_THREADS, stream, L, numv,
                  (DK_S *)dk_tensor_data(dets), dk_tensor_stride(dets, 0), dk_tensor_stride(dets, 1),
                  (int64_t *)dk_tensor_data(inds), dk_tensor_stride(inds, 0));
    st = dk__gpu_launched("soft_nms");
    dk_device_free(boxes->device, mem); /* stream-ordered: after the kernels above */
    return st;
}

#endif
