/*
 * reader.c - reading one version of an object, with byte ranges.
 *
 * kvt_reader_open() takes the object's row and extent list in one read
 * transaction: that version keeps reading back even if the key is
 * overwritten or deleted meanwhile, until reclaim frees its segment.
 *
 * kvt_reader_pread() reads the extents that cover the range whole, up to
 * the I/O context's buffer count in flight, and copies out the requested
 * bytes once an extent's header and checksum are verified and its segment's
 * generation is unchanged across the read (segment.h): a reader never
 * returns a byte that is not the object's. When reclaim moved a pinned
 * object's extents (same version, new place), the reader looks them up
 * again and goes on; when it dropped them, the read fails with -ESTALE.
 *
 * kvt_reader_pread_map() reads as pread does but leaves the bytes in the I/O
 * context's buffers and gives them as iovecs, held until kvt_map_free(),
 * for a sender that hands them to the kernel without a copy of its own.
 *
 * kvt_reader_map() gives the range as iovecs into the segments' mappings
 * (seg_mapped) instead, for a sender that hands them to the kernel: it pins
 * each segment before it checks the extent's generation, so the checked
 * bytes cannot be rewritten while they are sent (segment.h, pins), and it
 * verifies the header and checksum in place, on every map, as pread does.
 *
 * One reader may be used from several threads at once (the FUSE mount reads
 * one open file from as many threads as the kernel sends it requests): the
 * passes over the extent list share r->lock, and the refresh after -ESTALE
 * takes it alone, once for all the passes that saw the same list.
 *
 * Extents of at most store.cached_read_max payload bytes are read through
 * the page cache (seg_cached_fd), larger ones with O_DIRECT. Both are
 * verified the same way: the cache saves the device I/O of a small object
 * read again (on a virtual machine most of its cost), not the check.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "util.h"

/* Recalls of one open before it gives up on an object sent back meanwhile. */
#define READER_RECALL_TRIES 3

struct kvt_reader {
	struct kvt_store *st;
	struct cat_object *co;
	pthread_rwlock_t lock;	/* shared by passes, alone to replace co->extents */
	unsigned refreshes;	/* times co->extents was replaced */
	uint32_t *held;		/* segments held for reclaim to take last (kvt_reader_hold) */
	size_t nheld;
};

static int reader_open(struct kvt_store *st, const char *bucket, const char *key, int recall,
		       struct kvt_reader **out)
{
	struct kvt_reader *r;
	struct cat *c = store_cat(st);
	int rc;

	if (!c)
		return -ENOMEM;
	rc = kvt_key_valid(key);
	if (rc < 0)
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->st = st;
	pthread_rwlock_init(&r->lock, NULL);
	/* -ENOENT for a missing bucket too: callers that care ask kvt_bucket_exists(). */
	rc = cat_object_lookup(c, bucket, key, 1, &r->co);
	if (rc < 0)
		goto fail;
	if (!recall && (r->co->obj->tier == KVT_TIER_COLD ||
			r->co->obj->tier == KVT_TIER_RECALLING)) {
		rc = -EAGAIN;	/* the caller recalls elsewhere (kvt_reader_open_hot) */
		goto fail;
	}
	/*
	 * Only in G4: bring it back (migrate.c), then read it as any other.
	 * Reclaim under pressure may send it back to G4 before this looks
	 * (a hot tier smaller than what its readers read at once): recall
	 * again, a few times, rather than fail a read of a stored object.
	 */
	for (int tries = 0; r->co->obj->tier == KVT_TIER_COLD && tries < READER_RECALL_TRIES;
	     tries++) {
		cat_object_free(r->co);
		r->co = NULL;
		rc = recall_object(st, bucket, key);
		if (rc == 0)
			rc = cat_object_lookup(c, bucket, key, 1, &r->co);
		if (rc < 0)
			goto fail;
	}
	if (r->co->obj->tier == KVT_TIER_COLD || r->co->obj->tier == KVT_TIER_RECALLING) {
		rc = -ENODATA;	/* only in G4: recall brings it back */
		goto fail;
	}
	r->co->obj->bucket = strdup(bucket);
	if (!r->co->obj->bucket) {
		rc = -ENOMEM;
		goto fail;
	}
	store_touch(st, r->co->bucket_id, r->co->obj->session, r->co->extents, r->co->nextents);
	*out = r;
	return 0;
fail:
	kvt_reader_close(r);
	return rc;
}

