/*
 * kvfs.h - kvtier-fuse's private interface, shared by its modules:
 *
 *   kvtier_fuse.c  command line, mount, the session loop, signals
 *   node.c         node_: the inode table, fuse_ino_t <-> (bucket, key)
 *   attr.c         kvfs_attr_: what the store says about a name, as struct stat
 *   file.c         fh_: open files, staging of writes, atomic publish on close
 *   dir.c          dh_: directory handles and paged listings
 *   ops.c          op_: the FUSE low-level operations table
 *   xattr.c        kvfs_xattr_: names and values of the user.kvtier.* attributes
 *   notify.c       kvfs_notify_: kernel cache invalidations, from a thread
 *
 * The mount shows /<bucket>/<key>: the root lists buckets, '/' in a key makes
 * directories. A directory is a key prefix; an empty one made by mkdir is a
 * zero-byte object "dir/" of kind KVT_KIND_DIR (S3 lists it as a prefix).
 *
 * Only src/kvtier.h and src/log.h are used from the engine.
 */
#ifndef KVFS_H
#define KVFS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvtier.h"

#define KVFS_NAME_MAX 255		/* bytes of one path component */
#define KVFS_IO_SIZE (1024 * 1024)	/* max_write, max_readahead, copy chunk */
#define KVFS_LINK_MAX 4095		/* bytes of a symbolic link's target */
/*
 * st_blksize: what cp, stdio and Python size their buffers by. Not
 * KVFS_IO_SIZE: cp allocates its buffer afresh for every file, and on a
 * virtual machine first touches of 1 MiB cost more than the round trips
 * saved (cp -r of 2 MiB files: 330 MB/s out, 350 in at 1 MiB; 700 and
 * 520 at 128 KiB). Reads still reach the daemon 1 MiB at a time
 * (readahead); writes of 128 KiB are as many WRITE requests.
 */
#define KVFS_BLKSIZE (128 * 1024)

/*
 * The payload of one hot-tier extent and of one checksummed chunk of it
 * (SEG_PAYLOAD_MAX and SEG_CHUNK in src/segment.h, which front ends may not
 * include). The engine reads and verifies whole chunks, so a read aligned
 * to chunks reads nothing it does not return; other reads of part of an
 * extent go through an extent-sized window of the handle, so that small or
 * unaligned reads do not each cost a chunk or more. Were the engine to
 * change them, only efficiency would suffer, never correctness.
 */
#define KVFS_EXTENT_PAYLOAD (1024 * 1024)
#define KVFS_CHUNK (64 * 1024)
#define KVFS_PUSH_MAX (4 * 1024 * 1024)	/* files read whole at their first READ */
#define KVFS_LOOP_THREADS 10	/* libfuse's max_threads when none is given */
#define KVFS_SPARE_MAX 16	/* idle read buffers kept, KVFS_IO_SIZE each */

/*
 * The internal bucket holding this mount's stream parts: a file written
 * sequentially streams into a writer opened for a part there, and close
 * commits that writer under the file's name (kvt_writer_commit_as()), so
 * the part itself is committed only when the stream must be read back
 * (fh_stage). Parts are keyed "<owner>/<n>"; the owner id is locked in the staging
 * directory while the daemon lives, so the next daemon can remove the parts
 * of a dead one (kvfs_parts_sweep).
 */
#define KVFS_PARTS_BUCKET ".fuse"

enum node_type { NODE_ROOT, NODE_BUCKET, NODE_DIR, NODE_FILE, NODE_SYMLINK };

/* Attribute changes (chmod, chown, utimens) made while a file is open for
 * writing, carried into the versions its handles publish. */
struct node_pend {
	unsigned mask;		/* KVT_ATTR_* */
	struct kvt_posix posix;
	int64_t mtime_ns;
};

/*
 * One inode. Names are a tree: a node holds its parent and its name, so a
 * directory rename moves every descendant at once. All fields are guarded by
 * kvfs.lock. A node lives while the kernel remembers it (nlookup) or
 * anything in the daemon holds it (refs: children, handles, callers).
 */
