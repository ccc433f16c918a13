/*
 * store.h - the store's internals, shared by the engine's modules (store.c,
 * writer.c, reader.c, reclaim.c, object.c, bucket.c, fsck.c) and by tests
 * that need to reach inside (fault injection).
 */
#ifndef KVT_STORE_H
#define KVT_STORE_H

#include <pthread.h>
#include <string.h>

#include "catalog.h"
#include "cold.h"
#include "io.h"
#include "kvtier.h"
#include "segment.h"

/* What each thread that uses a store keeps: its own catalog connection and
 * a random generator for version ids (a system call per write costs). */
struct store_thread {
	struct kvt_store *st;
	struct cat *cat;
	uint64_t rng;
	int in_reclaim;		/* allocation must not start another reclaim */
	struct store_thread *next;
};

/* A segment this process appends to: the current one, or a full one that
 * waits for its last writer to commit or abort before it is sealed. */
struct store_open_seg {
	uint32_t id;
	uint64_t gen;
	uint64_t off;		/* append pointer */
	unsigned refs;		/* extents carved and not yet committed or aborted */
};

struct access_entry;

/* Writers of this process waiting to commit, and who commits (commit.c). */
struct commit_req;
struct commit_queue {
	pthread_mutex_t lock;
	struct commit_req *head, **tail;
	size_t npending;
	int leader;			/* a thread is committing a group */
	struct cat *cat;		/* the leaders' connection, opened on first use */
	uint64_t groups, puts, largest;	/* since the store opened */
};

struct kvt_store {
	char *dir;
	uint32_t nsegs;
	uint64_t seg_size;
	uint32_t payload_max;	/* of an extent: SEG_PAYLOAD_MAX, or what a segment holds */
	double high_watermark, low_watermark;
	unsigned session_depth;
	enum kvt_io_kind io_kind;
	struct seg_files *sf;
	int lock_fd;		/* holds the append locks of this process's segments */
	int users_fd;		/* holds this process's read lock on SEG_USERS_BYTE */
	/* Which of them this process holds: an open file description lock
	 * does not exclude the threads that share it (store_append_trylock). */
	pthread_mutex_t append_lock;
	uint8_t *append_held;

	pthread_key_t key;
	pthread_mutex_t threads_lock;
	struct store_thread *threads;

	pthread_mutex_t pool_lock;
	struct io_ctx **pool;
	size_t npool;
	size_t pool_low;	/* fewest idle since the flusher last trimmed */
	struct io_fault_plan *fault;	/* tests: wrap new contexts in a fault injector */
	struct io_powerloss *powerloss;	/* tests: ... or in a simulated write cache */

	pthread_mutex_t alloc_lock;
	int have_cur;
	struct store_open_seg cur;
	struct store_open_seg *retiring;
	size_t nretiring;
	/* Reclaim's own open segment: relocated copies go there, never to cur,
	 * whose room the writers of this process share. When they did, writers
	 * could fill the reserve a relocation had claimed, and the rest of the
	 * victim had nowhere to go. Used under reclaim_lock; sealed when the
	 * pass ends (store_reloc_seal). */
	int have_reloc;
	struct store_open_seg reloc;
	uint64_t nallocs;	/* from cur, ever; store_seal_idle's last look */
	uint64_t nallocs_seen;
	int seal_failed;	/* store_seal() could not: the flusher recovers it */
	pthread_mutex_t reclaim_lock;
	struct commit_queue commitq;

	/* Bucket ids the writers resolved (store_bucket_id_cached), by hash. */
	pthread_mutex_t bucket_cache_lock;
	struct store_bucket_slot {
		char *name;
		int64_t id;
	} bucket_cache[64];

