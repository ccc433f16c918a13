/*
 * bench_engine.c - `kvtier bench engine`: the engine's PUT and GET against
 * fio on the same disk, measured in the same run, then catalog lookups and
 * resident memory with many objects.
 *
 * Why fio: the engine's goals are stated as fractions of what the device
 * gives (>= 0.9x for 2 MiB and 32 MiB objects, >= 0.8x for 64 KiB random
 * GET), and the device is only known by measuring it, on this machine,
 * today. So every cell (op, size, depth) runs the engine and fio back to
 * back, --runs times, alternating, and the table shows medians of both.
 * fio gets what the engine gets: the same block size, the same number in
 * flight, O_DIRECT, io_uring, a file in the same directory as the scratch
 * store and as large as the engine's data set.
 *
 * "N in flight" for the engine is N threads, each doing whole-object
 * synchronous operations: PUT = writer open, one write of the whole
 * buffer, commit; GET = reader open, one pread of the whole object, close.
 * That is how a front end calls the engine; fio's iodepth N from one thread
 * is the device-side equivalent. MD5 ETags are off (KV blocks carry
 * CRC32C, which the engine computes anyway).
 *
 * The scratch store and fio's file live under DIR and are removed at the
 * end (unless --keep). A run:
 *
 *   setup --> precondition --> lookup test --> cells --> memory --> cleanup
 *             (fio's file        (N tiny        (per size and depth, per
 *              written once)     objects,       run: PUT kvtier, PUT fio,
 *                                head/open)     GET kvtier, GET fio)
 *
 * Preconditioning writes fio's file once, so that fio neither reads holes
 * (which cost no I/O) nor writes into unwritten extents (which ext4
 * converts at completion, a cost of a fresh file, not of the steady
 * state). The engine needs no such help: the store writes its segment
 * files whole when it creates them (segment.c), and that is part of what
 * is measured, as it is what a fresh store does.
 *
 * Each size has a key set as large as the data set (--data), which PUT
 * overwrites cyclically at every depth, so the store never fills with live
 * objects; GET reads random keys of that set. After the last depth of a
 * size its keys are deleted, so that reclaim only ever meets emptied
 * segments and sizes do not disturb each other.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

extern char **environ;

#define BENCH_BUCKET "bench"
#define BENCH_STORE "kvtier-bench-store"
#define BENCH_FIO_FILE "kvtier-bench-fio.dat"
#define BENCH_MAX_LIST 8
#define BENCH_MAX_DEPTH 256
#define BENCH_MAX_RUNS 15
#define MIB (1024.0 * 1024.0)

enum bench_op { OP_PUT, OP_GET };

static const char *const op_names[] = { "PUT", "GET" };

struct bench_opts {
	char *dir;			/* scratch directory */
	uint64_t sizes[BENCH_MAX_LIST];
	unsigned nsizes;
	unsigned depths[BENCH_MAX_LIST];
	unsigned ndepths;
	unsigned seconds;
	unsigned runs;
	uint64_t capacity;
	uint64_t data;			/* bytes of the data set per cell and of fio's file */
	uint64_t lookup_objects;
	unsigned lookup_seconds;
	int no_fio;
	int no_precondition;
	int lookup_only;
	int keep;
	const char *out;
};

/* One measurement of one side (kvtier or fio). */
struct bench_result {
	int ok;
	double bps;			/* bytes per second */
	double iops;			/* objects (blocks for fio) per second */
	double p50_ms, p99_ms;
	double cpu;			/* cores busy: CPU seconds / wall seconds */
	uint64_t errors;		/* kvtier: failed operations */
};

struct bench_cell {
	enum bench_op op;
	uint64_t size;
	unsigned depth;
	unsigned nruns;
	struct bench_result kvt[BENCH_MAX_RUNS], fio[BENCH_MAX_RUNS];
	struct bench_result kvt_med, fio_med;
	long rss_kib;			/* the engine's, after the GET runs, keys still stored */
	uint64_t stored_bytes;		/* object bytes in the store at that moment */
};

struct bench_lookup {
	int done;
	uint64_t objects;
	double insert_per_s;
	double head_per_s, head_per_cpu_s;	/* wall rate; per second of this thread's CPU */
	double open_per_s, open_per_cpu_s;
	uint64_t misses;
};

struct bench_mem {
	long start, before_load, after_load, after_lookups, after_cells, after_close;
	long at_rest;			/* after the cells, once idle I/O contexts are freed */
	uint64_t objects, object_bytes, live_bytes, used_bytes;
};

struct bench {
	struct bench_opts o;
	struct kvt_config cfg;		/* the scratch store's */
	struct kvt_store *st;
	char *store_dir;
	char *fio_file;
	int made_dir;			/* DIR did not exist: remove it at the end */
	char fio_version[64];		/* "" when fio is not there */
	char io[16];			/* what the store runs: "uring" or "sync" */
	unsigned char *src;		/* PUT payload, max(size) bytes, mmapped */
	size_t src_len;
	struct bench_cell *cells;
	size_t ncells;
	struct bench_lookup lookup;
	struct bench_mem mem;
	char date[64];
	char load_start[64], load_end[64];	/* /proc/loadavg: was the machine quiet? */
};

/* ---- small helpers ------------------------------------------------------- */

static int64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU seconds of the calling thread: "per core" when the machine is shared. */
static double bench_thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double bench_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* splitmix64: the benchmark's only source of randomness, cheap and seedable. */
static uint64_t bench_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/*
 * Resident memory of this process in KiB (RssAnon + RssShmem), or -1.
 * VmRSS also counts every touched page of a file the process maps (segments
 * read through kvt_reader_map; the catalog, when it was read through mmap):
 * that is the page cache, shared and reclaimable, so it is left out.
 */
static long bench_rss_kib(void)
{
	char line[256];
	long kib = -1, v;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "RssAnon: %ld", &v) == 1 || sscanf(line, "RssShmem: %ld", &v) == 1)
			kib = (kib < 0 ? 0 : kib) + v;
	}
	fclose(f);
	return kib;
}

/*
 * The first three fields of /proc/loadavg. Printed with the results because
 * on a shared machine other processes' I/O and CPU move the figures of both
 * sides; a high load says to rerun before drawing conclusions.
 */
static void bench_loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double a = 0, b = 0, c = 0;

	if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
		snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
	else
		snprintf(buf, len, "unknown");
	if (f)
		fclose(f);
}

/* "64K", "2M", "32M": how the size was most likely written on the command line. */
static void bench_size_name(uint64_t size, char *buf, size_t len)
{
	if (size >= (1ull << 30) && size % (1ull << 30) == 0)
		snprintf(buf, len, "%" PRIu64 "G", size >> 30);
	else if (size >= (1ull << 20) && size % (1ull << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "M", size >> 20);
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "K", size >> 10);
	else
		snprintf(buf, len, "%" PRIu64, size);
}

/*
 * Bench buffers are mmapped, not malloced: munmap gives them back to the
 * kernel at once, so the resident size measured after a cell is the
 * engine's, not glibc's memory of a 32 MiB buffer per thread.
 */
