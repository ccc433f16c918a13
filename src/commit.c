/*
 * commit.c - group commit: the catalog transactions of writers that commit
 * at the same time, in one process, become one transaction.
 *
 * A put's catalog transaction is short (a few rows), but each one pays the
 * fixed costs of a transaction: the write lock, the WAL frames of pages
 * that every put dirties (the segment's row, the index pages near the
 * key), the WAL index and its locks, each a system call, which on a
 * virtual machine costs as much as a small device write. With one
 * transaction per put, writers queued on the write lock and PUT 64 KiB was
 * bound at 500 to 900 commits a second whatever the number in flight
 * (docs/benchmarks.md, Session 3).
 *
 * Leader and followers, as in a database's log writer: a writer queues its
 * put; if no thread is committing, it becomes the leader, takes every put
 * queued (at most COMMIT_GROUP_MAX), runs them as one transaction with a
 * savepoint each (cat_object_put_group), then hands each writer its own
 * result. Writers that arrive while a group commits wait and form the
 * next group, so the group grows with the load and a lone writer pays
 * nothing extra (a group of one is a plain cat_object_put).
 *
 *   queued --(no leader)--> leader: commits the group --> done (own rc)
 *     \--(a leader runs)--> waits --(the leader committed it)--> done
 *                                 \--(the leader left, it is first)--> leader
 *
 * Durability is unchanged: a writer returns only after the transaction that
 * holds its put committed (or failed), the same moment a lone commit would
 * return. The catalog commits with synchronous = NORMAL (catalog.c): once
 * COMMIT returns the put survives the process being killed, and
 * kvt_store_sync() makes it survive a power loss; there is no per-commit
 * sync to share. A group in which some puts fail commits the others; one
 * whose transaction fails fails them all, and none of them is visible.
 *
 * The queue is per store (one catalog), and the grouping is per process:
 * writers in other processes still take turns on SQLite's write lock.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "store.h"

#define COMMIT_GROUP_MAX 64

struct commit_req {
	const struct cat_put *put;
	int rc;
	int done;
	pthread_cond_t cond;	/* signalled when done, or to lead */
	struct commit_req *next;
};

void commit_queue_init(struct commit_queue *q)
{
	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->lock, NULL);
	q->tail = &q->head;
}

void commit_queue_release(struct commit_queue *q)
{
	cat_close(q->cat);
	q->cat = NULL;
	pthread_mutex_destroy(&q->lock);
}

/*
 * The connection leaders commit through, one per store, used by one leader
 * at a time (the leader role passes under q->lock, which orders its uses).
 * Not the leader thread's own: SQLite drops a connection's page cache at
 * the first transaction after another connection committed
 * (pagerBeginReadTransaction). With each leader on its own connection every
 * group paid that (and, when the catalog was read through mmap, a munmap
 * and its TLB shootdowns: 36% of the process's CPU in a profile of PUT
 * 64 KiB x8). A connection that made the last commit itself keeps its cache.
 */
static struct cat *commit_cat(struct kvt_store *st, struct commit_queue *q)
{
	char path[4200];
	int rc;

	if (q->cat)
		return q->cat;
	snprintf(path, sizeof(path), "%s/catalog.db", st->dir);
	rc = cat_open(path, 0, &q->cat);
	if (rc < 0) {
		log_err(rc, "cannot open the catalog of '%s' for commits", st->dir);
		q->cat = NULL;
	} else {
		cat_watch_wal(q->cat, &st->wal_frames);
	}
	return q->cat;
}

/* The leader's work: commits the first COMMIT_GROUP_MAX queued puts. Called
 * with q->lock held; drops it while the transaction runs. */
static void commit_run_group(struct kvt_store *st, struct commit_queue *q)
{
	const struct cat_put *puts[COMMIT_GROUP_MAX];
	struct commit_req *group[COMMIT_GROUP_MAX];
	int rcs[COMMIT_GROUP_MAX];
	struct cat *c;
	size_t n = 0;
	int rc;

	while (q->head && n < COMMIT_GROUP_MAX) {
		group[n] = q->head;
		puts[n] = q->head->put;
		q->head = q->head->next;
		n++;
	}
	if (!q->head)
		q->tail = &q->head;
	q->npending -= n;
	pthread_mutex_unlock(&q->lock);

	c = commit_cat(st, q);
	if (!c) {
		rc = -ENOMEM;
	} else if (n == 1) {
		rc = rcs[0] = cat_object_put(c, puts[0], NULL, NULL);
	} else {
		rc = cat_object_put_group(c, puts, n, rcs);
	}

	pthread_mutex_lock(&q->lock);
	q->groups++;
	q->puts += n;
	if (n > q->largest)
		q->largest = n;
	for (size_t i = 0; i < n; i++) {
		/* The transaction failed: no put of the group is visible. */
		group[i]->rc = rc < 0 ? rc : rcs[i];
		group[i]->done = 1;
		pthread_cond_signal(&group[i]->cond);
	}
}

int commit_put(struct kvt_store *st, const struct cat_put *put)
{
	struct commit_queue *q = &st->commitq;
	struct commit_req req = { .put = put };
	int rc;

	pthread_cond_init(&req.cond, NULL);
	pthread_mutex_lock(&q->lock);
	*q->tail = &req;
	q->tail = &req.next;
	q->npending++;
	for (;;) {
		while (!req.done && q->leader)
			pthread_cond_wait(&req.cond, &q->lock);
		if (req.done)
			break;
		/* Nobody commits: lead until this put is committed too. */
		q->leader = 1;
		while (!req.done)
			commit_run_group(st, q);
		q->leader = 0;
		/* Whoever queued meanwhile waits for a leader: the first one leads. */
		if (q->head)
			pthread_cond_signal(&q->head->cond);
	}
	rc = req.rc;
	pthread_mutex_unlock(&q->lock);
	pthread_cond_destroy(&req.cond);
	return rc;
}

size_t commit_pending(struct kvt_store *st)
{
	struct commit_queue *q = &st->commitq;
	size_t n;

	pthread_mutex_lock(&q->lock);
	n = q->npending;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void commit_stats(struct kvt_store *st, uint64_t *groups, uint64_t *puts, uint64_t *largest)
{
	struct commit_queue *q = &st->commitq;

	pthread_mutex_lock(&q->lock);
	*groups = q->groups;
	*puts = q->puts;
	*largest = q->largest;
	pthread_mutex_unlock(&q->lock);
}
