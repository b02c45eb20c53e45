# dkit — one Makefile drives everything. The two commands a newcomer needs:
#   make demo    build dkit and run the demo
#   make test    build dkit and run every test (C under ASan/UBSan and TSan too, then Python)
# Both install what they need on a fresh Debian 12 machine (see `deps`).
# `make fuzz` runs the libFuzzer targets of tests/fuzz (FUZZ_SECONDS each); `make test` runs them
# briefly (fuzz-smoke).

CC      ?= gcc
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
NVCC    ?= /usr/local/cuda/bin/nvcc

, := ,

# Note [One description of the build]
# The core's folders and flags, dkit._C's and the torch extensions' are written once, in
# dkit_build.py, which setup.py imports too: `make python` links the Makefile's objects into the
# package setup.py builds (DKIT_CORE_OBJECTS), which is only right while both compile them alike.
# `dkit_build.py make-vars` writes them as Make variables into $(BUILD)/dkit_build.mk, again
# whenever dkit_build.py changes (make then reads its makefiles once more): CORE_DIRS,
# INCLUDE_DIRS, INCS, C_DIALECT, WARN, BASE (every build of the core), OPT, CORE_CFLAGS (BASE and
# OPT), CORE_LDLIBS, EXT_CFLAGS and EXT_INCS (dkit._C), TORCH_EXTS and TORCH_EXT_DEPS. The
# sanitizer and test builds add their own flags to these; torch's own flags are asked for only
# where a torch extension is built (pysan_rules), since they need torch imported.
# tests/python/test_packaging.py checks that no flag of it is written here or in setup.py again.
# Writing it needs $(PYTHON) before any target's `deps` has run, so on a machine without it yet it
# runs `make deps` itself first (which installs Python, and reads no description).
ifneq ($(MAKECMDGOALS),deps)
include $(BUILD)/dkit_build.mk
endif
$(BUILD)/dkit_build.mk: dkit_build.py
	@command -v $(PYTHON) >/dev/null 2>&1 || $(MAKE) --no-print-directory deps
	@mkdir -p $(@D)
	$(PYTHON) dkit_build.py make-vars >$@.tmp && mv $@.tmp $@

CFLAGS_ := $(CORE_CFLAGS) $(CFLAGS)
# The sanitizers of every sanitized build (the core, the C tests, the Python packages, the fuzz
# targets).
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
TSAN_FLAGS := -fsanitize=thread

# The core library is every .c file under CORE_DIRS: adding an op or a kernel file touches no
# list (setup.py finds the same files the same way).
CORE_SRCS := $(sort $(shell find $(CORE_DIRS) -name '*.c'))
HEADERS   := $(sort $(shell find $(CORE_DIRS) -name '*.h'))
# Note [Header dependencies]: every compile writes the headers it read into a .d file beside its
# output (-MMD -MP; nvcc's -MF), and the Makefile includes them all (at its end), so an edited
# header rebuilds what includes it and nothing else. A first build has no .d files and builds
# everything anyway. Programs and libraries that link libdkit.so dynamically need it to exist,
# not to be older than them (order-only, `| libdkit.so`): a core change that touches their
# interface is a header change, which their .d files already follow.
DEPFLAGS  = -MMD -MP

C_TESTS   := $(patsubst tests/c/%.c,%,$(wildcard tests/c/test_*.c))
# libclang-rt-<clang's version>-dev: libFuzzer and clang's sanitizer runtimes (tests/fuzz),
# named for the release's clang (14 on Debian 12, 19 on Debian 13).
HOST_CODENAME := $(shell . /etc/os-release 2>/dev/null; echo $$VERSION_CODENAME)
CLANG_RT  := $(if $(filter trixie,$(HOST_CODENAME)),19,14)
DEB_PKGS  := gcc make libcmocka-dev python3-dev python3-setuptools python3-numpy python3-pytest \
             python3-torch python3-torchvision valgrind \
             g++ libtorch-dev pybind11-dev python3-venv python3-pip python3-pytest-xdist clang \
             libclang-rt-$(CLANG_RT)-dev \
             debootstrap

