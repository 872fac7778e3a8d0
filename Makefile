# attnd — build, run, test. `make run` and `make test` set up a fresh Debian
# machine themselves (they depend on `deps`). All outputs go under build/.

VERSION    := 0.1.0
BUILD      ?= build
CC         ?= cc
SANFLAGS   ?=
OPT        ?= -O2 -march=native
PYTHON     ?= /usr/bin/python3
PKG_CONFIG ?= pkg-config

WARN       := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
              -Wmissing-prototypes -Wformat=2 -Wvla
ifeq ($(CI),true)
WARN       += -Werror
endif
ifeq ($(WERROR),1)
WARN       += -Werror
endif

PKGS       := libmicrohttpd jansson libuv openblas gnutls
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) $(SANFLAGS) \
              -DATTND_VERSION='"$(VERSION)"' -I.
CFLAGS     := $(BASE_CFLAGS) $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
LDLIBS     := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null) -lm -lpthread
LDFLAGS    := $(SANFLAGS)

# Debian packages: to build and run, and in addition to test.
DEPS_RUN   := gcc make pkg-config libmicrohttpd-dev libjansson-dev \
              libopenblas-dev libuv1-dev libgnutls28-dev
BROWSER    ?= 1
DEPS_TEST  := $(DEPS_RUN) python3 python3-pytest python3-prometheus-client \
              python3-yaml python3-dnspython python3-torch curl git nginx wrk valgrind \
              openssl
ifeq ($(BROWSER),1)
DEPS_TEST  += chromium nodejs
endif

