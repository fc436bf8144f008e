/*
 * push.c: xtcq.push (one job, or an array of jobs), xtcq.stats_json and xtcq.dead_json.
 *
 * A push copies the payload into xtcqd's shared memory through this backend's injector: no
 * system call unless a consumer sleeps. Every bad argument is an ERROR with a SQLSTATE,
 * never a crash: NULLs are refused here (the functions are not STRICT, so that a NULL
 * payload is an error instead of a silently lost job).
 */
#include "xtcq_pg.h"

#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(xtcq_push);
PG_FUNCTION_INFO_V1(xtcq_push_many);
PG_FUNCTION_INFO_V1(xtcq_stats_json_sql);
PG_FUNCTION_INFO_V1(xtcq_dead_json_sql);

/* The queue argument `n`, checked; `what` (push to, read) must be granted on it. */
static char *
queue_arg(FunctionCallInfo fcinfo, int n, const char *what)
{
	char *queue;

	if (PG_ARGISNULL(n))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("xtcq: the queue name is NULL")));
	queue = text_to_cstring(PG_GETARG_TEXT_PP(n));
	xtcq_pg_check_queue_name(queue);
	if (what != NULL)
		xtcq_pg_check_queue(queue, what);
	return queue;
}

/* An interval as milliseconds (NULL: 0); negative or absurd delays are refused. */
static uint64
delay_ms_arg(FunctionCallInfo fcinfo, int n)
{
	Interval *iv;
	double us;

	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		return 0;
	iv = PG_GETARG_INTERVAL_P(n);
	us = (double) iv->time + (double) iv->day * USECS_PER_DAY + (double) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (us < 0 || us > (double) 3650 * USECS_PER_DAY)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("xtcq: the delay must be between 0 and 10 years")));
	return (uint64) (us / 1000.0);
}

/*
 * A priority (NULL: 0, the most urgent); a negative one is refused here, one past the
 * queue's levels by xtcqd (the message names the queue's levels).
 */
static uint32
priority_arg(FunctionCallInfo fcinfo, int n)
{
	int32 p;

	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		return 0;
	p = PG_GETARG_INT32(n);
	if (p < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("xtcq: the priority must be 0 (the most urgent) or more, not %d", p)));
	return (uint32) p;
}

/* The batch argument `n` (NULL: none): the statement's jobs join it. */
static char *
batch_arg(FunctionCallInfo fcinfo, int n)
{
	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		return NULL;
	return text_to_cstring(PG_GETARG_TEXT_PP(n));
}

/* Pushes `len` bytes after the header already in `job` (its first `header_len` bytes). */
static int
push_one(const char *queue, StringInfo job, int header_len, const char *data, size_t len, uint64 delay_ms,
		 uint32 priority, uint64 *id)
{
	job->len = header_len;
	job->data[header_len] = '\0';
	if (len > (size_t) (MaxAllocSize - header_len - 1))
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED), errmsg("xtcq: the payload is too large")));
	appendBinaryStringInfo(job, data, (int) len);
	return xtcq_pg_push(queue, job->data, job->len, delay_ms, priority, id);
}

/* A buffer holding this user's job header (xtcq.push: no transaction decides). */
static StringInfo
header_buffer(void)
{
	StringInfo job = makeStringInfo();

	xtcq_pg_job_header(job, GetUserId(), 0);
	return job;
}

/*
 * A push of the array failed at element `i` (from 0) of `n`: the elements before it stay
 * queued (xtcq.push is not transactional), which the error must say, or a caller that
 * retries the statement pushes them twice.
 */
static void
partial_push_error(int rc, const char *queue, int i, int n)
{
	char *what;

	if (i == 0)
		xtcq_pg_raise(ERROR, rc, "cannot push to queue", queue);
	what = psprintf("%d of %d jobs were pushed (they stay queued), then cannot push to queue", i, n);
	xtcq_pg_raise(ERROR, rc, what, queue);
}

