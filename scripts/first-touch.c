/*
 * first-touch.c - what the first write to fresh anonymous memory costs on
 * this machine: 8 MiB copied into a new mapping of 4 KiB pages, into one
 * advised for transparent huge pages (MADV_HUGEPAGE), and into one buffer
 * reused. On the project's virtual machines the first was about 150 MB/s
 * (27 us a page), the other two 4 to 7 GB/s: why util_big_alloc() exists
 * (docs/benchmarks.md, "Demotion of 32 MiB blocks").
 *
 *   cc -O2 -o /tmp/first-touch scripts/first-touch.c && /tmp/first-touch
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define SIZE (8u << 20)
#define ROUNDS 32

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void report(const char *what, double t)
{
	printf("%-28s %6.2f ms per 8 MiB, %6.0f MB/s\n", what, t / ROUNDS * 1e3,
	       (double)ROUNDS * SIZE / t / 1e6);
}

int main(void)
{
	char *src = malloc(SIZE), *b;
	double t0;

	if (!src)
		return 1;
	memset(src, 1, SIZE);
	for (int huge = 0; huge < 2; huge++) {
		t0 = now();
		for (int i = 0; i < ROUNDS; i++) {
			b = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
			if (b == MAP_FAILED)
				return 1;
			if (huge)
				madvise(b, SIZE, MADV_HUGEPAGE);
			memcpy(b, src, SIZE);
			munmap(b, SIZE);
		}
		report(huge ? "fresh, huge pages advised" : "fresh, 4 KiB pages", now() - t0);
	}
	b = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return 1;
	memcpy(b, src, SIZE);
	t0 = now();
	for (int i = 0; i < ROUNDS; i++) {
		memcpy(b, src, SIZE);
		__asm__ volatile("" : : "r"(b) : "memory");
	}
	report("reused", now() - t0);
	return 0;
}
