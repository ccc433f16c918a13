/*
 * gw_util.h - small helpers of the gateway: a growable byte buffer, URL
 * (percent) coding, HTTP and ISO 8601 dates, hex and base64, and the
 * checksums S3 clients send (CRC32, CRC32C, CRC64/NVME, SHA-1, SHA-256, MD5).
 *
 * Nothing here knows about HTTP connections or the engine, so the fuzz
 * targets link it as it is.
 */
#ifndef GW_UTIL_H
#define GW_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define GW_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define GW_MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- growable buffer ---------------------------------------------------- */

/*
 * Always NUL-terminated once anything was added (data may be NULL before).
 * A failed allocation makes the buffer sticky-failed: later appends do
 * nothing and gw_buf_failed() says so, so that a long run of appends needs
 * one check at the end.
 */
struct gw_buf {
	char *data;
	size_t len, cap;
	bool failed;
};

void gw_buf_init(struct gw_buf *b);
void gw_buf_release(struct gw_buf *b);
void gw_buf_reset(struct gw_buf *b);
int gw_buf_append(struct gw_buf *b, const void *p, size_t n);
/* Room for n more bytes without another allocation. */
int gw_buf_reserve(struct gw_buf *b, size_t n);
int gw_buf_puts(struct gw_buf *b, const char *s);
int gw_buf_putc(struct gw_buf *b, char c);
int gw_buf_printf(struct gw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool gw_buf_failed(const struct gw_buf *b) { return b->failed; }
/* The buffer's bytes (never NULL: "" when empty). */
const char *gw_buf_str(const struct gw_buf *b);
/* Hands the bytes to the caller, who frees them; b is left empty. */
char *gw_buf_detach(struct gw_buf *b, size_t *len);

/* ---- percent coding ----------------------------------------------------- */

/*
 * Decodes %XX once into a new string. plus_space turns '+' into ' ' (query
 * strings, as form encoding does). NULL on a bad %-sequence, on a %00 (keys
 * and names never hold NUL) or without memory; *outlen gets the length.
 */
char *gw_url_decode(const char *s, size_t len, bool plus_space, size_t *outlen);

/*
 * Encodes as SigV4 and S3's encoding-type=url do: every byte except
 * A-Z a-z 0-9 - _ . ~ becomes %XX (upper-case hex); '/' is kept if
 * keep_slash.
 */
int gw_url_encode(struct gw_buf *out, const char *s, size_t len, bool keep_slash);

/* ---- time --------------------------------------------------------------- */

/* "Sun, 06 Nov 1994 08:49:37 GMT" into out (30 bytes at least). */
void gw_time_http(char *out, size_t len, time_t t);
/* "2009-10-12T17:50:30.000Z" into out (25 bytes at least). */
void gw_time_iso(char *out, size_t len, int64_t ns);
/* Parses an HTTP date (RFC 1123, RFC 850 or asctime); -1 if it is none. */
time_t gw_time_parse_http(const char *s);
/* Parses SigV4's "20130524T000000Z"; -1 if malformed. */
time_t gw_time_parse_amz(const char *s);

/* ---- hex and base64 ----------------------------------------------------- */

void gw_hex(char *out, const void *buf, size_t len);
/* Decodes exactly outlen bytes of standard base64; -1 if s is not that. */
int gw_base64_decode(const char *s, uint8_t *out, size_t outlen);
void gw_base64_encode(char *out, const uint8_t *in, size_t len);	/* out: 4*ceil(len/3)+1 */

/* ---- checksums ---------------------------------------------------------- */

enum gw_cks_algo {
	GW_CKS_NONE,
	GW_CKS_CRC32,
	GW_CKS_CRC32C,
	GW_CKS_CRC64NVME,
	GW_CKS_SHA1,
	GW_CKS_SHA256,
};

/* One running checksum; the digest is compared in its base64 form. */
struct gw_cks {
	enum gw_cks_algo algo;
	uint64_t crc;
	void *md;		/* EVP_MD_CTX for SHA-1 and SHA-256 */
};

/* "crc32" -> GW_CKS_CRC32, from "x-amz-checksum-crc32" minus its prefix. */
enum gw_cks_algo gw_cks_algo_parse(const char *name);
const char *gw_cks_algo_name(enum gw_cks_algo algo);
int gw_cks_init(struct gw_cks *c, enum gw_cks_algo algo);
void gw_cks_update(struct gw_cks *c, const void *buf, size_t len);
/* Writes the base64 digest into out (64 bytes); the state is used up. */
int gw_cks_final(struct gw_cks *c, char *out, size_t len);
void gw_cks_release(struct gw_cks *c);

uint32_t gw_crc32(uint32_t crc, const void *buf, size_t len);
uint64_t gw_crc64nvme(uint64_t crc, const void *buf, size_t len);

/* SHA-256 of a buffer as 64 lower-case hex digits and a NUL. */
void gw_sha256_hex(char out[65], const void *buf, size_t len);
/* HMAC-SHA256. */
void gw_hmac_sha256(uint8_t out[32], const void *key, size_t keylen, const void *msg, size_t len);
/* Constant-time equality of two strings of the same length. */
bool gw_secure_eq(const char *a, const char *b);

#endif /* GW_UTIL_H */
