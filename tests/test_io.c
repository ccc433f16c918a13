/*
 * test_io.c - the hot tier's block I/O backends (src/io*.c): data written
 * through a context reads back the same with several requests in flight and
 * whatever the completion order, with registered and unregistered buffers,
 * and the fault injector does exactly what its plan says.
 *
 * The io_uring tests need a directory where io_uring_probe() succeeds; tmpfs
 * refuses O_DIRECT, so $TMPDIR, /var/tmp, /tmp and the build directory are
 * tried in turn. Where none works, those tests are skipped and the reason is
 * printed; the sync and fault tests run anywhere.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"
#include "io.h"

struct backend {
	const char *name;
	int (*ctx_new)(unsigned depth, unsigned nbufs, size_t buf_size, struct io_ctx **out);
	int direct;
};

static const struct backend sync_be = { "sync", io_sync_ctx_new, 0 };
static const struct backend uring_be = { "io_uring", io_uring_ctx_new, 1 };

static char sync_dir[PATH_MAX];		/* scratch for non-O_DIRECT files */
static char uring_dir[PATH_MAX];	/* scratch where io_uring_probe works, or "" */
static char uring_why[512];		/* why no directory worked */

/* ---- helpers ------------------------------------------------------------ */

static void rm_dir(const char *dir)
{
	char path[PATH_MAX + 256];
	struct dirent *de;
	DIR *d;

	if (!dir[0] || !(d = opendir(dir)))
		return;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

static int count_entries(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* A fresh, already unlinked file in the backend's directory; skips the test if there is none. */
static int open_scratch(const struct backend *be)
{
	const char *dir = be->direct ? uring_dir : sync_dir;
	char path[PATH_MAX + 32];
	int fd, tmp;

	if (be->direct && !uring_dir[0]) {
		print_message("io_uring unavailable: %s\n", uring_why);
		skip();
	}
	snprintf(path, sizeof(path), "%s/f-XXXXXX", dir);
	tmp = mkstemp(path);
	assert_true(tmp >= 0);
	fd = open(path, O_RDWR | O_CLOEXEC | (be->direct ? O_DIRECT : 0));
	assert_true(fd >= 0);
	close(tmp);
	unlink(path);
	return fd;
}

static struct io_ctx *new_ctx(const struct backend *be, unsigned depth, unsigned nbufs,
			      size_t buf_size)
{
	struct io_ctx *io = NULL;

	assert_int_equal(be->ctx_new(depth, nbufs, buf_size, &io), 0);
	assert_non_null(io);
	assert_int_equal(io->direct, be->direct);
	assert_int_equal(io->inflight, 0);
	return io;
}

static void *xalign(size_t len)
{
	void *p = NULL;

	assert_int_equal(posix_memalign(&p, IO_ALIGN, len), 0);
	return p;
}

/* 0 if buf holds len bytes of test_fill(seed, off). */
static int check_fill(const void *buf, size_t len, uint64_t seed, uint64_t off)
{
	unsigned char *want = malloc(len);
	int rc;

	assert_non_null(want);
	test_fill(want, len, seed, off);
	rc = memcmp(buf, want, len) != 0;
	free(want);
	return rc;
}

static void write_fill(struct io_ctx *io, int fd, uint64_t off, size_t len, uint64_t seed)
{
	void *buf = xalign(len);

	test_fill(buf, len, seed, off);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, -1, len, off), (ssize_t)len);
	free(buf);
}

static int group_setup(void **state)
{
	const char *tmpdir = getenv("TMPDIR");
	const char *builddir = getenv("top_builddir");
	const char *cands[] = { tmpdir, "/var/tmp", "/tmp", builddir ? builddir : "." };
	char why[256];

	(void)state;
	snprintf(sync_dir, sizeof(sync_dir), "%s/kvtier-test-io-XXXXXX", tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(sync_dir))
		return -1;

	uring_dir[0] = '\0';
	snprintf(uring_why, sizeof(uring_why), "no candidate directory");
	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
		if (!cands[i])
			continue;
		snprintf(uring_dir, sizeof(uring_dir), "%s/kvtier-test-io-XXXXXX", cands[i]);
		if (!mkdtemp(uring_dir)) {
			uring_dir[0] = '\0';
			continue;
		}
		if (io_uring_probe(uring_dir, NULL, why, sizeof(why)) == 0)
			return 0;
		snprintf(uring_why, sizeof(uring_why), "%s", why);
		rm_dir(uring_dir);
		uring_dir[0] = '\0';
	}
	print_message("io_uring tests will be skipped: %s\n", uring_why);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	rm_dir(sync_dir);
	rm_dir(uring_dir);
	return 0;
}

/* ---- buffers and contexts ----------------------------------------------- */

