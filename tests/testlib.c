/*
 * testlib.c - scratch stores and deterministic payloads for the unit tests.
 */
#include "config.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

void test_env_init(struct test_env *env, uint64_t capacity, uint64_t segment_size)
{
	const char *tmp = getenv("TMPDIR");
	const char *io = getenv("KVT_TEST_IO");
	char data[300];

	snprintf(env->dir, sizeof(env->dir), "%s/kvtier-test-XXXXXX", tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(env->dir));
	snprintf(data, sizeof(data), "%s/data", env->dir);
	kvt_config_init(&env->cfg);
	free(env->cfg.store.dir);
	env->cfg.store.dir = strdup(data);
	env->cfg.store.capacity = capacity;
	env->cfg.store.segment_size = segment_size;
	if (io && strcmp(io, "sync") == 0)
		env->cfg.store.io = KVT_IO_SYNC;
	/* The hot tier alone, a pure cache node: with a cold tier, reclaim
	 * would demote session state instead of evicting it (reclaim.c).
	 * test_cold.c gives its stores a G4. */
	free(env->cfg.g4.url);
	env->cfg.g4.url = strdup("none");
}

void test_env_release(struct test_env *env)
{
	char cmd[400];

	kvt_config_release(&env->cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", env->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove '%s'\n", env->dir);
}

struct kvt_store *test_store_open(struct test_env *env)
{
	struct kvt_store *st = NULL;
	int rc = kvt_store_open(&env->cfg, KVT_OPEN_CREATE, &st);

	assert_int_equal(rc, 0);
	assert_non_null(st);
	return st;
}

/* Byte i of the stream is byte (off + i) % 8 of a mixed 64-bit word. */
static void test_fill_bytes(unsigned char *p, size_t len, uint64_t seed, uint64_t off)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (off + i) / 8 * 0x9E3779B97F4A7C15ull ^ seed * 0xBF58476D1CE4E5B9ull;

		x ^= x >> 31;
		x *= 0x94D049BB133111EBull;
		x ^= x >> 29;
		p[i] = (unsigned char)(x >> (((off + i) % 8) * 8));
	}
}

/* A word at a time where it can: several times faster in an -O0 build. */
void test_fill(void *buf, size_t len, uint64_t seed, uint64_t off)
{
	unsigned char *p = buf;
	size_t head = (size_t)((8 - off % 8) % 8);

	if (head > len)
		head = len;
	test_fill_bytes(p, head, seed, off);
	p += head;
	off += head;
	len -= head;
	for (; len >= 8; p += 8, off += 8, len -= 8) {
		uint64_t x = off / 8 * 0x9E3779B97F4A7C15ull ^ seed * 0xBF58476D1CE4E5B9ull;

		x ^= x >> 31;
		x *= 0x94D049BB133111EBull;
		x ^= x >> 29;
		for (int i = 0; i < 8; i++)
			p[i] = (unsigned char)(x >> (8 * i));
	}
	test_fill_bytes(p, len, seed, off);
}

int test_put(struct kvt_store *st, const char *bucket, const char *key,
	     size_t len, uint64_t seed)
{
	return test_put_opts(st, bucket, key, len, seed, NULL);
}

int test_put_opts(struct kvt_store *st, const char *bucket, const char *key,
		  size_t len, uint64_t seed, const struct kvt_put_opts *opts)
{
	struct kvt_writer *w = NULL;
	unsigned char chunk[65536];
	size_t done = 0;
	int rc = kvt_writer_open(st, bucket, key, opts, &w);

	if (rc < 0)
		return rc;
	while (done < len) {
		size_t n = len - done < sizeof(chunk) ? len - done : sizeof(chunk);

		test_fill(chunk, n, seed, done);
		rc = kvt_writer_write(w, chunk, n);
		if (rc < 0) {
			kvt_writer_abort(w);
			return rc;
		}
		done += n;
	}
	return kvt_writer_commit(w, NULL);
}

int test_check(struct kvt_store *st, const char *bucket, const char *key,
	       size_t len, uint64_t seed)
{
	struct kvt_reader *r = NULL;
	unsigned char got[65536], want[65536];
	uint64_t off = 0;
	int rc = kvt_reader_open(st, bucket, key, &r);

	if (rc < 0)
		return rc;
	if (kvt_reader_object(r)->size != len) {
		kvt_reader_close(r);
		return -EBADMSG;
	}
	while (off < len) {
		ssize_t n = kvt_reader_pread(r, got, sizeof(got), off);

		if (n <= 0) {
			kvt_reader_close(r);
			return n < 0 ? (int)n : -EBADMSG;
		}
		test_fill(want, n, seed, off);
		if (memcmp(got, want, n) != 0) {
			kvt_reader_close(r);
			return -EBADMSG;
		}
		off += n;
	}
	kvt_reader_close(r);
	return 0;
}

void test_fsck_clean(struct kvt_store *st)
{
	struct kvt_fsck_report rep;

	assert_int_equal(kvt_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.checksum_errors, 0);
	assert_int_equal(rep.header_errors, 0);
	assert_int_equal(rep.catalog_errors, 0);
}

/* ---- a SQLite VFS shim --------------------------------------------------------- */

static const struct test_vfs_hooks *tv_hooks;
static sqlite3_vfs tv_vfs, *tv_real;

