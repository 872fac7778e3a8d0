/*
 * server/tls_alerts.c — a TLS handshake that fails, or a renegotiation a
 * client asks for, is refused with an alert, not by a silent hang-up that
 * a client cannot tell from a network failure.
 *
 * libmicrohttpd (0.9.75) drives GnuTLS and takes any error of
 * gnutls_handshake or gnutls_record_recv as a broken connection: it closes
 * the socket without an alert. GnuTLS leaves the alert to that caller in
 * both cases and has no setting that sends it on its own:
 * - a handshake that fails (a TLS 1.0 or 1.1 ClientHello, no cipher suite
 *   or group in common) ends without the alert a client would print
 *   (protocol_version, handshake_failure): gnutls_alert_send_appropriate
 *   sends the one gnutls_error_to_alert names, and nothing for errors
 *   that call for none (a peer's own alert, the socket's errors);
 * - a ClientHello on an established TLS 1.2 session comes back from
 *   gnutls_record_recv as GNUTLS_E_REHANDSHAKE, to be answered with a new
 *   handshake or the warning alert no_renegotiation (RFC 5246, 7.2.2):
 *   attnd never renegotiates, and scanners (testssl.sh) count a server
 *   that hangs up there as one that does. TLS 1.3 has no renegotiation;
 *   GnuTLS handles its key updates inside gnutls_record_recv.
 *
 * So attnd defines gnutls_handshake and gnutls_record_recv itself. The
 * executable exports both symbols (the Makefile links attnd with
 * --export-dynamic-symbol), so the dynamic linker binds libmicrohttpd's
 * calls to these definitions before GnuTLS's own (ELF symbol
 * interposition). Each forwards to GnuTLS's function, found once with
 * dlsym(RTLD_NEXT), sends its alert (best effort: the socket may be full)
 * and returns the same result, so libmicrohttpd closes the connection as
 * before. attnd is only ever the server side of TLS.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <gnutls/gnutls.h>

typedef ssize_t (*record_recv_fn)(gnutls_session_t, void *, size_t);
typedef int (*handshake_fn)(gnutls_session_t);

/* GnuTLS's own definition of name, found once into *cache; aborts when
 * there is none (attnd links GnuTLS, so there always is). */
static void *real_fn(_Atomic(void *) *cache, const char *name)
{
    void *f = atomic_load_explicit(cache, memory_order_acquire);
    if (f)
        return f;
    f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "attnd: %s not found after attnd's own: %s\n", name, dlerror());
        abort();
    }
    atomic_store_explicit(cache, f, memory_order_release);
    return f;
}

static _Atomic(void *) g_record_recv, g_handshake;

/* dlsym returns a data pointer; POSIX guarantees it converts to a function
 * pointer, C11 does not, hence the copies through a union. */
ssize_t gnutls_record_recv(gnutls_session_t session, void *data, size_t data_size)
{
    union { void *p; record_recv_fn f; } u = {real_fn(&g_record_recv, "gnutls_record_recv")};
    ssize_t n = u.f(session, data, data_size);
    if (n == GNUTLS_E_REHANDSHAKE)
        (void)gnutls_alert_send(session, GNUTLS_AL_WARNING, GNUTLS_A_NO_RENEGOTIATION);
    return n;
}

int gnutls_handshake(gnutls_session_t session)
{
    union { void *p; handshake_fn f; } u = {real_fn(&g_handshake, "gnutls_handshake")};
    int rc = u.f(session);
    if (rc < 0 && gnutls_error_is_fatal(rc))
        (void)gnutls_alert_send_appropriate(session, rc);
    return rc;
}
