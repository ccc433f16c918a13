/*
 * test_powerloss.c - power loss at random moments, then recovery.
 *
 * What the engine promises (kvtier.h, writer.c, catalog.c): a put is
 * visible when it commits; the catalog commits with synchronous = NORMAL,
 * so a commit survives a crash of the process but not necessarily a power
 * loss; kvt_store_sync() makes everything committed before it durable
 * against power loss (segments fdatasync'ed first, then a FULL commit).
 * So after a power loss:
 *
 *   - every change acknowledged before the last kvt_store_sync() that
 *     returned 0 is there (unless a later change to that key survived);
 *   - the catalog is the state after some prefix of the commits (SQLite's
 *     WAL keeps order), from that sync point up to the crash;
 *   - no read ever returns a wrong byte; an object committed after the last
 *     sync may have lost its bytes while its catalog row survived (nothing
 *     orders them without a sync): it then reads as -EIO, never as data,
 *     and `fsck --repair` removes it. An object covered by a sync must
 *     never be damaged, by anything the store does afterwards (reclaim
 *     relocating it, a checkpoint, recovery).
 *
 * Each round forks a child that registers a SQLite VFS shim as the
 * default VFS (the catalog's database and WAL) and opens the store with
 * the hot tier's I/O going through the same io_powerloss (io.h). It runs
 * random puts, overwrites, deletes, syncs and reads, reporting each step
 * over a pipe (intent, then done or failed), and the power goes off at a
 * random point: between operations, or in the middle of one (after a
 * random number of writes and syncs, in whichever thread). Unsynced writes
 * are then landed, dropped or torn at random; segments.map, which is never
 * synced and is rebuilt after a reboot, is garbled or truncated as a
 * reboot would leave it. The parent reopens the store with the real
 * backends and checks the list above, then fsck, then syncs, and the next
 * round starts from there.
 *
 * Every payload starts with a header naming its key and version and a hash
 * of the whole, and the ETag names the version, so that the parent knows
 * which version the catalog holds even when its bytes are gone.
 *
 * Rounds: KVT_POWERLOSS_ROUNDS or `-n ROUNDS` (default 300, or as many as
 * fit in 45 s, KVT_POWERLOSS_SECONDS, so that `make check` stays bounded on
 * a busy machine; -n lifts the time limit), seed: KVT_POWERLOSS_SEED or
 * `-s SEED` (default: time); a failing round prints its seed.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "store.h"

#define BUCKET "powerloss"
#define NKEYS 24
#define HDR 32
#define PL_MAGIC 0x4c50564bu	/* "KVPL" */

static unsigned g_rounds = 300;
static unsigned g_seconds = 45;	/* the suite's bound; 0: none */
static uint64_t g_seed;

/* ---- payloads --------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static uint64_t rnd(uint64_t *s)
{
	return mix64(*s += 0x9E3779B97F4A7C15ull);
}

static void key_name(char *buf, size_t len, unsigned key)
{
	snprintf(buf, len, "s%u/obj", key);
}

static void etag_of(char *buf, size_t len, unsigned key, uint64_t ver)
{
	snprintf(buf, len, "\"k%u-v%" PRIu64 "\"", key, ver);
}

/* The size of version ver of key: mostly small, some over one extent. */
static size_t payload_len(unsigned key, uint64_t ver)
{
	uint64_t r = mix64(ver * 131 + key);

	switch (r % 8) {
	case 0:
		return HDR + r % 64;
	case 1: case 2: case 3:
		return HDR + (r >> 8) % 16384;
	case 4: case 5: case 6:
		return HDR + (r >> 8) % (256 * 1024);
	default:
		return HDR + (r >> 8) % (1536 * 1024);
	}
}

