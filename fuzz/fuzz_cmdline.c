/* fuzz_cmdline.c — the debugger's command line in a session whose
 * program has not started: each line of the input goes through the
 * tensor-reference parser (NAME[SLICES]), the condition parser and the
 * command lookup, then dbg_execute runs it as the CLI would. Commands that
 * resume or end training (run, continue, quit, ...) and a `dump` whose
 * spec parses (it would start a writer thread and make directories; the
 * spec parser has its own target) are looked up but not run. */
#include "cmd.h"
#include "dump.h"
#include "fuzz.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    dbg_out_stream = fuzz_null();
    return 0;
}

/* Would running the line start something the target cannot undo? */
static bool runnable(const char *line)
{
    char word[64];
    const char *args = dbg_word(line, word, sizeof word);
    const dbg_cmd *c = word[0] ? dbg_cmd_find(word) : NULL;
    if (!c)
        return true;   /* dbg_execute reports it */
    if (c->resumes)
        return false;
    if (strcmp(c->name, "dump") == 0) {
        dump_spec s;
        char err[1024];
        args = dbg_skip_space(args);
        return strncmp(args, "off", 3) == 0 || strncmp(args, "now", 3) == 0 ||
               !dump_spec_parse(args, &s, err, sizeof err);
    }
    return true;
}

static void session_reset(void)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    memset(&dbg, 0, sizeof dbg);
    dbg.next_id = 1;
    dbg.step = -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_harmless(data, size))
        return 0;
    if (te_init(&(te_config){ .seed = 1, .threads = 1 }) != TE_OK)
        abort();
    session_reset();
    char *text = fuzz_text(data, size);
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char err[512];
        dbg_ref r;
        if (!dbg_ref_parse(line, &r, err, sizeof err) && !err[0])
            abort();   /* a refusal always says why */
        dbg_cond *c = dbg_cond_parse(line, err, sizeof err);
        dbg_cond_free(c);
        char word[64];
        dbg_word(line, word, sizeof word);
        (void)dbg_cmd_lookup(word);
        if (runnable(line) && dbg_execute(line))
            abort();   /* nothing that resumes training was run */
    }
    free(text);
    session_reset();
    te_shutdown();
    return 0;
}
