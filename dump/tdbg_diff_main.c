/* tdbg_diff_main.c — the `tdbg-diff` program: tdbg_diff_main (diff.c) on
 * stdout and stderr. */
#include "diff.h"

#include <stdio.h>


int main(int argc, char **argv)
{
    return tdbg_diff_main(argc, argv, stdout, stderr);
}
