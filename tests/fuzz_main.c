/*
 * fuzz_main.c - runs a libFuzzer-style target without libFuzzer, so that
 * every fuzz target is also a plain test that `make check` runs with gcc.
 *
 * The target is named by the program: tests/fuzz_config runs target
 * "config". The driver feeds it, in order:
 *  1. every file of the seed corpus $top_srcdir/tests/fuzz/corpus/<target>
 *     (top_srcdir from the environment, "." if unset), in name order;
 *  2. FUZZ_RUNS (default 2000) random mutations of corpus files: bit flips,
 *     bytes replaced, inserted or deleted, chunks duplicated, splices of two
 *     files. The generator is seeded with a fixed value, printed, so a run is
 *     repeatable; FUZZ_SEED picks another. FUZZ_SECONDS (default 10, 0 for no
 *     limit) bounds the time, so a slow machine runs fewer inputs rather
 *     than time out.
 * With file arguments it runs just those files, to replay a crash.
 *
 * There is no coverage feedback: this is a smoke fuzzer that keeps the
 * corpus and the target honest on every build. Deep fuzzing is the same
 * target built with clang -fsanitize=fuzzer -DKVT_LIBFUZZER, for which this
 * file compiles to nothing.
 *
 * A crash loses no input: the input being run is written to
 * crash-<target>-<seed> in the current directory, from the sanitizers' death
 * callback or, in a build without sanitizers, from a signal handler.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef KVT_LIBFUZZER

#define FUZZ_MAX_LEN_MIN 4096	/* mutants may grow to this, or the largest seed */

/* In the sanitizer runtimes; NULL when the build has none. */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

struct fuzz_input {
	uint8_t *data;
	size_t size;
};

static struct fuzz_input *fuzz_corpus;
static size_t fuzz_ncorpus;
static uint64_t fuzz_rng;
/* The input being run and where it goes if the target dies on it. */
static volatile sig_atomic_t fuzz_running;
static const uint8_t *fuzz_cur;
static size_t fuzz_cur_size;
static char fuzz_crash_path[256];

static uint64_t fuzz_rand(void)
{
	/* splitmix64: tiny, and the same sequence on every platform. */
	uint64_t z = (fuzz_rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static size_t fuzz_below(size_t n)
{
	return n ? fuzz_rand() % n : 0;
}

/* A function, not a macro: its arguments draw random numbers. */
static size_t fuzz_min(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* Only async-signal-safe calls: this runs from a signal handler too. */
static void fuzz_save_crash(void)
{
	static const char msg[] = "fuzz: the input that crashed is in ";
	int fd;

	if (!fuzz_running)
		return;		/* died outside the target: no input to blame */
	fd = open(fuzz_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (fuzz_cur_size > 0 && write(fd, fuzz_cur, fuzz_cur_size) < 0)
		fuzz_cur_size = 0;
	close(fd);
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0 ||
	    write(STDERR_FILENO, fuzz_crash_path, strlen(fuzz_crash_path)) < 0 ||
	    write(STDERR_FILENO, "\n", 1) < 0)
		return;
}

static void fuzz_on_signal(int sig)
{
	fuzz_save_crash();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void fuzz_catch_crashes(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };

	/*
	 * A sanitizer prints its report and then calls us; our own signal
	 * handlers would replace its SIGSEGV handler and lose the report.
	 */
	if (__sanitizer_set_death_callback) {
		__sanitizer_set_death_callback(fuzz_save_crash);
		return;
	}
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], fuzz_on_signal);
}

static void fuzz_run(const uint8_t *data, size_t size)
{
	fuzz_cur = data;
	fuzz_cur_size = size;
	fuzz_running = 1;
	LLVMFuzzerTestOneInput(data, size);
	fuzz_running = 0;
}

/* Reads a whole file; 0 or a negative errno. Caller frees in->data. */
static int fuzz_read_file(const char *path, struct fuzz_input *in)
{
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			uint8_t *bigger = realloc(buf, cap ? cap * 2 : 4096);

			if (!bigger) {
				rc = -ENOMEM;
				goto out;
			}
			buf = bigger;
			cap = cap ? cap * 2 : 4096;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += n;
	}
	in->data = buf;
	in->size = len;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

static int fuzz_is_seed(const struct dirent *d)
{
	return d->d_name[0] != '.';	/* ".", "..", editor and VCS files */
}

/* Loads every file of dir into fuzz_corpus; a missing dir is an empty corpus. */
static int fuzz_load_corpus(const char *dir)
{
	struct dirent **names = NULL;
	char path[4096];
	int n = scandir(dir, &names, fuzz_is_seed, alphasort);
	int rc = 0;

	if (n < 0)
		return -errno;
	fuzz_corpus = calloc(n ? n : 1, sizeof(*fuzz_corpus));
	if (!fuzz_corpus) {
		rc = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name) >= (int)sizeof(path))
			rc = -ENAMETOOLONG;
		else
			rc = fuzz_read_file(path, &fuzz_corpus[fuzz_ncorpus]);
		if (rc == -EISDIR)
			continue;
		if (rc < 0) {
			fprintf(stderr, "fuzz: cannot read '%s': %s\n", path, strerror(-rc));
			goto out;
		}
		fuzz_ncorpus++;
	}
	rc = 0;
