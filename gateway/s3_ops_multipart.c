/*
 * s3_ops_multipart.c - multipart uploads.
 *
 * An upload lives in the internal bucket ".uploads" (no S3 or FUSE name can
 * reach it; bucket listings leave it out):
 *
 *   <bucket>/<upload-id>/meta    its description: the body is the object's
 *                                key; Content-Type and the metadata are the
 *                                meta object's own; mtime = Initiated
 *   <bucket>/<upload-id>/00001   part 1, ETag the MD5 of its bytes
 *   <bucket>/<upload-id>/00002   ...
 *
 * Upload ids are 128 random bits in hex, so they are unguessable and need no
 * allocation table. Parts are plain objects written by the same streaming
 * path as PutObject, so a part that fails or whose client disappears never
 * appears, and re-uploading a part number replaces it atomically.
 *
 * Complete checks the list (ascending part numbers, each part present with
 * the ETag given, every part but the last at least 5 MiB), then
 * kvt_object_compose() makes the object from the parts' extents without
 * copying a byte; the ETag is S3's: MD5 of the parts' binary MD5s, "-N".
 * The compose checks the ETags again, in the catalog transaction that takes
 * the parts: a part re-uploaded after the first check is InvalidPart, never
 * other bytes under the ETag computed from the listed ones.
 *
 *   Create --> (UploadPart | UploadPartCopy)* --> Complete --> object
 *                                            \--> Abort ----> nothing
 */
#include "config.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"
#include "log.h"
#include "s3_xml.h"
#include "util.h"

#define S3_UPLOAD_ID_LEN 32

/* "<bucket>/<upload-id>/<what>" into out. */
static void s3_upload_key(char *out, size_t len, const char *bucket, const char *id,
			  const char *what)
{
	snprintf(out, len, "%s/%s/%s", bucket, id, what);
}

static void s3_part_key(char *out, size_t len, const char *bucket, const char *id, unsigned n)
{
	snprintf(out, len, "%s/%s/%05u", bucket, id, n);
}

static bool s3_upload_id_valid(const char *id)
{
	if (!id || strlen(id) != S3_UPLOAD_ID_LEN)
		return false;
	for (const char *p = id; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/*
 * The upload named by ?uploadId for rq's bucket and key: fills *meta (the
 * meta object, with Content-Type and metadata) unless meta is NULL.
 * Answers and returns false if there is no such upload.
 */
static bool s3_upload_load(struct gw_req *rq, const char **idp, struct kvt_object **meta)
{
	const char *id = s3_route_param(&rq->route, "uploadId");
	char mkey[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16];
	struct kvt_reader *r = NULL;
	const struct kvt_object *o;
	char *key = NULL;
	bool ok = false;
	ssize_t n;
	int rc;

	if (meta)
		*meta = NULL;
	if (!s3_bucket_ok(rq, rq->route.bucket))
		return false;
	if (!s3_upload_id_valid(id)) {
		http_send_error(rq, S3_NO_SUCH_UPLOAD, NULL);
		return false;
	}
	s3_upload_key(mkey, sizeof(mkey), rq->route.bucket, id, "meta");
	rc = kvt_reader_open(rq->srv->st, GW_UPLOADS_BUCKET, mkey, &r);
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_UPLOAD);
		return false;
	}
	o = kvt_reader_object(r);
	key = malloc(o->size + 1);
	if (!key || o->size > KVT_KEY_MAX) {
		http_send_error(rq, key ? S3_INTERNAL_ERROR : S3_NO_MEMORY, NULL);
		goto out;
	}
	n = o->size ? kvt_reader_pread(r, key, o->size, 0) : 0;
	if (n != (ssize_t)o->size) {
		http_send_errno(rq, n < 0 ? (int)n : -EIO, S3_CTX_UPLOAD);
		goto out;
	}
	key[o->size] = '\0';
	/* An upload belongs to one key: another key's id is no upload of ours. */
	if (!rq->route.key || strcmp(key, rq->route.key) != 0) {
		http_send_error(rq, S3_NO_SUCH_UPLOAD, NULL);
		goto out;
	}
	if (meta) {
		rc = kvt_object_head(rq->srv->st, GW_UPLOADS_BUCKET, mkey, meta);
		if (rc < 0) {
			http_send_errno(rq, rc, S3_CTX_UPLOAD);
			goto out;
		}
	}
	*idp = id;
	ok = true;
out:
	free(key);
	kvt_reader_close(r);
	return ok;
}

/* Calls fn for every object of .uploads under prefix, all pages. */
static int s3_uploads_walk(struct gw_server *srv, const char *prefix, const char *delim,
			   int (*fn)(void *arg, const struct kvt_object *o, const char *cp),
			   void *arg)
{
	struct kvt_list_opts lo = { .prefix = prefix, .delimiter = delim, .limit = 1000 };
	char *token = NULL;
	int rc;

	for (;;) {
		struct kvt_list *l = NULL;

		lo.continuation = token;
		rc = kvt_object_list(srv->st, GW_UPLOADS_BUCKET, &lo, &l);
		if (rc == -ENOENT)
			rc = 0;		/* not made yet (a full disk at start): no uploads */
		if (rc < 0 || !l)
			break;
		for (size_t i = 0; i < l->nobjects && rc == 0; i++)
			rc = fn(arg, l->objects[i], NULL);
		for (size_t i = 0; i < l->nprefixes && rc == 0; i++)
			rc = fn(arg, NULL, l->prefixes[i]);
		free(token);
		token = NULL;
		if (rc == 0 && l->truncated && l->next_continuation) {
			token = strdup(l->next_continuation);
			if (!token)
				rc = -ENOMEM;
		}
		kvt_list_free(l);
		if (rc != 0 || !token)
			break;
	}
	free(token);
	return rc < 0 ? rc : 0;
}

