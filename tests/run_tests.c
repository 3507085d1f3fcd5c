/* run_tests.c — runs every suite; CK_RUN_SUITE / CK_RUN_CASE select a subset. */
#include "suites.h"

#include <stdlib.h>

int main(void)
{
    /* The example programs the tests start inherit this (sanitizer builds). */
    setenv("LSAN_OPTIONS", "suppressions=" TDBG_SRCDIR "/tests/lsan.supp", 0);
    SRunner *sr = srunner_create(suite_core());
    srunner_add_suite(sr, suite_linear());
    srunner_add_suite(sr, suite_elementwise());
    srunner_add_suite(sr, suite_reduce());
    srunner_add_suite(sr, suite_loss());
    srunner_add_suite(sr, suite_conv());
    srunner_add_suite(sr, suite_norm());
    srunner_add_suite(sr, suite_shape());
    srunner_add_suite(sr, suite_optim());
    srunner_add_suite(sr, suite_data());
    srunner_add_suite(sr, suite_plan());
    srunner_add_suite(sr, suite_graph());
    srunner_add_suite(sr, suite_examples());
    srunner_add_suite(sr, suite_exports());
    srunner_add_suite(sr, suite_dbg_cmd());
    srunner_add_suite(sr, suite_dbg_cond());
    srunner_add_suite(sr, suite_dbg_print());
    srunner_add_suite(sr, suite_verdict());
    srunner_add_suite(sr, suite_debugger());
    srunner_add_suite(sr, suite_tui());
    srunner_add_suite(sr, suite_crash());
    srunner_add_suite(sr, suite_dump_spec());
    srunner_add_suite(sr, suite_dump_h5());
    srunner_add_suite(sr, suite_dump());
    srunner_add_suite(sr, suite_tdbg_dump());
    srunner_add_suite(sr, suite_dump_damage());
    srunner_add_suite(sr, suite_tdbg_diff());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
