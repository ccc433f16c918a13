/*
 * writer.c - the streaming object writer.
 *
 * Bytes are staged in the I/O context's aligned buffers, one extent each
 * (header + up to st->payload_max bytes), and written to space carved from
 * this process's open segment as soon as a buffer fills, with up to IO_BUFS
 * extents in flight. Nothing is visible until commit: it waits for every
 * write, then one catalog transaction publishes the object and its extents,
 * replacing any earlier version (a transaction shared with writers of this
 * process that commit at the same time: commit.c). A failed, aborted or killed writer leaves
 * only unreferenced bytes, which reclaim frees with their segment.
 *
 *   open --write--> staging --commit--> visible
 *     \                 \--abort / error / death--> garbage (reclaimed)
 */
#include "config.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "util.h"

struct wbuf {
	int index;		/* in the I/O context */
	size_t fill;		/* payload bytes staged */
	int inflight;
	struct io_req req;
	struct store_alloc alloc;
};

struct kvt_writer {
	struct kvt_store *st;
	int64_t bucket_id;
	int bucket_cached;	/* bucket_id came from the cache: may be stale */
	char *bucket;
	char *key;
	char *session;
	char *content_type;
	char *etag;		/* given by the caller, or NULL */
	struct kvt_meta *meta;
	size_t nmeta;
	unsigned flags;
	int64_t mtime_ns;
	struct kvt_posix posix;
	int has_posix;
	uint64_t vid;
	int (*precondition)(void *arg, const char *etag);
	void *precondition_arg;

	struct io_ctx *io;
	struct wbuf *bufs;
	unsigned nbufs;
	int cur;		/* buffer being filled, or -1 */

	struct cat_extent *ext;
	size_t next, capext;
	uint64_t size;
	uint32_t crc;
	EVP_MD_CTX *md5;
	int64_t space_waited_ns;	/* for room, over all its extents */
	int failed;		/* first error, sticky */
};

/* Forgets where the object goes and how: the bytes stay. */
static void writer_untarget(struct kvt_writer *w)
{
	kvt_meta_free(w->meta, w->nmeta);
	free(w->bucket);
	free(w->key);
	free(w->session);
	free(w->content_type);
	free(w->etag);
	w->meta = NULL;
	w->nmeta = 0;
	w->bucket = w->key = w->session = w->content_type = w->etag = NULL;
	w->has_posix = 0;
}

static void writer_free(struct kvt_writer *w)
{
	if (!w)
		return;
	writer_untarget(w);
	free(w->ext);
	free(w->bufs);
	EVP_MD_CTX_free(w->md5);
	store_io_put(w->st, w->io);
	free(w);
}

static int writer_copy_opts(struct kvt_writer *w, const struct kvt_put_opts *o)
{
	size_t metalen = 0;

	w->flags = o->flags;
	w->mtime_ns = o->mtime_ns;
	w->precondition = o->precondition;
	w->precondition_arg = o->precondition_arg;
	if (o->posix) {
		w->posix = *o->posix;
		w->has_posix = 1;
	}
	if (o->content_type && !(w->content_type = strdup(o->content_type)))
		return -ENOMEM;
	if (o->etag && !(w->etag = strdup(o->etag)))
		return -ENOMEM;
	if (o->nmeta) {
		w->meta = calloc(o->nmeta, sizeof(*w->meta));
		if (!w->meta)
			return -ENOMEM;
	}
	for (size_t i = 0; i < o->nmeta; i++) {
		/* ':' names are a front end's records, not user metadata (kvtier.h). */
		if (o->meta[i].name[0] != ':')
			metalen += strlen(o->meta[i].name) + strlen(o->meta[i].value);
		w->meta[i].name = strdup(o->meta[i].name);
		w->meta[i].value = strdup(o->meta[i].value);
		w->nmeta++;
		if (!w->meta[i].name || !w->meta[i].value)
			return -ENOMEM;
	}
	/* S3 limits user metadata to 2 KB, names and values together. */
	return metalen > KVT_META_MAX ? -E2BIG : 0;
}

