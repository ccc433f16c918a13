/*
 * bench_fuse.c - `kvtier bench fuse`: kvtier-fuse against a plain file on
 * the same disk (fio) and against s3fs-fuse over kvtier-gateway (cp -r,
 * ls -l), measured in the same run.
 *
 * Why these baselines: inference engines write and read KV blocks as files
 * (NIXL's POSIX backend, LMCache's disk tier, cp), so the mount is judged
 * against what they would otherwise use, a file on the local disk; and
 * against the usual way of mounting an S3 store, s3fs, over the same data
 * and the same engine (kvtier-gateway on the same store), so that the
 * difference is the mount, not the storage. Goals (issue 4): reads >= 0.8x
 * the plain file, writes >= 0.7x, and >= 5x s3fs on the copy and on the
 * listing.
 *
 * Everything lives in a scratch directory under --dir, removed at the end:
 *
 *   DIR/kvtier-bench-fuse.XXXXXX/
 *     kvtier.conf, store/      a fresh store (bucket "bench")
 *     mnt/                     kvtier-fuse, mounted for the fio cells, and
 *                              again (fresh) for each run of the cp/ls cells
 *     s3mnt/                   s3fs over kvtier-gateway (127.0.0.1, a free
 *                              port, a generated owner-only credential)
 *     plain/                   fio's plain files, on the disk of store/
 *     src/, out/               cp's local side
 *
 * fio cells (psync, bs 1 MiB, buffered I/O as applications do, fio's
 * default invalidate=1 so that each job starts with the files out of the
 * page cache on both sides; a read job first syncs its file system, as
 * invalidation cannot drop the dirty pages a plain write left): sequential write of --files2m files of 2 MiB
 * and --files32m files of 32 MiB (the files are removed before each write
 * job, so every write creates its files, as a KV cache does), sequential
 * read of the same files, random 64 KiB reads over the 32 MiB files. With
 * --fsync every file is fsynced on close on both sides; with --direct every
 * job uses O_DIRECT on both sides (fio's direct=1), as GPU-direct and
 * NIXL-style clients do: no page cache on either side.
 *
 * cp/ls cells, each run on fresh mounts (cold caches on both sides): cp -r
 * of a directory of --blocks 2 MiB files out of the mount to the local disk
 * and into the mount from it, and ls -l of a directory of --list files. The
 * data are made once through kvtier-fuse; s3fs sees them through the
 * gateway, which shares the store. Each cell runs --runs times, alternating
 * kvtier and the baseline; the table shows medians.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define BF_BUCKET "bench"
#define BF_ACCESS "AKIDKVTIERBENCHFUSE"
#define BF_MAX_RUNS 15
#define BF_PATH 4200
#define MB 1e6

enum bf_cell_id {
	BF_W2M, BF_R2M, BF_W32M, BF_R32M, BF_RR64K,	/* fio: kvtier-fuse vs plain */
	BF_CPOUT, BF_CPIN, BF_LS,			/* kvtier-fuse vs s3fs */
	BF_NCELLS
};

struct bf_cell {
	const char *name;
	const char *unit;		/* "MB/s" or "s" */
	int higher_better;
	double goal;			/* kvtier / baseline must reach this */
	const char *baseline;
	double v[2][BF_MAX_RUNS];	/* [0] kvtier, [1] baseline */
	unsigned n;
	double med[2];
};

struct bf_opts {
	char *dir;
	unsigned runs;
	unsigned files2m, files32m, blocks, list;
	uint64_t capacity;
	int fsync;
	int direct;
	int no_s3fs;
	int keep;
};

struct bf {
	struct bf_opts o;
	char *scratch;
	char conf[BF_PATH], mnt[BF_PATH], s3mnt[BF_PATH], plain[BF_PATH], log[BF_PATH];
	char fuse_path[4096], gw_path[4096], fio_path[4096], s3fs_path[4096], fusermount[4096];
	char fio_version[128], s3fs_version[128];
	pid_t fuse_pid, gw_pid, s3fs_pid;
	int gw_port;
	struct bf_cell cells[BF_NCELLS];
	char start_date[64];
};

/* ---- mounts ------------------------------------------------------------------ */

