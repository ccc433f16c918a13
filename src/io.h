/*
 * io.h - the hot tier's block I/O, behind one small interface.
 *
 * Three backends implement it: io_uring with O_DIRECT and registered buffers
 * (io_uring.c), plain pread/pwrite (io_sync.c) and a fault injector that wraps
 * either of them (io_fault.c). The segment store only ever calls io_*().
 *
 * An io_ctx belongs to one thread. It owns `nbufs` buffers of `buf_size`
 * bytes, aligned to IO_ALIGN, registered with the kernel where the backend
 * can; requests should use them (buf_index >= 0) but any IO_ALIGN-aligned
 * memory works (buf_index = -1).
 *
 * Requests are asynchronous: io_submit() queues one, io_push() starts what
 * is queued without waiting, io_wait() starts what is queued and returns one
 * completed request (in any order). res holds the byte count transferred or
 * a negative errno; a short count is reported as such, not retried.
 *
 * Queueing without a system call matters: on virtualised hosts a system
 * call costs as much as a small NVMe read, so a reader submits its batch and
 * waits in one io_uring_enter(), and a writer pushes only when it wants the
 * device busy while it fills the next buffer.
 */
#ifndef KVT_IO_H
#define KVT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IO_ALIGN 4096

enum io_op { IO_READ, IO_WRITE };

struct io_req {
	enum io_op op;
	int fd;
	void *buf;
	int buf_index;		/* registered buffer, or -1 */
	size_t len;
	uint64_t off;
	ssize_t res;		/* set on completion: bytes or -errno */
	void *data;		/* the caller's */
};

struct io_ctx;

struct io_ops {
	const char *name;
	int (*submit)(struct io_ctx *io, struct io_req *req);
	/* Starts queued requests; NULL when submit already started them. */
	int (*push)(struct io_ctx *io);
	/* Blocks until one request completes; *done is that request. */
	int (*wait)(struct io_ctx *io, struct io_req **done);
	void (*free)(struct io_ctx *io);
	/* Makes fd's written data durable; NULL: fdatasync(2). */
	int (*fsync)(struct io_ctx *io, int fd);
};

struct io_ctx {
	const struct io_ops *ops;
	unsigned nbufs;
	size_t buf_size;
	void **bufs;
	unsigned inflight;	/* submitted, not yet returned by wait */
	int direct;		/* files for this backend are opened O_DIRECT */
};

/*
 * Creates a context of the given kind with `depth` requests in flight at most
 * and nbufs buffers of buf_size bytes. Caller frees with io_ctx_free().
 */
int io_uring_ctx_new(unsigned depth, unsigned nbufs, size_t buf_size, struct io_ctx **out);
int io_sync_ctx_new(unsigned depth, unsigned nbufs, size_t buf_size, struct io_ctx **out);

/* Frees a context of any backend; waits for requests still in flight. Accepts NULL. */
void io_ctx_free(struct io_ctx *io);

static inline void *io_buf(struct io_ctx *io, unsigned i) { return io->bufs[i]; }

int io_submit(struct io_ctx *io, struct io_req *req);
int io_push(struct io_ctx *io);
int io_wait(struct io_ctx *io, struct io_req **done);

/*
 * Makes the data written to fd so far durable (fdatasync(2), or what the
 * backend simulates in its place). 0 or -errno.
 */
int io_fdatasync(struct io_ctx *io, int fd);

/* Submits one request and waits for it: the synchronous convenience. */
ssize_t io_run(struct io_ctx *io, enum io_op op, int fd, void *buf, int buf_index,
	       size_t len, uint64_t off);

/*
 * Probes whether this kernel and the file system under dir support io_uring
 * and O_DIRECT, by reading `existing` if that file exists, else by writing a
 * scratch file in dir. Returns 0 if both work, else a negative errno and a
 * reason in why ("io_uring_setup: Operation not permitted").
 */
int io_uring_probe(const char *dir, const char *existing, char *why, size_t whylen);

/* Shared helpers for backends (io.c). */
int io_bufs_alloc(struct io_ctx *io, unsigned nbufs, size_t buf_size);
void io_bufs_release(struct io_ctx *io);
/* For backends that wrap another (fault, powerloss): io takes ops and lends
 * inner's buffers, which stay inner's to free. */
void io_ctx_wrap(struct io_ctx *io, const struct io_ops *ops, const struct io_ctx *inner);

/* ---- fault injection (io_fault.c), for tests ------------------------ */

