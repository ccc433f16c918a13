/*
 * test_catalog.c - the SQLite catalog (src/catalog.c), through catalog.h
 * alone: no segment files, no store.
 *
 * The catalog is the single source of truth that every process shares, so
 * these tests pin down its contracts exactly: the schema version and its
 * migrations, the geometry it refuses to change, bucket and object rows,
 * and above all segment accounting. `live` is what reclaim and fsck trust:
 * it must rise by each extent's aligned space on put and fall by the same
 * amount on overwrite, delete, drop and move, and a segment may only go
 * FREE (with a new generation) once no extent points into it.
 *
 * A few checks read the database file with a second, raw SQLite connection
 * (user_version, sessions.last_access): they look at what another process
 * would see, not at catalog.c's internals.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testlib.h"
#include "catalog.h"
#include "segment.h"
#include "util.h"

#define MiB (1024 * 1024ull)

struct fixture {
	struct test_env env;
	char path[400];		/* the catalog file */
	struct cat *c;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	test_env_init(&f->env, 16 * MiB, MiB);
	snprintf(f->path, sizeof(f->path), "%s/catalog.db", f->env.dir);
	assert_int_equal(cat_open(f->path, 1, &f->c), 0);
	assert_int_equal(cat_init_geometry(f->c, MiB, 8), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	cat_close(f->c);
	test_env_release(&f->env);
	free(f);
	return 0;
}

/* ---- helpers -------------------------------------------------------------- */

static uint64_t space_of(uint32_t length)
{
	return seg_extent_space(length);
}

static struct cat_segment seg_get(struct cat *c, uint32_t id)
{
	struct cat_segment s;

	memset(&s, 0, sizeof(s));
	assert_int_equal(cat_segment_get(c, id, &s), 0);
	assert_int_equal(s.id, id);
	return s;
}

/* FREE -> OPEN in its own transaction, as the store does; returns the gen. */
static uint64_t claim(struct cat *c, uint32_t id)
{
	uint64_t gen = 0;

	assert_int_equal(cat_begin(c), 0);
	assert_int_equal(cat_segment_claim(c, id, &gen), 0);
	assert_int_equal(cat_commit(c), 0);
	return gen;
}

static void set_state(struct cat *c, uint32_t id, enum seg_state from, enum seg_state to,
		      uint64_t used)
{
	assert_int_equal(cat_segment_set_state(c, id, from, to, used), 0);
}

static int64_t bucket(struct cat *c, const char *name)
{
	int64_t id = -1;
	int rc = cat_bucket_create(c, name, 1000);

	assert_true(rc == 0 || rc == -EEXIST);
	assert_int_equal(cat_bucket_id(c, name, &id), 0);
	return id;
}

/* A put of `n` extents of `len` bytes each laid out in segment seg from off. */
static int put_obj(struct cat *c, int64_t bucket_id, const char *key, uint64_t vid,
		   uint32_t seg, uint64_t gen, uint64_t off, size_t n, uint32_t len,
		   int if_none_match, uint64_t *freed_vid)
{
	struct cat_extent ext[8];
	struct kvt_meta meta[2] = { { "color", "blue" }, { "x-empty", "" } };
	struct cat_put p;

	assert_true(n <= 8);
	for (size_t i = 0; i < n; i++) {
		ext[i] = (struct cat_extent){
			.seq = (uint32_t)i,
			.segment = seg,
			.gen = gen,
			.offset = off + i * space_of(len),
			.length = len,
			.crc = 0x1000u + (uint32_t)i,
			.obj_off = i * (uint64_t)len,
			.hvid = vid,		/* written as itself, as the writer does */
			.hseq = (uint32_t)i,
		};
	}
	p = (struct cat_put){
		.bucket_id = bucket_id,
		.key = key,
		.vid = vid,
		.size = n * (uint64_t)len,
		.etag = "\"etag\"",
		.crc32c = 0xabcdef01u,
		.content_type = "application/octet-stream",
		.meta = meta,
		.nmeta = 2,
		.mtime_ns = 123456789,
		.session = "sess",
		.pinned = 0,
		.if_none_match = if_none_match,
		.nextents = n,
		.extents = ext,
	};
	return cat_object_put(c, &p, NULL, freed_vid);
}

static int raw_int(const char *path, const char *sql, int64_t *out)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);

	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			*out = sqlite3_column_int64(s, 0);
			rc = SQLITE_OK;
		} else if (rc == SQLITE_DONE) {
			rc = SQLITE_NOTFOUND;
		}
	}
	sqlite3_finalize(s);
	sqlite3_close(db);
	return rc;
}

static int raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);

	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_close(db);
	return rc;
}

/* ---- schema and geometry --------------------------------------------------- */

