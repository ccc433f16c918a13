/*
 * kvtier.h - the public interface of libkvtier, the engine every kvtier
 * binary links.
 *
 * A store is one data directory: a SQLite catalog and a set of segment files
 * on local NVMe (the hot tier). Several processes may open the same store at
 * once; every rule below holds across processes, not only across threads.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure: -ENOENT (no such bucket or object), -EEXIST, -ENOSPC (the hot tier
 * is full of objects that must not be dropped), -EIO (a checksum mismatch or
 * a device error), -EINVAL (a bad argument), -ENAMETOOLONG (a key over
 * KVT_KEY_MAX bytes), -ENOTEMPTY (a bucket still holds objects).
 *
 * Handles are opaque. A handle is used by one thread at a time; the store
 * itself may be shared by any number of threads.
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define KVT_KEY_MAX 1024	/* bytes of UTF-8, as in S3 */
#define KVT_BUCKET_MIN 3
#define KVT_BUCKET_MAX 63
#define KVT_META_MAX 2048	/* bytes of user metadata, names plus values */
#define KVT_ETAG_MAX 48		/* "<32 hex>-<parts>" and quotes fit */

/* ---- configuration (config.c) ---------------------------------------- */

enum kvt_io_kind {
	KVT_IO_URING,		/* O_DIRECT through io_uring (default) */
	KVT_IO_SYNC,		/* pread/pwrite through the page cache */
};

/*
 * One kvtier.conf, shared by every binary. Each section is filled from its
 * [section] of the file; keys not in the file keep the defaults set by
 * kvt_config_init().
 */
struct kvt_config {
	char *path;			/* the file it was read from, or NULL */
	struct {
		char *dir;		/* data directory: catalog + segments */
		uint64_t capacity;	/* hot-tier bytes */
		uint64_t segment_size;
		double high_watermark;	/* reclaim starts above this fill */
		double low_watermark;	/* ... and stops below this one */
		enum kvt_io_kind io;
		unsigned session_depth;	/* leading key components naming a session */
		unsigned access_flush_ms; /* how often access times reach the catalog */
		uint64_t cached_read_max; /* extents up to this size are read through the page cache */
		uint64_t space_wait;	/* seconds a writer waits for the demoter to make room */
	} store;
	struct {
		char *listen;		/* "ADDR:PORT", "[::1]:PORT" */
		unsigned threads;	/* libmicrohttpd worker threads */
		char *credentials;	/* users file, owner-only; NULL: none */
		char *tls_cert;		/* PEM; NULL: plain HTTP */
		char *tls_key;
		char *metrics_listen;	/* NULL: /metrics on the S3 listener */
		char *region;		/* what GetBucketLocation answers, SigV4 scope */
		char *domain;		/* Host BUCKET.DOMAIN names a bucket */
		uint64_t timeout;	/* seconds before an idle connection closes; 0: never */
		unsigned max_connections;
		uint64_t max_object;	/* bytes of the largest single PUT */
		unsigned max_uploads;	/* open multipart uploads in all */
		unsigned max_uploads_per_bucket;
		uint64_t upload_max_age; /* seconds before an open upload is removed */
		char *access_log;	/* "-" stderr, "off", or a file */
	} gateway;
	struct {
		unsigned uid, gid;	/* owner of objects made without one (S3 side) */
		unsigned file_mode;	/* ... and their permission bits */
		unsigned dir_mode;	/* of directories, which are not objects */
		unsigned attr_timeout;	/* seconds the kernel may cache attributes */
		unsigned entry_timeout;	/* ... and names */
	} fuse;
	struct {
		char *url;		/* file:///DIR, s3://BUCKET/PREFIX or "none" (no cold
					 * tier: a cache node); NULL: file://<store.dir>/g4 */
		uint64_t idle;		/* seconds without access before a session is demoted */
		unsigned jobs;		/* transfers in parallel */
		uint64_t part_size;	/* multipart part size */
		char *endpoint;		/* S3: host[:port]; NULL: AWS */
		char *region;		/* S3: SigV4 scope */
		char *credentials;	/* S3: keys file, owner-only */
		char *ca_file;		/* S3: PEM CAs for the partner's TLS; NULL: the system's */
	} g4;
};

/*
 * Limits of [gateway] keys that kvtier-gateway's flags share with the file,
 * so that a value one accepts the other accepts too.
 */
