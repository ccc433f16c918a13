/*
 * bench-demoter-idle.c - what the background demoter costs on a full store
 * that can demote nothing: its thread's CPU a second and a pass, idle (no
 * request), with SESSIONS sessions of one 16 KiB object each filling the
 * hot tier above its high watermark. MODE:
 *
 *   copy  the store copied with cp -a (not where its id was given): every
 *         demotion is refused, -EREMCHG (store_g4_owned())
 *   down  the partner does not answer: G4 is a fault tier (cold_fault.c)
 *         whose every request fails -EHOSTUNREACH
 *   nobucket  the same, -ENXIO (the bucket of [g4] url missing)
 *   slow  the same as down, each request failing after 100 ms (a partner
 *         that times out)
 *
 * The store is filled below any pressure (high watermark 1), closed, and
 * opened again with the defaults (0.90 / 0.80), so that every pass of the
 * demoter (one a second) is a failed one. Standard error (the engine's
 * log) is left alone: run it with 2>FILE. Built and run by
 * scripts/bench-demoter-idle.sh against two trees.
 *
 *   bench-demoter-idle DIR MODE SESSIONS SECONDS
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cold.h"
#include "store.h"
#include "util.h"

#define BLOCK 16384u

static double cpu_s(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* As test_cold.c's demoter_passes(): the engine has no such call in the
 * trees before, which this is built against too. */
static uint64_t passes(struct kvt_store *st)
{
	uint64_t n;

	pthread_mutex_lock(&st->demoter_lock);
	n = st->demoter_passes;
	pthread_mutex_unlock(&st->demoter_lock);
	return n;
}

static double now_s(void)
{
	return cpu_s(CLOCK_MONOTONIC);
}

static void config(struct kvt_config *cfg, const char *dir, uint64_t capacity, uint64_t seg,
		   double high)
{
	kvt_config_init(cfg);
	free(cfg->store.dir);
	cfg->store.dir = strdup(dir);
	cfg->store.capacity = capacity;
	cfg->store.segment_size = seg;
	if (high > 0) {
		cfg->store.high_watermark = high;
		cfg->store.low_watermark = high - 0.01;
	}
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench-demoter-idle: %s: %s\n", what, strerror(-rc));
	exit(1);
}

int main(int argc, char **argv)
{
	static char block[BLOCK];
	struct cold_fault_plan plan = { 0 };
	struct kvt_config cfg;
	struct kvt_store *st = NULL;
	char a[512], b[512], key[64], cmd[1200];
	long n, seconds;
	uint64_t capacity, seg, p0, p1, g0, g1;
	const char *mode;
	clockid_t clk;
	double c0, c1, t0, t1;
	int rc;

	if (argc != 5) {
		fprintf(stderr, "usage: %s DIR copy|down|nobucket|slow SESSIONS SECONDS\n", argv[0]);
		return 2;
	}
	mode = argv[2];
	n = atol(argv[3]);
	seconds = atol(argv[4]);
	snprintf(a, sizeof(a), "%s/a", argv[1]);
	snprintf(b, sizeof(b), "%s/b", argv[1]);
	/* The sessions' extents in a dozen segments or more, and two free: the
	 * reserve and one (past the high watermark from 11 segments on). */
	seg = MAX(1u << 20, MIN(4u << 20, (uint64_t)n * seg_extent_space(BLOCK) / 12 >> 20 << 20));
	capacity = ((uint64_t)n * seg_extent_space(BLOCK) + seg - 1) / seg * seg + 2 * seg;

	config(&cfg, a, capacity, seg, 1.0);
	rc = kvt_store_open(&cfg, KVT_OPEN_CREATE, &st);
	if (rc < 0)
		die("open", rc);
	rc = kvt_bucket_create(st, "kvs");
	memset(block, 0x5a, sizeof(block));
	for (long i = 0; rc == 0 && i < n; i++) {
		struct kvt_writer *w = NULL;

		snprintf(key, sizeof(key), "s%06ld/blk", i);
		rc = kvt_writer_open(st, "kvs", key, NULL, &w);
		if (rc == 0)
			rc = kvt_writer_write(w, block, sizeof(block));
		if (rc == 0)
			rc = kvt_writer_commit(w, NULL);
		else
			kvt_writer_abort(w);
	}
	if (rc < 0)
		die("fill", rc);
	kvt_store_close(st);
	kvt_config_release(&cfg);

	if (strcmp(mode, "copy") == 0) {
		snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", a, b);
		if (system(cmd) != 0)
			die("cp -a", -EIO);
		config(&cfg, b, capacity, seg, 0);
		/* The original's G4, as a copy has it. */
		free(cfg.g4.url);
		snprintf(cmd, sizeof(cmd), "file://%s/g4", a);
		cfg.g4.url = strdup(cmd);
	} else {
		config(&cfg, a, capacity, seg, 0);
	}
	rc = kvt_store_open(&cfg, 0, &st);
	if (rc < 0)
		die("open again", rc);
	if (strcmp(mode, "copy") != 0) {
		struct cold *inner = NULL, *f = NULL;

		/* Before the demoter's first pass, a tick (1 s) away. */
		snprintf(cmd, sizeof(cmd), "%s/g4", a);
		plan.fail_puts = plan.fail_gets = plan.fail_heads = ~0u;
		plan.stall_ms = strcmp(mode, "slow") == 0 ? 100 : 0;
		plan.err = strcmp(mode, "nobucket") == 0 ? -ENXIO : -EHOSTUNREACH;
		if (cold_file_new(cmd, &inner) < 0 || cold_fault_new(inner, &plan, &f) < 0)
			die("fault tier", -EIO);
		store_set_cold(st, f);
	}
	if (pthread_getcpuclockid(st->demoter, &clk) != 0)
		die("demoter clock", -ESRCH);
	/* Two passes first: the first one's catalog cache is cold. */
	while (passes(st) < 2)
		usleep(10000);
	p0 = passes(st);
	g0 = __atomic_load_n(&plan.gets, __ATOMIC_SEQ_CST) + __atomic_load_n(&plan.puts, __ATOMIC_SEQ_CST);
	c0 = cpu_s(clk);
	t0 = now_s();
	sleep((unsigned)seconds);
	p1 = passes(st);
	g1 = __atomic_load_n(&plan.gets, __ATOMIC_SEQ_CST) + __atomic_load_n(&plan.puts, __ATOMIC_SEQ_CST);
	c1 = cpu_s(clk);
	t1 = now_s();
	printf("%s: %ld sessions, %u segments: demoter %.1f ms of CPU a second, %.2f ms a pass"
	       " (%" PRIu64 " passes in %.1f s: %.2f s apart), %.0f partner requests a pass,"
	       " last pass %d\n", mode, n, (unsigned)st->nsegs, (c1 - c0) * 1e3 / (t1 - t0),
	       p1 > p0 ? (c1 - c0) * 1e3 / (double)(p1 - p0) : 0.0, p1 - p0, t1 - t0,
	       p1 > p0 ? (t1 - t0) / (double)(p1 - p0) : 0.0,
	       p1 > p0 ? (double)(g1 - g0) / (double)(p1 - p0) : 0.0, st->demoter_last_rc);
	kvt_store_close(st);
	kvt_config_release(&cfg);
	return 0;
}
