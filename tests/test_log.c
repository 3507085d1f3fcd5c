/* test_log.c — being written. */
#include "suites.h"

Suite *suite_log(void)
{
    Suite *s = suite_create("log");
    return s;
}
