/*
 * bench-g4-unproven.c - what the catalog queries of the G4 upgrade path cost
 * at scale: cat_g4_cold_unnamed() (once per unproven g4_dead row, from
 * g4_claim_unproven) and the rows recall_unproven() reads (cat_g4_dead
 * before, cat_g4_dead_unproven_in after), on a catalog of N cold objects
 * in one bucket and N g4_dead rows (1 in 100 unproven), and
 * cat_g4_session_objects() (every demotion, sweep and recall of a session)
 * for a session of N / 1000 objects. Built and run by
 * scripts/bench-g4-unproven.sh against a tree before and after the fix; -DAFTER
 * for the tree that has cat_g4_dead_unproven_in.
 *
 *   bench-g4-unproven DIR N SIZES QUERIES
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <time.h>

#include "catalog.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void raw(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	char *err = NULL;

	if (sqlite3_open(path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "sql: %s\n", err ? err : sqlite3_errmsg(db));
		exit(1);
	}
	sqlite3_close(db);
}

static int count_row(void *arg, int64_t id, int64_t bucket_id, const char *bucket,
		     const char *key, const char *session, const char *g4_key, int unproven)
{
	(void)id; (void)bucket_id; (void)bucket; (void)key; (void)session; (void)g4_key;
	(void)unproven;
	++*(long *)arg;
	return 0;
}

int main(int argc, char **argv)
{
	char path[512], sql[2048];
	struct cat *c = NULL;
	long n, sizes, queries, rows = 0, found = 0;
	double t0, t;

	if (argc != 5) {
		fprintf(stderr, "usage: %s DIR N SIZES QUERIES\n", argv[0]);
		return 2;
	}
	n = atol(argv[2]);
	sizes = atol(argv[3]);
	queries = atol(argv[4]);
	snprintf(path, sizeof(path), "%s/catalog.db", argv[1]);
	if (cat_open(path, CAT_CREATE, &c) < 0)
		return 1;
	cat_close(c);
	/* N cold objects in bucket 1, session s<i % 1000>, SIZES sizes, an
	 * ETag each; N g4_dead rows, every 100th unproven. */
	snprintf(sql, sizeof(sql),
		 "BEGIN;"
		 "INSERT INTO buckets(id, name, ctime) VALUES(1, 'kvs', 1);"
		 "WITH RECURSIVE i(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM i WHERE x + 1 < %ld)"
		 " INSERT INTO objects(bucket, key, vid, size, etag, crc32c, mtime, session, tier,"
		 " g4_vid, g4_etag) SELECT 1, printf('s%%d/blk%%08d', x %% 1000, x), x + 1,"
		 " 65536 + (x %% %ld), '\"e' || x || '\"', x, 1, printf('s%%d', x %% 1000), 2, x + 1,"
		 " '\"g' || x || '\"' FROM i;"
		 "WITH RECURSIVE i(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM i WHERE x + 1 < %ld)"
		 " INSERT INTO g4_dead(bucket, key, session, g4_key, unproven)"
		 " SELECT 1, printf('s%%d/old%%08d', x %% 1000, x), printf('s%%d', x %% 1000), NULL,"
		 " x %% 100 = 0 FROM i;"
		 "COMMIT;", n, sizes, n);
	t0 = now_s();
	raw(path, sql);
	printf("filled %ld cold objects, %ld g4_dead rows in %.2f s\n", n, n, now_s() - t0);
#ifdef AFTER
	/* The upgrade: a catalog of schema 10 opened by this kvtier. */
	raw(path, "DROP INDEX objects_g4_unnamed; DROP INDEX objects_g4_unnamed_crc;"
		  " DROP INDEX g4_dead_unproven_session;"
		  " PRAGMA user_version = 10");
	t0 = now_s();
	if (cat_open(path, 0, &c) < 0)
		return 1;
	printf("migration 11 (open of a schema-10 catalog): %.3f s\n", now_s() - t0);
#else
	if (cat_open(path, 0, &c) < 0)
		return 1;
#endif
	/* One warm-up, then QUERIES of each, as the claims ask them. */
	for (int with_etag = 0; with_etag < 2; with_etag++) {
		struct cat_g4_obj *v = NULL;
		size_t got = 0;

		found = 0;
		t0 = now_s();
		for (long q = 0; q < queries; q++) {
			long x = q * 7919 % n;	/* the object whose copy it is */
			uint64_t size = 65536 + (uint64_t)(x % sizes);
			char etag[32];
			int rc;

			snprintf(etag, sizeof(etag), "\"g%ld\"", x);
#ifdef AFTER
			/* Without an ETag: is any of that size there, then (after
			 * the read of the copy) those of its CRC32C. */
			rc = with_etag ? 1 : cat_g4_cold_unnamed_sized(c, 1, "s0/none", size);
			if (rc == 1)
				rc = cat_g4_cold_unnamed(c, 1, "s0/none", size,
							 with_etag ? etag : NULL, (uint32_t)x, &v, &got);
#else
			rc = cat_g4_cold_unnamed(c, 1, "s0/none", size, with_etag ? etag : NULL,
						 &v, &got);
#endif
			if (rc < 0)
				return 1;
			found += (long)got;
			cat_g4_objs_free(v, got);
			v = NULL;
			got = 0;
		}
		t = now_s() - t0;
		printf("cat_g4_cold_unnamed %s ETag: %.3f ms a call (%ld calls, %.1f rows each)\n",
		       with_etag ? "with" : "without", t * 1e3 / queries, queries,
		       (double)found / queries);
	}
	/* A session's objects, as each demotion, sweep and recall of it reads them. */
	t0 = now_s();
	for (long q = 0; q < queries; q++) {
		struct cat_g4_obj *v = NULL;
		size_t got = 0;
		char session[16];

		snprintf(session, sizeof(session), "s%ld", q * 37 % 1000);
		if (cat_g4_session_objects(c, 1, session, 0xf, &v, &got) < 0)
			return 1;
		rows = (long)got;
		cat_g4_objs_free(v, got);
	}
	t = now_s() - t0;
	printf("cat_g4_session_objects: %.3f ms a call (%ld objects each)\n", t * 1e3 / queries, rows);
	/* recall_unproven's read of the g4_dead rows of one session. */
	t0 = now_s();
	for (long q = 0; q < queries; q++) {
		char session[16];

		snprintf(session, sizeof(session), "s%ld", q % 10 * 100);	/* 200 unproven rows each */
		rows = 0;
#ifdef AFTER
		if (cat_g4_dead_unproven_in(c, 1, session, "s0/none", count_row, &rows) < 0)
			return 1;
#else
		if (cat_g4_dead(c, count_row, &rows) < 0)
			return 1;
#endif
	}
	t = now_s() - t0;
	printf("recall_unproven's g4_dead read: %.3f ms a call (%ld rows read)\n",
	       t * 1e3 / queries, rows);
	cat_close(c);
	return 0;
}
