/*
 * test_multiproc.c - several processes on one store at once.
 *
 * Each child opens its own kvt_store on the shared directory after fork
 * (a store, its SQLite connections and its locks never cross a fork; the
 * parent closes its own before forking). They put, overwrite, delete and
 * read the same few keys while reclaim runs all the time: the capacity is
 * small, and one child does nothing but call kvt_store_reclaim().
 *
 * Every version's bytes are self-describing: the first 64 bytes name the
 * key, the writer's pid, its counter and the length, and the rest derive
 * from them. So any read can be checked on its own: it must return exactly
 * one version's bytes, of the key asked for, never a mix. A miss (-ENOENT:
 * deleted or evicted) and -ESTALE (reclaimed under the reader; retry) are
 * allowed; anything else makes the child exit non-zero with a message.
 *
 * Also: two processes creating the same bucket at once (one gets -EEXIST),
 * several committing the same key with IF_NONE_MATCH (exactly one wins,
 * and its bytes are what is stored), a full store whose last room an
 * idle process holds, and a reclaimer killed while it relocated pinned
 * objects.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "segment.h"
#include "store.h"

#define BUCKET "mproc"
#define NKEYS 10
#define NPINNED 2
#define VMAGIC 0x4d505631u	/* "MPV1" */
#define MAX_LEN (3u * 1024 * 1024 / 2)

/* ---- self-describing versions ----------------------------------------------- */

struct vhdr {
	uint32_t magic;
	uint32_t key;
	uint32_t pid;
	uint32_t flags;
	uint64_t counter;
	uint64_t len;
	uint64_t seed;
	uint64_t check;		/* of the fields above */
	uint8_t zero[16];
};

_Static_assert(sizeof(struct vhdr) == 64, "version header is 64 bytes");

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 31;
	return x;
}

static uint64_t version_seed(uint32_t key, uint32_t pid, uint64_t counter)
{
	return mix64(mix64(mix64(key + 1) ^ pid) ^ counter);
}

static uint64_t vhdr_check(const struct vhdr *h)
{
	return mix64(h->magic ^ mix64(h->key ^ mix64(h->pid ^ mix64(h->counter ^
		     mix64(h->len ^ mix64(h->seed ^ h->flags))))));
}

static void vhdr_make(struct vhdr *h, uint32_t key, uint32_t pid, uint64_t counter, uint64_t len)
{
	memset(h, 0, sizeof(*h));
	h->magic = VMAGIC;
	h->key = key;
	h->pid = pid;
	h->counter = counter;
	h->len = len;
	h->seed = version_seed(key, pid, counter);
	h->check = vhdr_check(h);
}

/* Bytes [off, off + len) of the version h describes. */
static void version_bytes(const struct vhdr *h, void *buf, size_t len, uint64_t off)
{
	test_fill(buf, len, h->seed, off);
	if (off < sizeof(*h)) {
		size_t n = sizeof(*h) - (size_t)off < len ? sizeof(*h) - (size_t)off : len;

		memcpy(buf, (const char *)h + off, n);
	}
}

static void key_name(char *buf, size_t len, uint32_t key)
{
	snprintf(buf, len, "k%u", key);
}

/* ---- children ------------------------------------------------------------------- */

struct child {
	struct kvt_store *st;
	uint32_t pid;
	uint64_t rng;
	uint64_t counter;
	unsigned char *buf, *want;
	/* what happened, for the message at exit */
	unsigned long puts, put_exists, deletes, reads, verified, misses, stale, reclaims;
	int broken;
};

static uint64_t rnd(struct child *c)
{
	c->rng += 0x9E3779B97F4A7C15ull;
	return mix64(c->rng);
}

