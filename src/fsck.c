/*
 * fsck.c - checking the catalog against the segment files.
 *
 * For every object: its extents cover [0, size) in order, lie inside live
 * segments of the right generation, do not overlap any other extent, carry
 * a header naming the object, and match their CRC32C; the payloads together
 * match the object's own CRC32C. For every segment: its live-byte count
 * equals the space of the extents in it.
 *
 * fsck runs beside live processes (a gateway, a mount, reclaim), so it
 * works in two passes, and only the second one reports or repairs:
 *
 *   suspect   one read transaction, a snapshot of the catalog: segments,
 *             then every object and its extents. Counts, places and
 *             overlaps are judged within that snapshot, where writers and
 *             reclaim are either wholly in or wholly out (counting across
 *             several statements once saw half a reclaim and reported, and
 *             "repaired", live counts that were right). Extent bytes are
 *             read meanwhile; a segment reclaimed since the snapshot reads
 *             -ESTALE and is not judged.
 *   confirm   each suspect again, against the catalog as it is now: an
 *             object must still be the same version (id and vid) and its
 *             extents still in segments of the same generation, and be
 *             damaged when checked again; a segment's count is compared
 *             with its extents in one transaction, and with repair fixed in
 *             that same write transaction; an overlap must still be there
 *             between the same versions. What changed meanwhile was not
 *             damage: it is dropped, not reported.
 *
 * Repair removes an object only if it is still the damaged version
 * (cat_object_drop_version), since a damaged object could only ever read as
 * -EIO, and rewrites a segment's count only inside the transaction that
 * found it wrong. Overlaps are reported, never repaired: nothing tells which
 * of the two the disk holds.
 *
 * The snapshot is held while the extents are read, so the catalog's WAL is
 * not checkpointed past it until fsck is done: a long fsck beside busy
 * writers lets the WAL grow for that long (and the flusher's RESTART
 * checkpoints back off, store.c).
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
	uint64_t gen;
	uint64_t offset;
	uint64_t space;
	int64_t object;
	uint64_t vid;
};

/* An object the snapshot found damaged, to be checked again. */
struct fsck_suspect {
	int64_t id;
	uint64_t vid;
	char *bucket;		/* its bucket's name, for the log */
};

struct fsck_state {
	struct kvt_store *st;
	struct kvt_fsck_report *rep;
	struct io_ctx *io;
	struct cat_segment *segs;	/* by id: the snapshot, then as rechecked */
	uint64_t *live;			/* by id, from the snapshot's extents */
	struct fsck_range *ranges;
	size_t nranges, capranges;
	struct fsck_suspect *suspects;
	size_t nsuspects, capsuspects;
	int loud;			/* confirming: log and count what is found */
};

/* What fsck_object_check() found wrong first. */
enum fsck_damage {
	FSCK_OK,
	FSCK_STALE,		/* reclaimed while read: not judged */
	FSCK_PLACE,		/* catalog: out of order, bounds, generation, size */
	FSCK_HEADER,
	FSCK_CHECKSUM,		/* an extent's payload, or the object's whole CRC */
};