struct node {
	fuse_ino_t ino;
	struct node *parent;
	char *name;
	enum node_type type;
	uint64_t nlookup;
	unsigned refs;
	int hashed;		/* reachable by (parent, name) */
	int unlinked;		/* removed: open handles must not publish */
	int pending;		/* created here and not yet published */
	unsigned nopen;		/* handles open */
	unsigned nwriters;	/* ... of them for writing */
	unsigned nclosed;	/* ... of those, closed by their writer: their
				 * RELEASE is on its way */
	struct timespec wclosed_wait;	/* readers wait for it until then */
	unsigned ndirty;	/* ... holding bytes not yet published */
	uint64_t wsize;		/* size of the newest dirty content */
	int64_t wmtime;		/* ... and when it last changed */
	uint64_t cseq;		/* kvfs.cseq when this daemon last changed it */
	struct kvt_posix cposix; /* a pending file's POSIX metadata */
	char *psession;		/* user.kvtier.session set while open for writing
				 * ("": removed, the key's own) */
	int ppin;		/* user.kvtier.pin set while open for writing:
				 * 1 pin, -1 unpin, 0 keep the pin of the version replaced */
	struct node_pend pend;
	char etag[KVT_ETAG_MAX]; /* version the kernel page cache holds; "" unknown */
	/*
	 * The kernel keeps one size and one page cache per inode ("One
	 * version per inode" in file.c): read-only handles open through the
	 * page cache, all of version etag and size csize; what the kernel was
	 * last told the size is (-1: unknown, a writer moves it; see wshared);
	 * writers waiting for those handles to close; and, for a directory, until when
	 * opens of its files stay off the page cache (a name just given a new
	 * inode for a writer). All read-only handles, cached or not, read
	 * version rtag: a private mmap goes through the page cache even on a
	 * direct-I/O handle.
	 */
	unsigned ncache;
	unsigned nreaders;
	char rtag[KVT_ETAG_MAX];
	uint64_t csize;
	int64_t ksize;
	int wshared;		/* two writers were open at once since nwriters
				 * was last 0: the kernel's size is no one's */
	unsigned wwait;
	int64_t nocache_until;
	char *nocache_name;	/* ... for that name alone; NULL: every name */
	int64_t dmtime;		/* a directory: when a name in it was last made,
				 * removed or renamed here (kvfs_dir_touch) */
	struct stat last;	/* attributes last reported, for fstat after unlink */
	int has_last;
	struct node *ino_next, *name_next;
};

struct kvfs {
	struct kvt_config cfg;
	struct kvt_store *st;
	struct fuse_session *se;
	char *staging;			/* directory of staging temp files */
	/*
	 * The staging directory, the owner id and its lock: made at start, or,
	 * on a disk too full to make them then, by the first write that needs
	 * them (kvfs_staging_ready). Set once, before staging_ready.
	 */
	pthread_mutex_t staging_lock;
	atomic_int staging_ready;
	atomic_int staging_said;	/* a deferral was logged since the last success */
	int staging_fd;
	int owner_fd;			/* holds the lock on our parts owner id */
	char owner[17];			/* hex id of this daemon's parts */
	atomic_uint_fast64_t part_seq;
	unsigned max_streams;		/* writers streaming at once */
	atomic_uint active_streams;
	uint64_t staged_max;		/* staging files open at once (kvfs_staging_limit) */
	atomic_uint_fast64_t staged;
	atomic_int staged_said;		/* the refusal was logged */
	atomic_uint prestaging;		/* prestage threads still running */
	atomic_size_t buffered;		/* bytes of small files held in memory */
	pthread_mutex_t spare_lock;	/* read buffers kept for reuse (kvfs_iobuf_new) */
	char *spare[KVFS_SPARE_MAX];
	unsigned nspare;
	double attr_timeout, entry_timeout;
	int64_t start_ns;
	unsigned push_max;		/* fh_read_push at once: under half the loop's threads */
	atomic_uint pushing;

	pthread_mutex_t notify_lock;	/* notify.c */
	pthread_cond_t notify_cond;
	struct notice *notices;
	pthread_t notifier;
	int notify_running, notify_stop;