static void *bench_map(size_t len)
{
	void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void bench_unmap(void *p, size_t len)
{
	if (p)
		munmap(p, len ? len : 1);
}

static int bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ---- options ------------------------------------------------------------- */

static void bench_usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier bench engine [--dir DIR] [--sizes 64K,2M,32M] [--depths 1,8,32]\n"
		"                           [--seconds N] [--runs N] [--capacity SIZE] [--data SIZE]\n"
		"                           [--objects-1m | --lookup-objects N] [--lookup-seconds N]\n"
		"                           [--lookup-only] [--no-fio] [--no-precondition] [--keep]\n"
		"                           [--out FILE]\n"
		"\n"
		"PUT and GET of whole objects through the engine, N threads for N in flight,\n"
		"against fio (io_uring, O_DIRECT, same block size and queue depth) on a file\n"
		"in the same directory; medians of --runs runs. Then catalog lookups with\n"
		"--lookup-objects tiny objects, and resident memory.\n"
		"\n"
		"  --dir DIR            scratch directory (default: bench-scratch in the\n"
		"                       configured [store] dir); needs capacity + data free\n"
		"  --sizes LIST         object sizes (default 64K,2M,32M)\n"
		"  --depths LIST        operations in flight (default 1,8,32)\n"
		"  --seconds N          per measurement (default 5)\n"
		"  --runs N             runs per cell, alternating kvtier and fio (default 3)\n"
		"  --capacity SIZE      scratch store capacity (default 8G)\n"
		"  --data SIZE          data set per cell and fio's file size (default 2G,\n"
		"                       at most capacity / 3)\n"
		"  --lookup-objects N   objects for the lookup test (default 200000; 0: skip)\n"
		"  --objects-1m         the same as --lookup-objects 1000000\n"
		"  --lookup-seconds N   per lookup measurement (default 3)\n"
		"  --no-fio             engine figures only\n"
		"  --no-precondition    do not write fio's file once before the cells\n"
		"  --lookup-only        only the lookup test and memory (no fio, no cells)\n"
		"  --keep               leave the scratch store and fio's file in DIR\n"
		"  --out FILE           also write the results as JSON\n");
}

static int bench_parse_args(const struct kvt_config *cfg, int argc, char **argv,
			    struct bench_opts *o)
{
	uint64_t depths[BENCH_MAX_LIST];
	const char *dir = NULL;
	int rc = 0;

	memset(o, 0, sizeof(*o));
	o->sizes[0] = 64 << 10;
	o->sizes[1] = 2 << 20;
	o->sizes[2] = 32 << 20;
	o->nsizes = 3;
	o->depths[0] = 1;
	o->depths[1] = 8;
	o->depths[2] = 32;
	o->ndepths = 3;
	o->seconds = 5;
	o->runs = 3;
	o->capacity = 8ull << 30;
	o->data = 2ull << 30;
	o->lookup_objects = 200000;
	o->lookup_seconds = 3;

	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i], *v = NULL;
		unsigned u = 0;
		int m;

#define OPT(name, takes) ((m = bench_opt_match(a, name, takes, &i, argc, argv, &v)) != 0)
		if (OPT("--dir", 1)) {
			dir = v;
		} else if (OPT("--sizes", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_list(v, 1, BENCH_MAX_DEPTH, o->sizes, BENCH_MAX_LIST, &o->nsizes);
		} else if (OPT("--depths", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_list(v, 0, BENCH_MAX_DEPTH, depths, BENCH_MAX_LIST, &o->ndepths);
			for (unsigned k = 0; rc == 0 && k < o->ndepths; k++)
				o->depths[k] = (unsigned)depths[k];
		} else if (OPT("--seconds", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 3600, &o->seconds);
		} else if (OPT("--runs", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, BENCH_MAX_RUNS, &o->runs);
		} else if (OPT("--capacity", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &o->capacity);
		} else if (OPT("--data", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &o->data);
		} else if (OPT("--lookup-objects", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 0, 100000000, &u);
			o->lookup_objects = u;
		} else if (OPT("--objects-1m", 0)) {
			o->lookup_objects = 1000000;
		} else if (OPT("--lookup-seconds", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 3600, &o->lookup_seconds);
		} else if (OPT("--no-fio", 0)) {
			o->no_fio = 1;
		} else if (OPT("--no-precondition", 0)) {
			o->no_precondition = 1;
		} else if (OPT("--lookup-only", 0)) {
			o->lookup_only = 1;
			o->no_fio = 1;
		} else if (OPT("--keep", 0)) {
			o->keep = 1;
		} else if (OPT("--out", 1)) {
			o->out = v;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			bench_usage(stdout);
			return 1;
		} else {
			fprintf(stderr, "kvtier: bench engine: unknown option '%s'\n", a);
			return -EINVAL;
		}
#undef OPT
		rc = bench_opt_checked("engine", a, m, rc);
	}
	if (rc < 0)
		return rc;
	if (o->data == 0 || o->data > o->capacity / 3) {
		/* The key set must be overwritten before reclaim reaches it: see the file comment. */
		fprintf(stderr, "kvtier: bench engine: --data must be at most a third of --capacity\n");
		return -EINVAL;
	}
	if (dir) {
		o->dir = strdup(dir);
	} else {
		const char *base = cfg && cfg->store.dir ? cfg->store.dir : ".";
		size_t len = strlen(base) + sizeof("/bench-scratch");

		o->dir = malloc(len);
		if (o->dir)
			snprintf(o->dir, len, "%s/bench-scratch", base);
	}
	return o->dir ? 0 : -ENOMEM;
}

/* ---- the engine side: N threads of whole-object operations ---------------- */

struct bench_worker {
	struct bench_phase *ph;
	unsigned id;
	pthread_t tid;
	unsigned char *buf;		/* GET destination, size bytes */
	uint64_t *lat;			/* ns per timed operation */
	size_t nlat, caplat;
	uint64_t ops, errors;
	int err;			/* first error */
	int64_t end_ns;
	uint64_t rng;
};

/*
 * The key set of one size: "bench/s<size>/<g>" for g < n, as many keys as
 * make up the data set. The same set serves every depth, so a GET reads
 * from a data set as large as fio's file whatever the depth. written[g]
 * says which keys exist; list holds them, gathered before a GET phase.
 */
struct bench_keys {
	char prefix[64];		/* "bench/s64K" */
	uint64_t n;
	unsigned char *written;		/* [n] */
	uint64_t *list;			/* [n], the first nlist are written */
	uint64_t nlist;
};

/*
 * One timed phase. At depth D thread t owns the keys g = t + D*i and
 * overwrites them in turn (cursor[t] counts its PUTs, across the runs of a
 * cell), so the store never holds more than the data set and reclaim finds
 * segments emptied by overwrites.
 */
struct bench_phase {
	struct kvt_store *st;
	enum bench_op op;
	uint64_t size;
	struct bench_keys *keys;
	unsigned depth;
	uint64_t *cursor;		/* [depth] */
	const unsigned char *src;
	pthread_mutex_t lock;		/* the start gate: ready, go, abort */
	pthread_cond_t cond;
	unsigned ready;
	int go, abort;
	int64_t start_ns, deadline_ns;
	struct bench_worker *w;
};

static void bench_key(const struct bench_keys *k, uint64_t g, char *key, size_t len)
{
	snprintf(key, len, "%s/%" PRIu64, k->prefix, g);
}

static int bench_put_one(struct bench_phase *ph, unsigned t)
{
	/* No KVT_PUT_MD5_ETAG: KV blocks are checked by CRC32C, which is always on. */
	static const struct kvt_put_opts opts = { .flags = 0 };
	struct bench_keys *k = ph->keys;
	struct kvt_writer *w = NULL;
	uint64_t owned = (k->n - t + ph->depth - 1) / ph->depth;	/* k->n >= depth */
	uint64_t g = t + (uint64_t)ph->depth * (ph->cursor[t] % owned);
	char key[256];
	int rc;

	bench_key(k, g, key, sizeof(key));
	rc = kvt_writer_open(ph->st, BENCH_BUCKET, key, &opts, &w);
	if (rc < 0)
		return rc;
	rc = kvt_writer_write(w, ph->src, ph->size);
	if (rc < 0) {
		kvt_writer_abort(w);
		return rc;
	}
	rc = kvt_writer_commit(w, NULL);
	if (rc == 0) {
		ph->cursor[t]++;
		k->written[g] = 1;	/* g is this thread's alone: no race */
	}
	return rc;
}

