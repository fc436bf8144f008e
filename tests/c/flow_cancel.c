/* Cancel and the limits through the C API: argv[1] the socket, argv[2] a queue that exists,
 * argv[3] and argv[4] the index and birth of a job queued in it. Prints one line per step;
 * exits non-zero at the first step that is not as expected. */
#include <stdio.h>
#include <stdlib.h>
#include <xtcq.h>

static int expect(const char *what, int rc, int want) {
    if (rc != want) {
        fprintf(stderr, "%s: %d (%s): %s\n", what, rc, xtcq_strerror(rc), xtcq_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    unsigned index = (unsigned)strtoul(argv[3], NULL, 10), birth = (unsigned)strtoul(argv[4], NULL, 10);
    xtcq_client *c = NULL;
    if (expect("connect", xtcq_connect(argv[1], &c), XTCQ_OK)) return 1;
    int out = -1;
    if (expect("cancel", xtcq_cancel_job(c, argv[2], index, birth, &out), XTCQ_OK)) return 1;
    if (out != XTCQ_CANCEL_WAS_QUEUED) { fprintf(stderr, "cancel: outcome %d\n", out); return 1; }
    if (expect("cancel again", xtcq_cancel_job(c, argv[2], index, birth, &out), XTCQ_OK)) return 1;
    if (out != XTCQ_CANCEL_FINISHED) { fprintf(stderr, "cancel again: outcome %d\n", out); return 1; }
    if (expect("cancel with NULL", xtcq_cancel_job(c, argv[2], 999999, 1, NULL), XTCQ_OK)) return 1;
    if (expect("cancel in no queue", xtcq_cancel_job(c, "nosuch", index, birth, &out), XTCQ_E_NO_SUCH_QUEUE)) return 1;
    printf("cancelled\n");
    if (expect("max running", xtcq_set_max_running(c, argv[2], 3), XTCQ_OK)) return 1;
    if (expect("max rate", xtcq_set_max_rate(c, argv[2], 5000000, 4), XTCQ_OK)) return 1;
    if (expect("burst 0", xtcq_set_max_rate(c, argv[2], 5000000, 0), XTCQ_E_INVALID)) return 1;
    printf("limited\n");
    xtcq_client_free(c);
    return 0;
}
