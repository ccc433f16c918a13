/*
 * store.c - a data directory opened: the catalog, the segment files, the
 * per-thread state, the pool of I/O contexts, the append allocator and the
 * batched access times.
 *
 * Data directory:
 *
 *	DIR/catalog.db		SQLite catalog (WAL: catalog.db-wal, -shm)
 *	DIR/segments/NNNNNN	segment files, segment_size bytes each
 *	DIR/segments.map	shared generations and segment locks
 *
 * Allocation. A process appends to one segment at a time (`cur`), which it
 * claimed FREE -> OPEN while holding the segment's append lock. Writers carve
 * aligned space from it under alloc_lock. A full segment moves to `retiring`
 * and is sealed (OPEN -> SEALED) when its last writer commits or aborts, so
 * that reclaim, which only empties SEALED segments, never frees space under
 * a write in flight. Claiming a segment pushes the fill above the high
 * watermark -> reclaim runs (reclaim.c) until it is below the low one: in
 * the background demoter (demoter.c) when the store has a cold tier, else
 * in the writer.
 *
 * Access times. Reads must not become write transactions, so accesses are
 * remembered in memory (sessions in a hash table, segments in an array) and
 * a flusher thread writes them every access_flush_ms in one transaction.
 *
 * Checkpoints. The same thread copies the catalog's write-ahead log into the
 * database (store_checkpoint) when that is cheap or overdue, see there.
 *
 * Opening (store_open_segments). The segment files are written whole when
 * the store is made or grows, so the disk's room is checked first; after
 * that, a full disk only stops the catalog from growing (writes fail with
 * -ENOSPC, reads go on). On a read-only file system the store opens to be
 * read (store_open_segments_readonly): no recovery, flusher or demoter.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "util.h"

#define IO_DEPTH 8
#define IO_BUFS 4
/*
 * Idle I/O contexts (4 MiB of registered buffers each) kept for the next
 * operation: up to POOL_MAX while they are in use, and the flusher frees
 * those beyond POOL_KEEP that stayed idle for a whole flush period. With
 * POOL_MAX 8 and no delay (Session 3), 32 operations in flight made and
 * freed a context, io_uring instance and buffer registration included,
 * about 90 times a second; after a burst the resident size still falls
 * back within a second or two.
 */
#define POOL_MAX 64
#define POOL_KEEP 8
#define ACCESS_BUCKETS 1024

struct access_entry {
	int64_t bucket_id;
	char *session;
	int64_t when;
	struct access_entry *next;
};

/* ---- per-thread state ---------------------------------------------------- */

static void store_thread_free(struct store_thread *t)
{
	if (!t)
		return;
	cat_close(t->cat);
	free(t);
}

/* Thread exit: unlink this thread's state from its store and free it. */
static void store_thread_exit(void *arg)
{
	struct store_thread *t = arg;
	struct kvt_store *st = t->st;

	pthread_mutex_lock(&st->threads_lock);
	for (struct store_thread **p = &st->threads; *p; p = &(*p)->next) {
		if (*p == t) {
			*p = t->next;
			break;
		}
	}
	pthread_mutex_unlock(&st->threads_lock);
	store_thread_free(t);
	/*
	 * The connection's page cache (up to 16 MiB) went back to this thread's
	 * malloc arena, which keeps it: with 32 threads each caching the whole
	 * catalog, 140 MiB stayed resident after they were gone (kvtier bench
	 * engine, GET 64K x32). Threads end rarely; trimming then is cheap.
	 */
	util_malloc_trim();
}

struct store_thread *store_thread(struct kvt_store *st)
{
	struct store_thread *t = pthread_getspecific(st->key);
	char path[4200];
	int rc;

	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->st = st;
	t->rng = util_random64();
	snprintf(path, sizeof(path), "%s/catalog.db", st->dir);
	rc = cat_open(path, st->readonly ? CAT_READONLY : 0, &t->cat);
	if (rc < 0) {
		log_err(rc, "cannot open the catalog of '%s' for a thread", st->dir);
		store_thread_free(t);
		return NULL;
	}
	cat_watch_wal(t->cat, &st->wal_frames);
	pthread_setspecific(st->key, t);
	pthread_mutex_lock(&st->threads_lock);
	t->next = st->threads;
	st->threads = t;
	pthread_mutex_unlock(&st->threads_lock);
	return t;
}

/* ---- I/O contexts -------------------------------------------------------- */

int store_io_get(struct kvt_store *st, struct io_ctx **out)
{
	struct io_ctx *io = NULL;
	int rc;

	pthread_mutex_lock(&st->pool_lock);
	if (st->npool > 0)
		io = st->pool[--st->npool];
	if (st->npool < st->pool_low)
		st->pool_low = st->npool;
	pthread_mutex_unlock(&st->pool_lock);
	if (io) {
		*out = io;
		return 0;
	}
	if (st->io_kind == KVT_IO_URING)
		rc = io_uring_ctx_new(IO_DEPTH, IO_BUFS, SEG_EXTENT_MAX, &io);
	else
		rc = io_sync_ctx_new(IO_DEPTH, IO_BUFS, SEG_EXTENT_MAX, &io);
	if (rc < 0) {
		log_err(rc, "cannot set up %s I/O", st->io_kind == KVT_IO_URING ? "io_uring" : "sync");
		return rc;
	}
	if (st->fault) {
		struct io_ctx *wrapped;

		rc = io_fault_ctx_new(io, st->fault, &wrapped);
		if (rc < 0)
			return rc;	/* it freed io */
		io = wrapped;
	}
	if (st->powerloss) {
		struct io_ctx *wrapped;

		rc = io_powerloss_ctx_new(io, st->powerloss, &wrapped);
		if (rc < 0)
			return rc;	/* it freed io */
		io = wrapped;
	}
	*out = io;
	return 0;
}

void store_io_put(struct kvt_store *st, struct io_ctx *io)
{
	if (!io)
		return;
	pthread_mutex_lock(&st->pool_lock);
	if (st->npool < POOL_MAX) {
		st->pool[st->npool++] = io;
		io = NULL;
	}
	pthread_mutex_unlock(&st->pool_lock);
	io_ctx_free(io);
}

/*
 * The flusher: frees idle contexts beyond POOL_KEEP that no operation
 * needed since the last call. A burst that needed them is over, so the
 * heap's free memory goes back too: the threads that ran it (the gateway's
 * lanes, a bench's writers) leave their malloc arenas resident otherwise,
 * 50 MiB after 32 operations in flight on a 1,000,000-object catalog.
 */
static void store_pool_trim(struct kvt_store *st)
{
	struct io_ctx *idle[POOL_MAX];
	size_t n = 0;

	pthread_mutex_lock(&st->pool_lock);
	while (st->pool_low > POOL_KEEP && st->npool > POOL_KEEP) {
		idle[n++] = st->pool[--st->npool];
		st->pool_low--;
	}
	st->pool_low = st->npool;
	pthread_mutex_unlock(&st->pool_lock);
	if (n == 0)
		return;
	while (n > 0)
		io_ctx_free(idle[--n]);
	util_malloc_trim();
}

static void store_pool_drain(struct kvt_store *st)
{
	pthread_mutex_lock(&st->pool_lock);
	while (st->npool > 0)
		io_ctx_free(st->pool[--st->npool]);
	st->pool_low = 0;
	pthread_mutex_unlock(&st->pool_lock);
}

void store_set_fault_plan(struct kvt_store *st, struct io_fault_plan *plan)
{
	store_pool_drain(st);
	st->fault = plan;
}

void store_set_powerloss(struct kvt_store *st, struct io_powerloss *pl)
{
	store_pool_drain(st);
	st->powerloss = pl;
}

/* ---- extents on disk ----------------------------------------------------- */

int store_write_extent(struct kvt_store *st, struct io_ctx *io, int buf_index, void *buf,
		       uint32_t length, const struct store_alloc *a)
{
	uint64_t space = seg_extent_space(length);
	ssize_t n;

	seg_extent_pad(buf, length);
	n = io_run(io, IO_WRITE, seg_fd(st->sf, a->segment), buf, buf_index, space, a->offset);
	if (n == (ssize_t)space) {
		store_seg_written(st, a->segment);
		return 0;
	}
	if (n >= 0) {
		log_err(0, "short write to segment %u at %llu: %zd of %llu bytes", a->segment,
			(unsigned long long)a->offset, n, (unsigned long long)space);
		return -EIO;
	}
	log_err((int)n, "cannot write segment %u at %llu", a->segment, (unsigned long long)a->offset);
	return (int)n;
}

int store_extent_check_place(struct kvt_store *st, uint64_t vid, const struct cat_extent *e)
{
	if (e->segment < st->nsegs && e->offset % SEG_ALIGN == 0 && e->length <= SEG_PAYLOAD_MAX &&
	    e->offset + seg_extent_space(e->length) <= st->seg_size)
		return 0;
	log_err(0, "extent %u of version %016llx (%u bytes) lies outside segment %u", e->seq,
		(unsigned long long)vid, e->length, e->segment);
	return -EIO;
}

