/*
 * util.c - small helpers shared by the engine, and CRC32C.
 *
 * kvt_crc32c() wraps ISA-L's crc32_iscsi(), which works on the raw register
 * without the standard pre- and post-inversion; the wrapper applies both so
 * that results match RFC 3720 and S3's x-amz-checksum-crc32c, and so that
 * crc32c(crc32c(0, a), b) == crc32c(0, a || b).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <isa-l/crc.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"
#include "log.h"
#include "util.h"

uint32_t kvt_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	while (len > 0) {
		/* crc32_iscsi takes an int length. */
		int n = len > (1u << 30) ? 1 << 30 : (int)len;

		crc = crc32_iscsi((unsigned char *)p, n, crc);
		p += n;
		len -= n;
	}
	return ~crc;
}

/*
 * CRC of A || B from crc(A), crc(B) and len(B): crc(A) times x^(8 len(B))
 * modulo the polynomial, plus crc(B), as zlib's crc32_combine() computes it
 * since 1.2.12, with the Castagnoli polynomial. x^(8 len) is the product of
 * the powers x^(2^k) that the bits of 8 len select, each kept in a table,
 * so a combination costs a few dozen 32-bit carry-less products. (The
 * matrix squaring of zlib's older version, used here before, cost tens of
 * microseconds a call: 8% of a writer's CPU at two calls a 1 MiB extent.)
 * Lets a writer checksum each chunk once and still know the extent's and
 * the object's CRC, and lets an upload's parts become one object without
 * reading them again.
 */
#define CRC32C_POLY 0x82f63b78u	/* reflected */

/* a(x) b(x) modulo the polynomial, in the reflected bit order. */
static uint32_t crc32c_multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
	}
	return p;
}

static uint32_t crc32c_x2n[64];	/* x^(2^k) modulo the polynomial */
static pthread_once_t crc32c_x2n_once = PTHREAD_ONCE_INIT;

static void crc32c_x2n_make(void)
{
	uint32_t p = 1u << 30;	/* x^1 */

	for (int k = 0; k < 64; k++) {
		crc32c_x2n[k] = p;
		p = crc32c_multmodp(p, p);
	}
}

uint32_t kvt_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
	uint32_t p = 1u << 31;	/* x^0 */

	pthread_once(&crc32c_x2n_once, crc32c_x2n_make);
	/* len2 counts bytes: x^(8 len2), so its bit j selects x^(2^(j + 3)). */
	for (unsigned k = 3; len2; len2 >>= 1, k++)
		if (len2 & 1)
			p = crc32c_multmodp(crc32c_x2n[k & 63], p);
	return crc32c_multmodp(p, crc1) ^ crc2;
}

int64_t util_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t util_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void util_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
}

void util_deadline(struct timespec *ts, int64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

void util_hex(char *out, const void *buf, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *p = buf;

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * len] = '\0';
}

uint64_t util_random64(void)
{
	uint64_t v = 0;
	size_t got = 0;

	while (got < sizeof(v)) {
		ssize_t n = getrandom((char *)&v + got, sizeof(v) - got, 0);

		if (n > 0)
			got += n;
		else if (errno != EINTR)
			abort(); /* no entropy means no unique ids: refuse to go on */
	}
	return v;
}

int util_boot_id(char out[37])
{
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, out, 36);
	close(fd);
	if (n != 36)
		return -EIO;
	out[36] = '\0';
	return 0;
}

uint64_t util_raise_nofile(uint64_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return want;	/* cannot tell: let open() say */
	if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
		rlim_t cur = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			rl.rlim_cur = cur;
	}
	return rl.rlim_cur;
}

int util_mkdir_p(const char *dir)
{
	unsigned made;

	return util_mkdir_p_made(dir, &made);
}

int util_mkdir_p_made(const char *dir, unsigned *made)
{
	char path[4096];
	size_t len = strlen(dir);

	*made = 0;
	if (len == 0)
		return -EINVAL;
	if (len >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, len + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) == 0)
			(*made)++;
		else if (errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0755) == 0) {
		(*made)++;
	} else {
		struct stat sb;

		if (errno != EEXIST)
			return -errno;
		if (stat(path, &sb) < 0)
			return -errno;
		if (!S_ISDIR(sb.st_mode))
			return -ENOTDIR;
	}
	return 0;
}

