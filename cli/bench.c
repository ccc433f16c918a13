/*
 * bench.c - what the benchmark commands share: option lists and medians.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int bench_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int bench_parse_list(const char *s, int sizes, unsigned max_count, uint64_t *vals,
		     unsigned max_n, unsigned *n)
{
	char buf[256], *tok, *save = NULL;
	int rc;

	if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
		return -EINVAL;
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		unsigned u = 0;

		if (*n == max_n)
			return -E2BIG;
		if (sizes) {
			rc = kvt_parse_size(tok, &v);
			if (rc == 0 && (v == 0 || v > (1ull << 30)))
				rc = -EINVAL;
		} else {
			rc = bench_parse_uint(tok, 1, max_count, &u);
			v = u;
		}
		if (rc < 0)
			return rc;
		vals[(*n)++] = v;
	}
	return *n ? 0 : -EINVAL;
}

int bench_opt_match(const char *arg, const char *name, int takes_value, int *i, int argc,
		    char **argv, const char **val)
{
	size_t len = strlen(name);

	if (strncmp(arg, name, len) != 0)
		return 0;
	if (arg[len] == '\0') {
		if (!takes_value) {
			*val = NULL;
			return 1;
		}
		if (*i + 1 >= argc)
			return -1;
		*val = argv[++*i];
		return 1;
	}
	if (arg[len] == '=' && takes_value) {
		*val = arg + len + 1;
		return 1;
	}
	return 0;
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double bench_median(double *v, unsigned n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
