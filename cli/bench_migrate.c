/*
 * bench_migrate.c - `kvtier bench migrate`: kvtier-migrate's demotion and
 * recall against `aws s3 cp --recursive` of the same bytes, and the latency
 * of recalling one 2 MiB block against a plain GET of it, on one partner.
 *
 * Why these baselines: what the migrator does at night is, in bytes, an
 * upload of a directory of blocks to object storage and, when a
 * conversation resumes, a download; the aws cli is what an operator would
 * script instead (parallel, multipart). A recall adds verification and the
 * write back to the hot tier to the GET it needs, so it is judged against
 * that GET alone. Goals (issue 5): >= 1.0x the aws cli both ways, recall
 * p99 <= 1.5x a plain GET.
 *
 * The partner is s3rver (npm) on 127.0.0.1 and a free port, started here in
 * the scratch directory with its own bucket (found as the tests find it, and
 * like them installed with npm next to the binaries when missing); all three clients (the engine
 * through libs3, the aws cli, the plain GET through libs3) speak to it.
 *
 *   DIR/kvtier-bench-migrate.XXXXXX/
 *     kvtier.conf, store/   a fresh store, [g4] url = s3://g4bench/kvtier
 *     g4.keys, s3rver/      the partner's credentials and data
 *     up/, down/            the aws cli's local side: the same bytes
 *
 * Per size (2 MiB, 32 MiB; --data bytes of blocks each) and run: the
 * blocks are written into the store as one session (bench/sN-SIZE), then
 *   kvtier-migrate --session bench/sN-SIZE   (demotion, timed)
 *   aws s3 cp --recursive up/ s3://g4bench/aws-N-SIZE/
 *   kvtier-migrate --recall bench/sN-SIZE    (recall, timed)
 *   aws s3 cp --recursive s3://g4bench/aws-N-SIZE/ down/
 * alternating which goes first. Both sides include their process start.
 * Latency: --samples blocks of 2 MiB demoted as one session, then recalled
 * one at a time through the library (kvt_reader_open and a read of the
 * whole object, what a FUSE open or an S3 GET of a cold object does)
 * interleaved with a libs3 GET of the same G4 object. The p99 of 100
 * samples is their second slowest, one pause of the partner's (s3rver is
 * Node.js) away from another figure: runs of 100 gave 1.32x to 1.65x of
 * the GET's p99, runs of 400 (the default) 1.08x to 1.37x
 * (docs/benchmarks.md, "Demotion of 32 MiB blocks", "Samples").
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <libs3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define BM_BUCKET "bench"
#define BM_G4BUCKET "g4bench"
#define BM_G4PREFIX "kvtier"
#define BM_MAX_RUNS 15
#define BM_MAX_SAMPLES 2000
#define BM_PATH 4200
#define MB 1e6

enum { BM_DEMOTE, BM_RECALL, BM_NOPS };
enum { BM_2M, BM_32M, BM_NSIZES };

static const uint64_t bm_sizes[BM_NSIZES] = { 2ull << 20, 32ull << 20 };
static const char *const bm_size_names[BM_NSIZES] = { "2M", "32M" };

struct bm_opts {
	char *dir;
	unsigned runs;
	uint64_t data;
	unsigned samples;
	unsigned jobs;			/* kvtier-migrate --jobs; 0: its default */
	const char *s3rver;
	int keep;
};

struct bm {
	struct bm_opts o;
	char *scratch;
	char conf[BM_PATH], store[BM_PATH], log[BM_PATH], endpoint[64];
	char migrate_path[4096], aws_path[4096], s3rver_path[4096], node_path[4096];
	char aws_version[128];
	pid_t s3rver_pid;
	int port;
	struct kvt_config cfg;
	/* seconds of each op: [size][op][0 kvtier, 1 aws][run] */
	double t[BM_NSIZES][BM_NOPS][2][BM_MAX_RUNS];
	unsigned nblocks[BM_NSIZES];
	double lat[2][BM_MAX_SAMPLES];	/* ms: [0] recall, [1] plain GET */
	unsigned nlat;
	char start_date[64];
};

