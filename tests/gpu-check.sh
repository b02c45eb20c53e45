#!/usr/bin/env bash
# tests/gpu-check.sh — the whole GPU check, in one run, on a machine with an NVIDIA GPU (`make
# gpu-check`). Written for a machine like the one ../shared/GPU-MACHINE.md describes: CUDA's
# nvcc, a Python (venv) with a CUDA torch and torchvision, and neither Debian packages nor a
# package registry. Each step writes its log to $DKIT_GPU_LOGS (default build/gpu-check) and a
# line to summary.txt there; the run goes on after a failed step, so that one call of a scarce
# machine reports everything, and exits non-zero if any step failed.
#
#   0. env          the GPU, nvcc, the Python stack
#   1. cmocka       the C tests' framework: the system's, or Debian's packages unpacked from
#                   $DKIT_GPU_BUNDLE (default build/gpu-bundle; `make gpu-bundle` fetches them on a
#                   Debian machine, and the GPU machine receives that folder with the checkout;
#                   DKIT_GPU_CMOCKA=bundle uses them even where the system has cmocka)
#   2. build        libdkit, the CUDA backend (sm_80, sm_90 + PTX), the GPU tests, bench_gpu
#   3. test-gpu     every C GPU test on the device, against the CPU kernels, one by one
#   4. python       the extension with the torch reader (again without it if that build fails,
#                   so that the later steps still run; the failure stays reported)
#   5. gpu-python   tests/python/test_gpu_python.py and test_gpu_backends.py, with
#                   DKIT_EXPECT_GPU=1: CUDA cases that skip are a failure here
#   6. bench-gpu    bench/bench_gpu.py: the C kernels through the dispatcher, against
#                   torchvision's CUDA ops in the same process
#   7. bench-calls  bench/bench_gpu_calls.py: whole Python calls, dkit against torchvision, warm
#                   and with the L2 cache flushed between calls
#   8. sanitizer    compute-sanitizer memcheck on the C GPU tests DKIT_GPU_SANITIZE names (default:
#                   nms, roi_align, roi_pool, rotated, deform_conv, focal_loss), racecheck on nms's
#   9. profile      bench/profile_gpu.py calls: where a tiny call's host time goes
#  10. ncu          Nsight Compute on one launch of each kernel of bench_gpu_calls.py's cases
#  11. suite        the rest of the Python suite on this torch, without the tests marked slow,
#                   last and cut at DKIT_GPU_SUITE_S seconds (default 180) so that one call of the
#                   machine holds the whole check; -v and --durations say where the time went
#
# DKIT_GPU_SKIP="ncu profile" leaves out the steps it names; DKIT_GPU_STEP_S (default 300) bounds
# each step's seconds, DKIT_GPU_NCU_S (default 150) Nsight Compute's, DKIT_GPU_TOTAL_S the whole
# check's (a step past it is cut, later ones are skipped); DKIT_GPU_ARCHIVE=FILE.tgz packs every
# log into one file at the end (a machine lent by a tool that returns only a few files).
#
# The call that fits a session's 15 minutes of device time (about 250 s, plus start-up):
#   DKIT_GPU_SKIP="profile ncu suite" DKIT_GPU_COLD=0 DKIT_GPU_STEP_S=130 DKIT_GPU_TOTAL_S=240 \
#       DKIT_GPU_ARCHIVE=$OUT/logs.tgz make gpu-check
#
# Usage: bash tests/gpu-check.sh   (PYTHON=python3 and JOBS=$(nproc) by default)
set -u
cd "$(dirname "$0")/.."

LOGS=${DKIT_GPU_LOGS:-build/gpu-check}
BUNDLE=${DKIT_GPU_BUNDLE:-build/gpu-bundle}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
SUMMARY=$LOGS/summary.txt
BEGUN=$(date +%s)
: >"$SUMMARY"
failed=0
MAKE_GPU=(make --no-print-directory -o deps -o gpu DKIT_WITH_HIP=0 DKIT_WITH_CUDA=1 "PYTHON=$PYTHON")

