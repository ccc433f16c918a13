/*
 * test_crash.c - kill -9 in the middle of writing, then restart.
 *
 * Each round forks a child that opens the store and writes as fast as it
 * can: puts of random sizes (0 to 3 MiB) over a few keys, so mostly
 * overwrites, some deletes, some reads. Around every change it appends a
 * record to a journal file (write + fdatasync): an intent before, a done
 * record after the call returned 0. The parent kills the child with SIGKILL
 * at a random moment, reopens the store (which recovers the dead child's
 * segments) and checks it against the journal:
 *
 *   - a key whose last record is a done put reads back byte-exact;
 *   - a key whose last record is a done delete is absent;
 *   - a key with an intent and no done record (the change in flight when
 *     the child died, or committed just before) is either its previous
 *     state or the new one, never anything else;
 *   - an object may also be missing if reclaim evicted it (counted by
 *     kvt_store_stat().evicted_objects; the capacity makes that rare);
 *   - fsck is clean, no segment is left OPEN or RECLAIMING by the dead
 *     child, and the store accepts new writes.
 *
 * The child writes from WRITERS threads, each on keys of its own, so that
 * their commits share catalog transactions (group commit, src/commit.c)
 * and the kill also lands while a group commits: a writer is acknowledged
 * only once the transaction holding its put committed. The journal lists
 * only acknowledged changes and each thread runs one change at a time, so
 * at most one key per thread is in doubt per round.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "store.h"

#define BUCKET "crash"
#define NKEYS 8
#define MAX_LEN (3u * 1024 * 1024)
#define ROUNDS 50
#define WRITERS 4	/* threads in the child; NKEYS is a multiple */

/* ---- payloads -------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 31;
	return x;
}

static void key_name(char *buf, size_t len, unsigned key)
{
	snprintf(buf, len, "s%u/obj", key);
}

static __thread unsigned char *g_buf;	/* MAX_LEN, per thread */

/* 0 if bucket/key is exactly len bytes of test_fill(seed), else -errno or -EBADMSG. */
static int check_object(struct kvt_store *st, unsigned key, uint64_t len, uint64_t seed)
{
	char name[32];

	key_name(name, sizeof(name), key);
	return test_check(st, BUCKET, name, len, seed);
}

/* ---- the journal ------------------------------------------------------------------ */

enum jtype { J_PUT_INTENT = 1, J_PUT_DONE, J_PUT_FAILED, J_DEL_INTENT, J_DEL_DONE, J_ERROR };

struct jrec {
	uint32_t magic;
	uint32_t type;
	uint32_t key;
	int32_t err;
	uint64_t seed;
	uint64_t len;
	uint64_t check;
};

#define JMAGIC 0x4a524e4cu	/* "JRNL" */

static uint64_t jrec_check(const struct jrec *j)
{
	return mix64(j->magic ^ mix64(j->type ^ mix64(j->key ^ mix64((uint32_t)j->err ^
		     mix64(j->seed ^ mix64(j->len))))));
}

static void journal_append(int fd, enum jtype type, unsigned key, uint64_t seed, uint64_t len,
			   int err)
{
	struct jrec j = { JMAGIC, type, key, err, seed, len, 0 };

	j.check = jrec_check(&j);
	if (write(fd, &j, sizeof(j)) != (ssize_t)sizeof(j) || fdatasync(fd) < 0)
		_exit(91);
}

/* ---- what the parent knows ------------------------------------------------------------ */

struct state {
	int present;
	uint64_t seed, len;
};

static struct state expect[NKEYS];	/* after the last round, as checked */

/* ---- the child ---------------------------------------------------------------------------- */

static __thread uint64_t g_rng;

static uint64_t rnd(void)
{
	g_rng += 0x9E3779B97F4A7C15ull;
	return mix64(g_rng);
}