.PHONY: all lib deps test test-c test-c-asan test-c-tsan test-python test-python-asan test-python-tsan demo bench bench-python bench-box-iou bench-callgrind bench-nms-callgrind vendor-example clean python test-installed test-debian13 test-debian-sid test-python-noreader gpu-check gpu-bundle dev
all: lib

# ---------------------------------------------------------------------------------------------
# Dependencies: apt-get when root, otherwise print the exact command and stop.
deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  else \
	    echo "dkit needs these Debian packages:$$missing"; \
	    echo "run:  sudo apt-get update && sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

# ---------------------------------------------------------------------------------------------
# The core library, in three flavours: optimised, ASan+UBSan, TSan. Each flavour's objects go
# to their own directory; tests link the shared library so every part sees one registry.
define core_rules
$(1)/obj/%.o: %.c
	@mkdir -p $$(dir $$@)
	$(CC) $(2) $$(DEPFLAGS) -c $$< -o $$@
$(1)/libdkit.so: $(patsubst %.c,$(1)/obj/%.o,$(CORE_SRCS))
	$(CC) -shared -o $$@ $$^ $(3) $(CORE_LDLIBS)
endef

$(eval $(call core_rules,$(BUILD),$(CFLAGS_),))
$(eval $(call core_rules,$(BUILD)/asan,$(BASE) -O1 -g -fno-omit-frame-pointer $(ASAN_FLAGS),$(ASAN_FLAGS)))
# TSan: parallel loops on threads TSan can see, not libgomp's (DK_PARALLEL_PTHREADS, dk_parallel.c).
$(eval $(call core_rules,$(BUILD)/tsan,$(BASE) -O1 -g $(TSAN_FLAGS) -DDK_PARALLEL_PTHREADS,$(TSAN_FLAGS)))

$(BUILD)/libdkit.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(CORE_SRCS))
	rm -f $@ && ar rcs $@ $^

lib: $(BUILD)/libdkit.so $(BUILD)/libdkit.a

# ---------------------------------------------------------------------------------------------
# C tests (cmocka). Each tests/c/test_X.c is one executable linked against libdkit.so.
# test_static_link and the backend fixtures have their own rules in tests/c/rules.mk.
TEST_CFLAGS := $(C_DIALECT) $(INCS) -Itests/c $(WARN) -Wno-unused-function -g

define test_rules
$(1)/tests/%: tests/c/%.c | $(1)/libdkit.so
	@mkdir -p $$(dir $$@)
	$(CC) $(TEST_CFLAGS) $(2) $$(DEPFLAGS) $$< -o $$@ -L$(1) -ldkit -Wl,-rpath,$$(abspath $(1)) -lcmocka -lpthread -ldl -lm
endef
$(eval $(call test_rules,$(BUILD),-O2 -fopenmp))
$(eval $(call test_rules,$(BUILD)/asan,-O1 $(ASAN_FLAGS)))
$(eval $(call test_rules,$(BUILD)/tsan,-O1 $(TSAN_FLAGS)))

-include tests/c/rules.mk
include csrc/gpu/rules.mk
# libFuzzer targets (make fuzz, make fuzz-smoke): after the C tests' rules, whose fixtures seed them.
-include tests/fuzz/rules.mk
# make lint, make format: clang-format and ruff.
include tests/lint/rules.mk

# cmocka prints its own "[  PASSED  ] N test(s)." summary per executable.
test-c: deps $(addprefix $(BUILD)/tests/,$(C_TESTS)) $(EXTRA_C_TEST_DEPS)
	@set -e; for t in $(C_TESTS); do echo "== $$t"; DK_TEST_BUILD=$(BUILD) $(BUILD)/tests/$$t; done
	@$(MAKE) --no-print-directory test-c-extra
	@$(MAKE) --no-print-directory test-gpu-emu

ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
test-c-asan: deps $(addprefix $(BUILD)/asan/tests/,$(C_TESTS))
	@set -e; for t in $(C_TESTS); do echo "== asan+ubsan $$t"; DK_TEST_BUILD=$(BUILD)/asan $(ASAN_ENV) $(BUILD)/asan/tests/$$t; done

