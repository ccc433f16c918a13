/*
 * test_util.c - the small helpers of src/util.c, and the size and duration
 * parsers that kvtier.conf and the command lines share (src/config.c).
 *
 * CRC32C is checked against published vectors (RFC 3720 B.4, and the value
 * S3 returns for "123456789") and against a bitwise reference over many
 * lengths and alignments: a wrong checksum here would turn into objects
 * that read back as -EIO, or worse, into corrupt bytes that pass.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "testlib.h"
#include "util.h"

/* The textbook bit-at-a-time CRC32C (reflected polynomial 0x82F63B78). */
static uint32_t ref_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82F63B78u & -(crc & 1));
	}
	return ~crc;
}

static void test_crc32c_vectors(void **state)
{
	unsigned char buf[32];

	(void)state;
	assert_int_equal(kvt_crc32c(0, "123456789", 9), 0xE3069283);
	assert_int_equal(kvt_crc32c(0, "", 0), 0);
	assert_int_equal(kvt_crc32c(0, NULL, 0), 0);
	assert_int_equal(kvt_crc32c(0, "a", 1), 0xC1D04330);
	/* RFC 3720 B.4 */
	memset(buf, 0, sizeof(buf));
	assert_int_equal(kvt_crc32c(0, buf, sizeof(buf)), 0x8A9136AA);
	memset(buf, 0xff, sizeof(buf));
	assert_int_equal(kvt_crc32c(0, buf, sizeof(buf)), 0x62A8AB43);
	for (int i = 0; i < 32; i++)
		buf[i] = i;
	assert_int_equal(kvt_crc32c(0, buf, sizeof(buf)), 0x46DD794E);
	for (int i = 0; i < 32; i++)
		buf[i] = 31 - i;
	assert_int_equal(kvt_crc32c(0, buf, sizeof(buf)), 0x113FDB5C);
}

/* crc(crc(a), b) == crc(a || b), at every split: writers checksum in chunks. */
static void test_crc32c_chaining(void **state)
{
	const char *s = "123456789";
	unsigned char buf[4096];
	uint32_t whole;

	(void)state;
	for (size_t i = 0; i <= 9; i++)
		assert_int_equal(kvt_crc32c(kvt_crc32c(0, s, i), s + i, 9 - i), 0xE3069283);
	test_fill(buf, sizeof(buf), 7, 0);
	whole = kvt_crc32c(0, buf, sizeof(buf));
	for (size_t i = 0; i <= sizeof(buf); i += 37) {
		for (size_t j = i; j <= sizeof(buf); j += 501) {
			uint32_t c = kvt_crc32c(0, buf, i);

			c = kvt_crc32c(c, buf + i, j - i);
			c = kvt_crc32c(c, buf + j, sizeof(buf) - j);
			assert_int_equal(c, whole);
		}
	}
}

/* combine(crc(a), crc(b), len(b)) == crc(a || b): parts become one object. */
static void test_crc32c_combine(void **state)
{
	static unsigned char buf[1 << 20];
	uint32_t whole;

	(void)state;
	test_fill(buf, sizeof(buf), 3, 0);
	whole = kvt_crc32c(0, buf, sizeof(buf));
	for (size_t i = 0; i <= sizeof(buf); i += i < 64 ? 1 : 65521) {
		uint32_t a = kvt_crc32c(0, buf, i);
		uint32_t b = kvt_crc32c(0, buf + i, sizeof(buf) - i);

		assert_int_equal(kvt_crc32c_combine(a, b, sizeof(buf) - i), whole);
	}
	assert_int_equal(kvt_crc32c_combine(0xE3069283, 0, 0), 0xE3069283);
	assert_int_equal(kvt_crc32c_combine(kvt_crc32c(0, "1234", 4), kvt_crc32c(0, "56789", 5), 5),
			 0xE3069283);
	/*
	 * Lengths past 4 GiB, without hashing gigabytes: combining is
	 * associative, which a length cut to 32 bits would break.
	 */
	{
		const uint64_t lb = 3ull << 30, lc = (2ull << 30) + 12345;
		const uint32_t a = 0x12345678, b = 0x9abcdef0, c = 0x0badf00d;

		assert_int_equal(kvt_crc32c_combine(kvt_crc32c_combine(a, b, lb), c, lc),
				 kvt_crc32c_combine(a, kvt_crc32c_combine(b, c, lc), lb + lc));
	}
}