# step NAME COMMAND...: runs COMMAND with its output in NAME.log, and records the outcome.
step() {
    local name=$1 start rc
    shift
    case " ${DKIT_GPU_SKIP:-} " in *" $name "*)
        printf '%-11s skipped (DKIT_GPU_SKIP)\n' "$name" | tee -a "$SUMMARY"
        return 0
        ;;
    esac
    start=$(date +%s)
    local limit=${DKIT_GPU_STEP_S:-300}
    if [ -n "${DKIT_GPU_TOTAL_S:-}" ]; then # the whole check's time left
        local left=$((DKIT_GPU_TOTAL_S - (start - BEGUN)))
        if [ "$left" -le 0 ]; then
            printf '%-11s skipped (DKIT_GPU_TOTAL_S spent)\n' "$name" | tee -a "$SUMMARY"
            failed=1
            return 1
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    # Each step in its own process group (set -m), killed whole past its limit: a kernel that
    # hangs costs one step, not the rest of a scarce machine's call.
    set -m
    ("$@") >"$LOGS/$name.log" 2>&1 &
    local pid=$!
    set +m
    while kill -0 "$pid" 2>/dev/null && [ $(($(date +%s) - start)) -lt "$limit" ]; do sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "== $name: killed after $limit s (DKIT_GPU_STEP_S or DKIT_GPU_TOTAL_S)" >>"$LOGS/$name.log"
        kill -TERM -- "-$pid" 2>/dev/null
        sleep 2
        kill -KILL -- "-$pid" 2>/dev/null
    fi
    wait "$pid"
    rc=$?
    printf '%-11s %s (%d s)\n' "$name" "$([ $rc = 0 ] && echo ok || echo "FAILED, rc $rc")" $(($(date +%s) - start)) |
        tee -a "$SUMMARY"
    [ $rc = 0 ] || failed=1
    return $rc
}

environment() {
    date -u
    nvidia-smi || echo "nvidia-smi: not found"
    "${NVCC:-/usr/local/cuda/bin/nvcc}" --version
    gcc --version | head -1
    "$PYTHON" -c 'import sys, torch, torchvision; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""); print("torchvision", torchvision.__version__)'
}

# cmocka: found by the compiler, or unpacked from the bundle's .deb files.
cmocka() {
    # DKIT_GPU_CMOCKA=bundle: the bundle's even where the system has cmocka (to test this step)
    if [ "${DKIT_GPU_CMOCKA:-}" != bundle ] && echo '#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
int main(void) { return 0; }' | gcc -x c - -o /dev/null -lcmocka 2>/dev/null; then
        echo "cmocka: the system's"
        return 0
    fi
    ls "$BUNDLE"/libcmocka*.deb >/dev/null 2>&1 || {
        echo "no cmocka here and no .deb files in $BUNDLE: run 'make gpu-bundle' on a Debian machine and bring $BUNDLE"
        return 1
    }
    local dir=$PWD/build/gpu-deps
    rm -rf "$dir" && mkdir -p "$dir"
    for deb in "$BUNDLE"/libcmocka*.deb; do
        if command -v dpkg >/dev/null 2>&1; then
            dpkg -x "$deb" "$dir"
        else # a .deb is an ar archive holding data.tar.*
            (cd "$dir" && ar x "$OLDPWD/$deb" && tar xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary)
        fi
    done
    echo "cmocka: unpacked from $BUNDLE into $dir"
}

build() {
    local tests
    tests=$(ls tests/c/gpu/test_*.c | sed 's|tests/c/gpu/\(.*\)\.c|build/tests/gpu/\1|')
    "${MAKE_GPU[@]}" -j"$JOBS" gpu-libs build/bench_gpu $tests
}

test_gpu() {
    local rc=0 t out=$LOGS/.test-gpu.out
    for t in build/tests/gpu/test_gpu_*; do
        case $t in *.d) continue ;; esac # the compiler's dependency files (-MMD)
        echo "== $t"
        DK_TEST_GPU_LIB=$PWD/build/libdkit_cuda.so DK_TEST_GPU_TYPE=cuda "$t" >"$out" 2>&1 || rc=1
        cat "$out"
        if grep -q '^SKIPPED' "$out"; then # no GPU or no library: a failure on a GPU machine
            echo "$t skipped on a GPU machine"
            rc=1
        fi
    done
    rm -f "$out"
    return $rc
}