struct s3_keys {
	char **v;
	size_t n;
};

static int s3_keys_add(void *arg, const struct kvt_object *o, const char *cp)
{
	struct s3_keys *k = arg;
	char **v;

	if (!o)
		return 0;
	v = realloc(k->v, (k->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	k->v = v;
	k->v[k->n] = strdup(o->key);
	if (!k->v[k->n])
		return -ENOMEM;
	k->n++;
	return 0;
}

static void s3_keys_free(struct s3_keys *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i]);
	free(k->v);
}

/* ---- counting open uploads -------------------------------------------- */

static struct gw_upload_count *s3_uploads_find(struct gw_uploads *u, const char *bucket,
					       size_t len)
{
	for (size_t i = 0; i < u->nv; i++)
		if (strlen(u->v[i].bucket) == len && memcmp(u->v[i].bucket, bucket, len) == 0)
			return &u->v[i];
	return NULL;
}

/*
 * One more upload in bucket (len bytes of it), if the limits allow (or
 * always, with force: counting what exists). S3_OK or S3_TOO_MANY_UPLOADS.
 */
static enum s3_code s3_uploads_reserve(struct gw_server *srv, const char *bucket, size_t len,
				       bool force)
{
	struct gw_uploads *u = &srv->uploads;
	struct gw_upload_count *c;
	enum s3_code code = S3_OK;

	if (len > KVT_BUCKET_MAX)
		return S3_OK;	/* no bucket name: not an upload of ours */
	pthread_mutex_lock(&u->lock);
	c = s3_uploads_find(u, bucket, len);
	if (!force && (u->total >= srv->opt.max_uploads ||
		       (c && c->n >= srv->opt.max_uploads_bucket))) {
		code = S3_TOO_MANY_UPLOADS;
		goto out;
	}
	if (!c) {
		if (UTIL_GROW(u->v, u->nv, u->cap) < 0) {
			code = S3_NO_MEMORY;
			goto out;
		}
		c = &u->v[u->nv++];
		memcpy(c->bucket, bucket, len);
		c->bucket[len] = '\0';
		c->n = 0;
	}
	c->n++;
	u->total++;
out:
	pthread_mutex_unlock(&u->lock);
	return code;
}

static void s3_uploads_release(struct gw_server *srv, const char *bucket, size_t len)
{
	struct gw_uploads *u = &srv->uploads;
	struct gw_upload_count *c;

	pthread_mutex_lock(&u->lock);
	c = s3_uploads_find(u, bucket, len);
	if (c && c->n > 0) {
		c->n--;
		u->total--;
		if (c->n == 0)
			*c = u->v[--u->nv];
	}
	pthread_mutex_unlock(&u->lock);
}

/* For a key "<bucket>/<id>/meta" of .uploads: the bucket's length, or 0. */
static size_t s3_upload_meta_bucket(const char *key)
{
	const char *slash = strchr(key, '/');
	size_t len = strlen(key);

	if (!slash || len < 5 || strcmp(key + len - 5, "/meta") != 0)
		return 0;
	return (size_t)(slash - key);
}

static int s3_uploads_count_one(void *arg, const struct kvt_object *o, const char *cp)
{
	struct gw_server *srv = arg;
	size_t blen;

	if (o && (blen = s3_upload_meta_bucket(o->key)) > 0)
		s3_uploads_reserve(srv, o->key, blen, true);
	return 0;
}

int s3_uploads_init(struct gw_server *srv)
{
	int rc = pthread_mutex_init(&srv->uploads.lock, NULL);

	if (rc)
		return -rc;
	/* One pass over .uploads (parts too): only at startup. */
	rc = s3_uploads_walk(srv, "", NULL, s3_uploads_count_one, srv);
	if (rc == 0 && srv->uploads.total)
		log_info("%u multipart uploads open in %zu buckets", srv->uploads.total,
			 srv->uploads.nv);
	return rc;
}

void s3_uploads_release_all(struct gw_server *srv)
{
	free(srv->uploads.v);
	srv->uploads.v = NULL;
	srv->uploads.nv = srv->uploads.cap = 0;
	pthread_mutex_destroy(&srv->uploads.lock);
}

int s3_uploads_purge(struct gw_server *srv, const char *prefix)
{
	char mkey[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16];
	struct s3_keys k = { 0 };
	int rc, gone = 0;
	size_t blen;

	/*
	 * The meta object first, the parts after: a part committed once the
	 * upload is gone finds no meta and removes itself (s3_part_kept); one
	 * committed before is in the listing below. Listed first, the meta
	 * went last, and a part committed in between stayed for good.
	 * Counted once, by whoever deletes the meta (Complete and Abort may race).
	 */
	snprintf(mkey, sizeof(mkey), "%smeta", prefix);
	rc = kvt_object_delete(srv->st, GW_UPLOADS_BUCKET, mkey);
	if (rc == 0 && (blen = s3_upload_meta_bucket(mkey)) > 0) {
		s3_uploads_release(srv, mkey, blen);
		gone++;
	}
	if (rc == -ENOENT)
		rc = 0;
	if (rc == 0)
		rc = s3_uploads_walk(srv, prefix, NULL, s3_keys_add, &k);
	/* Collected first, deleted after: deleting under a listing's feet skips rows. */
	for (size_t i = 0; i < k.n; i++) {
		int r2 = kvt_object_delete(srv->st, GW_UPLOADS_BUCKET, k.v[i]);

		if (r2 < 0 && r2 != -ENOENT && rc == 0)
			rc = r2;
	}
	s3_keys_free(&k);
	if (rc < 0)
		log_warn(rc, "cannot remove all of upload '%s'", prefix);
	return rc < 0 ? rc : gone;
}