static int bf_is_mounted(const char *dir)
{
	struct stat a, b;
	char parent[BF_PATH + 4];

	snprintf(parent, sizeof(parent), "%s/..", dir);
	return stat(dir, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* Waits for pid to have mounted dir; -ECHILD if it exited first. */
static int bf_wait_mount(pid_t *pid, const char *dir, unsigned seconds)
{
	for (unsigned i = 0; i < seconds * 20; i++) {
		int status;

		if (bf_is_mounted(dir))
			return 0;
		if (waitpid(*pid, &status, WNOHANG) == *pid) {
			*pid = -1;
			return -ECHILD;
		}
		usleep(50000);
	}
	return -ETIMEDOUT;
}

/* fusermount3 -u, then the daemon exits by itself; SIGTERM if it does not. */
static void bf_unmount(struct bf *b, pid_t *pid, const char *dir)
{
	char *argv[] = { b->fusermount, (char *)"-u", (char *)dir, NULL };
	char *lazy[] = { b->fusermount, (char *)"-u", (char *)"-z", (char *)dir, NULL };

	if (*pid <= 0)
		return;
	if (bf_is_mounted(dir))
		bench_run(argv, b->log, NULL);
	for (int i = 0; i < 100; i++) {
		int status;

		if (waitpid(*pid, &status, WNOHANG) == *pid) {
			*pid = -1;
			return;
		}
		usleep(100000);
	}
	bench_stop(*pid);
	*pid = -1;
	if (bf_is_mounted(dir))
		bench_run(lazy, b->log, NULL);
}

static int bf_mount_kvtier(struct bf *b)
{
	char *argv[] = { b->fuse_path, (char *)"-c", b->conf, b->mnt, (char *)"-f", NULL };
	int rc;

	if ((b->fuse_pid = bench_spawn(argv, b->log)) < 0)
		return (int)b->fuse_pid;
	rc = bf_wait_mount(&b->fuse_pid, b->mnt, 60);
	if (rc < 0)
		fprintf(stderr, "kvtier: bench fuse: kvtier-fuse did not mount '%s': %s; see '%s'\n",
			b->mnt, strerror(-rc), b->log);
	return rc;
}

static int bf_mount_s3fs(struct bf *b)
{
	char url[64], pw[BF_PATH], opts[BF_PATH + 128];
	char *argv[] = { b->s3fs_path, (char *)BF_BUCKET, b->s3mnt, (char *)"-f", (char *)"-o",
			 opts, NULL };
	int rc;

	snprintf(pw, sizeof(pw), "%s/s3fs.passwd", b->scratch);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", b->gw_port);
	/* Debian's s3fs as a user would mount it, plus what a local endpoint needs. */
	snprintf(opts, sizeof(opts), "passwd_file=%s,url=%s,use_path_request_style", pw, url);
	if ((b->s3fs_pid = bench_spawn(argv, b->log)) < 0)
		return (int)b->s3fs_pid;
	rc = bf_wait_mount(&b->s3fs_pid, b->s3mnt, 60);
	if (rc < 0)
		fprintf(stderr, "kvtier: bench fuse: s3fs did not mount '%s': %s; see '%s'\n",
			b->s3mnt, strerror(-rc), b->log);
	return rc;
}

static int bf_start_gateway(struct bf *b)
{
	char creds[BF_PATH], pw[BF_PATH], listen[64], secret[41], text[256];
	char *argv[] = { b->gw_path, (char *)"-c", b->conf, (char *)"--listen", listen,
			 (char *)"--credentials", creds, (char *)"--access-log", (char *)"off",
			 NULL };
	int rc;

	if ((rc = bench_secret(secret, sizeof(secret))) < 0)
		return rc;
	snprintf(creds, sizeof(creds), "%s/gateway.credentials", b->scratch);
	snprintf(pw, sizeof(pw), "%s/s3fs.passwd", b->scratch);
	snprintf(text, sizeof(text), "%s %s\n", BF_ACCESS, secret);
	if ((rc = bench_write_file(creds, 0600, text, strlen(text))) < 0)
		return rc;
	snprintf(text, sizeof(text), "%s:%s\n", BF_ACCESS, secret);
	if ((rc = bench_write_file(pw, 0600, text, strlen(text))) < 0)
		return rc;
	if ((b->gw_port = bench_free_port()) < 0)
		return b->gw_port;
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", b->gw_port);
	if ((b->gw_pid = bench_spawn(argv, b->log)) < 0)
		return (int)b->gw_pid;
	rc = bench_wait_port(b->gw_pid, b->gw_port, 60);
	if (rc < 0) {
		if (rc == -ECHILD)
			b->gw_pid = -1;
		fprintf(stderr, "kvtier: bench fuse: kvtier-gateway did not start: %s; see '%s'\n",
			strerror(-rc), b->log);
	}
	return rc;
}

/* ---- fio ----------------------------------------------------------------------- */

/* Writes back dir's file system, so that fio can drop its files' pages. */
static void bf_syncfs(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);

	if (fd >= 0) {
		syncfs(fd);
		close(fd);
	}
}

/*
 * One fio job in dir; *mbps from fio's own bytes and runtime (field 6/9 for
 * reads, 47/50 for writes of --terse-version=3).
 */
static int bf_fio(struct bf *b, const char *dir, const char *rw, const char *prefix,
		  unsigned nfiles, const char *fsize, const char *bs, double *mbps)
{
	char d[BF_PATH + 16], name[64], nr[32], fs[32], bsz[32], fmt[80], out[BF_PATH];
	char *argv[24];
	int n = 0, rc, write = strcmp(rw, "write") == 0;
	char line[4096];
	FILE *f;

	snprintf(d, sizeof(d), "--directory=%s", dir);
	snprintf(name, sizeof(name), "--name=%s", prefix);
	snprintf(nr, sizeof(nr), "--nrfiles=%u", nfiles);
	snprintf(fs, sizeof(fs), "--filesize=%s", fsize);
	snprintf(bsz, sizeof(bsz), "--bs=%s", bs);
	snprintf(fmt, sizeof(fmt), "--filename_format=%s.$filenum", prefix);
	snprintf(out, sizeof(out), "%s/fio.out", b->scratch);
	argv[n++] = b->fio_path;
	argv[n++] = name;
	argv[n++] = d;
	argv[n++] = fmt;
	argv[n++] = nr;
	argv[n++] = fs;
	argv[n++] = bsz;
	argv[n++] = write ? (char *)"--rw=write" : strcmp(rw, "read") == 0 ?
		    (char *)"--rw=read" : (char *)"--rw=randread";
	argv[n++] = (char *)"--ioengine=psync";
	argv[n++] = (char *)"--openfiles=1";
	argv[n++] = (char *)"--file_service_type=sequential";
	/* Writes create their files when they write them (no layout pass,
	 * no preallocation): a KV block is written once, whole. */
	argv[n++] = (char *)"--create_on_open=1";
	argv[n++] = (char *)"--fallocate=none";
	if (b->o.fsync && write)
		argv[n++] = (char *)"--fsync_on_close=1";
	if (b->o.direct)
		argv[n++] = (char *)"--direct=1";
	argv[n++] = (char *)"--output-format=terse";
	argv[n++] = (char *)"--terse-version=3";
	{
		static char outarg[BF_PATH + 16];

		snprintf(outarg, sizeof(outarg), "--output=%s", out);
		argv[n++] = outarg;
	}
	argv[n] = NULL;
	unlink(out);
	if (!write)
		bf_syncfs(dir);
	rc = bench_run(argv, b->log, NULL);
	if (rc != 0) {
		fprintf(stderr, "kvtier: bench fuse: fio %s in '%s' failed (%d); see '%s'\n", rw,
			dir, rc, b->log);
		return -EIO;
	}
	if (!(f = fopen(out, "r")))
		return -errno;
	rc = -EIO;
	while (fgets(line, sizeof(line), f)) {
		char *save = NULL, *tok;
		double kb = 0, ms = 0;
		int field = 0;

		if (strncmp(line, "3;", 2) != 0)
			continue;
		for (tok = strtok_r(line, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
			field++;
			if (field == (write ? 47 : 6))
				kb = atof(tok);
			else if (field == (write ? 50 : 9))
				ms = atof(tok);
		}
		if (kb > 0 && ms > 0) {
			*mbps = kb * 1024 / (ms / 1000) / MB;
			rc = 0;
		}
	}
	fclose(f);
	if (rc < 0)
		fprintf(stderr, "kvtier: bench fuse: no figures in fio's output '%s'\n", out);
	return rc;
}

/* Removes prefix.* in dir: the next write job creates its files anew. */
static void bf_remove_files(const char *dir, const char *prefix, unsigned n)
{
	char p[BF_PATH + 64];

	for (unsigned i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "%s/%s.%u", dir, prefix, i);
		unlink(p);
	}
}

static int bf_fio_cells(struct bf *b, unsigned run)
{
	char kdir[BF_PATH + 16];
	const char *dirs[2] = { kdir, b->plain };
	int rc;

	snprintf(kdir, sizeof(kdir), "%s/" BF_BUCKET "/fio", b->mnt);
	if (mkdir(kdir, 0755) < 0 && errno != EEXIST)
		return -errno;
	/* Alternate who goes first, so that neither always meets a warmer disk. */
	for (int k = 0; k < 2; k++) {
		int s = (int)((run + (unsigned)k) % 2);
		const char *d = dirs[s];

		bf_remove_files(d, "f2m", b->o.files2m);
		bf_remove_files(d, "f32m", b->o.files32m);
		if ((rc = bf_fio(b, d, "write", "f2m", b->o.files2m, "2M", "1M",
				 &b->cells[BF_W2M].v[s][run])) < 0 ||
		    (rc = bf_fio(b, d, "read", "f2m", b->o.files2m, "2M", "1M",
				 &b->cells[BF_R2M].v[s][run])) < 0 ||
		    (rc = bf_fio(b, d, "write", "f32m", b->o.files32m, "32M", "1M",
				 &b->cells[BF_W32M].v[s][run])) < 0 ||
		    (rc = bf_fio(b, d, "read", "f32m", b->o.files32m, "32M", "1M",
				 &b->cells[BF_R32M].v[s][run])) < 0 ||
		    (rc = bf_fio(b, d, "randread", "f32m", b->o.files32m, "32M", "64k",
				 &b->cells[BF_RR64K].v[s][run])) < 0)
			return rc;
	}
	for (int c = BF_W2M; c <= BF_RR64K; c++)
		b->cells[c].n = run + 1;
	return 0;
}

/* ---- cp and ls ------------------------------------------------------------------ */

/* The shared data, made once through kvtier-fuse: blocks/ and many/. */
static int bf_make_data(struct bf *b)
{
	char p[BF_PATH + 64];
	char *buf = malloc(2 << 20);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	snprintf(p, sizeof(p), "%s/src", b->scratch);
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		rc = -errno;
	snprintf(p, sizeof(p), "%s/" BF_BUCKET "/blocks", b->mnt);
	if (rc == 0 && mkdir(p, 0755) < 0 && errno != EEXIST)
		rc = -errno;
	snprintf(p, sizeof(p), "%s/" BF_BUCKET "/many", b->mnt);
	if (rc == 0 && mkdir(p, 0755) < 0 && errno != EEXIST)
		rc = -errno;
	for (unsigned i = 0; rc == 0 && i < b->o.blocks; i++) {
		bench_random_fill(buf, 2 << 20, i + 1);
		snprintf(p, sizeof(p), "%s/src/block-%05u", b->scratch, i);
		rc = bench_write_file(p, 0644, buf, 2 << 20);
		snprintf(p, sizeof(p), "%s/" BF_BUCKET "/blocks/block-%05u", b->mnt, i);
		if (rc == 0)
			rc = bench_write_file(p, 0644, buf, 2 << 20);
	}
	/* Small files: a listing's cost is per entry, not per byte. */
	for (unsigned i = 0; rc == 0 && i < b->o.list; i++) {
		snprintf(p, sizeof(p), "%s/" BF_BUCKET "/many/kv-%06u", b->mnt, i);
		rc = bench_write_file(p, 0644, buf, 1024);
	}
	if (rc < 0)
		fprintf(stderr, "kvtier: bench fuse: cannot make the data ('%s'): %s\n", p,
			strerror(-rc));
	free(buf);
	return rc;
}

/* Runs a shell command line quietly; its wall time. */
static int bf_timed(struct bf *b, const char *cmd, double *seconds)
{
	char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)cmd, NULL };
	int rc = bench_run(argv, b->log, seconds);

	if (rc != 0) {
		fprintf(stderr, "kvtier: bench fuse: '%s' failed (%d); see '%s'\n", cmd, rc, b->log);
		return -EIO;
	}
	return 0;
}