static void test_schema_create_reopen(void **state)
{
	struct fixture *f = *state;
	struct cat *c2 = NULL;
	int64_t v = -1, version = -1, id = -1;
	char missing[512];

	/* A new catalog carries the latest schema version (1 and up: migrations
	 * are only ever appended). */
	assert_int_equal(raw_int(f->path, "PRAGMA user_version", &version), SQLITE_OK);
	assert_true(version >= 1);
	/* WAL: readers in other processes never block the writer. */
	assert_int_equal(raw_int(f->path, "SELECT journal_mode = 'wal' FROM pragma_journal_mode", &v),
			 SQLITE_OK);
	assert_int_equal(v, 1);
	/* Extents of up to 1 MiB (migration 8): older kvtiers refuse the store. */
	assert_int_equal(raw_int(f->path, "SELECT value FROM settings WHERE name ="
				 " 'extent_payload_max'", &v), SQLITE_OK);
	assert_int_equal(v, 1048576);
	/* G4 manifests name owners (migration 9): a kvtier of schema 8 from
	 * before, which swept an importer's copies, refuses the store. */
	assert_true(version >= 9);
	assert_int_equal(raw_int(f->path, "SELECT value FROM settings WHERE name ="
				 " 'g4_manifest_owner'", &v), SQLITE_OK);
	assert_int_equal(v, 1);

	assert_int_equal(cat_bucket_create(f->c, "keep", 7), 0);
	cat_close(f->c);
	f->c = NULL;

	/* Reopen: nothing migrated twice, rows kept. */
	assert_int_equal(cat_open(f->path, 0, &f->c), 0);
	assert_int_equal(raw_int(f->path, "PRAGMA user_version", &v), SQLITE_OK);
	assert_int_equal(v, version);
	assert_int_equal(cat_bucket_id(f->c, "keep", &id), 0);

	/* A second connection at once sees the same rows. */
	assert_int_equal(cat_open(f->path, 1, &c2), 0);
	assert_int_equal(cat_bucket_id(c2, "keep", &v), 0);
	assert_int_equal(v, id);
	cat_close(c2);

	/* A missing file without create is -ENOENT. */
	snprintf(missing, sizeof(missing), "%s/nope/catalog.db", f->env.dir);
	c2 = NULL;
	assert_int_equal(cat_open(missing, 0, &c2), -ENOENT);
	assert_null(c2);

	/*
	 * Out of file descriptors is -EMFILE, not -ENOENT: a gateway at its
	 * open-file limit logged "cannot open the catalog ... for a thread:
	 * No such file or directory" for a catalog that was there.
	 */
	{
		struct rlimit rl, low;
		int fds[64], n = 0;

		assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
		low = rl;
		low.rlim_cur = (rlim_t)dup(0) + 1;	/* that fd is the last one allowed */
		fds[n++] = (int)low.rlim_cur - 1;
		assert_true(fds[0] >= 0);
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
		while (n < 64 && (fds[n] = dup(0)) >= 0)
			n++;
		assert_int_equal(cat_open(f->path, 0, &c2), -EMFILE);
		assert_null(c2);
		while (n > 0)
			close(fds[--n]);
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
}

/*
 * CAT_READONLY (a store on a read-only file system): with the -wal file
 * there it reads as usual; without it, the database file is opened
 * immutable, through a URI, so a path with '%', '?', '#' and a space must
 * still name the file. Writes answer -EROFS.
 */
/* Copies file `from` to `to`, whole. */
static void copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ssize_t n;

	assert_true(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	close(in);
	close(out);
}

static void test_open_readonly(void **state)
{
	struct fixture *f = *state;
	char dir[512], path[600], side[620], copy[600], cpath[620], cside[640];
	struct cat *c = NULL, *ro = NULL;
	int64_t id = -1, v = -1;
	struct stat sb;

	snprintf(dir, sizeof(dir), "%s/odd %%3F?#dir", f->env.dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	assert_int_equal(cat_open(path, CAT_CREATE, &c), 0);
	assert_int_equal(cat_bucket_create(c, "keep", 7), 0);
	assert_int_equal(cat_bucket_id(c, "keep", &id), 0);
	cat_close(c);

	/*
	 * The -wal and -shm files stay after the last close (persistent WAL),
	 * the WAL empty: that close checkpointed it all (journal_size_limit).
	 */
	snprintf(side, sizeof(side), "%s-wal", path);
	assert_int_equal(stat(side, &sb), 0);
	assert_int_equal(sb.st_size, 0);
	assert_int_equal(cat_open(path, CAT_READONLY, &ro), 0);
	assert_int_equal(cat_bucket_id(ro, "keep", &v), 0);
	assert_int_equal(v, id);
	assert_int_equal(cat_bucket_create(ro, "more", 8), -EROFS);
	cat_close(ro);

	/*
	 * Commits in the WAL and no -shm file (a copy taken while a process
	 * had the catalog open): SQLite cannot read them on a read-only file
	 * system, and the database file alone would be an older catalog.
	 * Refused, not opened stale.
	 */
	assert_int_equal(cat_open(path, 0, &c), 0);
	assert_int_equal(cat_bucket_create(c, "late", 7), 0);
	snprintf(copy, sizeof(copy), "%s/copy", f->env.dir);
	assert_int_equal(mkdir(copy, 0700), 0);
	snprintf(cpath, sizeof(cpath), "%s/catalog.db", copy);
	copy_file(path, cpath);
	snprintf(cside, sizeof(cside), "%s-wal", cpath);
	copy_file(side, cside);
	assert_int_equal(stat(cside, &sb), 0);
	assert_true(sb.st_size > 0);
	cat_close(c);
	ro = NULL;
	assert_int_equal(cat_open(cpath, CAT_READONLY, &ro), -EROFS);
	assert_null(ro);

	/* An empty WAL without its -shm file: the database file is all. */
	snprintf(side, sizeof(side), "%s-shm", path);
	assert_int_equal(unlink(side), 0);
	assert_int_equal(cat_open(path, CAT_READONLY, &ro), 0);
	assert_int_equal(cat_bucket_id(ro, "late", &v), 0);
	cat_close(ro);

	/* Neither file: immutable too. */
	snprintf(side, sizeof(side), "%s-wal", path);
	assert_int_equal(unlink(side), 0);
	ro = NULL;
	assert_int_equal(cat_open(path, CAT_READONLY, &ro), 0);
	v = -1;
	assert_int_equal(cat_bucket_id(ro, "keep", &v), 0);
	assert_int_equal(v, id);
	assert_int_equal(cat_bucket_create(ro, "more", 8), -EROFS);
	assert_int_equal(cat_bucket_id(ro, "more", &v), -ENOENT);
	cat_close(ro);
}

/* A catalog from a newer kvtier is refused untouched, not half understood. */
static void test_schema_newer_refused(void **state)
{
	struct fixture *f = *state;
	struct cat *c2 = NULL;
	int64_t version = -1, v = -1;
	char sql[64];

	assert_int_equal(raw_int(f->path, "PRAGMA user_version", &version), SQLITE_OK);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %lld", (long long)version + 1);
	assert_int_equal(raw_exec(f->path, sql), SQLITE_OK);
	assert_int_equal(cat_open(f->path, 0, &c2), -EPROTO);
	assert_null(c2);
	assert_int_equal(raw_int(f->path, "PRAGMA user_version", &v), SQLITE_OK);
	assert_int_equal(v, version + 1);
	/* The connection already open still works; back at its version, so does a new one. */
	assert_int_equal(cat_bucket_create(f->c, "still", 1), 0);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %lld", (long long)version);
	assert_int_equal(raw_exec(f->path, sql), SQLITE_OK);
	assert_int_equal(cat_open(f->path, 0, &c2), 0);
	assert_int_equal(cat_bucket_id(c2, "still", &v), 0);
	cat_close(c2);
}

static int count_segs(void *arg, const struct cat_segment *s)
{
	unsigned *n = arg;

	assert_int_equal(s->id, *n);	/* in id order, no gaps */
	(*n)++;
	return 0;
}

static int dead_rows(void *arg, int64_t id, int64_t bucket_id, const char *bucket,
		     const char *key, const char *session, const char *g4_key, int unproven)
{
	(void)id; (void)bucket_id; (void)bucket; (void)key; (void)session; (void)g4_key;
	(void)unproven;
	++*(unsigned *)arg;
	return 0;
}

/*
 * The place recorded beside the store's id (a copy keeps the id, not the
 * place): none until recorded, the first recording stays unless replaced,
 * and a new id (a copy) records its place and forgets the old id's work
 * in G4, deleted keys' copies and uploads to abort, which are the original's.
 */
static void test_store_place(void **state)
{
	struct fixture *f = *state;
	struct cat_place p, here = { 0x1234, 77, 1700000000123456789 }, there = { 0x1234, 78, 5 };
	uint64_t id, id2;
	unsigned dead = 0;

	assert_int_equal(cat_store_place(f->c, &p), -ENOENT);
	assert_int_equal(cat_store_id(f->c, &id), 0);
	assert_int_equal(cat_store_place_set(f->c, &here, 0), 0);
	assert_int_equal(cat_store_place_set(f->c, &there, 0), 0);	/* the first stays */
	assert_int_equal(cat_store_place(f->c, &p), 0);
	assert_true(p.machine == 0x1234 && p.ino == 77 && p.btime_ns == here.btime_ns);
	assert_int_equal(cat_store_place_set(f->c, &there, 1), 0);
	assert_int_equal(cat_store_place(f->c, &p), 0);
	assert_true(p.ino == 78 && p.btime_ns == 5);
	assert_int_equal(cat_store_id(f->c, &id2), 0);
	assert_true(id2 == id);	/* --keep: the place, not the id */

	assert_int_equal(raw_exec(f->path, "INSERT INTO g4_dead(bucket, key, session) VALUES"
					   " (1, 's1/a', 's1')"), SQLITE_OK);
	assert_int_equal(cat_g4_upload_begin(f->c, "file:///g4", "kvs/s1/a", "u1", 1), 0);
	assert_int_equal(cat_store_id_new(f->c, &here, &id2), 0);
	assert_true(id2 != id && (id2 & 1));
	assert_int_equal(cat_store_id(f->c, &id), 0);
	assert_true(id == id2);
	assert_int_equal(cat_store_place(f->c, &p), 0);
	assert_true(p.ino == 77);
	assert_int_equal(cat_g4_dead(f->c, dead_rows, &dead), 0);
	assert_int_equal(dead, 0);
	/* u1 was forgotten: its id goes in again. */
	assert_int_equal(raw_exec(f->path, "INSERT INTO g4_uploads(upload_id, url, key, started,"
					   " pid) VALUES('u1', 'x', 'y', 1, 1)"), SQLITE_OK);
}

static void test_geometry(void **state)
{
	struct fixture *f = *state;
	uint64_t counts[4];
	unsigned n = 0;
	struct cat_segment s;

	assert_int_equal(cat_segment_list(f->c, count_segs, &n), 0);
	assert_int_equal(n, 8);
	for (uint32_t i = 0; i < 8; i++) {
		s = seg_get(f->c, i);
		assert_int_equal(s.state, SEG_FREE);
		assert_int_equal(s.gen, 1);
		assert_int_equal(s.live, 0);
		assert_int_equal(s.used, 0);
	}
	assert_int_equal(cat_segment_get(f->c, 8, &s), -ENOENT);

	/* Same geometry again: a no-op. */
	assert_int_equal(cat_init_geometry(f->c, MiB, 8), 0);
	/* Another segment size: refused, nothing changed. */
	assert_int_equal(cat_init_geometry(f->c, 2 * MiB, 8), -EINVAL);
	assert_int_equal(cat_init_geometry(f->c, 2 * MiB, 12), -EINVAL);
	n = 0;
	assert_int_equal(cat_segment_list(f->c, count_segs, &n), 0);
	assert_int_equal(n, 8);

	/* Growth adds FREE segments at generation 1 and keeps the old ones. */
	claim(f->c, 3);
	assert_int_equal(cat_init_geometry(f->c, MiB, 11), 0);
	n = 0;
	assert_int_equal(cat_segment_list(f->c, count_segs, &n), 0);
	assert_int_equal(n, 11);
	assert_int_equal(seg_get(f->c, 3).state, SEG_OPEN);
	for (uint32_t i = 8; i < 11; i++) {
		s = seg_get(f->c, i);
		assert_int_equal(s.state, SEG_FREE);
		assert_int_equal(s.gen, 1);
	}
	assert_int_equal(cat_segment_counts(f->c, counts), 0);
	assert_int_equal(counts[SEG_FREE], 10);
	assert_int_equal(counts[SEG_OPEN], 1);

	/* Shrinking would strand objects: refused. */
	assert_int_equal(cat_init_geometry(f->c, MiB, 10), -EINVAL);
	n = 0;
	assert_int_equal(cat_segment_list(f->c, count_segs, &n), 0);
	assert_int_equal(n, 11);

	/* And the refusal left no transaction open: writes still work. */
	assert_int_equal(cat_bucket_create(f->c, "after", 1), 0);
}

static void test_transactions(void **state)
{
	struct fixture *f = *state;
	struct cat *c2 = NULL;
	int64_t id;

	assert_int_equal(cat_open(f->path, 0, &c2), 0);
	assert_int_equal(cat_begin(f->c), 0);
	assert_int_equal(cat_bucket_create(f->c, "txn", 1), 0);
	/* Not visible to another connection before commit... */
	assert_int_equal(cat_bucket_id(c2, "txn", &id), -ENOENT);
	cat_rollback(f->c);
	assert_int_equal(cat_bucket_id(f->c, "txn", &id), -ENOENT);
	cat_rollback(f->c);	/* outside a transaction: harmless */

	assert_int_equal(cat_begin(f->c), 0);
	assert_int_equal(cat_bucket_create(f->c, "txn", 1), 0);
	assert_int_equal(cat_commit(f->c), 0);
	/* ... and visible the moment it commits. */
	assert_int_equal(cat_bucket_id(c2, "txn", &id), 0);

	/* A read transaction does not block another connection's write. */
	assert_int_equal(cat_begin_read(c2), 0);
	assert_int_equal(cat_bucket_id(c2, "txn", &id), 0);
	assert_int_equal(cat_bucket_create(f->c, "txn2", 1), 0);
	cat_rollback(c2);
	assert_int_equal(cat_bucket_id(c2, "txn2", &id), 0);
	assert_int_equal(cat_sync(f->c), 0);
	cat_close(c2);
}

/* ---- buckets ---------------------------------------------------------------- */

struct names {
	char name[8][64];
	int64_t ctime[8];
	int n;
	int stop_after;
};

static int collect_bucket(void *arg, const char *name, int64_t ctime)
{
	struct names *nm = arg;

	assert_true(nm->n < 8);
	snprintf(nm->name[nm->n], sizeof(nm->name[0]), "%s", name);
	nm->ctime[nm->n] = ctime;
	nm->n++;
	return nm->stop_after && nm->n == nm->stop_after;
}

static void test_buckets(void **state)
{
	struct fixture *f = *state;
	struct names nm = { .n = 0 };
	int64_t a = -1, b = -1, id = -1;
	uint64_t gen = claim(f->c, 0);

	assert_int_equal(cat_bucket_create(f->c, "zeta", 30), 0);
	assert_int_equal(cat_bucket_create(f->c, "alpha", 10), 0);
	assert_int_equal(cat_bucket_create(f->c, "mid", 20), 0);
	assert_int_equal(cat_bucket_create(f->c, "alpha", 11), -EEXIST);
	assert_int_equal(cat_bucket_id(f->c, "alpha", &a), 0);
	assert_int_equal(cat_bucket_id(f->c, "zeta", &b), 0);
	assert_true(a != b);
	assert_int_equal(cat_bucket_id(f->c, "missing", &id), -ENOENT);

	assert_int_equal(cat_bucket_list(f->c, collect_bucket, &nm), 0);
	assert_int_equal(nm.n, 3);
	assert_string_equal(nm.name[0], "alpha");
	assert_string_equal(nm.name[1], "mid");
	assert_string_equal(nm.name[2], "zeta");
	assert_int_equal(nm.ctime[0], 10);	/* the duplicate did not touch it */
	assert_int_equal(nm.ctime[2], 30);

	memset(&nm, 0, sizeof(nm));
	nm.stop_after = 2;
	assert_int_equal(cat_bucket_list(f->c, collect_bucket, &nm), 0);
	assert_int_equal(nm.n, 2);

	/* Non-empty: refused, until the object goes. */
	assert_int_equal(put_obj(f->c, a, "k", 1, 0, gen, 0, 1, 100, 0, NULL), 0);
	assert_int_equal(cat_bucket_delete(f->c, "alpha"), -ENOTEMPTY);
	assert_int_equal(cat_bucket_id(f->c, "alpha", &id), 0);
	assert_int_equal(cat_object_delete(f->c, a, "k", NULL, NULL), 0);
	assert_int_equal(cat_bucket_delete(f->c, "alpha"), 0);
	assert_int_equal(cat_bucket_id(f->c, "alpha", &id), -ENOENT);
	assert_int_equal(cat_bucket_delete(f->c, "alpha"), -ENOENT);

	/* A put into a bucket deleted meanwhile fails and leaves no trace. */
	assert_int_equal(put_obj(f->c, a, "k", 2, 0, gen, 0, 1, 100, 0, NULL), -ENOENT);
	assert_int_equal(seg_get(f->c, 0).live, 0);

	/* The name is free again. */
	assert_int_equal(cat_bucket_create(f->c, "alpha", 40), 0);
}

/* ---- objects ---------------------------------------------------------------- */

static void test_object_put_get(void **state)
{
	struct fixture *f = *state;
	struct cat_object *co = NULL;
	int64_t b = bucket(f->c, "objs");
	uint64_t gen = claim(f->c, 2);
	const uint32_t len = 10000;

	assert_int_equal(put_obj(f->c, b, "dir/key", 0x1111, 2, gen, 0, 3, len, 0, NULL), 0);
	assert_int_equal(seg_get(f->c, 2).live, 3 * space_of(len));
	assert_true(seg_get(f->c, 2).last_access >= 123456789);

	assert_int_equal(cat_object_get(f->c, b, "dir/key", 1, &co), 0);
	assert_int_equal(co->bucket_id, b);
	assert_int_equal(co->vid, 0x1111);
	assert_string_equal(co->obj->key, "dir/key");
	assert_int_equal(co->obj->size, 3 * len);
	assert_string_equal(co->obj->etag, "\"etag\"");
	assert_int_equal(co->obj->crc32c, 0xabcdef01u);
	assert_string_equal(co->obj->content_type, "application/octet-stream");
	assert_int_equal(co->obj->mtime_ns, 123456789);
	assert_string_equal(co->obj->session, "sess");
	assert_int_equal(co->obj->tier, KVT_TIER_HOT);
	assert_int_equal(co->obj->pinned, 0);
	assert_int_equal(co->obj->nmeta, 2);
	assert_string_equal(co->obj->meta[0].name, "color");
	assert_string_equal(co->obj->meta[0].value, "blue");
	assert_string_equal(co->obj->meta[1].name, "x-empty");
	assert_string_equal(co->obj->meta[1].value, "");
	assert_int_equal(co->nextents, 3);
	for (uint32_t i = 0; i < 3; i++) {
		const struct cat_extent *e = &co->extents[i];

		assert_int_equal(e->seq, i);
		assert_int_equal(e->segment, 2);
		assert_int_equal(e->gen, gen);
		assert_int_equal(e->offset, i * space_of(len));
		assert_int_equal(e->length, len);
		assert_int_equal(e->crc, 0x1000u + i);
		assert_int_equal(e->obj_off, (uint64_t)i * len);
	}
	cat_object_free(co);

	/* Without extents. */
	co = NULL;
	assert_int_equal(cat_object_get(f->c, b, "dir/key", 0, &co), 0);
	assert_int_equal(co->nextents, 0);
	assert_null(co->extents);
	assert_int_equal(co->obj->size, 3 * len);
	cat_object_free(co);
	cat_object_free(NULL);

	co = NULL;
	assert_int_equal(cat_object_get(f->c, b, "dir/nokey", 1, &co), -ENOENT);
	assert_null(co);
	assert_int_equal(cat_object_get(f->c, b + 1000, "dir/key", 1, &co), -ENOENT);

	/* An empty object: no extents, no metadata needed. */
	{
		struct cat_put p = {
			.bucket_id = b, .key = "empty", .vid = 7, .size = 0, .etag = "\"e\"",
			.mtime_ns = 5, .session = "empty",
		};

		assert_int_equal(cat_object_put(f->c, &p, NULL, NULL), 0);
		assert_int_equal(cat_object_get(f->c, b, "empty", 1, &co), 0);
		assert_int_equal(co->obj->size, 0);
		assert_int_equal(co->nextents, 0);
		assert_int_equal(co->obj->nmeta, 0);
		assert_null(co->obj->content_type);
		cat_object_free(co);
	}
}

static void test_object_replace_accounting(void **state)
{
	struct fixture *f = *state;
	struct cat_object *co = NULL;
	int64_t b = bucket(f->c, "objs"), id = -1;
	uint64_t g0 = claim(f->c, 0), g1 = claim(f->c, 1), freed = 0;
	const uint32_t small = 100, big = 5000;

	assert_int_equal(put_obj(f->c, b, "k", 0xa, 0, g0, 0, 2, small, 0, &freed), 0);
	assert_int_equal(freed, 0);	/* nothing replaced */
	assert_int_equal(seg_get(f->c, 0).live, 2 * space_of(small));

	/* A second object in the same segment adds to it. */
	assert_int_equal(put_obj(f->c, b, "other", 0xb, 0, g0, 2 * SEG_ALIGN, 1, big, 0, NULL), 0);
	assert_int_equal(seg_get(f->c, 0).live, 2 * space_of(small) + space_of(big));

	/* if_none_match: refused, nothing changes. */
	assert_int_equal(put_obj(f->c, b, "k", 0xc, 1, g1, 0, 1, big, 1, NULL), -EEXIST);
	assert_int_equal(seg_get(f->c, 0).live, 2 * space_of(small) + space_of(big));
	assert_int_equal(seg_get(f->c, 1).live, 0);
	assert_int_equal(cat_object_get(f->c, b, "k", 1, &co), 0);
	assert_int_equal(co->vid, 0xa);
	cat_object_free(co);

	/* Overwrite into another segment: the old space leaves segment 0. */
	freed = 0;
	assert_int_equal(put_obj(f->c, b, "k", 0xd, 1, g1, 0, 3, big, 0, &freed), 0);
	assert_int_equal(freed, 0xa);
	assert_int_equal(seg_get(f->c, 0).live, space_of(big));
	assert_int_equal(seg_get(f->c, 1).live, 3 * space_of(big));
	assert_int_equal(cat_object_get(f->c, b, "k", 1, &co), 0);
	assert_int_equal(co->vid, 0xd);
	assert_int_equal(co->nextents, 3);
	assert_int_equal(co->extents[0].segment, 1);
	id = co->id;
	cat_object_free(co);

	/* By id. */
	assert_int_equal(cat_object_by_id(f->c, id, &co), 0);
	assert_string_equal(co->obj->key, "k");
	assert_int_equal(co->nextents, 3);
	cat_object_free(co);
	assert_int_equal(cat_object_by_id(f->c, id + 1000, &co), -ENOENT);

	/* A put naming a segment generation that is gone is refused whole. */
	assert_int_equal(put_obj(f->c, b, "stale", 0xe, 1, g1 + 1, 0, 1, small, 0, NULL), -ESTALE);
	assert_int_equal(cat_object_get(f->c, b, "stale", 0, &co), -ENOENT);
	assert_int_equal(seg_get(f->c, 1).live, 3 * space_of(big));
	/* ... and so is one into a FREE segment. */
	assert_int_equal(put_obj(f->c, b, "stale", 0xe, 5, 1, 0, 1, small, 0, NULL), -ESTALE);
	assert_int_equal(seg_get(f->c, 5).live, 0);
	/* The failed overwrite of an existing key keeps the old version. */
	assert_int_equal(put_obj(f->c, b, "k", 0xf, 5, 1, 0, 1, small, 0, NULL), -ESTALE);
	assert_int_equal(cat_object_get(f->c, b, "k", 1, &co), 0);
	assert_int_equal(co->vid, 0xd);
	cat_object_free(co);
	assert_int_equal(seg_get(f->c, 1).live, 3 * space_of(big));

	/* Delete: live goes back down; a second delete is -ENOENT. */
	assert_int_equal(cat_object_delete(f->c, b, "k", NULL, NULL), 0);
	assert_int_equal(seg_get(f->c, 1).live, 0);
	assert_int_equal(cat_object_delete(f->c, b, "k", NULL, NULL), -ENOENT);
	assert_int_equal(cat_object_delete(f->c, b, "other", NULL, NULL), 0);
	assert_int_equal(seg_get(f->c, 0).live, 0);

	/* Extents in two segments, interleaved: each gets its own back. */
	{
		struct cat_extent ext[3] = {
			{ .seq = 0, .segment = 0, .gen = g0, .offset = 0, .length = small },
			{ .seq = 1, .segment = 1, .gen = g1, .offset = 0, .length = big,
			  .obj_off = small },
			{ .seq = 2, .segment = 0, .gen = g0, .offset = SEG_ALIGN, .length = big,
			  .obj_off = small + big },
		};
		struct cat_put p = {
			.bucket_id = b, .key = "split", .vid = 0x10, .size = small + 2 * big,
			.etag = "\"s\"", .mtime_ns = 5, .session = "sess", .nextents = 3,
			.extents = ext,
		};

		assert_int_equal(cat_object_put(f->c, &p, NULL, NULL), 0);
		assert_int_equal(seg_get(f->c, 0).live, space_of(small) + space_of(big));
		assert_int_equal(seg_get(f->c, 1).live, space_of(big));
		assert_int_equal(cat_object_delete(f->c, b, "split", NULL, NULL), 0);
		assert_int_equal(seg_get(f->c, 0).live, 0);
		assert_int_equal(seg_get(f->c, 1).live, 0);
	}
}

static void test_object_drop_pin(void **state)
{
	struct fixture *f = *state;
	struct cat_object *co = NULL;
	int64_t b = bucket(f->c, "objs"), id;
	uint64_t gen = claim(f->c, 4), v = 0;

	assert_int_equal(put_obj(f->c, b, "p", 0x77, 4, gen, 0, 1, 4096, 0, NULL), 0);
	assert_int_equal(cat_object_get(f->c, b, "p", 0, &co), 0);
	id = co->id;
	assert_int_equal(co->obj->pinned, 0);
	cat_object_free(co);

	assert_int_equal(cat_object_set_pin(f->c, b, "p", 1), 0);
	assert_int_equal(cat_object_get(f->c, b, "p", 0, &co), 0);
	assert_int_equal(co->obj->pinned, 1);
	cat_object_free(co);
	assert_int_equal(cat_object_set_pin(f->c, b, "p", 0), 0);
	assert_int_equal(cat_object_set_pin(f->c, b, "nope", 1), -ENOENT);

	/* Reclaim's drop only takes the version it saw. */
	assert_int_equal(cat_object_drop(f->c, id, 0x78, 0, 0), -ENOENT);
	assert_int_equal(cat_object_get(f->c, b, "p", 0, &co), 0);
	cat_object_free(co);
	assert_int_equal(cat_counter_get(f->c, "evicted_objects", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(cat_object_drop(f->c, id, 0x77, 0, 0), 0);
	assert_int_equal(cat_object_get(f->c, b, "p", 0, &co), -ENOENT);
	assert_int_equal(seg_get(f->c, 4).live, 0);
	assert_int_equal(cat_counter_get(f->c, "evicted_objects", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(cat_object_drop(f->c, id, 0x77, 0, 0), -ENOENT);

	/* fsck's drop by id. */
	assert_int_equal(put_obj(f->c, b, "q", 0x79, 4, gen, 0, 2, 4096, 0, NULL), 0);
	assert_int_equal(seg_get(f->c, 4).live, 2 * space_of(4096));
	assert_int_equal(cat_object_get(f->c, b, "q", 0, &co), 0);
	id = co->id;
	cat_object_free(co);
	assert_int_equal(cat_object_drop_id(f->c, id), 0);
	assert_int_equal(cat_object_get(f->c, b, "q", 0, &co), -ENOENT);
	assert_int_equal(seg_get(f->c, 4).live, 0);
	assert_int_equal(cat_counter_get(f->c, "evicted_objects", &v), 0);
	assert_int_equal(v, 1);

	/* fsck's repair drops only the version it found damaged: one that was
	 * replaced meanwhile (same key, new row) or removed is left alone. */
	assert_int_equal(put_obj(f->c, b, "r", 0x7a, 4, gen, 0, 2, 4096, 0, NULL), 0);
	assert_int_equal(cat_object_get(f->c, b, "r", 0, &co), 0);
	id = co->id;
	cat_object_free(co);
	assert_int_equal(cat_object_drop_version(f->c, id, 0x7b), -ESTALE);
	assert_int_equal(cat_object_get(f->c, b, "r", 0, &co), 0);
	cat_object_free(co);
	assert_int_equal(cat_object_drop_version(f->c, id, 0x7a), 0);
	assert_int_equal(cat_object_get(f->c, b, "r", 0, &co), -ENOENT);
	assert_int_equal(seg_get(f->c, 4).live, 0);
	assert_int_equal(cat_object_drop_version(f->c, id, 0x7a), -ENOENT);
}

/* fsck's recount of a segment: live against the extents of its generation,
 * fixed only with repair, in the same transaction. */
static void test_segment_recount(void **state)
{
	struct fixture *f = *state;
	int64_t b = bucket(f->c, "rc");
	uint64_t gen = claim(f->c, 3), live = 1, space = 1;

	assert_int_equal(put_obj(f->c, b, "a", 0x1, 3, gen, 0, 3, 5000, 0, NULL), 0);
	assert_int_equal(cat_segment_recount(f->c, 3, 0, &live, &space), 0);
	assert_int_equal(live, 3 * space_of(5000));
	assert_int_equal(space, live);
	/* A wrong count is found, left as it is without repair ... */
	assert_int_equal(cat_segment_set_live(f->c, 3, 777), 0);
	assert_int_equal(cat_segment_recount(f->c, 3, 0, &live, &space), 0);
	assert_int_equal(live, 777);
	assert_int_equal(space, 3 * space_of(5000));
	assert_int_equal(seg_get(f->c, 3).live, 777);
	/* ... and fixed with it. */
	assert_int_equal(cat_segment_recount(f->c, 3, 1, &live, &space), 0);
	assert_int_equal(live, 777);
	assert_int_equal(seg_get(f->c, 3).live, 3 * space_of(5000));
	assert_int_equal(cat_segment_recount(f->c, 3, 1, &live, &space), 0);
	assert_int_equal(live, space);
	/* Nothing counts in a free segment; a missing one is -ENOENT. */
	assert_int_equal(cat_segment_recount(f->c, 5, 1, &live, &space), 0);
	assert_int_equal(live, space);
	assert_int_equal(cat_segment_recount(f->c, 100000, 0, &live, &space), -ENOENT);
}

/*
 * With G4 configured, reclaim's drop decides from the row as it is in its
 * own transaction. The chaos test lost a block this way: reclaim saw it
 * held in G4, the migrator turned it cold meanwhile, and the drop, finding
 * no hot copy to turn cold, deleted the only catalog entry of a G4 object.
 */
static void test_object_drop_keeps_session_state(void **state)
{
	struct fixture *f = *state;
	struct cat_object *co = NULL;
	struct cat_object *blk = NULL;
	int64_t b = bucket(f->c, "drops"), id, cache_id;
	uint64_t gen = claim(f->c, 6), v = 0;
	int count = 0;

	/* "s/blk" is state of session "sess"; "sess" is its own session: cache. */
	assert_int_equal(put_obj(f->c, b, "s/blk", 0x90, 6, gen, 0, 1, 4096, 0, NULL), 0);
	assert_int_equal(put_obj(f->c, b, "sess", 0x91, 6, gen, space_of(4096), 1, 4096, 0, NULL), 0);
	assert_int_equal(cat_object_get(f->c, b, "s/blk", 0, &co), 0);
	id = co->id;
	cat_object_free(co);
	assert_int_equal(cat_object_get(f->c, b, "sess", 0, &co), 0);
	cache_id = co->id;
	cat_object_free(co);

	/* Session state G4 lacks: refused, kept. Plain cache: dropped. */
	assert_int_equal(cat_object_drop(f->c, id, 0x90, 1, 0), -EAGAIN);
	assert_int_equal(cat_object_get(f->c, b, "s/blk", 0, &co), 0);
	cat_object_free(co);
	assert_int_equal(cat_object_drop(f->c, cache_id, 0x91, 1, 0), 0);
	assert_int_equal(cat_object_get(f->c, b, "sess", 0, &co), -ENOENT);

	/* The migrator demotes it between reclaim's look and its drop. */
	assert_int_equal(cat_g4_demote_begin(f->c, b, "sess", &count), 0);
	assert_int_equal(count, 1);
	assert_int_equal(cat_object_get(f->c, b, "s/blk", 0, &blk), 0);
	assert_int_equal(cat_g4_set_uploaded(f->c, blk, "\"etag\"", NULL, 0), 0);
	cat_object_free(blk);
	/* In G4, but reclaim has not proven the copy: kept, not cold. */
	assert_int_equal(cat_object_drop(f->c, id, 0x90, 1, 0), -EAGAIN);
	assert_int_equal(cat_object_get(f->c, b, "s/blk", 0, &co), 0);
	assert_int_equal(co->obj->tier, KVT_TIER_DEMOTING);
	cat_object_free(co);
	assert_int_equal(cat_g4_mark_cold(f->c, id, 0x90), 0);
	assert_int_equal(cat_object_drop(f->c, id, 0x90, 1, 0), -ENOENT);
	assert_int_equal(cat_object_drop(f->c, id, 0x90, 0, 0), -ENOENT);
	assert_int_equal(cat_object_get(f->c, b, "s/blk", 0, &co), 0);
	assert_int_equal(co->obj->tier, KVT_TIER_COLD);
	cat_object_free(co);
	assert_int_equal(cat_counter_get(f->c, "evicted_objects", &v), 0);
	assert_int_equal(v, 1);
}

/* ---- listing ---------------------------------------------------------------- */

struct keys {
	char key[64][32];
	int n;
	int stop_after;
	int fail_at;
};

static int collect_key(void *arg, struct kvt_object *o)
{
	struct keys *k = arg;

	assert_true(k->n < 64);
	snprintf(k->key[k->n], sizeof(k->key[0]), "%s", o->key);
	assert_int_equal(o->size, 0);
	assert_string_equal(o->session, "s");
	kvt_object_free(o);	/* ours */
	k->n++;
	if (k->fail_at && k->n == k->fail_at)
		return -E2BIG;
	return k->stop_after && k->n == k->stop_after;
}

static void put_empty(struct cat *c, int64_t b, const char *key)
{
	struct cat_put p = {
		.bucket_id = b, .key = key, .vid = 1, .etag = "\"x\"", .mtime_ns = 1, .session = "s",
	};

	assert_int_equal(cat_object_put(c, &p, NULL, NULL), 0);
}

static void test_object_range(void **state)
{
	struct fixture *f = *state;
	static const char *const keys[] = {
		"a", "a/1", "a/2", "a0", "b", "b/x", "\xc3\xa9t\xc3\xa9", "\xe2\x82\xac",
	};
	int64_t b = bucket(f->c, "list"), other = bucket(f->c, "other");
	struct keys k;

	/* Inserted out of order; listed in UTF-8 byte order. */
	for (int i = (int)ARRAY_SIZE(keys) - 1; i >= 0; i--)
		put_empty(f->c, b, keys[i]);
	put_empty(f->c, other, "a/1");

	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, b, NULL, 0, NULL, 100, collect_key, &k), 0);
	assert_int_equal(k.n, (int)ARRAY_SIZE(keys));
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		assert_string_equal(k.key[i], keys[i]);

	/* after is exclusive, or inclusive. */
	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, b, "a/1", 0, NULL, 100, collect_key, &k), 0);
	assert_int_equal(k.n, 6);
	assert_string_equal(k.key[0], "a/2");
	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, b, "a/1", 1, NULL, 100, collect_key, &k), 0);
	assert_int_equal(k.n, 7);
	assert_string_equal(k.key[0], "a/1");

	/* upper is exclusive: the range of prefix "a/" is ["a/", "a0"). */
	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, b, "a/", 1, "a0", 100, collect_key, &k), 0);
	assert_int_equal(k.n, 2);
	assert_string_equal(k.key[0], "a/1");
	assert_string_equal(k.key[1], "a/2");

	/* limit. */
	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, b, NULL, 0, NULL, 3, collect_key, &k), 0);
	assert_int_equal(k.n, 3);
	assert_string_equal(k.key[2], "a/2");
	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, b, NULL, 0, NULL, 0, collect_key, &k), 0);
	assert_int_equal(k.n, 0);

	/* A positive return stops the walk; a negative one is the result. */
	memset(&k, 0, sizeof(k));
	k.stop_after = 2;
	assert_int_equal(cat_object_range(f->c, b, NULL, 0, NULL, 100, collect_key, &k), 0);
	assert_int_equal(k.n, 2);
	memset(&k, 0, sizeof(k));
	k.fail_at = 3;
	assert_int_equal(cat_object_range(f->c, b, NULL, 0, NULL, 100, collect_key, &k), -E2BIG);
	assert_int_equal(k.n, 3);

	/* Past the end, and an empty bucket. */
	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, b, "\xf4\x8f\xbf\xbf", 0, NULL, 100, collect_key, &k), 0);
	assert_int_equal(k.n, 0);
	assert_int_equal(cat_object_range(f->c, bucket(f->c, "empty"), NULL, 0, NULL, 100,
					  collect_key, &k), 0);
	assert_int_equal(k.n, 0);

	/* The other bucket's key does not leak in. */
	memset(&k, 0, sizeof(k));
	assert_int_equal(cat_object_range(f->c, other, NULL, 0, NULL, 100, collect_key, &k), 0);
	assert_int_equal(k.n, 1);
}