struct s3_sweep {
	struct gw_server *srv;
	int64_t before_ns;
	struct s3_keys stale;		/* "<bucket>/<id>/" prefixes */
};

static int s3_sweep_one(void *arg, const struct kvt_object *o, const char *cp)
{
	struct s3_sweep *sw = arg;
	struct s3_keys one = { 0 };
	char *prefix;
	int rc;

	if (!o || !s3_upload_meta_bucket(o->key) || o->mtime_ns >= sw->before_ns)
		return 0;
	prefix = strndup(o->key, strlen(o->key) - 4);	/* keeps the '/' before "meta" */
	if (!prefix)
		return -ENOMEM;
	rc = s3_keys_add(&one, &(struct kvt_object){ .key = prefix }, NULL);
	free(prefix);
	if (rc == 0) {
		char **v = realloc(sw->stale.v, (sw->stale.n + 1) * sizeof(*v));

		if (!v) {
			rc = -ENOMEM;
		} else {
			sw->stale.v = v;
			sw->stale.v[sw->stale.n++] = one.v[0];
			one.n = 0;
		}
	}
	s3_keys_free(&one);
	return rc;
}

int s3_uploads_sweep(struct gw_server *srv)
{
	struct s3_sweep sw = { .srv = srv };
	struct timespec now;
	int rc, gone = 0;

	/* Initiated is the meta object's mtime: wall-clock time. */
	clock_gettime(CLOCK_REALTIME, &now);
	sw.before_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec -
		       (int64_t)srv->opt.upload_max_age * 1000000000LL;

	/* The listing walks parts too; the sweep runs seldom and off the request threads. */
	rc = s3_uploads_walk(srv, "", NULL, s3_sweep_one, &sw);
	for (size_t i = 0; i < sw.stale.n; i++) {
		int r2 = s3_uploads_purge(srv, sw.stale.v[i]);

		if (r2 > 0) {
			gone += r2;
			log_info("removed stale multipart upload '%.*s' (older than %llu s)",
				 (int)strlen(sw.stale.v[i]) - 1, sw.stale.v[i],
				 (unsigned long long)srv->opt.upload_max_age);
		}
	}
	s3_keys_free(&sw.stale);
	return rc < 0 ? rc : gone;
}

/* ---- Create ------------------------------------------------------------- */

void s3_op_create_multipart(struct gw_req *rq)
{
	uint8_t rnd[S3_UPLOAD_ID_LEN / 2];
	char id[S3_UPLOAD_ID_LEN + 1], mkey[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16];
	struct kvt_writer *w = NULL;
	struct kvt_put_opts opts;
	enum s3_code code;
	struct gw_buf b;
	int rc;

	if (!s3_bucket_ok(rq, rq->route.bucket))
		return;
	if (rq->route.key_len > KVT_KEY_MAX) {
		http_send_error(rq, S3_KEY_TOO_LONG, NULL);
		return;
	}
	if (kvt_key_valid(rq->route.key) < 0) {
		http_send_error(rq, S3_INVALID_ARGUMENT, "Object keys must be valid UTF-8");
		return;
	}
	if (!s3_collect_meta(rq))
		return;
	if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
		http_send_error(rq, S3_INTERNAL_ERROR, NULL);
		return;
	}
	gw_hex(id, rnd, sizeof(rnd));
	code = s3_uploads_reserve(rq->srv, rq->route.bucket, strlen(rq->route.bucket), false);
	if (code != S3_OK) {
		log_warn(0, "request %s: refused a multipart upload in '%s': %u open in all "
			 "(max_uploads %u), max_uploads_per_bucket %u", rq->id, rq->route.bucket,
			 __atomic_load_n(&rq->srv->uploads.total, __ATOMIC_RELAXED),
			 rq->srv->opt.max_uploads, rq->srv->opt.max_uploads_bucket);
		http_send_error(rq, code, NULL);
		return;
	}
	s3_upload_key(mkey, sizeof(mkey), rq->route.bucket, id, "meta");
	opts = rq->put;
	opts.session = NULL;	/* .uploads' own; the object's comes from its metadata */
	opts.flags = 0;
	rc = kvt_writer_open(rq->srv->st, GW_UPLOADS_BUCKET, mkey, &opts, &w);
	if (rc == 0)
		rc = kvt_writer_write(w, rq->route.key, rq->route.key_len);
	if (rc == 0) {
		rc = kvt_writer_commit(w, NULL);
		w = NULL;
	}
	kvt_writer_abort(w);
	if (rc < 0) {
		s3_uploads_release(rq->srv, rq->route.bucket, strlen(rq->route.bucket));
		http_send_errno(rq, rc, S3_CTX_OBJECT);
		return;
	}
	gw_buf_init(&b);
	xml_begin(&b, "InitiateMultipartUploadResult");
	xml_elem(&b, "Bucket", rq->route.bucket);
	xml_elem(&b, "Key", rq->route.key);
	xml_elem(&b, "UploadId", id);
	xml_close(&b, "InitiateMultipartUploadResult");
	http_send_xml(rq, 200, &b);
}

/* ---- UploadPart --------------------------------------------------------- */

static bool s3_part_number(struct gw_req *rq, unsigned *out)
{
	const char *v = s3_route_param(&rq->route, "partNumber");
	char *end;
	unsigned long n;

	if (!v || !*v)
		goto bad;
	n = strtoul(v, &end, 10);
	if (*end || n < 1 || n > GW_MAX_PART_NUMBER)
		goto bad;
	*out = (unsigned)n;
	return true;
bad:
	http_send_error(rq, S3_INVALID_ARGUMENT,
			"Part number must be an integer between 1 and 10000, inclusive");
	return false;
}

