/*
 * server/tls.c — HTTPS material: a certificate chain and its private key,
 * read with GnuTLS and served through libmicrohttpd's certificate callback.
 *
 * A pair (struct tls_pair) is loaded whole or not at all: both files are
 * read, the key file's permissions checked (no access for "other"; group
 * access is logged), the chain and key parsed, and their match checked by
 * GnuTLS itself (gnutls_certificate_set_x509_key_mem2 into a throwaway
 * credentials set refuses a key that does not sign for the certificate).
 * The callback hands every new handshake the current pair, read through
 * one atomic pointer. SIGHUP loads a new pair and swaps the pointer; the
 * old pair is kept (retired list) until exit, because a handshake that
 * began a moment before the swap may still be using it and GnuTLS does not
 * say when it lets go. Reloads are rare (a few KiB each), so keeping them
 * is cheaper than reference counts on every handshake.
 */
#include "server/tls.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <gnutls/abstract.h>
#include <gnutls/x509.h>

#include "server/log.h"

#define MAX_CHAIN 16

const char srv_tls_priorities[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:"
    "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"
    "-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:"
    "-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1:"
    "%SERVER_PRECEDENCE";

struct tls_pair {
    gnutls_pcert_st chain[MAX_CHAIN];
    unsigned n_chain;
    gnutls_privkey_t key;
    struct tls_pair *retired;       /* older pairs, kept until exit */
};

struct srv_tls {
    char cert_path[1024], key_path[1024];
    struct tls_pair *cur;           /* loop thread's view; served: g_cur */
};

static _Atomic(struct tls_pair *) g_cur;

static void pair_free(struct tls_pair *p)
{
    while (p) {
        struct tls_pair *next = p->retired;
        for (unsigned i = 0; i < p->n_chain; i++)
            gnutls_pcert_deinit(&p->chain[i]);
        if (p->key)
            gnutls_privkey_deinit(p->key);
        free(p);
        p = next;
    }
}


/* The key file must not be readable by "other". Its group may read it (a
 * key shared with a group on purpose: ssl-cert, or a Kubernetes Secret
 * mounted 0440 for the pod's fsGroup); a group that may change it is
 * logged. */
static int check_key_mode(const char *path, char *why, size_t cap)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return srv_whyf(why, cap, "--tls-key %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return srv_whyf(why, cap, "--tls-key %s: not a regular file", path);
    if (st.st_mode & S_IRWXO)
        return srv_whyf(why, cap, "--tls-key %s: mode %04o lets other users %s it; "
                    SRV_SECRET_MODE_FIX, path, (unsigned)(st.st_mode & 07777),
                    srv_mode_others(st.st_mode));
    if (st.st_mode & (S_IWGRP | S_IXGRP))
        srv_log_msgf("warn", "--tls-key %s: mode %04o lets its group change it", path,
                     (unsigned)(st.st_mode & 07777));
    return 0;
}

/* Warn about a leaf certificate outside its validity period. */
static void check_dates(const gnutls_datum_t *pem, const char *path)
{
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) < 0)
        return;
    if (gnutls_x509_crt_import(crt, pem, GNUTLS_X509_FMT_PEM) >= 0) {
        time_t now = time(NULL);
        time_t nb = gnutls_x509_crt_get_activation_time(crt);
        time_t na = gnutls_x509_crt_get_expiration_time(crt);
        char when[32];
        struct tm tm;
        if (na != (time_t)-1 && na < now) {
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&na, &tm));
            srv_log_msgf("warn", "--tls-cert %s: the certificate expired on %s; "
                         "clients will refuse it", path, when);
        } else if (nb != (time_t)-1 && nb > now) {
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&nb, &tm));
            srv_log_msgf("warn", "--tls-cert %s: the certificate is not valid before %s",
                         path, when);
        }
    }
    gnutls_x509_crt_deinit(crt);
}

/* Does GnuTLS accept the key for the chain's leaf? */
static int check_match(const gnutls_datum_t *cert, const gnutls_datum_t *key,
                       char *why, size_t cap)
{
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
        return srv_whyf(why, cap, "out of memory");
    int rc = gnutls_certificate_set_x509_key_mem2(cred, cert, key, GNUTLS_X509_FMT_PEM, NULL, 0);
    gnutls_certificate_free_credentials(cred);
    if (rc < 0)
        return srv_whyf(why, cap, "--tls-cert/--tls-key: %s", gnutls_strerror(rc));
    return 0;
}