#define TV(f) ((struct test_vfs_file *)(f))
#define TV_REAL(f) (TV(f)->real)

static int tv_close(sqlite3_file *f)
{
	return TV_REAL(f)->pMethods ? TV_REAL(f)->pMethods->xClose(TV_REAL(f)) : SQLITE_OK;
}

static int tv_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
	if (tv_hooks->read)
		return tv_hooks->read(TV(f), buf, amt, off);
	return TV_REAL(f)->pMethods->xRead(TV_REAL(f), buf, amt, off);
}

static int tv_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
	if (tv_hooks->write)
		return tv_hooks->write(TV(f), buf, amt, off);
	return TV_REAL(f)->pMethods->xWrite(TV_REAL(f), buf, amt, off);
}

static int tv_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	if (tv_hooks->truncate)
		return tv_hooks->truncate(TV(f), size);
	return TV_REAL(f)->pMethods->xTruncate(TV_REAL(f), size);
}

static int tv_sync(sqlite3_file *f, int flags)
{
	if (tv_hooks->sync)
		return tv_hooks->sync(TV(f), flags);
	return TV_REAL(f)->pMethods->xSync(TV_REAL(f), flags);
}

static int tv_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	if (tv_hooks->file_size)
		return tv_hooks->file_size(TV(f), size);
	return TV_REAL(f)->pMethods->xFileSize(TV_REAL(f), size);
}

static int tv_file_control(sqlite3_file *f, int op, void *arg)
{
	int rc = tv_hooks->file_control ? tv_hooks->file_control(TV(f), op, arg) : SQLITE_NOTFOUND;

	return rc != SQLITE_NOTFOUND ? rc : TV_REAL(f)->pMethods->xFileControl(TV_REAL(f), op, arg);
}

static int tv_lock(sqlite3_file *f, int l)
{
	return TV_REAL(f)->pMethods->xLock(TV_REAL(f), l);
}

static int tv_unlock(sqlite3_file *f, int l)
{
	return TV_REAL(f)->pMethods->xUnlock(TV_REAL(f), l);
}

static int tv_check_reserved(sqlite3_file *f, int *out)
{
	return TV_REAL(f)->pMethods->xCheckReservedLock(TV_REAL(f), out);
}

static int tv_sector_size(sqlite3_file *f)
{
	return TV_REAL(f)->pMethods->xSectorSize(TV_REAL(f));
}

static int tv_device_characteristics(sqlite3_file *f)
{
	return TV_REAL(f)->pMethods->xDeviceCharacteristics(TV_REAL(f));
}

static int tv_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **out)
{
	return TV_REAL(f)->pMethods->xShmMap(TV_REAL(f), pg, sz, extend, out);
}

static int tv_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
	return TV_REAL(f)->pMethods->xShmLock(TV_REAL(f), off, n, flags);
}

static void tv_shm_barrier(sqlite3_file *f)
{
	TV_REAL(f)->pMethods->xShmBarrier(TV_REAL(f));
}

static int tv_shm_unmap(sqlite3_file *f, int del)
{
	return TV_REAL(f)->pMethods->xShmUnmap(TV_REAL(f), del);
}

static const sqlite3_io_methods tv_methods = {
	.iVersion = 2,
	.xClose = tv_close,
	.xRead = tv_read,
	.xWrite = tv_write,
	.xTruncate = tv_truncate,
	.xSync = tv_sync,
	.xFileSize = tv_file_size,
	.xLock = tv_lock,
	.xUnlock = tv_unlock,
	.xCheckReservedLock = tv_check_reserved,
	.xFileControl = tv_file_control,
	.xSectorSize = tv_sector_size,
	.xDeviceCharacteristics = tv_device_characteristics,
	.xShmMap = tv_shm_map,
	.xShmLock = tv_shm_lock,
	.xShmBarrier = tv_shm_barrier,
	.xShmUnmap = tv_shm_unmap,
};

static int tv_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags,
		   int *out_flags)
{
	struct test_vfs_file *p = TV(f);
	int rc;

	(void)vfs;
	p->real = (sqlite3_file *)(p + 1);
	p->flags = flags;
	p->fd = -1;
	p->base.pMethods = NULL;
	rc = tv_real->xOpen(tv_real, name, p->real, flags, out_flags);
	if (rc != SQLITE_OK)
		return rc;
	if (tv_hooks->opened)
		tv_hooks->opened(p, name);
	p->base.pMethods = &tv_methods;
	return SQLITE_OK;
}

static int tv_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	(void)vfs;
	if (tv_hooks->deleting)
		tv_hooks->deleting(name);
	return tv_real->xDelete(tv_real, name, sync_dir);
}

int test_vfs_register(const struct test_vfs_hooks *hooks)
{
	tv_real = sqlite3_vfs_find(NULL);
	if (!tv_real)
		return -1;
	tv_hooks = hooks;
	tv_vfs = *tv_real;
	tv_vfs.zName = "kvtier-test";
	tv_vfs.szOsFile = (int)sizeof(struct test_vfs_file) + tv_real->szOsFile;
	tv_vfs.xOpen = tv_open;
	tv_vfs.xDelete = tv_delete;
	return sqlite3_vfs_register(&tv_vfs, 1) == SQLITE_OK ? 0 : -1;
}

void test_catalog_exec(const struct test_env *env, const char *sql)
{
	char path[600];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/catalog.db", env->cfg.store.dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}
