/*
 * worker.c: background workers that run jobs (shared_preload_libraries = 'xtcq').
 *
 * Each worker serves one queue of xtcq.worker_queues. It steals a job, runs it in its own
 * transaction through SPI (the payload as SQL, or xtcq.worker_sql with the payload as $1),
 * acks after the commit, and fails the job with the error's message otherwise (the queue's
 * retries, backoff and dead letters apply). When the queue is empty it sleeps in
 * WaitLatchOrSocket on the thief's wake descriptor, its latch, and postmaster death.
 *
 * Stopping: SIGTERM (pg_terminate_backend, pg_ctl stop -m fast) is PostgreSQL's `die`: the
 * running statement is cancelled at its next interrupt check, and the before_shmem_exit
 * callback gives the job back (release: no attempt counted). A worker killed outright
 * (kill -9, -m immediate) leaves its job to xtcqd, which re-queues a dead process's jobs.
 * A job acked after its commit runs at least once: a worker killed between the commit and
 * the ack runs it again.
 */
#include "xtcq_pg.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "mb/pg_wchar.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/varlena.h"

static xtcq_client *w_client = NULL;
static xtcq_thief *w_thief = NULL;
static xtcq_job *w_job = NULL;
static int w_fd = -1;
static char *w_queue = NULL;

void
xtcq_workers_register(void)
{
	BackgroundWorker bgw;
	int i;

	for (i = 0; i < xtcq_workers; i++)
	{
		memset(&bgw, 0, sizeof(bgw));
		bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
		/* Restarted after an error exit (role missing, daemon trouble at start). */
		bgw.bgw_restart_time = 1;
		snprintf(bgw.bgw_library_name, BGW_MAXLEN, "xtcq");
		snprintf(bgw.bgw_function_name, BGW_MAXLEN, "xtcq_worker_main");
		snprintf(bgw.bgw_name, BGW_MAXLEN, "xtcq worker %d", i);
		snprintf(bgw.bgw_type, BGW_MAXLEN, "xtcq worker");
		bgw.bgw_main_arg = Int32GetDatum(i);
		RegisterBackgroundWorker(&bgw);
	}
}

/* Queue number `i` (mod their count) of xtcq.worker_queues, or NULL when there is none. */
static char *
queue_for(int i)
{
	List *names = NIL;
	char *raw = pstrdup(xtcq_worker_queues);

	if (!SplitIdentifierString(raw, ',', &names) || list_length(names) == 0)
		return NULL;
	return pstrdup(list_nth(names, i % list_length(names)));
}

static void
drop_connection(void)
{
	xtcq_thief_free(w_thief);
	w_thief = NULL;
	xtcq_client_free(w_client);
	w_client = NULL;
	w_fd = -1;
}

static void
worker_exit(int code, Datum arg)
{
	/* A job still in hand was not committed: give it back without counting an attempt. */
	if (w_job != NULL && xtcq_job_held(w_job))
		xtcq_job_release(w_job);
	xtcq_job_free(w_job);
	w_job = NULL;
	drop_connection();
}

/* Connects and attaches as a thief; on failure logs why (once per outage) and says false. */
static bool
connect_thief(bool *said)
{
	int rc = xtcq_connect(xtcq_socket[0] != '\0' ? xtcq_socket : NULL, &w_client);

	if (rc == XTCQ_OK)
		rc = xtcq_thief_attach(w_client, w_queue, &w_thief);
	if (rc == XTCQ_OK)
		rc = xtcq_thief_wait_fd(w_thief, &w_fd);
	if (rc == XTCQ_OK)
	{
		if (*said)
			ereport(LOG, (errmsg("xtcq worker: serving queue %s again", w_queue)));
		*said = false;
		return true;
	}
	if (!*said)
		ereport(WARNING, (errmsg("xtcq worker: cannot serve queue %s: %s", w_queue, xtcq_strerror(rc)),
						  errdetail("%s", xtcq_last_error()),
						  errhint("Retrying every second; xtcq.socket is %s.", xtcq_pg_socket_name())));
	*said = true;
	drop_connection();
	return false;
}

