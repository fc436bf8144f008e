/*
 * inject_many.c: xtcq_injector_push_many from C. Job i's payload is its number in decimal,
 * so the thief can check each came exactly once, with the id the push stored.
 *
 *   usage: inject_many SOCKET round QUEUE N   push jobs 0..N-1 in one call, steal them all
 *          inject_many SOCKET edges QUEUE     argument errors, n 0, a payload too large
 *          inject_many SOCKET full QUEUE N    push N into a segment with fewer records: the
 *                                             part-way failure, and the ids of those queued
 *   exit: 0 when everything came as expected, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xtcq.h"

static int bad;

static void check(const char *what, int rc, int want) {
    if (rc != want) {
        fprintf(stderr, "inject_many: %s: got %d (%s: %s), want %d\n", what, rc, xtcq_strerror(rc),
                xtcq_last_error(), want);
        bad = 1;
    }
}

static void want_size(const char *what, size_t got, size_t want) {
    if (got != want) {
        fprintf(stderr, "inject_many: %s: got %zu, want %zu\n", what, got, want);
        bad = 1;
    }
}

/* Payloads 0 .. n-1 in `text` (12 bytes each), pointed to by ptrs/lens. */
static void numbers(size_t n, char *text, const uint8_t **ptrs, size_t *lens) {
    for (size_t i = 0; i < n; i++) {
        char *p = text + 12 * i;
        lens[i] = (size_t)snprintf(p, 12, "%zu", i);
        ptrs[i] = (const uint8_t *)p;
    }
}

/* Steals every job there is: each must be a number below `queued`, come once, and carry the
 * id ids[number]. Returns how many came. */
static size_t steal_all(xtcq_thief *t, size_t queued, const uint64_t *ids) {
    xtcq_job *j;
    char *seen = calloc(queued + 1, 1);
    size_t came = 0;
    check("job_new", xtcq_job_new(&j), XTCQ_OK);
    while (xtcq_thief_steal(t, j) == XTCQ_OK) {
        const uint8_t *data;
        size_t len;
        char buf[16] = {0};
        xtcq_job_info info;
        check("payload", xtcq_job_payload(j, &data, &len), XTCQ_OK);
        memcpy(buf, data, len < 15 ? len : 15);
        size_t k = (size_t)strtoul(buf, NULL, 10);
        check("job info", xtcq_job_get_info(j, &info), XTCQ_OK);
        if (k >= queued || seen[k] || ids[k] != (((uint64_t)info.index << 32) | info.birth)) {
            fprintf(stderr, "inject_many: job %s (%u.%u) not expected, or twice\n", buf, info.index, info.birth);
            bad = 1;
        } else {
            seen[k] = 1;
        }
        check("ack", xtcq_job_ack(j), XTCQ_OK);
        came++;
    }
    xtcq_job_free(j);
    free(seen);
    return came;
}