static int bf_cp_ls_cells(struct bf *b, unsigned run)
{
	const char *roots[2] = { NULL, b->s3mnt };
	char kroot[BF_PATH + 16], cmd[4 * BF_PATH];
	double mb = b->o.blocks * 2.0 * (1 << 20) / MB;
	int rc;

	snprintf(kroot, sizeof(kroot), "%s/" BF_BUCKET, b->mnt);
	roots[0] = kroot;
	/* Fresh mounts: no page cache, attribute or stat cache from earlier runs. */
	if ((rc = bf_mount_kvtier(b)) < 0 || (rc = bf_mount_s3fs(b)) < 0)
		return rc;
	for (int k = 0; k < 2; k++) {
		int s = (int)((run + (unsigned)k) % 2);
		double t;

		/* The last copy goes first, outside the timing. */
		snprintf(cmd, sizeof(cmd), "rm -rf '%s/out' && sync", b->scratch);
		if ((rc = bf_timed(b, cmd, NULL)) < 0)
			goto out;
		snprintf(cmd, sizeof(cmd), "cp -r '%s/blocks' '%s/out'", roots[s], b->scratch);
		if ((rc = bf_timed(b, cmd, &t)) < 0)
			goto out;
		b->cells[BF_CPOUT].v[s][run] = mb / t;
		snprintf(cmd, sizeof(cmd), "ls -l '%s/many' >/dev/null", roots[s]);
		if ((rc = bf_timed(b, cmd, &t)) < 0)
			goto out;
		b->cells[BF_LS].v[s][run] = t;
		snprintf(cmd, sizeof(cmd), "cp -r '%s/src' '%s/in-%u-%d'", b->scratch, roots[s],
			 run, s);
		if ((rc = bf_timed(b, cmd, &t)) < 0)
			goto out;
		b->cells[BF_CPIN].v[s][run] = mb / t;
	}
	for (int c = BF_CPOUT; c <= BF_LS; c++)
		b->cells[c].n = run + 1;
	/* Through kvtier-fuse, which is quicker at it: the copies go. */
	for (int s = 0; s < 2; s++) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s/in-%u-%d' '%s/out'", kroot, run, s,
			 b->scratch);
		bf_timed(b, cmd, NULL);
	}