	pthread_mutex_t lock;		/* the node table */
	pthread_cond_t cache_cond;	/* a node's ncache fell to 0, or a writer left */
	/*
	 * Names in use against names changing. Whoever turns a node into its
	 * key and then writes under that key (a publish, truncate or chmod by
	 * name) holds it shared until the store has the change; rename,
	 * unlink and rmdir hold it exclusive across the store's change and the
	 * table's, so that a publish never lands under a name the file left
	 * a moment before (which left the new name without it). Taken before
	 * kvfs.lock, never while holding it.
	 */
	pthread_rwlock_t names;
	struct node **by_ino, **by_name;
	size_t nbuckets, count;
	fuse_ino_t next_ino;
	struct node root;
	struct fh *open_fhs;		/* every open file handle, under lock */
	uint64_t cseq;			/* counts changes made here (node.cseq) */
};

/* ---- node.c --------------------------------------------------------------- */

int node_table_init(struct kvfs *kv);
void node_table_release(struct kvfs *kv);
/* The node of ino with a reference the caller drops with node_put(), or NULL. */
struct node *node_get(struct kvfs *kv, fuse_ino_t ino);
void node_put(struct kvfs *kv, struct node *n);
void node_put_locked(struct kvfs *kv, struct node *n);
/*
 * The hashed child `name` of parent of the given type, made if missing (a
 * child of another type is unhashed and replaced), with its lookup count
 * raised by one for the entry about to be replied and a reference for the
 * caller. NULL when out of memory.
 */
struct node *node_link(struct kvfs *kv, struct node *parent, const char *name,
		       enum node_type type);
/* The hashed child or NULL; with a reference. */
struct node *node_child(struct kvfs *kv, struct node *parent, const char *name);
void node_forget(struct kvfs *kv, fuse_ino_t ino, uint64_t nlookup);
/* Lowers a lookup count raised for an entry that was not sent. */
void node_unlink_lookup(struct kvfs *kv, struct node *n);
/* Detaches the child `name` (removed or replaced); marks it unlinked. */
void node_unhash(struct kvfs *kv, struct node *parent, const char *name);
/* Detaches n itself, whatever now holds its name; kvfs.lock held. */
void node_detach_locked(struct kvfs *kv, struct node *n);
/*
 * Gives n's name to the next lookup as a new inode, n keeping its open
 * handles (not unlinked: its object stays); kvfs.lock held.
 */
void node_supersede_locked(struct kvfs *kv, struct node *n);
/*
 * Keeps opens of dir's file name off the page cache until `until` (its
 * name just went to a new inode for a writer: fh_writer_enter); two names
 * at once keep every name of dir off. node_nocache: whether that holds for
 * n now. kvfs.lock held.
 */
void node_nocache_locked(struct node *dir, const char *name, int64_t until);
int node_nocache(const struct node *n, int64_t now);
/*
 * The attributes about to be sent to the kernel for n: while handles read
 * it through the page cache the size is theirs, whatever the store holds
 * now; and remembers the size the kernel is told. A directory's times are
 * those of its last change here (kvfs_dir_times()).
 */
void node_attr_reply(struct kvfs *kv, struct node *n, struct stat *st);
/* Notes that this daemon changed n's content or attributes; kvfs.lock held. */
void node_changed_locked(struct kvfs *kv, struct node *n);
/* kvfs.cseq now: listings remember when they read the store. */
uint64_t node_cseq(struct kvfs *kv);
/*
 * 1 if attributes read from the store at cseq may still be given to the
 * kernel for the child `name` of parent: no node, or one that nobody here
 * has written, is writing or has changed since.
 */
int node_attr_fresh(struct kvfs *kv, struct node *parent, const char *name, uint64_t cseq);
/* 1 if a file being created here (pending) lies anywhere under dir. */
int node_pending_under(struct kvfs *kv, struct node *dir);
/* Moves the child `name` to newparent/newname, detaching what was there. */
void node_move(struct kvfs *kv, struct node *parent, const char *name,
	       struct node *newparent, const char *newname);
