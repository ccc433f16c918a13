/*
 * catalog.h - the SQLite catalog: buckets, objects, extents, segments and
 * sessions. Only catalog.c speaks SQL.
 *
 * A `struct cat` is one connection; the store keeps one per thread. Every
 * function that changes more than one row runs in one transaction, so other
 * processes see all of the change or none of it.
 */
#ifndef KVT_CATALOG_H
#define KVT_CATALOG_H

#include <stdint.h>

#include "kvtier.h"
#include "segment.h"

struct cat;

/* Segment states, stored in segments.state. */
enum seg_state {
	SEG_FREE = 0,		/* holds nothing; may be claimed */
	SEG_OPEN = 1,		/* a process appends to it (holds its append lock) */
	SEG_SEALED = 2,		/* full; extents are read, never written */
	SEG_RECLAIMING = 3,	/* a process is emptying it (holds its append lock) */
};

/*
 * One extent of an object: payload bytes [obj_off, obj_off + length). Its
 * header on disk names the version and place it was written as (hvid,
 * hseq), which stay the same when extents of upload parts become extents of
 * the completed object (cat_object_compose): the bytes never move.
 */
struct cat_extent {
	uint32_t seq;
	uint32_t segment;
	uint64_t gen;		/* the segment's generation when written */
	uint64_t offset;	/* in the segment file, of the header */
	uint32_t length;	/* payload bytes */
	uint32_t crc;		/* CRC32C of the payload */
	uint64_t obj_off;	/* payload offset in the object */
	uint64_t hvid;		/* version named by the header */
	uint32_t hseq;		/* extent number named by the header */
	/* CRC32C of each chunk of the payload (segment.h), the first chunk0
	 * bytes long; nchunks 0: none kept (written before they were, or a
	 * single chunk). */
	uint32_t nchunks;
	uint32_t chunk0;
	uint32_t chunk_crc[SEG_CHUNKS_MAX];
};

/* An object row with its extents, as the reader and fsck need it. */
struct cat_object {
	int64_t id;
	int64_t bucket_id;
	uint64_t vid;		/* version id, in every extent header */
	struct kvt_object *obj;	/* the public description */
	size_t nextents;
	struct cat_extent *extents;
};

void cat_object_free(struct cat_object *co);

struct cat_segment {
	uint32_t id;
	enum seg_state state;
	uint64_t gen;
	uint64_t live;		/* bytes of committed extents (headers and padding included) */
	uint64_t used;		/* append pointer when sealed */
	int64_t last_access;
};

/* What a writer commits. */
struct cat_put {
	int64_t bucket_id;
	/* If not NULL, bucket_id must still be this bucket's id (it may come
	 * from a cache): else the put fails -ENOENT. */
	const char *bucket;
	const char *key;
	uint64_t vid;
	uint64_t size;
	const char *etag;
	uint32_t crc32c;
	const char *content_type;
	const struct kvt_meta *meta;
	size_t nmeta;
	int64_t mtime_ns;
	const char *session;
	int pinned;
	int keep_pin;		/* KVT_PUT_KEEP_PIN: pinned if the version replaced is */
	int *pinned_out;	/* if not NULL: the pin the version got */
	int if_none_match;
	/* kvt_put_opts.precondition: called with the current ETag or NULL. */
	int (*precondition)(void *arg, const char *etag);
	void *precondition_arg;
	struct kvt_posix posix;
	size_t nextents;
	const struct cat_extent *extents;
};

enum {
	CAT_CREATE = 1,		/* make the catalog if it is missing */
	CAT_READONLY = 2,	/* on a read-only file system: read it, write nothing */
};

int cat_open(const char *path, unsigned flags, struct cat **out);
void cat_close(struct cat *c);

/* Geometry fixed at init: refuses a segment size that differs, grows nsegs. */
int cat_init_geometry(struct cat *c, uint64_t segment_size, uint32_t nsegs);
/* Segments the catalog knows of. */
int cat_segment_count(struct cat *c, uint32_t *n);
/* This store's random id, made on first use: whose a G4 manifest is. */
int cat_store_id(struct cat *c, uint64_t *id);
/*
 * Where the store lives, recorded beside its id: what a copy of the store
 * directory does not keep (store.c, store_place_here). st_dev is not in it:
 * it changes across reboots with the order disks are found in.
 */
