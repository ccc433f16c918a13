/*
 * bench_trace.c - `kvtier bench trace FILE`: replays an inference trace in
 * the Mooncake format against the whole system, and against two baselines
 * in the same run, and says how much of the prompts' KV state each kept.
 *
 * Why: the other benchmarks time single operations; this one answers the
 * question an operator sizes a node with. With a hot tier of a quarter of
 * the working set, how many prompt blocks are found (hot, or recalled from
 * G4) compared with an unbounded hot tier (the best possible) and with a
 * bounded hot tier that can only evict (what a local disk cache alone
 * gets)? Goals (issue 6): hit ratio >= 0.95x unbounded and >= 1.5x no-G4,
 * lookup p99 under 1 ms, and keeping up with the trace at --speed 1.
 *
 * The trace: one JSON object a line, {"timestamp": ms, "hash_ids": [...]},
 * a hash id per 512-token block of the prompt. A later turn of a
 * conversation repeats the earlier turn's ids except the last, partial
 * block, and appends new ones; so a request continues the conversation of
 * the latest earlier request it shares the longest prefix with, when that
 * prefix covers at least 3/4 of the earlier request (in the Mooncake
 * synthetic trace 95% of such matches cover 83% or more; a shared system
 * prompt alone covers less and starts a new conversation). Each conversation is
 * the session of the blocks it writes.
 *
 * Each configuration runs the real programs, in OUT/<name>/:
 *
 *   store + bucket --> kvtier-gateway --> kvtier-fuse --> replay --> stop all --> report
 *   (this process      (127.0.0.1:0,      (-f, OUT/name/   workers   (unmount,
 *    keeps it open      generated          mnt)            sampler   SIGTERM,
 *    for the sampler    owner-only                         migrator  wait)
 *    and migrator)      credentials)
 *
 * Requests are released at their timestamp divided by --speed (their due
 * time) to a bounded pool of workers (bench_trace_io.c); how long a request
 * waits for a worker after its due time is the lag, how far behind the
 * trace's own arrival rate the replay runs. Latencies are timed from the
 * send, and the lookup once more from the due time (lag + lookup). Once a second of wall time a sampler records the
 * counters and the store's tiers (the timeline and the progress line), and,
 * in the kvtier configuration, a migrator demotes sessions idle longer than
 * --idle of trace time (--idle/--speed of wall time) to G4, with the same
 * library call and the same lock as kvtier-migrate. Children run in their
 * own process group (a terminal's ^C reaches only this process, which stops
 * them in order) and get SIGTERM if this process dies.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_trace.h"
#include "cli.h"
#include "util.h"

const char *const bt_cfg_names[BT_NCFGS] = { "kvtier", "unbounded", "nog4" };

volatile sig_atomic_t bt_stop;

double bt_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void bt_on_signal(int sig)
{
	(void)sig;
	bt_stop = 1;
}

/* Sleeps until wall time `until`, in steps that notice bt_stop. */
static void bt_sleep_until(double until)
{
	for (;;) {
		double left = until - bt_now();
		struct timespec ts;

		if (left <= 0 || bt_stop)
			return;
		if (left > 0.1)
			left = 0.1;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)(left * 1e9);
		nanosleep(&ts, NULL);
	}
}

/* ---- processes and files ------------------------------------------------------------- */

static int bt_write_file(const char *path, mode_t mode, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	size_t len = strlen(text);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fchmod(fd, mode) < 0 || write(fd, text, len) != (ssize_t)len)
		rc = errno ? -errno : -EIO;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

