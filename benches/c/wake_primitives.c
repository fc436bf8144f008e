/*
 * wake_primitives.c: what the kernel's wake-up primitives cost on this machine, without xtcq:
 * a waker thread on CPU 0 wakes a waiter thread asleep on CPU 1, N times, GAP_US apart (the
 * waiter is asleep each time). For each primitive, p50 of the waker's system call and p50 of
 * the waiter's return (both from the waker's clock just before the call). The modes alternate
 * in rounds, as in wake_latency.
 *
 *   cc -O2 -pthread benches/c/wake_primitives.c -o /tmp/wake_primitives
 *   /tmp/wake_primitives [GAP_US] [ROUNDS]          # defaults 500 and 3
 *
 * A futex wake is what `steal_wait` sleeps on; a datagram sent to a socket's path, polled
 * through an epoll instance, is what a wake descriptor is; the other rows say what a
 * descriptor built on another primitive could cost.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <linux/io_uring.h>

/* Not in older kernel headers (Linux 6.7 added them). */
#define XTCQ_IORING_OP_FUTEX_WAIT 51
#define XTCQ_FUTEX2_SIZE_U32 0x02

#define N 2000
enum { FUTEX, EVENTFD, DGRAM_PATH, DGRAM_CONNECTED, DGRAM_PATH_EPOLL, PIPE, URING_FUTEX, MODES };
static const char *names[MODES] = {
    "futex wake", "eventfd write", "datagram sendto(path)", "datagram send(connected)",
    "datagram sendto(path), waiter polls an epoll", "pipe write",
    "futex wake, waiter polls an io_uring FUTEX_WAIT"};

static int mode;
static long t0s[N], t1s[N], t2s[N];
static _Atomic int *word, seen;
static int rfd, efd, ep, sendfd, connfd, pfd[2];
static struct sockaddr_un addr;

/* One io_uring with one futex wait in flight: its descriptor is readable once the wait ends. */
static int ring = -1;
static unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail;
static struct io_uring_sqe *sqes;

static void ring_setup(void) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    ring = (int)syscall(__NR_io_uring_setup, 4, &p);
    if (ring < 0) { perror("io_uring_setup"); return; }
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
    char *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
    sqes = mmap(NULL, p.sq_entries * sizeof *sqes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) { perror("mmap ring"); exit(1); }
    sq_tail = (unsigned *)(sq + p.sq_off.tail);
    sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    sq_array = (unsigned *)(sq + p.sq_off.array);
    cq_head = (unsigned *)(cq + p.cq_off.head);
    cq_tail = (unsigned *)(cq + p.cq_off.tail);
}

/* Arms: a FUTEX_WAIT on `word` while it holds `expected` (shared: another process may wake). */
static void ring_arm(int expected) {
    unsigned t = *sq_tail, i = t & *sq_mask;
    struct io_uring_sqe *e = &sqes[i];
    memset(e, 0, sizeof *e);
    e->opcode = XTCQ_IORING_OP_FUTEX_WAIT;
    e->fd = XTCQ_FUTEX2_SIZE_U32;
    e->addr = (unsigned long)word;
    e->addr2 = (unsigned)expected;
    e->addr3 = FUTEX_BITSET_MATCH_ANY;
    sq_array[i] = i;
    __atomic_store_n(sq_tail, t + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring, 1, 0, 0, NULL, 0) != 1) { perror("io_uring_enter"); exit(1); }
}

/* Consumes the completions: the readiness is taken. */
static void ring_clear(void) {
    __atomic_store_n(cq_head, __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
}


static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void sleep_on(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    poll(&p, 1, -1);
}

static void *waiter(void *unused) {
    char b[16];
    uint64_t v;
    (void)unused;
    pin(1);
    for (int i = 0; i < N; i++) {
        switch (mode) {
        case FUTEX:
            while (atomic_load(word) == i) syscall(SYS_futex, word, FUTEX_WAIT, i, NULL, NULL, 0);
            break;
        case EVENTFD: sleep_on(efd); (void)!read(efd, &v, 8); break;
        case DGRAM_PATH:
        case DGRAM_CONNECTED: sleep_on(rfd); recv(rfd, b, sizeof b, MSG_DONTWAIT); break;
        case DGRAM_PATH_EPOLL: sleep_on(ep); recv(rfd, b, sizeof b, MSG_DONTWAIT); break;
        case URING_FUTEX:
            while (atomic_load(word) == i) {
                ring_arm(i);
                sleep_on(ring);
                ring_clear();
            }
            break;
        default: (void)!read(pfd[0], b, 1);
        }
        t2s[i] = now_ns();
        atomic_store(&seen, i + 1);
    }
    return NULL;
}

static void wake(int i) {
    uint64_t one = 1;
    switch (mode) {
    case FUTEX:
    case URING_FUTEX: atomic_store(word, i + 1); syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0); break;
    case EVENTFD: (void)!write(efd, &one, 8); break;
    case DGRAM_PATH:
    case DGRAM_PATH_EPOLL: sendto(sendfd, "x", 1, MSG_DONTWAIT, (void *)&addr, sizeof addr); break;
    case DGRAM_CONNECTED: send(connfd, "x", 1, MSG_DONTWAIT); break;
    default: (void)!write(pfd[1], "x", 1);
    }
}

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void setup(void) {
    char dir[] = "/tmp/wake-primitives-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
    word = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s/0.0", dir);
    rfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (word == MAP_FAILED || bind(rfd, (void *)&addr, sizeof addr)) { perror("setup"); exit(1); }
    ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, rfd, &ev);
    sendfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    connfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    efd = eventfd(0, EFD_NONBLOCK);
    if (connect(connfd, (void *)&addr, sizeof addr) || efd < 0 || pipe(pfd)) { perror("setup"); exit(1); }
    ring_setup();
}

int main(int argc, char **argv) {
    int gap_us = argc > 1 ? atoi(argv[1]) : 500, rounds = argc > 2 ? atoi(argv[2]) : 3;
    static long call[N], woken[N];
    setup();
    for (int round = 0; round < rounds; round++) {
        for (mode = 0; mode < MODES; mode++) {
            pthread_t th;
            if (mode == URING_FUTEX && ring < 0) continue;
            atomic_store(word, 0);
            atomic_store(&seen, 0);
            pthread_create(&th, NULL, waiter, NULL);
            pin(0);
            usleep(20000);
            for (int i = 0; i < N; i++) {
                struct timespec g = {0, gap_us * 1000L};
                nanosleep(&g, NULL);
                t0s[i] = now_ns();
                wake(i);
                t1s[i] = now_ns();
                while (atomic_load(&seen) < i + 1) {}
            }
            pthread_join(th, NULL);
            for (int i = 0; i < N; i++) { call[i] = t1s[i] - t0s[i]; woken[i] = t2s[i] - t0s[i]; }
            qsort(call, N, sizeof(long), cmp);
            qsort(woken, N, sizeof(long), cmp);
            printf("round %d %-46s waker's call p50 %6.1f us   woken p50 %6.1f us\n", round, names[mode],
                   call[N / 2] / 1e3, woken[N / 2] / 1e3);
        }
    }
    unlink(addr.sun_path);
    *strrchr(addr.sun_path, '/') = '\0';
    rmdir(addr.sun_path);
    return 0;
}
