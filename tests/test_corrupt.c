/*
 * test_corrupt.c - bytes damaged on the device, behind the store's back.
 *
 * One byte of a segment file is flipped with a plain pwrite (then fsync, so
 * that O_DIRECT reads see it): in an extent's payload every read that
 * touches its chunk (SEG_CHUNK bytes, each with its own checksum) fails with
 * -EIO, even a range that does not cover the flipped byte, and so does every
 * read of the extent's first chunk after a flip in its header; reads of the
 * extent's other chunks still succeed (test_chunk_flip). No damaged byte
 * reaches the caller, the failure is counted, and fsck reports it; repair
 * removes the object and leaves a clean store. A flip in the padding after the
 * payload damages nothing the object owns and must not fail a read. Other
 * objects are never affected, and flipping the byte back heals the object
 * (nothing is cached as failed).
 *
 * The catalog's own pages can be damaged too (test_catalog_page_damaged):
 * what meets such a page fails with -EUCLEAN, and fsck says so first. And
 * segments.map (test_segment_map_ahead): fsck names it and the cure.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "store.h"

#define BUCKET "corrupt"

struct fixture {
	struct test_env env;
	struct kvt_store *st;
};

/* Objects besides the victims, some sharing their segments. */
static const struct {
	const char *key;
	size_t len;
	uint64_t seed;
} others[] = {
	{ "other/empty", 0, 11 },
	{ "other/small", 1000, 12 },
	{ "other/three", 2 * SEG_PAYLOAD_MAX + 4321, 13 },
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	test_env_init(&f->env, 16u << 20, 4u << 20);
	f->st = test_store_open(&f->env);
	assert_int_equal(kvt_bucket_create(f->st, BUCKET), 0);
	*state = f;
	return 0;
}

static void put_others(struct kvt_store *st)
{
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		assert_int_equal(test_put(st, BUCKET, others[i].key, others[i].len, others[i].seed), 0);
}

static void check_others(struct kvt_store *st)
{
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		assert_int_equal(test_check(st, BUCKET, others[i].key, others[i].len, others[i].seed), 0);
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	struct kvt_store_stat s;

	/* Nothing was evicted behind the tests' backs: every miss was theirs. */
	assert_int_equal(kvt_store_stat(f->st, &s), 0);
	assert_int_equal(s.evicted_objects, 0);

	kvt_store_close(f->st);
	test_env_release(&f->env);
	free(f);
	return 0;
}

/* Where extent seq of bucket/key lies, from the catalog. */
static struct cat_extent locate(struct kvt_store *st, const char *key, uint32_t seq)
{
	struct cat_object *co = NULL;
	struct cat_extent e;
	int64_t bucket_id;

	assert_int_equal(store_bucket_id(st, BUCKET, &bucket_id), 0);
	assert_int_equal(cat_object_get(store_cat(st), bucket_id, key, 1, &co), 0);
	assert_true(seq < co->nextents);
	e = co->extents[seq];
	assert_int_equal(e.seq, seq);
	cat_object_free(co);
	return e;
}

/*
 * Inverts byte `at` (from the start of extent e's header) in its segment
 * file. The store may read with O_DIRECT, so the byte must be on the
 * device, not only in the page cache: the flip is an O_DIRECT
 * read-modify-write of the 4 KiB block around it (which also drops any
 * cached copy for a store reading through the page cache), or where the
 * file system refuses O_DIRECT, a buffered write and fsync.
 */
static void flip(struct fixture *f, const struct cat_extent *e, uint64_t at)
{
	const uint64_t pos = e->offset + at;
	char path[600];
	unsigned char *blk = NULL;
	int fd;

	assert_true(at < seg_extent_space(e->length));
	snprintf(path, sizeof(path), "%s/segments/%06u", f->env.cfg.store.dir, e->segment);
	fd = open(path, O_RDWR | O_DIRECT);
	if (fd >= 0) {
		const uint64_t block = pos / SEG_ALIGN * SEG_ALIGN;

		assert_int_equal(posix_memalign((void **)&blk, SEG_ALIGN, SEG_ALIGN), 0);
		assert_int_equal(pread(fd, blk, SEG_ALIGN, (off_t)block), SEG_ALIGN);
		blk[pos - block] ^= 0xff;
		assert_int_equal(pwrite(fd, blk, SEG_ALIGN, (off_t)block), SEG_ALIGN);
		free(blk);
	} else {
		unsigned char b;

		assert_int_equal(errno, EINVAL);
		fd = open(path, O_RDWR);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, &b, 1, (off_t)pos), 1);
		b ^= 0xff;
		assert_int_equal(pwrite(fd, &b, 1, (off_t)pos), 1);
		assert_int_equal(fsync(fd), 0);
	}
	assert_int_equal(close(fd), 0);
}