out:
	bf_unmount(b, &b->s3fs_pid, b->s3mnt);
	bf_unmount(b, &b->fuse_pid, b->mnt);
	return rc;
}

/* ---- options and report --------------------------------------------------------- */

static void bf_usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier bench fuse [--dir DIR] [--runs N] [--files2m N] [--files32m N]\n"
		"                         [--blocks N] [--list N] [--fsync] [--direct] [--no-s3fs]\n"
		"                         [--capacity SIZE] [--keep]\n"
		"\n"
		"kvtier-fuse against a plain file in the same directory (fio: sequential\n"
		"write and read of 2 MiB and 32 MiB files, random 64 KiB reads) and against\n"
		"s3fs-fuse over kvtier-gateway on the same store (cp -r of 2 MiB blocks out\n"
		"of and into the mount, ls -l of a big directory). Medians of --runs.\n"
		"\n"
		"  --dir DIR        where the scratch directory goes (default: the configured\n"
		"                   [store] dir, else /var/tmp)\n"
		"  --runs N         runs of every cell, alternating the two (default 3)\n"
		"  --files2m N      fio's 2 MiB files (default 64)\n"
		"  --files32m N     fio's 32 MiB files (default 8)\n"
		"  --blocks N       2 MiB files cp copies (default 64)\n"
		"  --list N         files ls -l lists (default 10000)\n"
		"  --fsync          fio fsyncs each file it wrote on close, on both sides\n"
		"  --direct         fio uses O_DIRECT on both sides (no page cache)\n"
		"  --no-s3fs        fio cells only\n"
		"  --capacity SIZE  the scratch store's capacity (default 8G)\n"
		"  --keep           leave the scratch directory\n");
}