/* The reader's one query: object and extents by bucket name and key. */
static void test_object_lookup(void **state)
{
	struct fixture *f = *state;
	struct cat_object *co = NULL;
	int64_t b = bucket(f->c, "look");
	uint64_t gen = claim(f->c, 1);

	assert_int_equal(put_obj(f->c, b, "k", 0x5151, 1, gen, 0, 3, 2000, 0, NULL), 0);
	assert_int_equal(cat_object_lookup(f->c, "look", "k", 1, &co), 0);
	assert_int_equal(co->bucket_id, b);
	assert_int_equal(co->vid, 0x5151);
	assert_string_equal(co->obj->key, "k");
	assert_int_equal(co->obj->size, 6000);
	assert_int_equal(co->obj->nmeta, 2);
	assert_string_equal(co->obj->content_type, "application/octet-stream");
	assert_int_equal(co->nextents, 3);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(co->extents[i].seq, i);
		assert_int_equal(co->extents[i].obj_off, 2000 * i);
		/* Stored as given: the header names this version and place. */
		assert_int_equal(co->extents[i].hvid, 0x5151);
		assert_int_equal(co->extents[i].hseq, i);
	}
	cat_object_free(co);

	/* No extents: the object alone. */
	put_empty(f->c, b, "e");
	co = NULL;
	assert_int_equal(cat_object_lookup(f->c, "look", "e", 1, &co), 0);
	assert_int_equal(co->nextents, 0);
	assert_int_equal(co->obj->size, 0);
	cat_object_free(co);

	co = NULL;
	assert_int_equal(cat_object_lookup(f->c, "look", "missing", 1, &co), -ENOENT);
	assert_null(co);
	assert_int_equal(cat_object_lookup(f->c, "nobucket", "k", 1, &co), -ENOENT);
	assert_null(co);
	/* The same key in another bucket is another object. */
	bucket(f->c, "look2");
	assert_int_equal(cat_object_lookup(f->c, "look2", "k", 1, &co), -ENOENT);
}