	pthread_mutex_t access_lock;
	pthread_cond_t access_cond;
	struct access_entry **access;	/* hash table of sessions touched */
	int64_t *seg_access;		/* per segment, last read or write (ns) */
	uint8_t *seg_written;		/* per segment, written here since kvt_store_sync() */
	unsigned access_flush_ms;
	int64_t access_warned;		/* log_every() of a failed access flush */
	int readonly;			/* on a read-only file system: reads only */
	/* The store is not where its id was given (store_place_check()):
	 * nothing is written to G4 (atomic; store_g4_owned()). */
	int place_moved;
	int64_t place_asked_ns;		/* when store_g4_owned() last found it so (atomic) */
	int place_warned;		/* it logged the refusal (atomic) */
	/* The last write here that wanted a segment found none reclaim could
	 * free (atomic; kvt_store_writes_full()): set and cleared by
	 * store_alloc_within(). */
	int space_refused;
	uint64_t cached_read_max;	/* extents up to this payload: page cache reads */
	pthread_t flusher;
	int flusher_running;
	int stopping;
	unsigned wal_frames;		/* in the catalog's log at this process's last commit */
	unsigned ckpt_frames;		/* CKPT_WAL_FRAMES (store.c); tests make it small */
	int64_t ckpt_version;		/* the catalog's data version at the last tick */
	int64_t ckpt_ns;		/* when the flusher last checkpointed */
	int64_t ckpt_restart_ns;	/* no RESTART checkpoint before this */
	unsigned ckpt_restart_fails;	/* RESTARTs held off since the last that was not */
	unsigned ckpt_restarts_held;	/* RESTARTs that readers held off, in all */

	/* G4, the cold tier (migrate.c): opened on first use from g4_url. */
	pthread_mutex_t cold_lock;
	char *g4_url;		/* NULL: file://<dir>/g4 */
	char *g4_endpoint, *g4_credentials;	/* S3 only; may be NULL */
	char *g4_region, *g4_ca_file;		/* S3 only; may be NULL */
	uint64_t g4_part_size;
	unsigned g4_jobs;
	struct cold *cold;
	int64_t g4_stop_ns;	/* kvt_store_stop_g4(); 0: never */

	/* The background demoter (demoter.c): with a cold tier, reclaim that
	 * must demote session state runs in it, not in a writer. */
	pthread_mutex_t demoter_lock;
	pthread_cond_t demoter_cond;	/* wakes the demoter */
	pthread_cond_t space_cond;	/* a demoter pass ended: writers look again */
	pthread_t demoter;
	int demoter_running;		/* set before writers run, cleared after they stop */
	/* The last recall here that the partner failed to answer (atomic):
	 * when, and with what (migrate.c, recall_object_ctl). */
	int64_t g4_fail_ns;
	int g4_fail_rc;
	int demoter_stop;
	int demoter_kicked;
	uint64_t demoter_passes;	/* passes ended */
	int demoter_last_rc;		/* of the last pass */
	uint64_t space_wait_ms;		/* [store] space_wait: a writer's wait for room */
	/* Sessions whose demotion under pressure failed on their own, and
	 * when each may be asked again (reclaim.c, "Backing off"). */
	pthread_mutex_t backoff_lock;
	struct session_set *backoff;	/* NULL: none yet */
	unsigned backoff_ms;		/* the first back-off; tests make it small */
};

/*
 * 0 when this store may write and delete in G4 as the owner its id names;
 * -EREMCHG when it is not where the id was given (a copy of the store, or
 * the store moved): logged once a store. Asks the catalog again then at
 * most once a second, so a `kvtier store-id` in another process is seen
 * within one; otherwise (and between) it costs a load or two.
 */
int store_g4_owned(struct kvt_store *st);
/* Where the machine's id is read from (tests point it elsewhere). */
extern const char *store_machine_id_path;

/* True when [g4] url = none: no cold tier, reclaim drops (cold.h). */
static inline int store_g4_none(const struct kvt_store *st)
{
	return st->g4_url && strcmp(st->g4_url, COLD_URL_NONE) == 0;
}

/* The store's cold tier, opened on first use; 0 or -errno, -ENODEV with
 * [g4] url = none (migrate.c). */
int store_cold(struct kvt_store *st, struct cold **out);
/* Tests: use c (takes ownership; NULL drops the current one). */
void store_set_cold(struct kvt_store *st, struct cold *c);
/* Reclaim under pressure: the session to G4 (upload, verify, manifest,
 * cold), as kvtier-migrate would; 0 or -errno (migrate.c), a failure not
 * logged: the caller tells whose it is (g4_pressure_failed()). Call with
 * no lock held: it waits for the partner. Two refusals are the store's,
 * the same for every session until something changes (g4_refused_all()):
 * -EREMCHG, the store not where its id was given; -ENXIO, the partner's
 * bucket missing. The partner not answering, or answering "later"
 * (g4_transient()), may be for every session or for this one's objects
 * alone; reclaim asks the next session to tell (reclaim.c). Any other
 * concerns this session. */
