/*
 * io_uring.c - the production I/O backend: liburing, files opened O_DIRECT
 * by the caller, buffers registered with the kernel so that fixed reads and
 * writes skip pinning pages on every request.
 *
 * Registration is charged to RLIMIT_MEMLOCK (unless CAP_IPC_LOCK), which is
 * small by default (8 MiB on Debian). When it fails the context still works:
 * requests are issued as plain reads and writes, whatever their buf_index,
 * and a warning is logged once per process so that an operator can raise the
 * limit without the log filling up with one line per store.
 *
 * Each SQE carries its io_req as user_data, so completions come back in the
 * kernel's order, not the submission order; io_wait() says so.
 *
 * An SQE, once prepared, is the kernel's: liburing publishes it on the next
 * io_uring_submit() even if that call fails. So a transient submit error
 * (-EAGAIN, -EBUSY, -EINTR) is not reported to the caller, whose request
 * would then complete behind its back; the SQE stays queued and
 * uring_wait() pushes it to the kernel before waiting.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "io.h"
#include "log.h"

struct uring_ctx {
	struct io_ctx io;		/* first: io_ctx * <-> uring_ctx * */
	struct io_uring ring;
	unsigned depth;
	int registered;			/* io.bufs are registered buffers */
};

static int uring_transient(int rc)
{
	return rc == -EAGAIN || rc == -EBUSY || rc == -EINTR;
}

static int uring_submit(struct io_ctx *io, struct io_req *req)
{
	struct uring_ctx *u = (struct uring_ctx *)io;
	struct io_uring_sqe *sqe;
	int fixed;
	int rc;

	/* Enforce the depth the context was made for, as io_sync does. */
	if (io->inflight >= u->depth)
		return -EBUSY;
	/* The SQE length field is 32 bits. */
	if (req->len > UINT_MAX)
		return -EINVAL;
	sqe = io_uring_get_sqe(&u->ring);
	if (!sqe) {
		/* The SQ is full of SQEs a failed submit left behind: push them. */
		rc = io_uring_submit(&u->ring);
		if (rc < 0 && !uring_transient(rc))
			return rc;
		sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return -EBUSY;
	}
	fixed = u->registered && req->buf_index >= 0;
	if (req->op == IO_WRITE && fixed)
		io_uring_prep_write_fixed(sqe, req->fd, req->buf, (unsigned)req->len,
					  req->off, req->buf_index);
	else if (req->op == IO_WRITE)
		io_uring_prep_write(sqe, req->fd, req->buf, (unsigned)req->len, req->off);
	else if (fixed)
		io_uring_prep_read_fixed(sqe, req->fd, req->buf, (unsigned)req->len,
					 req->off, req->buf_index);
	else
		io_uring_prep_read(sqe, req->fd, req->buf, (unsigned)req->len, req->off);
	io_uring_sqe_set_data(sqe, req);
	/* Queued only: io_push() or io_wait() hands it to the kernel. */
	return 0;
}

static int uring_push(struct io_ctx *io)
{
	struct uring_ctx *u = (struct uring_ctx *)io;
	int rc;

	if (io_uring_sq_ready(&u->ring) == 0)
		return 0;
	rc = io_uring_submit(&u->ring);
	/* See the file comment: after a transient error the SQE is still queued. */
	return rc < 0 && !uring_transient(rc) ? rc : 0;
}

static int uring_wait(struct io_ctx *io, struct io_req **done)
{
	struct uring_ctx *u = (struct uring_ctx *)io;
	struct io_uring_cqe *cqe = NULL;
	struct io_req *req;
	int rc;

	for (;;) {
		int stalled = 0;

		if (io_uring_peek_cqe(&u->ring, &cqe) == 0 && cqe)
			break;
		if (io_uring_sq_ready(&u->ring) > 0) {
			/* Start the queue and wait in the same system call. */
			rc = io_uring_submit_and_wait(&u->ring, 1);
			if (rc < 0 && !uring_transient(rc))
				return rc;
			stalled = rc < 0;
			if (!stalled && io_uring_peek_cqe(&u->ring, &cqe) == 0 && cqe)
				break;
		}
		if (stalled) {
			/*
			 * The request we wait for may still sit in the SQ:
			 * waiting without a timeout could sleep forever.
			 */
			struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 1000000 };

			rc = io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);
			if (rc == -ETIME)
				continue;
		} else {
			rc = io_uring_wait_cqe(&u->ring, &cqe);
		}
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			return rc;
		break;
	}
	req = io_uring_cqe_get_data(cqe);
	req->res = cqe->res;
	io_uring_cqe_seen(&u->ring, cqe);
	*done = req;
	return 0;
}

static void uring_free(struct io_ctx *io)
{
	struct uring_ctx *u = (struct uring_ctx *)io;

	/* Tearing the ring down also unregisters the buffers. */
	io_uring_queue_exit(&u->ring);
	io_bufs_release(io);
	free(u);
}

static const struct io_ops uring_ops = {
	.name = "io_uring",
	.submit = uring_submit,
	.push = uring_push,
	.wait = uring_wait,
	.free = uring_free,
};

/* Registers io's buffers; on failure the context falls back to plain I/O. */
static void uring_register(struct uring_ctx *u)
{
	static int warned;
	struct iovec *iov = NULL;
	int rc;

	if (u->io.nbufs == 0)
		return;
	iov = calloc(u->io.nbufs, sizeof(*iov));
	if (!iov) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < u->io.nbufs; i++) {
		iov[i].iov_base = u->io.bufs[i];
		iov[i].iov_len = u->io.buf_size;
	}
	rc = io_uring_register_buffers(&u->ring, iov, u->io.nbufs);
	if (rc == 0)
		u->registered = 1;
out:
	if (rc < 0 && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		log_warn(rc, "cannot register %u i/o buffers of %zu bytes%s, "
			 "using unregistered buffers", u->io.nbufs, u->io.buf_size,
			 rc == -ENOMEM ? " (RLIMIT_MEMLOCK too low?)" : "");
	free(iov);
}

int io_uring_ctx_new(unsigned depth, unsigned nbufs, size_t buf_size, struct io_ctx **out)
{
	struct uring_ctx *u = NULL;
	int ring_ok = 0;
	int rc;

	*out = NULL;
	if (depth == 0)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->io.ops = &uring_ops;
	u->io.direct = 1;
	u->depth = depth;
	rc = io_uring_queue_init(depth, &u->ring, 0);
	if (rc < 0)
		goto out;
	ring_ok = 1;
	rc = io_bufs_alloc(&u->io, nbufs, buf_size);
	if (rc < 0)
		goto out;
	uring_register(u);
	*out = &u->io;
out:
	if (rc < 0) {
		if (ring_ok)
			io_uring_queue_exit(&u->ring);
		free(u);
	}
	return rc;
}