static int64_t object_id(struct cat *c, int64_t b, const char *key, uint64_t *vid)
{
	struct cat_object *co = NULL;
	int64_t id;

	assert_int_equal(cat_object_get(c, b, key, 0, &co), 0);
	id = co->id;
	if (vid)
		*vid = co->vid;
	cat_object_free(co);
	return id;
}

/* Every column of bucket/key's row but its id and key, as another process reads them. */
static char *raw_row(const char *path, const char *key)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	char *out = calloc(1, 4096);
	size_t len = 0;

	assert_non_null(out);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT * FROM objects WHERE key = ?1", -1, &s,
					    NULL), SQLITE_OK);
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	for (int i = 0; i < sqlite3_column_count(s); i++) {
		const char *name = sqlite3_column_name(s, i);
		const unsigned char *v = sqlite3_column_text(s, i);

		if (!strcmp(name, "id") || !strcmp(name, "key"))
			continue;
		len += (size_t)snprintf(out + len, 4096 - len, "%s=%s;", name,
					v ? (const char *)v : "NULL");
		assert_true(len < 4096);
	}
	sqlite3_finalize(s);
	sqlite3_close(db);
	return out;
}

static unsigned watched_frames;

/*
 * An overwrite of a hot object that never went to G4, in the same session,
 * keeps its row: the row it leaves is the one a new put would make, and its
 * commit writes at most 5 pages to the log (the object's row, its extents,
 * the extents' index by segment, the segment, the session), where a new row
 * wrote 7 here (the key's, session's and G4's index pages too). Any other
 * overwrite makes a new row, so that the triggers see the old one go.
 */
