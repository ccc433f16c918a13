/*
 * test_fault.c - the store under failing I/O (src/io_fault.c driven through
 * store_set_fault_plan): a write that fails, fills the device or comes back
 * short fails the put with a clear errno and publishes nothing (an overwrite
 * keeps its previous version); a read that fails or returns damaged bytes
 * fails the get with -EIO and never hands out the bytes; what was committed
 * before keeps reading back byte-exact, and the store keeps working once the
 * fault is spent or the plan removed. Every test ends with a clean fsck.
 *
 * The Nth write (read) is moved over every position of a multi-extent put
 * (get), and past its end so that the fault fires in a later request.
 *
 * The catalog's own I/O fails through a SQLite VFS shim (the last section):
 * a put, delete, rename or copy whose catalog write fails reports -EIO and
 * changes nothing, or (the fault landed in bookkeeping it can do without,
 * such as sealing a segment) succeeds whole; a sync whose fsync fails says
 * so; an open whose catalog read fails reports -EIO and holds nothing.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "store.h"

#define BUCKET "fault"
#define BIG (5u * SEG_PAYLOAD_MAX + 1000u)	/* six extents */
#define SMALL 3000u			/* one extent */
#define TWO (SEG_PAYLOAD_MAX + 1000u)	/* two extents */
/*
 * Six extents, the last one's middle byte in its payload: a CORRUPT read
 * flips the byte at the middle of the extent it reads, and a flip that lands
 * in the padding (as for a 5 MiB object, whose last extent holds 320 bytes)
 * is rightly not an error.
 */
#define RBIG (5u * SEG_PAYLOAD_MAX + 500000u)

/* Extents (and so device writes) a put of len bytes takes. */
static unsigned extents_of(size_t len)
{
	return len == 0 ? 0 : (unsigned)((len + SEG_PAYLOAD_MAX - 1) / SEG_PAYLOAD_MAX);
}

static int put_through(struct kvt_store *st, const char *key, size_t len, uint64_t seed,
		       unsigned flags);
static int get_whole(struct kvt_store *st, const char *key, size_t len, uint64_t seed);

struct fixture {
	struct test_env env;
	struct kvt_store *st;
	struct io_fault_plan plan;	/* installed by the tests; outlives every context */
};

/* Objects committed before any fault: they must survive every test. */
static const struct {
	const char *key;
	size_t len;
	uint64_t seed;
} base[] = {
	{ "base/empty", 0, 1 },
	{ "base/small", 100, 2 },
	{ "base/page", 4096 - 64, 3 },
	{ "base/two", SEG_PAYLOAD_MAX + 1, 4 },
	{ "base/big", 3 * 1024 * 1024 + 17, 5 },
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	test_env_init(&f->env, 64u << 20, 4u << 20);
	f->st = test_store_open(&f->env);
	assert_int_equal(kvt_bucket_create(f->st, BUCKET), 0);
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		assert_int_equal(put_through(f->st, base[i].key, base[i].len, base[i].seed, 0), 0);
	*state = f;
	return 0;
}

static void check_base(struct kvt_store *st)
{
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		assert_int_equal(get_whole(st, base[i].key, base[i].len, base[i].seed), 0);
}

/* Deletes every object outside base/: what a test left behind. */
static void remove_extras(struct kvt_store *st)
{
	struct kvt_list_opts opts = { .limit = 1000 };
	struct kvt_list *l = NULL;

	assert_int_equal(kvt_object_list(st, BUCKET, &opts, &l), 0);
	for (size_t i = 0; i < l->nobjects; i++)
		if (strncmp(l->objects[i]->key, "base/", 5) != 0)
			assert_int_equal(kvt_object_delete(st, BUCKET, l->objects[i]->key), 0);
	assert_false(l->truncated);
	kvt_list_free(l);
}

/*
 * After each test: whatever it did, the plan goes, the base objects are
 * whole, fsck is clean, no failed writer kept a segment open, nothing was
 * evicted, and the store reopens to the same state. One store serves every
 * test (making one writes all its segments: it is not cheap).
 */
static int check_after(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stat s;

	store_set_fault_plan(f->st, NULL);
	remove_extras(f->st);
	check_base(f->st);
	test_fsck_clean(f->st);
	assert_int_equal(kvt_store_stat(f->st, &s), 0);
	assert_true(s.segments_open <= 1);
	assert_int_equal(s.evicted_objects, 0);
	assert_int_equal(s.objects, sizeof(base) / sizeof(base[0]));
	kvt_store_close(f->st);
	f->st = test_store_open(&f->env);
	assert_int_equal(kvt_store_stat(f->st, &s), 0);
	assert_int_equal(s.segments_open, 0);
	check_base(f->st);
	test_fsck_clean(f->st);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvt_store_close(f->st);
	test_env_release(&f->env);
	free(f);
	return 0;
}