sanitizer() {
    local cs=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer} rc=0 t
    [ -x "$cs" ] || cs=$(command -v compute-sanitizer) || {
        echo "compute-sanitizer: not found"
        return 1
    }
    for t in ${DKIT_GPU_SANITIZE:-test_gpu_nms test_gpu_roi_align test_gpu_roi_pool test_gpu_rotated test_gpu_deform_conv test_gpu_focal_loss}; do
        echo "== compute-sanitizer --tool memcheck $t"
        DK_TEST_GPU_LIB=$PWD/build/libdkit_cuda.so DK_TEST_GPU_TYPE=cuda \
            "$cs" --tool memcheck --error-exitcode 3 "build/tests/gpu/$t" || rc=1
    done
    # nms's shared-memory sort and keep (Note [NMS's bitonic sort]): races between a block's threads
    echo "== compute-sanitizer --tool racecheck test_gpu_nms"
    DK_TEST_GPU_LIB=$PWD/build/libdkit_cuda.so DK_TEST_GPU_TYPE=cuda \
        "$cs" --tool racecheck --error-exitcode 3 build/tests/gpu/test_gpu_nms || rc=1
    return $rc
}

python_build() {
    if DKIT_CORE_OBJECTS=build/obj DKIT_GPU_LIBS=build "$PYTHON" setup.py build_ext --inplace; then
        return 0
    fi
    echo "== the build with the torch reader failed (above); building without it so that the later steps run"
    DKIT_TORCH_READER=0 DKIT_CORE_OBJECTS=build/obj DKIT_GPU_LIBS=build "$PYTHON" setup.py build_ext --inplace
    return 1
}

bench_calls() { # DKIT_GPU_COLD=0: the warm run only
    "$PYTHON" bench/bench_gpu_calls.py || return
    [ "${DKIT_GPU_COLD:-1}" = 0 ] || "$PYTHON" bench/bench_gpu_calls.py --cold --reps 10
}

# One launch of each kernel, inside the NVTX range "profiled" (the warm-up call is outside it).
ncu_kernels() {
    local ncu=${NCU:-/usr/local/cuda/bin/ncu}
    [ -x "$ncu" ] || ncu=$(command -v ncu) || {
        echo "ncu: not found"
        return 1
    }
    local args=(--kernel-name-base demangled -k 'regex:ra_gpu|roi_align|nms|iou|bir' --launch-count 60
        --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis)
    timeout "${DKIT_GPU_NCU_S:-150}" "$ncu" "${args[@]}" --nvtx --nvtx-include 'profiled/' "$PYTHON" bench/profile_gpu.py kernels
}

step env environment
step cmocka cmocka
if [ -d build/gpu-deps/usr ]; then
    export C_INCLUDE_PATH=$PWD/build/gpu-deps/usr/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
    export LIBRARY_PATH=$PWD/build/gpu-deps/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$PWD/build/gpu-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
built=0
if step build build; then
    built=1
    step test-gpu test_gpu
fi
step python python_build
# -s: a crash's own message (glibc's, C++'s terminate) reaches the log, not pytest's capture
step gpu-python env DKIT_EXPECT_GPU=1 "$PYTHON" -m pytest -q -s -rs -p no:cacheprovider \
    tests/python/test_gpu_python.py tests/python/test_gpu_backends.py
step bench-gpu "$PYTHON" bench/bench_gpu.py --build build
step bench-calls bench_calls
[ $built = 1 ] && step sanitizer sanitizer # slow: after the figures
step profile "$PYTHON" bench/profile_gpu.py calls
step ncu ncu_kernels
step suite timeout "${DKIT_GPU_SUITE_S:-180}" "$PYTHON" -m pytest -v -rs -p no:cacheprovider -m "not slow" \
    --durations=15 --ignore tests/python/test_gpu_python.py --ignore tests/python/test_gpu_backends.py tests/python
echo "logs: $LOGS" | tee -a "$SUMMARY"
if [ -n "${DKIT_GPU_ARCHIVE:-}" ]; then
    tar czf "$DKIT_GPU_ARCHIVE" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" && echo "archive: $DKIT_GPU_ARCHIVE"
fi
exit $failed