#define KVT_GW_THREADS_MAX 1024
#define KVT_GW_CONNECTIONS_MAX 1000000
#define KVT_GW_TIMEOUT_MAX 100000		/* seconds */

/* Fill cfg with the embedded defaults. Release with kvt_config_release(). */
void kvt_config_init(struct kvt_config *cfg);
void kvt_config_release(struct kvt_config *cfg);

/*
 * Read path into cfg (already initialised). On failure returns a negative
 * errno and writes one line to err naming the path, the line and the key:
 * "kvtier.conf:12: unknown key 'capacty' in [store]".
 */
int kvt_config_load(struct kvt_config *cfg, const char *path, char *err, size_t errlen);

/*
 * What every binary calls at startup: loads path, or if it is NULL
 * $KVTIER_CONF, or if that is unset SYSCONFDIR/kvtier.conf if it exists;
 * with none of them cfg keeps its defaults and 0 is returned.
 */
int kvt_config_load_default(struct kvt_config *cfg, const char *path, char *err, size_t errlen);

/* Parse "64K", "256M", "4G", "1T" (powers of two) or a plain byte count. */
int kvt_parse_size(const char *s, uint64_t *out);

/*
 * Parse "90s", "15m", "24h", "7d" or plain seconds, at most
 * KVT_DURATION_MAX (-ERANGE past it): durations are used as nanoseconds in
 * 64 bits, where 200000d wrapped to a moment in the past.
 */
#define KVT_DURATION_MAX (36500ull * 86400)	/* 100 years */
int kvt_parse_duration(const char *s, uint64_t *seconds);

/*
 * Parse an address to listen on ([gateway] listen, metrics_listen, and
 * kvtier-gateway's flags): "ADDR:PORT" with a dotted-decimal IPv4 ADDR,
 * "[ADDR6]:PORT", ":PORT" or "PORT" (every IPv4 address); PORT is 0 (the
 * kernel picks one) to 65535. Fills ss and its length, or -EINVAL.
 */
int kvt_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len);

/* ---- logging (log.c) -------------------------------------------------- */

enum kvt_log_level { KVT_LOG_ERR, KVT_LOG_WARN, KVT_LOG_INFO, KVT_LOG_DEBUG };

/* Lines go to stderr as "kvtier: <level>: <message>[: <strerror>]". */
void kvt_log_set_level(enum kvt_log_level level);
void kvt_log_set_ident(const char *ident);
/*
 * From now on lines go to syslog(3) instead (facility daemon, the ident as
 * the tag, with the pid): for a daemon whose stderr goes nowhere.
 */
void kvt_log_to_syslog(void);

/* ---- store (store.c) -------------------------------------------------- */

struct kvt_store;

enum {
	KVT_OPEN_CREATE = 1 << 0,	/* create the data directory if new */
};

int kvt_store_open(const struct kvt_config *cfg, unsigned flags, struct kvt_store **out);
/* Flushes batched access times and closes. Accepts NULL. */
void kvt_store_close(struct kvt_store *st);

struct kvt_store_stat {
	uint64_t capacity;		/* bytes of hot tier */
	uint64_t segment_size;
	uint64_t segments;		/* total */
	uint64_t segments_free;
	uint64_t segments_open;		/* being appended to */
	uint64_t segments_sealed;
	uint64_t used_bytes;		/* bytes in segments that are not free */
	uint64_t live_bytes;		/* bytes of committed extents */
	uint64_t catalog_bytes;		/* catalog.db and its -wal */
	uint64_t disk_free_bytes;	/* what the file system under the store has left
					 * (for the catalog: segments are written whole) */
	uint64_t buckets;
	uint64_t objects;
	uint64_t object_bytes;		/* sum of object sizes */
	uint64_t sessions;
	uint64_t tier_count[4];		/* by enum kvt_tier */
	uint64_t pinned;		/* pinned by a client (kvt_object_pin, KVT_PUT_PIN) */
	/* Objects of internal buckets, not pinned themselves: multipart
	 * uploads in progress, the mount's parts of files being written.
	 * Reclaim keeps them as it keeps pinned ones. */
	uint64_t pinned_internal;
	uint64_t evicted_objects;	/* dropped by reclaim since init */
	uint64_t reclaimed_segments;	/* since init */
	uint64_t checksum_failures;	/* since init */
	uint64_t demoted_objects;	/* moved to G4 (marked cold) since init */
	uint64_t recalled_objects;	/* brought back from G4 since init */
	/* Group commit, this process since the store opened: catalog
	 * transactions that published writers' puts, the puts, the most in one. */
	uint64_t commit_groups, commit_puts, commit_largest;
	const char *io;			/* "uring" or "sync": what runs */
};

