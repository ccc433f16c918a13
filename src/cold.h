/*
 * cold.h - the cold tier (G4): a partner object store behind a table of
 * function pointers, as the hot tier's I/O is behind io.h.
 *
 * Implementations: a local directory (cold_file.c, `file:///DIR`, the
 * embedded default), a partner S3 bucket (cold_s3.c, `s3://BUCKET/PREFIX`,
 * libcurl with SigV4) and a fault injector that wraps another
 * (cold_fault.c, for tests).
 *
 * Keys are G4 keys, S3 style: the name migrate.c gives an object's copy
 * (".kvtier/stores/STORE/BUCKET/KEY~VID"; "BUCKET/KEY" before), and
 * COLD_MANIFEST_PREFIX "BUCKET/SESSION.json" for a session's manifest
 * (COLD_MANIFEST_HASHED "BUCKET/HEX.json" where that is too long for it).
 * A put is atomic: a reader sees the whole new object or the old one (or
 * none), never a part; so re-running an interrupted put leaves no
 * duplicate. Every function returns 0 or a negative errno: -ENOENT (no such
 * key), -EIO (the partner failed), -EAGAIN (the partner answered 500 or 503:
 * retry later), -EHOSTUNREACH (no answer: refused, dropped, timed out),
 * -ENXIO (the partner has no bucket of that name: [g4] url names
 * one deleted, or misnamed; every request fails so until it is there).
 *
 * A G4 key never leaves the tier: each implementation maps it to its own
 * names injectively, with "." and ".." components, empty components ("a//b")
 * and its escape character encoded (cold_file_name(), cold_s3_key()), so
 * "a/../b", "a/b" and "a//b" are three objects inside the tier and none
 * climbs out of DIR or PREFIX.
 */
#ifndef KVT_COLD_H
#define KVT_COLD_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "log.h"

/* cold_ops.put_if's match for a key that must not exist yet. */
#define COLD_ABSENT ""

/* Where manifests live: no bucket name starts with '.'. Those of sessions
 * whose name there the partner cannot hold go under their SHA-256, in
 * COLD_MANIFEST_HASHED "BUCKET/HEX.json" (migrate.c, g4_manifest_key()):
 * no bucket name has a '_'. */
#define COLD_MANIFEST_PREFIX ".kvtier/manifests/"
#define COLD_MANIFEST_HASHED COLD_MANIFEST_PREFIX "_sha256/"

struct cold;

/* What a put tells of the stored object. */
struct cold_put_info {
	char etag[KVT_ETAG_MAX];	/* what the partner calls it, quoted */
	/* 1: the partner's answer proves it stored exactly the bytes pulled
	 * from the source (S3: its ETag is the MD5 of what was sent, or for a
	 * multipart upload the MD5 of the parts' MD5s "-N"; file: every byte
	 * written and fsynced). 0: nothing to compare (an ETag that is no MD5,
	 * as with SSE-KMS); the caller reads the object back to verify it. */
	int verified;
};

/*
 * Multipart uploads in flight, recorded by the caller (the catalog) so that
 * a process killed half way leaves nothing for ever: begin() before the
 * first part (a failure aborts the upload), end() once it is completed or
 * aborted. A later run hands what is left to cold_abort_upload(). pkey is
 * the partner's own key, as cold_abort_upload() takes it back.
 */
struct cold_journal {
	int (*begin)(void *arg, const char *url, const char *pkey, const char *upload_id);
	void (*end)(void *arg, const char *upload_id);
	void *arg;
};

/* Pulls len bytes at off of what is being put into buf; 0 or -errno. */
typedef int (*cold_source_fn)(void *arg, void *buf, size_t len, uint64_t off);
/* Takes the next len bytes of what is being got; 0 or -errno (stops the get). */
typedef int (*cold_sink_fn)(void *arg, const void *buf, size_t len);

