/*
 * block_boundaries.c: payload blocks and xtcq_thief_steal_batch from a C caller that pushes
 * at every class boundary and misuses the batch call.
 *
 * The daemon keeps 100 bytes inline (a 128-byte area) and 2 blocks of each size from 256 B
 * to 64 KiB; the largest payload is 64 KiB.
 *   - every boundary (inline area and one past it, each class size, one below and one past
 *     it, the largest) through xtcq_owner_push and xtcq_injector_push round-trips byte for
 *     byte; one past the largest is XTCQ_E_TOO_LARGE;
 *   - a third 64 KiB job with both 64 KiB blocks held is XTCQ_E_FULL naming the class and
 *     the flag; once one is acked the push goes;
 *   - xtcq_thief_steal_batch with a NULL thief, NULL jobs, a NULL count, a NULL handle in
 *     jobs, n = XTCQ_MAX_BATCH + 1 and in a forked child: a status code, never a crash;
 *     n = XTCQ_MAX_BATCH takes what there is.
 *
 *   usage: block_boundaries SOCKET
 *   exit: 0 when everything came as expected, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xtcq.h"

static int bad;

static void check(const char *what, int rc, int want) {
    if (rc != want) {
        fprintf(stderr, "block_boundaries: %s: got %d (%s: %s), want %d\n", what, rc, xtcq_strerror(rc),
                xtcq_last_error(), want);
        bad = 1;
    }
}

static uint8_t *payload(size_t len, unsigned seed) {
    uint8_t *p = malloc(len ? len : 1);
    for (size_t k = 0; k < len; k++) p[k] = (uint8_t)(k * 31u + seed * 131u);
    return p;
}

/* Steals one job into `j`, checks it is `len` bytes of payload(len, seed), acks it. */
static void take_one(xtcq_thief *t, xtcq_job *j, size_t len, unsigned seed, const char *how) {
    check("steal", xtcq_thief_steal(t, j), XTCQ_OK);
    const uint8_t *data = NULL;
    size_t got = 0;
    check("payload", xtcq_job_payload(j, &data, &got), XTCQ_OK);
    uint8_t *want = payload(len, seed);
    if (got != len || (len && memcmp(data, want, len) != 0)) {
        fprintf(stderr, "block_boundaries: %s: %zu bytes came back as %zu, or different\n", how, len, got);
        bad = 1;
    }
    free(want);
    check("ack", xtcq_job_ack(j), XTCQ_OK);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: block_boundaries SOCKET\n");
        return 2;
    }
    xtcq_client *c = NULL;
    xtcq_owner *o = NULL;
    xtcq_injector *in = NULL;
    xtcq_thief *t = NULL;
    xtcq_job *j = NULL;
    check("connect", xtcq_connect(argv[1], &c), XTCQ_OK);
    check("create", xtcq_create_queue(c, "rt", 1, 64, 0, 0, XTCQ_FIFO), XTCQ_OK);
    check("owner", xtcq_owner_attach(c, "rt", &o), XTCQ_OK);
    check("injector", xtcq_injector_attach(c, "rt", &in), XTCQ_OK);
    check("thief", xtcq_thief_attach(c, "rt", &t), XTCQ_OK);
    check("job_new", xtcq_job_new(&j), XTCQ_OK);
    if (bad) return 1;

    size_t sizes[64];
    int n = 0;
    size_t base[] = {0, 1, 127, 128, 129};
    for (int i = 0; i < 5; i++) sizes[n++] = base[i];
    for (size_t s = 256; s <= 65536; s *= 2) {
        sizes[n++] = s - 1;
        sizes[n++] = s;
        if (s < 65536) sizes[n++] = s + 1;
    }
    for (int i = 0; i < n; i++) {
        uint8_t *p = payload(sizes[i], (unsigned)i);
        check("owner push", xtcq_owner_push(o, p, sizes[i]), XTCQ_OK);
        take_one(t, j, sizes[i], (unsigned)i, "owner push");
        check("injector push", xtcq_injector_push(in, p, sizes[i]), XTCQ_OK);
        take_one(t, j, sizes[i], (unsigned)i, "injector push");
        free(p);
    }
    uint8_t *big = payload(65537, 7);
    check("owner push 65537", xtcq_owner_push(o, big, 65537), XTCQ_E_TOO_LARGE);
    check("injector push 65537", xtcq_injector_push(in, big, 65537), XTCQ_E_TOO_LARGE);
    check("owner push NULL data", xtcq_owner_push(o, NULL, 5), XTCQ_E_INVALID);
    check("injector push NULL data", xtcq_injector_push(in, NULL, 5), XTCQ_E_INVALID);

    /* Both 64 KiB blocks held: the third is refused naming the class; an ack frees one. */
    check("push 64 KiB #1", xtcq_injector_push(in, big, 65536), XTCQ_OK);
    check("push 64 KiB #2", xtcq_injector_push(in, big, 65536), XTCQ_OK);
    check("push 64 KiB #3", xtcq_injector_push(in, big, 65536), XTCQ_E_FULL);
    const char *e = xtcq_last_error();
    if (!strstr(e, "65536 bytes") || !strstr(e, "--payload-blocks 65536=COUNT")) {
        fprintf(stderr, "block_boundaries: a dry class's message does not name it: %s\n", e);
        bad = 1;
    }
    take_one(t, j, 65536, 7, "a 64 KiB job");
    check("push 64 KiB once one is acked", xtcq_injector_push(in, big, 65536), XTCQ_OK);
    free(big);

    /* Misuse of xtcq_thief_steal_batch. */
    xtcq_job *jobs[XTCQ_MAX_BATCH + 1];
    for (int i = 0; i <= XTCQ_MAX_BATCH; i++) check("job_new", xtcq_job_new(&jobs[i]), XTCQ_OK);
    size_t count = 77;
    check("NULL thief", xtcq_thief_steal_batch(NULL, jobs, 4, &count), XTCQ_E_INVALID);
    check("NULL jobs", xtcq_thief_steal_batch(t, NULL, 4, &count), XTCQ_E_INVALID);
    if (count != 0) {
        fprintf(stderr, "block_boundaries: count %zu after a refused batch\n", count);
        bad = 1;
    }
    check("NULL count", xtcq_thief_steal_batch(t, jobs, 4, NULL), XTCQ_E_INVALID);
    xtcq_job *with_null[3] = {jobs[0], NULL, jobs[1]};
    check("a NULL handle in jobs", xtcq_thief_steal_batch(t, with_null, 3, &count), XTCQ_E_INVALID);
    check("n > XTCQ_MAX_BATCH", xtcq_thief_steal_batch(t, jobs, XTCQ_MAX_BATCH + 1, &count), XTCQ_E_INVALID);
    check("j still free", xtcq_job_held(j), 0);

    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        size_t cc = 0;
        int rc = xtcq_thief_steal_batch(t, jobs, 4, &cc);
        _exit(rc == XTCQ_E_FORKED ? 0 : 10 + (rc < 0 ? -rc : rc));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "block_boundaries: steal_batch in a forked child: status %#x\n", status);
        bad = 1;
    }

    /* The two jobs left (64 KiB), taken by one full-size batch, whole, and acked. */
    check("XTCQ_MAX_BATCH", xtcq_thief_steal_batch(t, jobs, XTCQ_MAX_BATCH, &count), XTCQ_OK);
    if (count != 2) {
        fprintf(stderr, "block_boundaries: a full-size batch took %zu jobs, want 2\n", count);
        bad = 1;
    }
    for (size_t i = 0; i < count; i++) {
        const uint8_t *data = NULL;
        size_t len = 0;
        check("batch payload", xtcq_job_payload(jobs[i], &data, &len), XTCQ_OK);
        if (len != 65536) bad = 1;
        check("batch ack", xtcq_job_ack(jobs[i]), XTCQ_OK);
    }
    check("empty", xtcq_thief_steal_batch(t, jobs, XTCQ_MAX_BATCH, &count), XTCQ_EMPTY);

    for (int i = 0; i <= XTCQ_MAX_BATCH; i++) xtcq_job_free(jobs[i]);
    xtcq_job_free(j);
    xtcq_thief_free(t);
    xtcq_injector_free(in);
    xtcq_owner_free(o);
    xtcq_client_free(c);
    if (!bad) printf("block_boundaries: %d sizes through owner and injector, misuse refused\n", n);
    return bad;
}