static unsigned rnd_below(struct child *c, unsigned n)
{
	return (unsigned)(rnd(c) % n);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define CHILD_FAIL(c, ...)                                                          \
	do {                                                                        \
		fprintf(stderr, "child %u: ", (c)->pid);                            \
		fprintf(stderr, __VA_ARGS__);                                       \
		fprintf(stderr, "\n");                                              \
		(c)->broken = 1;                                                    \
	} while (0)

static size_t pick_len(struct child *c)
{
	unsigned r = rnd_below(c, 100);

	if (r < 40)
		return 64 + rnd_below(c, 8192);
	if (r < 80)
		return 8192 + rnd_below(c, 300 * 1024);
	return 300 * 1024 + rnd_below(c, MAX_LEN - 300 * 1024);
}

/* Writes one version of key: 0, or the commit's error. */
static int child_put(struct child *c, uint32_t key, unsigned flags, size_t len)
{
	struct kvt_put_opts opts = { .flags = flags };
	struct kvt_writer *w = NULL;
	struct vhdr h;
	char name[32];
	size_t done = 0;
	int rc;

	/* The first keys are pinned: reclaim relocates them under readers. */
	if (key < NPINNED)
		opts.flags |= KVT_PUT_PIN;
	key_name(name, sizeof(name), key);
	vhdr_make(&h, key, c->pid, ++c->counter, len);
	version_bytes(&h, c->buf, len, 0);
	rc = kvt_writer_open(c->st, BUCKET, name, &opts, &w);
	if (rc < 0)
		return rc;
	while (done < len) {
		size_t n = 1 + rnd_below(c, 400000);

		if (n > len - done)
			n = len - done;
		rc = kvt_writer_write(w, c->buf + done, n);
		if (rc < 0) {
			kvt_writer_abort(w);
			return rc;
		}
		done += n;
	}
	return kvt_writer_commit(w, NULL);
}

/*
 * Reads key through one reader: its header first, then a few ranges (and
 * sometimes the whole object), each checked against the version the header
 * names. Sometimes sleeps in between so that writers and reclaim move on.
 */
static void child_read(struct child *c, uint32_t key)
{
	struct kvt_reader *r = NULL;
	const struct kvt_object *o;
	struct vhdr h;
	char name[32];
	ssize_t n;
	int rc;

	key_name(name, sizeof(name), key);
	c->reads++;
	rc = kvt_reader_open(c->st, BUCKET, name, &r);
	if (rc == -ENOENT) {
		c->misses++;
		return;
	}
	if (rc < 0) {
		CHILD_FAIL(c, "open reader of '%s': %s", name, strerror(-rc));
		return;
	}
	o = kvt_reader_object(r);
	if (o->size < sizeof(h) || o->size > MAX_LEN || strcmp(o->key, name) != 0) {
		CHILD_FAIL(c, "'%s': size %llu or key '%s' of no version", name,
			   (unsigned long long)o->size, o->key);
		goto out;
	}
	n = kvt_reader_pread(r, &h, sizeof(h), 0);
	if (n == -ESTALE) {
		c->stale++;
		goto out;
	}
	if (n != (ssize_t)sizeof(h)) {
		CHILD_FAIL(c, "'%s': header read gave %zd (%s)", name, n, n < 0 ? strerror((int)-n) : "short");
		goto out;
	}
	if (h.magic != VMAGIC || h.check != vhdr_check(&h) || h.key != key || h.len != o->size ||
	    h.seed != version_seed(h.key, h.pid, h.counter)) {
		CHILD_FAIL(c, "'%s': header is no version of this key (magic %08x key %u pid %u "
			   "counter %llu len %llu, size %llu)", name, h.magic, h.key, h.pid,
			   (unsigned long long)h.counter, (unsigned long long)h.len,
			   (unsigned long long)o->size);
		goto out;
	}
	if (rnd_below(c, 8) == 0)
		usleep(rnd_below(c, 3000));
	for (int i = 0, ranges = 1 + (int)rnd_below(c, 3); i < ranges; i++) {
		uint64_t off, len;

		if (rnd_below(c, 4) == 0) {
			off = 0;
			len = o->size;
		} else {
			off = rnd(c) % o->size;
			len = 1 + rnd(c) % (o->size - off);
		}
		memset(c->buf, 0xee, (size_t)len);
		n = kvt_reader_pread(r, c->buf, (size_t)len, off);
		if (n == -ESTALE) {
			c->stale++;
			goto out;
		}
		if (n != (ssize_t)len) {
			CHILD_FAIL(c, "'%s' [%llu, +%llu): read gave %zd (%s)", name,
				   (unsigned long long)off, (unsigned long long)len, n,
				   n < 0 ? strerror((int)-n) : "short");
			goto out;
		}
		version_bytes(&h, c->want, (size_t)len, off);
		if (memcmp(c->buf, c->want, (size_t)len) != 0) {
			size_t at = 0;

			while (c->buf[at] == c->want[at])
				at++;
			CHILD_FAIL(c, "'%s' version pid %u counter %llu: wrong byte at %llu of "
				   "[%llu, +%llu)", name, h.pid, (unsigned long long)h.counter,
				   (unsigned long long)(off + at), (unsigned long long)off,
				   (unsigned long long)len);
			goto out;
		}
		if (rnd_below(c, 16) == 0)
			usleep(rnd_below(c, 2000));
	}
	c->verified++;
out:
	kvt_reader_close(r);
}

enum role { ROLE_MIXED, ROLE_RECLAIM };

static int child_main(struct test_env *env, enum role role, double seconds, unsigned max_ops)
{
	struct child c = { 0 };
	/* Enough puts to go round the capacity a few times, however slow the machine. */
	const unsigned min_ops = role == ROLE_MIXED ? 150 : 0;
	double end;
	int rc;

	c.pid = (uint32_t)getpid();
	c.rng = mix64(c.pid ^ (uint64_t)time(NULL));
	c.buf = malloc(MAX_LEN + 64);
	c.want = malloc(MAX_LEN + 64);
	if (!c.buf || !c.want)
		return 2;
	rc = kvt_store_open(&env->cfg, 0, &c.st);
	if (rc < 0) {
		fprintf(stderr, "child %u: cannot open the store: %s\n", c.pid, strerror(-rc));
		return 3;
	}
	end = now_s() + seconds;
	for (unsigned op = 0; op < max_ops && (op < min_ops || now_s() < end) && !c.broken; op++) {
		uint32_t key = rnd_below(&c, NKEYS);
		unsigned r = rnd_below(&c, 100);

		if (role == ROLE_RECLAIM) {
			if (r < 70) {
				/* Sometimes more than the watermarks ask: live objects go too. */
				rc = kvt_store_reclaim(c.st, 1 + rnd_below(&c, r < 10 ? 12 : 4));
				c.reclaims++;
				if (rc < 0 && rc != -ENOSPC)
					CHILD_FAIL(&c, "reclaim: %s", strerror(-rc));
			} else {
				child_read(&c, key);
			}
			continue;
		}
		if (r < 50) {
			rc = child_put(&c, key, 0, pick_len(&c));
			c.puts++;
			if (rc < 0)
				CHILD_FAIL(&c, "put k%u: %s", key, strerror(-rc));
		} else if (r < 55) {
			rc = child_put(&c, key, KVT_PUT_IF_NONE_MATCH, pick_len(&c));
			c.puts++;
			if (rc == -EEXIST)
				c.put_exists++;
			else if (rc < 0)
				CHILD_FAIL(&c, "put k%u if none match: %s", key, strerror(-rc));
		} else if (r < 63) {
			char name[32];

			key_name(name, sizeof(name), key);
			rc = kvt_object_delete(c.st, BUCKET, name);
			c.deletes++;
			if (rc < 0 && rc != -ENOENT)
				CHILD_FAIL(&c, "delete k%u: %s", key, strerror(-rc));
		} else {
			child_read(&c, key);
		}
	}
	fprintf(stderr, "child %u (%s): %lu puts (%lu exist), %lu deletes, %lu reads "
		"(%lu verified, %lu misses, %lu stale), %lu reclaims%s\n", c.pid,
		role == ROLE_RECLAIM ? "reclaim" : "mixed", c.puts, c.put_exists, c.deletes,
		c.reads, c.verified, c.misses, c.stale, c.reclaims, c.broken ? ": FAILED" : "");
	kvt_store_close(c.st);
	free(c.buf);
	free(c.want);
	return c.broken ? 1 : 0;
}

/* ---- the parent --------------------------------------------------------------------- */

/* Waits for every child, killing them all past the deadline; returns how many failed. */
static int wait_all(pid_t *pids, int *status, int n, double timeout)
{
	double end = now_s() + timeout;
	int left = n, failed = 0;

	for (int i = 0; i < n; i++)
		status[i] = -1;
	while (left > 0) {
		for (int i = 0; i < n; i++) {
			int st;

			if (status[i] != -1 || waitpid(pids[i], &st, WNOHANG) != pids[i])
				continue;
			status[i] = st;	/* judged by the caller */
			left--;
		}
		if (left > 0 && now_s() > end) {
			for (int i = 0; i < n; i++) {
				if (status[i] != -1)
					continue;
				fprintf(stderr, "child %d still running after %.0f s: killed\n",
					(int)pids[i], timeout);
				kill(pids[i], SIGKILL);
				waitpid(pids[i], &status[i], 0);
				left--;
				failed++;
			}
		}
		if (left > 0)
			usleep(5000);
	}
	return failed;
}

static struct kvt_store *open_store(struct test_env *env)
{
	return test_store_open(env);
}

/* Every key holds one whole version of itself, or nothing. */
static void check_keys(struct kvt_store *st)
{
	unsigned char *buf = malloc(MAX_LEN), *want = malloc(MAX_LEN);

	assert_non_null(buf);
	assert_non_null(want);
	for (uint32_t key = 0; key < NKEYS; key++) {
		struct kvt_reader *r = NULL;
		const struct kvt_object *o;
		struct vhdr h;
		char name[32];
		int rc;

		key_name(name, sizeof(name), key);
		rc = kvt_reader_open(st, BUCKET, name, &r);
		if (rc == -ENOENT)
			continue;
		assert_int_equal(rc, 0);
		o = kvt_reader_object(r);
		assert_true(o->size >= sizeof(h) && o->size <= MAX_LEN);
		assert_int_equal(kvt_reader_pread(r, buf, o->size, 0), (ssize_t)o->size);
		memcpy(&h, buf, sizeof(h));
		assert_int_equal(h.magic, VMAGIC);
		assert_int_equal(h.check, vhdr_check(&h));
		assert_int_equal(h.key, key);
		assert_int_equal(h.len, o->size);
		version_bytes(&h, want, o->size, 0);
		assert_memory_equal(buf, want, o->size);
		kvt_reader_close(r);
	}
	free(buf);
	free(want);
}

/*
 * nmixed children put, overwrite, delete and read the same keys, one more
 * only reclaims (and reads), for `seconds` each.
 */
static void stress(int nmixed, double seconds)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_store_stat s;
	pid_t pids[8];
	int status[8], n = nmixed + 1, bad = 0;

	assert_true(n <= 8);
	test_env_init(&env, 16u << 20, 1u << 20);
	st = open_store(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	kvt_store_close(st);

	fflush(NULL);
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			_exit(child_main(&env, i < nmixed ? ROLE_MIXED : ROLE_RECLAIM, seconds, 100000));
	}
	assert_int_equal(wait_all(pids, status, n, seconds + 40), 0);
	for (int i = 0; i < n; i++) {
		if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0) {
			fprintf(stderr, "child %d: %s %d\n", (int)pids[i],
				WIFEXITED(status[i]) ? "exit" : "signal",
				WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : WTERMSIG(status[i]));
			bad++;
		}
	}
	assert_int_equal(bad, 0);

	st = open_store(&env);
	assert_int_equal(kvt_store_stat(st, &s), 0);
	fprintf(stderr, "reclaimed %llu segments, evicted %llu objects, %llu checksum failures\n",
		(unsigned long long)s.reclaimed_segments, (unsigned long long)s.evicted_objects,
		(unsigned long long)s.checksum_failures);
	/* Reclaim really ran, and no reader ever met bytes that failed their checksum. */
	assert_true(s.reclaimed_segments > 0);
	assert_int_equal(s.checksum_failures, 0);
	assert_int_equal(s.segments_open, 0);
	check_keys(st);
	test_fsck_clean(st);
	kvt_store_close(st);
	test_env_release(&env);
}

