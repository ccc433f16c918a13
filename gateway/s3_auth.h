/*
 * s3_auth.h - AWS Signature Version 4: users and their credentials, request
 * verification (Authorization header and presigned URLs) and the aws-chunked
 * body decoder with its chained chunk signatures.
 *
 * Everything here is pure: a request is handed over as its method, raw path,
 * raw query and header list, so the fuzz target fuzz_gw_sigv4 drives the
 * same code the server runs.
 */
#ifndef S3_AUTH_H
#define S3_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "gw_util.h"
#include "s3_error.h"

/* ---- users -------------------------------------------------------------- */

struct auth_user {
	char *access;
	char *secret;
	char **buckets;		/* the buckets this user may touch; none = all */
	size_t nbuckets;
};

struct auth_creds {
	struct auth_user *users;
	size_t nusers;
};

/*
 * Loads a credentials file: one user a line, "ACCESS SECRET [BUCKET ...]",
 * '#' comments and blank lines allowed. The file must belong to us and be
 * unreadable by group and others; otherwise, and on any bad line, returns a
 * negative errno with one line in err naming the file (and line).
 */
int auth_creds_load(struct auth_creds *c, const char *path, char *err, size_t errlen);
/* The same from a string already in memory (no permission check). */
int auth_creds_parse(struct auth_creds *c, const char *text, const char *name, char *err,
		     size_t errlen);
void auth_creds_release(struct auth_creds *c);
const struct auth_user *auth_creds_find(const struct auth_creds *c, const char *access);
/* Whether u may touch bucket (NULL: the service, always). */
bool auth_user_may(const struct auth_user *u, const char *bucket);

/* ---- request verification ----------------------------------------------- */

struct auth_hdr {
	const char *name;	/* any case */
	const char *value;
};

struct auth_input {
	const char *method;
	const char *raw_path;		/* as on the wire */
	const char *raw_query;		/* as on the wire, without '?' */
	const struct auth_hdr *hdrs;
	size_t nhdrs;
	time_t now;
	const struct auth_creds *creds;
	const char *region;		/* the one scopes must name; NULL: any */
};

enum auth_payload {
	AUTH_PAYLOAD_UNSIGNED,		/* UNSIGNED-PAYLOAD, presigned URLs */
	AUTH_PAYLOAD_SHA256,		/* hex SHA-256 of the body, checked at its end */
	AUTH_PAYLOAD_STREAMING,		/* STREAMING-AWS4-HMAC-SHA256-PAYLOAD */
	AUTH_PAYLOAD_STREAMING_TRAILER,	/* ... -PAYLOAD-TRAILER */
	AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER, /* STREAMING-UNSIGNED-PAYLOAD-TRAILER */
};

#define AUTH_SKEW_SECONDS (15 * 60)
#define AUTH_PRESIGN_MAX_EXPIRES (7 * 24 * 3600)

struct auth_result {
	const struct auth_user *user;
	enum auth_payload payload;
	char payload_sha256[65];	/* AUTH_PAYLOAD_SHA256 */
	uint8_t key[32];		/* signing key, for chunk signatures */
	char amz_date[17];
	char scope[160];
	char signature[65];		/* the seed signature of a chunked body */
	bool presigned;
	bool implied_empty;		/* no x-amz-content-sha256: an empty body was signed */
	char msg[320];			/* why it failed, for <Message> */
};

/* S3_OK, or the error to answer with (msg says more). */
enum s3_code auth_verify(const struct auth_input *in, struct auth_result *out);

/* The value of header name in hdrs (first one), or NULL. */
const char *auth_hdr_get(const struct auth_hdr *hdrs, size_t n, const char *name);

/*
 * The canonical request of SigV4 into out. canon_uri is already encoded;
 * presigned leaves X-Amz-Signature out of the query. Exposed for the fuzz
 * target and the tests.
 */
int auth_canonical_request(struct gw_buf *out, const char *method, const char *canon_uri,
			   const char *raw_query, bool presigned, const struct auth_hdr *hdrs,
			   size_t nhdrs, const char *signed_headers, const char *payload_hash);
/* The canonical URI of a raw path: decoded once, encoded as SigV4 says. */
int auth_canonical_uri(struct gw_buf *out, const char *raw_path);

struct auth_authz {
	char access[129];
	char date[9];
	char region[65];
	char service[33];
	char signed_headers[1024];
	char signature[65];
};

/* Parses "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...". */
int auth_parse_authorization(const char *value, struct auth_authz *out);
/* Parses "AK/20130524/us-east-1/s3/aws4_request" into a. */
int auth_parse_credential(const char *cred, struct auth_authz *a);

/* ---- aws-chunked bodies ------------------------------------------------- */

enum chunk_state {
	CHUNK_SIZE,		/* reading "hex[;chunk-signature=...]\r\n" */
	CHUNK_DATA,
	CHUNK_DATA_CRLF,
	CHUNK_TRAILER,		/* reading "name:value\r\n" lines up to "\r\n" */
	CHUNK_END_CRLF,		/* the "\r\n" after the final chunk */
	CHUNK_DONE,
};

#define CHUNK_LINE_MAX 1024
#define CHUNK_TRAILERS_MAX 4

struct chunk_trailer {
	char name[64];
	char value[160];
};

struct chunk_dec {
	enum chunk_state state;
	bool signed_chunks;
	bool signed_trailer;
	bool trailer;
	char line[CHUNK_LINE_MAX];
	size_t linelen;
	uint64_t remaining;	/* of the current chunk's data */
	uint64_t decoded;	/* payload bytes so far */
	char chunk_sig[65];	/* the signature the current chunk claims */
	char prev_sig[65];
	void *sha;		/* EVP_MD_CTX over the current chunk */
	uint8_t key[32];
	char amz_date[17];
	char scope[160];
	char trailer_sig[65];
	struct chunk_trailer trailers[CHUNK_TRAILERS_MAX];
	size_t ntrailers;
};

/* The payload bytes of a chunked body; returns S3_OK or an error to stop. */
typedef enum s3_code (*chunk_sink_fn)(void *arg, const char *data, size_t len);

/* From a verified request: the mode comes from res->payload. */
int chunk_init(struct chunk_dec *d, const struct auth_result *res);
/* Feeds raw body bytes; S3_OK or the error (bad framing, bad signature). */
enum s3_code chunk_feed(struct chunk_dec *d, const char *data, size_t len,
			chunk_sink_fn sink, void *arg);
/* At the end of the body: S3_OK if the last chunk (and trailer) arrived. */
enum s3_code chunk_finish(struct chunk_dec *d);
/* A trailer's value ("x-amz-checksum-crc32"), or NULL. */
const char *chunk_trailer(const struct chunk_dec *d, const char *name);
void chunk_release(struct chunk_dec *d);

#endif /* S3_AUTH_H */