static void test_bufs(void **state)
{
	struct io_ctx *io = NULL;
	struct io_ctx bare;

	(void)state;
	io = new_ctx(&sync_be, 4, 3, 8192);
	assert_int_equal(io->nbufs, 3);
	assert_int_equal(io->buf_size, 8192);
	for (unsigned i = 0; i < io->nbufs; i++) {
		assert_non_null(io_buf(io, i));
		assert_int_equal((uintptr_t)io_buf(io, i) % IO_ALIGN, 0);
		memset(io_buf(io, i), (int)i, io->buf_size);	/* ASan: the whole size is ours */
		for (unsigned j = 0; j < i; j++)
			assert_ptr_not_equal(io_buf(io, i), io_buf(io, j));
	}
	io_ctx_free(io);

	memset(&bare, 0, sizeof(bare));
	assert_int_equal(io_bufs_alloc(&bare, 0, 4096), 0);
	assert_null(bare.bufs);
	io_bufs_release(&bare);
	assert_int_equal(io_bufs_alloc(&bare, 2, 0), -EINVAL);
	assert_null(bare.bufs);
	assert_int_equal(io_bufs_alloc(&bare, 2, 12288), 0);
	assert_int_equal(bare.nbufs, 2);
	io_bufs_release(&bare);
	assert_null(bare.bufs);
	assert_int_equal(bare.nbufs, 0);

	io = NULL;
	assert_int_equal(io_sync_ctx_new(0, 1, 4096, &io), -EINVAL);
	assert_null(io);
	io_ctx_free(NULL);
}

/* ---- both backends -------------------------------------------------------- */

#define RT_N 8

static const uint64_t rt_off[RT_N] = {
	0, 4096, 65536, 40960, 1 << 20, 3 * (1 << 20) + 8192, 16 << 20, 131072,
};
static const size_t rt_len[RT_N] = {
	4096, 8192, 65536, 12288, 32768, 4096, 65536, 16384,
};

/*
 * Submits RT_N requests at once, then waits for them in whatever order they
 * come: each must come back exactly once, with its own data pointer.
 */
static void rt_batch(struct io_ctx *io, struct io_req *reqs, enum io_op op, int fd,
		     void **bufs, int registered)
{
	int seen[RT_N] = { 0 };

	for (unsigned i = 0; i < RT_N; i++) {
		reqs[i] = (struct io_req){
			.op = op, .fd = fd, .buf = bufs[i],
			.buf_index = registered ? (int)i : -1,
			.len = rt_len[i], .off = rt_off[i], .res = 12345,
			.data = (void *)(uintptr_t)i,
		};
		assert_int_equal(io_submit(io, &reqs[i]), 0);
		assert_int_equal(io->inflight, i + 1);
	}
	for (unsigned n = 0; n < RT_N; n++) {
		struct io_req *done = NULL;
		uintptr_t i;

		assert_int_equal(io_wait(io, &done), 0);
		assert_non_null(done);
		i = (uintptr_t)done->data;
		assert_true(i < RT_N);
		assert_ptr_equal(done, &reqs[i]);
		assert_false(seen[i]);
		seen[i] = 1;
		assert_int_equal(done->res, (ssize_t)rt_len[i]);
	}
	assert_int_equal(io->inflight, 0);
}

static void roundtrip(const struct backend *be, int registered)
{
	struct io_req reqs[RT_N];
	void *bufs[RT_N];
	struct io_ctx *io;
	int fd = open_scratch(be);

	io = new_ctx(be, RT_N, registered ? RT_N : 0, 65536);
	for (unsigned i = 0; i < RT_N; i++) {
		bufs[i] = registered ? io_buf(io, i) : xalign(65536);
		test_fill(bufs[i], rt_len[i], 100 + i, rt_off[i]);
	}
	rt_batch(io, reqs, IO_WRITE, fd, bufs, registered);

	for (unsigned i = 0; i < RT_N; i++)
		memset(bufs[i], 0xee, 65536);
	rt_batch(io, reqs, IO_READ, fd, bufs, registered);
	for (unsigned i = 0; i < RT_N; i++)
		assert_int_equal(check_fill(bufs[i], rt_len[i], 100 + i, rt_off[i]), 0);

	/* The same blocks read back through the synchronous convenience. */
	for (unsigned i = 0; i < RT_N; i++) {
		memset(bufs[i], 0, 65536);
		assert_int_equal(io_run(io, IO_READ, fd, bufs[i], registered ? (int)i : -1,
					rt_len[i], rt_off[i]), (ssize_t)rt_len[i]);
		assert_int_equal(check_fill(bufs[i], rt_len[i], 100 + i, rt_off[i]), 0);
	}

	io_ctx_free(io);
	if (!registered)
		for (unsigned i = 0; i < RT_N; i++)
			free(bufs[i]);
	close(fd);
}

static void test_roundtrip_registered(void **state)
{
	roundtrip(*state, 1);
}

static void test_roundtrip_unregistered(void **state)
{
	roundtrip(*state, 0);
}

