/*
 * fuzz_gw_sigv4.c - fuzz target for the gateway's SigV4 code: the
 * Authorization and credential parsers, the canonical request, whole-request
 * verification (header and presigned forms) and the aws-chunked decoder with
 * its chunk and trailer signatures: everything in gateway/s3_auth.c that
 * reads bytes a client sent before it is authenticated.
 *
 * Input layout (what the seeds in tests/fuzz/corpus/gw_sigv4 look like):
 *   METHOD\n RAW-PATH\n RAW-QUERY\n (Name: value\n)* \n BODY
 * The body goes through the chunk decoder in each of its modes. Besides "no
 * crash" (and no leak under LeakSanitizer) the target checks promises:
 * verification never accepts a request without a user, and the decoder never
 * emits more payload bytes than it was fed.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gateway/gw_util.h"
#include "../gateway/s3_auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_HDRS 32

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_gw_sigv4: broken promise: %s\n", what);
		abort();
	}
}

struct fuzz_sink {
	size_t bytes;
};

static enum s3_code fuzz_sink(void *arg, const char *d, size_t len)
{
	struct fuzz_sink *s = arg;

	(void)d;
	s->bytes += len;
	return S3_OK;
}

/* The next '\n'-terminated line of [*p, end) as a NUL-terminated copy in buf. */
static const char *fuzz_line(const char **p, const char *end, char *buf, size_t len)
{
	const char *nl = memchr(*p, '\n', (size_t)(end - *p));
	size_t n = nl ? (size_t)(nl - *p) : (size_t)(end - *p);

	if (n >= len)
		n = len - 1;
	memcpy(buf, *p, n);
	buf[n] = '\0';
	/* Embedded NULs end the string early, as they would in a header. */
	*p = nl ? nl + 1 : end;
	return buf;
}

struct fuzz_result {
	enum s3_code verify;
	enum s3_code chunks;	/* decoding with the verified request's keys */
	size_t payload;
};

static struct auth_creds fuzz_creds;

static void fuzz_request(const uint8_t *data, size_t size, struct fuzz_result *fr)
{
	const char *p = (const char *)data, *end = p + size;
	char method[64], path[2048], query[4096], lines[FUZZ_MAX_HDRS][1024];
	struct auth_hdr hdrs[FUZZ_MAX_HDRS];
	size_t nhdrs = 0;
	struct auth_authz az;
	struct auth_result res;
	struct auth_input in;
	struct gw_buf b;

	memset(fr, 0, sizeof(*fr));
	fr->chunks = S3_INVALID_REQUEST;
	fuzz_line(&p, end, method, sizeof(method));
	fuzz_line(&p, end, path, sizeof(path));
	fuzz_line(&p, end, query, sizeof(query));
	while (p < end && nhdrs < FUZZ_MAX_HDRS) {
		char *colon, *v;

		fuzz_line(&p, end, lines[nhdrs], sizeof(lines[nhdrs]));
		if (lines[nhdrs][0] == '\0')
			break;
		colon = strchr(lines[nhdrs], ':');
		if (!colon)
			continue;
		*colon = '\0';
		v = colon + 1;
		while (*v == ' ')
			v++;
		hdrs[nhdrs].name = lines[nhdrs];
		hdrs[nhdrs].value = v;
		nhdrs++;
	}

	/* The parsers on their own. */
	{
		const char *a = auth_hdr_get(hdrs, nhdrs, "authorization");
		const char *sh = "host;x-amz-content-sha256;x-amz-date";

		if (a && auth_parse_authorization(a, &az) == 0)
			sh = az.signed_headers;
		gw_buf_init(&b);
		auth_canonical_uri(&b, path);
		gw_buf_reset(&b);
		auth_canonical_request(&b, method, "/", query, 1, hdrs, nhdrs, sh,
				       "UNSIGNED-PAYLOAD");
		gw_buf_release(&b);
	}

	/* The whole verification, at the time the seeds were signed. */
	in = (struct auth_input){
		.method = method, .raw_path = path, .raw_query = query,
		.hdrs = hdrs, .nhdrs = nhdrs, .now = 1369353600 /* 2013-05-24 */,
		.creds = &fuzz_creds,
	};
	fr->verify = auth_verify(&in, &res);
	if (fr->verify == S3_OK)
		fuzz_require(res.user != NULL, "a verified request has a user");
	else
		fuzz_require(res.user == NULL, "a refused request has no user");

	/*
	 * The rest is a body: decode it in every aws-chunked mode, with the
	 * request's own keys when it verified as streaming, else with made-up
	 * ones (then only framing and the failure paths are exercised).
	 */
	for (int mode = AUTH_PAYLOAD_STREAMING; mode <= AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER; mode++) {
		const bool real = fr->verify == S3_OK && (int)res.payload == mode;
		struct chunk_dec d;
		struct fuzz_sink s = { 0 };
		struct auth_result r = { .payload = (enum auth_payload)mode };
		enum s3_code code = S3_OK;
		size_t fed = 0;

		if (real) {
			r = res;
		} else {
			snprintf(r.amz_date, sizeof(r.amz_date), "20130524T000000Z");
			snprintf(r.scope, sizeof(r.scope), "20130524/us-east-1/s3/aws4_request");
			memset(r.signature, 'a', 64);
		}
		if (chunk_init(&d, &r) < 0)
			abort();
		/* In pieces of varying size, as a network delivers them. */
		while (p + fed < end && code == S3_OK) {
			size_t n = 1 + (fed * 7 + 13) % 4099;

			if (n > (size_t)(end - (p + fed)))
				n = (size_t)(end - (p + fed));
			code = chunk_feed(&d, p + fed, n, fuzz_sink, &s);
			fed += n;
		}
		fuzz_require(s.bytes <= (size_t)(end - p), "no more payload than body");
		if (code == S3_OK)
			code = chunk_finish(&d);
		chunk_trailer(&d, "x-amz-checksum-crc32");
		chunk_release(&d);
		if (real) {
			fr->chunks = code;
			fr->payload = s.bytes;
		}
	}

	/* Small parsers fed the same bytes. */
	{
		uint8_t md5[16];
		size_t n;
		char *dec = gw_url_decode(path, strlen(path), 1, &n);

		free(dec);
		gw_base64_decode(query, md5, sizeof(md5));
		gw_time_parse_http(query);
		gw_time_parse_amz(query);
	}
}