static void test_stress_two(void **state)
{
	(void)state;
	stress(2, 3.0);
}

static void test_stress_three(void **state)
{
	(void)state;
	stress(3, 3.0);
}

/* ---- races on one name -------------------------------------------------------------- */

/*
 * A start line for n children: each says it is ready on `ready`, then
 * blocks reading `go` until the parent closes its write end, which wakes
 * them all at once.
 */
struct gate {
	int ready[2];
	int go[2];
};

static void gate_init(struct gate *g)
{
	assert_int_equal(pipe(g->ready), 0);
	assert_int_equal(pipe(g->go), 0);
}

/* In the child. */
static void gate_pass(struct gate *g)
{
	char b = 'r';

	close(g->ready[0]);
	close(g->go[1]);
	if (write(g->ready[1], &b, 1) != 1)
		_exit(90);
	while (read(g->go[0], &b, 1) < 0 && errno == EINTR)
		;
}

/* In the parent: waits for n ready children, then opens the gate. */
static void gate_open(struct gate *g, int n)
{
	char b;

	close(g->ready[1]);
	for (int i = 0; i < n; i++)
		assert_int_equal(read(g->ready[0], &b, 1), 1);
	close(g->go[1]);
	close(g->go[0]);
	close(g->ready[0]);
}

/* Exit codes of the racing children. */
enum { RACE_WON = 0, RACE_EXISTS = 1, RACE_ERROR = 2 };

