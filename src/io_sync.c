/*
 * io_sync.c - the portable I/O backend: pread(2)/pwrite(2) on files opened
 * without O_DIRECT, for file systems that refuse it (tmpfs) and kernels
 * without io_uring, and as the simplest inner backend for fault injection.
 *
 * Submission does the I/O at once and parks the request on a FIFO of `depth`
 * slots; io_wait() pops the oldest. So completions come back in submission
 * order, which is one of the orders io.h allows. The I/O is one system call:
 * EINTR is retried (nothing was transferred), a short count is reported as
 * it is, like io_uring does, so that callers handle it the same way for both.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "io.h"

struct sync_ctx {
	struct io_ctx io;		/* first: io_ctx * <-> sync_ctx * */
	unsigned depth;
	unsigned head;			/* oldest completed request */
	unsigned count;			/* completed, not yet waited for */
	struct io_req **fifo;		/* depth slots */
};

static int sync_submit(struct io_ctx *io, struct io_req *req)
{
	struct sync_ctx *s = (struct sync_ctx *)io;
	ssize_t n;

	if (s->count == s->depth)
		return -EBUSY;
	do {
		if (req->op == IO_WRITE)
			n = pwrite(req->fd, req->buf, req->len, (off_t)req->off);
		else
			n = pread(req->fd, req->buf, req->len, (off_t)req->off);
	} while (n < 0 && errno == EINTR);
	req->res = n < 0 ? -errno : n;
	s->fifo[(s->head + s->count) % s->depth] = req;
	s->count++;
	return 0;
}

static int sync_wait(struct io_ctx *io, struct io_req **done)
{
	struct sync_ctx *s = (struct sync_ctx *)io;

	if (s->count == 0)
		return -EINVAL;
	*done = s->fifo[s->head];
	s->head = (s->head + 1) % s->depth;
	s->count--;
	return 0;
}

static void sync_free(struct io_ctx *io)
{
	struct sync_ctx *s = (struct sync_ctx *)io;

	io_bufs_release(io);
	free(s->fifo);
	free(s);
}

static const struct io_ops sync_ops = {
	.name = "sync",
	.submit = sync_submit,
	.wait = sync_wait,
	.free = sync_free,
};

int io_sync_ctx_new(unsigned depth, unsigned nbufs, size_t buf_size, struct io_ctx **out)
{
	struct sync_ctx *s = NULL;
	int rc;

	*out = NULL;
	if (depth == 0)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->io.ops = &sync_ops;
	s->io.direct = 0;
	s->depth = depth;
	s->fifo = calloc(depth, sizeof(*s->fifo));
	if (!s->fifo) {
		rc = -ENOMEM;
		goto out;
	}
	rc = io_bufs_alloc(&s->io, nbufs, buf_size);
	if (rc < 0)
		goto out;
	*out = &s->io;
out:
	if (rc < 0) {
		free(s->fifo);
		free(s);
	}
	return rc;
}
