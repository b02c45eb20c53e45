"""The README's "Adding an op" is true: in a copy of the source tree, a throwaway op (probe_area:
the area of each box) is added by those steps alone, one file per step and no edit anywhere
else, and it builds, runs, and is listed everywhere a real op is: dkit.ops, _C.ops, the dispatch
tables of the CPU and of every GPU backend built, torch.ops.dkit, and the suites' generic tests
(which read the op modules and the registry, not lists).

Slow (a build in the copy: only the new files compile, the rest is the tree's own objects) and
run only against the in-place build, whose objects it reuses."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import INSTALLED, PKG_ROOT, ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(INSTALLED or PKG_ROOT != ROOT, reason="builds in a copy of the source tree, with its objects"),
]

# Step by step, as the README says (its step numbers).
FILES = {
    # 1. Definition
    "ops/probe_area.h": """
        /* ops/probe_area.h — a throwaway op of tests/python/test_add_an_op.py: areas[i] of boxes[i]. */
        #ifndef DK_OPS_PROBE_AREA_H
        #define DK_OPS_PROBE_AREA_H

        #include "dk_op_define.h"

        #define DK_PROBE_AREA_ARGS(X) X(TENSOR, boxes) X(TENSOR_OUT, areas)

        #ifdef __cplusplus
        extern "C" {
        #endif
        DK_DECLARE_OP(probe_area, DK_PROBE_AREA_ARGS)
        #ifdef __cplusplus
        }
        #endif

        #endif
    """,
    # 2. Checks
    "ops/probe_area.c": """
        #include "probe_area.h"

        #include "dk_check.h"

        DK_DEFINE_OP(probe_area, DK_PROBE_AREA_ARGS)
        {
            static const char op[] = "probe_area";
            dk_status st;
            if (boxes->ndim != 2 || boxes->shape[1] != 4)
                return dk_error(DK_EINVAL, "%s: 'boxes' must have shape [N, 4]", op);
            if ((st = dk_check_dtype(op, "boxes", boxes, DK_FLOAT32))) return st;
            const int64_t shape[1] = {boxes->shape[0]};
            if ((st = dk_check_shape(op, "areas", areas, 1, shape))) return st;
            return dk_check_dtype(op, "areas", areas, DK_FLOAT32);
        }
    """,
    # 3. Per-element math
    "csrc/common/kernels/probe_area_math.h": """
        #ifndef DK_KERNELS_PROBE_AREA_MATH_H
        #define DK_KERNELS_PROBE_AREA_MATH_H

        #include "kernels/dk_hd.h"

        DK_HD DK_INLINE float dk_probe_area_of(float x1, float y1, float x2, float y2) { return (x2 - x1) * (y2 - y1); }

        #endif
    """,
    # 4. CPU kernel
    "csrc/cpu/probe_area/probe_area_cpu.c": """
        #include "probe_area.h"

        #include "dk_registry.h"
        #include "kernels/probe_area_math.h"

        static dk_status dk_probe_area_cpu(const dk_tensor *boxes, dk_tensor *areas)
        {
            const float *b = (const float *)dk_tensor_data(boxes);
            float *a = (float *)dk_tensor_data(areas);
            const int64_t s0 = dk_tensor_stride(boxes, 0), s1 = dk_tensor_stride(boxes, 1);
            const int64_t o = dk_tensor_stride(areas, 0);
            for (int64_t i = 0; i < boxes->shape[0]; i++)
                a[i * o] = dk_probe_area_of(b[i * s0], b[i * s0 + s1], b[i * s0 + 2 * s1], b[i * s0 + 3 * s1]);
            return DK_OK;
        }

        DK_REGISTER_DEVICE_IMPL(probe_area, CPU, dk_probe_area_cpu)
    """,
    # 5. GPU kernel
    "csrc/gpu/probe_area/probe_area_gpu.cu": """
        #include "probe_area_gpu.h"
        #include "probe_area.h"

        #include "dk_gpu.h"
        #include "dk_gpu_kernels.h"
        #include "dk_gpu_status.h"
        #include "kernels/probe_area_math.h"

        __global__ void dk__probe_area_kernel(const float *b, float *a, int64_t n, int64_t s0, int64_t s1, int64_t o)
        {
            for (int64_t i = DK_GPU_FIRST(); i < n; i += DK_GPU_STRIDE())
                a[i * o] = dk_probe_area_of(b[i * s0], b[i * s0 + s1], b[i * s0 + 2 * s1], b[i * s0 + 3 * s1]);
        }

        extern "C" dk_status dk_probe_area_gpu(const dk_tensor *boxes, dk_tensor *areas)
        {
            const int64_t n = boxes->shape[0];
            if (n == 0) return DK_OK;
            dk_device_guard g;
            dk_status st = dk__gpu_enter(&g, boxes->device);
            if (st) return st;
            DK_GPU_LAUNCH(dk__probe_area_kernel, dk_gpu_blocks(n), DK_GPU_THREADS, dk_current_stream(boxes->device),
                          (const float *)dk_tensor_data(boxes), (float *)dk_tensor_data(areas), n,
                          dk_tensor_stride(boxes, 0), dk_tensor_stride(boxes, 1), dk_tensor_stride(areas, 0));
            st = dk__gpu_launched("probe_area");
            dk_device_guard_exit(&g);
            return st;
        }

        DK_GPU_KERNEL(probe_area, dk_probe_area_gpu);
    """,
    "csrc/gpu/probe_area/probe_area_gpu.h": """
        #ifndef DK_PROBE_AREA_GPU_H
        #define DK_PROBE_AREA_GPU_H

        #include "dk_status.h"
        #include "dk_tensor.h"

        #ifdef __cplusplus
        extern "C" {
        #endif
        dk_status dk_probe_area_gpu(const dk_tensor *boxes, dk_tensor *areas);
        #ifdef __cplusplus
        }
        #endif

        #endif
    """,
    # 6. Python
    "dkit/_ops/probe_area.py": '''
        """A throwaway op of tests/python/test_add_an_op.py."""

        from dkit import _C
        from dkit._ops import _examples, torch_op
        from dkit._ops._args import framework, tensor

        _kernel = _C.ops.probe_area


        @torch_op("probe_area(Tensor boxes) -> Tensor", example=lambda rng: (_examples.boxes(rng, 20)[0],))
        def probe_area(boxes):
            """The area of each [N, 4] float32 box."""
            fw = framework(boxes, "boxes", "probe_area")
            boxes = tensor(fw, boxes, "boxes", "probe_area")
            areas = fw.empty(boxes, (boxes.shape[0],), None)
            _kernel(boxes, areas)
            return areas
    ''',
    # 7. Tests and benchmark
    "tests/c/test_kernel_probe_area.c": """
        #include "dk_kernel_test.h"
        #include "probe_area.h"

        static void areas_of_known_boxes_and_bad_input(void **state)
        {
            (void)state;
            dkk_tensor *b = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 4}, NULL, 1);
            dkk_tensor *a = dkk_new(DK_FLOAT32, 1, (int64_t[]){2}, NULL, 0);
            const double v[2][4] = {{0, 0, 2, 3}, {1, 1, 4, 5}};
            for (int i = 0; i < 2; i++)
                for (int d = 0; d < 4; d++) dkk_set(b, (int64_t[]){i, d}, v[i][d]);
            assert_ok(dk_probe_area(&b->t, &a->t));
            assert_true(dkk_get(a, (int64_t[]){0}) == 6 && dkk_get(a, (int64_t[]){1}) == 12);
            dkk_tensor *wide = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 5}, NULL, 0);
            assert_int_equal(dk_probe_area(&wide->t, &a->t), DK_EINVAL);
            dkk_free(b), dkk_free(a), dkk_free(wide);
        }

        int main(void)
        {
            const struct CMUnitTest tests[] = {cmocka_unit_test(areas_of_known_boxes_and_bad_input)};
            return cmocka_run_group_tests(tests, NULL, NULL);
        }
    """,
    "tests/c/gpu/test_gpu_probe_area.c": """
        #include "gpu/dk_gpu_test.h"
        #include "probe_area.h"

        #ifdef DKT_GPU_EMULATED
        #include "probe_area/probe_area_gpu.h"
        #define GPU_PROBE_AREA dk_probe_area_gpu
        #else
        #define GPU_PROBE_AREA dk_probe_area
        #endif

        static void gpu_matches_cpu(void **state)
        {
            (void)state;
            dkk_rng r = {0xa4ea};
            dkk_tensor *b = dkk_new(DK_FLOAT32, 2, (int64_t[]){1000, 4}, NULL, 0);
            dkk_fill_uniform(b, &r, 0, 100);
            dkk_tensor *a = dkk_new(DK_FLOAT32, 1, (int64_t[]){1000}, NULL, 0);
            dkk_tensor *ga = dkk_new(DK_FLOAT32, 1, (int64_t[]){1000}, NULL, 0);
            assert_ok(dk_probe_area(&b->t, &a->t));
            dkg_tensor db, da;
            dkg_up(&db, b), dkg_up(&da, ga);
            assert_ok(GPU_PROBE_AREA(&db.dev, &da.dev));
            dkg_down(&da);
            dkg_assert_same_values(ga, a, 0, "probe_area");
            dkg_release(&db), dkg_release(&da);
            dkk_free(b), dkk_free(a), dkk_free(ga);
        }

        int main(void)
        {
            if (dkg_setup()) return 0;
            const struct CMUnitTest tests[] = {cmocka_unit_test(gpu_matches_cpu)};
            return cmocka_run_group_tests(tests, NULL, NULL);
        }
    """,
    "tests/python/test_probe_area.py": """
        import numpy as np
        import pytest

        import dkit


        def test_probe_area():
            np.testing.assert_array_equal(dkit.ops.probe_area(np.array([[0, 0, 2, 3]], np.float32)), [6])
            with pytest.raises(ValueError, match="shape"):
                dkit.ops.probe_area(np.zeros((2, 5), np.float32))
    """,
    "bench/bench_probe_area.py": """
        \"\"\"probe_area against numpy's arithmetic on the same boxes.\"\"\"
        import timeit

        import numpy as np

        import dkit

        b = np.random.default_rng(0).uniform(0, 100, (100_000, 4)).astype(np.float32)
        ref = timeit.timeit(lambda: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), number=20)
        ours = timeit.timeit(lambda: dkit.ops.probe_area(b), number=20)
        print(f"probe_area, 100,000 boxes: {ref / ours:.2f}x numpy")
    """,
}

CHECK = """
import numpy as np, torch, dkit
from dkit import _C
b = np.array([[0, 0, 2, 3], [1, 1, 4, 5]], np.float32)
assert "probe_area" in dkit.ops.__all__ and hasattr(_C.ops, "probe_area")
np.testing.assert_array_equal(dkit.ops.probe_area(b), [6, 12])
assert torch.equal(torch.ops.dkit.probe_area(torch.from_numpy(b)), torch.tensor([6.0, 12.0]))
rows = {r.key: r for r in dkit.dispatch.table("probe_area")}
assert rows["cpu"].provenance == "kernel" and rows["cpu"].kernel == "dk_probe_area_cpu", rows
for b in dkit.backends():
    if b.name in ("cuda", "hip"):
        assert rows[b.name].kernel == f"dk_probe_area_{b.name}", rows
        print("gpu:", b.name)
