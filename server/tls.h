/*
 * server/tls.h — the certificate and key that HTTPS serves (--tls-cert,
 * --tls-key), loaded through GnuTLS and handed to libmicrohttpd by its
 * certificate callback, so that SIGHUP can swap in a new pair while open
 * connections keep theirs.
 */
#ifndef ATTND_SERVER_TLS_H
#define ATTND_SERVER_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <gnutls/abstract.h>

struct srv_tls;

/* The GnuTLS priority string attnd serves: TLS 1.2 and 1.3 only, ECDHE key
 * exchange, AEAD ciphers (AES-GCM, ChaCha20-Poly1305), server's order. */
extern const char srv_tls_priorities[];

/* Load and check cert_path (PEM chain) and key_path (PEM private key): both
 * readable, parseable, matching, the key file not accessible by others.
 * NULL on failure with the reason in why. A certificate that has expired
 * or is not yet valid is loaded and logged as a warning. */
struct srv_tls *srv_tls_open(const char *cert_path, const char *key_path, char *why,
                             size_t why_cap);

/* SIGHUP: load the pair again from the same paths. On success new
 * handshakes get the new pair (0); on failure the old pair stays in use and
 * why says what was wrong (-1). Loop thread only. */
int srv_tls_reload(struct srv_tls *t, char *why, size_t why_cap);

/* A gnutls_certificate_retrieve_function2 (MHD_OPTION_HTTPS_CERT_CALLBACK):
 * every handshake takes the pair current at its start. */
int srv_tls_cert_cb(gnutls_session_t s, const gnutls_datum_t *req_ca_dn, int nreqs,
                    const gnutls_pk_algorithm_t *algos, int n_algos,
                    gnutls_pcert_st **pcert, unsigned int *pcert_length,
                    gnutls_privkey_t *pkey);

/* Installs t as the pair the callback serves (one per process). */
void srv_tls_install(struct srv_tls *t);

/* Frees every pair loaded (after the transport has stopped). */
void srv_tls_free(struct srv_tls *t);

#endif