static int bt_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Removes a tree, never crossing into another file system (a mount left behind). */
static void bt_rm_tree(const char *path)
{
	nftw(path, bt_rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static uint64_t bt_du_total;

static int bt_du_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (flag == FTW_F)
		bt_du_total += (uint64_t)st->st_size;
	return 0;
}

/* Bytes of the regular files under path (not thread-safe: one caller). */
static uint64_t bt_du(const char *path)
{
	bt_du_total = 0;
	nftw(path, bt_du_one, 16, FTW_PHYS | FTW_MOUNT);
	return bt_du_total;
}

/*
 * fork + exec with stdout and stderr to log (NULL: inherited), stdin from
 * /dev/null, in a process group of its own, with SIGTERM if we die.
 */
static pid_t bt_spawn(char *const argv[], const char *log)
{
	pid_t parent = getpid(), pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent || nul < 0)
			_exit(127);
		dup2(nul, 0);
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

			if (fd < 0)
				_exit(127);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Waits up to seconds for pid; 1 if it exited. */
static int bt_wait(pid_t pid, double seconds, int *status)
{
	double until = bt_now() + seconds;

	do {
		if (waitpid(pid, status, WNOHANG) == pid)
			return 1;
		usleep(20000);
	} while (bt_now() < until);
	return 0;
}

/* SIGTERM, up to 20 s, then SIGKILL. */
static void bt_stop_child(pid_t *pid)
{
	int status;

	if (*pid <= 0)
		return;
	kill(*pid, SIGTERM);
	if (!bt_wait(*pid, 20, &status)) {
		kill(*pid, SIGKILL);
		waitpid(*pid, &status, 0);
	}
	*pid = -1;
}

/* 1 if path is a mount point now (its device differs from its parent's). */
static int bt_is_mounted(const char *path)
{
	char parent[4400];
	struct stat a, b;

	snprintf(parent, sizeof(parent), "%s/..", path);
	if (stat(path, &a) < 0 || stat(parent, &b) < 0)
		return 0;
	return a.st_dev != b.st_dev;
}

/* A program: next to this binary first (the build tree), then PATH. */
static int bt_find_program(const struct bt *b, const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");
	char buf[4096], *dir, *save = NULL;

	if (snprintf(out, len, "%s/%s", b->self_dir, name) < (int)len && access(out, X_OK) == 0)
		return 0;
	snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
	for (dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		if (snprintf(out, len, "%s/%s", dir, name) < (int)len && access(out, X_OK) == 0)
			return 0;
	}
	out[0] = '\0';
	return -ENOENT;
}

/* ---- one configuration ----------------------------------------------------------------- */

static uint64_t bt_round_up(uint64_t v, uint64_t unit)
{
	return (v + unit - 1) / unit * unit;
}

/* Capacity and segment size: about 32 segments of the bounded tier, 1M to 256M each. */
static void bt_size_run(struct bt *b, struct bt_run *r)
{
	const uint64_t bs = b->o.block_size;
	const uint64_t extent = bt_round_up(bs + 64, 4096);	/* header + 4K alignment */
	const uint64_t hot = b->o.hot_capacity ? b->o.hot_capacity : b->working_set / 4;
	uint64_t seg = hot / 32 / (1 << 20) * (1 << 20);

	if (seg < (1 << 20))
		seg = 1 << 20;
	if (seg > (256u << 20))
		seg = 256u << 20;
	r->segment_size = seg;
	if (r->cfg == BT_UNBOUNDED) {
		/* Every distinct block, twice over (overwrites of racing writers),
		 * so that reclaim never has to run. */
		r->capacity = bt_round_up(2 * b->t.distinct * extent, seg) + 4 * seg;
	} else {
		r->capacity = bt_round_up(hot, seg);
		if (r->capacity < 4 * seg)
			r->capacity = 4 * seg;
	}
	r->demote = r->cfg == BT_KVTIER;
}

static int bt_write_conf(struct bt_run *r, int g4_none)
{
	char text[16384];
	char err[512];
	struct kvt_config probe;
	int rc;

	snprintf(text, sizeof(text),
		 "# Written by kvtier bench trace: configuration '%s'.\n"
		 "[store]\n"
		 "dir = %s\n"
		 "capacity = %" PRIu64 "\n"
		 "segment_size = %" PRIu64 "\n"
		 "# The migrator's idle clock is compressed: access times reach the\n"
		 "# catalog within a fraction of a second.\n"
		 "access_flush_ms = 200\n"
		 "[gateway]\n"
		 "credentials = %s\n"
		 "region = " BT_REGION "\n"
		 "access_log = off\n"
		 "[g4]\n"
		 "%s%s\n",
		 bt_cfg_names[r->cfg], r->store_dir, r->capacity, r->segment_size, r->creds,
		 g4_none ? "url = none" : r->demote ? "url = file://" : "# no demotion runs here",
		 g4_none ? "" : r->demote ? r->g4_dir : "");
	if ((rc = bt_write_file(r->conf, 0644, text)) < 0)
		return rc;
	kvt_config_init(&probe);
	rc = kvt_config_load(&probe, r->conf, err, sizeof(err));
	kvt_config_release(&probe);
	return rc;
}

static int bt_start_gateway(struct bt_run *r, const char *gw)
{
	char log[4300], line[1024], *argv[10];
	int n = 0;

	snprintf(log, sizeof(log), "%s/gateway.log", r->dir);
	argv[n++] = (char *)gw;
	argv[n++] = (char *)"-c";
	argv[n++] = r->conf;
	argv[n++] = (char *)"--listen";
	argv[n++] = (char *)"127.0.0.1:0";
	argv[n] = NULL;
	if ((r->gw_pid = bt_spawn(argv, log)) < 0)
		return (int)r->gw_pid;
	for (int i = 0; i < 1200 && !bt_stop; i++) {
		FILE *f = fopen(log, "r");
		int status;

		while (f && fgets(line, sizeof(line), f)) {
			char *p = strstr(line, "serving S3 on");

			if (p && (p = strstr(p, "(port ")))
				r->port = atoi(p + 6);
		}
		if (f)
			fclose(f);
		if (r->port > 0)
			return 0;
		if (waitpid(r->gw_pid, &status, WNOHANG) == r->gw_pid) {
			r->gw_pid = -1;
			fprintf(stderr, "kvtier: bench trace: kvtier-gateway exited; see '%s'\n", log);
			return -ECHILD;
		}
		usleep(50000);
	}
	fprintf(stderr, "kvtier: bench trace: kvtier-gateway did not start; see '%s'\n", log);
	return -ETIMEDOUT;
}

static int bt_mount(struct bt_run *r, const char *fuse)
{
	char log[4300], *argv[8];
	int n = 0;

	snprintf(log, sizeof(log), "%s/fuse.log", r->dir);
	if (mkdir(r->mnt, 0755) < 0 && errno != EEXIST)
		return -errno;
	argv[n++] = (char *)fuse;
	argv[n++] = (char *)"-c";
	argv[n++] = r->conf;
	argv[n++] = r->mnt;
	argv[n++] = (char *)"-f";
	argv[n] = NULL;
	if ((r->fuse_pid = bt_spawn(argv, log)) < 0)
		return (int)r->fuse_pid;
	for (int i = 0; i < 1200 && !bt_stop; i++) {
		int status;

		if (bt_is_mounted(r->mnt)) {
			r->mounted = 1;
			return 0;
		}
		if (waitpid(r->fuse_pid, &status, WNOHANG) == r->fuse_pid) {
			r->fuse_pid = -1;
			fprintf(stderr, "kvtier: bench trace: kvtier-fuse exited; see '%s'\n", log);
			return -ECHILD;
		}
		usleep(50000);
	}
	fprintf(stderr, "kvtier: bench trace: '%s' was not mounted; see '%s'\n", r->mnt, log);
	return -ETIMEDOUT;
}

/* fusermount3 -u, the daemon's exit, and if it will not go, a lazy unmount. */
static void bt_unmount(struct bt_run *r)
{
	char fm[4096];
	int status;

	if (r->fuse_pid <= 0 && !bt_is_mounted(r->mnt))
		return;
	if (bt_is_mounted(r->mnt) && bt_find_program(r->b, "fusermount3", fm, sizeof(fm)) == 0) {
		char *argv[] = { fm, (char *)"-u", r->mnt, NULL };
		pid_t p = bt_spawn(argv, NULL);

		for (int i = 0; p > 0 && i < 3; i++) {
			/* Busy for a moment while the kernel drops its last references. */
			if (!bt_wait(p, 20, &status)) {
				kill(p, SIGKILL);
				waitpid(p, &status, 0);
			}
			if (!bt_is_mounted(r->mnt))
				break;
			usleep(500000);
			p = bt_spawn(argv, NULL);
		}
	}
	if (r->fuse_pid > 0 && !bt_wait(r->fuse_pid, 30, &status)) {
		fprintf(stderr, "kvtier: bench trace: kvtier-fuse did not exit after the unmount; "
			"stopping it\n");
		kill(r->fuse_pid, SIGTERM);
		if (!bt_wait(r->fuse_pid, 20, &status)) {
			kill(r->fuse_pid, SIGKILL);
			waitpid(r->fuse_pid, &status, 0);
		}
	}
	r->fuse_pid = -1;
	if (bt_is_mounted(r->mnt) && bt_find_program(r->b, "fusermount3", fm, sizeof(fm)) == 0) {
		char *argv[] = { fm, (char *)"-uz", r->mnt, NULL };
		pid_t p = bt_spawn(argv, NULL);

		if (p > 0)
			waitpid(p, &status, 0);
		fprintf(stderr, "kvtier: bench trace: '%s' needed a lazy unmount\n", r->mnt);
	}
	r->mounted = bt_is_mounted(r->mnt);
}

/* ---- the replay: dispatcher, workers, sampler, migrator ------------------------------ */

struct bt_worker {
	struct bt_run *r;
	struct bt_client *cl;
	pthread_t tid;
	int started;
};

static void *bt_worker_main(void *arg)
{
	struct bt_worker *w = arg;
	struct bt_run *r = w->r;
	const double speed = r->b->o.speed;

	for (;;) {
		size_t i;
		double lag;

		pthread_mutex_lock(&r->lock);
		while (r->next_taken == r->next_ready && !r->done && !bt_stop)
			pthread_cond_wait(&r->cond, &r->lock);
		if (r->next_taken == r->next_ready || bt_stop) {
			pthread_mutex_unlock(&r->lock);
			return NULL;
		}
		i = r->next_taken++;
		pthread_mutex_unlock(&r->lock);
		lag = bt_now() - (r->t0 + r->b->t.reqs[i].ts / speed);
		bt_series_add(&w->cl->lag, lag > 0 ? lag * 1e3 : 0);
		bt_replay_one(r, w->cl, i);
	}
}

static void bt_snapshot(struct bt_run *r, struct bt_counts *c)
{
	const uint64_t *src = (const uint64_t *)&r->c;
	uint64_t *dst = (uint64_t *)c;

	for (size_t k = 0; k < sizeof(*c) / sizeof(uint64_t); k++)
		dst[k] = __atomic_load_n(&src[k], __ATOMIC_RELAXED);
}

static void bt_sample(struct bt_run *r, struct bt_sample *s)
{
	struct kvt_store_stat ss;
	double now = bt_now();

	size_t taken;

	memset(s, 0, sizeof(*s));
	s->wall = now - r->t0;
	/* The trace clock of the replay: the latest request started, which
	 * lags the wall clock when the system does not keep up. */
	pthread_mutex_lock(&r->lock);
	taken = r->next_taken;
	pthread_mutex_unlock(&r->lock);
	s->trace = taken ? r->b->t.reqs[taken - 1].ts : 0;
	bt_snapshot(r, &s->c);
	s->demoted_objects = __atomic_load_n(&r->demote_objects, __ATOMIC_RELAXED);
	if (kvt_store_stat(r->st, &ss) == 0) {
		s->hot_objects = ss.tier_count[KVT_TIER_HOT] + ss.tier_count[KVT_TIER_DEMOTING];
		s->cold_objects = ss.tier_count[KVT_TIER_COLD] + ss.tier_count[KVT_TIER_RECALLING];
		s->used_bytes = ss.used_bytes;
	}
}

static void bt_progress(const struct bt_run *r, const struct bt_sample *s)
{
	const struct bt *b = r->b;
	uint64_t hits = s->c.hot + s->c.recalled;
	double mib = (double)b->o.block_size / 1048576.0;
	size_t backlog = r->next_ready - r->next_taken;

	fprintf(stderr, "\r\033[K%-9s trace %5.0f/%.0f s  req %5" PRIu64 "/%zu  hit %.3f "
		"(recalled %" PRIu64 ")  hot %.0f MiB  G4-only %.0f MiB  queued %zu  err %" PRIu64,
		bt_cfg_names[r->cfg], s->trace < b->t.duration ? s->trace : b->t.duration,
		b->t.duration, s->c.requests, b->t.nreqs,
		s->c.blocks ? (double)hits / (double)s->c.blocks : 0.0, s->c.recalled,
		(double)s->hot_objects * mib, (double)s->cold_objects * mib, backlog,
		s->c.errors + s->c.wrong_blocks);
}

static int bt_add_sample(struct bt_run *r, const struct bt_sample *s)
{
	if (UTIL_GROW(r->samples, r->nsamples, r->samples_cap) < 0)
		return -ENOMEM;
	r->samples[r->nsamples++] = *s;
	return 0;
}

struct bt_bg {
	struct bt_run *r;
	int quit;		/* under r->lock */
	pthread_t tid;
	int started;
};

/* Once a second: a sample of the counters and the tiers, and the progress line. */
static void *bt_sampler_main(void *arg)
{
	struct bt_bg *g = arg;
	struct bt_run *r = g->r;
	double next = r->t0 + 1.0;

	for (;;) {
		struct bt_sample s;
		int quit;

		bt_sleep_until(next);
		pthread_mutex_lock(&r->lock);
		quit = g->quit;
		pthread_mutex_unlock(&r->lock);
		if (quit || bt_stop)
			return NULL;
		next += 1.0;
		bt_sample(r, &s);
		bt_add_sample(r, &s);
		if (r->b->tty)
			bt_progress(r, &s);
	}
}

/*
 * Once a second: demote the sessions idle longer than --idle of trace time,
 * as kvtier-migrate --idle does, under its lock (DIR/migrate.lock).
 */
static void *bt_migrator_main(void *arg)
{
	struct bt_bg *g = arg;
	struct bt_run *r = g->r;
	char lockpath[4400];
	int fd;

	snprintf(lockpath, sizeof(lockpath), "%s/migrate.lock", r->store_dir);
	fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	for (double next = bt_now() + 1.0;; next += 1.0) {
		struct kvt_g4_opts go = { .idle = r->b->idle_wall };
		struct kvt_g4_report rep = { 0 };
		double t;
		int quit, rc;

		bt_sleep_until(next);
		pthread_mutex_lock(&r->lock);
		quit = g->quit;
		pthread_mutex_unlock(&r->lock);
		if (quit || bt_stop)
			break;
		if (fd >= 0 && flock(fd, LOCK_EX) < 0)
			continue;
		t = bt_now();
		rc = kvt_g4_demote(r->st, &go, &rep);
		r->demote_seconds += bt_now() - t;
		if (fd >= 0)
			flock(fd, LOCK_UN);
		r->demote_runs++;
		__atomic_add_fetch(&r->demote_objects, rep.objects, __ATOMIC_RELAXED);
		r->demote_bytes += rep.bytes;
		r->demote_failures += rep.failures;
		if (rc < 0) {
			r->demote_failures++;
			fprintf(stderr, "%skvtier: bench trace: demotion failed: %s\n",
				r->b->tty ? "\r\033[K" : "", strerror(-rc));
		}
		if (bt_now() > next + 1.0)
			next = bt_now();	/* a long run: the next one a second after it */
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static int bt_replay(struct bt_run *r)
{
	struct bt *b = r->b;
	struct bt_worker *w = NULL;
	struct bt_bg sampler = { .r = r }, migrator = { .r = r };
	struct bt_sample s;
	double start = 0;
	int rc = 0;

	r->nclients = b->o.workers;
	r->clients = calloc(r->nclients, sizeof(*r->clients));
	w = calloc(r->nclients, sizeof(*w));
	if (!r->clients || !w) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned k = 0; k < r->nclients; k++)
		if ((rc = bt_client_init(&r->clients[k], b)) < 0)
			goto out;
	/* A second to spare before trace time 0, so that the first requests are not late. */
	r->t0 = bt_now() + 0.5;
	for (unsigned k = 0; k < r->nclients; k++) {
		w[k].r = r;
		w[k].cl = &r->clients[k];
		if (pthread_create(&w[k].tid, NULL, bt_worker_main, &w[k]) != 0) {
			rc = -EAGAIN;
			goto stop;
		}
		w[k].started = 1;
	}
	if (pthread_create(&sampler.tid, NULL, bt_sampler_main, &sampler) == 0)
		sampler.started = 1;
	if (r->demote && pthread_create(&migrator.tid, NULL, bt_migrator_main, &migrator) == 0)
		migrator.started = 1;

	start = r->t0;
	for (size_t i = 0; i < b->t.nreqs && !bt_stop; i++) {
		bt_sleep_until(r->t0 + b->t.reqs[i].ts / b->o.speed);
		pthread_mutex_lock(&r->lock);
		r->next_ready = i + 1;
		pthread_cond_signal(&r->cond);
		pthread_mutex_unlock(&r->lock);
	}
stop:
	pthread_mutex_lock(&r->lock);
	r->done = 1;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	for (unsigned k = 0; k < r->nclients; k++)
		if (w[k].started)
			pthread_join(w[k].tid, NULL);
	r->wall = bt_now() - (start ? start : bt_now());
	pthread_mutex_lock(&r->lock);
	sampler.quit = migrator.quit = 1;
	pthread_mutex_unlock(&r->lock);
	if (sampler.started)
		pthread_join(sampler.tid, NULL);
	if (migrator.started)
		pthread_join(migrator.tid, NULL);
	bt_sample(r, &s);
	bt_add_sample(r, &s);
	if (b->tty) {
		bt_progress(r, &s);
		fputc('\n', stderr);
	}
out:
	free(w);
	return rc;
}

/* Runs one configuration start to finish; everything it started is stopped. */
static int bt_run_config(struct bt *b, struct bt_run *r, const char *gw, const char *fuse)
{
	const int s3 = b->o.via != BT_VIA_FUSE, fs = b->o.via != BT_VIA_S3;
	char path[4400], err[512], text[256];
	struct kvt_store_stat ss;
	int rc;

	r->b = b;
	r->gw_pid = r->fuse_pid = -1;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	snprintf(r->dir, sizeof(r->dir), "%s/%s", b->out, bt_cfg_names[r->cfg]);
	snprintf(r->mnt, sizeof(r->mnt), "%s/mnt", r->dir);
	if (bt_is_mounted(r->mnt)) {
		fprintf(stderr, "kvtier: bench trace: '%s' is still mounted (from an earlier run?); "
			"unmount it first: fusermount3 -u '%s'\n", r->mnt, r->mnt);
		return -EBUSY;
	}
	bt_rm_tree(r->dir);
	if (mkdir(r->dir, 0755) < 0) {
		rc = -errno;
		fprintf(stderr, "kvtier: bench trace: cannot make '%s': %s\n", r->dir, strerror(errno));
		return rc;
	}
	snprintf(r->store_dir, sizeof(r->store_dir), "%s/store", r->dir);
	snprintf(r->g4_dir, sizeof(r->g4_dir), "%s/g4", r->dir);
	snprintf(r->conf, sizeof(r->conf), "%s/kvtier.conf", r->dir);
	snprintf(r->creds, sizeof(r->creds), "%s/credentials", r->dir);
	bt_size_run(b, r);

	snprintf(text, sizeof(text), BT_ACCESS " %s " BT_BUCKET "\n", b->secret);
	if ((rc = bt_write_file(r->creds, 0600, text)) < 0) {
		fprintf(stderr, "kvtier: bench trace: cannot write '%s': %s\n", r->creds, strerror(-rc));
		return rc;
	}
	/* Without G4: "url = none" where the engine knows it, else no demotion at all. */
	r->g4_none = 0;
	if (r->cfg == BT_NOG4 && bt_write_conf(r, 1) == 0)
		r->g4_none = 1;
	else if ((rc = bt_write_conf(r, 0)) < 0) {
		fprintf(stderr, "kvtier: bench trace: cannot write '%s': %s\n", r->conf, strerror(-rc));
		return rc;
	}
	kvt_config_init(&r->kcfg);
	r->kcfg_loaded = 1;
	if ((rc = kvt_config_load(&r->kcfg, r->conf, err, sizeof(err))) < 0) {
		fprintf(stderr, "kvtier: bench trace: %s\n", err);
		return rc;
	}
	if ((rc = kvt_store_open(&r->kcfg, KVT_OPEN_CREATE, &r->st)) < 0) {
		fprintf(stderr, "kvtier: bench trace: cannot make the store in '%s': %s\n",
			r->store_dir, strerror(-rc));
		return rc;
	}
	if ((rc = kvt_bucket_create(r->st, BT_BUCKET)) < 0 && rc != -EEXIST) {
		fprintf(stderr, "kvtier: bench trace: cannot make bucket '" BT_BUCKET "': %s\n",
			strerror(-rc));
		return rc;
	}
	if (s3 && (rc = bt_start_gateway(r, gw)) < 0)
		return rc;
	if (fs && (rc = bt_mount(r, fuse)) < 0)
		return rc;
	if (bt_stop)
		return -EINTR;
	printf("%-9s hot tier %.0f MiB (%" PRIu64 " segments of %.0f MiB), %s%s%s\n",
	       bt_cfg_names[r->cfg], (double)r->capacity / 1048576.0,
	       r->capacity / r->segment_size, (double)r->segment_size / 1048576.0,
	       r->demote ? "G4 " : r->g4_none ? "no G4 ([g4] url = none)" : "no demotion",
	       r->demote ? r->g4_dir : "", r->port > 0 ? "" : "");
	if (r->port > 0 || r->mounted) {
		printf("          ");
		if (r->port > 0)
			printf("kvtier-gateway on 127.0.0.1:%d%s", r->port, r->mounted ? ", " : "");
		if (r->mounted)
			printf("kvtier-fuse on %s", r->mnt);
		printf("\n");
	}
	fflush(stdout);

	rc = bt_replay(r);
	r->ran = 1;
	if (r->port > 0 && bt_gateway_scrape(r) < 0)
		fprintf(stderr, "kvtier: bench trace: %s: cannot read the gateway's /metrics; its "
			"own lookup times are left out\n", bt_cfg_names[r->cfg]);
	if (kvt_store_stat(r->st, &ss) == 0) {
		r->end_hot_objects = ss.tier_count[KVT_TIER_HOT] + ss.tier_count[KVT_TIER_DEMOTING];
		r->end_cold_objects = ss.tier_count[KVT_TIER_COLD] + ss.tier_count[KVT_TIER_RECALLING];
		r->end_used_bytes = ss.used_bytes;
		r->evicted_objects = ss.evicted_objects;
		r->checksum_failures = ss.checksum_failures;
	}
	snprintf(path, sizeof(path), "%s", r->g4_dir);
	r->g4_bytes = bt_du(path);
	return rc;
}

/* Stops what bt_run_config started, in order; safe on a half-started run. */
static void bt_run_cleanup(struct bt_run *r)
{
	if (!r->b)
		return;
	if (r->mnt[0])
		bt_unmount(r);
	bt_stop_child(&r->gw_pid);
	kvt_store_close(r->st);
	r->st = NULL;
	if (r->kcfg_loaded)
		kvt_config_release(&r->kcfg);
	r->kcfg_loaded = 0;
	for (unsigned k = 0; r->clients && k < r->nclients; k++)
		bt_client_release(&r->clients[k]);
	free(r->clients);
	r->clients = NULL;
	if (!r->b->o.keep && !r->mounted) {
		/* The data goes; the logs, configuration and timeline stay. */
		bt_rm_tree(r->store_dir);
		bt_rm_tree(r->g4_dir);
		rmdir(r->mnt);
	}
}

/* ---- options -------------------------------------------------------------------------- */

static void bt_usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier bench trace FILE [--via s3|fuse|both] [--block-size BYTES]\n"
		"                          [--hot-capacity BYTES] [--speed X] [--idle DURATION]\n"
		"                          [--requests N] [--sample N] [--workers N] [--out DIR]\n"
		"                          [--configs kvtier,unbounded,nog4] [--keep]\n"
		"\n"
		"Replays a Mooncake-format trace (one {\"timestamp\": ms, \"hash_ids\": [...]}\n"
		"a line) against kvtier-gateway and/or kvtier-fuse started here on a scratch\n"
		"store in DIR, then against two baselines: an unbounded hot tier, and a\n"
		"hot tier as small as kvtier's that can only evict (no G4). Per request:\n"
		"lookup of the longest stored prefix, reads of it (cold blocks recalled),\n"
		"writes of the rest, with the conversation as the session.\n"
		"\n"
		"  --via s3|fuse|both   the face to replay through; both: even conversations\n"
		"                       through S3, odd ones through the mount (default both)\n"
		"  --block-size BYTES   bytes per 512-token block (default 64K; a real\n"
		"                       Llama-3-8B block in BF16 is 64M)\n"
		"  --hot-capacity BYTES kvtier's and no-G4's hot tier (default: a quarter of\n"
		"                       distinct blocks x block size)\n"
		"  --speed X            trace time runs X times faster (default 1)\n"
		"  --idle DURATION      trace time without access before a conversation is\n"
		"                       demoted to G4 (default 60s; the migrator runs every\n"
		"                       second with --idle/--speed, at least 1 s)\n"
		"  --requests N         only the first N requests (default all)\n"
		"  --sample N           only every Nth conversation, with all its turns: the\n"
		"                       whole trace's shape at 1/N of the load (default 1)\n"
		"  --workers N          requests served at once (default 8)\n"
		"  --out DIR            scratch and report directory (default ./kvtier-trace);\n"
		"                       nothing is written outside it\n"
		"  --configs LIST       which configurations to run (default all three)\n"
		"  --keep               keep the stores and G4 directories in DIR\n");
}

