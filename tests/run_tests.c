/* run_tests.c — runs every suite; CK_RUN_SUITE / CK_RUN_CASE select a subset. */
#include "suites.h"

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    /* The example programs the tests start inherit this (sanitizer builds). */
    setenv("LSAN_OPTIONS", "suppressions=" TDBG_SRCDIR "/tests/lsan.supp", 0);
    /* A failure's message often holds a whole session's output, which
     * Check cuts at BUFSIZ (8 KiB) when it formats it; its default limit
     * (4 KiB) ended such a test with "Early exit with return value 2"
     * instead, the message lost. Not more: the runner moves twice the
     * limit for every message it reads, a passing check's included. */
    check_set_max_msg_size(16 << 10);
    SRunner *sr = srunner_create(suite_core());
    srunner_add_suite(sr, suite_linear());
    srunner_add_suite(sr, suite_elementwise());
    srunner_add_suite(sr, suite_residency());
    srunner_add_suite(sr, suite_watch());
    srunner_add_suite(sr, suite_record());
    srunner_add_suite(sr, suite_listen());
    srunner_add_suite(sr, suite_attach());
    srunner_add_suite(sr, suite_job());
    srunner_add_suite(sr, suite_reduce());
    srunner_add_suite(sr, suite_loss());
    srunner_add_suite(sr, suite_conv());
    srunner_add_suite(sr, suite_norm());
    srunner_add_suite(sr, suite_shape());
    srunner_add_suite(sr, suite_attention_ops());
    srunner_add_suite(sr, suite_optim());
    srunner_add_suite(sr, suite_scaler());
    srunner_add_suite(sr, suite_data());
    srunner_add_suite(sr, suite_log());
    srunner_add_suite(sr, suite_provenance());
    srunner_add_suite(sr, suite_plan());
    srunner_add_suite(sr, suite_graph());
    srunner_add_suite(sr, suite_fused_attention());
    srunner_add_suite(sr, suite_amp());
    srunner_add_suite(sr, suite_lowp_native());
#ifdef TE_HAVE_CUDA
    srunner_add_suite(sr, suite_cuda_elementwise());
#endif
    srunner_add_suite(sr, suite_gpt());
    srunner_add_suite(sr, suite_examples());
    srunner_add_suite(sr, suite_gpt_example());
    srunner_add_suite(sr, suite_checkpoint());
    srunner_add_suite(sr, suite_exports());
    srunner_add_suite(sr, suite_dbg_cmd());
    srunner_add_suite(sr, suite_cmd_args());
    srunner_add_suite(sr, suite_dbg_cond());
    srunner_add_suite(sr, suite_dbg_print());
    srunner_add_suite(sr, suite_verdict());
    srunner_add_suite(sr, suite_dbg_amp());
    srunner_add_suite(sr, suite_dbg_prof());
    srunner_add_suite(sr, suite_dbg_record());
    srunner_add_suite(sr, suite_debugger());
    srunner_add_suite(sr, suite_names());
    srunner_add_suite(sr, suite_prof());
    srunner_add_suite(sr, suite_tui());
    srunner_add_suite(sr, suite_tui_prof());
    srunner_add_suite(sr, suite_crash());
    srunner_add_suite(sr, suite_dump_spec());
    srunner_add_suite(sr, suite_dump_h5());
    srunner_add_suite(sr, suite_dump());
    srunner_add_suite(sr, suite_tdbg_dump());
    srunner_add_suite(sr, suite_dump_damage());
    srunner_add_suite(sr, suite_tdbg_diff());
    srunner_add_suite(sr, suite_diff_ranks());
    srunner_add_suite(sr, suite_tdbg_prof());
    srunner_add_suite(sr, suite_dump_amp());
#ifdef TE_HAVE_CUDA
    srunner_add_suite(sr, suite_cuda_linear());
    srunner_add_suite(sr, suite_cuda_reduce());
    srunner_add_suite(sr, suite_cuda_conv());
    srunner_add_suite(sr, suite_cuda_ops());
#endif
    /* Skips: the tests (forked by Check) append to this file; the count
     * follows Check's closing line, and TDBG_REQUIRE_ALL=1 (CI) fails the
     * run on any, so that a missing tool cannot pass there unseen. */
    char skips[] = "/tmp/tdbg-skips-XXXXXX";
    int fd = mkstemp(skips);
    if (fd < 0) {
        perror("run_tests: mkstemp");
        return EXIT_FAILURE;
    }
    close(fd);
    setenv(TDBG_SKIP_LOG_ENV, skips, 1);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char summary[4096];
    int skipped = tu_skip_summary(skips, summary, sizeof summary);
    unlink(skips);
    printf("%s\n", summary);
    const char *require = getenv("TDBG_REQUIRE_ALL");
    if (skipped && require && strcmp(require, "1") == 0) {
        printf("run_tests: TDBG_REQUIRE_ALL=1: %d check%s skipped instead of run; install what they "
               "need (./quickstart lists it)\n", skipped, skipped == 1 ? " was" : "s were");
        return EXIT_FAILURE;
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
