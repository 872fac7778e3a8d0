# tests/fuzz/fuzz.mk — libFuzzer targets (included by the Makefile).
#
#   make fuzz         build each target with clang (libFuzzer + ASan + UBSan)
#                     and fuzz it for FUZZ_SECONDS (default 60) from its seed
#                     corpus; new inputs go to build/fuzz/corpus/<name>,
#                     crashes to build/fuzz/crash-<name>-*
#   make fuzz-replay  run every stored corpus input once under libFuzzer
#   BUILD/tests/test_fuzz_<name>
#                     the same corpora replayed by an ordinary (gcc) build,
#                     so tests/run.sh runs them in `make test` and `make asan`
#                     (add $(FUZZ_REPLAY_BIN) to the test prerequisites)
#
# Targets: fuzz_request (every route from raw body bytes, in-process through
# api_handle; POST /v1/attention a second way too, through api/early.c's
# decoder, which ATTND_FUZZ_EARLY lets 64-byte strings into), fuzz_base64
# (tensor codec), fuzz_sessions (store operation
# sequences with invariants), fuzz_persist (restoring --state-dir files),
# fuzz_journal (start-up from a damaged snapshot and journal),
# fuzz_numbers (number reader vs jansson, shortest printing round trips),
# fuzz_half (float16/bfloat16 printers and exact reader), fuzz_import
# (POST /v1/sessions/import's parser, limits and round trip). A
# crash found becomes a file in
# tests/fuzz/corpus/<name>/ (named regress-*) so it is replayed forever.

FUZZ_BUILD    ?= build/fuzz
FUZZ_SECONDS  ?= 60
FUZZ_CC       ?= clang
FUZZ_NAMES    := request base64 sessions persist numbers journal half import
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                 -fno-omit-frame-pointer
FUZZ_CFLAGS   := -std=c11 -D_GNU_SOURCE -g -O1 -march=native $(WARN) $(FUZZ_SAN) \
                 -fsanitize=fuzzer-no-link -DATTND_VERSION='"$(VERSION)"' -I. \
                 -DATTND_FUZZ_EARLY \
                 $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
FUZZ_OBJ      := $(CORE_SRC:%.c=$(FUZZ_BUILD)/obj/%.o) $(API_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BIN      := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_REPLAY_BIN := $(FUZZ_NAMES:%=$(BUILD)/tests/test_fuzz_%)

.PHONY: fuzz fuzz-build fuzz-replay fuzz-deps $(FUZZ_NAMES:%=fuzz-run-%)

fuzz-deps: deps
	$(call install_missing,clang libclang-rt-dev)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) -o $@ $(LDLIBS)

$(BUILD)/tests/test_fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(API_OBJ) $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DFUZZ_NAME='"$*"' $< tests/fuzz/replay_main.c $(API_OBJ) $(CORE_OBJ) \
	  -o $@ $(LDFLAGS) $(LDLIBS)

# The top Makefile again (it includes this fragment).
FUZZ_MAKEFILES := -f $(firstword $(MAKEFILE_LIST))

fuzz-build: fuzz-deps
	@$(MAKE) --no-print-directory $(FUZZ_MAKEFILES) $(FUZZ_BIN)

# The targets fuzz side by side, one per CPU (FUZZ_JOBS): each libFuzzer
# process is single-threaded, so on 2 cores the 8 targets take 4 × 60 s
# instead of 8 × 60 s, at the same executions per target.
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)

fuzz: fuzz-build
	@$(MAKE) --no-print-directory $(FUZZ_MAKEFILES) -j$(FUZZ_JOBS) --output-sync=target \
	  $(FUZZ_NAMES:%=fuzz-run-%)

$(FUZZ_NAMES:%=fuzz-run-%): fuzz-run-%:
	@mkdir -p $(FUZZ_BUILD)/corpus/$*
	@echo "fuzz: fuzz_$* for $(FUZZ_SECONDS) s"
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(FUZZ_BUILD)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 -dict=tests/fuzz/attnd.dict \
	    -artifact_prefix=$(FUZZ_BUILD)/crash-$*- \
	    $(FUZZ_BUILD)/corpus/$* tests/fuzz/corpus/$* 2>$(FUZZ_BUILD)/fuzz_$*.log \
	    || { tail -n 60 $(FUZZ_BUILD)/fuzz_$*.log; exit 1; }
	@grep -E '^(stat::number_of_executed_units|#[0-9]+ +DONE)' $(FUZZ_BUILD)/fuzz_$*.log
	@echo "fuzz: fuzz_$* corpus $$(find $(FUZZ_BUILD)/corpus/$* tests/fuzz/corpus/$* -type f | wc -l) inputs"

fuzz-replay: fuzz-build
	@for t in $(FUZZ_NAMES); do \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  $(FUZZ_BUILD)/fuzz_$$t -runs=0 -artifact_prefix=$(FUZZ_BUILD)/replay-crash-$$t- \
	    tests/fuzz/corpus/$$t 2>$(FUZZ_BUILD)/replay_$$t.log \
	    || { tail -n 60 $(FUZZ_BUILD)/replay_$$t.log; exit 1; }; \
	  echo "fuzz-replay: fuzz_$$t $$(ls tests/fuzz/corpus/$$t | wc -l) inputs ok"; \
	done
-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
.SECONDARY: $(FUZZ_OBJ)