int kvt_store_stat(struct kvt_store *st, struct kvt_store_stat *out);

/*
 * 1 if the store is on a read-only file system: it was opened to be read,
 * and every write answers -EROFS.
 */
int kvt_store_readonly(const struct kvt_store *st);

/*
 * The store's identity: its random id, whose G4 manifests name their
 * owner, and the place recorded with it (the first 64 bits of
 * /etc/machine-id, the store directory's inode and birth time). A copy of
 * the directory (cp -a, a disk snapshot or VM image taken after the store
 * was made) keeps the id but not the place: such a store writes and
 * deletes nothing in G4 (-EREMCHG) until it is told whose the id is.
 */
struct kvt_store_place {
	uint64_t machine;	/* 0: no /etc/machine-id */
	uint64_t ino;
	int64_t btime_ns;	/* 0: the file system gives no birth time */
};

struct kvt_store_identity {
	uint64_t id;
	int recorded;			/* 0: no place recorded (a read-only store from before) */
	struct kvt_store_place was;	/* as recorded with the id */
	struct kvt_store_place here;	/* where the store is now */
	int matches;			/* here is was: G4 may be written */
};

int kvt_store_identity(struct kvt_store *st, struct kvt_store_identity *out);

enum kvt_identity_how {
	/* A copy: a new random id. What the old id owns in G4 stays the
	 * original's; this store's work left there under it (deleted keys'
	 * copies, uploads to abort) is forgotten, the original does it. */
	KVT_IDENTITY_NEW = 1,
	/* The same store moved (another disk or machine, restored from a
	 * backup after the original died): the id stays, here is recorded. */
	KVT_IDENTITY_KEEP = 2,
};

/* Records here with a new id or the old one; out (may be NULL) as after it. */
int kvt_store_identity_set(struct kvt_store *st, enum kvt_identity_how how,
			   struct kvt_store_identity *out);

/* The largest object the hot tier can ever hold: all the segments writers
 * may fill. A write past it answers -EFBIG. */
uint64_t kvt_store_object_max(const struct kvt_store *st);

/*
 * For a process shutting down: transfers with G4 still running grace_ms
 * from now end, and none starts after, as if the partner did not answer
 * (-EHOSTUNREACH: a recall fails and the object stays cold; a demotion
 * is left for the next run). A partner that stalls otherwise holds each
 * transfer for up to 30 s. The gateway and the mount give theirs
 * KVT_G4_STOP_GRACE_MS at SIGTERM.
 */
#define KVT_G4_STOP_GRACE_MS 5000
void kvt_store_stop_g4(struct kvt_store *st, unsigned grace_ms);

/*
 * 1 while writes find no room: the last one of this process that needed a
 * segment found none that reclaim could free (the hot tier full of pinned
 * objects, or of session state the partner does not take) and none is free
 * since. For /health: the gateway answers every PUT 503 SlowDown then.
 */
int kvt_store_writes_full(struct kvt_store *st);

/*
 * The open-file descriptors the store itself may hold: each segment twice
 * and 256 for the catalog, G4 and the I/O contexts. A daemon's own (its
 * connections, staged files, its threads' catalog connections) come on top.
 */
uint64_t kvt_store_nofile_want(const struct kvt_store *st);

/*
 * 1 while the file system under the catalog refuses writes: the last write
 * of this process found it full, none committed since, and it still has
 * less than 1 MiB free (one statvfs, nothing written to find out). The
 * gateway answers every PUT 503 SlowDown then.
 */
int kvt_store_disk_full(const struct kvt_store *st);

/*
 * 1 once this process met a damaged page of the store's catalog (every
 * query that meets one fails with -EUCLEAN): for /health and /metrics,
 * which must say so even when kvt_store_stat() itself fails on it.
 */
int kvt_store_catalog_damaged(const struct kvt_store *st);

/* Make everything committed so far durable against power loss. */
int kvt_store_sync(struct kvt_store *st);

/* Write batched access times to the catalog now. */
int kvt_store_flush_access(struct kvt_store *st);

/*
 * Free whole segments until the hot tier is below its low watermark (or to
 * free `need` segments, whichever is more). Writers call this themselves when
 * space runs short; it is public for the CLI and for tests.
 */