struct cold_ops {
	const char *name;	/* "file", "fault", "s3" */
	/* Stores size bytes pulled from src as key, pulled once and in order;
	 * info (may be NULL) says what the partner answered. -EIO when the
	 * partner's ETag contradicts what was sent. */
	int (*put)(struct cold *c, const char *key, uint64_t size, const char *content_type,
		   cold_source_fn src, void *arg, struct cold_put_info *info);
	/* Streams key into sink; *size is the object's size. */
	int (*get)(struct cold *c, const char *key, cold_sink_fn sink, void *arg, uint64_t *size);
	/* As get, and etag (KVT_ETAG_MAX bytes) gets the ETag of the bytes
	 * streamed, as put_if compares it (S3: the GET's ETag as the partner
	 * answered it; file: their CRC32C and size), or "" when there is
	 * none to compare (S3: the bytes came from an old client's name for
	 * key, or the partner sent no ETag). NULL with put_if. */
	int (*get_etag)(struct cold *c, const char *key, cold_sink_fn sink, void *arg,
			uint64_t *size, char *etag);
	/* As put, but only while key holds what the caller read: the ETag
	 * match that get_etag answered (S3 If-Match), or no object at all
	 * when match is COLD_ABSENT (If-None-Match: *). -ECANCELED when key
	 * holds something else, or nothing (S3: 412 PreconditionFailed, or
	 * 404 NoSuchKey for If-Match): nothing was written; read it again
	 * (S3's 404 NoSuchBucket is -ENXIO: no read will help). -EAGAIN for
	 * S3's 409 ConditionalRequestConflict (a concurrent write to the
	 * key): retry. NULL where the tier cannot (cold_put_if(): -EOPNOTSUPP).
	 * A partner that ignores the headers writes anyway: the caller cannot
	 * tell (kvtier-migrate(8)). */
	int (*put_if)(struct cold *c, const char *key, const char *match, uint64_t size,
		      const char *content_type, cold_source_fn src, void *arg,
		      struct cold_put_info *info);
	/* *size is the object's size; etag (may be NULL, KVT_ETAG_MAX bytes)
	 * gets, quoted, an ETag that changes whenever the bytes do, as put
	 * answered it (S3: an MD5 or a multipart "MD5-N"), or "" when the tier
	 * has none (file; S3 with SSE-KMS): then only a read proves them. */
	int (*head)(struct cold *c, const char *key, uint64_t *size, char *etag);
	int (*del)(struct cold *c, const char *key);
	/* As del, but only while key holds what the caller read: the ETag
	 * match that get_etag answered (S3 DELETE with If-Match). -ECANCELED
	 * when key holds something else, or nothing: nothing was deleted;
	 * read it again. -EAGAIN for S3's 409 ConditionalRequestConflict.
	 * -EOPNOTSUPP where the tier, or the partner, cannot (S3: it answered
	 * 501 or 400 to the header; asked no more in this process). A partner
	 * that ignores the header deletes anyway: the caller cannot tell
	 * (kvtier-migrate(8)). */
	int (*del_if)(struct cold *c, const char *key, const char *match);
	/* Drops what interrupted puts of this host left behind (stale
	 * multipart uploads, temporary files); called under the migrate lock. */
	int (*cleanup)(struct cold *c);
	/* Aborts the multipart upload upload_id of the partner key pkey (as
	 * the journal recorded them); -ENOENT if the partner knows none, NULL
	 * where puts are not multipart. */
	int (*abort_upload)(struct cold *c, const char *pkey, const char *upload_id);
	/* 1 if the partner can hold an object named key, 0 if the name is too
	 * long for it (S3: more than 1024 bytes with the prefix, or a component
	 * over 255; a directory: a component over NAME_MAX, or the path over
	 * PATH_MAX, once encoded). NULL: any name. */
	int (*key_fits)(struct cold *c, const char *key);
	/* Hands the journal on to a wrapped tier; NULL where nothing is wrapped. */
	void (*set_journal)(struct cold *c, const struct cold_journal *j);
	void (*free)(struct cold *c);
};

struct cold {
	const struct cold_ops *ops;
	char *url;
	struct cold_journal journal;	/* all NULL: not recorded */
	int64_t stop_ns;	/* atomic; cold_stop_at(), 0: never */
	/* A recall's "the bucket does not exist" (migrate.c, recall_fetch):
	 * once a minute, with the count of those left out. */
	struct log_limit recall_no_bucket;
	struct log_limit recall_no_answer;	/* ... and its "does not answer" */
	/* A manifest read's, and a demotion under pressure's, failures for a
	 * partner that does not answer or lacks its bucket: reclaim meets
	 * them at each pass, every second while the hot tier is full. */
	struct log_limit manifest_no_answer;
	struct log_limit pressure_refused;
};

