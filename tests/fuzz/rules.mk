# tests/fuzz/rules.mk — libFuzzer targets for dkit's core, included by the Makefile.
#
#  1. The core, for fuzzing: every .c under $(CORE_DIRS) compiled by clang (libFuzzer and the
#     sanitizer runtimes come with it: Debian's clang and libclang-rt-14-dev) with coverage
#     instrumentation, ASan and UBSan (UBSan findings abort), into $(FUZZ_BUILD)/obj. Without
#     -fopenmp: kernels run on one thread and `#pragma omp` is ignored. No libdkit.so: each target
#     links the objects directly, which keeps the constructors that register ops, kernels and
#     tunables (DK_DEFINE_OP, DK_REGISTER_DEVICE_IMPL, DK_TUNABLE).
#  2. The targets, one per tests/fuzz/fuzz_*.c, into $(FUZZ_BUILD)/<target>:
#       fuzz_dlpack     DLPack import (dk_dlpack_accept) of fuzzed managed tensors, then each
#                       accepted one in every tensor role of roi_align forward and backward
#       fuzz_boxed      boxed calls (dk_op_call_boxed) of every registered op on fuzzed stacks,
#                       and dk_op_redispatch_boxed from boxed kernels
#       fuzz_roi_align  roi_align's check and CPU kernel on small hostile problems, every
#                       evaluation path (tunables)
#       fuzz_backend    the ELF check of dk_load_backend (Note [Refused before dlopen]) on fuzzed
#                       bytes; refused bytes are loaded from a file, and must never reach dlopen
#                       (linked with --wrap=dlopen: reaching it aborts; accepted bytes reach a
#                       dlopen that returns NULL, and --wrap=dlerror words it)
#  3. Corpora: the committed seeds are tests/fuzz/corpus/<target>/; the working corpus grows in
#     $(FUZZ_BUILD)/corpus/<target>/ (libFuzzer reads both and writes new inputs to the first).
#     fuzz_backend's is also seeded with the backend fixtures (tests/c/fixtures, built by make).
#     tests/fuzz/regressions/<target>/ holds inputs that once found a bug: every run replays them
#     first. tests/fuzz/seeds.py writes the committed seeds (calls that reach the kernels).
#  4. `make fuzz` runs each target for FUZZ_SECONDS (default 60), one after another, from a random
#     seed; `make fuzz-smoke` for FUZZ_SMOKE_SECONDS (default 10) each from the fixed seed
#     FUZZ_SMOKE_SEED, and is part of `make test`: the same mutations on every run, so that a
#     smoke failure is a regression to look at, not the luck of a draw.
#     tests/fuzz/run.sh runs one target and prints its executions and findings; a finding (crash,
#     sanitizer report, broken contract, timeout, out-of-memory, leak) fails the make target and
#     leaves its input in $(FUZZ_BUILD)/artifacts/<target>/, where
#     `$(FUZZ_BUILD)/<target> <that file>` replays it.

FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 60
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_SMOKE_SEED    ?= 1
FUZZ_NICE          ?= 10
FUZZ_BUILD         := $(BUILD)/fuzz
# Every tests/fuzz/fuzz_<name>.c is a target: adding one touches no list.
FUZZ_NAMES         := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_TARGETS       := $(addprefix fuzz_,$(FUZZ_NAMES))
FUZZ_SAN           := $(ASAN_FLAGS)
FUZZ_CFLAGS        := $(C_DIALECT) -g -O2 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $(FUZZ_SAN) \
                      $(INCS) $(WARN)
FUZZ_OBJS          := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(CORE_SRCS))
# Kept between builds: make would otherwise delete them as intermediates of the pattern rule
# below, and compile the whole core again for every target.
.SECONDARY: $(FUZZ_OBJS)
# -max_len per target: a managed tensor of 64 dimensions and its values, a stack of 32 values,
# a problem and its values, a whole library (the fixtures are 16 to 23 KiB, and a truncated one
# is refused before its program headers are looked at twice).
FUZZ_MAX_LEN_dlpack    := 4096
FUZZ_MAX_LEN_boxed     := 2048
FUZZ_MAX_LEN_roi_align := 8192
FUZZ_MAX_LEN_backend   := 32768
FUZZ_LDFLAGS_backend   := -Wl,--wrap=dlopen -Wl,--wrap=dlerror

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-ledger $(addprefix fuzz-,$(FUZZ_NAMES)) $(addprefix fuzz-smoke-,$(FUZZ_NAMES))