int kvt_reader_open(struct kvt_store *st, const char *bucket, const char *key,
		    struct kvt_reader **out)
{
	return reader_open(st, bucket, key, 1, out);
}

int kvt_reader_open_hot(struct kvt_store *st, const char *bucket, const char *key,
			struct kvt_reader **out)
{
	return reader_open(st, bucket, key, 0, out);
}

const struct kvt_object *kvt_reader_object(const struct kvt_reader *r)
{
	return r->co->obj;
}

/* Holds the segments of r's extents as they are now (kvt_reader_hold). */
static int reader_hold(struct kvt_reader *r)
{
	const struct cat_object *co = r->co;
	int rc = 0;

	r->held = malloc(MAX(co->nextents, 1) * sizeof(*r->held));
	if (!r->held)
		return -ENOMEM;
	/* Extents of one segment are mostly neighbours: one hold each run. */
	for (size_t i = 0; i < co->nextents && rc == 0; i++) {
		uint32_t id = co->extents[i].segment;

		if (r->nheld > 0 && r->held[r->nheld - 1] == id)
			continue;
		rc = seg_hold(r->st->sf, id);
		if (rc == 0)
			r->held[r->nheld++] = id;
	}
	return rc;
}

static void reader_unhold(struct kvt_reader *r)
{
	for (size_t i = 0; i < r->nheld; i++)
		seg_unhold(r->st->sf, r->held[i]);
	free(r->held);
	r->held = NULL;
	r->nheld = 0;
}

int kvt_reader_hold(struct kvt_reader *r)
{
	int rc = 0;

	pthread_rwlock_wrlock(&r->lock);
	if (!r->held)
		rc = reader_hold(r);
	pthread_rwlock_unlock(&r->lock);
	return rc;
}

void kvt_reader_unhold(struct kvt_reader *r)
{
	pthread_rwlock_wrlock(&r->lock);
	reader_unhold(r);
	pthread_rwlock_unlock(&r->lock);
}

