/*
 * testlib.h - what the engine's unit tests share: a scratch data directory
 * with a small configuration, and deterministic payloads.
 */
#ifndef KVT_TESTLIB_H
#define KVT_TESTLIB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "kvtier.h"

struct test_env {
	char dir[256];			/* removed by test_env_release */
	struct kvt_config cfg;		/* [store] dir = dir/data */
};

/*
 * A fresh directory under $TMPDIR (or /tmp) and a configuration with the
 * given capacity, segment size and I/O backend. KVT_TEST_IO=sync in the
 * environment forces the sync backend.
 */
void test_env_init(struct test_env *env, uint64_t capacity, uint64_t segment_size);
void test_env_release(struct test_env *env);

/* Opens (creating) the store of env; fails the test on error. */
struct kvt_store *test_store_open(struct test_env *env);

/* Deterministic bytes: the same (seed, off) always gives the same byte. */
void test_fill(void *buf, size_t len, uint64_t seed, uint64_t off);

/* Writes len bytes of test_fill(seed) as bucket/key; returns the commit rc. */
int test_put(struct kvt_store *st, const char *bucket, const char *key,
	     size_t len, uint64_t seed);
/* The same, with put options (flags, session, metadata); opts may be NULL. */
int test_put_opts(struct kvt_store *st, const char *bucket, const char *key,
		  size_t len, uint64_t seed, const struct kvt_put_opts *opts);

/* Reads bucket/key whole; 0 if it is len bytes of test_fill(seed), else rc or -EBADMSG. */
int test_check(struct kvt_store *st, const char *bucket, const char *key,
	       size_t len, uint64_t seed);

/* Fails the test unless fsck (no repair) finds every checksum, header and
 * catalog row of the store sound. */
void test_fsck_clean(struct kvt_store *st);

/* Runs SQL on env's catalog through a connection of its own (what another
 * process, or an older version of kvtier, would leave there). */
void test_catalog_exec(const struct test_env *env, const char *sql);

/*
 * A SQLite VFS around the real one, for tests that must control the
 * catalog's I/O (after SQLite's own test_vfs.c): each file method goes to
 * the real file unless the test's hook for it takes the call. A hook that
 * passes a call on calls f->real->pMethods itself. No xFetch: every page
 * SQLite reads is an xRead.
 */
struct test_vfs_file {
	sqlite3_file base;
	int flags;		/* the SQLITE_OPEN_* flags it was opened with */
	int fd;			/* the hooks' own use; -1 from the open */
	sqlite3_file *real;	/* the real VFS's file, which follows this struct */
};

struct test_vfs_hooks {
	int (*read)(struct test_vfs_file *f, void *buf, int amt, sqlite3_int64 off);
	int (*write)(struct test_vfs_file *f, const void *buf, int amt, sqlite3_int64 off);
	int (*truncate)(struct test_vfs_file *f, sqlite3_int64 size);
	int (*sync)(struct test_vfs_file *f, int flags);
	int (*file_size)(struct test_vfs_file *f, sqlite3_int64 *size);
	/* SQLITE_NOTFOUND: the real file's xFileControl answers. */
	int (*file_control)(struct test_vfs_file *f, int op, void *arg);
	/* After the real open succeeded, with the name it opened. */
	void (*opened)(struct test_vfs_file *f, const char *name);
	/* Before the real xDelete of name. */
	void (*deleting)(const char *name);
};

/* Makes the shim, with these hooks, the default VFS: once per process,
 * before any catalog opens. 0, or -1 if SQLite refused. */
int test_vfs_register(const struct test_vfs_hooks *hooks);

#endif /* KVT_TESTLIB_H */
