/*
 * roi_align/roi_align_drivers_tmpl.h — the plane loops: their sizes and scratch, the forward and
 * backward workers of average and max pooling, and the drivers that run them.
 * A template (Note [Templates in C] in kernels/dk_template.h), instantiated by roi_align_cpu.c
 * for its float storage types; its short names (T, S, V4, AXIS, ...) are roi_align_names_tmpl.h's.
 *
 * Each driver builds what its workers share (geometry, groups, tables), carves the per-thread
 * scratch from the call's arena, and runs one parallel loop (Note [Serial calls] in
 * dk_parallel.h) whose iterations are independent (Note [Deterministic backward]).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT
#include "roi_align/roi_align_names_tmpl.h"

/* Pairs per iteration: 1 when columns are unit-stride (NCHW); when channels are the minor
 * dimension (channels-last), as many as one cache line of channels holds, so the copies in and
 * out use whole lines (Note [Channel pairs]), within 16 MB of buffers per thread. */
static int64_t DK_SFN(dk__ra_group)(const dk__ra_shape *sh)
{
    if (sh->in_s[3] == 1 || sh->in_s[1] >= sh->in_s[3]) return 1;
    const int64_t per_pair = 2 * sh->H * sh->W * (int64_t)sizeof(T);
    int64_t g = 64 / (2 * (int64_t)sizeof(S));
    while (g > 1 && g * per_pair > ((int64_t)16 << 20)) g /= 2;
    const int64_t cp = (sh->C + 1) / 2;
    return g < cp ? g : cp;
}

/* Sizes of the average-pooling plane loop (Note [Channel pairs]): G pairs per iteration, NG
 * iterations per image; a thread's scratch is its RoI scratch, then G pair buffers. */
typedef struct {
    int64_t CP, G, NG;
    size_t roi_scratch, pair_buf, stage, per_thread; /* in elements of T */
} DK_SFN(dk__ra_avg_plan);

static DK_SFN(dk__ra_avg_plan)
    DK_SFN(dk__ra_avg_plan_of)(const dk__ra_shape *sh, const dk_groups *gr, const TABLES *tb, size_t stage_bytes)
{
    DK_SFN(dk__ra_avg_plan) pl;
    pl.CP = (sh->C + 1) / 2;
    pl.G = DK_SFN(dk__ra_group)(sh);
    pl.NG = (pl.CP + pl.G - 1) / pl.G;
    pl.roi_scratch = DK_TFN(dk__ra_roi_scratch)(tb, sh);
    pl.pair_buf = dk_round8((size_t)(2 * sh->H * sh->W)); /* bounded by dk__ra_shape_init */
    pl.stage = 0;
    if (stage_bytes) {    /* whole iterations' results (Note [Faulting in the shadow]) */
        int64_t most = 0; /* RoIs of the busiest image */
        for (int64_t n = 0; n < sh->N; ++n)
            most = gr->beg[n + 1] - gr->beg[n] > most ? gr->beg[n + 1] - gr->beg[n] : most;
        const size_t one = dk_sat_mul(dk_sat_mul((size_t)(pl.G * most), 2),
                                      (size_t)(sh->PH * sh->PW)); /* one iteration */
        const size_t room = stage_bytes / sizeof(T);
        pl.stage = one > 0 && one <= room ? room / one * one : 0;
    }
    /* Every part a multiple of 8 elements, the stage too (a whole number of iterations, which
     * need not be one): the next thread's scratch then starts aligned for V4, whose loads and
     * stores the compiler may emit as aligned ones. (An unrounded stage of 44 iterations of 481
     * RoIs at 7x7 put thread 1's vectors 8 bytes off: SIGSEGV on the first aligned store.) */
    pl.per_thread = dk_sat_add(dk_sat_add(pl.roi_scratch, dk_sat_mul((size_t)pl.G, pl.pair_buf)), dk_round8(pl.stage));
    return pl;
}

/* Thread tid's part of the scratch of an average-pooling plane loop: its RoI scratch (into sc)
 * and, returned, its G pair buffers (then the stage, if any). */