# The threading tests under ThreadSanitizer. OpenMP is not instrumented, so only the core's own
# concurrency is checked here (these tests call no OpenMP kernel).
TSAN_TESTS := test_threads test_tls test_host_cache test_parallel
test-c-tsan: deps $(addprefix $(BUILD)/tsan/tests/,$(TSAN_TESTS))
	@set -e; for t in $(TSAN_TESTS); do echo "== tsan $$t"; \
	  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(BUILD)/tsan/tests/$$t; done

test: deps lint test-c test-c-asan test-c-tsan fuzz-smoke vendor-example gpu test-python test-python-noreader \
      test-python-asan test-python-tsan test-debian13

# ---------------------------------------------------------------------------------------------
# Python
# setup.py links the objects just compiled for $(BUILD)/libdkit.so (the same flags: Note [One
# description of the build]) instead of compiling the core a second time; without
# DKIT_CORE_OBJECTS (pip install) it compiles them.
# The GPU backends that were built (make gpu) are shipped beside _C, which loads them.
python: deps lib gpu
	DKIT_CORE_OBJECTS=$(BUILD)/obj DKIT_GPU_LIBS=$(BUILD) $(PYTHON) setup.py -q build_ext --inplace

# The inner loop: the core and the extension without the GPU libraries (their stale copies are
# removed from dkit/ so that none loads against a newer core; `make python` puts them back), the
# C tests, and the Python suite without its slow tests (pytest -x -m "not slow"), on every core
# (pytest-xdist). With header
# dependencies tracked (Note [Header dependencies]), an edit rebuilds only what it touches.
dev: deps lib $(addprefix $(BUILD)/tests/,$(C_TESTS))
	@rm -f dkit/libdkit_cuda.so dkit/libdkit_hip.so
	@DKIT_CORE_OBJECTS=$(BUILD)/obj $(PYTHON) setup.py -q build_ext --inplace
	@set -e; for t in $(C_TESTS); do \
	  DK_TEST_BUILD=$(BUILD) $(BUILD)/tests/$$t >$(BUILD)/tests/$$t.log 2>&1 || { cat $(BUILD)/tests/$$t.log; exit 1; }; \
	done; echo "C tests: $(words $(C_TESTS)) passed"
	$(PYTHON) -m pytest -x -q -p no:cacheprovider -m "not slow" -n $(shell nproc) tests/python $(PYTEST_ARGS)

test-python: python
	@if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then \
	  $(PYTHON) -m pytest -q -rs tests/python $(PYTEST_ARGS); \
	else echo "no Python tests yet"; fi

# The suite once more, against the copy `pip install .` makes (test-installed, below), with
# dkit._torch_reader not loaded (DKIT_TORCH_READER=0 at run time, Note [torch reader] in
# csrc/python/dk_pytorch.h): the reader is a shortcut, and no result may depend on it. Its own
# tests skip and say why.
test-python-noreader:
	@$(MAKE) --no-print-directory test-installed INSTALLED_ENV=DKIT_TORCH_READER=0

# PYTEST_ARGS: more arguments for pytest (make test-python PYTEST_ARGS="-k autocast -x"). Every suite
# runs with -rs, so that the log lists each skip and its reason, stack by stack.
# dkit as its users install it: `pip install .` into a fresh venv that sees the system's torch
# and NumPy (no registry: --no-index, and the system's setuptools: --no-build-isolation), then
# the Python suite from outside the source tree against that copy (DKIT_IMPORT_INSTALLED=1,
# tests/python/conftest.py). The venv is $(BUILD)/venv, made afresh each time.
# The GPU backends the Makefile built (make gpu) are installed with it (DKIT_GPU_LIBS, setup.py):
# INSTALLED_GPU_LIBS names their folder, $(BUILD) by default.
# INSTALLED_ENV: environment for the suite's run (test-python-noreader sets one).
VENV := $(BUILD)/venv
INSTALLED_GPU_LIBS ?= $(BUILD)
INSTALLED_ENV ?=
test-installed: deps gpu
	rm -rf $(VENV)
	$(PYTHON) -m venv --system-site-packages $(VENV)
	DKIT_GPU_LIBS=$(INSTALLED_GPU_LIBS) $(VENV)/bin/python -m pip install -q --no-build-isolation --no-deps --no-index .
	cd $(VENV) && $(INSTALLED_ENV) DKIT_IMPORT_INSTALLED=1 \
	  DKIT_GPU_LIBS_BUILT="$(notdir $(wildcard $(INSTALLED_GPU_LIBS)/libdkit_cuda.so $(INSTALLED_GPU_LIBS)/libdkit_hip.so))" \
	  bin/python -m pytest -q -rs -p no:cacheprovider $(abspath tests/python) $(PYTEST_ARGS)