static void plan_set(struct fixture *f, enum io_fault_kind kind, enum io_op op,
		     unsigned long nth, int sticky)
{
	/* Drop the old plan's contexts before its counters are reset. */
	store_set_fault_plan(f->st, NULL);
	memset(&f->plan, 0, sizeof(f->plan));
	f->plan.kind = kind;
	f->plan.ops = 1u << op;
	f->plan.nth = nth;
	f->plan.sticky = sticky;
	store_set_fault_plan(f->st, &f->plan);
}

/*
 * A put that goes on to commit even after a write failed: the commit must
 * then fail with the same error. Returns the first error, or 0.
 */
static int put_through(struct kvt_store *st, const char *key, size_t len, uint64_t seed,
		       unsigned flags)
{
	struct kvt_put_opts opts = { .flags = flags };
	struct kvt_writer *w = NULL;
	static unsigned char chunk[200000];	/* not a divisor of an extent */
	size_t done = 0;
	int rc, wrc = 0;

	rc = kvt_writer_open(st, BUCKET, key, &opts, &w);
	if (rc < 0)
		return rc;
	while (done < len) {
		size_t n = len - done < sizeof(chunk) ? len - done : sizeof(chunk);

		test_fill(chunk, n, seed, done);
		rc = kvt_writer_write(w, chunk, n);
		if (rc < 0 && wrc == 0)
			wrc = rc;
		if (rc < 0) {
			/* A failed writer keeps failing, with the same error. */
			assert_int_equal(kvt_writer_write(w, chunk, n), wrc);
			break;
		}
		done += n;
	}
	rc = kvt_writer_commit(w, NULL);
	if (wrc < 0)
		assert_int_equal(rc, wrc);
	return rc;
}

/* Reads bucket/key whole in one pread (all its extents at once). */
static int get_whole(struct kvt_store *st, const char *key, size_t len, uint64_t seed)
{
	static unsigned char *got, *want;	/* big enough for any object here */
	struct kvt_reader *r = NULL;
	ssize_t n;
	int rc;

	assert_true(len <= RBIG);
	if (!got) {
		got = malloc(RBIG + 1);
		want = malloc(RBIG + 1);
		assert_non_null(got);
		assert_non_null(want);
	}
	rc = kvt_reader_open(st, BUCKET, key, &r);
	if (rc < 0)
		goto out;
	if (kvt_reader_object(r)->size != len) {
		rc = -EBADMSG;
		goto out;
	}
	got[len] = 0xa5;
	n = kvt_reader_pread(r, got, len + 1, 0);
	if (n < 0) {
		rc = (int)n;
		goto out;
	}
	test_fill(want, len, seed, 0);
	rc = (size_t)n == len && got[len] == 0xa5 && memcmp(got, want, len) == 0 ? 0 : -EBADMSG;
out:
	kvt_reader_close(r);
	return rc;
}

static int absent(struct kvt_store *st, const char *key)
{
	struct kvt_object *o = NULL;
	int rc = kvt_object_head(st, BUCKET, key, &o);

	kvt_object_free(o);
	return rc == -ENOENT;
}

static uint64_t checksum_failures(struct kvt_store *st)
{
	struct kvt_store_stat s;

	assert_int_equal(kvt_store_stat(st, &s), 0);
	return s.checksum_failures;
}

/* ---- write faults ---------------------------------------------------------- */

/*
 * For every position nth: a 5 MiB overwrite with the nth write failing. While
 * nth falls inside the put, the put fails with `want` and the key keeps its
 * previous version; past it, the put succeeds and single-extent puts follow
 * until the fault fires, in exactly the put it was aimed at. Then, plan
 * spent but installed, and plan removed, puts work again.
 */
