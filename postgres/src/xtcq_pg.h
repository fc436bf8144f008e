/*
 * xtcq_pg.h: what the parts of the xtcq extension share: the backend's connection to
 * xtcqd, the GUCs, and the mapping of xtcq statuses to PostgreSQL errors.
 */
#ifndef XTCQ_PG_H
#define XTCQ_PG_H

#include "postgres.h"

#include "xtcq.h"

/* GUCs (xtcq_pg.c). */
extern char *xtcq_socket;
extern int xtcq_workers;
extern char *xtcq_worker_queues;
extern char *xtcq_worker_database;
extern char *xtcq_worker_role;
extern char *xtcq_worker_sql;
extern int xtcq_lease_margin_ms;

/* The prefix of a push_on_commit job's payload: "XTCQ-TXN <full xid>\n" then the payload. */
#define XTCQ_TXN_PREFIX "XTCQ-TXN "

/* This backend's client, connected on first use (never in the postmaster). */
extern xtcq_client *xtcq_pg_client(void);
/* An injector of `queue`, attached on first use and kept for the backend's life. */
extern xtcq_injector *xtcq_pg_injector(const char *queue);
/* Pushes through the queue's injector; after a lost daemon, attaches again and retries once. */
extern int xtcq_pg_push(const char *queue, const char *data, size_t len, uint64 delay_ms, uint64 *id);
/* Forgets the client and injectors (after the daemon went away: the next call reconnects). */
extern void xtcq_pg_reset(void);
/* Raises `status` (a negative XTCQ_E_*) as an ERROR at `elevel` naming `what` and `queue`. */
extern void xtcq_pg_raise(int elevel, int status, const char *what, const char *queue) pg_attribute_noreturn();
/* The socket as the messages name it. */
extern const char *xtcq_pg_socket_name(void);

/* on_commit.c */
extern void xtcq_on_commit_init(void);

/* worker.c */
extern void xtcq_workers_register(void);
PGDLLEXPORT void xtcq_worker_main(Datum arg);

#endif