static uint64_t checksum_failures(struct kvt_store *st)
{
	struct kvt_store_stat s;

	assert_int_equal(kvt_store_stat(st, &s), 0);
	return s.checksum_failures;
}

/*
 * kvt_reader_map() of the same range (what the gateway sends from) checks
 * the same: it fails as pread did (n < 0), or its iovecs hold the n bytes
 * pread returned (want).
 */
static void map_range(struct kvt_reader *r, uint64_t off, size_t len, ssize_t n,
		      const unsigned char *want)
{
	struct kvt_map *m = NULL;
	const struct iovec *iov;
	unsigned niov;
	size_t at = 0;
	int rc = kvt_reader_map(r, off, len, &m);

	if (n < 0) {
		assert_int_equal(rc, (int)n);
		assert_null(m);
		return;
	}
	assert_int_equal(rc, 0);
	iov = kvt_map_iov(m, &niov);
	for (unsigned i = 0; i < niov; i++) {
		assert_true(at + iov[i].iov_len <= (size_t)n);
		assert_memory_equal(iov[i].iov_base, want + at, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	assert_int_equal(at, (size_t)n);
	kvt_map_free(m);
}

/*
 * Reads [off, off + len) of key with a fresh reader into a buffer filled
 * with a sentinel. Returns the pread result; on failure the buffer may hold
 * the bytes of extents verified before the failure was seen (completions
 * come in any order), but no other byte than the sentinel or the object's.
 */
static ssize_t read_range(struct kvt_store *st, const char *key, uint64_t off, size_t len,
			  uint64_t seed, int check_on_error)
{
	struct kvt_reader *r = NULL;
	unsigned char *got = malloc(len ? len : 1), *want = malloc(len ? len : 1);
	ssize_t n;

	assert_non_null(got);
	assert_non_null(want);
	assert_int_equal(kvt_reader_open(st, BUCKET, key, &r), 0);
	memset(got, 0xc3, len);
	n = kvt_reader_pread(r, got, len, off);
	if (n >= 0) {
		test_fill(want, (size_t)n, seed, off);
		assert_memory_equal(got, want, (size_t)n);
	} else if (check_on_error) {
		test_fill(want, len, seed, off);
		for (size_t i = 0; i < len; i++)
			assert_true(got[i] == 0xc3 || got[i] == want[i]);
	}
	map_range(r, off, len, n, want);
	kvt_reader_close(r);
	free(got);
	free(want);
	return n;
}

/* ---- single-extent object ------------------------------------------------- */

#define ONE_LEN 10000u
#define ONE_SEED 7u

/* The victim alone first, so that it sits at the start of segment 0. */
static struct cat_extent put_one(struct fixture *f)
{
	struct cat_extent e;

	assert_int_equal(test_put(f->st, BUCKET, "victim", ONE_LEN, ONE_SEED), 0);
	put_others(f->st);
	e = locate(f->st, "victim", 0);
	assert_int_equal(e.segment, 0);
	assert_int_equal(e.offset, 0);
	assert_int_equal(e.length, ONE_LEN);
	return e;
}

/* Every read of a damaged single-extent object fails, whatever its range. */
static void expect_damaged_one(struct fixture *f)
{
	static const struct { uint64_t off; size_t len; } ranges[] = {
		{ 0, ONE_LEN }, { 0, 1 }, { 0, 100 }, { ONE_LEN - 1, 1 }, { 5000, 17 },
		{ 9000, 1000 }, { 0, 2 * ONE_LEN },
	};
	uint64_t before = checksum_failures(f->st);

	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		assert_int_equal(read_range(f->st, "victim", ranges[i].off, ranges[i].len,
					    ONE_SEED, 1), -EIO);
	assert_int_equal(test_check(f->st, BUCKET, "victim", ONE_LEN, ONE_SEED), -EIO);
	/* One damaged extent, counted once however often it is read. */
	assert_true(checksum_failures(f->st) >= 1);
	assert_true(checksum_failures(f->st) <= before + 1);
	check_others(f->st);
}

static void expect_whole_one(struct fixture *f)
{
	assert_int_equal(read_range(f->st, "victim", 0, ONE_LEN, ONE_SEED, 0), (ssize_t)ONE_LEN);
	assert_int_equal(read_range(f->st, "victim", 123, 456, ONE_SEED, 0), 456);
	assert_int_equal(test_check(f->st, BUCKET, "victim", ONE_LEN, ONE_SEED), 0);
}

static void test_payload_flip(void **state)
{
	struct fixture *f = *state;
	struct cat_extent e = put_one(f);
	/* First, middle and last payload bytes. */
	const uint64_t at[] = { SEG_HEADER_SIZE, SEG_HEADER_SIZE + 5000,
				SEG_HEADER_SIZE + ONE_LEN - 1 };

	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		flip(f, &e, at[i]);
		expect_damaged_one(f);
		flip(f, &e, at[i]);
		expect_whole_one(f);
	}
	test_fsck_clean(f->st);
}

/* Every byte of the header counts: it is covered by its own CRC. */
static void test_header_flip(void **state)
{
	struct fixture *f = *state;
	struct cat_extent e = put_one(f);

	for (uint64_t at = 0; at < SEG_HEADER_SIZE; at++) {
		flip(f, &e, at);
		assert_int_equal(read_range(f->st, "victim", 0, ONE_LEN, ONE_SEED, 1), -EIO);
		assert_int_equal(read_range(f->st, "victim", 4000, 10, ONE_SEED, 1), -EIO);
		flip(f, &e, at);
		assert_int_equal(read_range(f->st, "victim", 0, ONE_LEN, ONE_SEED, 0),
				 (ssize_t)ONE_LEN);
	}
	check_others(f->st);
	test_fsck_clean(f->st);
}

/* The padding after the payload is no byte of the object's. */
static void test_padding_flip(void **state)
{
	struct fixture *f = *state;
	struct cat_extent e = put_one(f);
	const uint64_t space = seg_extent_space(ONE_LEN);
	const uint64_t at[] = { SEG_HEADER_SIZE + ONE_LEN, SEG_HEADER_SIZE + ONE_LEN + 100,
				space - 1 };
	uint64_t before = checksum_failures(f->st);

	assert_true(SEG_HEADER_SIZE + ONE_LEN < space);
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		flip(f, &e, at[i]);
		expect_whole_one(f);
		test_fsck_clean(f->st);
	}
	assert_int_equal(checksum_failures(f->st), before);
	check_others(f->st);
}

