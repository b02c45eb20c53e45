# csrc/hip/rules.mk — the HIP backend, libdkit_hip.so, included by csrc/gpu/rules.mk (which has
# what both GPU backends share: GPU_SRCS, GPU_INCS, the emulated kernel tests).
#
# hipcc (-x hip) compiles the .cu files under csrc/gpu/, the same sources nvcc compiles (Note [One
# source for CUDA and HIP] in csrc/gpu/dk_gpu.h): no hipify step, no copies. What is HIP's own
# sits in this folder: its runtime's names (dk_hip_runtime.h) and this build.

HIPCC          ?= hipcc
DKIT_HIP_ARCHS ?= gfx90a

# `deps` installs Debian's HIP compiler and runtime unless HIP is switched off (nvcc is not a
# Debian package: it comes with the CUDA toolkit, /usr/local/cuda/bin).
DEB_PKGS += $(if $(filter 0,$(DKIT_WITH_HIP)),,hipcc libamdhip64-dev)

ifeq ($(origin DKIT_WITH_HIP),undefined)
DKIT_WITH_HIP := $(if $(shell command -v $(HIPCC) 2>/dev/null),1,0)
endif

HIP_ARCH_LIST  := $(subst ;,$(space),$(DKIT_HIP_ARCHS))
HIP_ARCHS_TEXT := $(subst $(space),$(,) ,$(HIP_ARCH_LIST))
HIPCC_FLAGS    := -x hip -std=c++17 -O3 -fPIC -fvisibility=hidden -Wall -Werror -Wno-unused-parameter \
                  -Wno-unused-command-line-argument $(addprefix --offload-arch=,$(HIP_ARCH_LIST)) $(GPU_INCS)

# Note [Exact GPU arithmetic] in csrc/gpu/rules.mk: hipcc contracts a*b+c into an fma by default.
HIPCC_FLAGS    += -ffp-contract=off

# hipcc runs rocm_agent_enumerator to list the local GPUs even with --offload-arch; with no
# GPU it prints a Python traceback. ROCM_TARGET_LST hands it the list to print instead.
HIP_ENV := ROCM_TARGET_LST=$(abspath $(BUILD))/hip/targets.lst
$(BUILD)/hip/targets.lst:
	@mkdir -p $(dir $@)
	printf '%s\n' $(HIP_ARCH_LIST) >$@

$(BUILD)/hip/%.o: csrc/gpu/%.cu | $(BUILD)/hip/targets.lst
	@mkdir -p $(dir $@)
	$(HIP_ENV) $(HIPCC) $(HIPCC_FLAGS) -MMD -MP -DDK_GPU_ARCHS='"$(HIP_ARCHS_TEXT)"' -c $< -o $@

$(BUILD)/libdkit_hip.so: $(patsubst csrc/gpu/%.cu,$(BUILD)/hip/%.o,$(GPU_SRCS)) | $(BUILD)/libdkit.so
	$(HIP_ENV) $(HIPCC) -shared -fPIC -o $@ $(filter %.o,$^) -L$(BUILD) -ldkit -Wl,-rpath,'$$ORIGIN'
