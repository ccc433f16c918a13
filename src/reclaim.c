/*
 * reclaim.c - freeing whole segments, and recovering segments whose process
 * died.
 *
 * Segment life cycle (the function that makes each transition):
 *
 *        store_claim()            store_seal()          reclaim_segment()
 *   FREE -------------> OPEN -----------------> SEALED ----------------> RECLAIMING
 *    ^                   |                                                   |
 *    |  reclaim_recover(): owner died, nothing live                           |
 *    +-------------------+---------------------------------------------------+
 *                          reclaim_segment(): emptied, generation + 1
 *
 * Reclaim takes the coldest SEALED segment (empty ones first). Each object
 * with bytes in it is either dropped, if it is plain cache, or, if it is
 * pinned, relocated: its extents in the victim are copied to reclaim's own
 * open segment (kvt_store.reloc, which writers never append to) and the
 * catalog is pointed at the copies. Then
 * the segment becomes FREE with a new generation; no reader is waited for:
 * one still inside it fails its generation check with -ESTALE, and a
 * mapped reader's pin keeps it from being rewritten (segment.h).
 *
 * Session state is not plain cache. With a cold tier ([g4] url is not
 * none), an object whose key names a session (the session is not the key
 * itself) and whose version G4 does not hold yet is demoted before its
 * segment is freed: reclaim_segment() finds such objects before it drops
 * anything, puts the victim back to SEALED and returns their sessions;
 * reclaim_run(demote = 1), in the background demoter (demoter.c), then
 * demotes them with no lock held (g4_demote_pressure(), migrate.c: upload,
 * verify, manifest, cold), and takes the victim again, whose objects now
 * drop to COLD. A writer's reclaim (demote = 0) leaves such a segment
 * whole and wakes the demoter instead: it must not wait for the partner. An object G4
 * holds goes COLD instead of away (cat_object_drop), but only once its copy
 * has proven to hold its bytes (reclaim_prove(): a recalled object keeps
 * g4_vid, and a copy damaged in G4 or put over by another node since made
 * it cold and unreadable); a copy that fails is forgotten and the object
 * demoted again like session state G4 lacks. A session whose
 * demotion failed is not tried again in the same call: its segment stays
 * whole (-ENOSPC for the writer, a 503 SlowDown at the gateway), nothing is
 * lost, and it backs off across calls ("Backing off"). A refusal that is
 * the store's and not the session's (g4_refused_all(): the store a copy,
 * its bucket missing; or the partner not answering two sessions in a row,
 * reclaim_judge()) ends the asking for the call, each victim with session
 * state G4 lacks staying whole; the next call asks again. Asked session
 * by session, a pass over a full store of 3060 sessions with the partner
 * down made 3060 requests and logged 6120 lines, every second
 * (test_cold: test_pressure_refused_store_wide). With [g4] url = none
 * every unpinned object is plain cache. The objects of internal buckets
 * (multipart uploads in progress, the mount's parts) count as pinned:
 * dropping one failed an upload half way (NoSuchUpload) on a node without
 * G4.
 *
 * Relocation needs somewhere to go. Writers leave STORE_RESERVE_SEGS free
 * segments to reclaim (store.h): when they took the last one, a store
 * whose every segment held a little pinned data beside dead space could
 * never free one again. Only a victim whose pinned objects take at most
 * relocate_max() of it is relocated: the copy then always fits in the
 * reserve, and freeing the victim gives the reserve back. Relocating a
 * segment full of pinned objects would free nothing, its copies filling
 * another: in a store full of pinned objects, every write that found no
 * room copied the whole store before it failed.
 *
 * When no segment is free (a reclaimer holds the reserve, or died holding
 * it), the reserve is the room left in part-full sealed segments: writers
 * may not reopen those then (store_claim_txn), and a victim is relocated
 * if its pinned objects fit in one of them (reclaim_room). A reclaim killed
 * after it had copied part of a victim into the reserve left no segment
 * free and that victim still pinned; with relocation refused whenever no
 * segment was free, nothing could be freed again: every put failed ENOSPC
 * and recalls of cold objects too, in a store mostly of plain cache
 * (test_multiproc: test_reclaim_killed_relocating). Recovery keeps the room
 * the dead reclaimer left in its target (reclaim_recover), so the rest of
 * the victim goes there, and freeing the victim gives the reserve back.
 *
 * Open readers. A version replaced while a reader has it open (a KV block
 * read while another worker rewrites the name) is dead space, so its
 * segments are empty and were the first victims: a FUSE reader of a 64 MiB
 * file rewritten ten times failed with EIO a few MiB in while the
 * versions written after it, as dead, were still there to take. A reader
 * that holds its segments (kvt_reader_hold, segment.h) has reclaim pass
 * each such victim over once per call (reclaim_segment makes it the most
 * recent, as for a victim it cannot take now), so that the others go
 * first, and a batch past the target leaves it. A held segment is empty
 * all the same, and the empty go before the live (whose plain cache is
 * lost), so once no other empty segment is left a call that needs more
 * takes it: the reader then gets -ESTALE (EIO at the mount, "was evicted
 * while open"), never another version's bytes; a hold never costs a
 * writer room, nor sends a cached object before an empty segment. Among live
 * segments a held one (a file open now) counts as the most recently used,
 * as it is: another's cache goes before it.
 *
 * A reclaimer holds the victim's append lock from the moment it marks it
 * RECLAIMING; if it dies, recovery finds the lock free and puts the segment
 * back to SEALED. A segment left OPEN by a dead process is sealed at the end
 * of its last committed extent (or freed, if it holds nothing committed):
 * the extents past that were never committed, garbage that the next append
 * to it overwrites or the next reclaim of it frees.
 */
