/*
 * pool.c: a PostgreSQL-style backend pool over xtcq.
 *
 * A postmaster-like parent connects, creates a queue, owns one of its deques and forks N
 * backends. Each backend connects again after fork() (its inherited handle answers
 * XTCQ_E_FORKED, which backend 1 shows), steals jobs in 100 ms steps so it can notice a
 * stop request between them, runs them and acks them, reporting each ack to the parent on
 * a pipe. One backend (backend 0) stops while holding a job, as a backend stuck in a long
 * job would; the parent kill -9s it, notices its death with waitpid, and xtcqd gives the
 * job back, so another backend runs it. The other backends wait (connected and attached)
 * until then: started together, two fast ones could take every job before backend 0 got
 * its first, and it would never hold one. The parent checks that every job was acked
 * exactly once and that xtcq check finds the segment consistent.
 *
 *   usage: pool SOCKET [JOBS [BACKENDS]]        (defaults: 10000 jobs, 3 backends)
 *   exit:  0 all jobs acked exactly once; 1 a check failed; 2 an xtcq call failed
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xtcq.h"

#define QUEUE "pool"
#define MAX_BACKENDS 64
#define VICTIM_ACKS 500 /* backend 0 stops holding its next job after this many acks */

struct ack {
    uint32_t backend;
    uint32_t job;
};

static volatile sig_atomic_t stop_requested;

static void on_sigterm(int sig) {
    (void)sig;
    stop_requested = 1;
}

static int failed(const char *what, int rc) {
    fprintf(stderr, "pool: %s: %s (%d): %s\n", what, xtcq_strerror(rc), rc, xtcq_last_error());
    return 2;
}

/* Writes all of buf (a pipe write of at most PIPE_BUF bytes is atomic). */
static void write_all(int fd, const void *buf, size_t len) {
    while (write(fd, buf, len) < 0 && errno == EINTR) {
    }
}

/* A backend: connect after fork, (backends 1.. wait for go_fd to close,) steal, run, ack,
 * report. Never returns. */
static void backend_main(int me, const char *socket, xtcq_client *inherited, int ack_fd, int held_fd,
                         int go_fd) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigaction(SIGTERM, &sa, NULL);

    xtcq_thief *thief = NULL;
    if (me == 1) {
        int rc = xtcq_thief_attach(inherited, QUEUE, &thief);
        if (rc != XTCQ_E_FORKED) {
            fprintf(stderr, "pool: backend 1: an inherited handle answered %d, not XTCQ_E_FORKED\n", rc);
            _exit(1);
        }
        printf("pool: backend 1: inherited handle refused: %s\n", xtcq_strerror(rc));
        fflush(stdout);
    }
    xtcq_client_free(inherited); /* forgets the parent's copy; closes nothing of the parent's */

    xtcq_client *client = NULL;
    xtcq_job *job = NULL;
    int rc = xtcq_connect(socket, &client);
    if (rc == XTCQ_OK) rc = xtcq_thief_attach(client, QUEUE, &thief);
    if (rc == XTCQ_OK) rc = xtcq_job_new(&job);
    if (rc != XTCQ_OK) _exit(failed("backend setup", rc));
    if (me != 0) {
        char go;
        while (read(go_fd, &go, 1) < 0 && errno == EINTR && !stop_requested) {
        }
    }
    close(go_fd);

    uint32_t acks = 0;
    while (!stop_requested) {
        rc = xtcq_thief_steal_wait(thief, job, 100);
        if (rc == XTCQ_EMPTY) continue;
        if (rc != XTCQ_OK) _exit(failed("steal", rc));
        char text[32];
        size_t len = 0;
        rc = xtcq_job_copy_payload(job, (uint8_t *)text, sizeof text - 1, &len);
        if (rc != XTCQ_OK) _exit(failed("payload", rc));
        text[len] = '\0';
        struct ack a = {(uint32_t)me, (uint32_t)strtoul(text + 4, NULL, 10)}; /* "job-N" */
        if (me == 0 && acks == VICTIM_ACKS) {
            write_all(held_fd, &a, sizeof a); /* "I hold this one", then hang in it */
            for (;;) pause();
        }
        rc = xtcq_job_ack(job);
        if (rc != XTCQ_OK) _exit(failed("ack", rc));
        acks++;
        write_all(ack_fd, &a, sizeof a);
    }
    /* Settle before exit (the handle holds nothing here), then let go of everything. */
    xtcq_job_free(job);
    xtcq_thief_free(thief);
    xtcq_client_free(client);
    _exit(0);
}

struct tally {
    uint32_t jobs;
    uint8_t *count;    /* acks seen per job */
    uint32_t *by;      /* which backend acked it */
    uint32_t distinct; /* jobs acked at least once */
    uint32_t duplicates;
};