static void write_fault_sweep(struct fixture *f, enum io_fault_kind kind, int want,
			      unsigned long max_nth)
{
	struct kvt_store *st = f->st;
	const unsigned per_put = extents_of(BIG);
	uint64_t seed = 1000 * (uint64_t)kind;
	char key[64];

	assert_int_equal(per_put, 6);
	assert_int_equal(test_put(st, BUCKET, "ow", BIG, seed), 0);
	for (unsigned long nth = 1; nth <= max_nth; nth++) {
		uint64_t cur = seed;
		int rc;

		plan_set(f, kind, IO_WRITE, nth, 0);
		rc = put_through(st, "ow", BIG, seed + nth, 0);
		if (nth <= per_put) {
			assert_int_equal(rc, want);
			assert_int_equal(f->plan.injected, 1);
			/* The overwrite left the previous version whole. */
			assert_int_equal(get_whole(st, "ow", BIG, cur), 0);
			/* A new key that fails is not there at all. */
			plan_set(f, kind, IO_WRITE, nth, 0);
			snprintf(key, sizeof(key), "new/%d/%lu", kind, nth);
			assert_int_equal(put_through(st, key, BIG, seed + 500 + nth, 0), want);
			assert_true(absent(st, key));
		} else {
			assert_int_equal(rc, 0);
			assert_int_equal(f->plan.injected, 0);
			cur = seed + nth;
			/* Each small put is one write: the fault lands in put nth - per_put. */
			for (unsigned long i = per_put + 1; i <= nth; i++) {
				snprintf(key, sizeof(key), "small/%d/%lu/%lu", kind, nth, i);
				rc = put_through(st, key, SMALL, i, 0);
				if (i < nth) {
					assert_int_equal(rc, 0);
					assert_int_equal(kvt_object_delete(st, BUCKET, key), 0);
				} else {
					assert_int_equal(rc, want);
					assert_true(absent(st, key));
				}
			}
			assert_int_equal(f->plan.injected, 1);
		}
		assert_int_equal(get_whole(st, "ow", BIG, cur), 0);
		/* The fault is spent but the plan still installed: puts work. */
		snprintf(key, sizeof(key), "after/%d/%lu", kind, nth);
		assert_int_equal(put_through(st, key, TWO, 7, 0), 0);
		assert_int_equal(get_whole(st, key, TWO, 7), 0);
		assert_int_equal(kvt_object_delete(st, BUCKET, key), 0);
		/* And with the plan removed. */
		store_set_fault_plan(st, NULL);
		assert_int_equal(put_through(st, key, TWO, 8, 0), 0);
		assert_int_equal(get_whole(st, key, TWO, 8), 0);
		assert_int_equal(kvt_object_delete(st, BUCKET, key), 0);
		seed = cur;
		check_base(st);
	}
	assert_int_equal(kvt_object_delete(st, BUCKET, "ow"), 0);
}

static void test_write_eio_sweep(void **state)
{
	write_fault_sweep(*state, IO_FAULT_EIO, -EIO, 20);
}

static void test_write_enospc_sweep(void **state)
{
	write_fault_sweep(*state, IO_FAULT_ENOSPC, -ENOSPC, 8);
}

/* A short write is an error (-EIO), never a silently short object. */
static void test_write_short_sweep(void **state)
{
	write_fault_sweep(*state, IO_FAULT_SHORT, -EIO, 8);
}

/* Short writes of extents under 8 KiB: the O_DIRECT backend transfers all
 * of it and only reports it short; the writer must trust res. */
static void test_write_short_small(void **state)
{
	struct fixture *f = *state;
	static const size_t lens[] = { 1, 63, 64, 4000, 4032, 4033, 8000 };

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		char key[32];

		snprintf(key, sizeof(key), "short/%zu", lens[i]);
		plan_set(f, IO_FAULT_SHORT, IO_WRITE, 1, 0);
		assert_int_equal(put_through(f->st, key, lens[i], i, 0), -EIO);
		assert_true(absent(f->st, key));
		assert_int_equal(put_through(f->st, key, lens[i], i, 0), 0);
		assert_int_equal(get_whole(f->st, key, lens[i], i), 0);
	}
	check_base(f->st);
}

/*
 * The last extent of a put without an MD5 is submitted by the wait for it,
 * in one system call; only extents with more to do while they are written
 * (the next buffer to fill, the MD5 to compute) are pushed ahead of it.
 */
static void test_write_pushes(void **state)
{
	struct fixture *f = *state;

	plan_set(f, IO_FAULT_NONE, IO_WRITE, 0, 0);
	assert_int_equal(put_through(f->st, "push/small", SMALL, 1, 0), 0);
	assert_int_equal(f->plan.calls, 1);
	assert_int_equal(f->plan.pushes, 0);
	assert_int_equal(put_through(f->st, "push/md5", SMALL, 2, KVT_PUT_MD5_ETAG), 0);
	assert_int_equal(f->plan.pushes, 1);
	assert_int_equal(put_through(f->st, "push/big", BIG, 3, 0), 0);
	assert_int_equal(f->plan.calls, 2 + extents_of(BIG));
	assert_int_equal(f->plan.pushes, 1 + extents_of(BIG) - 1);
	assert_int_equal(get_whole(f->st, "push/small", SMALL, 1), 0);
	assert_int_equal(get_whole(f->st, "push/md5", SMALL, 2), 0);
	assert_int_equal(get_whole(f->st, "push/big", BIG, 3), 0);
}

