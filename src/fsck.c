/*
 * fsck.c - checking the catalog against the segment files.
 *
 * For every object: its extents cover [0, size) in order, lie inside live
 * segments of the right generation, do not overlap any other extent, carry
 * a header naming the object, and match their CRC32C; the payloads together
 * match the object's own CRC32C. For every segment: its live-byte count
 * equals the space of the extents in it.
 *
 * fsck runs beside live processes: an object overwritten or reclaimed while
 * it is checked (-ENOENT, -ESTALE) is skipped, not reported. With repair,
 * objects whose bytes are damaged are removed, since they could only ever
 * read as -EIO, and segment accounting is rewritten.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "util.h"

struct fsck_range {
	uint32_t segment;
	uint64_t offset;
	uint64_t space;
	int64_t object;
};

struct fsck_state {
	struct kvt_store *st;
	struct kvt_fsck_report *rep;
	struct io_ctx *io;
	struct cat_segment *segs;	/* by id */
	uint64_t *live;			/* by id, recomputed */
	struct fsck_range *ranges;
	size_t nranges, capranges;
	int64_t *damaged;
	size_t ndamaged, capdamaged;
};

static int fsck_push(void **v, size_t *n, size_t *cap, size_t size, const void *item)
{
	if (*n == *cap) {
		size_t ncap = *cap ? 2 * *cap : 256;
		void *p = realloc(*v, ncap * size);

		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = ncap;
	}
	memcpy((char *)*v + *n * size, item, size);
	(*n)++;
	return 0;
}

static int fsck_load_segment(void *arg, const struct cat_segment *s)
{
	struct fsck_state *fs = arg;

	if (s->id < fs->st->nsegs)
		fs->segs[s->id] = *s;
	return 0;
}

/* Checks where extent e of co points, without reading it. */
static int fsck_extent_place(struct fsck_state *fs, const struct cat_object *co,
			     const struct cat_extent *e, size_t i, uint64_t expect_off)
{
	const struct kvt_object *o = co->obj;
	const struct cat_segment *s;
	uint64_t space = seg_extent_space(e->length);

	if (e->seq != i || e->obj_off != expect_off || e->length == 0 ||
	    e->length > SEG_PAYLOAD_MAX) {
		log_err(0, "'%s/%s': extent %zu out of order or mis-sized", o->bucket, o->key, i);
		return -EINVAL;
	}
	if (e->segment >= fs->st->nsegs || e->offset % SEG_ALIGN ||
	    e->offset + space > fs->st->seg_size) {
		log_err(0, "'%s/%s': extent %zu lies outside segment %u", o->bucket, o->key, i,
			e->segment);
		return -EINVAL;
	}
	s = &fs->segs[e->segment];
	if (s->state == SEG_FREE || s->gen != e->gen) {
		log_err(0, "'%s/%s': extent %zu points into %s segment %u", o->bucket, o->key, i,
			s->state == SEG_FREE ? "free" : "a later generation of", e->segment);
		return -EINVAL;
	}
	return 0;
}

static int fsck_object(void *arg, struct cat_object *co)
{
	struct fsck_state *fs = arg;
	struct kvt_fsck_report *rep = fs->rep;
	const struct kvt_object *o = co->obj;
	void *buf = io_buf(fs->io, 0);
	uint64_t off = 0;
	uint32_t crc = 0;
	int damaged = 0, rc;

	rep->objects_checked++;
	if (o->tier == KVT_TIER_COLD)
		return 0;	/* no hot bytes to check */
	for (size_t i = 0; i < co->nextents; i++) {
		const struct cat_extent *e = &co->extents[i];
		struct fsck_range r = { e->segment, e->offset, seg_extent_space(e->length), co->id };

		if (fsck_extent_place(fs, co, e, i, off) < 0) {
			off += e->length;
			rep->catalog_errors++;
			damaged = 1;
			continue;
		}
		/* Every extent counts toward its segment, damaged object or not:
		 * repair subtracts them all when it drops the object. */
		fs->live[e->segment] += r.space;
		off += e->length;
		if (fsck_push((void **)&fs->ranges, &fs->nranges, &fs->capranges, sizeof(r), &r) < 0)
			return -ENOMEM;
		if (damaged)
			continue;
		rc = store_read_extent_raw(fs->st, fs->io, 0, buf, co->vid, e);
		if (rc == -ESTALE)
			return 0;	/* reclaimed while we looked: not ours to judge */
		if (rc < 0) {
			rep->checksum_errors++;
			damaged = 1;
			continue;
		}
		rep->extents_checked++;
		rep->bytes_checked += e->length;
		if (seg_header_check(buf, e->hvid, e->hseq, e->gen, e->segment, e->length) < 0) {
			rep->header_errors++;
			damaged = 1;
			continue;
		}
		if (kvt_crc32c(0, (char *)buf + SEG_HEADER_SIZE, e->length) != e->crc) {
			log_err(0, "'%s/%s': checksum mismatch in extent %zu (segment %u offset %llu)",
				o->bucket, o->key, i, e->segment, (unsigned long long)e->offset);
			store_checksum_failure(fs->st);
			rep->checksum_errors++;
			damaged = 1;
			continue;
		}
		crc = kvt_crc32c(crc, (char *)buf + SEG_HEADER_SIZE, e->length);
	}
	if (!damaged && off != o->size) {
		log_err(0, "'%s/%s': extents hold %llu bytes, the object %llu", o->bucket, o->key,
			(unsigned long long)off, (unsigned long long)o->size);
		rep->catalog_errors++;
		damaged = 1;
	} else if (!damaged && crc != o->crc32c) {
		log_err(0, "'%s/%s': object checksum mismatch", o->bucket, o->key);
		rep->checksum_errors++;
		damaged = 1;
	}
	if (damaged)
		return fsck_push((void **)&fs->damaged, &fs->ndamaged, &fs->capdamaged,
				 sizeof(co->id), &co->id) < 0 ? -ENOMEM : 0;
	return 0;
}