static int bench_get_one(struct bench_phase *ph, struct bench_worker *me)
{
	struct bench_keys *k = ph->keys;
	struct kvt_reader *r = NULL;
	char key[256];
	ssize_t got;
	int rc;

	if (k->nlist == 0)
		return -ENOENT;
	bench_key(k, k->list[bench_rand(&me->rng) % k->nlist], key, sizeof(key));
	rc = kvt_reader_open(ph->st, BENCH_BUCKET, key, &r);
	if (rc < 0)
		return rc;
	got = kvt_reader_pread(r, me->buf, ph->size, 0);
	rc = got < 0 ? (int)got : (uint64_t)got == ph->size ? 0 : -EIO;
	kvt_reader_close(r);
	return rc;
}

/* Gathers the written keys for GET; between phases, so no thread writes. */
static void bench_keys_gather(struct bench_keys *k)
{
	k->nlist = 0;
	for (uint64_t g = 0; g < k->n; g++)
		if (k->written[g])
			k->list[k->nlist++] = g;
}

/*
 * Deletes the written keys of a size, on one thread and untimed: writes
 * serialize on the catalog anyway, and more threads would only queue.
 */
static int bench_keys_delete(struct kvt_store *st, struct bench_keys *k)
{
	char key[256];
	int rc = 0;

	for (uint64_t g = 0; g < k->n; g++) {
		int r;

		if (!k->written[g])
			continue;
		bench_key(k, g, key, sizeof(key));
		r = kvt_object_delete(st, BENCH_BUCKET, key);
		if (r < 0 && r != -ENOENT && rc == 0)
			rc = r;
		k->written[g] = 0;
	}
	k->nlist = 0;
	return rc;
}

static int bench_lat_add(struct bench_worker *me, uint64_t ns)
{
	if (UTIL_GROW(me->lat, me->nlat, me->caplat) < 0)
		return -ENOMEM;
	me->lat[me->nlat++] = ns;
	return 0;
}

/*
 * The start gate: every worker does its untimed first operation, checks in,
 * and waits for the main thread to open the gate, so that the clock starts
 * when all of them are ready. A condition variable rather than a barrier:
 * if a thread cannot be created, the main thread must be able to let the
 * others go (abort) without the missing party.
 */
static int bench_gate_wait(struct bench_phase *ph)
{
	int go;

	pthread_mutex_lock(&ph->lock);
	ph->ready++;
	pthread_cond_broadcast(&ph->cond);
	while (!ph->go && !ph->abort)
		pthread_cond_wait(&ph->cond, &ph->lock);
	go = !ph->abort;
	pthread_mutex_unlock(&ph->lock);
	return go;
}

static void *bench_worker_main(void *arg)
{
	struct bench_worker *me = arg;
	struct bench_phase *ph = me->ph;
	int rc;

	/*
	 * One untimed operation first: the thread's catalog connection, its
	 * I/O context and the pages of its buffer are set up on first use,
	 * a one-off cost per thread that is not the steady state.
	 */
	rc = ph->op == OP_PUT ? bench_put_one(ph, me->id) : bench_get_one(ph, me);
	if (rc < 0) {
		me->err = rc;
		me->errors++;
	}
	if (!bench_gate_wait(ph))
		return NULL;
	for (;;) {
		int64_t t0 = bench_now_ns(), t1;

		if (t0 >= ph->deadline_ns)
			break;
		rc = ph->op == OP_PUT ? bench_put_one(ph, me->id) : bench_get_one(ph, me);
		t1 = bench_now_ns();
		if (rc < 0) {
			me->errors++;
			if (!me->err)
				me->err = rc;
			/* A full store will not empty by itself: stop rather than spin. */
			if (ph->op == OP_PUT)
				break;
			continue;
		}
		me->ops++;
		if (bench_lat_add(me, (uint64_t)(t1 - t0)) < 0) {
			me->err = -ENOMEM;
			break;
		}
	}
	me->end_ns = bench_now_ns();
	return NULL;
}

/* Sorted latencies of every worker into res, with rates over wall seconds. */
static int bench_phase_result(struct bench_phase *ph, double wall, double cpu,
			      struct bench_result *res)
{
	uint64_t *lat = NULL, ops = 0;
	size_t nlat = 0, k = 0;

	memset(res, 0, sizeof(*res));
	for (unsigned i = 0; i < ph->depth; i++) {
		ops += ph->w[i].ops;
		nlat += ph->w[i].nlat;
		res->errors += ph->w[i].errors;
	}
	res->cpu = wall > 0 ? cpu / wall : 0;
	if (nlat == 0 || wall <= 0)
		return 0;
	lat = malloc(nlat * sizeof(*lat));
	if (!lat)
		return -ENOMEM;
	for (unsigned i = 0; i < ph->depth; i++) {
		memcpy(lat + k, ph->w[i].lat, ph->w[i].nlat * sizeof(*lat));
		k += ph->w[i].nlat;
	}
	qsort(lat, nlat, sizeof(*lat), bench_cmp_u64);
	res->ok = 1;
	res->iops = (double)ops / wall;
	res->bps = res->iops * (double)ph->size;
	res->p50_ms = (double)lat[nlat / 2] / 1e6;
	res->p99_ms = (double)lat[nlat * 99 / 100] / 1e6;
	free(lat);
	return 0;
}

/*
 * Runs one phase on ph->depth threads for `seconds` and fills res:
 * throughput is every operation completed over the time from the gate to
 * the last thread's end, so an operation still running at the deadline
 * counts with the time it took (at 32 MiB x 32 that is most of a second).
 */
static int bench_phase_run(struct bench_phase *ph, unsigned seconds, struct bench_result *res)
{
	struct bench_worker *w;
	unsigned started = 0;
	int64_t end = 0;
	double cpu0 = 0;
	int rc = 0;

	w = calloc(ph->depth, sizeof(*w));
	if (!w)
		return -ENOMEM;
	ph->w = w;
	ph->deadline_ns = 0;
	ph->ready = 0;
	ph->go = 0;
	ph->abort = 0;
	pthread_mutex_init(&ph->lock, NULL);
	pthread_cond_init(&ph->cond, NULL);
	for (unsigned i = 0; i < ph->depth; i++) {
		w[i].ph = ph;
		w[i].id = i;
		w[i].rng = 0x5EED0000ull + i * 7919 + (uint64_t)bench_now_ns();
		if (ph->op == OP_GET && !(w[i].buf = bench_map(ph->size))) {
			rc = -ENOMEM;
			goto out;
		}
	}
	for (; started < ph->depth; started++) {
		if (pthread_create(&w[started].tid, NULL, bench_worker_main, &w[started]) != 0) {
			fprintf(stderr, "kvtier: bench engine: cannot start thread %u of %u\n",
				started + 1, ph->depth);
			rc = -EAGAIN;
			break;
		}
	}
	pthread_mutex_lock(&ph->lock);
	if (rc < 0) {
		ph->abort = 1;
	} else {
		while (ph->ready < started)
			pthread_cond_wait(&ph->cond, &ph->lock);
		cpu0 = bench_cpu_s();
		ph->start_ns = bench_now_ns();
		ph->deadline_ns = ph->start_ns + (int64_t)seconds * 1000000000;
		ph->go = 1;
	}
	pthread_cond_broadcast(&ph->cond);
	pthread_mutex_unlock(&ph->lock);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(w[i].tid, NULL);
		if (w[i].end_ns > end)
			end = w[i].end_ns;
	}
	if (rc < 0)
		goto out;
	rc = bench_phase_result(ph, (double)(end - ph->start_ns) / 1e9, bench_cpu_s() - cpu0, res);
	/* The first failure tells the operator why a figure is missing or low. */
	for (unsigned i = 0; rc == 0 && i < ph->depth; i++) {
		if (!w[i].err)
			continue;
		if (!res->ok)
			rc = w[i].err;
		fprintf(stderr, "kvtier: bench engine: %s of %" PRIu64 " bytes: %" PRIu64
			" failed: %s\n", op_names[ph->op], ph->size, res->errors, strerror(-w[i].err));
		break;
	}