static size_t pick_len(void)
{
	switch (rnd() % 4) {
	case 0:
		return rnd() % 5 == 0 ? 0 : rnd() % 4096;
	case 1:
		return rnd() % (256 * 1024);
	default:
		return rnd() % (MAX_LEN + 1);
	}
}

static int child_put(struct kvt_store *st, unsigned key, uint64_t seed, size_t len)
{
	struct kvt_writer *w = NULL;
	char name[32];
	size_t done = 0;
	int rc;

	key_name(name, sizeof(name), key);
	test_fill(g_buf, len, seed, 0);
	rc = kvt_writer_open(st, BUCKET, name, NULL, &w);
	if (rc < 0)
		return rc;
	while (done < len) {
		size_t n = 1 + rnd() % (512 * 1024);

		if (n > len - done)
			n = len - done;
		rc = kvt_writer_write(w, g_buf + done, n);
		if (rc < 0) {
			kvt_writer_abort(w);
			return rc;
		}
		done += n;
	}
	return kvt_writer_commit(w, NULL);
}

struct child {
	struct kvt_store *st;
	int journal_fd;
	int opened_fd;		/* told of the first acknowledged change, then closed */
	unsigned round;
	struct state mine[NKEYS];	/* each thread touches only its own keys */
};

/* One writer thread: keys tid, tid + WRITERS, ...; never returns normally
 * before the give-up time, and reports a failure by the process's exit. */
struct writer_arg {
	struct child *ch;
	unsigned tid;
};

static void *child_writer(void *arg)
{
	struct writer_arg *wa = arg;
	struct child *ch = wa->ch;
	struct kvt_store *st = ch->st;
	struct state *mine = ch->mine;
	uint64_t counter = 0;
	time_t give_up = time(NULL) + 10;
	int fd = ch->journal_fd, rc;

	g_buf = malloc(MAX_LEN);
	if (!g_buf)
		_exit(97);
	g_rng = mix64(getpid() ^ ((uint64_t)ch->round << 32) ^ ((uint64_t)wa->tid << 48));
	while (time(NULL) < give_up) {
		unsigned key = wa->tid + WRITERS * (unsigned)(rnd() % (NKEYS / WRITERS));
		unsigned op = (unsigned)(rnd() % 100);
		char name[32];

		key_name(name, sizeof(name), key);
		if (op < 75) {
			uint64_t seed = (uint64_t)(ch->round + 1) << 32 | (uint64_t)wa->tid << 24 |
					++counter;
			size_t len = pick_len();
			int ofd;

			journal_append(fd, J_PUT_INTENT, key, seed, len, 0);
			rc = child_put(st, key, seed, len);
			if (rc < 0) {
				journal_append(fd, J_PUT_FAILED, key, seed, len, rc);
				continue;
			}
			journal_append(fd, J_PUT_DONE, key, seed, len, 0);
			mine[key] = (struct state){ 1, seed, len };
			/* The first change acknowledged: tell the parent, once. */
			ofd = __atomic_exchange_n(&ch->opened_fd, -1, __ATOMIC_ACQ_REL);
			if (ofd >= 0) {
				if (write(ofd, "d", 1) < 0 && errno != EPIPE)
					_exit(96);
				close(ofd);
			}
		} else if (op < 90) {
			journal_append(fd, J_DEL_INTENT, key, 0, 0, 0);
			rc = kvt_object_delete(st, BUCKET, name);
			if (rc < 0 && rc != -ENOENT) {
				journal_append(fd, J_ERROR, key, 0, 0, rc);
				_exit(93);
			}
			journal_append(fd, J_DEL_DONE, key, 0, 0, 0);
			mine[key].present = 0;
		} else {
			/* Reads during the run: what this child knows, or evicted. */
			rc = mine[key].present ? check_object(st, key, mine[key].len, mine[key].seed)
					       : check_object(st, key, 0, 0);
			if (mine[key].present ? rc != 0 && rc != -ENOENT : rc != -ENOENT) {
				journal_append(fd, J_ERROR, key, mine[key].seed, mine[key].len, rc);
				_exit(94);
			}
		}
	}
	return NULL;
}

