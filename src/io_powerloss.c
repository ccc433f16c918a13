/*
 * io_powerloss.c - a simulated volatile write cache, so that tests can cut
 * the power at any moment and see what a machine would find on its disks
 * afterwards: every synced byte, and of the bytes written since the last
 * sync of their file some, none or all, possibly torn at sector
 * granularity and reordered. It is SQLite's crash test (test6.c) for both
 * halves of a store: the hot tier's contexts (io_powerloss_ctx_new) and,
 * through a VFS shim in the test, the catalog's database and WAL.
 *
 * Each file registered (by inode, on first use) has a list of pending
 * operations, writes with a copy of their bytes and truncations, in the
 * order they were issued. The file itself holds only what was synced:
 *
 *	write/truncate --> pending (reads see it) --sync--> in the file
 *	                        \--crash--> each one landed, dropped or torn
 *
 * At the crash, the pending operations of a file are applied in a random
 * order between truncations (a truncation orders what came before it: no
 * file system lets a write issued before a truncate land after it), each
 * one whole, not at all, or sector by sector at random, with sectors of
 * 512 bytes or 4 KiB chosen per crash. After the crash every operation
 * fails with -EIO: the machine is off.
 *
 * The file's own descriptor is never used for I/O: a second one is opened
 * through /proc/self/fd, without O_DIRECT, so that torn 512-byte sectors
 * can be written whatever the caller's flags; it stays open until
 * io_powerloss_free() so that the inode is never reused while known here.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"
#include "util.h"

struct pl_op {
	uint64_t off;		/* a write's offset, or the size truncated to */
	size_t len;
	unsigned char *data;	/* NULL: a truncation */
};

struct pl_file {
	dev_t dev;
	ino_t ino;
	int fd;			/* our own, no O_DIRECT */
	struct pl_op *ops;
	size_t nops, cap;
	struct pl_file *next;
};

struct io_powerloss {
	pthread_mutex_t lock;
	uint64_t rng;
	struct pl_file *files;
	int off;		/* crashed: everything fails */
	enum io_powerloss_policy policy;
	struct io_powerloss_stats stats;
	unsigned long countdown;	/* armed: operations left before the crash */
	int crash_unreported;	/* pl_begin() crashed; pl_end() calls on_crash */
	void (*on_crash)(void *arg, const struct io_powerloss_stats *stats);
	void *on_crash_arg;
};