int g4_demote_pressure(struct kvt_store *st, const char *bucket, const char *session);
static inline int g4_refused_all(int rc)
{
	return rc == -EREMCHG || rc == -ENXIO;
}
/* Whether rc is the partner saying "later" or not answering. */
static inline int g4_transient(int rc)
{
	return rc == -EAGAIN || rc == -EHOSTUNREACH || rc == -ETIMEDOUT || rc == -ECONNRESET;
}
/* Logs that bucket/session could not be demoted under pressure (rc). also
 * NULL: the store's refusal, said once a minute over all sessions; else
 * the session's own, which the caller limits (also: log_limit()'s note),
 * not asked again for again_ms. -EREMCHG is not logged (store_g4_owned()
 * says it). */
void g4_pressure_failed(struct kvt_store *st, const char *bucket, const char *session, int rc,
			int64_t again_ms, const char *also);
/* Frees what reclaim kept of sessions backing off (store close). */
void reclaim_backoff_release(struct kvt_store *st);
/* Before reclaim turns object id of bucket cold on G4's copy of version
 * vid: 1 if that copy still holds its bytes (the ETag recorded, else a
 * read back: size and CRC32C), 0 if it is gone or holds others (logged),
 * -ENOENT if the object changed, else -errno (the partner did not
 * answer). Waits for the partner: call with no catalog transaction open. */
int g4_victim_copy_holds(struct kvt_store *st, int64_t id, uint64_t vid, const char *bucket);
/* COLD -> HOT for bucket/key: fetch, verify, write back (migrate.c). */
int recall_object(struct kvt_store *st, const char *bucket, const char *key);

/* The calling thread's state for st, made on first use; NULL on failure. */
struct store_thread *store_thread(struct kvt_store *st);

static inline struct cat *store_cat(struct kvt_store *st)
{
	struct store_thread *t = store_thread(st);

	return t ? t->cat : NULL;
}

/* I/O contexts are pooled: take one for a burst of requests, then put it back. */
int store_io_get(struct kvt_store *st, struct io_ctx **out);
void store_io_put(struct kvt_store *st, struct io_ctx *io);

/* Tests: every I/O context made from now on obeys plan (NULL: none). */
void store_set_fault_plan(struct kvt_store *st, struct io_fault_plan *plan);
/* Tests: every I/O context made from now on, and kvt_store_sync(), go
 * through pl's simulated write cache (NULL: none). */
void store_set_powerloss(struct kvt_store *st, struct io_powerloss *pl);

/*
 * Free segments that writers may not claim: reclaim's, to relocate pinned
 * objects into (reclaim.c). Segments are freed whole, and a segment that
 * holds anything pinned is freed only by copying that elsewhere first.
 * When writers could take the last free segment, a store whose every
 * segment held a little pinned data (open multipart uploads, `put --pin`)
 * beside dead space stayed full for good: reclaim had nowhere to copy to,
 * so nothing could be freed, and a recall of a cold object failed ENOSPC
 * with three quarters of the tier dead (a stress run: 64 MiB holding 15 to
 * 30 MiB live). Log-structured stores keep such a reserve for their
 * cleaner. So writers can fill nsegs - STORE_RESERVE_SEGS segments, and
 * while fewer are free (a reclaimer relocates into the reserve, or died
 * doing so) they do not reopen part-full segments either: that room is
 * where reclaim relocates to until it has freed one (reclaim.c).
 */
#define STORE_RESERVE_SEGS 1

/* Bytes no object can exceed: all the segments writers may fill. */
static inline uint64_t store_object_max(const struct kvt_store *st)
{
	return (uint64_t)(st->nsegs - STORE_RESERVE_SEGS) * st->seg_size;
}

/*
 * Carves `space` bytes (a multiple of SEG_ALIGN) from the segment this
 * process appends to, claiming a new segment (and reclaiming old ones) when
 * it is full; within reclaim (store_thread.in_reclaim), from reclaim's own
 * (kvt_store.reloc), which may take the reserve. The caller must later
 * call store_release() once for it.
 */
struct store_alloc {
	uint32_t segment;
	uint64_t gen;
	uint64_t offset;
};
/*
 * A segment's append lock (segment.h), taken by one thread of this
 * process at a time: 0, or -EAGAIN if another process or another thread
 * here holds it.
 */