/*
 * The bucket and key of n: key is "" for a bucket, "a/b" for the directory
 * or file a/b. Caller frees both. -ENOENT for a node that was removed,
 * -ENAMETOOLONG past KVT_KEY_MAX.
 */
int node_path(struct kvfs *kv, struct node *n, char **bucket, char **key);
/*
 * The bucket and key of the name n had when it lost it (unlinked, renamed
 * over, superseded), in its directory as that is now: what an open or a
 * stat that reached n after that finds under the name it looked up.
 * -ENOENT if the directory lost its name too.
 */
int node_path_name(struct kvfs *kv, struct node *n, char **bucket, char **key);

/* ---- attr.c --------------------------------------------------------------- */

struct kvfs_stat {
	enum node_type type;
	struct stat st;
	char etag[KVT_ETAG_MAX];
	int has_marker;		/* a directory with its own "dir/" object */
};

int64_t kvfs_now_ns(void);
/* "dir" + "/" + "name", or "name" when dir is "". */
char *kvfs_join(const char *dir, const char *name);
/* The key of name in directory node parent; checks lengths and encoding. */
int kvfs_child_key(struct kvfs *kv, struct node *parent, const char *name, char **bucket,
		   char **key);
void kvfs_attr_object(struct kvfs *kv, const struct kvt_object *o, struct stat *st);
void kvfs_attr_dir(struct kvfs *kv, const struct kvt_object *marker, struct stat *st);
/* What bucket/key is: a file or symlink (an object), a directory (a marker
 * or keys under "key/"), or -ENOENT. key "" is the bucket itself. */
int kvfs_stat_key(struct kvfs *kv, const char *bucket, const char *key, struct kvfs_stat *out);
/* Attributes of a node, including the size of bytes still being written;
 * -ESTALE when the node lost its name (reply ESTALE as is: the VFS looks
 * the path up again). */
int kvfs_stat_node(struct kvfs *kv, struct node *n, struct kvfs_stat *out);
/* Is the directory bucket/key (key "" for the bucket) empty? 1, 0, -errno. */
int kvfs_dir_empty(struct kvfs *kv, const char *bucket, const char *key);
/* Publishes the empty object key (a directory marker "dir/", mknod). */
int kvfs_put_empty(struct kvfs *kv, const char *bucket, const char *key,
		   const struct kvt_put_opts *opts);
/* After the last entry left directory key: keep it with a marker. */
void kvfs_dir_keep(struct kvfs *kv, const char *bucket, const char *key);
/* An entry was made, removed or renamed in directory dir: mtime, ctime now. */
void kvfs_dir_touch(struct kvfs *kv, struct node *dir);
/* st, the attributes of directory dir, with the times kvfs_dir_touch() set. */
void kvfs_dir_times(struct kvfs *kv, struct node *dir, struct stat *st);
/* The POSIX metadata a new object of this type gets for the caller of req. */
void kvfs_posix_new(const struct fuse_ctx *ctx, enum kvt_kind kind, mode_t mode,
		    struct kvt_posix *p);
/* Engine errno to a FUSE reply errno; the one place they are mapped. */
int kvfs_errno(int rc);

/* ---- file.c --------------------------------------------------------------- */

struct fh;
struct fh_win;

/* opener: the thread that asked (fuse_req_ctx()->pid), 0 if unknown.
 * fh_open's -ESTALE: the kernel's name is out of date; reply ESTALE as is
 * (the VFS then looks the path up again), not through kvfs_errno(). */
int fh_open(struct kvfs *kv, struct node *n, int flags, pid_t opener, struct fuse_file_info *fi);
int fh_create(struct kvfs *kv, struct node *n, int flags, pid_t opener,
	      const struct kvt_posix *posix, struct fuse_file_info *fi);