void kvt_reader_close(struct kvt_reader *r)
{
	if (!r)
		return;
	reader_unhold(r);
	cat_object_free(r->co);
	pthread_rwlock_destroy(&r->lock);
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

int store_extent_verify(struct kvt_store *st, const void *buf, uint64_t vid,
			const struct cat_extent *e)
{
	int rc = seg_header_check(buf, e->hvid, e->hseq, e->gen, e->segment, e->length);

	if (rc == 0 && kvt_crc32c(0, (const char *)buf + SEG_HEADER_SIZE, e->length) != e->crc) {
		log_err(0, "checksum mismatch in extent %u of version %016llx (segment %u offset %llu)",
			e->seq, (unsigned long long)vid, e->segment, (unsigned long long)e->offset);
		rc = -EIO;
	}
	if (rc < 0)
		store_checksum_failure(st, vid, e);
	return rc;
}

void store_extent_part(const struct cat_extent *e, uint64_t from, uint64_t to,
		       struct extent_part *p)
{
	*p = (struct extent_part){ .whole = 1, .a1 = seg_extent_space(e->length) };
	if (e->nchunks == 0 || from >= to)
		return;
	p->c0 = seg_chunk_of(e->chunk0, from);
	p->c1 = seg_chunk_of(e->chunk0, to - 1) + 1;
	p->a0 = (SEG_HEADER_SIZE + seg_chunk_start(e->chunk0, p->c0)) / SEG_ALIGN * SEG_ALIGN;
	p->a1 = ALIGN_UP(SEG_HEADER_SIZE + MIN(seg_chunk_start(e->chunk0, p->c1), e->length),
			 SEG_ALIGN);
	p->whole = p->a1 - p->a0 >= seg_extent_space(e->length);
	if (p->whole) {
		p->a0 = 0;
		p->a1 = seg_extent_space(e->length);
	}
}

int store_extent_verify_part(struct kvt_store *st, const void *buf, uint64_t vid,
			     const struct cat_extent *e, const struct extent_part *part)
{
	if (part->whole)
		return store_extent_verify(st, buf, vid, e);
	/* The header, when it was read with the first chunk, is checked too. */
	if (part->a0 == 0 &&
	    seg_header_check(buf, e->hvid, e->hseq, e->gen, e->segment, e->length) < 0) {
		store_checksum_failure(st, vid, e);
		return -EIO;
	}
	for (unsigned c = part->c0; c < part->c1; c++) {
		uint64_t p = seg_chunk_start(e->chunk0, c);
		uint64_t q = MIN(seg_chunk_start(e->chunk0, c + 1), e->length);
		const char *chunk = (const char *)buf + (SEG_HEADER_SIZE + p - part->a0);

		if (kvt_crc32c(0, chunk, q - p) != e->chunk_crc[c]) {
			log_err(0, "checksum mismatch in chunk %u of extent %u of version %016llx"
				" (segment %u offset %llu)", c, e->seq, (unsigned long long)vid,
				e->segment, (unsigned long long)e->offset);
			store_checksum_failure(st, vid, e);
			return -EIO;
		}
	}
	return 0;
}

struct rslot {
	struct io_req req;
	const struct cat_extent *e;
	int busy;
	struct extent_part part;	/* what of the extent was read */
};

/* The generation of e's segment is still the one e was written in. */
static int reader_gen_ok(struct kvt_store *st, const struct cat_extent *e)
{
	return seg_map_gen(st->sf, e->segment) == e->gen;
}

/* Where a pass puts the bytes: copied to out, or left in io's buffers,
 * one iovec per extent (iov). */
struct read_to {
	struct io_ctx *io;
	char *out;
	struct iovec *iov;
	unsigned niov;
};

/* One pass over [off, end): -ESTALE if a segment was freed under it. */
static int reader_pass(struct kvt_reader *r, void *arg, uint64_t off, uint64_t end)
{
	struct read_to *to = arg;
	struct io_ctx *io = to->io;
	struct kvt_store *st = r->st;
	const struct cat_object *co = r->co;
	struct rslot slots[16];
	unsigned inflight = 0, nslots = MIN(io->nbufs, ARRAY_SIZE(slots));
	size_t first = reader_find(co, off), next = first;
	int rc = 0;

	/* Extents that do not reach the end (the version went cold under
	 * the reader: its extents are gone): nothing to copy, never a buffer
	 * returned unfilled. */
	if (co->nextents == 0 || co->extents[co->nextents - 1].obj_off +
	    co->extents[co->nextents - 1].length < end)
		return -ESTALE;
	/* Bytes left in the buffers: each extent needs a buffer of its own. */
	to->niov = 0;
	if (to->iov && (first + nslots < co->nextents && co->extents[first + nslots].obj_off < end))
		return -E2BIG;
	memset(slots, 0, sizeof(slots));
	while (inflight > 0 || (rc == 0 && next < co->nextents && co->extents[next].obj_off < end)) {
		struct io_req *done;
		struct rslot *s;

		/* Fill every free slot with the next extent of the range. */
		while (rc == 0 && inflight < nslots && next < co->nextents &&
		       co->extents[next].obj_off < end) {
			const struct cat_extent *e = &co->extents[next];
			unsigned i;

			for (i = 0; slots[i].busy; i++)
				;
			rc = store_extent_check_place(st, co->vid, e);
			if (rc == 0 && !reader_gen_ok(st, e))
				rc = -ESTALE;
			if (rc < 0)
				break;
			s = &slots[i];
			s->e = e;
			store_extent_part(e, MAX(off, e->obj_off) - e->obj_off,
					  MIN(end, e->obj_off + e->length) - e->obj_off, &s->part);
			s->req = (struct io_req){
				.op = IO_READ,
				.fd = e->length <= st->cached_read_max ?
					seg_cached_fd(st->sf, e->segment) :
					seg_fd(st->sf, e->segment),
				.buf = io_buf(io, i),
				.buf_index = (int)i,
				.len = s->part.a1 - s->part.a0,
				.off = e->offset + s->part.a0,
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
		if (io_wait(io, &done) < 0)
			return -EPIPE;	/* the context broke: the caller drops it */
		s = done->data;
		s->busy = 0;
		inflight--;
		if (rc < 0)
			continue;	/* draining after an error */
		if (!reader_gen_ok(st, s->e)) {
			rc = -ESTALE;
			continue;
		}
		if (done->res != (ssize_t)done->len) {
			rc = done->res < 0 ? (int)done->res : -EIO;
			log_err(rc, "cannot read segment %u at %llu", s->e->segment,
				(unsigned long long)s->e->offset);
			continue;
		}
		rc = store_extent_verify_part(st, done->buf, co->vid, s->e, &s->part);
		if (rc == 0) {
			uint64_t from = MAX(off, s->e->obj_off);
			uint64_t until = MIN(end, s->e->obj_off + s->e->length);
			char *bytes = (char *)done->buf + SEG_HEADER_SIZE + (from - s->e->obj_off) -
				      s->part.a0;

			if (to->iov)
				to->iov[s->e - &co->extents[first]] = (struct iovec){
					.iov_base = bytes, .iov_len = (size_t)(until - from) };
			else
				memcpy(to->out + (from - off), bytes, (size_t)(until - from));
		}
	}
	if (rc == 0 && to->iov)
		to->niov = (unsigned)(next - first);
	return rc;
}

/*
 * After -ESTALE: the same version at a new place (relocated, or turned cold
 * by reclaim and recalled here, which keeps the version), or -ESTALE.
 * Before the recall, a read across a drop to cold returned the buffer
 * unfilled (test_cold: test_pressure_demote, with the background demoter).
 */
static int reader_refresh(struct kvt_reader *r)
{
	struct cat *c = store_cat(r->st);
	struct cat_object *co = NULL;
	int rc;

	if (!c)
		return -ENOMEM;
	rc = cat_object_lookup(c, r->co->obj->bucket, r->co->obj->key, 1, &co);
	if (rc == 0 && co->vid == r->co->vid && co->obj->tier == KVT_TIER_COLD) {
		cat_object_free(co);
		co = NULL;
		rc = recall_object(r->st, r->co->obj->bucket, r->co->obj->key);
		if (rc == 0)
			rc = cat_object_lookup(c, r->co->obj->bucket, r->co->obj->key, 1, &co);
	}
	if (rc < 0 || co->vid != r->co->vid || co->obj->tier == KVT_TIER_COLD) {
		cat_object_free(co);
		return -ESTALE;
	}
	free(r->co->extents);
	r->co->extents = co->extents;
	r->co->nextents = co->nextents;
	co->extents = NULL;
	cat_object_free(co);
	/* Held: the version's bytes are where the new list says now, and the
	 * segments they left may hold anyone's. */
	if (r->held) {
		reader_unhold(r);
		reader_hold(r);
	}
	return 0;
}

typedef int (*reader_pass_fn)(struct kvt_reader *r, void *arg, uint64_t off, uint64_t end);

/*
 * Runs pass over [off, end); after -ESTALE, refreshes the extent list and
 * runs it again, three times at most. A thread that finds the list already
 * replaced since its pass began goes straight to the next pass.
 */
static int reader_run(struct kvt_reader *r, reader_pass_fn pass, void *arg, uint64_t off,
		      uint64_t end)
{
	for (int tries = 0;; tries++) {
		unsigned seen;
		int rc;

		pthread_rwlock_rdlock(&r->lock);
		seen = r->refreshes;
		rc = pass(r, arg, off, end);
		pthread_rwlock_unlock(&r->lock);
		if (rc != -ESTALE || tries == 3)
			return rc;
		pthread_rwlock_wrlock(&r->lock);
		if (r->refreshes == seen) {
			rc = reader_refresh(r);
			if (rc == 0)
				r->refreshes++;
		} else {
			rc = 0;
		}
		pthread_rwlock_unlock(&r->lock);
		if (rc < 0)
			return rc;
	}
}

/* Gives io back to the pool, or frees it if a pass broke it (-EPIPE): -EIO. */
static int reader_io_put(struct kvt_store *st, struct io_ctx *io, int rc)
{
	if (rc != -EPIPE) {
		store_io_put(st, io);
		return rc;
	}
	io->inflight = 0;
	io_ctx_free(io);
	return -EIO;
}

ssize_t kvt_reader_pread(struct kvt_reader *r, void *out, size_t len, uint64_t off)
{
	struct read_to to = { .out = out };
	uint64_t end;
	int rc;

	if (off >= r->co->obj->size || len == 0)
		return 0;
	end = MIN(r->co->obj->size, off + len);
	rc = store_io_get(r->st, &to.io);
	if (rc < 0)
		return rc;
	rc = reader_run(r, reader_pass, &to, off, end);
	rc = reader_io_put(r->st, to.io, rc);
	return rc < 0 ? rc : (ssize_t)(end - off);
}

/* ---- mapped reads -------------------------------------------------------- */

struct kvt_map {
	struct kvt_store *st;
	uint32_t *pinned;	/* one entry per pin held */
	unsigned npinned;
	struct io_ctx *io;	/* whose buffers hold the bytes, or NULL */
	struct iovec *iov;
	unsigned niov;
};

static void map_release(struct kvt_map *m)
{
	for (unsigned i = 0; i < m->npinned; i++)
		seg_unpin(m->st->sf, m->pinned[i]);
	m->npinned = 0;
	m->niov = 0;
	if (m->io)
		store_io_put(m->st, m->io);
	m->io = NULL;
}

/* One pass over [off, end): the pins and iovecs into m, or -errno and none. */
static int reader_map_pass(struct kvt_reader *r, void *arg, uint64_t off, uint64_t end)
{
	struct kvt_map *m = arg;
	struct kvt_store *st = r->st;
	const struct cat_object *co = r->co;
	size_t first = reader_find(co, off), n = co->nextents - first;
	int rc;

	if (co->nextents == 0 || co->extents[co->nextents - 1].obj_off +
	    co->extents[co->nextents - 1].length < end)
		return -ESTALE;	/* as reader_pass: the version went cold under us */
	free(m->pinned);
	free(m->iov);
	m->pinned = malloc(n * sizeof(*m->pinned));
	m->iov = malloc(n * sizeof(*m->iov));
	if (!m->pinned || !m->iov)
		return -ENOMEM;
	for (size_t i = first; i < co->nextents && co->extents[i].obj_off < end; i++) {
		const struct cat_extent *e = &co->extents[i];
		uint64_t from = MAX(off, e->obj_off), to = MIN(end, e->obj_off + e->length);
		const char *base;
		struct extent_part part;

		rc = store_extent_check_place(st, co->vid, e);
		if (rc < 0)
			goto fail;
		base = seg_mapped(st->sf, e->segment);
		if (!base) {
			rc = -ENOTSUP;
			goto fail;
		}
		/* Pin, then check the generation: see segment.h. */
		if (m->npinned == 0 || m->pinned[m->npinned - 1] != e->segment) {
			rc = seg_pin(st->sf, e->segment);
			if (rc < 0)
				goto fail;
			m->pinned[m->npinned++] = e->segment;
		}
		if (!reader_gen_ok(st, e)) {
			rc = -ESTALE;
			goto fail;
		}
		base += e->offset;
		/* Only the chunks sent are checked (and faulted in). */
		store_extent_part(e, from - e->obj_off, to - e->obj_off, &part);
		rc = store_extent_verify_part(st, base + part.a0, co->vid, e, &part);
		if (rc < 0)
			goto fail;
		m->iov[m->niov++] = (struct iovec){
			.iov_base = (void *)(base + SEG_HEADER_SIZE + (from - e->obj_off)),
			.iov_len = (size_t)(to - from),
		};
	}
	return 0;
fail:
	map_release(m);	/* a refresh and the next pass hold nothing */
	return rc;
}

/*
 * The map of [off, off + len) clipped to the version: pinned iovecs into
 * the segments' mappings, or with from_device the bytes read into an I/O
 * context the map keeps.
 */
static int reader_map_range(struct kvt_reader *r, uint64_t off, size_t len, int from_device,
			    struct kvt_map **out)
{
	struct read_to to = { 0 };
	struct kvt_map *m;
	uint64_t end;
	int rc = 0;

	*out = NULL;
	if (off > r->co->obj->size)
		off = r->co->obj->size;
	end = MIN(r->co->obj->size, off + len);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->st = r->st;
	if (!from_device) {
		rc = off < end ? reader_run(r, reader_map_pass, m, off, end) : 0;
	} else if ((rc = store_io_get(r->st, &m->io)) == 0) {
		to.io = m->io;
		to.iov = m->iov = calloc(m->io->nbufs, sizeof(*m->iov));
		rc = !to.iov ? -ENOMEM : off < end ? reader_run(r, reader_pass, &to, off, end) : 0;
		m->niov = to.niov;
		if (rc == -EPIPE) {
			m->io = NULL;
			rc = reader_io_put(r->st, to.io, rc);
		}
	}
	if (rc < 0) {
		kvt_map_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int kvt_reader_map(struct kvt_reader *r, uint64_t off, size_t len, struct kvt_map **out)
{
	return reader_map_range(r, off, len, 0, out);
}

int kvt_reader_pread_map(struct kvt_reader *r, uint64_t off, size_t len, struct kvt_map **out)
{
	return reader_map_range(r, off, len, 1, out);
}

const struct iovec *kvt_map_iov(const struct kvt_map *m, unsigned *niov)
{
	*niov = m->niov;
	return m->iov;
}

void kvt_map_free(struct kvt_map *m)
{
	if (!m)
		return;
	map_release(m);
	free(m->pinned);
	free(m->iov);
	free(m);
}