/* The damage is on the device, not in a process: it survives a reopen. */
static void test_flip_survives_reopen(void **state)
{
	struct fixture *f = *state;
	struct cat_extent e = put_one(f);

	flip(f, &e, SEG_HEADER_SIZE + 1234);
	kvt_store_close(f->st);
	f->st = test_store_open(&f->env);
	expect_damaged_one(f);
	/* A copy of it fails and creates nothing. */
	assert_int_equal(kvt_object_copy(f->st, BUCKET, "victim", BUCKET, "copy", NULL, NULL), -EIO);
	{
		struct kvt_object *o = NULL;

		assert_int_equal(kvt_object_head(f->st, BUCKET, "copy", &o), -ENOENT);
	}
	flip(f, &e, SEG_HEADER_SIZE + 1234);
	expect_whole_one(f);
}

/* fsck finds the damage, repair removes the object and only it. */
static void fsck_and_repair(struct fixture *f, const char *key, int header)
{
	struct kvt_fsck_report rep;
	struct kvt_object *o = NULL;

	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);
	if (header)
		assert_true(rep.header_errors >= 1);
	else
		assert_true(rep.checksum_errors >= 1);
	assert_int_equal(rep.repaired, 0);
	/* Damage is no accounting error: the damaged object's extents still count. */
	assert_int_equal(rep.catalog_errors, 0);
	/* Checking changes nothing: still there, still failing. */
	assert_int_equal(kvt_object_head(f->st, BUCKET, key, &o), 0);
	kvt_object_free(o);
	o = NULL;

	assert_int_equal(kvt_store_fsck(f->st, KVT_FSCK_REPAIR, &rep), 0);
	assert_true(rep.repaired >= 1);
	assert_int_equal(kvt_object_head(f->st, BUCKET, key, &o), -ENOENT);
	test_fsck_clean(f->st);
	check_others(f->st);

	/* The key is usable again, and the store after a reopen is still clean. */
	assert_int_equal(test_put(f->st, BUCKET, key, 5555, 99), 0);
	assert_int_equal(test_check(f->st, BUCKET, key, 5555, 99), 0);
	kvt_store_close(f->st);
	f->st = test_store_open(&f->env);
	test_fsck_clean(f->st);
	check_others(f->st);
	assert_int_equal(test_check(f->st, BUCKET, key, 5555, 99), 0);
}

