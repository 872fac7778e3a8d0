/*
 * server/main.c — attnd's entry point: configuration (flags + ATTND_*
 * environment, server/config.c), logging, then the libuv process
 * (server/loop.c) until it has drained. Exit codes: 0 after a clean drain or
 * --help/--version, 1 on a start-up or drain failure, 2 on a bad flag or a
 * --log-file that cannot be opened.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/attn_fused.h"
#include "server/config.h"
#include "server/log.h"
#include "server/loop.h"

/*
 * Read only by AddressSanitizer builds (make asan); an ordinary build never
 * calls it. A small free-memory quarantine keeps the resident size close to
 * a release build, so the suites that check memory stays flat under load
 * mean the same thing under ASan; ASAN_OPTIONS still overrides each key.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=4:thread_local_quarantine_size_kb=256";
}

/*
 * glibc's malloc thresholds, fixed. By default the mmap threshold grows to
 * the largest block freed so far and the trim threshold to twice that, so
 * after one large request every later large body or response stays in the
 * malloc arena of the thread that served it — one arena per transport and
 * worker thread — and the resident size after a burst of large or abandoned
 * uploads depended on which threads they landed on (tests/e2e/
 * test_e2e_faults.py saw +2 MB that a further round did not reach). Fixed
 * values bound what each heap keeps: blocks of 4 MiB and more are mapped
 * and unmapped, and the top of a heap is returned past 4 MiB free. A
 * 128 KiB trim threshold returned a large request's output and response
 * every time, to be faulted in again by the next: 568 page faults per
 * 2048² d128 base64 request and 482 per v2 binary one, against 104 and 0
 * now (vanishing-client rounds: RSS 20.0 -> 20.2-20.5 MB, was 14.2 ->
 * 12.2). A lower mmap threshold (512 KiB) cost the 1.4 MB base64 request
 * 40% in page faults; compute scratch is per worker and kept (core's
 * attn_ws) whatever the thresholds.
 */
#define MMAP_THRESHOLD_BYTES (4 * 1024 * 1024)
#define TRIM_THRESHOLD_BYTES (4 * 1024 * 1024)

int main(int argc, char **argv)
{
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
    static struct srv_config cfg;   /* static: api_ctx points into it for the whole run */
    switch (srv_config_parse(&cfg, argc, argv, stdout, stderr)) {
    case SRV_CONFIG_EXIT_OK:
        return 0;
    case SRV_CONFIG_EXIT_USAGE:
        return 2;
    case SRV_CONFIG_RUN:
        break;
    }
    signal(SIGPIPE, SIG_IGN);
    api_json_hook();                /* before any thread uses jansson */
    int rc = srv_log_open(cfg.log_format, cfg.log_file);
    if (rc != 0) {
        fprintf(stderr, "attnd: cannot open --log-file %s: %s\n", cfg.log_file, strerror(-rc));
        return 2;
    }
    for (size_t i = 0; i < cfg.n_env_typos; i++)
        srv_log_msgf("warn", "%s is not a setting of attnd and is ignored; did you mean %s?",
                     cfg.env_typos[i].name, cfg.env_typos[i].twin);
    /* --kernel / ATTND_KERNEL: a kernel this CPU lacks falls back, said once */
    enum attn_kernel kern = attn_kernel_set(cfg.kernel);
    if (cfg.kernel != ATTN_KERNEL_AUTO && kern != cfg.kernel)
        srv_log_msgf("warn", "--kernel %s: this CPU does not run it; using %s",
                     attn_kernel_name(cfg.kernel), attn_kernel_name(kern));
    int code = srv_loop_run(&cfg);
    srv_log_close();
    return code;
}