int store_append_trylock(struct kvt_store *st, uint32_t id);
void store_append_unlock(struct kvt_store *st, uint32_t id);

/*
 * *waited_ns, if waited_ns is not NULL, is the time the caller's write has
 * waited for room so far (0 before its first extent), and grows by this
 * call's wait: [store] space_wait bounds what one write waits in all.
 * (When each extent had a space_wait of its own, a write of two waited up
 * to twice as long: 503 SlowDown after 59 s with the 30 s default, in a
 * helper's stress run.) NULL: this extent's own.
 */
int store_alloc(struct kvt_store *st, uint64_t space, int64_t *waited_ns,
		struct store_alloc *out);
/* Reclaim's open segment (reloc): the room left in it, 0 if none; and
 * sealing it (SEALED at its append pointer) at the end of a pass. */
uint64_t store_reloc_room(struct kvt_store *st);
void store_reloc_seal(struct kvt_store *st);
/* reclaim.c: reclaims toward the low watermark unless this process already does. */
void store_reclaim_if_idle(struct kvt_store *st);
void store_release(struct kvt_store *st, uint32_t segment, uint64_t gen);

/* True for the name of an internal bucket (bucket.c). */
int bucket_internal_name(const char *name);

/* Bucket id by name: 0 or -ENOENT. */
int store_bucket_id(struct kvt_store *st, const char *bucket, int64_t *id);
/*
 * The same, from a cache of names this process resolved before when it can
 * (*cached = 1): no catalog read transaction. The answer may be stale (the
 * bucket deleted, or deleted and made again, by another process): only for
 * callers whose write transaction checks that the id still exists and who
 * then call store_bucket_forget() and ask again (the writer's commit).
 */
int store_bucket_id_cached(struct kvt_store *st, const char *bucket, int64_t *id, int *cached);
/* Drops bucket from that cache; NULL: every name (a bucket was deleted). */
void store_bucket_forget(struct kvt_store *st, const char *bucket);

/* The session an object belongs to: explicit, else the key's leading
 * components. Caller frees. */
char *store_session_of(struct kvt_store *st, const char *key, const char *explicit_session);

/* Remembers an access for the next flush: never a write transaction now. */
void store_touch(struct kvt_store *st, int64_t bucket_id, const char *session,
		 const struct cat_extent *extents, size_t nextents);

/* The POSIX metadata of a new object: given, else a plain 0644 file; unset
 * times take the object's mtime. */
void store_posix_fill(struct kvt_posix *out, const struct kvt_posix *given, int64_t mtime_ns);

/*
 * Counts a damaged extent e of version vid (logged by the caller) in
 * checksum_failures, once: an extent already counted, by a read or by fsck,
 * is not counted again, so the counter (and the alert on it) rises once per
 * new damage. e NULL: the version's extents are sound but not its whole
 * checksum (fsck), counted once per version.
 */
void store_checksum_failure(struct kvt_store *st, uint64_t vid, const struct cat_extent *e);

/*
 * Reads extent e of object version vid into buf (at least
 * seg_extent_space(e->length) bytes, IO_ALIGN-aligned) and verifies it.
 * A segment freed since the extent was looked up gives -ESTALE (segment.h),
 * a damaged extent -EIO. On success the payload is at buf + SEG_HEADER_SIZE.
 */
int store_read_extent(struct kvt_store *st, struct io_ctx *io, int buf_index, void *buf,
		      uint64_t vid, const struct cat_extent *e);

/* The same, without verifying: the bytes as they are on disk (fsck). */
int store_read_extent_raw(struct kvt_store *st, struct io_ctx *io, int buf_index, void *buf,
			  uint64_t vid, const struct cat_extent *e);

/* Checks an extent read into buf: header and payload CRC. 0 or -EIO (logged
 * and counted). Defined in reader.c. */
int store_extent_verify(struct kvt_store *st, const void *buf, uint64_t vid,
			const struct cat_extent *e);

/*
 * What of an extent a read of payload bytes [from, to) reads and verifies:
 * bytes [a0, a1) from the extent's start, and chunks [c0, c1) of them; or
 * (whole) the whole extent, where e has no chunk checksums or its chunks
 * would take the whole extent anyway. Defined in reader.c.
 */
struct extent_part {
	int whole;
	unsigned c0, c1;
	uint64_t a0, a1;
};