#include "config.h"

#include <errno.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "util.h"

struct victim_obj {
	int64_t id;
	uint64_t vid;
	int pinned;
	int g4_proven;		/* G4's copy of vid proven to hold it (reclaim_prove) */
};

struct victim_list {
	struct victim_obj *v;
	size_t n, cap;
};

/*
 * Sessions to demote under pressure, or tried already in this call: in the
 * order added (v), and in a search tree (tsearch(3), root) that answers
 * whether one is in. Searched in a list, every object of every victim cost
 * a strcmp of each session in it: n^2 / 2 for a victim of n sessions, at
 * each writer's reclaim and each demoter pass, two thirds of a pass over a
 * full copy of 3060 sessions (test_cold: test_reclaim_many_sessions_cost).
 */
struct session_key {
	char *bucket, *session;
	/* In kvt_store.backoff only ("Backing off"): */
	int64_t next_ns;	/* not asked again before this (util_mono_ns()) */
	int64_t delay_ms;	/* the last back-off; 0: it was demoted since */
	struct log_limit said;	/* its failure, once a minute */
};

struct session_set {
	struct session_key **v;
	size_t n, cap;
	void *root;
};

static int session_key_cmp(const void *a, const void *b)
{
	const struct session_key *x = a, *y = b;
	int d = strcmp(x->session, y->session);

	return d ? d : strcmp(x->bucket, y->bucket);
}

/* The key of bucket/session in ss (may be NULL), or NULL. */
static struct session_key *session_set_get(const struct session_set *ss, const char *bucket,
					   const char *session)
{
	struct session_key k = { .bucket = (char *)bucket, .session = (char *)session };
	struct session_key **found = ss ? tfind(&k, &ss->root, session_key_cmp) : NULL;

	return found ? *found : NULL;
}

static int session_set_has(const struct session_set *ss, const char *bucket, const char *session)
{
	return session_set_get(ss, bucket, session) != NULL;
}

/* Takes ownership of bucket and session. */
static int session_set_add(struct session_set *ss, char *bucket, char *session)
{
	struct session_key *k = NULL;
	int rc = -ENOMEM;

	if (session_set_has(ss, bucket, session)) {
		rc = 0;
		goto out;
	}
	if (UTIL_GROW(ss->v, ss->n, ss->cap) < 0 || !(k = malloc(sizeof(*k))))
		goto out;
	*k = (struct session_key){ .bucket = bucket, .session = session };
	if (!tsearch(k, &ss->root, session_key_cmp))
		goto out;
	ss->v[ss->n++] = k;
	return 0;
out:
	free(k);
	free(bucket);
	free(session);
	return rc;
}

static void session_set_release(struct session_set *ss)
{
	for (size_t i = 0; i < ss->n; i++) {
		free(ss->v[i]->bucket);
		free(ss->v[i]->session);
	}
	tdestroy(ss->root, free);	/* the keys, which v names too */
	free(ss->v);
	memset(ss, 0, sizeof(*ss));
}

/*
 * Backing off. A session whose demotion under pressure failed on its own
 * (its copies or its manifest refused, or not answered while the partner
 * answered another session) is not asked again for backoff_ms, then twice
 * as long at each failure, up to BACKOFF_MAX_MS; its victims stay whole
 * meanwhile, and the others go. Its failure is logged once a minute, with
 * the count of those left out. Asked at every pass, a session that always
 * timed out cost a partner timeout and a log line every second, and
 * before that, taken for the partner's silence, it ended every pass while
 * the others never moved (test_cold: test_pressure_one_session_fails).
 * Kept in this process's memory: a restart asks again.
 */
#define BACKOFF_MS 2000
#define BACKOFF_MAX_MS (5 * 60 * 1000)

/* Whether bucket/session is backing off now. */
static int backoff_holds(struct kvt_store *st, const char *bucket, const char *session)
{
	const struct session_key *k;
	int holds;

	pthread_mutex_lock(&st->backoff_lock);
	k = session_set_get(st->backoff, bucket, session);
	holds = k && k->delay_ms && util_mono_ns() < k->next_ns;
	pthread_mutex_unlock(&st->backoff_lock);
	return holds;
}

/* Drops the sessions whose last back-off ended BACKOFF_MAX_MS ago or more,
 * or that were demoted since: a session deleted while it failed leaves
 * nothing for ever. With backoff_lock held. */
