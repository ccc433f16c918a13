/*
 * reader.c - reading one version of an object, with byte ranges.
 *
 * kvt_reader_open() takes the object's row and extent list in one read
 * transaction: that version keeps reading back even if the key is
 * overwritten or deleted meanwhile, until reclaim frees its segment.
 *
 * kvt_reader_pread() reads the extents that cover the range whole, up to
 * the I/O context's buffer count in flight, and copies out the requested
 * bytes once an extent's header and checksum are verified. It holds the
 * read lock of every segment it touches until the call returns, and checks
 * each segment's generation under that lock (segment.h): a reader never
 * returns a byte that is not the object's.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "util.h"

struct kvt_reader {
	struct kvt_store *st;
	struct cat_object *co;
};

int kvt_reader_open(struct kvt_store *st, const char *bucket, const char *key,
		    struct kvt_reader **out)
{
	struct kvt_reader *r;
	struct cat *c = store_cat(st);
	int64_t bucket_id;
	int rc;

	if (!c)
		return -ENOMEM;
	rc = kvt_key_valid(key);
	if (rc < 0)
		return rc;
	rc = store_bucket_id(st, bucket, &bucket_id);
	if (rc < 0)
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->st = st;
	rc = cat_begin_read(c);
	if (rc == 0) {
		rc = cat_object_get(c, bucket_id, key, 1, &r->co);
		cat_rollback(c);
	}
	if (rc < 0)
		goto fail;
	if (r->co->obj->tier == KVT_TIER_COLD || r->co->obj->tier == KVT_TIER_RECALLING) {
		rc = -ENODATA;	/* only in G4: recall brings it back */
		goto fail;
	}
	r->co->obj->bucket = strdup(bucket);
	if (!r->co->obj->bucket) {
		rc = -ENOMEM;
		goto fail;
	}
	store_touch(st, bucket_id, r->co->obj->session, r->co->extents, r->co->nextents);
	*out = r;
	return 0;
fail:
	kvt_reader_close(r);
	return rc;
}

const struct kvt_object *kvt_reader_object(const struct kvt_reader *r)
{
	return r->co->obj;
}

void kvt_reader_close(struct kvt_reader *r)
{
	if (!r)
		return;
	cat_object_free(r->co);
	free(r);
}

