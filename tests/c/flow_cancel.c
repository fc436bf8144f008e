/* Cancel and the limits through the C API: argv[1] the socket, argv[2] a queue that exists,
 * argv[3] and argv[4] the index and birth of a job queued in it; then a job this program
 * holds, cancelled. Prints one line per step;
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
    /* A running job: its holder sees the cancel, and its ack says so. */
    xtcq_injector *inj = NULL;
    xtcq_thief *thief = NULL;
    xtcq_job *job = NULL;
    uint64_t id = 0;
    if (expect("injector", xtcq_injector_attach(c, argv[2], &inj), XTCQ_OK)) return 1;
    if (expect("thief", xtcq_thief_attach(c, argv[2], &thief), XTCQ_OK)) return 1;
    if (expect("job", xtcq_job_new(&job), XTCQ_OK)) return 1;
    if (expect("push", xtcq_injector_push_id(inj, (const uint8_t *)"run", 3, 0, &id), XTCQ_OK)) return 1;
    xtcq_job_state_info st;
    if (expect("state", xtcq_job_state(c, argv[2], (unsigned)(id >> 32), (unsigned)id, &st), XTCQ_OK)) return 1;
    if (st.state != XTCQ_JOB_QUEUED) { fprintf(stderr, "state before the steal: %d\n", st.state); return 1; }
    if (expect("steal", xtcq_thief_steal(thief, job), XTCQ_OK)) return 1;
    if (expect("state", xtcq_job_state(c, argv[2], (unsigned)(id >> 32), (unsigned)id, &st), XTCQ_OK)) return 1;
    if (st.state != XTCQ_JOB_RUNNING || st.pid == 0) { fprintf(stderr, "state held: %d pid %u\n", st.state, st.pid); return 1; }
    if (xtcq_job_cancelled(job) != 0) { fprintf(stderr, "cancelled before the cancel\n"); return 1; }
    if (expect("cancel running", xtcq_cancel_job(c, argv[2], (unsigned)(id >> 32), (unsigned)id, &out), XTCQ_OK)) return 1;
    if (out != XTCQ_CANCEL_WAS_RUNNING) { fprintf(stderr, "cancel running: outcome %d\n", out); return 1; }
    if (xtcq_job_cancelled(job) != 1) { fprintf(stderr, "the holder does not see the cancel\n"); return 1; }
    if (expect("ack of a cancelled job", xtcq_job_ack(job), XTCQ_E_CANCELLED)) return 1;
    if (expect("state", xtcq_job_state(c, argv[2], (unsigned)(id >> 32), (unsigned)id, &st), XTCQ_OK)) return 1;
    if (st.state != XTCQ_JOB_CANCELLED) { fprintf(stderr, "state cancelled: %d\n", st.state); return 1; }
    if (expect("state NULL", xtcq_job_state(c, argv[2], 0, 0, NULL), XTCQ_E_INVALID)) return 1;
    if (expect("state of nothing", xtcq_job_state(c, argv[2], 999999, 1, &st), XTCQ_OK)) return 1;
    if (st.state != XTCQ_JOB_UNKNOWN) { fprintf(stderr, "state unknown: %d\n", st.state); return 1; }
    if (xtcq_job_cancelled(job) != 0 || xtcq_job_cancelled(NULL) != 0) { fprintf(stderr, "no job held\n"); return 1; }
    xtcq_job_free(job);
    xtcq_thief_free(thief);
    xtcq_injector_free(inj);
    printf("held and cancelled\n");
    if (expect("max running", xtcq_set_max_running(c, argv[2], 3), XTCQ_OK)) return 1;
    if (expect("max rate", xtcq_set_max_rate(c, argv[2], 5000000, 4), XTCQ_OK)) return 1;
    if (expect("burst 0", xtcq_set_max_rate(c, argv[2], 5000000, 0), XTCQ_E_INVALID)) return 1;
    printf("limited\n");
    xtcq_client_free(c);
    return 0;
}