static void backoff_prune(struct kvt_store *st)
{
	struct session_set *old = st->backoff, *kept = calloc(1, sizeof(*kept));
	int64_t now = util_mono_ns();

	if (!kept)
		return;
	for (size_t i = 0; i < old->n; i++) {
		struct session_key *k = old->v[i], *to;

		if (!k->delay_ms || now - k->next_ns >= BACKOFF_MAX_MS * 1000000ll)
			continue;
		if (session_set_add(kept, k->bucket, k->session) < 0)
			break;	/* what is left goes: it backs off from the start */
		to = kept->v[kept->n - 1];
		to->next_ns = k->next_ns;
		to->delay_ms = k->delay_ms;
		to->said = k->said;
		k->bucket = k->session = NULL;	/* kept's now */
	}
	session_set_release(old);
	free(old);
	st->backoff = kept;
}

/* bucket/session failed with rc, on its own: backed off, and logged. */
static void backoff_fail(struct kvt_store *st, const char *bucket, const char *session, int rc)
{
	struct session_key *k;
	char also[96] = "";
	int64_t delay = 0;
	int say = 1;

	pthread_mutex_lock(&st->backoff_lock);
	if (!st->backoff)
		st->backoff = calloc(1, sizeof(*st->backoff));
	else if (st->backoff->n >= 1024 && st->backoff->n == st->backoff->cap)
		backoff_prune(st);	/* before it grows */
	k = session_set_get(st->backoff, bucket, session);
	if (!k && st->backoff) {
		char *b = strdup(bucket), *s = b ? strdup(session) : NULL;

		if (s && session_set_add(st->backoff, b, s) == 0)
			k = st->backoff->v[st->backoff->n - 1];
		else if (!s)
			free(b);
	}
	/* No memory to remember it: said every time, as before. */
	if (k) {
		unsigned first = st->backoff_ms ? st->backoff_ms : BACKOFF_MS;

		k->delay_ms = k->delay_ms ? MIN(2 * k->delay_ms, (int64_t)BACKOFF_MAX_MS) : first;
		k->next_ns = util_mono_ns() + k->delay_ms * 1000000ll;
		delay = k->delay_ms;
		say = log_limit(&k->said, LOG_REPEAT_SECONDS, "demotions of it", also, sizeof(also));
	}
	pthread_mutex_unlock(&st->backoff_lock);
	if (say)
		g4_pressure_failed(st, bucket, session, rc, delay, also);
}

/* bucket/session was demoted: its next failure backs off from the start. */
static void backoff_clear(struct kvt_store *st, const char *bucket, const char *session)
{
	struct session_key *k;

	pthread_mutex_lock(&st->backoff_lock);
	k = session_set_get(st->backoff, bucket, session);
	if (k)
		k->delay_ms = 0;
	pthread_mutex_unlock(&st->backoff_lock);
}

void reclaim_backoff_release(struct kvt_store *st)
{
	if (st->backoff)
		session_set_release(st->backoff);
	free(st->backoff);
	st->backoff = NULL;
}

/*
 * An unpinned victim vo whose version G4 holds verified (g4_vid = vid), as
 * far as the catalog knows: a recalled object, or one demoted and not yet
 * marked cold. Before it turns cold, G4's copy must prove that it still
 * holds its bytes (g4_victim_copy_holds(): the ETag recorded, or a read
 * back): a copy damaged in G4, or put over by another node, made a cold
 * object that no read could return. Proven: vo->g4_proven. Not: the copy
 * is forgotten (g4_vid = 0) and *lost set, the object is one G4 lacks,
 * demoted again before its segment is freed. The partner does not
 * answer: -ENOSPC, the segment stays whole; and for two copies in a row
 * (one may time out alone, as one session's may: reclaim_judge()), or for
 * any other failure, *g4_down spares the other victims of this call the
 * wait. Spared at the first, the victims after a copy that always timed
 * out stayed whole at every pass, each beginning with it again (test_cold:
 * test_pressure_one_proof_fails). A writer's reclaim (!demote) does not
 * wait for the partner: -EINPROGRESS, the demoter proves it.
 */
enum { G4_UP, G4_DOWN, G4_ONE_SILENT };	/* *g4_down */

/* Why reclaim passed a victim over in this call (passed[id], a mask). */
#define PASSED_READER 1		/* its extents held by an open reader */
#define PASSED_SILENT 2		/* a copy of one of its objects not answered for */

static int reclaim_prove(struct kvt_store *st, struct cat *c, uint32_t id,
			 struct victim_obj *vo, const char *bucket, const char *key,
			 int demote, int *g4_down, uint8_t *passed, int *lost)
{
	int rc;

	if (!demote)
		return -EINPROGRESS;
	/* Asked once a call: each try of a copy that times out costs it. */
	if (*g4_down == G4_DOWN || (passed && (passed[id] & PASSED_SILENT)))
		return -ENOSPC;
	rc = g4_victim_copy_holds(st, vo->id, vo->vid, bucket);
	if (rc >= 0 || rc == -ENOENT)
		*g4_down = G4_UP;	/* an answer */
	if (rc == 1) {
		vo->g4_proven = 1;
		return 0;
	}
	if (rc == -ENOENT)
		return 0;	/* changed meanwhile: the drop looks again */
	if (rc < 0) {
		log_err(rc, "cannot prove g4's copy of '%s/%s': segment %u stays whole",
			bucket, key, id);
		*g4_down = g4_transient(rc) && *g4_down == G4_UP ? G4_ONE_SILENT : G4_DOWN;
		if (passed)
			passed[id] |= PASSED_SILENT;
		return -ENOSPC;
	}
	/* g4_copy_holds() logged what G4 holds instead. */
	rc = cat_g4_forget(c, vo->id, vo->vid);
	if (rc == -ENOENT)
		return 0;	/* changed meanwhile: the drop looks again */
	if (rc == 0)
		*lost = 1;
	return rc;
}

