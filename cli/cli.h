/*
 * cli.h - what the parts of the kvtier admin command share.
 */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include "kvtier.h"

/* Exit codes of kvtier(1). */
enum {
	CLI_OK = 0,
	CLI_FAIL = 1,		/* the operation failed (object missing, I/O error) */
	CLI_USAGE = 2,		/* bad command line or configuration */
	CLI_DAMAGED = 3,	/* fsck found problems it did not repair */
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

/* ---- shared by the benchmarks (bench.c) ---- */

int bench_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out);
/* "64K,2M,32M" (sizes) or "1,8,32" (counts up to max_count): at most max_n items. */
int bench_parse_list(const char *s, int sizes, unsigned max_count, uint64_t *vals,
		     unsigned max_n, unsigned *n);
/* Accepts "--name value" and "--name=value": 1 if arg is --name (*val is
 * NULL for a flag), 0 if not, -1 if its value is missing. */
int bench_opt_match(const char *arg, const char *name, int takes_value, int *i, int argc,
		    char **argv, const char **val);
int bench_cmp_double(const void *a, const void *b);
/* Sorts v. */
double bench_median(double *v, unsigned n);

#endif /* KVT_CLI_H */