static int race_bucket_child(struct test_env *env, struct gate *g, const char *name)
{
	struct kvt_store *st = NULL;
	int rc = kvt_store_open(&env->cfg, 0, &st);

	if (rc < 0)
		_exit(RACE_ERROR);
	gate_pass(g);
	rc = kvt_bucket_create(st, name);
	kvt_store_close(st);
	if (rc < 0 && rc != -EEXIST)
		fprintf(stderr, "bucket create '%s': %s\n", name, strerror(-rc));
	return rc == 0 ? RACE_WON : rc == -EEXIST ? RACE_EXISTS : RACE_ERROR;
}

static void test_bucket_race(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	const int nproc = 3;

	(void)state;
	test_env_init(&env, 4u << 20, 1u << 20);
	st = open_store(&env);
	kvt_store_close(st);
	for (int round = 0; round < 8; round++) {
		char name[32];
		struct gate g;
		pid_t pids[3];
		int status[3], won = 0, lost = 0;

		snprintf(name, sizeof(name), "race-%d", round);
		gate_init(&g);
		fflush(NULL);
		for (int i = 0; i < nproc; i++) {
			pids[i] = fork();
			assert_true(pids[i] >= 0);
			if (pids[i] == 0)
				_exit(race_bucket_child(&env, &g, name));
		}
		gate_open(&g, nproc);
		assert_int_equal(wait_all(pids, status, nproc, 30), 0);
		for (int i = 0; i < nproc; i++) {
			assert_true(WIFEXITED(status[i]));
			won += WEXITSTATUS(status[i]) == RACE_WON;
			lost += WEXITSTATUS(status[i]) == RACE_EXISTS;
		}
		assert_int_equal(won, 1);
		assert_int_equal(lost, nproc - 1);
		st = open_store(&env);
		assert_int_equal(kvt_bucket_exists(st, name), 0);
		kvt_store_close(st);
	}
	test_env_release(&env);
}