/*
 * Known answers: the examples of AWS's "Signature Version 4 for Amazon S3"
 * documentation must verify, byte for byte, or our canonicalisation is not
 * AWS's. They are the first seeds of the corpus too.
 */
static const char fuzz_kat_get[] =
	"GET\n/test.txt\n\nHost: examplebucket.s3.amazonaws.com\n"
	"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
	"aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature="
	"f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\n"
	"Range: bytes=0-9\n"
	"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
	"x-amz-date: 20130524T000000Z\n\n";
static const char fuzz_kat_presigned[] =
	"GET\n/test.txt\nX-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F"
	"20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
	"X-Amz-SignedHeaders=host&X-Amz-Signature="
	"aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404\n"
	"Host: examplebucket.s3.amazonaws.com\n\n";
static const char fuzz_kat_chunked_head[] =
	"PUT\n/examplebucket/chunkObject.txt\n\nHost: s3.amazonaws.com\n"
	"x-amz-date: 20130524T000000Z\nx-amz-storage-class: REDUCED_REDUNDANCY\n"
	"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
	"aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;"
	"x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature="
	"4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9\n"
	"x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD\nContent-Encoding: aws-chunked\n"
	"x-amz-decoded-content-length: 66560\nContent-Length: 66824\n\n";

static void fuzz_known_answers(void)
{
	struct fuzz_result fr;
	struct gw_buf b;

	fuzz_request((const uint8_t *)fuzz_kat_get, strlen(fuzz_kat_get), &fr);
	fuzz_require(fr.verify == S3_OK, "AWS's GET Object example verifies");
	fuzz_request((const uint8_t *)fuzz_kat_presigned, strlen(fuzz_kat_presigned), &fr);
	fuzz_require(fr.verify == S3_OK, "AWS's presigned URL example verifies");

	gw_buf_init(&b);
	gw_buf_puts(&b, fuzz_kat_chunked_head);
	gw_buf_puts(&b, "10000;chunk-signature="
		    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n");
	for (int i = 0; i < 65536; i++)
		gw_buf_putc(&b, 'a');
	gw_buf_puts(&b, "\r\n400;chunk-signature="
		    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n");
	for (int i = 0; i < 1024; i++)
		gw_buf_putc(&b, 'a');
	gw_buf_puts(&b, "\r\n0;chunk-signature="
		    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n");
	fuzz_request((const uint8_t *)gw_buf_str(&b), b.len, &fr);
	fuzz_require(fr.verify == S3_OK, "AWS's chunked PUT example: seed signature verifies");
	fuzz_require(fr.chunks == S3_OK && fr.payload == 66560,
		     "AWS's chunked PUT example: every chunk signature verifies");
	/* One byte changed in the first chunk must break its signature. */
	b.data[strlen(fuzz_kat_chunked_head) + 100] = 'b';
	fuzz_request((const uint8_t *)gw_buf_str(&b), b.len, &fr);
	fuzz_require(fr.chunks == S3_SIGNATURE_DOES_NOT_MATCH, "a changed chunk byte is caught");
	gw_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int init;
	struct fuzz_result fr;
	char err[256];

	if (!init) {
		fuzz_require(auth_creds_parse(&fuzz_creds,
					      "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
					      "# comment\nSCOPED secret2 bucket-a bucket-b\n",
					      "fuzz", err, sizeof(err)) == 0, "test credentials parse");
		fuzz_known_answers();
		init = 1;
	}
	fuzz_request(data, size, &fr);
	return 0;
}