static void test_object_replace_in_place(void **state)
{
	struct fixture *f = *state;
	int64_t b = bucket(f->c, "objs"), id;
	uint64_t gen = claim(f->c, 2), freed = 0;
	unsigned before;
	char *fresh, *replaced;
	int64_t dead = -1;

	cat_watch_wal(f->c, &watched_frames);
	assert_int_equal(put_obj(f->c, b, "k", 0x1, 2, gen, 0, 2, 5000, 0, NULL), 0);
	id = object_id(f->c, b, "k", NULL);
	assert_int_equal(cat_g4_failed(f->c, id), 0);	/* a failed demotion: g4_attempts 1 */
	assert_int_equal(put_obj(f->c, b, "other", 0x2, 2, gen, 2 * space_of(5000), 1, 100, 0,
				 NULL), 0);

	before = watched_frames;
	assert_int_equal(put_obj(f->c, b, "k", 0x3, 2, gen, 4 * SEG_ALIGN, 3, 300, 0, &freed), 0);
	print_message("an overwrite in place wrote %u pages\n", watched_frames - before);
	assert_true(watched_frames - before <= 5);
	assert_int_equal(freed, 0x1);
	assert_int_equal(object_id(f->c, b, "k", NULL), id);
	assert_int_equal(seg_get(f->c, 2).live, 3 * space_of(300) + space_of(100));

	/* The same put of a key never written before: the same row. */
	assert_int_equal(put_obj(f->c, b, "fresh", 0x3, 2, gen, 4 * SEG_ALIGN, 3, 300, 0, NULL),
			 0);
	fresh = raw_row(f->path, "fresh");
	replaced = raw_row(f->path, "k");
	assert_string_equal(replaced, fresh);
	free(fresh);
	free(replaced);

	/* A version G4 holds: a new row, and the old one's copy is dead. */
	assert_int_equal(raw_exec(f->path, "UPDATE objects SET g4_vid = vid WHERE key = 'k'"),
			 SQLITE_OK);
	assert_int_equal(put_obj(f->c, b, "k", 0x4, 2, gen, 8 * SEG_ALIGN, 1, 300, 0, NULL), 0);
	assert_true(object_id(f->c, b, "k", NULL) != id);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM g4_dead WHERE key = 'k'", &dead),
			 SQLITE_OK);
	assert_int_equal(dead, 1);
	assert_int_equal(seg_get(f->c, 2).live, 4 * space_of(300) + space_of(100));

	/* Another session: a new row (the session's indexes hold the id);
	 * not the last row, whose id a new row would take again. */
	id = object_id(f->c, b, "k", NULL);
	put_empty(f->c, b, "last");
	assert_int_equal(raw_exec(f->path, "UPDATE objects SET session = 'then' WHERE key = 'k'"),
			 SQLITE_OK);
	assert_int_equal(put_obj(f->c, b, "k", 0x5, 2, gen, 9 * SEG_ALIGN, 1, 300, 0, NULL), 0);
	assert_true(object_id(f->c, b, "k", NULL) != id);
	assert_int_equal(seg_get(f->c, 2).live, 4 * space_of(300) + space_of(100));
}

/*
 * A new key's commit writes the object's row, its key's and its session's
 * index entries (objects_g4), its extent, the extents' index by segment,
 * the segment and the session: 6 pages of the log here, where the index
 * migration 12 drops made it 7.
 */
static void test_object_new_pages(void **state)
{
	struct fixture *f = *state;
	int64_t b = bucket(f->c, "objs");
	uint64_t gen = claim(f->c, 2);
	unsigned before;

	cat_watch_wal(f->c, &watched_frames);
	assert_int_equal(put_obj(f->c, b, "a", 0x1, 2, gen, 0, 1, 5000, 0, NULL), 0);
	before = watched_frames;
	assert_int_equal(put_obj(f->c, b, "b", 0x2, 2, gen, 2 * SEG_ALIGN, 1, 5000, 0, NULL), 0);
	print_message("a new key wrote %u pages\n", watched_frames - before);
	assert_true(watched_frames - before <= 6);
}

/* CompleteMultipartUpload: the parts' extents become the object's, unmoved. */
static void test_object_put_parts(void **state)
{
	struct fixture *f = *state;
	struct cat_object *co = NULL;
	int64_t b = bucket(f->c, "dst"), pb = bucket(f->c, "parts"), ids[3];
	uint64_t g0 = claim(f->c, 0), g1 = claim(f->c, 1), vids[3], live0, live1;
	struct cat_put p = {
		.bucket_id = b, .key = "whole", .vid = 0x900, .etag = "\"w-3\"",
		.mtime_ns = 77, .session = "whole",
	};

	/* Part 1: two extents in segment 0; part 2: empty; part 3: one in 1. */
	assert_int_equal(put_obj(f->c, pb, "p1", 0x101, 0, g0, 0, 2, 3000, 0, NULL), 0);
	put_empty(f->c, pb, "p2");
	assert_int_equal(put_obj(f->c, pb, "p3", 0x103, 1, g1, 0, 1, 500, 0, NULL), 0);
	ids[0] = object_id(f->c, pb, "p1", &vids[0]);
	ids[1] = object_id(f->c, pb, "p2", &vids[1]);
	ids[2] = object_id(f->c, pb, "p3", &vids[2]);
	live0 = seg_get(f->c, 0).live;
	live1 = seg_get(f->c, 1).live;

	/* A part that is not the version read: refused whole. */
	p.size = 6500;
	vids[2] ^= 1;
	assert_int_equal(cat_object_put_parts(f->c, &p, ids, vids, 3, NULL, NULL), -ESTALE);
	assert_int_equal(cat_object_get(f->c, b, "whole", 0, &co), -ENOENT);
	assert_int_equal(cat_object_get(f->c, pb, "p1", 1, &co), 0);
	assert_int_equal(co->nextents, 2);
	cat_object_free(co);
	vids[2] ^= 1;

	assert_int_equal(cat_object_put_parts(f->c, &p, ids, vids, 3, NULL, NULL), 0);
	assert_int_equal(cat_object_get(f->c, b, "whole", 1, &co), 0);
	assert_int_equal(co->vid, 0x900);
	assert_int_equal(co->obj->size, 6500);
	assert_int_equal(co->nextents, 3);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(co->extents[i].seq, i);
	assert_int_equal(co->extents[0].obj_off, 0);
	assert_int_equal(co->extents[1].obj_off, 3000);
	assert_int_equal(co->extents[2].obj_off, 6000);
	/* Each header still names the part and place it was written as. */
	assert_int_equal(co->extents[0].hvid, 0x101);
	assert_int_equal(co->extents[1].hvid, 0x101);
	assert_int_equal(co->extents[1].hseq, 1);
	assert_int_equal(co->extents[2].hvid, 0x103);
	assert_int_equal(co->extents[2].hseq, 0);
	assert_int_equal(co->extents[2].segment, 1);
	cat_object_free(co);
	/* The parts are gone; the bytes did not move: live is unchanged. */
	assert_int_equal(cat_object_get(f->c, pb, "p1", 0, &co), -ENOENT);
	assert_int_equal(cat_object_get(f->c, pb, "p2", 0, &co), -ENOENT);
	assert_int_equal(cat_object_get(f->c, pb, "p3", 0, &co), -ENOENT);
	assert_int_equal(seg_get(f->c, 0).live, live0);
	assert_int_equal(seg_get(f->c, 1).live, live1);
	/* And deleting the whole releases what the parts had. */
	assert_int_equal(cat_object_delete(f->c, b, "whole", NULL, NULL), 0);
	assert_int_equal(seg_get(f->c, 0).live, 0);
	assert_int_equal(seg_get(f->c, 1).live, 0);
	/* A part already used: -ESTALE. */
	assert_int_equal(cat_object_put_parts(f->c, &p, ids, vids, 1, NULL, NULL), -ESTALE);
}

/* Part-full segments a process sealed are reopened by the next appender. */
static void test_segment_partial_reopen(void **state)
{
	struct fixture *f = *state;
	uint64_t g2, g3, g, used = 0;
	uint32_t id = 99;
	struct cat_segment s;

	assert_int_equal(cat_segment_next_partial(f->c, UINT32_MAX, MiB, &id, &used), -ENOENT);
	g2 = claim(f->c, 2);
	g3 = claim(f->c, 3);
	claim(f->c, 4);
	set_state(f->c, 2, SEG_OPEN, SEG_SEALED, 5 * SEG_ALIGN);
	set_state(f->c, 3, SEG_OPEN, SEG_SEALED, 200 * SEG_ALIGN);
	set_state(f->c, 4, SEG_OPEN, SEG_SEALED, 0);	/* nothing appended: not partial */

	assert_int_equal(cat_segment_next_partial(f->c, UINT32_MAX, MiB, &id, &used), 0);
	assert_int_equal(id, 2);
	assert_int_equal(used, 5 * SEG_ALIGN);
	assert_int_equal(cat_segment_next_partial(f->c, 2, MiB, &id, &used), 0);
	assert_int_equal(id, 3);
	assert_int_equal(used, 200 * SEG_ALIGN);
	assert_int_equal(cat_segment_next_partial(f->c, 3, MiB, &id, &used), -ENOENT);
	/* Too full for what the caller needs. */
	assert_int_equal(cat_segment_next_partial(f->c, 2, 100 * SEG_ALIGN, &id, &used), -ENOENT);
	assert_int_equal(cat_segment_next_partial(f->c, UINT32_MAX, 5 * SEG_ALIGN, &id, &used), 0);
	assert_int_equal(id, 2);

	/* Reopen: SEALED -> OPEN at the same generation, if unchanged. */
	assert_int_equal(cat_segment_reopen(f->c, 2, 4 * SEG_ALIGN, &g), -EBUSY);
	assert_int_equal(cat_segment_reopen(f->c, 2, 5 * SEG_ALIGN, &g), 0);
	assert_int_equal(g, g2);
	s = seg_get(f->c, 2);
	assert_int_equal(s.state, SEG_OPEN);
	assert_int_equal(s.used, 5 * SEG_ALIGN);
	assert_int_equal(cat_segment_reopen(f->c, 2, 5 * SEG_ALIGN, &g), -EBUSY);
	assert_int_equal(cat_segment_reopen(f->c, 5, 0, &g), -EBUSY);	/* FREE */
	assert_int_equal(cat_segment_next_partial(f->c, UINT32_MAX, MiB, &id, &used), 0);
	assert_int_equal(id, 3);

	/* SEG_USED_KEEP leaves the append pointer alone. */
	set_state(f->c, 3, SEG_SEALED, SEG_RECLAIMING, SEG_USED_KEEP);
	assert_int_equal(seg_get(f->c, 3).used, 200 * SEG_ALIGN);
	assert_int_equal(seg_get(f->c, 3).gen, g3);
	/* Reclaiming is not partial. */
	assert_int_equal(cat_segment_next_partial(f->c, UINT32_MAX, MiB, &id, &used), -ENOENT);
	set_state(f->c, 3, SEG_RECLAIMING, SEG_SEALED, SEG_USED_KEEP);
	assert_int_equal(seg_get(f->c, 3).used, 200 * SEG_ALIGN);
}