static uint64_t pl_rand(struct io_powerloss *pl)
{
	uint64_t z = (pl->rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

int io_powerloss_new(uint64_t seed, struct io_powerloss **out)
{
	struct io_powerloss *pl = calloc(1, sizeof(*pl));

	*out = NULL;
	if (!pl)
		return -ENOMEM;
	pthread_mutex_init(&pl->lock, NULL);
	pl->rng = seed;
	*out = pl;
	return 0;
}

static void pl_ops_clear(struct pl_file *f)
{
	for (size_t i = 0; i < f->nops; i++)
		free(f->ops[i].data);
	f->nops = 0;
}

void io_powerloss_free(struct io_powerloss *pl)
{
	struct pl_file *f, *next;

	if (!pl)
		return;
	for (f = pl->files; f; f = next) {
		next = f->next;
		pl_ops_clear(f);
		free(f->ops);
		close(f->fd);
		free(f);
	}
	pthread_mutex_destroy(&pl->lock);
	free(pl);
}

/* The file of fd, registered on first use. Called with pl->lock held. */
static int pl_file(struct io_powerloss *pl, int fd, struct pl_file **out)
{
	struct pl_file *f;
	char path[64];
	struct stat sb;

	if (fstat(fd, &sb) < 0)
		return -errno;
	for (f = pl->files; f; f = f->next) {
		if (f->dev == sb.st_dev && f->ino == sb.st_ino) {
			*out = f;
			return 0;
		}
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	f->fd = open(path, O_RDWR | O_CLOEXEC);
	if (f->fd < 0) {
		int rc = -errno;

		free(f);
		return rc;
	}
	f->dev = sb.st_dev;
	f->ino = sb.st_ino;
	f->next = pl->files;
	pl->files = f;
	*out = f;
	return 0;
}

static int pl_op_add(struct pl_file *f, uint64_t off, const void *buf, size_t len)
{
	struct pl_op *op;

	if (UTIL_GROW(f->ops, f->nops, f->cap) < 0)
		return -ENOMEM;
	op = &f->ops[f->nops];
	op->off = off;
	op->len = len;
	op->data = NULL;
	if (buf) {
		/* A zero-length write still needs a non-NULL copy to be a write. */
		op->data = malloc(len ? len : 1);
		if (!op->data)
			return -ENOMEM;
		memcpy(op->data, buf, len);
	}
	f->nops++;
	return 0;
}

static int pl_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int pl_apply(struct pl_file *f, const struct pl_op *op)
{
	if (!op->data)
		return ftruncate(f->fd, (off_t)op->off) < 0 ? -errno : 0;
	return pl_pwrite_all(f->fd, op->data, op->len, op->off);
}

static void pl_crash_locked(struct io_powerloss *pl);

/*
 * Starts one write (sync 0) or sync of fd: takes pl->lock, counts the
 * operation and finds fd's file. A crash armed for this operation cuts the
 * power first: nothing of it happens. 0, or -errno to fail the operation
 * with; the lock is held either way, and pl_end() drops it.
 */
static int pl_begin(struct io_powerloss *pl, int sync, int fd, struct pl_file **f)
{
	pthread_mutex_lock(&pl->lock);
	if (pl->off)
		return -EIO;
	if (sync)
		pl->stats.syncs++;
	else
		pl->stats.writes++;
	if (pl->countdown && --pl->countdown == 0) {
		pl_crash_locked(pl);
		pl->crash_unreported = 1;
		return -EIO;
	}
	return pl_file(pl, fd, f);
}

/* Drops pl->lock, then tells on_crash of a crash pl_begin() caused; rc. */
static int pl_end(struct io_powerloss *pl, int rc)
{
	struct io_powerloss_stats stats = pl->stats;
	int report = pl->crash_unreported;

	pl->crash_unreported = 0;
	pthread_mutex_unlock(&pl->lock);
	if (report && pl->on_crash)
		pl->on_crash(pl->on_crash_arg, &stats);
	return rc;
}

ssize_t io_powerloss_pwrite(struct io_powerloss *pl, int fd, const void *buf, size_t len,
			    uint64_t off)
{
	struct pl_file *f;
	int rc = pl_begin(pl, 0, fd, &f);

	if (rc == 0)
		rc = pl_op_add(f, off, buf, len);
	rc = pl_end(pl, rc);
	return rc < 0 ? rc : (ssize_t)len;
}

int io_powerloss_truncate(struct io_powerloss *pl, int fd, uint64_t size)
{
	struct pl_file *f;
	int rc = pl_begin(pl, 0, fd, &f);

	if (rc == 0)
		rc = pl_op_add(f, size, NULL, 0);
	return pl_end(pl, rc);
}

/* The size the file has with its pending operations. Called locked. */
static int pl_vsize(struct pl_file *f, uint64_t *size)
{
	struct stat sb;
	uint64_t s;

	if (fstat(f->fd, &sb) < 0)
		return -errno;
	s = (uint64_t)sb.st_size;
	for (size_t i = 0; i < f->nops; i++) {
		const struct pl_op *op = &f->ops[i];

		if (!op->data)
			s = op->off;
		else if (op->len > 0 && op->off + op->len > s)
			s = op->off + op->len;
	}
	*size = s;
	return 0;
}

int io_powerloss_size(struct io_powerloss *pl, int fd, uint64_t *size)
{
	struct pl_file *f;
	int rc;

	pthread_mutex_lock(&pl->lock);
	rc = pl->off ? -EIO : pl_file(pl, fd, &f);
	if (rc == 0)
		rc = pl_vsize(f, size);
	pthread_mutex_unlock(&pl->lock);
	return rc;
}

ssize_t io_powerloss_pread(struct io_powerloss *pl, int fd, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;
	struct pl_file *f;
	uint64_t vsize, end = off + len;
	size_t got = 0;
	int rc;

	pthread_mutex_lock(&pl->lock);
	rc = pl->off ? -EIO : pl_file(pl, fd, &f);
	if (rc == 0)
		rc = pl_vsize(f, &vsize);
	if (rc < 0)
		goto out;
	/* What the disk holds, zeros past its end, then the pending operations in order. */
	while (got < len) {
		ssize_t n = pread(f->fd, p + got, len - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	memset(p + got, 0, len - got);
	for (size_t i = 0; i < f->nops; i++) {
		const struct pl_op *op = &f->ops[i];
		uint64_t from, to;

		if (!op->data) {
			if (op->off < end)
				memset(p + (op->off > off ? op->off - off : 0), 0,
				       (size_t)(end - (op->off > off ? op->off : off)));
			continue;
		}
		from = op->off > off ? op->off : off;
		to = op->off + op->len < end ? op->off + op->len : end;
		if (from < to)
			memcpy(p + (from - off), op->data + (from - op->off), (size_t)(to - from));
	}
out:
	pthread_mutex_unlock(&pl->lock);
	if (rc < 0)
		return rc;
	return vsize > off ? (ssize_t)(vsize - off < len ? vsize - off : len) : 0;
}

int io_powerloss_sync(struct io_powerloss *pl, int fd)
{
	struct pl_file *f;
	int rc = pl_begin(pl, 1, fd, &f);

	for (size_t i = 0; rc == 0 && i < f->nops; i++)
		rc = pl_apply(f, &f->ops[i]);
	if (rc == 0 && fdatasync(f->fd) < 0)
		rc = -errno;
	if (rc == 0)
		pl_ops_clear(f);
	return pl_end(pl, rc);
}

void io_powerloss_forget(struct io_powerloss *pl, int fd)
{
	struct pl_file *f;

	pthread_mutex_lock(&pl->lock);
	if (!pl->off && pl_file(pl, fd, &f) == 0)
		pl_ops_clear(f);
	pthread_mutex_unlock(&pl->lock);
}

/* One write torn: each sector of it lands or not. */
static void pl_apply_torn(struct io_powerloss *pl, struct pl_file *f, const struct pl_op *op,
			  uint64_t sector)
{
	uint64_t pos = op->off, end = op->off + op->len;

	while (pos < end) {
		uint64_t next = (pos / sector + 1) * sector;

		if (next > end)
			next = end;
		if (pl_rand(pl) & 1)
			pl_pwrite_all(f->fd, op->data + (pos - op->off), (size_t)(next - pos), pos);
		pos = next;
	}
}

static void pl_crash_locked(struct io_powerloss *pl)
{
	uint64_t sector = pl_rand(pl) & 1 ? 512 : 4096;

	pl->off = 1;
	for (struct pl_file *f = pl->files; f; f = f->next) {
		size_t start = 0;

		while (start < f->nops) {
			size_t end = start;

			/* An epoch: the writes up to the next truncation, in any order. */
			while (end < f->nops && f->ops[end].data)
				end++;
			for (size_t i = end - start; i > 1; i--) {
				size_t j = (size_t)(pl_rand(pl) % i);
				struct pl_op t = f->ops[start + i - 1];

				f->ops[start + i - 1] = f->ops[start + j];
				f->ops[start + j] = t;
			}
			for (size_t i = start; i <= end && i < f->nops; i++) {
				const struct pl_op *op = &f->ops[i];
				unsigned r = (unsigned)(pl_rand(pl) % 3);

				if (pl->policy != IO_PL_RANDOM)
					r = pl->policy == IO_PL_LAND_ALL ? 1 : 0;

				pl->stats.pending++;
				if (r == 0) {
					pl->stats.dropped++;
				} else if (r == 1 || !op->data || op->len <= sector) {
					/* A write within one sector is atomic: it lands whole. */
					pl_apply(f, op);
					pl->stats.landed++;
				} else {
					pl_apply_torn(pl, f, op, sector);
					pl->stats.torn++;
				}
			}
			start = end + 1;
		}
		fdatasync(f->fd);
		pl_ops_clear(f);
	}
}

void io_powerloss_crash(struct io_powerloss *pl, struct io_powerloss_stats *stats)
{
	pthread_mutex_lock(&pl->lock);
	if (!pl->off)
		pl_crash_locked(pl);
	if (stats)
		*stats = pl->stats;
	pthread_mutex_unlock(&pl->lock);
}

void io_powerloss_set_policy(struct io_powerloss *pl, enum io_powerloss_policy policy)
{
	pthread_mutex_lock(&pl->lock);
	pl->policy = policy;
	pthread_mutex_unlock(&pl->lock);
}

void io_powerloss_arm(struct io_powerloss *pl, unsigned long after,
		      void (*fn)(void *arg, const struct io_powerloss_stats *stats), void *arg)
{
	pthread_mutex_lock(&pl->lock);
	pl->countdown = after + 1;
	pl->on_crash = fn;
	pl->on_crash_arg = arg;
	pthread_mutex_unlock(&pl->lock);
}

/* ---- the hot tier's backend ------------------------------------------------ */

/*
 * Requests complete at submission, as in io_sync.c, and wait in a FIFO of
 * `depth` slots (the inner context's in-flight limit does not apply: the
 * inner context does no I/O).
 */
#define PL_DEPTH 64

struct pl_ctx {
	struct io_ctx io;		/* first: io_ctx * <-> pl_ctx * */
	struct io_ctx *inner;		/* owned, for its buffers */
	struct io_powerloss *pl;
	unsigned head, count;
	struct io_req *fifo[PL_DEPTH];
};

static int plc_submit(struct io_ctx *io, struct io_req *req)
{
	struct pl_ctx *c = (struct pl_ctx *)io;

	if (c->count == PL_DEPTH)
		return -EBUSY;
	if (req->op == IO_WRITE)
		req->res = io_powerloss_pwrite(c->pl, req->fd, req->buf, req->len, req->off);
	else
		req->res = io_powerloss_pread(c->pl, req->fd, req->buf, req->len, req->off);
	c->fifo[(c->head + c->count) % PL_DEPTH] = req;
	c->count++;
	return 0;
}

static int plc_wait(struct io_ctx *io, struct io_req **done)
{
	struct pl_ctx *c = (struct pl_ctx *)io;

	if (c->count == 0)
		return -EINVAL;
	*done = c->fifo[c->head];
	c->head = (c->head + 1) % PL_DEPTH;
	c->count--;
	return 0;
}

static int plc_fsync(struct io_ctx *io, int fd)
{
	return io_powerloss_sync(((struct pl_ctx *)io)->pl, fd);
}

static void plc_free(struct io_ctx *io)
{
	struct pl_ctx *c = (struct pl_ctx *)io;

	io_ctx_free(c->inner);
	free(c);
}

static const struct io_ops powerloss_ops = {
	.name = "powerloss",
	.submit = plc_submit,
	.wait = plc_wait,
	.free = plc_free,
	.fsync = plc_fsync,
};

int io_powerloss_ctx_new(struct io_ctx *inner, struct io_powerloss *pl, struct io_ctx **out)
{
	struct pl_ctx *c = NULL;
	int rc = 0;

	*out = NULL;
	if (!inner || !pl || inner->inflight != 0) {
		rc = -EINVAL;
		goto out;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		rc = -ENOMEM;
		goto out;
	}
	io_ctx_wrap(&c->io, &powerloss_ops, inner);
	c->inner = inner;
	c->pl = pl;
	*out = &c->io;
out:
	if (rc < 0)
		io_ctx_free(inner);
	return rc;
}