/*
 * For a push_on_commit job: waits until transaction `fxid` ended and says whether it
 * committed.
 */
static bool
transaction_committed(uint64 fxid)
{
	char xid_text[32];

	snprintf(xid_text, sizeof(xid_text), UINT64_FORMAT, fxid);
	for (;;)
	{
		Oid types[1] = {TEXTOID};
		Datum values[1] = {CStringGetTextDatum(xid_text)};
		bool isnull;
		char *status;

		/* pg_xact_status knows ids older than the status log's horizon are unknown (NULL). */
		if (SPI_execute_with_args("select pg_catalog.pg_xact_status($1::pg_catalog.xid8)", 1, types, values, NULL,
								  true, 1) != SPI_OK_SELECT)
			ereport(ERROR, (errmsg("xtcq: cannot look up transaction %s", xid_text)));
		status = TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (isnull)
			ereport(ERROR, (errmsg("xtcq: transaction %s is too old to tell whether it committed", xid_text)));
		if (strcmp(status, "committed") == 0)
			return true;
		if (strcmp(status, "aborted") == 0)
			return false;
		/* In progress: between its PRE_COMMIT push and its commit record. Wait for its end. */
		XactLockTableWait(XidFromFullTransactionId(FullTransactionIdFromU64(fxid)), NULL, NULL, XLTW_None);
	}
}

typedef struct JobSql
{
	char *sql;
	size_t len;
} JobSql;

/* Runs the job's SQL (or xtcq.worker_sql with it as $1); a job that cannot run is an ERROR. */
static int
execute_job(void *arg)
{
	JobSql *job = arg;
	int rc;

	if (xtcq_worker_sql[0] == '\0')
		rc = SPI_execute(job->sql, false, 0);
	else
	{
		Oid types[1] = {TEXTOID};
		Datum values[1] = {PointerGetDatum(cstring_to_text_with_len(job->sql, (int) job->len))};

		rc = SPI_execute_with_args(xtcq_worker_sql, 1, types, values, NULL, false, 0);
	}
	/* Transaction control (COMMIT, ROLLBACK) is refused by SPI with a code, not an ERROR:
	 * the statements before it must not commit as if the job had run. */
	if (rc < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_TRANSACTION_STATE),
						errmsg("COMMIT/ROLLBACK in a job: its SQL cannot run in a worker (%s)", SPI_result_code_string(rc)),
						errhint("A job runs in a transaction of its own: leave out BEGIN, COMMIT and ROLLBACK.")));
	return rc;
}

/* Runs the job in hand in its own transaction; acks after the commit, fails on an error. */
static void
run_job(MemoryContext job_ctx)
{
	const uint8_t *raw;
	size_t len;
	char *data;
	volatile bool run = true;
	MemoryContext old = MemoryContextSwitchTo(job_ctx);
	int rc;

	if (xtcq_job_payload(w_job, &raw, &len) != XTCQ_OK)
	{
		xtcq_job_fail(w_job, "xtcq worker: cannot read the payload");
		return;
	}
	data = palloc(len + 1);
	memcpy(data, raw, len);
	data[len] = '\0';
	/* A statement cannot extend the lease while it runs: claim for its whole timeout. */
	if (StatementTimeout > 0)
		xtcq_job_extend_lease(w_job, (uint32) Min((int64) StatementTimeout + xtcq_lease_margin_ms, PG_UINT32_MAX));

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		JobSql job = {data, len};
		Oid role = InvalidOid;
		uint64 fxid = 0;

		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		if (xtcq_pg_parse_header(&job.sql, &job.len, &role, &fxid) && fxid != 0)
			run = transaction_committed(fxid);
		if (run)
		{
			if (memchr(job.sql, '\0', job.len) != NULL)
				ereport(ERROR, (errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
								errmsg("xtcq: the payload holds a NUL byte; it cannot be SQL text")));
			pg_verifymbstr(job.sql, (int) job.len, false);
			pgstat_report_activity(STATE_RUNNING, xtcq_worker_sql[0] != '\0' ? xtcq_worker_sql : job.sql);
			if (StatementTimeout > 0)
				enable_timeout_after(STATEMENT_TIMEOUT, StatementTimeout);
			(void) xtcq_pg_run_as(role, execute_job, &job);
			disable_timeout(STATEMENT_TIMEOUT, false);
		}
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData *edata;

		MemoryContextSwitchTo(job_ctx);
		edata = CopyErrorData();
		FlushErrorState();
		disable_timeout(STATEMENT_TIMEOUT, false);
		AbortCurrentTransaction();
		ereport(LOG, (errmsg("xtcq worker: a job of queue %s failed: %s", w_queue, edata->message)));
		rc = xtcq_job_fail(w_job, edata->message);
		if (rc != XTCQ_OK && rc != XTCQ_E_NOT_HELD)
			ereport(WARNING, (errmsg("xtcq worker: cannot fail the job: %s", xtcq_last_error())));
		pgstat_report_activity(STATE_IDLE, NULL);
		MemoryContextSwitchTo(old);
		return;
	}
	PG_END_TRY();
	pgstat_report_activity(STATE_IDLE, NULL);
	rc = xtcq_job_ack(w_job);
	if (rc == XTCQ_E_NOT_HELD)
		ereport(WARNING, (errmsg("xtcq worker: a job of queue %s committed after its lease ran out; it may run again",
								 w_queue)));
	else if (rc != XTCQ_OK)
		ereport(WARNING, (errmsg("xtcq worker: cannot ack a job: %s", xtcq_last_error())));
	if (!run)
		ereport(DEBUG1, (errmsg("xtcq worker: dropped a push_on_commit job of an aborted transaction")));
	MemoryContextSwitchTo(old);
}

