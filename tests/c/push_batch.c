/*
 * push_batch.c: xtcq_owner_push_batch from C. Job i's payload is its number in decimal
 * ("0", "1", ...), so a consumer can check each came exactly once.
 *
 *   usage: push_batch SOCKET produce QUEUE N BATCH   push jobs 0..N-1 in calls of BATCH
 *          push_batch SOCKET consume QUEUE N         steal_batch until 0..N-1 came, each once
 *          push_batch SOCKET edges                   argument errors, n 0, spills, too large
 *          push_batch SOCKET full QUEUE N            push N into a segment with fewer records:
 *                                                    the part-way failure, then the rest
 *          push_batch SOCKET forever QUEUE           push batches of 64 until killed, printing
 *                                                    "queued K" after each call
 *          push_batch SOCKET huge_len                xtcq_owner_push with len SIZE_MAX
 *          push_batch SOCKET hold QUEUE              a batch stolen before a daemon restart
 *                                                    (a line on stdin), acked after it
 *   exit: 0 when everything came as expected, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xtcq.h"

static int bad;

static void check(const char *what, int rc, int want) {
    if (rc != want) {
        fprintf(stderr, "push_batch: %s: got %d (%s: %s), want %d\n", what, rc, xtcq_strerror(rc),
                xtcq_last_error(), want);
        bad = 1;
    }
}

static void want_size(const char *what, size_t got, size_t want) {
    if (got != want) {
        fprintf(stderr, "push_batch: %s: got %zu, want %zu\n", what, got, want);
        bad = 1;
    }
}

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Payloads "first" .. "first + n - 1" in `text` (12 bytes each), pointed to by ptrs/lens. */
static void numbers(size_t first, size_t n, char *text, const uint8_t **ptrs, size_t *lens) {
    for (size_t i = 0; i < n; i++) {
        char *p = text + 12 * i;
        lens[i] = (size_t)snprintf(p, 12, "%zu", first + i);
        ptrs[i] = (const uint8_t *)p;
    }
}

typedef struct {
    xtcq_client *c;
    xtcq_owner *o;
    xtcq_thief *t;
} handles;

static int open_queue(const char *socket, const char *queue, uint32_t deques, uint32_t capacity, handles *h) {
    memset(h, 0, sizeof *h);
    check("connect", xtcq_connect(socket, &h->c), XTCQ_OK);
    if (bad) return 1;
    check("create", xtcq_create_queue(h->c, queue, deques, capacity, 0, 0, XTCQ_FIFO | XTCQ_EXIST_OK), XTCQ_OK);
    check("owner", xtcq_owner_attach(h->c, queue, &h->o), XTCQ_OK);
    check("thief", xtcq_thief_attach(h->c, queue, &h->t), XTCQ_OK);
    return bad;
}

static void close_queue(handles *h) {
    xtcq_thief_free(h->t);
    xtcq_owner_free(h->o);
    xtcq_client_free(h->c);
}

/* Steals everything there is (no waiting), marking seen[payload]; returns how many came.
 * A payload not a number below n, or seen twice, is an error. */
static size_t drain(xtcq_thief *t, unsigned char *seen, size_t n) {
    xtcq_job *jobs[32];
    for (int i = 0; i < 32; i++) xtcq_job_new(&jobs[i]);
    size_t total = 0, count = 0;
    int rc;
    while ((rc = xtcq_thief_steal_batch(t, jobs, 32, &count)) == XTCQ_OK) {
        for (size_t i = 0; i < count; i++) {
            const uint8_t *data = NULL;
            size_t len = 0;
            check("payload", xtcq_job_payload(jobs[i], &data, &len), XTCQ_OK);
            char buf[16] = {0};
            memcpy(buf, data, len < 15 ? len : 15);
            char *end = NULL;
            unsigned long long v = strtoull(buf, &end, 10);
            if (len == 0 || len > 15 || *end != '\0' || v >= n) {
                fprintf(stderr, "push_batch: a job with payload %.*s\n", (int)len, (const char *)data);
                bad = 1;
            } else if (seen[v]++) {
                fprintf(stderr, "push_batch: job %llu came twice\n", v);
                bad = 1;
            }
            check("ack", xtcq_job_ack(jobs[i]), XTCQ_OK);
        }
        total += count;
    }
    check("steal_batch until empty", rc, XTCQ_EMPTY);
    for (int i = 0; i < 32; i++) xtcq_job_free(jobs[i]);
    return total;
}

