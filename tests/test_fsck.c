/*
 * test_fsck.c - fsck beside live writers and reclaim.
 *
 * `kvtier fsck` runs next to a live gateway and mount: objects are written,
 * overwritten, renamed, pinned and deleted, and reclaim frees and reuses
 * segments, all while it checks. It must report nothing that is not wrong,
 * and its repair must touch nothing that is right. Here child processes (a
 * store of their own each, opened after fork) churn a small store of 1 MiB
 * segments, one of them reclaiming all the time, while the parent runs
 * fsck over and over, with and without repair: every pass must find the
 * store clean and repair nothing, and afterwards every object the writers
 * left must read back as they wrote it.
 *
 * The other side: real damage is still found beside the writers. One byte
 * of a quiet object's extent is flipped on the device while the writers
 * churn (without reclaim pressure here, which would drop the object as
 * cache): fsck reports it, and repair removes that object and only it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "store.h"

#define BUCKET "churn"
#define QUIET "quiet"
#define NKEYS 24
#define CHURN_SECONDS 6

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The seed a version's bytes come from: its key and length say it all, so
 * any read of a key can be checked without knowing who wrote it last. */
static uint64_t version_seed(const char *key, size_t len)
{
	uint64_t h = 1469598103934665603ull ^ len;

	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

/* Puts len bytes of key's version of that length. */
static int put_version(struct kvt_store *st, const char *key, size_t len, unsigned flags)
{
	struct kvt_put_opts opts = { .flags = flags };

	return test_put_opts(st, BUCKET, key, len, version_seed(key, len), &opts);
}

/* 0 if key reads back whole as the version its size names, -ENOENT if it
 * is gone (dropped or deleted), -ESTALE if reclaimed under the read, else
 * -EBADMSG or the read's error. */
static int check_version(struct kvt_store *st, const char *key)
{
	static unsigned char got[256 * 1024], want[256 * 1024];
	struct kvt_reader *r = NULL;
	uint64_t off = 0, size, seed;
	int rc = kvt_reader_open(st, BUCKET, key, &r);

	if (rc < 0)
		return rc;
	size = kvt_reader_object(r)->size;
	seed = version_seed(key, (size_t)size);
	while (off < size) {
		ssize_t n = kvt_reader_pread(r, got, sizeof(got), off);

		if (n <= 0) {
			rc = n < 0 ? (int)n : -EBADMSG;
			break;
		}
		test_fill(want, (size_t)n, seed, off);
		if (memcmp(got, want, (size_t)n) != 0) {
			rc = -EBADMSG;
			break;
		}
		off += (uint64_t)n;
	}
	kvt_reader_close(r);
	return rc;
}

/*
 * A writer child: puts (1 byte to 1.6 MiB, so that some objects span two
 * segments; a few pinned, which reclaim relocates), overwrites, renames,
 * pins and unpins, deletes and reads back, until the deadline. With
 * `reclaim`, it also frees segments itself between operations. Exits 0, or
 * 1 after printing what went wrong.
 */
static int churn_child(struct test_env *env, unsigned id, double until, int reclaim)
{
	struct kvt_store *st = NULL;
	uint64_t s = 0x9E3779B97F4A7C15ull * (id + 1) ^ (uint64_t)getpid();
	unsigned long ops = 0, nospc = 0;
	char key[32], to[32];
	int rc;

	if (kvt_store_open(&env->cfg, 0, &st) < 0) {
		fprintf(stderr, "child %u: cannot open the store\n", id);
		return 1;
	}
	while (now_s() < until) {
		unsigned op = (unsigned)(rnd(&s) % 100);

		snprintf(key, sizeof(key), "k%02u", (unsigned)(rnd(&s) % NKEYS));
		if (op < 55) {
			size_t len = rnd(&s) % 8 == 0 ? (size_t)(rnd(&s) % (1600 * 1024))
						       : (size_t)(rnd(&s) % (200 * 1024)) + 1;
			/* Few pins, so that pinned objects never fill the store. */
			unsigned flags = rnd(&s) % 16 == 0 && len < 300 * 1024 ? KVT_PUT_PIN : 0;

			rc = put_version(st, key, len, flags);
			if (rc == -ENOSPC) {
				nospc++;
				rc = 0;
			}
		} else if (op < 65) {
			rc = kvt_object_delete(st, BUCKET, key);
		} else if (op < 72) {
			/* The bytes derive from the old name: the new one is never
			 * read back as a version of its own, only fsck checks it. */
			snprintf(to, sizeof(to), "r%02u", (unsigned)(rnd(&s) % NKEYS));
			rc = kvt_object_rename(st, BUCKET, key, to, 0);
		} else if (op < 76) {
			rc = kvt_object_pin(st, BUCKET, key, 0);
		} else if (op < 80 && reclaim) {
			rc = kvt_store_reclaim(st, 1);
			if (rc == -ENOSPC)
				rc = 0;	/* everything left was pinned at that moment */
		} else {
			rc = check_version(st, key);
			if (rc == -ESTALE)
				rc = 0;	/* reclaimed under the read: a miss */
		}
		if (rc == -ENOENT)
			rc = 0;		/* deleted, dropped or renamed by another */
		if (rc < 0) {
			fprintf(stderr, "child %u: operation %u on '%s' failed: %s\n", id, op, key,
				strerror(-rc));
			kvt_store_close(st);
			return 1;
		}
		ops++;
	}
	fprintf(stderr, "child %u: %lu operations (%lu ENOSPC)\n", id, ops, nospc);
	kvt_store_close(st);
	return 0;
}

/* A child that does nothing but reclaim, as the demoter of another process. */
static int reclaim_child(struct test_env *env, double until)
{
	struct kvt_store *st = NULL;
	unsigned long passes = 0;

	if (kvt_store_open(&env->cfg, 0, &st) < 0)
		return 1;
	while (now_s() < until) {
		int rc = kvt_store_reclaim(st, 2);

		if (rc < 0 && rc != -ENOSPC) {
			fprintf(stderr, "reclaimer: %s\n", strerror(-rc));
			kvt_store_close(st);
			return 1;
		}
		passes++;
		usleep(2000);
	}
	fprintf(stderr, "reclaimer: %lu passes\n", passes);
	kvt_store_close(st);
	return 0;
}

static pid_t spawn(struct test_env *env, unsigned id, double until, int kind)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(kind == 2 ? reclaim_child(env, until) : churn_child(env, id, until, kind));
	return pid;
}