/* Header: magic, key, version, length, hash of the rest and of these. */
static void payload_make(unsigned char *buf, unsigned key, uint64_t ver, size_t len)
{
	uint32_t magic = PL_MAGIC, k = key;
	uint64_t l = len, h;

	test_fill(buf + HDR, len - HDR, mix64(ver) ^ key, 0);
	memcpy(buf, &magic, 4);
	memcpy(buf + 4, &k, 4);
	memcpy(buf + 8, &ver, 8);
	memcpy(buf + 16, &l, 8);
	h = ((uint64_t)kvt_crc32c(0, buf, 24) << 32) | kvt_crc32c(0, buf + HDR, len - HDR);
	memcpy(buf + 24, &h, 8);
}

static unsigned char *g_want, *g_got;
#define MAX_PAYLOAD (HDR + 1536 * 1024)

/*
 * Reads key whole. 0: it is exactly version ver; -EBADMSG: bytes came back
 * that are not (a wrong byte); else the read's error.
 */
static int payload_check(struct kvt_store *st, unsigned key, uint64_t ver)
{
	struct kvt_reader *r = NULL;
	size_t len = payload_len(key, ver), got = 0;
	char name[32];
	int rc;

	key_name(name, sizeof(name), key);
	rc = kvt_reader_open(st, BUCKET, name, &r);
	if (rc < 0)
		return rc;
	if (kvt_reader_object(r)->size != len) {
		rc = -EBADMSG;
		goto out;
	}
	while (got < len) {
		ssize_t n = kvt_reader_pread(r, g_got + got, len - got, got);

		if (n <= 0) {
			rc = n < 0 ? (int)n : -EBADMSG;
			goto out;
		}
		got += (size_t)n;
	}
	payload_make(g_want, key, ver, len);
	rc = memcmp(g_want, g_got, len) == 0 ? 0 : -EBADMSG;
out:
	kvt_reader_close(r);
	return rc;
}

/* ---- the journal from child to parent ------------------------------------------ */

enum rec_type { R_PUT, R_DEL, R_SYNC, R_WRONG, R_CRASH };
enum rec_state { ST_INTENT, ST_DONE, ST_FAILED };

struct rec {
	uint8_t type, state;
	uint16_t key;
	uint32_t pad;
	uint64_t ver;
	struct io_powerloss_stats stats;	/* R_CRASH */
};

static int g_pipe = -1;

