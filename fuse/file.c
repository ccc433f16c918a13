/*
 * file.c - open files: reads through a snapshot, writes staged until close,
 * then published atomically as a new version of the object.
 *
 * Objects are immutable versions, so a file open for writing builds its new
 * content aside and close(2) publishes it whole: S3 and other mounts see the
 * old object or the new one, never a mix, and a daemon killed mid-write
 * leaves nothing (an uncommitted writer is reclaimed by the engine). Each
 * handle holds its content in one of three states:
 *
 *   FH_BASE    the version opened (a kvt_reader snapshot), unchanged; or
 *              nothing at all after create, O_TRUNC or truncate to 0
 *   FH_BUF     small content (up to KVFS_BUF_MAX) in memory: any write,
 *              read or truncate is a memcpy, and close publishes it with
 *              one writer and one catalog transaction
 *   FH_STREAM  bytes written sequentially from offset 0, streamed straight
 *              into a part object in the internal bucket (the fast path of
 *              cp, dd and NIXL for files too big to buffer: no copy, no
 *              temp file)
 *   FH_STAGE   a temp file in the staging directory (O_TMPFILE: nothing is
 *              left after a crash), for big files a stream cannot do; as
 *              many at once as the open-file limit leaves room for
 *              (kvfs_staging_limit), more fail with ENFILE
 *
 *   FH_BASE --write or truncate within KVFS_BUF_MAX (fh_buf_begin)--> FH_BUF
 *   FH_BASE, FH_BUF --write at EOF past it (fh_stream_begin)--> FH_STREAM
 *   FH_BASE, FH_BUF --other write, truncate past it (fh_stage)--> FH_STAGE
 *   FH_STREAM --write elsewhere, read, truncate (fh_stage)--> FH_STAGE
 *   FH_STREAM --flush/fsync (fh_publish: commit under the file's key)--> FH_BASE
 *   FH_BUF, FH_STAGE --flush/fsync (fh_publish: write it out)--> same, clean
 *   any --truncate to 0--> FH_BASE, empty
 *
 * A write at EOF on a non-empty FH_BASE (O_APPEND) copies the old bytes into
 * the stream first: objects cannot grow in place, so an append costs a copy
 * of the object. Publishing a stream commits its writer under the file's
 * key (kvt_writer_commit_as()), so close never copies either.
 *
 * The page cache. The kernel caches pages per inode, not per handle, so
 * bytes written through it would reach readers in other processes before
 * close, a mix of two versions. Handles open for writing therefore use
 * direct I/O (every write comes straight here, nothing enters the cache),
 * and the cache only ever holds published versions, read through read-only
 * handles. An open keeps the cached pages (keep_cache) when the version
 * opened is the one the node last saw, and drops them otherwise. Shared
 * writable mmap is the price: the kernel refuses it on direct-I/O files.
 *
 * One version per inode. The kernel also keeps one size per inode (i_size),
 * and a read through the cache ends there: a reader of a version longer
 * than i_size was cut at it, and one of a shorter version got the pages
 * past its end as zeros (the daemon answers short, the kernel pads the page
 * and keeps i_size when another attribute change raced). A writer moves
 * i_size (O_TRUNC, then its writes), and so does every size the daemon
 * reports (getattr, lookup, readdirplus) when the store changed. So a
 * read-only handle goes through the cache only when every handle cached on
 * the node reads one version and i_size is that version's size
 * (fh_reader_mode):
 *
 *   - no writer is open here (nwriters, wwait; a reader waits a moment
 *     for the RELEASE of writers already closed, nclosed), and the node's
 *     directory did not just give its name to a new inode for a writer
 *     (node_nocache);
 *   - other cached handles (ncache) are of the same version (etag), or
 *     there are none and the size last reported (ksize) is this version's;
 *   - while ncache > 0 every size reported for the node is theirs (csize,
 *     node_attr_reply), whatever the store holds now.
 *
 * Anything else reads with direct I/O, which the kernel never bounds by
 * i_size: each handle reads its own version up to its own size. A writer
 * that opens a node with cached readers waits for them briefly (their
 * RELEASE is often on its way); if they stay, the node keeps them and
 * loses its name (node_supersede_locked), the kernel is told to forget
 * the name, and the open answers ESTALE, on which the kernel looks the
 * path up again and finds a new inode (fh_writer_enter). A create does
 * that lookup itself (op_create). Writers and cached readers thus never
 * share an inode. Nor do readers of two versions: a private mmap reads
 * through the page cache even on a direct-I/O handle, so a reader that
 * opens another version than the readers open on the node moves the name
 * to a new inode the same way (fh_reader_mode).
 *
 * Who closes. The kernel sends FLUSH at every close(2) of a descriptor of
 * the open file, not only the writer's: a fork copies the descriptor table,
 * and the child's copy is closed when it execs (O_CLOEXEC) or exits. A
 * writer that runs a subprocess between two writes would otherwise publish
 * what it had written so far, and if it never got to close (the daemon was
 * killed, the writer died) that half stayed published: the chaos test's
 * truncated KV blocks, cut at the first write(2). So a flush publishes only
 * when it comes from the writer (fh_closer): from a descriptor table (lock
 * owner) that wrote through this handle, or, when nothing was written yet,
 * from the process that opened it. A flush from a writer that is exiting
 * because a signal killed it publishes nothing either (a killed writer
 * leaves no half object; one that calls exit(3) with the file open still
 * publishes, as the kernel closes its files for it) and the handle is
 * abandoned. The flushes of others change nothing and return 0.
 *
 * flush (of a writable handle; read-only opens ask the kernel for none,
 * FOPEN_NOFLUSH) publishes as above, so close returns the error, and a
 * failed publish is final (h->err); release publishes what no flush did (a
 * handle only others closed), unless it was abandoned or failed, and frees.
 * fsync publishes, then makes the store durable. A handle is locked while
 * it works: the kernel may send requests for one handle from several
 * threads at once. Reads of a read-only handle are the exception: its
 * base never changes, so they run side by side (the kernel's readahead
 * sends several at once), sharing the base reader and its windows under
 * rlock only while they look them up.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include "kvfs.h"
#include "log.h"
#include "util.h"

enum fh_state { FH_BASE, FH_BUF, FH_STREAM, FH_STAGE };

/* Descriptor tables one handle remembers as its writers: a process and its
 * threads are one; a few more cover descriptors passed on to helpers. */
#define FH_OWNERS_MAX 4

/* Files up to this size stay in memory while open, within a budget for
 * all of them (thousands of small files may be open at once). */
#define KVFS_BUF_MAX KVFS_IO_SIZE
#define KVFS_BUF_BUDGET (256u * 1024 * 1024)

/*
 * Extent-sized windows of a handle's base (fh_base_read). A kernel read of
 * 1 MiB spans two extents, each shared with a neighbouring read, and the
 * kernel sends the reads of one file from several threads at once: one
 * window per read in flight, each extent read from disk once. A handle's
 * first window is not counted; the others count in kvfs.buffered.
 *
 * A small read that does not continue the handle's last one, of an extent
 * no window holds, skips the windows (fh_read_random): the engine reads and
 * verifies only the chunks it touches (segment.h), 64 KiB where a window
 * would have cost the whole 1 MiB extent.
 */
#define FH_WINDOWS 4

struct fh_win {
	char *buf;		/* KVFS_EXTENT_PAYLOAD bytes, or NULL */
	uint64_t off;		/* of the object, a multiple of KVFS_EXTENT_PAYLOAD */
	size_t len;		/* bytes held; 0: empty */
	int loading;		/* one thread reads it, others wait on rcond */
	unsigned users;		/* replies sent straight from it (fh_read_windows) */
	uint64_t used;		/* win_clock at the last use */
};

struct fh {
	pthread_mutex_t lock;
	struct kvfs *kv;
	struct fh *open_next, **open_prev;	/* kvfs.open_fhs, under kv->lock */
	struct node *node;
	int flags;		/* open(2) flags */
	int writable;
	enum fh_state state;
	uint64_t size;		/* of the content, whatever its state */
	int dirty;		/* content differs from what was published */
	int excl;		/* O_EXCL and never published: publish only if absent */
	int err;		/* sticky: a write or the close failed, nothing is published */

	/* who may publish at flush ("Who closes") */
	pid_t opener;		/* the thread that opened it (0: unknown) */
	uint64_t owners[FH_OWNERS_MAX];	/* lock owners (descriptor tables) that wrote */
	unsigned nowners;	/* FH_OWNERS_MAX + 1: more than fit, any may publish */
	int abandoned;		/* its writer was killed: nothing is published */
	int closed;		/* its writer closed it: counted in nclosed */
	int cached;		/* read-only, through the page cache: counted in ncache */
	int reader;		/* read-only, counted in nreaders */
	int sized;		/* created, O_TRUNC, or opened at the size the kernel
				 * had: the kernel's size follows size */

	/* FH_BASE. rlock guards r, retired and the windows: a read-only
	 * handle is read without h->lock, from several threads at once. */
	pthread_mutex_t rlock;
	pthread_cond_t rcond;	/* a window finished loading */
	struct kvt_reader *r;	/* NULL: no bytes (or base_lazy) */
	int base_lazy;		/* the base is the key's current version: open on use */
	char rtag[KVT_ETAG_MAX];
	struct kvt_reader **retired;	/* replaced readers others may still use */
	unsigned nretired;
	struct fh_win win[FH_WINDOWS];
	uint64_t win_clock;	/* ticks of window use, for the least recent */
	atomic_uint_fast64_t read_next;	/* where the last read ended */
	unsigned nreads;	/* reads without h->lock running; release waits */

	/* FH_BUF */
	char *mem;
	size_t memcap;		/* counted in kvfs.buffered */

	/* FH_STREAM */
	struct kvt_writer *w;
	char part[64];

	/* FH_STAGE */
	int tfd;

	/* carried into each version published */
	struct kvt_posix posix;
	char *session;
	char *content_type;
	struct kvt_meta *meta;
	size_t nmeta;
};

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- the parts bucket and staging ------------------------------------------ */

/* Removes every part under prefix; returns how many went. */
static unsigned parts_remove(struct kvfs *kv, const char *prefix)
{
	struct kvt_list_opts lo = { .prefix = prefix, .limit = 1000 };
	unsigned removed = 0;

	for (;;) {
		struct kvt_list *l = NULL;
		int rc = kvt_object_list(kv->st, KVFS_PARTS_BUCKET, &lo, &l);

		if (rc == -ENOENT)
			return removed;	/* no parts bucket yet */
		if (rc < 0) {
			log_warn(rc, "cannot list the parts under '%s'", prefix);
			return removed;
		}
		for (size_t i = 0; i < l->nobjects; i++)
			if (kvt_object_delete(kv->st, KVFS_PARTS_BUCKET, l->objects[i]->key) == 0)
				removed++;
		rc = l->truncated && l->nobjects > 0;
		kvt_list_free(l);
		if (!rc)
			return removed;
	}
}

/*
 * Parts left by daemons that died between committing a part and publishing
 * it. Each daemon holds a lock on "<owner>.lock" in the staging directory;
 * a lock file nobody holds (or none at all) means a dead owner.
 */
static void parts_sweep(struct kvfs *kv)
{
	struct kvt_list_opts lo = { .delimiter = "/", .limit = 1000 };
	struct kvt_list *l = NULL;
	int rc = kvt_object_list(kv->st, KVFS_PARTS_BUCKET, &lo, &l);

	if (rc == -ENOENT)
		return;		/* no parts bucket yet */
	if (rc < 0) {
		log_warn(rc, "cannot list the parts of earlier mounts");
		return;
	}
	for (size_t i = 0; i < l->nprefixes; i++) {
		char lock[64];
		size_t len = strlen(l->prefixes[i]);
		int fd;

		if (len < 2 || len > 40 || strncmp(l->prefixes[i], kv->owner, len - 1) == 0)
			continue;
		snprintf(lock, sizeof(lock), "%.*s.lock", (int)(len - 1), l->prefixes[i]);
		fd = openat(kv->staging_fd, lock, O_RDWR | O_CLOEXEC);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
			close(fd);
			continue;	/* a live mount */
		}
		log_info("removed %u parts left by the mount '%.*s'",
			 parts_remove(kv, l->prefixes[i]), (int)(len - 1), l->prefixes[i]);
		if (fd >= 0) {
			unlinkat(kv->staging_fd, lock, 0);
			close(fd);
		}
	}
	kvt_list_free(l);
}