static int bf_parse_args(const struct kvt_config *cfg, int argc, char **argv, struct bf_opts *o)
{
	const char *dir = NULL;
	int rc = 0;

	memset(o, 0, sizeof(*o));
	o->runs = 3;
	o->files2m = 64;
	o->files32m = 8;
	o->blocks = 64;
	o->list = 10000;
	o->capacity = 8ull << 30;
	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i], *v = NULL;
		int m;

#define OPT(name, takes) ((m = bench_opt_match(a, name, takes, &i, argc, argv, &v)) != 0)
		if (OPT("--dir", 1)) {
			dir = v;
		} else if (OPT("--runs", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, BF_MAX_RUNS, &o->runs);
		} else if (OPT("--files2m", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 4096, &o->files2m);
		} else if (OPT("--files32m", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 1024, &o->files32m);
		} else if (OPT("--blocks", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 4096, &o->blocks);
		} else if (OPT("--list", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 1000000, &o->list);
		} else if (OPT("--capacity", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &o->capacity);
		} else if (OPT("--fsync", 0)) {
			o->fsync = 1;
		} else if (OPT("--direct", 0)) {
			o->direct = 1;
		} else if (OPT("--no-s3fs", 0)) {
			o->no_s3fs = 1;
		} else if (OPT("--keep", 0)) {
			o->keep = 1;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			bf_usage(stdout);
			return 1;
		} else {
			fprintf(stderr, "kvtier: bench fuse: unknown option '%s'\n", a);
			return -EINVAL;
		}