/* Every write fails from the nth on, until the plan goes. */
static void test_write_sticky(void **state)
{
	struct fixture *f = *state;
	static const enum io_fault_kind kinds[] = { IO_FAULT_EIO, IO_FAULT_ENOSPC, IO_FAULT_SHORT };
	static const int want[] = { -EIO, -ENOSPC, -EIO };

	for (size_t k = 0; k < 3; k++) {
		plan_set(f, kinds[k], IO_WRITE, 3, 1);
		assert_int_equal(put_through(f->st, "sticky/a", SMALL, 1, 0), 0);
		assert_int_equal(put_through(f->st, "sticky/b", SMALL, 2, 0), 0);
		for (int i = 0; i < 5; i++) {
			assert_int_equal(put_through(f->st, "sticky/a", BIG, 10 + i, 0), want[k]);
			assert_int_equal(put_through(f->st, "sticky/c", SMALL, 20 + i, 0), want[k]);
			assert_int_equal(put_through(f->st, "sticky/e", 0, 0, 0), 0); /* no bytes, no write */
		}
		assert_true(f->plan.injected >= 10);
		/* Reads do not go through the write plan. */
		assert_int_equal(get_whole(f->st, "sticky/a", SMALL, 1), 0);
		assert_int_equal(get_whole(f->st, "sticky/b", SMALL, 2), 0);
		assert_true(absent(f->st, "sticky/c"));
		check_base(f->st);
		store_set_fault_plan(f->st, NULL);
		assert_int_equal(put_through(f->st, "sticky/a", BIG, 30, 0), 0);
		assert_int_equal(put_through(f->st, "sticky/c", SMALL, 31, 0), 0);
		assert_int_equal(get_whole(f->st, "sticky/a", BIG, 30), 0);
		assert_int_equal(get_whole(f->st, "sticky/c", SMALL, 31), 0);
		assert_int_equal(kvt_object_delete(f->st, BUCKET, "sticky/a"), 0);
		assert_int_equal(kvt_object_delete(f->st, BUCKET, "sticky/b"), 0);
		assert_int_equal(kvt_object_delete(f->st, BUCKET, "sticky/c"), 0);
		assert_int_equal(kvt_object_delete(f->st, BUCKET, "sticky/e"), 0);
	}
}

/* A failed write under IF_NONE_MATCH leaves the key free for the next one. */
static void test_write_fault_if_none_match(void **state)
{
	struct fixture *f = *state;

	plan_set(f, IO_FAULT_EIO, IO_WRITE, 2, 0);
	assert_int_equal(put_through(f->st, "inm", BIG, 1, KVT_PUT_IF_NONE_MATCH), -EIO);
	assert_true(absent(f->st, "inm"));
	assert_int_equal(put_through(f->st, "inm", BIG, 2, KVT_PUT_IF_NONE_MATCH), 0);
	assert_int_equal(put_through(f->st, "inm", SMALL, 3, KVT_PUT_IF_NONE_MATCH), -EEXIST);
	assert_int_equal(get_whole(f->st, "inm", BIG, 2), 0);
	assert_int_equal(kvt_object_delete(f->st, BUCKET, "inm"), 0);
}

/*
 * A write corrupted on its way to the media reports success: the put
 * commits, but the damage is caught on every read and by fsck, and repair
 * removes the object.
 */
static void test_write_corrupt(void **state)
{
	struct fixture *f = *state;
	struct kvt_fsck_report rep;
	uint64_t before = checksum_failures(f->st);

	plan_set(f, IO_FAULT_CORRUPT, IO_WRITE, 2, 0);
	assert_int_equal(put_through(f->st, "wc", BIG, 9, 0), 0);
	store_set_fault_plan(f->st, NULL);
	assert_int_equal(get_whole(f->st, "wc", BIG, 9), -EIO);
	assert_int_equal(test_check(f->st, BUCKET, "wc", BIG, 9), -EIO);
	assert_true(checksum_failures(f->st) > before);
	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);
	assert_true(rep.checksum_errors >= 1);
	assert_int_equal(kvt_store_fsck(f->st, KVT_FSCK_REPAIR, &rep), 0);
	assert_true(rep.repaired >= 1);
	assert_true(absent(f->st, "wc"));
	check_base(f->st);
}

/* ---- read faults ----------------------------------------------------------- */

/*
 * For every position nth: a whole read of a 6-extent object with the nth
 * read failing. Inside the read it fails with `want` (and a CORRUPT read
 * counts a checksum failure, once per extent: rd/one's only the first
 * time); past it, single-extent reads follow until the
 * fault fires. The output buffer never receives the failed extent's bytes.
 */
