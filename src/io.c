/*
 * io.c - the backend-independent half of the hot tier's block I/O: dispatch
 * through io_ops, the in-flight count, the aligned buffer pool every backend
 * shares, and the probe that tells whether io_uring with O_DIRECT can be used
 * on a given file system.
 *
 * Invariant: io->inflight counts requests accepted by io_submit() and not yet
 * returned by io_wait(). Backends never touch it; that is why every caller,
 * the fault injector included, goes through io_submit()/io_wait() rather
 * than through ops directly.
 *
 * A request's life:
 *
 *	caller's ---io_submit()---> in flight ---io_wait()---> completed,
 *	(res unset)                 (inflight++)               res = bytes or -errno
 *	                                                       (inflight--)
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"
#include "util.h"

int io_submit(struct io_ctx *io, struct io_req *req)
{
	int rc;

	if (req->op != IO_READ && req->op != IO_WRITE)
		return -EINVAL;
	if (req->buf_index >= 0 && (unsigned)req->buf_index >= io->nbufs)
		return -EINVAL;
	rc = io->ops->submit(io, req);
	if (rc == 0)
		io->inflight++;
	return rc;
}

int io_push(struct io_ctx *io)
{
	return io->ops->push ? io->ops->push(io) : 0;
}

int io_wait(struct io_ctx *io, struct io_req **done)
{
	int rc;

	/* io_uring would block forever waiting for a completion that never comes. */
	if (io->inflight == 0)
		return -EINVAL;
	rc = io->ops->wait(io, done);
	if (rc == 0)
		io->inflight--;
	return rc;
}

int io_fdatasync(struct io_ctx *io, int fd)
{
	if (io->ops->fsync)
		return io->ops->fsync(io, fd);
	return fdatasync(fd) < 0 ? -errno : 0;
}

/*
 * Refuses (-EBUSY) when other requests are in flight: io_wait() may return
 * any of them, and a completion handed to the wrong caller would be lost.
 */
ssize_t io_run(struct io_ctx *io, enum io_op op, int fd, void *buf, int buf_index,
	       size_t len, uint64_t off)
{
	struct io_req req = {
		.op = op, .fd = fd, .buf = buf, .buf_index = buf_index,
		.len = len, .off = off, .res = 0, .data = NULL,
	};
	struct io_req *done = NULL;
	int rc;

	if (io->inflight != 0)
		return -EBUSY;
	rc = io_submit(io, &req);
	if (rc < 0)
		return rc;
	rc = io_wait(io, &done);
	if (rc < 0)
		return rc;
	return done->res;
}

void io_ctx_free(struct io_ctx *io)
{
	struct io_req *done;

	if (!io)
		return;
	/*
	 * The kernel may still be writing into buffers we are about to free;
	 * drain first. A failing wait cannot be retried forever: give up and
	 * let the backend tear down (io_uring_queue_exit cancels what is left).
	 */
	while (io->inflight > 0) {
		if (io_wait(io, &done) < 0)
			break;
	}
	io->ops->free(io);
}

/*
 * The buffers are one anonymous mapping (util_big_alloc), not heap blocks:
 * page-aligned as O_DIRECT wants, in huge pages where the kernel has them,
 * and given back to the kernel when the context is freed.
 * From the heap, glibc's sliding mmap threshold kept freed 1 MiB buffers in
 * the arena, and a burst of 32 writers left the process 260 MiB larger.
 */
int io_bufs_alloc(struct io_ctx *io, unsigned nbufs, size_t buf_size)
{
	char *base;

	io->bufs = NULL;
	io->nbufs = 0;
	io->buf_size = buf_size;
	if (nbufs == 0)
		return 0;
	if (buf_size == 0 || buf_size % IO_ALIGN != 0)
		return -EINVAL;
	io->bufs = calloc(nbufs, sizeof(*io->bufs));
	if (!io->bufs)
		return -ENOMEM;
	base = util_big_alloc(nbufs * buf_size);
	if (!base) {
		free(io->bufs);
		io->bufs = NULL;
		return -ENOMEM;
	}
	for (unsigned i = 0; i < nbufs; i++)
		io->bufs[i] = base + (size_t)i * buf_size;
	io->nbufs = nbufs;
	return 0;
}

void io_bufs_release(struct io_ctx *io)
{
	if (io->nbufs > 0)
		util_big_free(io->bufs[0], io->nbufs * io->buf_size);
	free(io->bufs);
	io->bufs = NULL;
	io->nbufs = 0;
	io->buf_size = 0;
}

void io_ctx_wrap(struct io_ctx *io, const struct io_ops *ops, const struct io_ctx *inner)
{
	io->ops = ops;
	io->nbufs = inner->nbufs;
	io->buf_size = inner->buf_size;
	io->bufs = inner->bufs;
	io->direct = inner->direct;
}

