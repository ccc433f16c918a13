/*
 * gw_work.c - the gateway's worker lanes: engine calls that may block run
 * here, never on libmicrohttpd's polling threads (DESIGN.md: "the data path
 * never blocks ... inside an HTTP handler thread that others wait on").
 *
 * Why. libmicrohttpd's internal thread pool gives each connection to one
 * epoll thread for its whole life. A handler that blocks there (a write
 * that reclaims or demotes a session to G4, a recall, a catalog commit
 * waiting for the write lock, an O_DIRECT read of a 1 MiB extent) stalls
 * every other connection of that thread: the trace replay saw batch lookups
 * of 0.3 ms wait 59 ms to seconds behind them. A thread per connection
 * (tried) only moves the queue into the scheduler: 64 connections are 64
 * threads on 2 CPUs, and a lookup still waits for a CPU behind 63 others.
 *
 * The model, after libmicrohttpd's manual ("Flow control": in every mode but
 * thread-per-connection, blocking logic must not be placed within the
 * callbacks; suspend the connection instead):
 *
 *   polling thread: parse, authenticate, route; run what cannot block
 *     (lookups, HEAD, listings, GETs of hot objects read through the page
 *     cache) and answer at once;
 *     for the rest: MHD_suspend_connection(), queue a job on a lane, return
 *   lane worker: runs the job (the engine call), then
 *     MHD_resume_connection(); libmicrohttpd calls the handler (or the
 *     content reader) again on the polling thread, which sends the result.
 *
 * Two lanes, so that reads never queue behind writes:
 *   GW_LANE_READ   pieces of large GETs (O_DIRECT extent reads), bodies of
 *                  single-piece GETs too large for the page cache;
 *   GW_LANE_WRITE  everything that writes the catalog or the hot tier:
 *                  streamed upload pieces, commits, deletes, copies,
 *                  multipart;
 *   GW_LANE_RECALL GETs of cold objects, which wait on the partner: on the
 *                  write lane, eight of them against a silent partner held
 *                  a 4-byte PUT of another key 59 s.
 *
 * The write lane can run at a lower priority (GW_WRITE_NICE, off by
 * default; gw.h says why): on a machine with fewer cores than runnable
 * threads, bulk writes (a copy, a CRC and an MD5 of every byte) take the
 * CPU from the polling threads in equal shares, and a lookup then waits for
 * the scheduler rather than for a lock.
 *
 * Streaming uploads are also bounded here: a writer holds an engine I/O
 * context (4 registered 1 MiB buffers) from its first write to its commit,
 * so only GW_STREAMS_MAX uploads stream at once. A body that needs a slot
 * while none is free waits with its connection suspended (its client is
 * held back by TCP) and its first flush queued behind the slot; the slot's
 * release hands it over (gw_work_slot_put). It waits a bounded time only:
 * libmicrohttpd does not time a suspended connection, so the main thread's
 * tick (gw_work_expire) resumes a waiter past its deadline without running
 * its job (j->no_slot), and the request answers 503 SlowDown (gw.h).
 *
 * A job is always queued after its connection was suspended, and the worker
 * touches nothing of the job once it has called MHD_resume_connection(): the
 * polling thread may be running the request again by then. At shutdown
 * (gw_work_stop) the lanes run what is queued, resume every waiter, and from
 * then on gw_work_submit() refuses, so callers run the job where they are:
 * libmicrohttpd must not be stopped with suspended connections.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "util.h"

struct gw_lane_q {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct gw_job *head, *tail;
	pthread_t *threads;
	unsigned nthreads;
	unsigned live;		/* workers not yet gone; 0 after a stop */
	int nice;		/* the workers' nice value */
	bool stopping;
};

struct gw_work {
	struct gw_lane_q lanes[GW_LANE_COUNT];
	pthread_mutex_t slot_lock;
	unsigned slots, slots_free;
	int64_t slot_wait_ns;			/* how long a flush may wait for one */
	struct gw_job *wait_head, *wait_tail;	/* flushes waiting for a slot, oldest first */
	bool stopping;				/* atomic */
};

static void gw_job_run(struct gw_job *j)
{
	struct MHD_Connection *conn = j->conn;

	j->run(j);
	/* j may be gone once the connection runs again: nothing after this */
	__atomic_store_n(&j->done, true, __ATOMIC_RELEASE);
	MHD_resume_connection(conn);
}