/* The first extent that holds byte off (extents are in object order). */
static size_t reader_find(const struct cat_object *co, uint64_t off)
{
	size_t lo = 0, hi = co->nextents;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct cat_extent *e = &co->extents[mid];

		if (e->obj_off + e->length <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Segments whose read lock this pread holds. */
struct held_locks {
	uint32_t seg[64];
	unsigned n;
};

static int reader_lock(struct kvt_store *st, int lock_fd, struct held_locks *h,
		       const struct cat_extent *e)
{
	int rc;

	for (unsigned i = 0; i < h->n; i++)
		if (h->seg[i] == e->segment)
			goto check;
	if (h->n == ARRAY_SIZE(h->seg))
		return -EAGAIN;	/* the caller finishes what it has and goes on */
	rc = seg_read_lock(lock_fd, e->segment);
	if (rc < 0)
		return rc;
	h->seg[h->n++] = e->segment;
check:
	if (e->segment >= st->nsegs || seg_map_gen(st->sf, e->segment) != e->gen)
		return -ESTALE;
	return 0;
}

static void reader_unlock_all(int lock_fd, struct held_locks *h)
{
	for (unsigned i = 0; i < h->n; i++)
		seg_read_unlock(lock_fd, h->seg[i]);
	h->n = 0;
}

int store_extent_verify(struct kvt_store *st, const void *buf, uint64_t vid,
			const struct cat_extent *e)
{
	int rc = seg_header_check(buf, vid, e->seq, e->gen, e->segment, e->length);

	if (rc == 0 && kvt_crc32c(0, (const char *)buf + SEG_HEADER_SIZE, e->length) != e->crc) {
		log_err(0, "checksum mismatch in extent %u of version %016llx (segment %u offset %llu)",
			e->seq, (unsigned long long)vid, e->segment, (unsigned long long)e->offset);
		rc = -EIO;
	}
	if (rc < 0)
		store_checksum_failure(st);
	return rc;
}

struct rslot {
	struct io_req req;
	const struct cat_extent *e;
	int busy;
};

ssize_t kvt_reader_pread(struct kvt_reader *r, void *out, size_t len, uint64_t off)
{
	struct kvt_store *st = r->st;
	const struct cat_object *co = r->co;
	struct store_thread *t = store_thread(st);
	struct held_locks held = { .n = 0 };
	struct rslot slots[16];
	struct io_ctx *io = NULL;
	uint64_t end;
	size_t next;
	unsigned inflight = 0, nslots;
	int rc = 0;

	if (!t)
		return -ENOMEM;
	if (off >= co->obj->size || len == 0)
		return 0;
	end = MIN(co->obj->size, off + len);
	rc = store_io_get(st, &io);
	if (rc < 0)
		return rc;
	nslots = MIN(io->nbufs, ARRAY_SIZE(slots));
	memset(slots, 0, sizeof(slots));
	next = reader_find(co, off);

	while (rc == 0 && (inflight > 0 || (next < co->nextents && co->extents[next].obj_off < end))) {
		struct io_req *done;
		struct rslot *s;

		/* Fill every free slot with the next extent of the range. */
		while (rc == 0 && inflight < nslots && next < co->nextents &&
		       co->extents[next].obj_off < end) {
			const struct cat_extent *e = &co->extents[next];
			unsigned i;

			for (i = 0; slots[i].busy; i++)
				;
			if (held.n == ARRAY_SIZE(held.seg) && inflight == 0)
				reader_unlock_all(t->lock_fd, &held);
			rc = reader_lock(st, t->lock_fd, &held, e);
			if (rc == -EAGAIN && inflight > 0) {
				rc = 0;	/* too many segments held: drain first */
				break;
			}
			if (rc < 0)
				break;
			if (e->offset + seg_extent_space(e->length) > st->seg_size) {
				rc = -EIO;
				break;
			}
			s = &slots[i];
			s->e = e;
			s->req = (struct io_req){
				.op = IO_READ,
				.fd = seg_fd(st->sf, e->segment),
				.buf = io_buf(io, i),
				.buf_index = (int)i,
				.len = seg_extent_space(e->length),
				.off = e->offset,
				.data = s,
			};
			rc = io_submit(io, &s->req);
			if (rc < 0)
				break;
			s->busy = 1;
			inflight++;
			next++;
		}
		if (inflight == 0)
			break;
		if (io_wait(io, &done) < 0) {
			rc = -EIO;
			break;
		}
		s = done->data;
		s->busy = 0;
		inflight--;
		if (rc < 0)
			continue;	/* draining after an error */
		if (done->res != (ssize_t)done->len) {
			rc = done->res < 0 ? (int)done->res : -EIO;
			log_err(rc, "cannot read segment %u at %llu", s->e->segment,
				(unsigned long long)s->e->offset);
			continue;
		}
		rc = store_extent_verify(st, done->buf, co->vid, s->e);
		if (rc == 0) {
			uint64_t from = MAX(off, s->e->obj_off);
			uint64_t to = MIN(end, s->e->obj_off + s->e->length);

			memcpy((char *)out + (from - off),
			       (char *)done->buf + SEG_HEADER_SIZE + (from - s->e->obj_off), to - from);
		}
	}
	/* An error leaves requests in flight only if the context broke. */
	while (inflight > 0) {
		struct io_req *done;

		if (io_wait(io, &done) < 0)
			break;
		inflight--;
	}
	reader_unlock_all(t->lock_fd, &held);
	if (inflight > 0) {
		io->inflight = 0;
		io_ctx_free(io);
	} else {
		store_io_put(st, io);
	}
	return rc < 0 ? rc : (ssize_t)(end - off);
}