int store_read_extent_raw(struct kvt_store *st, struct io_ctx *io, int buf_index, void *buf,
			  uint64_t vid, const struct cat_extent *e)
{
	uint64_t space = seg_extent_space(e->length);
	ssize_t n;
	int rc = store_extent_check_place(st, vid, e);

	if (rc < 0)
		return rc;
	/* The generation before and after the read: see segment.h. */
	if (seg_map_gen(st->sf, e->segment) != e->gen)
		return -ESTALE;
	n = io_run(io, IO_READ, seg_fd(st->sf, e->segment), buf, buf_index, space, e->offset);
	if (seg_map_gen(st->sf, e->segment) != e->gen)
		return -ESTALE;
	if (n != (ssize_t)space) {
		rc = n < 0 ? (int)n : -EIO;
		log_err(rc, "cannot read segment %u at %llu", e->segment, (unsigned long long)e->offset);
	}
	return rc;
}

int store_read_extent(struct kvt_store *st, struct io_ctx *io, int buf_index, void *buf,
		      uint64_t vid, const struct cat_extent *e)
{
	int rc = store_read_extent_raw(st, io, buf_index, buf, vid, e);

	return rc < 0 ? rc : store_extent_verify(st, buf, vid, e);
}

uint64_t store_new_vid(struct kvt_store *st)
{
	struct store_thread *t = store_thread(st);
	uint64_t z;

	if (!t)
		return util_random64();
	/* splitmix64 over a per-thread random start: distinct ids w.h.p. */
	z = (t->rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ---- allocation ---------------------------------------------------------- */

/*
 * One transaction: claim (FREE -> OPEN) or reopen (SEALED -> OPEN). A
 * writer's claim leaves STORE_RESERVE_SEGS free segments alone (-ENOSPC);
 * reclaim's own claim (take_reserve) may take them. Counted in the claim's
 * transaction: writers of two processes that each saw one segment above
 * the reserve would otherwise both take one. While fewer than
 * STORE_RESERVE_SEGS are free (a reclaimer has the reserve, or died with
 * it), a writer does not reopen part-full segments either: their room is
 * where reclaim relocates to until it has freed a segment again
 * (reclaim.c, reclaim_room). Filled with cache, it left every segment
 * pinned and none free, for good (test_multiproc:
 * test_reclaim_killed_relocating).
 */
static int store_claim_txn(struct cat *c, uint32_t id, uint64_t used, int reopen,
			   int take_reserve, uint64_t *gen)
{
	uint64_t counts[4];
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	if (!take_reserve) {
		rc = cat_segment_counts(c, counts);
		if (rc == 0 && counts[SEG_FREE] < STORE_RESERVE_SEGS + (reopen ? 0 : 1))
			rc = -ENOSPC;
	}
	if (rc == 0)
		rc = reopen ? cat_segment_reopen(c, id, used, gen) : cat_segment_claim(c, id, gen);
	return rc == 0 ? cat_commit(c) : (cat_rollback(c), rc);
}

/*
 * A segment to append `space` bytes to, under its append lock: a sealed one
 * that a process closed part-full (so that short-lived processes, such as
 * the CLI, do not each use up a segment), else the lowest free one, unless
 * only the reserve is left and the caller is not reclaim (take_reserve):
 * -ENOSPC (STORE_RESERVE_SEGS).
 */
static int store_claim(struct kvt_store *st, uint64_t space, int take_reserve,
		       struct store_open_seg *out)
{
	struct cat *c = store_cat(st);
	uint64_t max_used = st->seg_size - MAX(space, st->seg_size / 16), used = 0, gen;
	uint32_t after = UINT32_MAX, id;
	int rc, reopen = 1;

	if (!c)
		return -ENOMEM;
	for (;;) {
		rc = reopen ? cat_segment_next_partial(c, after, max_used, &id, &used)
			    : cat_segment_next_free(c, after, &id);
		if (rc == -ENOENT && reopen) {
			reopen = 0;
			after = UINT32_MAX;
			used = 0;
			continue;
		}
		if (rc < 0)
			return rc;
		after = id;
		if (store_append_trylock(st, id) < 0)
			continue;	/* another process is claiming, reclaiming or recovering it */
		/*
		 * A reader may still be sending checked bytes of a freed segment
		 * straight from the page cache (segment.h, pins): take another
		 * (-EBUSY, as for a claim that lost a race). Probed under the
		 * append lock, never before it: whoever freed the segment
		 * published its new generation before it let the lock go, so a
		 * pin taken after this probe finds that generation and its
		 * reader gets -ESTALE.
		 */
		rc = seg_pin_probe(st->lock_fd, id) < 0 ? -EBUSY :
			store_claim_txn(c, id, used, reopen, take_reserve, &gen);
		if (rc < 0) {
			store_append_unlock(st, id);
			if (rc == -EBUSY)
				continue;
			return rc;
		}
		/* Publish the generation before any byte of it is written. */
		seg_map_set_gen(st->sf, id, gen);
		*out = (struct store_open_seg){ .id = id, .gen = gen, .off = used };
		return 0;
	}
}

/*
 * Two threads of this process share lock_fd, so the kernel lets both take
 * one segment's append lock, and the first unlock drops it for both. A
 * claim that lost a race for a segment another thread here had just
 * opened unlocked it under that thread: another process's recovery then
 * sealed the segment it was still appending to ("cannot seal segment":
 * -ESTALE, in a trace replay beside a `kvtier stat` every 10 s).
 */
int store_append_trylock(struct kvt_store *st, uint32_t id)
{
	int rc = -EAGAIN;

	pthread_mutex_lock(&st->append_lock);
	if (!st->append_held[id]) {
		rc = seg_append_trylock(st->lock_fd, id);
		st->append_held[id] = rc == 0;
	}
	pthread_mutex_unlock(&st->append_lock);
	return rc;
}

void store_append_unlock(struct kvt_store *st, uint32_t id)
{
	pthread_mutex_lock(&st->append_lock);
	seg_append_unlock(st->lock_fd, id);
	st->append_held[id] = 0;
	pthread_mutex_unlock(&st->append_lock);
}

/*
 * Gives up appending: OPEN -> SEALED with the append pointer (another
 * process may reopen it), or FREE if nothing was ever appended. If the
 * catalog cannot say so (an I/O error), the append lock goes all the same,
 * so that recovery takes the segment as a dead owner's, and the flusher's
 * next tick runs it: else the segment stayed OPEN, room nobody could use,
 * until a writer ran out of room or the process restarted.
 */
static void store_seal(struct kvt_store *st, const struct store_open_seg *s)
{
	struct cat *c = store_cat(st);
	int rc = c ? cat_begin(c) : -ENOMEM;

	if (rc == 0) {
		rc = cat_segment_set_state(c, s->id, SEG_OPEN, s->off ? SEG_SEALED : SEG_FREE, s->off);
		rc = rc == 0 ? cat_commit(c) : (cat_rollback(c), rc);
	}
	if (rc < 0) {
		log_err(rc, "cannot seal segment %u (recovery will)", s->id);
		__atomic_store_n(&st->seal_failed, 1, __ATOMIC_RELAXED);
	}
	store_append_unlock(st, s->id);
}

/* The flusher's part: recovery of the segments store_seal() could not seal. */
static void store_recover_unsealed(struct kvt_store *st)
{
	if (__atomic_exchange_n(&st->seal_failed, 0, __ATOMIC_RELAXED) && reclaim_recover(st) < 0)
		__atomic_store_n(&st->seal_failed, 1, __ATOMIC_RELAXED);
}

int store_above_high(struct kvt_store *st, uint64_t *nfree)
{
	uint64_t counts[4];
	struct cat *c = store_cat(st);

	if (nfree)
		*nfree = 0;
	if (!c || cat_segment_counts(c, counts) < 0)
		return 0;
	if (nfree)
		*nfree = counts[SEG_FREE];
	/*
	 * The reserve counts as used: writers cannot have it. Else a store
	 * of four segments, three full and one the reserve, was at 75 %,
	 * below the high watermark, and a process idle in a part-full
	 * segment kept it while a writer elsewhere found no room
	 * (store_seal_idle; test_multiproc: test_idle_segment_sealed).
	 */
	return (double)(st->nsegs - counts[SEG_FREE] + STORE_RESERVE_SEGS) >
	       st->high_watermark * st->nsegs;
}

/* Segments that writers of this process still append to: reclaim cannot
 * take them until their last writer commits or aborts. */
static int store_claims_pending(struct kvt_store *st)
{
	int pending;

	pthread_mutex_lock(&st->alloc_lock);
	pending = st->nretiring > 0 || (st->have_cur && st->cur.refs > 0);
	pthread_mutex_unlock(&st->alloc_lock);
	return pending;
}

/*
 * Segments that other live processes append to: their writers' room, or
 * room left idle until store_seal_idle() seals it there. The segments of
 * processes that died are recovered first (sealed, freed if nothing in
 * them was committed): a scan of every segment, so once a flusher tick of
 * a writer's wait at most (*next_recover_ns, 0 at the start of the wait).
 */
static int store_others_open(struct kvt_store *st, int64_t *next_recover_ns)
{
	struct cat *c = store_cat(st);
	int64_t now = util_mono_ns();
	uint64_t counts[4], own;

	if (!c)
		return 0;
	if (now >= *next_recover_ns) {
		*next_recover_ns = now + (int64_t)st->access_flush_ms * 1000000;
		if (reclaim_recover(st) < 0)
			return 0;
	}
	if (cat_segment_counts(c, counts) < 0)
		return 0;
	pthread_mutex_lock(&st->alloc_lock);
	own = st->nretiring + (st->have_cur ? 1 : 0) + (st->have_reloc ? 1 : 0);
	pthread_mutex_unlock(&st->alloc_lock);
	return counts[SEG_OPEN] > own;
}

/*
 * A process appends to its open segment until it is full, and no other
 * process may reopen or reclaim it meanwhile: a daemon that wrote a little
 * and went idle held it for good, and a writer in another process found
 * the store full while that room sat unused (ENOSPC in a store of four
 * segments shared by kvtier-gateway and kvtier-fuse). So above the high
 * watermark the flusher seals it once no writer has taken room in it for a
 * whole tick and none still writes there; a writer elsewhere waits for
 * that (store_alloc), and the next writer here reopens it if nobody did.
 */
static void store_seal_idle(struct kvt_store *st)
{
	struct store_open_seg seal;
	int idle;

	pthread_mutex_lock(&st->alloc_lock);
	idle = st->have_cur && st->cur.refs == 0 && st->nallocs == st->nallocs_seen;
	st->nallocs_seen = st->nallocs;
	pthread_mutex_unlock(&st->alloc_lock);
	if (!idle || !store_above_high(st, NULL))
		return;
	pthread_mutex_lock(&st->alloc_lock);
	idle = st->have_cur && st->cur.refs == 0 && st->nallocs == st->nallocs_seen;
	if (idle) {
		seal = st->cur;
		st->have_cur = 0;
	}
	pthread_mutex_unlock(&st->alloc_lock);
	if (idle)
		store_seal(st, &seal);
}

/*
 * Relocation's store_alloc(): from reclaim's own open segment (reloc),
 * claiming one (a part-full one first, else a free one, the reserve
 * included) when it has no room. Never waits, never reclaims: -ENOSPC.
 * Called under reclaim_lock, so by one thread at a time, and each copy is
 * released before the next is carved (reclaim_relocate): the one it
 * replaces has no extent in flight.
 */
static int store_alloc_reloc(struct kvt_store *st, uint64_t space, struct store_alloc *out)
{
	struct store_open_seg fresh, old = { 0 };
	int rc, seal_old = 0;

	pthread_mutex_lock(&st->alloc_lock);
	if (!st->have_reloc || st->reloc.off + space > st->seg_size) {
		pthread_mutex_unlock(&st->alloc_lock);
		rc = store_claim(st, space, 1, &fresh);
		if (rc < 0)
			return rc;
		pthread_mutex_lock(&st->alloc_lock);
		if (st->have_reloc) {
			old = st->reloc;
			seal_old = 1;
		}
		st->reloc = fresh;
	}
	st->have_reloc = 1;
	out->segment = st->reloc.id;
	out->gen = st->reloc.gen;
	out->offset = st->reloc.off;
	st->reloc.off += space;
	st->reloc.refs++;
	pthread_mutex_unlock(&st->alloc_lock);
	if (seal_old)
		store_seal(st, &old);
	return 0;
}

uint64_t store_reloc_room(struct kvt_store *st)
{
	uint64_t room = 0;

	pthread_mutex_lock(&st->alloc_lock);
	if (st->have_reloc)
		room = st->seg_size - st->reloc.off;
	pthread_mutex_unlock(&st->alloc_lock);
	return room;
}

void store_reloc_seal(struct kvt_store *st)
{
	struct store_open_seg seal;
	int do_seal;

	pthread_mutex_lock(&st->alloc_lock);
	do_seal = st->have_reloc && st->reloc.refs == 0;
	if (do_seal) {
		seal = st->reloc;
		st->have_reloc = 0;
	}
	pthread_mutex_unlock(&st->alloc_lock);
	if (do_seal)
		store_seal(st, &seal);
}

/* store_alloc(), waiting at most limit_ns for room; *wait_start_ns says
 * when it began to wait (left alone if it found room at once). */
static int store_alloc_within(struct kvt_store *st, uint64_t space, int64_t limit_ns,
			      int64_t *wait_start_ns, struct store_alloc *out)
{
	struct store_thread *t = store_thread(st);
	struct store_open_seg fresh, retire = { 0 };
	struct demoter_wait wait = { .limit_ns = limit_ns };
	int64_t give_up_ns = 0, next_recover_ns = 0;
	int rc, need_retire, reclaimed = 0, others_seen = 0;

	if (!t)
		return -ENOMEM;
	if (space > st->seg_size)
		return -EFBIG;
	if (t->in_reclaim)
		return store_alloc_reloc(st, space, out);
	for (;;) {
		pthread_mutex_lock(&st->alloc_lock);
		if (st->have_cur && st->cur.off + space <= st->seg_size) {
			out->segment = st->cur.id;
			out->gen = st->cur.gen;
			out->offset = st->cur.off;
			st->cur.off += space;
			st->cur.refs++;
			st->nallocs++;
			pthread_mutex_unlock(&st->alloc_lock);
			return 0;
		}
		pthread_mutex_unlock(&st->alloc_lock);

		/*
		 * Out of room: claim a fresh segment outside the lock. Above the
		 * high watermark the demoter, if this store has one, makes room
		 * in the background; else this writer reclaims (demoting what
		 * it must: there is no one else to do it).
		 */
		if (store_above_high(st, NULL)) {
			if (st->demoter_running)
				demoter_kick(st);
			else
				store_reclaim_if_idle(st);
		}
		rc = store_claim(st, space, 0, &fresh);
		if (rc == -ENOSPC && cat_disk_full(t->cat))
			return rc;	/* the disk under the catalog, not the hot tier */
		if (rc == -ENOSPC) {
			/*
			 * What needs no upload goes now; session state G4 lacks
			 * is the demoter's (once; then wait for it). Without one,
			 * a segment this frees may go to another writer first,
			 * and segments still being filled seal as their writers
			 * commit: try again until space_wait is up while reclaim
			 * finds room or they may. Giving up after one try, 32
			 * writers of 32 MiB failed 24 PUTs a second with ENOSPC
			 * in a 4 GiB store holding 1 GiB (kvtier bench engine;
			 * test_object: test_reclaim_racing_writers). So do
			 * segments other processes still append to, as their
			 * writers commit or they seal them idle (test_multiproc:
			 * test_idle_segment_sealed).
			 */
			if (!give_up_ns) {
				*wait_start_ns = util_mono_ns();
				give_up_ns = *wait_start_ns + limit_ns;
			}
			if (!reclaimed ||
			    (!st->demoter_running && util_mono_ns() < give_up_ns)) {
				reclaimed = 1;
				rc = reclaim_run(st, STORE_RESERVE_SEGS + 1, !st->demoter_running);
				if (rc < 0 && rc != -ENOSPC)
					return rc;
				if (rc == 0)
					continue;
				if (!st->demoter_running && store_claims_pending(st)) {
					usleep(1000);
					continue;
				}
				/* Once they are gone, one more try: a segment sealed
				 * between the claim and this look (its append lock
				 * let go just after) is room only a claim finds. */
				if (!st->demoter_running) {
					int others = store_others_open(st, &next_recover_ns);

					if (others || others_seen) {
						others_seen = others;
						usleep(10000);
						continue;
					}
				}
			}
			/* The demoter cannot take another process's open segment
			 * either: give that process time to seal it, which it does
			 * by its second tick after its last write, or the first
			 * after the store filled (store_seal_idle), and a tick
			 * more to spare. */
			if (st->demoter_running && !wait.deadline_ns &&
			    store_others_open(st, &next_recover_ns))
				wait.patience_ns = util_mono_ns() +
						   3 * (int64_t)st->access_flush_ms * 1000000;
			if (st->demoter_running && demoter_wait(st, &wait) == 0)
				continue;
			__atomic_store_n(&st->space_refused, 1, __ATOMIC_RELAXED);
			return -ENOSPC;
		}
		if (rc < 0)
			return rc;
		__atomic_store_n(&st->space_refused, 0, __ATOMIC_RELAXED);
		if (wait.deadline_ns)
			demoter_waited(st, &wait);

		pthread_mutex_lock(&st->alloc_lock);
		need_retire = 0;
		if (st->have_cur && st->cur.off + space <= st->seg_size) {
			/* Another thread installed a segment meanwhile: give ours back. */
			pthread_mutex_unlock(&st->alloc_lock);
			store_seal(st, &fresh);
			continue;
		}
		if (st->have_cur) {
			retire = st->cur;
			if (retire.refs > 0) {
				struct store_open_seg *r = realloc(st->retiring,
					(st->nretiring + 1) * sizeof(*r));

				if (r) {
					st->retiring = r;
					st->retiring[st->nretiring++] = retire;
				} else {
					need_retire = 1;	/* seal now; commit will find it sealed */
				}
			} else {
				need_retire = 1;
			}
		}
		st->cur = fresh;
		st->have_cur = 1;
		pthread_mutex_unlock(&st->alloc_lock);
		if (need_retire)
			store_seal(st, &retire);
	}
}

int store_alloc(struct kvt_store *st, uint64_t space, int64_t *waited_ns,
		struct store_alloc *out)
{
	int64_t limit_ns = (int64_t)st->space_wait_ms * 1000000, wait_start_ns = 0;
	int rc;

	if (waited_ns)
		limit_ns = MAX(limit_ns - *waited_ns, 0);
	rc = store_alloc_within(st, space, limit_ns, &wait_start_ns, out);
	if (waited_ns && wait_start_ns)
		*waited_ns += util_mono_ns() - wait_start_ns;
	return rc;
}

void store_release(struct kvt_store *st, uint32_t segment, uint64_t gen)
{
	struct store_open_seg seal;
	int do_seal = 0;

	pthread_mutex_lock(&st->alloc_lock);
	if (st->have_cur && st->cur.id == segment && st->cur.gen == gen) {
		st->cur.refs--;
	} else if (st->have_reloc && st->reloc.id == segment && st->reloc.gen == gen) {
		st->reloc.refs--;
	} else {
		for (size_t i = 0; i < st->nretiring; i++) {
			struct store_open_seg *r = &st->retiring[i];

			if (r->id != segment || r->gen != gen)
				continue;
			if (--r->refs == 0) {
				seal = *r;
				st->retiring[i] = st->retiring[--st->nretiring];
				do_seal = 1;
			}
			break;
		}
	}
	pthread_mutex_unlock(&st->alloc_lock);
	if (do_seal)
		store_seal(st, &seal);
}

/* ---- access times -------------------------------------------------------- */

static unsigned access_hash(int64_t bucket_id, const char *s)
{
	uint32_t h = 2166136261u ^ (uint32_t)bucket_id;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % ACCESS_BUCKETS;
}

void store_touch(struct kvt_store *st, int64_t bucket_id, const char *session,
		 const struct cat_extent *extents, size_t nextents)
{
	int64_t now = util_now_ns();
	struct access_entry *e;
	unsigned h;

	if (st->readonly)
		return;		/* nothing to record them in */
	for (size_t i = 0; i < nextents; i++)
		if (extents[i].segment < st->nsegs)
			__atomic_store_n(&st->seg_access[extents[i].segment], now, __ATOMIC_RELAXED);
	if (!session)
		return;
	h = access_hash(bucket_id, session);
	pthread_mutex_lock(&st->access_lock);
	for (e = st->access[h]; e; e = e->next)
		if (e->bucket_id == bucket_id && strcmp(e->session, session) == 0)
			break;
	if (!e && (e = calloc(1, sizeof(*e))) && (e->session = strdup(session))) {
		e->bucket_id = bucket_id;
		e->next = st->access[h];
		st->access[h] = e;
	} else if (e && !e->session) {
		free(e);
		e = NULL;
	}
	if (e)
		e->when = now;
	pthread_mutex_unlock(&st->access_lock);
}

int kvt_store_flush_access(struct kvt_store *st)
{
	struct access_entry *list = NULL, *e, *next;
	struct cat *c = store_cat(st);
	int rc;

	if (!c)
		return -ENOMEM;
	if (st->readonly)
		return 0;	/* store_touch() recorded nothing */
	pthread_mutex_lock(&st->access_lock);
	for (unsigned i = 0; i < ACCESS_BUCKETS; i++) {
		for (e = st->access[i]; e; e = next) {
			next = e->next;
			e->next = list;
			list = e;
		}
		st->access[i] = NULL;
	}
	pthread_mutex_unlock(&st->access_lock);

	rc = cat_begin(c);
	for (e = list; e && rc == 0; e = e->next)
		rc = cat_touch_session(c, e->bucket_id, e->session, e->when);
	for (uint32_t i = 0; i < st->nsegs && rc == 0; i++) {
		int64_t when = __atomic_exchange_n(&st->seg_access[i], 0, __ATOMIC_RELAXED);

		if (when)
			rc = cat_touch_segment(c, i, when);
	}
	rc = rc == 0 ? cat_commit(c) : (cat_rollback(c), rc);
	for (e = list; e; e = next) {
		next = e->next;
		free(e->session);
		free(e);
	}
	if (rc < 0 && log_every(&st->access_warned, 60))
		log_warn(rc, "cannot record access times (they are only hints)");
	return rc;
}

/*
 * A checkpoint syncs the log and then the database, and each sync flushes
 * the device's write cache: every byte written since the last flush,
 * segment data included, must reach stable media before the next write is
 * served. On this project's virtual machines a flush after one second of
 * 2 MiB PUTs took 100 to 500 ms and stalled the disk meanwhile, and fio,
 * the engine's baseline, never flushes (docs/benchmarks.md, "Session 7:
 * device flushes").
 *
 * So the flusher checkpoints when the catalog went quiet (no connection,
 * in any process, committed since the last tick), else only when the last
 * checkpoint is CKPT_PERIOD_NS old or the log holds CKPT_WAL_FRAMES.
 * A kill -9 still keeps every commit (the log is in the page cache). What
 * a power loss may take back is what was committed since the last sync of
 * the log, unless kvt_store_sync() ran: under steady writes now up to about
 * CKPT_PERIOD_NS of it, where a checkpoint every tick kept that to a second.
 *
 * Under writes that never pause, a passive checkpoint never reaches the
 * log's end (writers append while it copies), and SQLite starts the log
 * over only when a writer finds all of it copied: the log grew without
 * bound, to 1.4 GB in the 9 s of kvtier bench engine's 64 KiB fill at 8 in
 * flight, and every page read searched more of it. So past twice
 * CKPT_WAL_FRAMES the passive checkpoint is followed by a RESTART one: it
 * copies only what came meanwhile, holds writers off while it does, and
 * the next writer starts the log over (journal_size_limit then cuts the
 * file back to 128 MiB, catalog.c).
 *
 * A reader of an old snapshot (kvtier fsck reads one for minutes) keeps
 * the RESTART from finishing: it then held writers off for its 100 ms at
 * every tick, to no use, since the log cannot start over before that
 * reader is done. So after a RESTART gives up, the next waits 2, 4, 8,
 * then 16 ticks, at most CKPT_PERIOD_NS. Not CKPT_PERIOD_NS at once: a
 * loaded machine can hold a RESTART off with a reader that is merely slow
 * to finish, and the log then grew for those 10 s (test_commit's
 * test_log_bounded_under_load failed so, in a make distcheck).
 */
#define CKPT_PERIOD_NS (10 * 1000000000LL)
#define CKPT_WAL_FRAMES 32768		/* 128 MiB of 4 KiB pages: st->ckpt_frames */

static void store_checkpoint(struct kvt_store *st)
{
	struct cat *c = store_cat(st);
	int64_t now = util_now_ns(), version = 0;
	unsigned frames = __atomic_load_n(&st->wal_frames, __ATOMIC_RELAXED);
	int quiet, restart, rc;

	if (!c)
		return;
	quiet = cat_data_version(c, &version) == 0 && version == st->ckpt_version;
	st->ckpt_version = version;
	if (!quiet && now - st->ckpt_ns < CKPT_PERIOD_NS && frames < st->ckpt_frames)
		return;
	st->ckpt_ns = now;
	restart = frames >= 2 * st->ckpt_frames && now >= st->ckpt_restart_ns;
	rc = cat_checkpoint(c, restart);
	if (rc < 0)
		log_warn(0, "cannot checkpoint the catalog of '%s'", st->dir);
	if (rc == 1) {
		int64_t wait;

		st->ckpt_restart_fails++;
		wait = (int64_t)st->access_flush_ms * 1000000 << MIN(st->ckpt_restart_fails, 4);
		st->ckpt_restart_ns = now + MIN(wait, CKPT_PERIOD_NS);
		__atomic_add_fetch(&st->ckpt_restarts_held, 1, __ATOMIC_RELAXED);
	} else if (restart && rc == 0) {
		st->ckpt_restart_fails = 0;
	}
}

static void *store_flusher(void *arg)
{
	struct kvt_store *st = arg;

	pthread_mutex_lock(&st->access_lock);
	while (!st->stopping) {
		struct timespec ts;

		util_deadline(&ts, st->access_flush_ms);
		pthread_cond_timedwait(&st->access_cond, &st->access_lock, &ts);
		if (st->stopping)
			break;
		pthread_mutex_unlock(&st->access_lock);
		kvt_store_flush_access(st);
		store_checkpoint(st);
		store_pool_trim(st);
		store_seal_idle(st);
		store_recover_unsealed(st);
		pthread_mutex_lock(&st->access_lock);
	}
	pthread_mutex_unlock(&st->access_lock);
	return NULL;
}

/* ---- helpers for the object modules -------------------------------------- */

int store_bucket_id(struct kvt_store *st, const char *bucket, int64_t *id)
{
	struct cat *c = store_cat(st);

	if (!c)
		return -ENOMEM;
	if (!kvt_bucket_name_valid(bucket) && !bucket_internal_name(bucket))
		return -ENOENT;
	return cat_bucket_id(c, bucket, id);
}

/*
 * Why a cache: kvt_writer_open() asked the catalog for the bucket's id on
 * every PUT, in a read transaction of the writer thread's own connection,
 * and the first transaction after any other connection's commit makes
 * SQLite drop that connection's cache and unmap and remap the database
 * (commit.c). Under concurrent PUTs that was every PUT: with 32 in flight,
 * 41% of the process's munmap calls came from this one query.
 */
static struct store_bucket_slot *store_bucket_slot(struct kvt_store *st, const char *bucket)
{
	uint32_t h = 2166136261u;

	for (const char *p = bucket; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return &st->bucket_cache[h % ARRAY_SIZE(st->bucket_cache)];
}

int store_bucket_id_cached(struct kvt_store *st, const char *bucket, int64_t *id, int *cached)
{
	struct store_bucket_slot *slot = store_bucket_slot(st, bucket);
	char *name;
	int rc;

	*cached = 0;
	pthread_mutex_lock(&st->bucket_cache_lock);
	if (slot->name && strcmp(slot->name, bucket) == 0) {
		*id = slot->id;
		*cached = 1;
	}
	pthread_mutex_unlock(&st->bucket_cache_lock);
	if (*cached)
		return 0;
	rc = store_bucket_id(st, bucket, id);
	if (rc < 0)
		return rc;
	name = strdup(bucket);
	if (!name)
		return 0;	/* only not cached */
	pthread_mutex_lock(&st->bucket_cache_lock);
	free(slot->name);
	slot->name = name;
	slot->id = *id;
	pthread_mutex_unlock(&st->bucket_cache_lock);
	return 0;
}

void store_bucket_forget(struct kvt_store *st, const char *bucket)
{
	pthread_mutex_lock(&st->bucket_cache_lock);
	for (size_t i = 0; i < ARRAY_SIZE(st->bucket_cache); i++) {
		struct store_bucket_slot *slot = &st->bucket_cache[i];

		if (slot->name && (!bucket || strcmp(slot->name, bucket) == 0)) {
			free(slot->name);
			slot->name = NULL;
		}
	}
	pthread_mutex_unlock(&st->bucket_cache_lock);
}

char *store_session_of(struct kvt_store *st, const char *key, const char *explicit_session)
{
	const char *p = key;

	if (explicit_session && *explicit_session)
		return strdup(explicit_session);
	/* The first session_depth directories; a key without them is its own session. */
	for (unsigned i = 0; i < st->session_depth; i++) {
		const char *slash = strchr(p, '/');

		if (!slash)
			return strdup(key);
		p = slash + 1;
	}
	return strndup(key, (size_t)(p - key - 1));
}

char *kvt_key_session(struct kvt_store *st, const char *key)
{
	return store_session_of(st, key, NULL);
}

void store_posix_fill(struct kvt_posix *out, const struct kvt_posix *given, int64_t mtime_ns)
{
	if (given) {
		*out = *given;
	} else {
		memset(out, 0, sizeof(*out));
		out->mode = 0644;
		out->kind = KVT_KIND_FILE;
	}
	if (!out->atime_ns)
		out->atime_ns = mtime_ns;
	if (!out->ctime_ns)
		out->ctime_ns = mtime_ns;
}

void store_checksum_failure(struct kvt_store *st, uint64_t vid, const struct cat_extent *e)
{
	struct cat *c = store_cat(st);
	char name[96];
	int rc;

	if (!c)
		return;
	/* Where the bad bytes are: a segment reused since has another gen. */
	if (e)
		snprintf(name, sizeof(name), "checksum_failure %u.%llu.%llu", e->segment,
			 (unsigned long long)e->gen, (unsigned long long)e->offset);
	else
		snprintf(name, sizeof(name), "checksum_failure %016llx", (unsigned long long)vid);
	rc = cat_counter_once(c, name);
	if (rc > 0)
		rc = cat_counter_add(c, "checksum_failures", 1);
	if (rc < 0)
		log_warn(-rc, "cannot count a checksum failure");
}

/* ---- open and close ------------------------------------------------------ */

/* The shared generations from the catalog: all after a reboot, else those behind. */
static int store_map_rebuild(struct kvt_store *st, struct cat *c);

static int map_rebuild_one(void *arg, const struct cat_segment *s)
{
	struct kvt_store *st = arg;

	if (s->id < st->nsegs)
		seg_map_set_gen(st->sf, s->id, s->gen);
	return 0;
}

static int store_map_rebuild(struct kvt_store *st, struct cat *c)
{
	int stale = seg_map_stale(st->sf);
	int rc = cat_segment_list(c, map_rebuild_one, st);

	if (rc == 0 && stale)
		seg_map_mark_fresh(st->sf);
	return rc;
}

static enum kvt_io_kind store_pick_io(const struct kvt_config *cfg)
{
	static int warned;
	char why[256], seg0[4200];

	if (cfg->store.io != KVT_IO_URING)
		return cfg->store.io;
	seg_file_path(cfg->store.dir, 0, seg0, sizeof(seg0));
	if (io_uring_probe(cfg->store.dir, seg0, why, sizeof(why)) == 0)
		return KVT_IO_URING;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		log_warn(0, "io_uring with O_DIRECT is unavailable in '%s' (%s): using sync I/O",
			 cfg->store.dir, why);
	return KVT_IO_SYNC;
}

/* Free room below which opening a store warns: the catalog grows into it. */
#define STORE_CATALOG_ROOM ((uint64_t)64 << 20)

/*
 * Segment files are written in full before use (seg_file_fill), so a
 * capacity the file system under the store cannot hold is refused here,
 * before any is written, rather than by ENOSPC part way through. What the
 * catalog then needs is what is left: warn when that is little.
 */
static int store_room_check(const struct kvt_store *st)
{
	uint64_t need = 0, avail;
	char path[4200];
	struct statvfs vfs;
	struct stat sb;

	for (uint32_t i = 0; i < st->nsegs; i++) {
		seg_file_path(st->dir, i, path, sizeof(path));
		if (stat(path, &sb) < 0)
			need += st->seg_size;
		else if ((uint64_t)sb.st_size < st->seg_size)
			need += st->seg_size - (uint64_t)sb.st_size;
	}
	if (need == 0 || statvfs(st->dir, &vfs) < 0)
		return 0;
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (need > avail) {
		log_err(0, "capacity %llu MiB needs %llu MiB more for segment files in '%s', "
			"which has %llu MiB free: lower [store] capacity or make room",
			(unsigned long long)(st->nsegs * st->seg_size >> 20),
			(unsigned long long)(need >> 20), st->dir, (unsigned long long)(avail >> 20));
		return -ENOSPC;
	}
	if (avail - need < STORE_CATALOG_ROOM)
		log_warn(0, "'%s' keeps only %llu MiB free beside the segment files for the catalog",
			 st->dir, (unsigned long long)((avail - need) >> 20));
	return 0;
}

/*
 * A process holds every segment file open, and a second descriptor of each
 * it reads through the page cache (seg_fd_cached): a store of 30 TB in
 * segments of 256 MiB is 120,000 of them, and a shell's usual limit is
 * 1,024. The soft limit goes up to the hard one; below what the segments
 * need, the open is refused with what to change, not with EMFILE halfway.
 */
uint64_t kvt_store_nofile_want(const struct kvt_store *st)
{
	return 2 * (uint64_t)st->nsegs + 256;
}

static int store_nofile_check(const struct kvt_store *st)
{
	uint64_t need = (uint64_t)st->nsegs + 64, want = kvt_store_nofile_want(st);
	uint64_t have = util_raise_nofile(want);

	if (have < need) {
		log_err(0, "the store in '%s' has %u segments, and a process holds each open: "
			"the open-file limit is %llu; raise it to at least %llu (ulimit -n, "
			"LimitNOFILE=) or use a larger segment_size", st->dir, st->nsegs,
			(unsigned long long)have, (unsigned long long)want);
		return -EMFILE;
	}
	if (have < want)
		log_warn(0, "the open-file limit (%llu) is below the %llu that the %u segments of '%s' "
			 "may need", (unsigned long long)have, (unsigned long long)want, st->nsegs,
			 st->dir);
	return 0;
}

/*
 * A segment file that held objects and was gone or shorter than a segment
 * (deleted or cut by mistake) was made whole again by seg_files_open: say
 * what that lost. One never used (an init killed while it wrote the files)
 * lost nothing.
 */
static int store_report_made(void *arg, const struct cat_segment *s)
{
	const struct kvt_store *st = arg;
	const struct seg_made *made;
	char path[4200];
	uint32_t n, lo = 0, hi;

	if (s->state == SEG_FREE && s->gen <= 1)
		return 0;
	made = seg_files_made(st->sf, &n);
	for (hi = n; lo < hi;) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (made[mid].id < s->id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == n || made[lo].id != s->id)
		return 0;
	seg_file_path(st->dir, s->id, path, sizeof(path));
	if (made[lo].size == 0)
		log_err(0, "segment file '%s' was missing: made again, empty; the objects it held "
			"are lost ('kvtier fsck --repair' forgets them)", path);
	else
		log_err(0, "segment file '%s' was cut to %llu bytes: filled up again with zeros; "
			"what it held past that is lost ('kvtier fsck --repair' forgets it)",
			path, (unsigned long long)made[lo].size);
	return 0;
}

/* Removes what a first open that failed had made: nothing was stored yet. */
static void store_unmake(const char *dir)
{
	static const char *const names[] = { "catalog.db", "catalog.db-wal", "catalog.db-shm",
					     "segments.map" };
	char path[4200];

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/segments", dir);
	rmdir(path);
}

/*
 * A store on a read-only file system (ext4 remounts so after an I/O error;
 * a snapshot mounted for a backup) opens to be read: its catalog as it is,
 * its segment files to read, its map in this process's memory. It cannot
 * grow: a capacity raised since is served at the size the store has, and
 * said. Nothing is recovered, reclaimed, demoted or recorded.
 */
static int store_open_segments_readonly(struct kvt_store *st, const char *catalog_path)
{
	struct cat *c = NULL;
	uint32_t had = 0;
	int rc;

	log_warn(0, "'%s' is on a read-only file system: opened to read only", st->dir);
	rc = cat_open(catalog_path, CAT_READONLY, &c);
	if (rc == 0)
		rc = cat_segment_count(c, &had);
	if (rc == 0 && had < st->nsegs) {
		log_warn(0, "the store in '%s' has %u segments and cannot grow to the %u that "
			 "capacity asks for on a read-only file system: opened at %u", st->dir,
			 had, st->nsegs, had);
		st->nsegs = had;
	}
	if (rc == 0)
		rc = cat_init_geometry(c, st->seg_size, st->nsegs);
	if (rc < 0)
		log_err(rc, "cannot open the catalog '%s'", catalog_path);
	cat_close(c);
	if (rc == 0)
		rc = seg_files_open(st->dir, st->nsegs, st->seg_size, st->io_kind == KVT_IO_URING,
				    SEG_READONLY, &st->sf);
	return rc;
}

/*
 * Every process with the store open holds a read lock on one byte of
 * segments.map (SEG_USERS_BYTE) until it closes it. Only an open that gets
 * the write lock, so one with no other process beside it, may grow the
 * store: a process opened before has its segment files, append locks and
 * I/O context tables for the count it found, and failed every write to a
 * segment past it (EBADF) until it was restarted. The write lock becomes a
 * read lock once the open is done. Returns the descriptor, *alone saying
 * which lock it holds.
 */
static int store_users_lock(struct kvt_store *st, int *alone)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = SEG_USERS_BYTE, .l_len = 1 };
	char path[4200];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/segments.map", st->dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		log_err(rc, "cannot open '%s'", path);
		return rc;
	}
	*alone = fcntl(fd, F_OFD_SETLK, &fl) == 0;
	if (*alone)
		return fd;
	/* Another process has it open, or grows it: wait for that to end. */
	fl.l_type = F_RDLCK;
	while (fcntl(fd, F_OFD_SETLKW, &fl) < 0) {
		if (errno != EINTR) {
			rc = -errno;
			log_err(rc, "cannot lock '%s'", path);
			close(fd);
			return rc;
		}
	}
	return fd;
}

