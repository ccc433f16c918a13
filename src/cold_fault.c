/*
 * cold_fault.c - a cold tier that fails on purpose, for tests: it wraps a
 * real one and, as its plan says, fails the next puts or gets with an
 * errno (a partner answering 500 or 503, a dropped connection), stores a
 * put short while reporting success (a partner that lies), or flips a bit
 * of what a get returns (damage in transit). Verification upstream must
 * catch the last two; nothing may be lost through any of them.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cold.h"

struct cold_fault {
	struct cold base;
	struct cold *inner;
	struct cold_fault_plan *plan;
};

static int cfa_err(const struct cold_fault_plan *p)
{
	return p->err ? p->err : -EIO;
}

struct short_src {
	cold_source_fn src;
	void *arg;
};

static int cfa_put(struct cold *c, const char *key, uint64_t size, const char *ctype,
		   cold_source_fn src, void *arg, char *etag)
{
	struct cold_fault *f = (struct cold_fault *)c;
	struct cold_fault_plan *p = f->plan;

	p->puts++;
	if (p->fail_puts > 0) {
		p->fail_puts--;
		return cfa_err(p);
	}
	if (p->short_puts > 0 && size > 0) {
		p->short_puts--;
		return cold_put(f->inner, key, size - 1, ctype, src, arg, etag);
	}
	return cold_put(f->inner, key, size, ctype, src, arg, etag);
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

static int cfa_get(struct cold *c, const char *key, cold_sink_fn sink, void *arg, uint64_t *size)
{
	struct cold_fault *f = (struct cold_fault *)c;
	struct cold_fault_plan *p = f->plan;

	p->gets++;
	if (p->fail_gets > 0) {
		p->fail_gets--;
		return cfa_err(p);
	}
	if (p->corrupt_gets > 0) {
		struct flip_sink fs = { sink, arg, 0 };

		p->corrupt_gets--;
		return cold_get(f->inner, key, cfa_flip, &fs, size);
	}
	return cold_get(f->inner, key, sink, arg, size);
}

static int cfa_head(struct cold *c, const char *key, uint64_t *size)
{
	return cold_head(((struct cold_fault *)c)->inner, key, size);
}

static int cfa_del(struct cold *c, const char *key)
{
	return cold_del(((struct cold_fault *)c)->inner, key);
}

static int cfa_cleanup(struct cold *c)
{
	return cold_cleanup(((struct cold_fault *)c)->inner);
}

static void cfa_free(struct cold *c)
{
	struct cold_fault *f = (struct cold_fault *)c;

	cold_free(f->inner);
	free(f);
}

static const struct cold_ops cold_fault_ops = {
	.name = "fault",
	.put = cfa_put,
	.get = cfa_get,
	.head = cfa_head,
	.del = cfa_del,
	.cleanup = cfa_cleanup,
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
