/* replay.c — runs a fuzz target without libFuzzer: LLVMFuzzerTestOneInput
 * on every file of each directory (or file) named, as `make check` does
 * with the seed corpus and the past crashes (tests/fuzz/). A crash or a
 * sanitizer report ends the run; the last "replay:" line names the input.
 * A missing directory is no input (a target may have no past crash). */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return false;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 4096)))
            abort();
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return true;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The directory's files in name order (runs repeat exactly). */
static int replay_dir(const char *dir, bool *ok)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (!(names = realloc(names, (n + 1) * sizeof *names)) || !(names[n] = strdup(e->d_name)))
            abort();
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    char path[PATH_MAX];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        *ok = replay_file(path) && *ok;
        free(names[i]);
    }
    free(names);
    return n;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    bool ok = true;
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISREG(st.st_mode)) {
            ok = replay_file(argv[i]) && ok;
            total++;
        } else {
            total += replay_dir(argv[i], &ok);
        }
    }
    printf("replay: %d input%s, %s\n", total, total == 1 ? "" : "s", ok ? "all passed" : "some unreadable");
    return ok ? 0 : 1;
}
