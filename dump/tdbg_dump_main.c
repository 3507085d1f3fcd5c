/* tdbg_dump_main.c — the `tdbg-dump` program: tdbg_dump_main (tdbg_dump.c)
 * on stdout and stderr, inside the engine it needs for tensors and
 * statistics. */
#include "dump.h"

#include <stdio.h>


int main(int argc, char **argv)
{
    if (te_init(NULL) != TE_OK) {
        fprintf(stderr, "tdbg-dump: cannot start the engine: %s\n", te_error());
        return 2;
    }
    int rc = tdbg_dump_main(argc, argv, stdout, stderr);
    te_shutdown();
    return rc;
}