static int produce(const char *socket, const char *queue, size_t n, size_t batch) {
    handles h;
    if (open_queue(socket, queue, 2, 256, &h)) return 1;
    char *text = malloc(12 * batch);
    const uint8_t **ptrs = malloc(sizeof *ptrs * batch);
    size_t *lens = malloc(sizeof *lens * batch);
    for (size_t next = 0; next < n && !bad;) {
        size_t k = n - next < batch ? n - next : batch, queued = 99;
        numbers(next, k, text, ptrs, lens);
        check("push_batch", xtcq_owner_push_batch(h.o, ptrs, lens, k, &queued), XTCQ_OK);
        want_size("queued", queued, k);
        next += queued;
    }
    free(text), free(ptrs), free(lens);
    close_queue(&h);
    if (!bad) printf("push_batch: queued %zu jobs in calls of %zu\n", n, batch);
    return bad;
}

static int consume(const char *socket, const char *queue, size_t n) {
    handles h;
    if (open_queue(socket, queue, 2, 256, &h)) return 1;
    unsigned char *seen = calloc(n, 1);
    size_t got = 0;
    /* A generous deadline that fails instead of hanging: 60 s of 1 ms naps. */
    for (int naps = 0; got < n && !bad && naps < 60000; naps++) {
        got += drain(h.t, seen, n);
        if (got < n) nap_ms(1);
    }
    want_size("jobs consumed", got, n);
    free(seen);
    close_queue(&h);
    if (!bad) printf("push_batch: consumed %zu jobs, each once\n", n);
    return bad;
}


/* Every job in the queue is one of 0..n-1; returns how many there were (each once). */
static size_t drain_all(xtcq_thief *t, size_t n) {
    unsigned char *seen = calloc(n ? n : 1, 1);
    size_t got = drain(t, seen, n);
    free(seen);
    return got;
}

static int edges(const char *socket) {
    handles h;
    if (open_queue(socket, "edges", 1, 64, &h)) return 1;
    enum { N = 300 };
    static char text[12 * N];
    static const uint8_t *ptrs[N];
    static size_t lens[N + 1];
    numbers(0, N, text, ptrs, lens);
    size_t q = 99;

    check("n 0", xtcq_owner_push_batch(h.o, NULL, NULL, 0, &q), XTCQ_OK);
    want_size("queued after n 0", q, 0);
    check("owner NULL", xtcq_owner_push_batch(NULL, ptrs, lens, 1, &q), XTCQ_E_INVALID);
    check("queued NULL", xtcq_owner_push_batch(h.o, ptrs, lens, 1, NULL), XTCQ_E_INVALID);
    check("payloads NULL", xtcq_owner_push_batch(h.o, NULL, lens, 1, &q), XTCQ_E_INVALID);
    check("lens NULL", xtcq_owner_push_batch(h.o, ptrs, NULL, 1, &q), XTCQ_E_INVALID);
    check("n SIZE_MAX", xtcq_owner_push_batch(h.o, ptrs, lens, SIZE_MAX, &q), XTCQ_E_INVALID);
    check("n SIZE_MAX / 8 + 1", xtcq_owner_push_batch(h.o, ptrs, lens, SIZE_MAX / 8 + 1, &q), XTCQ_E_INVALID);
    size_t *odd = (size_t *)(void *)((char *)lens + 1);
    check("lens misaligned", xtcq_owner_push_batch(h.o, ptrs, odd, 2, &q), XTCQ_E_INVALID);

    /* queued inside an array the call reads: refused, nothing queued, the arrays intact. */
    size_t len1 = lens[1];
    check("queued inside lens", xtcq_owner_push_batch(h.o, ptrs, lens, 10, &lens[1]), XTCQ_E_INVALID);
    want_size("lens[1] after queued inside lens", lens[1], len1);
    const uint8_t *ptr1 = ptrs[1];
    check("queued inside payloads", xtcq_owner_push_batch(h.o, ptrs, lens, 10, (size_t *)(void *)&ptrs[1]),
          XTCQ_E_INVALID);
    if (ptrs[1] != ptr1) fprintf(stderr, "push_batch: payloads[1] overwritten\n"), bad = 1;
    check("queued inside a payload", xtcq_owner_push_batch(h.o, ptrs, lens, 10, (size_t *)(void *)text),
          XTCQ_E_INVALID);
    if (strcmp(text, "0") != 0) fprintf(stderr, "push_batch: payload 0 overwritten\n"), bad = 1;
    want_size("jobs queued with queued inside an array", drain_all(h.t, N), 0);

    /* A bad entry in the middle: nothing of the batch is queued. */
    const uint8_t *keep = ptrs[5];
    ptrs[5] = NULL;
    check("NULL payload with a length", xtcq_owner_push_batch(h.o, ptrs, lens, 10, &q), XTCQ_E_INVALID);
    want_size("queued after a NULL payload", q, 0);
    ptrs[5] = keep;
    size_t len5 = lens[5];
    lens[5] = SIZE_MAX;
    check("len SIZE_MAX", xtcq_owner_push_batch(h.o, ptrs, lens, 10, &q), XTCQ_E_TOO_LARGE);
    want_size("queued after len SIZE_MAX", q, 0);
    static uint8_t big[100];
    ptrs[5] = big, lens[5] = sizeof big; /* the segment's payloads hold 64 bytes */
    check("payload too large", xtcq_owner_push_batch(h.o, ptrs, lens, 10, &q), XTCQ_E_TOO_LARGE);
    want_size("queued after a payload too large", q, 0);
    ptrs[5] = keep, lens[5] = len5;
    want_size("jobs queued by refused batches", drain_all(h.t, N), 0);

    /* NULL with length 0 is an empty payload. */
    const uint8_t *empty[1] = {NULL};
    size_t zero[1] = {0};
    check("NULL payload of length 0", xtcq_owner_push_batch(h.o, empty, zero, 1, &q), XTCQ_OK);
    want_size("queued the empty payload", q, 1);
    xtcq_job *j = NULL;
    xtcq_job_new(&j);
    check("steal the empty payload", xtcq_thief_steal(h.t, j), XTCQ_OK);
    const uint8_t *data = NULL;
    size_t len = 99;
    check("payload", xtcq_job_payload(j, &data, &len), XTCQ_OK);
    want_size("empty payload's length", len, 0);
    check("ack", xtcq_job_ack(j), XTCQ_OK);
    xtcq_job_free(j);

    /* The queue cannot be deleted under an attached owner; the batch still goes in. */
    check("delete while attached", xtcq_delete_queue(h.c, "edges", 1), XTCQ_E_IN_USE);

    /* 50, then 250 more: past 128 and past the deque's 64, the rest spills to the ring. */
    check("batch of 50", xtcq_owner_push_batch(h.o, ptrs, lens, 50, &q), XTCQ_OK);
    want_size("queued of 50", q, 50);
    check("batch of 250", xtcq_owner_push_batch(h.o, ptrs + 50, lens + 50, N - 50, &q), XTCQ_OK);
    want_size("queued of 250", q, N - 50);
    want_size("owner's deque", xtcq_owner_len(h.o), 64);
    want_size("jobs of the two batches", drain_all(h.t, N), N);
    close_queue(&h);
    if (!bad) printf("push_batch: edges as documented\n");
    return bad;
}