static void rec_send(enum rec_type type, enum rec_state state, unsigned key, uint64_t ver,
		     const struct io_powerloss_stats *stats)
{
	struct rec r = { .type = type, .state = state, .key = (uint16_t)key, .ver = ver };

	if (stats)
		r.stats = *stats;
	/* Under PIPE_BUF: one atomic write, even from two threads. */
	if (write(g_pipe, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(4);
}

/* ---- the catalog's side: a VFS over io_powerloss --------------------------------- */

static struct io_powerloss *g_pl;

/*
 * Descriptors are never closed: closing any descriptor of a file drops
 * every POSIX lock this process holds on it, SQLite's included.
 */
struct plv_path {
	char *path;
	int fd;
};
static struct plv_path g_paths[16];
static unsigned g_npaths;

static int plv_fd_of(const char *path)
{
	for (unsigned i = 0; i < g_npaths; i++)
		if (g_paths[i].path && strcmp(g_paths[i].path, path) == 0)
			return g_paths[i].fd;
	if (g_npaths == sizeof(g_paths) / sizeof(g_paths[0]))
		return -1;
	g_paths[g_npaths].fd = open(path, O_RDWR | O_CLOEXEC);
	if (g_paths[g_npaths].fd < 0)
		return -1;
	g_paths[g_npaths].path = strdup(path);
	return g_paths[g_npaths++].fd;
}

/* The database, its WAL and journal go through io_powerloss (f->fd); the
 * rest (the -shm file, locks) to the real files. */
static void plv_opened(struct test_vfs_file *f, const char *name)
{
	if (name && (f->flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL)))
		f->fd = plv_fd_of(name);
}

static int plv_read(struct test_vfs_file *f, void *buf, int amt, sqlite3_int64 off)
{
	ssize_t n;

	if (f->fd < 0)
		return f->real->pMethods->xRead(f->real, buf, amt, off);
	n = io_powerloss_pread(g_pl, f->fd, buf, (size_t)amt, (uint64_t)off);
	if (n < 0)
		return SQLITE_IOERR_READ;
	return n < amt ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

static int plv_write(struct test_vfs_file *f, const void *buf, int amt, sqlite3_int64 off)
{
	if (f->fd < 0)
		return f->real->pMethods->xWrite(f->real, buf, amt, off);
	return io_powerloss_pwrite(g_pl, f->fd, buf, (size_t)amt, (uint64_t)off) == amt ?
	       SQLITE_OK : SQLITE_IOERR_WRITE;
}

static int plv_truncate(struct test_vfs_file *f, sqlite3_int64 size)
{
	if (f->fd < 0)
		return f->real->pMethods->xTruncate(f->real, size);
	return io_powerloss_truncate(g_pl, f->fd, (uint64_t)size) == 0 ? SQLITE_OK
									 : SQLITE_IOERR_TRUNCATE;
}

static int plv_sync(struct test_vfs_file *f, int flags)
{
	if (f->fd < 0)
		return f->real->pMethods->xSync(f->real, flags);
	return io_powerloss_sync(g_pl, f->fd) == 0 ? SQLITE_OK : SQLITE_IOERR_FSYNC;
}

static int plv_file_size(struct test_vfs_file *f, sqlite3_int64 *size)
{
	uint64_t s;

	if (f->fd < 0)
		return f->real->pMethods->xFileSize(f->real, size);
	if (io_powerloss_size(g_pl, f->fd, &s) < 0)
		return SQLITE_IOERR_FSTAT;
	*size = (sqlite3_int64)s;
	return SQLITE_OK;
}

static int plv_file_control(struct test_vfs_file *f, int op, void *arg)
{
	(void)arg;
	/* The unix VFS would grow the real file itself, behind the cache's back. */
	if (f->fd >= 0 && (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_CHUNK_SIZE))
		return SQLITE_OK;
	return SQLITE_NOTFOUND;
}

static void plv_deleting(const char *name)
{
	for (unsigned i = 0; i < g_npaths; i++) {
		if (g_paths[i].path && strcmp(g_paths[i].path, name) == 0) {
			/* Its pending writes die with it; the next file by that name is new. */
			io_powerloss_forget(g_pl, g_paths[i].fd);
			free(g_paths[i].path);
			g_paths[i].path = NULL;
		}
	}
}

static const struct test_vfs_hooks plv_hooks = {
	.read = plv_read,
	.write = plv_write,
	.truncate = plv_truncate,
	.sync = plv_sync,
	.file_size = plv_file_size,
	.file_control = plv_file_control,
	.opened = plv_opened,
	.deleting = plv_deleting,
};

static void plv_register(void)
{
	if (test_vfs_register(&plv_hooks) < 0)
		_exit(5);
}

/* ---- the child: a workload until the power goes ------------------------------------ */

struct keystate {
	uint64_t ver;		/* 0: absent */
};

static struct keystate g_keys[NKEYS];
static uint64_t g_next_ver = 1;
static char g_mapfile[400];

/* A store thread touching segments.map's mapping after it was cut. */
static void child_sigbus(int sig)
{
	(void)sig;
	_exit(0);	/* the power is off already */
}

/*
 * The reboot after the crash: segments.map is never synced, so it may be
 * gone or hold any mix of old pages; either way its boot id is not this
 * boot's. Then the machine is off.
 */
static void child_power_off(void *arg, const struct io_powerloss_stats *stats)
{
	/* Once: the power may go in a store thread (a checkpoint's write) while
	 * the main thread turns it off too; the first one exits the process. */
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	uint64_t *rng = arg;
	int fd;

	pthread_mutex_lock(&once);
	if (stats)
		rec_send(R_CRASH, ST_DONE, 0, 0, stats);
	/* Other threads still run: one that reads the map after the ftruncate
	 * below gets SIGBUS (CI, round 7 of a run: cmocka's handler turned it
	 * into a failed child). That is the power going off too. */
	signal(SIGBUS, child_sigbus);
	fd = open(g_mapfile, O_RDWR | O_CLOEXEC);

	if (fd >= 0) {
		if (rnd(rng) & 1) {
			if (ftruncate(fd, 0) < 0)
				_exit(6);
		} else if (pwrite(fd, "powered-off-powered-off-powered-off-0000", 40, 16) != 40) {
			_exit(6);
		}
		close(fd);
	}
	_exit(0);
}

static void child_run(struct test_env *env, uint64_t seed)
{
	struct kvt_store *st = NULL;
	uint64_t rng = seed, armed_rng = seed ^ 0x5555;
	unsigned nops = 5 + (unsigned)(rnd(&rng) % 60), crash_at;
	struct io_powerloss_stats stats;
	int rc;

	plv_register();
	if (io_powerloss_new(rnd(&rng), &g_pl) < 0)
		_exit(2);
	/* Mid-operation crashes half the time, else between operations. */
	crash_at = (unsigned)(rnd(&rng) % (nops + 1));
	if (rnd(&rng) & 1) {
		io_powerloss_arm(g_pl, rnd(&rng) % (20 + 8 * nops), child_power_off, &armed_rng);
		crash_at = nops;
	}
	rc = kvt_store_open(&env->cfg, 0, &st);
	if (rc < 0)
		_exit(7);
	store_set_powerloss(st, g_pl);
	for (unsigned i = 0; i < nops && i < crash_at; i++) {
		unsigned key = (unsigned)(rnd(&rng) % NKEYS), r = (unsigned)(rnd(&rng) % 100);
		char name[32], etag[64];

		key_name(name, sizeof(name), key);
		if (r < 55) {
			uint64_t ver = g_next_ver++;
			size_t len = payload_len(key, ver);
			struct kvt_put_opts o = { .flags = KVT_PUT_PIN, .etag = etag };
			struct kvt_writer *w = NULL;

			etag_of(etag, sizeof(etag), key, ver);
			payload_make(g_want, key, ver, len);
			rec_send(R_PUT, ST_INTENT, key, ver, NULL);
			rc = kvt_writer_open(st, BUCKET, name, &o, &w);
			if (rc == 0) {
				rc = kvt_writer_write(w, g_want, len);
				if (rc == 0)
					rc = kvt_writer_commit(w, NULL);
				else
					kvt_writer_abort(w);
			}
			rec_send(R_PUT, rc == 0 ? ST_DONE : ST_FAILED, key, ver, NULL);
			if (rc == 0)
				g_keys[key].ver = ver;
		} else if (r < 70) {
			rec_send(R_DEL, ST_INTENT, key, 0, NULL);
			rc = kvt_object_delete(st, BUCKET, name);
			rec_send(R_DEL, rc == 0 ? ST_DONE : ST_FAILED, key, 0, NULL);
			if (rc == 0)
				g_keys[key].ver = 0;
		} else if (r < 85) {
			rec_send(R_SYNC, ST_INTENT, 0, 0, NULL);
			rc = kvt_store_sync(st);
			rec_send(R_SYNC, rc == 0 ? ST_DONE : ST_FAILED, 0, 0, NULL);
		} else if (g_keys[key].ver) {
			/* Before the power goes, the cache must read back what was written. */
			rc = payload_check(st, key, g_keys[key].ver);
			if (rc == -EBADMSG)
				rec_send(R_WRONG, ST_DONE, key, g_keys[key].ver, NULL);
		}
	}
	io_powerloss_crash(g_pl, &stats);
	child_power_off(&armed_rng, &stats);
}

/* ---- the parent: what the disk must hold ------------------------------------------- */

struct totals {
	unsigned long rounds, ops, syncs, mid_op, pending, landed, dropped, torn;
	unsigned long damaged_unsynced, repaired, wrong, lost, reclaimed;
};

struct change {
	unsigned key;
	uint64_t ver;		/* 0: a delete */
};

/* The version of key after the first n changes, from `base`. */
static uint64_t state_after(const struct keystate *base, const struct change *ch, size_t n,
			    unsigned key)
{
	uint64_t v = base[key].ver;

	for (size_t i = 0; i < n; i++)
		if (ch[i].key == key)
			v = ch[i].ver;
	return v;
}

static int version_of(struct kvt_store *st, unsigned key, uint64_t *ver)
{
	struct kvt_object *obj = NULL;
	char name[32];
	unsigned k;
	int rc;

	key_name(name, sizeof(name), key);
	rc = kvt_object_head(st, BUCKET, name, &obj);
	if (rc == -ENOENT) {
		*ver = 0;
		return 0;
	}
	if (rc < 0)
		return rc;
	rc = sscanf(obj->etag, "\"k%u-v%" SCNu64 "\"", &k, ver) == 2 && k == key ? 0 : -EBADMSG;
	kvt_object_free(obj);
	return rc;
}

/* A post-mortem of a damaged synced object: where the catalog says it is. */
static int dump_segment(void *arg, const struct cat_segment *sg)
{
	(void)arg;
	fprintf(stderr, "  segment %u: state %d gen %llu live %llu used %llu\n", sg->id, sg->state,
		(unsigned long long)sg->gen, (unsigned long long)sg->live,
		(unsigned long long)sg->used);
	return 0;
}

static void dump_object(struct kvt_store *st, unsigned key)
{
	struct cat_object *co = NULL;
	char name[32];
	int64_t bid;

	key_name(name, sizeof(name), key);
	if (store_bucket_id(st, BUCKET, &bid) < 0 || cat_object_get(store_cat(st), bid, name, 1, &co) < 0)
		return;
	for (size_t i = 0; i < co->nextents; i++)
		fprintf(stderr, "  extent %zu: segment %u gen %llu offset %llu length %u (map gen %llu)\n",
			i, co->extents[i].segment, (unsigned long long)co->extents[i].gen,
			(unsigned long long)co->extents[i].offset, co->extents[i].length,
			(unsigned long long)seg_map_gen(st->sf, co->extents[i].segment));
	cat_object_free(co);
	cat_segment_list(store_cat(st), dump_segment, NULL);
}

static void parent_check(struct test_env *env, uint64_t seed, const struct rec *log, size_t nlog,
			 struct totals *t)
{
	struct change ch[512];
	size_t nch = 0, durable = 0;
	int in_doubt = 0, crashed = 0;
	uint64_t seen[NKEYS];
	struct kvt_store *st = NULL;
	struct kvt_fsck_report rep;
	size_t cut;
	int rc, damaged = 0;

	/*
	 * Changes that may have committed, in order: every done one, and one
	 * in flight at the crash. `durable` counts those acknowledged before
	 * the start of the last sync that returned 0.
	 */
	for (size_t i = 0, sync_start = 0; i < nlog; i++) {
		const struct rec *r = &log[i];

		if (r->type == R_WRONG) {
			fprintf(stderr, "seed %" PRIu64 ": wrong bytes read before the crash, key %u\n",
				seed, r->key);
			t->wrong++;
		}
		if (r->type == R_CRASH) {
			crashed = 1;
			t->pending += r->stats.pending;
			t->landed += r->stats.landed;
			t->dropped += r->stats.dropped;
			t->torn += r->stats.torn;
		}
		if (r->type == R_SYNC && r->state == ST_INTENT)
			sync_start = nch;
		if (r->type == R_SYNC && r->state == ST_DONE) {
			durable = sync_start;
			t->syncs++;
		}
		if (r->type != R_PUT && r->type != R_DEL)
			continue;
		/* The child's counter starts from ours: versions stay unique over rounds. */
		if (r->ver >= g_next_ver)
			g_next_ver = r->ver + 1;
		if (r->state == ST_INTENT) {
			t->ops++;
			assert_true(nch < sizeof(ch) / sizeof(ch[0]));
			ch[nch++] = (struct change){ r->key, r->type == R_PUT ? r->ver : 0 };
			in_doubt = 1;
		} else {
			in_doubt = 0;
			if (r->state == ST_FAILED)
				nch--;
		}
	}
	assert_true(crashed);
	if (in_doubt)
		t->mid_op++;

	rc = kvt_store_open(&env->cfg, 0, &st);
	if (rc < 0)
		fprintf(stderr, "seed %" PRIu64 ": cannot reopen the store: %s\n", seed, strerror(-rc));
	assert_int_equal(rc, 0);
	for (unsigned k = 0; k < NKEYS; k++) {
		rc = version_of(st, k, &seen[k]);
		if (rc < 0)
			fprintf(stderr, "seed %" PRIu64 ": key %u: head: %s\n", seed, k, strerror(-rc));
		assert_int_equal(rc, 0);
	}
	/* The catalog is the state after some prefix of the changes, not before the sync. */
	for (cut = durable; cut <= nch; cut++) {
		unsigned k;

		for (k = 0; k < NKEYS; k++)
			if (state_after(g_keys, ch, cut, k) != seen[k])
				break;
		if (k == NKEYS)
			break;
	}
	if (cut > nch) {
		fprintf(stderr, "seed %" PRIu64 ": the catalog is no prefix of the changes from %zu of %zu:",
			seed, durable, nch);
		for (unsigned k = 0; k < NKEYS; k++)
			fprintf(stderr, " k%u=v%" PRIu64 "(synced v%" PRIu64 ")", k, seen[k],
				state_after(g_keys, ch, durable, k));
		fprintf(stderr, "\n");
		t->lost++;
	}
	assert_true(cut <= nch);
	/* Every byte read is right; what cannot be read was never synced. */
	for (unsigned k = 0; k < NKEYS; k++) {
		int synced;

		if (!seen[k])
			continue;
		rc = payload_check(st, k, seen[k]);
		if (rc == 0)
			continue;
		synced = state_after(g_keys, ch, durable, k) == seen[k];
		if (rc == -EBADMSG) {
			t->wrong++;
			fprintf(stderr, "seed %" PRIu64 ": key %u version %" PRIu64 ": wrong bytes\n",
				seed, k, seen[k]);
		} else if (synced) {
			t->lost++;
			fprintf(stderr, "seed %" PRIu64 ": key %u version %" PRIu64
				" was synced and reads as: %s\n", seed, k, seen[k], strerror(-rc));
			dump_object(st, k);
		} else {
			damaged++;
		}
		assert_int_not_equal(rc, -EBADMSG);
		assert_false(synced);
	}
	t->damaged_unsynced += (unsigned long)damaged;
	/* fsck finds exactly the damage, repair removes it, and then it is clean. */
	memset(&rep, 0, sizeof(rep));
	rc = kvt_store_fsck(st, 0, &rep);
	if (rc != (damaged ? 1 : 0))
		fprintf(stderr, "seed %" PRIu64 ": fsck returned %d with %d damaged objects\n", seed, rc,
			damaged);
	assert_int_equal(rc, damaged ? 1 : 0);
	if (damaged) {
		memset(&rep, 0, sizeof(rep));
		assert_int_equal(kvt_store_fsck(st, KVT_FSCK_REPAIR, &rep), 0);
		t->repaired += rep.repaired;
		memset(&rep, 0, sizeof(rep));
		assert_int_equal(kvt_store_fsck(st, 0, &rep), 0);
		for (unsigned k = 0; k < NKEYS; k++)
			assert_int_equal(version_of(st, k, &seen[k]), 0);
	}
	for (unsigned k = 0; k < NKEYS; k++)
		g_keys[k].ver = seen[k];
	{
		struct kvt_store_stat ss;

		assert_int_equal(kvt_store_stat(st, &ss), 0);
		t->reclaimed = ss.reclaimed_segments;
	}
	/* The next round starts from a durable state. */
	assert_int_equal(kvt_store_sync(st), 0);
	kvt_store_close(st);
}

static void test_powerloss_rounds(void **state)
{
	struct test_env env;
	struct totals t = { 0 };
	struct kvt_store *st;
	time_t start = time(NULL);

	(void)state;
	g_want = malloc(MAX_PAYLOAD);
	g_got = malloc(MAX_PAYLOAD);
	assert_non_null(g_want);
	assert_non_null(g_got);
	test_env_init(&env, 12u << 20, 1u << 20);
	/*
	 * Rounds alternate the backends (below): with the page cache one
	 * (sync), a sync covers every segment file; with O_DIRECT (uring),
	 * only those this process wrote (kvt_store_sync()), which must then
	 * be all that holds unsynced writes. The simulated cache sits in
	 * io_powerloss either way.
	 */
	env.cfg.store.io = KVT_IO_SYNC;
	/* Access times and checkpoints often, so that the power also goes during them. */
	env.cfg.store.access_flush_ms = 5;
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	assert_int_equal(kvt_store_sync(st), 0);
	kvt_store_close(st);
	snprintf(g_mapfile, sizeof(g_mapfile), "%s/segments.map", env.cfg.store.dir);

	for (unsigned round = 0; round < g_rounds; round++) {
		if (g_seconds && round >= 20 && time(NULL) - start >= g_seconds)
			break;
		uint64_t seed = mix64(g_seed + round);
		struct rec log[1024];
		size_t nlog = 0;
		int fds[2], status;
		ssize_t n;
		pid_t pid;

		assert_int_equal(pipe(fds), 0);
		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(fds[0]);
			g_pipe = fds[1];
			env.cfg.store.io = round % 2 ? KVT_IO_URING : KVT_IO_SYNC;
			child_run(&env, seed);
			_exit(1);
		}
		close(fds[1]);
		while ((n = read(fds[0], &log[nlog], sizeof(log[0]))) > 0) {
			assert_int_equal(n, sizeof(log[0]));
			if (nlog + 1 < sizeof(log) / sizeof(log[0]))
				nlog++;
		}
		close(fds[0]);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fprintf(stderr, "round %u (seed %" PRIu64 "): child status %#x\n", round, seed,
				status);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		t.rounds++;
		parent_check(&env, seed, log, nlog, &t);
	}
	printf("power loss: %lu rounds in %ld s (seed %" PRIu64 "): %lu changes, %lu syncs, "
	       "%lu crashes in the middle of a change; unsynced writes at the crash %lu: "
	       "%lu landed, %lu dropped, %lu torn; unsynced objects damaged %lu (fsck repaired %lu); "
	       "segments reclaimed %lu; wrong bytes %lu; synced changes lost %lu\n",
	       t.rounds, (long)(time(NULL) - start), g_seed, t.ops, t.syncs, t.mid_op, t.pending,
	       t.landed, t.dropped, t.torn, t.damaged_unsynced, t.repaired, t.reclaimed, t.wrong, t.lost);
	assert_int_equal(t.wrong, 0);
	assert_int_equal(t.lost, 0);
	free(g_want);
	free(g_got);
	test_env_release(&env);
}

/* ---- one exact crash: reclaim, reuse, and a catalog that lost everything unsynced ---- */

static void reuse_child(struct test_env *env)
{
	struct io_powerloss *seg_pl = NULL;
	struct kvt_store *st = NULL;
	uint64_t rng = 1;

	plv_register();
	/* The catalog keeps only what was synced; the segments keep everything. */
	if (io_powerloss_new(1, &g_pl) < 0 || io_powerloss_new(2, &seg_pl) < 0)
		_exit(2);
	io_powerloss_set_policy(g_pl, IO_PL_DROP_ALL);
	io_powerloss_set_policy(seg_pl, IO_PL_LAND_ALL);
	if (kvt_store_open(&env->cfg, 0, &st) < 0)
		_exit(7);
	store_set_powerloss(st, seg_pl);
	for (unsigned i = 0; i < 40; i++) {
		/* Overwrites: garbage everywhere, so reclaim frees and the store reuses. */
		unsigned key = 1 + i % 3;
		uint64_t ver = 100 + i;
		size_t len = 600 * 1024;
		struct kvt_writer *w = NULL;
		char name[32], etag[64];
		struct kvt_put_opts o = { .etag = etag };

		key_name(name, sizeof(name), key);
		etag_of(etag, sizeof(etag), key, ver);
		payload_make(g_want, key, ver, len);
		if (kvt_writer_open(st, BUCKET, name, &o, &w) < 0)
			_exit(8);
		if (kvt_writer_write(w, g_want, len) < 0 || kvt_writer_commit(w, NULL) < 0)
			_exit(9);
		if (i % 4 == 3)
			kvt_store_reclaim(st, 3);
	}
	{
		struct kvt_store_stat ss;

		/* The scenario happened: segments were reclaimed, so reused. */
		if (kvt_store_stat(st, &ss) < 0 || ss.reclaimed_segments < 4)
			_exit(10);
	}
	io_powerloss_crash(seg_pl, NULL);
	child_power_off(&rng, NULL);
}

/*
 * Regression: reclaim relocated a synced pinned object and freed its
 * segment without making the move durable, then new objects overwrote the
 * old extent. A power loss that kept the new bytes but lost the unsynced
 * catalog commits brought back the row of the old extent: the synced object
 * read as -EIO (before the fix, 'header names another object').
 */
static void test_reclaim_reuse_keeps_synced(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_fsck_report rep;
	struct kvt_put_opts o = { .flags = KVT_PUT_PIN };
	struct kvt_writer *w = NULL;
	char name[32], etag[64];
	size_t len = payload_len(0, 1);
	int fds[2], status;
	pid_t pid;

	(void)state;
	g_want = malloc(MAX_PAYLOAD);
	g_got = malloc(MAX_PAYLOAD);
	assert_non_null(g_want);
	assert_non_null(g_got);
	test_env_init(&env, 6u << 20, 1u << 20);
	env.cfg.store.io = KVT_IO_SYNC;
	/* No checkpoint: it would make catalog commits durable behind the test's back. */
	env.cfg.store.access_flush_ms = 86400000;
	snprintf(g_mapfile, sizeof(g_mapfile), "%s/segments.map", env.cfg.store.dir);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	key_name(name, sizeof(name), 0);
	etag_of(etag, sizeof(etag), 0, 1);
	o.etag = etag;
	payload_make(g_want, 0, 1, len);
	assert_int_equal(kvt_writer_open(st, BUCKET, name, &o, &w), 0);
	assert_int_equal(kvt_writer_write(w, g_want, len), 0);
	assert_int_equal(kvt_writer_commit(w, NULL), 0);
	assert_int_equal(kvt_store_sync(st), 0);
	kvt_store_close(st);

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		g_pipe = fds[1];
		reuse_child(&env);
		_exit(1);
	}
	close(fds[1]);
	while (read(fds[0], g_got, 4096) > 0)
		;
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);

	assert_int_equal(kvt_store_open(&env.cfg, 0, &st), 0);
	assert_int_equal(payload_check(st, 0, 1), 0);
	memset(&rep, 0, sizeof(rep));
	assert_int_equal(kvt_store_fsck(st, 0, &rep), 0);
	kvt_store_close(st);
	free(g_want);
	free(g_got);
	test_env_release(&env);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reclaim_reuse_keeps_synced),
		cmocka_unit_test(test_powerloss_rounds),
	};
	const char *env_rounds = getenv("KVT_POWERLOSS_ROUNDS");
	const char *env_seed = getenv("KVT_POWERLOSS_SEED");
	int opt;

	g_seed = (uint64_t)time(NULL);
	if (env_rounds)
		g_rounds = (unsigned)strtoul(env_rounds, NULL, 10);
	if (env_seed)
		g_seed = strtoull(env_seed, NULL, 10);
	if (getenv("KVT_POWERLOSS_SECONDS"))
		g_seconds = (unsigned)strtoul(getenv("KVT_POWERLOSS_SECONDS"), NULL, 10);
	while ((opt = getopt(argc, argv, "n:s:")) != -1) {
		if (opt == 'n') {
			g_rounds = (unsigned)strtoul(optarg, NULL, 10);
			g_seconds = 0;
		}
		else if (opt == 's')
			g_seed = strtoull(optarg, NULL, 10);
		else {
			fprintf(stderr, "usage: %s [-n ROUNDS] [-s SEED]\n", argv[0]);
			return 2;
		}
	}
	kvt_log_set_level(KVT_LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
