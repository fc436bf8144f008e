/*
 * xtcq_pg.c: the extension's entry point, its GUCs, this backend's connection to xtcqd, and
 * xtcq statuses as PostgreSQL errors (SQLSTATE, message, hint).
 *
 * A backend connects on first use, never in the postmaster (a connection does not survive
 * fork()), and gives everything back in a before_shmem_exit callback. After the daemon
 * went away (restart), the handles are dropped and the next call connects again.
 */
#include "xtcq_pg.h"

#include <limits.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

char *xtcq_socket = NULL;
int xtcq_workers = 0;
char *xtcq_worker_queues = NULL;
char *xtcq_worker_database = NULL;
char *xtcq_worker_role = NULL;
char *xtcq_worker_sql = NULL;
int xtcq_lease_margin_ms = 5000;

typedef struct InjectorEntry
{
	char *queue;
	xtcq_injector *injector;
	/* The batch its pushes join (NULL: none), in TopMemoryContext. */
	char *batch;
} InjectorEntry;

/* A backend pushes to a handful of queues; a short list beats a hash table. */
#define MAX_INJECTORS 64

static xtcq_client *client = NULL;
static InjectorEntry injectors[MAX_INJECTORS];
static int n_injectors = 0;
static bool exit_registered = false;
/*
 * The batch the running statement's pushes join (NULL: none), set by xtcq_pg_use_batch at
 * each statement that pushes, so that no batch outlives the statement that named it, even
 * one left by an error.
 */
static char *statement_batch = NULL;

void _PG_init(void);

const char *
xtcq_pg_socket_name(void)
{
	if (xtcq_socket != NULL && xtcq_socket[0] != '\0')
		return xtcq_socket;
	return "the default ($XTCQ_SOCKET or xtcqd's standard path)";
}

void
xtcq_pg_reset(void)
{
	int i;

	for (i = 0; i < n_injectors; i++)
	{
		xtcq_injector_free(injectors[i].injector);
		pfree(injectors[i].queue);
		if (injectors[i].batch != NULL)
			pfree(injectors[i].batch);
	}
	n_injectors = 0;
	xtcq_client_free(client);
	client = NULL;
}

static void
detach_at_exit(int code, Datum arg)
{
	xtcq_pg_reset();
}

void
xtcq_pg_raise(int elevel, int status, const char *what, const char *queue)
{
	/* Copied first: the message is only valid until the next failing call. */
	char *detail = pstrdup(xtcq_last_error());
	int sqlstate;
	const char *hint = NULL;

	switch (status)
	{
		case XTCQ_E_NO_SUCH_QUEUE:
			sqlstate = ERRCODE_UNDEFINED_OBJECT;
			hint = psprintf("Create it first: xtcq create %s (as the user xtcqd runs as).", queue ? queue : "QUEUE");
			break;
		case XTCQ_E_TOO_LARGE:
			sqlstate = ERRCODE_PROGRAM_LIMIT_EXCEEDED;
			hint = "Start xtcqd with larger payload records, or push a reference to the data instead.";
			break;
		case XTCQ_E_UNAUTHORIZED:
			sqlstate = ERRCODE_INSUFFICIENT_PRIVILEGE;
			hint = "Allow the server's OS user: xtcqd --allow-uid / --group, or xtcq create --allow-uid.";
			break;
		case XTCQ_E_UNREACHABLE:
		case XTCQ_E_SEGMENT:
		case XTCQ_E_FORKED:
			sqlstate = ERRCODE_CONNECTION_FAILURE;
			hint = psprintf("Is xtcqd running? xtcq.socket is %s.", xtcq_pg_socket_name());
			/* The next call connects again (the daemon may be back by then). */
			xtcq_pg_reset();
			break;
		case XTCQ_E_FULL:
		case XTCQ_E_NO_ROOM:
		case XTCQ_E_RESOURCE:
			sqlstate = ERRCODE_INSUFFICIENT_RESOURCES;
			hint = "Retry once consumers caught up, or give the queue more room.";
			break;
		case XTCQ_E_INVALID:
			sqlstate = ERRCODE_INVALID_PARAMETER_VALUE;
			break;
		default:
			sqlstate = ERRCODE_INTERNAL_ERROR;
			break;
	}
	ereport(elevel,
			(errcode(sqlstate),
			 errmsg("xtcq: %s%s%s: %s", what, queue ? " " : "", queue ? queue : "", xtcq_strerror(status)),
			 errdetail("%s", detail),
			 hint ? errhint("%s", hint) : 0));
	pg_unreachable();
}

