/*
 * s3_ops_object.c - object operations: PutObject, GetObject, HeadObject,
 * DeleteObject, CopyObject, and what they share (metadata, conditions,
 * copy sources).
 *
 * A GET body of S3_MAP_MIN or more is sent from the page cache without a
 * copy in user space (s3_map_response): kvt_reader_map() checks every
 * extent under the range in place and pins its segments until the response
 * is gone, and libmicrohttpd gives the iovecs to sendmsg. Not sendfile(2):
 * an extent carries its header inside the segment file, so an object of
 * more than one extent is never one file range, and libmicrohttpd sends one
 * descriptor range per response. An object larger than cached_read_max is
 * mapped on the read lane, a smaller one on the polling thread. Bodies
 * under S3_MAP_MIN of small objects are read whole through the page cache
 * on the polling thread (s3_whole_response); where segments cannot be
 * mapped, GET falls back to kvt_reader_pread() (whole, or streamed through
 * a callback response read on the read lane). Cold objects are recalled on
 * the write lane (gw_work.c). Every extent's checksum is verified on every
 * GET (a wrong KV byte silently corrupts a model's output), before the
 * status line on the mapped and whole paths; a checksum failure mid-stream
 * on the callback path ends the response with an error (the client sees a
 * short body and retries), never with wrong bytes.
 *
 * Metadata: x-amz-meta-NAME is stored as NAME (lower case); the standard
 * headers S3 keeps with an object (Cache-Control, Content-Disposition,
 * Content-Encoding, Content-Language, Expires) are stored among the
 * metadata under ":name", a name no header can have; Content-Type has its
 * own field. All come back exactly as given.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "gw.h"
#include "log.h"
#include "s3_xml.h"

/*
 * GET reads in pieces of the engine's extent payload (1 MiB,
 * SEG_PAYLOAD_MAX in src/segment.h): kvt_reader_pread() reads and
 * verifies whole extents, so aligned pieces read each extent once. kvtier.h
 * does not export the figure; were it to change, reads stay correct, only
 * some extents are read twice.
 */
#define S3_READ_BLOCK (1u << 20)
/*
 * Bodies up to this size are read whole, in one kvt_reader_pread() (its
 * extents in flight at once), into a buffer of their own that libmicrohttpd
 * sends and frees. Larger ones stream through a callback response, for which
 * libmicrohttpd 0.9.75 callocs its block: zeroing 1 MiB for a 2 MiB GET
 * (and faulting the pages in again after a malloc_trim) cost as much as
 * reading half the object. 64 GETs of 4 MiB in flight hold 256 MiB at
 * most, as do 64 callback responses of 32 MiB objects (1 MiB each) plus
 * their lanes.
 */
#define S3_WHOLE_MAX (4u << 20)
/*
 * Bodies from this size on are sent from the segments' mapping, those of
 * objects of at most cached_read_max included: reading a 256 KiB body whole
 * copies it twice before the socket's own copy (page cache to I/O buffer,
 * then to the response's buffer), about a quarter of the gateway's CPU
 * in GET 256K at 16 connections. Smaller bodies of small objects are read
 * whole.
 */
#define S3_MAP_MIN (64u << 10)

static const char *const s3_stored_headers[] = {
	"cache-control", "content-disposition", "content-encoding", "content-language", "expires",
};

bool s3_bucket_ok(struct gw_req *rq, const char *bucket)
{
	int rc;

	if (!auth_user_may(rq->user, bucket)) {
		http_send_error(rq, S3_ACCESS_DENIED, NULL);
		return false;
	}
	rc = kvt_bucket_exists(rq->srv->st, bucket);
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_BUCKET);
		return false;
	}
	return true;
}

