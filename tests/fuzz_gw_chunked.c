/*
 * fuzz_gw_chunked.c - fuzz target for the aws-chunked body decoder
 * (chunk_init/chunk_feed/chunk_finish in gateway/s3_auth.c), the one parser
 * that reads every byte of a streamed upload.
 *
 * fuzz_gw_sigv4 feeds the decoder bodies whose chunk signatures almost never
 * verify, so it mostly sees the first chunk fail. This target reaches the
 * rest of the state machine two ways, chosen by the first input byte:
 *
 *  - 'S' (structured): the rest describes chunks and trailers, and the
 *    target builds a body the way an SDK does, with every chunk signature
 *    and the trailer signature right. Promise: it decodes to exactly the
 *    chunks' bytes, in every mode, whatever the pieces it arrives in; then
 *    one byte of it changed (position and value from the input) must never
 *    decode to different payload bytes without an error in a signed mode.
 *  - anything else (raw): the rest is a body as a client sent it.
 *
 * Both ways every body is fed in three patterns (whole, byte by byte,
 * pieces sized by the input), and the promise is that the network's choice
 * of pieces changes nothing: the same verdict, the same payload bytes, the
 * same trailers. Never more payload than body bytes, either.
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

#define FUZZ_DATE "20130524T000000Z"
#define FUZZ_SCOPE "20130524/us-east-1/s3/aws4_request"
#define FUZZ_SEED_SIG "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
#define FUZZ_EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_gw_chunked: broken promise: %s\n", what);
		abort();
	}
}

static const uint8_t fuzz_key[32] = "kvtier-fuzz-chunk-signing-key!!";

struct fuzz_out {
	enum s3_code code;
	struct gw_buf payload;
	char trailers[CHUNK_TRAILERS_MAX][64 + 160 + 2];
	size_t ntrailers;
};

static enum s3_code fuzz_sink(void *arg, const char *d, size_t len)
{
	struct fuzz_out *o = arg;

	return gw_buf_append(&o->payload, d, len) == 0 ? S3_OK : S3_INTERNAL_ERROR;
}

/* Decodes body in mode, fed in pieces: 0 whole, 1 byte by byte, 2 by sizes. */
static void fuzz_decode(enum auth_payload mode, const char *body, size_t len, int pattern,
			const uint8_t *sizes, size_t nsizes, struct fuzz_out *o)
{
	struct auth_result res = { .payload = mode };
	struct chunk_dec d;
	size_t fed = 0, k = 0;

	memset(o, 0, sizeof(*o));
	gw_buf_init(&o->payload);
	memcpy(res.key, fuzz_key, sizeof(res.key));
	snprintf(res.amz_date, sizeof(res.amz_date), FUZZ_DATE);
	snprintf(res.scope, sizeof(res.scope), FUZZ_SCOPE);
	snprintf(res.signature, sizeof(res.signature), FUZZ_SEED_SIG);
	fuzz_require(chunk_init(&d, &res) == 0, "chunk_init");
	o->code = S3_OK;
	while (fed < len && o->code == S3_OK) {
		size_t n = len - fed;

		if (pattern == 1)
			n = 1;
		else if (pattern == 2 && nsizes > 0)
			n = 1 + sizes[k++ % nsizes] * 3u;
		if (n > len - fed)
			n = len - fed;
		o->code = chunk_feed(&d, body + fed, n, fuzz_sink, o);
		fed += n;
	}
	if (o->code == S3_OK)
		o->code = chunk_finish(&d);
	fuzz_require(o->payload.len <= len, "no more payload than body");
	fuzz_require(o->payload.len == d.decoded, "the sink saw every decoded byte");
	for (size_t i = 0; i < d.ntrailers; i++)
		snprintf(o->trailers[i], sizeof(o->trailers[i]), "%s:%s", d.trailers[i].name,
			 d.trailers[i].value);
	o->ntrailers = d.ntrailers;
	chunk_release(&d);
}

