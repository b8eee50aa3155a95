/* guard.c - connection, request-time and held-memory limits of `omni serve` (see guard.h). */
#define _GNU_SOURCE
#include "app/server/guard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define WATCH_MS 100 /* how often the watchdog looks */

typedef enum { PH_HEAD = 0, PH_BODY, PH_BUSY } phase;

struct srv_conn {
    srv_conn *prev, *next; /* oldest first */
    int fd;
    phase ph;
    double t0;   /* start of the phase (ms) */
    size_t seen; /* PH_BODY: bytes received */
    int shut;    /* shut down by the guard (no longer counted) */
};

struct srv_guard {
    srv_guard_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int stop;
    srv_conn *head, *tail;
    int live;    /* connections not shut down by the guard */
    size_t held;
    long closed, evicted;
};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The time (ms) past which c is closed; 0: none. */
static double deadline(const srv_guard *g, const srv_conn *c) {
    if (c->shut || c->ph == PH_BUSY || g->p.head_timeout_s <= 0) return 0;
    double d = c->t0 + g->p.head_timeout_s * 1e3;
    if (c->ph == PH_BODY) {
        if (g->p.body_min_rate <= 0) return 0;
        d += 1e3 * (double)c->seen / g->p.body_min_rate;
    }
    return d;
}

/* Shut c's socket down (g->mu held); a body too slow first gets a 408 (best effort, never blocking). */
static void shut(srv_guard *g, srv_conn *c, int say_408) {
    if (say_408) {
        char msg[512];
        int n = snprintf(msg, sizeof msg, "{\"error\":{\"message\":\"the request body arrived too slowly (under %.0f "
                         "bytes/s)\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_timeout\"}}",
                         g->p.body_min_rate);
        char all[768];
        int k = snprintf(all, sizeof all, "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                         "Connection: close\r\nContent-Length: %d\r\n\r\n%s", n, msg);
        if (send(c->fd, all, (size_t)k, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) { /* the client gets the close alone */ }
    }
    shutdown(c->fd, SHUT_RDWR);
    c->shut = 1;
    g->live--;
}

void srv_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

static void *watchdog(void *arg) {
    srv_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double t = now_ms();
        for (srv_conn *c = g->head; c; c = c->next) {
            double d = deadline(g, c);
            if (d > 0 && t > d) {
                g->closed++;
                shut(g, c, c->ph == PH_BODY);
            }
        }
        srv_cond_wait_ms(&g->cv, &g->mu, WATCH_MS);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

omni_status srv_guard_start(const srv_guard_params *p, srv_guard **out) {
    *out = NULL;
    srv_guard *g = calloc(1, sizeof *g);
    if (!g) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    g->p = *p;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->th, NULL, watchdog, g)) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return omni_fail(OMNI_ERR_RUNTIME, "cannot start the connection watchdog thread");
    }
    *out = g;
    return OMNI_OK;
}

void srv_guard_free(srv_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    while (g->head) { /* none should be left; never leak */
        srv_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

srv_conn *srv_guard_open(srv_guard *g, int fd) {
    srv_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->t0 = now_ms();
    pthread_mutex_lock(&g->mu);
    c->prev = g->tail;
    if (g->tail) g->tail->next = c;
    else g->head = c;
    g->tail = c;
    if (++g->live > g->p.max_connections && g->p.max_connections > 0)
        for (srv_conn *o = g->head; o != c; o = o->next) /* make room: the oldest still waiting for a head */
            if (!o->shut && o->ph == PH_HEAD) {
                g->evicted++;
                shut(g, o, 0);
                break;
            }
    pthread_mutex_unlock(&g->mu);
    return c;
}

void srv_guard_close(srv_guard *g, srv_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else g->tail = c->prev;
    if (!c->shut) g->live--;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

int srv_guard_crowded(srv_guard *g) {
    pthread_mutex_lock(&g->mu);
    int r = g->p.max_connections > 0 && g->live > g->p.max_connections;
    pthread_mutex_unlock(&g->mu);
    return r;
}

static void set_phase(srv_guard *g, srv_conn *c, phase ph) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->ph = ph;
    c->t0 = now_ms();
    c->seen = 0;
    pthread_mutex_unlock(&g->mu);
}

void srv_guard_head_done(srv_guard *g, srv_conn *c) { set_phase(g, c, PH_BODY); }
void srv_guard_busy(srv_guard *g, srv_conn *c) { set_phase(g, c, PH_BUSY); }
void srv_guard_idle(srv_guard *g, srv_conn *c) { set_phase(g, c, PH_HEAD); }

void srv_guard_body(srv_guard *g, srv_conn *c, size_t bytes) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->seen += bytes;
    pthread_mutex_unlock(&g->mu);
}

int srv_guard_hold(srv_guard *g, size_t bytes) {
    if (g->p.max_held && bytes > g->p.max_held) return 2;
    pthread_mutex_lock(&g->mu);
    int rc = g->p.max_held && bytes > g->p.max_held - g->held;
    if (!rc) g->held += bytes;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void srv_guard_release(srv_guard *g, size_t bytes) {
    pthread_mutex_lock(&g->mu);
    g->held -= bytes <= g->held ? bytes : g->held;
    pthread_mutex_unlock(&g->mu);
}

void srv_guard_get_stats(srv_guard *g, srv_guard_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = (srv_guard_stats){g->live, g->held, g->closed, g->evicted};
    pthread_mutex_unlock(&g->mu);
}