/*
 * Each child writes its own version of one key with IF_NONE_MATCH, waits at
 * the gate with everything written, then commits.
 */
static int race_inm_child(struct test_env *env, struct gate *g, const char *name, uint32_t key,
			  size_t len)
{
	struct kvt_put_opts opts = { .flags = KVT_PUT_IF_NONE_MATCH };
	struct kvt_store *st = NULL;
	struct kvt_writer *w = NULL;
	unsigned char *buf = malloc(len);
	struct vhdr h;
	int rc = kvt_store_open(&env->cfg, 0, &st);

	if (rc < 0 || !buf)
		_exit(RACE_ERROR);
	vhdr_make(&h, key, (uint32_t)getpid(), 1, len);
	version_bytes(&h, buf, len, 0);
	rc = kvt_writer_open(st, BUCKET, name, &opts, &w);
	if (rc == 0)
		rc = kvt_writer_write(w, buf, len);
	gate_pass(g);
	if (rc == 0)
		rc = kvt_writer_commit(w, NULL);
	else
		kvt_writer_abort(w);
	kvt_store_close(st);
	free(buf);
	if (rc < 0 && rc != -EEXIST)
		fprintf(stderr, "put '%s' if none match: %s\n", name, strerror(-rc));
	return rc == 0 ? RACE_WON : rc == -EEXIST ? RACE_EXISTS : RACE_ERROR;
}