/* [g4] as cold_new() takes it. */
struct cold_opts {
	const char *url;	/* NULL: file://<store_dir>/g4 */
	const char *endpoint;	/* S3: "[http[s]://]HOST[:PORT]", NULL: AWS */
	const char *region;	/* S3: SigV4 scope; NULL: us-east-1 */
	const char *credentials;	/* S3: keys file, owner-only */
	const char *ca_file;	/* S3: PEM of the CAs to trust; NULL: the system's */
	const char *store_dir;
	uint64_t part_size;	/* S3: larger objects go multipart; 0: 8 MiB */
	unsigned jobs;		/* S3: parts of one object in parallel; 0: 4 */
};

/*
 * A cold tier from [g4]: url "file:///DIR" or "s3://BUCKET/PREFIX" (with
 * endpoint and credentials). NULL url means file://<store_dir>/g4; "none"
 * (COLD_URL_NONE) means this node has no cold tier: -ENODEV, and reclaim
 * drops what it must free. -EINVAL for a url it cannot parse, -ENOTSUP for
 * a scheme this build lacks. Free with cold_free().
 */
#define COLD_URL_NONE "none"
int cold_new(const struct cold_opts *o, struct cold **out);
/* Accepts NULL. */
void cold_free(struct cold *c);
/* Records c's multipart uploads in j from now on; set before the first put. */
void cold_set_journal(struct cold *c, const struct cold_journal *j);
/*
 * For a process shutting down: transfers with the partner still running at
 * util_mono_ns() deadline end, and none starts after, with -EHOSTUNREACH as
 * for a partner that does not answer (a recall's reader gets 503 or EIO;
 * what was demoting stays for the next run). The S3 tier honours it within
 * a second; a local directory has nothing to wait for.
 */
void cold_stop_at(struct cold *c, int64_t deadline);
/* 1 once cold_stop_at()'s deadline has passed. */
int cold_stopped(const struct cold *c);

int cold_file_new(const char *dir, struct cold **out);
/* o->url "s3://BUCKET/PREFIX". */
int cold_s3_new(const struct cold_opts *o, struct cold **out);

/* The partner key of G4 key `key` under prefix (may be ""): components
 * "." -> "%2E", ".." -> "%2E%2E", "" -> "%" (but a trailing '/' stays:
 * "a/" is a directory marker), '%' -> "%25"; every other byte as it is,
 * so ordinary keys keep their names. Caller frees. */
char *cold_s3_key(const char *prefix, const char *key);
/* The file name of `key` under dir (cold_file.c's layout). Caller frees. */
char *cold_file_name(const char *dir, const char *key);
/* 1 if no '/'-separated component of name is longer than max bytes. */
int cold_components_fit(const char *name, size_t max);

/* Faults for tests: counts of the next operations to fail, or to corrupt.
 * Counters change with atomic operations, so the plan may sit in memory
 * that several threads, or processes (MAP_SHARED), share. */
struct cold_fault_plan {
	unsigned fail_puts;	/* the next N puts fail with err */
	unsigned fail_gets;	/* the next N gets fail with err */
	unsigned corrupt_gets;	/* the next N gets flip one bit of the first byte */
	unsigned short_puts;	/* the next N puts store one byte less, and succeed */
	unsigned drop_puts;	/* the next N puts send half, then fail with err */
	unsigned drop_gets;	/* the next N gets deliver half, then fail with err */
	unsigned unverified_puts;	/* the next N puts answer info->verified = 0 */
	unsigned fail_heads;	/* the next N heads fail with err */
	unsigned fail_cleanups;	/* the next N cleanups (its listing) fail with err */
	unsigned fail_aborts;	/* the next N aborts of a multipart upload fail with err */
	unsigned stall_ms;	/* every put and get waits this long first */
	unsigned hold;		/* 1: ... and every put then until it is 0 again (30 s at most) */
	unsigned etag_heads;	/* 1: heads answer an ETag of the bytes held (as S3's MD5) */
	unsigned exit_after_put;	/* 1: the next put is stored, then _exit(COLD_FAULT_EXIT) */
	/* Not 0: a partner whose names are at most this many bytes: key_fits
	 * answers 0 for a longer one, and puts and gets of it fail with
	 * -ENAMETOOLONG (as a directory does). */
	size_t key_max;
	/* Called (if set) with the key as each put or put_if reaches the
	 * inner tier: another writer lands there, after the caller's last
	 * read and before its write (one process only: a pointer). */
	void (*before_put)(void *arg, const char *key);
	void *before_put_arg;
	/* The same for each del or del_if: another writer lands after the
	 * caller's last read and before its delete. */
	void (*before_del)(void *arg, const char *key);
	void *before_del_arg;
	int err;		/* negative errno; -EIO if 0 */
	/* "": the faults above are for every key; else only for the keys of
	 * puts, gets and heads that start with it (a string, not a pointer:
	 * the plan may be shared between processes). */
	char only[256];
	unsigned puts, gets;	/* counted: operations that reached the injector */
	unsigned stalled, max_stalled;	/* counted: operations stalling at once, now and at most */
};