static T *DK_SFN(dk__ra_avg_scratch)(const dk__ra_job *jb, const DK_SFN(dk__ra_avg_plan) *pl, int tid, SCRATCH *sc)
{
    T *base = (T *)(void *)(jb->scratch + (size_t)tid * pl->per_thread * sizeof(T));
    *sc = DK_TFN(dk__ra_scratch_at)((const TABLES *)jb->tb, jb->cx->sh, base);
    return base + pl->roi_scratch;
}

/* Iteration `it` of the plane loop: image n, channel pairs [q0, q0 + nq), the image's RoIs
 * order[j0 .. j1). */
static inline dk__ra_it DK_SFN(dk__ra_it_of)(const DK_SFN(dk__ra_avg_plan) *pl, const dk_groups *gr, int64_t it)
{
    dk__ra_it p;
    p.n = it / pl->NG;
    p.q0 = (it % pl->NG) * pl->G;
    p.nq = pl->CP - p.q0 < pl->G ? pl->CP - p.q0 : pl->G;
    p.j0 = gr->beg[p.n];
    p.j1 = gr->beg[p.n + 1];
    return p;
}

/* Writes the results of the `count` staged iterations its[] (Note [Faulting in the shadow]),
 * laid out as the forward worker staged them, to the output. */
static void DK_SFN(dk__ra_unstage)(dk__ra_job *jb, const DK_SFN(dk__ra_avg_plan) *pl, const T *stage,
                                   const int64_t *its, int count)
{
    const dk__ra_shape *sh = jb->cx->sh;
    const dk_groups *gr = jb->cx->gr;
    const int64_t *os = sh->out_s, PH = sh->PH, PW = sh->PW, C = sh->C;
    S *out = (S *)jb->dst;
    for (int i = 0; i < count; ++i) {
        const dk__ra_it p = DK_SFN(dk__ra_it_of)(pl, gr, its[i]);
        for (int64_t q = 0; q < p.nq; ++q) {
            const int64_t c = 2 * (p.q0 + q), two = c + 1 < C;
            for (int64_t j = p.j0; j < p.j1; ++j) {
                S *o = out + gr->order[j] * os[0] + c * os[1];
                DK_SFN(dk__ra_store_bins)(o, two ? o + os[1] : NULL, os, stage, PH, PW);
                stage += 2 * PH * PW;
            }
        }
    }
}

/* Forward, average pooling, any layout (Note [Channel pairs]): thread `tid`'s share of the
 * plane loop (Note [Serial calls]). */
