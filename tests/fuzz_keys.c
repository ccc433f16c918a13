/*
 * fuzz_keys.c - fuzz target for the file of kvtier-migrate --recall-keys
 * (migrate/keys.c): one BUCKET/KEY a line, from whoever wrote the list.
 *
 * Input: the whole file, read through a memory stream. Promises checked
 * against the rule of kvtier-migrate(8), stated again here:
 *  - a file without a NUL byte yields exactly its lines (split at '\n', the
 *    '\r's that end one dropped) that are neither blank (empty, or spaces
 *    and tabs only) nor start with '#', byte for byte and in order;
 *  - a file with a NUL byte in a line is refused with -EINVAL naming the
 *    first such line, and yields nothing.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../migrate/keys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int ok, const char *what, size_t line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_keys: broken promise: %s (line %zu)\n", what, line);
	abort();
}

static bool ref_skipped(const uint8_t *s, size_t n)
{
	size_t i = 0;

	if (n > 0 && s[0] == '#')
		return true;
	while (i < n && (s[i] == ' ' || s[i] == '\t'))
		i++;
	return i == n;
}

/* The next line at *p (without '\n' and the '\r's that end it); false at the end. */
static bool ref_line(const uint8_t **p, const uint8_t *end, const uint8_t **s, size_t *n)
{
	const uint8_t *nl;

	if (*p >= end)
		return false;
	nl = memchr(*p, '\n', (size_t)(end - *p));
	*s = *p;
	*n = (size_t)((nl ? nl : end) - *p);
	while (*n > 0 && (*s)[*n - 1] == '\r')
		(*n)--;
	*p = nl ? nl + 1 : end;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size, *s;
	struct keys k;
	size_t n, line = 0, got_line = 0, next = 0;
	FILE *f;
	int rc;

	if (size > 1 << 20)
		return 0;
	/* glibc reads a stream of size 0 as an empty file (since 2.22). */
	f = fmemopen((void *)data, size, "r");
	if (!f)
		return 0;
	rc = keys_read(f, &k, &got_line);
	fclose(f);
	fuzz_require(rc == 0 || rc == -EINVAL, "a file in memory is read, or -EINVAL", got_line);
	while (ref_line(&p, end, &s, &n)) {
		line++;
		if (memchr(s, '\0', n)) {
			fuzz_require(rc == -EINVAL && got_line == line,
				     "a line holding a NUL refuses the file, naming the line", line);
			fuzz_require(k.n == 0 && k.v == NULL, "a refused file yields nothing", line);
			return 0;
		}
	}
	fuzz_require(rc == 0, "a file without NUL is taken", line);
	for (p = data, line = 0; ref_line(&p, end, &s, &n);) {
		line++;
		if (ref_skipped(s, n))
			continue;
		fuzz_require(next < k.n, "every key line is a key", line);
		fuzz_require(strlen(k.v[next]) == n && memcmp(k.v[next], s, n) == 0,
			     "a key is its line, byte for byte", line);
		next++;
	}
	fuzz_require(next == k.n, "nothing but the key lines are keys", line);
	keys_release(&k);
	return 0;
}