/* ---- segments ----------------------------------------------------------------- */

static void test_segment_states(void **state)
{
	struct fixture *f = *state;
	uint64_t gen = 0, g2, counts[4];
	uint32_t id = 99;
	struct cat_segment s;
	int64_t b = bucket(f->c, "segs");

	/* next_free walks the free segments in id order. */
	assert_int_equal(cat_segment_next_free(f->c, UINT32_MAX, &id), 0);
	assert_int_equal(id, 0);
	assert_int_equal(cat_segment_next_free(f->c, 0, &id), 0);
	assert_int_equal(id, 1);

	gen = claim(f->c, 0);
	assert_int_equal(gen, 1);
	s = seg_get(f->c, 0);
	assert_int_equal(s.state, SEG_OPEN);
	assert_true(s.last_access > 0);
	/* Claiming what is not FREE: -EBUSY. */
	assert_int_equal(cat_segment_claim(f->c, 0, &g2), -EBUSY);
	assert_int_equal(cat_segment_next_free(f->c, UINT32_MAX, &id), 0);
	assert_int_equal(id, 1);
	assert_int_equal(cat_segment_next_free(f->c, 6, &id), 0);
	assert_int_equal(id, 7);
	assert_int_equal(cat_segment_next_free(f->c, 7, &id), -ENOSPC);

	/* OPEN -> SEALED records the append pointer; a wrong `from` is -ESTALE. */
	assert_int_equal(cat_segment_set_state(f->c, 0, SEG_SEALED, SEG_FREE, 0), -ESTALE);
	assert_int_equal(cat_segment_set_state(f->c, 1, SEG_OPEN, SEG_SEALED, 0), -ESTALE);
	assert_int_equal(put_obj(f->c, b, "x", 1, 0, gen, 0, 1, 5000, 0, NULL), 0);
	set_state(f->c, 0, SEG_OPEN, SEG_SEALED, 3 * SEG_ALIGN);
	s = seg_get(f->c, 0);
	assert_int_equal(s.state, SEG_SEALED);
	assert_int_equal(s.used, 3 * SEG_ALIGN);
	assert_int_equal(s.live, space_of(5000));
	/* A put may still commit into a sealed segment of its generation
	 * (the writer carved the space before the seal). */
	assert_int_equal(put_obj(f->c, b, "y", 2, 0, gen, 2 * SEG_ALIGN, 1, 100, 0, NULL), 0);

	/* Free refuses while extents remain. */
	assert_int_equal(cat_segment_free(f->c, 0, &g2), -EBUSY);
	assert_int_equal(seg_get(f->c, 0).gen, gen);
	set_state(f->c, 0, SEG_SEALED, SEG_RECLAIMING, 0);
	assert_int_equal(cat_object_delete(f->c, b, "x", NULL, NULL), 0);
	assert_int_equal(cat_object_delete(f->c, b, "y", NULL, NULL), 0);
	assert_int_equal(seg_get(f->c, 0).live, 0);
	g2 = 0;
	assert_int_equal(cat_segment_free(f->c, 0, &g2), 0);
	assert_int_equal(g2, gen + 1);
	s = seg_get(f->c, 0);
	assert_int_equal(s.state, SEG_FREE);
	assert_int_equal(s.gen, gen + 1);
	assert_int_equal(s.live, 0);
	assert_int_equal(s.used, 0);
	/* The old generation is dead for writers. */
	assert_int_equal(put_obj(f->c, b, "z", 3, 0, gen, 0, 1, 100, 0, NULL), -ESTALE);

	/* Claimed again: the new generation; freed again: + 1 again. */
	assert_int_equal(claim(f->c, 0), gen + 1);
	assert_int_equal(cat_segment_free(f->c, 0, &g2), 0);
	assert_int_equal(g2, gen + 2);

	/* OPEN -> FREE (a claim given back) keeps the generation. */
	gen = claim(f->c, 2);
	set_state(f->c, 2, SEG_OPEN, SEG_FREE, 0);
	assert_int_equal(seg_get(f->c, 2).gen, gen);

	assert_int_equal(cat_segment_counts(f->c, counts), 0);
	assert_int_equal(counts[SEG_FREE], 8);
	assert_int_equal(counts[SEG_OPEN], 0);
	assert_int_equal(counts[SEG_SEALED], 0);
	assert_int_equal(counts[SEG_RECLAIMING], 0);
}

static void test_segment_victim(void **state)
{
	struct fixture *f = *state;
	uint64_t g[8];
	uint32_t id = 99;
	int64_t b = bucket(f->c, "vict");

	/* Nothing sealed: no victim (open segments are never taken). */
	for (uint32_t i = 0; i < 5; i++)
		g[i] = claim(f->c, i);
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), -ENOENT);

	/* 0..3 hold data; 4 is sealed and empty. */
	for (uint32_t i = 0; i < 4; i++) {
		char key[8];

		snprintf(key, sizeof(key), "k%u", i);
		assert_int_equal(put_obj(f->c, b, key, 10 + i, i, g[i], 0, 1, 8000, 0, NULL), 0);
		set_state(f->c, i, SEG_OPEN, SEG_SEALED, SEG_ALIGN * 3);
	}
	set_state(f->c, 4, SEG_OPEN, SEG_SEALED, 0);
	/* Access times: 2 is the coldest of the full ones, 4 the hottest of all. */
	assert_int_equal(cat_touch_segment(f->c, 0, 5000000000000000000ll), 0);
	assert_int_equal(cat_touch_segment(f->c, 1, 4000000000000000000ll), 0);
	assert_int_equal(cat_touch_segment(f->c, 3, 4500000000000000000ll), 0);
	assert_int_equal(cat_touch_segment(f->c, 4, 6000000000000000000ll), 0);
	/* Touching never goes back in time. */
	assert_int_equal(cat_touch_segment(f->c, 0, 1), 0);
	assert_int_equal(seg_get(f->c, 0).last_access, 5000000000000000000ll);

	/* Empty sealed segments first, however hot. */
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), 0);
	assert_int_equal(id, 4);
	/* Then the coldest. */
	set_state(f->c, 4, SEG_SEALED, SEG_RECLAIMING, 0);
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), 0);
	assert_int_equal(id, 2);
	set_state(f->c, 2, SEG_SEALED, SEG_RECLAIMING, 0);
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), 0);
	assert_int_equal(id, 1);
	/* A segment emptied by deletes becomes the first choice, and the only
	 * one when only empty ones are asked for. */
	assert_int_equal(cat_segment_pick_victim(f->c, 1, &id), -ENOENT);
	assert_int_equal(cat_object_delete(f->c, b, "k0", NULL, NULL), 0);
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), 0);
	assert_int_equal(id, 0);
	assert_int_equal(cat_segment_pick_victim(f->c, 1, &id), 0);
	assert_int_equal(id, 0);
	set_state(f->c, 0, SEG_SEALED, SEG_RECLAIMING, 0);
	set_state(f->c, 1, SEG_SEALED, SEG_RECLAIMING, 0);
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), 0);
	assert_int_equal(id, 3);
	set_state(f->c, 3, SEG_SEALED, SEG_RECLAIMING, 0);
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), -ENOENT);
	/* RECLAIMING -> SEALED puts one back in the running. */
	set_state(f->c, 1, SEG_RECLAIMING, SEG_SEALED, 0);
	assert_int_equal(cat_segment_pick_victim(f->c, 0, &id), 0);
	assert_int_equal(id, 1);
}

struct seg_objs {
	int64_t id[8];
	uint64_t vid[8];
	int pinned[8];
	int n;
};

static int collect_seg_obj(void *arg, int64_t obj, uint64_t vid, int pinned)
{
	struct seg_objs *so = arg;

	assert_true(so->n < 8);
	so->id[so->n] = obj;
	so->vid[so->n] = vid;
	so->pinned[so->n] = pinned;
	so->n++;
	return 0;
}

static void test_segment_objects_and_move(void **state)
{
	struct fixture *f = *state;
	struct seg_objs so = { .n = 0 };
	struct cat_object *co = NULL;
	struct cat_extent to;
	int64_t b = bucket(f->c, "move");
	uint64_t g0 = claim(f->c, 0), g1 = claim(f->c, 1);
	const uint32_t len = 3000;
	uint32_t space = (uint32_t)space_of(len);

	/* "a": two extents in 0; "b": one in 0 (pinned); "c" lives in 1. */
	assert_int_equal(put_obj(f->c, b, "a", 0xa, 0, g0, 0, 2, len, 0, NULL), 0);
	assert_int_equal(put_obj(f->c, b, "b", 0xb, 0, g0, 2 * space, 1, len, 0, NULL), 0);
	assert_int_equal(put_obj(f->c, b, "c", 0xc, 1, g1, 0, 1, len, 0, NULL), 0);
	assert_int_equal(cat_object_set_pin(f->c, b, "b", 1), 0);

	assert_int_equal(cat_segment_objects(f->c, 0, collect_seg_obj, &so), 0);
	assert_int_equal(so.n, 2);	/* distinct objects, not extents */
	for (int i = 0; i < so.n; i++) {
		assert_true(so.vid[i] == 0xa || so.vid[i] == 0xb);
		assert_int_equal(so.pinned[i], so.vid[i] == 0xb);
	}
	memset(&so, 0, sizeof(so));
	assert_int_equal(cat_segment_objects(f->c, 5, collect_seg_obj, &so), 0);
	assert_int_equal(so.n, 0);

	/* Move a's extent 1 from segment 0 to segment 1. */
	assert_int_equal(cat_object_get(f->c, b, "a", 1, &co), 0);
	to = co->extents[1];
	to.segment = 1;
	to.gen = g1;
	to.offset = 8 * SEG_ALIGN;
	/* Only if the version is still the one copied. */
	assert_int_equal(cat_extent_move(f->c, co->id, 0xdead, &to, space), -ENOENT);
	/* Not into a dead generation. */
	to.gen = g1 + 1;
	assert_int_equal(cat_extent_move(f->c, co->id, 0xa, &to, space), -ESTALE);
	to.gen = g1;
	assert_int_equal(seg_get(f->c, 0).live, 3 * (uint64_t)space);
	assert_int_equal(seg_get(f->c, 1).live, space);
	assert_int_equal(cat_extent_move(f->c, co->id, 0xa, &to, space), 0);
	assert_int_equal(seg_get(f->c, 0).live, 2 * (uint64_t)space);
	assert_int_equal(seg_get(f->c, 1).live, 2 * (uint64_t)space);
	cat_object_free(co);
	assert_int_equal(cat_object_get(f->c, b, "a", 1, &co), 0);
	assert_int_equal(co->extents[0].segment, 0);
	assert_int_equal(co->extents[1].segment, 1);
	assert_int_equal(co->extents[1].offset, 8 * SEG_ALIGN);
	assert_int_equal(co->extents[1].gen, g1);
	assert_int_equal(co->extents[1].obj_off, len);
	assert_int_equal(co->extents[1].crc, 0x1001u);
	/* A missing seq. */
	to.seq = 7;
	assert_int_equal(cat_extent_move(f->c, co->id, 0xa, &to, space), -ENOENT);
	cat_object_free(co);

	/* Deleting "a" now releases space from both segments. */
	assert_int_equal(cat_object_delete(f->c, b, "a", NULL, NULL), 0);
	assert_int_equal(seg_get(f->c, 0).live, space);
	assert_int_equal(seg_get(f->c, 1).live, space);

	/* set_live (fsck's repair) overwrites the count. */
	assert_int_equal(cat_segment_set_live(f->c, 1, 12345), 0);
	assert_int_equal(seg_get(f->c, 1).live, 12345);
}