struct cat_place {
	uint64_t machine;	/* the first 64 bits of /etc/machine-id; 0: none */
	uint64_t ino;		/* the store directory's inode */
	int64_t btime_ns;	/* its birth time; 0: the file system gives none */
};
/* The place recorded; -ENOENT when none is (a store made before places were). */
int cat_store_place(struct cat *c, struct cat_place *p);
/* Records p: only if none is recorded yet, or (replace) over what is. */
int cat_store_place_set(struct cat *c, const struct cat_place *p, int replace);
/*
 * A new random id (*id) with place p, in one transaction: the store is a
 * copy. Forgets g4_dead and g4_uploads, the old id's work left in G4, which
 * the original does.
 */
int cat_store_id_new(struct cat *c, const struct cat_place *p, uint64_t *id);
/* 1 once cat_store_id_new() gave the store its id: it was copied. */
int cat_store_copied(struct cat *c, int *copied);
/* Forgets free segments from nsegs on: a growth whose files could not be made. */
int cat_segment_trim(struct cat *c, uint32_t nsegs);

int cat_begin(struct cat *c);		/* BEGIN IMMEDIATE: a write transaction */
int cat_begin_read(struct cat *c);	/* BEGIN DEFERRED */
int cat_commit(struct cat *c);
/*
 * Copies the write-ahead log into the database when nothing is in the way
 * (PASSIVE). With `restart`, then makes the next writer start the log over
 * (RESTART): writers wait for it, so it waits at most 100 ms for readers of
 * older snapshots and gives up if they are not done. Returns 1 when it gave
 * up so, 0 when done or when the passive copy met a writer, else -errno.
 */
int cat_checkpoint(struct cat *c, int restart);
/* -ENOSPC from the last write transaction was the disk's, not the hot tier's. */
int cat_disk_full(const struct cat *c);
/*
 * SQLite's quick_check of the whole catalog (every page and record, not the
 * indexes' agreement with the tables): 0 if sound; -EUCLEAN if damaged,
 * with SQLite's first finding in msg; or a negative errno.
 */
int cat_quick_check(struct cat *c, char *msg, size_t len);
/* 1 while the last write of this process that ended found the catalog's
 * file system full (no commit since). */
int cat_full_seen(void);
/* 1 once any catalog query of this process met a damaged page, for good. */
int cat_damage_seen(void);
/* After each commit of c, stores the number of frames in the log at *frames. */
void cat_watch_wal(struct cat *c, unsigned *frames);
/* A number that changes whenever another connection commits (PRAGMA data_version). */
int cat_data_version(struct cat *c, int64_t *version);
/* Makes every transaction committed so far durable against power loss. */
int cat_sync(struct cat *c);
void cat_rollback(struct cat *c);

/* Buckets. */
int cat_bucket_create(struct cat *c, const char *name, int64_t ctime_ns);
int cat_bucket_delete(struct cat *c, const char *name);
int cat_bucket_id(struct cat *c, const char *name, int64_t *id);
int cat_bucket_list(struct cat *c, int (*fn)(void *, const char *, int64_t), void *arg);

/* Objects. */
int cat_object_put(struct cat *c, const struct cat_put *put, int64_t *id_out,
		   uint64_t *freed_vid);
int cat_object_get(struct cat *c, int64_t bucket_id, const char *key, int with_extents,
		   struct cat_object **out);
/* Object (and extents) by bucket name and key in one query, so in one read
 * transaction; -ENOENT if either is missing. */
int cat_object_lookup(struct cat *c, const char *bucket, const char *key, int with_extents,
		      struct cat_object **out);
/* Object key if it exists, else the first object in [under, under_upper) (a
 * NULL under skips the range), in one query; -ENOENT if neither. No extents. */
int cat_object_lookup_or_under(struct cat *c, const char *bucket, const char *key,
			       const char *under, const char *under_upper, struct cat_object **out);
int cat_object_by_id(struct cat *c, int64_t id, struct cat_object **out);
/*
 * The tier and size of keys[0..n) of a bucket, one prepared statement stepped
 * n times; a NULL key is reported missing without a query. The caller holds
 * the read transaction (cat_begin_read) that makes the answers one instant.
 */
int cat_object_states(struct cat *c, int64_t bucket_id, const char *const *keys, size_t n,
		      struct kvt_key_state *out);
/* precondition (or NULL) as kvt_object_delete_if()'s, in the same transaction. */
int cat_object_delete(struct cat *c, int64_t bucket_id, const char *key,
		      int (*precondition)(void *arg, const char *etag), void *arg);
