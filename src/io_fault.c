/*
 * io_fault.c - a backend that wraps another and makes chosen requests fail,
 * so that tests can drive the store through every error path of the hot
 * tier without a failing disk.
 *
 * A plan (io.h) is shared by every context made from it, possibly in several
 * threads: plan->calls counts the requests of the chosen ops over all of
 * them, and the request whose count equals plan->nth (with plan->sticky,
 * every one from the nth on) gets the fault. Both counters are updated with
 * __atomic builtins. A request counts when it is submitted, so one the inner
 * backend then refuses (-EBUSY) has still been counted.
 *
 * What each fault does:
 *
 *   EIO, ENOSPC  the request never reaches the inner backend, and so never
 *                the disk; it completes with -EIO / -ENOSPC. Such
 *                completions are queued here and io_wait() returns them
 *                before waiting on the inner backend, so they overtake
 *                requests submitted earlier (io.h allows any order).
 *   SHORT        res is half of len, rounded down to IO_ALIGN, or len / 2
 *                when that rounds to 0 (len < 8 KiB): a short count must
 *                never look like success. Where the inner backend can do
 *                it (the short length is aligned, or the files are not
 *                O_DIRECT) only those bytes are transferred, so the rest of
 *                a write really is missing from the disk and the rest of a
 *                read buffer really is untouched. Otherwise (an O_DIRECT
 *                request under 8 KiB) the full length is transferred and
 *                only res is short: code under test must trust res, not
 *                the disk.
 *   EXIT         the process ends there and then (_exit(IO_FAULT_EXIT_STATUS)),
 *                the request unsubmitted: a kill -9 at a chosen point, for
 *                tests of what recovery makes of the state it leaves.
 *   CORRUPT      a read completes normally, then the byte at res / 2 of the
 *                returned data is inverted. A write reaches the disk with
 *                the byte at len / 2 inverted and reports success, like a
 *                bit flip on the way to the media; the caller's buffer is
 *                restored on completion.
 *
 * plan->injected counts faults decided at submission (a CORRUPT read that
 * returns no data has nothing to flip but is counted).
 *
 * Requests that reach the inner backend travel as a shadow copy (struct
 * fault_req) so that the caller's request, its data pointer included, is
 * never modified until it is returned by io_wait().
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io.h"

struct fault_req {
	struct io_req req;		/* what the inner backend sees; req.data = this */
	struct io_req *orig;		/* the caller's */
	enum io_fault_kind kind;
	size_t short_res;		/* SHORT: the count to report */
	int flipped;			/* CORRUPT write: orig->buf[len / 2] is inverted */
};

struct fault_ctx {
	struct io_ctx io;		/* first: io_ctx * <-> fault_ctx * */
	struct io_ctx *inner;		/* owned */
	struct io_fault_plan *plan;	/* the caller's, shared */
	struct io_req **failed;		/* injected failures, FIFO of cap slots */
	unsigned head, count, cap;
};