/* Into a segment with fewer records than n: the first call stops part-way with
 * XTCQ_E_FULL, exactly the jobs it says are queued come out, then the rest go in. */
static int full(const char *socket, const char *queue, size_t n) {
    handles h;
    if (open_queue(socket, queue, 1, 256, &h)) return 1;
    char *text = malloc(12 * n);
    const uint8_t **ptrs = malloc(sizeof *ptrs * n);
    size_t *lens = malloc(sizeof *lens * n);
    unsigned char *seen = calloc(n, 1);
    numbers(0, n, text, ptrs, lens);
    size_t next = 0, got = 0, q = 0;
    int rc = xtcq_owner_push_batch(h.o, ptrs, lens, n, &q);
    check("a batch larger than the records", rc, XTCQ_E_FULL);
    if (q == 0 || q >= n) {
        fprintf(stderr, "push_batch: queued %zu of %zu before XTCQ_E_FULL\n", q, n);
        bad = 1;
    }
    printf("push_batch: first call queued %zu of %zu, then %s\n", q, n, xtcq_strerror(rc));
    for (int round = 0; round < 1000 && !bad; round++) {
        next += q;
        size_t came = drain(h.t, seen, n);
        /* Only what the calls said went in, and all of it. */
        want_size("jobs stolen after the call", got + came, next);
        for (size_t i = 0; i < next && !bad; i++) {
            if (!seen[i]) fprintf(stderr, "push_batch: job %zu was said queued, never came\n", i), bad = 1;
        }
        got += came;
        if (next == n) break;
        rc = xtcq_owner_push_batch(h.o, ptrs + next, lens + next, n - next, &q);
        if (rc != XTCQ_OK && rc != XTCQ_E_FULL) check("the rest", rc, XTCQ_OK);
    }
    want_size("jobs in all", got, n);
    free(text), free(ptrs), free(lens), free(seen);
    close_queue(&h);
    if (!bad) printf("push_batch: %zu jobs through a full segment, each once\n", n);
    return bad;
}

