/*
 * run_as.c: a job's header, and running its SQL as the role that pushed it.
 *
 * The worker connects as xtcq.worker_role, but a job runs with the privileges of its
 * pusher: otherwise any role allowed to push could run SQL with the worker's privileges.
 * The role is looked up again when the job runs: one dropped, turned superuser or denied
 * login since the push is refused, and the job fails with that reason (its retries, then
 * its dead letter, keep it). A dead letter keeps the first 24 bytes of a reason, so each
 * reason says what it is in those; the server log has the whole message.
 *
 * The SQL runs as a security-restricted operation (as PostgreSQL runs a table owner's
 * index functions): no SET ROLE or SET SESSION AUTHORIZATION, no temporary objects or
 * session state that would outlive the job, and every setting it changed is put back after
 * it. One job cannot prepare a trap for the next, which may run as another role.
 */
#include "xtcq_pg.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/syscache.h"

/* Parses decimal digits in [p, end) into *out; false on anything else or an overflow. */
static bool
parse_u64(const char *p, const char *end, uint64 *out)
{
	uint64 v = 0;

	if (p == end)
		return false;
	for (; p < end; p++)
	{
		if (*p < '0' || *p > '9' || v > (PG_UINT64_MAX - (uint64) (*p - '0')) / 10)
			return false;
		v = v * 10 + (uint64) (*p - '0');
	}
	*out = v;
	return true;
}

bool
xtcq_pg_parse_header(char **data, size_t *len, Oid *role, uint64 *fxid)
{
	size_t plen = strlen(XTCQ_JOB_PREFIX);
	char *start = *data;
	char *nl;
	char *sp;
	uint64 r;

	if (*len < plen || memcmp(start, XTCQ_JOB_PREFIX, plen) != 0)
		return false;
	nl = memchr(start, '\n', Min(*len, (size_t) XTCQ_JOB_HEADER_MAX));
	sp = nl == NULL ? NULL : memchr(start + plen, ' ', nl - (start + plen));
	if (sp == NULL || !parse_u64(start + plen, sp, &r) || r > PG_UINT32_MAX || !parse_u64(sp + 1, nl, fxid))
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
						errmsg("bad job header: the job is not run"),
						errhint("Jobs for these workers are pushed from SQL (xtcq.push), which writes the header.")));
	*role = (Oid) r;
	*len -= (size_t) (nl + 1 - start);
	*data = nl + 1;
	return true;
}

void
xtcq_pg_check_job_role(Oid role)
{
	HeapTuple tup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(role));
	Form_pg_authid form;
	char name[NAMEDATALEN];

	if (!HeapTupleIsValid(tup))
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
						errmsg("pusher was dropped: the role that pushed this job (oid %u) no longer exists", role)));
	form = (Form_pg_authid) GETSTRUCT(tup);
	strlcpy(name, NameStr(form->rolname), sizeof(name));
	if (form->rolsuper)
	{
		ReleaseSysCache(tup);
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("pusher is a superuser: role %s; jobs never run as a superuser", name),
						errhint("Push as a role that is not a superuser (SET ROLE before xtcq.push).")));
	}
	if (!form->rolcanlogin)
	{
		ReleaseSysCache(tup);
		ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						errmsg("pusher may not log in: role %s; the job is not run", name),
						errhint("Push as a role with LOGIN, or ALTER ROLE %s LOGIN.", name)));
	}
	ReleaseSysCache(tup);
}

int
xtcq_pg_run_as(Oid role, int (*run) (void *), void *arg)
{
	Oid save_user;
	int save_ctx;
	int nest;
	int rc;

	if (OidIsValid(role))
		xtcq_pg_check_job_role(role);
	GetUserIdAndSecContext(&save_user, &save_ctx);
	SetUserIdAndSecContext(OidIsValid(role) ? role : save_user,
						   save_ctx | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	nest = NewGUCNestLevel();
	/* On an ERROR the transaction's abort puts back both the user and the settings. */
	rc = run(arg);
	AtEOXact_GUC(false, nest);
	SetUserIdAndSecContext(save_user, save_ctx);
	return rc;
}
