/* Pause and resume through the C API: argv[1] the socket, argv[2] a queue that exists.
 * Prints one line per step; exits non-zero at the first step that is not as expected. */
#include <stdio.h>
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
    xtcq_client *c = NULL;
    if (expect("connect", xtcq_connect(argv[1], &c), XTCQ_OK)) return 1;
    int was = -1;
    if (expect("pause", xtcq_pause_queue(c, argv[2], &was), XTCQ_OK) || was != 0) return 1;
    if (expect("pause again", xtcq_pause_queue(c, argv[2], &was), XTCQ_OK) || was != 1) return 1;
    printf("paused\n");
    fflush(stdout);
    if (expect("no such queue", xtcq_resume_queue(c, "nosuch", NULL), XTCQ_E_NO_SUCH_QUEUE)) return 1;
    if (expect("resume", xtcq_resume_queue(c, argv[2], &was), XTCQ_OK) || was != 1) return 1;
    if (expect("resume with NULL", xtcq_resume_queue(c, argv[2], NULL), XTCQ_OK)) return 1;
    printf("resumed\n");
    xtcq_client_free(c);
    return 0;
}
