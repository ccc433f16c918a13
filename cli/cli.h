/*
 * cli.h - what the parts of the kvtier admin command share.
 */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include <sys/types.h>

#include "kvtier.h"

/* Exit codes of kvtier(1). */
enum {
	CLI_OK = 0,
	CLI_FAIL = 1,		/* the operation failed (object missing, I/O error) */
	CLI_USAGE = 2,		/* bad command line or configuration */
	CLI_DAMAGED = 3,	/* fsck found problems it did not repair */
	CLI_MOVED = 4,		/* store-id: the store is not where its id was given */
};

/*
 * `kvtier bench engine [options]`: the engine against fio on the same disk.
 * argv[0] is "engine". cfg is the loaded configuration (its [store] dir is
 * where the benchmark's scratch store and fio's file go).
 */
int bench_engine_main(const struct kvt_config *cfg, int argc, char **argv);

/*
 * `kvtier bench gateway [options]`: kvtier-gateway against nginx (static GET,
 * WebDAV PUT) and redis-server (SET/GET) on loopback. argv[0] is "gateway".
 * cfg is the loaded configuration (its [store] dir holds the scratch
 * directory of the three servers).
 */
int bench_gateway_main(const struct kvt_config *cfg, int argc, char **argv);

/*
 * `kvtier bench trace FILE [options]`: replays a Mooncake-format trace
 * through kvtier-gateway and kvtier-fuse on scratch stores, kvtier against
 * an unbounded and a no-G4 hot tier (bench_trace*.c). argv[0] is "trace".
 */
int bench_trace_main(const struct kvt_config *cfg, int argc, char **argv);

/*
 * `kvtier bench fuse [options]`: kvtier-fuse against a plain file (fio) and
 * against s3fs over kvtier-gateway (cp -r, ls -l). argv[0] is "fuse".
 */
int bench_fuse_main(const struct kvt_config *cfg, int argc, char **argv);

/*
 * `kvtier bench migrate [options]`: kvtier-migrate demotion and recall
 * against `aws s3 cp --recursive`, recall latency against a plain GET, on
 * one partner (s3rver on loopback). argv[0] is "migrate".
 */
int bench_migrate_main(const struct kvt_config *cfg, int argc, char **argv);

/* ---- shared by the benchmarks (bench.c) ---- */

int bench_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out);
/* "64K,2M,32M" (sizes) or "1,8,32" (counts up to max_count): at most max_n items. */
int bench_parse_list(const char *s, int sizes, unsigned max_count, uint64_t *vals,
		     unsigned max_n, unsigned *n);
/* Accepts "--name value" and "--name=value": 1 if arg is --name (*val is
 * NULL for a flag), 0 if not, -1 if its value is missing. */
int bench_opt_match(const char *arg, const char *name, int takes_value, int *i, int argc,
		    char **argv, const char **val);
/* After one option: rc, or -EINVAL if its value was missing (m < 0); says
 * which option had a bad value. */
int bench_opt_checked(const char *bench, const char *arg, int m, int rc);
/* The scratch directory: dir, else [store] dir, else /var/tmp. Caller frees. */
int bench_opt_dir(const struct kvt_config *cfg, const char *dir, char **out);
int bench_cmp_double(const void *a, const void *b);
/* Sorts v. */
double bench_median(double *v, unsigned n);

int64_t bench_mono_ns(void);
/* A program installed next to this binary (kvtier-fuse, kvtier-gateway ...). */
int bench_find_sibling(const char *name, char *out, size_t len);
/* PATH, then the sbin directories a non-root PATH lacks. */
int bench_find_program(const char *name, char *out, size_t len);
/* First line of `PROG ARG 2>&1`, for the report. */
void bench_version(const char *prog, const char *arg, char *out, size_t len);
int bench_write_file(const char *path, mode_t mode, const void *data, size_t len);
/* rm -rf that does not cross into mounts. */
void bench_rm_rf(const char *path);
/* A loopback port nobody listens on now. */
int bench_free_port(void);
/* 0 once 127.0.0.1:port accepts; -ECHILD if pid exited first. */
int bench_wait_port(pid_t pid, int port, unsigned seconds);
/* fork + execvp, stdout and stderr appended to log (NULL: /dev/null); the
 * child gets SIGTERM if this process dies. */
pid_t bench_spawn(char *const argv[], const char *log);
/* SIGTERM, up to 20 s, then SIGKILL; reaps. Accepts pid <= 0. */
void bench_stop(pid_t pid);
/* Runs argv to its end: its exit status (128 + signal), or -errno; the
 * wall time in *seconds if not NULL. */
int bench_run(char *const argv[], const char *log, double *seconds);
/* Incompressible bytes, the same for the same seed. */
void bench_random_fill(void *buf, size_t len, uint64_t seed);
/* n - 1 hex digits from /dev/urandom (at most 64). */
int bench_secret(char *out, size_t n);
/* "CPU model, N CPUs, N GiB RAM, Linux RELEASE ARCH". */
void bench_machine(char *out, size_t len);
/* The 1-minute load average, -1 if unknown. */
double bench_load1(void);

#endif /* KVT_CLI_H */
