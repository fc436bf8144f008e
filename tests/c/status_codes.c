/*
 * status_codes.c: produces every status the C API can return to a correct caller and
 * prints "produced NAME" for each; tests/capi/programs.rs checks the list against xtcq.h.
 *
 *   usage: status_codes SOCKET REFUSING_SOCKET
 *   SOCKET: a daemon that admits us; REFUSING_SOCKET: one that does not.
 *   exit: 0 when each code came where expected, 1 otherwise.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xtcq.h"

static int bad;

/* Checks that `rc` is `want`, printing "produced NAME" once for a new negative code. */
static void expect(const char *what, int rc, int want, const char *name) {
    if (rc != want) {
        fprintf(stderr, "status_codes: %s: got %d (%s: %s), want %s (%d)\n", what, rc, xtcq_strerror(rc),
                xtcq_last_error(), name, want);
        bad = 1;
        return;
    }
    if (name) printf("produced %s  (%s: %s)\n", name, what, rc == XTCQ_OK ? "" : xtcq_last_error());
}

#define EXPECT(what, call, code) expect(what, (call), code, #code)
#define OK(what, call) expect(what, (call), XTCQ_OK, NULL)

static const uint8_t HELLO[] = "hello";

/* Calls that fail (and so write this thread's last error) while the thread's or the
 * process's thread-locals are being torn down must not abort. */
static void failing_calls_late(void *job) {
    int rc = xtcq_job_ack((xtcq_job *)job);
    const char *msg = xtcq_last_error();
    if (rc != XTCQ_E_INVALID || msg == NULL) {
        fprintf(stderr, "status_codes: late ack answered %d\n", rc);
        _exit(1);
    }
    xtcq_job_free((xtcq_job *)job);
}

static pthread_key_t late_key;

static void *thread_with_a_late_destructor(void *arg) {
    (void)arg;
    xtcq_job *job = NULL;
    xtcq_job_new(&job);
    xtcq_job_ack(job); /* this thread's last error is now in use */
    pthread_setspecific(late_key, job);
    return NULL;
}

static xtcq_job *atexit_job;

static void at_exit(void) {
    failing_calls_late(atexit_job);
    printf("late calls returned\n");
}

/* An inherited handle answers XTCQ_E_FORKED in the child; the parent keeps working. */
static void forked_handles(xtcq_client *client, xtcq_owner *owner, xtcq_thief *thief, xtcq_job *job) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int ok = xtcq_owner_push(owner, HELLO, 5) == XTCQ_E_FORKED &&
                 xtcq_thief_steal(thief, job) == XTCQ_E_FORKED &&
                 xtcq_create_queue(client, "child", 0, 0, 0, 0, 0) == XTCQ_E_FORKED;
        /* Freeing inherited handles releases nothing of the parent's. */
        xtcq_job_free(job);
        xtcq_thief_free(thief);
        xtcq_owner_free(owner);
        xtcq_client_free(client);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    expect("inherited handles in a forked child", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? XTCQ_E_FORKED : 0,
           XTCQ_E_FORKED, "XTCQ_E_FORKED");
    OK("parent push after the child exited", xtcq_owner_push(owner, HELLO, 5));
    OK("parent steal after the child exited", xtcq_thief_steal(thief, job));
    OK("parent ack after the child exited", xtcq_job_ack(job));
}

/* A claim whose lease ran out is re-queued; acking the stale claim answers NOT_HELD. */
static void expired_lease(xtcq_client *client) {
    xtcq_owner *owner = NULL;
    xtcq_thief *thief = NULL;
    xtcq_job *first = NULL, *again = NULL;
    OK("create leased", xtcq_create_queue(client, "leased", 1, 0, 0, 100, 0));
    OK("attach owner leased", xtcq_owner_attach(client, "leased", &owner));
    OK("attach thief leased", xtcq_thief_attach(client, "leased", &thief));
    OK("job_new", xtcq_job_new(&first));
    OK("job_new", xtcq_job_new(&again));
    OK("push leased", xtcq_owner_push(owner, HELLO, 5));
    OK("steal leased", xtcq_thief_steal_wait(thief, first, 5000));
    xtcq_job_info a = {0}, b = {0};
    OK("info", xtcq_job_get_info(first, &a));
    /* Wait, in 100 ms steps, until the daemon's lease scan has re-queued it. */
    int rc = XTCQ_EMPTY;
    for (int i = 0; i < 300 && rc == XTCQ_EMPTY; i++) rc = xtcq_thief_steal_wait(thief, again, 100);
    OK("steal the re-queued job", rc);
    OK("info", xtcq_job_get_info(again, &b));
    if (a.index != b.index || a.birth != b.birth || b.attempts != a.attempts + 1) {
        fprintf(stderr, "status_codes: re-queued job is record %u attempt %u, want %u attempt %u\n", b.index,
                b.attempts, a.index, a.attempts + 1);
        bad = 1;
    }
    EXPECT("ack of the expired claim", xtcq_job_ack(first), XTCQ_E_NOT_HELD);
    OK("ack of the new claim", xtcq_job_ack(again));
    xtcq_job_free(first);
    xtcq_job_free(again);
    xtcq_thief_free(thief);
    xtcq_owner_free(owner);
}