int kvt_store_reclaim(struct kvt_store *st, unsigned need);

/* ---- buckets (bucket.c) ----------------------------------------------- */

/* S3 bucket naming rules: 3-63 of [a-z0-9.-], starting and ending alnum. */
int kvt_bucket_name_valid(const char *name);
/*
 * Internal buckets, for the front ends' own bookkeeping (upload parts...):
 * a '.' and then [a-z0-9-]. No S3 or FUSE name can be one, and bucket
 * listings leave them out. Creating one that exists is not an error.
 */
int kvt_bucket_create_internal(struct kvt_store *st, const char *name);
int kvt_bucket_create(struct kvt_store *st, const char *name);	/* -EEXIST */
int kvt_bucket_delete(struct kvt_store *st, const char *name);	/* -ENOTEMPTY */
int kvt_bucket_exists(struct kvt_store *st, const char *name);	/* 0 or -ENOENT */

/* Calls fn for each bucket in name order; a non-zero return stops the walk. */
int kvt_bucket_list(struct kvt_store *st,
		    int (*fn)(void *arg, const char *name, int64_t ctime_ns),
		    void *arg);

/* ---- objects (object.c, writer.c, reader.c) --------------------------- */

enum kvt_tier {
	KVT_TIER_HOT,		/* extents on NVMe */
	KVT_TIER_DEMOTING,	/* being copied to G4, still hot */
	KVT_TIER_COLD,		/* only in G4 */
	KVT_TIER_RECALLING,	/* being copied back from G4 */
};

const char *kvt_tier_name(enum kvt_tier tier);

/* What an object is in the FUSE view. */
enum kvt_kind {
	KVT_KIND_FILE,		/* bytes */
	KVT_KIND_SYMLINK,	/* the bytes are the link's target */
	KVT_KIND_DIR,		/* an empty directory's marker, key "dir/" */
};

/* POSIX metadata kept per object for the FUSE view (mtime is the object's). */
struct kvt_posix {
	uint32_t mode;		/* permission bits and file type bits */
	uint32_t uid, gid;
	int64_t atime_ns, ctime_ns;
	enum kvt_kind kind;
};

/*
 * One user metadata pair (x-amz-meta-NAME: VALUE); NAME in lower case. A
 * NAME that begins with ':' is a front end's own record (the gateway's
 * stored headers, a multipart object's part layout; no x-amz-meta- name
 * can hold a ':'), kept and copied like the others but not user metadata:
 * it does not count against KVT_META_MAX.
 */
struct kvt_meta {
	char *name;
	char *value;
};

struct kvt_object {
	char *bucket;
	char *key;
	uint64_t size;
	char etag[KVT_ETAG_MAX];	/* quoted, as S3 sends it */
	uint32_t crc32c;		/* of the whole object */
	int64_t mtime_ns;
	char *content_type;		/* NULL if none was given */
	char *session;
	enum kvt_tier tier;
	int pinned;
	size_t nmeta;
	struct kvt_meta *meta;
	struct kvt_posix posix;
};

/* Accepts NULL. */
void kvt_object_free(struct kvt_object *obj);
/* Frees n entries' names and values, then the array itself. Accepts NULL. */
void kvt_meta_free(struct kvt_meta *meta, size_t n);

/* Keys: 1..KVT_KEY_MAX bytes of valid UTF-8 without NUL. */
int kvt_key_valid(const char *key);

enum {
	KVT_PUT_IF_NONE_MATCH = 1 << 0,	/* -EEXIST if the key exists */
	KVT_PUT_PIN = 1 << 1,		/* never dropped by reclaim */
	KVT_PUT_MD5_ETAG = 1 << 2,	/* ETag = MD5 of the bytes, as S3 does */
	/*
	 * Pinned if the version this one replaces is pinned, read in the
	 * commit's own transaction: a file rewritten through the mount keeps
	 * its pin (as a file keeps its xattrs), with no moment unpinned and
	 * without losing a pin set by another process while it was written.
	 */
	KVT_PUT_KEEP_PIN = 1 << 3,
};