static void read_fault_sweep(struct fixture *f, enum io_fault_kind kind, unsigned long max_nth)
{
	struct kvt_store *st = f->st;
	const unsigned per_get = extents_of(RBIG);

	assert_int_equal(per_get, 6);
	assert_int_equal(put_through(st, "rd/big", RBIG, 77, 0), 0);
	assert_int_equal(put_through(st, "rd/one", 300000, 78, 0), 0);
	for (unsigned long nth = 1; nth <= max_nth; nth++) {
		uint64_t fails = checksum_failures(st);

		plan_set(f, kind, IO_READ, nth, 0);
		if (nth <= per_get) {
			assert_int_equal(get_whole(st, "rd/big", RBIG, 77), -EIO);
		} else {
			assert_int_equal(get_whole(st, "rd/big", RBIG, 77), 0);
			for (unsigned long i = per_get + 1; i <= nth; i++)
				assert_int_equal(get_whole(st, "rd/one", 300000, 78),
						 i < nth ? 0 : -EIO);
		}
		assert_int_equal(f->plan.injected, 1);
		if (kind == IO_FAULT_CORRUPT)
			assert_int_equal(checksum_failures(st), fails + (nth <= per_get + 1));
		/* Spent but installed, then removed: reads are whole again. */
		assert_int_equal(get_whole(st, "rd/big", RBIG, 77), 0);
		assert_int_equal(get_whole(st, "rd/one", 300000, 78), 0);
		store_set_fault_plan(st, NULL);
		assert_int_equal(get_whole(st, "rd/big", RBIG, 77), 0);
		/* Nothing on disk was touched. */
		if (kind != IO_FAULT_CORRUPT)
			assert_int_equal(checksum_failures(st), fails);
	}
	check_base(st);
	/* And writes were never affected. */
	assert_int_equal(put_through(st, "rd/one", SMALL, 79, 0), 0);
	assert_int_equal(get_whole(st, "rd/one", SMALL, 79), 0);
	assert_int_equal(kvt_object_delete(st, BUCKET, "rd/one"), 0);
	assert_int_equal(kvt_object_delete(st, BUCKET, "rd/big"), 0);
}

static void test_read_eio_sweep(void **state)
{
	read_fault_sweep(*state, IO_FAULT_EIO, 12);
}

static void test_read_short_sweep(void **state)
{
	read_fault_sweep(*state, IO_FAULT_SHORT, 8);
}

static void test_read_corrupt_sweep(void **state)
{
	read_fault_sweep(*state, IO_FAULT_CORRUPT, 12);
}

/*
 * A range read that fails leaves the caller's buffer as it was: with one
 * extent per object, no byte of a damaged read reaches it. Every 64 KiB
 * range of a big object is read with a fault on its first read.
 */
static void test_read_fault_ranges(void **state)
{
	struct fixture *f = *state;
	static const enum io_fault_kind kinds[] = { IO_FAULT_EIO, IO_FAULT_SHORT, IO_FAULT_CORRUPT };
	const size_t len = 2 * SEG_PAYLOAD_MAX + 12345;
	unsigned char *buf = malloc(65536), *want = malloc(65536);
	struct kvt_reader *r = NULL;

	assert_non_null(buf);
	assert_non_null(want);
	assert_int_equal(put_through(f->st, "rg", len, 5, 0), 0);
	for (size_t k = 0; k < 3; k++) {
		for (uint64_t off = 0; off < len; off += 65536 + 4093) {
			size_t n = len - off < 65536 ? len - off : 65536;
			int spans = off / SEG_PAYLOAD_MAX != (off + n - 1) / SEG_PAYLOAD_MAX;

			assert_int_equal(kvt_reader_open(f->st, BUCKET, "rg", &r), 0);
			plan_set(f, kinds[k], IO_READ, 1, 0);
			memset(buf, 0x5a, 65536);
			assert_int_equal(kvt_reader_pread(r, buf, n, off), -EIO);
			/* Only a range over two extents may have copied the good one. */
			if (!spans)
				for (size_t i = 0; i < n; i++)
					assert_int_equal(buf[i], 0x5a);
			/* The same reader reads the range once the fault is spent. */
			assert_int_equal(kvt_reader_pread(r, buf, n, off), (ssize_t)n);
			test_fill(want, n, 5, off);
			assert_memory_equal(buf, want, n);
			kvt_reader_close(r);
			r = NULL;
		}
	}
	store_set_fault_plan(f->st, NULL);
	assert_int_equal(kvt_object_delete(f->st, BUCKET, "rg"), 0);
	free(buf);
	free(want);
}

/* Every read fails from the nth on; nothing else is affected. */
static void test_read_sticky(void **state)
{
	struct fixture *f = *state;
	static const enum io_fault_kind kinds[] = { IO_FAULT_EIO, IO_FAULT_SHORT, IO_FAULT_CORRUPT };

	/* A flip in the padding (the middle of a 4 KiB extent holding 100 bytes)
	 * damages nothing the object owns: the read succeeds. */
	plan_set(f, IO_FAULT_CORRUPT, IO_READ, 1, 1);
	assert_int_equal(get_whole(f->st, "base/small", 100, 2), 0);
	assert_int_equal(f->plan.injected, 1);

	for (size_t k = 0; k < 3; k++) {
		uint64_t fails = checksum_failures(f->st);

		plan_set(f, kinds[k], IO_READ, 2, 1);
		assert_int_equal(get_whole(f->st, "base/small", 100, 2), 0);
		for (int i = 0; i < 4; i++) {
			assert_int_equal(get_whole(f->st, "base/big", base[4].len, 5), -EIO);
			assert_int_equal(get_whole(f->st, "base/two", base[3].len, 4), -EIO);
		}
		/* Writes still work while reads fail. */
		assert_int_equal(put_through(f->st, "rs", BIG, 3, 0), 0);
		assert_int_equal(get_whole(f->st, "rs", BIG, 3), -EIO);
		if (kinds[k] == IO_FAULT_CORRUPT)
			assert_true(checksum_failures(f->st) > fails);	/* rs is new */
		store_set_fault_plan(f->st, NULL);
		assert_int_equal(get_whole(f->st, "rs", BIG, 3), 0);
		check_base(f->st);
	}
	assert_int_equal(kvt_object_delete(f->st, BUCKET, "rs"), 0);
}

