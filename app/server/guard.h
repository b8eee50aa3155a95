/* guard.h - what clients of `omni serve` may hold, all connections together: connections (one thread each), the
 * time they take to send a request, and the bytes of request bodies held in memory at once.
 *
 * The HTTP layer tells the guard where each connection is: waiting for a request's head (line and headers), its
 * body, or being answered. A watchdog thread closes (shutdown(2)) a connection whose head has not arrived
 * head_timeout_s after the connection began or its previous answer ended (a slowloris client trickling headers,
 * an idle keep-alive connection), or whose body arrives slower than head_timeout_s + bytes / body_min_rate (a
 * 408 JSON is written first). Past max_connections, a new connection closes the oldest one still waiting for a
 * request's head; when none is, srv_guard_crowded says so and the request gets a 503.
 *
 * Sockets are shut down only while their entry exists: the HTTP library removes it (srv_guard_close) before it
 * closes the socket, so a number reused by a new socket is never touched. Thread-safe. */
#ifndef OMNI_SERVER_GUARD_H
#define OMNI_SERVER_GUARD_H

#include <pthread.h>
#include <stddef.h>

#include "kernels/status.h"

typedef struct srv_guard srv_guard;
typedef struct srv_conn srv_conn;

typedef struct {
    double head_timeout_s; /* see above; <= 0: no limit */
    double body_min_rate;  /* bytes/s; <= 0: no limit */
    int max_connections;   /* <= 0: no limit */
    size_t max_held;       /* bytes; 0: no limit */
} srv_guard_params;

omni_status srv_guard_start(const srv_guard_params *p, srv_guard **out);
/* Stop the watchdog and free; every connection must be closed (srv_guard_close). NULL is a no-op. */
void srv_guard_free(srv_guard *g);

/* A new connection on socket fd (waiting for a head); NULL when out of memory (it is then not watched). */
srv_conn *srv_guard_open(srv_guard *g, int fd);
void srv_guard_close(srv_guard *g, srv_conn *c); /* NULL is a no-op */
/* 1 when more connections are open than max_connections (none could be closed to make room). */
int srv_guard_crowded(srv_guard *g);

/* Phases (c may be NULL: then nothing is watched). */
void srv_guard_head_done(srv_guard *g, srv_conn *c);          /* the head arrived: its body is next */
void srv_guard_body(srv_guard *g, srv_conn *c, size_t bytes); /* body bytes received */
void srv_guard_busy(srv_guard *g, srv_conn *c);               /* the request is whole: no limit while answering */
void srv_guard_idle(srv_guard *g, srv_conn *c);               /* answered: waiting for the next head */

/* Reserve `bytes` of request memory: 0 done, 1 not now (others hold too much: retry later), 2 never (more than
 * max_held). srv_guard_release gives them back. */
int srv_guard_hold(srv_guard *g, size_t bytes);
void srv_guard_release(srv_guard *g, size_t bytes);

typedef struct {
    int open;             /* connections open (not shut down by the guard) */
    size_t held;          /* bytes reserved */
    long slow, evicted;   /* connections closed for a slow head or body / to make room */
} srv_guard_stats;
void srv_guard_get_stats(srv_guard *g, srv_guard_stats *out);

/* pthread_cond_timedwait for at most `ms` milliseconds (mu held). */
void srv_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);

#endif
