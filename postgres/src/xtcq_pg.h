/*
 * xtcq_pg.h: what the parts of the xtcq extension share: the backend's connection to
 * xtcqd, the GUCs, and the mapping of xtcq statuses to PostgreSQL errors.
 */
#ifndef XTCQ_PG_H
#define XTCQ_PG_H

#include "postgres.h"

#include "lib/stringinfo.h"

#include "xtcq.h"

/* GUCs (xtcq_pg.c). */
extern char *xtcq_socket;
extern int xtcq_workers;
extern char *xtcq_worker_queues;
extern char *xtcq_worker_database;
extern char *xtcq_worker_role;
extern char *xtcq_worker_sql;
extern int xtcq_lease_margin_ms;

/*
 * Every job pushed from SQL starts with a header line, "XTCQ-JOB <role oid> <full xid>\n",
 * then the payload as given: the role the job runs as (current_user at the push), and for
 * push_on_commit the transaction whose commit decides whether it runs (0 for xtcq.push).
 * The extension writes it in front of whatever SQL gave, so a payload that looks like a
 * header stays payload.
 */
#define XTCQ_JOB_PREFIX "XTCQ-JOB "
/* The longest header: prefix, two numbers, two separators. */
#define XTCQ_JOB_HEADER_MAX 64
/* Queue names are 1 to 64 bytes (xtcqd's rule). */
#define XTCQ_MAX_QUEUE_NAME 64

/* Writes the header of a job pushed by `role` in transaction `fxid` (0: none) into `buf`. */
extern void xtcq_pg_job_header(StringInfo buf, Oid role, uint64 fxid);

/* This backend's client, connected on first use (never in the postmaster). */
extern xtcq_client *xtcq_pg_client(void);
/* An injector of `queue`, attached on first use and kept for the backend's life. */
extern xtcq_injector *xtcq_pg_injector(const char *queue);
/*
 * Makes the running statement's pushes to `queue` join `batch` (NULL: none); raises an ERROR
 * when that batch cannot be joined. Called by every statement that pushes, before its pushes.
 */
extern void xtcq_pg_use_batch(const char *queue, const char *batch);
/* Pushes through the queue's injector; after a lost daemon, attaches again and retries once. */
extern int xtcq_pg_push(const char *queue, const char *data, size_t len, uint64 delay_ms, uint32 priority,
						uint64 *id);
/*
 * Pushes `n` jobs (job i: the lens[i] bytes at payloads[i]) through the queue's injector in
 * one call, ids[i] each job's id; `*queued` the first ones queued. After a lost daemon, with
 * nothing queued, attaches again and retries once.
 */
extern int xtcq_pg_push_many(const char *queue, const uint8_t *const *payloads, const size_t *lens, size_t n,
							 uint32 priority, uint64 *ids, size_t *queued);
/* xtcq_injector_push_key through this backend's injector: XTCQ_OK, XTCQ_EXISTING or an error;
 * `*id` the job that holds the key (index << 32 | birth) on the first two and on
 * XTCQ_E_DUPLICATE. */
extern int xtcq_pg_push_key(const char *queue, const char *data, size_t len, const char *key, bool or_existing,
							uint64 *id);
/* Forgets the client and injectors (after the daemon went away: the next call reconnects). */
extern void xtcq_pg_reset(void);
/* Raises `status` (a negative XTCQ_E_*) as an ERROR at `elevel` naming `what` and `queue`. */
extern void xtcq_pg_raise(int elevel, int status, const char *what, const char *queue) pg_attribute_noreturn();
/* The socket as the messages name it. */
extern const char *xtcq_pg_socket_name(void);

/* ERROR unless `queue` is a name xtcqd could hold (1 to 64 bytes). */
extern void xtcq_pg_check_queue_name(const char *queue);

/* grants.c: ERROR unless the current user may `what` (push to, read) `queue`. */
extern void xtcq_pg_check_queue(const char *queue, const char *what);

/* on_commit.c */
extern void xtcq_on_commit_init(void);

/* run_as.c */
/* A job's header at *data: false when there is none (a job not pushed from SQL); moves
 * *data and *len past it; ERROR when it is malformed. */
extern bool xtcq_pg_parse_header(char **data, size_t *len, Oid *role, uint64 *fxid);
/* ERROR, with the reason, unless a job pushed by `role` may run. */
extern void xtcq_pg_check_job_role(Oid role);
/* run(arg) as `role` (InvalidOid: the worker's), security-restricted, its settings undone. */
extern int xtcq_pg_run_as(Oid role, int (*run) (void *), void *arg);

/* worker.c */
extern void xtcq_workers_register(void);
PGDLLEXPORT void xtcq_worker_main(Datum arg);

#endif