static bool fuzz_same(const struct fuzz_out *a, const struct fuzz_out *b)
{
	if (a->code != b->code || a->ntrailers != b->ntrailers)
		return false;
	/* After an error the payload so far depends on where the piece ended. */
	if (a->code == S3_OK && (a->payload.len != b->payload.len ||
				 memcmp(gw_buf_str(&a->payload), gw_buf_str(&b->payload),
					a->payload.len) != 0))
		return false;
	for (size_t i = 0; i < a->ntrailers; i++)
		if (strcmp(a->trailers[i], b->trailers[i]) != 0)
			return false;
	return true;
}

/* Decodes in all three patterns; they must agree. o gets pattern 0's result. */
static void fuzz_decode_all(enum auth_payload mode, const char *body, size_t len,
			    const uint8_t *sizes, size_t nsizes, struct fuzz_out *o)
{
	struct fuzz_out other;

	fuzz_decode(mode, body, len, 0, sizes, nsizes, o);
	for (int pattern = 1; pattern <= 2; pattern++) {
		fuzz_decode(mode, body, len, pattern, sizes, nsizes, &other);
		fuzz_require(fuzz_same(o, &other), "the pieces a body arrives in change nothing");
		gw_buf_release(&other.payload);
	}
}

static void fuzz_sign(char out[65], const char *sts)
{
	uint8_t mac[32];

	gw_hmac_sha256(mac, fuzz_key, sizeof(fuzz_key), sts, strlen(sts));
	gw_hex(out, mac, 32);
}

/*
 * Builds a body as an SDK would. Input: a list of records, each a length
 * byte L then L data bytes (L = 0 ends the chunks), then trailer lines
 * "name:value" separated by '\n'. Returns the body; want gets the payload.
 */
static void fuzz_build(enum auth_payload mode, const uint8_t *p, size_t n, struct gw_buf *body,
		       struct gw_buf *want, char *names_values, size_t nv_len)
{
	const bool sign = mode != AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER;
	const bool trailer = mode != AUTH_PAYLOAD_STREAMING;
	char prev[65] = FUZZ_SEED_SIG, sig[65], h[65];
	struct gw_buf sts, canon;
	size_t i = 0;

	gw_buf_init(&sts);
	gw_buf_init(&canon);
	names_values[0] = '\0';
	for (;;) {
		size_t len = i < n ? p[i++] : 0;

		if (len > n - i)
			len = n - i;
		gw_buf_printf(body, "%zx", len);
		if (sign) {
			gw_sha256_hex(h, p + i, len);
			gw_buf_reset(&sts);
			gw_buf_printf(&sts, "AWS4-HMAC-SHA256-PAYLOAD\n%s\n%s\n%s\n%s\n%s", FUZZ_DATE,
				      FUZZ_SCOPE, prev, FUZZ_EMPTY_SHA, h);
			fuzz_sign(sig, gw_buf_str(&sts));
			gw_buf_printf(body, ";chunk-signature=%s", sig);
			memcpy(prev, sig, sizeof(prev));
		}
		gw_buf_puts(body, "\r\n");
		if (len == 0)
			break;
		gw_buf_append(body, p + i, len);
		gw_buf_append(want, p + i, len);
		gw_buf_puts(body, "\r\n");
		i += len;
	}
	if (trailer) {
		/* Up to CHUNK_TRAILERS_MAX well-formed lines from the rest. */
		size_t lines = 0;

		while (i < n && lines < CHUNK_TRAILERS_MAX) {
			char name[64], value[160];
			size_t nl = 0, vl = 0;

			while (i < n && p[i] != ':' && p[i] != '\n' && nl < sizeof(name) - 1) {
				char c = (char)p[i++];

				if (c >= 'A' && c <= 'Z')
					c = (char)(c - 'A' + 'a');
				if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')
					name[nl++] = c;
			}
			name[nl] = '\0';
			if (i < n && p[i] == ':')
				i++;
			while (i < n && p[i] != '\n' && vl < sizeof(value) - 1) {
				char c = (char)p[i++];

				if ((unsigned char)c >= 0x21 && (unsigned char)c < 0x7f)
					value[vl++] = c;
			}
			value[vl] = '\0';
			if (i < n)
				i++;
			if (nl == 0 || !strcmp(name, "x-amz-trailer-signature"))
				continue;
			gw_buf_printf(body, "%s:%s\r\n", name, value);
			gw_buf_printf(&canon, "%s:%s\n", name, value);
			snprintf(names_values + strlen(names_values), nv_len - strlen(names_values),
				 "%s:%s|", name, value);
			lines++;
		}
		if (sign) {
			gw_sha256_hex(h, gw_buf_str(&canon), canon.len);
			gw_buf_reset(&sts);
			gw_buf_printf(&sts, "AWS4-HMAC-SHA256-TRAILER\n%s\n%s\n%s\n%s", FUZZ_DATE,
				      FUZZ_SCOPE, prev, h);
			fuzz_sign(sig, gw_buf_str(&sts));
			gw_buf_printf(body, "x-amz-trailer-signature:%s\r\n", sig);
		}
	}
	gw_buf_puts(body, "\r\n");
	fuzz_require(!gw_buf_failed(body) && !gw_buf_failed(want), "out of memory");
	gw_buf_release(&sts);
	gw_buf_release(&canon);
}

