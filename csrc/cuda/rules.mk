# csrc/cuda/rules.mk — the CUDA backend, libdkit_cuda.so: nvcc over csrc/gpu's sources, included by
# csrc/gpu/rules.mk (which has what both GPU backends share). What is CUDA's own sits in this
# folder: its runtime's names (dk_cuda_runtime.h) and this build.

DKIT_CUDA_ARCHS ?= 80;90

ifeq ($(origin DKIT_WITH_CUDA),undefined)
DKIT_WITH_CUDA := $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
endif

CUDA_ARCH_LIST  := $(subst ;,$(space),$(DKIT_CUDA_ARCHS))
CUDA_PTX_ARCH   := $(lastword $(CUDA_ARCH_LIST))
# Real code for every listed architecture, and PTX for the newest, which the driver compiles for
# any later GPU.
CUDA_GENCODE    := $(foreach a,$(CUDA_ARCH_LIST),-gencode arch=compute_$(a)$(,)code=sm_$(a)) \
                   -gencode arch=compute_$(CUDA_PTX_ARCH)$(,)code=compute_$(CUDA_PTX_ARCH)
CUDA_ARCHS_TEXT := $(subst $(space),$(,) ,$(addprefix sm_,$(CUDA_ARCH_LIST))) (+ PTX compute_$(CUDA_PTX_ARCH))

# dk_tls.h's tls_model attribute is for the host compiler; nvcc's front end notes it (#1835).
# -fmad=false: Note [Exact GPU arithmetic] in csrc/gpu/rules.mk.
NVCC_FLAGS  := -std=c++17 -O3 -Xcompiler -fPIC$(,)-fvisibility=hidden$(,)-Wall -diag-suppress 1835 \
               -Werror all-warnings -fmad=false $(CUDA_GENCODE) $(GPU_INCS)

$(BUILD)/cuda/%.o: csrc/gpu/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -MF $(@:.o=.d) -DDK_GPU_ARCHS='"$(CUDA_ARCHS_TEXT)"' -c $< -o $@

$(BUILD)/libdkit_cuda.so: $(patsubst csrc/gpu/%.cu,$(BUILD)/cuda/%.o,$(GPU_SRCS)) | $(BUILD)/libdkit.so
	$(NVCC) -shared -o $@ $(filter %.o,$^) -L$(BUILD) -ldkit -Xlinker -rpath,'$$ORIGIN'
