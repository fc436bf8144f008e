/*
 * bench_api.c: the C API's cost per job, in one process and one thread: push N 64-byte
 * jobs, then steal, read and ack them, REPS times; prints the median ns per job of each
 * phase as "push_ns=P steal_ack_ns=S" (tests/benches/api_cost.rs runs it).
 *
 *   usage: bench_api SOCKET QUEUE N REPS
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xtcq.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(const char *what, int rc) {
    fprintf(stderr, "bench_api: %s: %s: %s\n", what, xtcq_strerror(rc), xtcq_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 5) return fprintf(stderr, "usage: %s SOCKET QUEUE N REPS\n", argv[0]), 1;
    long n = atol(argv[3]), reps = atol(argv[4]);
    if (n <= 0 || reps <= 0 || reps > 100) return fprintf(stderr, "bench_api: bad N or REPS\n"), 1;
    xtcq_client *c;
    xtcq_owner *o;
    xtcq_thief *t;
    xtcq_job *j;
    int rc = xtcq_connect(argv[1], &c);
    if (rc == XTCQ_OK) rc = xtcq_owner_attach(c, argv[2], &o);
    if (rc == XTCQ_OK) rc = xtcq_thief_attach(c, argv[2], &t);
    if (rc == XTCQ_OK) rc = xtcq_job_new(&j);
    if (rc != XTCQ_OK) return die("setup", rc);
    uint8_t msg[64], out[64];
    memset(msg, 'x', sizeof msg);
    double push[100], take[100];
    for (long r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < n; i++)
            if ((rc = xtcq_owner_push(o, msg, sizeof msg)) != XTCQ_OK) return die("push", rc);
        uint64_t t1 = now_ns();
        for (long i = 0; i < n; i++) {
            size_t len;
            if ((rc = xtcq_thief_steal(t, j)) != XTCQ_OK) return die("steal", rc);
            if ((rc = xtcq_job_copy_payload(j, out, sizeof out, &len)) != XTCQ_OK) return die("payload", rc);
            if ((rc = xtcq_job_ack(j)) != XTCQ_OK) return die("ack", rc);
        }
        uint64_t t2 = now_ns();
        push[r] = (double)(t1 - t0) / (double)n;
        take[r] = (double)(t2 - t1) / (double)n;
    }
    qsort(push, (size_t)reps, sizeof push[0], cmp);
    qsort(take, (size_t)reps, sizeof take[0], cmp);
    printf("push_ns=%.1f steal_ack_ns=%.1f\n", push[reps / 2], take[reps / 2]);
    xtcq_job_free(j);
    xtcq_thief_free(t);
    xtcq_owner_free(o);
    xtcq_client_free(c);
    return 0;
}
