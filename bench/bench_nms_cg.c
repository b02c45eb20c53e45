/*
 * bench/bench_nms_cg.c — the CPU nms kernel on bench_nms.py's problems, for counting
 * instructions with callgrind (bench/callgrind.sh), where the Python bench's timings are
 * noisy.
 *
 *   bench_nms_cg --case C --iters N     C: 1k, 10k (uniform boxes), clustered, batched
 *
 * The boxes are drawn as bench_nms.py draws them (corners uniform in 1000 x 1000, sides uniform
 * in 1 .. 101; 6,000 jittered copies of 100 objects; 20,000 boxes in 80 categories), float32,
 * from a fixed seed of this file's own generator: the same distributions, not torch's values.
 * It prints the kept count, so a change of counts is seen.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dkit.h"
#include "nms.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static double uni(void) /* splitmix64, [0, 1) */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static double gauss(void) { return sqrt(-2 * log(1 - uni())) * cos(6.283185307179586 * uni()); }

static dk_tensor tensor(void *data, int ndim, int64_t *shape, dk_dtype dt)
{
    dk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype = dk_dtype_to_dl(dt);
    t.shape = shape;
    return t;
}

int main(int argc, char **argv)
{
    const char *c = "10k";
    long iters = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--case")) c = argv[i + 1];
        else if (!strcmp(argv[i], "--iters")) iters = atol(argv[i + 1]);
    }
    const int clustered = !strcmp(c, "clustered"), batched = !strcmp(c, "batched");
    const int64_t n = !strcmp(c, "1k") ? 1000 : clustered ? 6000 : batched ? 20000 : 10000;
    float *b = malloc((size_t)n * 4 * sizeof *b), *s = malloc((size_t)n * sizeof *s);
    int64_t *cls = malloc((size_t)n * sizeof *cls), *keep = malloc((size_t)n * sizeof *keep), num = 0;
    if (clustered) {
        double ctr[100][2], size[100][2];
        for (int o = 0; o < 100; o++)
            for (int d = 0; d < 2; d++) ctr[o][d] = uni() * 800 + 100, size[o][d] = uni() * 150 + 20;
        for (int64_t i = 0; i < n; i++) {
            const int o = (int)(uni() * 100);
            for (int d = 0; d < 2; d++) {
                const double m = ctr[o][d] + gauss() * size[o][d] * 0.1;
                const double w = size[o][d] * fmax(1 + gauss() * 0.1, 0.3);
                b[i * 4 + d] = (float)(m - w / 2);
                b[i * 4 + 2 + d] = (float)(m + w / 2);
            }
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            for (int d = 0; d < 2; d++) {
                b[i * 4 + d] = (float)(uni() * 1000);
                b[i * 4 + 2 + d] = b[i * 4 + d] + (float)(uni() * 100 + 1);
            }
    }
    for (int64_t i = 0; i < n; i++) s[i] = (float)uni(), cls[i] = (int64_t)(uni() * 80);
    int64_t bshape[2] = {n, 4}, vshape[1] = {n}, one[1] = {1};
    dk_tensor tb = tensor(b, 2, bshape, DK_FLOAT32), ts = tensor(s, 1, vshape, DK_FLOAT32);
    dk_tensor tc = tensor(cls, 1, vshape, DK_INT64), tk = tensor(keep, 1, vshape, DK_INT64);
    dk_tensor tn = tensor(&num, 1, one, DK_INT64);
    for (long it = 0; it < iters; it++) {
        const dk_status st = dk_nms(&tb, &ts, batched ? &tc : NULL, &tk, &tn, 0.5, 0);
        if (st) {
            fprintf(stderr, "bench_nms_cg: %s\n", dk_last_error());
            return 1;
        }
    }
    printf("%s: %lld boxes, %lld kept\n", c, (long long)n, (long long)num);
    return 0;
}
