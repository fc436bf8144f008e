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

#define N 2000
enum { FUTEX, EVENTFD, DGRAM_PATH, DGRAM_CONNECTED, DGRAM_PATH_EPOLL, PIPE, MODES };
static const char *names[MODES] = {
    "futex wake", "eventfd write", "datagram sendto(path)", "datagram send(connected)",
    "datagram sendto(path), waiter polls an epoll", "pipe write"};

static int mode;
static long t0s[N], t1s[N], t2s[N];
static _Atomic int *word, seen;
static int rfd, efd, ep, sendfd, connfd, pfd[2];
static struct sockaddr_un addr;

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
    case FUTEX: atomic_store(word, i + 1); syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0); break;
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
}

int main(int argc, char **argv) {
    int gap_us = argc > 1 ? atoi(argv[1]) : 500, rounds = argc > 2 ? atoi(argv[2]) : 3;
    static long call[N], woken[N];
    setup();
    for (int round = 0; round < rounds; round++) {
        for (mode = 0; mode < MODES; mode++) {
            pthread_t th;
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