/*
 * A read of a read-only handle in which every extent is read in part (a
 * read that starts or ends inside an extent, such as those of a program
 * reading in pieces through a direct-I/O handle) as iovecs into the
 * handle's extent windows, which stay held until fh_reply_done(), and so
 * is the handle (its release waits): the reply needs no copy of its own.
 * The byte count, or -EAGAIN where fh_read_map() or fh_read() is to read
 * instead (whole extents, whole chunks no window holds, a small read at
 * random, a writable handle, a window not to be had without waiting);
 * with -errno no window is held, but the handle is: call fh_reply_done()
 * once the reply is sent, always.
 */
#define FH_REPLY_MAX 3	/* extents a read of max_read (1 MiB) can touch */
struct fh_reply {
	struct iovec iov[FH_REPLY_MAX];
	struct fh_win *win[FH_REPLY_MAX];
	unsigned n;
	struct kvt_map *map;	/* or the bytes are held here (fh_read_map) */
	int held;	/* the handle stays open until fh_reply_done() */
	int push;	/* fh_read_push: iov (no windows) is the reply, map the version */
};
ssize_t fh_read_windows(struct kvfs *kv, struct fh *h, size_t size, off_t off,
			struct fh_reply *rp);
/*
 * After fh_read_windows() answered -EAGAIN: the read left in the engine's
 * I/O buffers (kvt_reader_pread_map), held in rp->map until
 * fh_reply_done(), so the reply needs no copy of its own either: the
 * kernel's 1 MiB reads at 1 MiB offsets (one extent each) and its smaller
 * readahead of whole chunks. The byte count, or -EAGAIN where fh_read() is
 * to read instead (a writable handle, a read over more extents than the
 * engine holds at once, any error, which fh_read() meets again, reports
 * and handles).
 */
ssize_t fh_read_map(struct fh *h, size_t size, off_t off, struct fh_reply *rp);
/*
 * After fh_read_windows() answered -EAGAIN, before fh_read_map(): the first
 * small READ of a small file read through the page cache reads the first
 * extent and rp->iov answers the READ from it; after the reply,
 * fh_read_push_rest() (answered: the reply reached the kernel) stores the
 * rest of the file in the page cache. -EAGAIN where this does not apply
 * (see "Whole small files pushed" in file.c).
 */
ssize_t fh_read_push(struct kvfs *kv, struct fh *h, size_t size, off_t off, struct fh_reply *rp);
void fh_read_push_rest(struct kvfs *kv, struct fh *h, struct fh_reply *rp, int answered);
void fh_reply_done(struct fh *h, struct fh_reply *rp);
ssize_t fh_read(struct kvfs *kv, struct fh *h, char *buf, size_t size, off_t off);
/* A read buffer of size bytes, an idle one if size is at most KVFS_IO_SIZE
 * and there is one; back with kvfs_iobuf_free() and the same size, which
 * keeps up to KVFS_SPARE_MAX of them. */
char *kvfs_iobuf_new(struct kvfs *kv, size_t size);
void kvfs_iobuf_free(struct kvfs *kv, char *buf, size_t size);
/* owner: the lock owner (descriptor table) of the writer, 0 if unknown. */
ssize_t fh_write(struct kvfs *kv, struct fh *h, const char *buf, size_t size, off_t off,
		 uint64_t owner);
/* A close(2) by lock owner `owner`, thread pid: publishes if it is the
 * writer's (see "Who closes" in file.c). */
int fh_flush(struct kvfs *kv, struct fh *h, uint64_t owner, pid_t pid);
int fh_fsync(struct kvfs *kv, struct fh *h);
int fh_truncate(struct kvfs *kv, struct fh *h, uint64_t size);
/*
 * 1 if an open with these flags changes the file: it asks to write, or it
 * truncates (Linux truncates on O_RDONLY|O_TRUNC too, once the kernel has
 * checked write permission). Such a handle publishes at close.
 */
int fh_flags_write(int flags);
int fh_writable(const struct fh *h);
void fh_release(struct kvfs *kv, struct fh *h);
/* Releases a handle the kernel never got (its reply failed): publishes
 * nothing, not even the empty file of a create or an O_TRUNC. */
