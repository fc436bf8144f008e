/*
 * fork_holder.c: claims one job, then forks a child that only sleeps (it inherits the
 * control connection and holds it open), and waits to be killed while holding the job.
 * Prints "holding job, child CHILD_PID" once both are in place.
 *
 *   usage: fork_holder SOCKET QUEUE
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "xtcq.h"

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: %s SOCKET QUEUE\n", argv[0]), 2;
    xtcq_client *c;
    xtcq_thief *t;
    xtcq_job *j;
    int rc = xtcq_connect(argv[1], &c);
    if (rc == XTCQ_OK) rc = xtcq_thief_attach(c, argv[2], &t);
    if (rc == XTCQ_OK) rc = xtcq_job_new(&j);
    if (rc == XTCQ_OK) rc = xtcq_thief_steal_wait(t, j, 10000);
    if (rc != XTCQ_OK) return fprintf(stderr, "fork_holder: %s: %s\n", xtcq_strerror(rc), xtcq_last_error()), 2;
    pid_t child = fork();
    if (child == 0) {
        sleep(300); /* a helper process that never execs: it keeps the inherited socket */
        _exit(0);
    }
    printf("holding job, child %d\n", (int)child);
    fflush(stdout);
    for (;;) pause();
}