void s3_op_upload_part_start(struct gw_req *rq)
{
	char pkey[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16], etag[KVT_ETAG_MAX];
	struct kvt_put_opts opts = { .flags = KVT_PUT_MD5_ETAG };
	struct kvt_writer *w = NULL;
	const char *id = NULL;
	const char *cl = http_hdr(rq, "Content-Length");
	uint64_t size = rq->decoded_len >= 0 ? (uint64_t)rq->decoded_len
					     : (cl ? strtoull(cl, NULL, 10) : 0);
	unsigned n;
	int rc;

	if (!s3_part_number(rq, &n) || !s3_upload_load(rq, &id, NULL))
		return;
	if (size > rq->srv->opt.max_object) {
		http_send_error(rq, S3_ENTITY_TOO_LARGE, NULL);
		return;
	}
	s3_part_key(pkey, sizeof(pkey), rq->route.bucket, id, n);
	if (http_content_md5_etag(rq, etag, sizeof(etag)))
		opts = (struct kvt_put_opts){ .etag = etag };
	opts.size = size;
	rc = kvt_writer_open(rq->srv->st, GW_UPLOADS_BUCKET, pkey, &opts, &w);
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_UPLOAD);
		return;
	}
	http_body_to_writer(rq, w);
}

/*
 * After a part's commit: whether its upload still exists. A part that met
 * an Abort or a Complete of its upload (its body still arriving) was
 * answered 200 and stayed for good, pinned in the internal bucket, which
 * no sweep looks at without its meta; it is removed here, and the client
 * gets NoSuchUpload as S3 answers.
 */
static bool s3_part_kept(struct gw_req *rq, const char *id, const char *pkey)
{
	char mkey[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16];
	struct kvt_object *meta = NULL;
	int rc;

	s3_upload_key(mkey, sizeof(mkey), rq->route.bucket, id, "meta");
	rc = kvt_object_head(rq->srv->st, GW_UPLOADS_BUCKET, mkey, &meta);
	kvt_object_free(meta);
	if (rc == 0)
		return true;
	kvt_object_delete(rq->srv->st, GW_UPLOADS_BUCKET, pkey);
	http_send_errno(rq, rc, S3_CTX_UPLOAD);
	return false;
}

void s3_op_upload_part(struct gw_req *rq)
{
	struct kvt_writer *w = rq->writer;
	struct kvt_object *info = NULL;
	struct MHD_Response *resp;
	int rc;

	rq->writer = NULL;
	rc = kvt_writer_commit(w, &info);
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_UPLOAD);
		return;
	}
	if (!s3_part_kept(rq, s3_route_param(&rq->route, "uploadId"), info->key)) {
		kvt_object_free(info);
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

/*
 * x-amz-copy-source-range: "bytes=first-last", both given, in decimal
 * digits, inside the source. Not sscanf("%llu"), which took " 1", "+1" and
 * "-1", the last as 2^64 - 1: "bytes=0--18446744073709551615" copied bytes
 * 0 to 1. A number past 2^64 - 1 reads as 2^64 - 1, past every source.
 */
static bool s3_copy_range(const char *v, uint64_t size, uint64_t *first, uint64_t *len)
{
	unsigned long long a, b;
	char *end;

	if (!v) {
		*first = 0;
		*len = size;
		return true;
	}
	if (strncmp(v, "bytes=", 6) != 0 || v[6] < '0' || v[6] > '9')
		return false;
	a = strtoull(v + 6, &end, 10);
	if (end[0] != '-' || end[1] < '0' || end[1] > '9')
		return false;
	b = strtoull(end + 1, &end, 10);
	if (*end != '\0' || b < a || b >= size)
		return false;
	*first = a;
	*len = b - a + 1;
	return true;
}

void s3_op_upload_part_copy(struct gw_req *rq)
{
	char pkey[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16], date[40];
	struct kvt_put_opts opts = { .flags = KVT_PUT_MD5_ETAG };
	struct kvt_reader *r = NULL;
	struct kvt_writer *w = NULL;
	struct kvt_object *info = NULL;
	const struct kvt_object *src;
	char *sb = NULL, *sk = NULL, *buf = NULL;
	const char *id = NULL;
	uint64_t first, len, done = 0;
	enum s3_code code;
	struct gw_buf b;
	unsigned n;
	int rc;

	if (!s3_part_number(rq, &n) || !s3_upload_load(rq, &id, NULL))
		return;
	code = s3_copy_source(http_hdr(rq, "x-amz-copy-source"), &sb, &sk);
	if (code != S3_OK) {
		http_send_error(rq, code, "x-amz-copy-source must be 'bucket/key', url-encoded");
		goto out;
	}
	if (!auth_user_may(rq->user, sb)) {
		http_send_error(rq, S3_ACCESS_DENIED, NULL);
		goto out;
	}
	rc = kvt_reader_open(rq->srv->st, sb, sk, &r);
	if (rc < 0) {
		http_send_errno_obj(rq, sb, rc, S3_CTX_OBJECT);
		goto out;
	}
	src = kvt_reader_object(r);
	code = s3_conditions(src, http_hdr(rq, "x-amz-copy-source-if-match"),
			     http_hdr(rq, "x-amz-copy-source-if-none-match"),
			     http_hdr(rq, "x-amz-copy-source-if-modified-since"),
			     http_hdr(rq, "x-amz-copy-source-if-unmodified-since"));
	if (code != S3_OK) {
		http_send_error(rq, S3_PRECONDITION_FAILED, NULL);
		goto out;
	}
	if (!s3_copy_range(http_hdr(rq, "x-amz-copy-source-range"), src->size, &first, &len)) {
		http_send_error(rq, S3_INVALID_ARGUMENT,
				"The x-amz-copy-source-range value must be of the form "
				"bytes=first-last where first and last are inside the source");
		goto out;
	}
	s3_part_key(pkey, sizeof(pkey), rq->route.bucket, id, n);
	buf = malloc(1u << 20);
	rc = buf ? kvt_writer_open(rq->srv->st, GW_UPLOADS_BUCKET, pkey, &opts, &w) : -ENOMEM;
	while (rc == 0 && done < len) {
		ssize_t got = kvt_reader_pread(r, buf, (size_t)GW_MIN(len - done, 1u << 20),
					       first + done);

		if (got <= 0)
			rc = got < 0 ? (int)got : -EIO;
		else
			rc = kvt_writer_write(w, buf, (size_t)got);
		done += got > 0 ? (uint64_t)got : 0;
	}
	if (rc == 0) {
		rc = kvt_writer_commit(w, &info);
		w = NULL;
	}
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_UPLOAD);
		goto out;
	}
	if (!s3_part_kept(rq, id, pkey))
		goto out;
	gw_buf_init(&b);
	xml_begin(&b, "CopyPartResult");
	gw_time_iso(date, sizeof(date), info->mtime_ns);
	xml_elem(&b, "LastModified", date);
	xml_elem(&b, "ETag", info->etag);
	xml_close(&b, "CopyPartResult");
	http_send_xml(rq, 200, &b);