/* Where the object goes (bucket, key, session) and how (opts). */
static int writer_target(struct kvt_writer *w, const char *bucket, const char *key,
			 const struct kvt_put_opts *opts)
{
	static const struct kvt_put_opts none;
	int rc = kvt_key_valid(key);

	if (rc < 0)
		return rc;
	if (!opts)
		opts = &none;
	rc = store_bucket_id_cached(w->st, bucket, &w->bucket_id, &w->bucket_cached);
	if (rc == -ENOENT && bucket_internal_name(bucket)) {
		/* A daemon that started on a full disk could not make its own. */
		rc = kvt_bucket_create_internal(w->st, bucket);
		if (rc == 0)
			rc = store_bucket_id_cached(w->st, bucket, &w->bucket_id, &w->bucket_cached);
	}
	if (rc < 0)
		return rc;
	/* A session names G4's manifest of it: a key's rules (UTF-8, 1024 bytes). */
	if (opts->session && *opts->session && (rc = kvt_key_valid(opts->session)) < 0)
		return rc;
	w->bucket = strdup(bucket);
	w->key = strdup(key);
	w->session = store_session_of(w->st, key, opts->session);
	if (!w->bucket || !w->key || !w->session)
		return -ENOMEM;
	return writer_copy_opts(w, opts);
}

