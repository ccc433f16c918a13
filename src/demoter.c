/*
 * demoter.c - the background demoter: pressure demotion to G4 off the
 * writers' path.
 *
 * With a cold tier, reclaim may only free a segment once the session state
 * in it that G4 lacks has been demoted (reclaim.c): upload, verify,
 * manifest, cold. That waits for the partner, seconds for a large session.
 * When the writer that needed the space did it inline, a trace replay saw
 * writes stall for seconds. So every store opened with a cold tier runs
 * this thread:
 *
 *   idle --demoter_kick() or 1 s tick, fill above the high watermark-->
 *   pass: take the "demoter" lock (g4_lock(): one pass at a time across the
 *         processes that share the store; a process that finds it taken
 *         leaves the work to the holder), reclaim_run(demote = 1) down to
 *         the low watermark --> idle, waking every writer that waits
 *
 * Writers (store_alloc()) above the high watermark only kick it. One that
 * finds no free segment reclaims what needs no partner (plain cache, pinned
 * objects relocated; an object G4 holds turns cold only on a copy proven,
 * which asks the partner: the demoter's) and then waits in
 * demoter_wait(), trying to claim between waits, for at most [store]
 * space_wait; it gives up sooner with -ENOSPC when a whole pass of this
 * process's demoter, started after the writer began to wait, could not
 * leave a segment free (partner down, everything pinned). A writer never
 * drops what G4 lacks to make room: a full store is an error, not a loss.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "store.h"
#include "util.h"

/* A writer's wait for room, or a pass, longer than this is logged: the
 * hot tier fills faster than the demoter empties it (docs/operations.md). */
#define DEMOTER_SLOW_MS 1000

/* Between kicks, how often the demoter looks at the fill itself: writers
 * of other processes fill the store too, and kick only their own. */
#define DEMOTER_TICK_MS 1000
/* A waiting writer looks again at least this often: space freed by
 * another process wakes nobody here. */
#define DEMOTER_POLL_MS 50

/*
 * One pass: nothing if the fill is below the high watermark and a segment
 * writers may claim is free (beyond the reserve, STORE_RESERVE_SEGS); else
 * reclaim with demotion toward the low watermark. 0 when one is free at
 * the end, -EBUSY when another process's demoter holds
 * the pass, -ENOSPC when none could be freed.
 */
static int demoter_pass(struct kvt_store *st)
{
	uint64_t nfree = 0;
	int64_t start;
	int lock, rc;

	if (!store_above_high(st, &nfree) && nfree > STORE_RESERVE_SEGS)
		return 0;
	lock = g4_lock(st, "demoter", "", "", 0);
	if (lock < 0)
		return lock;
	start = util_mono_ns();
	rc = reclaim_run(st, STORE_RESERVE_SEGS + 1, 1);
	g4_unlock(lock);
	if (rc < 0 && rc != -ENOSPC && rc != -ECANCELED)
		log_err(rc, "background demotion of '%s' failed", st->dir);
	else if (util_mono_ns() - start > DEMOTER_SLOW_MS * 1000000ll)
		log_info("background demotion pass of '%s' took %.1f s", st->dir,
			 (double)(util_mono_ns() - start) / 1e9);
	return rc;
}

static void *demoter_main(void *arg)
{
	struct kvt_store *st = arg;
	struct timespec ts;

	pthread_mutex_lock(&st->demoter_lock);
	while (!st->demoter_stop) {
		int rc;

		if (!st->demoter_kicked) {
			util_deadline(&ts, DEMOTER_TICK_MS);
			pthread_cond_timedwait(&st->demoter_cond, &st->demoter_lock, &ts);
			if (st->demoter_stop)
				break;
		}
		st->demoter_kicked = 0;
		pthread_mutex_unlock(&st->demoter_lock);
		rc = demoter_pass(st);
		pthread_mutex_lock(&st->demoter_lock);
		st->demoter_passes++;
		st->demoter_last_rc = rc;
		pthread_cond_broadcast(&st->space_cond);
		if (rc < 0 && !st->demoter_stop) {
			/*
			 * Nothing could be freed (everything pinned, or the partner
			 * down), or the pass could not start (another process's
			 * demoter holds it; g4.lock cannot be opened, out of file
			 * descriptors): the next pass waits for the tick, kicks or
			 * not. Back to back, passes relocated the same pinned
			 * objects over and over (test_gateway: a store full of
			 * them), and a writer waiting for room kicked one again as
			 * soon as the last had failed: a gateway at its open-file
			 * limit logged the failed open 340,000 times in seconds.
			 */
			util_deadline(&ts, DEMOTER_TICK_MS);
			while (!st->demoter_stop &&
			       pthread_cond_timedwait(&st->demoter_cond, &st->demoter_lock, &ts) == 0)
				;
		}
	}
	pthread_mutex_unlock(&st->demoter_lock);
	return NULL;
}

