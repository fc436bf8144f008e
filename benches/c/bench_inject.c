/*
 * bench_inject.c: what a many-row push from SQL costs the C API, per job: N jobs shaped as
 * the PostgreSQL extension's (its job header, then "job <i>"), pushed through an injector
 * one xtcq_injector_push_at call each ("one"), or in one xtcq_injector_push_many call
 * ("many"), alternately, REPS times each; prints the median ns per job of each as
 * "one_ns=A many_ns=B". Nothing takes the jobs: the daemon must hold 2 * N * REPS per
 * process (benches/benches/inject_many.rs runs it, in several processes at once).
 *
 *   usage: bench_inject SOCKET QUEUE N REPS
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
    fprintf(stderr, "bench_inject: %s: %s: %s\n", what, xtcq_strerror(rc), xtcq_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 5) return fprintf(stderr, "usage: %s SOCKET QUEUE N REPS\n", argv[0]), 1;
    long n = atol(argv[3]), reps = atol(argv[4]);
    if (n <= 0 || n > 100000 || reps <= 0 || reps > 1000) return fprintf(stderr, "bench_inject: bad N or REPS\n"), 1;
    xtcq_client *c;
    xtcq_injector *inj;
    int rc = xtcq_connect(argv[1], &c);
    if (rc == XTCQ_OK) rc = xtcq_injector_attach(c, argv[2], &inj);
    if (rc != XTCQ_OK) return die("setup", rc);
    /* The extension's jobs: its header line, then the element ("job 17"). */
    char *text = malloc(48 * (size_t)n);
    const uint8_t **ptrs = malloc(sizeof *ptrs * (size_t)n);
    size_t *lens = malloc(sizeof *lens * (size_t)n);
    uint64_t *ids = malloc(sizeof *ids * (size_t)n);
    double *one = malloc(sizeof *one * (size_t)reps), *many = malloc(sizeof *many * (size_t)reps);
    for (long i = 0; i < n; i++) {
        char *p = text + 48 * i;
        lens[i] = (size_t)snprintf(p, 48, "XTCQ-JOB 16384 0\njob %ld", i + 1);
        ptrs[i] = (const uint8_t *)p;
    }
    for (long r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < n; i++)
            if ((rc = xtcq_injector_push_at(inj, ptrs[i], lens[i], 0, 0, &ids[i])) != XTCQ_OK) return die("push_at", rc);
        uint64_t t1 = now_ns();
        size_t queued = 0;
        if ((rc = xtcq_injector_push_many(inj, ptrs, lens, (size_t)n, 0, ids, &queued)) != XTCQ_OK)
            return die("push_many", rc);
        uint64_t t2 = now_ns();
        one[r] = (double)(t1 - t0) / (double)n;
        many[r] = (double)(t2 - t1) / (double)n;
    }
    qsort(one, (size_t)reps, sizeof one[0], cmp);
    qsort(many, (size_t)reps, sizeof many[0], cmp);
    printf("one_ns=%.1f many_ns=%.1f\n", one[reps / 2], many[reps / 2]);
    xtcq_injector_free(inj);
    xtcq_client_free(c);
    return 0;
}
