/*
 * fuzz_config.c - fuzz target for kvtier.conf, the one parser in the engine
 * that reads bytes an operator (or a configuration tool) wrote.
 *
 * Each input becomes the whole file: it is written to a memfd and loaded
 * through /proc/self/fd/N, because kvt_config_load() takes a path and a
 * memfd costs no disk and leaves nothing behind. Besides "no crash, no
 * leak" (ASan and LeakSanitizer see to those), the target checks what the
 * loader promises, and aborts if a promise is broken:
 *  - on success, every cross-check holds in the result, and the addresses
 *    of [gateway] listen and metrics_listen are ones the gateway can bind
 *    (fuzz_listen checks that parser on its own);
 *  - on failure, the message names the file and cfg is left exactly as it
 *    was (loading is all or nothing).
 *
 * Built two ways with the same sources: with fuzz_main.c as a plain test
 * program that replays the seed corpus and random mutations (make check),
 * or with clang -fsanitize=fuzzer -DKVT_LIBFUZZER, where libFuzzer provides
 * main() and fuzz_main.c compiles to nothing.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvtier.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_fd = -1;
static char fuzz_path[64];

static void fuzz_require(int ok, const char *what, const char *err)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_config: broken promise: %s (err '%s')\n", what, err);
	abort();
}

/* The memfd is made once and rewritten for each input. */
static void fuzz_write(const uint8_t *data, size_t size)
{
	size_t done = 0;

	if (fuzz_fd < 0) {
		fuzz_fd = memfd_create("fuzz_config", MFD_CLOEXEC);
		if (fuzz_fd < 0) {
			perror("fuzz_config: memfd_create");
			abort();
		}
		snprintf(fuzz_path, sizeof(fuzz_path), "/proc/self/fd/%d", fuzz_fd);
	}
	if (ftruncate(fuzz_fd, 0) < 0) {
		perror("fuzz_config: ftruncate");
		abort();
	}
	while (done < size) {
		ssize_t n = pwrite(fuzz_fd, data + done, size - done, done);

		if (n <= 0) {
			perror("fuzz_config: pwrite");
			abort();
		}
		done += n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_config cfg, def;
	struct sockaddr_storage ss;
	socklen_t sslen;
	char err[512];
	int rc;

	fuzz_write(data, size);
	kvt_config_init(&cfg);
	kvt_config_init(&def);
	rc = kvt_config_load(&cfg, fuzz_path, err, sizeof(err));
	if (rc == 0) {
		const double high = cfg.store.high_watermark, low = cfg.store.low_watermark;

		fuzz_require(err[0] == '\0', "success leaves err empty", err);
		fuzz_require(cfg.path && strcmp(cfg.path, fuzz_path) == 0, "path is recorded", err);
		fuzz_require(cfg.store.dir && cfg.store.dir[0] == '/', "dir is absolute", err);
		fuzz_require(cfg.store.segment_size % 4096 == 0, "segment_size is 4K-aligned", err);
		fuzz_require(cfg.store.segment_size >= 1u << 20, "segment_size >= 1M", err);
		fuzz_require(cfg.store.capacity / 2 >= cfg.store.segment_size,
			     "capacity holds 2 segments", err);
		fuzz_require(low > 0 && low < high && high <= 1, "0 < low < high <= 1", err);
		fuzz_require(cfg.store.io == KVT_IO_URING || cfg.store.io == KVT_IO_SYNC,
			     "io is a known backend", err);
		fuzz_require(cfg.store.session_depth >= 1 && cfg.store.session_depth <= 16,
			     "session_depth in 1..16", err);
		fuzz_require(cfg.store.access_flush_ms >= 1, "access_flush_ms >= 1", err);
		fuzz_require(cfg.gateway.listen && kvt_parse_listen(cfg.gateway.listen, &ss, &sslen) == 0,
			     "listen is an address", err);
		fuzz_require(!cfg.gateway.metrics_listen ||
			     kvt_parse_listen(cfg.gateway.metrics_listen, &ss, &sslen) == 0,
			     "metrics_listen is an address", err);
	} else {
		size_t plen = strlen(fuzz_path);

		fuzz_require(rc < 0, "failure is a negative errno", err);
		fuzz_require(strncmp(err, fuzz_path, plen) == 0 && err[plen] == ':' &&
			     strlen(err) > plen + 2, "the message names the file", err);
		fuzz_require(cfg.path == NULL, "failure records no path", err);
		fuzz_require(strcmp(cfg.store.dir, def.store.dir) == 0 &&
			     cfg.store.capacity == def.store.capacity &&
			     cfg.store.segment_size == def.store.segment_size &&
			     cfg.store.high_watermark == def.store.high_watermark &&
			     cfg.store.low_watermark == def.store.low_watermark &&
			     cfg.store.io == def.store.io &&
			     cfg.store.session_depth == def.store.session_depth &&
			     cfg.store.access_flush_ms == def.store.access_flush_ms,
			     "failure leaves cfg unchanged", err);
	}
	kvt_config_release(&cfg);
	kvt_config_release(&cfg);	/* twice is allowed */
	kvt_config_release(&def);
	return 0;
}
