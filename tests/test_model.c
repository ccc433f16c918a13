/*
 * test_model.c - random operation sequences against an in-memory model.
 *
 * The model is what a client may assume: each key holds the bytes of its
 * last committed put (or copy), identified by (content seed, length), or
 * nothing. Random puts (some if-none-match), overwrites, deletes, whole and
 * ranged gets, heads, listings, copies, aborted writes and readers kept
 * across overwrites run against the store, and every result is checked
 * against the model right after the operation; every key is checked every
 * CHECK_EVERY operations, after a close and reopen midway, and at the end.
 *
 *  run_exact:    a store big enough that reclaim never runs: every object
 *                reads back exactly, and a miss is a bug.
 *  run_evicting: a small store far past capacity: an object may be evicted
 *                (a miss from then on, until it is written again), but a
 *                read returns either -ENOENT or exactly the model's bytes,
 *                never other bytes; pinned keys are never evicted.
 *
 * Seeds are fixed and printed; KVT_TEST_SEED=<n> replays one run with seed n.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "util.h"

#define KiB 1024ull
#define MiB (1024 * 1024ull)
#define PAYLOAD_MAX MiB
#define NKEYS 50
#define NOPS 3000
#define CHECK_EVERY 250
#define MAX_SIZE (3 * MiB + 5)

struct mval {
	int present;
	uint64_t seed;		/* content: test_fill(seed) */
	size_t len;
	uint32_t crc;
	char etag[KVT_ETAG_MAX];
};

struct model {
	struct kvt_store *st;
	struct test_env *env;
	int evicting;		/* misses are allowed (and recorded) */
	uint64_t rng;
	char keys[NKEYS][48];
	struct mval v[NKEYS];
	unsigned char *buf, *want;	/* MAX_SIZE + slack each */
	/* what happened, for the summary and the run's own checks */
	unsigned long ops, puts, misses, stale, bytes_written;
};

/* ---- helpers ------------------------------------------------------------------ */

