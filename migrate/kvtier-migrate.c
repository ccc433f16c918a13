/*
 * kvtier-migrate.c - moves idle sessions from the hot tier to G4, and back.
 *
 *   kvtier-migrate [-c FILE] [--idle DURATION] [--dry-run] [--jobs N]
 *                  [--limit-rate BYTES/s] [--session BUCKET/SESSION |
 *                   --recall BUCKET/SESSION | --recall-keys FILE |
 *                   --import BUCKET/SESSION] [--progress] [--json] [-v|-q]
 *
 * Runs from cron. A thin front end over the library (kvt_g4_demote() and
 * friends in src/migrate.c), which keeps every step in the catalog, so a
 * run killed at any point is finished by the next one. --jobs sessions (or,
 * for a recall, objects) move in parallel; a transfer the partner fails
 * with 500, 503 or no answer is tried RETRIES more times with exponential
 * backoff before it counts as a failure.
 *
 * One run at a time per store: an flock on DIR/migrate.lock. Exit codes,
 * for cron: 0 done, 1 some objects failed (the rest done) or the partner
 * did not answer (or, for a recall, G4's bucket is missing), 2 usage or
 * configuration error (or a store not where its id was given, a copy:
 * kvtier store-id), 75 (EX_TEMPFAIL) another run holds the lock. One
 * summary line goes to stderr and to syslog; --json prints it as JSON on
 * stdout instead of to stderr.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "keys.h"
#include "kvtier.h"

#define EXIT_LOCKED 75
#define RETRIES 6	/* about 16 s of backoff in all before a transfer fails */

enum { OPT_IDLE = 256, OPT_DRY_RUN, OPT_JOBS, OPT_SESSION, OPT_RECALL, OPT_IMPORT,
       OPT_PROGRESS, OPT_JSON, OPT_VERSION, OPT_LIMIT_RATE, OPT_RECALL_KEYS };

struct progress {
	int on;
	uint64_t objects, bytes, failures;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kvtier-migrate [-c FILE] [--idle DURATION] [--dry-run] [--jobs N]\n"
		   "                      [--limit-rate BYTES/s] [--session BUCKET/SESSION |\n"
		   "                       --recall BUCKET/SESSION | --recall-keys FILE |\n"
		   "                       --import BUCKET/SESSION] [--progress] [--json] [-v|-q]\n"
		   "Demotes sessions idle longer than [g4] idle to G4 ([g4] url); --recall brings\n"
		   "one back, --recall-keys the BUCKET/KEY lines of FILE (- for stdin), --import\n"
		   "makes a session another node demoted known here (cold).\n");
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_object(void *arg, const char *bucket, const char *key, uint64_t size, int rc)
{
	struct progress *p = arg;

	if (rc < 0)
		p->failures++;
	else {
		p->objects++;
		p->bytes += size;
	}
	if (p->on)
		fprintf(stderr, "\r%" PRIu64 " objects, %.1f MiB, %" PRIu64 " failed  %s/%.40s",
			p->objects, p->bytes / 1048576.0, p->failures, bucket, key);
}

/* The keys of path ("-": stdin) into k; -1 (and a message) if it cannot be read. */
static int read_keys(const char *path, struct keys *k)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	size_t line;
	int rc;

	if (!f) {
		fprintf(stderr, "kvtier-migrate: cannot open '%s': %s\n", path, strerror(errno));
		return -1;
	}
	rc = keys_read(f, k, &line);
	if (f != stdin)
		fclose(f);
	if (rc == -EINVAL)
		fprintf(stderr, "kvtier-migrate: '%s' line %zu holds a NUL byte: expected one "
			"BUCKET/KEY a line\n", path, line);
	else if (rc < 0)
		fprintf(stderr, "kvtier-migrate: cannot read '%s': %s\n", path, strerror(-rc));
	return rc < 0 ? -1 : 0;
}

