/*
 * steal_batch.c: xtcq_thief_steal_batch from C. Pushes 10 jobs ("0".."9") to a FIFO queue,
 * takes them in batches of up to 4 (4, 4, 2, then XTCQ_EMPTY), each job once and oldest
 * first, acks every one, and checks the argument errors (a handle named twice, a handle
 * still holding a job, n out of range).
 *
 *   usage: steal_batch SOCKET
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
        fprintf(stderr, "steal_batch: %s: got %d (%s: %s), want %d\n", what, rc, xtcq_strerror(rc),
                xtcq_last_error(), want);
        bad = 1;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: steal_batch SOCKET\n");
        return 2;
    }
    xtcq_client *c = NULL;
    xtcq_owner *o = NULL;
    xtcq_thief *t = NULL;
    check("connect", xtcq_connect(argv[1], &c), XTCQ_OK);
    check("create", xtcq_create_queue(c, "batch", 1, 64, 0, 0, XTCQ_FIFO), XTCQ_OK);
    check("owner", xtcq_owner_attach(c, "batch", &o), XTCQ_OK);
    check("thief", xtcq_thief_attach(c, "batch", &t), XTCQ_OK);
    if (bad) return 1;
    for (int i = 0; i < 10; i++) {
        char p = (char)('0' + i);
        check("push", xtcq_owner_push(o, (const uint8_t *)&p, 1), XTCQ_OK);
    }

    xtcq_job *jobs[4];
    for (int i = 0; i < 4; i++) check("job_new", xtcq_job_new(&jobs[i]), XTCQ_OK);
    size_t count = 99;

    xtcq_job *twice[2] = {jobs[0], jobs[0]};
    check("a handle named twice", xtcq_thief_steal_batch(t, twice, 2, &count), XTCQ_E_INVALID);
    check("n = 0", xtcq_thief_steal_batch(t, jobs, 0, &count), XTCQ_E_INVALID);
    check("n > XTCQ_MAX_BATCH", xtcq_thief_steal_batch(t, jobs, XTCQ_MAX_BATCH + 1, &count), XTCQ_E_INVALID);

    const size_t want_counts[3] = {4, 4, 2};
    int next = 0;
    for (int round = 0; round < 3; round++) {
        check("steal_batch", xtcq_thief_steal_batch(t, jobs, 4, &count), XTCQ_OK);
        if (count != want_counts[round]) {
            fprintf(stderr, "steal_batch: round %d took %zu jobs, want %zu\n", round, count, want_counts[round]);
            return 1;
        }
        if (round == 0) {
            /* A handle still holding a job is refused, and nothing is taken. */
            check("handles still holding jobs", xtcq_thief_steal_batch(t, jobs, 4, &count), XTCQ_E_INVALID);
            count = want_counts[0];
        }
        for (size_t i = 0; i < count; i++) {
            const uint8_t *data = NULL;
            size_t len = 0;
            check("payload", xtcq_job_payload(jobs[i], &data, &len), XTCQ_OK);
            if (len != 1 || data[0] != (uint8_t)('0' + next)) {
                fprintf(stderr, "steal_batch: job %zu of round %d is not job %d\n", i, round, next);
                bad = 1;
            }
            next++;
            check("ack", xtcq_job_ack(jobs[i]), XTCQ_OK);
        }
    }
    check("empty", xtcq_thief_steal_batch(t, jobs, 4, &count), XTCQ_EMPTY);
    if (count != 0) {
        fprintf(stderr, "steal_batch: count %zu after XTCQ_EMPTY\n", count);
        bad = 1;
    }
    for (int i = 0; i < 4; i++) xtcq_job_free(jobs[i]);
    xtcq_thief_free(t);
    xtcq_owner_free(o);
    xtcq_client_free(c);
    if (!bad) printf("steal_batch: 10 jobs in batches of 4, 4, 2, each once\n");
    return bad;
}