static void gw_lane_push(struct gw_lane_q *l, struct gw_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&l->lock);
	if (l->live == 0) {
		/* The lane stopped between the caller's check and here: run it now. */
		pthread_mutex_unlock(&l->lock);
		gw_job_run(j);
		return;
	}
	if (l->tail)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
}

static void *gw_lane_main(void *arg)
{
	struct gw_lane_q *l = arg;

	/* Linux: a nice value per thread; failing it only costs the priority. */
	if (l->nice && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), l->nice) < 0)
		log_warn(-errno, "cannot lower a gateway worker's priority");
	pthread_mutex_lock(&l->lock);
	for (;;) {
		struct gw_job *j = l->head;

		if (!j) {
			if (l->stopping)
				break;
			pthread_cond_wait(&l->cond, &l->lock);
			continue;
		}
		l->head = j->next;
		if (!l->head)
			l->tail = NULL;
		pthread_mutex_unlock(&l->lock);
		gw_job_run(j);
		pthread_mutex_lock(&l->lock);
	}
	l->live--;
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

int gw_work_new(unsigned nread, unsigned nwrite, unsigned nrecall, unsigned streams,
		int64_t slot_wait_ns, struct gw_work **out)
{
	const unsigned n[GW_LANE_COUNT] = { [GW_LANE_READ] = nread, [GW_LANE_WRITE] = nwrite,
					    [GW_LANE_RECALL] = nrecall };
	struct gw_work *w = calloc(1, sizeof(*w));
	int rc = 0;

	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->slot_lock, NULL);
	w->slots = w->slots_free = streams;
	w->slot_wait_ns = slot_wait_ns;
	for (int i = 0; i < GW_LANE_COUNT; i++) {
		struct gw_lane_q *l = &w->lanes[i];

		pthread_mutex_init(&l->lock, NULL);
		pthread_cond_init(&l->cond, NULL);
		l->nice = i == GW_LANE_WRITE ? GW_WRITE_NICE : 0;
		l->threads = n[i] ? calloc(n[i], sizeof(*l->threads)) : NULL;
		if (n[i] && !l->threads) {
			rc = -ENOMEM;
			break;
		}
		for (unsigned t = 0; t < n[i]; t++) {
			pthread_mutex_lock(&l->lock);
			l->live++;
			pthread_mutex_unlock(&l->lock);
			rc = -pthread_create(&l->threads[t], NULL, gw_lane_main, l);
			if (rc < 0) {
				pthread_mutex_lock(&l->lock);
				l->live--;
				pthread_mutex_unlock(&l->lock);
				log_err(rc, "cannot start a gateway worker");
				break;
			}
			l->nthreads++;
		}
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		gw_work_stop(w);
		gw_work_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

bool gw_work_stopping(const struct gw_work *w)
{
	return !w || __atomic_load_n(&w->stopping, __ATOMIC_ACQUIRE);
}

bool gw_work_submit(struct gw_work *w, enum gw_lane lane, struct gw_job *j)
{
	if (gw_work_stopping(w) || lane == GW_LANE_INLINE || !w->lanes[lane].nthreads)
		return false;
	j->done = false;
	j->no_slot = false;
	/* Suspended before anyone can resume it: the job is not visible yet. */
	MHD_suspend_connection(j->conn);
	gw_lane_push(&w->lanes[lane], j);
	return true;
}

bool gw_work_submit_streaming(struct gw_work *w, struct gw_job *j, bool *has_slot)
{
	if (gw_work_stopping(w) || !w->lanes[GW_LANE_WRITE].nthreads)
		return false;
	j->done = false;
	j->no_slot = false;
	MHD_suspend_connection(j->conn);
	pthread_mutex_lock(&w->slot_lock);
	if (!*has_slot && w->slots_free > 0 && !w->wait_head) {
		w->slots_free--;
		*has_slot = true;
	}
	if (!*has_slot) {
		/* gw_work_slot_put() sets *has_slot and queues it */
		j->has_slot = has_slot;
		j->slot_deadline_ns = util_mono_ns() + w->slot_wait_ns;
		j->next = NULL;
		if (w->wait_tail)
			w->wait_tail->next = j;
		else
			w->wait_head = j;
		w->wait_tail = j;
		pthread_mutex_unlock(&w->slot_lock);
		return true;
	}
	pthread_mutex_unlock(&w->slot_lock);
	gw_lane_push(&w->lanes[GW_LANE_WRITE], j);
	return true;
}

void gw_work_slot_put(struct gw_work *w, bool *has_slot)
{
	struct gw_job *next = NULL;

	if (!w)
		return;
	pthread_mutex_lock(&w->slot_lock);
	if (!*has_slot) {
		pthread_mutex_unlock(&w->slot_lock);
		return;
	}
	*has_slot = false;
	next = w->wait_head;
	if (next) {
		/* the slot passes straight to the first waiter */
		w->wait_head = next->next;
		if (!w->wait_head)
			w->wait_tail = NULL;
		*next->has_slot = true;
	} else {
		w->slots_free++;
	}
	pthread_mutex_unlock(&w->slot_lock);
	if (next)
		gw_lane_push(&w->lanes[GW_LANE_WRITE], next);
}

void gw_work_slots(struct gw_work *w, unsigned *held, unsigned *waiting)
{
	const struct gw_job *j;

	*held = *waiting = 0;
	if (!w)
		return;
	pthread_mutex_lock(&w->slot_lock);
	*held = w->slots - w->slots_free;
	for (j = w->wait_head; j; j = j->next)
		(*waiting)++;
	pthread_mutex_unlock(&w->slot_lock);
}

void gw_work_expire(struct gw_work *w)
{
	struct gw_job *expired = NULL, **tail = &expired;
	int64_t now = util_mono_ns();

	if (!w || !w->slot_wait_ns)
		return;		/* --timeout 0: connections are never timed */
	/* All wait the same bound, so the queue is in deadline order too. */
	pthread_mutex_lock(&w->slot_lock);
	while (w->wait_head && w->wait_head->slot_deadline_ns <= now) {
		struct gw_job *j = w->wait_head;

		w->wait_head = j->next;
		if (!w->wait_head)
			w->wait_tail = NULL;
		j->next = NULL;
		*tail = j;
		tail = &j->next;
	}
	pthread_mutex_unlock(&w->slot_lock);
	while (expired) {
		struct gw_job *j = expired;
		struct MHD_Connection *conn = j->conn;

		expired = j->next;
		j->no_slot = true;
		/* as gw_job_run: j may be gone once the connection runs again */
		__atomic_store_n(&j->done, true, __ATOMIC_RELEASE);
		MHD_resume_connection(conn);
	}
}

void gw_work_stop(struct gw_work *w)
{
	struct gw_job *waiters;

	if (!w)
		return;
	__atomic_store_n(&w->stopping, true, __ATOMIC_RELEASE);
	/*
	 * Flushes still waiting for a slot run now, slot or not: from here on
	 * nothing is suspended again, and the lanes drain before they stop.
	 */
	pthread_mutex_lock(&w->slot_lock);
	waiters = w->wait_head;
	w->wait_head = w->wait_tail = NULL;
	pthread_mutex_unlock(&w->slot_lock);
	while (waiters) {
		struct gw_job *next = waiters->next;

		if (w->lanes[GW_LANE_WRITE].nthreads)
			gw_lane_push(&w->lanes[GW_LANE_WRITE], waiters);
		waiters = next;
	}
	for (int i = 0; i < GW_LANE_COUNT; i++) {
		struct gw_lane_q *l = &w->lanes[i];

		pthread_mutex_lock(&l->lock);
		l->stopping = true;
		pthread_cond_broadcast(&l->cond);
		pthread_mutex_unlock(&l->lock);
		for (unsigned t = 0; t < l->nthreads; t++)
			pthread_join(l->threads[t], NULL);
	}
}

void gw_work_free(struct gw_work *w)
{
	if (!w)
		return;
	for (int i = 0; i < GW_LANE_COUNT; i++) {
		pthread_mutex_destroy(&w->lanes[i].lock);
		pthread_cond_destroy(&w->lanes[i].cond);
		free(w->lanes[i].threads);
	}
	pthread_mutex_destroy(&w->slot_lock);
	free(w);
}