/* "BUCKET/SESSION" into its parts (session may hold '/'). */
static int split_session(char *arg, const char **bucket, const char **session)
{
	char *slash = strchr(arg, '/');

	if (!slash || slash == arg || !slash[1])
		return -1;
	*slash = '\0';
	*bucket = arg;
	*session = slash + 1;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "idle", required_argument, NULL, OPT_IDLE },
		{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
		{ "jobs", required_argument, NULL, OPT_JOBS },
		{ "session", required_argument, NULL, OPT_SESSION },
		{ "recall", required_argument, NULL, OPT_RECALL },
		{ "import", required_argument, NULL, OPT_IMPORT },
		{ "recall-keys", required_argument, NULL, OPT_RECALL_KEYS },
		{ "limit-rate", required_argument, NULL, OPT_LIMIT_RATE },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	const char *conf = NULL, *idle_arg = NULL, *action = "demote";
	char *target = NULL, err[512], lockpath[4096];
	struct keys keys = { 0 };
	long jobs = 0;
	struct kvt_config cfg;
	struct kvt_store *st = NULL;
	struct kvt_g4_opts go = { 0 };
	struct kvt_g4_report rep = { 0 }, swept = { 0 };
	struct kvt_store_identity ident;
	struct progress prog = { 0 };
	int ch, json = 0, quiet = 0, want_progress = 0, mode = 0, status = 2, lock_fd = -1, rc;
	double t0, secs;

	kvt_log_set_ident("kvtier-migrate");
	kvt_config_init(&cfg);
	while ((ch = getopt_long(argc, argv, "c:vqh", opts, NULL)) != -1) {
		switch (ch) {
		case 'c': conf = optarg; break;
		case 'v': kvt_log_set_level(KVT_LOG_DEBUG); break;
		case 'q': kvt_log_set_level(KVT_LOG_ERR); quiet = 1; break;
		case 'h': usage(stdout); status = 0; goto out;
		case OPT_VERSION: printf("kvtier-migrate %s\n", PACKAGE_VERSION); status = 0; goto out;
		case OPT_IDLE: idle_arg = optarg; break;
		case OPT_DRY_RUN: go.dry_run = 1; break;
		case OPT_JOBS: {
			char *end;
			jobs = strtol(optarg, &end, 10);
			if (*end || jobs < 1 || jobs > 64) {
				fprintf(stderr, "kvtier-migrate: --jobs must be from 1 to 64\n");
				goto out;
			}
			break;
		}
		case OPT_LIMIT_RATE:
			if (kvt_parse_size(optarg, &go.limit_rate) < 0 || go.limit_rate == 0) {
				fprintf(stderr, "kvtier-migrate: bad --limit-rate '%s': expected bytes"
						" per second like 500K or 20M\n", optarg);
				goto out;
			}
			break;
		case OPT_SESSION: case OPT_RECALL: case OPT_IMPORT: case OPT_RECALL_KEYS:
			if (mode) {
				fprintf(stderr, "kvtier-migrate: --session, --recall, --recall-keys and"
						" --import exclude each other\n");
				goto out;
			}
			mode = ch;
			target = optarg;
			action = ch == OPT_RECALL || ch == OPT_RECALL_KEYS ? "recall" :
				 ch == OPT_IMPORT ? "import" : "demote";
			break;
		case OPT_PROGRESS: want_progress = 1; break;
		case OPT_JSON: json = 1; break;
		default: usage(stderr); goto out;
		}
	}
	if (optind != argc) {
		usage(stderr);
		goto out;
	}
	if (kvt_config_load_default(&cfg, conf, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvtier-migrate: %s\n", err);
		goto out;
	}
	if (cfg.g4.url && strcmp(cfg.g4.url, "none") == 0) {
		fprintf(stderr, "kvtier-migrate: [g4] url = none in %s: this node has no cold tier,"
			" nothing to demote, recall or import\n",
			cfg.path ? cfg.path : "the configuration");
		goto out;
	}
	go.idle = cfg.g4.idle;
	if (idle_arg && kvt_parse_duration(idle_arg, &go.idle) < 0) {
		fprintf(stderr, "kvtier-migrate: bad --idle '%s': expected 90s, 15m, 24h or 7d\n",
			idle_arg);
		goto out;
	}
	go.jobs = jobs ? (unsigned)jobs : cfg.g4.jobs;
	go.retries = RETRIES;
	if (mode == OPT_RECALL_KEYS) {
		if (read_keys(target, &keys) < 0)
			goto out;
	} else if (target && split_session(target, &go.bucket, &go.session) < 0) {
		fprintf(stderr, "kvtier-migrate: expected BUCKET/SESSION, not '%s'\n", target);
		goto out;
	}
	prog.on = want_progress || (!json && isatty(STDERR_FILENO));
	go.progress = on_object;
	go.arg = &prog;

	rc = kvt_store_open(&cfg, 0, &st);
	if (rc < 0) {
		fprintf(stderr, "kvtier-migrate: cannot open the store in '%s': %s\n",
			cfg.store.dir, kvt_strerror(rc));
		goto out;
	}
	if (kvt_store_readonly(st)) {
		fprintf(stderr, "kvtier-migrate: the store in '%s' is on a read-only file system: "
			"nothing can be demoted, recalled or imported\n", cfg.store.dir);
		status = 1;
		goto out;
	}
	snprintf(lockpath, sizeof(lockpath), "%s/migrate.lock", cfg.store.dir);
	lock_fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0) {
		fprintf(stderr, "kvtier-migrate: cannot open '%s': %s\n", lockpath, strerror(errno));
		goto out;
	}
	if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		/* Not a failure (exit 75): cron mails whatever is printed. */
		if (!quiet)
			fprintf(stderr, "kvtier-migrate: another run holds '%s'; exiting\n",
				lockpath);
		status = EXIT_LOCKED;
		goto out;
	}

	rc = kvt_store_identity(st, &ident);
	if (rc < 0) {
		fprintf(stderr, "kvtier-migrate: cannot read the id of the store in '%s': %s\n",
			cfg.store.dir, kvt_strerror(rc));
		goto out;
	}
	if (!ident.matches && mode != OPT_RECALL && mode != OPT_RECALL_KEYS) {
		/* A copy would delete the original's copies and write over its
		 * manifests; a recall only reads, and goes on. */
		fprintf(stderr, "kvtier-migrate: %s: the store in '%s' is not where its id %016"
			PRIx64 " was given (a copy of another store, or this one moved): nothing"
			" is written to g4; run 'kvtier%s%s store-id --new' if it is a copy, or"
			" 'kvtier%s%s store-id --keep' if it is the same store moved\n", action,
			cfg.store.dir, ident.id, cfg.path ? " -c " : "", cfg.path ? cfg.path : "",
			cfg.path ? " -c " : "", cfg.path ? cfg.path : "");
		goto out;
	}

	t0 = mono_s();
	/* Opens G4 first: a url, endpoint or key file that fails is configuration.
	 * Not from a store that is not where its id was given: it only recalls. */
	rc = ident.matches ? kvt_g4_cleanup(st, &go, &swept) : 0;
	if (rc == -ENXIO && (mode == OPT_RECALL || mode == OPT_RECALL_KEYS))
		/* The bucket missing, which the listing's line named: a recall
		 * asked for gets its own answer, each object failed naming the
		 * bucket (exit 1), where "cannot open g4" (exit 2) ended the
		 * run before it tried one. */
		rc = 0;
	if (rc == -EHOSTUNREACH || rc == -EAGAIN) {
		/* A partner that is down or busy is not configuration (it said
		 * "cannot open g4", exit 2): the next run tries again. */
		fprintf(stderr, "kvtier-migrate: %s: g4 '%s' %s: nothing was moved; the next run"
			" tries again\n", action, cfg.g4.endpoint ? cfg.g4.endpoint : cfg.g4.url,
			rc == -EAGAIN ? "answers 'retry later' (500, 503)" : "does not answer");
		status = 1;
		goto out;
	}
	if (rc < 0) {
		/* The url, with its bucket: a missing one (404 NoSuchBucket) is
		 * -ENXIO, which kvt_strerror() says in words. */
		fprintf(stderr, "kvtier-migrate: cannot open g4%s%s%s (see [g4] in %s): %s\n",
			cfg.g4.url ? " '" : "", cfg.g4.url ? cfg.g4.url : "",
			cfg.g4.url ? "'" : "", cfg.path ? cfg.path : "the configuration",
			kvt_strerror(rc));
		goto out;
	}
	{
		if (mode == OPT_RECALL)
			rc = kvt_g4_recall_session(st, go.bucket, go.session, &go, &rep);
		else if (mode == OPT_RECALL_KEYS)
			rc = kvt_g4_recall_keys(st, (const char *const *)keys.v, keys.n, &go, &rep);
		else if (mode == OPT_IMPORT)
			rc = kvt_g4_import_session(st, go.bucket, go.session, &go, &rep);
		else
			rc = kvt_g4_demote(st, &go, &rep);
	}
	secs = mono_s() - t0;
	if (prog.on && (prog.objects || prog.failures))
		fputc('\n', stderr);
	if (rc == -EINVAL || rc == -ENOTSUP) {
		fprintf(stderr, "kvtier-migrate: %s: bad [g4] configuration or manifest\n", action);
		goto out;
	}
	if (rc == -ENOENT && mode == OPT_RECALL) {
		/* It said "recall: No such file or directory", naming nothing. */
		fprintf(stderr, "kvtier-migrate: recall: no bucket '%s' in this store; a session"
			" another node demoted is imported first (--import)\n", go.bucket);
		status = 1;
		goto out;
	}
	if (rc == -ENOENT && mode == OPT_IMPORT) {
		fprintf(stderr, "kvtier-migrate: import: G4 holds no manifest of session '%s' of"
			" bucket '%s' (never demoted, or all of it deleted since)\n", go.session,
			go.bucket);
		status = 1;
		goto out;
	}
	if (rc < 0) {
		fprintf(stderr, "kvtier-migrate: %s: %s\n", action, kvt_strerror(rc));
		status = 1;
		goto out;
	}
	/* What the sweep left in G4 (logged) is this run's failure too. */
	rep.failures += swept.failures;
	status = rep.failures ? 1 : 0;
	if (json) {
		printf("{\"action\":\"%s\",\"dry_run\":%s,\"sessions\":%" PRIu64 ",\"objects\":%" PRIu64
		       ",\"bytes\":%" PRIu64 ",\"failures\":%" PRIu64 ",\"duration_s\":%.3f,"
		       "\"bytes_per_s\":%.0f}\n", action, go.dry_run ? "true" : "false",
		       rep.sessions, rep.objects, rep.bytes, rep.failures, secs,
		       secs > 0 ? rep.bytes / secs : 0.0);
	} else if (!quiet || rep.failures) {
		/* cron mails what is printed: with -q, only a run that failed. */
		fprintf(stderr, "kvtier-migrate: %s%s: %" PRIu64 " sessions, %" PRIu64 " objects, %"
			PRIu64 " bytes in %.2f s (%.1f MiB/s), %" PRIu64 " failures\n", action,
			go.dry_run ? " (dry run)" : "", rep.sessions, rep.objects, rep.bytes, secs,
			secs > 0 ? rep.bytes / secs / 1048576.0 : 0.0, rep.failures);
	}
	openlog("kvtier-migrate", LOG_PID, LOG_CRON);
	syslog(rep.failures ? LOG_WARNING : LOG_INFO,
	       "%s%s: %" PRIu64 " sessions, %" PRIu64 " objects, %" PRIu64 " bytes in %.2f s, %"
	       PRIu64 " failures", action, go.dry_run ? " (dry run)" : "", rep.sessions,
	       rep.objects, rep.bytes, secs, rep.failures);
	closelog();
out:
	keys_release(&keys);
	kvt_store_close(st);
	if (lock_fd >= 0)
		close(lock_fd);	/* the lock goes with it */
	kvt_config_release(&cfg);
	return status;
}