/* ---- the partner ------------------------------------------------------------- */

/* $S3RVER, PATH, or the copy the tests install next to the binaries. */
static int bm_find_s3rver(struct bm *b)
{
	const char *env = b->o.s3rver ? b->o.s3rver : getenv("S3RVER");
	char self[4096], npm[4096], prefix[4096];

	if (env && *env) {
		snprintf(b->s3rver_path, sizeof(b->s3rver_path), "%s", env);
		return access(b->s3rver_path, X_OK) == 0 ? 0 : -ENOENT;
	}
	if (bench_find_program("s3rver", b->s3rver_path, sizeof(b->s3rver_path)) == 0)
		return 0;
	if (bench_find_sibling(".s3rver/node_modules/.bin/s3rver", self, sizeof(self)) == 0) {
		snprintf(b->s3rver_path, sizeof(b->s3rver_path), "%s", self);
		return 0;
	}
	/* As tests/test_migrate_s3.sh does: npm installs it next to the binaries. */
	if (bench_find_program("npm", npm, sizeof(npm)) == 0 &&
	    bench_find_sibling(".s3rver", prefix, sizeof(prefix)) == -ENOENT) {
		char *argv[] = { npm, (char *)"install", (char *)"--prefix", prefix,
				 (char *)"--no-audit", (char *)"--no-fund", (char *)"s3rver@3", NULL };

		printf("installing s3rver with npm into '%s'\n", prefix);
		fflush(stdout);
		if (bench_run(argv, NULL, NULL) == 0 &&
		    bench_find_sibling(".s3rver/node_modules/.bin/s3rver", self, sizeof(self)) == 0) {
			snprintf(b->s3rver_path, sizeof(b->s3rver_path), "%s", self);
			return 0;
		}
	}
	return -ENOENT;
}

static int bm_start_s3rver(struct bm *b)
{
	char dir[BM_PATH + 16], port[16];
	char *argv[] = { b->s3rver_path, (char *)"-d", dir, (char *)"-a", (char *)"127.0.0.1",
			 (char *)"-p", port, (char *)"--configure-bucket", (char *)BM_G4BUCKET,
			 (char *)"--silent", NULL };
	int rc = -ETIMEDOUT;

	snprintf(dir, sizeof(dir), "%s/s3rver", b->scratch);
	if (mkdir(dir, 0700) < 0)
		return -errno;
	for (int tries = 0; tries < 5; tries++) {
		if ((b->port = bench_free_port()) < 0)
			return b->port;
		snprintf(port, sizeof(port), "%d", b->port);
		if ((b->s3rver_pid = bench_spawn(argv, b->log)) < 0)
			return (int)b->s3rver_pid;
		rc = bench_wait_port(b->s3rver_pid, b->port, 30);
		if (rc == 0)
			break;
		bench_stop(b->s3rver_pid);
		b->s3rver_pid = -1;
	}
	if (rc < 0) {
		fprintf(stderr, "kvtier: bench migrate: s3rver did not start: %s; see '%s'\n",
			strerror(-rc), b->log);
		return rc;
	}
	snprintf(b->endpoint, sizeof(b->endpoint), "http://127.0.0.1:%d", b->port);
	return 0;
}

/* ---- the store ----------------------------------------------------------------- */

static int bm_store_open(struct bm *b, struct kvt_store **st)
{
	int rc = kvt_store_open(&b->cfg, KVT_OPEN_CREATE, st);

	if (rc < 0)
		fprintf(stderr, "kvtier: bench migrate: cannot open the scratch store '%s': %s\n",
			b->store, strerror(-rc));
	return rc;
}

