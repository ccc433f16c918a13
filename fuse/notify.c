/*
 * notify.c - telling the kernel to forget names it cached, from a thread of
 * its own.
 *
 * A file created here is known to the kernel from the moment create(2)
 * returns, but it exists in the store only once it is published. When a
 * publish fails (ENOSPC, O_EXCL lost to another writer) or the file is
 * closed unpublished, the kernel must drop the name, or for entry_timeout
 * seconds a new open(O_CREAT) of it would find a ghost and fail ENOENT.
 *
 * fuse_lowlevel_notify_inval_entry() takes the directory's lock in the
 * kernel, which a request in flight may hold while it waits for the daemon:
 * called from a request handler it can deadlock a single-threaded loop. So
 * handlers queue names here and this thread sends them.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs.h"
#include "log.h"

struct notice {
	struct notice *next;
	fuse_ino_t parent;
	char name[];
};

static void *notify_main(void *arg)
{
	struct kvfs *kv = arg;

	pthread_mutex_lock(&kv->notify_lock);
	for (;;) {
		struct notice *q;

		while (!kv->notices && !kv->notify_stop)
			pthread_cond_wait(&kv->notify_cond, &kv->notify_lock);
		if (!kv->notices)
			break;
		q = kv->notices;
		kv->notices = q->next;
		pthread_mutex_unlock(&kv->notify_lock);
		int rc = fuse_lowlevel_notify_inval_entry(kv->se, q->parent, q->name,
							  strlen(q->name));

		if (rc < 0 && rc != -ENOENT && rc != -ENOTCONN)
			log_debug("cannot invalidate the name '%s': %s", q->name, strerror(-rc));
		free(q);
		pthread_mutex_lock(&kv->notify_lock);
	}
	pthread_mutex_unlock(&kv->notify_lock);
	return NULL;
}

int kvfs_notify_start(struct kvfs *kv)
{
	int rc;

	pthread_mutex_init(&kv->notify_lock, NULL);
	pthread_cond_init(&kv->notify_cond, NULL);
	rc = pthread_create(&kv->notifier, NULL, notify_main, kv);
	if (rc != 0) {
		log_err(-rc, "cannot start the notifier thread");
		return -rc;
	}
	kv->notify_running = 1;
	return 0;
}

void kvfs_notify_stop(struct kvfs *kv)
{
	if (!kv->notify_running)
		return;
	pthread_mutex_lock(&kv->notify_lock);
	kv->notify_stop = 1;
	/* Unsent notices are moot once the session ends. */
	while (kv->notices) {
		struct notice *q = kv->notices;

		kv->notices = q->next;
		free(q);
	}
	pthread_cond_signal(&kv->notify_cond);
	pthread_mutex_unlock(&kv->notify_lock);
	pthread_join(kv->notifier, NULL);
	kv->notify_running = 0;
}

void kvfs_notify_inval_entry(struct kvfs *kv, fuse_ino_t parent, const char *name)
{
	size_t len = strlen(name);
	struct notice *q;

	if (!kv->notify_running)
		return;
	q = malloc(sizeof(*q) + len + 1);
	if (!q)
		return;	/* the entry times out on its own */
	q->parent = parent;
	memcpy(q->name, name, len + 1);
	pthread_mutex_lock(&kv->notify_lock);
	q->next = kv->notices;
	kv->notices = q;
	pthread_cond_signal(&kv->notify_cond);
	pthread_mutex_unlock(&kv->notify_lock);
}

void kvfs_notify_inval_attr(struct kvfs *kv, fuse_ino_t ino)
{
	int rc;

	if (!kv->notify_running)
		return;
	/* Attributes only (a negative offset): the kernel takes no inode or
	 * page lock for that, so a request handler may call it. */
	rc = fuse_lowlevel_notify_inval_inode(kv->se, ino, -1, 0);
	if (rc < 0 && rc != -ENOENT)
		log_debug("cannot invalidate the attributes of inode %llu: %s",
			  (unsigned long long)ino, strerror(-rc));
}