static int run(const char *socket, const char *mode, const char *queue, size_t n) {
    xtcq_client *c;
    xtcq_injector *inj;
    xtcq_thief *t;
    check("connect", xtcq_connect(socket, &c), XTCQ_OK);
    if (bad) return 1;
    check("create", xtcq_create_queue(c, queue, 1, 64, 0, 0, XTCQ_FIFO | XTCQ_EXIST_OK), XTCQ_OK);
    check("injector", xtcq_injector_attach(c, queue, &inj), XTCQ_OK);
    check("thief", xtcq_thief_attach(c, queue, &t), XTCQ_OK);
    if (bad) return 1;
    char *text = malloc(12 * (n + 1));
    const uint8_t **ptrs = malloc(sizeof *ptrs * (n + 1));
    size_t *lens = malloc(sizeof *lens * (n + 1));
    uint64_t *ids = calloc(n + 1, sizeof *ids);
    size_t queued = 99;
    numbers(n, text, ptrs, lens);
    if (strcmp(mode, "round") == 0) {
        check("push_many", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, &queued), XTCQ_OK);
        want_size("queued", queued, n);
        want_size("stolen", steal_all(t, queued, ids), n);
        if (!bad) printf("pushed and stole %zu jobs, each once, with its id\n", n);
    } else if (strcmp(mode, "full") == 0) {
        int rc = xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, &queued);
        if (rc != XTCQ_E_FULL || queued == 0 || queued >= n) {
            fprintf(stderr, "inject_many: full: rc %d, queued %zu of %zu\n", rc, queued, n);
            bad = 1;
        }
        want_size("stolen", steal_all(t, queued, ids), queued);
        if (!bad) printf("queued %zu of %zu, then full\n", queued, n);
    } else {
        /* Each refused before anything is queued, with *queued 0. */
        check("NULL injector", xtcq_injector_push_many(NULL, ptrs, lens, n, 0, ids, &queued), XTCQ_E_INVALID);
        check("NULL queued", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, NULL), XTCQ_E_INVALID);
        check("ids over lens", xtcq_injector_push_many(inj, ptrs, lens, n, 0, (uint64_t *)lens, &queued),
              XTCQ_E_INVALID);
        check("queued in lens", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, &lens[1]), XTCQ_E_INVALID);
        check("queued in ids", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, (size_t *)&ids[1]),
              XTCQ_E_INVALID);
        /* The outputs may not overlap a job's bytes either: the ids (or the count) would be
         * written into jobs not yet queued. */
        numbers(n, text, ptrs, lens);
        queued = 99;
        check("ids over a payload",
              xtcq_injector_push_many(inj, ptrs, lens, n, 0, (uint64_t *)(void *)(text + 24), &queued),
              XTCQ_E_INVALID);
        want_size("queued after ids over a payload", queued, 0);
        check("queued in a payload", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, (size_t *)(void *)text),
              XTCQ_E_INVALID);
        if (strcmp(text, "0") != 0) {
            fprintf(stderr, "inject_many: a refused call wrote into payload 0\n");
            bad = 1;
        }
        check("n past any array", xtcq_injector_push_many(inj, ptrs, lens, SIZE_MAX, 0, NULL, &queued),
              XTCQ_E_INVALID);
        check("n past any array, ids", xtcq_injector_push_many(inj, ptrs, lens, SIZE_MAX / 2, 0, ids, &queued),
              XTCQ_E_INVALID);
        lens[2] = SIZE_MAX;
        check("len gone negative", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, &queued), XTCQ_E_TOO_LARGE);
        want_size("queued after len gone negative", queued, 0);
        numbers(n, text, ptrs, lens);
        lens[1] = 5;
        ptrs[1] = NULL;
        check("NULL payload", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, &queued), XTCQ_E_INVALID);
        want_size("queued after NULL payload", queued, 0);
        numbers(n, text, ptrs, lens);
        lens[n - 1] = (size_t)1 << 30;
        check("too large", xtcq_injector_push_many(inj, ptrs, lens, n, 0, ids, &queued), XTCQ_E_TOO_LARGE);
        want_size("queued after too large", queued, 0);
        check("priority", xtcq_injector_push_many(inj, ptrs, lens, 2, 7, ids, &queued), XTCQ_E_INVALID);
        want_size("queued after priority", queued, 0);
        check("n 0", xtcq_injector_push_many(inj, NULL, NULL, 0, 0, NULL, &queued), XTCQ_OK);
        numbers(n, text, ptrs, lens);
        check("ids NULL", xtcq_injector_push_many(inj, ptrs, lens, n, 0, NULL, &queued), XTCQ_OK);
        want_size("queued, ids NULL", queued, n);
        xtcq_job *j;
        size_t came = 0;
        check("job_new", xtcq_job_new(&j), XTCQ_OK);
        while (xtcq_thief_steal(t, j) == XTCQ_OK) {
            check("ack", xtcq_job_ack(j), XTCQ_OK);
            came++;
        }
        xtcq_job_free(j);
        want_size("stolen, ids NULL", came, n);
        if (!bad) printf("edges as documented\n");
    }
    free(text);
    free(ptrs);
    free(lens);
    free(ids);
    xtcq_thief_free(t);
    xtcq_injector_free(inj);
    xtcq_client_free(c);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: inject_many SOCKET MODE QUEUE [N]\n"), 1;
    size_t n = argc > 4 ? (size_t)strtoul(argv[4], NULL, 10) : 300;
    if (n < 2) return fprintf(stderr, "inject_many: N must be 2 or more\n"), 1;
    return run(argv[1], argv[2], argv[3], n);
}