/*
 * Group commit: puts[0..n) in one write transaction, each in a savepoint of
 * its own, so that rcs[i] is put i's own result (0, or the -errno that
 * cat_object_put would have returned; a failed put changes nothing). Returns
 * 0 if the transaction committed, which makes every rcs[i] == 0 visible at
 * once; otherwise -errno and none of them is.
 */
int cat_object_put_group(struct cat *c, const struct cat_put *const *puts, size_t n, int *rcs);
/*
 * The same, and the extents of objects parts[0..nparts) (each still at
 * version part_vids[i], else -ESTALE) are appended to the new object, in
 * order, without moving a byte; the parts disappear. put->size must be the
 * sum of the parts' sizes (plus put->extents').
 */
int cat_object_put_parts(struct cat *c, const struct cat_put *put, const int64_t *parts,
			 const uint64_t *part_vids, size_t nparts, int64_t *id_out,
			 uint64_t *freed_vid);
/*
 * Reclaim's drop of object id at version vid, decided in one transaction:
 * -ENOENT if it changed (another version, deleted, cold or recalling: it
 * holds nothing in the victim any more); COLD if G4 holds this version and
 * g4_proven says reclaim proved that copy (else -EAGAIN: reclaim looks
 * again); with keep_session_state, -EAGAIN for session state G4 lacks (only
 * plain cache, a key that is its own session, is deleted); else deleted.
 */
int cat_object_drop(struct cat *c, int64_t id, uint64_t vid, int keep_session_state,
		    int g4_proven);
int cat_object_set_pin(struct cat *c, int64_t bucket_id, const char *key, int pinned);

/* Lists up to limit objects of a bucket with key > after (NULL: from the
 * start) and key < upper (NULL: no bound), in key order, without extents. */
int cat_object_range(struct cat *c, int64_t bucket_id, const char *after, int inclusive,
		     const char *upper, unsigned limit,
		     int (*fn)(void *arg, struct kvt_object *obj), void *arg);

/* POSIX attributes, session, renames (the FUSE view). */
int cat_object_setattr(struct cat *c, int64_t bucket_id, const char *key, unsigned mask,
		       const struct kvt_posix *p, int64_t mtime_ns, int64_t now_ns);
int cat_object_set_session(struct cat *c, int64_t bucket_id, const char *key, const char *session,
			   int64_t now_ns);
int cat_object_rename(struct cat *c, int64_t bucket_id, const char *from, const char *to,
		      int noreplace, int64_t now_ns);
/* Every key under prefix from moves under prefix to; the bounds are the
 * smallest strings above every key with each prefix. */
int cat_object_rename_prefix(struct cat *c, int64_t bucket_id, const char *from, const char *to,
			     const char *from_upper, const char *to_upper, int64_t now_ns);

/* Segments. */
int cat_segment_get(struct cat *c, uint32_t id, struct cat_segment *out);
int cat_segment_list(struct cat *c, int (*fn)(void *, const struct cat_segment *), void *arg);
/* FREE -> OPEN; -EBUSY if it is not free any more. */
int cat_segment_claim(struct cat *c, uint32_t id, uint64_t *gen);
/* A SEALED segment after `after` appended to at most max_used bytes. */
int cat_segment_next_partial(struct cat *c, uint32_t after, uint64_t max_used, uint32_t *id,
			     uint64_t *used);
/* SEALED -> OPEN again, appending from used; -EBUSY if it changed meanwhile. */
int cat_segment_reopen(struct cat *c, uint32_t id, uint64_t used, uint64_t *gen);
int cat_segment_next_free(struct cat *c, uint32_t after, uint32_t *id);
#define SEG_USED_KEEP UINT64_MAX
/* from -> to if the segment is in state from; used = append pointer (or
 * SEG_USED_KEEP); -ESTALE if it was not in state from. */
int cat_segment_set_state(struct cat *c, uint32_t id, enum seg_state from,
			  enum seg_state to, uint64_t used);
/* Any -> FREE with gen + 1; fails with -EBUSY if extents remain. */
int cat_segment_free(struct cat *c, uint32_t id, uint64_t *new_gen);
/* The sealed segment to reclaim next: an empty one (no live bytes) if any,
 * else the coldest; empty_only: only an empty one. -ENOENT if none. */
