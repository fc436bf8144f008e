/*
 * grants.c: per-queue grants. EXECUTE on the functions (role xtcq_user) lets a role use the
 * extension at all; xtcq.queue_grants says which queues it may push to and read the dead
 * letters of. A superuser may use every queue. The table is written only by its owner
 * (xtcq.grant_push / xtcq.revoke_push are not granted to xtcq_user).
 */
#include "xtcq_pg.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/*
 * Every name qualified, down to the operator: the caller's search_path must not choose
 * what decides a permission.
 */
#define GRANT_QUERY \
	"SELECT 1 FROM xtcq.queue_grants g" \
	" WHERE (g.queue OPERATOR(pg_catalog.=) $1 OR g.queue OPERATOR(pg_catalog.=) '*')" \
	" AND pg_catalog.pg_has_role(g.role::pg_catalog.oid, 'USAGE') LIMIT 1"

static SPIPlanPtr grant_plan = NULL;

/*
 * The last queue allowed, for whom, in which transaction and statement: the many pushes of
 * one statement ask once, and a grant revoked elsewhere holds from the next statement, as
 * PostgreSQL's own privileges do.
 */
static char allowed_queue[XTCQ_MAX_QUEUE_NAME + 1];
static Oid allowed_user = InvalidOid;
static LocalTransactionId allowed_lxid = InvalidLocalTransactionId;
static TimestampTz allowed_statement = 0;

static bool
granted(const char *queue)
{
	Datum values[1] = {CStringGetTextDatum(queue)};
	bool found;
	int rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "xtcq: SPI_connect failed");
	if (grant_plan == NULL)
	{
		Oid types[1] = {TEXTOID};
		SPIPlanPtr plan = SPI_prepare(GRANT_QUERY, 1, types);

		if (plan == NULL)
			elog(ERROR, "xtcq: cannot prepare the grant lookup: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "xtcq: cannot keep the grant lookup");
		grant_plan = plan;
	}
	rc = SPI_execute_plan(grant_plan, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "xtcq: the grant lookup failed: %s", SPI_result_code_string(rc));
	found = SPI_processed > 0;
	SPI_finish();
	return found;
}

void
xtcq_pg_check_queue(const char *queue, const char *what)
{
	Oid user = GetUserId();
	LocalTransactionId lxid = MyProc->lxid;
	TimestampTz statement = GetCurrentStatementStartTimestamp();

	if (superuser())
		return;
	if (allowed_lxid == lxid && allowed_statement == statement && allowed_user == user &&
		strcmp(allowed_queue, queue) == 0)
		return;
	if (!granted(queue))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("xtcq: permission denied to %s queue %s for role %s", what, queue, GetUserNameFromId(user, false)),
				 errhint("A superuser grants it: SELECT xtcq.grant_push('%s', '%s');", queue,
						 GetUserNameFromId(user, false))));
	strlcpy(allowed_queue, queue, sizeof(allowed_queue));
	allowed_user = user;
	allowed_lxid = lxid;
	allowed_statement = statement;
}