static void test_fsck_payload(void **state)
{
	struct fixture *f = *state;
	struct cat_extent e = put_one(f);

	flip(f, &e, SEG_HEADER_SIZE + 42);
	fsck_and_repair(f, "victim", 0);
}

static void test_fsck_header(void **state)
{
	struct fixture *f = *state;
	struct cat_extent e = put_one(f);

	flip(f, &e, 8);		/* inside the version id */
	fsck_and_repair(f, "victim", 1);
}

/* ---- multi-extent object ---------------------------------------------------- */

#define MULTI_LEN (3 * SEG_PAYLOAD_MAX - 1000)
#define MULTI_SEED 31u

/*
 * Damage in one extent of three fails only the reads that touch that
 * extent; reads of the others still succeed.
 */
static void multi_case(struct fixture *f, uint32_t bad, uint64_t at)
{
	struct cat_extent e;
	const uint64_t start = (uint64_t)bad * SEG_PAYLOAD_MAX;

	e = locate(f->st, "multi", bad);
	flip(f, &e, at);
	for (uint32_t x = 0; x < 3; x++) {
		uint64_t from = (uint64_t)x * SEG_PAYLOAD_MAX;
		ssize_t want_len = 4096;

		if (x == bad)
			assert_int_equal(read_range(f->st, "multi", from + 10, 4096, MULTI_SEED, 1),
					 -EIO);
		else
			assert_int_equal(read_range(f->st, "multi", from + 10, 4096, MULTI_SEED, 0),
					 want_len);
	}
	/* A range across the bad extent and a good one fails. */
	if (bad > 0)
		assert_int_equal(read_range(f->st, "multi", start - 100, 200, MULTI_SEED, 0), -EIO);
	assert_int_equal(read_range(f->st, "multi", 0, MULTI_LEN, MULTI_SEED, 0), -EIO);
	assert_int_equal(test_check(f->st, BUCKET, "multi", MULTI_LEN, MULTI_SEED), -EIO);
	flip(f, &e, at);
	assert_int_equal(test_check(f->st, BUCKET, "multi", MULTI_LEN, MULTI_SEED), 0);
}

/*
 * Damage in one chunk of a 1 MiB extent fails the reads that touch that
 * chunk, and only those: the chunks around it are read and verified alone.
 * An extent without chunk checksums in the catalog (written before they
 * were kept) is verified whole, as before: then every read of it fails.
 */
