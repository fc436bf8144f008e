/*
 * on_commit.c: xtcq.push_on_commit, a transactional enqueue.
 *
 * The guarantee: the extension's workers run the job of a transaction that committed, and
 * never the job of one that aborted (ROLLBACK, an error, a rolled-back savepoint, a backend
 * killed before its commit record).
 *
 * How: payloads wait in this backend's memory (per subtransaction, so a rolled-back
 * savepoint drops its own) until PRE_COMMIT, where they are pushed, each with the job
 * header (xtcq_pg.h) naming the full transaction id. A push that fails there (queue full, daemon away)
 * raises an ERROR, which aborts the transaction before it commits: never a silent loss
 * after. A job is thus in the queue from just before the commit record; a worker that takes
 * it waits for the transaction to end (XactLockTableWait) and runs it only if it committed
 * (pg_xact_status), else drops it. A crash between the push and the commit record leaves a
 * job whose transaction never committed: dropped the same way.
 *
 * Consumers other than the extension's workers (the CLI, a C program) see the header and
 * must make the same check themselves (pg_xact_status of the id).
 */
#include "xtcq_pg.h"

#include "access/transam.h"
#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(xtcq_push_on_commit);

typedef struct PendingJob
{
	char *queue;
	StringInfoData payload;		/* prefix and payload, ready to push */
	int nest_level;				/* the subtransaction that pushed it */
} PendingJob;

/* Jobs of the running transaction, in TopTransactionContext (gone with it). */
static List *pending = NIL;

static void
push_pending(List *jobs)
{
	ListCell *lc;

	foreach(lc, jobs)
	{
		PendingJob *j = lfirst(lc);
		uint64 id;
		int rc;

		xtcq_pg_use_batch(j->queue, NULL);
		rc = xtcq_pg_push(j->queue, j->payload.data, j->payload.len, 0, 0, &id);

		if (rc != XTCQ_OK)
			xtcq_pg_raise(ERROR, rc, "push_on_commit: the transaction is aborted: cannot push to queue", j->queue);
	}
}

static void
on_xact(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (pending != NIL)
			{
				List *jobs = pending;

				/* Cleared first: after an ERROR below nothing is left to push. */
				pending = NIL;
				push_pending(jobs);
			}
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (pending != NIL)
				ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								errmsg("xtcq: push_on_commit cannot be used in a prepared transaction")));
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			pending = NIL;
			break;
		default:
			break;
	}
}

static void
on_subxact(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid, void *arg)
{
	int level = GetCurrentTransactionNestLevel();
	ListCell *lc;

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, pending)
		{
			PendingJob *j = lfirst(lc);

			if (j->nest_level >= level)
				pending = foreach_delete_current(pending, lc);
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		/* The parent now answers for them: its rollback drops them. */
		foreach(lc, pending)
		{
			PendingJob *j = lfirst(lc);

			if (j->nest_level >= level)
				j->nest_level = level - 1;
		}
	}
}

void
xtcq_on_commit_init(void)
{
	RegisterXactCallback(on_xact, NULL);
	RegisterSubXactCallback(on_subxact, NULL);
}

/* xtcq.push_on_commit(queue text, payload bytea|text) returns void */
Datum
xtcq_push_on_commit(PG_FUNCTION_ARGS)
{
	MemoryContext old;
	PendingJob *j;
	bytea *payload;
	FullTransactionId fxid;
	char *queue;

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("xtcq: the queue name is NULL")));
	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("xtcq: the payload is NULL")));
	queue = text_to_cstring(PG_GETARG_TEXT_PP(0));
	xtcq_pg_check_queue_name(queue);
	xtcq_pg_check_queue(queue, "push to");
	payload = PG_GETARG_BYTEA_PP(1);
	/* Attached now, so that a missing queue or daemon fails this statement, not the commit. */
	(void) xtcq_pg_injector(queue);
	/* A transaction id makes the commit write a record the workers can look up. */
	fxid = GetTopFullTransactionId();

	old = MemoryContextSwitchTo(TopTransactionContext);
	j = palloc(sizeof(PendingJob));
	j->queue = pstrdup(queue);
	j->nest_level = GetCurrentTransactionNestLevel();
	initStringInfo(&j->payload);
	xtcq_pg_job_header(&j->payload, GetUserId(), U64FromFullTransactionId(fxid));
	appendBinaryStringInfo(&j->payload, VARDATA_ANY(payload), VARSIZE_ANY_EXHDR(payload));
	pending = lappend(pending, j);
	MemoryContextSwitchTo(old);
	PG_RETURN_VOID();
}