# The CPU kernels without comparison tracing: their hot loops compare counters against sizes on
# every element, and those callbacks took a third of each execution (perf, fuzz_roi_align); edge
# coverage still guides the fuzzer through them. The checks (ops/, csrc/common), where magic
# values matter, keep it.
$(FUZZ_BUILD)/obj/csrc/cpu/%.o: FUZZ_OBJ_FLAGS := -fno-sanitize-coverage=trace-cmp

$(FUZZ_BUILD)/obj/%.o: %.c tests/fuzz/rules.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_OBJ_FLAGS) $(DEPFLAGS) -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -Itests/fuzz $< $(FUZZ_OBJS) -o $@ -fsanitize=fuzzer $(FUZZ_SAN) \
	  $(FUZZ_LDFLAGS_$*) -ldl -lpthread -lm

fuzz-build: deps $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))

# fuzz_backend's working corpus also starts from real libraries: the backend fixtures.
$(FUZZ_BUILD)/corpus/backend.seeded: $(addprefix $(BUILD)/fixtures/lib,$(addsuffix .so,$(DKT_FIXTURES)))
	@mkdir -p $(FUZZ_BUILD)/corpus/fuzz_backend
	@for f in $^; do cp -f $$f $(FUZZ_BUILD)/corpus/fuzz_backend/fixture_$$(basename $$f); done
	@touch $@

# $(1): the name, $(2): seconds, $(3): the seed (empty: random). run.sh replays
# tests/fuzz/regressions/<target>/ first.
define fuzz_run
	@mkdir -p $(FUZZ_BUILD)/corpus/fuzz_$(1) $(FUZZ_BUILD)/artifacts/fuzz_$(1)
	@FUZZ_SEED=$(3) nice -n $(FUZZ_NICE) sh tests/fuzz/run.sh $(FUZZ_BUILD)/fuzz_$(1) $(2) $(FUZZ_MAX_LEN_$(1)) \
	  $(FUZZ_BUILD)/artifacts/fuzz_$(1) tests/fuzz/regressions/fuzz_$(1) \
	  $(FUZZ_BUILD)/corpus/fuzz_$(1) tests/fuzz/corpus/fuzz_$(1)
endef

$(addprefix fuzz-,$(FUZZ_NAMES)): fuzz-%: deps $(FUZZ_BUILD)/fuzz_%
	$(call fuzz_run,$*,$(FUZZ_SECONDS),)
$(addprefix fuzz-smoke-,$(FUZZ_NAMES)): fuzz-smoke-%: deps $(FUZZ_BUILD)/fuzz_%
	$(call fuzz_run,$*,$(FUZZ_SMOKE_SECONDS),$(FUZZ_SMOKE_SEED))
fuzz-backend fuzz-smoke-backend: $(FUZZ_BUILD)/corpus/backend.seeded

# Every target, one after another (each is one process on one core); all of them run, and any
# finding fails the whole.
define fuzz_all
	@failed=""; for n in $(FUZZ_NAMES); do \
	  $(MAKE) --no-print-directory $(1)$$n || failed="$$failed fuzz_$$n"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzzing found problems in:$$failed (inputs in $(FUZZ_BUILD)/artifacts/)"; exit 1; fi
endef
fuzz: fuzz-build
	$(call fuzz_all,fuzz-)
fuzz-smoke: fuzz-build
	$(call fuzz_all,fuzz-smoke-)

# The campaign so far: every run's executions and findings, summed per target.
fuzz-ledger:
	@sh tests/fuzz/ledger.sh $(FUZZ_BUILD)/campaign.log
