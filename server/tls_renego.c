/*
 * server/tls_renego.c — TLS 1.2 renegotiation asked for by a client is
 * refused with the no_renegotiation alert, not by a silent hang-up.
 *
 * GnuTLS hands a ClientHello that arrives on an established session to
 * whoever called gnutls_record_recv, as GNUTLS_E_REHANDSHAKE, and leaves
 * the answer to that caller: run a new handshake, or send the warning
 * alert no_renegotiation (RFC 5246, 7.2.2). GnuTLS has no setting that
 * refuses on its own, and the caller here is libmicrohttpd (0.9.75), which
 * takes the error as a broken connection and closes the socket without an
 * alert. attnd never renegotiated, but a client could not tell the refusal
 * from a network failure, and scanners (testssl.sh) count a server that
 * hangs up this way as one that renegotiates.
 *
 * So attnd defines gnutls_record_recv itself. The executable exports the
 * symbol (the Makefile links attnd with --export-dynamic-symbol), so the
 * dynamic linker binds libmicrohttpd's calls to this definition before
 * GnuTLS's own (ELF symbol interposition); it forwards every call to
 * GnuTLS's function, found once with dlsym(RTLD_NEXT), and on
 * GNUTLS_E_REHANDSHAKE sends the alert before it
 * returns the same error, so libmicrohttpd still closes the connection as
 * before. attnd is only ever the server side of TLS. TLS 1.3 has no
 * renegotiation; GnuTLS handles its post-handshake messages (key updates)
 * inside gnutls_record_recv and does not return this error for them.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <gnutls/gnutls.h>

typedef ssize_t (*record_recv_fn)(gnutls_session_t, void *, size_t);

static _Atomic(record_recv_fn) g_real;

static record_recv_fn real_record_recv(void)
{
    record_recv_fn f = atomic_load_explicit(&g_real, memory_order_acquire);
    if (f)
        return f;
    /* dlsym returns a data pointer; POSIX guarantees it converts to a
     * function pointer, C11 does not, hence the copy through a union. */
    union { void *p; record_recv_fn f; } u = { .p = dlsym(RTLD_NEXT, "gnutls_record_recv") };
    if (!u.f) {
        fprintf(stderr, "attnd: gnutls_record_recv not found after attnd's own: %s\n", dlerror());
        abort();
    }
    atomic_store_explicit(&g_real, u.f, memory_order_release);
    return u.f;
}

ssize_t gnutls_record_recv(gnutls_session_t session, void *data, size_t data_size)
{
    ssize_t n = real_record_recv()(session, data, data_size);
    if (n == GNUTLS_E_REHANDSHAKE)      /* best effort: the socket may be full */
        (void)gnutls_alert_send(session, GNUTLS_AL_WARNING, GNUTLS_A_NO_RENEGOTIATION);
    return n;
}
