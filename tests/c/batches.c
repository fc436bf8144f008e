/* Batches through the C API: argv[1] the socket, argv[2] a queue that exists. Opens a batch
 * with a callback, pushes three jobs into it, seals it, waits (timing out while its jobs are
 * queued), runs them, waits for its completion, and takes the callback. Prints one line per
 * step; exits non-zero at the first step that is not as expected. */
#include <stdio.h>
#include <string.h>
#include <xtcq.h>

static int expect(const char *what, int rc, int want) {
    if (rc != want) {
        fprintf(stderr, "%s: %d (%s): %s\n", what, rc, xtcq_strerror(rc), xtcq_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *q = argv[2];
    xtcq_client *c = NULL;
    xtcq_owner *o = NULL;
    xtcq_thief *t = NULL;
    xtcq_job *j = NULL;
    xtcq_batch_info info;
    if (expect("connect", xtcq_connect(argv[1], &c), XTCQ_OK)) return 1;
    if (expect("open", xtcq_batch_open(c, q, "b", NULL, (const uint8_t *)"done", 4), XTCQ_OK)) return 1;
    if (expect("owner", xtcq_owner_attach(c, q, &o), XTCQ_OK)) return 1;
    if (expect("set batch", xtcq_owner_set_batch(o, c, "b"), XTCQ_OK)) return 1;
    for (int i = 0; i < 3; i++)
        if (expect("push", xtcq_owner_push(o, (const uint8_t *)"job", 3), XTCQ_OK)) return 1;
    if (expect("progress", xtcq_batch_progress(c, q, "b", &info), XTCQ_OK)) return 1;
    printf("status %d pushed %llu\n", info.status, (unsigned long long)info.pushed);
    if (expect("seal", xtcq_batch_seal(c, q, "b"), XTCQ_OK)) return 1;
    if (expect("push after the seal", xtcq_owner_push(o, (const uint8_t *)"late", 4), XTCQ_E_OTHER)) return 1;
    if (expect("wait, jobs queued", xtcq_batch_wait(c, q, "b", 200, &info), XTCQ_EMPTY)) return 1;
    if (expect("no such batch", xtcq_batch_seal(c, q, "nosuch"), XTCQ_E_NO_SUCH_QUEUE)) return 1;
    if (expect("thief", xtcq_thief_attach(c, q, &t), XTCQ_OK)) return 1;
    if (expect("job", xtcq_job_new(&j), XTCQ_OK)) return 1;
    for (int i = 0; i < 3; i++) {
        if (expect("steal", xtcq_thief_steal_wait(t, j, 5000), XTCQ_OK)) return 1;
        if (expect("ack", xtcq_job_ack(j), XTCQ_OK)) return 1;
    }
    if (expect("wait", xtcq_batch_wait(c, q, "b", -1, &info), XTCQ_OK)) return 1;
    printf("status %d pushed %llu acked %llu dead %llu cancelled %llu\n", info.status,
           (unsigned long long)info.pushed, (unsigned long long)info.acked,
           (unsigned long long)info.dead, (unsigned long long)info.cancelled);
    if (expect("callback", xtcq_thief_steal_wait(t, j, 5000), XTCQ_OK)) return 1;
    const uint8_t *data = NULL;
    size_t len = 0;
    if (expect("payload", xtcq_job_payload(j, &data, &len), XTCQ_OK)) return 1;
    printf("callback %.*s\n", (int)len, (const char *)data);
    if (expect("ack callback", xtcq_job_ack(j), XTCQ_OK)) return 1;
    xtcq_job_free(j);
    xtcq_thief_free(t);
    xtcq_owner_free(o);
    xtcq_client_free(c);
    return 0;
}