int cat_segment_pick_victim(struct cat *c, int empty_only, uint32_t *id);
int cat_segment_counts(struct cat *c, uint64_t counts[4]);
/* Objects (id, vid, pinned) with an extent in segment id. pinned is also
 * set for every object of an internal bucket (bucket_internal_name: the
 * gateway's multipart uploads, the mount's parts): work in progress that
 * its daemon removes when done or stale, never cache to drop. */
int cat_segment_objects(struct cat *c, uint32_t id,
			int (*fn)(void *arg, int64_t obj, uint64_t vid, int pinned), void *arg);
/* The bytes (headers and padding included) of the extents in segment id of
 * the objects cat_segment_objects() reports pinned: what relocating them
 * copies. */
int cat_segment_kept_space(struct cat *c, uint32_t id, uint64_t *space);
/* Where the last extent committed in segment id ends (0: none): what lies
 * past it no catalog row names. */
int cat_segment_extents_end(struct cat *c, uint32_t id, uint64_t *end);
/* The least `used` of a part-full SEALED segment (the most room a reopen
 * finds); -ENOENT if there is none. */
int cat_segment_least_used(struct cat *c, uint64_t *used);
/* Moves extent (obj, seq) if the object still has version vid. */
int cat_extent_move(struct cat *c, int64_t obj, uint64_t vid, const struct cat_extent *to,
		    uint32_t space);
int cat_segment_set_live(struct cat *c, uint32_t id, uint64_t live);

/* Access times, batched by the store. */
int cat_touch_session(struct cat *c, int64_t bucket_id, const char *session, int64_t when_ns);
int cat_touch_segment(struct cat *c, uint32_t id, int64_t when_ns);

/* Persistent counters ("evicted_objects", ...). */
int cat_counter_add(struct cat *c, const char *name, int64_t delta);
/* Sets counter `name` to 1 unless it exists: 1 if it did not, 0 if it did. */
int cat_counter_once(struct cat *c, const char *name);
int cat_counter_get(struct cat *c, const char *name, uint64_t *value);

/* Totals for kvt_store_stat. */
int cat_stat(struct cat *c, struct kvt_store_stat *st);

/* fsck: every object in id order, with its extents and bucket name; the walk
 * frees co after fn returns. A non-zero return from fn stops the walk. */
int cat_object_walk(struct cat *c, int (*fn)(void *arg, struct cat_object *co), void *arg);
int cat_object_drop_id(struct cat *c, int64_t id);
/* Removes object id if it is still version vid: -ESTALE if it is another
 * now, -ENOENT if it is gone (fsck's repair of what it found damaged). */
int cat_object_drop_version(struct cat *c, int64_t id, uint64_t vid);
/*
 * Segment id as one transaction sees it: *live, the bytes it counts, and
 * *space, what the extents of its generation (of objects not cold) take.
 * With repair, in a write transaction, a difference is fixed in that same
 * transaction (live = space), so no writer comes between count and fix.
 */
int cat_segment_recount(struct cat *c, uint32_t id, int repair, uint64_t *live, uint64_t *space);

/* ---- G4 (migrate.c); the state machine is described in catalog.c ---- */

/* Sessions of public buckets idle since before idle_before_ns with hot
 * unpinned objects, and sessions with a demotion in progress. fn must not
 * write to the catalog; a non-zero return stops the walk. */
int cat_g4_sessions(struct cat *c, int64_t idle_before_ns,
		    int (*fn)(void *arg, int64_t bucket_id, const char *bucket,
			      const char *session),
		    void *arg);
/* HOT -> DEMOTING for the session's unpinned objects; *count of them. */
int cat_g4_demote_begin(struct cat *c, int64_t bucket_id, const char *session, int *count);
/* DEMOTING -> HOT for the session's objects, keeping what G4 holds
 * verified (g4_vid): a demotion that could not write the manifest. */
int cat_g4_demote_abort(struct cat *c, int64_t bucket_id, const char *session);

struct cat_g4_obj {
	struct cat_object *co;	/* without extents */
	uint64_t g4_vid;	/* version verified in G4, or 0 */
	unsigned attempts;
	char g4_etag[KVT_ETAG_MAX];	/* what G4 called it, or "" */
	char *g4_key;		/* where G4 holds it, if not "BUCKET/KEY"; else NULL */
};

/* The session's objects whose tier is in the mask (1 << KVT_TIER_...), in
 * key order. Caller frees with cat_g4_objs_free(). */