static void fuzz_structured(const uint8_t *p, size_t n)
{
	static const enum auth_payload modes[] = {
		AUTH_PAYLOAD_STREAMING, AUTH_PAYLOAD_STREAMING_TRAILER,
		AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER,
	};
	/* The last two bytes place one change into the body. */
	const size_t body_n = n >= 2 ? n - 2 : n;

	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		struct gw_buf body, want;
		struct fuzz_out o;
		char nv[CHUNK_TRAILERS_MAX * 230] = "", got[sizeof(nv)] = "";

		gw_buf_init(&body);
		gw_buf_init(&want);
		fuzz_build(modes[m], p, body_n, &body, &want, nv, sizeof(nv));
		fuzz_decode_all(modes[m], gw_buf_str(&body), body.len, p, n, &o);
		fuzz_require(o.code == S3_OK, "a well-signed body decodes");
		fuzz_require(o.payload.len == want.len &&
			     memcmp(gw_buf_str(&o.payload), gw_buf_str(&want), want.len) == 0,
			     "a well-signed body decodes to its chunks' bytes");
		for (size_t i = 0; i < o.ntrailers; i++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s|", o.trailers[i]);
		fuzz_require(strcmp(got, nv) == 0, "every trailer arrives as sent");
		gw_buf_release(&o.payload);

		if (n >= 2 && body.len > 0) {
			size_t pos = ((size_t)p[n - 2] * 257u + p[n - 1]) % body.len;
			uint8_t was = (uint8_t)body.data[pos];

			body.data[pos] = (char)(was ^ (p[n - 1] | 1));
			fuzz_decode_all(modes[m], gw_buf_str(&body), body.len, p, n, &o);
			/* Signed chunks: changed payload bytes can never be accepted. */
			if (modes[m] != AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER && o.code == S3_OK)
				fuzz_require(o.payload.len == want.len &&
					     memcmp(gw_buf_str(&o.payload), gw_buf_str(&want),
						    want.len) == 0,
					     "a changed signed body never yields other bytes");
			gw_buf_release(&o.payload);
		}
		gw_buf_release(&body);
		gw_buf_release(&want);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_out o;

	if (size > 0 && data[0] == 'S') {
		fuzz_structured(data + 1, size - 1);
		return 0;
	}
	for (int mode = AUTH_PAYLOAD_STREAMING; mode <= AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER;
	     mode++) {
		fuzz_decode_all((enum auth_payload)mode, (const char *)data, size, data, size, &o);
		gw_buf_release(&o.payload);
	}
	return 0;
}
