# tests/c/rules.mk — extra rules for the C tests, included by the Makefile.
#
#  1. Backend fixtures: small shared libraries built from tests/c/fixtures/backend_*.c that link
#     libdkit, one set per flavour ($(BUILD)/fixtures and $(BUILD)/asan/fixtures). test_backend and
#     test_backend_elf find them through DK_TEST_BUILD, which the Makefile sets to the flavour's
#     build directory.
#  2. The static-link test: libdkit.a plus kernels that register themselves with
#     DK_REGISTER_DEVICE_IMPL (one object, one archive linked with --whole-archive), linked with
#     -ffunction-sections -fdata-sections -Wl,--gc-sections; built twice, with libdkit.a as an
#     ordinary archive and as a whole archive. Run by test-c-extra (make test-c runs it).

DKT_FIXTURES     := backend_good backend_noinit backend_plain backend_badabi backend_failinit \
                    backend_halfinit backend_object backend_oldschema \
                    backend_removedop
DKT_FIXTURE_SRCS := $(addprefix tests/c/fixtures/,$(addsuffix .c,$(DKT_FIXTURES)))
DKT_FIXTURE_CFLAGS := $(C_DIALECT) -fPIC -shared $(INCS) $(WARN) -g

# $(1) build directory of the flavour, $(2) its compiler flags
define dkt_fixture_rules
$(1)/fixtures/lib%.so: tests/c/fixtures/%.c | $(1)/libdkit.so
	@mkdir -p $$(dir $$@)
	$(CC) $(DKT_FIXTURE_CFLAGS) $(2) $$(DEPFLAGS) $$< -o $$@ -L$(1) -ldkit -Wl,-rpath,$$(abspath $(1))
# test_backend and test_backend_elf need them when they run; order-only, so the recipe stays the
# pattern rule's.
$(1)/tests/test_backend $(1)/tests/test_backend_elf: | $(addprefix $(1)/fixtures/lib,$(addsuffix .so,$(DKT_FIXTURES)))
endef
$(eval $(call dkt_fixture_rules,$(BUILD),-O2))
$(eval $(call dkt_fixture_rules,$(BUILD)/asan,-O1 -fno-omit-frame-pointer $(ASAN_FLAGS)))

# --- static link -------------------------------------------------------------------------------
DKT_STATIC       := $(BUILD)/static_link
DKT_STATIC_FLAGS := $(TEST_CFLAGS) -Itests/c/fixtures -O2 -ffunction-sections -fdata-sections
# libdkit.a needs the libraries libdkit.so links (CORE_LDLIBS, dkit_build.py)
DKT_STATIC_LIBS  := -lcmocka $(CORE_LDLIBS)

$(DKT_STATIC)/%.o: tests/c/fixtures/%.c
	@mkdir -p $(dir $@)
	$(CC) $(DKT_STATIC_FLAGS) $(DEPFLAGS) -c $< -o $@

$(DKT_STATIC)/main_whole.o: tests/c/fixtures/static_link_main.c
	@mkdir -p $(dir $@)
	$(CC) $(DKT_STATIC_FLAGS) $(DEPFLAGS) -DDKT_WHOLE_LIBDKIT -c $< -o $@

$(DKT_STATIC)/libstatic_kernels.a: $(DKT_STATIC)/static_kernel_ar.o
	rm -f $@ && ar rcs $@ $^

# libdkit.a as an ordinary archive: only the members the program references are linked.
$(DKT_STATIC)/test_static_link: $(DKT_STATIC)/static_link_main.o $(DKT_STATIC)/static_kernel_obj.o \
                                $(DKT_STATIC)/libstatic_kernels.a $(BUILD)/libdkit.a
	$(CC) -o $@ $(DKT_STATIC)/static_link_main.o $(DKT_STATIC)/static_kernel_obj.o \
	  -Wl,--whole-archive $(DKT_STATIC)/libstatic_kernels.a -Wl,--no-whole-archive \
	  $(BUILD)/libdkit.a -Wl,--gc-sections $(DKT_STATIC_LIBS)

# libdkit.a as a whole archive: the core's own load-time registrations come along.
$(DKT_STATIC)/test_static_link_whole: $(DKT_STATIC)/main_whole.o $(DKT_STATIC)/static_kernel_obj.o \
                                      $(DKT_STATIC)/libstatic_kernels.a $(BUILD)/libdkit.a
	$(CC) -o $@ $(DKT_STATIC)/main_whole.o $(DKT_STATIC)/static_kernel_obj.o \
	  -Wl,--whole-archive $(DKT_STATIC)/libstatic_kernels.a $(BUILD)/libdkit.a -Wl,--no-whole-archive \
	  -Wl,--gc-sections $(DKT_STATIC_LIBS)

DKT_STATIC_TESTS  := $(DKT_STATIC)/test_static_link $(DKT_STATIC)/test_static_link_whole
EXTRA_C_TEST_DEPS += $(addprefix $(BUILD)/fixtures/lib,$(addsuffix .so,$(DKT_FIXTURES))) $(DKT_STATIC_TESTS)

.PHONY: test-c-extra
test-c-extra: $(DKT_STATIC_TESTS)
	@set -e; for t in $(DKT_STATIC_TESTS); do \
	  echo "== $$(basename $$t) (static libdkit.a, --gc-sections)"; \
	  if ldd $$t | grep -q libdkit; then echo "$$t links libdkit dynamically" >&2; exit 1; fi; \
	  if nm $$t | grep -q static_kernel_unused; then \
	    echo "$$t: --gc-sections kept an unreferenced function; the test proves nothing" >&2; exit 1; fi; \
	  $$t; \
	done
