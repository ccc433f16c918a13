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
#include <signal.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvtier.h"
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
 * CRC of A || B from crc(A), crc(B) and len(B), in O(log len) steps: zlib's
 * crc32_combine() with the Castagnoli polynomial. Lets a writer checksum
 * each extent once and still know the whole object's CRC, and lets an
 * upload's parts become one object without reading them again.
 */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;

	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		square[n] = gf2_times(mat, mat[n]);
}

uint32_t kvt_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
	uint32_t even[32], odd[32], row = 1;

	if (len2 == 0)
		return crc1;
	odd[0] = 0x82f63b78u;	/* the reflected polynomial: one zero bit */
	for (int n = 1; n < 32; n++, row <<= 1)
		odd[n] = row;
	gf2_square(even, odd);	/* two zero bits */
	gf2_square(odd, even);	/* four */
	do {
		gf2_square(even, odd);
		if (len2 & 1)
			crc1 = gf2_times(even, crc1);
		len2 >>= 1;
		if (!len2)
			break;
		gf2_square(odd, even);
		if (len2 & 1)
			crc1 = gf2_times(odd, crc1);
		len2 >>= 1;
	} while (len2);
	return crc1 ^ crc2;
}

void util_crc32c_shifter(uint64_t len, uint32_t op[32])
{
	/* Shifting is linear over GF(2): column n is the shift of bit n. */
	for (int n = 0; n < 32; n++)
		op[n] = kvt_crc32c_combine(1u << n, 0, len);
}

uint32_t util_crc32c_shift(const uint32_t op[32], uint32_t crc)
{
	return gf2_times(op, crc);
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

int util_mkdir_p(const char *dir)
{
	char path[4096];
	size_t len = strlen(dir);

	if (len == 0)
		return -EINVAL;
	if (len >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, len + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0755) < 0) {
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

void *util_aligned_alloc(size_t align, size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, align, size) != 0)
		return NULL;
	return p;
}

void *util_big_alloc(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, size, MADV_HUGEPAGE);	/* a hint: small pages work too */
	return p;
}

void util_big_free(void *p, size_t size)
{
	if (p)
		munmap(p, size);
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