int cat_g4_session_objects(struct cat *c, int64_t bucket_id, const char *session, unsigned tiers,
			   struct cat_g4_obj **out, size_t *n);
void cat_g4_objs_free(struct cat_g4_obj *v, size_t n);
/* Object id at version vid as cat_g4_session_objects() gives it, any tier;
 * -ENOENT if it is gone or changed. Caller frees with cat_g4_objs_free(*out, 1). */
int cat_g4_object(struct cat *c, int64_t id, uint64_t vid, struct cat_g4_obj **out);
/*
 * Before an upload of co under g4_key (NULL: "BUCKET/KEY" of co's key):
 * records that copy as dead (g4_dead, *id its row) until
 * cat_g4_set_uploaded() claims it for co in the transaction that records
 * it. A copy put and never recorded (the process killed between the two,
 * or the record failing) is then swept like any dead one; before, nothing
 * named it and it stayed in G4 for good. The sweep leaves a copy that an
 * object names (cat_g4_name_taken()) and waits for the upload's locks.
 */
int cat_g4_put_pending(struct cat *c, const struct cat_object *co, const char *g4_key,
		       int64_t *id);
/*
 * G4 holds co's version verified, uploaded under g4_key (NULL: "BUCKET/KEY"
 * of co's key); the g4_dead row pending (cat_g4_put_pending(), 0: none) is
 * deleted in the same transaction. -ENOENT if the object is no longer
 * DEMOTING at that version under that key and session (overwritten,
 * deleted, renamed or moved to another session during the upload): the
 * copy just made stays recorded as dead (pending, else a new row), for the
 * sweep.
 */
int cat_g4_set_uploaded(struct cat *c, const struct cat_object *co, const char *g4_etag,
			const char *g4_key, int64_t pending);
/* Before an upload over the copy G4 holds of a DEMOTING object's version vid:
 * nothing may rely on that copy while it is rewritten (some partners, s3rver
 * among them, keep a cut PUT); and when reclaim finds that copy does not
 * hold a HOT object's bytes. -ENOENT if the object changed or went cold. */
int cat_g4_forget(struct cat *c, int64_t id, uint64_t vid);
int cat_g4_failed(struct cat *c, int64_t id);
/* DEMOTING -> COLD and the extents freed, if still vid and uploaded; else -ENOENT. */
int cat_g4_mark_cold(struct cat *c, int64_t id, uint64_t vid);
/* COLD -> HOT with these extents, if still vid and cold; else -ESTALE. */
int cat_g4_recalled(struct cat *c, int64_t id, uint64_t vid, const struct cat_extent *ext,
		    size_t n, int64_t now_ns);
/* What reclaim needs to know of a victim object at version vid: its
 * bucket, key and session (caller frees the strings) and whether G4 holds
 * that version verified. -ENOENT if it is gone or changed. */
int cat_g4_victim(struct cat *c, int64_t id, uint64_t vid, char **bucket, char **key,
		  char **session, int *in_g4);
/* Deletes object id at version vid if it is unchanged since G4 got it and
 * not being demoted (an import's manifest no longer lists it); -ENOENT if
 * it changed. */
int cat_g4_drop_superseded(struct cat *c, int64_t id, uint64_t vid);
/* A COLD object known from a manifest (no extents); -EEXIST if the key is
 * taken, unless by this store's old view of the session's G4 version, which
 * the manifest's replaces. Inside the caller's write transaction (cat_begin),
 * so that an import that fails part way is rolled back whole: deleting what
 * it brought in would record the copies dead (g4_dead), and the sweep would
 * delete copies the session's owner still needs. */
int cat_g4_import(struct cat *c, const struct cat_put *put, const char *g4_etag,
		  const char *g4_key);
/* Where G4 holds object id at version vid: *g4_key (caller frees), NULL
 * for "BUCKET/KEY"; -ENOENT if it changed. */
int cat_g4_name(struct cat *c, int64_t id, uint64_t vid, char **g4_key);

/* Multipart uploads in flight (cold.h, struct cold_journal): recorded
 * with the recording process's pid before the first part, forgotten once
 * completed or aborted. */
int cat_g4_upload_begin(struct cat *c, const char *url, const char *key, const char *upload_id,
			int64_t now_ns);
int cat_g4_upload_end(struct cat *c, const char *upload_id);
/* Every recorded upload, oldest first; fn must not write to the catalog. */
int cat_g4_uploads(struct cat *c, int (*fn)(void *arg, const char *url, const char *key,
					    const char *upload_id, int64_t started_ns, long pid),
		   void *arg);