/* ISA-L has separate paths for short tails and unaligned heads. */
static void test_crc32c_reference(void **state)
{
	unsigned char buf[2048 + 16];

	(void)state;
	test_fill(buf, sizeof(buf), 42, 0);
	for (size_t off = 0; off < 16; off++) {
		for (size_t len = 0; len <= 2048; len += len < 80 ? 1 : 61)
			assert_int_equal(kvt_crc32c(0, buf + off, len),
					 ref_crc32c(0, buf + off, len));
	}
	assert_int_equal(kvt_crc32c(0x12345678, buf, 1000), ref_crc32c(0x12345678, buf, 1000));
}

static void test_hex(void **state)
{
	static const unsigned char bytes[] = { 0x00, 0x01, 0x7f, 0x80, 0xab, 0xff };
	char out[2 * sizeof(bytes) + 2];

	(void)state;
	memset(out, '#', sizeof(out));
	util_hex(out, bytes, sizeof(bytes));
	assert_string_equal(out, "00017f80abff");
	assert_int_equal(out[sizeof(out) - 1], '#');	/* nothing past the NUL */
	util_hex(out, bytes, 0);
	assert_string_equal(out, "");
}

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* What a failed first kvtier init undoes: the directories it made, only them. */
static void test_mkdir_p_made(void **state)
{
	const char *tmp = getenv("TMPDIR");
	char base[256], path[512], file[512];
	unsigned made;
	int fd;

	(void)state;
	snprintf(base, sizeof(base), "%s/kvtier-util-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(base));
	snprintf(path, sizeof(path), "%s/a//b/c/", base);
	assert_int_equal(util_mkdir_p_made(path, &made), 0);
	assert_int_equal(made, 3);
	util_rmdir_made(path, made);
	assert_true(is_dir(base));
	snprintf(file, sizeof(file), "%s/a", base);
	assert_false(is_dir(file));

	/* One level that existed is kept, and so is one another file is in. */
	snprintf(path, sizeof(path), "%s/a", base);
	assert_int_equal(util_mkdir_p_made(path, &made), 0);
	assert_int_equal(made, 1);
	snprintf(path, sizeof(path), "%s/a/b/c", base);
	assert_int_equal(util_mkdir_p_made(path, &made), 0);
	assert_int_equal(made, 2);
	snprintf(file, sizeof(file), "%s/a/b/other", base);
	fd = open(file, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	close(fd);
	util_rmdir_made(path, made);
	assert_false(is_dir(path));
	snprintf(path, sizeof(path), "%s/a/b", base);
	assert_true(is_dir(path));

	snprintf(path, sizeof(path), "rm -rf '%s'", base);
	assert_int_equal(system(path), 0);
}

static void test_mkdir_p(void **state)
{
	const char *tmp = getenv("TMPDIR");
	char base[256], path[512], file[512];
	char *huge;
	int fd;

	(void)state;
	snprintf(base, sizeof(base), "%s/kvtier-util-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(base));

	snprintf(path, sizeof(path), "%s/a/b/c", base);
	assert_int_equal(util_mkdir_p(path), 0);
	assert_true(is_dir(path));
	assert_int_equal(util_mkdir_p(path), 0);	/* exists already */
	snprintf(path, sizeof(path), "%s/a//d/e/", base);
	assert_int_equal(util_mkdir_p(path), 0);
	snprintf(path, sizeof(path), "%s/a/d/e", base);
	assert_true(is_dir(path));

	/* A regular file in the way of a parent. */
	snprintf(file, sizeof(file), "%s/file", base);
	fd = open(file, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/file/sub", base);
	assert_int_equal(util_mkdir_p(path), -ENOTDIR);

	assert_true(util_mkdir_p("") < 0);
	huge = malloc(5000);
	assert_non_null(huge);
	memset(huge, 'x', 4999);
	huge[0] = '/';
	huge[4999] = '\0';
	assert_int_equal(util_mkdir_p(huge), -ENAMETOOLONG);
	free(huge);

	snprintf(path, sizeof(path), "rm -rf '%s'", base);
	assert_int_equal(system(path), 0);
}

static void test_parse_size(void **state)
{
	static const struct { const char *s; uint64_t v; } good[] = {
		{ "0", 0 },
		{ "1", 1 },
		{ "4096", 4096 },
		{ "64K", 64ull << 10 },
		{ "64k", 64ull << 10 },
		{ "64KiB", 64ull << 10 },
		{ "64KB", 64ull << 10 },
		{ "64Ki", 64ull << 10 },
		{ "256M", 256ull << 20 },
		{ "4G", 4ull << 30 },
		{ "1T", 1ull << 40 },
		{ "0G", 0 },
		{ "007M", 7ull << 20 },
		{ "18446744073709551615", UINT64_MAX },
		{ "16777215T", 16777215ull << 40 },
		{ "17179869183G", 17179869183ull << 30 },
	};
	static const struct { const char *s; int rc; } bad[] = {
		{ "", -EINVAL },
		{ "K", -EINVAL },
		{ "-1", -EINVAL },
		{ "+1", -EINVAL },
		{ " 1", -EINVAL },
		{ "1 ", -EINVAL },
		{ "1 K", -EINVAL },
		{ "1.5G", -EINVAL },
		{ "0x10", -EINVAL },
		{ "1X", -EINVAL },
		{ "1P", -EINVAL },	/* no petabytes: a hot tier is not that big */
		{ "1B", -EINVAL },
		{ "1KK", -EINVAL },
		{ "1KiBs", -EINVAL },
		{ "1iB", -EINVAL },
		{ "18446744073709551616", -ERANGE },
		{ "99999999999999999999999", -ERANGE },
		{ "16777216T", -ERANGE },
		{ "17179869184G", -ERANGE },
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		assert_int_equal(kvt_parse_size(good[i].s, &v), 0);
		assert_true(v == good[i].v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		assert_int_equal(kvt_parse_size(bad[i].s, &v), bad[i].rc);
		assert_true(v == 12345);	/* untouched on failure */
	}
	assert_int_equal(kvt_parse_size(NULL, &v), -EINVAL);
}

static void test_parse_duration(void **state)
{
	static const struct { const char *s; uint64_t v; } good[] = {
		{ "0", 0 },
		{ "42", 42 },
		{ "90s", 90 },
		{ "15m", 900 },
		{ "24h", 86400 },
		{ "7d", 604800 },
		{ "0d", 0 },
		{ "36500d", KVT_DURATION_MAX },
		{ "3153600000", KVT_DURATION_MAX },
		{ "876000h", KVT_DURATION_MAX },
	};
	static const struct { const char *s; int rc; } bad[] = {
		{ "", -EINVAL },
		{ "s", -EINVAL },
		{ "-1s", -EINVAL },
		{ " 1s", -EINVAL },
		{ "1s ", -EINVAL },
		{ "1.5h", -EINVAL },
		{ "1w", -EINVAL },
		{ "1M", -EINVAL },	/* months or minutes? */
		{ "1H", -EINVAL },
		{ "1ms", -EINVAL },
		{ "1hm", -EINVAL },
		{ "18446744073709551616", -ERANGE },
		{ "18446744073709551615", -ERANGE },
		{ "36501d", -ERANGE },
		{ "200000d", -ERANGE },	/* wrapped as nanoseconds: demoted everything */
		{ "3153600001", -ERANGE },
		{ "307445734561825861m", -ERANGE },
		{ "213503982334602d", -ERANGE },
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		assert_int_equal(kvt_parse_duration(good[i].s, &v), 0);
		assert_true(v == good[i].v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		assert_int_equal(kvt_parse_duration(bad[i].s, &v), bad[i].rc);
		assert_true(v == 12345);
	}
	assert_int_equal(kvt_parse_duration(NULL, &v), -EINVAL);
}

static void test_clocks(void **state)
{
	int64_t m1, m2;

	(void)state;
	/* After 2020-01-01: a clock that reads 0 means clock_gettime failed. */
	assert_true(util_now_ns() > 1577836800ll * 1000000000);
	m1 = util_mono_ns();
	m2 = util_mono_ns();
	assert_true(m1 > 0);
	assert_true(m2 >= m1);
}

/* The deadline and the condition variable run on the same clock: a
 * 50 ms wait takes 50 ms, not nothing and not forever. */
static void test_timed_wait(void **state)
{
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond;
	struct timespec ts;
	int64_t start, ms;
	int rc;

	(void)state;
	util_cond_init(&cond);
	pthread_mutex_lock(&lock);
	start = util_mono_ns();
	util_deadline(&ts, 50);
	do
		rc = pthread_cond_timedwait(&cond, &lock, &ts);
	while (rc == 0);	/* a spurious wakeup */
	ms = (util_mono_ns() - start) / 1000000;
	pthread_mutex_unlock(&lock);
	pthread_cond_destroy(&cond);
	assert_int_equal(rc, ETIMEDOUT);
	assert_true(ms >= 49);
	assert_true(ms < 5000);
}

static void test_random_and_boot_id(void **state)
{
	char id[37];
	int rc;

	(void)state;
	/* Two equal draws in a row: one in 2^64, or a broken generator. */
	assert_true(util_random64() != util_random64());
	rc = util_boot_id(id);
	if (rc == -ENOENT)
		return;	/* no /proc/sys/kernel/random here */
	assert_int_equal(rc, 0);
	assert_int_equal(strlen(id), 36);
	assert_true(id[8] == '-' && id[13] == '-' && id[18] == '-' && id[23] == '-');
}

static void test_aligned_alloc(void **state)
{
	void *p = util_aligned_alloc(4096, 8192);

	(void)state;
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % 4096, 0);
	memset(p, 0, 8192);
	free(p);
}

/*
 * Big buffers start on a 2 MiB boundary, whatever their size (the engine's
 * four I/O buffers of 1 MiB + 4 KiB are not a multiple of it), and the
 * whole size is theirs; the rest of the reservation after it is unmapped.
 */
static void test_grow(void **state)
{
	struct pair { uint64_t a, b; } *v = NULL, *before;
	size_t n = 0, cap = 0;

	(void)state;
	for (uint64_t i = 0; i < 1000; i++) {
		assert_int_equal(UTIL_GROW(v, n, cap), 0);
		assert_true(n < cap);
		v[n++] = (struct pair){ i, ~i };
	}
	assert_int_equal(cap, 1024);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(v[i].a, i);
		assert_int_equal(v[i].b, ~i);
	}
	/* Room left: nothing moves. */
	before = v;
	assert_int_equal(UTIL_GROW(v, 1000, cap), 0);
	assert_ptr_equal(v, before);
	assert_int_equal(cap, 1024);
	/* A size that cannot be counted: refused, the array kept. */
	cap = SIZE_MAX / sizeof(*v) / 2 + 1;
	assert_int_equal(UTIL_GROW(v, cap, cap), -ENOMEM);
	assert_ptr_equal(v, before);
	assert_int_equal(cap, SIZE_MAX / sizeof(*v) / 2 + 1);
	free(v);
}

static void test_big_alloc(void **state)
{
	const size_t sizes[] = { 1u << 20, 4 * ((1u << 20) + 4096), (4u << 20) + 5 };

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		char *p = util_big_alloc(sizes[i]);

		assert_non_null(p);
		assert_int_equal((uintptr_t)p % (2u << 20), 0);
		memset(p, 0xa5, sizes[i]);
		assert_int_equal(p[sizes[i] - 1], (char)0xa5);
		/* The page after it is not mapped: msync says ENOMEM. */
		assert_int_equal(msync(p + (sizes[i] + 4095) / 4096 * 4096, 4096, MS_ASYNC), -1);
		assert_int_equal(errno, ENOMEM);
		util_big_free(p, sizes[i]);
	}
}

static void *thread_mask(void *arg)
{
	pthread_sigmask(SIG_BLOCK, NULL, arg);
	return NULL;
}

/* The engine's threads leave the program's signals to the program. */
static void test_thread_start_blocks_signals(void **state)
{
	sigset_t caller, seen;
	pthread_t tid;

	(void)state;
	pthread_sigmask(SIG_BLOCK, NULL, &caller);
	assert_int_equal(util_thread_start(&tid, NULL, thread_mask, &seen), 0);
	assert_int_equal(pthread_join(tid, NULL), 0);
	assert_true(sigismember(&seen, SIGTERM));
	assert_true(sigismember(&seen, SIGINT));
	assert_true(sigismember(&seen, SIGHUP));
	assert_false(sigismember(&seen, SIGSEGV));
	assert_false(sigismember(&seen, SIGBUS));
	/* and the caller's own mask is as it was */
	pthread_sigmask(SIG_BLOCK, NULL, &seen);
	assert_int_equal(sigismember(&seen, SIGTERM), sigismember(&caller, SIGTERM));
}

/* log_every: the first time yes, again within the interval no, after it yes. */
static void test_log_every(void **state)
{
	int64_t last = 0;

	(void)state;
	assert_true(log_every(&last, 10));
	assert_true(last != 0);
	assert_false(log_every(&last, 10));
	assert_false(log_every(&last, 10));
	last -= 11 * 1000000000ll;	/* as if 11 s had passed */
	assert_true(log_every(&last, 10));
	assert_false(log_every(&last, 10));
}

/*
 * log_limit: the first time yes, with none left out; within the interval
 * no, counted; after it yes, with the count, which starts again.
 */
static void test_log_limit(void **state)
{
	struct log_limit l = { 0 };
	char note[96] = "stale";

	(void)state;
	assert_true(log_limit(&l, 60, "recalls", note, sizeof(note)));
	assert_string_equal(note, "");
	assert_false(log_limit(&l, 60, "recalls", note, sizeof(note)));
	assert_false(log_limit(&l, 60, "recalls", note, sizeof(note)));
	assert_false(log_limit(&l, 60, "recalls", note, sizeof(note)));
	l.last_ns -= 61 * 1000000000ll;	/* as if 61 s had passed */
	assert_true(log_limit(&l, 60, "recalls", note, sizeof(note)));
	assert_string_equal(note, " (3 more recalls failed so since this was last said)");
	assert_false(log_limit(&l, 60, "recalls", note, sizeof(note)));
	l.last_ns -= 61 * 1000000000ll;
	assert_true(log_limit(&l, 60, "recalls", note, sizeof(note)));
	assert_string_equal(note, " (1 more recalls failed so since this was last said)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_vectors),
		cmocka_unit_test(test_crc32c_chaining),
		cmocka_unit_test(test_crc32c_combine),
		cmocka_unit_test(test_crc32c_reference),
		cmocka_unit_test(test_hex),
		cmocka_unit_test(test_mkdir_p),
		cmocka_unit_test(test_mkdir_p_made),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_clocks),
		cmocka_unit_test(test_timed_wait),
		cmocka_unit_test(test_random_and_boot_id),
		cmocka_unit_test(test_aligned_alloc),
		cmocka_unit_test(test_grow),
		cmocka_unit_test(test_big_alloc),
		cmocka_unit_test(test_thread_start_blocks_signals),
		cmocka_unit_test(test_log_every),
		cmocka_unit_test(test_log_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