/*
 * The staging directory, this daemon's owner id and the lock on it, then
 * the sweep of dead mounts' parts; under staging_lock. Logs nothing: the
 * caller says what failed. On failure nothing is kept, to try again.
 */
static int staging_open(struct kvfs *kv, const char **what)
{
	unsigned char id[8];
	char lock[64];
	int rc;

	*what = "make the staging directory";
	if (mkdir(kv->staging, 0700) < 0 && errno != EEXIST)
		return -errno;
	*what = "open the staging directory";
	kv->staging_fd = open(kv->staging, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (kv->staging_fd < 0)
		return -errno;
	*what = "draw a mount id in";
	if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
		rc = -errno;
		goto fail;
	}
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(kv->owner + 2 * i, 3, "%02x", id[i]);
	snprintf(lock, sizeof(lock), "%s.lock", kv->owner);
	*what = "make or lock the mount's lock file in";
	kv->owner_fd = openat(kv->staging_fd, lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (kv->owner_fd < 0 || flock(kv->owner_fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		goto fail;
	}
	parts_sweep(kv);
	atomic_store_explicit(&kv->staging_ready, 1, memory_order_release);
	return 0;
fail:
	if (kv->owner_fd >= 0) {
		unlinkat(kv->staging_fd, lock, 0);
		close(kv->owner_fd);
		kv->owner_fd = -1;
	}
	close(kv->staging_fd);
	kv->staging_fd = -1;
	return rc;
}

/*
 * A disk with no room left (ENOSPC, EDQUOT) defers the staging directory to
 * the first write that needs it: the mount comes up to be read, and writes
 * fail with ENOSPC as they would anyway. Any other failure stops the start.
 */
static int staging_deferrable(int rc)
{
	return rc == -ENOSPC || rc == -EDQUOT;
}

int kvfs_parts_init(struct kvfs *kv)
{
	const char *what = "";
	int rc;

	rc = kvt_bucket_create_internal(kv->st, KVFS_PARTS_BUCKET);
	if (rc == -ENOSPC || rc == -EROFS) {	/* the first part makes it, once it can */
		log_warn(rc, "cannot create the internal bucket '%s' yet", KVFS_PARTS_BUCKET);
	} else if (rc < 0) {
		log_err(rc, "cannot create the internal bucket '%s'", KVFS_PARTS_BUCKET);
		return rc;
	}
	pthread_mutex_lock(&kv->staging_lock);
	rc = staging_open(kv, &what);
	pthread_mutex_unlock(&kv->staging_lock);
	if (rc < 0 && staging_deferrable(rc)) {
		log_warn(rc, "cannot %s '%s' yet: mounted to be read, and files are written "
			 "once it can be made", what, kv->staging);
		atomic_store(&kv->staging_said, 1);
		return 0;
	}
	if (rc < 0)
		log_err(rc, "cannot %s '%s'", what, kv->staging);
	return rc;
}

/*
 * Called by every write that streams a part or stages a file: after the
 * start made the directory, one atomic load.
 */
int kvfs_staging_ready(struct kvfs *kv)
{
	const char *what = "";
	int rc = 0;

	if (atomic_load_explicit(&kv->staging_ready, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&kv->staging_lock);
	if (!atomic_load_explicit(&kv->staging_ready, memory_order_relaxed))
		rc = staging_open(kv, &what);
	pthread_mutex_unlock(&kv->staging_lock);
	if (rc == 0) {
		if (atomic_exchange(&kv->staging_said, 0))
			log_info("made the staging directory '%s': files are written again",
				 kv->staging);
		return 0;
	}
	if (!atomic_exchange(&kv->staging_said, 1))
		log_err(rc, "cannot %s '%s': files cannot be written", what, kv->staging);
	return staging_deferrable(rc) ? -ENOSPC : rc;
}

void kvfs_parts_release(struct kvfs *kv)
{
	char prefix[32], lock[64];

	if (kv->owner_fd < 0)
		return;
	snprintf(prefix, sizeof(prefix), "%s/", kv->owner);
	parts_remove(kv, prefix);
	snprintf(lock, sizeof(lock), "%s.lock", kv->owner);
	unlinkat(kv->staging_fd, lock, 0);
	close(kv->owner_fd);
	kv->owner_fd = -1;
}

/* An anonymous temp file in the staging directory. */
static int staging_file(struct kvfs *kv)
{
	char path[64];
	int fd = openat(kv->staging_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0)
		return fd;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	/* No O_TMPFILE here: a named file, unlinked at once. */
	for (int tries = 0; tries < 16; tries++) {
		snprintf(path, sizeof(path), "tmp-%s-%llu", kv->owner,
			 (unsigned long long)atomic_fetch_add(&kv->part_seq, 1));
		fd = openat(kv->staging_fd, path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0) {
			unlinkat(kv->staging_fd, path, 0);
			return fd;
		}
		if (errno != EEXIST)
			break;
	}
	return -errno;
}

/*
 * Each staged file holds a descriptor here until it is closed, and the
 * open-file limit is the daemon's, not its writers': at ulimit -n 300, 400
 * files written out of order at once failed writes with EMFILE, an
 * application's error that was not the application's, and the store,
 * short of descriptors itself, failed the close of one whose writes had
 * all succeeded, so that it vanished. Staging files are counted against
 * what the limit leaves beside the store's descriptors (2 per segment and
 * 256, kvt_store_nofile_want()) and a catalog connection (catalog.db
 * and its -wal) per loop thread; the write that would stage one more fails
 * with ENFILE, the file system's table being full, before anything of it
 * is lost at close, and the daemon says why once.
 */
void kvfs_staging_limit(struct kvfs *kv, unsigned threads)
{
	uint64_t have = util_raise_nofile(UINT64_MAX), reserve;

	kv->staged_max = UINT64_MAX;
	if (kvt_store_readonly(kv->st))
		return;
	reserve = kvt_store_nofile_want(kv->st) + 2 * (uint64_t)threads;
	kv->staged_max = have > reserve ? have - reserve : 0;
	log_info("the open-file limit (%llu) leaves room for %llu files staged at once "
		 "(written out of order past %u KiB) beside the %llu descriptors of the store "
		 "and %u threads", (unsigned long long)have, (unsigned long long)kv->staged_max,
		 KVFS_BUF_MAX / 1024, (unsigned long long)reserve, threads);
}

/* A staging file, if the open-file limit leaves room for one more
 * (kvfs_staging_limit); fh_stage_close gives it back. */
static int fh_stage_open(struct kvfs *kv)
{
	int fd;

	if (atomic_fetch_add(&kv->staged, 1) >= kv->staged_max) {
		atomic_fetch_sub(&kv->staged, 1);
		if (!atomic_exchange(&kv->staged_said, 1))
			log_err(-ENFILE, "no more files can be staged: the open-file limit leaves "
				"room for %llu, and writes out of order to more fail (raise "
				"ulimit -n or LimitNOFILE=)", (unsigned long long)kv->staged_max);
		return -ENFILE;
	}
	fd = kvfs_staging_ready(kv);
	if (fd < 0) {
		atomic_fetch_sub(&kv->staged, 1);
		return fd;
	}
	fd = staging_file(kv);
	if (fd < 0) {
		atomic_fetch_sub(&kv->staged, 1);
		log_err(fd, "cannot make a staging file in '%s'", kv->staging);
	}
	return fd;
}

static void fh_stage_close(struct kvfs *kv, struct fh *h)
{
	if (h->tfd < 0)
		return;
	close(h->tfd);
	h->tfd = -1;
	atomic_fetch_sub(&kv->staged, 1);
}

static int pwrite_all(int fd, const char *buf, size_t len, uint64_t off)
{
	while (len > 0) {
		ssize_t n = pwrite(fd, buf, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* ---- the handle ------------------------------------------------------------ */

static int fh_copy_base_info(struct fh *h, const struct kvt_object *o)
{
	free(h->session);
	free(h->content_type);
	h->session = o->session ? strdup(o->session) : NULL;
	h->content_type = o->content_type ? strdup(o->content_type) : NULL;
	if ((o->session && !h->session) || (o->content_type && !h->content_type))
		return -ENOMEM;
	if (o->nmeta) {
		h->meta = calloc(o->nmeta, sizeof(*h->meta));
		if (!h->meta)
			return -ENOMEM;
		for (size_t i = 0; i < o->nmeta; i++) {
			h->meta[i].name = strdup(o->meta[i].name);
			h->meta[i].value = strdup(o->meta[i].value);
			h->nmeta++;
			if (!h->meta[i].name || !h->meta[i].value)
				return -ENOMEM;
		}
	}
	return 0;
}

/* The POSIX metadata the kernel was shown for o, to store with new versions. */
static void fh_visible_posix(struct kvfs *kv, const struct kvt_object *o, struct kvt_posix *p)
{
	struct stat st;

	kvfs_attr_object(kv, o, &st);
	*p = o->posix;
	p->mode = st.st_mode;
	p->uid = st.st_uid;
	p->gid = st.st_gid;
	p->atime_ns = 0;
	p->ctime_ns = 0;
}

/*
 * Read buffers outlive their handles. A fresh buffer takes a page fault for
 * each of its 256 pages on first touch, and glibc gives freed ones of this
 * size back to the kernel: reading 32 MiB files one handle each, those
 * faults were a third of the daemon's CPU on this project's VM. Up to
 * KVFS_SPARE_MAX idle buffers (16 MiB) wait for the next handle or read.
 */
char *kvfs_iobuf_new(struct kvfs *kv, size_t size)
{
	char *buf = NULL;

	if (size > KVFS_IO_SIZE)
		return malloc(size);
	pthread_mutex_lock(&kv->spare_lock);
	if (kv->nspare > 0)
		buf = kv->spare[--kv->nspare];
	pthread_mutex_unlock(&kv->spare_lock);
	return buf ? buf : malloc(KVFS_IO_SIZE);
}

void kvfs_iobuf_free(struct kvfs *kv, char *buf, size_t size)
{
	if (!buf || size > KVFS_IO_SIZE) {
		free(buf);
		return;
	}
	pthread_mutex_lock(&kv->spare_lock);
	if (kv->nspare < KVFS_SPARE_MAX) {
		kv->spare[kv->nspare++] = buf;
		buf = NULL;
	}
	pthread_mutex_unlock(&kv->spare_lock);
	free(buf);
}

/* Closes the base and its windows; nobody else reads the handle. */
static void fh_drop_base(struct fh *h)
{
	kvt_reader_close(h->r);
	h->r = NULL;
	h->base_lazy = 0;
	for (unsigned i = 0; i < h->nretired; i++)
		kvt_reader_close(h->retired[i]);
	free(h->retired);
	h->retired = NULL;
	h->nretired = 0;
	for (unsigned i = 0; i < FH_WINDOWS; i++) {
		if (h->win[i].buf && i > 0)
			atomic_fetch_sub(&h->kv->buffered, KVFS_EXTENT_PAYLOAD);
		kvfs_iobuf_free(h->kv, h->win[i].buf, KVFS_EXTENT_PAYLOAD);
		h->win[i] = (struct fh_win){ 0 };
	}
}

static void fh_free(struct fh *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->kv->lock);
	if (h->open_next)
		h->open_next->open_prev = h->open_prev;
	*h->open_prev = h->open_next;
	pthread_mutex_unlock(&h->kv->lock);
	fh_drop_base(h);
	kvt_writer_abort(h->w);
	fh_stage_close(h->kv, h);
	kvt_meta_free(h->meta, h->nmeta);
	free(h->session);
	free(h->content_type);
	free(h->mem);
	pthread_cond_destroy(&h->rcond);
	pthread_mutex_destroy(&h->rlock);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

static struct fh *fh_new(struct kvfs *kv, struct node *n, int flags, pid_t opener)
{
	struct fh *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	pthread_mutex_init(&h->lock, NULL);
	pthread_mutex_init(&h->rlock, NULL);
	pthread_cond_init(&h->rcond, NULL);
	h->tfd = -1;
	h->flags = flags;
	h->opener = opener;
	h->writable = fh_flags_write(flags);
	h->kv = kv;
	pthread_mutex_lock(&kv->lock);
	n->refs++;
	n->nopen++;
	h->node = n;
	h->open_next = kv->open_fhs;
	if (kv->open_fhs)
		kv->open_fhs->open_prev = &h->open_next;
	h->open_prev = &kv->open_fhs;
	kv->open_fhs = h;
	pthread_mutex_unlock(&kv->lock);
	return h;
}

int fh_flags_write(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

int fh_writable(const struct fh *h)
{
	return h->writable;
}

/* Records a change of content: size for getattr, dirty accounting. */
static void fh_touch(struct kvfs *kv, struct fh *h)
{
	struct node *n = h->node;

	pthread_mutex_lock(&kv->lock);
	if (!h->dirty) {
		h->dirty = 1;
		n->ndirty++;
	}
	if (h->closed) {
		h->closed = 0;	/* a copy of the descriptor writes on: */
		n->nclosed--;
		pthread_cond_broadcast(&kv->cache_cond);	/* readers wait no more */
	}
	n->wsize = h->size;
	n->wmtime = kvfs_now_ns();
	node_changed_locked(kv, n);
	/* A write after utimens sets mtime again, as on any file system. */
	n->pend.mask &= ~(unsigned)KVT_ATTR_MTIME;
	pthread_mutex_unlock(&kv->lock);
}

static void fh_clean(struct kvfs *kv, struct fh *h)
{
	pthread_mutex_lock(&kv->lock);
	if (h->dirty) {
		h->dirty = 0;
		h->node->ndirty--;
	}
	pthread_mutex_unlock(&kv->lock);
}

static void fh_stream_end(struct kvfs *kv, struct fh *h)
{
	if (h->w)
		kvt_writer_abort(h->w);
	h->w = NULL;
	if (h->state == FH_STREAM)
		atomic_fetch_sub(&kv->active_streams, 1);
}

/* Drops the in-memory content and gives its room back to the budget. */
static void fh_mem_free(struct kvfs *kv, struct fh *h)
{
	if (h->memcap)
		atomic_fetch_sub(&kv->buffered, h->memcap);
	free(h->mem);
	h->mem = NULL;
	h->memcap = 0;
}

/* Room for need bytes in memory, within KVFS_BUF_MAX and the budget. */
static int fh_mem_reserve(struct kvfs *kv, struct fh *h, uint64_t need)
{
	size_t cap, more;
	char *m;

	if (need <= h->memcap)
		return 0;
	if (need > KVFS_BUF_MAX)
		return -EFBIG;
	cap = h->memcap ? h->memcap : 4096;
	while (cap < need)
		cap *= 2;
	if (cap > KVFS_BUF_MAX)
		cap = KVFS_BUF_MAX;
	more = cap - h->memcap;
	if (atomic_fetch_add(&kv->buffered, more) + more > KVFS_BUF_BUDGET) {
		atomic_fetch_sub(&kv->buffered, more);
		return -ENOMEM;
	}
	m = realloc(h->mem, cap);
	if (!m) {
		atomic_fetch_sub(&kv->buffered, more);
		return -ENOMEM;
	}
	h->mem = m;
	h->memcap = cap;
	return 0;
}

/* Opens the base reader of a handle whose base is the key's current version. */
static int fh_base_ensure(struct kvfs *kv, struct fh *h)
{
	char *bucket = NULL, *key = NULL;
	int rc;

	if (!h->base_lazy)
		return 0;
	rc = node_path(kv, h->node, &bucket, &key);
	if (rc == 0)
		rc = kvt_reader_open(kv->st, bucket, key, &h->r);
	if (rc == 0) {
		/* Held as at open: unheld, a rewrite of the name beside the
		 * handle after its fsync made its reads fail with EIO. */
		kvt_reader_hold(h->r);
		snprintf(h->rtag, sizeof(h->rtag), "%s", kvt_reader_object(h->r)->etag);
		h->base_lazy = 0;
	} else {
		log_err(rc, "cannot reopen '%s/%s' after publishing it", bucket ? bucket : "?",
			key ? key : "?");
	}
	free(bucket);
	free(key);
	return rc;
}

/* The base reader now; it stays open while the handle is (retired). */
static struct kvt_reader *fh_base_reader(struct fh *h)
{
	struct kvt_reader *r;

	pthread_mutex_lock(&h->rlock);
	r = h->r;
	pthread_mutex_unlock(&h->rlock);
	return r;
}

/*
 * After -ESTALE from old: reopens the key, and if it still holds the
 * version's bytes (same ETag) makes that the base. The old reader is
 * retired, not closed: other threads may be reading through it.
 */
static int fh_base_reopen(struct kvfs *kv, struct fh *h, struct kvt_reader *old)
{
	const struct kvt_object *o = kvt_reader_object(old);
	struct kvt_reader *r = NULL, **more;
	int rc = 0;

	pthread_mutex_lock(&h->rlock);
	if (h->r != old)
		goto out;	/* another thread did it */
	rc = kvt_reader_open(kv->st, o->bucket, o->key, &r);
	if (rc < 0 || strcmp(kvt_reader_object(r)->etag, h->rtag) != 0) {
		log_err(-ESTALE, "'%s/%s' was evicted while open", o->bucket, o->key);
		rc = -EIO;
		goto out;
	}
	kvt_reader_hold(r);
	more = realloc(h->retired, (h->nretired + 1) * sizeof(*more));
	if (!more) {
		rc = -ENOMEM;
		goto out;
	}
	h->retired = more;
	h->retired[h->nretired++] = old;
	kvt_reader_unhold(old);	/* its version's segments are others' now */
	h->r = r;
	r = NULL;
out:
	pthread_mutex_unlock(&h->rlock);
	kvt_reader_close(r);
	return rc;
}

/*
 * Reads the base version. -ESTALE means reclaim dropped it under us: a
 * reopen that finds the same version goes on, anything else would mix two
 * versions in one file and is an error.
 */
static ssize_t fh_base_pread(struct kvfs *kv, struct fh *h, char *buf, size_t len, uint64_t off)
{
	struct kvt_reader *r = fh_base_reader(h);
	ssize_t n = kvt_reader_pread(r, buf, len, off);

	if (n == -ESTALE) {
		int rc = fh_base_reopen(kv, h, r);

		if (rc < 0)
			return rc;
		r = fh_base_reader(h);
		n = kvt_reader_pread(r, buf, len, off);
	}
	if (n < 0)
		log_err((int)n, "cannot read '%s/%s' at %llu", kvt_reader_object(r)->bucket,
			kvt_reader_object(r)->key, (unsigned long long)off);
	return n;
}

/* The window holding w, loaded or loading, or NULL. Under rlock. */
static struct fh_win *fh_win_find(struct fh *h, uint64_t w)
{
	for (unsigned i = 0; i < FH_WINDOWS; i++)
		if (h->win[i].buf && h->win[i].off == w && (h->win[i].len || h->win[i].loading))
			return &h->win[i];
	return NULL;
}

/*
 * A window to load: the one used least recently of those no thread is
 * loading or replying from, else a new one while the budget allows it;
 * NULL if there is none. Under rlock.
 */
static struct fh_win *fh_win_victim(struct kvfs *kv, struct fh *h)
{
	struct fh_win *v = NULL;
	unsigned i;

	for (i = 0; i < FH_WINDOWS && h->win[i].buf; i++) {
		struct fh_win *x = &h->win[i];

		if (!x->loading && !x->users && (!v || x->used < v->used))
			v = x;
	}
	if (v || i == FH_WINDOWS)
		return v;
	if (i > 0 && atomic_fetch_add(&kv->buffered, KVFS_EXTENT_PAYLOAD) + KVFS_EXTENT_PAYLOAD >
	    KVFS_BUF_BUDGET) {
		atomic_fetch_sub(&kv->buffered, KVFS_EXTENT_PAYLOAD);
		return NULL;
	}
	h->win[i].buf = kvfs_iobuf_new(kv, KVFS_EXTENT_PAYLOAD);
	if (!h->win[i].buf) {
		if (i > 0)
			atomic_fetch_sub(&kv->buffered, KVFS_EXTENT_PAYLOAD);
		return NULL;
	}
	h->win[i].len = 0;
	return &h->win[i];
}

/*
 * [off, end) of the extent at w is read without a window: no window holds
 * or loads that extent, the read does not continue the last one, and it
 * is small. Under rlock.
 */
static int fh_read_random(struct fh *h, uint64_t w, uint64_t off, uint64_t end)
{
	return end - off < KVFS_EXTENT_PAYLOAD / 4 && off != atomic_load(&h->read_next) &&
	       !fh_win_find(h, w);
}

/*
 * [off, end) starts at w's extent, which no window holds or loads, and is
 * whole chunks (the kernel's readahead of a cached handle): the engine
 * reads just those, straight into its buffers (fh_read_map). A window
 * would read the whole extent before the first byte goes out. Under rlock.
 */
static int fh_read_chunks(struct fh *h, uint64_t w, uint64_t off, uint64_t end)
{
	return off % KVFS_CHUNK == 0 && (end % KVFS_CHUNK == 0 || end == h->size) &&
	       !fh_win_find(h, w);
}

/* Some window is being loaded or replied from: waiting frees one. */
static int fh_win_busy(const struct fh *h)
{
	for (unsigned i = 0; i < FH_WINDOWS; i++)
		if (h->win[i].loading || h->win[i].users)
			return 1;
	return 0;
}

/*
 * The window holding the extent at w, loaded first if no window holds it,
 * with rlock held; NULL and *n = 0 at the end of the base or -errno. With
 * nowait, -EAGAIN rather than wait: a thread that holds windows for a
 * reply (users) never waits for others, so holders always finish.
 */
static struct fh_win *fh_win_get(struct kvfs *kv, struct fh *h, uint64_t w, int nowait,
				 ssize_t *n)
{
	uint64_t wend = MIN(w + KVFS_EXTENT_PAYLOAD, h->size);

	for (;;) {
		struct fh_win *x = fh_win_find(h, w);

		if (x && !x->loading) {
			x->used = ++h->win_clock;
			return x;
		}
		if (!x)
			x = fh_win_victim(kv, h);
		else
			x = NULL;	/* another thread loads it */
		if (!x) {
			if (nowait || !fh_win_busy(h)) {
				*n = nowait ? -EAGAIN : -ENOMEM;	/* no memory for one */
				return NULL;
			}
			pthread_cond_wait(&h->rcond, &h->rlock);
			continue;
		}
		x->off = w;
		x->len = 0;
		x->loading = 1;
		pthread_mutex_unlock(&h->rlock);
		*n = fh_base_pread(kv, h, x->buf, (size_t)(wend - w), w);
		pthread_mutex_lock(&h->rlock);
		x->loading = 0;
		x->len = *n > 0 ? (size_t)*n : 0;
		pthread_cond_broadcast(&h->rcond);
		if (*n <= 0)
			return NULL;
	}
}

/*
 * Copies [off, end) of the extent window holding off (up to its end) into
 * buf; the count copied, 0 at the end of the base, or -errno.
 */
static ssize_t fh_win_copy(struct kvfs *kv, struct fh *h, char *buf, uint64_t off, uint64_t end)
{
	uint64_t w = off / KVFS_EXTENT_PAYLOAD * KVFS_EXTENT_PAYLOAD;
	struct fh_win *x;
	ssize_t n = 0;

	pthread_mutex_lock(&h->rlock);
	if (fh_read_random(h, w, off, end)) {
		pthread_mutex_unlock(&h->rlock);
		return fh_base_pread(kv, h, buf, (size_t)(MIN(end, w + KVFS_EXTENT_PAYLOAD) - off),
				     off);
	}
	x = fh_win_get(kv, h, w, 0, &n);
	if (x) {
		n = off < w + x->len ? (ssize_t)(MIN(end, w + x->len) - off) : 0;
		memcpy(buf, x->buf + (off - w), (size_t)n);
	}
	pthread_mutex_unlock(&h->rlock);
	return n;
}

/*
 * A read of a read-only handle runs without h->lock, so release cannot
 * count on that lock to wait for it: the kernel sends RELEASE as soon as a
 * reader it gave up on (killed) closes, while the daemon still reads.
 */
static void fh_reads_enter(struct fh *h)
{
	pthread_mutex_lock(&h->rlock);
	h->nreads++;
	pthread_mutex_unlock(&h->rlock);
}

static void fh_reads_leave_locked(struct fh *h)
{
	if (--h->nreads == 0)
		pthread_cond_broadcast(&h->rcond);
}

static void fh_reads_wait(struct fh *h)
{
	pthread_mutex_lock(&h->rlock);
	while (h->nreads > 0)
		pthread_cond_wait(&h->rcond, &h->rlock);
	pthread_mutex_unlock(&h->rlock);
}

/*
 * Reads [off, off + size) of the base. The engine verifies whole extents,
 * so a part of one goes through a window (a 128 KiB kernel read must not
 * cost a 1 MiB extent read every time); a whole one straight into buf.
 * Safe from several threads at once on a read-only handle.
 */
static ssize_t fh_base_read(struct kvfs *kv, struct fh *h, char *buf, size_t size, uint64_t off)
{
	uint64_t end, done = 0;
	int rc = fh_base_ensure(kv, h);

	if (rc < 0)
		return rc;
	if (!fh_base_reader(h) || off >= h->size)
		return 0;
	end = MIN(off + size, h->size);
	while (off < end) {
		uint64_t w = off / KVFS_EXTENT_PAYLOAD * KVFS_EXTENT_PAYLOAD;
		ssize_t n;

		if (off == w && end >= MIN(w + KVFS_EXTENT_PAYLOAD, h->size))
			n = fh_base_pread(kv, h, buf + done,
					  (size_t)(MIN(w + KVFS_EXTENT_PAYLOAD, h->size) - w), w);
		else
			n = fh_win_copy(kv, h, buf + done, off, end);
		/*
		 * The whole READ fails: a reply shorter than asked is the end
		 * of the file to the kernel, which would show the file cut
		 * short (and keep that size) instead of the error.
		 */
		if (n < 0)
			return n;
		if (n == 0)
			break;
		done += (uint64_t)n;
		off += (uint64_t)n;
	}
	atomic_store(&h->read_next, off);
	return (ssize_t)done;
}

/* Copies [0, size) of the base into dst: a writer or a file descriptor. */
static int fh_base_copy(struct kvfs *kv, struct fh *h, struct kvt_writer *w, int fd)
{
	char *buf;
	uint64_t off = 0;
	int rc = fh_base_ensure(kv, h);

	if (rc < 0)
		return rc;
	if (!h->r || h->size == 0)
		return 0;
	buf = malloc(KVFS_IO_SIZE);
	if (!buf)
		return -ENOMEM;
	while (off < h->size) {
		ssize_t n = fh_base_pread(kv, h, buf, (size_t)MIN(KVFS_IO_SIZE, h->size - off), off);

		if (n <= 0) {
			rc = n < 0 ? (int)n : -EIO;	/* shorter than it said */
			break;
		}
		rc = w ? kvt_writer_write(w, buf, (size_t)n) : pwrite_all(fd, buf, (size_t)n, off);
		if (rc < 0)
			break;
		off += (uint64_t)n;
	}
	free(buf);
	return rc;
}

/* FH_BASE -> FH_BUF: the base's bytes into memory, with room for need. */
static int fh_buf_begin(struct kvfs *kv, struct fh *h, uint64_t need)
{
	uint64_t off = 0;
	int rc = fh_base_ensure(kv, h);

	if (rc == 0)
		rc = fh_mem_reserve(kv, h, need > h->size ? need : h->size);
	while (rc == 0 && h->r && off < h->size) {
		ssize_t n = fh_base_pread(kv, h, h->mem + off, (size_t)(h->size - off), off);

		if (n <= 0)
			rc = n < 0 ? (int)n : -EIO;
		else
			off += (uint64_t)n;
	}
	if (rc < 0) {
		fh_mem_free(kv, h);
		return rc;
	}
	fh_drop_base(h);
	h->state = FH_BUF;
	return 0;
}

/* FH_BASE or FH_BUF -> FH_STREAM: a part writer, primed with the bytes so far. */
static int fh_stream_begin(struct kvfs *kv, struct fh *h)
{
	/*
	 * Not pinned: a plain file must be able to push cache objects out, not
	 * fail for want of pinned room. Reclaim takes the coldest segment, not
	 * the one just written, so a part lives the moment until it is published.
	 */
	struct kvt_put_opts opts = { .session = "fuse-parts" };
	int rc;

	/* ... unless the file is to be pinned: then nothing of it is ever cache,
	 * not even the part between its commit and the publish. */
	pthread_mutex_lock(&kv->lock);
	if (h->node->ppin > 0)
		opts.flags = KVT_PUT_PIN;
	pthread_mutex_unlock(&kv->lock);
	rc = kvfs_staging_ready(kv);	/* the owner id and its lock */
	if (rc < 0)
		return rc;
	snprintf(h->part, sizeof(h->part), "%s/%llu", kv->owner,
		 (unsigned long long)atomic_fetch_add(&kv->part_seq, 1));
	rc = kvt_writer_open(kv->st, KVFS_PARTS_BUCKET, h->part, &opts, &h->w);
	if (rc < 0)
		return rc;
	if (h->state == FH_BUF)
		rc = kvt_writer_write(h->w, h->mem, (size_t)h->size);
	else
		rc = fh_base_copy(kv, h, h->w, -1);
	if (rc < 0) {
		kvt_writer_abort(h->w);
		h->w = NULL;
		return rc;
	}
	fh_drop_base(h);
	fh_mem_free(kv, h);
	atomic_fetch_add(&kv->active_streams, 1);
	h->state = FH_STREAM;
	return 0;
}

/* Commits the stream into its part; the handle keeps FH_STREAM, without w. */
static int fh_stream_commit(struct fh *h)
{
	int rc = kvt_writer_commit(h->w, NULL);

	h->w = NULL;
	if (rc < 0)
		log_err(rc, "cannot commit the part '%s'", h->part);
	return rc;
}

/* Anything -> FH_STAGE: the content into a temp file. */
static int fh_stage(struct kvfs *kv, struct fh *h)
{
	int fd, rc = 0;

	if (h->state == FH_STAGE)
		return 0;
	fd = fh_stage_open(kv);
	if (fd < 0)
		return fd;
	if (h->state == FH_BASE) {
		rc = fh_base_copy(kv, h, NULL, fd);
	} else if (h->state == FH_BUF) {
		rc = pwrite_all(fd, h->mem, (size_t)h->size, 0);
		if (rc == 0)
			fh_mem_free(kv, h);
	} else {
		/* A part cannot be read before it is committed. */
		rc = fh_stream_commit(h);
		if (rc == 0) {
			rc = kvt_reader_open(kv->st, KVFS_PARTS_BUCKET, h->part, &h->r);
			if (rc == 0) {
				snprintf(h->rtag, sizeof(h->rtag), "%s",
					 kvt_reader_object(h->r)->etag);
				rc = fh_base_copy(kv, h, NULL, fd);
			}
			kvt_object_delete(kv->st, KVFS_PARTS_BUCKET, h->part);
		}
		fh_stream_end(kv, h);
		if (rc < 0)
			h->err = rc;	/* the streamed bytes are gone */
	}
	if (rc == 0 && ftruncate(fd, (off_t)h->size) < 0)
		rc = -errno;
	fh_drop_base(h);
	if (rc < 0) {
		close(fd);
		atomic_fetch_sub(&kv->staged, 1);
		if (h->state == FH_STREAM)
			h->state = FH_BASE;
		return rc;
	}
	h->tfd = fd;
	h->state = FH_STAGE;
	return 0;
}

/* ---- who closes ------------------------------------------------------------ */

/*
 * Reads /proc/PID/stat of a task in the daemon's PID namespace. The kernel
 * names the thread that sent a request; its fields are what we read while
 * it waits for our reply, so it cannot have gone away yet.
 */
static int proc_stat(pid_t pid, char *buf, size_t size)
{
	char path[48];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	return 0;
}

/* Field `field` (1-based, as in proc(5)) of a stat line; NULL if short. */
static const char *proc_field(const char *stat, int field)
{
	/* The command name (field 2) may hold spaces and parentheses. */
	const char *p = strrchr(stat, ')');

	if (!p || field < 3)
		return NULL;
	for (int f = 2; f < field; f++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return NULL;
	}
	return p + 1;
}

/*
 * 1 when task pid is exiting because a signal killed it: PF_EXITING in its
 * flags (field 9) and a signal in the low bits of its exit code (field 52,
 * set before do_exit() closes the files). exit(3) leaves those bits clear.
 */
static int proc_killed(pid_t pid)
{
	char buf[1024];
	const char *f;

	if (pid <= 0 || proc_stat(pid, buf, sizeof(buf)) < 0)
		return 0;
	f = proc_field(buf, 9);
	if (!f || !(strtoul(f, NULL, 10) & 0x4))	/* PF_EXITING */
		return 0;
	f = proc_field(buf, 52);
	return f && (strtol(f, NULL, 10) & 0x7f) != 0;
}

/* The thread group (process) of thread tid, or 0 if that cannot be told. */
static pid_t proc_tgid(pid_t tid)
{
	char path[48], buf[512];
	const char *t;
	ssize_t n;
	int fd;

	if (tid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	t = strstr(buf, "\nTgid:");
	return t ? (pid_t)strtol(t + 6, NULL, 10) : 0;
}

/* Remembers the descriptor table a write came from. */
static void fh_owner_add(struct fh *h, uint64_t owner)
{
	if (!owner || h->nowners > FH_OWNERS_MAX)
		return;
	for (unsigned i = 0; i < h->nowners; i++)
		if (h->owners[i] == owner)
			return;
	if (h->nowners == FH_OWNERS_MAX)
		h->nowners++;	/* too many to tell apart: any may publish */
	else
		h->owners[h->nowners++] = owner;
}

enum fh_closer { FH_CLOSER_WRITER, FH_CLOSER_OTHER, FH_CLOSER_KILLED };

/* Who sent a flush: the writer, someone else, or a writer being killed. */
static enum fh_closer fh_closer(const struct fh *h, uint64_t owner, pid_t pid)
{
	if (owner && h->nowners > 0 && h->nowners <= FH_OWNERS_MAX) {
		unsigned i = 0;

		while (i < h->nowners && h->owners[i] != owner)
			i++;
		if (i == h->nowners)
			return FH_CLOSER_OTHER;
	} else if (h->nowners == 0 && pid > 0 && h->opener > 0 && pid != h->opener) {
		/* Nothing written yet: only the opener's process publishes the
		 * empty file (a child between fork and exec would publish an
		 * O_TRUNC before the first write). Another thread of it may. */
		pid_t a = proc_tgid(pid), b = proc_tgid(h->opener);

		if (!a || !b || a != b)
			return FH_CLOSER_OTHER;
	}
	return proc_killed(pid) ? FH_CLOSER_KILLED : FH_CLOSER_WRITER;
}

/* ---- publishing -------------------------------------------------------------- */

/* Writes the in-memory content out as a new version of bucket/key. */
static int fh_publish_buf(struct kvfs *kv, struct fh *h, const char *bucket, const char *key,
			  const struct kvt_put_opts *opts)
{
	struct kvt_writer *w = NULL;
	int rc = kvt_writer_open(kv->st, bucket, key, opts, &w);

	if (rc < 0)
		return rc;
	rc = kvt_writer_write(w, h->mem, (size_t)h->size);
	if (rc == 0)
		return kvt_writer_commit(w, NULL);
	kvt_writer_abort(w);
	return rc;
}

/* Writes the staging file out as a new version of bucket/key. */
static int fh_publish_stage(struct kvfs *kv, struct fh *h, const char *bucket, const char *key,
			    const struct kvt_put_opts *opts)
{
	struct kvt_writer *w = NULL;
	char *buf = malloc(KVFS_IO_SIZE);
	uint64_t off = 0;
	int rc;

	if (!buf)
		return -ENOMEM;
	rc = kvt_writer_open(kv->st, bucket, key, opts, &w);
	while (rc == 0 && off < h->size) {
		ssize_t n = pread(h->tfd, buf, (size_t)MIN(KVFS_IO_SIZE, h->size - off), (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		rc = kvt_writer_write(w, buf, (size_t)n);
		off += (uint64_t)n;
	}
	if (rc == 0)
		rc = kvt_writer_commit(w, NULL);
	else
		kvt_writer_abort(w);
	free(buf);
	return rc;
}

/* Writes the unchanged base out as a new version of bucket/key: a close
 * needs no staging file, nothing the open did not already hold. */
static int fh_publish_base(struct kvfs *kv, struct fh *h, const char *bucket, const char *key,
			   const struct kvt_put_opts *opts)
{
	struct kvt_writer *w = NULL;
	int rc = kvt_writer_open(kv->st, bucket, key, opts, &w);

	if (rc == 0)
		rc = fh_base_copy(kv, h, w, -1);
	if (rc == 0)
		rc = kvt_writer_commit(w, NULL);
	else
		kvt_writer_abort(w);
	return rc;
}

/*
 * Publishes the handle's content under the node's current name, atomically.
 * A file removed meanwhile (unlink, rename over it) publishes nothing.
 * Called with kvfs.names held shared (fh_publish).
 */
static int fh_publish_named(struct kvfs *kv, struct fh *h)
{
	struct node *n = h->node;
	struct kvt_put_opts opts;
	struct kvt_posix posix;
	char *bucket = NULL, *key = NULL, *session = NULL;
	int rc;

	pthread_mutex_lock(&kv->lock);
	if (n->psession && !(session = strdup(n->psession))) {
		pthread_mutex_unlock(&kv->lock);
		return -ENOMEM;
	}
	posix = h->posix;
	opts = (struct kvt_put_opts){
		/*
		 * The pin is the file's, like an xattr: a new version keeps the
		 * pin of the one it replaces, read in the commit itself, unless
		 * user.kvtier.pin was set while the file was open, and then the
		 * version is published pinned (or not) in that same commit, never
		 * a moment cache that reclaim could drop.
		 */
		.flags = (h->excl ? KVT_PUT_IF_NONE_MATCH : 0) |
			 (n->ppin > 0 ? KVT_PUT_PIN : n->ppin == 0 ? KVT_PUT_KEEP_PIN : 0),
		.content_type = h->content_type,
		.session = session ? session : h->session,
		.meta = h->meta,
		.nmeta = h->nmeta,
		.posix = &posix,
	};
	if (n->pending)
		posix = n->cposix;
	if (n->pend.mask & KVT_ATTR_MODE)
		posix.mode = (posix.mode & S_IFMT) | (n->pend.posix.mode & 07777);
	if (n->pend.mask & KVT_ATTR_UID)
		posix.uid = n->pend.posix.uid;
	if (n->pend.mask & KVT_ATTR_GID)
		posix.gid = n->pend.posix.gid;
	if (n->pend.mask & KVT_ATTR_ATIME)
		posix.atime_ns = n->pend.posix.atime_ns;
	if (n->pend.mask & KVT_ATTR_MTIME)
		opts.mtime_ns = n->pend.mtime_ns;
	rc = n->unlinked ? -ENOENT : 0;
	pthread_mutex_unlock(&kv->lock);
	if (rc == 0)
		rc = node_path(kv, n, &bucket, &key);
	if (rc == -ENOENT) {
		/*
		 * Unlinked or renamed over while open: its bytes go nowhere, but
		 * stay the open file's until its release (fh_release) frees
		 * them. Dropped at an fsync or a flush of another descriptor,
		 * the file read and stat'ed as empty through the ones still open.
		 */
		free(session);
		return 0;
	}
	if (rc < 0) {
		free(session);
		return rc;
	}

	switch (h->state) {
	case FH_BASE:
		if (h->r || h->base_lazy) {
			/* Unchanged bytes under new metadata (ftruncate to the
			 * file's own size): written out straight from the base.
			 * Through a staging file, the close of a file whose every
			 * call had succeeded failed with ENFILE when the mount's
			 * staging room was full (kvfs_staging_limit). */
			rc = fh_publish_base(kv, h, bucket, key, &opts);
			if (rc == 0) {
				/* Further reads start from what was published, as
				 * after a stream's: the version opened may be
				 * reclaimed, and the new one's ETag need not be its. */
				fh_drop_base(h);
				h->base_lazy = 1;
			}
		} else {
			rc = kvfs_put_empty(kv, bucket, key, &opts);
		}
		break;
	case FH_STREAM:
		/* The stream's writer commits straight under the file's key. */
		rc = kvt_writer_commit_as(h->w, bucket, key, &opts, NULL);
		h->w = NULL;
		fh_stream_end(kv, h);
		h->state = FH_BASE;
		if (rc < 0) {
			h->err = rc;	/* the bytes went with the part */
		} else {
			/* Further reads or appends start from what was published. */
			h->base_lazy = 1;
		}
		break;
	case FH_BUF:
		rc = fh_publish_buf(kv, h, bucket, key, &opts);
		break;
	case FH_STAGE:
		rc = fh_publish_stage(kv, h, bucket, key, &opts);
		break;
	}
	if (rc == 0) {
		pthread_mutex_lock(&kv->lock);
		node_changed_locked(kv, n);
		h->excl = 0;
		n->pending = 0;
		/* What was published is this handle's from now on: a chmod
		 * before an fsync was undone by the publish after it, as
		 * n->pend forgets it below. */
		h->posix = posix;
		if (n->nwriters <= 1 && n->ndirty <= 1)
			n->pend.mask = 0;
		/* The kernel's pages were written through; to be safe, the next
		 * open rereads what the store now holds. */
		n->etag[0] = '\0';
		pthread_mutex_unlock(&kv->lock);
		fh_clean(kv, h);
	} else {
		log_err(rc, "cannot publish '%s/%s'", bucket, key);
	}
	free(bucket);
	free(key);
	free(session);
	return rc;
}

/* fh_publish_named() under kvfs.names: the name it finds stays the file's
 * until the store has the new version. */
static int fh_publish(struct kvfs *kv, struct fh *h)
{
	int rc;

	if (h->err)
		return h->err;
	if (!h->dirty || h->abandoned)
		return 0;
	pthread_rwlock_rdlock(&kv->names);
	rc = fh_publish_named(kv, h);
	pthread_rwlock_unlock(&kv->names);
	return rc;
}

/* ---- open, create, release ------------------------------------------------- */

/* What fstat answers once the name is gone, for a node first known from a
 * listing (only lookups and stats record it otherwise). */
static void fh_remember(struct kvfs *kv, struct node *n, const struct kvt_object *o)
{
	struct stat st;

	kvfs_attr_object(kv, o, &st);
	pthread_mutex_lock(&kv->lock);
	if (!n->has_last) {
		st.st_ino = n->ino;
		n->last = st;
		n->has_last = 1;
	}
	pthread_mutex_unlock(&kv->lock);
}

/* How long a writer waits for readers of the page cache to close before
 * it takes the name to a new inode, and how long that inode's readers stay
 * off the page cache so that the writer finds it free. */
#define FH_CACHE_WAIT_MS 100
#define FH_NOCACHE_NS (2 * 1000000000LL)
/*
 * How long after its writer's close(2) a reader waits for the RELEASE of
 * that writer's handle (fh_closed_writers_wait_locked). The RELEASE is on
 * its way when close(2) returns, unless a copy of the descriptor lives on
 * (a child forked meanwhile); but a loaded daemon can take it up after
 * FH_CACHE_WAIT_MS, and the reader then went to direct I/O: mmap(MAP_SHARED)
 * of the file just written failed ENODEV (versions.py, case 11). Readers
 * wait this long only beside a copy that outlives its writer's close.
 */
#define FH_CLOSED_WAIT_MS 1000

/*
 * Counts a writer on n, once no handle reads n through the page cache.
 * Readers close in a moment as a rule (their RELEASE may even still be on
 * its way): wait for that, bounded. If some stay open, n keeps them and
 * its name goes to a new inode (node_supersede_locked), which the kernel
 * looks up when this open answers -ESTALE; *pino and *name say which name
 * the kernel must forget. *ksize (unless NULL): the size the kernel had.
 */
static int fh_writer_enter(struct kvfs *kv, struct node *n, int64_t *ksize, fuse_ino_t *pino,
			   char **name)
{
	struct timespec until;
	int rc = 0;

	util_deadline(&until, FH_CACHE_WAIT_MS);
	pthread_mutex_lock(&kv->lock);
	n->wwait++;	/* new readers meanwhile stay off the cache */
	while (n->ncache > 0 &&
	       pthread_cond_timedwait(&kv->cache_cond, &kv->lock, &until) != ETIMEDOUT)
		;
	n->wwait--;
	if (n->ncache > 0) {
		if (n->hashed && n->parent && (*name = strdup(n->name)))
			*pino = n->parent->ino;
		node_supersede_locked(kv, n);
		if (n->parent && n->name)
			node_nocache_locked(n->parent, n->name, kvfs_now_ns() + FH_NOCACHE_NS);
		rc = -ESTALE;
	} else {
		if (n->nwriters++ > 0)
			n->wshared = 1;
		if (ksize)
			*ksize = n->ksize;
		n->ksize = -1;
	}
	pthread_mutex_unlock(&kv->lock);
	return rc;
}

/* Uncounts a writer on n; the last one takes what was kept for its publishes. */
static void fh_writer_leave_locked(struct node *n)
{
	if (--n->nwriters > 0)
		return;
	n->wshared = 0;
	n->pend.mask = 0;
	free(n->psession);
	n->psession = NULL;
	n->ppin = 0;
}

/*
 * Waits, until FH_CLOSED_WAIT_MS after the last such close before it came,
 * while every writer open on n was closed by its writer:
 * close(2) returns before the kernel's RELEASE of the handle comes, and a
 * reader opened in between went to direct I/O, where mmap(MAP_SHARED) of
 * the file just written failed ENODEV (versions.py, case 8). The deadline
 * is the one it found: closes meanwhile moved it on, and while a child
 * held one writer's descriptor, another writer closing every few tens of
 * milliseconds kept the open waiting as long as it went on (case 12).
 * A copy of the descriptor that writes ends the wait (fh_touch, case 13).
 */
static void fh_closed_writers_wait_locked(struct kvfs *kv, struct node *n)
{
	struct timespec until = n->wclosed_wait;

	while (n->nwriters > 0 && n->nclosed == n->nwriters &&
	       pthread_cond_timedwait(&kv->cache_cond, &kv->lock, &until) != ETIMEDOUT)
		;
}

/* A read-only handle of another version than o is open on n. */
static int fh_reader_other_version(const struct node *n, const struct kvt_object *o)
{
	return n->nreaders > 0 && strcmp(n->rtag, o->etag) != 0;
}

/*
 * How a read-only handle of version o reads (see "One version per inode"):
 * through the page cache when that cannot show the bytes or size of
 * another version, else with direct I/O. Counts it in n->ncache, and in
 * n->nreaders either way. When a read-only handle of another version is
 * open on n, -ESTALE instead, with the name to forget in *pino, *name: the
 * node loses its name, and the kernel's lookup again gives this version a
 * new inode. by_name: o is what n's old name holds now (fh_open), read
 * with direct I/O. Direct I/O alone does not keep two versions apart: a private
 * mmap reads through the inode's page cache whatever the handle
 * (versions.py, case 5).
 *
 * ksize is the size last sent, not the one the kernel kept: it applies an
 * attribute reply only if no newer request's reply came first, so of two
 * replies on their way (a READDIRPLUS page read earlier, a GETATTR) it may
 * keep the older size while ksize says the newer one. namerace.py then
 * read a new version cut at the old size. So the first cached reader of a
 * node makes the kernel drop its attributes and every reply still on its
 * way (kvfs_notify_inval_attr): a read past the size it has then asks
 * first, and gets csize.
 */
static int fh_reader_mode(struct kvfs *kv, struct fh *h, const struct kvt_object *o,
			  int by_name, struct fuse_file_info *fi, fuse_ino_t *pino, char **name)
{
	struct node *n = h->node;
	int cache, inval = 0;

	pthread_mutex_lock(&kv->lock);
	/* Only a reader that may read through the page cache waits. */
	if (!by_name && !fh_reader_other_version(n, o))
		fh_closed_writers_wait_locked(kv, n);
	if (fh_reader_other_version(n, o)) {
		/* Another version is read here: the name goes to a new inode
		 * (by_name: it has one already). */
		if (n->hashed && n->parent) {
			if ((*name = strdup(n->name)))
				*pino = n->parent->ino;
			node_supersede_locked(kv, n);
		}
		pthread_mutex_unlock(&kv->lock);
		return -ESTALE;
	}
	if (n->nreaders++ == 0)
		snprintf(n->rtag, sizeof(n->rtag), "%s", o->etag);
	h->reader = 1;
	if (by_name)
		cache = 0;	/* not the inode's version: past the cache */
	else if (n->nwriters > 0 || n->wwait > 0 ||
		 node_nocache(n, kvfs_now_ns()))
		cache = 0;	/* the kernel's size is, or is about to be, a writer's */
	else if (n->ncache > 0)
		cache = strcmp(n->etag, o->etag) == 0;	/* the cache holds one version */
	else
		cache = n->ksize == (int64_t)o->size;	/* the kernel's size is this one's */
	if (cache) {
		/* Unchanged since the kernel last cached it: keep its pages. */
		fi->keep_cache = n->etag[0] && strcmp(n->etag, o->etag) == 0;
		snprintf(n->etag, sizeof(n->etag), "%s", o->etag);
		n->csize = o->size;
		inval = n->ncache++ == 0;
		h->cached = 1;
	} else {
		fi->direct_io = 1;
		/* Its mmap may bring its own pages in: a later open keeps none. */
		if (strcmp(n->etag, o->etag) != 0)
			n->etag[0] = '\0';
		/*
		 * The kernel's size is another version's (changed through S3):
		 * fstat(2) of this open answered it for attr_timeout, and an
		 * mmap(2) of that size past this version's end died of SIGBUS.
		 */
		inval = n->ksize != (int64_t)o->size;
	}
	pthread_mutex_unlock(&kv->lock);
	if (inval)
		kvfs_notify_inval_attr(kv, n->ino);
	return 0;
}

int fh_open(struct kvfs *kv, struct node *n, int flags, pid_t opener, struct fuse_file_info *fi)
{
	struct fh *h = fh_new(kv, n, flags, opener);
	char *bucket = NULL, *key = NULL, *oldname = NULL;
	struct kvt_object *o = NULL;
	fuse_ino_t oldparent = 0;
	int64_t kbefore = -1;
	int pending, unlinked, rc, name_stale = 0, by_name = 0;

	if (!h)
		return -ENOMEM;
	fi->keep_cache = 0;
	if (h->writable) {
		rc = fh_writer_enter(kv, n, &kbefore, &oldparent, &oldname);
		if (rc < 0) {
			h->writable = 0;	/* not counted */
			name_stale = 1;
			goto fail;
		}
	}
	pthread_mutex_lock(&kv->lock);
	pending = n->pending;
	unlinked = n->unlinked;
	if (pending)
		h->posix = n->cposix;
	pthread_mutex_unlock(&kv->lock);
	if (pending) {
		/*
		 * Created by another handle and not yet published: to a reader
		 * the file does not exist yet (what S3 and other mounts say too),
		 * and its bytes are never shown before they are published. A
		 * writer starts empty, as if it had opened the file just before
		 * the first write.
		 */
		if (!h->writable) {
			rc = -ENOENT;
			goto fail_noent;
		}
		goto done;
	}
	rc = node_path(kv, n, &bucket, &key);
	if (rc == -ENOENT && h->writable && unlinked) {
		/*
		 * Unlinked or renamed over since the kernel looked the name up:
		 * as on any file system, the open gets the removed file, and
		 * what is written to it goes nowhere (fh_publish_named). An
		 * ESTALE here reached open(O_CREAT) whenever the kernel's one
		 * retry met another rename.
		 */
		goto empty;
	}
	if (rc == -ENOENT && !h->writable) {
		/*
		 * The same for a reader, which reads what the name holds now
		 * (or finds ENOENT), as if it had opened a moment later: an
		 * ESTALE reached the application whenever the kernel's one
		 * retry met another rename. That version is not the inode's,
		 * so it is read past the page cache.
		 */
		rc = node_path_name(kv, n, &bucket, &key);
		by_name = rc == 0;
	}
	if (rc < 0)
		goto fail;
	if (h->writable && (flags & O_TRUNC)) {
		rc = kvt_object_head(kv->st, bucket, key, &o);
		if (rc == -ENOENT)
			goto empty;
		if (rc < 0)
			goto fail;
		h->size = 0;
		h->sized = 1;
		fh_visible_posix(kv, o, &h->posix);
		rc = fh_copy_base_info(h, o);
		if (rc < 0)
			goto fail;
		fh_remember(kv, n, o);
		fh_touch(kv, h);
		goto done;
	}
	rc = kvt_reader_open(kv->st, bucket, key, &h->r);
	if (rc == -ENODATA) {
		log_err(rc, "cannot open '%s/%s': it is in the cold tier and was not recalled",
			bucket, key);
		goto fail;
	}
	if (rc == -ENOENT && h->writable)
		goto empty;
	if (rc == -ENOENT && !by_name) {
		/*
		 * The name holds nothing now (deleted through S3 since the
		 * kernel looked it up): the reader finds it gone, as if it had
		 * opened a moment later, and the kernel forgets the name.
		 * ESTALE would make the VFS look once more, to find the same,
		 * and reached the application whenever a PUT and another
		 * DELETE came in between (a reader beside S3 PUT and DELETE
		 * loops of its key: 15 to 23 in 8 s).
		 */
		pthread_mutex_lock(&kv->lock);
		if (n->hashed && n->parent && (oldname = strdup(n->name)))
			oldparent = n->parent->ino;
		pthread_mutex_unlock(&kv->lock);
		goto fail_noent;
	}
	if (rc < 0)
		goto fail;
	/* Reclaim takes its segments last while it is open: a rewrite of the
	 * name beside a reader would cut it first (reclaim.c, "Open readers"). */
	kvt_reader_hold(h->r);
	{
		const struct kvt_object *ro = kvt_reader_object(h->r);

		fh_remember(kv, n, ro);
		h->size = ro->size;
		snprintf(h->rtag, sizeof(h->rtag), "%s", ro->etag);
		if (h->writable) {
			h->sized = kbefore >= 0 && (uint64_t)kbefore == h->size;
			fh_visible_posix(kv, ro, &h->posix);
			rc = fh_copy_base_info(h, ro);
			if (rc < 0)
				goto fail;
		} else {
			rc = fh_reader_mode(kv, h, ro, by_name, fi, &oldparent, &oldname);
			name_stale = rc == -ESTALE;
			if (rc < 0)
				goto fail;
		}
	}
	goto done;
empty:
	/*
	 * A writer of a name whose object is gone (deleted through S3, or the
	 * file removed here since the kernel looked): it starts empty, as
	 * open(O_CREAT) would have made it, and O_TRUNC publishes the empty
	 * file at close even if nothing is written.
	 */
	kvt_object_free(o);
	o = NULL;
	h->size = 0;
	{
		/* Attributes of an object without POSIX metadata, for fstat. */
		struct kvt_object none = { .mtime_ns = kvfs_now_ns() };

		fh_visible_posix(kv, &none, &h->posix);
		fh_remember(kv, n, &none);
	}
	if (flags & O_TRUNC) {
		h->sized = 1;
		fh_touch(kv, h);
	}
done:
	if (h->writable) {
		fi->direct_io = 1;	/* see "The page cache" above */
		fi->keep_cache = 0;
	} else {
		/* Nothing to publish at close: spare the reader a FLUSH round trip. */
		fi->noflush = 1;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	kvt_object_free(o);
	free(bucket);
	free(key);
	return 0;
fail:
	/*
	 * -ENOENT here means the kernel's name for n is stale: the node lost
	 * its name after the kernel looked it up (unlinked, or renamed over, by
	 * another process before this open reached us) or its key holds nothing
	 * now (deleted through S3). -ESTALE makes the VFS walk the path again,
	 * once, revalidating every name: the new lookup finds what the name
	 * holds now. Writers only get it when their inode was given to readers
	 * (fh_writer_enter). The engine's own -ESTALE (a version reclaimed
	 * under a reader) is an I/O error.
	 */
	if (rc == -ESTALE && !name_stale)
		rc = -EIO;
	else if (rc == -ENOENT && !by_name)
		rc = -ESTALE;
fail_noent:
	kvt_object_free(o);
	free(bucket);
	free(key);
	if (h->dirty)
		fh_clean(kv, h);
	pthread_mutex_lock(&kv->lock);
	h->node->nopen--;
	if (h->writable)
		fh_writer_leave_locked(h->node);
	if (h->reader)
		h->node->nreaders--;
	if (h->cached && --h->node->ncache == 0)
		pthread_cond_broadcast(&kv->cache_cond);
	node_put_locked(kv, h->node);
	pthread_mutex_unlock(&kv->lock);
	fh_free(h);
	/* The kernel still has the name, which now belongs to a new inode
	 * (-ESTALE) or to nothing (-ENOENT). */
	if (oldname) {
		if (rc == -ESTALE)
			log_debug("'%s' gets a new inode: the old one is read as another"
				  " version", oldname);
		kvfs_notify_inval_entry(kv, oldparent, oldname);
	}
	free(oldname);
	return rc;
}

int fh_create(struct kvfs *kv, struct node *n, int flags, pid_t opener,
	      const struct kvt_posix *posix, struct fuse_file_info *fi)
{
	struct fh *h = fh_new(kv, n, flags, opener);

	if (!h)
		return -ENOMEM;
	h->posix = *posix;
	h->excl = !!(flags & O_EXCL);
	h->sized = 1;
	pthread_mutex_lock(&kv->lock);
	if (n->ncache > 0) {
		/*
		 * A reader opened n through the page cache after op_create
		 * looked (an S3 PUT gave the name an object in between): a
		 * writer never shares its inode ("One version per inode"; its
		 * writes would move the size the reader is cut at). -ESTALE:
		 * op_create looks again, and moves the name to a new inode.
		 */
		n->nopen--;
		node_put_locked(kv, n);
		pthread_mutex_unlock(&kv->lock);
		fh_free(h);
		log_debug("a create met a reader of the page cache; it looks again");
		return -ESTALE;
	}
	n->pending = 1;
	n->unlinked = 0;
	n->cposix = *posix;
	if (n->nwriters++ > 0)
		n->wshared = 1;
	n->ksize = -1;
	pthread_mutex_unlock(&kv->lock);
	fh_touch(kv, h);	/* an empty file is published at close */
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->keep_cache = 0;
	fi->direct_io = 1;
	return 0;
}

void fh_release(struct kvfs *kv, struct fh *h)
{
	struct node *n = h->node;
	fuse_ino_t pino = 0;
	char *name = NULL;
	int rc;

	fh_reads_wait(h);
	pthread_mutex_lock(&h->lock);
	rc = fh_publish(kv, h);
	if (rc < 0 && rc != h->err)
		log_err(rc, "a file closed without being published");
	if (h->state == FH_STREAM)
		fh_stream_end(kv, h);
	fh_mem_free(kv, h);
	fh_clean(kv, h);
	pthread_mutex_unlock(&h->lock);

	pthread_mutex_lock(&kv->lock);
	n->nopen--;
	if (h->writable) {
		/*
		 * The last writer, alone since it opened at the size the
		 * kernel had (create, O_TRUNC, or that size: sized): the
		 * kernel's size is this handle's, moved by its writes and
		 * truncates alone. Unknown (-1), the next
		 * reader opened with direct I/O, and mmap(MAP_SHARED) of a file
		 * just written failed ENODEV until a stat after attr_timeout.
		 */
		int64_t ksize = n->nwriters == 1 && !n->wshared && h->sized &&
				rc == 0 && !h->err ? (int64_t)h->size : -1;

		if (h->closed)
			n->nclosed--;
		fh_writer_leave_locked(n);
		if (n->nwriters == 0 && n->wwait == 0)
			n->ksize = ksize;
		pthread_cond_broadcast(&kv->cache_cond);	/* a reader may wait */
	}
	if (h->reader)
		n->nreaders--;
	if (h->cached && --n->ncache == 0)
		pthread_cond_broadcast(&kv->cache_cond);	/* a writer may wait */
	if (n->nwriters == 0 && n->pending) {
		/*
		 * Never published: the file never existed. This very node goes,
		 * in the same hold of the lock: detached by name after dropping
		 * it, a create(2) that meanwhile took the node up again for the
		 * same name lost its file.
		 */
		n->pending = 0;
		n->has_last = 0;
		if (n->hashed && n->parent) {
			pino = n->parent->ino;
			name = strdup(n->name);
			node_detach_locked(kv, n);
		}
	}
	node_put_locked(kv, n);
	pthread_mutex_unlock(&kv->lock);
	/* The kernel still has the name from create(2). */
	if (name)
		kvfs_notify_inval_entry(kv, pino, name);
	free(name);
	h->node = NULL;
	fh_free(h);
}

void fh_discard(struct kvfs *kv, struct fh *h)
{
	h->abandoned = 1;	/* nobody else has it: no lock needed */
	fh_release(kv, h);
}

void fh_release_orphans(struct kvfs *kv)
{
	for (;;) {
		struct fh *h;

		pthread_mutex_lock(&kv->lock);
		h = kv->open_fhs;
		pthread_mutex_unlock(&kv->lock);
		if (!h)
			return;
		fh_release(kv, h);	/* what the lost RELEASE would have done */
	}
}

/* ---- read, write, truncate, flush ------------------------------------------ */

ssize_t fh_read_windows(struct kvfs *kv, struct fh *h, size_t size, off_t off,
			struct fh_reply *rp)
{
	uint64_t o = (uint64_t)off, end = 0;
	ssize_t n = 0;

	rp->n = 0;
	rp->map = NULL;
	rp->held = 0;
	rp->push = 0;
	if (h->writable)
		return -EAGAIN;
	pthread_mutex_lock(&h->rlock);
	h->nreads++;
	rp->held = 1;
	if (!h->r)
		n = -EAGAIN;
	else if (o < h->size)
		end = MIN(o + size, h->size);
	while (n >= 0 && o < end) {
		uint64_t w = o / KVFS_EXTENT_PAYLOAD * KVFS_EXTENT_PAYLOAD;
		struct fh_win *x;
		size_t len;

		if (rp->n == FH_REPLY_MAX || (o == w && end >= MIN(w + KVFS_EXTENT_PAYLOAD, h->size))) {
			n = -EAGAIN;	/* whole extents: fh_read_map */
			break;
		}
		if (fh_read_random(h, w, o, end) || (rp->n == 0 && fh_read_chunks(h, w, o, end))) {
			n = -EAGAIN;	/* read alone by fh_read_map or fh_base_read */
			break;
		}
		n = 0;	/* fh_win_get's count of a load is not ours */
		x = fh_win_get(kv, h, w, rp->n > 0, &n);
		if (!x || o >= w + x->len)
			break;
		len = (size_t)(MIN(end, w + x->len) - o);
		x->users++;
		rp->iov[rp->n] = (struct iovec){ .iov_base = x->buf + (o - w), .iov_len = len };
		rp->win[rp->n++] = x;
		o += len;
	}
	if (n < 0) {
		for (unsigned i = 0; i < rp->n; i++)
			rp->win[i]->users--;
		rp->n = 0;
		pthread_cond_broadcast(&h->rcond);
	} else {
		atomic_store(&h->read_next, o);
	}
	pthread_mutex_unlock(&h->rlock);
	return n < 0 ? n : (ssize_t)(o - (uint64_t)off);
}

ssize_t fh_read_map(struct fh *h, size_t size, off_t off, struct fh_reply *rp)
{
	struct kvt_reader *r = rp->held ? fh_base_reader(h) : NULL;
	const struct iovec *iov;
	unsigned niov;
	size_t n = 0;

	if (!r || kvt_reader_pread_map(r, (uint64_t)off, size, &rp->map) < 0)
		return -EAGAIN;
	iov = kvt_map_iov(rp->map, &niov);
	for (unsigned i = 0; i < niov; i++)
		n += iov[i].iov_len;
	atomic_store(&h->read_next, (uint64_t)off + n);
	return (ssize_t)n;
}

/*
 * Whole small files pushed into the page cache (KVFS_PUSH_MAX). cp and cat
 * read 128 KiB at a time, so the kernel's readahead asks for a 2 MiB file
 * in four READs (256 KiB, 512 KiB, 1 MiB, 256 KiB), each sent only once the
 * reader has reached the one before, and each waiting for the disk: about
 * 3 ms a file, most of it waiting. So the first READ of a handle through
 * the page cache, at offset 0 and smaller than an extent, of a version of
 * at most KVFS_PUSH_MAX bytes, reads the first extent whole and is answered
 * from it; then the rest of the extent, and the other extents read side by
 * side, are stored in the inode's pages (FUSE_NOTIFY_STORE,
 * fh_read_push_rest) while the reader copies the first part: the reads
 * that follow find their pages and never reach the daemon. Every byte is
 * verified before it is stored, as for a READ. A reader of bigger pieces
 * (fio, NIXL: 1 MiB and more) has the kernel ask for whole extents side by
 * side already, and is left alone; so is an O_DIRECT reader, which never
 * reads the cache.
 *
 * The pages stored are this version's: no other version is read through
 * the inode's cache while this handle is (fh_reader_mode). A store waits
 * for pages the kernel is reading for another handle of the inode, that is
 * for a READ that another thread of the loop must answer, and a release
 * of the handle waits for its push: at most kv->push_max pushes run at
 * once, fewer than half the loop's threads, so that one always remains to
 * answer that READ.
 */
ssize_t fh_read_push(struct kvfs *kv, struct fh *h, size_t size, off_t off, struct fh_reply *rp)
{
	struct kvt_reader *r = rp->held ? fh_base_reader(h) : NULL;
	const struct iovec *iov;
	unsigned niov, n = 0;
	size_t left = size;

	if (!r || off != 0 || !h->cached || (h->flags & O_DIRECT) || size >= KVFS_EXTENT_PAYLOAD ||
	    h->size <= size || h->size > KVFS_PUSH_MAX)
		return -EAGAIN;
	if (atomic_fetch_add(&kv->pushing, 1) >= kv->push_max) {
		atomic_fetch_sub(&kv->pushing, 1);
		return -EAGAIN;
	}
	if (kvt_reader_pread_map(r, 0, KVFS_EXTENT_PAYLOAD, &rp->map) < 0) {
		rp->map = NULL;
		atomic_fetch_sub(&kv->pushing, 1);
		return -EAGAIN;	/* fh_read_map or fh_read meets it again, and reports it */
	}
	/* The READ's part, in rp->iov (no windows); the rest is pushed. */
	iov = kvt_map_iov(rp->map, &niov);
	for (unsigned i = 0; i < niov && left > 0 && n < FH_REPLY_MAX; i++) {
		size_t len = MIN(left, iov[i].iov_len);

		rp->iov[n] = (struct iovec){ .iov_base = iov[i].iov_base, .iov_len = len };
		rp->win[n++] = NULL;
		left -= len;
	}
	if (left > 0) {
		/* Extents too small for FH_REPLY_MAX: a short reply would read
		 * as zeros to the kernel. */
		kvt_map_free(rp->map);
		rp->map = NULL;
		atomic_fetch_sub(&kv->pushing, 1);
		return -EAGAIN;
	}
	rp->n = n;
	rp->push = 1;
	atomic_store(&h->read_next, (uint64_t)size);
	return (ssize_t)size;
}

/* Stores [at + skip, ...) of map's bytes, which start at offset at. */
static int fh_push_map(struct kvfs *kv, struct fh *h, const struct kvt_map *m, uint64_t at,
		       uint64_t skip)
{
	const struct iovec *iov;
	unsigned niov;

	iov = kvt_map_iov(m, &niov);
	for (unsigned i = 0; i < niov; at += iov[i++].iov_len) {
		struct fuse_bufvec bv;
		uint64_t from = MIN(skip, iov[i].iov_len);
		int rc;

		skip -= from;
		if (from == iov[i].iov_len)
			continue;
		bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(iov[i].iov_len - from);
		bv.buf[0].mem = (char *)iov[i].iov_base + from;
		rc = fuse_lowlevel_notify_store(kv->se, h->node->ino, (off_t)(at + from), &bv, 0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void fh_read_push_rest(struct kvfs *kv, struct fh *h, struct fh_reply *rp, int answered)
{
	uint64_t replied = 0, off = KVFS_EXTENT_PAYLOAD;
	struct kvt_map *m = NULL;
	struct kvt_reader *r;

	if (!rp->push)
		return;
	r = fh_base_reader(h);
	for (unsigned i = 0; i < rp->n; i++)
		replied += rp->iov[i].iov_len;
	/* The first extent's rest, then the other extents, read side by side;
	 * a failure leaves the reads that follow to READs. */
	if (answered && fh_push_map(kv, h, rp->map, 0, replied) == 0 && off < h->size &&
	    kvt_reader_pread_map(r, off, h->size - off, &m) == 0)
		fh_push_map(kv, h, m, off, 0);
	kvt_map_free(m);
	rp->push = 0;
	atomic_fetch_sub(&kv->pushing, 1);
}

void fh_reply_done(struct fh *h, struct fh_reply *rp)
{
	kvt_map_free(rp->map);
	rp->map = NULL;
	if (!rp->held)
		return;
	pthread_mutex_lock(&h->rlock);
	for (unsigned i = 0; i < rp->n; i++)
		if (rp->win[i])
			rp->win[i]->users--;
	pthread_cond_broadcast(&h->rcond);
	fh_reads_leave_locked(h);
	pthread_mutex_unlock(&h->rlock);
	rp->n = 0;
	rp->held = 0;
}

ssize_t fh_read(struct kvfs *kv, struct fh *h, char *buf, size_t size, off_t off)
{
	ssize_t n = 0;
	int rc = 0;

	/* Read-only: the base, its size and state never change; no h->lock,
	 * so the kernel's reads of one file run side by side. */
	if (!h->writable) {
		fh_reads_enter(h);
		n = fh_base_read(kv, h, buf, size, (uint64_t)off);
		pthread_mutex_lock(&h->rlock);
		fh_reads_leave_locked(h);
		pthread_mutex_unlock(&h->rlock);
		return n;
	}
	pthread_mutex_lock(&h->lock);
	if (h->err) {
		rc = h->err;
		goto out;
	}
	if (h->state == FH_STREAM)
		rc = fh_stage(kv, h);
	if (rc < 0)
		goto out;
	if ((uint64_t)off >= h->size)
		goto out;
	if (h->state == FH_BASE) {
		n = fh_base_read(kv, h, buf, size, (uint64_t)off);
	} else if (h->state == FH_BUF) {
		n = (ssize_t)MIN((uint64_t)size, h->size - (uint64_t)off);
		memcpy(buf, h->mem + off, (size_t)n);
	} else {
		size = (size_t)MIN((uint64_t)size, h->size - (uint64_t)off);
		do
			n = pread(h->tfd, buf, size, off);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			rc = -errno;
	}
out:
	pthread_mutex_unlock(&h->lock);
	return rc < 0 ? rc : n;
}

ssize_t fh_write(struct kvfs *kv, struct fh *h, const char *buf, size_t size, off_t off,
		 uint64_t owner)
{
	uint64_t o = (uint64_t)off;
	int rc = 0;

	pthread_mutex_lock(&h->lock);
	fh_owner_add(h, owner);
	h->abandoned = 0;	/* someone still writes through it */
	if (h->err) {
		rc = h->err;
		goto out;
	}
	if (h->flags & O_APPEND)
		o = h->size;
	if (o + size > kvt_store_object_max(kv->st)) {
		/* Refused before a byte is stored, and the file is as it was. */
		pthread_mutex_unlock(&h->lock);
		return -EFBIG;
	}
	if (h->state == FH_BASE) {
		rc = fh_base_ensure(kv, h);
		if (rc < 0)
			goto out;
		/* Small: in memory, unless the budget is spent. */
		if (o + size <= KVFS_BUF_MAX && h->size <= KVFS_BUF_MAX &&
		    fh_buf_begin(kv, h, o + size) == 0)
			rc = 0;
		else if (o == h->size && atomic_load(&kv->active_streams) < kv->max_streams)
			rc = fh_stream_begin(kv, h);	/* at EOF: the fast path */
		else
			rc = fh_stage(kv, h);
		if (rc < 0)
			goto out;
	}
	if (h->state == FH_BUF && fh_mem_reserve(kv, h, o + size) < 0) {
		/* Outgrew memory: stream if this is the end, else stage. */
		if (o == h->size && atomic_load(&kv->active_streams) < kv->max_streams)
			rc = fh_stream_begin(kv, h);
		else
			rc = fh_stage(kv, h);
		if (rc < 0)
			goto out;
	}
	if (h->state == FH_BUF) {
		if (o > h->size)
			memset(h->mem + h->size, 0, (size_t)(o - h->size));
		memcpy(h->mem + o, buf, size);
		goto written;
	}
	if (h->state == FH_STREAM && o != h->size) {
		rc = fh_stage(kv, h);
		if (rc < 0)
			goto out;
	}
	if (h->state == FH_STREAM) {
		rc = kvt_writer_write(h->w, buf, size);
		if (rc < 0) {
			/* The writer is dead and its bytes with it. */
			log_err(rc, "cannot write a stream of %llu bytes",
				(unsigned long long)h->size);
			h->err = rc;
			fh_stream_end(kv, h);
			h->state = FH_BASE;
			goto out;
		}
	} else {
		rc = pwrite_all(h->tfd, buf, size, o);
		if (rc < 0) {
			log_err(rc, "cannot write to a staging file in '%s'", kv->staging);
			goto out;
		}
	}
written:
	if (o + size > h->size)
		h->size = o + size;
	fh_touch(kv, h);
out:
	/*
	 * A failed write poisons the handle: the file's bytes are no longer
	 * what the writer meant, so close publishes nothing and reports the
	 * error, and readers keep the old version. Publishing what happened to
	 * be written (the POSIX way) would make a truncated KV block an object.
	 */
	if (rc < 0 && !h->err)
		h->err = rc;
	pthread_mutex_unlock(&h->lock);
	return rc < 0 ? rc : (ssize_t)size;
}

int fh_truncate(struct kvfs *kv, struct fh *h, uint64_t size)
{
	int rc = 0;

	if (size > kvt_store_object_max(kv->st))
		return -EFBIG;	/* before anything changes, as for a write */
	pthread_mutex_lock(&h->lock);
	if (size == h->size && !h->err)
		goto touch;	/* ftruncate(2) moves mtime all the same */
	if (size == 0) {
		/* Starts over: even a failed stream is forgotten. */
		if (h->state == FH_STREAM)
			fh_stream_end(kv, h);
		fh_stage_close(kv, h);
		fh_drop_base(h);
		fh_mem_free(kv, h);
		h->state = FH_BASE;
		h->err = 0;
	} else if (h->err) {
		rc = h->err;
		goto out;
	} else if ((h->state == FH_BASE || h->state == FH_BUF) && size <= KVFS_BUF_MAX &&
		   h->size <= KVFS_BUF_MAX &&
		   (h->state == FH_BUF || fh_buf_begin(kv, h, size) == 0) &&
		   fh_mem_reserve(kv, h, size) == 0) {
		if (size > h->size)
			memset(h->mem + h->size, 0, (size_t)(size - h->size));
	} else {
		rc = fh_stage(kv, h);
		if (rc == 0 && ftruncate(h->tfd, (off_t)size) < 0)
			rc = -errno;
		if (rc < 0)
			goto out;
	}
	h->size = size;
touch:
	fh_touch(kv, h);
out:
	pthread_mutex_unlock(&h->lock);
	return rc;
}

/* Its writer closed h: readers that open now wait a moment for its
 * RELEASE (a copy of the descriptor may keep it open for long). */
static void fh_closed(struct kvfs *kv, struct fh *h)
{
	pthread_mutex_lock(&kv->lock);
	if (!h->closed) {
		h->closed = 1;
		h->node->nclosed++;
		util_deadline(&h->node->wclosed_wait, FH_CLOSED_WAIT_MS);
	}
	pthread_mutex_unlock(&kv->lock);
}

int fh_flush(struct kvfs *kv, struct fh *h, uint64_t owner, pid_t pid)
{
	int rc = 0;

	pthread_mutex_lock(&h->lock);
	if (!h->dirty && !h->err)
		goto out;	/* nothing to publish: spare the /proc reads */
	switch (fh_closer(h, owner, pid)) {
	case FH_CLOSER_OTHER:
		break;		/* a copy of the descriptor: not the writer's close */
	case FH_CLOSER_KILLED:
		if (h->dirty && !h->abandoned) {
			char *bucket = NULL, *key = NULL;

			node_path(kv, h->node, &bucket, &key);
			log_info("'%s/%s' is not published: its writer (task %d) was killed",
				 bucket ? bucket : "?", key ? key : "?", (int)pid);
			free(bucket);
			free(key);
		}
		h->abandoned = 1;
		fh_closed(kv, h);
		break;
	case FH_CLOSER_WRITER:
		/*
		 * close(2) returns what this publish did, so a failure is final:
		 * release must not try again. A release that then found room
		 * published the version after its writer was told it failed,
		 * and over the next one it wrote (a stale block in the chaos
		 * test; test_fuse.sh, "a failed close").
		 */
		rc = fh_publish(kv, h);
		if (rc < 0)
			h->err = rc;
		fh_closed(kv, h);
		break;
	}
out:
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int fh_fsync(struct kvfs *kv, struct fh *h)
{
	int rc;

	/* Asked for by name: publishes whoever asks. */
	pthread_mutex_lock(&h->lock);
	rc = fh_publish(kv, h);
	pthread_mutex_unlock(&h->lock);

	return rc < 0 ? rc : kvt_store_sync(kv->st);
}

/* ---- truncate(2) by name ----------------------------------------------------- */

/* A new version of bucket/key: the old bytes cut, or zero-extended, to size. */
static int truncate_key(struct kvfs *kv, const char *bucket, const char *key, uint64_t size)
{
	struct kvt_reader *r = NULL;
	struct kvt_writer *w = NULL;
	struct kvt_posix posix;
	struct kvt_put_opts opts;
	const struct kvt_object *o;
	char *buf = NULL;
	uint64_t off = 0, have;
	int rc = kvt_reader_open(kv->st, bucket, key, &r);

	if (rc < 0)
		return rc;
	o = kvt_reader_object(r);
	if (o->size == size)
		goto out;	/* no new version for nothing */
	fh_visible_posix(kv, o, &posix);
	opts = (struct kvt_put_opts){
		.flags = KVT_PUT_KEEP_PIN,
		.content_type = o->content_type,
		.session = o->session,
		.meta = o->meta,
		.nmeta = o->nmeta,
		.posix = &posix,
	};
	buf = malloc(KVFS_IO_SIZE);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	rc = kvt_writer_open(kv->st, bucket, key, &opts, &w);
	have = MIN(size, o->size);
	while (rc == 0 && off < size) {
		size_t len = (size_t)MIN(KVFS_IO_SIZE, size - off);
		ssize_t n;

		if (off < have) {
			n = kvt_reader_pread(r, buf, (size_t)MIN(len, have - off), off);
			if (n <= 0) {
				rc = n < 0 ? (int)n : -EIO;
				break;
			}
			len = (size_t)n;
		} else {
			memset(buf, 0, len);	/* zero-extend */
		}
		rc = kvt_writer_write(w, buf, len);
		off += len;
	}
	if (rc == 0) {
		rc = kvt_writer_commit(w, NULL);
		w = NULL;
	}
out:
	kvt_writer_abort(w);
	kvt_reader_close(r);
	free(buf);
	return rc;
}

int kvfs_truncate_node(struct kvfs *kv, struct node *n, uint64_t size)
{
	char *bucket = NULL, *key = NULL, *name = NULL;
	fuse_ino_t pino = 0;
	int rc;

	/*
	 * Bytes still being written cannot be cut by name: the writer's close
	 * publishes what it wrote, and a truncate of the version before was
	 * lost under it without a word (a helper: 'truncate -s 20' answered 0
	 * and the file stayed 100000 bytes). ftruncate(2) of the writer's own
	 * descriptor cuts them.
	 */
	pthread_mutex_lock(&kv->lock);
	rc = n->pending || n->ndirty > 0 ? -EBUSY : 0;
	pthread_mutex_unlock(&kv->lock);
	if (rc < 0)
		return rc;
	/*
	 * A writer, for as long as it takes: the kernel cuts its page cache
	 * at the new size, which readers of the version before must not
	 * keep. A reader's RELEASE may still be on its way from the close(2)
	 * just before: then its size went in this reply, and stat(2) showed
	 * the old size for attr_timeout (fsx, "stat f1: size 121361,
	 * expected 0").
	 */
	rc = fh_writer_enter(kv, n, NULL, &pino, &name);
	if (rc == -ESTALE) {
		log_debug("'%s' gets a new inode: readers keep the version before a truncate",
			  name ? name : "?");
		if (name)
			kvfs_notify_inval_entry(kv, pino, name);
		free(name);
		return rc;
	}
	pthread_rwlock_rdlock(&kv->names);
	rc = node_path(kv, n, &bucket, &key);
	if (rc == 0)
		rc = truncate_key(kv, bucket, key, size);
	pthread_rwlock_unlock(&kv->names);
	if (rc == -ENODATA)
		log_err(rc, "cannot truncate '%s/%s': it is in the cold tier", bucket, key);
	pthread_mutex_lock(&kv->lock);
	fh_writer_leave_locked(n);
	pthread_mutex_unlock(&kv->lock);
	free(bucket);
	free(key);
	return rc;
}