/* n blocks of size as session `session`, keys "<session>/blk-NNNNN". */
static int bm_put_session(struct bm *b, const char *session, uint64_t size, unsigned n,
			  const unsigned char *src)
{
	struct kvt_store *st = NULL;
	int rc = bm_store_open(b, &st);

	if (rc == 0 && (rc = kvt_bucket_create(st, BM_BUCKET)) == -EEXIST)
		rc = 0;
	for (unsigned i = 0; rc == 0 && i < n; i++) {
		struct kvt_put_opts po = { .session = session };
		struct kvt_writer *w = NULL;
		char key[256];

		snprintf(key, sizeof(key), "%s/blk-%05u", session, i);
		rc = kvt_writer_open(st, BM_BUCKET, key, &po, &w);
		/* Each block differs (its first 8 bytes), as KV blocks do. */
		if (rc == 0)
			rc = kvt_writer_write(w, &i, sizeof(i));
		if (rc == 0)
			rc = kvt_writer_write(w, src + sizeof(i), size - sizeof(i));
		if (rc == 0)
			rc = kvt_writer_commit(w, NULL);
		else
			kvt_writer_abort(w);
	}
	if (rc < 0)
		fprintf(stderr, "kvtier: bench migrate: cannot write session '%s': %s\n", session,
			strerror(-rc));
	kvt_store_close(st);
	return rc;
}

static void bm_delete_session(struct bm *b, const char *session, unsigned n)
{
	struct kvt_store *st = NULL;

	if (bm_store_open(b, &st) < 0)
		return;
	for (unsigned i = 0; i < n; i++) {
		char key[256];

		snprintf(key, sizeof(key), "%s/blk-%05u", session, i);
		kvt_object_delete(st, BM_BUCKET, key);
	}
	kvt_store_close(st);
}

/* The aws cli's side: the same n blocks as files in dir. */
static int bm_write_files(const char *dir, uint64_t size, unsigned n, unsigned char *src)
{
	char p[BM_PATH + 32];
	int rc = 0;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	for (unsigned i = 0; rc == 0 && i < n; i++) {
		unsigned char save[sizeof(i)];

		memcpy(save, src, sizeof(i));
		memcpy(src, &i, sizeof(i));
		snprintf(p, sizeof(p), "%s/blk-%05u", dir, i);
		rc = bench_write_file(p, 0644, src, size);
		memcpy(src, save, sizeof(i));
	}
	return rc;
}

/* ---- timed steps ----------------------------------------------------------------- */

static int bm_migrate(struct bm *b, const char *what, const char *session, double *s)
{
	char target[256], jobs[16];
	char *argv[12];
	int n = 0, rc;

	snprintf(target, sizeof(target), BM_BUCKET "/%s", session);
	argv[n++] = b->migrate_path;
	argv[n++] = (char *)"-c";
	argv[n++] = b->conf;
	argv[n++] = (char *)what;
	argv[n++] = target;
	if (b->o.jobs) {
		snprintf(jobs, sizeof(jobs), "%u", b->o.jobs);
		argv[n++] = (char *)"--jobs";
		argv[n++] = jobs;
	}
	argv[n] = NULL;
	rc = bench_run(argv, b->log, s);
	if (rc != 0) {
		fprintf(stderr, "kvtier: bench migrate: kvtier-migrate %s %s exited %d; see '%s'\n",
			what, target, rc, b->log);
		return -EIO;
	}
	return 0;
}

static int bm_aws(struct bm *b, const char *from, const char *to, double *s)
{
	char *argv[] = { b->aws_path, (char *)"s3", (char *)"cp", (char *)"--recursive",
			 (char *)"--only-show-errors", (char *)"--endpoint-url", b->endpoint,
			 (char *)from, (char *)to, NULL };
	int rc = bench_run(argv, b->log, s);

	if (rc != 0) {
		fprintf(stderr, "kvtier: bench migrate: aws s3 cp %s %s exited %d; see '%s'\n", from,
			to, rc, b->log);
		return -EIO;
	}
	return 0;
}