out:
	for (unsigned i = 0; i < ph->depth; i++) {
		bench_unmap(w[i].buf, ph->size);
		free(w[i].lat);
	}
	pthread_cond_destroy(&ph->cond);
	pthread_mutex_destroy(&ph->lock);
	free(w);
	ph->w = NULL;
	return rc;
}

/* ---- the fio side --------------------------------------------------------- */

/* Runs argv, returns its standard output in *out (caller frees). 0 if it exited 0. */
static int bench_capture(char *const argv[], char **out)
{
	posix_spawn_file_actions_t fa;
	int fa_ok = 0, pfd[2] = { -1, -1 };
	char *buf = NULL;
	size_t len = 0, cap = 0;
	pid_t pid = -1;
	int status, rc;

	*out = NULL;
	if (pipe(pfd) < 0)
		return -errno;
	rc = -posix_spawn_file_actions_init(&fa);
	if (rc < 0)
		goto out;
	fa_ok = 1;
	rc = -posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
	if (rc == 0)
		rc = -posix_spawn_file_actions_addclose(&fa, pfd[0]);
	if (rc == 0)
		rc = -posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	if (rc < 0) {
		pid = -1;
		goto out;
	}
	close(pfd[1]);
	pfd[1] = -1;
	for (;;) {
		ssize_t n;

		if (len + 4096 + 1 > cap) {
			char *nb = realloc(buf, cap = cap ? 2 * cap : 65536);

			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
		}
		n = read(pfd[0], buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	if (buf)
		buf[len] = '\0';
out:
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	if (pid > 0) {
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			rc = -ECHILD;
	}
	if (fa_ok)
		posix_spawn_file_actions_destroy(&fa);
	if (rc == 0)
		*out = buf;
	else
		free(buf);
	return rc;
}

/*
 * The span of the JSON object that is the value of "name" inside [p, end):
 * fio's keys and our job name hold no braces, so counting them is enough.
 */
static const char *bench_json_object(const char *p, const char *end, const char *name,
				     const char **obj_end)
{
	char pat[64];
	size_t plen;

	snprintf(pat, sizeof(pat), "\"%s\"", name);
	plen = strlen(pat);
	for (; p && p + plen <= end; p++) {
		const char *q;
		int depth = 0;

		if (memcmp(p, pat, plen) != 0)
			continue;
		q = p + plen;
		while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == ':'))
			q++;
		if (q >= end || *q != '{')
			continue;
		for (const char *r = q; r < end; r++) {
			if (*r == '{')
				depth++;
			else if (*r == '}' && --depth == 0) {
				*obj_end = r + 1;
				return q;
			}
		}
		return NULL;
	}
	return NULL;
}

/* The number that is the value of "name" in [p, end); -1 if absent. */
static double bench_json_number(const char *p, const char *end, const char *name)
{
	char pat[64];
	size_t plen;

	snprintf(pat, sizeof(pat), "\"%s\"", name);
	plen = strlen(pat);
	for (; p + plen <= end; p++) {
		const char *q;

		if (memcmp(p, pat, plen) != 0)
			continue;
		q = p + plen;
		while (q < end && (*q == ' ' || *q == '\t' || *q == '\n'))
			q++;
		if (q >= end || *q != ':')
			continue;
		return strtod(q + 1, NULL);
	}
	return -1;
}

/*
 * fio's JSON: jobs[0].read or .write holds bw_bytes, iops and
 * clat_ns.percentile; the job object holds usr_cpu and sys_cpu.
 */
static int bench_fio_parse(const char *json, const char *dir, struct bench_result *res)
{
	const char *end = json + strlen(json), *jobs, *jobs_end, *side, *side_end, *clat, *clat_end;
	const char *pct, *pct_end;
	double usr, sys;

	memset(res, 0, sizeof(*res));
	jobs = strstr(json, "\"jobs\"");
	if (!jobs)
		return -EINVAL;
	jobs_end = end;
	side = bench_json_object(jobs, jobs_end, dir, &side_end);
	if (!side)
		return -EINVAL;
	res->bps = bench_json_number(side, side_end, "bw_bytes");
	res->iops = bench_json_number(side, side_end, "iops");
	clat = bench_json_object(side, side_end, "clat_ns", &clat_end);
	if (clat) {
		pct = bench_json_object(clat, clat_end, "percentile", &pct_end);
		if (pct) {
			res->p50_ms = bench_json_number(pct, pct_end, "50.000000") / 1e6;
			res->p99_ms = bench_json_number(pct, pct_end, "99.000000") / 1e6;
		}
	}
	usr = bench_json_number(jobs, end, "usr_cpu");
	sys = bench_json_number(jobs, end, "sys_cpu");
	res->cpu = usr >= 0 && sys >= 0 ? (usr + sys) / 100 : 0;
	if (res->bps < 0 || res->iops < 0)
		return -EINVAL;
	res->ok = 1;
	return 0;
}

/*
 * One fio job: rw is "write", "read" or "randread"; seconds 0 writes the
 * file once (preconditioning) instead of running by time.
 */
static int bench_fio(struct bench *b, const char *rw, uint64_t bs, unsigned depth,
		     unsigned seconds, struct bench_result *res)
{
	char a_file[4200], a_size[64], a_bs[64], a_depth[64], a_rw[64], a_run[64];
	char *argv[24];
	char *json = NULL;
	int n = 0, rc;

	snprintf(a_file, sizeof(a_file), "--filename=%s", b->fio_file);
	snprintf(a_size, sizeof(a_size), "--size=%" PRIu64, b->o.data);
	snprintf(a_bs, sizeof(a_bs), "--bs=%" PRIu64, bs);
	snprintf(a_depth, sizeof(a_depth), "--iodepth=%u", depth);
	snprintf(a_rw, sizeof(a_rw), "--rw=%s", rw);
	snprintf(a_run, sizeof(a_run), "--runtime=%u", seconds);
	argv[n++] = (char *)"fio";
	argv[n++] = (char *)"--name=kvtier-bench";
	argv[n++] = a_file;
	argv[n++] = a_size;
	argv[n++] = (char *)"--ioengine=io_uring";
	argv[n++] = (char *)"--direct=1";
	argv[n++] = a_bs;
	argv[n++] = a_depth;
	argv[n++] = (char *)"--numjobs=1";
	argv[n++] = a_rw;
	if (seconds) {
		argv[n++] = a_run;
		argv[n++] = (char *)"--time_based";
	}
	argv[n++] = (char *)"--output-format=json";
	argv[n] = NULL;
	rc = bench_capture(argv, &json);
	if (rc < 0) {
		fprintf(stderr, "kvtier: bench engine: fio %s bs=%" PRIu64 " iodepth=%u failed\n",
			rw, bs, depth);
		goto out;
	}
	if (res) {
		rc = bench_fio_parse(json, strcmp(rw, "write") == 0 ? "write" : "read", res);
		if (rc < 0)
			fprintf(stderr, "kvtier: bench engine: cannot read fio's JSON output\n");
	}
out:
	free(json);
	return rc;
}

static void bench_fio_probe(struct bench *b)
{
	char *argv[] = { (char *)"fio", (char *)"--version", NULL };
	char *out = NULL;

	b->fio_version[0] = '\0';
	if (b->o.no_fio || bench_capture(argv, &out) < 0 || !out)
		goto out;
	out[strcspn(out, "\r\n")] = '\0';
	snprintf(b->fio_version, sizeof(b->fio_version), "%s", out[0] ? out : "fio");
out:
	free(out);
}

/* ---- setup and cleanup --------------------------------------------------- */