/*
 * Before anything of the victim is dropped: the sessions of its unpinned
 * objects that are session state G4 does not hold yet, or whose copy in G4
 * failed its proof (reclaim_prove()), go into need, unless their demotion
 * failed already in this call (tried) or lately (backoff_holds()), or G4
 * refused every session (refused): then -ENOSPC, the segment must stay
 * whole.
 */
static int reclaim_find_unsynced(struct kvt_store *st, struct cat *c, uint32_t id,
				 struct victim_list *list, const struct session_set *tried,
				 int refused, struct session_set *need, int demote, int *g4_down,
				 uint8_t *passed)
{
	int rc = 0;

	if (store_g4_none(st))
		return 0;
	for (size_t i = 0; rc == 0 && i < list->n; i++) {
		struct victim_obj *vo = &list->v[i];
		char *bucket = NULL, *key = NULL, *session = NULL;
		int in_g4 = 0, lost = 0;

		if (vo->pinned)
			continue;
		rc = cat_g4_victim(c, vo->id, vo->vid, &bucket, &key, &session, &in_g4);
		if (rc == -ENOENT) {
			rc = 0;	/* deleted or overwritten meanwhile */
			continue;
		}
		if (rc == 0 && in_g4)
			rc = reclaim_prove(st, c, id, vo, bucket, key, demote, g4_down, passed,
					   &lost);
		/* A copy that failed: uploaded again, even for plain cache, whose
		 * copy G4 was to keep. */
		if (rc == 0 && (lost || (!in_g4 && strcmp(key, session) != 0))) {
			if (refused || session_set_has(tried, bucket, session) ||
			    backoff_holds(st, bucket, session)) {
				rc = -ENOSPC;
			} else {
				rc = session_set_add(need, bucket, session);
				bucket = session = NULL;
			}
		}
		free(bucket);
		free(key);
		free(session);
	}
	return rc;
}

/* The most of a victim (its pinned objects' extents) that is relocated:
 * each byte copied frees at least a third of a byte, and the copy fits in
 * the one segment of the reserve. */
static uint64_t relocate_max(const struct kvt_store *st)
{
	return st->seg_size / 4 * 3;
}

static int victim_collect(void *arg, int64_t obj, uint64_t vid, int pinned)
{
	struct victim_list *l = arg;

	if (UTIL_GROW(l->v, l->n, l->cap) < 0)
		return -ENOMEM;
	l->v[l->n++] = (struct victim_obj){ obj, vid, pinned, 0 };
	return 0;
}

static int victim_has_pinned(const struct victim_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].pinned)
			return 1;
	return 0;
}

/*
 * With no free segment: 0 if `kept` bytes of pinned extents are sure to fit
 * in the room left in reclaim's open segment (kvt_store.reloc), or in one
 * part-full sealed segment, else -ENOSPC. The seg_size / 16 on top is what
 * store_claim() leaves unreopened: the segment must stay reopenable until
 * the last extent is copied. Another process may take that room first:
 * then a relocation stops half way, which loses nothing (each extent is
 * moved in its own transaction, the rest stays in the victim).
 */
static int reclaim_room(struct kvt_store *st, struct cat *c, uint64_t kept)
{
	uint64_t used = 0;
	int rc;

	if (store_reloc_room(st) >= kept)
		return 0;
	rc = cat_segment_least_used(c, &used);
	if (rc == -ENOENT)
		return -ENOSPC;
	if (rc < 0)
		return rc;
	return st->seg_size - used >= kept + st->seg_size / 16 ? 0 : -ENOSPC;
}

/* Copies the extents of one pinned object that lie in segment id elsewhere. */
static int reclaim_relocate(struct kvt_store *st, uint32_t id, const struct victim_obj *vo)
{
	struct cat *c = store_cat(st);
	struct cat_object *co = NULL;
	struct io_ctx *io = NULL;
	int rc;

	if (!c)
		return -ENOMEM;
	/* Look the object up by id through its walk row: bucket and key first. */
	rc = cat_object_by_id(c, vo->id, &co);
	if (rc < 0 || co->vid != vo->vid) {
		rc = rc < 0 ? rc : 0;	/* overwritten meanwhile: nothing to keep */
		goto out;
	}
	rc = store_io_get(st, &io);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < co->nextents; i++) {
		struct cat_extent *e = &co->extents[i];
		struct store_alloc a;
		void *buf = io_buf(io, 0);

		if (e->segment != id)
			continue;
		rc = store_read_extent(st, io, 0, buf, co->vid, e);
		if (rc < 0)
			goto out;
		rc = store_alloc(st, seg_extent_space(e->length), NULL, &a);
		if (rc < 0)
			goto out;
		seg_header_fill(buf, e->hvid, e->hseq, e->obj_off, a.gen, a.segment, e->length, e->crc);
		rc = store_write_extent(st, io, 0, buf, e->length, &a);
		/*
		 * The copy is durable before the catalog points at it: the object
		 * may have been synced, and a power loss that kept the move but
		 * not the copy would leave it unreadable (test_powerloss).
		 */
		if (rc == 0)
			rc = io_fdatasync(io, seg_fd(st->sf, a.segment));
		if (rc == 0) {
			struct cat_extent to = *e;

			to.segment = a.segment;
			to.gen = a.gen;
			to.offset = a.offset;
			rc = cat_extent_move(c, co->id, co->vid, &to, (uint32_t)seg_extent_space(e->length));
			if (rc == -ENOENT)
				rc = 0;	/* overwritten while copied: the copy is garbage */
		}
		store_release(st, a.segment, a.gen);
		if (rc < 0)
			goto out;
	}
