/* test_provenance.c — being written. */
#include "suites.h"

Suite *suite_provenance(void)
{
    Suite *s = suite_create("provenance");
    return s;
}