static int bt_parse_args(int argc, char **argv, struct bt_opts *o)
{
	int rc = 0;

	memset(o, 0, sizeof(*o));
	o->via = BT_VIA_BOTH;
	o->block_size = 64 << 10;
	o->speed = 1.0;
	o->idle = 60;
	o->workers = 8;
	o->out = "kvtier-trace";
	o->configs = (1u << BT_NCFGS) - 1;
	o->sample = 1;

	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i], *v = NULL;
		int m = 0;

#define OPT(name, takes) ((m = bench_opt_match(a, name, takes, &i, argc, argv, &v)) != 0)
		if (OPT("--via", 1)) {
			if (m > 0 && strcmp(v, "s3") == 0)
				o->via = BT_VIA_S3;
			else if (m > 0 && strcmp(v, "fuse") == 0)
				o->via = BT_VIA_FUSE;
			else if (m > 0 && strcmp(v, "both") == 0)
				o->via = BT_VIA_BOTH;
			else
				rc = -EINVAL;
		} else if (OPT("--block-size", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &o->block_size);
			if (rc == 0 && (o->block_size < 64 || o->block_size > (64u << 20)))
				rc = -EINVAL;
		} else if (OPT("--hot-capacity", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &o->hot_capacity);
		} else if (OPT("--speed", 1)) {
			char *end;

			o->speed = m < 0 ? 0 : strtod(v, &end);
			if (m < 0 || *end || !(o->speed >= 0.01 && o->speed <= 100000))
				rc = -EINVAL;
		} else if (OPT("--idle", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_duration(v, &o->idle);
		} else if (OPT("--requests", 1)) {
			unsigned n;

			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, UINT_MAX, &n);
			o->requests = n;
		} else if (OPT("--sample", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 1000000, &o->sample);
		} else if (OPT("--workers", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 256, &o->workers);
		} else if (OPT("--out", 1)) {
			o->out = v;
		} else if (OPT("--configs", 1)) {
			char buf[128], *tok, *save = NULL;

			o->configs = 0;
			snprintf(buf, sizeof(buf), "%s", m > 0 ? v : "");
			for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				int k;

				for (k = 0; k < BT_NCFGS && strcmp(tok, bt_cfg_names[k]) != 0; k++)
					;
				if (k == BT_NCFGS)
					rc = -EINVAL;
				else
					o->configs |= 1u << k;
			}
			if (!o->configs)
				rc = -EINVAL;
		} else if (OPT("--keep", 0)) {
			o->keep = 1;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			bt_usage(stdout);
			return 1;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "kvtier: bench trace: unknown option '%s'\n", a);
			return -EINVAL;
		} else if (!o->trace) {
			o->trace = a;
		} else {
			fprintf(stderr, "kvtier: bench trace: one trace file, not '%s' too\n", a);
			return -EINVAL;
		}