out:
	store_io_put(st, io);
	cat_object_free(co);
	return rc;
}

static int reclaim_set_state(struct cat *c, uint32_t id, enum seg_state from, enum seg_state to)
{
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	rc = cat_segment_set_state(c, id, from, to, SEG_USED_KEEP);
	return rc == 0 ? cat_commit(c) : (cat_rollback(c), rc);
}

/* Frees an emptied segment: generation + 1, so that readers still holding
 * its extents fail with -ESTALE (segment.h). The caller holds its append
 * lock: nobody claims it before the new generation is published. */
static int reclaim_free(struct kvt_store *st, uint32_t id)
{
	struct store_thread *t = store_thread(st);
	uint64_t gen;
	int rc;

	if (!t)
		return -ENOMEM;
	rc = cat_begin(t->cat);
	if (rc == 0) {
		rc = cat_segment_free(t->cat, id, &gen);
		if (rc == 0)
			rc = cat_counter_add(t->cat, "reclaimed_segments", 1);
		rc = rc == 0 ? cat_commit(t->cat) : (cat_rollback(t->cat), rc);
	}
	if (rc == 0)
		seg_map_set_gen(st->sf, id, gen);
	return rc;
}

/*
 * Segments emptied but not yet free, each under its append lock, in state
 * RECLAIMING: one sync of the store makes the drops and moves of all of
 * them durable before any is freed (reclaim_flush). Per segment, that sync
 * (a flush of every segment file and of the catalog) cost tens of
 * milliseconds each, paid by a writer waiting for space.
 */
#define RECLAIM_BATCH 8
struct emptied {
	uint32_t id[RECLAIM_BATCH];
	unsigned n;
};

/* Empties one SEALED segment into *done; -ENOENT if there is none.
 * -EINPROGRESS: nothing done, the sessions in need must be demoted first.
 * nfree: the free segments the caller counted. */
static int reclaim_segment(struct kvt_store *st, uint64_t nfree, int empty_only,
			   const struct session_set *tried, int refused, struct session_set *need,
			   int demote, int *g4_down, struct emptied *done, uint8_t *passed)
{
	struct store_thread *t = store_thread(st);
	struct victim_list list = { 0 };
	uint32_t id;
	int rc;

	if (!t)
		return -ENOMEM;
	rc = cat_segment_pick_victim(t->cat, empty_only, &id);
	if (rc < 0)
		return rc;
	/* An open reader's: the most recent, once per call, and never one
	 * past the target (empty_only) ("Open readers"). */
	if (passed && (empty_only || !(passed[id] & PASSED_READER)) &&
	    seg_hold_probe(st->lock_fd, id) < 0) {
		passed[id] |= PASSED_READER;
		cat_touch_segment(t->cat, id, util_now_ns());
		return -EALREADY;
	}
	if (store_append_trylock(st, id) < 0)
		return -EAGAIN;
	rc = reclaim_set_state(t->cat, id, SEG_SEALED, SEG_RECLAIMING);
	if (rc < 0) {
		store_append_unlock(st, id);
		return rc == -ESTALE ? -EAGAIN : rc;
	}
	rc = cat_segment_objects(t->cat, id, victim_collect, &list);
	/*
	 * Pinned objects with nowhere to go, or too many to be worth the copy
	 * (relocate_max()): leave the segment whole, drop nothing, demote
	 * nothing for it.
	 */
	if (rc == 0 && victim_has_pinned(&list)) {
		uint64_t kept = 0;

		rc = cat_segment_kept_space(t->cat, id, &kept);
		if (rc == 0 && kept > relocate_max(st))
			rc = -ENOSPC;
		else if (rc == 0 && nfree == 0)
			rc = reclaim_room(st, t->cat, kept);
	}
	if (rc == 0)
		rc = reclaim_find_unsynced(st, t->cat, id, &list, tried, refused, need, demote,
					   g4_down, passed);
	if (rc == 0 && need->n > 0)
		rc = -EINPROGRESS;
	for (size_t i = 0; rc == 0 && i < list.n; i++) {
		const struct victim_obj *vo = &list.v[i];

		if (vo->pinned)
			rc = reclaim_relocate(st, id, vo);
		else
			rc = cat_object_drop(t->cat, vo->id, vo->vid, !store_g4_none(st),
					     vo->g4_proven);
		if (rc == -ENOENT)
			rc = 0;	/* deleted or overwritten meanwhile */
	}
	if (rc == 0) {
		done->id[done->n++] = id;	/* reclaim_flush frees it and unlocks */
		free(list.v);
		return 0;
	}
	if (rc < 0) {
		/* Leave it readable: what was not moved is still in place. */
		if (reclaim_set_state(t->cat, id, SEG_RECLAIMING, SEG_SEALED) < 0)
			log_err(0, "segment %u left reclaiming (recovery will seal it)", id);
		if (rc != -ENOSPC && rc != -EINPROGRESS && rc != -EAGAIN)
			log_err(rc, "cannot reclaim segment %u", id);
		else	/* so that the next pick takes another segment */
			cat_touch_segment(t->cat, id, util_now_ns());
	}
	store_append_unlock(st, id);
	free(list.v);
	return rc;
}