static int s3_meta_add(struct gw_req *rq, char *name, const char *value)
{
	struct kvt_meta *v;

	for (size_t i = 0; i < rq->nmeta; i++) {
		if (strcmp(rq->meta[i].name, name) == 0) {
			/* Repeated headers join with ',' as HTTP says. */
			size_t n = strlen(rq->meta[i].value) + strlen(value) + 2;
			char *j = malloc(n);

			if (!j)
				return -ENOMEM;
			snprintf(j, n, "%s,%s", rq->meta[i].value, value);
			free(rq->meta[i].value);
			rq->meta[i].value = j;
			free(name);
			return 0;
		}
	}
	v = realloc(rq->meta, (rq->nmeta + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	rq->meta = v;
	rq->meta[rq->nmeta].name = name;
	rq->meta[rq->nmeta].value = strdup(value);
	if (!rq->meta[rq->nmeta].value)
		return -ENOMEM;
	rq->nmeta++;
	return 0;
}

/* Content-Encoding without the transfer's own "aws-chunked" token. */
static char *s3_strip_aws_chunked(const char *v)
{
	struct gw_buf b;
	const char *p = v;

	gw_buf_init(&b);
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		const char *t = p;
		size_t tl = len;

		while (tl && (*t == ' ' || *t == '\t'))
			t++, tl--;
		while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\t'))
			tl--;
		if (tl && !(tl == 11 && strncasecmp(t, "aws-chunked", 11) == 0)) {
			if (b.len)
				gw_buf_putc(&b, ',');
			gw_buf_append(&b, t, tl);
		}
		p += len + (comma ? 1 : 0);
	}
	if (gw_buf_failed(&b)) {
		gw_buf_release(&b);
		return NULL;
	}
	return gw_buf_detach(&b, NULL);
}

/*
 * Whether a stored name and value can be sent back as a header line: the
 * name a token (RFC 9110, 5.6.2), the value free of control characters.
 * libmicrohttpd passes bytes like 0xf5 in a header name through, and a GET
 * would echo them in x-amz-meta-NAME (found by the fuzz target gw_http).
 */
static bool s3_meta_sendable(const char *name, const char *value)
{
	if (!*name)
		return false;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		if (!(*c >= '0' && *c <= '9') && !((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z') &&
		    !strchr("!#$%&'*+-.^_`|~", *c))
			return false;
	for (const unsigned char *c = (const unsigned char *)value; *c; c++)
		if ((*c < ' ' && *c != '\t') || *c == 0x7f)
			return false;
	return true;
}

void s3_put_kind(struct kvt_put_opts *opts)
{
	static const struct kvt_posix symlink = { .kind = KVT_KIND_SYMLINK };

	for (size_t i = 0; i < opts->nmeta; i++)
		if (strcmp(opts->meta[i].name, "kvtier-symlink") == 0 &&
		    strcmp(opts->meta[i].value, "1") == 0)
			opts->posix = &symlink;
}

enum s3_code s3_refuse_unkept(const struct gw_req *rq)
{
	for (size_t i = 0; i < rq->nhdrs; i++)
		if (strncasecmp(rq->hdrs[i].name, "x-amz-server-side-encryption", 28) == 0 ||
		    strncasecmp(rq->hdrs[i].name, "x-amz-object-lock-", 18) == 0)
			return S3_NOT_IMPLEMENTED;
	return S3_OK;
}

static enum s3_code s3_collect_meta_code(struct gw_req *rq, const char **msg)
{
	size_t user_bytes = 0;
	const char *ct = http_hdr(rq, "Content-Type");
	const char *session = http_hdr(rq, "x-kvtier-session");
	enum s3_code code = s3_refuse_unkept(rq);

	if (code != S3_OK)
		return code;
	for (size_t i = 0; i < rq->nhdrs; i++) {
		const char *n = rq->hdrs[i].name, *v = rq->hdrs[i].value;
		char *name = NULL;

		if (strncasecmp(n, "x-amz-meta-", 11) == 0) {
			if (!s3_meta_sendable(n + 11, v)) {
				*msg = "User metadata names (x-amz-meta-NAME) must be ASCII letters, "
				       "digits and !#$%&'*+-.^_`|~, their values free of control "
				       "characters";
				return S3_INVALID_ARGUMENT;
			}
			name = strdup(n + 11);
			user_bytes += strlen(n + 11) + strlen(v);
		} else {
			for (size_t k = 0; k < GW_ARRAY_SIZE(s3_stored_headers); k++) {
				if (strcasecmp(n, s3_stored_headers[k]) == 0) {
					name = malloc(strlen(n) + 2);
					if (name)
						sprintf(name, GW_SYSMETA_PREFIX "%s", s3_stored_headers[k]);
					else
						return S3_NO_MEMORY;
					break;
				}
			}
			if (!name)
				continue;
		}
		if (!name)
			return S3_NO_MEMORY;
		for (char *c = name; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
		if (strcmp(name, GW_SYSMETA_PREFIX "content-encoding") == 0) {
			char *enc = s3_strip_aws_chunked(v);
			int rc;

			if (!enc) {
				free(name);
				return S3_NO_MEMORY;
			}
			rc = *enc ? s3_meta_add(rq, name, enc) : (free(name), 0);
			free(enc);
			if (rc < 0)
				return S3_NO_MEMORY;
			continue;
		}
		if (s3_meta_add(rq, name, v) < 0)
			return S3_NO_MEMORY;
	}
	/* S3: names and values of user metadata together, at most 2 KB. */
	if (user_bytes > KVT_META_MAX)
		return S3_METADATA_TOO_LARGE;
	if (ct && !(rq->content_type = strdup(ct)))
		return S3_NO_MEMORY;
	rq->put.content_type = rq->content_type;
	rq->put.meta = rq->meta;
	rq->put.nmeta = rq->nmeta;
	/* The session: ours, else x-amz-meta-kvtier-session (DESIGN.md), else the key's. */
	if (!session) {
		for (size_t i = 0; i < rq->nmeta; i++)
			if (strcmp(rq->meta[i].name, "kvtier-session") == 0)
				session = rq->meta[i].value;
	}
	rq->put.session = session && *session ? session : NULL;
	/* It names G4's manifest of the session: a key's rules (writer.c). */
	if (rq->put.session && kvt_key_valid(rq->put.session) < 0) {
		*msg = "A session (x-kvtier-session, x-amz-meta-kvtier-session) must be "
		       "1 to 1024 bytes of UTF-8";
		return S3_INVALID_ARGUMENT;
	}
	return S3_OK;
}

bool s3_collect_meta(struct gw_req *rq)
{
	const char *msg = NULL;
	enum s3_code code = s3_collect_meta_code(rq, &msg);

	if (code == S3_OK)
		return true;
	http_send_error(rq, code, msg);
	return false;
}

/*
 * Whether an entry of an ETag list ("*", or ETags quoted or not, weak or
 * not) names etag. RFC 9110 section 13.1: If-Match compares strongly (a
 * weak W/ entry never matches: strong), If-None-Match weakly.
 */
static bool s3_etag_in(const char *list, const char *etag, bool strong)
{
	const char *p = list;
	size_t elen;

	if (*etag == '"')
		etag++;
	elen = strlen(etag);
	if (elen && etag[elen - 1] == '"')
		elen--;
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		const char *t = p;

		while (len && (*t == ' ' || *t == '\t'))
			t++, len--;
		while (len && (t[len - 1] == ' ' || t[len - 1] == '\t'))
			len--;
		if (len == 1 && *t == '*')
			return true;
		bool weak = len >= 2 && strncmp(t, "W/", 2) == 0;

		if (weak)
			t += 2, len -= 2;
		if (len && *t == '"')
			t++, len--;
		if (len && t[len - 1] == '"')
			len--;
		if (len == elen && strncmp(t, etag, len) == 0 && !(weak && strong))
			return true;
		p += (size_t)(t - p) + len;
		p = comma ? comma + 1 : p + strlen(p);
	}
	return false;
}

enum s3_code s3_conditions(const struct kvt_object *o, const char *if_match,
			   const char *if_none_match, const char *if_modified_since,
			   const char *if_unmodified_since)
{
	time_t mtime = (time_t)(o->mtime_ns / 1000000000);
	time_t t;

	/* RFC 7232 section 6, as S3 applies it. */
	if (if_match) {
		if (!s3_etag_in(if_match, o->etag, true))
			return S3_PRECONDITION_FAILED;
	} else if (if_unmodified_since && (t = gw_time_parse_http(if_unmodified_since)) >= 0 &&
		   mtime > t) {
		return S3_PRECONDITION_FAILED;
	}
	if (if_none_match) {
		if (s3_etag_in(if_none_match, o->etag, false))
			return S3_NOT_MODIFIED;
	} else if (if_modified_since && (t = gw_time_parse_http(if_modified_since)) >= 0 &&
		   mtime <= t) {
		return S3_NOT_MODIFIED;
	}
	return S3_OK;
}

/*
 * The conditions of a write against the key's current ETag (NULL: no
 * object). S3: If-Match on a missing key is 404 NoSuchKey before the write;
 * a key that was there when the write began and is gone at its commit was
 * deleted concurrently: 409 ConditionalRequestConflict, retry. Everything
 * else that fails is 412; of two writers with If-None-Match: * the first to
 * commit wins.
 */
static enum s3_code s3_write_cond(const struct gw_req *rq, const char *etag, bool at_commit)
{
	if (rq->if_match) {
		if (!etag)
			return at_commit ? S3_CONDITIONAL_CONFLICT : S3_NO_SUCH_KEY;
		if (!s3_etag_in(rq->if_match, etag, true))
			return S3_PRECONDITION_FAILED;
	}
	if (rq->if_none_match && etag && s3_etag_in(rq->if_none_match, etag, false))
		return S3_PRECONDITION_FAILED;
	return S3_OK;
}

/* Runs inside the commit's catalog transaction: compares, nothing more. */
static int s3_write_cond_commit(void *arg, const char *etag)
{
	struct gw_req *rq = arg;

	rq->cond_code = s3_write_cond(rq, etag, true);
	return rq->cond_code == S3_OK ? 0 : -ECANCELED;
}

bool s3_write_cond_begin(struct gw_req *rq, struct kvt_put_opts *opts)
{
	struct kvt_object *o = NULL;
	enum s3_code code;
	int rc;

	rq->if_match = http_hdr(rq, "If-Match");
	rq->if_none_match = http_hdr(rq, "If-None-Match");
	rq->cond_code = S3_OK;
	if (!rq->if_match && !rq->if_none_match)
		return true;
	rc = kvt_object_head(rq->srv->st, rq->route.bucket, rq->route.key, &o);
	if (rc < 0 && rc != -ENOENT) {
		http_send_errno_obj(rq, rq->route.bucket, rc, S3_CTX_OBJECT);
		return false;
	}
	if (rc == -ENOENT && kvt_bucket_exists(rq->srv->st, rq->route.bucket) < 0) {
		http_send_error(rq, S3_NO_SUCH_BUCKET, NULL);
		return false;
	}
	code = s3_write_cond(rq, o ? o->etag : NULL, false);
	kvt_object_free(o);
	if (code != S3_OK) {
		http_send_error(rq, code, NULL);
		return false;
	}
	opts->precondition = s3_write_cond_commit;
	opts->precondition_arg = rq;
	return true;
}

bool s3_write_cond_failed(struct gw_req *rq, int rc)
{
	if (rc != -ECANCELED || rq->cond_code == S3_OK)
		return false;
	http_send_error(rq, rq->cond_code, NULL);
	return true;
}

enum s3_code s3_copy_source(const char *v, char **bucket, char **key)
{
	const char *q, *slash;
	char *dec = NULL;
	size_t len;

	*bucket = *key = NULL;
	/* "bucket/key" or "/bucket/key", url-encoded, maybe "?versionId=null". */
	q = strstr(v, "?versionId=");
	len = q ? (size_t)(q - v) : strlen(v);
	if (q && strcmp(q + 11, "null") != 0)
		return S3_NOT_IMPLEMENTED;	/* unversioned buckets only */
	dec = gw_url_decode(v, len, false, &len);
	if (!dec)
		return S3_INVALID_ARGUMENT;
	slash = strchr(dec + (dec[0] == '/'), '/');
	if (!slash || slash[1] == '\0') {
		free(dec);
		return S3_INVALID_ARGUMENT;
	}
	*bucket = strndup(dec + (dec[0] == '/'), (size_t)(slash - dec - (dec[0] == '/')));
	*key = strdup(slash + 1);
	free(dec);
	if (!*bucket || !*key) {
		free(*bucket);
		free(*key);
		*bucket = *key = NULL;
		return S3_NO_MEMORY;
	}
	return S3_OK;
}

/* Sets a header, letting a response-* query parameter override the stored value. */
static void s3_header_override(struct gw_req *rq, struct MHD_Response *resp, const char *header,
			       const char *param, const char *stored)
{
	const char *v = s3_route_param(&rq->route, param);

	if (!v)
		v = stored;
	if (v)
		MHD_add_response_header(resp, header, v);
}

void s3_object_headers(struct gw_req *rq, struct MHD_Response *resp, const struct kvt_object *o)
{
	static const struct {
		const char *header, *param;
	} std[] = {
		{ "Cache-Control", "response-cache-control" },
		{ "Content-Disposition", "response-content-disposition" },
		{ "Content-Encoding", "response-content-encoding" },
		{ "Content-Language", "response-content-language" },
		{ "Expires", "response-expires" },
	};
	char date[40];

	MHD_add_response_header(resp, "ETag", o->etag);
	gw_time_http(date, sizeof(date), (time_t)(o->mtime_ns / 1000000000));
	MHD_add_response_header(resp, "Last-Modified", date);
	MHD_add_response_header(resp, "Accept-Ranges", "bytes");
	s3_header_override(rq, resp, "Content-Type", "response-content-type",
			   o->content_type ? o->content_type : "binary/octet-stream");
	for (size_t i = 0; i < GW_ARRAY_SIZE(std); i++) {
		const char *stored = NULL;

		for (size_t m = 0; m < o->nmeta; m++) {
			const char *n = o->meta[m].name;

			if (n[0] == ':' && strcasecmp(n + 1, std[i].header) == 0)
				stored = o->meta[m].value;
		}
		s3_header_override(rq, resp, std[i].header, std[i].param, stored);
	}
	for (size_t m = 0; m < o->nmeta; m++) {
		char name[300];

		if (o->meta[m].name[0] == ':')
			continue;
		snprintf(name, sizeof(name), "x-amz-meta-%s", o->meta[m].name);
		MHD_add_response_header(resp, name, o->meta[m].value);
	}
	MHD_add_response_header(resp, "x-kvtier-tier", kvt_tier_name(o->tier));
	if (o->session)
		MHD_add_response_header(resp, "x-kvtier-session", o->session);
	if (o->pinned)
		MHD_add_response_header(resp, "x-kvtier-pinned", "true");
}

/* ---- PutObject ---------------------------------------------------------- */

/* The parts of PutObject and UploadPart that come before the body. */
static bool s3_put_prepare(struct gw_req *rq)
{
	const char *cl = http_hdr(rq, "Content-Length");
	uint64_t size = rq->decoded_len >= 0 ? (uint64_t)rq->decoded_len : 0;

	if (rq->decoded_len < 0 && cl)
		size = strtoull(cl, NULL, 10);
	if (size > rq->srv->opt.max_object) {
		http_send_error(rq, S3_ENTITY_TOO_LARGE, NULL);
		return false;
	}
	rq->put.size = size;	/* more than the hot tier holds: refused at open */
	if (!cl && !http_hdr(rq, "Transfer-Encoding")) {
		http_send_error(rq, S3_MISSING_CONTENT_LENGTH, NULL);
		return false;
	}
	if (rq->route.key_len > KVT_KEY_MAX) {
		http_send_error(rq, S3_KEY_TOO_LONG, NULL);
		return false;
	}
	return true;
}

void s3_op_put_object_start(struct gw_req *rq)
{
	const char *pin = http_hdr(rq, "x-kvtier-pin");
	struct kvt_writer *w = NULL;
	char etag[KVT_ETAG_MAX];
	int rc;

	if (!s3_put_prepare(rq))
		return;
	if (!s3_collect_meta(rq))
		return;
	rq->put.flags = KVT_PUT_MD5_ETAG;
	s3_put_kind(&rq->put);
	/* Answered before the body when a condition already fails; the commit checks again. */
	if (!s3_write_cond_begin(rq, &rq->put))
		return;
	if (pin && (strcmp(pin, "true") == 0 || strcmp(pin, "1") == 0))
		rq->put.flags |= KVT_PUT_PIN;
	if (http_content_md5_etag(rq, etag, sizeof(etag))) {
		rq->put.etag = etag;	/* copied by the writer */
		rq->put.flags &= ~KVT_PUT_MD5_ETAG;
	}
	rc = kvt_writer_open(rq->srv->st, rq->route.bucket, rq->route.key, &rq->put, &w);
	rq->put.etag = NULL;
	if (rc < 0) {
		http_send_errno_obj(rq, rq->route.bucket, rc, S3_CTX_PUT);
		return;
	}
	http_body_to_writer(rq, w);
}

/* Commits rq->writer and answers with the ETag. */
static void s3_commit_and_answer(struct gw_req *rq, enum s3_ctx ctx)
{
	struct kvt_writer *w = rq->writer;
	struct kvt_object *info = NULL;
	struct MHD_Response *resp;
	int rc;

	rq->writer = NULL;	/* commit frees it, failed or not */
	rc = kvt_writer_commit(w, &info);
	if (rc < 0) {
		if (!s3_write_cond_failed(rq, rc))
			http_send_errno_obj(rq, rq->route.bucket, rc, ctx);
		return;
	}
	resp = http_response_empty();
	if (resp) {
		MHD_add_response_header(resp, "ETag", info->etag);
		if (rq->cks.algo != GW_CKS_NONE)
			MHD_add_response_header(resp, rq->cks_header, rq->want_cks);
	}
	kvt_object_free(info);
	http_send(rq, 200, resp);
}

void s3_op_put_object(struct gw_req *rq)
{
	s3_commit_and_answer(rq, S3_CTX_PUT);
}

/* ---- GetObject / HeadObject --------------------------------------------- */

/*
 * Range: "bytes=first-last", "bytes=first-", "bytes=-suffix". Returns 1 with
 * the range, 0 to send the whole object (no header, a syntax S3 ignores,
 * or several ranges), -1 if unsatisfiable (416).
 */
static int s3_range(const char *h, uint64_t size, uint64_t *first, uint64_t *last)
{
	unsigned long long a = 0, b = 0;
	const char *p, *dash;
	char *end;

	if (!h || strncmp(h, "bytes=", 6) != 0)
		return 0;
	p = h + 6;
	if (strchr(p, ','))
		return 0;
	dash = strchr(p, '-');
	if (!dash)
		return 0;
	if (dash == p) {
		/* suffix */
		if (dash[1] < '0' || dash[1] > '9')
			return 0;
		b = strtoull(dash + 1, &end, 10);
		if (*end)
			return 0;
		if (b == 0 || size == 0)
			return -1;
		*first = b >= size ? 0 : size - b;
		*last = size - 1;
		return 1;
	}
	if (*p < '0' || *p > '9')
		return 0;
	a = strtoull(p, &end, 10);
	if (end != dash)
		return 0;
	if (dash[1] == '\0') {
		if (a >= size)
			return -1;
		*first = a;
		*last = size - 1;
		return 1;
	}
	if (dash[1] < '0' || dash[1] > '9')
		return 0;
	b = strtoull(dash + 1, &end, 10);
	if (*end || b < a)
		return 0;
	if (a >= size)
		return -1;
	*first = a;
	*last = b >= size ? size - 1 : b;
	return 1;
}

struct s3_stream {
	struct kvt_reader *r;
	uint64_t start;		/* object offset of the response's first byte */
	uint64_t len;
	char id[17];
	struct gw_server *srv;
	/*
	 * A piece read on the read lane, straight into libmicrohttpd's buffer
	 * (the response's own block, the same at every call): the callback
	 * suspends the connection and returns 0, the lane reads and resumes,
	 * libmicrohttpd calls again for the same position.
	 */
	struct gw_job job;
	bool pending;
	uint64_t pos;
	char *buf;
	size_t max;
	ssize_t got;
};

static void s3_stream_job(struct gw_job *j)
{
	struct s3_stream *s = (struct s3_stream *)(void *)((char *)j - offsetof(struct s3_stream, job));

	s->got = kvt_reader_pread(s->r, s->buf, s->max, s->start + s->pos);
}

static ssize_t s3_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct s3_stream *s = cls;
	ssize_t n;

	if (pos >= s->len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (max > s->len - pos)
		max = (size_t)(s->len - pos);
	if (s->pending) {
		/* Suspended until the lane is done, so never seen; the lane owns buf. */
		if (!__atomic_load_n(&s->job.done, __ATOMIC_ACQUIRE))
			return 0;
		s->pending = false;
		if (s->pos == pos && s->buf == buf && s->max == max) {
			n = s->got;
			goto got;
		}
		/* not the piece asked for now (never seen): read it again */
	}
	if (!s->pending) {
		s->pos = pos;
		s->buf = buf;
		s->max = max;
		s->job.run = s3_stream_job;
		if (gw_work_submit(s->srv->work, GW_LANE_READ, &s->job)) {
			s->pending = true;
			return 0;	/* suspended: called again once the lane has read */
		}
	}
	n = kvt_reader_pread(s->r, buf, max, s->start + pos);
got:
	if (n <= 0) {
		/* Never 0 here: libmicrohttpd would take it for "try again later". */
		log_err(n < 0 ? (int)n : -EIO, "request %s: read failed at %llu, ending the response",
			s->id, (unsigned long long)(s->start + pos));
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	return n;
}

static void s3_stream_free(void *cls)
{
	struct s3_stream *s = cls;

	kvt_reader_close(s->r);
	free(s);
}

static ssize_t s3_head_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	return MHD_CONTENT_READER_END_WITH_ERROR;	/* HEAD sends no body */
}

/* Checksum of the whole object on request (x-amz-checksum-mode: ENABLED). */
static void s3_checksum_header(struct gw_req *rq, struct MHD_Response *resp,
			       const struct kvt_object *o)
{
	const char *mode = http_hdr(rq, "x-amz-checksum-mode");
	uint8_t be[4];
	char b64[16];

	if (!mode || strcasecmp(mode, "ENABLED") != 0)
		return;
	for (int i = 0; i < 4; i++)
		be[i] = (uint8_t)(o->crc32c >> (24 - 8 * i));
	gw_base64_encode(b64, be, 4);
	MHD_add_response_header(resp, "x-amz-checksum-crc32c", b64);
}

/*
 * A body of at most S3_WHOLE_MAX is read before the response starts, into
 * a buffer of its own size: a callback response would allocate (and zero) a
 * whole S3_READ_BLOCK per request, and allocating and freeing 1 MiB per request is
 * an mmap and an munmap, whose TLB shootdown is the largest cost of a small
 * GET on a virtual machine. Reading first also turns a failed read into an
 * error status rather than a short body. NULL when the request was answered
 * with an error.
 */
static struct MHD_Response *s3_whole_response(struct gw_req *rq, struct kvt_reader *r,
					      uint64_t start, uint64_t len)
{
	struct MHD_Response *resp;
	char *buf = malloc(len);
	ssize_t n;

	if (!buf) {
		http_send_error(rq, S3_NO_MEMORY, NULL);
		return NULL;
	}
	n = kvt_reader_pread(r, buf, len, start);
	if (n != (ssize_t)len) {
		log_err(n < 0 ? (int)n : -EIO, "request %s: read failed at %llu", rq->id,
			(unsigned long long)start);
		free(buf);
		http_send_errno_obj(rq, rq->route.bucket, n < 0 ? (int)n : -EIO, S3_CTX_OBJECT);
		return NULL;
	}
	resp = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(buf);
		http_send_nomem(rq);
		return NULL;
	}
	rq->bytes_out += len;
	return resp;
}

static void s3_map_free(void *cls)
{
	kvt_map_free(cls);
}

/*
 * The body straight from the page cache: kvt_reader_map() checks every
 * extent under the range in place (header, generation, CRC32C) and pins
 * its segments, and libmicrohttpd hands the iovecs to sendmsg, so the only
 * copy is the kernel's into the socket. The pins go with the response
 * (s3_map_free), when the last byte is sent or the connection is gone.
 * NULL with *answered false: the segments cannot be mapped, read instead;
 * NULL with *answered true: the request was answered with an error.
 */
static struct MHD_Response *s3_map_response(struct gw_req *rq, struct kvt_reader *r,
					    uint64_t start, uint64_t len, bool *answered)
{
	struct MHD_Response *resp = NULL;
	struct kvt_map *m = NULL;
	struct MHD_IoVec *mv = NULL;
	const struct iovec *iov;
	unsigned niov;
	int rc;

	*answered = true;
	rc = kvt_reader_map(r, start, len, &m);
	if (rc == -ENOTSUP) {
		*answered = false;
		return NULL;
	}
	if (rc < 0) {
		log_err(rc, "request %s: read failed at %llu", rq->id, (unsigned long long)start);
		http_send_errno_obj(rq, rq->route.bucket, rc, S3_CTX_OBJECT);
		return NULL;
	}
	iov = kvt_map_iov(m, &niov);
	mv = malloc(niov * sizeof(*mv));
	if (!mv) {
		kvt_map_free(m);
		http_send_error(rq, S3_NO_MEMORY, NULL);
		return NULL;
	}
	for (unsigned i = 0; i < niov; i++)
		mv[i] = (struct MHD_IoVec){ .iov_base = iov[i].iov_base, .iov_len = iov[i].iov_len };
	/* libmicrohttpd copies the array, not the bytes; on failure m is ours. */
	resp = MHD_create_response_from_iovec(mv, niov, s3_map_free, m);
	free(mv);
	if (!resp) {
		kvt_map_free(m);
		http_send_nomem(rq);
		return NULL;
	}
	rq->bytes_out += len;
	return resp;
}

/*
 * Extents past cached_read_max are likely not in the page cache: checking
 * them in place (or reading them O_DIRECT) waits on the device, so on the
 * read lane, which runs the GET again with the reader. True if deferred
 * (the reader goes with the request).
 */
static bool s3_defer_read(struct gw_req *rq, struct kvt_reader **r)
{
	rq->reader = *r;
	if (http_defer(rq, GW_LANE_READ)) {
		*r = NULL;
		return true;
	}
	rq->reader = NULL;
	return false;
}

/* "-N" at the end of a (quoted) ETag: the parts S3 made the object of; 0 if none. */
static unsigned long s3_etag_parts(const char *etag)
{
	const char *dash = strrchr(etag, '-');
	char *end;
	unsigned long n;

	if (!dash)
		return 0;
	n = strtoul(dash + 1, &end, 10);
	return (*end == '"' && end[1] == '\0') || *end == '\0' ? n : 0;
}

/*
 * ?partNumber=N (S3: "effectively a ranged GET for the part"): the bytes of
 * part N of a multipart object, from its GW_PARTS_META layout, and the part
 * count; an object that is not multipart has one part, itself. Answers and
 * returns false on an error; *nparts is 0 for an object that is not multipart.
 */
static bool s3_part_range(struct gw_req *rq, const struct kvt_object *o, uint64_t *first,
			  uint64_t *last, unsigned long *nparts)
{
	const char *v = s3_route_param(&rq->route, "partNumber"), *layout = NULL;
	unsigned long want, etag_n = s3_etag_parts(o->etag), seen = 0;
	uint64_t off = 0;
	char *end;

	want = v && *v ? strtoul(v, &end, 10) : 0;
	if (!v || !*v || *end || want < 1 || want > GW_MAX_PART_NUMBER) {
		http_send_error(rq, S3_INVALID_ARGUMENT,
				"Part number must be an integer between 1 and 10000, inclusive");
		return false;
	}
	if (http_hdr(rq, "Range")) {
		http_send_error(rq, S3_INVALID_REQUEST,
				"Cannot specify both Range header and partNumber query parameter");
		return false;
	}
	for (size_t i = 0; i < o->nmeta; i++)
		if (strcmp(o->meta[i].name, GW_PARTS_META) == 0)
			layout = o->meta[i].value;
	*nparts = 0;
	/* An ETag without "-N" (N > 1) is of bytes written since (a copy, a
	 * rewrite through the mount, which keeps the metadata): one part. */
	if (!layout || etag_n <= 1) {
		/* Not multipart, or one part only: part 1 is the whole object. */
		if (etag_n > 1) {
			http_send_error(rq, S3_INVALID_REQUEST,
					"The part layout of this object was not recorded");
			return false;
		}
		if (want != 1)
			goto unsatisfiable;
		*first = 0;
		*last = o->size ? o->size - 1 : 0;
		return true;
	}
	for (const char *p = layout; *p;) {
		unsigned long long size = strtoull(p, &end, 10);
		unsigned long count;

		if (*end != '*')
			goto bad;
		count = strtoul(end + 1, &end, 10);
		if ((*end != ',' && *end != '\0') || count == 0)
			goto bad;
		if (want > seen && want <= seen + count) {
			*first = off + (want - seen - 1) * size;
			*last = *first + size - 1;
		}
		seen += count;
		off += size * count;
		p = *end ? end + 1 : end;
	}
	if (seen != etag_n || off != o->size)
		goto bad;
	*nparts = seen;
	if (want > seen)
		goto unsatisfiable;
	return true;
bad:
	log_err(-EINVAL, "request %s: part layout '%s' does not fit the object", rq->id, layout);
	http_send_error(rq, S3_INVALID_REQUEST, "The part layout of this object was not recorded");
	return false;
unsatisfiable:
	http_send_error(rq, S3_INVALID_PART_NUMBER, NULL);
	return false;
}

void s3_op_get_object(struct gw_req *rq)
{
	struct gw_server *srv = rq->srv;
	const bool head = rq->op == S3_OP_HEAD_OBJECT;
	struct kvt_reader *r = NULL;
	struct kvt_object *ho = NULL;
	const struct kvt_object *o;
	struct MHD_Response *resp = NULL;
	struct s3_stream *s = NULL;
	uint64_t first = 0, last = 0;
	unsigned long nparts = 0;
	enum s3_code code;
	bool answered = false;
	int rc, ranged;

	if (rq->route.key_len > KVT_KEY_MAX) {
		http_send_error(rq, S3_KEY_TOO_LONG, NULL);
		return;
	}
	/*
	 * HEAD needs no bytes: it works on cold objects too, and touches nothing.
	 * A GET opens without recall on the polling thread; a cold object is
	 * recalled on the recall lane, which may wait on G4 (gw_work.c).
	 */
	if (head) {
		rc = kvt_object_head(srv->st, rq->route.bucket, rq->route.key, &ho);
	} else if (rq->reader) {
		r = rq->reader;		/* opened before this ran on a lane */
		rq->reader = NULL;
		rc = 0;
	} else if (rq->in_worker) {
		rc = kvt_reader_open(srv->st, rq->route.bucket, rq->route.key, &r);
	} else {
		rc = kvt_reader_open_hot(srv->st, rq->route.bucket, rq->route.key, &r);
		if (rc == -EAGAIN && http_defer(rq, GW_LANE_RECALL))
			return;
		if (rc == -EAGAIN)
			rc = kvt_reader_open(srv->st, rq->route.bucket, rq->route.key, &r);
	}
	if (rc < 0) {
		http_send_errno_obj(rq, rq->route.bucket, rc, S3_CTX_OBJECT);
		return;
	}
	o = head ? ho : kvt_reader_object(r);
	code = s3_conditions(o, http_hdr(rq, "If-Match"), http_hdr(rq, "If-None-Match"),
			     http_hdr(rq, "If-Modified-Since"), http_hdr(rq, "If-Unmodified-Since"));
	if (code == S3_NOT_MODIFIED) {
		char date[40];

		resp = http_response_empty();
		if (resp) {
			MHD_add_response_header(resp, "ETag", o->etag);
			gw_time_http(date, sizeof(date), (time_t)(o->mtime_ns / 1000000000));
			MHD_add_response_header(resp, "Last-Modified", date);
		}
		http_send(rq, 304, resp);
		goto out;
	}
	if (code != S3_OK) {
		http_send_error(rq, code, NULL);
		goto out;
	}
	if (s3_route_param(&rq->route, "partNumber")) {
		if (!s3_part_range(rq, o, &first, &last, &nparts))
			goto out;
		ranged = o->size > 0;	/* a part is a range, but an empty object has none */
	} else {
		ranged = s3_range(http_hdr(rq, "Range"), o->size, &first, &last);
	}
	if (ranged < 0) {
		rq->err_hdr_name = "Content-Range";
		snprintf(rq->err_hdr_value, sizeof(rq->err_hdr_value), "bytes */%llu",
			 (unsigned long long)o->size);
		http_send_error(rq, S3_INVALID_RANGE, NULL);
		goto out;
	}
	if (!ranged) {
		first = 0;
		last = o->size ? o->size - 1 : 0;
	}
	if (head) {
		resp = MHD_create_response_from_callback(ranged || o->size ? last - first + 1 : 0,
							 4096, s3_head_read, NULL, NULL);
	} else if (o->size == 0) {
		resp = http_response_empty();
	} else if (o->size > srv->cached_read_max && !rq->in_worker &&
		   s3_defer_read(rq, &r)) {
		goto out;	/* the read lane answers */
	} else if ((o->size > srv->cached_read_max || last - first + 1 >= S3_MAP_MIN) &&
		   (resp = s3_map_response(rq, r, first, last - first + 1, &answered))) {
		/* sent from the page cache */
	} else if (answered) {
		goto out;
	} else if (last - first + 1 <= S3_WHOLE_MAX) {
		resp = s3_whole_response(rq, r, first, last - first + 1);
		if (!resp)
			goto out;	/* answered */
	} else {
		s = calloc(1, sizeof(*s));
		if (!s) {
			http_send_error(rq, S3_NO_MEMORY, NULL);
			goto out;
		}
		s->r = r;
		s->srv = srv;
		s->job.conn = rq->conn;
		s->start = first;
		s->len = last - first + 1;
		memcpy(s->id, rq->id, sizeof(s->id));
		resp = MHD_create_response_from_callback(s->len, S3_READ_BLOCK, s3_stream_read, s,
							 s3_stream_free);
		if (!resp) {
			free(s);
			http_send_nomem(rq);
			goto out;
		}
		r = NULL;	/* the response owns it now */
		rq->bytes_out += s->len;
	}
	if (!resp) {
		http_send_nomem(rq);
		goto out;
	}
	s3_object_headers(rq, resp, o);
	if (ranged) {
		char cr[80];

		snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)first,
			 (unsigned long long)last, (unsigned long long)o->size);
		MHD_add_response_header(resp, "Content-Range", cr);
	} else {
		s3_checksum_header(rq, resp, o);
	}
	if (nparts) {
		char pc[24];

		snprintf(pc, sizeof(pc), "%lu", nparts);
		MHD_add_response_header(resp, "x-amz-mp-parts-count", pc);
	}
	http_send(rq, ranged ? 206 : 200, resp);
out:
	kvt_object_free(ho);
	kvt_reader_close(r);
}