/* fsck under read faults reports damage it cannot see past, and is clean after. */
static void test_fsck_under_read_fault(void **state)
{
	struct fixture *f = *state;
	struct kvt_fsck_report rep;

	plan_set(f, IO_FAULT_EIO, IO_READ, 1, 1);
	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);
	assert_true(rep.checksum_errors + rep.header_errors >= 1);
	assert_int_equal(rep.catalog_errors, 0);
	store_set_fault_plan(f->st, NULL);
	test_fsck_clean(f->st);
}

/* ---- catalog faults: a VFS under SQLite ---------------------------------------- */

/*
 * The catalog's I/O goes through SQLite's VFS, the interface SQLite gives
 * for this (testlib's shim, test_vfs_register). These hooks fail the nth
 * read, write or sync of the catalog's database or WAL file made by the
 * thread that armed it: the store's flusher commits access times and
 * checkpoints on its own thread, at times no test chooses, and must not
 * take the fault.
 */
enum cf_op { CF_READ, CF_WRITE, CF_SYNC };

static struct {
	pthread_t thread;
	int armed;
	enum cf_op op;
	unsigned long countdown;
	unsigned injected;
} g_cf;

/* The other threads look at `armed` only: the rest is the arming thread's. */
static void cf_arm(enum cf_op op, unsigned long nth)
{
	g_cf.thread = pthread_self();
	g_cf.op = op;
	g_cf.countdown = nth;
	g_cf.injected = 0;
	__atomic_store_n(&g_cf.armed, 1, __ATOMIC_RELEASE);
}

static void cf_disarm(void)
{
	__atomic_store_n(&g_cf.armed, 0, __ATOMIC_RELEASE);
}

static int cf_fires(const struct test_vfs_file *f, enum cf_op op)
{
	if (!(f->flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL)) ||
	    !__atomic_load_n(&g_cf.armed, __ATOMIC_ACQUIRE) ||
	    !pthread_equal(g_cf.thread, pthread_self()) || g_cf.op != op || --g_cf.countdown > 0)
		return 0;
	cf_disarm();
	g_cf.injected++;
	return 1;
}

static int cf_read(struct test_vfs_file *f, void *buf, int amt, sqlite3_int64 off)
{
	if (cf_fires(f, CF_READ))
		return SQLITE_IOERR_READ;
	return f->real->pMethods->xRead(f->real, buf, amt, off);
}

static int cf_write(struct test_vfs_file *f, const void *buf, int amt, sqlite3_int64 off)
{
	if (cf_fires(f, CF_WRITE))
		return SQLITE_IOERR_WRITE;
	return f->real->pMethods->xWrite(f->real, buf, amt, off);
}

static int cf_sync(struct test_vfs_file *f, int flags)
{
	if (cf_fires(f, CF_SYNC))
		return SQLITE_IOERR_FSYNC;
	return f->real->pMethods->xSync(f->real, flags);
}

static const struct test_vfs_hooks cf_hooks = {
	.read = cf_read,
	.write = cf_write,
	.sync = cf_sync,
};

/*
 * Segments a failed seal left OPEN are recovered by the flusher's next
 * tick (store_seal): wait for at most 10 s.
 */
static void wait_unsealed_recovered(struct kvt_store *st)
{
	struct kvt_store_stat s;

	for (int i = 0; i < 1000; i++) {
		assert_int_equal(kvt_store_stat(st, &s), 0);
		if (s.segments_open <= 1)
			return;
		usleep(10000);
	}
	fail_msg("%llu segments stay open", (unsigned long long)s.segments_open);
}

/*
 * For every position nth: a two-extent overwrite during which the nth
 * catalog write of this thread fails. Where the fault lands in the put's
 * commit, the put fails with -EIO and the key keeps its previous version
 * whole; where it lands in a segment's seal, the put is not concerned and
 * succeeds. A new key whose commit fails is not there at all; the next put,
 * with nothing failing, works, with nothing to repair. The sweep ends at
 * the first put the fault no longer reaches.
 */
