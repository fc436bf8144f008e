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
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(xtcq_push);
PG_FUNCTION_INFO_V1(xtcq_push_many);
PG_FUNCTION_INFO_V1(xtcq_stats_json_sql);
PG_FUNCTION_INFO_V1(xtcq_dead_json_sql);

/* The queue argument `n`, checked. */
static char *
queue_arg(FunctionCallInfo fcinfo, int n)
{
	char *queue;

	if (PG_ARGISNULL(n))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("xtcq: the queue name is NULL")));
	queue = text_to_cstring(PG_GETARG_TEXT_PP(n));
	if (queue[0] == '\0')
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("xtcq: the queue name is empty")));
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

static int64
push_one(const char *queue, const char *data, size_t len, uint64 delay_ms)
{
	uint64 id = 0;
	int rc = xtcq_pg_push(queue, data, len, delay_ms, &id);

	if (rc != XTCQ_OK)
		xtcq_pg_raise(ERROR, rc, "cannot push to queue", queue);
	return (int64) id;
}

/* xtcq.push(queue text, payload bytea|text, delay interval default null) returns bigint */
Datum
xtcq_push(PG_FUNCTION_ARGS)
{
	char *queue = queue_arg(fcinfo, 0);
	bytea *payload;

	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("xtcq: the payload is NULL"),
						errhint("Push an empty string for a job without a payload.")));
	/* text and bytea share the varlena layout: one C function serves both. */
	payload = PG_GETARG_BYTEA_PP(1);
	PG_RETURN_INT64(push_one(queue, VARDATA_ANY(payload), VARSIZE_ANY_EXHDR(payload), delay_ms_arg(fcinfo, 2)));
}

/* xtcq.push(queue text, payloads bytea[]|text[]) returns bigint[]: one job per element. */
Datum
xtcq_push_many(PG_FUNCTION_ARGS)
{
	char *queue = queue_arg(fcinfo, 0);
	ArrayType *arr;
	Datum *elems;
	bool *nulls;
	int n;
	int i;
	Datum *ids;
	int16 typlen;
	bool typbyval;
	char typalign;

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
	ids = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bytea *p = DatumGetByteaPP(elems[i]);

		ids[i] = Int64GetDatum(push_one(queue, VARDATA_ANY(p), VARSIZE_ANY_EXHDR(p), 0));
	}
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
	const char *queue = PG_ARGISNULL(0) ? NULL : queue_arg(fcinfo, 0);

	PG_RETURN_DATUM(json_answer(xtcq_stats_json, queue, "cannot read the counters of queue"));
}

/* xtcq.dead_json(queue text) returns jsonb */
Datum
xtcq_dead_json_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_DATUM(json_answer(xtcq_dead_json, queue_arg(fcinfo, 0), "cannot list the dead letters of queue"));
}