xtcq_client *
xtcq_pg_client(void)
{
	int rc;

	if (client != NULL)
		return client;
	if (!IsUnderPostmaster && !IsBackgroundWorker && IsPostmasterEnvironment)
		elog(ERROR, "xtcq: not connecting from the postmaster");
	if (!exit_registered)
	{
		before_shmem_exit(detach_at_exit, (Datum) 0);
		exit_registered = true;
	}
	rc = xtcq_connect(xtcq_socket != NULL && xtcq_socket[0] != '\0' ? xtcq_socket : NULL, &client);
	if (rc != XTCQ_OK)
	{
		client = NULL;
		xtcq_pg_raise(ERROR, rc, "cannot connect to xtcqd at", xtcq_pg_socket_name());
	}
	return client;
}

/* The entry of `queue`'s injector, attached on first use. */
static InjectorEntry *
injector_entry(const char *queue)
{
	int i;
	int rc;
	xtcq_injector *inj = NULL;

	for (i = 0; i < n_injectors; i++)
		if (strcmp(injectors[i].queue, queue) == 0)
			return &injectors[i];
	rc = xtcq_injector_attach(xtcq_pg_client(), queue, &inj);
	if (rc != XTCQ_OK)
		xtcq_pg_raise(ERROR, rc, "cannot push to queue", queue);
	if (n_injectors == MAX_INJECTORS)
	{
		/* Drop the oldest: a backend that pushes to this many queues pays re-attaches. */
		xtcq_injector_free(injectors[0].injector);
		pfree(injectors[0].queue);
		if (injectors[0].batch != NULL)
			pfree(injectors[0].batch);
		memmove(&injectors[0], &injectors[1], sizeof(InjectorEntry) * (MAX_INJECTORS - 1));
		n_injectors--;
	}
	injectors[n_injectors].queue = MemoryContextStrdup(TopMemoryContext, queue);
	injectors[n_injectors].injector = inj;
	injectors[n_injectors].batch = NULL;
	return &injectors[n_injectors++];
}

xtcq_injector *
xtcq_pg_injector(const char *queue)
{
	return injector_entry(queue)->injector;
}

/*
 * Makes the pushes of `e` join `batch` (NULL: none). Asks xtcqd for a batch each time one is
 * named (a batch of that name may have been made again since), never when none is named
 * and none was joined.
 */
static int
join_batch(InjectorEntry *e, const char *batch)
{
	int rc;

	if (batch == NULL && e->batch == NULL)
		return XTCQ_OK;
	rc = xtcq_injector_set_batch(e->injector, xtcq_pg_client(), batch);
	if (e->batch != NULL)
		pfree(e->batch);
	e->batch = NULL;
	if (rc != XTCQ_OK)
	{
		(void) xtcq_injector_set_batch(e->injector, xtcq_pg_client(), NULL);
		return rc;
	}
	if (batch != NULL)
		e->batch = MemoryContextStrdup(TopMemoryContext, batch);
	return XTCQ_OK;
}

void
xtcq_pg_use_batch(const char *queue, const char *batch)
{
	int rc;

	if (statement_batch != NULL)
		pfree(statement_batch);
	statement_batch = batch == NULL ? NULL : MemoryContextStrdup(TopMemoryContext, batch);
	rc = join_batch(injector_entry(queue), batch);
	if (rc != XTCQ_OK)
	{
		pfree(statement_batch);
		statement_batch = NULL;
		xtcq_pg_raise(ERROR, rc, psprintf("cannot push into batch %s of queue", batch), queue);
	}
}

/* One push through `queue`'s injector, joined to the statement's batch. */
static int
push_at(const char *queue, const char *data, size_t len, uint64 delay_ms, uint32 priority, uint64 *id)
{
	InjectorEntry *e = injector_entry(queue);
	int rc = (statement_batch == NULL) == (e->batch == NULL) ? XTCQ_OK : join_batch(e, statement_batch);

	if (rc != XTCQ_OK)
		return rc;
	return xtcq_injector_push_at(e->injector, (const uint8_t *) data, len, delay_ms, priority, id);
}

int
xtcq_pg_push(const char *queue, const char *data, size_t len, uint64 delay_ms, uint32 priority, uint64 *id)
{
	int rc = push_at(queue, data, len, delay_ms, priority, id);

	if (rc == XTCQ_E_UNREACHABLE || rc == XTCQ_E_SEGMENT)
	{
		/* xtcqd restarted since this backend attached: attach to the new one, once. */
		xtcq_pg_reset();
		rc = push_at(queue, data, len, delay_ms, priority, id);
	}
	return rc;
}