/* ---- DeleteObject ------------------------------------------------------- */

/* A delete's If-Match, inside the delete's catalog transaction. */
static int s3_delete_cond(void *arg, const char *etag)
{
	return s3_etag_in(arg, etag, true) ? 0 : -ECANCELED;
}

int s3_delete_if(struct gw_req *rq, const char *key, const char *if_match)
{
	return kvt_object_delete_if(rq->srv->st, rq->route.bucket, key,
				    if_match ? s3_delete_cond : NULL, (void *)if_match);
}

void s3_op_delete_object(struct gw_req *rq)
{
	const char *if_match = http_hdr(rq, "If-Match");
	int rc;

	if (rq->route.key_len > KVT_KEY_MAX) {
		http_send_error(rq, S3_KEY_TOO_LONG, NULL);
		return;
	}
	rc = s3_delete_if(rq, rq->route.key, if_match);
	/* S3: deleting a key that is not there succeeds (but for If-Match:
	 * 404 NoSuchKey); a missing bucket does not. */
	if (rc == -ENOENT && !if_match && kvt_bucket_exists(rq->srv->st, rq->route.bucket) == 0)
		rc = 0;
	if (rc == -ECANCELED) {
		http_send_error(rq, S3_PRECONDITION_FAILED, NULL);
		return;
	}
	if (rc < 0) {
		http_send_errno_obj(rq, rq->route.bucket, rc, S3_CTX_OBJECT);
		return;
	}
	http_send_empty(rq, 204);
}