/* Room for one more injected failure, so that a counted fault is never lost to ENOMEM. */
static int fault_reserve(struct fault_ctx *f)
{
	struct io_req **p;
	unsigned cap;

	if (f->count < f->cap)
		return 0;
	cap = f->cap ? f->cap * 2 : 8;
	p = malloc(cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (unsigned i = 0; i < f->count; i++)
		p[i] = f->failed[(f->head + i) % f->cap];
	free(f->failed);
	f->failed = p;
	f->head = 0;
	f->cap = cap;
	return 0;
}

/* Counts req against the plan; returns the fault to inject, or IO_FAULT_NONE. */
static enum io_fault_kind fault_decide(struct io_fault_plan *plan, const struct io_req *req)
{
	unsigned long n;
	int hit;

	if (!(plan->ops & (1u << req->op)))
		return IO_FAULT_NONE;
	n = __atomic_add_fetch(&plan->calls, 1, __ATOMIC_RELAXED);
	hit = plan->sticky ? n >= plan->nth : n == plan->nth;
	if (!hit || plan->kind == IO_FAULT_NONE)
		return IO_FAULT_NONE;
	__atomic_add_fetch(&plan->injected, 1, __ATOMIC_RELAXED);
	return plan->kind;
}

static int fault_submit(struct io_ctx *io, struct io_req *req)
{
	struct fault_ctx *f = (struct fault_ctx *)io;
	struct fault_req *fr = NULL;
	enum io_fault_kind kind;
	int rc;

	/* Allocate before counting: a request refused for ENOMEM is not counted. */
	rc = fault_reserve(f);
	if (rc < 0)
		return rc;
	fr = calloc(1, sizeof(*fr));
	if (!fr)
		return -ENOMEM;

	kind = fault_decide(f->plan, req);
	if (kind == IO_FAULT_EXIT)
		_exit(IO_FAULT_EXIT_STATUS);
	if (kind == IO_FAULT_EIO || kind == IO_FAULT_ENOSPC) {
		req->res = kind == IO_FAULT_EIO ? -EIO : -ENOSPC;
		f->failed[(f->head + f->count) % f->cap] = req;
		f->count++;
		rc = 0;
		goto out;
	}

	fr->req = *req;
	fr->req.data = fr;
	fr->orig = req;
	fr->kind = kind;
	if (kind == IO_FAULT_SHORT) {
		fr->short_res = (req->len / 2) & ~(size_t)(IO_ALIGN - 1);
		if (fr->short_res == 0)
			fr->short_res = req->len / 2;
		if (fr->short_res > 0 &&
		    (!f->inner->direct || fr->short_res % IO_ALIGN == 0))
			fr->req.len = fr->short_res;
	} else if (kind == IO_FAULT_CORRUPT && req->op == IO_WRITE && req->len > 0) {
		((unsigned char *)req->buf)[req->len / 2] ^= 0xff;
		fr->flipped = 1;
	}
	rc = io_submit(f->inner, &fr->req);
	if (rc < 0) {
		if (fr->flipped)
			((unsigned char *)req->buf)[req->len / 2] ^= 0xff;
		goto out;
	}
	fr = NULL;		/* the inner backend has it until io_wait */
out:
	free(fr);
	return rc;
}

static int fault_wait(struct io_ctx *io, struct io_req **done)
{
	struct fault_ctx *f = (struct fault_ctx *)io;
	struct fault_req *fr;
	struct io_req *inner_done = NULL;
	struct io_req *req;
	ssize_t res;
	int rc;

	if (f->count > 0) {
		*done = f->failed[f->head];
		f->head = (f->head + 1) % f->cap;
		f->count--;
		return 0;
	}
	rc = io_wait(f->inner, &inner_done);
	if (rc < 0)
		return rc;
	fr = inner_done->data;
	req = fr->orig;
	res = inner_done->res;
	if (fr->kind == IO_FAULT_SHORT && res > (ssize_t)fr->short_res)
		res = (ssize_t)fr->short_res;
	if (fr->kind == IO_FAULT_CORRUPT && req->op == IO_READ && res > 0)
		((unsigned char *)req->buf)[res / 2] ^= 0xff;
	if (fr->flipped)
		((unsigned char *)req->buf)[req->len / 2] ^= 0xff;
	req->res = res;
	free(fr);
	*done = req;
	return 0;
}

static void fault_free(struct io_ctx *io)
{
	struct fault_ctx *f = (struct fault_ctx *)io;

	/* io_ctx_free() drained us, and with us the inner context. */
	io_ctx_free(f->inner);
	free(f->failed);
	free(f);
}

static int fault_push(struct io_ctx *io)
{
	struct fault_ctx *f = (struct fault_ctx *)io;

	__atomic_add_fetch(&f->plan->pushes, 1, __ATOMIC_RELAXED);
	return io_push(f->inner);
}

static int fault_fsync(struct io_ctx *io, int fd)
{
	return io_fdatasync(((struct fault_ctx *)io)->inner, fd);
}

static const struct io_ops fault_ops = {
	.name = "fault",
	.submit = fault_submit,
	.push = fault_push,
	.wait = fault_wait,
	.free = fault_free,
	.fsync = fault_fsync,
};

/*
 * Takes ownership of inner even on failure: the caller never frees it.
 * inner must have nothing in flight.
 */
int io_fault_ctx_new(struct io_ctx *inner, struct io_fault_plan *plan, struct io_ctx **out)
{
	struct fault_ctx *f = NULL;
	int rc = 0;

	*out = NULL;
	if (!inner || !plan) {
		rc = -EINVAL;
		goto out;
	}
	/* Completions already owed by inner would not be fault_reqs. */
	if (inner->inflight != 0) {
		rc = -EBUSY;
		goto out;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		rc = -ENOMEM;
		goto out;
	}
	io_ctx_wrap(&f->io, &fault_ops, inner);
	f->inner = inner;
	f->plan = plan;
	*out = &f->io;
out:
	if (rc < 0)
		io_ctx_free(inner);
	return rc;
}