int demoter_start(struct kvt_store *st)
{
	int rc;

	rc = util_thread_start(&st->demoter, NULL, demoter_main, st);
	if (rc < 0) {
		log_warn(rc, "cannot start the background demoter of '%s'; writers demote"
			 " themselves", st->dir);
		return rc;
	}
	st->demoter_running = 1;
	return 0;
}

void demoter_stop(struct kvt_store *st)
{
	if (!st->demoter_running)
		return;
	pthread_mutex_lock(&st->demoter_lock);
	/* Atomic: a pass in flight reads it without the lock (reclaim.c). */
	__atomic_store_n(&st->demoter_stop, 1, __ATOMIC_RELAXED);
	pthread_cond_signal(&st->demoter_cond);
	pthread_cond_broadcast(&st->space_cond);
	pthread_mutex_unlock(&st->demoter_lock);
	pthread_join(st->demoter, NULL);
	st->demoter_running = 0;
}

void demoter_kick(struct kvt_store *st)
{
	pthread_mutex_lock(&st->demoter_lock);
	if (!st->demoter_kicked) {
		st->demoter_kicked = 1;
		pthread_cond_signal(&st->demoter_cond);
	}
	pthread_mutex_unlock(&st->demoter_lock);
}

void demoter_waited(struct kvt_store *st, const struct demoter_wait *w)
{
	int64_t waited = util_mono_ns() - w->start_ns;

	if (waited > DEMOTER_SLOW_MS * 1000000ll)
		log_info("a write to '%s' waited %.1f s for the demoter to free a segment",
			 st->dir, (double)waited / 1e9);
}

int demoter_wait(struct kvt_store *st, struct demoter_wait *w)
{
	int64_t now = util_mono_ns(), left_ms;
	struct timespec ts;
	int rc = 0;

	pthread_mutex_lock(&st->demoter_lock);
	if (!w->deadline_ns) {
		w->start_ns = now;
		w->deadline_ns = now + w->limit_ns;
		w->pass0 = st->demoter_passes;
	}
	/* The pass running when the wait began may have looked before this
	 * writer needed room: only one begun after it counts. */
	if (st->demoter_passes >= w->pass0 + 2 && st->demoter_last_rc == -ENOSPC &&
	    now >= w->patience_ns) {
		log_err(-ENOSPC, "no room in the hot tier of '%s': the demoter could not free a"
			" segment (%s)", st->dir, __atomic_load_n(&st->place_moved, __ATOMIC_RELAXED) ?
			"the store is not where its id was given and demotes nothing: kvtier"
			" store-id" : "g4 unreachable, or all that is left is pinned");
		rc = -ENOSPC;
	} else if (now >= w->deadline_ns || st->demoter_stop) {
		log_err(-ENOSPC, "no room in the hot tier of '%s': a write waited its [store]"
			" space_wait (%.1f s) for the demoter", st->dir, st->space_wait_ms / 1e3);
		rc = -ENOSPC;
	} else {
		if (!st->demoter_kicked) {
			st->demoter_kicked = 1;
			pthread_cond_signal(&st->demoter_cond);
		}
		left_ms = (w->deadline_ns - now + 999999) / 1000000;
		util_deadline(&ts, MIN(left_ms, (int64_t)DEMOTER_POLL_MS));
		pthread_cond_timedwait(&st->space_cond, &st->demoter_lock, &ts);
	}
	pthread_mutex_unlock(&st->demoter_lock);
	return rc;
}