out:
	kvt_writer_abort(w);
	kvt_reader_close(r);
	kvt_object_free(info);
	free(buf);
	free(sb);
	free(sk);
}

/* ---- Complete ----------------------------------------------------------- */

/* "abc", "\"abc\"": the hex inside the quotes. */
static void s3_etag_bare(char *out, size_t len, const char *etag)
{
	size_t n;

	if (*etag == '"')
		etag++;
	n = strlen(etag);
	if (n && etag[n - 1] == '"')
		n--;
	snprintf(out, len, "%.*s", (int)n, etag);
}

static int s3_hex16(const char *hex, uint8_t out[16])
{
	for (int i = 0; i < 16; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return strlen(hex) == 32 ? 0 : -1;
}

/* Appends part size to the run-length list of GW_PARTS_META. */
static void s3_parts_run(struct gw_buf *runs, uint64_t *run_size, unsigned *run_n, uint64_t size,
			 bool last)
{
	if (*run_n && size != *run_size) {
		if (runs->len)
			gw_buf_putc(runs, ',');
		gw_buf_printf(runs, "%llu*%u", (unsigned long long)*run_size, *run_n);
		*run_n = 0;
	}
	*run_size = size;
	(*run_n)++;
	if (last) {
		if (runs->len)
			gw_buf_putc(runs, ',');
		gw_buf_printf(runs, "%llu*%u", (unsigned long long)*run_size, *run_n);
	}
}

void s3_op_complete_multipart(struct gw_req *rq)
{
	struct gw_server *srv = rq->srv;
	struct xml_partlist pl = { 0 };
	struct kvt_object *meta = NULL, *info = NULL;
	struct kvt_meta *allmeta = NULL;
	char **keys = NULL, **etags = NULL;
	EVP_MD_CTX *md5 = NULL;
	struct kvt_put_opts opts = { 0 };
	struct gw_buf runs;
	uint64_t run_size = 0;
	unsigned run_n = 0;
	const char *id = NULL;
	char etag[KVT_ETAG_MAX], prefix[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 4];
	struct gw_buf b;
	enum s3_code code;
	uint8_t d[16];
	unsigned dn = 0;
	int rc;

	gw_buf_init(&runs);
	if (!s3_upload_load(rq, &id, &meta))
		goto out;
	code = xml_parse_complete(rq->body.data, rq->body.len, &pl);
	if (code != S3_OK) {
		http_send_error(rq, code, NULL);
		goto out;
	}
	/* If-Match / If-None-Match on the object; the upload stays if they fail. */
	if (!s3_write_cond_begin(rq, &opts))
		goto out;
	keys = calloc(pl.n, sizeof(*keys));
	etags = calloc(pl.n, sizeof(*etags));
	md5 = EVP_MD_CTX_new();
	if (!keys || !etags || !md5 || EVP_DigestInit_ex(md5, EVP_md5(), NULL) != 1) {
		http_send_error(rq, S3_NO_MEMORY, NULL);
		goto out;
	}
	/* Order first, as S3: a list out of order is wrong whatever the parts are. */
	for (size_t i = 1; i < pl.n; i++) {
		if (pl.parts[i].number <= pl.parts[i - 1].number) {
			http_send_error(rq, S3_INVALID_PART_ORDER, NULL);
			goto out;
		}
	}
	for (size_t i = 0; i < pl.n; i++) {
		char want[KVT_ETAG_MAX + 8], have[KVT_ETAG_MAX];
		struct kvt_object *part = NULL;
		uint8_t bin[16];

		keys[i] = malloc(KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16);
		if (!keys[i]) {
			http_send_error(rq, S3_NO_MEMORY, NULL);
			goto out;
		}
		s3_part_key(keys[i], KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16, rq->route.bucket, id,
			    pl.parts[i].number);
		rc = kvt_object_head(srv->st, GW_UPLOADS_BUCKET, keys[i], &part);
		if (rc < 0) {
			http_send_error(rq, rc == -ENOENT ? S3_INVALID_PART : s3_err_from_errno(rc, 0),
					NULL);
			goto out;
		}
		s3_etag_bare(want, sizeof(want), pl.parts[i].etag);
		s3_etag_bare(have, sizeof(have), part->etag);
		if (strcmp(want, have) != 0 || s3_hex16(have, bin) < 0) {
			kvt_object_free(part);
			http_send_error(rq, S3_INVALID_PART, NULL);
			goto out;
		}
		if (i + 1 < pl.n && part->size < srv->opt.min_part) {
			char msg[160];

			snprintf(msg, sizeof(msg), "Part %u is %llu bytes: every part but the last "
				 "must be at least %llu bytes.", pl.parts[i].number,
				 (unsigned long long)part->size, (unsigned long long)srv->opt.min_part);
			kvt_object_free(part);
			http_send_error(rq, S3_ENTITY_TOO_SMALL, msg);
			goto out;
		}
		s3_parts_run(&runs, &run_size, &run_n, part->size, i + 1 == pl.n);
		/* The very ETag checked, for the compose to check again. */
		etags[i] = strdup(part->etag);
		kvt_object_free(part);
		if (!etags[i]) {
			http_send_error(rq, S3_NO_MEMORY, NULL);
			goto out;
		}
		EVP_DigestUpdate(md5, bin, 16);
	}
	EVP_DigestFinal_ex(md5, d, &dn);
	{
		char hex[33];

		gw_hex(hex, d, 16);
		snprintf(etag, sizeof(etag), "\"%s-%zu\"", hex, pl.n);
	}
	opts.content_type = meta->content_type;
	opts.meta = meta->meta;
	opts.nmeta = meta->nmeta;
	opts.etag = etag;
	for (size_t i = 0; i < meta->nmeta; i++)
		if (strcmp(meta->meta[i].name, "kvtier-session") == 0)
			opts.session = meta->meta[i].value;
	/* The part layout, for GET ?partNumber; the strings stay meta's and runs'. */
	if (!gw_buf_failed(&runs) && runs.len <= GW_PARTS_META_MAX) {
		allmeta = calloc(meta->nmeta + 1, sizeof(*allmeta));
		if (!allmeta) {
			http_send_error(rq, S3_NO_MEMORY, NULL);
			goto out;
		}
		if (meta->nmeta)
			memcpy(allmeta, meta->meta, meta->nmeta * sizeof(*allmeta));
		allmeta[meta->nmeta] = (struct kvt_meta){ (char *)GW_PARTS_META,
							  (char *)gw_buf_str(&runs) };
		opts.meta = allmeta;
		opts.nmeta = meta->nmeta + 1;
	}
	s3_put_kind(&opts);
	rc = kvt_object_compose(srv->st, rq->route.bucket, rq->route.key, GW_UPLOADS_BUCKET,
				(const char *const *)keys, (const char *const *)etags, pl.n,
				&opts, &info);
	if (rc < 0 && s3_write_cond_failed(rq, rc))
		goto out;
	if (rc < 0) {
		/* A part gone meanwhile (another Complete or an Abort won the race),
		 * or re-uploaded since the check above with other bytes. */
		http_send_error(rq, rc == -ENOENT || rc == -ESTALE ? S3_INVALID_PART
								 : s3_err_from_errno(rc, 0), NULL);
		goto out;
	}
	/* The object is visible; what is left of the upload is garbage. */
	snprintf(prefix, sizeof(prefix), "%s/%s/", rq->route.bucket, id);
	s3_uploads_purge(srv, prefix);
	gw_buf_init(&b);
	xml_begin(&b, "CompleteMultipartUploadResult");
	{
		const char *host = http_hdr(rq, "Host");
		struct gw_buf loc;

		gw_buf_init(&loc);
		gw_buf_printf(&loc, "http://%s/%s/", host ? host : "localhost", rq->route.bucket);
		gw_url_encode(&loc, rq->route.key, rq->route.key_len, true);
		xml_elem(&b, "Location", gw_buf_str(&loc));
		gw_buf_release(&loc);
	}
	xml_elem(&b, "Bucket", rq->route.bucket);
	xml_elem(&b, "Key", rq->route.key);
	xml_elem(&b, "ETag", info->etag);
	xml_close(&b, "CompleteMultipartUploadResult");
	http_send_xml(rq, 200, &b);
out:
	for (size_t i = 0; i < pl.n; i++) {
		free(keys ? keys[i] : NULL);
		free(etags ? etags[i] : NULL);
	}
	free(keys);
	free(etags);
	free(allmeta);
	gw_buf_release(&runs);
	EVP_MD_CTX_free(md5);
	xml_partlist_release(&pl);
	kvt_object_free(meta);
	kvt_object_free(info);
}

/* ---- Abort, ListParts, ListMultipartUploads ----------------------------- */

void s3_op_abort_multipart(struct gw_req *rq)
{
	char prefix[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 4];
	const char *id = NULL;

	if (!s3_upload_load(rq, &id, NULL))
		return;
	snprintf(prefix, sizeof(prefix), "%s/%s/", rq->route.bucket, id);
	if (s3_uploads_purge(rq->srv, prefix) < 0) {
		http_send_error(rq, S3_INTERNAL_ERROR, NULL);
		return;
	}
	http_send_empty(rq, 204);
}

struct s3_parts {
	struct kvt_object **v;
	size_t n;
};

static int s3_parts_add(void *arg, const struct kvt_object *o, const char *cp)
{
	struct s3_parts *p = arg;
	struct kvt_object **v, *c;
	const char *slash;

	if (!o || !(slash = strrchr(o->key, '/')) || strcmp(slash + 1, "meta") == 0)
		return 0;
	v = realloc(p->v, (p->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->v = v;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct kvt_object){ .size = o->size, .mtime_ns = o->mtime_ns };
	memcpy(c->etag, o->etag, sizeof(c->etag));
	c->key = strdup(slash + 1);
	if (!c->key) {
		free(c);
		return -ENOMEM;
	}
	p->v[p->n++] = c;
	return 0;
}

void s3_op_list_parts(struct gw_req *rq)
{
	const char *id = NULL, *marker_s, *max_s;
	char prefix[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 4];
	struct s3_parts parts = { 0 };
	unsigned long marker = 0, max = 1000;
	size_t shown = 0;
	unsigned last = 0;
	bool truncated = false;
	struct gw_buf b;
	int rc;

	if (!s3_upload_load(rq, &id, NULL))
		return;
	marker_s = s3_route_param(&rq->route, "part-number-marker");
	max_s = s3_route_param(&rq->route, "max-parts");
	if (marker_s)
		marker = strtoul(marker_s, NULL, 10);
	if (max_s) {
		char *end;

		max = strtoul(max_s, &end, 10);
		if (*end || !*max_s) {
			http_send_error(rq, S3_INVALID_ARGUMENT, "max-parts must be an integer");
			return;
		}
		if (max > 1000)
			max = 1000;
	}
	snprintf(prefix, sizeof(prefix), "%s/%s/", rq->route.bucket, id);
	rc = s3_uploads_walk(rq->srv, prefix, NULL, s3_parts_add, &parts);
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_UPLOAD);
		goto out;
	}
	gw_buf_init(&b);
	xml_begin(&b, "ListPartsResult");
	xml_elem(&b, "Bucket", rq->route.bucket);
	xml_elem(&b, "Key", rq->route.key);
	xml_elem(&b, "UploadId", id);
	xml_elemf(&b, "PartNumberMarker", "%lu", marker);
	for (size_t i = 0; i < parts.n; i++) {
		unsigned num = (unsigned)strtoul(parts.v[i]->key, NULL, 10);
		char date[40];

		if (num <= marker)
			continue;
		if (shown == max) {
			truncated = true;
			break;
		}
		gw_time_iso(date, sizeof(date), parts.v[i]->mtime_ns);
		xml_open(&b, "Part");
		xml_elemf(&b, "PartNumber", "%u", num);
		xml_elem(&b, "LastModified", date);
		xml_elem(&b, "ETag", parts.v[i]->etag);
		xml_elemf(&b, "Size", "%llu", (unsigned long long)parts.v[i]->size);
		xml_close(&b, "Part");
		shown++;
		last = num;
	}
	xml_elemf(&b, "NextPartNumberMarker", "%u", last);
	xml_elemf(&b, "MaxParts", "%lu", max);
	xml_elem(&b, "IsTruncated", truncated ? "true" : "false");
	xml_open(&b, "Initiator");
	xml_elem(&b, "ID", rq->user->access);
	xml_elem(&b, "DisplayName", rq->user->access);
	xml_close(&b, "Initiator");
	xml_open(&b, "Owner");
	xml_elem(&b, "ID", rq->user->access);
	xml_elem(&b, "DisplayName", rq->user->access);
	xml_close(&b, "Owner");
	xml_elem(&b, "StorageClass", "STANDARD");
	xml_close(&b, "ListPartsResult");
	http_send_xml(rq, 200, &b);
out:
	for (size_t i = 0; i < parts.n; i++)
		kvt_object_free(parts.v[i]);
	free(parts.v);
}