/*
 * Frees the emptied segments. The moves and drops that emptied them are
 * made durable first: a power loss that lost them but kept newer bytes
 * written over the old extents would bring back catalog rows that point at
 * another object's bytes (test_powerloss). If that fails, the segments go
 * back to SEALED, empty: the next reclaim frees them.
 */
static int reclaim_flush(struct kvt_store *st, struct emptied *done)
{
	struct store_thread *t = store_thread(st);
	int rc, synced;

	if (done->n == 0)
		return 0;
	if (!t)
		return -ENOMEM;
	synced = kvt_store_sync(st);
	rc = synced;
	for (unsigned i = 0; i < done->n; i++) {
		uint32_t id = done->id[i];
		int r = synced < 0 ? synced : reclaim_free(st, id);

		/*
		 * -EBUSY: extents were committed into it after it was emptied
		 * (a multipart Complete, or the mount's publish, adopting
		 * parts that lay there: they are the new object's now). It is
		 * not free, and nothing is wrong: sealed again, for a later
		 * pass. Taken for a failure, it failed the writer or recall
		 * that had asked for room, and every segment after it in the
		 * batch stayed sealed too.
		 */
		if (r == -EBUSY)
			log_info("segment %u took new extents while it was reclaimed: kept",
				 id);
		else if (r < 0)
			log_err(r, "cannot free reclaimed segment %u", id);
		if (r < 0 && reclaim_set_state(t->cat, id, SEG_RECLAIMING, SEG_SEALED) < 0)
			log_err(0, "segment %u left reclaiming (recovery will seal it)", id);
		if (r < 0 && r != -EBUSY)
			rc = r;
		store_append_unlock(st, id);
	}
	done->n = 0;
	return rc;
}

/* A session whose demotion the partner did not answer, not judged yet. */
struct quiet {
	char *bucket, *session;	/* NULL: none */
	int rc;
};

static void quiet_release(struct quiet *q)
{
	free(q->bucket);
	free(q->session);
	memset(q, 0, sizeof(*q));
}

/*
 * What the demotion under pressure of bucket/session, ended with r, says:
 * the store's refusal, which ends the asking for the call (returned), or
 * the session's own, which backs it off (backoff_fail()). quiet is the
 * session asked before it if the partner answered nothing about it
 * (g4_transient()), and none since (quiet->session NULL: none). One
 * session the partner does not answer proves nothing of the others (its
 * manifest, or its copies, alone may time out); two in a row are taken
 * for the partner's silence. Taken at the first, one session whose
 * manifest read timed out ended every pass, each beginning with it again,
 * the coldest, and nothing else moved.
 */
static int reclaim_judge(struct kvt_store *st, struct quiet *quiet, const char *bucket,
			 const char *session, int r)
{
	int had = quiet->session != NULL;

	if (g4_refused_all(r) || (g4_transient(r) && had)) {
		g4_pressure_failed(st, bucket, session, r, 0, NULL);
		quiet_release(quiet);
		return r;
	}
	/* The partner answered this one: the one before failed on its own. */
	if (had) {
		backoff_fail(st, quiet->bucket, quiet->session, quiet->rc);
		quiet_release(quiet);
	}
	if (g4_transient(r)) {
		quiet->bucket = strdup(bucket);
		quiet->session = strdup(session);
		quiet->rc = r;
		if (quiet->bucket && quiet->session)
			return 0;
		quiet_release(quiet);	/* no memory to wait: its own */
	}
	if (r < 0)
		backoff_fail(st, bucket, session, r);
	else
		backoff_clear(st, bucket, session);
	return 0;
}

/* reclaim_run() with st->reclaim_lock held (it lets go of it while
 * demoting, and holds it again on return). */