static void test_chunk_flip(void **state)
{
	struct fixture *f = *state;
	const uint64_t len = 2 * SEG_PAYLOAD_MAX, bad = 5 * SEG_CHUNK + 100;
	const uint64_t before = checksum_failures(f->st);
	struct kvt_fsck_report rep;
	struct cat_extent e;
	char sql[200];

	assert_int_equal(test_put(f->st, BUCKET, "chunky", len, 51), 0);
	e = locate(f->st, "chunky", 0);
	assert_int_equal(e.chunk0, SEG_CHUNK);
	assert_int_equal(e.nchunks, seg_chunks(SEG_PAYLOAD_MAX, SEG_CHUNK));
	flip(f, &e, SEG_HEADER_SIZE + bad);
	/* Other chunks of the damaged extent, and the next extent: served. */
	assert_int_equal(read_range(f->st, "chunky", 0, 100, 51, 0), 100);
	assert_int_equal(read_range(f->st, "chunky", 2 * SEG_CHUNK + 7, 4096, 51, 0), 4096);
	assert_int_equal(read_range(f->st, "chunky", 4 * SEG_CHUNK, SEG_CHUNK, 51, 0),
			 SEG_CHUNK);
	assert_int_equal(read_range(f->st, "chunky", 6 * SEG_CHUNK, 3 * SEG_CHUNK, 51, 0),
			 3 * SEG_CHUNK);
	assert_int_equal(read_range(f->st, "chunky", SEG_PAYLOAD_MAX + 10, 70000, 51, 0), 70000);
	assert_int_equal(checksum_failures(f->st), before);
	/* The damaged chunk, whether or not the range holds the flipped byte. */
	assert_int_equal(read_range(f->st, "chunky", bad, 1, 51, 1), -EIO);
	assert_int_equal(read_range(f->st, "chunky", 5 * SEG_CHUNK, 10, 51, 1), -EIO);
	assert_int_equal(read_range(f->st, "chunky", 6 * SEG_CHUNK - 1, 1, 51, 1), -EIO);
	assert_int_equal(read_range(f->st, "chunky", 4 * SEG_CHUNK + 5, SEG_CHUNK, 51, 1), -EIO);
	assert_int_equal(read_range(f->st, "chunky", 0, len, 51, 1), -EIO);
	assert_int_equal(test_check(f->st, BUCKET, "chunky", len, 51), -EIO);
	assert_int_equal(checksum_failures(f->st), before + 1);	/* one extent, once */
	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);
	assert_true(rep.checksum_errors >= 1);

	/* The same extent as an older catalog has it: verified whole. */
	snprintf(sql, sizeof(sql), "UPDATE extents SET crcs = NULL WHERE segment = %u AND"
		 " offset = %llu", e.segment, (unsigned long long)e.offset);
	test_catalog_exec(&f->env, sql);
	assert_int_equal(locate(f->st, "chunky", 0).nchunks, 0);
	assert_int_equal(read_range(f->st, "chunky", 0, 100, 51, 1), -EIO);
	assert_int_equal(read_range(f->st, "chunky", 2 * SEG_CHUNK + 7, 4096, 51, 1), -EIO);
	assert_int_equal(read_range(f->st, "chunky", SEG_PAYLOAD_MAX + 10, 70000, 51, 0), 70000);
	flip(f, &e, SEG_HEADER_SIZE + bad);
	assert_int_equal(read_range(f->st, "chunky", 2 * SEG_CHUNK + 7, 4096, 51, 0), 4096);
	assert_int_equal(test_check(f->st, BUCKET, "chunky", len, 51), 0);
	test_fsck_clean(f->st);

	/* Chunk checksums the bytes do not match (a damaged catalog): partial
	 * reads fail rather than trust either, and fsck says so. */
	snprintf(sql, sizeof(sql), "UPDATE extents SET crcs = x'00000100' || zeroblob(%u)"
		 " WHERE segment = %u AND offset = %llu", 4 * e.nchunks, e.segment,
		 (unsigned long long)e.offset);
	test_catalog_exec(&f->env, sql);
	assert_int_equal(read_range(f->st, "chunky", 2 * SEG_CHUNK + 7, 4096, 51, 1), -EIO);
	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);
	assert_true(rep.checksum_errors >= 1);
}

/*
 * The chunks follow the object's offsets: in the second extent of an object
 * (which starts 64 bytes short of 1 MiB) a chunk is [17, 18) x 64 KiB of
 * the object, so damage there fails reads of exactly that range.
 */
static void test_chunk_grid(void **state)
{
	struct fixture *f = *state;
	const uint64_t len = 2 * SEG_PAYLOAD_MAX, bad = 17 * SEG_CHUNK + 5;
	struct cat_extent e;

	assert_int_equal(test_put(f->st, BUCKET, "grid", len, 52), 0);
	e = locate(f->st, "grid", 1);
	assert_int_equal(e.obj_off, SEG_PAYLOAD_MAX);
	assert_int_equal(e.chunk0, SEG_CHUNK - SEG_PAYLOAD_MAX % SEG_CHUNK);
	flip(f, &e, SEG_HEADER_SIZE + bad - e.obj_off);
	assert_int_equal(read_range(f->st, "grid", 16 * SEG_CHUNK, SEG_CHUNK, 52, 0), SEG_CHUNK);
	assert_int_equal(read_range(f->st, "grid", 18 * SEG_CHUNK, SEG_CHUNK, 52, 0), SEG_CHUNK);
	assert_int_equal(read_range(f->st, "grid", 17 * SEG_CHUNK, 1, 52, 1), -EIO);
	assert_int_equal(read_range(f->st, "grid", 18 * SEG_CHUNK - 1, 1, 52, 1), -EIO);
	assert_int_equal(read_range(f->st, "grid", 17 * SEG_CHUNK, SEG_CHUNK, 52, 1), -EIO);
	/* The first, short chunk of the extent: bytes 64 short of 1 MiB on. */
	assert_int_equal(read_range(f->st, "grid", SEG_PAYLOAD_MAX, e.chunk0, 52, 0), e.chunk0);
	flip(f, &e, SEG_HEADER_SIZE + bad - e.obj_off);
	assert_int_equal(test_check(f->st, BUCKET, "grid", len, 52), 0);
	test_fsck_clean(f->st);
}