struct kvt_put_opts {
	unsigned flags;
	const char *content_type;	/* NULL: none */
	const char *session;		/* NULL: from the key's leading components; else
					 * UTF-8 of 1 to KVT_KEY_MAX bytes, as a key */
	const char *etag;		/* NULL: computed (see KVT_PUT_MD5_ETAG) */
	const struct kvt_meta *meta;
	size_t nmeta;
	int64_t mtime_ns;		/* 0: now */
	const struct kvt_posix *posix;	/* NULL: a plain file, 0644, owner 0 */
	/*
	 * The size the object will have, if known (0: not known). More than
	 * the hot tier can ever hold is -EFBIG at once: such a write, left to
	 * fail at its end, first had every object that could go dropped or
	 * demoted to make room. Writes past that size fail -EFBIG all the same.
	 */
	uint64_t size;
	/*
	 * A conditional write (S3's If-Match / If-None-Match): if not NULL,
	 * called inside the commit's catalog transaction with the ETag of the
	 * key's current version (NULL: there is none); a non-zero return (a
	 * negative errno) cancels the commit, which returns it. Check and
	 * publish are one transaction, so no other writer can come between.
	 * It runs under the catalog's write lock: compare, never call the engine.
	 * Writers that commit at once share a transaction (group commit), so
	 * it may run in another thread of the process while this writer's
	 * kvt_writer_commit() waits.
	 */
	int (*precondition)(void *arg, const char *etag);
	void *precondition_arg;
};

/*
 * Streaming writer. Bytes go to the hot tier as they are written; the object
 * becomes visible, to every process at once, only when commit returns 0. A
 * writer that is aborted, fails, or whose process dies leaves nothing
 * visible and its space is reclaimed.
 */
struct kvt_writer;

int kvt_writer_open(struct kvt_store *st, const char *bucket, const char *key,
		    const struct kvt_put_opts *opts, struct kvt_writer **out);
int kvt_writer_write(struct kvt_writer *w, const void *buf, size_t len);
/* Publishes the object; fills *info if info is not NULL. Frees w. */
int kvt_writer_commit(struct kvt_writer *w, struct kvt_object **info);
/*
 * As kvt_writer_commit(), but under bucket/key with opts, whatever the
 * writer was opened with: for a writer that learns where its bytes belong
 * only when they are all written (a file renamed while open, its mode
 * changed). -EINVAL for KVT_PUT_MD5_ETAG in opts, which needed the bytes
 * from the start. Frees w, whatever it returns.
 */
int kvt_writer_commit_as(struct kvt_writer *w, const char *bucket, const char *key,
			 const struct kvt_put_opts *opts, struct kvt_object **info);
/* Drops what was written. Frees w. Accepts NULL. */
void kvt_writer_abort(struct kvt_writer *w);

/*
 * Reader over one version of an object: the version current at open keeps
 * reading back byte-exact even if the key is overwritten meanwhile, until
 * reclaim takes its space (then -ESTALE). Every byte returned has had its
 * extent's checksum verified; a mismatch returns -EIO.
 */
struct kvt_reader;

int kvt_reader_open(struct kvt_store *st, const char *bucket, const char *key,
		    struct kvt_reader **out);
/*
 * As kvt_reader_open(), but never recalls: -EAGAIN when the object is only in
 * G4 (or being recalled). For callers that must not block on G4 where they
 * are (an HTTP polling thread) and hand the open to a worker instead.
 */
int kvt_reader_open_hot(struct kvt_store *st, const char *bucket, const char *key,
			struct kvt_reader **out);
/* The object's description; owned by the reader. */
const struct kvt_object *kvt_reader_object(const struct kvt_reader *r);
/*
 * Asks reclaim, in every process of the store, to free other segments
 * before those that hold this version, until the reader is closed: a
 * reader that stays open while the key is replaced (a KV block read while
 * another worker rewrites it) keeps its bytes for as long as reclaim finds
 * other victims, rather than losing them first (a replaced version's
 * segments are empty, and reclaim takes empty ones first). Costs a lock
 * system call per segment that no other reader of this process holds; 0
 * or -errno (the reader still reads, unheld).
 */
int kvt_reader_hold(struct kvt_reader *r);
/* Drops the holds (a reader the caller keeps open but no longer reads). */
void kvt_reader_unhold(struct kvt_reader *r);
/*
 * Reads up to len bytes at off; returns the count (0 at the end) or -errno.
 * Several threads may read (and map) through one reader at once.
 */
ssize_t kvt_reader_pread(struct kvt_reader *r, void *buf, size_t len, uint64_t off);
/* Accepts NULL. */
void kvt_reader_close(struct kvt_reader *r);