static int reclaim_locked(struct kvt_store *st, struct store_thread *t, unsigned need, int demote)
{
	struct session_set tried = { 0 }, todo = { 0 };
	struct emptied done = { .n = 0 };
	uint64_t counts[4], target, swept = 0;
	int rc = 0, r, tries = 0, empty_only = 0, g4_down = G4_UP;
	int refused = 0;	/* the store's refusal of a session's demotion */
	struct quiet quiet = { 0 };	/* reclaim_judge()'s */
	/* Victims passed over for their readers, or a proof not answered
	 * (PASSED_*; NULL: no memory, none are). */
	uint8_t *passed = calloc(st->nsegs, 1);

	t->in_reclaim = 1;
	/* Free segments to reach: below the low watermark, the reserve
	 * counted as used (store_above_high()), and at least `need`. */
	target = st->nsegs - (uint64_t)(st->low_watermark * st->nsegs) + STORE_RESERVE_SEGS;
	for (;;) {
		/* The store closes: the demoter's pass ends here, not at the
		 * low watermark (a pass could hold a gateway's SIGTERM). */
		if (demote && __atomic_load_n(&st->demoter_stop, __ATOMIC_RELAXED)) {
			rc = -ECANCELED;
			break;
		}
		rc = cat_segment_counts(t->cat, counts);
		if (rc < 0)
			break;
		if (counts[SEG_FREE] + done.n >= MAX(target, need)) {
			/*
			 * Past the target, empty segments still join a batch that
			 * is flushed anyway: they hold no cache, and each flush
			 * syncs (kvt_store_sync()). Under a stream of overwrites
			 * the low watermark alone made a flush of every segment
			 * or two, and each stalled the disk for up to a second on
			 * this project's virtual machines.
			 */
			if (done.n == 0 || done.n == RECLAIM_BATCH)
				break;
			empty_only = 1;
		}
		/*
		 * A full batch, or free space so short that writers (of this or
		 * another process) may be waiting for what the batch holds.
		 */
		if (done.n == RECLAIM_BATCH || (done.n > 0 && counts[SEG_FREE] <= MAX(need, 1))) {
			rc = reclaim_flush(st, &done);
			if (rc < 0)
				break;
			continue;
		}
		/*
		 * Each segment once per call at most: relocating the pinned objects
		 * of full segments frees no net space, and unbounded it went round
		 * them forever (test_object: test_reclaim_all_pinned_enospc).
		 */
		if (swept++ >= st->nsegs) {
			rc = -ENOENT;	/* as if nothing sealed were left */
			break;
		}
		/*
		 * Relocating needs somewhere to go. Writers leave the reserve
		 * (STORE_RESERVE_SEGS) for this; there may be none left if
		 * another process's reclaim is relocating too, or died doing
		 * so, or after a kvtier from before the reserve: then only into
		 * room left in part-full segments (reclaim_room).
		 */
		rc = reclaim_segment(st, counts[SEG_FREE], empty_only, &tried, refused, &todo,
				     demote, &g4_down, &done, passed);
		if (empty_only && rc < 0) {
			rc = 0;		/* none left, or in another's hands: the target is met */
			break;
		}
		if (rc == -EALREADY) {
			swept--;	/* each is passed over once: the loop ends */
			continue;
		}
		if (rc == -EINPROGRESS && !demote) {
			/*
			 * A writer: the upload is the demoter's, which this wakes;
			 * the victim stays whole (reclaim_segment() made it the
			 * most recent, so the next pick is another segment).
			 */
			session_set_release(&todo);
			if (st->demoter_running)
				demoter_kick(st);
			continue;
		}
		if (rc == -EINPROGRESS) {
			/*
			 * Session state G4 lacks: demote it, then take the victim
			 * again. The upload waits for the partner: not under
			 * reclaim_lock (other threads of this process reclaim
			 * meanwhile), nor the victim's append lock (another process
			 * may take it), nor a catalog transaction.
			 */
			rc = reclaim_flush(st, &done);	/* what is free, others may use */
			pthread_mutex_unlock(&st->reclaim_lock);
			for (size_t i = 0; i < todo.n; i++) {
				struct session_key *k = todo.v[i];

				if (!refused && !__atomic_load_n(&st->demoter_stop, __ATOMIC_RELAXED)) {
					r = g4_demote_pressure(st, k->bucket, k->session);
					/* The store's (returned): every other session
					 * would get it. */
					refused = reclaim_judge(st, &quiet, k->bucket, k->session, r);
					/* Nor would a proof get an answer (reclaim_prove()). */
					if (refused && refused != -EREMCHG)
						g4_down = G4_DOWN;
				}
				/* Once per call: a failure leaves the segment whole. */
				r = session_set_add(&tried, k->bucket, k->session);
				k->bucket = k->session = NULL;
				if (r < 0)
					rc = r;
			}
			session_set_release(&todo);
			pthread_mutex_lock(&st->reclaim_lock);
			if (rc < 0)
				break;
			swept--;
			continue;
		}
		if (rc == -EAGAIN && ++tries < 64) {
			/*
			 * Another process holds the victim for a moment (sealing it,
			 * reopening it or reclaiming it while it waits for the
			 * catalog's write lock, whose busy handler sleeps up to
			 * 100 ms at a time): let it finish rather than spin, and do
			 * not count the attempt as a segment swept; the counts are
			 * read again, so what it frees ends the loop. Retried at
			 * once, 16 tries went by within microseconds, and with 120 ms
			 * in all still too soon under load: the put that needed space
			 * failed with -EAGAIN (test_multiproc: test_stress_two).
			 * Here the wait is at most about 0.9 s.
			 */
			swept--;
			usleep(1000 * (unsigned)MIN(tries, 16));
			continue;
		}
		/* Pinned objects in the way, with no free segment to move them
		 * to or too many to move: the plain objects of other segments
		 * can still go (test_object: test_reclaim_pinned_in_coldest). */
		if (rc == -ENOSPC)
			continue;
		if (rc < 0)
			break;
	}
	/* The last asked, and not answered: nothing says it was the store's. */
	if (quiet.session)
		backoff_fail(st, quiet.bucket, quiet.session, quiet.rc);
	quiet_release(&quiet);
	r = reclaim_flush(st, &done);
	if (r < 0 && rc >= 0)
		rc = r;
	/* Its room is anyone's again, and no live process holds it open. */
	store_reloc_seal(st);
	t->in_reclaim = 0;
	free(passed);
	session_set_release(&todo);
	session_set_release(&tried);
	if (rc == -ENOENT) {
		/* Nothing sealed is left to take. */
		r = cat_segment_counts(t->cat, counts);
		rc = r < 0 ? r : counts[SEG_FREE] >= need ? 0 : -ENOSPC;
	}
	return rc;
}