static void DK_SFN(dk__ra_forward_avg_worker)(void *job, int tid)
{
    dk__ra_job *jb = (dk__ra_job *)job;
    const dk__ra_shape *sh = jb->cx->sh;
    const dk_groups *gr = jb->cx->gr;
    const TABLES *tb = (const TABLES *)jb->tb;
    const AXIS *ay = (const AXIS *)jb->ay, *ax = (const AXIS *)jb->ax;
    const S *in = (const S *)jb->src;
    S *out = (S *)jb->dst;
    const int64_t W = sh->W, PH = sh->PH, PW = sh->PW, C = sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    const DK_SFN(dk__ra_avg_plan) pl = *(const DK_SFN(dk__ra_avg_plan) *)jb->plan;
    const bool blocks = os[3] == 1 && os[2] == PW; /* one (k, c) output is one block */
    SCRATCH sc;
    T *buf = DK_SFN(dk__ra_avg_scratch)(jb, &pl, tid, &sc);
    const int64_t total = sh->N * pl.NG;
    /* Note [Read-ahead]: bands are one range per channel for whole-row NCHW inputs. */
    const bool ahead = pl.G == 1 && is[3] == 1 && is[2] == W && is[1] >= W;
    /* Note [Faulting in the shadow]: thread 0 faults the output in, the others stage. */
    if (pl.stage && tid == 0) {
        dk_large_output_populate(&jb->cx->out);
    }
    T *const stage = pl.stage && tid != 0 ? buf + (size_t)pl.G * pl.pair_buf : NULL;
    int64_t *const its = stage ? jb->staged_its + (size_t)tid * DK__RA_STAGE_ITS : NULL;
    size_t staged = 0; /* elements of stage in use */
    int nits = 0;
    for (int64_t it = dk_parallel_claim(&jb->counter), nx; it < total; it = nx) {
        nx = dk_parallel_claim(&jb->counter);
        const dk__ra_it p = DK_SFN(dk__ra_it_of)(&pl, gr, it);
        if (p.j0 == p.j1) continue;
        const size_t need = (size_t)(p.nq * (p.j1 - p.j0) * 2 * PH * PW);
        T *st = NULL; /* where this iteration's results go, if staged */
        if (stage) {
            const bool filled = dk_large_output_filled(&jb->cx->out);
            if (nits && (filled || staged + need > pl.stage || nits == DK__RA_STAGE_ITS)) {
                DK_SFN(dk__ra_unstage)(jb, &pl, stage, its, nits);
                staged = 0;
                nits = 0;
            }
            if (!filled && staged + need <= pl.stage) {
                st = stage + staged;
                staged += need;
                its[nits++] = it;
            }
        }
        /* Note [RoIs in row order]: one pair's band is copied as its RoIs come to need it
         * (rows [rlo, next) so far); several pairs' bands at once, whole. */
        const S *img = in + p.n * is[0];
        const int64_t rlo = tb->rlo[p.n];
        int64_t next = p.nq == 1 ? rlo : tb->rhi[p.n] + 1;
        bool finite = p.nq == 1 ||
                      DK_SFN(dk__ra_pairs_in)(buf, pl.pair_buf, img, is, 2 * p.q0, p.nq, C, rlo, rlo, tb->rhi[p.n], W);
        dk_readahead ra;
        dk_readahead_none(&ra);
        if (ahead && nx < total) {
            const dk__ra_it p2 = DK_SFN(dk__ra_it_of)(&pl, gr, nx); /* G == 1: one pair */
            if (p2.j0 != p2.j1) {
                const int64_t c2 = 2 * p2.q0, r0 = tb->rlo[p2.n];
                const S *band = in + p2.n * is[0] + c2 * is[1] + r0 * is[2];
                const size_t bytes = (size_t)((tb->rhi[p2.n] - r0 + 1) * W) * sizeof(S);
                dk_readahead_init(&ra, band, c2 + 1 < C ? band + is[1] : NULL, bytes, p.nq * (p.j1 - p.j0));
            }
        }
        for (int64_t q = 0; q < p.nq; ++q) {
            const int64_t c = 2 * (p.q0 + q), two = c + 1 < C;
            for (int64_t j = p.j0; j < p.j1; ++j) {
                const int64_t k = gr->order[j];
                if (blocks && !st && j + 2 < p.j1) /* the store misses otherwise stall the loop */
                    dk_prefetch_write(out + gr->order[j + 2] * os[0] + c * os[1],
                                      (size_t)((1 + two) * PH * PW) * sizeof(S));
                if (tb->yhi[j] >= next) { /* only for one pair: then q == 0 */
                    finite &= DK_SFN(dk__ra_pairs_in)(buf, pl.pair_buf, img, is, c, 1, C, rlo, next, tb->yhi[j], W);
                    next = tb->yhi[j] + 1;
                }
                /* Note [Non-finite values]: every row this RoI reads is copied, so `finite`
                 * covers them (and maybe more). */
                if (finite) DK_TFN(dk__ra_forward_roi)(tb, j, PH, PW, W, buf + (size_t)q * pl.pair_buf, rlo, &sc);
                else DK_SFN(dk__ra_forward_roi_exact)(sh, img, c, two, &ay[j], &ax[j], sc.acc);
                if (st) {
                    memcpy(st, sc.acc, (size_t)(2 * PH * PW) * sizeof(T));
                    st += 2 * PH * PW;
                } else {
                    S *o = out + k * os[0] + c * os[1];
                    DK_SFN(dk__ra_store_bins)(o, two ? o + os[1] : NULL, os, sc.acc, PH, PW);
                }
                dk_readahead_step(&ra);
            }
        }
    }
    if (nits) DK_SFN(dk__ra_unstage)(jb, &pl, stage, its, nits);
}