static int fsck_push(void **v, size_t *n, size_t *cap, size_t size, const void *item)
{
	if (util_grow(v, cap, *n, size) < 0)
		return -ENOMEM;
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

/* Checks where extent e of co points (against fs->segs), without reading it. */
static int fsck_extent_place(struct fsck_state *fs, const struct cat_object *co,
			     const struct cat_extent *e, size_t i, uint64_t expect_off)
{
	const struct kvt_object *o = co->obj;
	const struct cat_segment *s;
	uint64_t space = seg_extent_space(e->length);

	if (e->seq != i || e->obj_off != expect_off || e->length == 0 ||
	    e->length > SEG_PAYLOAD_MAX) {
		if (fs->loud)
			log_err(0, "'%s/%s': extent %zu out of order or mis-sized", o->bucket,
				o->key, i);
		return -EINVAL;
	}
	if (e->segment >= fs->st->nsegs || e->offset % SEG_ALIGN ||
	    e->offset + space > fs->st->seg_size) {
		if (fs->loud)
			log_err(0, "'%s/%s': extent %zu lies outside segment %u", o->bucket,
				o->key, i, e->segment);
		return -EINVAL;
	}
	s = &fs->segs[e->segment];
	if (s->state == SEG_FREE || s->gen != e->gen) {
		if (fs->loud)
			log_err(0, "'%s/%s': extent %zu points into %s segment %u", o->bucket,
				o->key, i, s->state == SEG_FREE ? "free" : "a later generation of",
				e->segment);
		return -EINVAL;
	}
	return 0;
}

/*
 * The catalog side of co: places (against fs->segs), order and size. Each
 * well-placed extent is added to its segment's count and to the ranges
 * when collect is set (the snapshot pass). FSCK_OK or FSCK_PLACE.
 */
static int fsck_object_places(struct fsck_state *fs, const struct cat_object *co, int collect)
{
	const struct kvt_object *o = co->obj;
	enum fsck_damage d = FSCK_OK;
	uint64_t off = 0;

	for (size_t i = 0; i < co->nextents; i++) {
		const struct cat_extent *e = &co->extents[i];
		struct fsck_range r = { e->segment, e->gen, e->offset, seg_extent_space(e->length),
					co->id, co->vid };

		if (fsck_extent_place(fs, co, e, i, off) < 0) {
			off += e->length;
			d = FSCK_PLACE;
			continue;
		}
		off += e->length;
		if (!collect)
			continue;
		/* Every extent counts toward its segment, damaged object or not:
		 * repair subtracts them all when it drops the object. */
		fs->live[e->segment] += r.space;
		if (fsck_push((void **)&fs->ranges, &fs->nranges, &fs->capranges, sizeof(r), &r) < 0)
			return -ENOMEM;
	}
	if (d == FSCK_OK && off != o->size) {
		if (fs->loud)
			log_err(0, "'%s/%s': extents hold %llu bytes, the object %llu", o->bucket,
				o->key, (unsigned long long)off, (unsigned long long)o->size);
		d = FSCK_PLACE;
	}
	/* After the extents are counted toward their segments: a repair
	 * drops the object, and them with it. */
	if (d == FSCK_OK && (unsigned)o->tier > KVT_TIER_COLD) {
		if (fs->loud)
			log_err(0, "'%s/%s': tier %d in the catalog is none this kvtier knows",
				o->bucket, o->key, (int)o->tier);
		d = FSCK_PLACE;
	}
	return d;
}

/* The bytes of co: every extent read, its header and CRC checked, then the
 * object's CRC. Assumes fsck_object_places() found co sound. */
static int fsck_object_bytes(struct fsck_state *fs, const struct cat_object *co)
{
	const struct kvt_object *o = co->obj;
	void *buf = io_buf(fs->io, 0);
	uint32_t crc = 0;

	for (size_t i = 0; i < co->nextents; i++) {
		const struct cat_extent *e = &co->extents[i];
		int rc = store_read_extent_raw(fs->st, fs->io, 0, buf, co->vid, e);
		uint32_t ecrc, chunk_crc[SEG_CHUNKS_MAX];
		const char *why;

		if (rc == -ESTALE)
			return FSCK_STALE;	/* reclaimed since: not ours to judge */
		if (rc < 0) {
			if (fs->loud)
				store_checksum_failure(fs->st, co->vid, e);
			return FSCK_CHECKSUM;	/* logged by the read */
		}
		if (!fs->loud) {
			fs->rep->extents_checked++;
			fs->rep->bytes_checked += e->length;
		}
		why = seg_header_fault(buf, e->hvid, e->hseq, e->gen, e->segment, e->length);
		if (why) {
			if (fs->loud)
				log_err(0, "'%s/%s': extent %zu (segment %u offset %llu): %s",
					o->bucket, o->key, i, e->segment,
					(unsigned long long)e->offset, why);
			return FSCK_HEADER;
		}
		/* The chunks' checksums too: partial reads trust them alone. */
		ecrc = seg_payload_crc((char *)buf + SEG_HEADER_SIZE, e->length,
				       e->nchunks ? e->chunk0 : SEG_CHUNK, chunk_crc);
		if (ecrc != e->crc ||
		    (e->nchunks && memcmp(chunk_crc, e->chunk_crc, 4 * e->nchunks) != 0)) {
			if (fs->loud) {
				log_err(0, "'%s/%s': checksum mismatch in extent %zu (segment %u"
					" offset %llu)", o->bucket, o->key, i, e->segment,
					(unsigned long long)e->offset);
				store_checksum_failure(fs->st, co->vid, e);
			}
			return FSCK_CHECKSUM;
		}
		crc = kvt_crc32c_combine(crc, ecrc, e->length);
	}
	if (crc != o->crc32c) {
		if (fs->loud) {
			log_err(0, "'%s/%s': object checksum mismatch", o->bucket, o->key);
			store_checksum_failure(fs->st, co->vid, NULL);
		}
		return FSCK_CHECKSUM;
	}
	return FSCK_OK;
}

/* The snapshot pass over one object: counts, ranges, bytes; a damaged one
 * becomes a suspect. */
static int fsck_object(void *arg, struct cat_object *co)
{
	struct fsck_state *fs = arg;
	struct fsck_suspect sus = { co->id, co->vid, NULL };
	int d;

	fs->rep->objects_checked++;
	if (co->obj->tier == KVT_TIER_COLD)
		return 0;	/* no hot bytes to check */
	d = fsck_object_places(fs, co, 1);
	if (d < 0)
		return d;
	if (d == FSCK_OK)
		d = fsck_object_bytes(fs, co);
	if (d == FSCK_OK || d == FSCK_STALE)
		return 0;
	sus.bucket = strdup(co->obj->bucket ? co->obj->bucket : "?");
	if (!sus.bucket ||
	    fsck_push((void **)&fs->suspects, &fs->nsuspects, &fs->capsuspects, sizeof(sus), &sus)) {
		free(sus.bucket);
		return -ENOMEM;
	}
	return 0;
}

/*
 * Object id as the catalog has it now, with the current rows of the
 * segments its extents lie in (into fs->segs), all from one read
 * transaction. -ESTALE if it is no longer version vid, -ENOENT if gone.
 */
static int fsck_object_now(struct fsck_state *fs, int64_t id, uint64_t vid, const char *bucket,
			   struct cat_object **out)
{
	struct cat *c = store_cat(fs->st);
	struct cat_object *co = NULL;
	int rc = cat_begin_read(c);

	if (rc < 0)
		return rc;
	rc = cat_object_by_id(c, id, &co);
	if (rc == 0 && (co->id != id || co->vid != vid))
		rc = -ESTALE;	/* overwritten; its key holds another object */
	for (size_t i = 0; rc == 0 && co && i < co->nextents; i++) {
		uint32_t seg = co->extents[i].segment;

		if (seg < fs->st->nsegs)
			rc = cat_segment_get(c, seg, &fs->segs[seg]);
	}
	cat_rollback(c);
	if (rc == 0 && !co->obj->bucket && !(co->obj->bucket = strdup(bucket ? bucket : "?")))
		rc = -ENOMEM;
	if (rc < 0) {
		cat_object_free(co);
		return rc;
	}
	*out = co;
	return 0;
}

/*
 * Confirms a suspect: the same version, checked again from the catalog as
 * it is now. Returns its damage (FSCK_OK: it changed, or was never damaged,
 * which a vanished race explains) and, with repair, removes it if it is
 * still that version.
 */
static int fsck_confirm_object(struct fsck_state *fs, const struct fsck_suspect *sus,
			       unsigned flags, unsigned *unfixable)
{
	struct kvt_fsck_report *rep = fs->rep;
	struct cat_object *co = NULL;
	int d, rc = fsck_object_now(fs, sus->id, sus->vid, sus->bucket, &co);

	if (rc == -ENOENT || rc == -ESTALE)
		return 0;	/* removed or replaced since: nothing left to judge */
	if (rc < 0)
		return rc;
	fs->loud = 1;
	d = fsck_object_places(fs, co, 0);
	if (d == FSCK_OK)
		d = fsck_object_bytes(fs, co);
	fs->loud = 0;
	if (d < 0) {
		rc = d;
		goto out;
	}
	switch (d) {
	case FSCK_OK:
	case FSCK_STALE:
		goto out;	/* reclaimed or moved meanwhile: not damage */
	case FSCK_PLACE:
		rep->catalog_errors++;
		break;
	case FSCK_HEADER:
		rep->header_errors++;
		break;
	case FSCK_CHECKSUM:
		rep->checksum_errors++;
		break;
	}
	if (!(flags & KVT_FSCK_REPAIR)) {
		(*unfixable)++;
		goto out;
	}
	rc = cat_object_drop_version(store_cat(fs->st), sus->id, sus->vid);
	if (rc == 0) {
		log_info("removed damaged object '%s/%s'", co->obj->bucket, co->obj->key);
		rep->repaired++;
	} else if (rc == -ENOENT || rc == -ESTALE) {
		rc = 0;		/* replaced or removed just now: the damage went with it */
	} else {
		log_err(rc, "cannot remove damaged object '%s/%s'", co->obj->bucket, co->obj->key);
		(*unfixable)++;
		rc = 0;
	}
out:
	cat_object_free(co);
	return rc;
}

static int range_cmp(const void *a, const void *b)
{
	const struct fsck_range *x = a, *y = b;

	if (x->segment != y->segment)
		return x->segment < y->segment ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* 1 if version vid of object id still has an extent at r's place, in a
 * segment still of r's generation (fsck_object_now). */
static int fsck_range_now(struct fsck_state *fs, int64_t id, uint64_t vid,
			  const struct fsck_range *r)
{
	struct cat_object *co = NULL;
	int found = 0;

	if (fsck_object_now(fs, id, vid, NULL, &co) < 0)
		return 0;
	for (size_t i = 0; i < co->nextents && !found; i++) {
		const struct cat_extent *e = &co->extents[i];

		found = e->segment == r->segment && e->offset == r->offset &&
			e->gen == r->gen && fs->segs[e->segment].gen == r->gen &&
			fs->segs[e->segment].state != SEG_FREE;
	}
	cat_object_free(co);
	return found;
}

/* Extents that overlap in the snapshot and still do: no repair can tell
 * which one the disk holds. */
static unsigned fsck_overlaps(struct fsck_state *fs)
{
	unsigned n = 0;

	if (fs->nranges > 1)
		qsort(fs->ranges, fs->nranges, sizeof(*fs->ranges), range_cmp);
	for (size_t i = 1; i < fs->nranges; i++) {
		const struct fsck_range *p = &fs->ranges[i - 1], *r = &fs->ranges[i];

		if (p->segment != r->segment || p->offset + p->space <= r->offset)
			continue;
		if (!fsck_range_now(fs, p->object, p->vid, p) ||
		    !fsck_range_now(fs, r->object, r->vid, r))
			continue;
		log_err(0, "objects %lld and %lld overlap in segment %u at %llu",
			(long long)p->object, (long long)r->object, r->segment,
			(unsigned long long)r->offset);
		fs->rep->catalog_errors++;
		fs->rep->unrepairable++;
		n++;
	}
	return n;
}

/* A segment whose count the snapshot found wrong, counted again in one
 * transaction (and, with repair, fixed in it). */
static int fsck_confirm_segment(struct fsck_state *fs, uint32_t id, unsigned flags,
				unsigned *unfixable)
{
	uint64_t live, space;
	int repair = !!(flags & KVT_FSCK_REPAIR);
	int rc = cat_segment_recount(store_cat(fs->st), id, repair, &live, &space);

	if (rc < 0)
		return rc;
	if (live == space)
		return 0;	/* the snapshot's view was right then, and is now */
	log_warn(0, "segment %u counts %llu live bytes, its extents take %llu", id,
		 (unsigned long long)live, (unsigned long long)space);
	fs->rep->catalog_errors++;
	if (repair)
		fs->rep->repaired++;
	else
		(*unfixable)++;
	return 0;
}

/*
 * segments.map holds each segment's generation for the readers of every
 * process (segment.h). A process sets it only after the catalog committed
 * it, so read first it is never ahead of the catalog read after it. Ahead
 * for a segment that holds committed extents, the file was damaged (it is
 * never synced; an open after a reboot rebuilds it, but only raises what
 * it holds): every read of those objects fails as if they were reclaimed,
 * which the object pass cannot tell from a real reclaim. Lowering it here
 * could race a reclaim in another process, so it is reported, with the
 * cure, and not repaired.
 */
static int fsck_check_map(struct fsck_state *fs, uint32_t id, unsigned *unfixable)
{
	uint64_t mapped = seg_map_gen(fs->st->sf, id);
	struct cat_segment s;
	int rc = cat_segment_get(store_cat(fs->st), id, &s);

	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	if (mapped <= s.gen || s.live == 0)
		return 0;
	log_err(0, "'%s/segments.map' gives segment %u generation %llu, the catalog %llu: its objects "
		"read as reclaimed; stop every kvtier process on the store and remove that file "
		"(the next open makes it again)", fs->st->dir, id, (unsigned long long)mapped,
		(unsigned long long)s.gen);
	fs->rep->catalog_errors++;
	fs->rep->unrepairable++;
	(*unfixable)++;
	return 0;
}

int kvt_store_fsck(struct kvt_store *st, unsigned flags, struct kvt_fsck_report *rep)
{
	struct fsck_state fs = { .st = st, .rep = rep };
	struct cat *c = store_cat(st);
	unsigned unfixable = 0;
	char damage[256];
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
	/*
	 * A damaged catalog first: what follows would stop at the first
	 * damaged page it reads, with no word of the rest.
	 */
	rc = cat_quick_check(c, damage, sizeof(damage));
	if (rc == -EUCLEAN)
		log_err(0, "the catalog of '%s' is damaged: %s", st->dir, damage);
	if (rc < 0)
		goto out;

	/* Suspect: one snapshot, from its first read to the rollback. */
	rc = cat_begin_read(c);
	if (rc < 0)
		goto out;
	rc = cat_segment_list(c, fsck_load_segment, &fs);
	if (rc == 0)
		rc = cat_object_walk(c, fsck_object, &fs);
	cat_rollback(c);
	if (rc < 0)
		goto out;

	/* Confirm, against the catalog as it is now. Counts first: they compare
	 * the snapshot's segment rows, which the rechecks after them refresh. */
	for (uint32_t i = 0; i < st->nsegs && rc == 0; i++) {
		if (fs.segs[i].state == SEG_FREE || fs.segs[i].live == fs.live[i])
			continue;
		rc = fsck_confirm_segment(&fs, i, flags, &unfixable);
	}
	for (uint32_t i = 0; i < st->nsegs && rc == 0; i++)
		rc = fsck_check_map(&fs, i, &unfixable);
	if (rc == 0)
		unfixable += fsck_overlaps(&fs);
	for (size_t i = 0; i < fs.nsuspects && rc == 0; i++)
		rc = fsck_confirm_object(&fs, &fs.suspects[i], flags, &unfixable);
	if (rc == 0)
		rc = unfixable ? 1 : 0;
out:
	store_io_put(st, fs.io);
	free(fs.segs);
	free(fs.live);
	free(fs.ranges);
	for (size_t i = 0; i < fs.nsuspects; i++)
		free(fs.suspects[i].bucket);
	free(fs.suspects);
	return rc;
}
