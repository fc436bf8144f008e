/*
 * resource_limits.c: the C API's entry points when this process is out of file
 * descriptors or address space, for tests/capi/resource_limits.rs.
 *
 *   usage: resource_limits SOCKET shm QUEUE
 *            with no fd free: push, batch push, steal, steal_wait, ack each work (they use the
 *            mapped segment only); prints "shm ok" and exits 0.
 *          resource_limits SOCKET reconnect QUEUE
 *            pushes 3 jobs, prints "ready", waits for a line on stdin (the test restarts the
 *            daemon meanwhile), then for k = 0..3 leaves exactly k fds free and attaches a
 *            thief, which reconnects: prints "free K: RC"; then, fds free again, steals and
 *            acks every job and prints "acked N".
 *          resource_limits SOCKET address_space
 *            lowers RLIMIT_AS to just above what the process maps and connects: prints
 *            "connect: RC".
 *          resource_limits SOCKET fresh QUEUE
 *            for k = 0..3 fds free: a connect, and a first attach (which maps the segment) and
 *            push on a new connection: prints "connect K: RC", "attach K: RC", "pushed N".
 *          resource_limits SOCKET attach_address_space QUEUE
 *            a first attach (it maps the segment) with the address space used up:
 *            "attach: RC".
 *          resource_limits SOCKET connect
 *            connects with no limit lowered (the daemon may be out of fds): "connect: RC".
 *   exit: 0 unless a call that must work failed (1).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "xtcq.h"

#define MAX_FILL 256

static int fillers[MAX_FILL];
static int n_fillers;
static struct rlimit saved;

static void must(const char *what, int rc) {
    if (rc != XTCQ_OK) {
        fprintf(stderr, "resource_limits: %s: %d (%s: %s)\n", what, rc, xtcq_strerror(rc), xtcq_last_error());
        exit(1);
    }
}

/* Lowers the fd limit, fills every free fd, then closes `free_left` of them again. */
static void leave_free(int free_left) {
    struct rlimit low;
    getrlimit(RLIMIT_NOFILE, &saved);
    low = saved;
    if (low.rlim_cur > MAX_FILL) low.rlim_cur = MAX_FILL;
    setrlimit(RLIMIT_NOFILE, &low);
    n_fillers = 0;
    while (n_fillers < MAX_FILL) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) break;
        fillers[n_fillers++] = fd;
    }
    for (int i = 0; i < free_left && n_fillers > 0; i++) close(fillers[--n_fillers]);
}

static void free_all(void) {
    while (n_fillers > 0) close(fillers[--n_fillers]);
    setrlimit(RLIMIT_NOFILE, &saved);
}

static const uint8_t JOB[] = "job";

static int shm_ops(xtcq_client *client, const char *queue) {
    xtcq_owner *owner = NULL;
    xtcq_thief *thief = NULL;
    xtcq_job *job = NULL;
    must("create", xtcq_create_queue(client, queue, 1, 64, 0, 0, XTCQ_EXIST_OK));
    must("attach owner", xtcq_owner_attach(client, queue, &owner));
    must("attach thief", xtcq_thief_attach(client, queue, &thief));
    must("job_new", xtcq_job_new(&job));
    leave_free(0);
    const uint8_t *payloads[2] = {JOB, JOB};
    size_t lens[2] = {3, 3};
    size_t queued = 0;
    int rc[6];
    rc[0] = xtcq_owner_push(owner, JOB, 3);
    rc[1] = xtcq_owner_push_batch(owner, payloads, lens, 2, &queued);
    rc[2] = xtcq_thief_steal(thief, job);
    rc[3] = rc[2] == XTCQ_OK ? xtcq_job_ack(job) : rc[2];
    rc[4] = xtcq_thief_steal_wait(thief, job, 10);
    rc[5] = rc[4] == XTCQ_OK ? xtcq_job_ack(job) : rc[4];
    free_all();
    const char *names[6] = {"push", "push_batch", "steal", "ack", "steal_wait", "ack"};
    for (int i = 0; i < 6; i++) must(names[i], rc[i]);
    if (queued != 2) fprintf(stderr, "resource_limits: batch queued %zu of 2\n", queued), exit(1);
    int left = 0;
    while (xtcq_thief_steal(thief, job) == XTCQ_OK) {
        must("ack", xtcq_job_ack(job));
        left++;
    }
    printf("shm ok, %d left after\n", left);
    xtcq_job_free(job);
    xtcq_thief_free(thief);
    xtcq_owner_free(owner);
    return 0;
}

static int reconnect(xtcq_client *client, const char *queue) {
    xtcq_owner *owner = NULL;
    must("create", xtcq_create_queue(client, queue, 1, 64, 0, 0, XTCQ_EXIST_OK));
    must("attach owner", xtcq_owner_attach(client, queue, &owner));
    for (int i = 0; i < 3; i++) must("push", xtcq_owner_push(owner, JOB, 3));
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    xtcq_thief *thief = NULL;
    for (int k = 0; k <= 3; k++) {
        leave_free(k);
        int rc = xtcq_thief_attach(client, queue, &thief);
        free_all();
        printf("free %d: %d %s\n", k, rc, rc == XTCQ_OK ? "" : xtcq_last_error());
        fflush(stdout);
        if (rc == XTCQ_OK) xtcq_thief_free(thief), thief = NULL;
    }
    must("attach thief, fds free", xtcq_thief_attach(client, queue, &thief));
    xtcq_job *job = NULL;
    must("job_new", xtcq_job_new(&job));
    int acked = 0;
    while (xtcq_thief_steal(thief, job) == XTCQ_OK) {
        must("ack", xtcq_job_ack(job));
        acked++;
    }
    printf("acked %d\n", acked);
    xtcq_job_free(job);
    xtcq_thief_free(thief);
    xtcq_owner_free(owner);
    return 0;
}