static void reap(pid_t pid)
{
	int status = 0;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void report_zero(const struct kvt_fsck_report *rep, int rc, unsigned pass)
{
	if (rc != 0 || rep->checksum_errors || rep->header_errors || rep->catalog_errors ||
	    rep->repaired)
		fprintf(stderr, "fsck pass %u: rc %d, %llu checksum, %llu header, %llu catalog,"
			" %llu repaired\n", pass, rc, (unsigned long long)rep->checksum_errors,
			(unsigned long long)rep->header_errors,
			(unsigned long long)rep->catalog_errors, (unsigned long long)rep->repaired);
	assert_int_equal(rc, 0);
	assert_int_equal(rep->checksum_errors, 0);
	assert_int_equal(rep->header_errors, 0);
	assert_int_equal(rep->catalog_errors, 0);
	assert_int_equal(rep->repaired, 0);
}

/*
 * fsck, alternately checking and repairing, while two writers churn a
 * 16 MiB store of 1 MiB segments and a third process reclaims: not one
 * problem reported, nothing repaired, and after the churn every key reads
 * back as written.
 */
static void test_fsck_beside_churn(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_fsck_report rep;
	double until;
	unsigned pass = 0;
	uint64_t checked = 0;
	pid_t kids[3];
	char key[32];

	(void)state;
	test_env_init(&env, 16u << 20, 1u << 20);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	/* A store, its connections and its locks never cross a fork. */
	kvt_store_close(st);
	until = now_s() + CHURN_SECONDS;
	kids[0] = spawn(&env, 0, until, 1);
	kids[1] = spawn(&env, 1, until, 1);
	kids[2] = spawn(&env, 2, until, 2);
	st = test_store_open(&env);
	while (now_s() < until) {
		int rc = kvt_store_fsck(st, pass % 2 ? KVT_FSCK_REPAIR : 0, &rep);

		report_zero(&rep, rc, pass);
		checked += rep.extents_checked;
		pass++;
	}
	for (int i = 0; i < 3; i++)
		reap(kids[i]);
	fprintf(stderr, "%u fsck passes beside the churn, %llu extents checked\n", pass,
		(unsigned long long)checked);
	assert_true(pass >= 3);
	assert_true(checked > 0);
	/* Still clean at rest, and repair took nothing the writers had. */
	assert_int_equal(kvt_store_fsck(st, 0, &rep), 0);
	report_zero(&rep, 0, pass);
	for (unsigned k = 0; k < NKEYS; k++) {
		int rc;

		snprintf(key, sizeof(key), "k%02u", k);
		rc = check_version(st, key);
		assert_true(rc == 0 || rc == -ENOENT);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/* Inverts one byte of extent e's payload on the device (O_DIRECT when the
 * file system takes it, so that direct reads see it; else write + fsync). */
static void flip_payload(struct test_env *env, const struct cat_extent *e, uint64_t at)
{
	const uint64_t pos = e->offset + SEG_HEADER_SIZE + at;
	const uint64_t block = pos / SEG_ALIGN * SEG_ALIGN;
	unsigned char *blk = NULL;
	char path[600];
	int fd;

	snprintf(path, sizeof(path), "%s/segments/%06u", env->cfg.store.dir, e->segment);
	fd = open(path, O_RDWR | O_DIRECT);
	if (fd < 0) {
		assert_int_equal(errno, EINVAL);
		fd = open(path, O_RDWR);
	}
	assert_true(fd >= 0);
	assert_int_equal(posix_memalign((void **)&blk, SEG_ALIGN, SEG_ALIGN), 0);
	assert_int_equal(pread(fd, blk, SEG_ALIGN, (off_t)block), SEG_ALIGN);
	blk[pos - block] ^= 0xff;
	assert_int_equal(pwrite(fd, blk, SEG_ALIGN, (off_t)block), SEG_ALIGN);
	assert_int_equal(fsync(fd), 0);
	free(blk);
	close(fd);
}

/*
 * One flipped payload byte in a quiet object, flipped while two writers
 * churn another bucket of a store big enough that nothing is reclaimed:
 * fsck reports exactly that object, repair removes it and nothing else,
 * and the next passes are clean again.
 */
static void test_fsck_finds_damage_beside_churn(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_fsck_report rep;
	struct cat_object *co = NULL;
	struct cat_extent e;
	int64_t bucket_id;
	double until;
	pid_t kids[2];
	char key[32];
	int rc, found = 0;

	(void)state;
	/* Two writers for 4 s write well under 1 GiB: no reclaim, no drop. */
	test_env_init(&env, 1024u << 20, 8u << 20);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	assert_int_equal(kvt_bucket_create(st, QUIET), 0);
	for (unsigned i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "q%u", i);
		assert_int_equal(test_put(st, QUIET, key, 3000 + 70000 * i, 700 + i), 0);
	}
	kvt_store_close(st);
	until = now_s() + 4;
	kids[0] = spawn(&env, 0, until, 0);
	kids[1] = spawn(&env, 1, until, 0);
	st = test_store_open(&env);
	/* Clean while they run ... */
	rc = kvt_store_fsck(st, 0, &rep);
	report_zero(&rep, rc, 0);
	/* ... until q5 loses a byte. */
	assert_int_equal(store_bucket_id(st, QUIET, &bucket_id), 0);
	assert_int_equal(cat_object_get(store_cat(st), bucket_id, "q5", 1, &co), 0);
	assert_true(co->nextents >= 1);
	e = co->extents[0];
	cat_object_free(co);
	flip_payload(&env, &e, 777);
	for (int pass = 0; pass < 3 && now_s() < until; pass++) {
		rc = kvt_store_fsck(st, 0, &rep);
		assert_int_equal(rc, 1);
		assert_int_equal(rep.checksum_errors, 1);
		assert_int_equal(rep.header_errors, 0);
		assert_int_equal(rep.catalog_errors, 0);
		assert_int_equal(rep.repaired, 0);
		found++;
	}
	assert_true(found >= 1);
	rc = kvt_store_fsck(st, KVT_FSCK_REPAIR, &rep);
	assert_int_equal(rc, 0);
	assert_int_equal(rep.checksum_errors, 1);
	assert_int_equal(rep.repaired, 1);
	rc = kvt_store_fsck(st, 0, &rep);
	report_zero(&rep, rc, 1);
	for (int i = 0; i < 2; i++)
		reap(kids[i]);
	for (unsigned i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "q%u", i);
		assert_int_equal(test_check(st, QUIET, key, 3000 + 70000 * i, 700 + i),
				 i == 5 ? -ENOENT : 0);
	}
	test_fsck_clean(st);
	kvt_store_close(st);
	test_env_release(&env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fsck_beside_churn),
		cmocka_unit_test(test_fsck_finds_damage_beside_churn),
	};

	/* KVT_TEST_FILTER=test_name runs one test (a cmocka pattern). */
	if (getenv("KVT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
