# fuzz/fuzz.mk — the fuzz build (GNU make), apart from the normal gcc
# build: `make fuzz` runs it with the library sources and the flags that
# Makefile.am and configure know, so the two builds cannot drift apart.
# Every library source, and the examples' code a target feeds (the GPT
# checkpoint reader and model: no main() among them), is compiled again
# under OUT with clang, libFuzzer's coverage, AddressSanitizer and
# UndefinedBehaviorSanitizer (dependencies tracked: only what changed is
# rebuilt), and each fuzz/fuzz_NAME.c is linked with them into
# OUT/fuzz_NAME; a target links only the archive members it uses. No second configure: an
# out-of-tree build needs an unconfigured source tree, a build in place
# would overwrite the gcc objects.
#
#   make -f fuzz/fuzz.mk SRCDIR=. OUT=fuzz-build SOURCES='engine/error.c ...' \
#        FUZZ_CPPFLAGS='-I/usr/include/hdf5/serial ...' FUZZ_LIBS='-lhdf5 ...' [FUZZ_CC=clang]
FUZZ_CC ?= clang
SAN = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS = -std=c11 -g -O1 -fopenmp -D_GNU_SOURCE $(SAN) \
	-I$(SRCDIR)/engine -I$(SRCDIR)/dump -I$(SRCDIR)/debugger -I$(SRCDIR)/tui -I$(SRCDIR)/examples -I$(SRCDIR)/prof -I$(SRCDIR)/fuzz \
	-DTDBG_PLUGIN_PATH='"/nonexistent/libtdbg-debugger.so"' $(FUZZ_CPPFLAGS)

OBJS = $(patsubst %.c,$(OUT)/obj/%.o,$(filter %.c,$(SOURCES)))
TARGETS = $(patsubst $(SRCDIR)/fuzz/%.c,$(OUT)/%,$(filter-out %/fuzz_util.c,$(wildcard $(SRCDIR)/fuzz/fuzz_*.c)))

all: $(TARGETS)

$(OUT)/obj/%.o: $(SRCDIR)/%.c
	@mkdir -p $(@D)
	@echo "  FUZZCC   $<"
	@$(FUZZ_CC) -fsanitize=fuzzer-no-link $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(OUT)/libtdbg-fuzz.a: $(OBJS)
	@rm -f $@
	@ar rcs $@ $^

$(OUT)/fuzz_%: $(SRCDIR)/fuzz/fuzz_%.c $(SRCDIR)/fuzz/fuzz_util.c $(SRCDIR)/fuzz/fuzz.h $(OUT)/libtdbg-fuzz.a
	@echo "  FUZZLD   $@"
	@$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_CFLAGS) $(filter %.c,$^) $(OUT)/libtdbg-fuzz.a $(FUZZ_LIBS) -o $@

-include $(OBJS:.o=.d)
.PHONY: all