/* Reads what the ack pipe has; returns 0 at EOF or error. */
static int read_acks(int fd, struct tally *t) {
    struct ack buf[512];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return n < 0 && errno == EINTR;
    for (size_t i = 0; i < (size_t)n / sizeof buf[0]; i++) {
        uint32_t id = buf[i].job;
        if (id >= t->jobs) continue;
        if (t->count[id]++ == 0) t->distinct++;
        else t->duplicates++;
        t->by[id] = buf[i].backend;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SOCKET [JOBS [BACKENDS]]\n", argv[0]);
        return 2;
    }
    const char *socket = argv[1];
    uint32_t jobs = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 10000;
    int backends = argc > 3 ? atoi(argv[3]) : 3;
    if (jobs == 0 || backends < 2 || backends > MAX_BACKENDS) {
        fprintf(stderr, "pool: JOBS must be > 0 and BACKENDS 2..%d\n", MAX_BACKENDS);
        return 2;
    }

    xtcq_client *client = NULL;
    xtcq_owner *owner = NULL;
    int rc = xtcq_connect(socket, &client);
    if (rc == XTCQ_OK) rc = xtcq_create_queue(client, QUEUE, 1, 0, 0, 0, XTCQ_EXIST_OK | XTCQ_FIFO);
    if (rc == XTCQ_OK) rc = xtcq_owner_attach(client, QUEUE, &owner);
    if (rc != XTCQ_OK) return failed("setup", rc);

    int ack_pipe[2], held_pipe[2], go_pipe[2];
    if (pipe(ack_pipe) != 0 || pipe(held_pipe) != 0 || pipe(go_pipe) != 0) {
        perror("pool: pipe");
        return 2;
    }
    fflush(stdout);
    pid_t pids[MAX_BACKENDS];
    for (int b = 0; b < backends; b++) {
        pids[b] = fork();
        if (pids[b] < 0) {
            perror("pool: fork");
            return 2;
        }
        if (pids[b] == 0) {
            close(ack_pipe[0]);
            close(held_pipe[0]);
            close(go_pipe[1]);
            if (b != 0) close(held_pipe[1]); /* only backend 0 reports: its death ends the pipe */
            backend_main(b, socket, client, ack_pipe[1], b == 0 ? held_pipe[1] : -1, go_pipe[0]);
        }
    }
    close(ack_pipe[1]);
    close(held_pipe[1]);
    close(go_pipe[0]);
    int go = go_pipe[1]; /* closed once backend 0 is gone: the others start */

    struct tally t = {jobs, calloc(jobs, 1), calloc(jobs, sizeof(uint32_t)), 0, 0};
    struct pollfd fds[2] = {{ack_pipe[0], POLLIN, 0}, {held_pipe[0], POLLIN, 0}};
    uint32_t pushed = 0;
    long held_job = -1;
    int quiet_rounds = 0;
    while (t.distinct < jobs) {
        while (pushed < jobs) { /* push what fits; on XTCQ_E_FULL go read acks first */
            char text[32];
            int len = snprintf(text, sizeof text, "job-%u", pushed);
            rc = xtcq_owner_push(owner, (const uint8_t *)text, (size_t)len);
            if (rc == XTCQ_E_FULL) break;
            if (rc != XTCQ_OK) return failed("push", rc);
            pushed++;
        }
        int ready = poll(fds, 2, pushed < jobs ? 1 : 1000);
        if (ready < 0 && errno != EINTR) return perror("pool: poll"), 2;
        if (ready == 0 && pushed == jobs && ++quiet_rounds > 60) {
            fprintf(stderr, "pool: no ack for 60 s with %u of %u jobs acked\n", t.distinct, jobs);
            return 1;
        }
        if (ready > 0) quiet_rounds = 0;
        if (fds[0].revents & POLLIN) read_acks(ack_pipe[0], &t);
        if (fds[1].revents & (POLLIN | POLLHUP)) {
            /* Backend 0 holds its job, or died first (then the run fails below). */
            struct ack a;
            if (read(held_pipe[0], &a, sizeof a) == (ssize_t)sizeof a) {
                held_job = a.job;
                kill(pids[0], SIGKILL);
                int status = 0;
                waitpid(pids[0], &status, 0);
                pids[0] = 0;
                printf("pool: backend 0 was killed (signal %d) holding job %ld; xtcqd gives it back\n",
                       WIFSIGNALED(status) ? WTERMSIG(status) : 0, held_job);
                fflush(stdout);
            }
            fds[1].fd = -1;
            close(go);
            go = -1;
        }
    }

    int bad = 0;
    if (go >= 0) close(go);
    if (pids[0] > 0) { /* never held a job: stop it, so that the ack pipe can end */
        kill(pids[0], SIGKILL);
        waitpid(pids[0], NULL, 0);
    }
    for (int b = 1; b < backends; b++) kill(pids[b], SIGTERM);
    for (int b = 1; b < backends; b++) {
        int status = 0;
        waitpid(pids[b], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "pool: backend %d ended badly (status %d)\n", b, status);
            bad = 1;
        }
    }
    while (read_acks(ack_pipe[0], &t)) {
    }
    for (uint32_t id = 0; id < jobs; id++) {
        if (t.count[id] != 1) {
            fprintf(stderr, "pool: job %u acked %u times\n", id, t.count[id]);
            bad = 1;
        }
    }
    if (held_job < 0) {
        fprintf(stderr, "pool: backend 0 never reported a held job\n");
        bad = 1;
    } else if (t.by[held_job] == 0) {
        fprintf(stderr, "pool: job %ld was acked by the killed backend\n", held_job);
        bad = 1;
    }
    uint32_t problems = 0;
    rc = xtcq_check(client, 0, &problems);
    if (rc != XTCQ_OK) return failed("check", rc);
    if (problems != 0) {
        fprintf(stderr, "pool: xtcq check: %u problems, first: %s\n", problems, xtcq_last_error());
        bad = 1;
    }
    if (!bad)
        printf("pool: %u jobs acked exactly once by %d backends; job %ld re-run by backend %u; "
               "check: consistent\n",
               jobs, backends, held_job, t.by[held_job]);
    xtcq_owner_free(owner);
    xtcq_client_free(client);
    free(t.count);
    free(t.by);
    return bad;
}