out:
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

static uint8_t fuzz_some_byte(void)
{
	static const uint8_t edges[] = { 0x00, 0x01, 0x7f, 0x80, 0xff, '\n', '\r', ' ' };
	const struct fuzz_input *in;

	/* Mostly bytes the corpus uses: they are the ones the parser cares about. */
	if (fuzz_ncorpus > 0 && fuzz_below(4) != 0) {
		in = &fuzz_corpus[fuzz_below(fuzz_ncorpus)];
		if (in->size > 0)
			return in->data[fuzz_below(in->size)];
	}
	if (fuzz_below(2))
		return edges[fuzz_below(sizeof(edges))];
	return (uint8_t)fuzz_rand();
}

/* Inserts n bytes of src at pos of buf (size, room for max); returns the new size. */
static size_t fuzz_insert(uint8_t *buf, size_t size, size_t max, size_t pos,
			  const uint8_t *src, size_t n)
{
	if (n > max - size)
		n = max - size;
	memmove(buf + pos + n, buf + pos, size - pos);
	memcpy(buf + pos, src, n);
	return size + n;
}

/* One to four stacked mutations of buf; returns the new size (<= max). */
static size_t fuzz_mutate(uint8_t *buf, size_t size, size_t max)
{
	unsigned rounds = 1 + fuzz_below(4);

	while (rounds--) {
		const struct fuzz_input *other = fuzz_ncorpus ?
			&fuzz_corpus[fuzz_below(fuzz_ncorpus)] : NULL;
		size_t pos = fuzz_below(size + 1), n;
		uint8_t byte;

		switch (fuzz_below(7)) {
		case 0:		/* flip a bit */
			if (size > 0)
				buf[fuzz_below(size)] ^= 1u << fuzz_below(8);
			break;
		case 1:		/* replace a byte */
			if (size > 0)
				buf[fuzz_below(size)] = fuzz_some_byte();
			break;
		case 2:		/* insert a byte */
			byte = fuzz_some_byte();
			size = fuzz_insert(buf, size, max, pos, &byte, 1);
			break;
		case 3:		/* delete up to 8 bytes */
			n = fuzz_min(1 + fuzz_below(8), size - pos);
			memmove(buf + pos, buf + pos + n, size - pos - n);
			size -= n;
			break;
		case 4: {	/* duplicate a chunk of this input */
			uint8_t chunk[64];
			size_t from = fuzz_below(size + 1);

			n = fuzz_min(fuzz_below(sizeof(chunk)) + 1, size - from);
			memcpy(chunk, buf + from, n);
			size = fuzz_insert(buf, size, max, pos, chunk, n);
			break;
		}
		case 5: {	/* splice: our head, another input's tail */
			size_t from;

			if (!other)
				break;
			from = fuzz_below(other->size + 1);
			n = fuzz_min(other->size - from, max - pos);
			memcpy(buf + pos, other->data + from, n);
			size = pos + n;
			break;
		}
		case 6: {	/* insert a chunk of another input */
			size_t from;

			if (!other)
				break;
			from = fuzz_below(other->size + 1);
			n = fuzz_min(fuzz_below(64) + 1, other->size - from);
			size = fuzz_insert(buf, size, max, pos, other->data + from, n);
			break;
		}
		}
	}
	return size;
}