#undef OPT
		rc = bench_opt_checked("fuse", a, m, rc);
	}
	return rc < 0 ? rc : bench_opt_dir(cfg, dir, &o->dir);
}

static void bf_cells_init(struct bf *b)
{
	static const struct {
		const char *name, *unit;
		int higher;
		double goal;
		const char *base;
	} def[BF_NCELLS] = {
		[BF_W2M] = { "fio write 2 MiB files", "MB/s", 1, 0.7, "plain file" },
		[BF_R2M] = { "fio read 2 MiB files", "MB/s", 1, 0.8, "plain file" },
		[BF_W32M] = { "fio write 32 MiB files", "MB/s", 1, 0.7, "plain file" },
		[BF_R32M] = { "fio read 32 MiB files", "MB/s", 1, 0.8, "plain file" },
		[BF_RR64K] = { "fio randread 64 KiB", "MB/s", 1, 0.8, "plain file" },
		[BF_CPOUT] = { "cp -r 2 MiB blocks out", "MB/s", 1, 5, "s3fs" },
		[BF_CPIN] = { "cp -r 2 MiB blocks in", "MB/s", 1, 5, "s3fs" },
		[BF_LS] = { "ls -l", "s", 0, 5, "s3fs" },
	};

	for (int c = 0; c < BF_NCELLS; c++) {
		b->cells[c].name = def[c].name;
		b->cells[c].unit = def[c].unit;
		b->cells[c].higher_better = def[c].higher;
		b->cells[c].goal = def[c].goal;
		b->cells[c].baseline = def[c].base;
	}
}

/* kvtier over the baseline, as "times better": time cells invert. */
static double bf_ratio(const struct bf_cell *c)
{
	if (c->med[0] <= 0 || c->med[1] <= 0)
		return 0;
	return c->higher_better ? c->med[0] / c->med[1] : c->med[1] / c->med[0];
}

static void bf_report(struct bf *b)
{
	printf("\n| cell | kvtier-fuse | baseline | baseline | x baseline | goal | met |\n");
	printf("|---|--:|---|--:|--:|--:|---|\n");
	for (int c = 0; c < BF_NCELLS; c++) {
		struct bf_cell *x = &b->cells[c];
		double r;

		if (x->n == 0)
			continue;
		for (int s = 0; s < 2; s++) {
			double v[BF_MAX_RUNS];

			memcpy(v, x->v[s], sizeof(double) * x->n);
			x->med[s] = bench_median(v, x->n);
		}
		r = bf_ratio(x);
		printf("| %s | %.*f %s | %s | %.*f %s | %.2fx | >= %.1fx | %s |\n", x->name,
		       x->higher_better ? 0 : 2, x->med[0], x->unit, x->baseline,
		       x->higher_better ? 0 : 2, x->med[1], x->unit, r, x->goal,
		       r >= x->goal ? "yes" : "no");
	}
	printf("\nmedians of %u runs; MB/s = 10^6 bytes/s; ls -l in seconds (ratio: s3fs time "
	       "over kvtier time)\n", b->cells[BF_W2M].n);
	printf("per run (kvtier / baseline):\n");
	for (int c = 0; c < BF_NCELLS; c++) {
		struct bf_cell *x = &b->cells[c];

		if (x->n == 0)
			continue;
		printf("  %-26s", x->name);
		for (unsigned r = 0; r < x->n; r++)
			printf(" %.*f/%.*f", x->higher_better ? 0 : 2, x->v[0][r],
			       x->higher_better ? 0 : 2, x->v[1][r]);
		printf("\n");
	}
}