/* A unique job: the job in `job` (header and payload) with `key`; refused with SQLSTATE 23505
 * while a live job of the queue holds the key, unless `or_existing` (then that job's id). */
static uint64
push_keyed(const char *queue, StringInfo job, const char *key, bool or_existing)
{
	uint64 id = 0;
	int rc = xtcq_pg_push_key(queue, job->data, job->len, key, or_existing, &id);

	if (rc == XTCQ_E_DUPLICATE)
		ereport(ERROR, (errcode(ERRCODE_UNIQUE_VIOLATION),
						errmsg("xtcq: a job of queue %s holds key \"%s\": %u.%u", queue, key, (uint32) (id >> 32),
							   (uint32) id),
						errhint("Pass or_existing => true to get that job's id instead.")));
	if (rc != XTCQ_OK && rc != XTCQ_EXISTING)
		xtcq_pg_raise(ERROR, rc, "cannot push to queue", queue);
	return id;
}

/*
 * xtcq.push(queue text, payload bytea|text, delay interval default null, priority int default 0,
 * batch text default null, key text default null, or_existing boolean default false) returns
 * bigint
 */
Datum
xtcq_push(PG_FUNCTION_ARGS)
{
	char *queue = queue_arg(fcinfo, 0, "push to");
	bytea *payload;
	StringInfo job;
	uint64 delay_ms;
	uint32 priority;
	uint64 id = 0;
	int rc;
	char *key = NULL;

	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("xtcq: the payload is NULL"),
						errhint("Push an empty string for a job without a payload.")));
	delay_ms = delay_ms_arg(fcinfo, 2);
	priority = priority_arg(fcinfo, 3);
	xtcq_pg_use_batch(queue, batch_arg(fcinfo, 4));
	if (PG_NARGS() > 5 && !PG_ARGISNULL(5))
		key = text_to_cstring(PG_GETARG_TEXT_PP(5));
	if (key != NULL && delay_ms != 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg("xtcq: a push with a key takes no delay")));
	if (key != NULL && priority != 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("xtcq: a push with a key is made at priority 0, not %u", priority)));
	/* text and bytea share the varlena layout: one C function serves both. */
	payload = PG_GETARG_BYTEA_PP(1);
	job = header_buffer();
	if (key != NULL)
	{
		bool or_existing = PG_NARGS() > 6 && !PG_ARGISNULL(6) && PG_GETARG_BOOL(6);

		if (VARSIZE_ANY_EXHDR(payload) > (Size) (MaxAllocSize - job->len - 1))
			ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED), errmsg("xtcq: the payload is too large")));
		appendBinaryStringInfo(job, VARDATA_ANY(payload), (int) VARSIZE_ANY_EXHDR(payload));
		PG_RETURN_INT64((int64) push_keyed(queue, job, key, or_existing));
	}
	rc = push_one(queue, job, job->len, VARDATA_ANY(payload), VARSIZE_ANY_EXHDR(payload), delay_ms, priority, &id);
	if (rc != XTCQ_OK)
		xtcq_pg_raise(ERROR, rc, "cannot push to queue", queue);
	PG_RETURN_INT64((int64) id);
}

/*
 * The jobs of an array push, each its header then an element, side by side in one buffer:
 * the C API takes them all in one call, which checks the injector, reads the clock and
 * wakes consumers once per chunk rather than once per job.
 */
typedef struct ManyJobs
{
	const uint8_t **payloads;
	size_t *lens;
	uint64 *ids;
} ManyJobs;