# ---------------------------------------------------------------------------------------------
# The current stack: the C tests and the Python suite (against a pip-installed dkit) once more in
# a Debian 13 root with Python 3.13, torch 2.6, torchvision 0.21, numpy 2.x, setuptools 78 and
# GCC 14 (Note [The Debian 13 root] in tests/debian13/run.sh). Its objects go to
# $(BUILD)/debian13. The root has no nvcc or hipcc: the GPU backends built here (by Debian 12's
# compilers, against the same core ABI) are installed there, so that the GPU tests without a
# GPU (loading, registration, errors) run on both stacks. On a Debian 13 host the suites above
# already ran there.
test-debian13: deps gpu
	@if [ "$(HOST_CODENAME)" = trixie ]; then echo "test-debian13: this host is Debian 13, whose suites make test ran"; \
	else sh tests/debian13/run.sh make --no-print-directory -o deps -o gpu BUILD=$(BUILD)/debian13 PYTHON=/usr/bin/python3 \
	  DKIT_WITH_CUDA=0 DKIT_WITH_HIP=0 INSTALLED_GPU_LIBS=$(abspath $(BUILD)) test-c test-installed; fi

# The same on Debian unstable (torch 2.14, torchvision 0.27, NumPy 2.4, pytest 9, Python 3.14,
# GCC 16): not part of `make test`, because unstable moves under it; run it before a release
# and when a newer torch appears (tests/debian13/run.sh, DKIT_DEBIAN_SUITE).
# Only the CUDA library is installed there: the host's HIP library links ROCm 5's runtime
# (libamdhip64.so.5), and unstable has only ROCm 6's.
test-debian-sid: deps gpu
	@rm -rf $(BUILD)/sid-gpu-libs && mkdir -p $(BUILD)/sid-gpu-libs
	@if [ -f $(BUILD)/libdkit_cuda.so ]; then cp $(BUILD)/libdkit_cuda.so $(BUILD)/sid-gpu-libs/; fi
	DKIT_DEBIAN_SUITE=sid sh tests/debian13/run.sh make --no-print-directory -o deps -o gpu BUILD=$(BUILD)/debian-sid \
	  PYTHON=/usr/bin/python3 DKIT_WITH_CUDA=0 DKIT_WITH_HIP=0 INSTALLED_GPU_LIBS=$(abspath $(BUILD))/sid-gpu-libs \
	  test-c test-installed

