/*
 * push_steal.c: push three jobs as a queue's owner, then steal, run and ack each as a thief.
 *
 *   usage: push_steal [SOCKET]      (default: $XTCQ_SOCKET, then xtcq's default socket)
 *   prints: "ran job N" for each job
 *   exit:  0 done; 2 an xtcq call failed
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "xtcq.h"

static int failed(const char *what, int rc) {
    fprintf(stderr, "%s: %s: %s\n", what, xtcq_strerror(rc), xtcq_last_error());
    return 2;
}

int main(int argc, char **argv) {
    xtcq_client *c;
    xtcq_owner *o;
    xtcq_thief *t;
    xtcq_job *j;
    int rc = xtcq_connect(argc > 1 ? argv[1] : NULL, &c); /* 0, XTCQ_EMPTY (1) or XTCQ_E_* < 0 */
    if (rc != XTCQ_OK) return failed("connect", rc);
    /* 0s: the daemon's defaults for deques, capacity, attempts and lease. */
    rc = xtcq_create_queue(c, "example-c", 0, 0, 0, 0, XTCQ_EXIST_OK);
    if (rc != XTCQ_OK) return failed("create", rc);
    if ((rc = xtcq_owner_attach(c, "example-c", &o)) != XTCQ_OK) return failed("owner", rc);
    for (int i = 0; i < 3; i++) {
        char payload[16];
        int n = snprintf(payload, sizeof payload, "job %d", i);
        rc = xtcq_owner_push(o, (const uint8_t *)payload, (size_t)n); /* no system call */
        if (rc != XTCQ_OK) return failed("push", rc);
    }
    if ((rc = xtcq_thief_attach(c, "example-c", &t)) != XTCQ_OK) return failed("thief", rc);
    if ((rc = xtcq_job_new(&j)) != XTCQ_OK) return failed("job", rc); /* one handle, reused */
    while ((rc = xtcq_thief_steal_wait(t, j, 100)) == XTCQ_OK) {  /* ms; XTCQ_EMPTY: none came */
        const uint8_t *data;
        size_t len;
        if ((rc = xtcq_job_payload(j, &data, &len)) != XTCQ_OK) return failed("payload", rc);
        printf("ran %.*s\n", (int)len, (const char *)data);
        if ((rc = xtcq_job_ack(j)) != XTCQ_OK) return failed("ack", rc);
    }
    if (rc < 0) return failed("steal", rc);
    xtcq_job_free(j);
    xtcq_thief_free(t);
    xtcq_owner_free(o);
    xtcq_client_free(c);
    return 0;
}