/* Reads and writes of disjoint blocks in flight together, mixing both kinds of buffer. */
static void test_mixed(void **state)
{
	const struct backend *be = *state;
	struct io_req reqs[6];
	void *own = xalign(3 * 8192);
	struct io_ctx *io;
	int fd = open_scratch(be);
	int seen[6] = { 0 };

	io = new_ctx(be, 6, 3, 8192);
	for (unsigned i = 0; i < 3; i++)
		write_fill(io, fd, i * 8192, 8192, 7 + i);
	for (unsigned i = 0; i < 3; i++) {
		void *wbuf = (char *)own + i * 8192;

		test_fill(wbuf, 8192, 70 + i, (3 + i) * 8192);
		reqs[2 * i] = (struct io_req){
			.op = IO_READ, .fd = fd, .buf = io_buf(io, i), .buf_index = (int)i,
			.len = 8192, .off = i * 8192, .data = &seen[2 * i],
		};
		reqs[2 * i + 1] = (struct io_req){
			.op = IO_WRITE, .fd = fd, .buf = wbuf, .buf_index = -1,
			.len = 8192, .off = (3 + i) * 8192, .data = &seen[2 * i + 1],
		};
	}
	for (unsigned i = 0; i < 6; i++)
		assert_int_equal(io_submit(io, &reqs[i]), 0);
	for (unsigned i = 0; i < 6; i++) {
		struct io_req *done = NULL;

		assert_int_equal(io_wait(io, &done), 0);
		assert_int_equal(done->res, 8192);
		assert_int_equal(*(int *)done->data, 0);
		*(int *)done->data = 1;
	}
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(check_fill(io_buf(io, i), 8192, 7 + i, i * 8192), 0);
		memset(own, 0, 8192);
		assert_int_equal(io_run(io, IO_READ, fd, own, -1, 8192, (3 + i) * 8192), 8192);
		assert_int_equal(check_fill(own, 8192, 70 + i, (3 + i) * 8192), 0);
	}
	io_ctx_free(io);
	free(own);
	close(fd);
}

/* The error paths every backend shares. */
static void test_errors(void **state)
{
	const struct backend *be = *state;
	struct io_req reqs[3];
	struct io_req *done = NULL;
	struct io_ctx *io;
	int fd = open_scratch(be);
	void *buf;

	io = new_ctx(be, 2, 1, 8192);
	buf = io_buf(io, 0);

	/* Nothing in flight: waiting would block forever. */
	assert_int_equal(io_wait(io, &done), -EINVAL);

	/* A buffer index the context does not have. */
	assert_int_equal(io_run(io, IO_READ, fd, buf, 1, 4096, 0), -EINVAL);
	assert_int_equal(io->inflight, 0);

	/* A bad descriptor fails the request, not the submission. */
	assert_int_equal(io_run(io, IO_READ, -1, buf, 0, 4096, 0), -EBADF);

	/* Past the end of the file: 0 bytes; across it: a short count, not retried. */
	test_fill(buf, 4096, 1, 0);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 4096, 0), 4096);
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 4096, 1 << 20), 0);
	memset(buf, 0, 8192);
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 8192, 0), 4096);
	assert_int_equal(check_fill(buf, 4096, 1, 0), 0);

	/* depth 2: the third request is refused, the first two still complete. */
	for (unsigned i = 0; i < 3; i++)
		reqs[i] = (struct io_req){
			.op = IO_READ, .fd = fd, .buf = buf, .buf_index = 0,
			.len = 4096, .off = 0,
		};
	assert_int_equal(io_submit(io, &reqs[0]), 0);
	assert_int_equal(io_submit(io, &reqs[1]), 0);
	assert_int_equal(io_submit(io, &reqs[2]), -EBUSY);
	assert_int_equal(io->inflight, 2);
	/* io_run cannot tell its completion from theirs. */
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 4096, 0), -EBUSY);
	assert_int_equal(io_wait(io, &done), 0);
	assert_int_equal(done->res, 4096);
	assert_int_equal(io_wait(io, &done), 0);
	assert_int_equal(done->res, 4096);
	assert_int_equal(io->inflight, 0);
	assert_int_equal(io_wait(io, &done), -EINVAL);

	io_ctx_free(io);
	close(fd);
}

/* Freeing a context with requests in flight waits for them (ASan: nothing leaks). */
static void test_free_inflight(void **state)
{
	const struct backend *be = *state;
	struct io_req reqs[4];
	struct io_ctx *io;
	int fd = open_scratch(be);
	void *buf;

	io = new_ctx(be, 4, 4, 16384);
	for (unsigned i = 0; i < 4; i++) {
		test_fill(io_buf(io, i), 16384, 40 + i, i * 16384);
		reqs[i] = (struct io_req){
			.op = IO_WRITE, .fd = fd, .buf = io_buf(io, i), .buf_index = (int)i,
			.len = 16384, .off = i * 16384,
		};
		assert_int_equal(io_submit(io, &reqs[i]), 0);
	}
	io_ctx_free(io);
	/* The writes were not abandoned. */
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(reqs[i].res, 16384);
	buf = xalign(4 * 16384);
	assert_int_equal(pread(fd, buf, 4 * 16384, 0), 4 * 16384);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(check_fill((char *)buf + i * 16384, 16384, 40 + i, i * 16384), 0);
	free(buf);
	close(fd);
}

