/*
 * tests/state_dir.h — a journaled session store over one test program's
 * state directory, with every line its start logs kept for the checks
 * (tests/unit/test_replay.c, tests/unit/test_durable_start.c). The program
 * sets dir before the first use.
 */
#ifndef ATTND_TESTS_STATE_DIR_H
#define ATTND_TESTS_STATE_DIR_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/journal.h"
#include "core/store.h"
#include "tests/harness.h"

static char dir[64];
static char logged[65536];          /* every line of the last open */

static void keep_log(void *arg, enum sess_log_level level, const char *msg)
{
    (void)arg;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s %s\n",
             level == SESS_LOG_WARN ? "warn" : "info", msg);
    if (getenv("TEST_VERBOSE"))
        printf("    log %s: %s\n", level == SESS_LOG_WARN ? "warn" : "info", msg);
}

/* A clock that stands still: a session is used at most once a second as
 * far as the journal knows (TOUCH), and nothing expires within a run. */
static double still(void *arg)
{
    (void)arg;
    return 1000.0;
}

/* The store over dir (NULL when it refuses to open), its sessions' TTL
 * default_ttl_s unless they say (0: none, so a use journals nothing). */
static struct sess_store *open_dir_ttl(double default_ttl_s)
{
    struct sess_config cfg = {.max_sessions = 100, .max_cache_bytes = 1 << 26,
                              .default_ttl_s = default_ttl_s, .default_max_tokens = 100000,
                              .policy = SESS_POLICY_REJECT, .replica_id = "r0"};
    struct sess_store *st = sess_store_new(&cfg);
    sess_store_set_clock(st, still, NULL);
    struct sess_journal_config jc = {.dir = dir, .fsync = JNL_FSYNC_NO,
                                     .rewrite_min_bytes = (uint64_t)1 << 40, .log = keep_log};
    logged[0] = '\0';
    if (sess_store_open_journal(st, &jc) != CORE_OK) {
        sess_store_free(st);
        return NULL;
    }
    return st;
}

static char *path_of(const char *name)
{
    static char p[200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static bool exists(const char *name)
{
    struct stat sb;
    return stat(path_of(name), &sb) == 0;
}

/* Whether the last open logged text (else the log is printed). */
static bool said(const char *text)
{
    if (strstr(logged, text))
        return true;
    printf("    not in the log: %s\n%s", text, logged);
    return false;
}

/* Flip a bit of the byte at offset at of the file name. */
static void flip(const char *name, long at)
{
    int fd = open(path_of(name), O_RDWR);
    unsigned char b = 0;
    CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x10;
    CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
}

#endif