/* ---- counters, sessions, stat, walk -------------------------------------------- */

static void test_counters(void **state)
{
	struct fixture *f = *state;
	uint64_t v = 99;

	assert_int_equal(cat_counter_get(f->c, "never", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(cat_counter_add(f->c, "hits", 3), 0);
	assert_int_equal(cat_counter_add(f->c, "hits", 4), 0);
	assert_int_equal(cat_counter_add(f->c, "misses", 1), 0);
	assert_int_equal(cat_counter_get(f->c, "hits", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(cat_counter_add(f->c, "hits", -2), 0);
	assert_int_equal(cat_counter_get(f->c, "hits", &v), 0);
	assert_int_equal(v, 5);
	/* Counters persist across connections. */
	cat_close(f->c);
	assert_int_equal(cat_open(f->path, 0, &f->c), 0);
	assert_int_equal(cat_counter_get(f->c, "misses", &v), 0);
	assert_int_equal(v, 1);
}

static void test_sessions_touch(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stat st;
	int64_t b = bucket(f->c, "sess"), b2 = bucket(f->c, "sess2"), v = 0;
	char sql[200];

	memset(&st, 0, sizeof(st));
	assert_int_equal(cat_stat(f->c, &st), 0);
	assert_int_equal(st.sessions, 0);

	assert_int_equal(cat_touch_session(f->c, b, "conv-1", 100), 0);
	assert_int_equal(cat_touch_session(f->c, b, "conv-2", 50), 0);
	assert_int_equal(cat_touch_session(f->c, b2, "conv-1", 10), 0);
	/* A session is counted while it has an object: these have none. */
	assert_int_equal(cat_stat(f->c, &st), 0);
	assert_int_equal(st.sessions, 0);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM sessions", &v), SQLITE_OK);
	assert_int_equal(v, 3);

	/* Later touches advance last_access; earlier ones never move it back. */
	assert_int_equal(cat_touch_session(f->c, b, "conv-1", 300), 0);
	assert_int_equal(cat_touch_session(f->c, b, "conv-1", 200), 0);
	snprintf(sql, sizeof(sql),
		 "SELECT last_access FROM sessions WHERE bucket = %lld AND name = 'conv-1'",
		 (long long)b);
	assert_int_equal(raw_int(f->path, sql, &v), SQLITE_OK);
	assert_int_equal(v, 300);
	snprintf(sql, sizeof(sql),
		 "SELECT last_access FROM sessions WHERE bucket = %lld AND name = 'conv-1'",
		 (long long)b2);
	assert_int_equal(raw_int(f->path, sql, &v), SQLITE_OK);
	assert_int_equal(v, 10);

	/* A put touches its session at its mtime. */
	{
		uint64_t gen = claim(f->c, 0);

		assert_int_equal(put_obj(f->c, b2, "o", 1, 0, gen, 0, 1, 10, 0, NULL), 0);
	}
	snprintf(sql, sizeof(sql),
		 "SELECT last_access FROM sessions WHERE bucket = %lld AND name = 'sess'",
		 (long long)b2);
	assert_int_equal(raw_int(f->path, sql, &v), SQLITE_OK);
	assert_int_equal(v, 123456789);
	assert_int_equal(cat_stat(f->c, &st), 0);
	assert_int_equal(st.sessions, 1);	/* "sess", of the only object */
}

static void test_stat(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stat st;
	int64_t b = bucket(f->c, "stat");
	uint64_t g0 = claim(f->c, 0);

	bucket(f->c, "stat2");
	claim(f->c, 1);
	assert_int_equal(put_obj(f->c, b, "a", 1, 0, g0, 0, 2, 1000, 0, NULL), 0);
	assert_int_equal(put_obj(f->c, b, "b", 2, 0, g0, 2 * SEG_ALIGN, 1, 5000, 0, NULL), 0);
	assert_int_equal(cat_object_set_pin(f->c, b, "b", 1), 0);
	set_state(f->c, 0, SEG_OPEN, SEG_SEALED, 4 * SEG_ALIGN);
	assert_int_equal(cat_counter_add(f->c, "evicted_objects", 3), 0);
	assert_int_equal(cat_counter_add(f->c, "reclaimed_segments", 2), 0);
	assert_int_equal(cat_counter_add(f->c, "checksum_failures", 1), 0);

	memset(&st, 0, sizeof(st));
	assert_int_equal(cat_stat(f->c, &st), 0);
	assert_int_equal(st.buckets, 2);
	assert_int_equal(st.objects, 2);
	assert_int_equal(st.object_bytes, 2000 + 5000);
	assert_int_equal(st.pinned, 1);
	assert_int_equal(st.live_bytes, 2 * space_of(1000) + space_of(5000));
	assert_int_equal(st.segments, 8);
	assert_int_equal(st.segments_free, 6);
	assert_int_equal(st.segments_open, 1);
	assert_int_equal(st.segments_sealed, 1);
	assert_int_equal(st.tier_count[KVT_TIER_HOT], 2);
	assert_int_equal(st.tier_count[KVT_TIER_COLD], 0);
	assert_int_equal(st.evicted_objects, 3);
	assert_int_equal(st.reclaimed_segments, 2);
	assert_int_equal(st.checksum_failures, 1);
	assert_int_equal(st.sessions, 1);
}

struct walk {
	int n;
	int64_t last_id;
	int stop_at;
	size_t extents;
};

static int walk_one(void *arg, struct cat_object *co)
{
	struct walk *w = arg;

	assert_true(co->id > w->last_id);	/* id order */
	w->last_id = co->id;
	assert_non_null(co->obj->bucket);
	assert_string_equal(co->obj->bucket, "walk");
	w->extents += co->nextents;
	w->n++;
	return w->stop_at && w->n == w->stop_at;
}

static void test_object_walk(void **state)
{
	struct fixture *f = *state;
	int64_t b = bucket(f->c, "walk");
	uint64_t g = claim(f->c, 0);
	struct walk w = { .last_id = -1 };

	/* More than one batch of 256. */
	for (int i = 0; i < 600; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%04d", i);
		if (i % 100 == 0)
			assert_int_equal(put_obj(f->c, b, key, (uint64_t)i + 1, 0, g,
						 (uint64_t)(i / 100) * SEG_ALIGN, 1, 10, 0, NULL), 0);
		else
			put_empty(f->c, b, key);
	}
	assert_int_equal(cat_object_walk(f->c, walk_one, &w), 0);
	assert_int_equal(w.n, 600);
	assert_int_equal(w.extents, 6);

	memset(&w, 0, sizeof(w));
	w.last_id = -1;
	w.stop_at = 300;
	assert_int_equal(cat_object_walk(f->c, walk_one, &w), 1);
	assert_int_equal(w.n, 300);
}

/* ---- G4 upgrade queries (migrations 10 and 11) ------------------------------ */

/*
 * Whether cat_plan(name) searches index (or one whose name starts so) by
 * the columns `by` ("bucket=? AND size=?"), and no line scans a table: a
 * scan grows with the store.
 */
static void plan_searches(struct cat *c, const char *name, const char *index, const char *by)
{
	char *plan = NULL, *at;

	assert_int_equal(cat_plan(c, name, &plan), 0);
	print_message("%s:\n%s", name, plan);
	at = strstr(plan, index);
	assert_non_null(at);
	assert_true(at >= plan + 12 && !strncmp(at - 12, "USING INDEX ", 12));
	at = strchr(at, '(');
	assert_non_null(at);
	assert_int_equal(strncmp(at + 1, by, strlen(by)), 0);
	assert_int_equal(at[1 + strlen(by)], ')');
	assert_null(strstr(plan, "SCAN "));
	free(plan);
}

static void plans_checked(struct cat *c)
{
	char *plan = NULL;

	plan_searches(c, "g4 cold unnamed sized", "objects_g4_unnamed", "bucket=? AND size=?");
	plan_searches(c, "g4 cold unnamed etag", "objects_g4_unnamed ",
		      "bucket=? AND size=? AND <expr>=?");
	plan_searches(c, "g4 cold unnamed crc", "objects_g4_unnamed_crc ",
		      "bucket=? AND size=? AND crc32c=?");
	plan_searches(c, "g4 dead unproven in", "g4_dead_unproven_session ",
		      "bucket=? AND session=?");
	assert_int_equal(cat_plan(c, "no such query", &plan), -ENOENT);
	assert_null(plan);
}

/* Object `key` of bucket b made COLD by SQL: size, CRC32C, ETag, G4 name. */
static void cold_row(const char *path, int64_t b, const char *key, uint64_t size,
		     uint32_t crc, const char *g4_etag, const char *g4_key)
{
	char *sql = sqlite3_mprintf("UPDATE objects SET tier = 2, g4_vid = vid, size = %llu,"
				    " crc32c = %u, g4_etag = %Q, g4_key = %Q"
				    " WHERE bucket = %lld AND key = %Q", (unsigned long long)size,
				    crc, g4_etag, g4_key, (long long)b, key);

	assert_non_null(sql);
	assert_int_equal(raw_exec(path, sql), SQLITE_OK);
	sqlite3_free(sql);
}

static int unproven_collect(void *arg, int64_t id, int64_t bucket_id, const char *bucket,
			    const char *key, const char *session, const char *g4_key,
			    int unproven)
{
	char *keys = arg;

	(void)id;
	(void)bucket_id;
	(void)bucket;
	(void)g4_key;
	assert_string_equal(session, "s1");
	assert_int_equal(unproven, 1);
	strcat(keys, key);
	strcat(keys, " ");
	return 0;
}

/*
 * g4_claim_unproven() asks, for each unproven g4_dead row, for the
 * bucket's cold objects with no recorded G4 name of one size and ETag, or
 * CRC32C where G4 gives no ETag;
 * with no index for it that scanned the bucket, 1.4 s a row at 500,000
 * cold objects. recall_unproven() read every g4_dead row of the store for
 * the few of one session. Each is now one search of a partial index
 * (migration 11), on a new catalog and on one a kvtier of schema 10 made;
 * and they give the rows they gave.
 */
static void test_g4_upgrade_queries(void **state)
{
	struct fixture *f = *state;
	int64_t b = bucket(f->c, "kvs"), other = bucket(f->c, "other"), v = -1, version = -1;
	static const char *const keys[] = { "s1/a", "s1/b", "s1/c", "s1/d", "s1/e", "s1/f" };
	struct cat_g4_obj *go = NULL;
	size_t n = 0;
	char got[256] = "", sql[400];

	plans_checked(f->c);

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		put_empty(f->c, b, keys[i]);
	put_empty(f->c, other, "s1/x");
	cold_row(f->path, b, "s1/a", 100, 7, "\"e1\"", NULL);
	cold_row(f->path, b, "s1/b", 100, 7, "", NULL);		/* the partner gave none */
	cold_row(f->path, b, "s1/c", 100, 8, "\"e2\"", NULL);	/* other bytes */
	cold_row(f->path, b, "s1/d", 100, 7, "\"e1\"", "kvs/s1/old");	/* has a name */
	cold_row(f->path, b, "s1/e", 200, 7, "\"e1\"", NULL);	/* another size */
	cold_row(f->path, other, "s1/x", 100, 7, "\"e1\"", NULL);	/* another bucket */
	/* s1/f stays hot. */

	/* By ETag: that one, and the one with none; by key, not s1/z's own. */
	assert_int_equal(cat_g4_cold_unnamed(f->c, b, "s1/z", 100, "\"e1\"", 0, &go, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(go[0].co->obj->key, "s1/a");
	assert_string_equal(go[1].co->obj->key, "s1/b");
	assert_string_equal(go[1].g4_etag, "");
	cat_g4_objs_free(go, n);
	/* No ETag from G4: by the copy's CRC32C; never not_key itself. */
	assert_int_equal(cat_g4_cold_unnamed(f->c, b, "s1/a", 100, NULL, 7, &go, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(go[0].co->obj->key, "s1/b");
	cat_g4_objs_free(go, n);
	assert_int_equal(cat_g4_cold_unnamed(f->c, b, "s1/z", 100, NULL, 8, &go, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(go[0].co->obj->key, "s1/c");
	cat_g4_objs_free(go, n);
	/* Whether any of a size could take a copy: worth reading it. */
	assert_int_equal(cat_g4_cold_unnamed_sized(f->c, b, "s1/z", 100), 1);
	assert_int_equal(cat_g4_cold_unnamed_sized(f->c, b, "s1/e", 200), 0);
	assert_int_equal(cat_g4_cold_unnamed_sized(f->c, b, "s1/z", 300), 0);

	/* Unproven rows: of bucket b, session s1, not the key asked from. */
	assert_int_equal(raw_exec(f->path,
		"INSERT INTO g4_dead(bucket, key, session, g4_key, unproven) VALUES"
		" (1, 's1/q', 's1', NULL, 1), (1, 's1/r', 's1', NULL, 0),"
		" (1, 's1/t', 's2', NULL, 1), (2, 's1/u', 's1', NULL, 1),"
		" (1, 's1/a', 's1', NULL, 1), (1, 's1/w', 's1', 'kvs/x', 1),"
		" (1, 's1/p', 's1', NULL, 1)"), SQLITE_OK);
	assert_int_equal(b, 1);
	assert_int_equal(other, 2);
	assert_int_equal(cat_g4_dead_unproven_in(f->c, b, "s1", "s1/a", unproven_collect, got), 0);
	assert_string_equal(got, "s1/q s1/p ");

	/* A catalog of schema 10 (before these indexes, with the one migration
	 * 12 drops) is brought up to date. */
	cat_close(f->c);
	f->c = NULL;
	assert_int_equal(raw_int(f->path, "PRAGMA user_version", &version), SQLITE_OK);
	assert_true(version >= 12);
	assert_int_equal(raw_exec(f->path, "DROP INDEX objects_g4_unnamed;"
				  " DROP INDEX objects_g4_unnamed_crc;"
				  " DROP INDEX g4_dead_unproven_session;"
				  " CREATE INDEX objects_session ON objects(bucket, session);"
				  " PRAGMA user_version = 10"), SQLITE_OK);
	assert_int_equal(cat_open(f->path, 0, &f->c), 0);
	assert_int_equal(raw_int(f->path, "PRAGMA user_version", &v), SQLITE_OK);
	assert_int_equal(v, version);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND"
		 " name IN ('objects_g4_unnamed', 'objects_g4_unnamed_crc',"
		 " 'g4_dead_unproven_session')");
	assert_int_equal(raw_int(f->path, sql, &v), SQLITE_OK);
	assert_int_equal(v, 3);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM sqlite_schema WHERE"
				 " name = 'objects_session'", &v), SQLITE_OK);
	assert_int_equal(v, 0);
	plans_checked(f->c);
	got[0] = '\0';
	assert_int_equal(cat_g4_dead_unproven_in(f->c, b, "s1", "s1/a", unproven_collect, got), 0);
	assert_string_equal(got, "s1/q s1/p ");
	assert_int_equal(cat_g4_cold_unnamed(f->c, b, "s1/z", 100, "\"e1\"", 0, &go, &n), 0);
	assert_int_equal(n, 2);
	cat_g4_objs_free(go, n);
}

/*
 * A session's objects, which every demotion, sweep, import and recall of
 * a session reads: SQLite took the key's index for their order and walked
 * the bucket's every object (200 ms a call at 200,000 objects, for a
 * session of 200); now one search of the session's index, then the sort.
 */
static void test_g4_session_objects(void **state)
{
	struct fixture *f = *state;
	int64_t b = bucket(f->c, "kvs");
	static const char *const keys[] = { "s/d", "s/b", "x/a", "s/c", "s/a" };
	struct cat_g4_obj *go = NULL;
	size_t n = 0;

	plan_searches(f->c, "g4 session objects", "objects_g4 ", "bucket=? AND session=?");
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		put_empty(f->c, b, keys[i]);	/* session "s" */
	assert_int_equal(raw_exec(f->path, "UPDATE objects SET session = 'x' WHERE key = 'x/a';"
				  " UPDATE objects SET tier = 2 WHERE key = 's/c'"), SQLITE_OK);
	/* By key; the tiers asked for. */
	assert_int_equal(cat_g4_session_objects(f->c, b, "s", 0xf, &go, &n), 0);
	assert_int_equal(n, 4);
	assert_string_equal(go[0].co->obj->key, "s/a");
	assert_string_equal(go[1].co->obj->key, "s/b");
	assert_string_equal(go[2].co->obj->key, "s/c");
	assert_string_equal(go[3].co->obj->key, "s/d");
	cat_g4_objs_free(go, n);
	assert_int_equal(cat_g4_session_objects(f->c, b, "s", 1u << KVT_TIER_COLD, &go, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(go[0].co->obj->key, "s/c");
	cat_g4_objs_free(go, n);
}

/* SQLite's allocations, counted (test_g4_victim_prepared). */
static sqlite3_mem_methods sql_mem;
static unsigned long sql_allocs;

static void *sql_count_malloc(int n)
{
	sql_allocs++;
	return sql_mem.xMalloc(n);
}

static void *sql_count_realloc(void *p, int n)
{
	sql_allocs++;
	return sql_mem.xRealloc(p, n);
}

/*
 * cat_g4_victim() is reclaim's look at each object of a victim, at every
 * pass of the demoter (reclaim.c, reclaim_find_unsynced): it prepared its
 * statement at every call, with the G4 statements that are prepared per
 * call because they are off the data path, and the prepare (85 of
 * SQLite's allocations) was most of its cost: 12 us a call in a debug
 * build, 2.5 us now, and 30% of a demoter's pass over 3060 sessions.
 * It is prepared once per connection, as the catalog's other statements
 * are. SQLite is set up again here with an allocator that counts.
 */
static void test_g4_victim_prepared(void **state)
{
	struct fixture *f = *state;
	struct cat_object *co = NULL;
	sqlite3_mem_methods counting;
	int64_t b = bucket(f->c, "kvs");
	uint64_t gen = claim(f->c, 2);
	char *bk = NULL, *key = NULL, *session = NULL;
	int in_g4 = -1, rc = 0;
	unsigned long allocs;
	int64_t id;

	assert_int_equal(put_obj(f->c, b, "s/blk", 0x70, 2, gen, 0, 1, 4096, 0, NULL), 0);
	assert_int_equal(cat_object_get(f->c, b, "s/blk", 0, &co), 0);
	id = co->id;
	cat_object_free(co);
	cat_close(f->c);
	assert_int_equal(sqlite3_shutdown(), SQLITE_OK);
	assert_int_equal(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &sql_mem), SQLITE_OK);
	counting = sql_mem;
	counting.xMalloc = sql_count_malloc;
	counting.xRealloc = sql_count_realloc;
	assert_int_equal(sqlite3_config(SQLITE_CONFIG_MALLOC, &counting), SQLITE_OK);
	assert_int_equal(sqlite3_initialize(), SQLITE_OK);
	assert_int_equal(cat_open(f->path, 0, &f->c), 0);

	assert_int_equal(cat_g4_victim(f->c, id, 0x70, &bk, &key, &session, &in_g4), 0);
	assert_string_equal(bk, "kvs");
	assert_string_equal(key, "s/blk");
	assert_string_equal(session, "sess");	/* put_obj()'s */
	assert_int_equal(in_g4, 0);
	free(bk);
	free(key);
	free(session);
	assert_int_equal(cat_g4_victim(f->c, id, 0x71, &bk, &key, &session, &in_g4), -ENOENT);
	assert_null(bk);
	allocs = sql_allocs;
	for (int i = 0; i < 1000 && rc == 0; i++) {
		rc = cat_g4_victim(f->c, id, 0x70, &bk, &key, &session, &in_g4);
		free(bk);
		free(key);
		free(session);
	}
	assert_int_equal(rc, 0);
	allocs = sql_allocs - allocs;
	fprintf(stderr, "cat_g4_victim(): %.1f of SQLite's allocations a call\n", allocs / 1000.0);
	/* 5 a call here (its read transaction's); prepared at each call, 90. */
	assert_true(allocs < 20 * 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_schema_create_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_schema_newer_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_geometry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_place, setup, teardown),
		cmocka_unit_test_setup_teardown(test_transactions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_buckets, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_put_get, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_replace_accounting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_replace_in_place, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_new_pages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_drop_pin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_recount, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_drop_keeps_session_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_put_parts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_states, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_partial_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_victim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_objects_and_move, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions_touch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stat, setup, teardown),
		cmocka_unit_test_setup_teardown(test_object_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_g4_upgrade_queries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_g4_session_objects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_g4_victim_prepared, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_readonly, setup, teardown),
	};

	kvt_log_set_level(KVT_LOG_ERR);
	if (getenv("KVT_TEST_FILTER"))	/* e.g. "test_reclaim_*" */
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