static void test_multi_extent(void **state)
{
	struct fixture *f = *state;

	put_others(f->st);
	assert_int_equal(test_put(f->st, BUCKET, "multi", MULTI_LEN, MULTI_SEED), 0);
	for (uint32_t bad = 0; bad < 3; bad++) {
		multi_case(f, bad, SEG_HEADER_SIZE + 77);	/* payload */
		multi_case(f, bad, 20);				/* header */
	}
	check_others(f->st);
	test_fsck_clean(f->st);
}

/*
 * Repair of a multi-extent object damaged in its first extent, sharing its
 * segments with other objects: the segments' accounting must come out
 * right, so that fsck is clean afterwards.
 */
static void test_fsck_multi_repair(void **state)
{
	struct fixture *f = *state;
	struct cat_extent e;

	assert_int_equal(test_put(f->st, BUCKET, "before", 3000, 41), 0);
	assert_int_equal(test_put(f->st, BUCKET, "multi", MULTI_LEN, MULTI_SEED), 0);
	put_others(f->st);
	e = locate(f->st, "multi", 0);
	flip(f, &e, SEG_HEADER_SIZE + 99);
	fsck_and_repair(f, "multi", 0);
	assert_int_equal(test_check(f->st, BUCKET, "before", 3000, 41), 0);
}

/* Several damaged objects at once, in payload and header: all are found. */
static void test_fsck_several(void **state)
{
	struct fixture *f = *state;
	struct kvt_fsck_report rep;
	struct cat_extent e;
	char key[32];

	put_others(f->st);
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof(key), "v%d", i);
		assert_int_equal(test_put(f->st, BUCKET, key, 20000 + 1000 * i, 50 + i), 0);
	}
	for (int i = 0; i < 6; i += 2) {
		snprintf(key, sizeof(key), "v%d", i);
		e = locate(f->st, key, 0);
		flip(f, &e, i == 2 ? 33 : SEG_HEADER_SIZE + 500);
	}
	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);
	assert_int_equal(rep.checksum_errors + rep.header_errors, 3);
	assert_int_equal(rep.header_errors, 1);
	assert_int_equal(kvt_store_fsck(f->st, KVT_FSCK_REPAIR, &rep), 0);
	assert_int_equal(rep.repaired, 3);
	test_fsck_clean(f->st);
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof(key), "v%d", i);
		assert_int_equal(test_check(f->st, BUCKET, key, 20000 + 1000 * i, 50 + i),
				 i % 2 ? 0 : -ENOENT);
	}
	check_others(f->st);
}

/*
 * A catalog row that claims more payload than an extent can hold (damage,
 * or a store written by a kvtier with larger extents) is refused before
 * any read: -EIO, never a read past the end of the engine's buffer. Other
 * objects still read.
 */
static void test_extent_too_long(void **state)
{
	struct fixture *f = *state;
	const uint64_t len = 2 * SEG_PAYLOAD_MAX;
	struct cat_extent e;
	char sql[200];

	put_others(f->st);
	assert_int_equal(test_put(f->st, BUCKET, "long", len, 61), 0);
	/* The last extent, with the object's size to match: rows that still
	 * hold the object whole, or the reader's open would refuse them. */
	e = locate(f->st, "long", 1);
	snprintf(sql, sizeof(sql), "UPDATE extents SET length = %u WHERE segment = %u AND"
		 " offset = %llu", SEG_PAYLOAD_MAX + SEG_ALIGN, e.segment,
		 (unsigned long long)e.offset);
	test_catalog_exec(&f->env, sql);
	test_catalog_exec(&f->env, "UPDATE objects SET size = size + 4096 WHERE key = 'long'");
	assert_int_equal(read_range(f->st, "long", 0, len, 61, 1), -EIO);
	assert_int_equal(read_range(f->st, "long", len - 100, 100, 61, 1), -EIO);
	check_others(f->st);
}