enum io_fault_kind {
	IO_FAULT_NONE,
	IO_FAULT_EIO,		/* the request fails with -EIO */
	IO_FAULT_ENOSPC,	/* the request fails with -ENOSPC */
	IO_FAULT_SHORT,		/* half the bytes are transferred */
	IO_FAULT_CORRUPT,	/* a read returns with one byte flipped */
	IO_FAULT_EXIT,		/* the process exits, as if killed (a forked test child) */
};

/* The exit status of a process that IO_FAULT_EXIT ended. */
#define IO_FAULT_EXIT_STATUS 86

/*
 * A plan shared by every fault context made from it: the nth request
 * (counting from 1, over all contexts) of the chosen ops fails as `kind`;
 * with `sticky` every request from the nth on fails. Counters are atomic.
 */
struct io_fault_plan {
	enum io_fault_kind kind;
	unsigned ops;		/* 1 << IO_READ | 1 << IO_WRITE */
	unsigned long nth;
	int sticky;
	unsigned long calls;	/* requests seen, updated by the backend */
	unsigned long injected;	/* faults injected */
	unsigned long pushes;	/* io_push() calls, whatever was queued */
};

/* Wraps inner (takes ownership) so that requests obey plan. */
int io_fault_ctx_new(struct io_ctx *inner, struct io_fault_plan *plan, struct io_ctx **out);

/* ---- power loss (io_powerloss.c), for tests ------------------------- */

/*
 * A simulated volatile write cache between the process and its files, like
 * SQLite's crash tests (test6.c): writes to a file registered with it stay
 * in memory until the file is synced, reads see them, and at "power off"
 * (io_powerloss_crash) each unsynced write reaches the file, or does not,
 * or is torn at sector granularity, in a random order. A SQLite VFS shim
 * (tests/test_powerloss.c) and the hot tier's contexts share one, as the
 * catalog and the segments share one machine.
 *
 * Files are known by inode; the first call for an inode dup()s the
 * descriptor, which stays open until io_powerloss_free() so that the inode
 * is never reused under a pending write.
 */
struct io_powerloss;

struct io_powerloss_stats {
	unsigned long writes, syncs;	/* seen before the crash */
	unsigned long pending;		/* unsynced writes at the crash */
	unsigned long landed, dropped, torn;
};

/* seed makes the crash's choices reproducible. */
int io_powerloss_new(uint64_t seed, struct io_powerloss **out);
void io_powerloss_free(struct io_powerloss *pl);

/* File operations through the cache; the same contract as pread/pwrite. */
ssize_t io_powerloss_pwrite(struct io_powerloss *pl, int fd, const void *buf, size_t len,
			    uint64_t off);
ssize_t io_powerloss_pread(struct io_powerloss *pl, int fd, void *buf, size_t len, uint64_t off);
int io_powerloss_truncate(struct io_powerloss *pl, int fd, uint64_t size);
int io_powerloss_size(struct io_powerloss *pl, int fd, uint64_t *size);
int io_powerloss_sync(struct io_powerloss *pl, int fd);
/* The file is being deleted: its pending writes go with it. */
void io_powerloss_forget(struct io_powerloss *pl, int fd);

/* What the crash does with each unsynced write: the random mix above, or,
 * for tests that need one exact outcome, every one lands or none does. */
enum io_powerloss_policy { IO_PL_RANDOM, IO_PL_LAND_ALL, IO_PL_DROP_ALL };
void io_powerloss_set_policy(struct io_powerloss *pl, enum io_powerloss_policy policy);

/*
 * Power off now: applies the random subset described above and from then
 * on fails every operation with -EIO. stats may be NULL.
 */
void io_powerloss_crash(struct io_powerloss *pl, struct io_powerloss_stats *stats);

/*
 * Power off in the middle of whatever runs: after `after` more writes and
 * syncs (counted together), the one that would be next crashes instead and
 * calls fn(arg, stats), which does not return (it exits the process).
 */
void io_powerloss_arm(struct io_powerloss *pl, unsigned long after,
		      void (*fn)(void *arg, const struct io_powerloss_stats *stats), void *arg);

/*
 * A hot-tier context whose I/O goes through pl: wraps inner (takes
 * ownership, even on failure) for its buffers only.
 */
int io_powerloss_ctx_new(struct io_ctx *inner, struct io_powerloss *pl, struct io_ctx **out);

#endif /* KVT_IO_H */