#undef OPT
		rc = bench_opt_checked("trace", a, m, rc);
	}
	if (rc == 0 && !o->trace) {
		fprintf(stderr, "kvtier: bench trace: which trace? (a FILE argument)\n");
		rc = -EINVAL;
	}
	return rc;
}

/* ---- main ------------------------------------------------------------------------------ */

static int bt_random_secret(char out[41])
{
	unsigned char rnd[20];
	FILE *f = fopen("/dev/urandom", "r");
	int ok = f && fread(rnd, 1, sizeof(rnd), f) == sizeof(rnd);

	if (f)
		fclose(f);
	if (!ok)
		return -EIO;
	for (int i = 0; i < 20; i++)
		snprintf(out + 2 * i, 3, "%02x", rnd[i]);
	return 0;
}

int bench_trace_main(const struct kvt_config *cfg, int argc, char **argv)
{
	struct bt *b = calloc(1, sizeof(*b));
	char gw[4096] = "", fuse[4096] = "", self[4096], fm[4096];
	struct sigaction sa, old_int, old_term, old_hup;
	int status = CLI_FAIL, rc, have_sig = 0, curl_up = 0;
	time_t now = time(NULL);
	struct tm tm;
	ssize_t n;

	(void)cfg;	/* everything runs on scratch stores of its own */
	if (!b)
		return CLI_FAIL;
	rc = bt_parse_args(argc, argv, &b->o);
	if (rc != 0) {
		if (rc == -EINVAL)
			bt_usage(stderr);
		free(b);
		return rc == 1 ? CLI_OK : CLI_USAGE;
	}
	gmtime_r(&now, &tm);
	strftime(b->date, sizeof(b->date), "%Y-%m-%d %H:%M UTC", &tm);
	{
		size_t off = (size_t)snprintf(b->cmdline, sizeof(b->cmdline), "kvtier bench");

		for (int i = 0; i < argc && off < sizeof(b->cmdline); i++)
			off += (size_t)snprintf(b->cmdline + off, sizeof(b->cmdline) - off, " %s",
						argv[i]);
	}
	b->tty = isatty(STDERR_FILENO);
	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		char *slash;

		self[n] = '\0';
		if ((slash = strrchr(self, '/')))
			*slash = '\0';
		snprintf(b->self_dir, sizeof(b->self_dir), "%s", self);
	}
	if (b->o.via != BT_VIA_FUSE && bt_find_program(b, "kvtier-gateway", gw, sizeof(gw)) < 0) {
		fprintf(stderr, "kvtier: bench trace: no kvtier-gateway next to this binary or on "
			"PATH (build it: make kvtier-gateway)\n");
		goto out;
	}
	if (b->o.via != BT_VIA_S3) {
		if (access("/dev/fuse", R_OK | W_OK) < 0) {
			fprintf(stderr, "kvtier: bench trace: no usable /dev/fuse here: use --via s3\n");
			goto out;
		}
		if (bt_find_program(b, "kvtier-fuse", fuse, sizeof(fuse)) < 0 ||
		    bt_find_program(b, "fusermount3", fm, sizeof(fm)) < 0) {
			fprintf(stderr, "kvtier: bench trace: --via %s needs kvtier-fuse (make "
				"kvtier-fuse) and fusermount3 (Debian: fuse3)\n",
				b->o.via == BT_VIA_BOTH ? "both" : "fuse");
			goto out;
		}
	}
	if (bt_trace_load(&b->t, b->o.trace, b->o.requests, b->o.sample, b->o.via) < 0)
		goto out;
	b->working_set = b->t.distinct * b->o.block_size;
	b->idle_wall = (uint64_t)llround((double)b->o.idle / b->o.speed);
	if (b->idle_wall < 1)
		b->idle_wall = 1;
	if (bt_random_secret(b->secret) < 0) {
		fprintf(stderr, "kvtier: bench trace: cannot read /dev/urandom\n");
		goto out;
	}
	if (mkdir(b->o.out, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "kvtier: bench trace: cannot make '%s': %s\n", b->o.out,
			strerror(errno));
		goto out;
	}
	if (!realpath(b->o.out, b->out)) {
		fprintf(stderr, "kvtier: bench trace: '%s': %s\n", b->o.out, strerror(errno));
		goto out;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		fprintf(stderr, "kvtier: bench trace: cannot initialise libcurl\n");
		goto out;
	}
	curl_up = 1;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = bt_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGHUP, &sa, &old_hup);
	have_sig = 1;
	bt_stop = 0;

	printf("kvtier bench trace: %s\n", b->date);
	printf("trace: %s%s: %zu requests over %.0f s, %" PRIu64 " block references, %" PRIu64
	       " distinct blocks, %" PRIu32 " conversations (%" PRIu32 " requests continue one)\n",
	       b->o.trace, b->o.sample > 1 ? " (every Nth conversation of --sample)" : "", b->t.nreqs,
	       b->t.duration, b->t.nrefs, b->t.distinct, b->t.nconvs, b->t.nresumed);
	printf("blocks of %" PRIu64 " bytes: working set %.1f MiB; speed %gx (%.0f s of wall time "
	       "each); idle %" PRIu64 " s of trace = %" PRIu64 " s of wall time; via %s; "
	       "%u workers\n",
	       b->o.block_size, (double)b->working_set / 1048576.0, b->o.speed,
	       b->t.duration / b->o.speed, b->o.idle, b->idle_wall,
	       b->o.via == BT_VIA_S3 ? "s3" : b->o.via == BT_VIA_FUSE ? "fuse" : "both (S3: even "
	       "conversations, FUSE: odd)", b->o.workers);
	printf("out: %s\n", b->out);
	fflush(stdout);

	status = CLI_OK;
	for (int k = 0; k < BT_NCFGS && !bt_stop; k++) {
		struct bt_run *r = &b->runs[k];

		if (!(b->o.configs & (1u << k)))
			continue;
		r->cfg = (enum bt_cfg)k;
		rc = bt_run_config(b, r, gw, fuse);
		bt_run_finish(r);
		bt_run_cleanup(r);
		if (r->ran)
			bt_print_run_line(r);
		if (r->mounted) {
			fprintf(stderr, "kvtier: bench trace: '%s' is still mounted\n", r->mnt);
			status = CLI_FAIL;
		}
		if (rc < 0) {
			status = CLI_FAIL;
			break;
		}
	}
	if (bt_stop) {
		fprintf(stderr, "kvtier: bench trace: interrupted; everything started was stopped\n");
		status = CLI_FAIL;
	}
	bt_print_report(b);
	if (bt_write_json(b) < 0 || bt_write_timelines_and_plots(b) < 0)
		status = CLI_FAIL;
	for (int k = 0; k < BT_NCFGS; k++)
		if (b->runs[k].ran && (b->runs[k].c.errors || b->runs[k].c.wrong_blocks))
			status = CLI_FAIL;
out:
	for (int k = 0; k < BT_NCFGS; k++) {
		bt_run_cleanup(&b->runs[k]);
		free(b->runs[k].samples);
		if (b->runs[k].b) {
			pthread_mutex_destroy(&b->runs[k].lock);
			pthread_cond_destroy(&b->runs[k].cond);
		}
	}
	if (have_sig) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
		sigaction(SIGHUP, &old_hup, NULL);
	}
	if (curl_up)
		curl_global_cleanup();
	bt_trace_release(&b->t);
	free(b);
	return status;
}