/* The offset in catalog.db of the page that roots `table`, and the page size. */
static void catalog_root_page(const char *path, const char *table, off_t *off, size_t *size)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	int64_t root = 0, page = 0;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT rootpage, (SELECT page_size FROM "
					    "pragma_page_size) FROM sqlite_schema WHERE name = ?",
					    -1, &s, NULL), SQLITE_OK);
	sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	root = sqlite3_column_int64(s, 0);
	page = sqlite3_column_int64(s, 1);
	sqlite3_finalize(s);
	sqlite3_close(db);
	assert_true(root > 1 && page >= 512);
	*off = (off_t)((root - 1) * page);
	*size = (size_t)page;
}

/*
 * The objects table's page garbled with the store closed (a failing
 * device, a copy taken mid-write): a lookup that meets it fails with
 * -EUCLEAN, never with another object's bytes; fsck says the catalog is
 * damaged, -EUCLEAN, before anything else. With the page put back all is
 * as before.
 */
static void test_catalog_page_damaged(void **state)
{
	struct fixture *f = *state;
	struct kvt_fsck_report rep;
	unsigned char saved[65536], junk[65536];
	struct kvt_object *o = NULL;
	char path[600];
	size_t size;
	off_t off;
	int fd;

	put_others(f->st);
	kvt_store_close(f->st);
	f->st = NULL;
	snprintf(path, sizeof(path), "%s/catalog.db", f->env.cfg.store.dir);
	catalog_root_page(path, "objects", &off, &size);
	assert_true(size <= sizeof(saved));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, saved, size, off), (ssize_t)size);
	memset(junk, 0x5a, size);
	assert_int_equal(pwrite(fd, junk, size, off), (ssize_t)size);

	f->st = test_store_open(&f->env);
	assert_int_equal(kvt_store_catalog_damaged(f->st), 0);
	assert_int_equal(kvt_object_head(f->st, BUCKET, "other/small", &o), -EUCLEAN);
	assert_int_equal(kvt_store_catalog_damaged(f->st), 1);
	assert_null(o);
	assert_int_equal(test_check(f->st, BUCKET, "other/three", others[2].len, others[2].seed),
			 -EUCLEAN);
	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), -EUCLEAN);
	assert_int_equal(kvt_store_fsck(f->st, KVT_FSCK_REPAIR, &rep), -EUCLEAN);
	kvt_store_close(f->st);

	assert_int_equal(pwrite(fd, saved, size, off), (ssize_t)size);
	close(fd);
	f->st = test_store_open(&f->env);
	check_others(f->st);
	test_fsck_clean(f->st);
}

/*
 * segments.map's generations garbled upwards with the store closed (it is
 * never synced; only a damaged file holds more than the catalog): reads of
 * the objects in those segments fail as reclaimed (-ESTALE), never with
 * bytes, and fsck reports it, unrepaired (lowering a generation could race
 * another process's reclaim). With the file removed, the next open makes
 * it again from the catalog and all is well.
 */
/* With the store closed, every generation in segments.map (past its 4 KiB
 * header) made of bytes `byte`; path gets the map's path. */
static void segment_map_fill(struct fixture *f, int byte, char *path, size_t len)
{
	unsigned char gens[4096];
	int fd;

	kvt_store_close(f->st);
	snprintf(path, len, "%s/segments.map", f->env.cfg.store.dir);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	memset(gens, byte, sizeof(gens));
	assert_int_equal(pwrite(fd, gens, sizeof(gens), 4096), (ssize_t)sizeof(gens));
	close(fd);
}

static void test_segment_map_ahead(void **state)
{
	struct fixture *f = *state;
	struct kvt_fsck_report rep;
	char path[600];

	put_others(f->st);
	segment_map_fill(f, 0x7f, path, sizeof(path));

	f->st = test_store_open(&f->env);
	assert_int_equal(test_check(f->st, BUCKET, "other/three", others[2].len, others[2].seed),
			 -ESTALE);
	assert_int_equal(kvt_store_fsck(f->st, KVT_FSCK_REPAIR, &rep), 1);
	assert_true(rep.catalog_errors >= 1);
	assert_int_equal(rep.unrepairable, rep.catalog_errors);
	assert_int_equal(rep.repaired, 0);
	kvt_store_close(f->st);

	assert_int_equal(unlink(path), 0);
	f->st = test_store_open(&f->env);
	check_others(f->st);
	test_fsck_clean(f->st);
}