/* A job cancelled while held: its ack answers CANCELLED. */
static void cancelled_while_held(xtcq_client *client) {
    xtcq_injector *inj = NULL;
    xtcq_thief *thief = NULL;
    xtcq_job *job = NULL;
    uint64_t id = 0;
    int outcome = 0;
    OK("create cancelling", xtcq_create_queue(client, "cancelling", 1, 0, 0, 0, 0));
    OK("attach injector cancelling", xtcq_injector_attach(client, "cancelling", &inj));
    OK("attach thief cancelling", xtcq_thief_attach(client, "cancelling", &thief));
    OK("job_new", xtcq_job_new(&job));
    OK("push cancelling", xtcq_injector_push_id(inj, HELLO, 5, 0, &id));
    OK("steal cancelling", xtcq_thief_steal(thief, job));
    OK("cancel", xtcq_cancel_job(client, "cancelling", (uint32_t)(id >> 32), (uint32_t)id, &outcome));
    EXPECT("ack of the cancelled job", xtcq_job_ack(job), XTCQ_E_CANCELLED);
    xtcq_job_free(job);
    xtcq_thief_free(thief);
    xtcq_injector_free(inj);
}

/* With every file descriptor of the process in use, a connect and an attach (which maps the
 * segment from a copy of the fd the daemon passed) say so: not "unreachable", not "segment
 * corrupt". The limit is lowered to keep the loop short, and restored after. */
static void out_of_fds(const char *socket, xtcq_client *client) {
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    if (low.rlim_cur > 256) low.rlim_cur = 256;
    setrlimit(RLIMIT_NOFILE, &low);
    int fds[256], n = 0;
    while (n < 256) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) break;
        fds[n++] = fd;
    }
    xtcq_client *other = NULL;
    xtcq_thief *thief = NULL;
    EXPECT("connect with no fd free", xtcq_connect(socket, &other), XTCQ_E_RESOURCE);
    EXPECT("attach with no fd free", xtcq_thief_attach(client, "one", &thief), XTCQ_E_RESOURCE);
    while (n > 0) close(fds[--n]);
    setrlimit(RLIMIT_NOFILE, &old);
    OK("attach once fds are free again", xtcq_thief_attach(client, "one", &thief));
    xtcq_thief_free(thief);
}

/* A push with a key: refused while the first job holds it, naming that job; with
   XTCQ_KEY_OR_EXISTING, that job's id and nothing pushed; a key too long, invalid. */