/* Backward, average pooling, any layout (Notes [Channel pairs], [Deterministic backward]). */
static void DK_SFN(dk__ra_backward_avg_worker)(void *job, int tid)
{
    dk__ra_job *jb = (dk__ra_job *)job;
    const dk__ra_shape *sh = jb->cx->sh;
    const dk_groups *gr = jb->cx->gr;
    const TABLES *tb = (const TABLES *)jb->tb;
    const AXIS *ay = (const AXIS *)jb->ay, *ax = (const AXIS *)jb->ax;
    const S *gout = (const S *)jb->src;
    S *gin = (S *)jb->dst;
    const int64_t H = sh->H, W = sh->W, PH = sh->PH, PW = sh->PW, C = sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    const DK_SFN(dk__ra_avg_plan) pl = *(const DK_SFN(dk__ra_avg_plan) *)jb->plan;
    const bool blocks = os[3] == 1 && os[2] == PW;
    SCRATCH sc;
    T *buf = DK_SFN(dk__ra_avg_scratch)(jb, &pl, tid, &sc);
    for (int64_t it; (it = dk_parallel_claim(&jb->counter)) < sh->N * pl.NG;) {
        const dk__ra_it p = DK_SFN(dk__ra_it_of)(&pl, gr, it);
        for (int64_t q = 0; q < p.nq; ++q) {
            const int64_t c = 2 * (p.q0 + q), two = c + 1 < C;
            T *qbuf = buf + (size_t)q * pl.pair_buf;
            memset(qbuf, 0, (size_t)(2 * H * W) * sizeof(T));
            for (int64_t j = p.j0; j < p.j1; ++j) {
                const int64_t k = gr->order[j];
                if (blocks && j + 2 < p.j1)
                    dk_prefetch_read(gout + gr->order[j + 2] * os[0] + c * os[1],
                                     (size_t)((1 + two) * PH * PW) * sizeof(S));
                const S *g = gout + k * os[0] + c * os[1];
                if (DK_SFN(dk__ra_load_bins)(sc.acc, g, g + two * os[1], os, PH, PW))
                    DK_TFN(dk__ra_backward_roi)(tb, j, PH, PW, W, qbuf, &sc);
                else /* Note [Non-finite values] */
                    DK_TFN(dk__ra_backward_roi_exact)(&ay[j], &ax[j], PH, PW, H, W, qbuf, &sc);
            }
        }
        DK_SFN(dk__ra_pairs_out)(gin + p.n * is[0], is, 2 * p.q0, p.nq, C, buf, pl.pair_buf, H, W, jb->cx->stream);
    }
    if (jb->cx->stream) dk_sfence();
}

/* Runs an average-pooling worker over the plane loop, with its scratch from the arena. */
static dk_status DK_SFN(dk__ra_avg)(dk__ra_ctx *cx, const TABLES *tb, const AXIS *ay, const AXIS *ax, const S *src,
                                    S *dst, void (*worker)(void *, int))
{
    /* a stage per thread but the one faulting in: no more in all than the output itself */
    size_t stage_bytes = 0;
    if (cx->out.fill && cx->nthreads > 1 && !cx->sh->backward) {
        const size_t most = (size_t)dk_large_output_stage_bytes();
        stage_bytes = cx->out.fill_bytes / (size_t)(cx->nthreads - 1);
        stage_bytes = stage_bytes < most ? stage_bytes : most;
    }
    const DK_SFN(dk__ra_avg_plan) pl = DK_SFN(dk__ra_avg_plan_of)(cx->sh, cx->gr, tb, stage_bytes);
    dk__ra_job jb = {.cx = cx, .tb = tb, .plan = &pl, .ay = ay, .ax = ax, .src = src, .dst = dst};
    jb.scratch = (char *)dk_arena_take_n(cx->ar, dk_sat_mul((size_t)cx->nthreads, pl.per_thread), sizeof(T));
    if (pl.stage)
        jb.staged_its = (int64_t *)dk_arena_take_n(cx->ar, (size_t)cx->nthreads * DK__RA_STAGE_ITS,
                                                   sizeof *jb.staged_its);
    if (!jb.scratch || (pl.stage && !jb.staged_its))
        return dk_error(DK_ENOMEM, "%s: out of memory for scratch",
                        cx->sh->backward ? "roi_align_backward" : "roi_align_forward");
    dk_parallel_run(cx->nthreads, &jb.counter, worker, &jb);
    return DK_OK;
}