static unsigned long fuzz_env(const char *name, unsigned long def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end) {
		fprintf(stderr, "fuzz: ignoring %s='%s': not a number\n", name, s);
		return def;
	}
	return v;
}

static double fuzz_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	const char *top = getenv("top_srcdir");
	const unsigned long runs = fuzz_env("FUZZ_RUNS", 2000);
	const unsigned long seconds = fuzz_env("FUZZ_SECONDS", 10);
	const uint64_t seed = fuzz_env("FUZZ_SEED", 20240601);
	char target[128], dir[4096];
	unsigned long inputs = 0, i;
	size_t max = FUZZ_MAX_LEN_MIN, size = 0;
	uint8_t *buf = NULL;
	double start = fuzz_now();
	int rc;

	/* tests/fuzz_config, or libtool's tests/.libs/lt-fuzz_config */
	if (strncmp(prog, "lt-", 3) == 0)
		prog += 3;
	if (strncmp(prog, "fuzz_", 5) == 0)
		prog += 5;
	if (snprintf(target, sizeof(target), "%s", prog) >= (int)sizeof(target) ||
	    snprintf(fuzz_crash_path, sizeof(fuzz_crash_path), "crash-%s-%llu",
		     target, (unsigned long long)seed) >= (int)sizeof(fuzz_crash_path)) {
		fprintf(stderr, "fuzz: program name '%s' is too long\n", prog);
		return 1;
	}
	fuzz_catch_crashes();

	if (argc > 1) {
		for (int a = 1; a < argc; a++) {
			struct fuzz_input in;

			rc = fuzz_read_file(argv[a], &in);
			if (rc < 0) {
				fprintf(stderr, "fuzz_%s: cannot read '%s': %s\n",
					target, argv[a], strerror(-rc));
				return 1;
			}
			fuzz_run(in.data, in.size);
			free(in.data);
			inputs++;
		}
		printf("fuzz_%s: %lu inputs, 0 crashes\n", target, inputs);
		return 0;
	}

	if (snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s",
		     top && *top ? top : ".", target) >= (int)sizeof(dir)) {
		fprintf(stderr, "fuzz_%s: top_srcdir '%s' is too long\n", target, top);
		return 1;
	}
	rc = fuzz_load_corpus(dir);
	if (rc == -ENOENT)
		fprintf(stderr, "fuzz_%s: no seed corpus in '%s': mutating from nothing\n",
			target, dir);
	else if (rc < 0)
		return 1;
	printf("fuzz_%s: %zu seed files from %s, seed %llu (FUZZ_SEED=%llu repeats this run)\n",
	       target, fuzz_ncorpus, dir, (unsigned long long)seed, (unsigned long long)seed);
	fflush(stdout);

	for (i = 0; i < fuzz_ncorpus; i++) {
		fuzz_run(fuzz_corpus[i].data, fuzz_corpus[i].size);
		if (fuzz_corpus[i].size > max)
			max = fuzz_corpus[i].size;
		inputs++;
	}

	fuzz_rng = seed;
	buf = malloc(max);
	if (!buf)
		return 1;
	for (i = 0; i < runs; i++) {
		if (seconds > 0 && fuzz_now() - start >= seconds) {
			printf("fuzz_%s: stopped after %lu s (FUZZ_SECONDS)\n", target, seconds);
			break;
		}
		/* Half the time build on the last mutant, to reach further from the seeds. */
		if (size == 0 || fuzz_below(2) == 0) {
			const struct fuzz_input *in = fuzz_ncorpus ?
				&fuzz_corpus[fuzz_below(fuzz_ncorpus)] : NULL;

			size = in ? in->size : 0;
			if (size)
				memcpy(buf, in->data, size);
		}
		size = fuzz_mutate(buf, size, max);
		fuzz_run(buf, size);
		inputs++;
	}

	printf("fuzz_%s: %lu inputs, 0 crashes\n", target, inputs);
	free(buf);
	for (i = 0; i < fuzz_ncorpus; i++)
		free(fuzz_corpus[i].data);
	free(fuzz_corpus);
	return 0;
}

#endif /* KVT_LIBFUZZER */
