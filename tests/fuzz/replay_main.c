/*
 * tests/fuzz/replay_main.c — runs a fuzz target over its stored corpus
 * without libFuzzer, so `make test` (and `make asan`) replay every seed and
 * every regression input with the ordinary compiler.
 *
 * Built once per target as BUILD/tests/test_fuzz_<name> (tests/fuzz/fuzz.mk)
 * with FUZZ_NAME defined; reads every file under tests/fuzz/corpus/<name>/
 * (or the directories/files given as arguments), calls
 * LLVMFuzzerTestOneInput on each, and prints the harness closing line (one
 * test per corpus). A crash aborts the program, which tests/run.sh counts as
 * a failure; an empty corpus fails too.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef FUZZ_NAME
#error "FUZZ_NAME must name the target (e.g. -DFUZZ_NAME=\"request\")"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_inputs, replay_failed;

static void replay_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        printf("FAIL cannot open %s\n", path);
        replay_failed++;
        return;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, fp)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(fp);
    if (!buf) {
        printf("FAIL out of memory reading %s\n", path);
        replay_failed++;
        return;
    }
    if (getenv("TEST_VERBOSE"))
        printf("run  %s\n", path);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    replay_inputs++;
}

static void replay_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        printf("FAIL no such corpus %s\n", path);
        replay_failed++;
        return;
    }
    if (!S_ISDIR(sb.st_mode)) {
        replay_file(path);
        return;
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            char full[4096];
            int w = snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
            if (w > 0 && (size_t)w < sizeof full)
                replay_path(full);
        }
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    const char *dflt = "tests/fuzz/corpus/" FUZZ_NAME;
    int n_paths = argc > 1 ? argc - 1 : 1;
    for (int i = 0; i < n_paths; i++)
        replay_path(argc > 1 ? argv[i + 1] : dflt);
    /* One test per corpus: it passes when every input ran without a crash. */
    printf("replayed %d inputs of fuzz_%s\n", replay_inputs, FUZZ_NAME);
    if (replay_inputs == 0)
        replay_failed++;
    printf("%d passed, %d failed\n", replay_failed ? 0 : n_paths,
           replay_failed ? 1 : 0);
    return replay_failed ? 1 : 0;
}