/* The write lock of an open that was alone becomes a read lock. */
static void store_users_share(int fd)
{
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET,
			    .l_start = SEG_USERS_BYTE, .l_len = 1 };

	while (fcntl(fd, F_OFD_SETLKW, &fl) < 0 && errno == EINTR)
		;
}

/*
 * The catalog says what the segment files must be, and the files are made
 * after it says so. If they cannot be (the disk filled meanwhile), the
 * segments this open added are forgotten and their files removed: a later
 * open with a smaller capacity must not find the store grown. A store made
 * by this open that did not fit is removed whole (only then: a daemon
 * started beside another on a new store may fail for other reasons while
 * the other goes on in it).
 */
static int store_open_segments(struct kvt_store *st, const char *catalog_path, int fresh)
{
	struct cat *c = NULL;
	uint32_t had = 0, nmade;
	char path[4200];
	int rc, alone;

	rc = store_nofile_check(st);
	if (rc < 0)
		return rc;
	if (st->readonly)
		return store_open_segments_readonly(st, catalog_path);
	seg_file_path(st->dir, 0, path, sizeof(path));
	if (fresh && access(path, F_OK) == 0) {
		/* A new catalog would name none of what they hold, and reuse them. */
		log_err(0, "'%s' has segment files but no catalog: not making a new store over them "
			"(restore catalog.db, or remove the segments directory to start afresh)", st->dir);
		return -EEXIST;
	}
	st->users_fd = store_users_lock(st, &alone);
	if (st->users_fd < 0)
		return st->users_fd;
	rc = cat_open(catalog_path, CAT_CREATE, &c);
	if (rc == 0)
		rc = cat_segment_count(c, &had);
	if (rc == 0 && had > 0 && had < st->nsegs && !alone) {
		log_warn(0, "capacity asks for %u segments and the store in '%s' has %u; another "
			 "kvtier process has it open, so it grows only once they are all stopped "
			 "(kvtier init then): opened at %u", st->nsegs, st->dir, had, had);
		st->nsegs = had;
	}
	if (rc == 0 && had < st->nsegs && (rc = store_room_check(st)) < 0)
		goto out;
	if (rc == 0)
		rc = cat_init_geometry(c, st->seg_size, st->nsegs);
	if (rc < 0) {
		log_err(rc, "cannot open the catalog '%s'", catalog_path);
		goto out;
	}
	rc = seg_files_open(st->dir, st->nsegs, st->seg_size, st->io_kind == KVT_IO_URING,
			    SEG_CREATE, &st->sf);
	if (rc == 0 && had > 0) {
		seg_files_made(st->sf, &nmade);
		if (nmade > 0)
			cat_segment_list(c, store_report_made, st);
	}
	if (rc < 0 && had < st->nsegs && cat_segment_trim(c, had) == 0) {
		for (uint32_t i = had; i < st->nsegs; i++) {
			seg_file_path(st->dir, i, path, sizeof(path));
			unlink(path);
		}
	}
out:
	cat_close(c);
	if (rc == -ENOSPC && fresh)
		store_unmake(st->dir);
	if (rc == 0 && alone)
		store_users_share(st->users_fd);
	return rc;
}