#define COLD_FAULT_EXIT 86

/* Wraps inner (takes ownership); plan stays the caller's and may change. */
int cold_fault_new(struct cold *inner, struct cold_fault_plan *plan, struct cold **out);

static inline int cold_put(struct cold *c, const char *key, uint64_t size, const char *ctype,
			   cold_source_fn src, void *arg, struct cold_put_info *info)
{
	return c->ops->put(c, key, size, ctype, src, arg, info);
}

static inline int cold_get(struct cold *c, const char *key, cold_sink_fn sink, void *arg,
			   uint64_t *size)
{
	return c->ops->get(c, key, sink, arg, size);
}

/* cold_ops.get_etag; a tier without it streams as get and answers "" (no
 * ETag: cold_put_if() is -EOPNOTSUPP there anyway). */
static inline int cold_get_etag(struct cold *c, const char *key, cold_sink_fn sink, void *arg,
				uint64_t *size, char *etag)
{
	if (c->ops->get_etag)
		return c->ops->get_etag(c, key, sink, arg, size, etag);
	etag[0] = '\0';
	return c->ops->get(c, key, sink, arg, size);
}

/* cold_ops.put_if, or -EOPNOTSUPP where the tier has none. */
static inline int cold_put_if(struct cold *c, const char *key, const char *match, uint64_t size,
			      const char *ctype, cold_source_fn src, void *arg,
			      struct cold_put_info *info)
{
	if (!c->ops->put_if)
		return -EOPNOTSUPP;
	return c->ops->put_if(c, key, match, size, ctype, src, arg, info);
}

static inline int cold_head(struct cold *c, const char *key, uint64_t *size)
{
	return c->ops->head(c, key, size, NULL);
}

/* cold_head() and the ETag of what the partner holds, or "" (cold_ops.head). */
static inline int cold_head_etag(struct cold *c, const char *key, uint64_t *size, char *etag)
{
	return c->ops->head(c, key, size, etag);
}

static inline int cold_del(struct cold *c, const char *key)
{
	return c->ops->del(c, key);
}

/* cold_ops.del_if, or -EOPNOTSUPP where the tier has none. */
static inline int cold_del_if(struct cold *c, const char *key, const char *match)
{
	return c->ops->del_if ? c->ops->del_if(c, key, match) : -EOPNOTSUPP;
}

static inline int cold_cleanup(struct cold *c)
{
	return c->ops->cleanup ? c->ops->cleanup(c) : 0;
}

static inline int cold_key_fits(struct cold *c, const char *key)
{
	return c->ops->key_fits ? c->ops->key_fits(c, key) : 1;
}

static inline int cold_abort_upload(struct cold *c, const char *pkey, const char *upload_id)
{
	return c->ops->abort_upload ? c->ops->abort_upload(c, pkey, upload_id) : -EOPNOTSUPP;
}

/* Puts/gets a small object held in memory (manifests). *buf: caller frees. */
int cold_put_buf(struct cold *c, const char *key, const void *buf, size_t len,
		 const char *content_type);
int cold_get_buf(struct cold *c, const char *key, size_t max, char **buf, size_t *len);
/* The same through put_if and get_etag (etag: KVT_ETAG_MAX bytes). */
int cold_put_buf_if(struct cold *c, const char *key, const char *match, const void *buf,
		    size_t len, const char *content_type);
int cold_get_buf_etag(struct cold *c, const char *key, size_t max, char **buf, size_t *len,
		      char *etag);

#endif /* KVT_COLD_H */
