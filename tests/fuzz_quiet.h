/*
 * fuzz_quiet.h - what fuzz targets whose code logs every refusal share:
 * stderr quieted while the code under test runs (thousands of lines in a
 * `make check` log otherwise), unless FUZZ_VERBOSE is set. A sanitizer's
 * report in CI goes to its log_path; by hand, FUZZ_VERBOSE=1 shows it.
 */
#ifndef KVT_FUZZ_QUIET_H
#define KVT_FUZZ_QUIET_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int fuzz_null_fd = -1, fuzz_stderr_fd = -1;

/* Once, before the first fuzz_quiet(); 0, or -1 if stderr stays as it is. */
static inline int fuzz_quiet_init(void)
{
	if (getenv("FUZZ_VERBOSE"))
		return 0;
	fuzz_null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	fuzz_stderr_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	return fuzz_null_fd >= 0 && fuzz_stderr_fd >= 0 ? 0 : -1;
}

/* on = 1: stderr to /dev/null; 0: back. */
static inline void fuzz_quiet(int on)
{
	if (fuzz_null_fd < 0 || fuzz_stderr_fd < 0)
		return;
	fflush(stderr);
	dup2(on ? fuzz_null_fd : fuzz_stderr_fd, STDERR_FILENO);
}

#endif /* KVT_FUZZ_QUIET_H */