/* The `n` elements of `elems`, each after the header `hdr`, into `jobs`. */
static void
gather_jobs(ManyJobs *jobs, const StringInfo hdr, const Datum *elems, int n)
{
	Size total = 0;
	char *at;
	int i;

	for (i = 0; i < n; i++)
	{
		Size len = VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i]));

		/* An element is under 1 GB, and so is the array: the sum cannot wrap a Size. */
		total += hdr->len + len;
	}
	jobs->payloads = palloc(sizeof(*jobs->payloads) * Max(n, 1));
	jobs->lens = palloc(sizeof(*jobs->lens) * Max(n, 1));
	jobs->ids = palloc(sizeof(*jobs->ids) * Max(n, 1));
	at = MemoryContextAllocHuge(CurrentMemoryContext, Max(total, 1));
	for (i = 0; i < n; i++)
	{
		bytea *p = DatumGetByteaPP(elems[i]);
		Size len = VARSIZE_ANY_EXHDR(p);

		memcpy(at, hdr->data, hdr->len);
		memcpy(at + hdr->len, VARDATA_ANY(p), len);
		jobs->payloads[i] = (const uint8_t *) at;
		jobs->lens[i] = hdr->len + len;
		at += hdr->len + len;
	}
}

/*
 * xtcq.push(queue text, payloads bytea[]|text[], priority int default 0, batch text default null)
 * returns bigint[]: one job per element.
 */
Datum
xtcq_push_many(PG_FUNCTION_ARGS)
{
	char *queue = queue_arg(fcinfo, 0, "push to");
	ArrayType *arr;
	Datum *elems;
	bool *nulls;
	int n;
	int i;
	Datum *ids;
	int16 typlen;
	bool typbyval;
	char typalign;
	ManyJobs jobs;
	size_t queued = 0;
	int rc;
	uint32 priority = priority_arg(fcinfo, 2);
	char *batch = batch_arg(fcinfo, 3);

	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("xtcq: the payload array is NULL")));
	arr = PG_GETARG_ARRAYTYPE_P(1);
	get_typlenbyvalalign(ARR_ELEMTYPE(arr), &typlen, &typbyval, &typalign);
	deconstruct_array(arr, ARR_ELEMTYPE(arr), typlen, typbyval, typalign, &elems, &nulls, &n);
	/* Every element is checked before the first is pushed: a NULL pushes nothing. */
	for (i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
							errmsg("xtcq: payload %d of the array is NULL; nothing was pushed", i + 1)));
	xtcq_pg_use_batch(queue, batch);
	gather_jobs(&jobs, header_buffer(), elems, n);
	rc = xtcq_pg_push_many(queue, jobs.payloads, jobs.lens, (size_t) n, priority, jobs.ids, &queued);
	if (rc != XTCQ_OK)
		partial_push_error(rc, queue, (int) queued, n);
	ids = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; i < n; i++)
		ids[i] = Int64GetDatum((int64) jobs.ids[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(ids, n, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

typedef int (*json_call) (const xtcq_client *, const char *, char *, size_t, size_t *);

/* Asks `call` with a buffer that grows to what it says it needs; returns jsonb. */
static Datum
json_answer(json_call call, const char *queue, const char *what)
{
	size_t cap = 8192;
	size_t len = 0;
	char *buf = palloc(cap);
	int rc = call(xtcq_pg_client(), queue, buf, cap, &len);

	if (rc == XTCQ_E_BUFFER_TOO_SMALL)
	{
		cap = len;
		buf = repalloc_huge(buf, cap);
		rc = call(xtcq_pg_client(), queue, buf, cap, &len);
	}
	if (rc != XTCQ_OK)
		xtcq_pg_raise(ERROR, rc, what, queue);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf));
}

/* xtcq.stats_json(queue text default null) returns jsonb */
Datum
xtcq_stats_json_sql(PG_FUNCTION_ARGS)
{
	const char *queue = PG_ARGISNULL(0) ? NULL : queue_arg(fcinfo, 0, NULL);

	PG_RETURN_DATUM(json_answer(xtcq_stats_json, queue, "cannot read the counters of queue"));
}

/* xtcq.dead_json(queue text) returns jsonb */
Datum
xtcq_dead_json_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(json_answer(xtcq_dead_json, queue_arg(fcinfo, 0, "read the dead letters of"), "cannot list the dead letters of queue"));
}
