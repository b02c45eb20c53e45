# csrc/gpu/rules.mk — the GPU backends and their tests, included by the Makefile.
#
# One source (Note [One source for CUDA and HIP] in csrc/gpu/dk_gpu.h), three builds:
#   $(BUILD)/libdkit_cuda.so   nvcc, every .cu file of csrc/gpu (csrc/cuda/rules.mk, with what is
#                              CUDA's own in csrc/cuda/)
#   $(BUILD)/libdkit_hip.so    hipcc -x hip, the same files (csrc/hip/rules.mk, with what is
#                              HIP's own in csrc/hip/)
#   $(BUILD)/emu/*.o           g++ -DDK_GPU_EMULATE, the kernel files (not the backend object),
#                              linked into the tests of tests/c/gpu (Note [Emulating a GPU on the
#                              host] in tests/c/dk_gpu_emu.h); run by `make test-c`
# Each library links libdkit.so (rpath $ORIGIN: the copy beside it, in build/ or in dkit/).
#
# Which are built: DKIT_WITH_CUDA / DKIT_WITH_HIP = 1 (required: a missing compiler is an
# error), 0 (skipped), or unset (built when nvcc / hipcc is found). `make gpu` builds them in a
# sub-make, so a compiler that `deps` has just installed is found.
#
# Note [Exact GPU arithmetic]
# nvcc fuses a multiplication and an addition into one fma by default (-fmad=true), and hipcc
# (clang, -ffp-contract=fast for HIP) likewise; the host compilers, in ISO C/C++ mode, never do.
# A fused result is rounded once instead of twice, so the same expression gives other bits on the
# GPU than on the CPU. Every GPU kernel is therefore compiled without contraction (each vendor's
# rules.mk says how): each +, -, *, / and sqrt is the IEEE operation the CPU performs, and the
# GPU keeps the CPU kernel's promises.
#   - The box kernels promise the CPU's bits (IoU values, NMS and Soft-NMS decisions, decayed
#     scores): a bit at a threshold decides which boxes are kept.
#   - roi_align's max pooling promises the CPU's sample values and argmax: each output is one
#     bilinear sample, and with contraction one came out 1.1e-6 away on an H100 (sample
#     coordinates rounded once instead of twice; test_gpu_roi_align, max mode, atol 0). Its
#     averages sum in another order and promise a tolerance. What the separate roundings cost
#     the memory-bound roi_align on a GPU is for the GPU benchmark to say (bench/bench_gpu.py).
# Only the device's sin, cos, atan and exp can still differ from the C library's (by an ulp or
# two), and a NaN's sign and payload are the hardware's (tests/c/gpu/dk_gpu_test.h).

GPU_SRCS        := $(sort $(shell find csrc/gpu -name '*.cu')) # the kernels sit in a folder per op family
GPU_KERNEL_SRCS := $(filter-out csrc/gpu/dk_gpu_backend.cu,$(GPU_SRCS)) # the emulation has no runtime
GPU_INCS        := $(INCS) -Icsrc/gpu -Icsrc/cuda -Icsrc/hip
# The emulation's runtime (tests/c/dk_gpu_emu.h) comes in by -include, not from csrc/gpu/dk_gpu.h:
# the library's headers name no test header.
EMU_FLAGS       := -x c++ -std=c++17 -DDK_GPU_EMULATE -include dk_gpu_emu.h -fPIC -O1 -g $(WARN) $(GPU_INCS) \
                   -Itests/c

, := ,
empty :=
space := $(empty) $(empty)

include csrc/cuda/rules.mk
include csrc/hip/rules.mk

GPU_LIBS := $(if $(filter 1,$(DKIT_WITH_CUDA)),$(BUILD)/libdkit_cuda.so) $(if $(filter 1,$(DKIT_WITH_HIP)),$(BUILD)/libdkit_hip.so)

.PHONY: gpu gpu-libs test-gpu-emu test-gpu bench-gpu
gpu: deps
	@$(MAKE) --no-print-directory gpu-libs