/* The process's mapped size in bytes (the first field of /proc/self/statm, in pages). */
static unsigned long long mapped_bytes(void) {
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%llu", &pages) != 1) exit(1);
    fclose(f);
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

static int address_space(const char *socket) {
    struct rlimit old, low;
    getrlimit(RLIMIT_AS, &old);
    low = old;
    low.rlim_cur = mapped_bytes() + (1u << 20);
    setrlimit(RLIMIT_AS, &low);
    xtcq_client *c = NULL;
    int rc = xtcq_connect(socket, &c);
    setrlimit(RLIMIT_AS, &old);
    printf("connect: %d %s\n", rc, rc == XTCQ_OK ? "" : xtcq_last_error());
    if (rc == XTCQ_OK) xtcq_client_free(c);
    return 0;
}

/* For k = 0..3 fds free: a connect, then (on a fresh connection, so that the segment is
 * mapped by this call) an owner attach and a push; prints "connect K: RC" and "attach K: RC". */
static int fresh(const char *socket, const char *queue) {
    xtcq_client *c = NULL;
    must("connect", xtcq_connect(socket, &c));
    must("create", xtcq_create_queue(c, queue, 1, 64, 0, 0, XTCQ_EXIST_OK));
    xtcq_client_free(c);
    int pushed = 0;
    for (int k = 0; k <= 3; k++) {
        c = NULL;
        leave_free(k);
        int rc = xtcq_connect(socket, &c);
        free_all();
        printf("connect %d: %d %s\n", k, rc, rc == XTCQ_OK ? "" : xtcq_last_error());
        if (rc == XTCQ_OK) xtcq_client_free(c);
        must("connect, fds free", xtcq_connect(socket, &c));
        xtcq_owner *owner = NULL;
        leave_free(k);
        rc = xtcq_owner_attach(c, queue, &owner);
        int prc = rc == XTCQ_OK ? xtcq_owner_push(owner, JOB, 3) : rc;
        free_all();
        printf("attach %d: %d %s\n", k, rc, rc == XTCQ_OK ? "" : xtcq_last_error());
        if (prc == XTCQ_OK) pushed++;
        if (owner) xtcq_owner_free(owner);
        xtcq_client_free(c);
    }
    printf("pushed %d\n", pushed);
    return 0;
}

/* A plain connect, with no limit of this process's own lowered. */
static int plain_connect(const char *socket) {
    xtcq_client *c = NULL;
    int rc = xtcq_connect(socket, &c);
    printf("connect: %d %s\n", rc, rc == XTCQ_OK ? "" : xtcq_last_error());
    if (rc == XTCQ_OK) xtcq_client_free(c);
    return 0;
}

/* A first attach (which maps the segment) with the address space used up: "attach: RC". */
static int attach_address_space(const char *socket, const char *queue) {
    xtcq_client *c = NULL;
    must("connect", xtcq_connect(socket, &c));
    must("create", xtcq_create_queue(c, queue, 1, 64, 0, 0, XTCQ_EXIST_OK));
    /* A new connection, which has not mapped the segment yet. */
    xtcq_client_free(c);
    must("connect again", xtcq_connect(socket, &c));
    struct rlimit old, low;
    getrlimit(RLIMIT_AS, &old);
    low = old;
    low.rlim_cur = mapped_bytes() + (1u << 20);
    setrlimit(RLIMIT_AS, &low);
    xtcq_thief *thief = NULL;
    int rc = xtcq_thief_attach(c, queue, &thief);
    setrlimit(RLIMIT_AS, &old);
    printf("attach: %d %s\n", rc, rc == XTCQ_OK ? "" : xtcq_last_error());
    if (thief) xtcq_thief_free(thief);
    xtcq_client_free(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SOCKET shm|reconnect|fresh|attach_address_space QUEUE | SOCKET address_space|connect\n", argv[0]);
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(argv[2], "address_space") == 0) return address_space(argv[1]);
    if (strcmp(argv[2], "connect") == 0) return plain_connect(argv[1]);
    if (strcmp(argv[2], "fresh") == 0 && argc == 4) return fresh(argv[1], argv[3]);
    if (strcmp(argv[2], "attach_address_space") == 0 && argc == 4) return attach_address_space(argv[1], argv[3]);
    if (argc != 4) return 1;
    xtcq_client *client = NULL;
    must("connect", xtcq_connect(argv[1], &client));
    int rc = strcmp(argv[2], "shm") == 0 ? shm_ops(client, argv[3]) : reconnect(client, argv[3]);
    xtcq_client_free(client);
    return rc;
}
