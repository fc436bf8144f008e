/* Priority levels through the C API: argv[1] the socket, argv[2] a queue name to create.
 * Creates it with 4 levels, pushes at mixed priorities from an owner and an injector,
 * checks that a priority past the levels is refused, then prints each stolen payload on a
 * line. Exits non-zero at the first step that is not as expected. */
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

static int push(xtcq_owner *o, xtcq_injector *i, const char *s, unsigned p) {
    const uint8_t *d = (const uint8_t *)s;
    int rc = o ? xtcq_owner_push_priority(o, d, strlen(s), p) : xtcq_injector_push_priority(i, d, strlen(s), p);
    return expect(s, rc, XTCQ_OK);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    xtcq_client *c = NULL;
    xtcq_owner *o = NULL;
    xtcq_injector *i = NULL;
    xtcq_thief *t = NULL;
    xtcq_job *j = NULL;
    if (expect("connect", xtcq_connect(argv[1], &c), XTCQ_OK)) return 1;
    if (expect("create", xtcq_create_queue_levels(c, argv[2], 1, 64, 0, 0, XTCQ_FIFO, 4, 0), XTCQ_OK)) return 1;
    if (expect("owner", xtcq_owner_attach(c, argv[2], &o), XTCQ_OK)) return 1;
    if (expect("injector", xtcq_injector_attach(c, argv[2], &i), XTCQ_OK)) return 1;
    if (push(o, NULL, "3-owner", 3) || push(NULL, i, "2-injector", 2) || push(o, NULL, "1-owner", 1) ||
        push(NULL, i, "0-injector", 0) || push(o, NULL, "0-owner", 0))
        return 1;
    const uint8_t x = 'x';
    if (expect("priority 4 of 4 levels", xtcq_owner_push_priority(o, &x, 1, 4), XTCQ_E_INVALID)) return 1;
    if (strstr(xtcq_last_error(), "--levels 4") == NULL) {
        fprintf(stderr, "the error does not name the levels: %s\n", xtcq_last_error());
        return 1;
    }
    if (expect("thief", xtcq_thief_attach(c, argv[2], &t), XTCQ_OK)) return 1;
    if (expect("job", xtcq_job_new(&j), XTCQ_OK)) return 1;
    int rc;
    while ((rc = xtcq_thief_steal(t, j)) == XTCQ_OK) {
        const uint8_t *data;
        size_t len;
        if (expect("payload", xtcq_job_payload(j, &data, &len), XTCQ_OK)) return 1;
        printf("%.*s\n", (int)len, (const char *)data);
        if (expect("ack", xtcq_job_ack(j), XTCQ_OK)) return 1;
    }
    if (expect("steal until empty", rc, XTCQ_EMPTY)) return 1;
    xtcq_job_free(j);
    xtcq_thief_free(t);
    xtcq_injector_free(i);
    xtcq_owner_free(o);
    xtcq_client_free(c);
    return 0;
}