gpu-libs: $(GPU_LIBS)
	@echo "GPU backends: cuda $(if $(filter 1,$(DKIT_WITH_CUDA)),built for $(CUDA_ARCHS_TEXT),skipped (no $(NVCC); DKIT_WITH_CUDA=1 requires it)); hip $(if $(filter 1,$(DKIT_WITH_HIP)),built for $(HIP_ARCHS_TEXT),skipped (no $(HIPCC); DKIT_WITH_HIP=1 requires it))"

# --- tests: emulated (every run of make test-c), real (make test-gpu) ----------------------------
GPU_TESTS := $(patsubst tests/c/gpu/%.c,%,$(wildcard tests/c/gpu/test_*.c))

# kept (not intermediate files that make would delete and then recompile for every test)
.SECONDARY: $(patsubst csrc/gpu/%.cu,$(BUILD)/emu/%.o,$(GPU_KERNEL_SRCS))
$(BUILD)/emu/%.o: csrc/gpu/%.cu
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/tests/emu/%: tests/c/gpu/%.c $(patsubst csrc/gpu/%.cu,$(BUILD)/emu/%.o,$(GPU_KERNEL_SRCS)) | $(BUILD)/libdkit.so
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -Icsrc/gpu -O2 -DDKT_GPU_EMULATED $< $(filter %.o,$^) -o $@ -L$(BUILD) -ldkit \
	  -Wl,-rpath,$(abspath $(BUILD)) -lcmocka -lstdc++ -lm

$(BUILD)/tests/gpu/%: tests/c/gpu/%.c | $(BUILD)/libdkit.so
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -Icsrc/gpu -O2 $< -o $@ -L$(BUILD) -ldkit -Wl,-rpath,$(abspath $(BUILD)) -lcmocka -lm

# The emulation's own tests (its warps: Note [Emulated warps] in tests/c/dk_gpu_emu.h), with
# kernels of their own: emulation only.
GPU_EMU_TESTS := $(patsubst tests/c/gpu/%.cpp,%,$(wildcard tests/c/gpu/test_*.cpp))
$(BUILD)/tests/emu/%: tests/c/gpu/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) $(DEPFLAGS) $< -o $@ -lcmocka

# Every kernel runs in warps of 32 lanes (NVIDIA) and of 64 (gfx9's wavefronts).
test-gpu-emu: $(addprefix $(BUILD)/tests/emu/,$(GPU_TESTS) $(GPU_EMU_TESTS))
	@set -e; for t in $(GPU_EMU_TESTS); do echo "== $$t (the emulation's warps)"; $(BUILD)/tests/emu/$$t; done; \
	for w in 32 64; do for t in $(GPU_TESTS); do \
	  echo "== $$t (GPU kernels emulated on the host, warps of $$w)"; DK_EMU_WARP=$$w $(BUILD)/tests/emu/$$t; done; done

# On a machine with a GPU: every GPU kernel on device tensors against the CPU kernel. Without a
# GPU (or a backend library) each test says so and passes: SKIPPED.
test-gpu: gpu $(addprefix $(BUILD)/tests/gpu/,$(GPU_TESTS))
	@set -e; ran=0; for lib in $(BUILD)/libdkit_cuda.so $(BUILD)/libdkit_hip.so; do \
	  [ -f $$lib ] || continue; ran=1; kind=$$(basename $$lib .so | sed 's/libdkit_//'); \
	  for t in $(GPU_TESTS); do echo "== $$t on $$kind"; \
	    DK_TEST_GPU_LIB=$(abspath $(BUILD))/libdkit_$$kind.so DK_TEST_GPU_TYPE=$$kind $(BUILD)/tests/gpu/$$t; done; \
	done; [ $$ran = 1 ] || echo "test-gpu: SKIPPED: no GPU backend was built (no nvcc or hipcc)"

# Each GPU kernel against the CPU kernel, and against torchvision's CUDA op where torch has CUDA
# (bench/bench_gpu.py says how). Without a GPU it says so.
$(BUILD)/bench_gpu: bench/bench_gpu.c | $(BUILD)/libdkit.so
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -O2 $< -o $@ -L$(BUILD) -ldkit -Wl,-rpath,$(abspath $(BUILD)) -lm

bench-gpu: gpu $(BUILD)/bench_gpu
	$(PYTHON) bench/bench_gpu.py --build $(BUILD)