void
xtcq_worker_main(Datum arg)
{
	MemoryContext job_ctx;
	bool said = false;
	bool superuser_role;

	pqsignal(SIGTERM, die);
	pqsignal(SIGINT, StatementCancelHandler);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	w_queue = queue_for(DatumGetInt32(arg));
	if (w_queue == NULL)
		ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("xtcq worker: xtcq.worker_queues names no queue"),
						errhint("Set xtcq.worker_queues = 'QUEUE[,QUEUE...]' or xtcq.workers = 0.")));
	if (xtcq_worker_role[0] == '\0')
		ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("xtcq worker: xtcq.worker_role is not set"),
						errhint("Create a role that is not a superuser and name it in xtcq.worker_role.")));
	BackgroundWorkerInitializeConnection(xtcq_worker_database, xtcq_worker_role, 0);
	StartTransactionCommand();
	superuser_role = superuser();
	CommitTransactionCommand();
	if (superuser_role)
		ereport(FATAL, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("xtcq worker: xtcq.worker_role %s is a superuser", xtcq_worker_role),
						errhint("Jobs run as that role: name a role that is not a superuser.")));

	before_shmem_exit(worker_exit, (Datum) 0);
	if (xtcq_job_new(&w_job) != XTCQ_OK)
		ereport(FATAL, (errmsg("xtcq worker: cannot make a job handle: %s", xtcq_last_error())));
	job_ctx = AllocSetContextCreate(TopMemoryContext, "xtcq job", ALLOCSET_DEFAULT_SIZES);
	ereport(LOG, (errmsg("xtcq worker: serving queue %s as role %s", w_queue, xtcq_worker_role)));

	for (;;)
	{
		int rc;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (w_thief == NULL && !connect_thief(&said))
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			continue;
		}
		rc = xtcq_thief_steal_or_arm(w_thief, w_job);
		if (rc == XTCQ_OK)
		{
			run_job(job_ctx);
			MemoryContextReset(job_ctx);
		}
		else if (rc == XTCQ_EMPTY)
		{
			/*
			 * Armed: the descriptor turns readable when a job may be there or xtcqd went
			 * away. The timeout is only a safety net for a lost wake, not a poll.
			 */
			(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									 w_fd, 10000, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		else
		{
			/* xtcqd went away or its segment changed: connect again. */
			ereport(LOG, (errmsg("xtcq worker: lost queue %s: %s", w_queue, xtcq_strerror(rc)),
						  errdetail("%s", xtcq_last_error())));
			drop_connection();
		}
	}
}
