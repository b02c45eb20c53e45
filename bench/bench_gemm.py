#!/usr/bin/env python3
"""dk_sgemm (csrc/cpu/dk_gemm.h), the core's float32 matrix product, against torch.mm on one
thread, in one process, on the same matrices.

    /usr/bin/python3 bench/bench_gemm.py [--reps 5] [--quick]

Cases: deform_conv2d's three products for one chunk of L columns (K = Cin*kh*kw):
  forward   out[Cout, L]  = W[Cout, K] · cols[K, L]
  gcols     gcols[K, L]   = W^T · gout[Cout, L]           (op(A) transposed)
  gW        gW[Cout, K]   = gout[Cout, L] · cols^T        (op(B) transposed)
with Cout 64 and 256, K = 576 (64 channels, 3 x 3), L = 4096 (quick: Cout 64, K 144, L 512).
The operands are the same tensors for both: the transposed ones are torch views (.t()), which
torch.mm hands to its BLAS with a transpose flag and dkit reads through dk_sgemm's trans_a and
trans_b. dkit is called through ctypes on libdkit.so (dk_sgemm is exported, DK_API), as
deform_conv2d's kernels will call it from C. Both run on one thread (torch.set_num_threads(1):
dk_sgemm itself is serial; its callers split the work).

A third column, where torch has oneDNN (torch.backends.mkldnn), times oneDNN's own product on
the same problem (torch._C._nn.mkldnn_linear on operands converted beforehand; it computes the
transposed product, the same flops): torch.mm calls the BLAS torch was linked with, which on
Debian is the alternative libblas.so.3 (the reference BLAS unless OpenBLAS, BLIS or MKL is
installed), so oneDNN is the tuned product torch itself has.

Within each rep every library runs once, in turn; the median of --reps is printed as
milliseconds, GFLOP/s (2 m n k / time) and the ratio dkit / other (below 1: dkit is faster).
The results are checked against torch.mm before timing.
"""

import argparse
import ctypes
import statistics
import time

from _dkit_path import use_checkout

use_checkout()  # the checkout's dkit where it is built (bench/_dkit_path.py), before importing it

import torch  # noqa: E402

from dkit._paths import get_library  # noqa: E402


def _dk_sgemm():
    lib = ctypes.CDLL(get_library())
    f = lib.dk_sgemm
    i64, flt, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [ctypes.c_bool, ctypes.c_bool, i64, i64, i64, flt, ptr, i64, ptr, i64, flt, ptr, i64]
    f.restype = None
    return f


def _layout(t):
    """(transposed, leading dimension) of a 2-D float32 view for dk_sgemm's row-major contract."""
    if t.stride(1) == 1:
        return False, t.stride(0)
    assert t.stride(0) == 1, "a view with unit stride in one dimension"
    return True, t.stride(1)


def _cases(quick, g):
    cout_list, k, L = ([64], 144, 512) if quick else ([64, 256], 576, 4096)
    for cout in cout_list:
        w = torch.randn(cout, k, generator=g)
        cols = torch.randn(k, L, generator=g)
        gout = torch.randn(cout, L, generator=g)
        # (name, op(A), op(B), oneDNN's x and weight: linear(x, weight) = x weight^T is C^T or C)
        yield f"forward Cout={cout}", w, cols, (cols.t(), w, True)
        yield f"gcols Cout={cout}", w.t(), gout, (gout.t(), w.t(), True)
        yield f"gW Cout={cout}", gout, cols.t(), (gout, cols, False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    sgemm = _dk_sgemm()
    onednn = torch.backends.mkldnn.is_available()
    g = torch.Generator().manual_seed(0)

    print(f"dk_sgemm against torch.mm, float32, one thread, median of {args.reps}")
    if onednn:
        print("oneDNN: torch._C._nn.mkldnn_linear on the transposed problem (the same flops)")
    print(f"{'case':18} {'m':>5} {'n':>5} {'k':>5} {'torch.mm':>10} {'GF/s':>6} {'dkit':>9} {'GF/s':>6} {'ratio':>7}"
          + (f" {'oneDNN':>9} {'GF/s':>6} {'ratio':>7}" if onednn else ""))
    for name, a, b, (x, wt, transposed) in _cases(args.quick, g):
        m, k = a.shape
        n = b.shape[1]
        ta, lda = _layout(a)
        tb, ldb = _layout(b)
        c = torch.empty(m, n)

        def run_dkit():
            sgemm(ta, tb, m, n, k, 1.0, a.data_ptr(), lda, b.data_ptr(), ldb, 0.0, c.data_ptr(), n)

        def run_torch():
            torch.mm(a, b)

        libs = {"torch.mm": run_torch, "dkit": run_dkit}
        if onednn:
            xm, wm = x.contiguous().to_mkldnn(), wt.contiguous().to_mkldnn()
            libs["oneDNN"] = lambda: torch._C._nn.mkldnn_linear(xm, wm, None)
        run_dkit()
        ref = torch.mm(a.double(), b.double())
        err = (c.double() - ref).abs().max().item()
        bound = k * 2.0**-24 * torch.mm(a.double().abs(), b.double().abs()).max().item()
        assert err <= 4 * bound, (name, err, bound)
        if onednn:
            got = libs["oneDNN"]().to_dense()
            assert torch.allclose(got.t() if transposed else got, c, rtol=1e-4, atol=1e-3), name
        for f in libs.values():
            f()  # warm-up
        times = {lib: [] for lib in libs}
        for _ in range(args.reps):
            for lib, f in libs.items():
                t0 = time.perf_counter()
                f()
                times[lib].append(time.perf_counter() - t0)
        med = {lib: statistics.median(t) for lib, t in times.items()}
        flops = 2.0 * m * n * k

        def col(lib):
            return f" {med[lib] * 1e3:8.2f}ms {flops / med[lib] / 1e9:6.1f}"

        row = f"{name:18} {m:5} {n:5} {k:5}" + col("torch.mm") + col("dkit") + f" {med['dkit'] / med['torch.mm']:6.3f}x"
        if onednn:
            row += col("oneDNN") + f" {med['dkit'] / med['oneDNN']:6.3f}x"
        print(row)


if __name__ == "__main__":
    main()