/* ---- main -------------------------------------------------------------------------- */

static int bf_setup(struct bf *b)
{
	struct kvt_config cfg;
	struct kvt_store *st = NULL;
	char tmpl[4000], store[BF_PATH + 16], text[BF_PATH + 256];
	struct statvfs vfs;
	int rc;

	if (mkdir(b->o.dir, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		fprintf(stderr, "kvtier: bench fuse: cannot make '%s': %s\n", b->o.dir,
			strerror(errno));
		return rc;
	}
	if (statvfs(b->o.dir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < b->o.capacity + (2ull << 30)) {
		fprintf(stderr, "kvtier: bench fuse: '%s' has %" PRIu64 " MiB free, the run needs "
			"%" PRIu64 " MiB (--capacity + 2 GiB)\n", b->o.dir,
			(uint64_t)vfs.f_bavail * vfs.f_frsize >> 20, (b->o.capacity >> 20) + 2048);
		return -ENOSPC;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/kvtier-bench-fuse.XXXXXX", b->o.dir);
	if (!mkdtemp(tmpl)) {
		rc = -errno;
		fprintf(stderr, "kvtier: bench fuse: cannot make a directory in '%s': %s\n",
			b->o.dir, strerror(errno));
		return rc;
	}
	chmod(tmpl, 0755);
	if (!(b->scratch = strdup(tmpl)))
		return -ENOMEM;
	snprintf(b->conf, sizeof(b->conf), "%s/kvtier.conf", tmpl);
	snprintf(b->mnt, sizeof(b->mnt), "%s/mnt", tmpl);
	snprintf(b->s3mnt, sizeof(b->s3mnt), "%s/s3mnt", tmpl);
	snprintf(b->plain, sizeof(b->plain), "%s/plain", tmpl);
	snprintf(b->log, sizeof(b->log), "%s/bench.log", tmpl);
	snprintf(store, sizeof(store), "%s/store", tmpl);
	if (mkdir(b->mnt, 0755) < 0 || mkdir(b->s3mnt, 0755) < 0 || mkdir(b->plain, 0755) < 0)
		return -errno;
	snprintf(text, sizeof(text), "[store]\ndir = %s\ncapacity = %" PRIu64
		 "\nsegment_size = 64M\n", store, b->o.capacity);
	if ((rc = bench_write_file(b->conf, 0644, text, strlen(text))) < 0)
		return rc;

	kvt_config_init(&cfg);
	free(cfg.store.dir);
	cfg.store.dir = strdup(store);
	cfg.store.capacity = b->o.capacity;
	cfg.store.segment_size = 64ull << 20;
	rc = cfg.store.dir ? kvt_store_open(&cfg, KVT_OPEN_CREATE, &st) : -ENOMEM;
	if (rc == 0)
		rc = kvt_bucket_create(st, BF_BUCKET);
	if (rc < 0)
		fprintf(stderr, "kvtier: bench fuse: cannot create the scratch store '%s': %s\n",
			store, strerror(-rc));
	kvt_store_close(st);
	kvt_config_release(&cfg);
	return rc;
}

int bench_fuse_main(const struct kvt_config *cfg, int argc, char **argv)
{
	struct bf b;
	char machine[512];
	int rc, status = CLI_FAIL;
	time_t t = time(NULL);
	struct tm tm;
	int64_t t0 = bench_mono_ns();

	memset(&b, 0, sizeof(b));
	b.fuse_pid = b.gw_pid = b.s3fs_pid = -1;
	rc = bf_parse_args(cfg, argc, argv, &b.o);
	if (rc == 1)
		return CLI_OK;
	if (rc < 0) {
		if (rc == -EINVAL)
			bf_usage(stderr);
		return CLI_USAGE;
	}
	bf_cells_init(&b);
	gmtime_r(&t, &tm);
	strftime(b.start_date, sizeof(b.start_date), "%Y-%m-%d %H:%M UTC", &tm);
	if (bench_find_sibling("kvtier-fuse", b.fuse_path, sizeof(b.fuse_path)) < 0 ||
	    bench_find_sibling("kvtier-gateway", b.gw_path, sizeof(b.gw_path)) < 0) {
		fprintf(stderr, "kvtier: bench fuse: needs kvtier-fuse and kvtier-gateway next to "
			"this binary: build them with 'make'\n");
		goto out;
	}
	if (bench_find_program("fio", b.fio_path, sizeof(b.fio_path)) < 0 ||
	    bench_find_program("fusermount3", b.fusermount, sizeof(b.fusermount)) < 0) {
		fprintf(stderr, "kvtier: bench fuse: needs fio and fusermount3: "
			"apt-get install fio fuse3\n");
		goto out;
	}
	if (!b.o.no_s3fs && bench_find_program("s3fs", b.s3fs_path, sizeof(b.s3fs_path)) < 0) {
		fprintf(stderr, "kvtier: bench fuse: needs s3fs (scripts/deps.sh bench, or "
			"apt-get install s3fs), or --no-s3fs\n");
		goto out;
	}
	if (access("/dev/fuse", R_OK | W_OK) < 0) {
		fprintf(stderr, "kvtier: bench fuse: cannot use /dev/fuse: %s\n", strerror(errno));
		goto out;
	}
	bench_version(b.fio_path, "--version", b.fio_version, sizeof(b.fio_version));
	if (!b.o.no_s3fs) {
		char v[256], *p;

		bench_version(b.s3fs_path, "--version", v, sizeof(v));
		/* "Amazon Simple Storage Service File System V1.91 (commit:...) with ..." */
		p = strstr(v, " V");
		snprintf(b.s3fs_version, sizeof(b.s3fs_version), "s3fs %.*s",
			 p ? (int)strcspn(p + 2, " ") : 1, p ? p + 2 : "?");
	}
	bench_machine(machine, sizeof(machine));
	if ((rc = bf_setup(&b)) < 0)
		goto out;
	printf("kvtier bench fuse: %s\n", b.start_date);
	printf("machine: %s; load average %.1f\n", machine, bench_load1());
	printf("tools: %s; %s; %s\n", b.fuse_path, b.fio_version,
	       b.o.no_s3fs ? "no s3fs" : b.s3fs_version);
	printf("scratch: %s\n", b.scratch);
	printf("fio: %u x 2 MiB, %u x 32 MiB files, bs 1M (randread 64k), psync, %s%s\n",
	       b.o.files2m, b.o.files32m, b.o.direct ? "O_DIRECT" : "buffered",
	       b.o.fsync ? ", fsync on close" : "");
	fflush(stdout);

	if ((rc = bf_mount_kvtier(&b)) < 0)
		goto out;
	for (unsigned r = 0; r < b.o.runs; r++) {
		if ((rc = bf_fio_cells(&b, r)) < 0)
			goto out;
		printf("fio run %u done (%.0f s)\n", r + 1, (double)(bench_mono_ns() - t0) / 1e9);
		fflush(stdout);
	}
	if (!b.o.no_s3fs) {
		int64_t t1 = bench_mono_ns();

		if ((rc = bf_make_data(&b)) < 0)
			goto out;
		printf("data: %u x 2 MiB blocks, %u files of 1 KiB, made in %.1f s\n", b.o.blocks,
		       b.o.list, (double)(bench_mono_ns() - t1) / 1e9);
		bf_unmount(&b, &b.fuse_pid, b.mnt);
		if ((rc = bf_start_gateway(&b)) < 0)
			goto out;
		for (unsigned r = 0; r < b.o.runs; r++) {
			if ((rc = bf_cp_ls_cells(&b, r)) < 0)
				goto out;
			printf("cp/ls run %u done (%.0f s)\n", r + 1,
			       (double)(bench_mono_ns() - t0) / 1e9);
			fflush(stdout);
		}
	}
	bf_report(&b);
	printf("\nload average at the end %.1f; total %.0f s\n", bench_load1(),
	       (double)(bench_mono_ns() - t0) / 1e9);
	status = CLI_OK;
out:
	bf_unmount(&b, &b.s3fs_pid, b.s3mnt);
	bf_unmount(&b, &b.fuse_pid, b.mnt);
	bench_stop(b.gw_pid);
	if (b.scratch) {
		if (b.o.keep)
			printf("kept '%s'\n", b.scratch);
		else if (!bf_is_mounted(b.mnt) && !bf_is_mounted(b.s3mnt))
			bench_rm_rf(b.scratch);
		else
			fprintf(stderr, "kvtier: bench fuse: '%s' still has a mount: left as is\n",
				b.scratch);
	}
	free(b.scratch);
	free(b.o.dir);
	return status;
}