/*
 * The bytes [off, off + len) of the reader's version, clipped to its size,
 * as iovecs into the segment files' page cache, for a sender that passes
 * them to the kernel without a copy (sendmsg). Every extent under the range
 * has had its header, generation and checksum checked in place, and its
 * segments stay pinned (never rewritten, in any process) until
 * kvt_map_free(), which any thread may call; the map outlives the reader.
 * -ESTALE and -EIO as kvt_reader_pread(); -ENOTSUP when a segment cannot
 * be mapped (read with kvt_reader_pread() instead). Hold it no longer than
 * the send: a pinned segment cannot be reused by writers.
 */
struct kvt_map;

int kvt_reader_map(struct kvt_reader *r, uint64_t off, size_t len, struct kvt_map **out);
/*
 * As kvt_reader_map(), but the bytes are read from the device (as
 * kvt_reader_pread() reads them) into the engine's I/O buffers, which the
 * map holds: nothing is pinned and any segment will do. -E2BIG when the
 * range spans more extents than there are buffers (4); read it in pieces
 * or with kvt_reader_pread().
 */
int kvt_reader_pread_map(struct kvt_reader *r, uint64_t off, size_t len, struct kvt_map **out);
/* The iovecs, in object order; owned by the map. */
const struct iovec *kvt_map_iov(const struct kvt_map *m, unsigned *niov);
/* Unpins, or gives the buffers back. Accepts NULL. */
void kvt_map_free(struct kvt_map *m);

int kvt_object_head(struct kvt_store *st, const char *bucket, const char *key,
		    struct kvt_object **out);
/*
 * What a file system finds under a name, in one read of the catalog: the
 * object key itself, else the first object whose key starts with "key/" (a
 * directory's marker "key/", or any key below it; (*out)->key tells which).
 * -ENOENT if there is neither.
 */
int kvt_object_head_name(struct kvt_store *st, const char *bucket, const char *key,
			 struct kvt_object **out);

/* What a batch lookup says of one key. */
struct kvt_key_state {
	int found;		/* 0: no such object, or not a valid key */
	enum kvt_tier tier;
	uint64_t size;
};

/*
 * The state of keys[0..n) of bucket as of one instant (an inference
 * engine's lookup of a prompt's blocks before prefill): one read
 * transaction, one prepared statement stepped n times, nothing written and
 * no access time touched. -ENOENT if the bucket does not exist.
 */
int kvt_object_lookup_many(struct kvt_store *st, const char *bucket, const char *const *keys,
			   size_t n, struct kvt_key_state *out);
int kvt_object_delete(struct kvt_store *st, const char *bucket, const char *key);
/*
 * A delete with a condition (S3's If-Match): precondition(arg, etag) is
 * called inside the delete's catalog transaction with the ETag of the key's
 * current version; a non-zero return (a negative errno) keeps the object
 * and is returned. -ENOENT, without a call, when the key holds nothing.
 */
int kvt_object_delete_if(struct kvt_store *st, const char *bucket, const char *key,
			 int (*precondition)(void *arg, const char *etag), void *arg);

/* Copies bytes and, when opts is NULL, the source's metadata and session. */
int kvt_object_copy(struct kvt_store *st, const char *src_bucket, const char *src_key,
		    const char *dst_bucket, const char *dst_key,
		    const struct kvt_put_opts *opts, struct kvt_object **info);

/*
 * Makes bucket/key from the objects part_keys[0..nparts) of parts_bucket,
 * concatenated in that order, without copying a byte: their extents become
 * the new object's and the parts disappear (S3's CompleteMultipartUpload).
 * The CRC32C is combined from the parts'; the ETag is opts->etag if given.
 *
 * part_etags (NULL: any part will do) names the parts by content as well:
 * part i must have the ETag part_etags[i], compared byte for byte, in the
 * version whose extents the compose takes. A part re-uploaded since its
 * caller looked at it is -ESTALE and nothing changes (S3's InvalidPart);
 * -ENOENT when a part is gone. A part replaced meanwhile by one with the
 * same ETag is taken, after a retry; -EAGAIN if the parts keep changing.
 */
int kvt_object_compose(struct kvt_store *st, const char *bucket, const char *key,
		       const char *parts_bucket, const char *const *part_keys,
		       const char *const *part_etags, size_t nparts,
		       const struct kvt_put_opts *opts, struct kvt_object **info);

/* Which fields kvt_object_setattr() changes; ctime always becomes now. */
enum {
	KVT_ATTR_MODE = 1 << 0,
	KVT_ATTR_UID = 1 << 1,
	KVT_ATTR_GID = 1 << 2,
	KVT_ATTR_ATIME = 1 << 3,
	KVT_ATTR_MTIME = 1 << 4,
};