static void test_catalog_write_eio_sweep(void **state)
{
	struct fixture *f = *state;
	struct kvt_store *st = f->st;
	uint64_t cur = 9000;
	unsigned long nth, failed = 0;
	int rc;

	assert_int_equal(test_put(st, BUCKET, "cat/ow", TWO, cur), 0);
	for (nth = 1; nth < 1000; nth++) {
		cf_arm(CF_WRITE, nth);
		rc = put_through(st, "cat/ow", TWO, 9000 + nth, 0);
		cf_disarm();
		if (!g_cf.injected) {
			assert_int_equal(rc, 0);
			cur = 9000 + nth;
			break;
		}
		if (rc == 0) {
			cur = 9000 + nth;
		} else {
			assert_int_equal(rc, -EIO);
			failed++;
		}
		assert_int_equal(get_whole(st, "cat/ow", TWO, cur), 0);

		cf_arm(CF_WRITE, nth);
		rc = put_through(st, "cat/new", SMALL, nth, 0);
		cf_disarm();
		if (rc < 0) {
			assert_int_equal(rc, -EIO);
			assert_int_equal(g_cf.injected, 1);
			assert_true(absent(st, "cat/new"));
		} else {
			assert_int_equal(get_whole(st, "cat/new", SMALL, nth), 0);
			assert_int_equal(kvt_object_delete(st, BUCKET, "cat/new"), 0);
		}

		assert_int_equal(put_through(st, "cat/after", TWO, nth, 0), 0);
		assert_int_equal(get_whole(st, "cat/after", TWO, nth), 0);
		assert_int_equal(kvt_object_delete(st, BUCKET, "cat/after"), 0);
		check_base(st);
	}
	assert_true(nth > 1 && nth < 1000);
	assert_true(failed > 0);
	assert_int_equal(get_whole(st, "cat/ow", TWO, cur), 0);
	wait_unsealed_recovered(st);
}

/*
 * A change the catalog alone makes (delete, rename, copy): run with the
 * nth catalog write failing, for every nth until the change no longer meets
 * the fault. It fails with -EIO and the objects are as before, or it took
 * whole. `check` sees which (done) and then puts the objects back as
 * before the change.
 */
struct meta_op {
	int (*run)(struct kvt_store *st);
	void (*check)(struct kvt_store *st, int done);
};

static void meta_fault_sweep(struct fixture *f, const struct meta_op *op)
{
	struct kvt_store *st = f->st;
	unsigned long nth, failed = 0;
	int rc;

	op->check(st, 0);
	for (nth = 1; nth < 1000; nth++) {
		cf_arm(CF_WRITE, nth);
		rc = op->run(st);
		cf_disarm();
		if (rc < 0) {
			assert_int_equal(rc, -EIO);
			assert_int_equal(g_cf.injected, 1);
			failed++;
		} else {
			assert_int_equal(rc, 0);
		}
		op->check(st, rc == 0);
		if (!g_cf.injected)
			break;
	}
	assert_true(nth > 1 && nth < 1000);
	assert_true(failed > 0);
	wait_unsealed_recovered(st);
}

static int delete_run(struct kvt_store *st)
{
	return kvt_object_delete(st, BUCKET, "cat/del");
}

static void delete_check(struct kvt_store *st, int done)
{
	if (done) {
		assert_true(absent(st, "cat/del"));
		assert_int_equal(test_put(st, BUCKET, "cat/del", TWO, 77), 0);
	}
	assert_int_equal(get_whole(st, "cat/del", TWO, 77), 0);
}

/* cat/ra renamed over cat/rb, which it replaces. */
static int rename_run(struct kvt_store *st)
{
	return kvt_object_rename(st, BUCKET, "cat/ra", "cat/rb", 0);
}

static void rename_check(struct kvt_store *st, int done)
{
	if (done) {
		assert_true(absent(st, "cat/ra"));
		assert_int_equal(get_whole(st, "cat/rb", TWO, 79), 0);
		assert_int_equal(kvt_object_rename(st, BUCKET, "cat/rb", "cat/ra", 0), 0);
	} else if (absent(st, "cat/ra")) {
		assert_int_equal(test_put(st, BUCKET, "cat/ra", TWO, 79), 0);
	} else {
		assert_int_equal(get_whole(st, "cat/ra", TWO, 79), 0);
	}
	if (done || absent(st, "cat/rb"))
		assert_int_equal(test_put(st, BUCKET, "cat/rb", SMALL, 80), 0);
	assert_int_equal(get_whole(st, "cat/rb", SMALL, 80), 0);
}

/* cat/cs copied over cat/cd. */
static int copy_run(struct kvt_store *st)
{
	return kvt_object_copy(st, BUCKET, "cat/cs", BUCKET, "cat/cd", NULL, NULL);
}