void store_extent_part(const struct cat_extent *e, uint64_t from, uint64_t to,
		       struct extent_part *p);

/* Checks what p says of e, read into buf (which holds extent bytes from
 * p->a0): the whole extent, or its chunks and, when read with the first
 * one, its header. 0 or -EIO (logged and counted). Defined in reader.c. */
int store_extent_verify_part(struct kvt_store *st, const void *buf, uint64_t vid,
			     const struct cat_extent *e, const struct extent_part *p);

/* Fills e's checksums (crc, chunk0, nchunks, chunk_crc) from its payload,
 * given its length and obj_off, and returns the payload's CRC32C. Defined
 * in writer.c. */
uint32_t store_extent_checksum(struct cat_extent *e, const void *payload);

/* 0 if e lies inside its segment, else -EIO (logged). */
int store_extent_check_place(struct kvt_store *st, uint64_t vid, const struct cat_extent *e);

/* A fresh version id: random, without a system call. */
uint64_t store_new_vid(struct kvt_store *st);

/* Records a completed write to segment id, for kvt_store_sync(). */
void store_seg_written(struct kvt_store *st, uint32_t id);

/* Writes a whole extent (header already in buf) at a; 0 or -errno. */
int store_write_extent(struct kvt_store *st, struct io_ctx *io, int buf_index, void *buf,
		       uint32_t length, const struct store_alloc *a);

/*
 * Group commit (commit.c): publishes put in a catalog transaction shared
 * with the puts other threads of this process commit at the same time;
 * returns put's own result once that transaction has committed (0) or
 * failed. put->precondition may run in another of those threads.
 */
int commit_put(struct kvt_store *st, const struct cat_put *put);
void commit_queue_init(struct commit_queue *q);
void commit_queue_release(struct commit_queue *q);
/* Puts queued and not yet taken by a leader (tests). */
size_t commit_pending(struct kvt_store *st);
void commit_stats(struct kvt_store *st, uint64_t *groups, uint64_t *puts, uint64_t *largest);

/* Reclaim toward the low watermark and at least `need` free segments
 * (reclaim.c); a writer that needs a segment asks for
 * STORE_RESERVE_SEGS + 1, the reserve being no use to it. demote = 0:
 * session state G4 lacks is left in place (its segment is skipped) and
 * the demoter is woken for it; kvt_store_reclaim() is demote = 1. */
int reclaim_run(struct kvt_store *st, unsigned need, int demote);

/* True when the fill (segments not free, and the reserve:
 * STORE_RESERVE_SEGS) exceeds the high watermark; *nfree (may be NULL) is
 * the number of free segments, the reserve included (store.c). */
int store_above_high(struct kvt_store *st, uint64_t *nfree);

/*
 * The background demoter (demoter.c). demoter_start() at open when the
 * store has a cold tier; demoter_stop() at close (accepts a store without
 * one). demoter_kick() wakes it (cheap: a writer above the high watermark
 * calls it). A writer that finds no free segment calls demoter_wait() in a
 * loop, trying to claim space between calls: 0 means look again, -ENOSPC
 * that the demoter could not make room (a whole pass since the wait began
 * failed) or that [store] space_wait ran out (logged).
 */
struct demoter_wait {
	int64_t limit_ns;	/* the longest it may wait (store_alloc) */
	int64_t start_ns, deadline_ns;	/* 0: not started */
	uint64_t pass0;
	int64_t patience_ns;	/* no giving up sooner than this (store_alloc) */
};
int demoter_start(struct kvt_store *st);
void demoter_stop(struct kvt_store *st);
void demoter_kick(struct kvt_store *st);
int demoter_wait(struct kvt_store *st, struct demoter_wait *w);
/* The wait ended with a segment claimed: logged if it was long. */
void demoter_waited(struct kvt_store *st, const struct demoter_wait *w);

/* Cross-process locks of G4 work (migrate.c): an OFD lock on one byte of
 * DIR/g4.lock chosen by kind/a/b. The fd that holds it, -EBUSY if taken
 * and !wait, or -errno; g4_unlock() accepts -1. */
int g4_lock(struct kvt_store *st, const char *kind, const char *a, const char *b, int wait);
void g4_unlock(int fd);

/* Recovery at open: segments of processes that died (reclaim.c). */
int reclaim_recover(struct kvt_store *st);

#endif /* KVT_STORE_H */