static struct tls_pair *pair_load(const char *cert_path, const char *key_path,
                                  char *why, size_t cap)
{
    gnutls_datum_t cert = {NULL, 0}, key = {NULL, 0};
    struct tls_pair *p = NULL;
    int rc;
    if (check_key_mode(key_path, why, cap) != 0)
        goto out;
    if ((rc = gnutls_load_file(cert_path, &cert)) < 0) {
        srv_whyf(why, cap, "--tls-cert %s: cannot read it (%s)", cert_path, gnutls_strerror(rc));
        goto out;
    }
    if ((rc = gnutls_load_file(key_path, &key)) < 0) {
        srv_whyf(why, cap, "--tls-key %s: cannot read it (%s)", key_path, gnutls_strerror(rc));
        goto out;
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        srv_whyf(why, cap, "out of memory");
        goto out;
    }
    unsigned n = MAX_CHAIN;
    rc = gnutls_pcert_list_import_x509_raw(p->chain, &n, &cert, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0 || n == 0) {
        srv_whyf(why, cap, "--tls-cert %s: not a PEM certificate chain (%s)", cert_path,
             rc < 0 ? gnutls_strerror(rc) : "no certificate");
        goto bad;
    }
    p->n_chain = n;
    if ((rc = gnutls_privkey_init(&p->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(p->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        srv_whyf(why, cap, "--tls-key %s: not a PEM private key (%s)", key_path,
             gnutls_strerror(rc));
        goto bad;
    }
    if (check_match(&cert, &key, why, cap) != 0)
        goto bad;
    check_dates(&cert, cert_path);
    goto out;
bad:
    pair_free(p);
    p = NULL;
out:
    if (key.data) {
        gnutls_memset(key.data, 0, key.size);
        gnutls_free(key.data);
    }
    gnutls_free(cert.data);
    return p;
}

static bool copy_path(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        return false;
    memcpy(dst, src, n + 1);
    return true;
}

struct srv_tls *srv_tls_open(const char *cert_path, const char *key_path, char *why,
                             size_t why_cap)
{
    struct srv_tls *t = calloc(1, sizeof *t);
    if (!t) {
        srv_whyf(why, why_cap, "out of memory");
        return NULL;
    }
    if (!copy_path(t->cert_path, sizeof t->cert_path, cert_path) ||
        !copy_path(t->key_path, sizeof t->key_path, key_path)) {
        srv_whyf(why, why_cap, "--tls-cert/--tls-key: path too long");
        free(t);
        return NULL;
    }
    t->cur = pair_load(t->cert_path, t->key_path, why, why_cap);
    if (!t->cur) {
        free(t);
        return NULL;
    }
    return t;
}

int srv_tls_reload(struct srv_tls *t, char *why, size_t why_cap)
{
    struct tls_pair *p = pair_load(t->cert_path, t->key_path, why, why_cap);
    if (!p)
        return -1;
    p->retired = t->cur;
    t->cur = p;
    atomic_store(&g_cur, p);
    return 0;
}

int srv_tls_cert_cb(gnutls_session_t s, const gnutls_datum_t *req_ca_dn, int nreqs,
                   const gnutls_pk_algorithm_t *algos, int n_algos,
                   gnutls_pcert_st **pcert, unsigned int *pcert_length,
                   gnutls_privkey_t *pkey)
{
    (void)s;
    (void)req_ca_dn;
    (void)nreqs;
    (void)algos;
    (void)n_algos;
    struct tls_pair *p = atomic_load(&g_cur);
    if (!p)
        return -1;
    *pcert = p->chain;
    *pcert_length = p->n_chain;
    *pkey = p->key;
    return 0;
}

void srv_tls_install(struct srv_tls *t)
{
    atomic_store(&g_cur, t ? t->cur : NULL);
}

void srv_tls_free(struct srv_tls *t)
{
    if (!t)
        return;
    struct tls_pair *none = NULL, *mine = t->cur;
    atomic_compare_exchange_strong(&g_cur, &mine, none);
    pair_free(t->cur);
    free(t);
}