CORE_SRC   := $(wildcard core/*.c)
API_SRC    := $(wildcard api/*.c api/codec/*.c api/v2/*.c)
SRV_SRC    := $(wildcard server/*.c)
CORE_OBJ   := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
API_OBJ    := $(API_SRC:%.c=$(BUILD)/obj/%.o)
SRV_OBJ    := $(SRV_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/server/web_assets.o

UNIT_SRC   := $(wildcard tests/unit/test_*.c)
APIT_SRC   := $(wildcard tests/api/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
APIT_BIN   := $(APIT_SRC:tests/api/%.c=$(BUILD)/tests/%)
WEB_FILES  := $(sort $(wildcard server/web/*))

.PHONY: all run test asan tsan valgrind bench fuzz docker \
        clean deps deps-test deps-npm deps-bench deps-slow deps-arm64 test-arm64 \
        deps-container test-container

# Without the -dev packages (pkg-config finds none of them), `make` installs
# them first as `make run` does (as root; otherwise it prints the apt-get
# command) instead of stopping at a missing header.
HAVE_PKGS := $(shell pkg-config --exists $(PKGS) 2>/dev/null && echo yes)
ifeq ($(HAVE_PKGS),yes)
all: $(BUILD)/attnd
else ifeq ($(DEPS_TRIED),)
all:
	@echo "attnd: the build needs the packages of 'make deps' (pkg-config does not find all of $(PKGS))"
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory DEPS_TRIED=1 all
else
all:
	@echo "attnd: pkg-config still does not find all of $(PKGS) after 'make deps'"; exit 1
endif

# libFuzzer targets: fuzz, fuzz-replay, fuzz-build, and the gcc-built corpus
# replayers $(FUZZ_REPLAY_BIN) that `make test` runs.
include tests/fuzz/fuzz.mk

# ---- dependencies -------------------------------------------------------
# Installs what is missing with apt-get when root; otherwise prints the exact
# command. Silent and fast when everything is present.
define install_missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  else \
	    echo "deps: missing packages; run:  sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
endef

deps:
	$(call install_missing,$(DEPS_RUN))

deps-test:
	$(call install_missing,$(DEPS_TEST))
	@for d in tests/browser tests/k8s; do \
	  if [ "$(BROWSER)" = 1 ] && [ -f $$d/package.json ] && { [ ! -d $$d/node_modules ] || \
	      [ $$d/package-lock.json -nt $$d/node_modules/.package-lock.json ]; }; then \
	    command -v npm >/dev/null || $(MAKE) --no-print-directory deps-npm || exit 1; \
	    echo "deps: npm ci ($$d)"; \
	    (cd $$d && npm ci --silent --no-audit --no-fund) || exit 1; \
	  fi; \
	done

# The slow suite's extra tools (.ci/run): testssl.sh scans the HTTPS setup.
deps-slow:
	$(call install_missing,testssl.sh)

# Debian ships npm apart from nodejs (NodeSource's nodejs includes it).
deps-npm:
	$(call install_missing,npm)

# ---- build --------------------------------------------------------------
# Layers: each layer's objects compile with only its own dependencies'
# include paths, and a directory first on the path whose stand-ins for the
# headers of the layers above stop the build: core/ cannot include jansson,
# libmicrohttpd, libuv or GnuTLS, api/ cannot include libmicrohttpd, libuv,
# GnuTLS or BLAS (core's).
LAYER_DENY_core := jansson.h microhttpd.h uv.h gnutls/gnutls.h
LAYER_DENY_api  := microhttpd.h uv.h gnutls/gnutls.h cblas.h
OBJ_CFLAGS  = $(CFLAGS)
$(BUILD)/obj/core/%.o: OBJ_CFLAGS = -I$(BUILD)/layers/core $(BASE_CFLAGS) \
              $(shell $(PKG_CONFIG) --cflags openblas 2>/dev/null)
$(BUILD)/obj/api/%.o: OBJ_CFLAGS = -I$(BUILD)/layers/api $(BASE_CFLAGS) \
              $(shell $(PKG_CONFIG) --cflags jansson 2>/dev/null)

$(BUILD)/layers/.stamp: Makefile
	@rm -rf $(BUILD)/layers
	@for l in core api; do mkdir -p $(BUILD)/layers/$$l; done
	@for h in $(LAYER_DENY_core); do mkdir -p $$(dirname $(BUILD)/layers/core/$$h); \
	  printf '#error "core/ may not include <%s>: core knows neither HTTP, JSON nor the loop"\n' $$h \
	  > $(BUILD)/layers/core/$$h; done
	@for h in $(LAYER_DENY_api); do mkdir -p $$(dirname $(BUILD)/layers/api/$$h); \
	  printf '#error "api/ may not include <%s>: the transport, the loop and BLAS are server/'"'"'s or core/'"'"'s"\n' $$h \
	  > $(BUILD)/layers/api/$$h; done
	@touch $@

$(BUILD)/obj/%.o: %.c | $(BUILD)/layers/.stamp
	@mkdir -p $(dir $@)
	$(CC) $(OBJ_CFLAGS) -MMD -MP -c $< -o $@

# The demo page and other static files are embedded into the binary.
$(BUILD)/obj/server/web_assets.c: $(WEB_FILES) server/embed.sh
	@mkdir -p $(dir $@)
	sh server/embed.sh $@ $(WEB_FILES)

$(BUILD)/obj/server/web_assets.o: $(BUILD)/obj/server/web_assets.c
	$(CC) $(CFLAGS) -c $< -o $@

# attnd exports its gnutls_record_recv and gnutls_handshake so that
# libmicrohttpd binds to them (server/tls_alerts.c says why).
$(BUILD)/attnd: $(SRV_OBJ) $(API_OBJ) $(CORE_OBJ)
	$(CC) $(LDFLAGS) -Wl,--export-dynamic-symbol=gnutls_record_recv \
	  -Wl,--export-dynamic-symbol=gnutls_handshake $^ -o $@ $(LDLIBS)

$(BUILD)/tests/test_%: tests/unit/test_%.c $(CORE_OBJ) tests/harness.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/test_%: tests/api/test_%.c $(API_OBJ) $(CORE_OBJ) tests/harness.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< $(API_OBJ) $(CORE_OBJ) -o $@ $(LDFLAGS) $(LDLIBS)

# Tests that step in between the layers, wrapped at link time: the calls
# the core and api objects make to these functions go to the test's
# __wrap_ ones (test_replay_reads fails chosen reads of the state files,
# test_replay_holes SEEK_DATA).
$(BUILD)/tests/test_api_idem_concurrency: LDFLAGS += -Wl,--wrap=jnl_append \
                                                   -Wl,--wrap=sess_idem_find
$(BUILD)/tests/test_idem_restore: LDFLAGS += -Wl,--wrap=jnl_append
$(BUILD)/tests/test_replay_reads: LDFLAGS += -Wl,--wrap=pread -Wl,--wrap=read
$(BUILD)/tests/test_replay_holes: LDFLAGS += -Wl,--wrap=lseek

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- run and test -------------------------------------------------------
run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/attnd --host 127.0.0.1 --port 8080

test: deps-test
	@$(MAKE) --no-print-directory all $(UNIT_BIN) $(APIT_BIN) $(FUZZ_REPLAY_BIN)
	@ATTND_BROWSER=$(BROWSER) sh tests/run.sh $(BUILD)

# Whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps-test
	@$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -march=native" \
	  SANFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  all build/asan/tests/.stamp
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  sh tests/run.sh build/asan

# Concurrency tests under ThreadSanitizer.
tsan: deps-test
	@$(MAKE) --no-print-directory BUILD=build/tsan OPT="-O1 -march=native" \
	  SANFLAGS="-fsanitize=thread" all build/tsan/tests/.stamp
	@# test_attn holds the core's helper-pool tests; OpenBLAS's own threads
	@# are not ours to check (the server runs BLAS single-threaded too).
	@TSAN_OPTIONS=halt_on_error=1:allocator_may_return_null=1 OPENBLAS_NUM_THREADS=1 \
	  ATTND_TEST_ONLY=concurrency sh tests/run.sh build/tsan

$(BUILD)/tests/.stamp: $(UNIT_BIN) $(APIT_BIN) $(FUZZ_REPLAY_BIN)
	@touch $@

# arm64: cross-built with Debian's aarch64 gcc against the arm64 -dev
# packages (multiarch: dpkg --add-architecture arm64), then the C unit and
# in-process api tests under qemu-user (no binfmt needed: run.sh puts
# qemu-aarch64 before each test). Portable code only (-O2, no -march):
# the x86 kernels compile out, and the suite checks the portable paths.
# ATTND_TEST_QUICK=1: the randomized reference tests run a tenth of their
# cases (long double is software binary128 on aarch64, under emulation).
ARM64_DEPS := gcc-aarch64-linux-gnu qemu-user file libc6-dev:arm64 libmicrohttpd-dev:arm64 \
              libjansson-dev:arm64 libopenblas-dev:arm64 libuv1-dev:arm64 \
              libgnutls28-dev:arm64
ARM64_PC   := env PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig pkg-config

deps-arm64:
	@dpkg --print-foreign-architectures | grep -qx arm64 || \
	  if [ "$$(id -u)" = 0 ]; then echo "deps: adding the arm64 architecture"; \
	    dpkg --add-architecture arm64 && DEBIAN_FRONTEND=noninteractive apt-get update -qq || exit 1; \
	  else echo "deps: run:  sudo dpkg --add-architecture arm64 && sudo apt-get update"; exit 1; fi
	$(call install_missing,$(ARM64_DEPS))

# The container image built and run with podman from a locally made base
# (tests/container/test_container.py says what it checks); run by .ci/run,
# not by make test. ARM64=1 also builds it for linux/arm64 through
# qemu-user-static (binfmt), ARM64_TESTS=c|none its tests under emulation,
# which is slow (docs/benchmarks.md, section "NEON (arm64)"), so the arm64
# part is for occasional runs, not .ci/run.
# The dnsname CNI plugin gives podman's networks (CNI backend on Debian 12)
# their DNS: the compose test reaches the replicas by service name and alias.
DEPS_CONTAINER := podman runc golang-github-containernetworking-plugin-dnsname mmdebstrap \
  arch-test qemu-user-static binfmt-support python3 python3-yaml curl

deps-container:
	$(call install_missing,$(DEPS_CONTAINER))

test-container: deps-container
	@$(PYTHON) tests/container/test_container.py $(BUILD)

test-arm64: deps-arm64
	@# -fno-tree-loop-vectorize: Debian's aarch64 gcc 12 stops with an internal
	@# compiler error (vect_transform_reduction) in tests/unit/test_kv_lowp.c
	@$(MAKE) --no-print-directory BUILD=build/arm64 CC=aarch64-linux-gnu-gcc \
	  OPT="-O2 -fno-tree-loop-vectorize" \
	  PKG_CONFIG="$(ARM64_PC)" build/arm64/attnd build/arm64/tests/.stamp
	@file build/arm64/attnd | grep -q 'ARM aarch64' || { echo "test-arm64: not an aarch64 binary"; exit 1; }
	@# the NEON loops (core/simd_neon.h) are in the pass: with the loop
	@# vectoriser off, every fmla there comes from them
	@aarch64-linux-gnu-objdump -d build/arm64/obj/core/attn.o | grep -q 'fmla' || \
	  { echo "test-arm64: no NEON loops in core/attn.o"; exit 1; }
	@# the journal's CRC-32C has its ARMv8 instruction path (qemu has it)
	@aarch64-linux-gnu-objdump -d build/arm64/obj/core/journal.o | grep -q 'crc32cx' || \
	  { echo "test-arm64: no crc32cx in core/journal.o"; exit 1; }
	@QEMU_LD_PREFIX=/ ATTND_TEST_EXEC=qemu-aarch64 ATTND_TEST_QUICK=1 ATTND_TEST_ONLY=c \
	  sh tests/run.sh build/arm64

valgrind: deps-test
	@# valgrind cannot execute AVX-512: build for x86-64-v3 here.
	@$(MAKE) --no-print-directory BUILD=build/vg OPT="-O2 -march=x86-64-v3" all build/vg/tests/.stamp
	@# ATTND_TEST_QUICK=1: memcheck runs the code tens of times slower, so
	@# the randomized and many-case tests run their quick sets (every path,
	@# fewer cases), as under qemu. Two tests at a time: memcheck runs each
	@# on one CPU.
	@ATTND_VALGRIND=1 ATTND_TEST_QUICK=1 ATTND_TEST_ONLY=c ATTND_TEST_JOBS=2 \
	  sh tests/run.sh build/vg

# Peers measured side by side: numpy, the FastAPI service of ../shared/bench,
# and libmicrohttpd's hello server (built from ../shared into build/).
DEPS_BENCH := $(DEPS_RUN) wrk curl python3 python3-numpy python3-fastapi \
              python3-uvicorn python3-uvloop python3-httptools

deps-bench:
	$(call install_missing,$(DEPS_BENCH))

bench: deps-bench
	@$(MAKE) --no-print-directory all $(BUILD)/bench/bench_core \
	  $(BUILD)/bench/bench_api $(BUILD)/bench/mhd_server $(BUILD)/bench/bench_roll \
	  $(BUILD)/bench/bench_pool
	@sh tests/bench/run.sh $(BUILD)

$(BUILD)/bench/bench_core: tests/bench/bench_core.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/bench_pool: tests/bench/bench_pool.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/bench_roll: tests/bench/bench_roll.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/bench_api: tests/bench/bench_api.c $(API_OBJ) $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(API_OBJ) $(CORE_OBJ) -o $@ $(LDFLAGS) $(LDLIBS)

# The HTTP limit of RESULTS.md, built as its own Makefile builds it.
$(BUILD)/bench/mhd_server: ../shared/bench/mhd_server.c
	@mkdir -p $(dir $@)
	$(CC) -O3 -march=native -pthread $< -o $@ \
	  $(shell pkg-config --cflags --libs libmicrohttpd jansson 2>/dev/null)

docker:
	@if docker info >/dev/null 2>&1; then \
	  docker build -f docker/Dockerfile --build-arg VERSION=$(VERSION) -t attnd:$(VERSION) . ; \
	else echo "docker: no Docker engine on this machine; see docker/"; fi

clean:
	rm -rf build