int kvt_object_setattr(struct kvt_store *st, const char *bucket, const char *key, unsigned mask,
		       const struct kvt_posix *posix, int64_t mtime_ns);

/* The session key gives ([store] session_depth), as a put without one names;
 * caller frees. NULL: out of memory. */
char *kvt_key_session(struct kvt_store *st, const char *key);

/*
 * Moves the object to another session (and touches that session); NULL: to
 * the one its key gives ([store] session_depth), as a put without one.
 */
int kvt_object_set_session(struct kvt_store *st, const char *bucket, const char *key,
			   const char *session);

enum {
	KVT_RENAME_NOREPLACE = 1 << 0,	/* -EEXIST if `to` exists */
	KVT_RENAME_PREFIX = 1 << 1,	/* every key under `from` moves under `to` */
};

/*
 * Renames within a bucket in one transaction, never copying a byte: an
 * existing `to` is replaced atomically (readers see the old or the new
 * object). With KVT_RENAME_PREFIX (a directory: both end in '/'), every key
 * under `from` moves; `to` may hold nothing but its own marker (-ENOTEMPTY).
 */
int kvt_object_rename(struct kvt_store *st, const char *bucket, const char *from, const char *to,
		      unsigned flags);

/* Sets or clears the pin of an object. */
int kvt_object_pin(struct kvt_store *st, const char *bucket, const char *key, int pinned);

/*
 * Listing in key order (UTF-8 byte order, as S3). With a delimiter, keys that
 * contain it after the prefix are rolled up into common prefixes.
 */
struct kvt_list_opts {
	const char *prefix;		/* NULL or "" for all */
	const char *delimiter;		/* NULL for none */
	const char *start_after;	/* NULL: from the start */
	const char *continuation;	/* token from a previous page, or NULL */
	unsigned limit;			/* entries (objects + prefixes) per page; 0 allowed */
};

struct kvt_list {
	size_t nobjects;
	struct kvt_object **objects;
	size_t nprefixes;
	char **prefixes;
	int truncated;
	char *next_continuation;	/* opaque, set when truncated */
	char *next_marker;		/* last key or prefix returned */
};

int kvt_object_list(struct kvt_store *st, const char *bucket,
		    const struct kvt_list_opts *opts, struct kvt_list **out);
/* Accepts NULL. */
void kvt_list_free(struct kvt_list *list);

/* ---- G4, the cold tier (migrate.c) ------------------------------------ */

/*
 * Demotion moves idle sessions to G4 ([g4] url): each object is uploaded,
 * verified (size and CRC32C read back), the session's manifest written,
 * then the object marked cold and its hot extents freed. Every step is
 * persisted in the catalog: a process killed at any point loses nothing and
 * the next kvt_g4_demote() finishes the work without duplicates. Pinned
 * objects stay hot. Reading a cold object (kvt_reader_open) recalls it.
 * A recall the partner does not answer is -EHOSTUNREACH; one whose bucket
 * the partner does not have ([g4] url names one deleted, or misnamed)
 * -ENXIO. Either way the object stays cold and intact, for a later try.
 * Sessions are named "BUCKET" + "SESSION" as the catalog keeps them.
 */
struct kvt_g4_opts {
	uint64_t idle;		/* seconds without access; ignored with session */
	const char *bucket;	/* with session: that one session, idle or not */
	const char *session;
	int dry_run;		/* count what would move, move nothing */
	unsigned jobs;		/* sessions (objects, for a recall) in parallel, and
				 * objects of a session if sessions are fewer; 0: 1 */
	uint64_t limit_rate;	/* bytes/s to and from G4 in all, 0: no limit */
	unsigned retries;	/* more tries of a transfer the partner failed with
				 * 500, 503 or no answer, with exponential backoff */
	/* If not NULL: once *stop is non-zero the run starts no other object
	 * and no retry (what is in flight finishes); a daemon's shutdown. */
	const int *stop;
	/* Called for each object moved (or that would be), if not NULL; one
	 * call at a time, from any of the jobs' threads. */
	void (*progress)(void *arg, const char *bucket, const char *key, uint64_t size, int rc);
	void *arg;
};

struct kvt_g4_report {
	uint64_t sessions;	/* with at least one object moved */
	uint64_t objects;
	uint64_t bytes;
	uint64_t failures;	/* objects left for the next run */
};