int reclaim_run(struct kvt_store *st, unsigned need, int demote)
{
	struct store_thread *t = store_thread(st);
	int rc;

	if (!t)
		return -ENOMEM;
	pthread_mutex_lock(&st->reclaim_lock);
	rc = reclaim_locked(st, t, need, demote);
	pthread_mutex_unlock(&st->reclaim_lock);
	return rc;
}

int kvt_store_reclaim(struct kvt_store *st, unsigned need)
{
	return reclaim_run(st, need, 1);
}

/*
 * The reclaim a writer starts when the store is above its high watermark
 * but may still have free segments. If another thread of this process is
 * already reclaiming (down to the low watermark), the writer goes on with
 * the free space instead of queueing behind it: with 8 writers, 6 waited
 * here while one synced the store for each segment it freed. A writer
 * that finds no free segment at all still waits (kvt_store_reclaim).
 */
void store_reclaim_if_idle(struct kvt_store *st)
{
	struct store_thread *t = store_thread(st);

	if (!t || pthread_mutex_trylock(&st->reclaim_lock) != 0)
		return;
	reclaim_locked(st, t, STORE_RESERVE_SEGS + 1, 1);
	pthread_mutex_unlock(&st->reclaim_lock);
}

/* ---- recovery ---------------------------------------------------------------- */

struct recover_arg {
	struct kvt_store *st;
	struct cat_segment *segs;
	size_t n, cap;
};

static int recover_collect(void *arg, const struct cat_segment *s)
{
	struct recover_arg *ra = arg;

	if (s->state != SEG_OPEN && s->state != SEG_RECLAIMING)
		return 0;
	if (UTIL_GROW(ra->segs, ra->n, ra->cap) < 0)
		return -ENOMEM;
	ra->segs[ra->n++] = *s;
	return 0;
}

int reclaim_recover(struct kvt_store *st)
{
	struct recover_arg ra = { .st = st };
	struct cat *c = store_cat(st);
	int rc;

	if (!c)
		return -ENOMEM;
	rc = cat_segment_list(c, recover_collect, &ra);
	for (size_t i = 0; rc == 0 && i < ra.n; i++) {
		const struct cat_segment *s = &ra.segs[i];

		if (store_append_trylock(st, s->id) < 0)
			continue;	/* its owner is alive */
		/*
		 * The owner died: what it wrote and never committed is garbage.
		 * An OPEN segment is sealed where the last committed extent in it
		 * ends: past that, no catalog row names a byte, so appending
		 * there later overwrites nothing anyone can read. Sealed as full,
		 * as it once was, the room a reclaimer killed while relocating
		 * had left in its target (the reserve) was lost, and with it the
		 * only place the rest of its victim could go: no segment could be
		 * freed again (test_multiproc: test_reclaim_killed_relocating).
		 */
		rc = cat_begin(c);
		if (rc == 0) {
			uint64_t used = SEG_USED_KEEP;

			if (s->state == SEG_OPEN)
				rc = cat_segment_extents_end(c, s->id, &used);
			if (rc == 0)
				rc = cat_segment_set_state(c, s->id, s->state, SEG_SEALED, used);
			rc = rc == 0 ? cat_commit(c) : (cat_rollback(c), rc);
		}
		if (rc == 0) {
			rc = reclaim_free(st, s->id);
			if (rc == -EBUSY)
				rc = 0;	/* committed extents remain: sealed it stays */
			else if (rc == 0)
				log_info("recovered segment %u, left open by a process that died "
					 "or by a seal that failed", s->id);
		} else if (rc == -ESTALE) {
			rc = 0;		/* changed meanwhile by someone alive */
		}
		if (rc == -ENOSPC && cat_disk_full(c)) {
			/* A later open, or a writer's claim, recovers it. */
			log_warn(0, "segment %u of a process that died stays unrecovered: no room for the catalog",
				 s->id);
			rc = 0;
		}
		store_append_unlock(st, s->id);
	}
	free(ra.segs);
	return rc;
}
