/*
 * cold_fault.c - a cold tier that fails on purpose, for tests: it wraps a
 * real one and, as its plan says, fails the next puts or gets with an
 * errno (a partner answering 500 or 503, unreachable), drops them half
 * way, stalls every one (a slow partner; recalls that overlap), stores a
 * put short while reporting success (a partner that lies), or flips a bit
 * of what a get returns (damage in transit). Verification upstream must
 * catch the last two; nothing may be lost through any of them. It can
 * also answer heads with an ETag that follows the bytes, as S3's MD5 does
 * and the file tier cannot (cold.h, cold_ops.head), or end the process
 * right after a put is stored (a kill -9 between a put and its record),
 * and hold names no longer than a limit of its own (key_max).
 * Conditional puts pass through to the wrapped tier with the same faults,
 * conditional deletes as they are; before_put and before_del let a test
 * land another writer just before a put or a delete. With plan->only set,
 * only keys that start with it meet the faults (one session's copies, or
 * its manifest: a partner that fails for one session and answers others).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cold.h"

struct cold_fault {
	struct cold base;
	struct cold *inner;
	struct cold_fault_plan *plan;
};

static int cfa_err(const struct cold_fault_plan *p)
{
	int err = __atomic_load_n(&p->err, __ATOMIC_SEQ_CST);

	return err ? err : -EIO;
}

/* Whether key meets the plan's faults (cold_fault_plan.only). */
static int cfa_targets(const struct cold_fault_plan *p, const char *key)
{
	return strncmp(key, p->only, strnlen(p->only, sizeof(p->only))) == 0;
}