/* ---- io_uring only ---------------------------------------------------------- */

/*
 * A read on an empty pipe stays in flight until the pipe is written to, so
 * a file read submitted after it must complete first.
 */
static void test_uring_out_of_order(void **state)
{
	struct io_req pipe_req, file_req;
	struct io_req *done = NULL;
	char msg[16];
	struct io_ctx *io;
	int fd, p[2];

	(void)state;
	fd = open_scratch(&uring_be);
	io = new_ctx(&uring_be, 4, 1, 8192);
	write_fill(io, fd, 0, 8192, 5);
	assert_int_equal(pipe(p), 0);

	pipe_req = (struct io_req){
		.op = IO_READ, .fd = p[0], .buf = msg, .buf_index = -1,
		.len = sizeof(msg), .off = (uint64_t)-1, .data = "pipe",
	};
	file_req = (struct io_req){
		.op = IO_READ, .fd = fd, .buf = io_buf(io, 0), .buf_index = 0,
		.len = 8192, .off = 0, .data = "file",
	};
	assert_int_equal(io_submit(io, &pipe_req), 0);
	assert_int_equal(io_submit(io, &file_req), 0);

	assert_int_equal(io_wait(io, &done), 0);
	assert_ptr_equal(done, &file_req);
	assert_string_equal(done->data, "file");
	assert_int_equal(done->res, 8192);
	assert_int_equal(check_fill(io_buf(io, 0), 8192, 5, 0), 0);
	assert_int_equal(io->inflight, 1);

	assert_int_equal(write(p[1], "hello", 5), 5);
	assert_int_equal(io_wait(io, &done), 0);
	assert_ptr_equal(done, &pipe_req);
	assert_int_equal(done->res, 5);
	assert_memory_equal(msg, "hello", 5);
	assert_int_equal(io->inflight, 0);

	io_ctx_free(io);
	close(p[0]);
	close(p[1]);
	close(fd);
}

/*
 * With RLIMIT_MEMLOCK at 64 KiB and without CAP_IPC_LOCK, registering 256 KiB
 * of buffers fails: the context must still work, requests with buf_index >= 0
 * included, and say so once. Done in a child because the limit and the
 * capability cannot always be restored, and the warning is once per process.
 * (The limit is not 0: recent kernels charge the rings themselves to it.)
 */