static int bm_throughput(struct bm *b, unsigned sz, unsigned run, unsigned char *src)
{
	char session[64], up[BM_PATH + 8], down[BM_PATH + 8], s3url[128];
	uint64_t size = bm_sizes[sz];
	unsigned n = b->nblocks[sz];
	int rc;

	snprintf(session, sizeof(session), "s%u-%s", run, bm_size_names[sz]);
	snprintf(up, sizeof(up), "%s/up/%s", b->scratch, bm_size_names[sz]);
	snprintf(down, sizeof(down), "%s/down", b->scratch);
	snprintf(s3url, sizeof(s3url), "s3://" BM_G4BUCKET "/aws-%u-%s/", run,
		 bm_size_names[sz]);
	if ((rc = bm_put_session(b, session, size, n, src)) < 0)
		return rc;
	for (int k = 0; k < 2; k++) {
		int who = (int)((run + (unsigned)k) % 2);

		if (who == 0)
			rc = bm_migrate(b, "--session", session, &b->t[sz][BM_DEMOTE][0][run]);
		else
			rc = bm_aws(b, up, s3url, &b->t[sz][BM_DEMOTE][1][run]);
		if (rc < 0)
			return rc;
	}
	for (int k = 0; k < 2; k++) {
		int who = (int)((run + (unsigned)k) % 2);

		if (who == 0) {
			rc = bm_migrate(b, "--recall", session, &b->t[sz][BM_RECALL][0][run]);
		} else {
			bench_rm_rf(down);
			rc = bm_aws(b, s3url, down, &b->t[sz][BM_RECALL][1][run]);
		}
		if (rc < 0)
			return rc;
	}
	bench_rm_rf(down);
	bm_delete_session(b, session, n);
	return 0;
}

/* ---- latency ----------------------------------------------------------------------- */

struct bm_get {
	S3Status status;
	uint64_t got;
};

static S3Status bm_get_props(const S3ResponseProperties *p, void *data)
{
	(void)p;
	(void)data;
	return S3StatusOK;
}

static void bm_get_done(S3Status status, const S3ErrorDetails *e, void *data)
{
	(void)e;
	((struct bm_get *)data)->status = status;
}

static S3Status bm_get_data(int size, const char *buf, void *data)
{
	(void)buf;
	((struct bm_get *)data)->got += (uint64_t)size;
	return S3StatusOK;
}

static int64_t bm_plain_get(struct bm *b, const char *key, uint64_t size)
{
	char host[64];
	S3BucketContext ctx = {
		.hostName = host,
		.bucketName = BM_G4BUCKET,
		.protocol = S3ProtocolHTTP,
		.uriStyle = S3UriStylePath,
		.accessKeyId = "S3RVER",
		.secretAccessKey = "S3RVER",
	};
	S3GetObjectHandler h = { { bm_get_props, bm_get_done }, bm_get_data };
	struct bm_get g = { .status = S3StatusInternalError };
	int64_t t0;

	snprintf(host, sizeof(host), "127.0.0.1:%d", b->port);
	t0 = bench_mono_ns();
	S3_get_object(&ctx, key, NULL, 0, 0, NULL, &h, &g);
	if (g.status != S3StatusOK || g.got != size) {
		fprintf(stderr, "kvtier: bench migrate: GET '%s' from the partner: %s, %" PRIu64
			" bytes\n", key, S3_get_status_name(g.status), g.got);
		return -EIO;
	}
	return bench_mono_ns() - t0;
}

/* Opens the cold object (the recall) and reads it whole, as a client would. */
static int64_t bm_recall_one(struct kvt_store *st, const char *key, char *buf, uint64_t size)
{
	struct kvt_reader *r = NULL;
	int64_t t0 = bench_mono_ns();
	uint64_t off = 0;
	int rc = kvt_reader_open(st, BM_BUCKET, key, &r);

	while (rc == 0 && off < size) {
		ssize_t n = kvt_reader_pread(r, buf, (size_t)(size - off), off);

		if (n <= 0)
			rc = n < 0 ? (int)n : -EIO;
		else
			off += (uint64_t)n;
	}
	kvt_reader_close(r);
	if (rc < 0) {
		fprintf(stderr, "kvtier: bench migrate: cannot recall '%s': %s\n", key,
			strerror(-rc));
		return rc;
	}
	return bench_mono_ns() - t0;
}