/* Keys whose G4 copy no longer stands for an object (deleted, overwritten,
 * renamed, moved out of the session), by bucket and session; fn must not
 * write to the catalog. cat_g4_dead_done() forgets one. unproven: a row
 * from before catalog migration 10 with no g4_key, whose copy may still be
 * a cold object's (migrate.c, g4_claim_unproven). */
typedef int (*cat_g4_dead_fn)(void *arg, int64_t id, int64_t bucket_id, const char *bucket,
			      const char *key, const char *session, const char *g4_key,
			      int unproven);
int cat_g4_dead(struct cat *c, cat_g4_dead_fn fn, void *arg);
int cat_g4_dead_done(struct cat *c, int64_t id);
/* The objects that moved to another session keeping their G4 copy
 * (cat_object_set_session(): user.kvtier.session): a g4_dead row of the
 * session they left whose key is theirs and whose copy they still name,
 * at a version G4 holds. By bucket, old session, new session and id, as
 * cat_g4_dead() gives the rows; g4_key NULL for "BUCKET/KEY". fn must not
 * write to the catalog. */
typedef int (*cat_g4_move_fn)(void *arg, int64_t bucket_id, const char *from, const char *to,
			      int64_t id, const char *g4_key);
int cat_g4_moves(struct cat *c, cat_g4_move_fn fn, void *arg);
/* The unproven rows of the bucket's session whose key is not not_key, as
 * cat_g4_dead() gives them, by id: one search of a partial index
 * (migration 11), where recall read every g4_dead row of the store. */
int cat_g4_dead_unproven_in(struct cat *c, int64_t bucket_id, const char *session,
			    const char *not_key, cat_g4_dead_fn fn, void *arg);
/* 1 if an unproven g4_dead row names "BUCKET/KEY" of the bucket, 0 if
 * none, or -errno. One probe of a partial index, empty once swept. */
int cat_g4_dead_unproven(struct cat *c, int64_t bucket_id, const char *key);
/* Those rows checked: no longer unproven. */
int cat_g4_dead_proven(struct cat *c, int64_t bucket_id, const char *key);
/* The bucket's COLD objects whose copy G4 holds under no recorded name
 * (g4_key NULL), other than not_key, of that size and with ETag g4_etag
 * or none recorded, or, with g4_etag NULL, with CRC32C crc32c; by key.
 * One search of an index each (catalog migration 11). */
int cat_g4_cold_unnamed(struct cat *c, int64_t bucket_id, const char *not_key, uint64_t size,
			const char *g4_etag, uint32_t crc32c, struct cat_g4_obj **out, size_t *n);
/* 1 if there is such an object of that size at all, 0 if not, or -errno:
 * whether a copy with no ETag is worth reading for its CRC32C. */
int cat_g4_cold_unnamed_sized(struct cat *c, int64_t bucket_id, const char *not_key,
			      uint64_t size);
/* The plan SQLite chooses for the catalog's statement `name` ("g4 cold
 * unnamed sized", "g4 cold unnamed etag", "g4 cold unnamed crc", "g4
 * session objects", "g4 dead unproven in"): the detail of
 * each EXPLAIN QUERY PLAN row, one a line, in *plan (caller frees);
 * -ENOENT for another name. How a test, or an operator with a slow
 * catalog, sees which index a query searches. */
int cat_plan(struct cat *c, const char *name, char **plan);
/* G4 holds the COLD object id at version vid under g4_key, where it had no
 * recorded name; -ENOENT if it changed or has one. */
int cat_g4_name_found(struct cat *c, int64_t id, uint64_t vid, const char *g4_key);
/* 1 if an object of the bucket other than except_id (0: none) names the G4
 * copy `name`: as its g4_key, or, with none, as its key `key` (the name
 * without "BUCKET/", NULL if it is no such name) and G4 holds a version of
 * it (g4_vid); 0 if none, or -errno. A new version at an overwritten key,
 * not uploaded yet, does not keep the old version's copy: once the sweep
 * had let it stand for the new one, deleting the key left it in G4 for
 * good (no trigger fires for a version G4 never had). */
int cat_g4_name_taken(struct cat *c, int64_t bucket_id, int64_t except_id, const char *name,
		      const char *key);

#endif /* KVT_CATALOG_H */
