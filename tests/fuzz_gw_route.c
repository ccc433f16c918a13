/*
 * fuzz_gw_route.c - fuzz target for request routing (gateway/s3_route.c):
 * the raw request URI and Host header become a bucket, a key, query
 * parameters and an operation. Input: "METHOD\nRAW-URI\nHOST". Promises
 * checked: a parsed key never holds a NUL (it is decoded once, and %00 is
 * refused), the raw path always starts with '/', and every method maps to a
 * known operation.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gateway/s3_route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_gw_route: broken promise: %s\n", what);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const methods[] = { "GET", "HEAD", "PUT", "POST", "DELETE", "PATCH" };
	char *buf = malloc(size + 1), *uri, *host, *nl;
	struct s3_route r;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	nl = strchr(buf, '\n');
	uri = nl ? nl + 1 : buf + size;
	if (nl)
		*nl = '\0';
	nl = strchr(uri, '\n');
	host = nl ? nl + 1 : NULL;
	if (nl)
		*nl = '\0';
	for (int d = 0; d < 2; d++) {
		if (s3_route_parse(&r, uri, host, d ? "localhost" : NULL) != 0)
			continue;
		fuzz_require(r.raw_path && r.raw_path[0] == '/', "raw path starts with '/'");
		if (r.key)
			fuzz_require(strlen(r.key) == r.key_len, "a key holds no NUL");
		for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
			enum s3_op op = s3_route_op(&r, methods[m], m & 1);

			fuzz_require(op < S3_OP_COUNT, "a known operation");
			fuzz_require(s3_op_name(op) != NULL, "every operation has a name");
		}
		s3_route_op(&r, buf, 0);
		s3_route_param(&r, "uploadId");
		s3_route_release(&r);
	}
	free(buf);
	return 0;
}
