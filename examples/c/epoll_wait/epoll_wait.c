/*
 * epoll_wait.c: a consumer that waits in epoll, as a PostgreSQL backend waits in its
 * WaitEventSet: on the thief's wake descriptor and on a timer (standing in for the latch)
 * together, never blocking anywhere else, with no thread and no signal handler of libxtcq's.
 *
 * It takes JOBS jobs from QUEUE (pushed by other processes), acking each, and counts the
 * timer's ticks meanwhile. Each wait is bounded (30 s without a wake while it waits for jobs
 * is reported as a lost wake-up). With JOBS = 0 it waits until the daemon goes away, and
 * says so (the descriptor becomes readable then too).
 *
 *   usage: epoll_wait SOCKET QUEUE JOBS
 *   prints: "acked N jobs, T timer ticks, W wakes" or "daemon gone"
 *   exit:  0 done; 1 a wait ran out (a lost wake-up); 2 an xtcq call failed
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "xtcq.h"

static int failed(const char *what, int st) {
    fprintf(stderr, "%s: %s: %s\n", what, xtcq_strerror(st), xtcq_last_error());
    return 2;
}

static int add(int ep, int fd, uint64_t tag) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SOCKET QUEUE JOBS\n", argv[0]);
        return 2;
    }
    long want = atol(argv[3]);
    xtcq_client *client;
    xtcq_thief *thief;
    xtcq_job *job;
    int st, wake_fd;
    if ((st = xtcq_connect(argv[1], &client)) != XTCQ_OK) return failed("connect", st);
    if ((st = xtcq_thief_attach(client, argv[2], &thief)) != XTCQ_OK) return failed("attach", st);
    if ((st = xtcq_job_new(&job)) != XTCQ_OK) return failed("job", st);
    if ((st = xtcq_thief_wait_fd(thief, &wake_fd)) != XTCQ_OK) return failed("wait_fd", st);

    /* The "latch": a timer ticking every 20 ms. */
    int timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    struct itimerspec every = {.it_interval = {0, 20000000}, .it_value = {0, 20000000}};
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (timer < 0 || ep < 0 || timerfd_settime(timer, 0, &every, NULL) != 0 || add(ep, wake_fd, 1) != 0 ||
        add(ep, timer, 2) != 0) {
        perror("epoll/timerfd");
        return 2;
    }

    long acked = 0, ticks = 0, wakes = 0;
    for (;;) {
        if (want > 0 && acked == want) break;
        st = xtcq_thief_steal_or_arm(thief, job);
        if (st == XTCQ_OK) {
            if ((st = xtcq_job_ack(job)) != XTCQ_OK) return failed("ack", st);
            acked++;
            continue;
        }
        if (st == XTCQ_E_UNREACHABLE && want == 0) {
            printf("daemon gone\n");
            return 0;
        }
        if (st != XTCQ_EMPTY) return failed("steal_or_arm", st);
        /* Armed: sleep until a job may be there, the timer ticks, or the daemon goes. */
        int woke = 0;
        while (!woke) {
            struct epoll_event evs[2];
            int n = epoll_wait(ep, evs, 2, 30000);
            if (n == 0) {
                fprintf(stderr, "no wake in 30 s with %ld of %ld jobs acked\n", acked, want);
                return 1;
            }
            for (int i = 0; i < n; i++) {
                if (evs[i].data.u64 == 2) {
                    uint64_t t;
                    if (read(timer, &t, sizeof t) == (ssize_t)sizeof t) ticks += (long)t;
                } else {
                    woke = 1;
                }
            }
        }
        wakes++; /* the next xtcq_thief_steal_or_arm steals first, then consumes the readiness */
    }
    printf("acked %ld jobs, %ld timer ticks, %ld wakes\n", acked, ticks, wakes);
    xtcq_job_free(job);
    xtcq_thief_free(thief);
    xtcq_client_free(client);
    return 0;
}