void fh_discard(struct kvfs *kv, struct fh *h);
/*
 * Releases the handles whose RELEASE the kernel never delivered: a close(2)
 * just before SIGTERM queues one that the stopped loop no longer reads. Run
 * once the loop has ended, while the store is still open.
 */
void fh_release_orphans(struct kvfs *kv);
/*
 * truncate(2) by name, of a file no handle here truncates: a new version.
 * -ESTALE when readers keep n's version: n loses its name, and the kernel
 * looks it up again and truncates the new inode. -EBUSY while a create
 * here has not published the file yet.
 */
int kvfs_truncate_node(struct kvfs *kv, struct node *n, uint64_t size);
int kvfs_parts_init(struct kvfs *kv);
/* 0 once the staging directory and the owner lock are there, made now if
 * the disk had no room for them at start; else -ENOSPC (or what failed). */
int kvfs_staging_ready(struct kvfs *kv);
void kvfs_parts_release(struct kvfs *kv);
void kvfs_staging_limit(struct kvfs *kv, unsigned threads);

/* ---- dir.c ---------------------------------------------------------------- */

struct dh;

int dh_open(struct kvfs *kv, struct node *n, struct dh **out);
void dh_readdir(struct kvfs *kv, fuse_req_t req, struct dh *d, size_t size, off_t off, int plus);
void dh_release(struct kvfs *kv, struct dh *d);
/*
 * For a directory that is not empty yet lists nothing: the first key (or
 * prefix "x//") under bucket/key that no name here reaches, if one page of
 * its listing shows only such; else NULL. Caller frees.
 */
char *dh_hidden_key(struct kvfs *kv, const char *bucket, const char *key);

/* ---- notify.c -------------------------------------------------------------- */

int kvfs_notify_start(struct kvfs *kv);
void kvfs_notify_stop(struct kvfs *kv);
/* Queues "forget parent/name" for the kernel. */
void kvfs_notify_inval_entry(struct kvfs *kv, fuse_ino_t parent, const char *name);
/* Makes the kernel drop its attributes of ino, and ignore replies already
 * on their way, at once (not queued); ENOENT (not cached) is no error. */
void kvfs_notify_inval_attr(struct kvfs *kv, fuse_ino_t ino);

/* ---- xattr.c -------------------------------------------------------------- */

#define XATTR_TIER "user.kvtier.tier"
#define XATTR_SESSION "user.kvtier.session"
#define XATTR_ETAG "user.kvtier.etag"
#define XATTR_CHECKSUM "user.kvtier.checksum"
#define XATTR_PIN "user.kvtier.pin"
#define XATTR_PRESTAGE "user.kvtier.prestage"

enum kvfs_xattr {
	KVFS_XATTR_FOREIGN,	/* outside user.*: no labels or ACLs here */
	KVFS_XATTR_USER,	/* user.* but not user.kvtier.*: not kept here */
	KVFS_XATTR_UNKNOWN,	/* user.kvtier.* that is none of the below */
	KVFS_XATTR_TIER,
	KVFS_XATTR_SESSION,
	KVFS_XATTR_ETAG,
	KVFS_XATTR_CHECKSUM,
	KVFS_XATTR_PIN,
	KVFS_XATTR_PRESTAGE,
};

/* What an attribute name is. */
enum kvfs_xattr kvfs_xattr_name(const char *name);
/*
 * A value of user.kvtier.session (size bytes, not NUL-terminated): 0 with
 * *session a new string the caller frees; -EINVAL for none, more than
 * KVT_KEY_MAX bytes or a NUL among them, -EILSEQ if not UTF-8, -ENOMEM.
 */
int kvfs_xattr_session(const char *value, size_t size, char **session);
/* A value of user.kvtier.pin: "1" (*pin 1) or "0" (*pin 0); else -EINVAL. */
int kvfs_xattr_pin(const char *value, size_t size, int *pin);

/* ---- ops.c ---------------------------------------------------------------- */

extern const struct fuse_lowlevel_ops kvfs_ops;

/* Waits for background prestages (ops.c) before the store closes. */
void kvfs_prestage_wait(struct kvfs *kv);

#endif /* KVFS_H */