/*
 * segments.map behind the catalog (edited, or restored from an old copy):
 * the next open raises it, and every object reads again. Every object of
 * the segment read as reclaimed, through every open, and fsck was clean.
 */
static void test_segment_map_behind(void **state)
{
	struct fixture *f = *state;
	char path[600];

	put_others(f->st);
	segment_map_fill(f, 0, path, sizeof(path));	/* generation 0 */

	f->st = test_store_open(&f->env);
	check_others(f->st);
	test_fsck_clean(f->st);
}

/*
 * The catalog's extent rows of an object changed behind the store's back (a
 * middle extent's row gone, an extent moved by a byte, the object's size cut):
 * every read fails -EIO, never a short object or other bytes (kvtier get
 * exited 0 with the wrong bytes), and fsck says so.
 */
static void test_extent_rows_changed(void **state)
{
	static const char *const damage[] = {
		"DELETE FROM extents WHERE seq = 1 AND object ="
		" (SELECT id FROM objects WHERE key = 'multi')",
		"UPDATE extents SET obj_off = obj_off + 1 WHERE seq = 1 AND object ="
		" (SELECT id FROM objects WHERE key = 'multi')",
		"UPDATE objects SET size = size - 10 WHERE key = 'multi'",
	};
	struct fixture *f = *state;
	struct kvt_fsck_report rep;

	put_others(f->st);
	for (size_t i = 0; i < sizeof(damage) / sizeof(damage[0]); i++) {
		struct kvt_reader *r = NULL;

		assert_int_equal(test_put(f->st, BUCKET, "multi", MULTI_LEN, MULTI_SEED), 0);
		test_catalog_exec(&f->env, damage[i]);
		assert_int_equal(kvt_reader_open(f->st, BUCKET, "multi", &r), -EIO);
		assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);	/* damage found */
		assert_int_equal(kvt_store_fsck(f->st, KVT_FSCK_REPAIR, &rep), 0);
		assert_true(rep.repaired >= 1);	/* the object, and its segments' counts */
		assert_int_equal(kvt_reader_open(f->st, BUCKET, "multi", &r), -ENOENT);
	}
	check_others(f->st);
	test_fsck_clean(f->st);
}

/* A tier no kvtier writes (3; "recalling" is never stored): reads fail
 * naming it (they said ENODATA, "No data available"), fsck reports it and
 * repair removes the object. */
static void test_unknown_tier(void **state)
{
	struct fixture *f = *state;
	struct kvt_fsck_report rep;
	struct kvt_reader *r = NULL;

	put_others(f->st);
	assert_int_equal(test_put(f->st, BUCKET, "tier3", MULTI_LEN, MULTI_SEED), 0);
	test_catalog_exec(&f->env, "UPDATE objects SET tier = 3 WHERE key = 'tier3'");
	assert_int_equal(kvt_reader_open(f->st, BUCKET, "tier3", &r), -EIO);
	assert_int_equal(kvt_store_fsck(f->st, 0, &rep), 1);
	assert_int_equal(rep.catalog_errors, 1);
	assert_int_equal(kvt_store_fsck(f->st, KVT_FSCK_REPAIR, &rep), 0);
	assert_true(rep.repaired >= 1);
	assert_int_equal(kvt_reader_open(f->st, BUCKET, "tier3", &r), -ENOENT);
	check_others(f->st);
	test_fsck_clean(f->st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_payload_flip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_flip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_padding_flip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flip_survives_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fsck_payload, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fsck_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunk_flip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunk_grid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_multi_extent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_extent_too_long, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fsck_multi_repair, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fsck_several, setup, teardown),
		cmocka_unit_test_setup_teardown(test_catalog_page_damaged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_map_ahead, setup, teardown),
		cmocka_unit_test_setup_teardown(test_segment_map_behind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_extent_rows_changed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_tier, setup, teardown),
	};

	/* KVT_TEST_FILTER=test_name runs one test (a cmocka pattern). */
	if (getenv("KVT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