print("ok")
"""

# The suites' generic tests, run in the copy: each reads the op modules or the registry.
GENERIC = [
    "tests/python/test_torch_ops.py::test_every_public_op_is_a_torch_op_with_its_signature",
    "tests/python/test_torch_ops.py::test_torch_ops_equal_the_eager_functions",
    "tests/python/test_gpu_backends.py::test_built_backends_have_a_kernel_for_every_op",
    "tests/python/test_architecture.py::test_layers_include_only_downwards",
    "tests/python/test_architecture.py::test_every_layer_is_cut_by_op_family",
    "tests/python/test_probe_area.py",
]


def _copy_tree(dst):
    """The source tree (what git tracks and does not ignore) and the in-place build's objects,
    times kept, so that make compiles only what the new files add."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    for f in files:
        src = os.path.join(ROOT, f)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dst, f)), exist_ok=True)
            shutil.copy2(src, os.path.join(dst, f))
    for sub in ("obj", "cuda", "hip", "emu"):
        if os.path.isdir(os.path.join(ROOT, "build", sub)):
            shutil.copytree(os.path.join(ROOT, "build", sub), os.path.join(dst, "build", sub),
                            copy_function=shutil.copy2)
    # the torch reader and kernel holder, which do not depend on the core (setup.py keeps them)
    for f in os.listdir(os.path.join(ROOT, "dkit")):
        if f.startswith(("_torch_reader", "_torch_kernel")) and f.endswith(".so"):
            shutil.copy2(os.path.join(ROOT, "dkit", f), os.path.join(dst, "dkit", f))