static int store_place_check(struct kvt_store *st, struct cat *c, struct cat_place *was,
			     struct cat_place *here, int *recorded);

int kvt_store_open(const struct kvt_config *cfg, unsigned flags, struct kvt_store **out)
{
	struct kvt_store *st = NULL;
	struct store_thread *t;
	char path[4200];
	struct stat sb;
	unsigned dirs_made = 0;		/* of the store's path, by this open */
	int rc, fresh, key_made = 0;

	if (!cfg->store.dir || !*cfg->store.dir)
		return -EINVAL;
	snprintf(path, sizeof(path), "%s/catalog.db", cfg->store.dir);
	fresh = stat(path, &sb) < 0;
	if (!(flags & KVT_OPEN_CREATE) && fresh) {
		log_err(0, "'%s' is not a kvtier store (run 'kvtier init' first)", cfg->store.dir);
		return -ENOENT;
	}
	if (flags & KVT_OPEN_CREATE) {
		rc = util_mkdir_p_made(cfg->store.dir, &dirs_made);
		if (rc < 0) {
			log_err(rc, "cannot create '%s'", cfg->store.dir);
			util_rmdir_made(cfg->store.dir, dirs_made);
			return rc;
		}
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->lock_fd = -1;
	st->users_fd = -1;
	pthread_mutex_init(&st->cold_lock, NULL);	/* the cold tier opens on first use */
	commit_queue_init(&st->commitq);
	pthread_mutex_init(&st->bucket_cache_lock, NULL);
	if ((cfg->g4.url && !(st->g4_url = strdup(cfg->g4.url))) ||
	    (cfg->g4.endpoint && !(st->g4_endpoint = strdup(cfg->g4.endpoint))) ||
	    (cfg->g4.credentials && !(st->g4_credentials = strdup(cfg->g4.credentials))) ||
	    (cfg->g4.region && !(st->g4_region = strdup(cfg->g4.region))) ||
	    (cfg->g4.ca_file && !(st->g4_ca_file = strdup(cfg->g4.ca_file)))) {
		free(st->g4_url);
		free(st->g4_endpoint);
		free(st->g4_credentials);
		free(st->g4_region);
		free(st);
		return -ENOMEM;
	}
	st->g4_part_size = cfg->g4.part_size;
	st->g4_jobs = cfg->g4.jobs;
	st->dir = strdup(cfg->store.dir);
	st->seg_size = cfg->store.segment_size;
	st->payload_max = (uint32_t)MIN(SEG_PAYLOAD_MAX, st->seg_size - SEG_HEADER_SIZE);
	st->nsegs = (uint32_t)(cfg->store.capacity / cfg->store.segment_size);
	st->high_watermark = cfg->store.high_watermark;
	st->low_watermark = cfg->store.low_watermark;
	st->session_depth = cfg->store.session_depth ? cfg->store.session_depth : 1;
	st->access_flush_ms = cfg->store.access_flush_ms ? cfg->store.access_flush_ms : 1000;
	st->ckpt_frames = CKPT_WAL_FRAMES;
	st->cached_read_max = cfg->store.cached_read_max;
	st->space_wait_ms = cfg->store.space_wait * 1000;
	st->pool = calloc(POOL_MAX, sizeof(*st->pool));
	st->access = calloc(ACCESS_BUCKETS, sizeof(*st->access));
	st->seg_access = calloc(st->nsegs ? st->nsegs : 1, sizeof(*st->seg_access));
	st->seg_written = calloc(st->nsegs ? st->nsegs : 1, 1);
	st->append_held = calloc(st->nsegs ? st->nsegs : 1, 1);
	if (!st->dir || !st->pool || !st->access || !st->seg_access || !st->seg_written ||
	    !st->append_held) {
		rc = -ENOMEM;
		goto fail;
	}
	if (st->nsegs < 2 || st->seg_size % SEG_ALIGN || st->seg_size < 1024 * 1024) {
		log_err(0, "capacity must hold two segments of at least 1M");
		rc = -EINVAL;
		goto fail;
	}
	pthread_mutex_init(&st->threads_lock, NULL);
	pthread_mutex_init(&st->pool_lock, NULL);
	pthread_mutex_init(&st->alloc_lock, NULL);
	pthread_mutex_init(&st->append_lock, NULL);
	pthread_mutex_init(&st->reclaim_lock, NULL);
	pthread_mutex_init(&st->access_lock, NULL);
	util_cond_init(&st->access_cond);
	pthread_mutex_init(&st->demoter_lock, NULL);
	pthread_mutex_init(&st->backoff_lock, NULL);
	util_cond_init(&st->demoter_cond);
	util_cond_init(&st->space_cond);
	if (pthread_key_create(&st->key, store_thread_exit) != 0) {
		rc = -EAGAIN;
		goto fail;
	}
	key_made = 1;
	{
		struct statvfs vfs;

		st->readonly = !fresh && statvfs(st->dir, &vfs) == 0 && (vfs.f_flag & ST_RDONLY);
	}
	st->io_kind = store_pick_io(cfg);

	rc = store_open_segments(st, path, fresh);
	if (rc < 0)
		goto fail;
	st->lock_fd = seg_lock_fd_open(st->sf);
	if (st->lock_fd < 0) {
		rc = st->lock_fd;
		goto fail;
	}
	t = store_thread(st);
	if (!t) {
		rc = -EIO;
		goto fail;
	}
	/*
	 * After a reboot every generation comes from the catalog; otherwise
	 * those behind it are raised (never lowered: seg_map_set_gen). A map
	 * behind the catalog (segments.map edited, or restored from a copy)
	 * had every object of the segment read as reclaimed, through every
	 * open, and fsck called the store clean.
	 */
	rc = store_map_rebuild(st, t->cat);
	if (rc < 0)
		goto fail;
	{
		struct cat_place was, here;
		int recorded;

		/* Not sure where it is: not sure whose the id is either. Said
		 * by the first G4 write refused (store_g4_owned()), not here:
		 * reads and recalls go on, and most opens write nothing there. */
		st->place_moved = store_place_check(st, t->cat, &was, &here, &recorded) != 1;
	}
	if (st->readonly) {
		*out = st;
		return 0;
	}
	rc = reclaim_recover(st);
	if (rc < 0)
		goto fail;
	if (util_thread_start(&st->flusher, NULL, store_flusher, st) == 0)
		st->flusher_running = 1;
	if (!store_g4_none(st))
		demoter_start(st);	/* without it, writers demote themselves */
	*out = st;
	return 0;
fail:
	if (!key_made) {
		free(st->dir);
		free(st->pool);
		free(st->access);
		free(st->seg_access);
		free(st->seg_written);
		free(st->append_held);
		free(st);
	} else {
		kvt_store_close(st);
	}
	/* A first init that failed leaves no empty directories (a store it
	 * made that did not fit is already gone: store_unmake()). */
	util_rmdir_made(cfg->store.dir, dirs_made);
	return rc;
}

void kvt_store_close(struct kvt_store *st)
{
	struct store_open_seg seal;

	if (!st)
		return;
	/* First: a pass in flight finishes its session, and nothing more starts. */
	demoter_stop(st);
	if (st->flusher_running) {
		pthread_mutex_lock(&st->access_lock);
		st->stopping = 1;
		pthread_cond_signal(&st->access_cond);
		pthread_mutex_unlock(&st->access_lock);
		pthread_join(st->flusher, NULL);
	}
	if (st->sf) {
		kvt_store_flush_access(st);
		/* Seal what this process appended to; a writer still open loses its bytes. */
		pthread_mutex_lock(&st->alloc_lock);
		while (st->nretiring > 0) {
			seal = st->retiring[--st->nretiring];
			pthread_mutex_unlock(&st->alloc_lock);
			store_seal(st, &seal);
			pthread_mutex_lock(&st->alloc_lock);
		}
		if (st->have_cur) {
			seal = st->cur;
			st->have_cur = 0;
			pthread_mutex_unlock(&st->alloc_lock);
			store_seal(st, &seal);
		} else {
			pthread_mutex_unlock(&st->alloc_lock);
		}
		store_reloc_seal(st);
	}
	store_pool_drain(st);
	pthread_key_delete(st->key);
	while (st->threads) {
		struct store_thread *t = st->threads;

		st->threads = t->next;
		store_thread_free(t);
	}
	for (unsigned i = 0; st->access && i < ACCESS_BUCKETS; i++) {
		struct access_entry *e, *next;

		for (e = st->access[i]; e; e = next) {
			next = e->next;
			free(e->session);
			free(e);
		}
	}
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	if (st->users_fd >= 0)
		close(st->users_fd);	/* the store is one user fewer */
	seg_files_close(st->sf);
	pthread_mutex_destroy(&st->threads_lock);
	pthread_mutex_destroy(&st->pool_lock);
	pthread_mutex_destroy(&st->alloc_lock);
	pthread_mutex_destroy(&st->append_lock);
	pthread_mutex_destroy(&st->reclaim_lock);
	pthread_mutex_destroy(&st->access_lock);
	pthread_cond_destroy(&st->access_cond);
	pthread_mutex_destroy(&st->demoter_lock);
	reclaim_backoff_release(st);
	pthread_mutex_destroy(&st->backoff_lock);
	pthread_cond_destroy(&st->demoter_cond);
	pthread_cond_destroy(&st->space_cond);
	free(st->retiring);
	free(st->pool);
	free(st->access);
	free(st->seg_access);
	free(st->seg_written);
	free(st->append_held);
	cold_free(st->cold);
	free(st->g4_url);
	free(st->g4_endpoint);
	free(st->g4_credentials);
	free(st->g4_region);
	free(st->g4_ca_file);
	pthread_mutex_destroy(&st->cold_lock);
	commit_queue_release(&st->commitq);
	store_bucket_forget(st, NULL);
	pthread_mutex_destroy(&st->bucket_cache_lock);
	free(st->dir);
	free(st);
}

/* ---- identity: the id and where it was given ------------------------------ */

/*
 * The store's id names it as the owner of its sessions in G4 (migrate.c);
 * a copy of the directory keeps the id, and with it took the original's
 * sessions for its own: its sweep deleted their copies, its demotions wrote
 * over their manifests. So the id is recorded with the place it was given
 * in, made of what a copy does not keep: the machine (/etc/machine-id: a
 * VM image or disk snapshot moved to another machine), the directory's
 * inode and its birth time (cp -a, or a copy onto another file system, where
 * the root directory's inode is the same number). Containers of one image
 * share a machine-id, and a transient one is left out (store_machine_id());
 * their stores are told apart by the rest. A store
 * opened elsewhere keeps serving and recalling, and writes nothing to G4
 * until `kvtier store-id --new` or `--keep` records the place again.
 */

const char *store_machine_id_path = "/etc/machine-id";

/*
 * The first 64 bits of /etc/machine-id; 0 where there is none, or where it
 * is a mount of its own: systemd mounts a random id there at each boot of
 * a machine whose /etc/machine-id is empty or read-only (a stateless
 * image, a container started from one), and a store that never moved was
 * then not where its id was given after every reboot.
 */
static uint64_t store_machine_id(void)
{
	char buf[64] = "";
	struct statx sx;
	ssize_t n;
	int fd = open(store_machine_id_path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx) == 0 &&
	    (sx.stx_attributes_mask & sx.stx_attributes & STATX_ATTR_MOUNT_ROOT)) {
		close(fd);
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	if (strspn(buf, "0123456789abcdef") < 32)
		return 0;
	buf[16] = '\0';
	return strtoull(buf, NULL, 16);
}

static int store_place_here(const char *dir, struct cat_place *p)
{
	struct statx sx;

	memset(p, 0, sizeof(*p));
	p->machine = store_machine_id();
	if (statx(AT_FDCWD, dir, 0, STATX_INO | STATX_BTIME, &sx) < 0)
		return -errno;
	p->ino = sx.stx_ino;
	if (sx.stx_mask & STATX_BTIME)
		p->btime_ns = (int64_t)sx.stx_btime.tv_sec * 1000000000 + sx.stx_btime.tv_nsec;
	return 0;
}

/* A machine and a birth time only where both have one: a boot with a
 * transient machine-id, a file system mounted by a kernel that gives no
 * birth time, is no other place. */
static int store_place_same(const struct cat_place *a, const struct cat_place *b)
{
	return (!a->machine || !b->machine || a->machine == b->machine) && a->ino == b->ino &&
	       (!a->btime_ns || !b->btime_ns || a->btime_ns == b->btime_ns);
}

/* 1 when the store is where its id was given, 0 if not; a store with no
 * place recorded (made before) gets this one, unless read-only. */
static int store_place_check(struct kvt_store *st, struct cat *c, struct cat_place *was,
			     struct cat_place *here, int *recorded)
{
	uint64_t id;
	int rc = store_place_here(st->dir, here);

	*recorded = 0;
	if (rc < 0) {
		log_err(rc, "cannot stat the store directory '%s'", st->dir);
		return rc;
	}
	rc = cat_store_place(c, was);
	if (rc == -ENOENT && !st->readonly) {
		/* The id first: the place is where it was given. */
		rc = cat_store_id(c, &id);
		if (rc == 0)
			rc = cat_store_place_set(c, here, 0);
		if (rc == 0)
			rc = cat_store_place(c, was);
	}
	if (rc == -ENOENT)
		return 1;	/* read-only, from before: nothing is written to G4 anyway */
	if (rc < 0)
		return rc;
	*recorded = 1;
	return store_place_same(was, here);
}

/*
 * How long a refusal stands before store_g4_owned() asks again. Asking
 * (/etc/machine-id read, the directory statx'd, the catalog's place
 * read) cost 25 us, at every call: a demoter pass asks once a session,
 * each second while a copy is full, a quarter of its time with 3000
 * sessions. What can change meanwhile is the catalog, by `kvtier
 * store-id` in another process: a running one sees it within this.
 */
#define STORE_PLACE_RECHECK_NS 1000000000LL

int store_g4_owned(struct kvt_store *st)
{
	struct cat_place was, here;
	struct cat *c;
	int64_t now, asked;
	int recorded, rc;

	if (!__atomic_load_n(&st->place_moved, __ATOMIC_RELAXED))
		return 0;
	now = util_mono_ns();
	asked = __atomic_load_n(&st->place_asked_ns, __ATOMIC_RELAXED);
	if (asked && now - asked < STORE_PLACE_RECHECK_NS)
		return -EREMCHG;
	c = store_cat(st);
	rc = c ? store_place_check(st, c, &was, &here, &recorded) : -ENOMEM;
	if (rc == 1) {
		__atomic_store_n(&st->place_moved, 0, __ATOMIC_RELAXED);
		return 0;
	}
	if (rc == 0)
		__atomic_store_n(&st->place_asked_ns, now, __ATOMIC_RELAXED);
	/* Once a store: once a process said nothing of a second copy. */
	if (rc == 0 && !__atomic_exchange_n(&st->place_warned, 1, __ATOMIC_RELAXED))
		log_err(0, "the store in '%s' is not where its id was given (a copy, or the store"
			" moved): nothing is written to or deleted from g4 until 'kvtier store-id"
			" --new' (a copy) or 'kvtier store-id --keep' (moved) says whose it is",
			st->dir);
	return rc < 0 ? rc : -EREMCHG;
}

static void store_place_out(const struct cat_place *p, struct kvt_store_place *out)
{
	out->machine = p->machine;
	out->ino = p->ino;
	out->btime_ns = p->btime_ns;
}

int kvt_store_identity(struct kvt_store *st, struct kvt_store_identity *out)
{
	struct cat_place was = { 0 }, here = { 0 };
	struct cat *c = store_cat(st);
	int rc;

	memset(out, 0, sizeof(*out));
	if (!c)
		return -ENOMEM;
	rc = store_place_check(st, c, &was, &here, &out->recorded);
	if (rc < 0)
		return rc;
	out->matches = rc;
	store_place_out(&was, &out->was);
	store_place_out(&here, &out->here);
	rc = cat_store_id(c, &out->id);
	return rc < 0 && st->readonly ? 0 : rc;	/* none made yet, none can be */
}

int kvt_store_identity_set(struct kvt_store *st, enum kvt_identity_how how,
			   struct kvt_store_identity *out)
{
	struct cat_place here;
	struct cat *c = store_cat(st);
	uint64_t id;
	int rc;

	if (!c)
		return -ENOMEM;
	if (st->readonly)
		return -EROFS;
	rc = store_place_here(st->dir, &here);
	if (rc == 0)
		rc = how == KVT_IDENTITY_NEW ? cat_store_id_new(c, &here, &id) :
		     how == KVT_IDENTITY_KEEP ? cat_store_place_set(c, &here, 1) : -EINVAL;
	if (rc < 0)
		return rc;
	log_info("the store in '%s' %s", st->dir, how == KVT_IDENTITY_NEW ?
		 "has a new id: what its old one owns in g4 stays the original's" :
		 "keeps its id, recorded here");
	__atomic_store_n(&st->place_moved, 0, __ATOMIC_RELAXED);
	return out ? kvt_store_identity(st, out) : 0;
}

/* ---- stat and sync ------------------------------------------------------- */

/* The catalog's size and the room left for it on its file system. */
static void store_disk_stat(const struct kvt_store *st, struct kvt_store_stat *out)
{
	static const char *const names[] = { "catalog.db", "catalog.db-wal" };
	char path[4200];
	struct statvfs vfs;
	struct stat sb;

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(path, sizeof(path), "%s/%s", st->dir, names[i]);
		if (stat(path, &sb) == 0)
			out->catalog_bytes += (uint64_t)sb.st_size;
	}
	if (statvfs(st->dir, &vfs) == 0)
		out->disk_free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
}