void util_rmdir_made(const char *dir, unsigned made)
{
	char path[4096];
	size_t len = strlen(dir);

	if (len >= sizeof(path))
		return;
	memcpy(path, dir, len + 1);
	/*
	 * Deepest first, as util_mkdir_p_made() made them. rmdir() removes an
	 * empty directory only, so one another process has put a file in
	 * since stays; one never made (mkdir failed half way) is skipped.
	 */
	while (made > 0 && len > 1) {
		while (len > 1 && path[len - 1] == '/')
			path[--len] = '\0';
		if (rmdir(path) == 0)
			made--;
		else if (errno != ENOENT)
			return;
		while (len > 1 && path[len - 1] != '/')
			len--;
		path[len] = '\0';
	}
}

const char *kvt_strerror(int rc)
{
	switch (rc < 0 ? -rc : rc) {
	case EUCLEAN:	return "the catalog is damaged (kvtier(1), DAMAGED CATALOG)";
	case ESTALE:	return "object was reclaimed while it was read";
	case ENOSPC:	return "no space left (hot tier full, or the disk under the store)";
	case EIO:	return "I/O or checksum error";
	case ENXIO:	return "g4's bucket does not exist at the partner (is [g4] url right?)";
	case EREMCHG:	return "the store is not where its id was given (a copy, or moved):"
			       " nothing is written to g4 (kvtier store-id)";
	default:	return strerror(rc < 0 ? -rc : rc);
	}
}

int util_grow(void *vp, size_t *cap, size_t n, size_t size)
{
	size_t ncap = *cap ? 2 * *cap : 16;
	void *v, *nv;

	if (n < *cap)
		return 0;
	if (ncap > SIZE_MAX / size)
		return -ENOMEM;
	/* vp points to a pointer of some object type: copied, not cast. */
	memcpy(&v, vp, sizeof(v));
	nv = realloc(v, ncap * size);
	if (!nv)
		return -ENOMEM;
	memcpy(vp, &nv, sizeof(nv));
	*cap = ncap;
	return 0;
}

void *util_aligned_alloc(size_t align, size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, align, size) != 0)
		return NULL;
	return p;
}

void *util_big_alloc(size_t size)
{
	const size_t huge = 2u << 20, page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (size + page - 1) / page * page;
	char *p = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	char *a;

	if (p == MAP_FAILED)
		return NULL;
	/* Only whole 2 MiB-aligned ranges get huge pages: start on one and
	 * give the rest of the reservation back. */
	a = (char *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	munmap(a + len, (size_t)(p + len + huge - (a + len)));
	(void)madvise(a, len, MADV_HUGEPAGE);	/* a hint: small pages work too */
	return a;
}

void util_big_free(void *p, size_t size)
{
	if (p)
		munmap(p, size);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UTIL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UTIL_SANITIZED 1
#endif
#endif

void util_malloc_trim(void)
{
#ifndef UTIL_SANITIZED
	malloc_trim(0);
#endif
}

int util_thread_start(pthread_t *tid, const pthread_attr_t *attr, void *(*fn)(void *),
		      void *arg)
{
	sigset_t all, old;
	int rc;

	/* Faults stay deliverable: they are raised by the thread itself. */
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(tid, attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -rc;
}

int util_detach(int *notify_fd)
{
	int p[2], rc, status = 1;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0) {
		rc = -errno;
		log_err(rc, "cannot detach: pipe");
		return rc;
	}
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		log_err(rc, "cannot detach: fork");
		close(p[0]);
		close(p[1]);
		return rc;
	}
	if (pid > 0) {
		unsigned char b;

		close(p[1]);
		if (read(p[0], &b, 1) == 1)
			status = b;
		_exit(status);	/* the child died before it said: 1 */
	}
	close(p[0]);
	setsid();
	*notify_fd = p[1];
	return 0;
}

void util_detach_done(int *notify_fd, int status)
{
	unsigned char b = (unsigned char)status;

	if (*notify_fd < 0)
		return;
	if (write(*notify_fd, &b, 1) < 0)
		b = 0;	/* the parent is gone: nobody to tell */
	close(*notify_fd);
	*notify_fd = -1;
}