/* Samples per RoI beyond which max pooling evaluates per element instead of from tables. */
#define DK__RA_MAX_SAMPLE_TABLE (1 << 20)

/* Bytes of one thread's sample tables in forward max pooling (dk__ra_forward_max_worker). */
static size_t DK_SFN(dk__ra_max_tab_bytes)(const dk__ra_shape *sh, const AXIS *ay, const AXIS *ax)
{
    int64_t most = 1;
    for (int64_t k = 0; k < sh->K; ++k) {
        /* below 2^63: PH, PW and an explicit grid are below 2^31 (ops/roi_align.c), and an
         * adaptive grid times PH (PW) is at most about 4 (H + 1) (kernels/roi_align.h) */
        const int64_t n = sh->PH * ay[k].grid + sh->PW * ax[k].grid;
        if (n <= DK__RA_MAX_SAMPLE_TABLE && n > most) most = n;
    }
    return dk_round8((size_t)most * sizeof(SAMPLE));
}

/* Forward, max pooling: per element; planes outside for cache reuse, each plane copied as T
 * into a per-thread buffer (as in Note [Channel pairs], one channel) and each RoI's samples
 * tabulated per plane; per element from the shared math for absurd sampling ratios. */
static void DK_SFN(dk__ra_forward_max_worker)(void *job, int tid)
{
    dk__ra_job *jb = (dk__ra_job *)job;
    const dk__ra_shape *sh = jb->cx->sh;
    const dk_groups *gr = jb->cx->gr;
    const AXIS *ay = (const AXIS *)jb->ay, *ax = (const AXIS *)jb->ax;
    const S *in = (const S *)jb->src;
    S *out = (S *)jb->dst;
    T *amy = (T *)jb->amy, *amx = (T *)jb->amx;
    const int64_t *is = sh->in_s, *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
    const int64_t H = sh->H, W = sh->W, PH = sh->PH, PW = sh->PW;
    char *base = jb->scratch + (size_t)tid * jb->per_thread;
    SAMPLE *ysm = (SAMPLE *)(void *)base;
    T *buf = (T *)(void *)(base + DK_SFN(dk__ra_max_tab_bytes)(sh, ay, ax));
    for (int64_t nc; (nc = dk_parallel_claim(&jb->counter)) < sh->N * sh->C;) {
        const int64_t n = nc / sh->C, c = nc % sh->C;
        const int64_t j0 = gr->beg[n], j1 = gr->beg[n + 1];
        if (j0 == j1) continue;
        const S *plane = in + n * is[0] + c * is[1];
        for (int64_t r = 0; r < H; ++r)
            for (int64_t x = 0; x < W; ++x) buf[r * W + x] = LOAD(plane + r * is[2] + x * is[3]);
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t k = gr->order[j];
            const int64_t gh = ay[j].grid, gw = ax[j].grid;
            const bool tab = PH * gh + PW * gw <= DK__RA_MAX_SAMPLE_TABLE;
            SAMPLE *xsm = ysm + PH * gh;
            if (tab) {
                DK_TFN(dk__ra_axis_samples)(ysm, &ay[j], PH, H);
                DK_TFN(dk__ra_axis_samples)(xsm, &ax[j], PW, W);
            }
            for (int64_t ph = 0; ph < PH; ++ph)
                for (int64_t pw = 0; pw < PW; ++pw) {
                    T my, mx;
                    const T v = tab ? DK_TFN(dk__ra_max_bin)(buf, W, ysm + ph * gh, gh, xsm + pw * gw, gw, &my, &mx)
                                    : DK_TFN(dk_roi_align_forward_max)(buf, W, 1, H, W, &ay[j], &ax[j], ph, pw, &my,
                                                                       &mx);
                    STORE(out + k * os[0] + c * os[1] + ph * os[2] + pw * os[3], v);
                    amy[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = my;
                    amx[k * xs[0] + c * xs[1] + ph * xs[2] + pw * xs[3]] = mx;
                }
        }
    }
}

