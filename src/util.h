/*
 * util.h - small helpers shared by the engine: time, allocation that cannot
 * fail silently, hex, alignment.
 */
#ifndef KVT_UTIL_H
#define KVT_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Wall clock and monotonic clock in nanoseconds. */
int64_t util_now_ns(void);
int64_t util_mono_ns(void);

/*
 * Timed waits that a change of the wall clock cannot stretch or cut short:
 * util_cond_init() makes a condition variable whose pthread_cond_timedwait()
 * runs on CLOCK_MONOTONIC, and util_deadline() is the deadline for it ms
 * from now.
 */
void util_cond_init(pthread_cond_t *cond);
void util_deadline(struct timespec *ts, int64_t ms);

/* Lower-case hex of len bytes into out (2 * len + 1 bytes). */
void util_hex(char *out, const void *buf, size_t len);

/* A random 64-bit value from getrandom(2). */
uint64_t util_random64(void);

/* The kernel's boot id, to tell a reboot from a process restart. */
int util_boot_id(char out[37]);

/* Create dir and its parents (mode 0755); exists already is fine. */
int util_mkdir_p(const char *dir);

/*
 * util_mkdir_p() that sets *made to how many of dir's last components it
 * created, for util_rmdir_made() to remove them again, and only them.
 */
int util_mkdir_p_made(const char *dir, unsigned *made);
void util_rmdir_made(const char *dir, unsigned made);

/*
 * Raises this process's soft limit on open files to its hard limit if it is
 * below `want`; returns the soft limit then in force.
 */
uint64_t util_raise_nofile(uint64_t want);

/*
 * Makes room for element n of a growing array: when n == *cap, doubles *cap
 * (16 the first time) and reallocates the array *vp points to. On failure
 * returns -ENOMEM and leaves the array and *cap as they were. Call it
 * through UTIL_GROW(array, n, cap), which passes the element's size.
 * (git's ALLOC_GROW)
 */
int util_grow(void *vp, size_t *cap, size_t n, size_t size);
#define UTIL_GROW(v, n, cap) util_grow(&(v), &(cap), (n), sizeof(*(v)))

/* Aligned allocation for O_DIRECT; free with free(). NULL on failure. */
void *util_aligned_alloc(size_t align, size_t size);

/*
 * A buffer of a megabyte or more, on a 2 MiB boundary, in transparent huge
 * pages where the kernel has them; free with util_big_free(p, size). On
 * this project's virtual machines the first write to each 4 KiB page of
 * fresh memory cost about 27 us (8 MiB copied at 150 MB/s), and 2 MiB pages
 * make that 1 ms per 8 MiB (docs/benchmarks.md, "Demotion of 32 MiB
 * blocks"); a device transfer also costs per page it spans. The kernel
 * aligns only mappings of whole 2 MiB multiples by itself (4 I/O buffers
 * of 1 MiB + 4 KiB got one huge page, not two).
 */
void *util_big_alloc(size_t size);
void util_big_free(void *p, size_t size);

/*
 * malloc_trim(0): gives free heap memory back to the kernel. Nothing under
 * ASan or TSan, whose allocator is not glibc's: there, trimming glibc's
 * arenas from a thread set that thread up in an arena glibc never counted,
 * and glibc aborted when the thread ended (CI, kvtier-migrate under ASan).
 */
void util_malloc_trim(void);

/*
 * pthread_create() for the engine's own threads: they start with every
 * asynchronous signal blocked, so a SIGTERM meant for the program (its
 * sigwait() or its handler) never lands in a library thread, where the
 * default action would kill the process. Returns 0 or -errno.
 */
int util_thread_start(pthread_t *tid, const pthread_attr_t *attr, void *(*fn)(void *),
		      void *arg);

/*
 * A daemon's detach (kvtier-gateway -d, kvtier-fuse): forks, and the parent
 * waits on a pipe and exits with the status the child hands it with
 * util_detach_done() once it serves (0) or has failed; so whoever started
 * it learns at once, with the reason on its stderr, that the address is
 * taken or the store cannot open (daemon(3) returned 0 before any of that
 * was tried). The child, in a session of its own, gets *notify_fd. No store
 * may be open yet: the engine's byte-range locks and threads would not
 * survive the fork. 0 in the child, -errno (logged) if it cannot fork.
 */
int util_detach(int *notify_fd);
/* Hands the waiting parent its exit status; once (*notify_fd becomes -1). */
void util_detach_done(int *notify_fd, int status);

#endif /* KVT_UTIL_H */