static int range_cmp(const void *a, const void *b)
{
	const struct fsck_range *x = a, *y = b;

	if (x->segment != y->segment)
		return x->segment < y->segment ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Extents that overlap: no repair can tell which one the disk holds. */
static unsigned fsck_overlaps(struct fsck_state *fs)
{
	unsigned n = 0;

	if (fs->nranges > 1)
		qsort(fs->ranges, fs->nranges, sizeof(*fs->ranges), range_cmp);
	for (size_t i = 1; i < fs->nranges; i++) {
		const struct fsck_range *p = &fs->ranges[i - 1], *r = &fs->ranges[i];

		if (p->segment == r->segment && p->offset + p->space > r->offset) {
			log_err(0, "objects %lld and %lld overlap in segment %u at %llu",
				(long long)p->object, (long long)r->object, r->segment,
				(unsigned long long)r->offset);
			fs->rep->catalog_errors++;
			n++;
		}
	}
	return n;
}

int kvt_store_fsck(struct kvt_store *st, unsigned flags, struct kvt_fsck_report *rep)
{
	struct fsck_state fs = { .st = st, .rep = rep };
	struct cat *c = store_cat(st);
	unsigned unfixable;
	int rc;

	memset(rep, 0, sizeof(*rep));
	if (!c)
		return -ENOMEM;
	fs.segs = calloc(st->nsegs, sizeof(*fs.segs));
	fs.live = calloc(st->nsegs, sizeof(*fs.live));
	if (!fs.segs || !fs.live) {
		rc = -ENOMEM;
		goto out;
	}
	rc = store_io_get(st, &fs.io);
	if (rc < 0)
		goto out;
	/* Make the catalog's view of access times and writes current first. */
	kvt_store_flush_access(st);
	rc = cat_segment_list(c, fsck_load_segment, &fs);
	if (rc == 0)
		rc = cat_object_walk(c, fsck_object, &fs);
	if (rc < 0)
		goto out;
	unfixable = fsck_overlaps(&fs);
	for (uint32_t i = 0; i < st->nsegs; i++) {
		if (fs.segs[i].state == SEG_FREE || fs.segs[i].live == fs.live[i])
			continue;
		log_warn(0, "segment %u counts %llu live bytes, its extents take %llu", i,
			 (unsigned long long)fs.segs[i].live, (unsigned long long)fs.live[i]);
		rep->catalog_errors++;
		if ((flags & KVT_FSCK_REPAIR) && cat_segment_set_live(c, i, fs.live[i]) == 0)
			rep->repaired++;
		else
			unfixable++;
	}
	for (size_t i = 0; i < fs.ndamaged; i++) {
		if ((flags & KVT_FSCK_REPAIR) && cat_object_drop_id(c, fs.damaged[i]) == 0) {
			log_info("removed damaged object %lld", (long long)fs.damaged[i]);
			rep->repaired++;
		} else {
			unfixable++;
		}
	}
	rc = unfixable ? 1 : 0;
out:
	store_io_put(st, fs.io);
	free(fs.segs);
	free(fs.live);
	free(fs.ranges);
	free(fs.damaged);
	return rc;
}