static void unique_keys(xtcq_client *client) {
    xtcq_injector *inj = NULL;
    uint32_t index = 0, birth = 0, again_index = 1, again_birth = 1;
    OK("create keyed", xtcq_create_queue(client, "keyed", 1, 0, 0, 0, 0));
    OK("attach an injector to keyed", xtcq_injector_attach(client, "keyed", &inj));
    const uint8_t key[] = "order-42";
    OK("push with a key", xtcq_injector_push_key(inj, HELLO, 5, key, 8, 0, &index, &birth));
    EXPECT("push with a held key", xtcq_injector_push_key(inj, HELLO, 5, key, 8, 0, &again_index, &again_birth),
           XTCQ_E_DUPLICATE);
    if (again_index != index || again_birth != birth) {
        fprintf(stderr, "status_codes: the refusal names %u.%u, not %u.%u\n", again_index, again_birth, index, birth);
        bad = 1;
    }
    again_index = again_birth = 0;
    int rc = xtcq_injector_push_key(inj, HELLO, 5, key, 8, XTCQ_KEY_OR_EXISTING, &again_index, &again_birth);
    if (rc != XTCQ_EXISTING || again_index != index || again_birth != birth) {
        fprintf(stderr, "status_codes: or-existing answered %d with %u.%u, want %d with %u.%u\n", rc, again_index,
                again_birth, XTCQ_EXISTING, index, birth);
        bad = 1;
    }
    static const uint8_t long_key[XTCQ_MAX_KEY + 1];
    EXPECT("a key of 65 bytes", xtcq_injector_push_key(inj, HELLO, 5, long_key, sizeof long_key, 0, NULL, NULL),
           XTCQ_E_INVALID);
    xtcq_injector_free(inj);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SOCKET REFUSING_SOCKET\n", argv[0]);
        return 1;
    }
    xtcq_client *client = NULL, *refused = NULL;
    EXPECT("connect with out NULL", xtcq_connect(argv[1], NULL), XTCQ_E_INVALID);
    EXPECT("connect to no daemon", xtcq_connect("/nonexistent/xtcqd.sock", &refused), XTCQ_E_UNREACHABLE);
    EXPECT("connect to a daemon that refuses us", xtcq_connect(argv[2], &refused), XTCQ_E_UNAUTHORIZED);
    OK("connect", xtcq_connect(argv[1], &client));

    xtcq_owner *owner = NULL, *second = NULL;
    xtcq_thief *thief = NULL;
    xtcq_job *job = NULL;
    OK("create one", xtcq_create_queue(client, "one", 1, 0, 0, 0, 0));
    EXPECT("create one again", xtcq_create_queue(client, "one", 1, 0, 0, 0, 0), XTCQ_E_EXISTS);
    OK("create one again, exist_ok", xtcq_create_queue(client, "one", 1, 0, 0, 0, XTCQ_EXIST_OK));
    EXPECT("create one again as FIFO, exist_ok", xtcq_create_queue(client, "one", 1, 0, 0, 0, XTCQ_EXIST_OK | XTCQ_FIFO),
           XTCQ_E_MISMATCH);
    if (!strstr(xtcq_last_error(), "flavor is lifo, not fifo")) {
        fprintf(stderr, "status_codes: the mismatch does not name the flavor: %s\n", xtcq_last_error());
        return 1;
    }
    EXPECT("attach to a missing queue", xtcq_thief_attach(client, "missing", &thief), XTCQ_E_NO_SUCH_QUEUE);
    out_of_fds(argv[1], client);
    OK("attach owner", xtcq_owner_attach(client, "one", &owner));
    EXPECT("a second owner of a one-deque queue", xtcq_owner_attach(client, "one", &second), XTCQ_E_NO_ROOM);
    OK("attach thief", xtcq_thief_attach(client, "one", &thief));
    OK("job_new", xtcq_job_new(&job));
    EXPECT("steal from an empty queue", xtcq_thief_steal(thief, job), XTCQ_EMPTY);
    EXPECT("steal_wait times out", xtcq_thief_steal_wait(thief, job, 10), XTCQ_EMPTY);

    static uint8_t big[1 << 20];
    EXPECT("push of 1 MiB", xtcq_owner_push(owner, big, sizeof big), XTCQ_E_TOO_LARGE);
    OK("push", xtcq_owner_push(owner, HELLO, 5));
    OK("steal", xtcq_thief_steal(thief, job));
    EXPECT("steal into a handle that holds a job", xtcq_thief_steal(thief, job), XTCQ_E_INVALID);
    uint8_t tiny[1];
    size_t len = 0;
    EXPECT("copy into 1 byte", xtcq_job_copy_payload(job, tiny, sizeof tiny, &len), XTCQ_E_BUFFER_TOO_SMALL);
    if (len != 5) fprintf(stderr, "status_codes: needed length %zu, want 5\n", len), bad = 1;
    OK("ack", xtcq_job_ack(job));
    EXPECT("ack of an empty handle", xtcq_job_ack(job), XTCQ_E_INVALID);
    const uint8_t *stale = NULL;
    EXPECT("payload of an empty handle (not the last job's)", xtcq_job_payload(job, &stale, &len), XTCQ_E_INVALID);
    EXPECT("unknown create flags", xtcq_create_queue(client, "flags", 0, 0, 0, 0, 0x80), XTCQ_E_INVALID);
    OK("push", xtcq_owner_push(owner, HELLO, 5));
    OK("steal", xtcq_thief_steal(thief, job));
    OK("fail with a reason that is not UTF-8", xtcq_job_fail(job, "caf\xe9 \xff"));
    OK("steal it again", xtcq_thief_steal(thief, job));
    OK("ack", xtcq_job_ack(job));
    EXPECT("delete a queue with an owner attached", xtcq_delete_queue(client, "one", 0), XTCQ_E_IN_USE);

    forked_handles(client, owner, thief, job);
    expired_lease(client);
    cancelled_while_held(client);
    unique_keys(client);

    /* Last: fill the one-deque queue and its overflow ring (records are shared). */
    int rc = XTCQ_OK;
    for (long i = 0; i < 10000000 && rc == XTCQ_OK; i++) rc = xtcq_owner_push(owner, HELLO, 5);
    EXPECT("push until full", rc, XTCQ_E_FULL);

    printf("strerror(-999): %s\n", xtcq_strerror(-999));
    pthread_key_create(&late_key, failing_calls_late);
    pthread_t late;
    pthread_create(&late, NULL, thread_with_a_late_destructor, NULL);
    pthread_join(late, NULL);
    xtcq_job_new(&atexit_job);
    xtcq_job_ack(atexit_job);
    atexit(at_exit);
    xtcq_job_free(job);
    xtcq_thief_free(thief);
    xtcq_owner_free(owner);
    xtcq_client_free(client);
    return bad;
}