/* Runs until killed (or, should the parent be gone, for a few seconds). */
static int child_main(struct test_env *env, const char *journal, unsigned round, int opened_fd)
{
	static struct child ch;
	struct writer_arg wa[WRITERS];
	pthread_t tid[WRITERS];
	int rc;

	memcpy(ch.mine, expect, sizeof(ch.mine));
	ch.round = round;
	ch.journal_fd = open(journal, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (ch.journal_fd < 0)
		return 90;
	rc = kvt_store_open(&env->cfg, 0, &ch.st);
	if (rc < 0) {
		journal_append(ch.journal_fd, J_ERROR, 0, 0, 0, rc);
		return 92;
	}
	/* The parent may not be listening (it closed its end): no SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	if (write(opened_fd, "o", 1) < 0 && errno != EPIPE)
		return 96;
	ch.opened_fd = opened_fd;
	for (unsigned t = 0; t < WRITERS; t++) {
		wa[t] = (struct writer_arg){ &ch, t };
		if (pthread_create(&tid[t], NULL, child_writer, &wa[t]) != 0)
			return 98;
	}
	for (unsigned t = 0; t < WRITERS; t++)
		pthread_join(tid[t], NULL);
	kvt_store_close(ch.st);
	return 95;	/* never killed: the parent is gone */
}

/* ---- the parent --------------------------------------------------------------------------- */

struct round_log {
	struct jrec *recs;
	size_t n;
};

static void journal_read(const char *path, struct round_log *log)
{
	FILE *f = fopen(path, "rb");
	struct jrec j;

	log->recs = NULL;
	log->n = 0;
	if (!f)
		return;
	while (fread(&j, sizeof(j), 1, f) == 1) {
		if (j.magic != JMAGIC || j.check != jrec_check(&j))
			break;	/* a torn tail record, if the kill came mid-write */
		log->recs = realloc(log->recs, (log->n + 1) * sizeof(j));
		assert_non_null(log->recs);
		log->recs[log->n++] = j;
	}
	fclose(f);
}

struct stats {
	unsigned puts_done, deletes_done, in_doubt, doubt_new, evicted_missing, killed_in_open;
	unsigned put_failures;
};

/* Checks every key against the journal of this round; updates expect[]. */
static void check_round(struct kvt_store *st, const struct round_log *log, uint64_t evicted_delta,
			struct stats *stats)
{
	struct state pending[NKEYS] = { { 0, 0, 0 } };
	int doubt[NKEYS] = { 0 };
	unsigned missing = 0;

	for (size_t i = 0; i < log->n; i++) {
		const struct jrec *j = &log->recs[i];

		if (j->type == J_ERROR) {
			fail_msg("child reported an error on key %u: %s (seed %llu len %llu)", j->key,
				 strerror(-j->err), (unsigned long long)j->seed,
				 (unsigned long long)j->len);
		}
		assert_true(j->key < NKEYS);
		switch (j->type) {
		case J_PUT_INTENT:
			pending[j->key] = (struct state){ 1, j->seed, j->len };
			doubt[j->key] = 1;
			break;
		case J_PUT_DONE:
			assert_true(doubt[j->key] && pending[j->key].seed == j->seed);
			expect[j->key] = pending[j->key];
			doubt[j->key] = 0;
			stats->puts_done++;
			break;
		case J_PUT_FAILED:
			/* A failed put publishes nothing. */
			fprintf(stderr, "put of key %u (%llu bytes) failed: %s\n", j->key,
				(unsigned long long)j->len, strerror(-j->err));
			doubt[j->key] = 0;
			stats->put_failures++;
			break;
		case J_DEL_INTENT:
			pending[j->key] = (struct state){ 0, 0, 0 };
			doubt[j->key] = 1;
			break;
		case J_DEL_DONE:
			expect[j->key].present = 0;
			doubt[j->key] = 0;
			stats->deletes_done++;
			break;
		default:
			fail_msg("journal record of type %u", j->type);
		}
	}

	for (unsigned key = 0; key < NKEYS; key++) {
		struct kvt_object *o = NULL;
		char name[32];
		int rc, ok = 0;

		key_name(name, sizeof(name), key);
		rc = kvt_object_head(st, BUCKET, name, &o);
		kvt_object_free(o);
		if (rc == -ENOENT) {
			if (!expect[key].present) {
				ok = 1;
			} else if (doubt[key] && !pending[key].present) {
				ok = 1;		/* the delete in flight went through */
				stats->doubt_new++;
			} else {
				missing++;	/* evicted, or lost: judged below */
				ok = 1;
			}
			if (ok)
				expect[key].present = 0;
		} else {
			assert_int_equal(rc, 0);
			if (expect[key].present &&
			    check_object(st, key, expect[key].len, expect[key].seed) == 0) {
				ok = 1;
			} else if (doubt[key] && pending[key].present &&
				   check_object(st, key, pending[key].len, pending[key].seed) == 0) {
				ok = 1;		/* committed before the kill, not yet journaled */
				expect[key] = pending[key];
				stats->doubt_new++;
			}
			if (!ok)
				fail_msg("key %u: present but neither its committed version (%s, seed "
					 "%llu, %llu bytes) nor the one in flight (%s, seed %llu, "
					 "%llu bytes)", key, expect[key].present ? "put" : "none",
					 (unsigned long long)expect[key].seed,
					 (unsigned long long)expect[key].len,
					 doubt[key] ? (pending[key].present ? "put" : "delete") : "none",
					 (unsigned long long)pending[key].seed,
					 (unsigned long long)pending[key].len);
		}
		stats->in_doubt += doubt[key];
	}
	/* A committed object may be missing only if reclaim dropped that many. */
	if (missing > evicted_delta)
		fail_msg("%u committed objects are missing, reclaim evicted %llu", missing,
			 (unsigned long long)evicted_delta);
	stats->evicted_missing += missing;
}

static uint64_t g_seed = 0x5eed;

static unsigned prand(unsigned n)
{
	g_seed += 0x9E3779B97F4A7C15ull;
	return (unsigned)(mix64(g_seed) % n);
}

/* No segment is left OPEN or RECLAIMING, beyond `own` OPEN ones of this process. */
static void check_segments(struct kvt_store *st, uint64_t own)
{
	uint64_t counts[4];

	assert_int_equal(cat_segment_counts(store_cat(st), counts), 0);
	assert_true(counts[SEG_OPEN] <= own);
	assert_int_equal(counts[SEG_RECLAIMING], 0);
}

static void test_kill9_rounds(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_store_stat s;
	struct stats stats = { 0 };
	uint64_t evicted = 0;
	char journal[600];

	(void)state;
	g_buf = malloc(MAX_LEN);
	assert_non_null(g_buf);
	/* 32 segments: 8 keys of at most 3 MiB fill at most a third of it. */
	test_env_init(&env, 64u << 20, 2u << 20);
	snprintf(journal, sizeof(journal), "%s/journal", env.dir);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, BUCKET), 0);
	kvt_store_close(st);
	memset(expect, 0, sizeof(expect));

	for (unsigned round = 0; round < ROUNDS; round++) {
		struct round_log log;
		struct pollfd pfd;
		int opened[2];
		pid_t pid;
		int status;

		unlink(journal);
		assert_int_equal(pipe(opened), 0);
		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(opened[0]);
			_exit(child_main(&env, journal, round, opened[1]));
		}
		close(opened[1]);
		/*
		 * Whatever the machine's load, rounds die at every stage: even
		 * rounds count the time from the fork (and may die opening and
		 * recovering the store), rounds 3, 7, ... from the moment the
		 * child has the store open, rounds 1, 5, ... from its first
		 * acknowledged put.
		 */
		for (unsigned k = 0; k < (round % 2 ? (round % 4 == 1 ? 2u : 1u) : 0u); k++) {
			char b;

			pfd = (struct pollfd){ .fd = opened[0], .events = POLLIN };
			assert_int_equal(poll(&pfd, 1, 30000), 1);
			if (read(opened[0], &b, 1) != 1)
				break;	/* the child exited: judged below */
		}
		close(opened[0]);
		usleep(5000 + 1000 * prand(96));
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		journal_read(journal, &log);
		if (WIFEXITED(status)) {
			for (size_t i = 0; i < log.n; i++)
				if (log.recs[i].type == J_ERROR)
					fprintf(stderr, "child error on key %u: %s\n", log.recs[i].key,
						strerror(-log.recs[i].err));
			fail_msg("round %u: the child exited with %d before it was killed", round,
				 WEXITSTATUS(status));
		}
		assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		stats.killed_in_open += log.n == 0;

		/* Restart: recovery runs in open. */
		st = test_store_open(&env);
		check_segments(st, 0);
		assert_int_equal(kvt_store_stat(st, &s), 0);
		assert_int_equal(s.segments_open, 0);
		check_round(st, &log, s.evicted_objects - evicted, &stats);
		evicted = s.evicted_objects;
		free(log.recs);
		test_fsck_clean(st);

		/* The store takes new writes, and only this process has a segment open. */
		assert_int_equal(test_put(st, BUCKET, "after/restart", 100000 + round, round), 0);
		assert_int_equal(test_check(st, BUCKET, "after/restart", 100000 + round, round), 0);
		check_segments(st, 1);
		kvt_store_close(st);
	}

	/* A last look after a clean close and reopen. */
	st = test_store_open(&env);
	check_segments(st, 0);
	for (unsigned key = 0; key < NKEYS; key++) {
		if (expect[key].present)
			assert_int_equal(check_object(st, key, expect[key].len, expect[key].seed), 0);
		else
			assert_int_equal(check_object(st, key, 0, 0), -ENOENT);
	}
	test_fsck_clean(st);
	assert_int_equal(kvt_store_stat(st, &s), 0);
	assert_int_equal(s.segments_open, 0);
	/* What the dead children wrote and never committed was garbage: with
	 * every object gone, reclaim frees every segment. */
	for (unsigned key = 0; key < NKEYS; key++) {
		char name[32];
		int rc;

		key_name(name, sizeof(name), key);
		rc = kvt_object_delete(st, BUCKET, name);
		assert_true(rc == 0 || rc == -ENOENT);
	}
	assert_int_equal(kvt_object_delete(st, BUCKET, "after/restart"), 0);
	{
		struct kvt_store_stat e;

		assert_int_equal(kvt_store_reclaim(st, (unsigned)s.segments), 0);
		assert_int_equal(kvt_store_stat(st, &e), 0);
		assert_int_equal(e.objects, 0);
		assert_int_equal(e.live_bytes, 0);
		assert_int_equal(e.segments_free, e.segments);
	}
	test_fsck_clean(st);
	fprintf(stderr, "%u rounds: %u puts and %u deletes acknowledged, %u changes in doubt "
		"(%u of them had happened), %u failed puts, %u rounds killed before the first "
		"record, %u objects evicted (reclaim ran %llu times)\n", ROUNDS, stats.puts_done,
		stats.deletes_done, stats.in_doubt, stats.doubt_new, stats.put_failures,
		stats.killed_in_open, stats.evicted_missing,
		(unsigned long long)s.reclaimed_segments);
	assert_int_equal(stats.put_failures, 0);
	kvt_store_close(st);
	test_env_release(&env);
	free(g_buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill9_rounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
