/* tdbg_prof_main.c — the `tdbg-prof` program: tdbg_prof_main (tdbg_prof.c)
 * on stdout and stderr. */
#include "prof.h"

int main(int argc, char **argv)
{
    return tdbg_prof_main(argc, argv, stdout, stderr);
}