/* One I/O through the ring, waited for; bytes transferred or -errno. */
static int io_probe_rw(struct io_uring *ring, enum io_op op, int fd, void *buf, unsigned len)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe = NULL;
	int rc;

	if (!sqe)
		return -EBUSY;
	if (op == IO_WRITE)
		io_uring_prep_write(sqe, fd, buf, len, 0);
	else
		io_uring_prep_read(sqe, fd, buf, len, 0);
	rc = io_uring_submit(ring);
	if (rc < 0)
		return rc;
	do {
		rc = io_uring_wait_cqe(ring, &cqe);
	} while (rc == -EINTR);
	if (rc < 0)
		return rc;
	rc = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return rc;
}

/* O_DIRECT through the ring into a new file in dir, read back and compared. */
static int io_probe_write(struct io_uring *ring, const char *dir, void *wbuf, void *rbuf,
			  char *why, size_t whylen)
{
	char path[4096];
	int fd, tmpfd, rc;

	if (snprintf(path, sizeof(path), "%s/.kvtier-probe-XXXXXX", dir) >= (int)sizeof(path)) {
		snprintf(why, whylen, "'%s': %s", dir, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	tmpfd = mkstemp(path);
	if (tmpfd < 0) {
		rc = -errno;
		snprintf(why, whylen, "cannot create a file in '%s': %s", dir, strerror(-rc));
		return rc;
	}
	/* tmpfs (and others) refuse O_DIRECT at open with EINVAL. */
	fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	/* Unlink now so that no exit path leaves the probe file behind. */
	unlink(path);
	close(tmpfd);
	if (fd < 0) {
		rc = -errno;
		snprintf(why, whylen, "open '%s' with O_DIRECT: %s", dir, strerror(-rc));
		return rc;
	}
	for (unsigned i = 0; i < IO_ALIGN; i++)
		((unsigned char *)wbuf)[i] = (unsigned char)(i * 7 + 1);
	memset(rbuf, 0, IO_ALIGN);
	rc = io_probe_rw(ring, IO_WRITE, fd, wbuf, IO_ALIGN);
	if (rc >= 0 && rc != IO_ALIGN)
		rc = -EIO;
	if (rc < 0) {
		snprintf(why, whylen, "io_uring O_DIRECT write in '%s': %s", dir, strerror(-rc));
		goto out;
	}
	rc = io_probe_rw(ring, IO_READ, fd, rbuf, IO_ALIGN);
	if (rc >= 0 && (rc != IO_ALIGN || memcmp(wbuf, rbuf, IO_ALIGN) != 0))
		rc = -EIO;
	if (rc < 0) {
		snprintf(why, whylen, "io_uring O_DIRECT read in '%s': %s", dir, strerror(-rc));
		goto out;
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

/* O_DIRECT through the ring from a file of the store: writes nothing. */
static int io_probe_read(struct io_uring *ring, const char *path, void *rbuf, char *why,
			 size_t whylen)
{
	int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC), rc;

	if (fd < 0) {
		rc = -errno;
		snprintf(why, whylen, "open '%s' with O_DIRECT: %s", path, strerror(-rc));
		return rc;
	}
	rc = io_probe_rw(ring, IO_READ, fd, rbuf, IO_ALIGN);
	if (rc >= 0 && rc != IO_ALIGN)
		rc = -EIO;
	if (rc < 0)
		snprintf(why, whylen, "io_uring O_DIRECT read of '%s': %s", path, strerror(-rc));
	close(fd);
	return rc < 0 ? rc : 0;
}

/*
 * The probe does its I/O through the ring rather than with pread/pwrite:
 * io_uring_setup alone succeeds on kernels (5.1-5.5) that lack
 * IORING_OP_READ/WRITE, and some file systems accept O_DIRECT at open but
 * fail the I/O itself. It reads `existing` if that file holds a block: a
 * probe that wrote would fail with ENOSPC on a full disk and pick sync I/O
 * for a store that has all its room preallocated. A shorter one (an init
 * killed as it made the file) could only give a short read.
 */
int io_uring_probe(const char *dir, const char *existing, char *why, size_t whylen)
{
	struct io_uring ring;
	void *wbuf = NULL, *rbuf = NULL;
	char scratch[8];
	struct stat sb;
	int rc;

	if (!why || whylen == 0) {
		why = scratch;
		whylen = sizeof(scratch);
	}
	why[0] = '\0';
	rc = io_uring_queue_init(2, &ring, 0);
	if (rc < 0) {
		snprintf(why, whylen, "io_uring_setup: %s", strerror(-rc));
		return rc;
	}
	rc = -posix_memalign(&wbuf, IO_ALIGN, IO_ALIGN);
	if (rc == 0)
		rc = -posix_memalign(&rbuf, IO_ALIGN, IO_ALIGN);
	if (rc < 0)
		snprintf(why, whylen, "%s", strerror(-rc));
	else if (existing && stat(existing, &sb) == 0 && sb.st_size >= IO_ALIGN)
		rc = io_probe_read(&ring, existing, rbuf, why, whylen);
	else
		rc = io_probe_write(&ring, dir, wbuf, rbuf, why, whylen);
	free(wbuf);
	free(rbuf);
	io_uring_queue_exit(&ring);
	return rc;
}
