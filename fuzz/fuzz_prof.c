/* fuzz_prof.c — tdbg-prof (prof/) on any file: the input is written to a
 * trace file and run through the report (text and --json, with a peak)
 * and through diff against itself. Any input ends in status 0 or 2
 * (fuzz_tool aborts on another), never in a crash or a sanitizer report. */
#include "fuzz.h"
#include "prof.h"

#include <stdio.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/trace.json", fuzz_tmpdir());
    if (!fuzz_write(path, data, size))
        return 0;
    fuzz_tool(tdbg_prof_main, "--peak-gflops", "100", path, NULL);
    fuzz_tool(tdbg_prof_main, "--json", "--top", "3", path, NULL);
    fuzz_tool(tdbg_prof_main, "diff", path, path, NULL);
    return 0;
}