static int fallback_child(const char *logpath)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct cap[2];
	struct rlimit rl = { 65536, 65536 };
	struct io_ctx *io = NULL, *io2 = NULL;
	char log[1024] = "";
	int fd, logfd;
	ssize_t n;
	off_t size1;

	if (syscall(SYS_capget, &hdr, cap) < 0)
		return 10;
	cap[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	if (syscall(SYS_capset, &hdr, cap) < 0)
		return 11;
	if (setrlimit(RLIMIT_MEMLOCK, &rl) < 0)
		return 12;
	logfd = open(logpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (logfd < 0 || dup2(logfd, STDERR_FILENO) < 0)
		return 13;

	if (io_uring_ctx_new(4, 4, 65536, &io) < 0)
		return 78;	/* not even the ring fits under the limit */
	fd = open_scratch(&uring_be);
	for (unsigned i = 0; i < 4; i++) {
		test_fill(io_buf(io, i), 65536, 90 + i, i * 65536);
		if (io_run(io, IO_WRITE, fd, io_buf(io, i), (int)i, 65536, i * 65536) != 65536)
			return 15;
	}
	for (unsigned i = 0; i < 4; i++) {
		memset(io_buf(io, i), 0, 65536);
		if (io_run(io, IO_READ, fd, io_buf(io, i), (int)i, 65536, i * 65536) != 65536)
			return 16;
		if (check_fill(io_buf(io, i), 65536, 90 + i, i * 65536) != 0)
			return 17;
	}
	size1 = lseek(logfd, 0, SEEK_END);
	/* A second context fails the same way, silently. */
	if (io_uring_ctx_new(4, 4, 65536, &io2) < 0)
		return 18;
	if (lseek(logfd, 0, SEEK_END) != size1)
		return 19;
	io_ctx_free(io2);
	io_ctx_free(io);
	close(fd);

	n = pread(logfd, log, sizeof(log) - 1, 0);
	if (n < 0)
		return 20;
	log[n] = '\0';
	if (!strstr(log, "warning") || !strstr(log, "unregistered"))
		return 77;	/* registration did not fail: nothing fell back */
	return 0;
}

static void test_uring_register_fallback(void **state)
{
	char logpath[PATH_MAX + 16];
	int status = 0;
	pid_t pid;

	(void)state;
	if (!uring_dir[0]) {
		print_message("io_uring unavailable: %s\n", uring_why);
		skip();
	}
	snprintf(logpath, sizeof(logpath), "%s/log", uring_dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fallback_child(logpath));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	unlink(logpath);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 78) {
		print_message("%s under RLIMIT_MEMLOCK=64K; fallback not exercised\n",
			      WEXITSTATUS(status) == 77 ? "buffer registration succeeded"
			      : "cannot create a ring");
		skip();
	}
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_probe(void **state)
{
	char dir[PATH_MAX + 32];
	char why[256];
	struct statfs sfs;
	int rc;

	(void)state;
	/* A directory that does not exist is reported, with its name. */
	snprintf(dir, sizeof(dir), "%s/does-not-exist", sync_dir);
	rc = io_uring_probe(dir, NULL, why, sizeof(why));
	assert_true(rc < 0);
	assert_true(why[0] != '\0');
	/* NULL why is fine. */
	assert_true(io_uring_probe(dir, NULL, NULL, 0) < 0);

	if (uring_dir[0]) {
		/* It worked in setup; it works again and leaves no file behind. */
		snprintf(dir, sizeof(dir), "%s/probe-XXXXXX", uring_dir);
		assert_non_null(mkdtemp(dir));
		strcpy(why, "junk");
		assert_int_equal(io_uring_probe(dir, NULL, why, sizeof(why)), 0);
		assert_string_equal(why, "");
		assert_int_equal(count_entries(dir), 0);

		/* A segment file an init killed early left empty proves nothing
		 * either way: the probe writes its own (a short read was EIO). */
		{
			char seg[PATH_MAX + 64];
			int fd;

			snprintf(seg, sizeof(seg), "%s/seg0", dir);
			fd = open(seg, O_CREAT | O_WRONLY, 0600);
			assert_true(fd >= 0);
			close(fd);
			assert_int_equal(io_uring_probe(dir, seg, why, sizeof(why)), 0);
			assert_int_equal(truncate(seg, 1000), 0);
			assert_int_equal(io_uring_probe(dir, seg, why, sizeof(why)), 0);
			assert_int_equal(unlink(seg), 0);
		}
		assert_int_equal(rmdir(dir), 0);
	}

	/*
	 * tmpfs refuses O_DIRECT before Linux 6.6 and accepts it since: either
	 * way the probe must say which, and clean up.
	 */
	if (uring_dir[0] && statfs("/dev/shm", &sfs) == 0 && sfs.f_type == TMPFS_MAGIC) {
		snprintf(dir, sizeof(dir), "/dev/shm/kvtier-test-io-XXXXXX");
		if (mkdtemp(dir)) {
			rc = io_uring_probe(dir, NULL, why, sizeof(why));
			assert_int_equal(count_entries(dir), 0);
			rmdir(dir);
			print_message("probe on tmpfs: %s\n", rc == 0 ? "O_DIRECT works" : why);
			if (rc != 0) {
				assert_int_equal(rc, -EINVAL);
				assert_non_null(strstr(why, "O_DIRECT"));
			}
		}
	}
}

/* ---- fault injection -------------------------------------------------------- */

static struct io_ctx *new_fault(const struct backend *be, struct io_fault_plan *plan,
				unsigned depth, unsigned nbufs, size_t buf_size)
{
	struct io_ctx *inner = new_ctx(be, depth, nbufs, buf_size);
	struct io_ctx *io = NULL;

	assert_int_equal(io_fault_ctx_new(inner, plan, &io), 0);
	assert_non_null(io);
	/* The wrapper lends out the inner context's buffers. */
	assert_int_equal(io->nbufs, inner->nbufs);
	assert_int_equal(io->buf_size, inner->buf_size);
	assert_ptr_equal(io->bufs, inner->bufs);
	assert_int_equal(io->direct, inner->direct);
	return io;
}

/* The 3rd write fails with EIO and never reaches the disk; reads are not counted. */
static void test_fault_eio_nth_write(void **state)
{
	struct io_fault_plan plan = { .kind = IO_FAULT_EIO, .ops = 1 << IO_WRITE, .nth = 3 };
	struct io_ctx *io;
	int fd = open_scratch(&sync_be);
	void *buf;

	(void)state;
	io = new_fault(&sync_be, &plan, 4, 1, 4096);
	buf = io_buf(io, 0);
	for (unsigned i = 0; i < 5; i++) {
		ssize_t want = i == 2 ? -EIO : 4096;

		test_fill(buf, 4096, i, i * 4096);
		assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 4096, i * 4096), want);
		/* A read in between counts for nothing. */
		assert_true(io_run(io, IO_READ, fd, buf, 0, 4096, 0) == 4096);
	}
	assert_int_equal(plan.calls, 5);
	assert_int_equal(plan.injected, 1);

	for (unsigned i = 0; i < 5; i++) {
		assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 4096, i * 4096), 4096);
		if (i == 2) {
			/* A hole: the failed write left nothing. */
			static const unsigned char zero[4096];

			assert_memory_equal(buf, zero, 4096);
		} else {
			assert_int_equal(check_fill(buf, 4096, i, i * 4096), 0);
		}
	}
	assert_int_equal(plan.calls, 5);
	io_ctx_free(io);
	close(fd);
}

