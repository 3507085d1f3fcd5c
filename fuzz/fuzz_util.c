/* fuzz_util.c — helpers the fuzz targets share (fuzz.h). */
#include "fuzz.h"

#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();   /* the harness itself is broken */
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

bool fuzz_harmless(const uint8_t *data, size_t size)
{
    static const char *const bad[] = { "/dev", "/proc", "/sys", NULL };
    for (int i = 0; bad[i]; i++)
        if (memmem(data, size, bad[i], strlen(bad[i])))
            return false;
    return true;
}

int fuzz_argv(char *text, const char *prog, char **argv, int max)
{
    int argc = 0;
    argv[argc++] = (char *)prog;
    for (char *p = text; argc < max - 1;) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    argv[argc] = NULL;
    return argc;
}

FILE *fuzz_null(void)
{
    static FILE *f;
    if (!f && !(f = fopen("/dev/null", "w")))
        abort();
    return f;
}

static char tmpdir[PATH_MAX];

/* Removes the directory's files (the targets make no subdirectories but
 * one level: DIR/run/FILE), then the directory. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0)
            remove_tree(path);
    }
    closedir(d);
    rmdir(dir);
}

static void tmpdir_remove(void) { remove_tree(tmpdir); }

const char *fuzz_tmpdir(void)
{
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/tdbg-fuzz.XXXXXX", base && base[0] ? base : "/tmp");
        if (!mkdtemp(tmpdir))
            abort();
        atexit(tmpdir_remove);
    }
    return tmpdir;
}

bool fuzz_write(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

void fuzz_tool(int (*main_fn)(int, char **, FILE *, FILE *), ...)
{
    char *argv[6] = { "tdbg" };
    int argc = 1;
    va_list ap;
    va_start(ap, main_fn);
    for (char *a; argc < 5 && (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    int rc = main_fn(argc, argv, fuzz_null(), fuzz_null());
    if (rc < 0 || rc > 2)
        abort();   /* the documented exit statuses only */
}