static void copy_check(struct kvt_store *st, int done)
{
	if (absent(st, "cat/cs"))
		assert_int_equal(test_put(st, BUCKET, "cat/cs", TWO, 81), 0);
	assert_int_equal(get_whole(st, "cat/cs", TWO, 81), 0);
	if (done) {
		assert_int_equal(get_whole(st, "cat/cd", TWO, 81), 0);
		assert_int_equal(test_put(st, BUCKET, "cat/cd", SMALL, 82), 0);
	} else if (absent(st, "cat/cd")) {
		assert_int_equal(test_put(st, BUCKET, "cat/cd", SMALL, 82), 0);
	}
	assert_int_equal(get_whole(st, "cat/cd", SMALL, 82), 0);
}

static void test_catalog_delete_eio_sweep(void **state)
{
	static const struct meta_op op = { delete_run, delete_check };

	assert_int_equal(test_put(((struct fixture *)*state)->st, BUCKET, "cat/del", TWO, 77), 0);
	meta_fault_sweep(*state, &op);
}

static void test_catalog_rename_eio_sweep(void **state)
{
	static const struct meta_op op = { rename_run, rename_check };

	meta_fault_sweep(*state, &op);
}

static void test_catalog_copy_eio_sweep(void **state)
{
	static const struct meta_op op = { copy_run, copy_check };

	meta_fault_sweep(*state, &op);
}

/*
 * kvt_store_sync() whose catalog fsync fails reports it; the next one, and
 * the data, are fine.
 */
static void test_catalog_sync_eio(void **state)
{
	struct fixture *f = *state;
	struct kvt_store *st = f->st;

	assert_int_equal(test_put(st, BUCKET, "cat/sync", TWO, 78), 0);
	cf_arm(CF_SYNC, 1);
	assert_int_equal(kvt_store_sync(st), -EIO);
	cf_disarm();
	assert_int_equal(g_cf.injected, 1);
	assert_int_equal(kvt_store_sync(st), 0);
	assert_int_equal(get_whole(st, "cat/sync", TWO, 78), 0);
}

/*
 * Opening a store while its catalog's nth read fails: the open fails with
 * -EIO and leaves nothing behind, or (a read it makes again in its write
 * transaction) succeeds; either way the next open works and every object
 * reads back. The sweep ends at the first open the fault no longer reaches.
 */
static void test_catalog_open_read_eio_sweep(void **state)
{
	struct fixture *f = *state;
	struct kvt_store *st = NULL;
	unsigned long nth, failed = 0;
	int rc;

	for (nth = 1; nth < 1000; nth++) {
		kvt_store_close(f->st);
		f->st = NULL;
		cf_arm(CF_READ, nth);
		rc = kvt_store_open(&f->env.cfg, 0, &st);
		cf_disarm();
		if (rc < 0) {
			assert_int_equal(rc, -EIO);
			assert_int_equal(g_cf.injected, 1);
			assert_null(st);
			failed++;
			rc = kvt_store_open(&f->env.cfg, 0, &st);
		}
		assert_int_equal(rc, 0);
		f->st = st;
		st = NULL;
		check_base(f->st);
		if (!g_cf.injected)
			break;
	}
	assert_true(nth > 1 && nth < 1000);
	assert_true(failed > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_write_eio_sweep, check_after),
		cmocka_unit_test_teardown(test_write_enospc_sweep, check_after),
		cmocka_unit_test_teardown(test_write_short_sweep, check_after),
		cmocka_unit_test_teardown(test_write_short_small, check_after),
		cmocka_unit_test_teardown(test_write_sticky, check_after),
		cmocka_unit_test_teardown(test_write_pushes, check_after),
		cmocka_unit_test_teardown(test_write_fault_if_none_match, check_after),
		cmocka_unit_test_teardown(test_write_corrupt, check_after),
		cmocka_unit_test_teardown(test_read_eio_sweep, check_after),
		cmocka_unit_test_teardown(test_read_short_sweep, check_after),
		cmocka_unit_test_teardown(test_read_corrupt_sweep, check_after),
		cmocka_unit_test_teardown(test_read_fault_ranges, check_after),
		cmocka_unit_test_teardown(test_read_sticky, check_after),
		cmocka_unit_test_teardown(test_fsck_under_read_fault, check_after),
		cmocka_unit_test_teardown(test_catalog_write_eio_sweep, check_after),
		cmocka_unit_test_teardown(test_catalog_delete_eio_sweep, check_after),
		cmocka_unit_test_teardown(test_catalog_rename_eio_sweep, check_after),
		cmocka_unit_test_teardown(test_catalog_copy_eio_sweep, check_after),
		cmocka_unit_test_teardown(test_catalog_sync_eio, check_after),
		cmocka_unit_test_teardown(test_catalog_open_read_eio_sweep, check_after),
	};

	if (test_vfs_register(&cf_hooks) < 0)
		return 1;
	/* KVT_TEST_FILTER=test_name runs one test (a cmocka pattern). */
	if (getenv("KVT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