def _env(tree):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DKIT_TEST_PACKAGE_ROOT")}
    env["PYTHONPATH"] = str(tree)
    return env


def test_an_op_added_by_the_readme_steps_is_everywhere(tmp_path):
    if not os.path.isdir(os.path.join(ROOT, ".git")) or not shutil.which("git"):
        pytest.skip("needs the git checkout")
    tree = tmp_path / "tree"
    _copy_tree(str(tree))
    for name, text in FILES.items():
        path = tree / name
        assert not path.exists(), name  # new files only: nothing existing is edited
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    make = ["make", "--no-print-directory", "-o", "deps", "-o", "gpu", "-j2", f"PYTHON={sys.executable}"]
    r = subprocess.run([*make, "lib", "gpu-libs"], cwd=tree, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run([*make, "python"], cwd=tree, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # step 7: its kernel test, and its GPU test emulated on the host (as make test-c runs them)
    tests = ["build/tests/test_kernel_probe_area", "build/tests/emu/test_gpu_probe_area"]
    r = subprocess.run([*make, *tests], cwd=tree, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for t in tests:
        r = subprocess.run([str(tree / t)], cwd=tree, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "PASSED" in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "bench/bench_probe_area.py"], cwd=tree, env=_env(tree), capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0 and "x numpy" in r.stdout, r.stdout + r.stderr
    env = _env(tree)
    r = subprocess.run([sys.executable, "-c", CHECK], cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    built = [b for b in ("cuda", "hip") if (tree / "build" / f"libdkit_{b}.so").exists()]
    registered = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("gpu:")]
    assert sorted(registered) == sorted(built), (registered, built)  # its GPU kernel, on every backend built
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *GENERIC], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