/* As push_at, for xtcq_pg_push_many. */
static int
push_many_at(const char *queue, const uint8_t *const *payloads, const size_t *lens, size_t n, uint32 priority,
			 uint64 *ids, size_t *queued)
{
	InjectorEntry *e = injector_entry(queue);
	int rc = (statement_batch == NULL) == (e->batch == NULL) ? XTCQ_OK : join_batch(e, statement_batch);

	*queued = 0;
	if (rc != XTCQ_OK)
		return rc;
	return xtcq_injector_push_many(e->injector, payloads, lens, n, priority, ids, queued);
}

int
xtcq_pg_push_many(const char *queue, const uint8_t *const *payloads, const size_t *lens, size_t n, uint32 priority,
				  uint64 *ids, size_t *queued)
{
	int rc = push_many_at(queue, payloads, lens, n, priority, ids, queued);

	if ((rc == XTCQ_E_UNREACHABLE || rc == XTCQ_E_SEGMENT) && *queued == 0)
	{
		/* xtcqd restarted since this backend attached: attach to the new one, once. */
		xtcq_pg_reset();
		rc = push_many_at(queue, payloads, lens, n, priority, ids, queued);
	}
	return rc;
}

static int
push_key_once(const char *queue, const char *data, size_t len, const char *key, bool or_existing, uint64 *id)
{
	uint32_t index = 0, birth = 0;
	int rc = xtcq_injector_push_key(xtcq_pg_injector(queue), (const uint8_t *) data, len, (const uint8_t *) key,
									strlen(key), or_existing ? XTCQ_KEY_OR_EXISTING : 0, &index, &birth);

	*id = ((uint64) index << 32) | birth;
	return rc;
}

int
xtcq_pg_push_key(const char *queue, const char *data, size_t len, const char *key, bool or_existing, uint64 *id)
{
	int rc = push_key_once(queue, data, len, key, or_existing, id);

	if (rc == XTCQ_E_UNREACHABLE || rc == XTCQ_E_SEGMENT)
	{
		/* xtcqd restarted since this backend attached: attach to the new one, once. */
		xtcq_pg_reset();
		rc = push_key_once(queue, data, len, key, or_existing, id);
	}
	return rc;
}

void
xtcq_pg_check_queue_name(const char *queue)
{
	if (queue[0] == '\0')
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("xtcq: the queue name is empty")));
	if (strlen(queue) > XTCQ_MAX_QUEUE_NAME)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("xtcq: the queue name is longer than %d bytes", XTCQ_MAX_QUEUE_NAME)));
}

void
xtcq_pg_job_header(StringInfo buf, Oid role, uint64 fxid)
{
	appendStringInfo(buf, "%s%u " UINT64_FORMAT "\n", XTCQ_JOB_PREFIX, role, fxid);
}

void
_PG_init(void)
{
	DefineCustomStringVariable("xtcq.socket",
							   "xtcqd's socket (empty: $XTCQ_SOCKET, else xtcqd's standard path).",
							   NULL, &xtcq_socket, "", PGC_SIGHUP, 0, NULL, NULL, NULL);
	/* Postmaster-level settings exist only when preloaded: defining them later is FATAL. */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("xtcq.workers",
								"Background workers that run jobs (needs shared_preload_libraries).",
								NULL, &xtcq_workers, 0, 0, 64, PGC_POSTMASTER, 0, NULL, NULL, NULL);
		DefineCustomStringVariable("xtcq.worker_queues",
								   "Comma-separated queues the workers serve (worker i takes queue i mod n).",
								   NULL, &xtcq_worker_queues, "", PGC_POSTMASTER, 0, NULL, NULL, NULL);
		DefineCustomStringVariable("xtcq.worker_database", "Database the workers connect to.",
								   NULL, &xtcq_worker_database, "postgres", PGC_POSTMASTER, 0, NULL, NULL, NULL);
		DefineCustomStringVariable("xtcq.worker_role",
								   "Role the workers run jobs as; may not be a superuser.",
								   NULL, &xtcq_worker_role, "", PGC_POSTMASTER, 0, NULL, NULL, NULL);
	}
	DefineCustomStringVariable("xtcq.worker_sql",
							   "SQL run per job with the payload as $1 (text); empty: the payload is the SQL.",
							   NULL, &xtcq_worker_sql, "", PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("xtcq.lease_margin_ms",
							"A job's lease is statement_timeout plus this margin (when statement_timeout is set).",
							NULL, &xtcq_lease_margin_ms, 5000, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("xtcq");

	xtcq_on_commit_init();
	if (process_shared_preload_libraries_in_progress)
		xtcq_workers_register();
}