struct s3_upload {
	char *key;
	char id[S3_UPLOAD_ID_LEN + 1];
	int64_t initiated_ns;
};

struct s3_uploads {
	struct gw_req *rq;
	struct s3_upload *v;
	size_t n;
};

/* One "<bucket>/<id>/" common prefix: read its meta object for the key. */
static int s3_uploads_add(void *arg, const struct kvt_object *o, const char *cp)
{
	struct s3_uploads *u = arg;
	char mkey[KVT_BUCKET_MAX + S3_UPLOAD_ID_LEN + 16];
	struct kvt_reader *r = NULL;
	const struct kvt_object *mo;
	const char *id;
	struct s3_upload *v;
	size_t len;
	char *key;
	ssize_t n;

	if (!cp)
		return 0;
	id = strchr(cp, '/');
	if (!id)
		return 0;
	id++;
	len = strlen(id);
	if (len != S3_UPLOAD_ID_LEN + 1)
		return 0;
	snprintf(mkey, sizeof(mkey), "%smeta", cp);
	if (kvt_reader_open(u->rq->srv->st, GW_UPLOADS_BUCKET, mkey, &r) < 0)
		return 0;	/* completed or aborted meanwhile, or parts without meta */
	mo = kvt_reader_object(r);
	key = mo->size <= KVT_KEY_MAX ? malloc(mo->size + 1) : NULL;
	if (!key) {
		kvt_reader_close(r);
		return 0;
	}
	n = mo->size ? kvt_reader_pread(r, key, mo->size, 0) : 0;
	if (n != (ssize_t)mo->size) {
		free(key);
		kvt_reader_close(r);
		return 0;
	}
	key[mo->size] = '\0';
	v = realloc(u->v, (u->n + 1) * sizeof(*v));
	if (!v) {
		free(key);
		kvt_reader_close(r);
		return -ENOMEM;
	}
	u->v = v;
	u->v[u->n].key = key;
	memcpy(u->v[u->n].id, id, S3_UPLOAD_ID_LEN);
	u->v[u->n].id[S3_UPLOAD_ID_LEN] = '\0';
	u->v[u->n].initiated_ns = mo->mtime_ns;
	u->n++;
	kvt_reader_close(r);
	return 0;
}