/* Sticky ENOSPC: every write from the 2nd on fails, and each is counted. */
static void test_fault_enospc_sticky(void **state)
{
	struct io_fault_plan plan = {
		.kind = IO_FAULT_ENOSPC, .ops = 1 << IO_WRITE, .nth = 2, .sticky = 1,
	};
	struct io_ctx *io;
	int fd = open_scratch(&sync_be);
	void *buf;

	(void)state;
	io = new_fault(&sync_be, &plan, 4, 1, 4096);
	buf = io_buf(io, 0);
	test_fill(buf, 4096, 3, 0);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 4096, 0), 4096);
	for (unsigned i = 1; i < 5; i++)
		assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 4096, i * 4096), -ENOSPC);
	assert_int_equal(plan.calls, 5);
	assert_int_equal(plan.injected, 4);
	/* Nothing but the first block reached the disk; reads still work. */
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 4096, 0), 4096);
	assert_int_equal(check_fill(buf, 4096, 3, 0), 0);
	assert_int_equal(lseek(fd, 0, SEEK_END), 4096);
	io_ctx_free(io);
	close(fd);
}

/* Short writes report half of len (aligned down where possible) and transfer only that. */
static void test_fault_short(void **state)
{
	struct io_fault_plan plan = {
		.kind = IO_FAULT_SHORT, .ops = 1 << IO_WRITE, .nth = 1, .sticky = 1,
	};
	struct io_ctx *io;
	int fd = open_scratch(&sync_be);
	void *buf;
	static const unsigned char zero[16384];

	(void)state;
	io = new_fault(&sync_be, &plan, 4, 1, 16384);
	buf = io_buf(io, 0);

	test_fill(buf, 16384, 11, 0);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 16384, 0), 8192);
	/* 12 KiB: half is 6 KiB, aligned down to 4 KiB. */
	test_fill(buf, 12288, 12, 65536);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 12288, 65536), 4096);
	/* 4 KiB: half rounds to 0, so res is the unaligned half: never 0 for a write. */
	test_fill(buf, 4096, 13, 131072);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 4096, 131072), 2048);
	assert_int_equal(plan.calls, 3);
	assert_int_equal(plan.injected, 3);

	/* Only the reported bytes reached the disk (the inner backend is not O_DIRECT). */
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 16384, 0), 16384);
	assert_int_equal(check_fill(buf, 8192, 11, 0), 0);
	assert_memory_equal((char *)buf + 8192, zero, 8192);
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 12288, 65536), 12288);
	assert_int_equal(check_fill(buf, 4096, 12, 65536), 0);
	assert_memory_equal((char *)buf + 4096, zero, 8192);
	assert_int_equal(lseek(fd, 0, SEEK_END), 131072 + 2048);
	io_ctx_free(io);

	/* Short reads: half the data, the rest of the buffer untouched. */
	memset(&plan, 0, sizeof(plan));
	plan = (struct io_fault_plan){ .kind = IO_FAULT_SHORT, .ops = 1 << IO_READ, .nth = 2 };
	io = new_fault(&sync_be, &plan, 4, 1, 16384);
	buf = io_buf(io, 0);
	test_fill(buf, 16384, 14, 0);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 16384, 0), 16384);
	assert_int_equal(plan.calls, 0);
	memset(buf, 0xaa, 16384);
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 16384, 0), 16384);
	memset(buf, 0xaa, 16384);
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 16384, 0), 8192);
	assert_int_equal(check_fill(buf, 8192, 14, 0), 0);
	for (unsigned i = 8192; i < 16384; i++)
		assert_int_equal(((unsigned char *)buf)[i], 0xaa);
	assert_int_equal(plan.calls, 2);
	assert_int_equal(plan.injected, 1);
	io_ctx_free(io);
	close(fd);
}

