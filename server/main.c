/*
 * server/main.c — attnd's entry point: configuration (flags + ATTND_*
 * environment, server/config.c), logging, then the libuv process
 * (server/loop.c) until it has drained. Exit codes: 0 after a clean drain or
 * --help/--version, 1 on a start-up or drain failure, 2 on a bad flag.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "server/log.h"
#include "server/loop.h"

int main(int argc, char **argv)
{
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
    int rc = srv_log_open(cfg.log_format, cfg.log_file);
    if (rc != 0) {
        fprintf(stderr, "attnd: cannot open --log-file %s: %s\n", cfg.log_file, strerror(-rc));
        return 2;
    }
    int code = srv_loop_run(&cfg);
    srv_log_close();
    return code;
}