static int s3_upload_cmp(const void *a, const void *b)
{
	const struct s3_upload *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	if (c)
		return c;
	/*
	 * Same key: by upload id, the order upload-id-marker pages in (S3
	 * lists an upload of key-marker only if its id is greater). An order
	 * by initiation time could not say where a marker upload aborted
	 * between pages stood, and its next page skipped every upload of
	 * that key.
	 */
	return strcmp(x->id, y->id);
}

/* One entry of a ListMultipartUploads page: an upload, or the common prefix
 * (its key's first cp_len bytes) that it and its neighbours roll up into. */
struct s3_upload_pick {
	const struct s3_upload *e;
	size_t cp_len;
};

void s3_op_list_multipart_uploads(struct gw_req *rq)
{
	const char *prefix = s3_route_param(&rq->route, "prefix");
	const char *delim = s3_route_param(&rq->route, "delimiter");
	const char *key_marker = s3_route_param(&rq->route, "key-marker");
	const char *id_marker = s3_route_param(&rq->route, "upload-id-marker");
	const char *max_s = s3_route_param(&rq->route, "max-uploads");
	const size_t plen = prefix ? strlen(prefix) : 0;
	struct s3_uploads u = { .rq = rq };
	struct s3_upload_pick *pick = NULL;
	char bprefix[KVT_BUCKET_MAX + 2];
	unsigned long max = 1000;
	size_t npick = 0, i;
	bool truncated = false, started;
	const struct s3_upload *lastu = NULL;
	struct gw_buf b;
	int rc;

	if (!s3_bucket_ok(rq, rq->route.bucket))
		return;
	if (max_s) {
		char *end;

		max = strtoul(max_s, &end, 10);
		if (*end || !*max_s) {
			http_send_error(rq, S3_INVALID_ARGUMENT, "max-uploads must be an integer");
			return;
		}
		if (max > 1000)
			max = 1000;
	}
	if (delim && !*delim)
		delim = NULL;
	snprintf(bprefix, sizeof(bprefix), "%s/", rq->route.bucket);
	rc = s3_uploads_walk(rq->srv, bprefix, "/", s3_uploads_add, &u);
	if (rc == 0 && u.n && !(pick = calloc(u.n, sizeof(*pick))))
		rc = -ENOMEM;
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_ANY);
		goto out;
	}
	if (u.n > 1)
		qsort(u.v, u.n, sizeof(*u.v), s3_upload_cmp);
	/*
	 * The page: entries under prefix past (key-marker, upload-id-marker)
	 * in the order above, whether or not that upload still exists, as S3
	 * pages them. With a delimiter, keys holding one after the prefix
	 * roll up into a common prefix that counts once against max-uploads.
	 */
	started = !key_marker || !*key_marker;
	for (i = 0; i < u.n; i++) {
		const struct s3_upload *e = &u.v[i];
		const char *d;
		size_t cp_len = 0;

		if (prefix && strncmp(e->key, prefix, plen) != 0)
			continue;
		if (!started) {
			int c = strcmp(e->key, key_marker);

			if (c < 0 || (c == 0 && (!id_marker || !*id_marker ||
						 strcmp(e->id, id_marker) <= 0)))
				continue;
			started = true;
		}
		if (delim && (d = strstr(e->key + plen, delim)))
			cp_len = (size_t)(d - e->key) + strlen(delim);
		if (cp_len && npick && pick[npick - 1].cp_len == cp_len &&
		    strncmp(pick[npick - 1].e->key, e->key, cp_len) == 0) {
			lastu = e;	/* one more upload under the same common prefix */
			continue;
		}
		if (npick == max) {
			truncated = true;
			break;
		}
		pick[npick++] = (struct s3_upload_pick){ e, cp_len };
		lastu = e;
	}
	gw_buf_init(&b);
	xml_begin(&b, "ListMultipartUploadsResult");
	xml_elem(&b, "Bucket", rq->route.bucket);
	xml_elem(&b, "KeyMarker", key_marker ? key_marker : "");
	xml_elem(&b, "UploadIdMarker", id_marker ? id_marker : "");
	if (prefix)
		xml_elem(&b, "Prefix", prefix);
	if (delim)
		xml_elem(&b, "Delimiter", delim);
	xml_elemf(&b, "MaxUploads", "%lu", max);
	xml_elem(&b, "IsTruncated", truncated ? "true" : "false");
	if (truncated && lastu) {
		xml_elem(&b, "NextKeyMarker", lastu->key);
		xml_elem(&b, "NextUploadIdMarker", lastu->id);
	}
	for (i = 0; i < npick; i++) {
		const struct s3_upload *e = pick[i].e;
		char date[40];

		if (pick[i].cp_len)
			continue;
		gw_time_iso(date, sizeof(date), e->initiated_ns);
		xml_open(&b, "Upload");
		xml_elem(&b, "Key", e->key);
		xml_elem(&b, "UploadId", e->id);
		xml_open(&b, "Initiator");
		xml_elem(&b, "ID", rq->user->access);
		xml_elem(&b, "DisplayName", rq->user->access);
		xml_close(&b, "Initiator");
		xml_open(&b, "Owner");
		xml_elem(&b, "ID", rq->user->access);
		xml_elem(&b, "DisplayName", rq->user->access);
		xml_close(&b, "Owner");
		xml_elem(&b, "StorageClass", "STANDARD");
		xml_elem(&b, "Initiated", date);
		xml_close(&b, "Upload");
	}
	for (i = 0; i < npick; i++) {
		char *cp;

		if (!pick[i].cp_len)
			continue;
		cp = strndup(pick[i].e->key, pick[i].cp_len);
		if (!cp) {
			b.failed = true;	/* http_send_xml answers no-memory */
			break;
		}
		xml_open(&b, "CommonPrefixes");
		xml_elem(&b, "Prefix", cp);
		xml_close(&b, "CommonPrefixes");
		free(cp);
	}
	xml_close(&b, "ListMultipartUploadsResult");
	http_send_xml(rq, 200, &b);
out:
	for (i = 0; i < u.n; i++)
		free(u.v[i].key);
	free(u.v);
	free(pick);
}