uint64_t kvt_store_object_max(const struct kvt_store *st)
{
	return store_object_max(st);
}

int kvt_store_readonly(const struct kvt_store *st)
{
	return st->readonly;
}

int kvt_store_writes_full(struct kvt_store *st)
{
	struct cat *c = store_cat(st);
	uint64_t counts[4];

	if (!__atomic_load_n(&st->space_refused, __ATOMIC_RELAXED))
		return 0;
	/* A segment freed since (the demoter, another process's reclaim)
	 * is room the next write takes. */
	if (c && cat_segment_counts(c, counts) == 0 && counts[SEG_FREE] > STORE_RESERVE_SEGS)
		return 0;
	return 1;
}

int kvt_store_disk_full(const struct kvt_store *st)
{
	struct statvfs vfs;

	if (!cat_full_seen())
		return 0;
	/* Room made since (the filler removed, the disk grown): the next
	 * write tries, and a catalog commit needs a few pages, not 1 MiB. */
	return statvfs(st->dir, &vfs) != 0 || (uint64_t)vfs.f_bavail * vfs.f_frsize < (1 << 20);
}

int kvt_store_catalog_damaged(const struct kvt_store *st)
{
	(void)st;	/* one store a process in every kvtier program */
	return cat_damage_seen();
}

int kvt_store_stat(struct kvt_store *st, struct kvt_store_stat *out)
{
	struct cat *c = store_cat(st);
	int rc;

	if (!c)
		return -ENOMEM;
	memset(out, 0, sizeof(*out));
	rc = cat_stat(c, out);
	if (rc < 0)
		return rc;
	out->segment_size = st->seg_size;
	out->capacity = (uint64_t)st->nsegs * st->seg_size;
	out->used_bytes = (out->segments - out->segments_free) * st->seg_size;
	out->io = st->io_kind == KVT_IO_URING ? "uring" : "sync";
	commit_stats(st, &out->commit_groups, &out->commit_puts, &out->commit_largest);
	store_disk_stat(st, out);
	return 0;
}