static dk_status DK_SFN(dk__ra_forward_max)(dk__ra_ctx *cx, const AXIS *ay, const AXIS *ax, const S *in, S *out, T *amy,
                                            T *amx)
{
    const dk__ra_shape *sh = cx->sh;
    dk__ra_job jb = {.cx = cx, .ay = ay, .ax = ax, .src = in, .dst = out, .amy = amy, .amx = amx};
    jb.per_thread = dk_sat_add(DK_SFN(dk__ra_max_tab_bytes)(sh, ay, ax),
                               dk_round8((size_t)(sh->H * sh->W) * sizeof(T)));
    jb.scratch = (char *)dk_arena_take_n(cx->ar, (size_t)cx->nthreads, jb.per_thread);
    if (!jb.scratch) return dk_error(DK_ENOMEM, "roi_align_forward: out of memory for scratch");
    dk_parallel_run(cx->nthreads, &jb.counter, DK_SFN(dk__ra_forward_max_worker), &jb);
    return DK_OK;
}

/* Backward, max pooling: the gradient goes bilinearly to each bin's argmax sample. Each plane
 * is owned by one iteration (Note [Deterministic backward]). */
static void DK_SFN(dk__ra_backward_max_worker)(void *job, int tid)
{
    dk__ra_job *jb = (dk__ra_job *)job;
    const dk__ra_shape *sh = jb->cx->sh;
    const dk_groups *gr = jb->cx->gr;
    const S *gout = (const S *)jb->src;
    S *gin = (S *)jb->dst;
    const T *amy = (const T *)jb->amy_in, *amx = (const T *)jb->amx_in;
    const int64_t H = sh->H, W = sh->W;
    const int64_t *is = sh->in_s, *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
    T *buf = (T *)(void *)(jb->scratch + (size_t)tid * jb->per_thread);
    for (int64_t nc; (nc = dk_parallel_claim(&jb->counter)) < sh->N * sh->C;) {
        const int64_t n = nc / sh->C, c = nc % sh->C;
        memset(buf, 0, (size_t)(H * W) * sizeof(T));
        for (int64_t j = gr->beg[n]; j < gr->beg[n + 1]; ++j) {
            const int64_t k = gr->order[j];
            for (int64_t ph = 0; ph < sh->PH; ++ph)
                for (int64_t pw = 0; pw < sh->PW; ++pw) {
                    const T y = amy[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]];
                    const T x = amx[k * xs[0] + c * xs[1] + ph * xs[2] + pw * xs[3]];
                    DK_TFN(dk_roi_align_bilinear) b;
                    if (y == (T)-1 || !DK_TFN(dk_roi_align_bilinear_init)(y, x, H, W, &b)) continue;
                    const T gv = LOAD(gout + k * os[0] + c * os[1] + ph * os[2] + pw * os[3]);
                    buf[b.y_low * W + b.x_low] += gv * b.w1;
                    buf[b.y_low * W + b.x_high] += gv * b.w2;
                    buf[b.y_high * W + b.x_low] += gv * b.w3;
                    buf[b.y_high * W + b.x_high] += gv * b.w4;
                }
        }
        S *dst = gin + n * is[0] + c * is[1];
        for (int64_t r = 0; r < H; ++r)
            for (int64_t x = 0; x < W; ++x) STORE(dst + r * is[2] + x * is[3], buf[r * W + x]);
    }
}

