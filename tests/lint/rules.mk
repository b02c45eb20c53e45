# tests/lint/rules.mk — formatting and lint, included by the Makefile.
#
#   make lint    fails on a C, C++ or CUDA source that clang-format would change (.clang-format),
#                and on what `ruff check` finds in the Python files ([tool.ruff] in
#                pyproject.toml); part of `make test`
#   make format  rewrites the C, C++ and CUDA sources as clang-format formats them, and applies
#                ruff's automatic fixes (`ruff check --fix`; ruff's formatter is not used)
#
# clang-format is pinned to version 14, Debian 12's (its `clang-format` package): each release
# formats some constructs differently, so the tree is formatted by one version only. Where
# clang-format-14 is missing (Debian 13 has 19), the C check says so and is skipped.
# Ruff comes from Debian unstable and runs in the Debian 13 root on a Debian 12 host: Note
# [Where ruff comes from] in tests/lint/ruff.sh.
# The sources are what git tracks with these extensions (tests/fuzz/corpus and regressions hold
# fuzzer inputs, named without one); outside a git checkout, the same extensions under the
# source folders.

CLANG_FORMAT ?= clang-format-14
LINT_C_EXTS  := '*.c' '*.h' '*.cu' '*.cuh' '*.cpp'
LINT_C_FILES  = { git ls-files $(LINT_C_EXTS) 2>/dev/null || \
                  find csrc ops tests bench examples -type f \( $(patsubst %,-name % -o,$(LINT_C_EXTS)) -false \); }
DEB_PKGS     += clang-format

.PHONY: lint lint-c lint-python format
lint: lint-c lint-python

lint-c: deps
	@if ! command -v $(CLANG_FORMAT) >/dev/null 2>&1; then \
	  echo "lint-c: $(CLANG_FORMAT) not found (Debian 12's clang-format package): C formatting NOT checked"; \
	else \
	  out=$$($(LINT_C_FILES) | xargs -r -d '\n' $(CLANG_FORMAT) --dry-run -Werror --ferror-limit=1 2>&1); rc=$$?; \
	  bad=$$(echo "$$out" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u); \
	  if [ $$rc != 0 ] && [ -z "$$bad" ]; then echo "$$out"; echo "lint-c: $(CLANG_FORMAT) failed"; exit 1; fi; \
	  if [ -n "$$bad" ]; then \
	    echo "lint-c: these files are not formatted as .clang-format says ($(CLANG_FORMAT)):"; \
	    echo "$$bad" | sed 's/^/  /'; \
	    echo "fix:  make format   (or: $(CLANG_FORMAT) -i FILE...)"; exit 1; \
	  fi; \
	  echo "lint-c: $$($(LINT_C_FILES) | wc -l) C, C++ and CUDA files formatted ($(CLANG_FORMAT))"; \
	fi

lint-python: deps
	@BUILD=$(BUILD) sh tests/lint/ruff.sh check --no-cache . || { \
	  echo "lint-python: fix what ruff found (make format applies its automatic fixes)"; exit 1; }

format: deps
	@if ! command -v $(CLANG_FORMAT) >/dev/null 2>&1; then \
	  echo "format: $(CLANG_FORMAT) not found (Debian 12's clang-format package)"; exit 1; fi
	@echo "format: $(CLANG_FORMAT) -i on the C, C++ and CUDA sources"; \
	$(LINT_C_FILES) | xargs -r -d '\n' $(CLANG_FORMAT) -i
	@echo "format: ruff check --fix on the Python files"; \
	BUILD=$(BUILD) sh tests/lint/ruff.sh check --no-cache --fix --exit-zero .