static uint64_t rnd(struct model *m)
{
	uint64_t z = (m->rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/*
 * 0..3 MiB + 5, skewed small (a mean near 75 KiB keeps the exact run's
 * store, which must hold every byte written, quick to create), with extra
 * weight on the extent boundary.
 */
static size_t rnd_size(struct model *m)
{
	unsigned r = (unsigned)(rnd(m) % 1000);

	if (r < 600)
		return (size_t)(rnd(m) % (8 * KiB + 1));
	if (r < 900)
		return (size_t)(rnd(m) % (64 * KiB + 1));
	if (r < 920)
		return (size_t)(PAYLOAD_MAX - 64 + rnd(m) % 129);
	if (r < 950)
		return (size_t)(rnd(m) % (MiB + 1));
	if (r < 960)
		return (size_t)(MiB + rnd(m) % (MAX_SIZE - MiB + 1));
	return (size_t)(rnd(m) % (256 * KiB + 1));
}

/* Keys 0..4 are pinned in the evicting run. */
static int pinned_key(const struct model *m, int k)
{
	return m->evicting && k < 5;
}

static void model_init(struct model *m, struct test_env *env, int evicting, uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	m->env = env;
	m->evicting = evicting;
	m->rng = seed;
	for (int k = 0; k < NKEYS; k++) {
		/* Sessions s0..s6, and a few keys S3 does not normalise. */
		if (k % 10 == 9)
			snprintf(m->keys[k], sizeof(m->keys[k]), "s%d//k%02d \xc3\xa9", k % 7, k);
		else
			snprintf(m->keys[k], sizeof(m->keys[k]), "s%d/k%02d", k % 7, k);
	}
	m->buf = malloc(MAX_SIZE + 4096);
	m->want = malloc(MAX_SIZE + 4096);
	assert_non_null(m->buf);
	assert_non_null(m->want);
}

static void model_release(struct model *m)
{
	free(m->buf);
	free(m->want);
}

#define FAILK(m, k, ...) do {							\
		print_error("op %lu, key '%s': ", (m)->ops, (m)->keys[k]);	\
		fail_msg(__VA_ARGS__);						\
	} while (0)

/* The store has lost key k (evicting run only): it stays lost until written. */
static void model_miss(struct model *m, int k, const char *where)
{
	if (!m->evicting || pinned_key(m, k))
		FAILK(m, k, "%s: -ENOENT for an object the model holds (%zu bytes)", where,
		      m->v[k].len);
	m->v[k].present = 0;
	m->misses++;
}

/* Reads key k whole and checks it against the model. */
static void check_key(struct model *m, int k)
{
	const struct mval *v = &m->v[k];
	struct kvt_reader *r = NULL;
	const struct kvt_object *o;
	int rc = kvt_reader_open(m->st, "bkt", m->keys[k], &r);
	ssize_t n;

	if (!v->present) {
		if (rc != -ENOENT)
			FAILK(m, k, "absent in the model, open gives %d", rc);
		kvt_reader_close(r);
		return;
	}
	if (rc == -ENOENT) {
		model_miss(m, k, "get");
		return;
	}
	if (rc < 0)
		FAILK(m, k, "open: %d (%s)", rc, strerror(-rc));
	o = kvt_reader_object(r);
	if (o->size != v->len || o->crc32c != v->crc || strcmp(o->etag, v->etag) != 0)
		FAILK(m, k, "size %llu crc %08x etag %s, model %zu %08x %s",
		      (unsigned long long)o->size, o->crc32c, o->etag, v->len, v->crc, v->etag);
	n = kvt_reader_pread(r, m->buf, v->len + 100, 0);
	kvt_reader_close(r);
	if (n != (ssize_t)v->len)
		FAILK(m, k, "read %zd bytes (%s), model %zu", n, n < 0 ? strerror((int)-n) : "",
		      v->len);
	test_fill(m->want, v->len, v->seed, 0);
	if (memcmp(m->buf, m->want, v->len) != 0)
		FAILK(m, k, "wrong bytes (%zu)", v->len);
}

static void check_all(struct model *m)
{
	struct kvt_store_stat s;
	uint64_t present = 0;

	for (int k = 0; k < NKEYS; k++)
		check_key(m, k);
	for (int k = 0; k < NKEYS; k++)
		present += m->v[k].present;
	assert_int_equal(kvt_store_stat(m->st, &s), 0);
	if (s.objects != present)
		fail_msg("op %lu: the store counts %llu objects, the model %llu", m->ops,
			 (unsigned long long)s.objects, (unsigned long long)present);
	assert_int_equal(s.checksum_failures, 0);
}

/* ---- operations ----------------------------------------------------------------- */

/* Writes len bytes of seed as key k in one to three chunks; the commit's rc. */
static int write_obj(struct model *m, int k, uint64_t seed, size_t len, unsigned flags,
		     struct kvt_object **info)
{
	struct kvt_put_opts opts = { .flags = flags | (pinned_key(m, k) ? KVT_PUT_PIN : 0) };
	struct kvt_writer *w = NULL;
	size_t done = 0;
	int rc = kvt_writer_open(m->st, "bkt", m->keys[k], &opts, &w);

	if (rc < 0)
		return rc;
	test_fill(m->buf, len, seed, 0);
	while (done < len) {
		size_t n = len - done;

		if (rnd(m) % 2)
			n = (size_t)(rnd(m) % n) + 1;
		rc = kvt_writer_write(w, m->buf + done, n);
		if (rc < 0) {
			kvt_writer_abort(w);
			return rc;
		}
		done += n;
	}
	m->bytes_written += len;
	return kvt_writer_commit(w, info);
}

static void model_set(struct model *m, int k, uint64_t seed, size_t len, const struct kvt_object *info)
{
	struct mval *v = &m->v[k];

	v->present = 1;
	v->seed = seed;
	v->len = len;
	test_fill(m->want, len, seed, 0);
	v->crc = kvt_crc32c(0, m->want, len);
	snprintf(v->etag, sizeof(v->etag), "%s", info->etag);
	if (info->size != len || info->crc32c != v->crc)
		FAILK(m, k, "commit reports %llu bytes crc %08x, wrote %zu crc %08x",
		      (unsigned long long)info->size, info->crc32c, len, v->crc);
}

static void op_put(struct model *m, int k)
{
	uint64_t seed = rnd(m);
	size_t len = rnd_size(m);
	int inm = rnd(m) % 8 == 0;
	struct kvt_object *info = NULL;
	int rc;

	/* Pinned keys stay small: the hot tier must not fill with them. */
	if (pinned_key(m, k))
		len %= 64 * KiB;
	rc = write_obj(m, k, seed, len, inm ? KVT_PUT_IF_NONE_MATCH : 0, &info);
	m->puts++;
	if (rc == -EEXIST && inm && m->v[k].present) {
		/* Refused, the old object stays (or was evicted meanwhile). */
	} else if (rc == 0 && (!inm || !m->v[k].present || m->evicting)) {
		/* if-none-match may succeed in the evicting run: the old one was evicted. */
		model_set(m, k, seed, len, info);
	} else {
		FAILK(m, k, "put (if-none-match %d, model present %d): %d", inm, m->v[k].present, rc);
	}
	kvt_object_free(info);
	check_key(m, k);
}

static void op_delete(struct model *m, int k)
{
	int rc = kvt_object_delete(m->st, "bkt", m->keys[k]);

	if (rc == 0 && m->v[k].present)
		m->v[k].present = 0;
	else if (rc == -ENOENT && m->v[k].present)
		model_miss(m, k, "delete");
	else if (rc != -ENOENT || m->v[k].present)
		FAILK(m, k, "delete: %d, model present %d", rc, m->v[k].present);
	check_key(m, k);
}

static void op_range(struct model *m, int k)
{
	const struct mval *v = &m->v[k];
	struct kvt_reader *r = NULL;
	uint64_t off;
	size_t len, want;
	ssize_t n;
	int rc = kvt_reader_open(m->st, "bkt", m->keys[k], &r);

	if (rc == -ENOENT) {
		if (v->present)
			model_miss(m, k, "range");
		return;
	}
	if (rc < 0 || !v->present)
		FAILK(m, k, "range open: %d, model present %d", rc, v->present);
	/* Offsets past the end too, and lengths across extent boundaries. */
	off = rnd(m) % (v->len + 100);
	if (rnd(m) % 4 == 0 && v->len > PAYLOAD_MAX)
		off = PAYLOAD_MAX - rnd(m) % 100;
	len = (size_t)(rnd(m) % (rnd(m) % 4 ? 5000 : MAX_SIZE)) + 1;
	want = off >= v->len ? 0 : (size_t)MIN(len, v->len - off);
	n = kvt_reader_pread(r, m->buf, len, off);
	kvt_reader_close(r);
	if (n != (ssize_t)want)
		FAILK(m, k, "pread(%llu, %zu) of %zu bytes: %zd", (unsigned long long)off, len,
		      v->len, n);
	test_fill(m->want, want, v->seed, off);
	if (memcmp(m->buf, m->want, want) != 0)
		FAILK(m, k, "pread(%llu, %zu): wrong bytes", (unsigned long long)off, len);
}

static void op_head(struct model *m, int k)
{
	const struct mval *v = &m->v[k];
	struct kvt_object *o = NULL;
	int rc = kvt_object_head(m->st, "bkt", m->keys[k], &o);

	if (rc == -ENOENT) {
		if (v->present)
			model_miss(m, k, "head");
		return;
	}
	if (rc < 0 || !v->present)
		FAILK(m, k, "head: %d, model present %d", rc, v->present);
	if (o->size != v->len || o->crc32c != v->crc || strcmp(o->etag, v->etag) != 0 ||
	    strcmp(o->key, m->keys[k]) != 0 || o->pinned != pinned_key(m, k))
		FAILK(m, k, "head: %llu bytes crc %08x etag %s pinned %d", (unsigned long long)o->size,
		      o->crc32c, o->etag, o->pinned);
	/* session_depth 1: the first path component. */
	if (strncmp(o->session, m->keys[k], strlen(o->session)) != 0 ||
	    m->keys[k][strlen(o->session)] != '/')
		FAILK(m, k, "session '%s'", o->session);
	kvt_object_free(o);
}

static void op_copy(struct model *m, int src, int dst)
{
	struct mval *v = &m->v[src];
	struct kvt_put_opts opts = { .flags = pinned_key(m, dst) ? KVT_PUT_PIN : 0 };
	struct kvt_object *info = NULL;
	int rc;

	/* Pinned keys stay small. */
	if (pinned_key(m, dst) && v->present && v->len >= 64 * KiB)
		return;
	rc = kvt_object_copy(m->st, "bkt", m->keys[src], "bkt", m->keys[dst], &opts, &info);
	if (rc == 0) {
		if (!v->present)
			FAILK(m, src, "copied to '%s' from an absent source", m->keys[dst]);
		m->bytes_written += v->len;
		/* Both the same now (src may equal dst). */
		model_set(m, dst, v->seed, v->len, info);
	} else if (rc == -ENOENT && v->present) {
		model_miss(m, src, "copy source");
	} else if (rc == -ESTALE && m->evicting && v->present) {
		/* The source was evicted while the copy read it: the copy fails. */
		m->stale++;
	} else if (rc != -ENOENT || v->present) {
		FAILK(m, src, "copy to '%s': %d, model present %d", m->keys[dst], rc, v->present);
	}
	kvt_object_free(info);
	check_key(m, src);
	check_key(m, dst);
}

static void op_abort(struct model *m, int k)
{
	struct kvt_writer *w = NULL;
	size_t len = rnd_size(m);

	assert_int_equal(kvt_writer_open(m->st, "bkt", m->keys[k], NULL, &w), 0);
	test_fill(m->buf, len, rnd(m), 0);
	assert_int_equal(kvt_writer_write(w, m->buf, len), 0);
	kvt_writer_abort(w);
	check_key(m, k);
}

/* A reader opened before an overwrite keeps reading its version. */
static void op_reader_across_overwrite(struct model *m, int k)
{
	struct mval old = m->v[k];
	struct kvt_reader *r = NULL;
	ssize_t n;
	int rc = kvt_reader_open(m->st, "bkt", m->keys[k], &r);

	if (rc == -ENOENT) {
		if (old.present)
			model_miss(m, k, "reader");
		op_put(m, k);
		return;
	}
	assert_int_equal(rc, 0);
	if (!old.present)
		FAILK(m, k, "opened an object the model does not hold");
	op_put(m, k);
	n = kvt_reader_pread(r, m->buf, old.len + 1, 0);
	kvt_reader_close(r);
	if (n == -ESTALE && m->evicting) {
		m->stale++;	/* its segment was reclaimed: a miss, not wrong bytes */
		return;
	}
	if (n != (ssize_t)old.len)
		FAILK(m, k, "old reader: %zd bytes, want %zu", n, old.len);
	test_fill(m->want, old.len, old.seed, 0);
	if (memcmp(m->buf, m->want, old.len) != 0)
		FAILK(m, k, "old reader: wrong bytes");
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists a prefix (and maybe rolls up by "/") page by page; compares. */
static void op_list(struct model *m)
{
	static const char *const prefixes[] = { "", "s1/", "s3", "s0//", "s5/k4", "t" };
	const char *prefix = prefixes[rnd(m) % 6];
	int delim = rnd(m) % 3 == 0;
	struct kvt_list_opts lo = {
		.prefix = prefix, .delimiter = delim ? "/" : NULL,
		.limit = (unsigned)(rnd(m) % 4 == 0 ? 1000 : rnd(m) % 12 + 1),
	};
	char *want[NKEYS], *got[NKEYS + 1], *token = NULL;
	size_t nwant = 0, ngot = 0, plen = strlen(prefix);

	/* What the model holds under the prefix, rolled up. */
	for (int k = 0; k < NKEYS; k++) {
		const char *d;

		if (!m->v[k].present || strncmp(m->keys[k], prefix, plen) != 0)
			continue;
		d = delim ? strchr(m->keys[k] + plen, '/') : NULL;
		want[nwant++] = d ? strndup(m->keys[k], (size_t)(d - m->keys[k]) + 1)
				  : strdup(m->keys[k]);
	}
	qsort(want, nwant, sizeof(*want), str_cmp);
	{
		size_t u = 0;

		for (size_t i = 0; i < nwant; i++) {
			if (u > 0 && strcmp(want[u - 1], want[i]) == 0)
				free(want[i]);
			else
				want[u++] = want[i];
		}
		nwant = u;
	}
	for (;;) {
		struct kvt_list *l = NULL;

		lo.continuation = token;
		assert_int_equal(kvt_object_list(m->st, "bkt", &lo, &l), 0);
		for (size_t i = 0; i < l->nobjects; i++) {
			const struct kvt_object *o = l->objects[i];
			int k;

			for (k = 0; k < NKEYS && strcmp(m->keys[k], o->key) != 0; k++)
				;
			if (k == NKEYS || !m->v[k].present)
				fail_msg("op %lu: listed '%s', absent from the model", m->ops, o->key);
			if (o->size != m->v[k].len || strcmp(o->etag, m->v[k].etag) != 0)
				FAILK(m, k, "listed with %llu bytes etag %s", (unsigned long long)o->size,
				      o->etag);
			assert_true(ngot < NKEYS);
			got[ngot++] = strdup(o->key);
		}
		for (size_t i = 0; i < l->nprefixes; i++) {
			assert_true(ngot < NKEYS);
			got[ngot++] = strdup(l->prefixes[i]);
		}
		free(token);
		token = l->truncated ? strdup(l->next_continuation) : NULL;
		kvt_list_free(l);
		if (!token)
			break;
	}
	qsort(got, ngot, sizeof(*got), str_cmp);
	if (!m->evicting) {
		if (ngot != nwant)
			fail_msg("op %lu: listing '%s' (delimiter %d) gave %zu entries, model %zu",
				 m->ops, prefix, delim, ngot, nwant);
		for (size_t i = 0; i < ngot; i++)
			if (strcmp(got[i], want[i]) != 0)
				fail_msg("op %lu: listing '%s': '%s', model '%s'", m->ops, prefix,
					 got[i], want[i]);
	} else {
		/* Evicted keys may be missing; nothing may be there that the model lacks. */
		size_t j = 0;

		for (size_t i = 0; i < ngot; i++) {
			while (j < nwant && strcmp(want[j], got[i]) < 0)
				j++;
			if (j == nwant || strcmp(want[j], got[i]) != 0)
				fail_msg("op %lu: listing '%s' has '%s', not in the model", m->ops,
					 prefix, got[i]);
		}
	}
	for (size_t i = 0; i < ngot; i++)
		free(got[i]);
	for (size_t i = 0; i < nwant; i++)
		free(want[i]);
}

static void reopen(struct model *m)
{
	kvt_store_close(m->st);
	m->st = test_store_open(m->env);
}

static void run(struct model *m)
{
	for (m->ops = 1; m->ops <= NOPS; m->ops++) {
		unsigned r = (unsigned)(rnd(m) % 100);
		int k = (int)(rnd(m) % NKEYS), k2 = (int)(rnd(m) % NKEYS);

		if (r < 28)
			op_put(m, k);
		else if (r < 43)
			check_key(m, k);	/* get */
		else if (r < 53)
			op_range(m, k);
		else if (r < 61)
			op_head(m, k);
		else if (r < 69)
			op_delete(m, k);
		else if (r < 77)
			op_copy(m, k, rnd(m) % 10 ? k2 : k);
		else if (r < 85)
			op_list(m);
		else if (r < 89)
			op_abort(m, k);
		else if (r < 93)
			op_reader_across_overwrite(m, k);
		else
			check_key(m, k);
		if (m->ops % CHECK_EVERY == 0)
			check_all(m);
		if (m->ops == NOPS / 2) {
			reopen(m);
			check_all(m);
		}
	}
	check_all(m);
	test_fsck_clean(m->st);
	reopen(m);
	check_all(m);
}

static uint64_t seed_for(uint64_t fixed)
{
	const char *s = getenv("KVT_TEST_SEED");

	return s ? strtoull(s, NULL, 0) : fixed;
}

/* ---- the runs --------------------------------------------------------------------- */

static void test_model_exact(void **state)
{
	struct test_env env;
	struct model m;
	struct kvt_store_stat s;
	uint64_t seed = seed_for(0x6b7674696572ull);

	(void)state;
	print_message("test_model_exact: seed %llu (KVT_TEST_SEED=%llu replays it)\n",
		      (unsigned long long)seed, (unsigned long long)seed);
	/* Room for every byte the run writes: reclaim never starts. */
	test_env_init(&env, 128 * MiB, 4 * MiB);
	model_init(&m, &env, 0, seed);
	m.st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(m.st, "bkt"), 0);
	run(&m);
	assert_int_equal(kvt_store_stat(m.st, &s), 0);
	print_message("test_model_exact: %lu puts, %lu MiB written, %llu segments reclaimed\n",
		      m.puts, m.bytes_written >> 20, (unsigned long long)s.reclaimed_segments);
	assert_int_equal(m.misses, 0);
	assert_int_equal(s.evicted_objects, 0);
	kvt_store_close(m.st);
	model_release(&m);
	test_env_release(&env);
}

static void test_model_evicting(void **state)
{
	struct test_env env;
	struct model m;
	struct kvt_store_stat s;
	uint64_t seed = seed_for(0x65766963ull);

	(void)state;
	print_message("test_model_evicting: seed %llu (KVT_TEST_SEED=%llu replays it)\n",
		      (unsigned long long)seed, (unsigned long long)seed);
	/* 8 segments of 1 MiB against a live set of about half that: reclaim
	 * runs all the time and must take live objects. */
	test_env_init(&env, 8 * MiB, MiB);
	model_init(&m, &env, 1, seed);
	m.st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(m.st, "bkt"), 0);
	run(&m);
	assert_int_equal(kvt_store_stat(m.st, &s), 0);
	print_message("test_model_evicting: %lu puts, %lu MiB written, %lu misses, %lu stale reads, "
		      "%llu evicted, %llu segments reclaimed\n", m.puts, m.bytes_written >> 20,
		      m.misses, m.stale, (unsigned long long)s.evicted_objects,
		      (unsigned long long)s.reclaimed_segments);
	/* The run went far past capacity: eviction really happened. */
	assert_true(m.bytes_written > 4 * 8 * MiB);
	assert_true(s.evicted_objects > 0);
	assert_true(s.reclaimed_segments > 0);
	kvt_store_close(m.st);
	model_release(&m);
	test_env_release(&env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_exact),
		cmocka_unit_test(test_model_evicting),
	};

	kvt_log_set_level(KVT_LOG_ERR);
	if (getenv("KVT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