static dk_status DK_SFN(dk__ra_backward_max)(dk__ra_ctx *cx, const S *gout, const T *amy, const T *amx, S *gin)
{
    const dk__ra_shape *sh = cx->sh;
    dk__ra_job jb = {.cx = cx, .src = gout, .dst = gin, .amy_in = amy, .amx_in = amx};
    jb.per_thread = dk_round8((size_t)(sh->H * sh->W) * sizeof(T));
    jb.scratch = (char *)dk_arena_take_n(cx->ar, (size_t)cx->nthreads, jb.per_thread);
    if (!jb.scratch) return dk_error(DK_ENOMEM, "roi_align_backward: out of memory for scratch");
    dk_parallel_run(cx->nthreads, &jb.counter, DK_SFN(dk__ra_backward_max_worker), &jb);
    return DK_OK;
}

/* Outputs of RoIs whose batch index is unusable: 0, argmax -1 (see dk__ra_read_rois). */
static void DK_SFN(dk__ra_forward_orphans)(dk__ra_ctx *cx, S *out, T *amy, T *amx)
{
    const dk__ra_shape *sh = cx->sh;
    const int64_t *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
    for (int64_t j = 0; j < cx->gr->norphans; ++j) {
        const int64_t k = cx->gr->orphans[j];
        for (int64_t c = 0; c < sh->C; ++c)
            for (int64_t ph = 0; ph < sh->PH; ++ph)
                for (int64_t pw = 0; pw < sh->PW; ++pw) {
                    STORE(out + k * os[0] + c * os[1] + ph * os[2] + pw * os[3], (T)0);
                    if (amy) {
                        amy[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = (T)-1;
                        amx[k * xs[0] + c * xs[1] + ph * xs[2] + pw * xs[3]] = (T)-1;
                    }
                }
    }
}

/* RoI geometry and groups, in the arena. */
static dk_status DK_SFN(dk__ra_prepare)(dk__ra_ctx *cx, const dk_tensor *rois, AXIS **ay, AXIS **ax)
{
    const size_t K = (size_t)cx->sh->K;
    *ay = (AXIS *)dk_arena_take_n(cx->ar, K, sizeof **ay);
    *ax = (AXIS *)dk_arena_take_n(cx->ar, K, sizeof **ax);
    int64_t *batch = (int64_t *)dk_arena_take_n(cx->ar, K, sizeof *batch);
    if (!*ay || !*ax || !batch) return dk_error(DK_ENOMEM, "roi_align: out of memory");
    DK_SFN(dk__ra_read_rois)(rois, cx->sh, batch, *ay, *ax);
    dk_status st = dk_groups_build(cx->gr, cx->ar, batch, cx->sh->K, cx->sh->N);
    if (st != DK_OK) return st;
    /* Note [RoIs in row order]: within each image, by the row where the RoI ends. */
    const int64_t n = (int64_t)K - cx->gr->norphans;
    const double last = (double)UINT32_MAX;
    uint64_t *key = (uint64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *key);
    if (!key) return dk_error(DK_ENOMEM, "roi_align: out of memory");
    /* key = (the group's ordinal, the row): order[] is grouped already, so a group starts where
     * the batch index changes, and the ordinal keeps the groups where they are. More than 2^32
     * groups cannot be keyed (nor allocated: that many RoIs exhaust the arena first); they would
     * keep index order. */
    uint64_t g = 0;
    for (int64_t j = 0; j < n && g <= UINT32_MAX; ++j) {
        const int64_t k = cx->gr->order[j];
        if (j > 0 && batch[k] != batch[cx->gr->order[j - 1]]) ++g;
        const AXIS *a = &(*ay)[k];
        const double y0 = (double)a->start, y1 = y0 + (double)a->bin * (double)cx->sh->PH;
        const double end = y1 > y0 ? y1 : y0; /* where the RoI's rows end (bin may be < 0) */
        /* NaN sorts last; rows are clamped to [0, 2^32). */
        const uint64_t row = !(end < last) ? UINT32_MAX : end < 0 ? 0 : (uint64_t)end;
        key[j] = g << 32 | row;
    }
    if (g <= UINT32_MAX) st = dk_argsort_u64(cx->gr->order, key, n, cx->ar);
    if (st != DK_OK) return st;
    /* Geometry (and the tables built from it) by slot: slot j is RoI order[j], the orphans after
     * them, so that the RoIs' tables lie in the order they are evaluated in. */
    AXIS *sy = (AXIS *)dk_arena_take_n(cx->ar, K, sizeof *sy);
    AXIS *sx = (AXIS *)dk_arena_take_n(cx->ar, K, sizeof *sx);
    if (!sy || !sx) return dk_error(DK_ENOMEM, "roi_align: out of memory");
    for (int64_t j = 0; j < (int64_t)K; ++j) {
        const int64_t k = j < n ? cx->gr->order[j] : cx->gr->orphans[j - n];
        sy[j] = (*ay)[k];
        sx[j] = (*ax)[k];
    }
    *ay = sy;
    *ax = sx;
    return DK_OK;
}

static dk_status DK_SFN(dk__ra_forward)(dk__ra_ctx *cx, const dk_tensor *input, const dk_tensor *rois,
                                        dk_tensor *output, dk_tensor *argmax_y, dk_tensor *argmax_x)
{
    AXIS *ay, *ax;
    dk_status st = DK_SFN(dk__ra_prepare)(cx, rois, &ay, &ax);
    if (st != DK_OK) return st;
    const S *in = (const S *)dk_tensor_data(input);
    S *out = (S *)dk_tensor_data(output);
    T *amy = argmax_y ? (T *)dk_tensor_data(argmax_y) : NULL;
    T *amx = argmax_x ? (T *)dk_tensor_data(argmax_x) : NULL;
    const dk__ra_shape *sh = cx->sh;
    const int64_t bins[4] = {sh->K, sh->C, sh->PH, sh->PW};
    dk_large_output_prepare(&cx->out, out, 4, bins, sh->out_s, sizeof(S), true);
    dk_large_output argmax; /* hinted only: written by one thread per plane */
    if (amy) dk_large_output_prepare(&argmax, amy, 4, bins, sh->amy_s, sizeof(T), false);
    if (amx) dk_large_output_prepare(&argmax, amx, 4, bins, sh->amx_s, sizeof(T), false);
    if (sh->max_mode) {
        st = DK_SFN(dk__ra_forward_max)(cx, ay, ax, in, out, amy, amx);
    } else {
        TABLES tb;
        st = DK_TFN(dk__ra_tables_build)(cx->ar, &tb, sh, cx->gr, ay, ax);
        if (st == DK_OK) st = DK_SFN(dk__ra_avg)(cx, &tb, ay, ax, in, out, DK_SFN(dk__ra_forward_avg_worker));
    }
    if (st == DK_OK) DK_SFN(dk__ra_forward_orphans)(cx, out, amy, amx);
    return st;
}

static dk_status DK_SFN(dk__ra_backward)(dk__ra_ctx *cx, const dk_tensor *grad_output, const dk_tensor *rois,
                                         const dk_tensor *argmax_y, const dk_tensor *argmax_x, dk_tensor *grad_input)
{
    AXIS *ay, *ax;
    dk_status st = DK_SFN(dk__ra_prepare)(cx, rois, &ay, &ax);
    if (st != DK_OK) return st;
    const S *gout = (const S *)dk_tensor_data(grad_output);
    S *gin = (S *)dk_tensor_data(grad_input);
    const dk__ra_shape *sh = cx->sh;
    const int64_t img[4] = {sh->N, sh->C, sh->H, sh->W};
    dk_large_output gl;
    cx->stream = dk_large_output_prepare(&gl, gin, 4, img, sh->in_s, sizeof(S), false);
    if (sh->max_mode) {
        st = DK_SFN(dk__ra_backward_max)(cx, gout, (const T *)dk_tensor_data(argmax_y),
                                         (const T *)dk_tensor_data(argmax_x), gin);
    } else {
        TABLES tb;
        st = DK_TFN(dk__ra_tables_build)(cx->ar, &tb, sh, cx->gr, ay, ax);
        if (st == DK_OK) st = DK_SFN(dk__ra_avg)(cx, &tb, ay, ax, gout, gin, DK_SFN(dk__ra_backward_avg_worker));
    }
    return st;
}

#include "roi_align/roi_align_names_end_tmpl.h"
#endif
