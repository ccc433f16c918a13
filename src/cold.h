/*
 * cold.h - the cold tier (G4): a partner object store behind a table of
 * function pointers, as the hot tier's I/O is behind io.h.
 *
 * Implementations: a local directory (cold_file.c, `file:///DIR`, the
 * embedded default) and a fault injector that wraps another (cold_fault.c,
 * for tests). Partner S3 (`s3://BUCKET/PREFIX`) plugs in the same way.
 *
 * Keys are G4 keys, S3 style: "BUCKET/KEY" for an object, and
 * COLD_MANIFEST_PREFIX "BUCKET/SESSION.json" for a session's manifest.
 * A put is atomic: a reader sees the whole new object or the old one (or
 * none), never a part; so re-running an interrupted put leaves no
 * duplicate. Every function returns 0 or a negative errno: -ENOENT (no such
 * key), -EIO (the partner failed), -EAGAIN (the partner answered 500 or 503:
 * retry later), -EHOSTUNREACH (no answer: refused, dropped, timed out).
 */
#ifndef KVT_COLD_H
#define KVT_COLD_H

#include <stddef.h>
#include <stdint.h>

/* Where manifests live: no bucket name starts with '.'. */
#define COLD_MANIFEST_PREFIX ".kvtier/manifests/"

struct cold;

/* Pulls len bytes at off of what is being put into buf; 0 or -errno. */
typedef int (*cold_source_fn)(void *arg, void *buf, size_t len, uint64_t off);
/* Takes the next len bytes of what is being got; 0 or -errno (stops the get). */
typedef int (*cold_sink_fn)(void *arg, const void *buf, size_t len);

struct cold_ops {
	const char *name;	/* "file", "fault", "s3" */
	/* Stores size bytes pulled from src as key; etag (KVT_ETAG_MAX) gets
	 * what the partner calls the stored object, quoted. */
	int (*put)(struct cold *c, const char *key, uint64_t size, const char *content_type,
		   cold_source_fn src, void *arg, char *etag);
	/* Streams key into sink; *size is the object's size. */
	int (*get)(struct cold *c, const char *key, cold_sink_fn sink, void *arg, uint64_t *size);
	int (*head)(struct cold *c, const char *key, uint64_t *size);
	int (*del)(struct cold *c, const char *key);
	/* Drops what interrupted puts of this host left behind (stale
	 * multipart uploads, temporary files); called under the migrate lock. */
	int (*cleanup)(struct cold *c);
	void (*free)(struct cold *c);
};

struct cold {
	const struct cold_ops *ops;
	char *url;
};

/*
 * A cold tier from [g4]: url "file:///DIR" or "s3://BUCKET/PREFIX" (with
 * endpoint and credentials). NULL url means file://<store_dir>/g4; "none"
 * (COLD_URL_NONE) means this node has no cold tier: -ENODEV, and reclaim
 * drops what it must free. -EINVAL for a url it cannot parse, -ENOTSUP for
 * a scheme this build lacks. Free with cold_free().
 */
#define COLD_URL_NONE "none"
int cold_new(const char *url, const char *endpoint, const char *credentials,
	     const char *store_dir, struct cold **out);
/* Accepts NULL. */
void cold_free(struct cold *c);

int cold_file_new(const char *dir, struct cold **out);
/* url "s3://BUCKET/PREFIX"; endpoint "[http[s]://]HOST[:PORT]" or NULL (AWS). */
int cold_s3_new(const char *url, const char *endpoint, const char *credentials,
		struct cold **out);

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
	unsigned stall_ms;	/* every put and get waits this long first */
	int err;		/* negative errno; -EIO if 0 */
	unsigned puts, gets;	/* counted: operations that reached the injector */
};

/* Wraps inner (takes ownership); plan stays the caller's and may change. */
int cold_fault_new(struct cold *inner, struct cold_fault_plan *plan, struct cold **out);

static inline int cold_put(struct cold *c, const char *key, uint64_t size, const char *ctype,
			   cold_source_fn src, void *arg, char *etag)
{
	return c->ops->put(c, key, size, ctype, src, arg, etag);
}

static inline int cold_get(struct cold *c, const char *key, cold_sink_fn sink, void *arg,
			   uint64_t *size)
{
	return c->ops->get(c, key, sink, arg, size);
}

static inline int cold_head(struct cold *c, const char *key, uint64_t *size)
{
	return c->ops->head(c, key, size);
}

static inline int cold_del(struct cold *c, const char *key)
{
	return c->ops->del(c, key);
}

static inline int cold_cleanup(struct cold *c)
{
	return c->ops->cleanup ? c->ops->cleanup(c) : 0;
}

/* Puts/gets a small object held in memory (manifests). *buf: caller frees. */
int cold_put_buf(struct cold *c, const char *key, const void *buf, size_t len,
		 const char *content_type);
int cold_get_buf(struct cold *c, const char *key, size_t max, char **buf, size_t *len);

#endif /* KVT_COLD_H */