/* mkdir -p; *made says whether the last component is new. */
static int bench_mkdir(const char *dir, int *made)
{
	char path[4096];

	*made = 0;
	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0755) == 0)
		*made = 1;
	else if (errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * Removes what this benchmark made, by name: the scratch store's files and
 * fio's file; with final, DIR too if this run made it and it is empty.
 * Never a recursive removal of DIR, which the operator chose and may hold
 * other things (it may even be another store's directory).
 */
static void bench_remove_scratch(struct bench *b, int final)
{
	static const char *const files[] = {
		"catalog.db", "catalog.db-wal", "catalog.db-shm", "segments.map",
	};
	char path[4400];
	DIR *d;

	if (b->fio_file)
		unlink(b->fio_file);
	if (!b->store_dir)
		return;
	snprintf(path, sizeof(path), "%s/segments", b->store_dir);
	d = opendir(path);
	if (d) {
		struct dirent *de;

		while ((de = readdir(d))) {
			char seg[4700];

			/* Segment files are named by number only. */
			if (de->d_name[0] < '0' || de->d_name[0] > '9' ||
			    de->d_name[strspn(de->d_name, "0123456789")] != '\0')
				continue;
			snprintf(seg, sizeof(seg), "%s/%s", path, de->d_name);
			unlink(seg);
		}
		closedir(d);
		rmdir(path);
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", b->store_dir, files[i]);
		unlink(path);
	}
	if (rmdir(b->store_dir) < 0 && errno != ENOENT)
		fprintf(stderr, "kvtier: bench engine: cannot remove '%s': %s\n", b->store_dir,
			strerror(errno));
	/* Only a directory this run made, and only if nothing else went into it. */
	if (final && b->made_dir)
		rmdir(b->o.dir);
}

static int bench_setup(struct bench *b, const struct kvt_config *cfg)
{
	struct kvt_store_stat ss;
	struct statvfs vfs;
	size_t len;
	int rc;

	rc = bench_mkdir(b->o.dir, &b->made_dir);
	if (rc < 0) {
		fprintf(stderr, "kvtier: bench engine: cannot create '%s': %s\n", b->o.dir,
			strerror(-rc));
		return rc;
	}
	len = strlen(b->o.dir) + sizeof(BENCH_STORE) + sizeof(BENCH_FIO_FILE) + 2;
	b->store_dir = malloc(len);
	b->fio_file = malloc(len);
	if (!b->store_dir || !b->fio_file)
		return -ENOMEM;
	snprintf(b->store_dir, len, "%s/%s", b->o.dir, BENCH_STORE);
	snprintf(b->fio_file, len, "%s/%s", b->o.dir, BENCH_FIO_FILE);
	/* fio splits --filename at ':' (several files); a path with one would mislead it. */
	if (strchr(b->fio_file, ':')) {
		fprintf(stderr, "kvtier: bench engine: '%s' holds ':', which fio reads as a "
			"file separator\n", b->o.dir);
		return -EINVAL;
	}
	/* Leftovers of an interrupted run: ours by name, and in the way. */
	bench_remove_scratch(b, 0);
	if (statvfs(b->o.dir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < b->o.capacity + b->o.data + (256ull << 20)) {
		fprintf(stderr, "kvtier: bench engine: '%s' has %" PRIu64 " MiB free, the run needs "
			"%" PRIu64 " MiB (--capacity + --data)\n", b->o.dir,
			(uint64_t)vfs.f_bavail * vfs.f_frsize >> 20,
			(b->o.capacity + b->o.data) >> 20);
		return -ENOSPC;
	}

	kvt_config_init(&b->cfg);
	free(b->cfg.store.dir);
	b->cfg.store.dir = strdup(b->store_dir);
	if (!b->cfg.store.dir)
		return -ENOMEM;
	b->cfg.store.capacity = b->o.capacity;
	b->cfg.store.segment_size = 256ull << 20;
	b->cfg.store.io = KVT_IO_URING;		/* the store falls back to sync by itself */
	/* fio reads with O_DIRECT: so does the engine, whatever the config says. */
	b->cfg.store.cached_read_max = 0;
	/*
	 * The hot tier alone, as fio has no second tier: what reclaim frees is
	 * evicted, not first demoted to G4 (the default G4, a directory beside
	 * the store, is on the same disk and copies every overwritten byte
	 * once more; `kvtier bench migrate` measures demotion).
	 */
	free(b->cfg.g4.url);
	b->cfg.g4.url = strdup("none");
	if (!b->cfg.g4.url)
		return -ENOMEM;
	if (cfg) {
		b->cfg.store.high_watermark = cfg->store.high_watermark;
		b->cfg.store.low_watermark = cfg->store.low_watermark;
		b->cfg.store.session_depth = cfg->store.session_depth;
		b->cfg.store.access_flush_ms = cfg->store.access_flush_ms;
	}
	rc = kvt_store_open(&b->cfg, KVT_OPEN_CREATE, &b->st);
	if (rc < 0) {
		fprintf(stderr, "kvtier: bench engine: cannot create the scratch store '%s': %s\n",
			b->store_dir, strerror(-rc));
		return rc;
	}
	rc = kvt_bucket_create(b->st, BENCH_BUCKET);
	if (rc < 0 && rc != -EEXIST)
		return rc;
	rc = kvt_store_stat(b->st, &ss);
	if (rc < 0)
		return rc;
	snprintf(b->io, sizeof(b->io), "%s", ss.io ? ss.io : "?");

	return 0;
}

/* Writes fio's file once (see the file comment). */
static int bench_precondition(struct bench *b)
{
	int64_t t0 = bench_now_ns();
	int rc;

	if (!b->fio_version[0])
		return 0;
	printf("preconditioning: writing fio's file (%" PRIu64 " MiB) once\n", b->o.data >> 20);
	fflush(stdout);
	rc = bench_fio(b, "write", 1u << 20, 16, 0, NULL);
	if (rc == 0)
		printf("preconditioning: done in %.1f s\n", (double)(bench_now_ns() - t0) / 1e9);
	return rc;
}

/* ---- catalog lookups ----------------------------------------------------- */

/*
 * Lookup keys look like KV block keys: a hash, inserted and looked up in
 * random order, so the catalog's index is exercised as in production and
 * not as an append-only sequence.
 */
static void bench_lookup_key(uint64_t n, char *key, size_t len)
{
	uint64_t s = n;

	snprintf(key, len, "lookup/%016" PRIx64, bench_rand(&s));
}

static int bench_lookups(struct bench *b)
{
	struct bench_lookup *L = &b->lookup;
	uint64_t n = b->o.lookup_objects, rng = 7, count;
	int64_t t0, t1, deadline;
	double cpu0;
	char key[64];
	int rc = 0;

	if (n == 0)
		return 0;
	b->mem.before_load = bench_rss_kib();
	printf("lookup test: inserting %" PRIu64 " empty objects (one commit each)\n", n);
	fflush(stdout);
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < n; i++) {
		struct kvt_writer *w = NULL;

		bench_lookup_key(i, key, sizeof(key));
		rc = kvt_writer_open(b->st, BENCH_BUCKET, key, NULL, &w);
		if (rc == 0)
			rc = kvt_writer_commit(w, NULL);
		if (rc < 0) {
			fprintf(stderr, "kvtier: bench engine: cannot insert '%s': %s\n", key,
				strerror(-rc));
			return rc;
		}
		if (i > 0 && i % 100000 == 0) {
			printf("  %" PRIu64 " inserted, %.0f/s\n", i,
			       (double)i / ((double)(bench_now_ns() - t0) / 1e9));
			fflush(stdout);
		}
	}
	t1 = bench_now_ns();
	L->objects = n;
	L->insert_per_s = (double)n / ((double)(t1 - t0) / 1e9);
	b->mem.after_load = bench_rss_kib();

	/* kvt_object_head: the catalog alone, on this one thread (one core). */
	count = 0;
	cpu0 = bench_thread_cpu_s();
	t0 = bench_now_ns();
	deadline = t0 + (int64_t)b->o.lookup_seconds * 1000000000;
	do {
		for (int k = 0; k < 256; k++) {
			struct kvt_object *obj = NULL;

			bench_lookup_key(bench_rand(&rng) % n, key, sizeof(key));
			rc = kvt_object_head(b->st, BENCH_BUCKET, key, &obj);
			if (rc == -ENOENT)
				L->misses++;
			else if (rc < 0)
				return rc;
			kvt_object_free(obj);
			count++;
		}
		t1 = bench_now_ns();
	} while (t1 < deadline);
	L->head_per_s = (double)count / ((double)(t1 - t0) / 1e9);
	L->head_per_cpu_s = (double)count / (bench_thread_cpu_s() - cpu0);

	/* kvt_reader_open: what a GET pays before its first byte (object + extents). */
	count = 0;
	cpu0 = bench_thread_cpu_s();
	t0 = bench_now_ns();
	deadline = t0 + (int64_t)b->o.lookup_seconds * 1000000000;
	do {
		for (int k = 0; k < 256; k++) {
			struct kvt_reader *r = NULL;

			bench_lookup_key(bench_rand(&rng) % n, key, sizeof(key));
			rc = kvt_reader_open(b->st, BENCH_BUCKET, key, &r);
			if (rc == -ENOENT)
				L->misses++;
			else if (rc < 0)
				return rc;
			kvt_reader_close(r);
			count++;
		}
		t1 = bench_now_ns();
	} while (t1 < deadline);
	L->open_per_s = (double)count / ((double)(t1 - t0) / 1e9);
	L->open_per_cpu_s = (double)count / (bench_thread_cpu_s() - cpu0);
	b->mem.after_lookups = bench_rss_kib();
	L->done = 1;
	printf("lookup test: %.0f inserts/s; kvt_object_head %.0f/s (%.0f per CPU-second); "
	       "kvt_reader_open %.0f/s (%.0f per CPU-second)\n", L->insert_per_s, L->head_per_s,
	       L->head_per_cpu_s, L->open_per_s, L->open_per_cpu_s);
	return 0;
}

/* ---- cells --------------------------------------------------------------- */

static void bench_print_run(const struct bench_cell *c, unsigned run)
{
	char sz[32];
	const struct bench_result *k = &c->kvt[run], *f = &c->fio[run];

	bench_size_name(c->size, sz, sizeof(sz));
	printf("  run %u %s %4s x%-3u kvtier %8.1f MiB/s %8.0f/s p99 %7.2f ms cpu %.2f",
	       run + 1, op_names[c->op], sz, c->depth, k->bps / MIB, k->iops, k->p99_ms, k->cpu);
	if (f->ok)
		printf(" | fio %8.1f MiB/s cpu %.2f | %.2fx", f->bps / MIB, f->cpu,
		       f->bps > 0 ? k->bps / f->bps : 0);
	if (k->errors)
		printf(" (%" PRIu64 " errors)", k->errors);
	printf("\n");
	fflush(stdout);
}

static void bench_median_result(const struct bench_result *runs, unsigned n,
				struct bench_result *med)
{
	double v[BENCH_MAX_RUNS];
	unsigned k;

	memset(med, 0, sizeof(*med));
#define MED(field) do { \
		k = 0; \
		for (unsigned i = 0; i < n; i++) \
			if (runs[i].ok) \
				v[k++] = runs[i].field; \
		med->field = bench_median(v, k); \
	} while (0)
	MED(bps);
	MED(iops);
	MED(p50_ms);
	MED(p99_ms);
	MED(cpu);
#undef MED
	for (unsigned i = 0; i < n; i++) {
		med->ok |= runs[i].ok;
		med->errors += runs[i].errors;
	}
}

/*
 * One size at one depth: --runs times PUT kvtier, PUT fio, GET kvtier,
 * GET fio. The keys stay for the next depth of the same size.
 */
static int bench_size_depth(struct bench *b, struct bench_keys *keys, uint64_t size,
			    unsigned depth, struct bench_cell *put, struct bench_cell *get)
{
	const char *fio_get = size < (1u << 20) ? "randread" : "read";
	struct kvt_store_stat ss;
	struct bench_phase ph;
	int rc = 0;

	memset(&ph, 0, sizeof(ph));
	ph.st = b->st;
	ph.size = size;
	ph.keys = keys;
	ph.depth = depth;
	ph.src = b->src;
	ph.cursor = calloc(depth, sizeof(*ph.cursor));
	if (!ph.cursor)
		return -ENOMEM;
	*put = (struct bench_cell){ .op = OP_PUT, .size = size, .depth = depth };
	*get = (struct bench_cell){ .op = OP_GET, .size = size, .depth = depth };

	for (unsigned run = 0; run < b->o.runs; run++) {
		ph.op = OP_PUT;
		rc = bench_phase_run(&ph, b->o.seconds, &put->kvt[run]);
		if (rc < 0)
			goto out;
		if (b->fio_version[0])
			bench_fio(b, "write", size, depth, b->o.seconds, &put->fio[run]);
		put->nruns = run + 1;
		bench_print_run(put, run);

		ph.op = OP_GET;
		bench_keys_gather(keys);
		rc = bench_phase_run(&ph, b->o.seconds, &get->kvt[run]);
		if (rc < 0)
			goto out;
		if (b->fio_version[0])
			bench_fio(b, fio_get, size, depth, b->o.seconds, &get->fio[run]);
		get->nruns = run + 1;
		bench_print_run(get, run);
	}
out:
	/* The data set is stored now: memory can be compared with it. */
	if (kvt_store_stat(b->st, &ss) == 0)
		put->stored_bytes = get->stored_bytes = ss.object_bytes;
	/* The engine's: the payload buffer, resident since it was filled, is the bench's. */
	put->rss_kib = get->rss_kib = bench_rss_kib() - (long)(b->src_len / 1024);
	bench_median_result(put->kvt, put->nruns, &put->kvt_med);
	bench_median_result(put->fio, put->nruns, &put->fio_med);
	bench_median_result(get->kvt, get->nruns, &get->kvt_med);
	bench_median_result(get->fio, get->nruns, &get->fio_med);
	free(ph.cursor);
	return rc;
}

/* ---- reporting ----------------------------------------------------------- */

static void bench_print_table(const struct bench *b)
{
	printf("\nmedians of %u runs of %u s; MiB/s = 2^20 bytes/s; IOPS = objects/s (fio: blocks/s);\n"
	       "kvtier latency is per whole object; cpu = cores busy (process CPU time / wall time)\n\n",
	       b->o.runs, b->o.seconds);
	printf("%-3s %5s %5s | %11s %9s %6s | %11s %9s | %8s %8s | %8s %8s | %5s %5s\n",
	       "op", "size", "depth", "kvtier MiB/s", "fio MiB/s", "ratio", "kvtier IOPS", "fio IOPS",
	       "kvt p50", "kvt p99", "fio p50", "fio p99", "kvCPU", "fioCPU");
	for (size_t i = 0; i < b->ncells; i++) {
		const struct bench_cell *c = &b->cells[i];
		const struct bench_result *k = &c->kvt_med, *f = &c->fio_med;
		char sz[32], ratio[16] = "-", fbw[16] = "-", fiops[16] = "-", fp50[16] = "-";
		char fp99[16] = "-", fcpu[16] = "-";

		bench_size_name(c->size, sz, sizeof(sz));
		if (f->ok) {
			snprintf(fbw, sizeof(fbw), "%.1f", f->bps / MIB);
			snprintf(fiops, sizeof(fiops), "%.0f", f->iops);
			snprintf(fp50, sizeof(fp50), "%.2f", f->p50_ms);
			snprintf(fp99, sizeof(fp99), "%.2f", f->p99_ms);
			snprintf(fcpu, sizeof(fcpu), "%.2f", f->cpu);
			if (f->bps > 0)
				snprintf(ratio, sizeof(ratio), "%.2fx", k->bps / f->bps);
		}
		printf("%-3s %5s %5u | %11.1f %9s %6s | %11.0f %9s | %8.2f %8.2f | %8s %8s | %5.2f %5s\n",
		       op_names[c->op], sz, c->depth, k->bps / MIB, fbw, ratio, k->iops, fiops,
		       k->p50_ms, k->p99_ms, fp50, fp99, k->cpu, fcpu);
	}
}

/* The goals, each with the figure it is judged on. */
static void bench_print_goals(const struct bench *b)
{
	const double cache_mib = 8;	/* catalog.c: PRAGMA cache_size = -8192 per connection */
	long worst = 0;

	printf("\ngoals:\n");
	for (size_t i = 0; i < b->ncells; i++) {
		const struct bench_cell *c = &b->cells[i];
		double goal = 0, ratio;
		char sz[32];

		if (c->size >= (2u << 20))
			goal = 0.9;
		else if (c->size == (64u << 10) && c->op == OP_GET)
			goal = 0.8;
		if (!goal || !c->fio_med.ok || c->fio_med.bps <= 0)
			continue;
		ratio = c->kvt_med.bps / c->fio_med.bps;
		bench_size_name(c->size, sz, sizeof(sz));
		printf("  %s %s x%u: %.2fx fio, goal >= %.1fx: %s\n", op_names[c->op], sz, c->depth,
		       ratio, goal, ratio >= goal ? "met" : "NOT met");
	}
	if (b->lookup.done) {
		/* Judged per CPU-second: on a shared machine the thread does not get a whole core. */
		printf("  catalog lookups with %" PRIu64 " objects: %.0f per CPU-second (%.0f/s wall) "
		       "on one thread, goal >= 50000/s per core: %s\n", b->lookup.objects,
		       b->lookup.head_per_cpu_s, b->lookup.head_per_s,
		       b->lookup.head_per_cpu_s >= 50000 ? "met" : "NOT met");
	}
	/* The worst moment: after any cell's GET runs with its data set stored, or the end. */
	worst = b->mem.after_cells;
	for (size_t i = 0; i < b->ncells; i += 2) {
		if (b->cells[i].rss_kib > worst)
			worst = b->cells[i].rss_kib;
	}
	/*
	 * Judged at rest, with the lookup test's objects in the catalog: what
	 * grows with what is stored shows there. While operations run, each
	 * holds an I/O context (4 MiB of registered buffers); the store keeps
	 * idle ones for the next burst and frees all but 8 after a flush
	 * period without use, so the largest size follows the depth.
	 */
	if (b->mem.at_rest > 0) {
		printf("  resident size at rest: %.1f MiB; goal < 64 MiB + SQLite cache (up to %.0f "
		       "MiB per connection; the bench threads' connections are closed by then): "
		       "%s\n", (double)b->mem.at_rest / 1024, cache_mib,
		       b->mem.at_rest / 1024.0 < 64 + cache_mib ? "met" : "NOT met (figures below)");
	}
	if (worst > 0)
		printf("  largest resident size, right after a cell (4 MiB of I/O buffers an "
		       "operation in flight, freed when idle): %.1f MiB\n", (double)worst / 1024);
}

static void bench_json_result(FILE *f, const struct bench_result *r)
{
	fprintf(f, "{\"ok\": %s, \"mib_s\": %.3f, \"iops\": %.3f, \"p50_ms\": %.4f, "
		"\"p99_ms\": %.4f, \"cpu\": %.3f, \"errors\": %" PRIu64 "}",
		r->ok ? "true" : "false", r->bps / MIB, r->iops, r->p50_ms, r->p99_ms, r->cpu,
		r->errors);
}

/* Writes a JSON string; the directory is the only operator-chosen text. */
static void bench_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static int bench_write_json(const struct bench *b, const char *path)
{
	FILE *f = fopen(path, "w");
	int rc = 0;

	if (!f)
		return -errno;
	fprintf(f, "{\n  \"date\": ");
	bench_json_string(f, b->date);
	fprintf(f, ",\n  \"nproc\": %ld,\n  \"loadavg_start\": ", sysconf(_SC_NPROCESSORS_ONLN));
	bench_json_string(f, b->load_start);
	fprintf(f, ",\n  \"loadavg_end\": ");
	bench_json_string(f, b->load_end);
	fprintf(f, ",\n  \"dir\": ");
	bench_json_string(f, b->o.dir);
	fprintf(f, ",\n  \"io\": ");
	bench_json_string(f, b->io);
	fprintf(f, ",\n  \"fio\": ");
	if (b->fio_version[0])
		bench_json_string(f, b->fio_version);
	else
		fprintf(f, "null");
	fprintf(f, ",\n  \"md5_etags\": false,\n  \"capacity\": %" PRIu64 ",\n  \"data\": %" PRIu64
		",\n  \"seconds\": %u,\n  \"runs\": %u,\n  \"preconditioned\": %s,\n  \"cells\": [",
		b->o.capacity, b->o.data, b->o.seconds, b->o.runs,
		b->o.no_precondition ? "false" : "true");
	for (size_t i = 0; i < b->ncells; i++) {
		const struct bench_cell *c = &b->cells[i];

		fprintf(f, "%s\n    {\"op\": \"%s\", \"size\": %" PRIu64 ", \"depth\": %u, "
			"\"rss_kib\": %ld, \"stored_bytes\": %" PRIu64 ",\n     \"kvtier\": ",
			i ? "," : "", c->op == OP_PUT ? "put" : "get", c->size, c->depth, c->rss_kib,
			c->stored_bytes);
		bench_json_result(f, &c->kvt_med);
		fprintf(f, ",\n     \"fio\": ");
		bench_json_result(f, &c->fio_med);
		fprintf(f, ",\n     \"ratio\": %.4f,\n     \"runs\": [",
			c->fio_med.ok && c->fio_med.bps > 0 ? c->kvt_med.bps / c->fio_med.bps : 0.0);
		for (unsigned r = 0; r < c->nruns; r++) {
			fprintf(f, "%s\n       {\"kvtier\": ", r ? "," : "");
			bench_json_result(f, &c->kvt[r]);
			fprintf(f, ", \"fio\": ");
			bench_json_result(f, &c->fio[r]);
			fprintf(f, "}");
		}
		fprintf(f, "]}");
	}
	fprintf(f, "\n  ],\n  \"lookup\": ");
	if (b->lookup.done)
		fprintf(f, "{\"objects\": %" PRIu64 ", \"inserts_per_s\": %.1f, \"heads_per_s\": %.1f, "
			"\"heads_per_cpu_s\": %.1f, \"reader_opens_per_s\": %.1f, "
			"\"reader_opens_per_cpu_s\": %.1f, \"misses\": %" PRIu64 "}",
			b->lookup.objects, b->lookup.insert_per_s, b->lookup.head_per_s,
			b->lookup.head_per_cpu_s, b->lookup.open_per_s, b->lookup.open_per_cpu_s,
			b->lookup.misses);
	else
		fprintf(f, "null");
	fprintf(f, ",\n  \"rss_kib\": {\"start\": %ld, \"before_load\": %ld, \"after_load\": %ld, "
		"\"after_lookups\": %ld, \"after_cells\": %ld, \"at_rest\": %ld, "
		"\"after_close\": %ld},\n"
		"  \"stored\": {\"objects\": %" PRIu64 ", \"object_bytes\": %" PRIu64
		", \"live_bytes\": %" PRIu64 ", \"used_bytes\": %" PRIu64 "}\n}\n",
		b->mem.start, b->mem.before_load, b->mem.after_load, b->mem.after_lookups,
		b->mem.after_cells, b->mem.at_rest, b->mem.after_close, b->mem.objects,
		b->mem.object_bytes, b->mem.live_bytes, b->mem.used_bytes);
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

/*
 * The PUT payload: max(size) incompressible bytes (in case the device or
 * the host below it compresses). It exists only while the cells run, so
 * that no resident size reported as the engine's includes it.
 */
static int bench_payload_map(struct bench *b)
{
	uint64_t seed = 42;

	b->src_len = 0;
	for (unsigned i = 0; i < b->o.nsizes; i++)
		if (b->o.sizes[i] > b->src_len)
			b->src_len = b->o.sizes[i];
	b->src = bench_map(b->src_len);
	if (!b->src)
		return -ENOMEM;
	for (size_t i = 0; i + 8 <= b->src_len; i += 8) {
		uint64_t v = bench_rand(&seed);

		memcpy(b->src + i, &v, 8);
	}
	return 0;
}

/*
 * The cells keep one GET's data set written while it is measured, so the
 * GET of a size and depth follows its PUT; sizes are the outer loop.
 */
static int bench_cells(struct bench *b)
{
	int rc = 0;

	b->cells = calloc((size_t)b->o.nsizes * b->o.ndepths * 2, sizeof(*b->cells));
	if (!b->cells)
		return -ENOMEM;
	rc = bench_payload_map(b);
	if (rc < 0)
		return rc;
	for (unsigned i = 0; i < b->o.nsizes && rc == 0; i++) {
		uint64_t size = b->o.sizes[i];
		struct bench_keys keys;
		char sz[32];
		int drc;

		memset(&keys, 0, sizeof(keys));
		bench_size_name(size, sz, sizeof(sz));
		snprintf(keys.prefix, sizeof(keys.prefix), "bench/s%s", sz);
		keys.n = b->o.data / size;
		for (unsigned d = 0; d < b->o.ndepths; d++)
			if (keys.n < b->o.depths[d])
				keys.n = b->o.depths[d];	/* every thread owns a key */
		keys.written = calloc(keys.n, 1);
		keys.list = calloc(keys.n, sizeof(*keys.list));
		if (!keys.written || !keys.list)
			rc = -ENOMEM;
		for (unsigned d = 0; d < b->o.ndepths && rc == 0; d++) {
			rc = bench_size_depth(b, &keys, size, b->o.depths[d], &b->cells[b->ncells],
					      &b->cells[b->ncells + 1]);
			if (b->cells[b->ncells].nruns)
				b->ncells += 2;
		}
		/* Emptied segments are all reclaim meets later: no cell drops live objects. */
		if (keys.written && (drc = bench_keys_delete(b->st, &keys)) < 0)
			fprintf(stderr, "kvtier: bench engine: cannot delete the %s objects: %s\n", sz,
				strerror(-drc));
		free(keys.written);
		free(keys.list);
	}
	bench_unmap(b->src, b->src_len);
	b->src = NULL;
	return rc;
}

int bench_engine_main(const struct kvt_config *cfg, int argc, char **argv)
{
	struct bench b;
	struct kvt_store_stat ss;
	time_t now = time(NULL);
	struct tm tm;
	int rc, exit_code = CLI_FAIL;

	memset(&b, 0, sizeof(b));
	rc = bench_parse_args(cfg, argc, argv, &b.o);
	if (rc == 1)
		return CLI_OK;
	if (rc < 0) {
		fprintf(stderr, "kvtier: bench engine: see 'kvtier bench engine --help'\n");
		return CLI_USAGE;
	}
	b.mem.start = bench_rss_kib();
	strftime(b.date, sizeof(b.date), "%Y-%m-%d %H:%M:%S %z", localtime_r(&now, &tm));
	bench_loadavg(b.load_start, sizeof(b.load_start));
	bench_fio_probe(&b);

	rc = bench_setup(&b, cfg);
	if (rc < 0) {
		if (rc != -ENOSPC && rc != -EINVAL)
			fprintf(stderr, "kvtier: bench engine: setup failed: %s\n", strerror(-rc));
		goto out;
	}
	printf("kvtier bench engine, %s, load average %s\n", b.date, b.load_start);
	printf("dir %s (scratch store and fio's file), %ld cpus, io backend: %s%s\n", b.o.dir,
	       sysconf(_SC_NPROCESSORS_ONLN), b.io,
	       strcmp(b.io, "uring") ? " (page cache: figures are not device figures)" : "");
	printf("capacity %" PRIu64 " MiB, segments 256 MiB, data set %" PRIu64 " MiB per cell, "
	       "MD5 ETags off (CRC32C only)\n", b.o.capacity >> 20, b.o.data >> 20);
	if (b.fio_version[0])
		printf("baseline: %s, ioengine=io_uring direct=1 numjobs=1, same bs and iodepth\n",
		       b.fio_version);
	else
		printf("baseline: %s: engine figures only\n",
		       b.o.no_fio ? "--no-fio" : "fio not found");
	fflush(stdout);

	if (!b.o.no_precondition && !b.o.lookup_only) {
		rc = bench_precondition(&b);
		if (rc < 0)
			goto out;
	}
	rc = bench_lookups(&b);
	if (rc < 0)
		goto out;
	if (!b.o.lookup_only)
		rc = bench_cells(&b);

	bench_loadavg(b.load_end, sizeof(b.load_end));
	b.mem.after_cells = bench_rss_kib();
	if (b.ncells) {
		/* The flusher frees idle I/O contexts after a period unused. */
		unsigned ms = 2 * b.cfg.store.access_flush_ms + 500;

		nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000 }, NULL);
		b.mem.at_rest = bench_rss_kib();
	}
	if (kvt_store_stat(b.st, &ss) == 0) {
		b.mem.objects = ss.objects;
		b.mem.object_bytes = ss.object_bytes;
		b.mem.live_bytes = ss.live_bytes;
		b.mem.used_bytes = ss.used_bytes;
	}
	if (b.ncells)
		bench_print_table(&b);
	bench_print_goals(&b);
	printf("\nresident (RssAnon + RssShmem; mapped files are page cache): start %.1f MiB",
	       (double)b.mem.start / 1024);
	if (b.lookup.done)
		printf(", before the %" PRIu64 "-object load %.1f MiB, after it %.1f MiB, "
		       "after lookups %.1f MiB", b.lookup.objects, (double)b.mem.before_load / 1024,
		       (double)b.mem.after_load / 1024, (double)b.mem.after_lookups / 1024);
	printf(", at the end %.1f MiB", (double)b.mem.after_cells / 1024);
	if (b.mem.at_rest > 0)
		printf(", at rest %.1f MiB", (double)b.mem.at_rest / 1024);
	printf("\n");
	for (size_t i = 0; i < b.ncells; i += 2) {
		char sz[32];

		bench_size_name(b.cells[i].size, sz, sizeof(sz));
		printf("  after the GET runs of %s x%u: %.1f MiB with %.1f MiB stored\n", sz,
		       b.cells[i].depth, (double)b.cells[i].rss_kib / 1024,
		       (double)b.cells[i].stored_bytes / MIB);
	}
	printf("stored: %" PRIu64 " objects, %.1f MiB of objects, %.1f MiB of segments in use\n",
	       b.mem.objects, (double)b.mem.object_bytes / MIB, (double)b.mem.used_bytes / MIB);
	/* Group commit (src/commit.c): how many PUTs shared a catalog transaction. */
	if (kvt_store_stat(b.st, &ss) == 0 && ss.commit_groups)
		printf("catalog commits of writers: %" PRIu64 " puts in %" PRIu64
		       " transactions (%.2f a transaction, at most %" PRIu64 ")\n",
		       ss.commit_puts, ss.commit_groups,
		       (double)ss.commit_puts / (double)ss.commit_groups, ss.commit_largest);
	printf("load average: %s at the start, %s at the end\n", b.load_start, b.load_end);
	if (rc == 0)
		exit_code = CLI_OK;
out:
	kvt_store_close(b.st);
	b.st = NULL;
	b.mem.after_close = bench_rss_kib();
	if (b.o.out && b.date[0]) {
		int wrc = bench_write_json(&b, b.o.out);

		if (wrc < 0) {
			fprintf(stderr, "kvtier: bench engine: cannot write '%s': %s\n", b.o.out,
				strerror(-wrc));
			exit_code = CLI_FAIL;
		}
	}
	if (!b.o.keep && b.store_dir)
		bench_remove_scratch(&b, 1);
	kvt_config_release(&b.cfg);
	bench_unmap(b.src, b.src_len);
	free(b.cells);
	free(b.store_dir);
	free(b.fio_file);
	free(b.o.dir);
	return exit_code;
}
