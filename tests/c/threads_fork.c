/* Red team 8: the C API's handles from several pthreads, then a fork.
 *
 * Usage: threads_fork SOCKET QUEUE JOBS ROUNDS
 *
 * - An injector pushes JOBS/2 on a pthread while the main thread pushes JOBS/2 through an
 *   owner; four pthreads share one thief for ROUNDS rounds: each steals into its own job,
 *   then (after a barrier) acks its neighbour's, so every claim is acked on another thread
 *   than the one that made it. The main thread drains the rest.
 * - Then fork(): in the child every inherited handle must answer XTCQ_E_FORKED (the child
 *   exits 0 only if they all do); the parent then pushes, steals and acks one more job.
 * - Prints "done N" (the jobs acked in all) and exits 0, or says what failed and exits 1.
 */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xtcq.h"

#define WORKERS 4

static xtcq_thief *thief;
static xtcq_job *jobs[WORKERS];
static pthread_barrier_t barrier;
static atomic_ulong acked;
static int rounds;

static void die(const char *what, int status) {
    fprintf(stderr, "%s: %s (%s)\n", what, xtcq_strerror(status), xtcq_last_error());
    exit(1);
}

static void *worker(void *arg) {
    int k = (int)(intptr_t)arg;
    for (int r = 0; r < rounds; r++) {
        int s = xtcq_thief_steal(thief, jobs[k]);
        if (s != XTCQ_OK && s != XTCQ_EMPTY) die("steal", s);
        pthread_barrier_wait(&barrier);
        xtcq_job *theirs = jobs[(k + 1) % WORKERS];
        if (xtcq_job_held(theirs)) {
            s = xtcq_job_ack(theirs);
            if (s != XTCQ_OK) die("ack of a neighbour's job", s);
            atomic_fetch_add(&acked, 1);
        }
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

struct push_args {
    xtcq_injector *injector;
    long n;
};

static void *pusher(void *arg) {
    struct push_args *p = arg;
    for (long i = 0; i < p->n; i++) {
        int s;
        while ((s = xtcq_injector_push(p->injector, (const uint8_t *)"i", 1)) == XTCQ_E_FULL ||
               s == XTCQ_E_NO_ROOM)
            sched_yield();
        if (s != XTCQ_OK) die("injector push", s);
    }
    return NULL;
}

static long drain(xtcq_job *job) {
    long n = 0;
    int s;
    while ((s = xtcq_thief_steal(thief, job)) == XTCQ_OK) {
        if ((s = xtcq_job_ack(job)) != XTCQ_OK) die("drain ack", s);
        n++;
    }
    if (s != XTCQ_EMPTY) die("drain steal", s);
    return n;
}

/* In a forked child: every inherited handle must refuse. */
static int child_checks(xtcq_owner *owner, xtcq_injector *injector, xtcq_job *job) {
    int bad = 0;
    bad |= xtcq_thief_steal(thief, job) != XTCQ_E_FORKED;
    bad |= xtcq_owner_push(owner, (const uint8_t *)"c", 1) != XTCQ_E_FORKED;
    bad |= xtcq_injector_push(injector, (const uint8_t *)"c", 1) != XTCQ_E_FORKED;
    bad |= xtcq_owner_pop(owner, job) != XTCQ_E_FORKED;
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s SOCKET QUEUE JOBS ROUNDS\n", argv[0]);
        return 2;
    }
    long total = atol(argv[3]);
    rounds = atoi(argv[4]);
    xtcq_client *client;
    xtcq_owner *owner;
    xtcq_injector *injector;
    int s;
    if ((s = xtcq_connect(argv[1], &client)) != XTCQ_OK) die("connect", s);
    if ((s = xtcq_owner_attach(client, argv[2], &owner)) != XTCQ_OK) die("owner", s);
    if ((s = xtcq_injector_attach(client, argv[2], &injector)) != XTCQ_OK) die("injector", s);
    if ((s = xtcq_thief_attach(client, argv[2], &thief)) != XTCQ_OK) die("thief", s);
    for (int k = 0; k < WORKERS; k++)
        if ((s = xtcq_job_new(&jobs[k])) != XTCQ_OK) die("job", s);
    pthread_barrier_init(&barrier, NULL, WORKERS);

    pthread_t threads[WORKERS + 1];
    struct push_args pa = {injector, total / 2};
    pthread_create(&threads[WORKERS], NULL, pusher, &pa);
    for (int k = 0; k < WORKERS; k++) pthread_create(&threads[k], NULL, worker, (void *)(intptr_t)k);
    for (long i = 0; i < total - total / 2; i++) {
        while ((s = xtcq_owner_push(owner, (const uint8_t *)"o", 1)) == XTCQ_E_FULL || s == XTCQ_E_NO_ROOM)
            sched_yield();
        if (s != XTCQ_OK) die("owner push", s);
    }
    for (int k = 0; k <= WORKERS; k++) pthread_join(threads[k], NULL);
    long done = (long)atomic_load(&acked) + drain(jobs[0]);
    if (done != total) {
        fprintf(stderr, "acked %ld of %ld jobs\n", done, total);
        return 1;
    }

    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) _exit(child_checks(owner, injector, jobs[1]));
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "an inherited handle acted in the forked child\n");
        return 1;
    }
    if ((s = xtcq_owner_push(owner, (const uint8_t *)"p", 1)) != XTCQ_OK) die("push after fork", s);
    done += drain(jobs[0]);
    printf("done %ld\n", done);
    for (int k = 0; k < WORKERS; k++) xtcq_job_free(jobs[k]);
    xtcq_thief_free(thief);
    xtcq_injector_free(injector);
    xtcq_owner_free(owner);
    xtcq_client_free(client);
    return 0;
}