/* Demotes; 0 (see rep->failures) or a negative errno for the whole run. */
int kvt_g4_demote(struct kvt_store *st, const struct kvt_g4_opts *opts, struct kvt_g4_report *rep);
/* Recalls every cold object of a session (prestage). -ENOENT: this store
 * has no such bucket (a session of another node's: import it first). */
int kvt_g4_recall_session(struct kvt_store *st, const char *bucket, const char *session,
			  const struct kvt_g4_opts *opts, struct kvt_g4_report *rep);
/* Makes the session of G4's manifest known here, its objects cold; keys
 * this store already has are left alone. -ENOENT: no such manifest. */
int kvt_g4_import_session(struct kvt_store *st, const char *bucket, const char *session,
			  const struct kvt_g4_opts *opts, struct kvt_g4_report *rep);
/* Recalls the cold objects named "BUCKET/KEY", n of them (prestage of a
 * list); those not cold are left alone. */
int kvt_g4_recall_keys(struct kvt_store *st, const char *const *keys, size_t n,
		       const struct kvt_g4_opts *opts, struct kvt_g4_report *rep);
/* Brings one cold object back; 0 if it is hot already. */
int kvt_object_recall(struct kvt_store *st, const char *bucket, const char *key);
/* Where G4 holds the copy of the object's version: its name under [g4] url
 * (*name, caller frees), as a manifest's g4_key gives it. -ENOENT if there
 * is no such object, or G4 holds no copy of its version. */
int kvt_object_g4_name(struct kvt_store *st, const char *bucket, const char *key, char **name);
/* Removes what interrupted uploads of this host left in G4, and the copies
 * of what was deleted here; opts->retries (NULL: none) more tries of the
 * listing of multipart uploads that the partner failed with 500, 503 or no
 * answer. What it could not remove (left for the next run) is counted in
 * rep->failures, if rep is not NULL; it does not fail the call. With
 * opts->dry_run it only opens G4, and removes nothing. */
int kvt_g4_cleanup(struct kvt_store *st, const struct kvt_g4_opts *opts,
		   struct kvt_g4_report *rep);

/* ---- checking (fsck.c) ------------------------------------------------ */

struct kvt_fsck_report {
	uint64_t objects_checked;
	uint64_t extents_checked;
	uint64_t bytes_checked;
	uint64_t checksum_errors;	/* extent payload does not match its CRC */
	uint64_t header_errors;		/* extent header does not name its object */
	uint64_t catalog_errors;	/* extents out of bounds, overlaps, bad accounting */
	uint64_t repaired;		/* objects removed or accounting fixed */
	uint64_t unrepairable;		/* of the errors, those no repair here mends
					 * (overlapping extents, a damaged segments.map) */
};

enum { KVT_FSCK_REPAIR = 1 << 0 };

/*
 * Checks the catalog against the segment files and every checksum. With
 * KVT_FSCK_REPAIR, objects whose bytes are damaged are removed (they would
 * only ever read as -EIO) and segment accounting is rewritten. Safe beside
 * live writers and reclaim in any process: what one catalog snapshot shows
 * wrong is checked again against the catalog as it is now, and only what is
 * still wrong is reported (logged) and repaired (fsck.c). Returns 0 when
 * the store is clean (or was repaired), 1 when problems remain, or a
 * negative errno: -EUCLEAN when the catalog itself is damaged (SQLite's
 * finding logged), which no repair here can mend.
 */
int kvt_store_fsck(struct kvt_store *st, unsigned flags, struct kvt_fsck_report *rep);

/* ---- checksums (util.c) ----------------------------------------------- */

/*
 * Words for an operator, for the errnos (negative) the engine gives a
 * meaning of its own: -EUCLEAN (the catalog is damaged), -ESTALE (the
 * object was reclaimed while it was read), -ENOSPC (the hot tier or the
 * disk under the store is full), -EIO (an I/O or checksum error), -ENXIO
 * (the partner has no bucket of [g4] url); strerror for the rest.
 */
const char *kvt_strerror(int rc);

/* CRC32C (Castagnoli) as S3's x-amz-checksum-crc32c: crc = 0 to start. */
uint32_t kvt_crc32c(uint32_t crc, const void *buf, size_t len);
/* CRC32C of A || B given crc(A), crc(B) and the length of B. */
uint32_t kvt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif /* KVTIER_H */
