/*
 * server/keys.h — the API keys attnd accepts: --api-key (named "default")
 * and the lines of --api-key-file (`name:key` or `key`), which SIGHUP reads
 * again so keys rotate without a restart. Lookups compare in constant time
 * and give back the key's name, never the key.
 */
#ifndef ATTND_SERVER_KEYS_H
#define ATTND_SERVER_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#define SRV_KEY_NAME_MAX 64         /* name bytes with the NUL */

struct srv_keys;

/* file: path or "" (none); single: --api-key or "" (none). NULL with the
 * reason in why when the file cannot be read or a line is malformed. */
struct srv_keys *srv_keys_open(const char *file, const char *single, char *why, size_t cap);

/* SIGHUP: read the file again; on failure the keys in use stay (-1, why). */
int srv_keys_reload(struct srv_keys *k, char *why, size_t cap);

/* Keys in force. */
size_t srv_keys_count(struct srv_keys *k);

/* Is token (NUL-terminated; trailing spaces and tabs, which RFC 9110
 * leaves out of a field value, ignored) one of the keys? Its name goes to
 * name. Thread-safe; the time taken depends on the number of keys and the
 * token's length only. */
bool srv_keys_check(struct srv_keys *k, const char *token, char name[SRV_KEY_NAME_MAX]);

void srv_keys_free(struct srv_keys *k);

#endif