static void test_if_none_match_race(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	const int nproc = 3;

	(void)state;
	test_env_init(&env, 32u << 20, 2u << 20);
	st = open_store(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	kvt_store_close(st);
	for (int round = 0; round < 10; round++) {
		const uint32_t key = 100 + (uint32_t)round;
		const size_t len = round % 2 ? 3000 : SEG_PAYLOAD_MAX + 5000;
		struct kvt_reader *r = NULL;
		unsigned char *buf, *want;
		char name[32];
		struct gate g;
		struct vhdr h;
		pid_t pids[3], winner = 0;
		int status[3], won = 0, lost = 0;

		key_name(name, sizeof(name), key);
		gate_init(&g);
		fflush(NULL);
		for (int i = 0; i < nproc; i++) {
			pids[i] = fork();
			assert_true(pids[i] >= 0);
			if (pids[i] == 0)
				_exit(race_inm_child(&env, &g, name, key, len));
		}
		gate_open(&g, nproc);
		assert_int_equal(wait_all(pids, status, nproc, 30), 0);
		for (int i = 0; i < nproc; i++) {
			assert_true(WIFEXITED(status[i]));
			if (WEXITSTATUS(status[i]) == RACE_WON) {
				won++;
				winner = pids[i];
			}
			lost += WEXITSTATUS(status[i]) == RACE_EXISTS;
		}
		assert_int_equal(won, 1);
		assert_int_equal(lost, nproc - 1);

		/* What is stored is the winner's version, whole. */
		st = open_store(&env);
		buf = malloc(len);
		want = malloc(len);
		assert_non_null(buf);
		assert_non_null(want);
		assert_int_equal(kvt_reader_open(st, BUCKET, name, &r), 0);
		assert_int_equal(kvt_reader_object(r)->size, len);
		assert_int_equal(kvt_reader_pread(r, buf, len, 0), (ssize_t)len);
		vhdr_make(&h, key, (uint32_t)winner, 1, len);
		version_bytes(&h, want, len, 0);
		assert_memory_equal(buf, want, len);
		kvt_reader_close(r);
		free(buf);
		free(want);
		if (round == 9)
			test_fsck_clean(st);
		kvt_store_close(st);
	}
	test_env_release(&env);
}

/*
 * The threads of a process share its append-lock descriptor, and the
 * kernel does not make its locks exclude them. A claim that raced another
 * thread for a segment took the lock too, failed in the catalog, and its
 * unlock dropped the lock for both: another process's recovery then took
 * the segment still being appended to for a dead one's, and sealed it.
 */
static void test_append_lock_threads(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	int status = -1;
	pid_t pid;

	(void)state;
	test_env_init(&env, 16u << 20, 1u << 20);
	st = test_store_open(&env);
	assert_int_equal(store_append_trylock(st, 1), 0);
	/* Another thread here: it must not get it, nor then drop it. */
	assert_int_equal(store_append_trylock(st, 1), -EAGAIN);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Another process, as recovery sees it: segment 1 has a live owner. */
		int fd = seg_lock_fd_open(st->sf);

		_exit(fd >= 0 && seg_append_trylock(fd, 1) == -EAGAIN &&
		      seg_append_trylock(fd, 2) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	store_append_unlock(st, 1);
	assert_int_equal(store_append_trylock(st, 1), 0);
	store_append_unlock(st, 1);
	kvt_store_close(st);
	test_env_release(&env);
}

static uint64_t free_segments(struct kvt_store *st)
{
	uint64_t counts[4];

	assert_int_equal(cat_segment_counts(store_cat(st), counts), 0);
	return counts[SEG_FREE];
}

/*
 * A reclaim that died while it relocated pinned objects left the hot tier
 * full for good. It had taken the one free segment (the reserve,
 * STORE_RESERVE_SEGS) to copy the victim's pinned objects into, and died
 * after the first copy: the victim still held pinned data, no segment was
 * free, recovery sealed the dead reclaimer's target as full, and reclaim
 * relocated only while a segment was free. Every put failed -ENOSPC from
 * then on, and recalls of cold objects too (113 unreadable in a stress
 * run), in a store of which most was plain cache.
 *
 * Here 19 of 20 segments hold two pinned objects and one plain one each,
 * the 20th is the reserve; a child reclaims and dies at the write of its
 * second copy (IO_FAULT_EXIT: a kill -9 between the first move and the
 * second). Afterwards puts must find room (reclaim
 * moves the rest of the victim into the room left in the target, which
 * writers must not fill first), every pinned object must read back, and
 * the reserve must be free again. With G4 (the demoter running) a writer
 * that finds no room wakes the demoter and claims at once, without
 * reclaiming first: the room left in the target is the first part-full
 * segment it would reopen.
 */
static void reclaim_killed_relocating(int g4)
{
	struct kvt_put_opts pin = { .flags = KVT_PUT_PIN };
	struct test_env env;
	struct kvt_store *st;
	int status = -1, rc = 0;
	char key[32];
	pid_t pid;

	test_env_init(&env, 20u << 20, 1u << 20);
	if (g4) {
		free(env.cfg.g4.url);
		env.cfg.g4.url = NULL;	/* file://<store dir>/g4; nothing here is session state */
	}
	/* No reclaim while it fills: every segment but the reserve is used. */
	env.cfg.store.high_watermark = 1.0;
	env.cfg.store.low_watermark = 0.95;
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	for (unsigned s = 0; s < 19; s++) {
		for (unsigned p = 0; p < 2; p++) {
			snprintf(key, sizeof(key), "pin%u-%u", s, p);
			assert_int_equal(test_put_opts(st, BUCKET, key, 150000, 100 + 2 * s + p, &pin), 0);
		}
		snprintf(key, sizeof(key), "cache%u", s);
		assert_int_equal(test_put(st, BUCKET, key, 741376, 200 + s), 0);
	}
	assert_int_equal(free_segments(st), STORE_RESERVE_SEGS);
	kvt_store_close(st);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The first copy is written and moved; the process dies at the
		 * second copy's write, its victim RECLAIMING, its target OPEN. */
		struct io_fault_plan plan = { .kind = IO_FAULT_EXIT, .ops = 1u << IO_WRITE, .nth = 2 };

		rc = kvt_store_open(&env.cfg, 0, &st);
		if (rc == 0) {
			store_set_fault_plan(st, &plan);
			rc = kvt_store_reclaim(st, 1);
		}
		_exit(1);	/* reclaim got past the second write */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == IO_FAULT_EXIT_STATUS);

	/* Recovery at open: the child's target is sealed, nothing is free. */
	st = test_store_open(&env);
	assert_int_equal(free_segments(st), 0);
	/* Puts first: they must neither fail nor take the room reclaim needs. */
	for (unsigned i = 0; i < 30 && rc == 0; i++) {
		snprintf(key, sizeof(key), "new%u", i);
		rc = test_put(st, BUCKET, key, 200000, 300 + i);
	}
	assert_int_equal(rc, 0);
	for (unsigned s = 0; s < 19; s++)
		for (unsigned p = 0; p < 2; p++) {
			snprintf(key, sizeof(key), "pin%u-%u", s, p);
			assert_int_equal(test_check(st, BUCKET, key, 150000, 100 + 2 * s + p), 0);
		}
	assert_int_equal(kvt_store_reclaim(st, 1), 0);
	assert_true(free_segments(st) > STORE_RESERVE_SEGS);
	test_fsck_clean(st);
	kvt_store_close(st);
	test_env_release(&env);
}

static void test_reclaim_killed_relocating(void **state)
{
	(void)state;
	reclaim_killed_relocating(0);
}

static void test_reclaim_killed_relocating_g4(void **state)
{
	(void)state;
	reclaim_killed_relocating(1);
}

/*
 * A process that wrote a little and went idle kept appending rights to its
 * open segment for good, so a writer in another process found the store
 * full (-ENOSPC at once) with that room unused: a store of four segments
 * shared by kvtier-gateway and kvtier-fuse. Now the idle process seals it
 * above the high watermark, and the writer waits for that and takes it:
 * reclaiming itself (no G4), or waiting for the demoter, which gave up
 * after two passes that freed nothing (with G4; everything here is pinned).
 */
static void idle_segment_sealed(int g4)
{
	struct kvt_put_opts pin = { .flags = KVT_PUT_PIN };
	struct test_env env;
	struct kvt_store *st;
	struct gate g;
	int status = -1, rc = 0;
	char key[16];
	pid_t pid;

	test_env_init(&env, 4u << 20, 1u << 20);
	/* The flusher's tick; the default with G4: the writer's patience is
	 * counted in ticks, and the demoter's passes run every second. */
	env.cfg.store.access_flush_ms = g4 ? 1000 : 100;
	if (g4) {
		free(env.cfg.g4.url);
		env.cfg.g4.url = NULL;	/* file://<store dir>/g4 */
	}
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	kvt_store_close(st);
	gate_init(&g);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* 4 KiB, pinned, into a segment of its own, then idle until the
		 * gate opens. */
		rc = kvt_store_open(&env.cfg, 0, &st);
		if (rc == 0)
			rc = test_put_opts(st, BUCKET, "small", 4096, 1, &pin);
		gate_pass(&g);
		if (rc == 0)
			kvt_store_close(st);
		_exit(rc == 0 ? 0 : 1);
	}
	/* The child's put is committed once it passes the gate's first half. */
	close(g.ready[1]);
	assert_int_equal(read(g.ready[0], key, 1), 1);
	st = test_store_open(&env);
	/* Two of the three other segments, nearly full with pinned objects
	 * (writers leave the third to reclaim, STORE_RESERVE_SEGS): reclaim
	 * cannot make room, and the child holds the fourth: the last put
	 * must go after the child's 4 KiB there. Nothing is asserted until
	 * the child is gone: a failed test must not leave it waiting, nor
	 * fork the next test's children from a process with a store open. */
	for (int i = 0; i < 3 && rc == 0; i++) {
		snprintf(key, sizeof(key), "big%d", i);
		rc = test_put_opts(st, BUCKET, key, 960u << 10, 10 + (uint64_t)i, &pin);
	}
	close(g.go[1]);
	close(g.go[0]);
	close(g.ready[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (rc == 0)
		rc = test_check(st, BUCKET, "small", 4096, 1);
	if (rc == 0)
		rc = test_check(st, BUCKET, "big2", 960u << 10, 12);
	kvt_store_close(st);
	assert_int_equal(rc, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	st = test_store_open(&env);
	test_fsck_clean(st);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A store grows only when no other process has it open. A process that
 * opened it before has tables for the segments it found: opened beside it
 * with a larger capacity, the store grew, and its first write past them
 * failed EBADF, until it was restarted (found through kvtier-gateway and
 * `kvtier init`). Two opens of one process stand for two processes: each
 * holds its own lock on the store's users (store.c, store_users_lock).
 */
static void test_grow_while_open(void **state)
{
	struct kvt_store *a, *b;
	struct kvt_store_stat s;
	struct test_env env;
	char key[32];

	(void)state;
	test_env_init(&env, 8u << 20, 1u << 20);
	a = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(a, BUCKET), 0);
	env.cfg.store.capacity = 12u << 20;
	assert_int_equal(kvt_store_open(&env.cfg, 0, &b), 0);
	assert_int_equal(kvt_store_stat(b, &s), 0);
	assert_int_equal(s.capacity, 8u << 20);
	/* Every segment a has, then one more: a writes where it can. */
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "b%d", i);
		assert_int_equal(test_put(b, BUCKET, key, 900u << 10, (uint64_t)i), 0);
	}
	assert_int_equal(test_put(a, BUCKET, "a", 900u << 10, 100), 0);
	assert_int_equal(test_check(b, BUCKET, "a", 900u << 10, 100), 0);
	kvt_store_close(b);
	kvt_store_close(a);
	/* Alone, it grows. */
	a = test_store_open(&env);
	assert_int_equal(kvt_store_stat(a, &s), 0);
	assert_int_equal(s.capacity, 12u << 20);
	assert_int_equal(test_check(a, BUCKET, "a", 900u << 10, 100), 0);
	test_fsck_clean(a);
	kvt_store_close(a);
	test_env_release(&env);
}

static void test_idle_segment_sealed(void **state)
{
	(void)state;
	idle_segment_sealed(0);
}

static void test_idle_segment_sealed_g4(void **state)
{
	(void)state;
	idle_segment_sealed(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_lock_threads),
		cmocka_unit_test(test_bucket_race),
		cmocka_unit_test(test_if_none_match_race),
		cmocka_unit_test(test_stress_two),
		cmocka_unit_test(test_stress_three),
		cmocka_unit_test(test_reclaim_killed_relocating),
		cmocka_unit_test(test_reclaim_killed_relocating_g4),
		cmocka_unit_test(test_grow_while_open),
		cmocka_unit_test(test_idle_segment_sealed),
		cmocka_unit_test(test_idle_segment_sealed_g4),
	};

	/* KVT_TEST_FILTER=test_name runs one test (a cmocka pattern). */
	if (getenv("KVT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