/* Takes one from *n if it is not 0: whether this operation is one of them. */
static int cfa_take(unsigned *n)
{
	unsigned v = __atomic_load_n(n, __ATOMIC_SEQ_CST);

	while (v > 0)
		if (__atomic_compare_exchange_n(n, &v, v - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return 1;
	return 0;
}

/* A partner that is slow to answer (a put held while p->hold is set);
 * counts the operations it holds at once. */
static void cfa_stall(struct cold_fault_plan *p, int put)
{
	unsigned ms = __atomic_load_n(&p->stall_ms, __ATOMIC_SEQ_CST);
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	unsigned now, max;

	if (!ms)
		return;
	now = __atomic_add_fetch(&p->stalled, 1, __ATOMIC_SEQ_CST);
	max = __atomic_load_n(&p->max_stalled, __ATOMIC_SEQ_CST);
	while (now > max &&
	       !__atomic_compare_exchange_n(&p->max_stalled, &max, now, 0, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST))
		;
	nanosleep(&ts, NULL);
	for (unsigned i = 0; put && i < 30000 && __atomic_load_n(&p->hold, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	__atomic_sub_fetch(&p->stalled, 1, __ATOMIC_SEQ_CST);
}

/* A connection that drops half way: the source is read (or the sink fed)
 * up to half of the object, then the transfer fails. */
struct drop_src {
	cold_source_fn src;
	void *arg;
	uint64_t half;
	int err;
};

static int cfa_drop_source(void *arg, void *buf, size_t len, uint64_t off)
{
	struct drop_src *d = arg;

	if (off + len > d->half)
		return d->err;
	return d->src(d->arg, buf, len, off);
}

struct drop_sink {
	cold_sink_fn sink;
	void *arg;
	uint64_t half, got;
	int err;
};

static int cfa_drop_sink(void *arg, const void *buf, size_t len)
{
	struct drop_sink *d = arg;
	size_t n = d->got + len > d->half ? (size_t)(d->half - d->got) : len;
	int rc = n ? d->sink(d->arg, buf, n) : 0;

	d->got += n;
	return rc < 0 ? rc : n < len ? d->err : 0;
}

/* A name longer than the partner's names may be (plan->key_max). */
static int cfa_too_long(const struct cold_fault_plan *p, const char *key)
{
	return p->key_max && strlen(key) > p->key_max;
}

/* A put, or a put_if when match is not NULL. */
static int cfa_put_inner(struct cold_fault *f, const char *key, const char *match, uint64_t size,
			 const char *ctype, cold_source_fn src, void *arg,
			 struct cold_put_info *info)
{
	struct cold_fault_plan *p = f->plan;
	int rc;

	if (p->before_put)
		p->before_put(p->before_put_arg, key);
	rc = match ? cold_put_if(f->inner, key, match, size, ctype, src, arg, info) :
		     cold_put(f->inner, key, size, ctype, src, arg, info);
	if (rc == 0 && cfa_take(&p->exit_after_put))
		_exit(COLD_FAULT_EXIT);	/* killed before the caller hears of it */
	if (rc == 0 && info && cfa_take(&p->unverified_puts))
		info->verified = 0;	/* a partner whose ETag is no MD5 */
	return rc;
}

static int cfa_put_any(struct cold *c, const char *key, const char *match, uint64_t size,
		       const char *ctype, cold_source_fn src, void *arg,
		       struct cold_put_info *info)
{
	struct cold_fault *f = (struct cold_fault *)c;
	struct cold_fault_plan *p = f->plan;

	__atomic_add_fetch(&p->puts, 1, __ATOMIC_SEQ_CST);
	if (!cfa_targets(p, key))
		return cfa_put_inner(f, key, match, size, ctype, src, arg, info);
	cfa_stall(p, 1);
	if (cfa_too_long(p, key))
		return -ENAMETOOLONG;
	if (cfa_take(&p->fail_puts))
		return cfa_err(p);
	if (size > 0 && cfa_take(&p->short_puts))
		return cfa_put_inner(f, key, match, size - 1, ctype, src, arg, info);
	if (size > 0 && cfa_take(&p->drop_puts)) {
		struct drop_src d = { src, arg, size / 2, cfa_err(p) };
		int rc = cfa_put_inner(f, key, match, size, ctype, cfa_drop_source, &d, info);

		return rc < 0 ? rc : -EIO;	/* the inner put must have failed */
	}
	return cfa_put_inner(f, key, match, size, ctype, src, arg, info);
}

static int cfa_put(struct cold *c, const char *key, uint64_t size, const char *ctype,
		   cold_source_fn src, void *arg, struct cold_put_info *info)
{
	return cfa_put_any(c, key, NULL, size, ctype, src, arg, info);
}

/* Faults as for put; passed on to the inner tier's put_if. */
static int cfa_put_if(struct cold *c, const char *key, const char *match, uint64_t size,
		      const char *ctype, cold_source_fn src, void *arg,
		      struct cold_put_info *info)
{
	if (!((struct cold_fault *)c)->inner->ops->put_if)
		return -EOPNOTSUPP;
	return cfa_put_any(c, key, match, size, ctype, src, arg, info);
}

struct flip_sink {
	cold_sink_fn sink;
	void *arg;
	int flipped;
};

static int cfa_flip(void *arg, const void *buf, size_t len)
{
	struct flip_sink *fs = arg;
	char *copy;
	int rc;

	if (fs->flipped || len == 0)
		return fs->sink(fs->arg, buf, len);
	copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, buf, len);
	copy[0] ^= 1;
	fs->flipped = 1;
	rc = fs->sink(fs->arg, copy, len);
	free(copy);
	return rc;
}

/* A get, with the inner tier's ETag into etag unless it is NULL. */
static int cfa_get_any(struct cold *c, const char *key, cold_sink_fn sink, void *arg,
		       uint64_t *size, char *etag)
{
	struct cold_fault *f = (struct cold_fault *)c;
	struct cold_fault_plan *p = f->plan;

	__atomic_add_fetch(&p->gets, 1, __ATOMIC_SEQ_CST);
	if (!cfa_targets(p, key))
		goto pass;
	cfa_stall(p, 0);
	if (cfa_too_long(p, key))
		return -ENAMETOOLONG;
	if (cfa_take(&p->fail_gets))
		return cfa_err(p);
	if (cfa_take(&p->corrupt_gets)) {
		struct flip_sink fs = { sink, arg, 0 };

		return etag ? cold_get_etag(f->inner, key, cfa_flip, &fs, size, etag) :
			      cold_get(f->inner, key, cfa_flip, &fs, size);
	}
	if (cfa_take(&p->drop_gets)) {
		uint64_t sz = 0;
		struct drop_sink d = { sink, arg, 0, 0, cfa_err(p) };
		int rc = cold_head(f->inner, key, &sz);

		if (rc < 0)
			return rc;
		d.half = sz / 2;
		rc = cold_get(f->inner, key, cfa_drop_sink, &d, size);
		return rc < 0 ? rc : cfa_err(p);	/* an empty object cannot drop */
	}
pass:
	return etag ? cold_get_etag(f->inner, key, sink, arg, size, etag) :
		      cold_get(f->inner, key, sink, arg, size);
}

static int cfa_get(struct cold *c, const char *key, cold_sink_fn sink, void *arg, uint64_t *size)
{
	return cfa_get_any(c, key, sink, arg, size, NULL);
}

static int cfa_get_etag(struct cold *c, const char *key, cold_sink_fn sink, void *arg,
			uint64_t *size, char *etag)
{
	return cfa_get_any(c, key, sink, arg, size, etag);
}

static int cfa_crc_sink(void *arg, const void *buf, size_t len)
{
	uint32_t *crc = arg;

	*crc = kvt_crc32c(*crc, buf, len);
	return 0;
}

static int cfa_head(struct cold *c, const char *key, uint64_t *size, char *etag)
{
	struct cold_fault *f = (struct cold_fault *)c;
	uint32_t crc = 0;
	uint64_t got = 0;
	int rc;

	if (cfa_targets(f->plan, key) && cfa_take(&f->plan->fail_heads))
		return cfa_err(f->plan);
	rc = cold_head_etag(f->inner, key, size, etag);
	if (rc < 0 || !etag || !__atomic_load_n(&f->plan->etag_heads, __ATOMIC_SEQ_CST))
		return rc;
	/* The file tier's put answers this ETag for the bytes it wrote; here
	 * it is of the bytes there now, so a copy changed since differs. */
	rc = cold_get(f->inner, key, cfa_crc_sink, &crc, &got);
	if (rc == 0)
		snprintf(etag, KVT_ETAG_MAX, "\"%08x%016llx\"", crc, (unsigned long long)got);
	return rc;
}

static int cfa_del(struct cold *c, const char *key)
{
	struct cold_fault *f = (struct cold_fault *)c;

	if (f->plan->before_del)
		f->plan->before_del(f->plan->before_del_arg, key);
	return cold_del(f->inner, key);
}

static int cfa_del_if(struct cold *c, const char *key, const char *match)
{
	struct cold_fault *f = (struct cold_fault *)c;

	if (!f->inner->ops->del_if)
		return -EOPNOTSUPP;
	if (f->plan->before_del)
		f->plan->before_del(f->plan->before_del_arg, key);
	return cold_del_if(f->inner, key, match);
}

static int cfa_cleanup(struct cold *c)
{
	struct cold_fault *f = (struct cold_fault *)c;

	if (cfa_take(&f->plan->fail_cleanups))
		return cfa_err(f->plan);
	return cold_cleanup(f->inner);
}

static int cfa_abort_upload(struct cold *c, const char *pkey, const char *upload_id)
{
	struct cold_fault *f = (struct cold_fault *)c;

	if (cfa_take(&f->plan->fail_aborts))
		return cfa_err(f->plan);
	return cold_abort_upload(f->inner, pkey, upload_id);
}

static void cfa_free(struct cold *c)
{
	struct cold_fault *f = (struct cold_fault *)c;

	cold_free(f->inner);
	free(f);
}

static int cfa_key_fits(struct cold *c, const char *key)
{
	struct cold_fault *f = (struct cold_fault *)c;

	return !cfa_too_long(f->plan, key) && cold_key_fits(f->inner, key);
}

static void cfa_set_journal(struct cold *c, const struct cold_journal *j)
{
	cold_set_journal(((struct cold_fault *)c)->inner, j);
}

static const struct cold_ops cold_fault_ops = {
	.name = "fault",
	.put = cfa_put,
	.get = cfa_get,
	.get_etag = cfa_get_etag,
	.put_if = cfa_put_if,
	.head = cfa_head,
	.del = cfa_del,
	.del_if = cfa_del_if,
	.cleanup = cfa_cleanup,
	.abort_upload = cfa_abort_upload,
	.key_fits = cfa_key_fits,
	.set_journal = cfa_set_journal,
	.free = cfa_free,
};

int cold_fault_new(struct cold *inner, struct cold_fault_plan *plan, struct cold **out)
{
	struct cold_fault *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	f->base.ops = &cold_fault_ops;
	f->base.url = inner->url;
	f->inner = inner;
	f->plan = plan;
	*out = &f->base;
	return 0;
}