/* A corrupted read differs in exactly one byte, at res / 2; the disk is intact. */
static void test_fault_corrupt(void **state)
{
	struct io_fault_plan plan = { .kind = IO_FAULT_CORRUPT, .ops = 1 << IO_READ, .nth = 2 };
	unsigned char *want = malloc(65536);
	unsigned char *buf;
	struct io_ctx *io;
	int fd = open_scratch(&sync_be);
	unsigned diffs;

	(void)state;
	assert_non_null(want);
	test_fill(want, 65536, 21, 0);
	io = new_fault(&sync_be, &plan, 4, 1, 65536);
	buf = io_buf(io, 0);
	memcpy(buf, want, 65536);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 65536, 0), 65536);

	for (unsigned r = 1; r <= 3; r++) {
		memset(buf, 0, 65536);
		assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 65536, 0), 65536);
		diffs = 0;
		for (unsigned i = 0; i < 65536; i++)
			if (buf[i] != want[i])
				diffs++;
		if (r == 2) {
			assert_int_equal(diffs, 1);
			assert_int_equal(buf[32768], (unsigned char)~want[32768]);
		} else {
			assert_int_equal(diffs, 0);
		}
	}
	assert_int_equal(plan.calls, 3);
	assert_int_equal(plan.injected, 1);
	io_ctx_free(io);

	/*
	 * A corrupted write reports success, puts one inverted byte on the
	 * disk at len / 2, and gives the caller its buffer back unchanged.
	 */
	plan = (struct io_fault_plan){ .kind = IO_FAULT_CORRUPT, .ops = 1 << IO_WRITE, .nth = 1 };
	io = new_fault(&sync_be, &plan, 4, 1, 65536);
	buf = io_buf(io, 0);
	test_fill(want, 8192, 22, 0);
	memcpy(buf, want, 8192);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 8192, 0), 8192);
	assert_memory_equal(buf, want, 8192);
	assert_int_equal(plan.injected, 1);
	assert_int_equal(pread(fd, buf, 8192, 0), 8192);
	diffs = 0;
	for (unsigned i = 0; i < 8192; i++)
		if (buf[i] != want[i])
			diffs++;
	assert_int_equal(diffs, 1);
	assert_int_equal(buf[4096], (unsigned char)~want[4096]);
	io_ctx_free(io);
	free(want);
	close(fd);
}

/* One plan over two contexts: the nth request counts over both. Kind NONE only counts. */
static void test_fault_shared_plan(void **state)
{
	struct io_fault_plan plan = {
		.kind = IO_FAULT_EIO, .ops = 1 << IO_READ | 1 << IO_WRITE, .nth = 4,
	};
	struct io_fault_plan none = { .kind = IO_FAULT_NONE, .ops = 1 << IO_READ, .nth = 1, .sticky = 1 };
	struct io_ctx *a, *b, *c;
	struct io_ctx *ctxs[2];
	int fd = open_scratch(&sync_be);
	struct io_ctx *bad = NULL;

	(void)state;
	a = new_fault(&sync_be, &plan, 2, 1, 4096);
	b = new_fault(&sync_be, &plan, 2, 1, 4096);
	ctxs[0] = a;
	ctxs[1] = b;
	test_fill(io_buf(a, 0), 4096, 31, 0);
	for (unsigned i = 0; i < 6; i++) {
		struct io_ctx *io = ctxs[i % 2];
		enum io_op op = i % 3 == 0 ? IO_WRITE : IO_READ;

		if (op == IO_WRITE)
			test_fill(io_buf(io, 0), 4096, 31, 0);
		assert_int_equal(io_run(io, op, fd, io_buf(io, 0), 0, 4096, 0),
				 i == 3 ? -EIO : 4096);
	}
	assert_int_equal(plan.calls, 6);
	assert_int_equal(plan.injected, 1);
	io_ctx_free(a);
	io_ctx_free(b);

	c = new_fault(&sync_be, &none, 2, 1, 4096);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(io_run(c, IO_READ, fd, io_buf(c, 0), 0, 4096, 0), 4096);
	assert_int_equal(io_run(c, IO_WRITE, fd, io_buf(c, 0), 0, 4096, 0), 4096);
	assert_int_equal(none.calls, 3);
	assert_int_equal(none.injected, 0);
	io_ctx_free(c);

	/* Bad arguments; the wrapper takes ownership of inner even then. */
	assert_int_equal(io_fault_ctx_new(new_ctx(&sync_be, 1, 0, 0), NULL, &bad), -EINVAL);
	assert_null(bad);
	close(fd);
}

/*
 * Injected failures and inner completions, in flight together, all come
 * back exactly once; the injected one overtakes requests submitted before it.
 */