int kvt_writer_open(struct kvt_store *st, const char *bucket, const char *key,
		    const struct kvt_put_opts *opts, struct kvt_writer **out)
{
	struct kvt_writer *w = calloc(1, sizeof(*w));
	int rc;

	if (!w)
		return -ENOMEM;
	w->st = st;
	w->cur = -1;
	rc = kvt_store_readonly(st) ? -EROFS : writer_target(w, bucket, key, opts);
	if (rc < 0)
		goto fail;
	if (opts && opts->size > store_object_max(st)) {
		log_err(0, "'%s/%s': %llu bytes are more than this hot tier can ever hold (%llu)",
			bucket, key, (unsigned long long)opts->size,
			(unsigned long long)store_object_max(st));
		rc = -EFBIG;
		goto fail;
	}
	if (w->flags & KVT_PUT_MD5_ETAG) {
		w->md5 = EVP_MD_CTX_new();
		if (!w->md5 || EVP_DigestInit_ex(w->md5, EVP_md5(), NULL) != 1) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	w->vid = store_new_vid(st);
	*out = w;
	return 0;
fail:
	writer_free(w);
	return rc;
}

/* Reaps one completed write; records the first failure. */
static int writer_reap(struct kvt_writer *w)
{
	struct io_req *req;
	struct wbuf *b;
	int rc = io_wait(w->io, &req);

	if (rc < 0) {
		/* The context is broken: never pool it again; fail the write. */
		w->io->inflight = 0;
		io_ctx_free(w->io);
		w->io = NULL;
		return w->failed = w->failed ? w->failed : rc;
	}
	b = req->data;
	b->inflight = 0;
	if (req->res == (ssize_t)req->len) {
		store_seg_written(w->st, b->alloc.segment);
	} else if (!w->failed) {
		w->failed = req->res < 0 ? (int)req->res : -EIO;
		log_err(w->failed, "cannot write '%s/%s' to segment %u", w->bucket, w->key,
			b->alloc.segment);
	}
	b->fill = 0;
	return w->failed;
}

/* Takes a buffer that is not in flight, waiting for one if all are. */
static int writer_take_buffer(struct kvt_writer *w)
{
	int rc;

	if (!w->io) {
		rc = store_io_get(w->st, &w->io);
		if (rc < 0)
			return rc;
		w->nbufs = w->io->nbufs;
		w->bufs = calloc(w->nbufs, sizeof(*w->bufs));
		if (!w->bufs)
			return -ENOMEM;
		for (unsigned i = 0; i < w->nbufs; i++)
			w->bufs[i].index = (int)i;
	}
	for (;;) {
		for (unsigned i = 0; i < w->nbufs; i++) {
			if (!w->bufs[i].inflight) {
				w->cur = (int)i;
				w->bufs[i].fill = 0;
				return 0;
			}
		}
		rc = writer_reap(w);
		if (rc < 0)
			return rc;
	}
}

uint32_t store_extent_checksum(struct cat_extent *e, const void *payload)
{
	e->chunk0 = seg_chunk_first(e->obj_off);
	e->crc = seg_payload_crc(payload, e->length, e->chunk0, e->chunk_crc);
	/* One chunk: the extent's own checksum says it all. */
	e->nchunks = seg_chunks(e->length, e->chunk0);
	if (e->nchunks == 1)
		e->nchunks = 0;
	return e->crc;
}

/*
 * Sends the buffer being filled to the device as one extent; last: the
 * object's last one, which commit waits for at once.
 */
static int writer_flush(struct kvt_writer *w, int last)
{
	struct wbuf *b = &w->bufs[w->cur];
	char *buf = io_buf(w->io, b->index);
	uint32_t len = (uint32_t)b->fill, crc;
	uint64_t space = seg_extent_space(len);
	struct cat_extent *e;
	int rc;

	if (UTIL_GROW(w->ext, w->next, w->capext) < 0)
		return -ENOMEM;
	rc = store_alloc(w->st, space, &w->space_waited_ns, &b->alloc);
	if (rc < 0)
		return rc;
	e = &w->ext[w->next++];
	e->seq = (uint32_t)(w->next - 1);
	e->segment = b->alloc.segment;
	e->gen = b->alloc.gen;
	e->offset = b->alloc.offset;
	e->length = len;
	e->obj_off = w->size - len;
	e->hvid = w->vid;
	e->hseq = e->seq;
	/* One pass over the bytes gives the chunks', the extent's and the object's checksums. */
	crc = store_extent_checksum(e, buf + SEG_HEADER_SIZE);
	w->crc = kvt_crc32c_combine(w->crc, crc, len);
	seg_header_fill((struct seg_header *)buf, w->vid, e->seq, e->obj_off, e->gen, e->segment,
			len, crc);
	seg_extent_pad(buf, len);
	b->req = (struct io_req){
		.op = IO_WRITE,
		.fd = seg_fd(w->st->sf, e->segment),
		.buf = buf,
		.buf_index = b->index,
		.len = space,
		.off = e->offset,
		.data = b,
	};
	rc = io_submit(w->io, &b->req);
	if (rc < 0)
		return rc;
	b->inflight = 1;
	/*
	 * Keep the device busy while the next buffer fills, or while the MD5
	 * below is computed. The last extent of an object without an MD5 stays
	 * queued: commit's io_wait() submits it and waits for it in one
	 * io_uring_enter(), where a push and then a wait made two system calls
	 * (docs/benchmarks.md, "the fixed cost of a small PUT").
	 */
	if (!last || w->md5) {
		rc = io_push(w->io);
		if (rc < 0)
			return rc;
	}
	w->cur = -1;
	/*
	 * The MD5 ETag (about 700 MB/s here, the slowest pass over the bytes)
	 * is computed while the device writes them: the buffer stays as it is
	 * until the write is reaped. Buffers are flushed in the object's order.
	 */
	if (w->md5)
		EVP_DigestUpdate(w->md5, buf + SEG_HEADER_SIZE, len);
	return 0;
}

int kvt_writer_write(struct kvt_writer *w, const void *data, size_t len)
{
	const char *p = data;
	int rc;

	if (w->failed)
		return w->failed;
	if (w->size + len < w->size || w->size + len > store_object_max(w->st))
		return w->failed = -EFBIG;
	while (len > 0) {
		struct wbuf *b;
		size_t n;

		if (w->cur < 0) {
			rc = writer_take_buffer(w);
			if (rc < 0)
				return w->failed = rc;
		}
		b = &w->bufs[w->cur];
		n = MIN(len, w->st->payload_max - b->fill);
		memcpy((char *)io_buf(w->io, b->index) + SEG_HEADER_SIZE + b->fill, p, n);
		b->fill += n;
		w->size += n;
		p += n;
		len -= n;
		if (b->fill == w->st->payload_max) {
			rc = writer_flush(w, 0);
			if (rc < 0)
				return w->failed = rc;
		}
	}
	return 0;
}

/* Waits for every write in flight; returns the first failure. */
static int writer_drain(struct kvt_writer *w)
{
	while (w->io && w->io->inflight > 0)
		writer_reap(w);
	return w->failed;
}

/* Gives back every extent's claim on its segment. */
static void writer_release(struct kvt_writer *w)
{
	for (size_t i = 0; i < w->next; i++)
		store_release(w->st, w->ext[i].segment, w->ext[i].gen);
	w->next = 0;
}

static void writer_etag(struct kvt_writer *w, char *etag, size_t len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char hex[2 * 16 + 1];

	if (w->etag) {
		snprintf(etag, len, "%s", w->etag);
	} else if (w->md5 && EVP_DigestFinal_ex(w->md5, md, &mdlen) == 1 && mdlen == 16) {
		util_hex(hex, md, mdlen);
		snprintf(etag, len, "\"%s\"", hex);
	} else {
		/* Not an MD5: the "-1" suffix tells S3 clients not to compare it with one. */
		snprintf(etag, len, "\"%08x%016llx-1\"", w->crc, (unsigned long long)w->vid);
	}
}

int kvt_writer_commit(struct kvt_writer *w, struct kvt_object **info)
{
	char etag[KVT_ETAG_MAX];
	struct cat_put put;
	int pinned = 0, rc = 0;

	if (w->cur >= 0 && w->bufs[w->cur].fill > 0 && !w->failed)
		rc = writer_flush(w, 1);
	if (rc < 0)
		w->failed = rc;
	rc = writer_drain(w);
	if (rc < 0)
		goto out;
	writer_etag(w, etag, sizeof(etag));
	if (!w->mtime_ns)
		w->mtime_ns = util_now_ns();
	put = (struct cat_put){
		.bucket_id = w->bucket_id,
		.bucket = w->bucket_cached ? w->bucket : NULL,
		.key = w->key,
		.vid = w->vid,
		.size = w->size,
		.etag = etag,
		.crc32c = w->crc,
		.content_type = w->content_type,
		.meta = w->meta,
		.nmeta = w->nmeta,
		.mtime_ns = w->mtime_ns,
		.session = w->session,
		.pinned = !!(w->flags & KVT_PUT_PIN),
		.keep_pin = !!(w->flags & KVT_PUT_KEEP_PIN),
		.if_none_match = !!(w->flags & KVT_PUT_IF_NONE_MATCH),
		.precondition = w->precondition,
		.precondition_arg = w->precondition_arg,
		.nextents = w->next,
		.extents = w->ext,
	};
	store_posix_fill(&put.posix, w->has_posix ? &w->posix : NULL, w->mtime_ns);
	put.pinned_out = &pinned;	/* what KVT_PUT_KEEP_PIN found, for info */
	/* Shared with the writers that commit at the same time (commit.c). */
	rc = commit_put(w->st, &put);
	if (rc == -ENOENT && w->bucket_cached) {
		/*
		 * The bucket id came from the cache and the commit found no
		 * bucket of that name with it: another process deleted the
		 * bucket, maybe made it again (perhaps under the same id, or
		 * gave the id to another name). Ask the catalog; if the name
		 * stands for a bucket now, commit there, as a writer opened now
		 * would have.
		 */
		int64_t id;

		store_bucket_forget(w->st, w->bucket);
		if (store_bucket_id(w->st, w->bucket, &id) == 0) {
			w->bucket_id = put.bucket_id = id;
			w->bucket_cached = 0;
			put.bucket = NULL;
			rc = commit_put(w->st, &put);
		}
	}
	if (rc == 0 && info) {
		/*
		 * What was committed, from the writer itself: read back from the
		 * catalog, a DELETE or rename of the key by another process just
		 * after the commit made a PUT that had succeeded fail -ENOENT (the
		 * gateway answered NoSuchBucket), and a newer PUT gave its ETag.
		 * The strings move from w, which is freed below.
		 */
		struct kvt_object *o = calloc(1, sizeof(*o));

		if (!o) {
			rc = -ENOMEM;
			goto out;
		}
		o->bucket = w->bucket;
		o->key = w->key;
		o->size = w->size;
		snprintf(o->etag, sizeof(o->etag), "%s", etag);
		o->crc32c = w->crc;
		o->mtime_ns = w->mtime_ns;
		o->content_type = w->content_type;
		o->session = w->session;
		o->tier = KVT_TIER_HOT;
		o->pinned = pinned;
		o->meta = w->meta;
		o->nmeta = w->nmeta;
		o->posix = put.posix;
		w->bucket = w->key = w->content_type = w->session = NULL;
		w->meta = NULL;
		w->nmeta = 0;
		*info = o;
	}
	if (rc == 0)
		store_touch(w->st, w->bucket_id, NULL, w->ext, w->next);
out:
	writer_release(w);
	writer_free(w);
	return rc;
}

int kvt_writer_commit_as(struct kvt_writer *w, const char *bucket, const char *key,
			 const struct kvt_put_opts *opts, struct kvt_object **info)
{
	int md5 = opts && (opts->flags & KVT_PUT_MD5_ETAG);
	int rc = md5 && !w->md5 ? -EINVAL : 0;

	if (rc == 0) {
		writer_untarget(w);
		rc = writer_target(w, bucket, key, opts);
	}
	if (rc < 0) {
		kvt_writer_abort(w);
		return rc;
	}
	if (!md5) {
		EVP_MD_CTX_free(w->md5);
		w->md5 = NULL;
	}
	return kvt_writer_commit(w, info);
}

void kvt_writer_abort(struct kvt_writer *w)
{
	if (!w)
		return;
	writer_drain(w);
	writer_release(w);
	writer_free(w);
}