/* ---- CopyObject --------------------------------------------------------- */

/* x-amz-copy-source-if-*: S3 answers 412 for all four. */
static enum s3_code s3_copy_conditions(struct gw_req *rq, const struct kvt_object *src)
{
	enum s3_code code = s3_conditions(src, http_hdr(rq, "x-amz-copy-source-if-match"),
					  http_hdr(rq, "x-amz-copy-source-if-none-match"),
					  http_hdr(rq, "x-amz-copy-source-if-modified-since"),
					  http_hdr(rq, "x-amz-copy-source-if-unmodified-since"));

	return code == S3_NOT_MODIFIED ? S3_PRECONDITION_FAILED : code;
}

void s3_op_copy_object(struct gw_req *rq)
{
	struct gw_server *srv = rq->srv;
	const char *directive = http_hdr(rq, "x-amz-metadata-directive");
	char *sb = NULL, *sk = NULL;
	struct kvt_object *src = NULL, *info = NULL;
	struct kvt_put_opts opts;
	struct gw_buf b;
	enum s3_code code;
	bool replace;
	char date[40];
	int rc;

	code = s3_copy_source(http_hdr(rq, "x-amz-copy-source"), &sb, &sk);
	if (code != S3_OK) {
		http_send_error(rq, code, "x-amz-copy-source must be 'bucket/key', url-encoded");
		goto out;
	}
	if (directive && strcmp(directive, "COPY") != 0 && strcmp(directive, "REPLACE") != 0) {
		http_send_error(rq, S3_INVALID_ARGUMENT,
				"x-amz-metadata-directive must be COPY or REPLACE");
		goto out;
	}
	if (http_hdr(rq, "x-amz-copy-source-range")) {
		http_send_error(rq, S3_INVALID_ARGUMENT,
				"x-amz-copy-source-range belongs to UploadPartCopy");
		goto out;
	}
	replace = directive && strcmp(directive, "REPLACE") == 0;
	if (!auth_user_may(rq->user, sb)) {
		http_send_error(rq, S3_ACCESS_DENIED, NULL);
		goto out;
	}
	if (rq->route.key_len > KVT_KEY_MAX || strlen(sk) > KVT_KEY_MAX) {
		http_send_error(rq, S3_KEY_TOO_LONG, NULL);
		goto out;
	}
	rc = kvt_object_head(srv->st, sb, sk, &src);
	if (rc < 0) {
		http_send_errno_obj(rq, sb, rc, S3_CTX_OBJECT);
		goto out;
	}
	code = s3_copy_conditions(rq, src);
	if (code != S3_OK) {
		http_send_error(rq, code, NULL);
		goto out;
	}
	if (!replace && strcmp(sb, rq->route.bucket) == 0 && strcmp(sk, rq->route.key) == 0) {
		http_send_error(rq, S3_INVALID_REQUEST,
				"This copy request is illegal because it is trying to copy an object "
				"to itself without changing the object's metadata, storage class, "
				"website redirect location or encryption attributes.");
		goto out;
	}
	if (replace) {
		if (!s3_collect_meta(rq))
			goto out;
		opts = rq->put;
	} else {
		code = s3_refuse_unkept(rq);
		if (code != S3_OK) {
			http_send_error(rq, code, NULL);
			goto out;
		}
		opts = (struct kvt_put_opts){
			.content_type = src->content_type,
			.session = src->session,
			.meta = src->meta,
			.nmeta = src->nmeta,
		};
		/* A copy is one part (its ETag an MD5): the part layout stays behind. */
		for (size_t i = 0; i < src->nmeta; i++) {
			if (strcmp(src->meta[i].name, GW_PARTS_META) == 0) {
				struct kvt_meta t = src->meta[i];

				src->meta[i] = src->meta[src->nmeta - 1];
				src->meta[src->nmeta - 1] = t;
				opts.nmeta--;
				break;
			}
		}
	}
	opts.flags = KVT_PUT_MD5_ETAG | (src->pinned ? KVT_PUT_PIN : 0);
	s3_put_kind(&opts);
	if (!s3_write_cond_begin(rq, &opts))
		goto out;
	rc = kvt_object_copy(srv->st, sb, sk, rq->route.bucket, rq->route.key, &opts, &info);
	if (rc < 0 && s3_write_cond_failed(rq, rc))
		goto out;
	if (rc < 0) {
		/* The source was there a moment ago: a -ENOENT now is the target bucket. */
		http_send_errno_obj(rq, rq->route.bucket, rc, S3_CTX_OBJECT);
		goto out;
	}
	gw_buf_init(&b);
	xml_begin(&b, "CopyObjectResult");
	gw_time_iso(date, sizeof(date), info->mtime_ns);
	xml_elem(&b, "LastModified", date);
	xml_elem(&b, "ETag", info->etag);
	xml_close(&b, "CopyObjectResult");
	http_send_xml(rq, 200, &b);
out:
	kvt_object_free(src);
	kvt_object_free(info);
	free(sb);
	free(sk);
}