static int bm_latency(struct bm *b, unsigned char *src)
{
	const char *session = "lat";
	uint64_t size = bm_sizes[BM_2M];
	struct kvt_store *st = NULL;
	char *buf = malloc(size);
	double s;
	int rc;

	if (!buf)
		return -ENOMEM;
	if ((rc = bm_put_session(b, session, size, b->o.samples, src)) < 0 ||
	    (rc = bm_migrate(b, "--session", session, &s)) < 0 ||
	    (rc = bm_store_open(b, &st)) < 0)
		goto out;
	if (S3_initialize("kvtier-bench", S3_INIT_ALL, NULL) != S3StatusOK) {
		fprintf(stderr, "kvtier: bench migrate: cannot initialise libs3\n");
		rc = -EIO;
		goto out;
	}
	for (unsigned i = 0; i < b->o.samples; i++) {
		char key[128], g4key[256], *name = NULL;
		int64_t ns[2];

		snprintf(key, sizeof(key), "%s/blk-%05u", session, i);
		/* The partner's name of the copy the recall fetches. */
		rc = kvt_object_g4_name(st, BM_BUCKET, key, &name);
		if (rc < 0) {
			fprintf(stderr, "kvtier: bench migrate: g4 holds no copy of '%s': %s\n", key,
				strerror(-rc));
			goto out;
		}
		snprintf(g4key, sizeof(g4key), BM_G4PREFIX "/%s", name);
		free(name);
		/* Alternate who goes first: the partner warms up to both. */
		for (int k = 0; k < 2; k++) {
			int who = (int)((i + (unsigned)k) % 2);

			ns[who] = who == 0 ? bm_recall_one(st, key, buf, size) :
					     bm_plain_get(b, g4key, size);
			if (ns[who] < 0) {
				rc = (int)ns[who];
				goto out;
			}
		}
		b->lat[0][i] = (double)ns[0] / 1e6;
		b->lat[1][i] = (double)ns[1] / 1e6;
		b->nlat = i + 1;
	}
out:
	kvt_store_close(st);
	free(buf);
	return rc;
}

/* ---- options and report ------------------------------------------------------------ */

static void bm_usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier bench migrate [--dir DIR] [--runs N] [--data SIZE] [--samples N]\n"
		"                            [--jobs N] [--s3rver PATH] [--keep]\n"
		"\n"
		"kvtier-migrate demotion and recall of 2 MiB and 32 MiB blocks against\n"
		"`aws s3 cp --recursive` of the same bytes up and down, and the latency of\n"
		"recalling one 2 MiB block against a plain GET of it, all against s3rver\n"
		"started on 127.0.0.1. Medians of --runs.\n"
		"\n"
		"  --dir DIR       where the scratch directory goes (default: the configured\n"
		"                  [store] dir, else /var/tmp)\n"
		"  --runs N        runs of the throughput cells (default 3)\n"
		"  --data SIZE     bytes of blocks per size and run (default 256M)\n"
		"  --samples N     recalls timed for the latency (default 400)\n"
		"  --jobs N        kvtier-migrate --jobs (default: its own)\n"
		"  --s3rver PATH   the s3rver to start (default: $S3RVER, PATH, or the one\n"
		"                  the tests install next to this binary)\n"
		"  --keep          leave the scratch directory\n");
}

static int bm_parse_args(const struct kvt_config *cfg, int argc, char **argv, struct bm_opts *o)
{
	const char *dir = NULL;
	int rc = 0;

	memset(o, 0, sizeof(*o));
	o->runs = 3;
	o->data = 256ull << 20;
	o->samples = 400;
	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i], *v = NULL;
		int m;