static void test_fault_inflight(void **state)
{
	const struct backend *be = *state;
	struct io_fault_plan plan = { .kind = IO_FAULT_EIO, .ops = 1 << IO_WRITE, .nth = 2 };
	struct io_req reqs[4];
	struct io_req *done = NULL;
	struct io_ctx *io;
	int fd = open_scratch(be);
	int seen[4] = { 0 };

	io = new_fault(be, &plan, 4, 4, 4096);
	for (unsigned i = 0; i < 4; i++) {
		test_fill(io_buf(io, i), 4096, 50 + i, i * 4096);
		reqs[i] = (struct io_req){
			.op = IO_WRITE, .fd = fd, .buf = io_buf(io, i), .buf_index = (int)i,
			.len = 4096, .off = i * 4096, .data = &seen[i],
		};
		assert_int_equal(io_submit(io, &reqs[i]), 0);
	}
	assert_int_equal(io->inflight, 4);
	assert_int_equal(io_wait(io, &done), 0);
	assert_ptr_equal(done, &reqs[1]);
	assert_int_equal(done->res, -EIO);
	seen[1] = 1;
	for (unsigned n = 0; n < 3; n++) {
		assert_int_equal(io_wait(io, &done), 0);
		assert_int_equal(*(int *)done->data, 0);
		*(int *)done->data = 1;
		assert_int_equal(done->res, 4096);
		/* The caller's data pointer is its own again. */
		assert_true(done == &reqs[0] || done == &reqs[2] || done == &reqs[3]);
	}
	assert_int_equal(io->inflight, 0);
	assert_int_equal(io_wait(io, &done), -EINVAL);

	/* Freed with an injected failure and inner requests still in flight. */
	plan.nth = 6;
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(io_submit(io, &reqs[i]), 0);
	assert_int_equal(plan.calls, 7);
	assert_int_equal(plan.injected, 2);
	io_ctx_free(io);
	assert_int_equal(reqs[0].res, 4096);
	assert_int_equal(reqs[1].res, -EIO);
	assert_int_equal(reqs[2].res, 4096);
	close(fd);
}

/*
 * Over O_DIRECT io_uring: a short write under 8 KiB cannot be issued short,
 * so the full block goes to disk and only res is half; from 8 KiB only the
 * aligned half is written. Corrupt reads work on registered buffers.
 */
static void test_fault_uring(void **state)
{
	struct io_fault_plan plan = {
		.kind = IO_FAULT_SHORT, .ops = 1 << IO_WRITE, .nth = 1, .sticky = 1,
	};
	struct io_ctx *io;
	unsigned char *buf;
	unsigned char want;
	int fd;

	(void)state;
	fd = open_scratch(&uring_be);
	io = new_fault(&uring_be, &plan, 4, 2, 16384);
	buf = io_buf(io, 0);
	test_fill(buf, 4096, 61, 0);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 4096, 0), 2048);
	test_fill(buf, 16384, 62, 16384);
	assert_int_equal(io_run(io, IO_WRITE, fd, buf, 0, 16384, 16384), 8192);
	assert_int_equal(plan.injected, 2);
	/* Reads are not in plan.ops. */
	assert_int_equal(io_run(io, IO_READ, fd, buf, 0, 4096, 0), 4096);
	assert_int_equal(check_fill(buf, 4096, 61, 0), 0);
	assert_int_equal(lseek(fd, 0, SEEK_END), 16384 + 8192);
	io_ctx_free(io);

	plan = (struct io_fault_plan){ .kind = IO_FAULT_CORRUPT, .ops = 1 << IO_READ, .nth = 1 };
	io = new_fault(&uring_be, &plan, 4, 2, 16384);
	buf = io_buf(io, 1);
	assert_int_equal(io_run(io, IO_READ, fd, buf, 1, 8192, 16384), 8192);
	assert_int_equal(check_fill(buf, 4096, 62, 16384), 0);
	test_fill(&want, 1, 62, 16384 + 4096);
	assert_int_equal(buf[4096], (unsigned char)~want);
	buf[4096] ^= 0xff;
	assert_int_equal(check_fill(buf, 8192, 62, 16384), 0);
	io_ctx_free(io);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bufs),
		{ "roundtrip_registered/sync", test_roundtrip_registered, NULL, NULL, (void *)&sync_be },
		{ "roundtrip_registered/io_uring", test_roundtrip_registered, NULL, NULL, (void *)&uring_be },
		{ "roundtrip_unregistered/sync", test_roundtrip_unregistered, NULL, NULL, (void *)&sync_be },
		{ "roundtrip_unregistered/io_uring", test_roundtrip_unregistered, NULL, NULL, (void *)&uring_be },
		{ "mixed/sync", test_mixed, NULL, NULL, (void *)&sync_be },
		{ "mixed/io_uring", test_mixed, NULL, NULL, (void *)&uring_be },
		{ "errors/sync", test_errors, NULL, NULL, (void *)&sync_be },
		{ "errors/io_uring", test_errors, NULL, NULL, (void *)&uring_be },
		{ "free_inflight/sync", test_free_inflight, NULL, NULL, (void *)&sync_be },
		{ "free_inflight/io_uring", test_free_inflight, NULL, NULL, (void *)&uring_be },
		cmocka_unit_test(test_uring_out_of_order),
		cmocka_unit_test(test_uring_register_fallback),
		cmocka_unit_test(test_probe),
		cmocka_unit_test(test_fault_eio_nth_write),
		cmocka_unit_test(test_fault_enospc_sticky),
		cmocka_unit_test(test_fault_short),
		cmocka_unit_test(test_fault_corrupt),
		cmocka_unit_test(test_fault_shared_plan),
		{ "fault_inflight/sync", test_fault_inflight, NULL, NULL, (void *)&sync_be },
		{ "fault_inflight/io_uring", test_fault_inflight, NULL, NULL, (void *)&uring_be },
		cmocka_unit_test(test_fault_uring),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
