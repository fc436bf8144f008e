/*
 * The LISTEN/NOTIFY consumer of benches/postgres/run.sh: LISTENs on a channel and runs each
 * notification's payload as SQL, the way a queue built on NOTIFY runs its jobs. Stops after
 * `count` notifications.
 *   cc -I$(pg_config --includedir) listen.c -lpq -o listen
 *   listen 'host=/path dbname=postgres' channel count
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>

#include "libpq-fe.h"

static int
fail(PGconn *conn, const char *what)
{
	fprintf(stderr, "listen: %s: %s", what, PQerrorMessage(conn));
	PQfinish(conn);
	return 1;
}

int
main(int argc, char **argv)
{
	PGconn *conn;
	PGresult *res;
	char *listen;
	long want;
	long seen = 0;

	if (argc != 4)
	{
		fprintf(stderr, "usage: listen CONNINFO CHANNEL COUNT\n");
		return 2;
	}
	want = strtol(argv[3], NULL, 10);
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
		return fail(conn, "connect");
	listen = PQescapeIdentifier(conn, argv[2], 1000);
	if (listen == NULL)
		return fail(conn, "channel name");
	{
		char sql[1100];

		snprintf(sql, sizeof(sql), "LISTEN %s", listen);
		res = PQexec(conn, sql);
	}
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return fail(conn, "LISTEN");
	PQclear(res);
	/* Ready: the script starts notifying once this line is out. */
	printf("listening\n");
	fflush(stdout);
	while (seen < want)
	{
		PGnotify *n;
		fd_set fds;
		int sock = PQsocket(conn);

		FD_ZERO(&fds);
		FD_SET(sock, &fds);
		if (select(sock + 1, &fds, NULL, NULL, NULL) < 0)
			return fail(conn, "select");
		if (!PQconsumeInput(conn))
			return fail(conn, "read");
		while ((n = PQnotifies(conn)) != NULL)
		{
			res = PQexec(conn, n->extra);
			if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
				return fail(conn, "the job's SQL");
			PQclear(res);
			PQfreemem(n);
			seen++;
		}
	}
	PQfinish(conn);
	return 0;
}