#define OPT(name, takes) ((m = bench_opt_match(a, name, takes, &i, argc, argv, &v)) != 0)
		if (OPT("--dir", 1)) {
			dir = v;
		} else if (OPT("--runs", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, BM_MAX_RUNS, &o->runs);
		} else if (OPT("--data", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &o->data);
			if (rc == 0 && (o->data < (32ull << 20) || o->data > (64ull << 30)))
				rc = -EINVAL;
		} else if (OPT("--samples", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 2, BM_MAX_SAMPLES, &o->samples);
		} else if (OPT("--jobs", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 64, &o->jobs);
		} else if (OPT("--s3rver", 1)) {
			o->s3rver = v;
		} else if (OPT("--keep", 0)) {
			o->keep = 1;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			bm_usage(stdout);
			return 1;
		} else {
			fprintf(stderr, "kvtier: bench migrate: unknown option '%s'\n", a);
			return -EINVAL;
		}
#undef OPT
		rc = bench_opt_checked("migrate", a, m, rc);
	}
	return rc < 0 ? rc : bench_opt_dir(cfg, dir, &o->dir);
}

static double bm_pct(double *v, unsigned n, double p)
{
	unsigned i;

	qsort(v, n, sizeof(*v), bench_cmp_double);
	i = (unsigned)(p * (n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static void bm_report(struct bm *b, unsigned runs)
{
	static const char *const op_names[BM_NOPS] = { "demote (upload)", "recall (download)" };

	printf("\n| op | blocks | kvtier-migrate MB/s | objects/s | aws s3 cp MB/s | objects/s "
	       "| x aws | goal | met |\n");
	printf("|---|---|--:|--:|--:|--:|--:|--:|---|\n");
	for (unsigned sz = 0; sz < BM_NSIZES; sz++) {
		double bytes = (double)b->nblocks[sz] * (double)bm_sizes[sz];

		for (int op = 0; op < BM_NOPS; op++) {
			double med[2], r;

			for (int w = 0; w < 2; w++) {
				double v[BM_MAX_RUNS];

				memcpy(v, b->t[sz][op][w], sizeof(double) * runs);
				med[w] = bench_median(v, runs);
			}
			r = med[0] > 0 ? med[1] / med[0] : 0;
			printf("| %s | %u x %s | %.0f | %.1f | %.0f | %.1f | %.2fx | >= 1.0x | %s |\n",
			       op_names[op], b->nblocks[sz], bm_size_names[sz], bytes / med[0] / MB,
			       b->nblocks[sz] / med[0], bytes / med[1] / MB, b->nblocks[sz] / med[1],
			       r, r >= 1.0 ? "yes" : "no");
		}
	}
	printf("\nmedians of %u runs of whole commands (process start included); "
	       "MB/s = 10^6 bytes/s\nper run, seconds (kvtier / aws):\n", runs);
	for (unsigned sz = 0; sz < BM_NSIZES; sz++)
		for (int op = 0; op < BM_NOPS; op++) {
			printf("  %-18s %-4s", op_names[op], bm_size_names[sz]);
			for (unsigned r = 0; r < runs; r++)
				printf(" %.2f/%.2f", b->t[sz][op][0][r], b->t[sz][op][1][r]);
			printf("\n");
		}
	if (b->nlat) {
		double p50[2], p99[2];

		for (int w = 0; w < 2; w++) {
			p50[w] = bm_pct(b->lat[w], b->nlat, 0.50);
			p99[w] = bm_pct(b->lat[w], b->nlat, 0.99);
		}
		printf("\n| one 2 MiB block, %u samples | p50 ms | p99 ms |\n|---|--:|--:|\n",
		       b->nlat);
		printf("| recall (open + read, cold) | %.1f | %.1f |\n", p50[0], p99[0]);
		printf("| plain GET from the partner | %.1f | %.1f |\n", p50[1], p99[1]);
		printf("| ratio | %.2fx | %.2fx (goal <= 1.5x: %s) |\n", p50[0] / p50[1],
		       p99[0] / p99[1], p99[0] <= 1.5 * p99[1] ? "met" : "missed");
	}
}

/* ---- main ------------------------------------------------------------------------------ */

static int bm_setup(struct bm *b)
{
	char tmpl[4000], path[BM_PATH + 16];
	struct statvfs vfs;
	int rc;

	if (mkdir(b->o.dir, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		fprintf(stderr, "kvtier: bench migrate: cannot make '%s': %s\n", b->o.dir,
			strerror(errno));
		return rc;
	}
	/* The store, the partner's copies (kvtier's and the aws cli's, every run)
	 * and the local files. */
	if (statvfs(b->o.dir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < b->o.data * (2 * b->o.runs + 4) * 2) {
		fprintf(stderr, "kvtier: bench migrate: '%s' has %" PRIu64 " MiB free, too little "
			"for --data %" PRIu64 " MiB and --runs %u\n", b->o.dir,
			(uint64_t)vfs.f_bavail * vfs.f_frsize >> 20, b->o.data >> 20, b->o.runs);
		return -ENOSPC;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/kvtier-bench-migrate.XXXXXX", b->o.dir);
	if (!mkdtemp(tmpl)) {
		rc = -errno;
		fprintf(stderr, "kvtier: bench migrate: cannot make a directory in '%s': %s\n",
			b->o.dir, strerror(errno));
		return rc;
	}
	if (!(b->scratch = strdup(tmpl)))
		return -ENOMEM;
	snprintf(b->conf, sizeof(b->conf), "%s/kvtier.conf", tmpl);
	snprintf(b->store, sizeof(b->store), "%s/store", tmpl);
	snprintf(b->log, sizeof(b->log), "%s/bench.log", tmpl);
	snprintf(path, sizeof(path), "%s/up", tmpl);
	if (mkdir(path, 0755) < 0)
		return -errno;
	return 0;
}

static int bm_configure(struct bm *b)
{
	char keys[BM_PATH + 16], text[3 * BM_PATH], url[64];
	/* The blocks of a run, kept for the next, and the latency's. */
	uint64_t capacity = b->o.data * 4 + (uint64_t)b->o.samples * bm_sizes[BM_2M] +
			    (2ull << 30);
	int rc;

	snprintf(keys, sizeof(keys), "%s/g4.keys", b->scratch);
	snprintf(text, sizeof(text), "access_key = S3RVER\nsecret_key = S3RVER\n");
	if ((rc = bench_write_file(keys, 0600, text, strlen(text))) < 0)
		return rc;
	snprintf(url, sizeof(url), "s3://" BM_G4BUCKET "/" BM_G4PREFIX);
	snprintf(text, sizeof(text),
		 "[store]\ndir = %s\ncapacity = %" PRIu64 "\nsegment_size = 64M\n\n"
		 "[g4]\nurl = %s\nendpoint = %s\ncredentials = %s\n",
		 b->store, capacity, url, b->endpoint, keys);
	if ((rc = bench_write_file(b->conf, 0644, text, strlen(text))) < 0)
		return rc;
	kvt_config_init(&b->cfg);
	rc = kvt_config_load(&b->cfg, b->conf, text, sizeof(text));
	if (rc < 0)
		fprintf(stderr, "kvtier: bench migrate: cannot load '%s': %s\n", b->conf, text);
	return rc;
}

int bench_migrate_main(const struct kvt_config *cfg, int argc, char **argv)
{
	struct bm *b = calloc(1, sizeof(*b));
	unsigned char *src = NULL;
	char machine[512], node_version[64] = "";
	int rc, status = CLI_FAIL, cfg_loaded = 0;
	unsigned runs_done = 0;
	time_t t = time(NULL);
	struct tm tm;
	int64_t t0 = bench_mono_ns();

	if (!b)
		return CLI_FAIL;
	b->s3rver_pid = -1;
	rc = bm_parse_args(cfg, argc, argv, &b->o);
	if (rc == 1) {
		free(b);
		return CLI_OK;
	}
	if (rc < 0) {
		if (rc == -EINVAL)
			bm_usage(stderr);
		free(b);
		return CLI_USAGE;
	}
	gmtime_r(&t, &tm);
	strftime(b->start_date, sizeof(b->start_date), "%Y-%m-%d %H:%M UTC", &tm);
	if (bench_find_sibling("kvtier-migrate", b->migrate_path, sizeof(b->migrate_path)) < 0) {
		fprintf(stderr, "kvtier: bench migrate: needs kvtier-migrate next to this binary: "
			"build it with 'make'\n");
		goto out;
	}
	if (bench_find_program("aws", b->aws_path, sizeof(b->aws_path)) < 0) {
		fprintf(stderr, "kvtier: bench migrate: needs the aws cli: apt-get install awscli\n");
		goto out;
	}
	if (bm_find_s3rver(b) < 0 || bench_find_program("node", b->node_path,
							  sizeof(b->node_path)) < 0) {
		fprintf(stderr, "kvtier: bench migrate: needs node and s3rver: npm install "
			"--prefix DIR s3rver@3, then --s3rver DIR/node_modules/.bin/s3rver (or run "
			"'make check TESTS=tests/test_migrate_s3.sh' once)\n");
		goto out;
	}
	bench_version(b->aws_path, "--version", b->aws_version, sizeof(b->aws_version));
	bench_version(b->node_path, "--version", node_version, sizeof(node_version));
	bench_machine(machine, sizeof(machine));
	for (unsigned sz = 0; sz < BM_NSIZES; sz++) {
		b->nblocks[sz] = (unsigned)(b->o.data / bm_sizes[sz]);
		if (b->nblocks[sz] == 0)
			b->nblocks[sz] = 1;
	}
	if (!(src = malloc(bm_sizes[BM_32M])))
		goto out;
	bench_random_fill(src, bm_sizes[BM_32M], (uint64_t)t);
	if ((rc = bm_setup(b)) < 0)
		goto out;
	if ((rc = bm_start_s3rver(b)) < 0)
		goto out;
	if ((rc = bm_configure(b)) < 0)
		goto out;
	cfg_loaded = 1;
	for (unsigned sz = 0; sz < BM_NSIZES; sz++) {
		char up[BM_PATH + 8];

		snprintf(up, sizeof(up), "%s/up/%s", b->scratch, bm_size_names[sz]);
		if ((rc = bm_write_files(up, bm_sizes[sz], b->nblocks[sz], src)) < 0) {
			fprintf(stderr, "kvtier: bench migrate: cannot write '%s': %s\n", up,
				strerror(-rc));
			goto out;
		}
	}
	/* The aws cli reads its keys from the environment: the partner's. */
	setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
	setenv("AWS_DEFAULT_REGION", "us-east-1", 1);
	setenv("AWS_CONFIG_FILE", "/dev/null", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);

	printf("kvtier bench migrate: %s\n", b->start_date);
	printf("machine: %s; load average %.1f\n", machine, bench_load1());
	printf("tools: %s%s; %s; s3rver %s (node %s) on %s\n", b->migrate_path,
	       b->o.jobs ? " --jobs N" : "", b->aws_version, b->s3rver_path, node_version,
	       b->endpoint);
	printf("scratch: %s; %u x 2 MiB and %u x 32 MiB blocks per run\n", b->scratch,
	       b->nblocks[BM_2M], b->nblocks[BM_32M]);
	fflush(stdout);
	for (unsigned r = 0; r < b->o.runs; r++) {
		for (unsigned sz = 0; sz < BM_NSIZES; sz++)
			if ((rc = bm_throughput(b, sz, r, src)) < 0)
				goto out;
		runs_done = r + 1;
		printf("run %u done (%.0f s)\n", r + 1, (double)(bench_mono_ns() - t0) / 1e9);
		fflush(stdout);
	}
	if ((rc = bm_latency(b, src)) < 0)
		goto out;
	bm_report(b, runs_done);
	printf("\nload average at the end %.1f; total %.0f s\n", bench_load1(),
	       (double)(bench_mono_ns() - t0) / 1e9);
	status = CLI_OK;
out:
	bench_stop(b->s3rver_pid);
	if (b->scratch) {
		if (b->o.keep)
			printf("kept '%s'\n", b->scratch);
		else
			bench_rm_rf(b->scratch);
	}
	if (cfg_loaded)
		kvt_config_release(&b->cfg);
	free(b->scratch);
	free(b->o.dir);
	free(src);
	free(b);
	return status;
}