/* Pushes batches of 64 until killed; "queued K" after each call (jobs 0..K-1 queued). */
static int forever(const char *socket, const char *queue) {
    handles h;
    if (open_queue(socket, queue, 2, 256, &h)) return 1;
    static char text[12 * 64];
    static const uint8_t *ptrs[64];
    static size_t lens[64];
    for (size_t next = 0;;) {
        size_t q = 0;
        numbers(next, 64, text, ptrs, lens);
        int rc = xtcq_owner_push_batch(h.o, ptrs, lens, 64, &q);
        next += q;
        printf("queued %zu\n", next);
        fflush(stdout);
        if (rc == XTCQ_E_FULL) {
            nap_ms(1);
        } else if (rc != XTCQ_OK) {
            check("push_batch", rc, XTCQ_OK);
            return 1;
        }
    }
}

/* Pushes jobs 0..9 in one batch and steals them in one; once a line comes on stdin (the
 * daemon restarted meanwhile) acks each, then pushes 10..19 in one more batch. Prints what
 * each call returned. */
static int hold(const char *socket, const char *queue) {
    handles h;
    if (open_queue(socket, queue, 1, 256, &h)) return 1;
    static char text[12 * 20];
    static const uint8_t *ptrs[20];
    static size_t lens[20];
    numbers(0, 20, text, ptrs, lens);
    size_t q = 0, count = 0;
    check("push_batch", xtcq_owner_push_batch(h.o, ptrs, lens, 10, &q), XTCQ_OK);
    xtcq_job *jobs[10];
    for (int i = 0; i < 10; i++) xtcq_job_new(&jobs[i]);
    check("steal_batch", xtcq_thief_steal_batch(h.t, jobs, 10, &count), XTCQ_OK);
    printf("stolen %zu\n", count);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    for (size_t i = 0; i < count; i++) {
        const uint8_t *data = NULL;
        size_t len = 0;
        check("payload", xtcq_job_payload(jobs[i], &data, &len), XTCQ_OK);
        int rc = xtcq_job_ack(jobs[i]);
        printf("ack %.*s %d\n", (int)len, (const char *)data, rc);
    }
    q = 99;
    int rc = xtcq_owner_push_batch(h.o, ptrs + 10, lens + 10, 10, &q);
    printf("push_batch after %d queued %zu\n", rc, q);
    if (rc < 0) printf("because %s\n", xtcq_last_error());
    for (int i = 0; i < 10; i++) xtcq_job_free(jobs[i]);
    close_queue(&h);
    return bad;
}

/* A length no buffer has: refused, not a crash. */
static int huge_len(const char *socket) {
    handles h;
    if (open_queue(socket, "huge", 1, 256, &h)) return 1;
    xtcq_injector *in = NULL;
    check("injector", xtcq_injector_attach(h.c, "huge", &in), XTCQ_OK);
    static const uint8_t byte[1] = {'x'};
    check("owner push of SIZE_MAX bytes", xtcq_owner_push(h.o, byte, SIZE_MAX), XTCQ_E_TOO_LARGE);
    check("injector push of SIZE_MAX bytes", xtcq_injector_push(in, byte, SIZE_MAX), XTCQ_E_TOO_LARGE);
    check("delayed push of SIZE_MAX bytes", xtcq_injector_push_delayed(in, byte, SIZE_MAX, 1), XTCQ_E_TOO_LARGE);
    xtcq_injector_free(in);
    close_queue(&h);
    if (!bad) printf("push_batch: lengths past any buffer refused\n");
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: push_batch SOCKET MODE ...\n");
        return 2;
    }
    const char *socket = argv[1], *mode = argv[2];
    if (!strcmp(mode, "produce") && argc == 6)
        return produce(socket, argv[3], strtoull(argv[4], NULL, 10), strtoull(argv[5], NULL, 10));
    if (!strcmp(mode, "consume") && argc == 5) return consume(socket, argv[3], strtoull(argv[4], NULL, 10));
    if (!strcmp(mode, "edges") && argc == 3) return edges(socket);
    if (!strcmp(mode, "full") && argc == 5) return full(socket, argv[3], strtoull(argv[4], NULL, 10));
    if (!strcmp(mode, "forever") && argc == 4) return forever(socket, argv[3]);
    if (!strcmp(mode, "huge_len") && argc == 3) return huge_len(socket);
    if (!strcmp(mode, "hold") && argc == 4) return hold(socket, argv[3]);
    fprintf(stderr, "push_batch: unknown mode or arguments\n");
    return 2;
}