# ---------------------------------------------------------------------------------------------
# The Python suite under sanitizers. Each flavour is a package of its own, $(BUILD)/<flavour>-py/dkit:
# the Python files copied, the core (the C tests' sanitizer build of it), the extension and the
# torch reader compiled with the sanitizer, and the headers; the in-place build (`make python`)
# is never touched. /usr/bin/python3 is not instrumented, so the sanitizer's runtime is preloaded
# into it (LD_PRELOAD, inherited by every child process a test starts); the tests import the
# flavour's package through DKIT_TEST_PACKAGE_ROOT (tests/python/conftest.py) and run from its
# folder, so that no `python -c` child finds the source tree's dkit first.
#   test-python-asan  the whole suite, AddressSanitizer + UndefinedBehaviorSanitizer; leaks are not
#                     reported (CPython leaks by design at exit).
#   test-python-tsan  the tests marked `threads` (pytest -m threads), ThreadSanitizer; parallel
#                     loops run on pthreads TSan can see (DK_PARALLEL_PTHREADS), so the kernels'
#                     sharing is checked, not only the core's. die_after_fork=0: the fork tests'
#                     children start threads of their own (Note [Fork safety]).
#                     report_thread_leaks=0: threads that others start and never join are not
#                     dkit's to report, and Debian 13's stack has them: torch loads UCX, whose
#                     'fuse' thread ends unjoined in every forked child, and Python 3.13's
#                     finished threads are reported at exit. The C TSan tests, whose threads are
#                     all dkit's, still report leaks.
PY_INC    := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT    := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PY_SRCS   := $(sort $(wildcard csrc/python/*.c))
PY_HDRS   := $(wildcard csrc/python/*.h)
PY_FILES  := $(shell find dkit -name '*.py')
# The extensions are compiled as setup.py compiles them (Note [One description of the build]),
# at PYSAN_OPT instead of its optimisation.
PYSAN_OPT    := -O1 -g -fno-omit-frame-pointer
PYSAN_CFLAGS := $(EXT_CFLAGS) -fPIC $(EXT_INCS) -I$(PY_INC) $(PYSAN_OPT)
# libstdc++ is preloaded after the runtime: torch throws C++ exceptions, and a sanitizer loaded
# before any libstdc++ finds no __cxa_throw to intercept ("CHECK failed ... real___cxa_throw").
CXX_RT    = $(shell $(CC) -print-file-name=libstdc++.so.6)
ASAN_RT   = $(shell $(CC) -print-file-name=libasan.so) $(CXX_RT)
TSAN_RT   = $(shell $(CC) -print-file-name=libtsan.so) $(CXX_RT)

# $(1) flavour (asan, tsan): its core is $(BUILD)/$(1)/libdkit.so; $(2) sanitizer flags
define pysan_rules
$(BUILD)/$(1)-py/dkit/.py: $(PY_FILES)
	@mkdir -p $$(@D)
	cd dkit && find . -name '*.py' -exec cp --parents {} $$(abspath $$(@D)) \;
	@touch $$@
$(BUILD)/$(1)-py/dkit/libdkit.so: $(BUILD)/$(1)/libdkit.so
	@mkdir -p $$(@D)
	cp $$< $$@
$(BUILD)/$(1)-py/dkit/_C$(PY_EXT): $(PY_SRCS) $(PY_HDRS) $(HEADERS) $(BUILD)/$(1)-py/dkit/libdkit.so
	$(CC) $(PYSAN_CFLAGS) $(2) -shared $(PY_SRCS) -o $$@ -L$$(@D) -ldkit -Wl,-rpath,'$$$$ORIGIN' $(EXT_LDFLAGS) $(2)
# The torch reader and the torch kernel holder where torch's C++ headers are, with the flags
# setup.py builds them with (torch's C++ standard and ABI, its headers and libraries:
# `dkit_build.py torch-flags`, which says why when there is no torch to build against), at
# PYSAN_OPT and with the sanitizer.
$(BUILD)/$(1)-py/dkit/.torch_reader: $(TORCH_EXT_DEPS) $(BUILD)/$(1)-py/dkit/_C$(PY_EXT) dkit_build.py
	@set -e; eval "$$$$($(PYTHON) dkit_build.py torch-flags)"; \
	if [ -n "$$$$TORCH_CXXFLAGS" ]; then \
	  for m in $(TORCH_EXTS); do \
	    cmd="$(CXX) $$$$TORCH_CXXFLAGS -I$(PY_INC) $(PYSAN_OPT) $(2) -fPIC -shared \
	      $$$${m#*:} -o $$(@D)/$$$${m%%:*}$(PY_EXT) $$$$TORCH_LDFLAGS"; echo "$$$$cmd"; $$$$cmd; \
	  done; \
	fi; touch $$@
$(BUILD)/$(1)-py/.ready: $(BUILD)/$(1)-py/dkit/.py $(BUILD)/$(1)-py/dkit/_C$(PY_EXT) $(BUILD)/$(1)-py/dkit/.torch_reader
	rm -rf $$(@D)/dkit/include && cp -r dkit/include $$(@D)/dkit/include
	@touch $$@
endef
$(eval $(call pysan_rules,asan,$(ASAN_FLAGS)))
$(eval $(call pysan_rules,tsan,$(TSAN_FLAGS)))

test-python-asan: python $(BUILD)/asan-py/.ready
	cd $(BUILD)/asan-py && DKIT_TEST_PACKAGE_ROOT=$(abspath $(BUILD)/asan-py) LD_PRELOAD="$(ASAN_RT)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(PYTHON) -m pytest -q -rs -p no:cacheprovider $(abspath tests/python)

test-python-tsan: python $(BUILD)/tsan-py/.ready
	cd $(BUILD)/tsan-py && DKIT_TEST_PACKAGE_ROOT=$(abspath $(BUILD)/tsan-py) LD_PRELOAD="$(TSAN_RT)" \
	  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:report_thread_leaks=0 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider -m threads $(abspath tests/python)

# ---------------------------------------------------------------------------------------------
# The whole GPU check on a machine with an NVIDIA GPU and no registry (tests/gpu-check.sh says
# what it runs; its logs go to build/gpu-check, or DKIT_GPU_LOGS). Such a machine has no cmocka:
# `make gpu-bundle`, on this Debian machine, fetches Debian's cmocka packages into
# build/gpu-bundle, which the GPU machine receives with the checkout and unpacks.
gpu-check:
	bash tests/gpu-check.sh

gpu-bundle:
	@mkdir -p $(BUILD)/gpu-bundle
	cd $(BUILD)/gpu-bundle && rm -f *.deb && apt-get download libcmocka0 libcmocka-dev
	@ls -l $(BUILD)/gpu-bundle

# ---------------------------------------------------------------------------------------------
# The main demo is the detection-style workload in Python; the C tour of the dispatcher follows.
demo: deps python $(BUILD)/demo_dispatch
	$(PYTHON) examples/demo.py
	@echo; echo "=== the dispatcher, from C ==="
	$(BUILD)/demo_dispatch

$(BUILD)/demo_dispatch: examples/demo_dispatch.c | $(BUILD)/libdkit.so
	$(CC) $(TEST_CFLAGS) -O2 $< -o $@ -L$(BUILD) -ldkit -Wl,-rpath,$(abspath $(BUILD))

bench: deps $(BUILD)/bench_dispatch
	$(BUILD)/bench_dispatch

# Every CPU benchmark against its peer, found by name (bench/bench_*.py; no list to keep): all
# but box_iou's (its own target, make bench-box-iou, for its size) and the GPU ones (make
# gpu-check runs those where there is a GPU).
BENCH_PY := $(sort $(filter-out bench/bench_box_iou.py bench/bench_gpu%.py,$(wildcard bench/bench_*.py)))
bench-python: python
	@set -e; for b in $(BENCH_PY); do echo "== $$b"; $(PYTHON) $$b; done

bench-box-iou: python
	$(PYTHON) bench/bench_box_iou.py

$(BUILD)/bench_dispatch: bench/bench_dispatch.c | $(BUILD)/libdkit.so
	$(CC) $(TEST_CFLAGS) -O2 $< -o $@ -L$(BUILD) -ldkit -Wl,-rpath,$(abspath $(BUILD))

# Instructions per call of each dispatch path, counted by valgrind's callgrind.
bench-callgrind: deps $(BUILD)/bench_dispatch
	sh bench/callgrind.sh $(BUILD)/bench_dispatch

# Instructions per call of the CPU nms on bench_nms.py's problems, counted the same way.
$(BUILD)/bench_nms_cg: bench/bench_nms_cg.c | $(BUILD)/libdkit.so
	$(CC) $(TEST_CFLAGS) -O2 $< -o $@ -L$(BUILD) -ldkit -Wl,-rpath,$(abspath $(BUILD)) -lm

bench-nms-callgrind: deps $(BUILD)/bench_nms_cg
	sh bench/callgrind.sh $(BUILD)/bench_nms_cg

# The out-of-tree vendor backend, built against build/ the way a vendor builds against an
# install, then checked: ops on its device must equal the CPU results.
vendor-example: $(BUILD)/libdkit.so
	$(MAKE) --no-print-directory -C examples/vendor_backend check \
	  DKIT_INCLUDE="$(abspath $(INCLUDE_DIRS))" DKIT_LIB=$(abspath $(BUILD)) \
	  OUT=$(abspath $(BUILD))/vendor_backend

clean:
	rm -rf $(BUILD) dkit/*.so dkit/_C*.so

# Note [Header dependencies]: the headers each object, test and library was built from.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