void store_seg_written(struct kvt_store *st, uint32_t id)
{
	if (id < st->nsegs)
		__atomic_store_n(&st->seg_written[id], 1, __ATOMIC_RELAXED);
}

/*
 * Syncs what the catalog names, then the catalog. Each fdatasync() also
 * flushes the device's write cache, and on this project's virtual machines
 * each cost a few to tens of milliseconds, hundreds for the first after a
 * burst of writes: syncing all of a store's segment files made every
 * reclaim round (reclaim_flush) stall the disk for about a second. So with
 * O_DIRECT only the segments this process wrote since its last sync are
 * synced (flags set when a write completes, cleared before its sync, so a
 * write that completes meanwhile is synced next time), and at least one:
 * its flush of the device's cache also covers what other processes wrote
 * with O_DIRECT, ahead of the catalog. Buffered segment writes (io = sync)
 * leave dirty pages that only a sync of their own file writes, whoever
 * wrote them: all segments are synced.
 */
static int store_sync_segment(struct kvt_store *st, struct io_ctx *io, uint32_t id)
{
	int rc = io_fdatasync(io, seg_fd(st->sf, id));

	if (rc < 0) {
		store_seg_written(st, id);	/* still to sync */
		log_err(rc, "cannot sync segment %u", id);
	}
	return rc;
}

int kvt_store_sync(struct kvt_store *st)
{
	struct cat *c = store_cat(st);
	struct io_ctx *io = NULL;
	int direct = st->io_kind == KVT_IO_URING, synced = 0, rc;

	if (!c)
		return -ENOMEM;
	if (st->readonly)
		return 0;	/* nothing was written */
	/* Through an I/O context: a backend may keep writes that the kernel never saw. */
	rc = store_io_get(st, &io);
	for (uint32_t i = 0; rc == 0 && i < st->nsegs; i++) {
		if (direct && !__atomic_exchange_n(&st->seg_written[i], 0, __ATOMIC_RELAXED))
			continue;
		rc = store_sync_segment(st, io, i);
		synced++;
	}
	/* Nothing written here: one sync still flushes the device's cache. */
	if (rc == 0 && synced == 0)
		rc = store_sync_segment(st, io, 0);
	store_io_put(st, io);
	/* Segments first: the catalog must never be durable ahead of the bytes it names. */
	if (rc == 0)
		rc = cat_sync(c);
	return rc;
}
