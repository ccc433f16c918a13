/*
 * test_segment.c - the segment store's pieces (src/segment.c): the extent
 * header, the preallocated segment files, the shared generation map and the
 * append locks.
 *
 * Readers take no lock (segment.h): they compare the map's generation of a
 * segment before and after a read, so what must hold here is that the map
 * is one shared truth for every opener and that a generation never goes
 * back. Append locks are open file description locks: the tests use two
 * lock descriptors within one process where the protocol speaks of two
 * processes, threads to show a lock belongs to a descriptor and not to a
 * thread, and fork() where death matters (the kernel dropping a dead
 * owner's lock is how recovery tells a live appender from a dead one).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "segment.h"
#include "util.h"

#define MiB (1024 * 1024ull)

struct fixture {
	struct test_env env;
	char dir[300];		/* the data directory */
	pid_t child;		/* a forked helper, killed by teardown if still alive */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	test_env_init(&f->env, 16 * MiB, MiB);
	snprintf(f->dir, sizeof(f->dir), "%s", f->env.cfg.store.dir);
	assert_int_equal(util_mkdir_p(f->dir), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	/* A failed assertion must not leave a parked child behind. */
	if (f->child > 0) {
		kill(f->child, SIGKILL);
		waitpid(f->child, NULL, 0);
	}
	test_env_release(&f->env);
	free(f);
	return 0;
}

/* ---- extent header ----------------------------------------------------------- */

/* Expected errors are logged one line each; thousands of them say nothing. */
static int quiet_begin(void)
{
	int saved = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY);

	assert_true(saved >= 0 && null >= 0);
	assert_true(dup2(null, STDERR_FILENO) >= 0);
	close(null);
	return saved;
}

static void quiet_end(int saved)
{
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
}

static void rehash(struct seg_header *h)
{
	h->hcrc = kvt_crc32c(0, h, offsetof(struct seg_header, hcrc));
}

static void test_header_fill_check(void **state)
{
	struct seg_header h, bad;
	int quiet, failed_bit = -1;

	(void)state;
	seg_header_fill(&h, 0x0123456789abcdefull, 3, 3 * (uint64_t)SEG_PAYLOAD_MAX, 42, 7,
			1000, 0xfeedbeef);
	assert_int_equal(h.magic, SEG_MAGIC);
	assert_int_equal(h.version, 1);
	assert_int_equal(h.header_size, SEG_HEADER_SIZE);
	assert_int_equal(h.vid, 0x0123456789abcdefull);
	assert_int_equal(h.seq, 3);
	assert_int_equal(h.obj_off, 3 * (uint64_t)SEG_PAYLOAD_MAX);
	assert_int_equal(h.gen, 42);
	assert_int_equal(h.segment, 7);
	assert_int_equal(h.length, 1000);
	assert_int_equal(h.crc, 0xfeedbeef);
	for (size_t i = 0; i < sizeof(h.reserved); i++)
		assert_int_equal(h.reserved[i], 0);
	assert_int_equal(h.hcrc, kvt_crc32c(0, &h, offsetof(struct seg_header, hcrc)));

	assert_int_equal(seg_header_check(&h, 0x0123456789abcdefull, 3, 42, 7, 1000), 0);

	/* What the catalog expects differs, field by field. */
	assert_int_equal(seg_header_check(&h, 0x0123456789abcdeeull, 3, 42, 7, 1000), -EIO);
	assert_int_equal(seg_header_check(&h, 0x0123456789abcdefull, 4, 42, 7, 1000), -EIO);
	assert_int_equal(seg_header_check(&h, 0x0123456789abcdefull, 3, 41, 7, 1000), -EIO);
	assert_int_equal(seg_header_check(&h, 0x0123456789abcdefull, 3, 42, 8, 1000), -EIO);
	assert_int_equal(seg_header_check(&h, 0x0123456789abcdefull, 3, 42, 7, 999), -EIO);

	/* What is on disk differs, field by field, with a header CRC that matches:
	 * every field is checked on its own, not only through the CRC. */
#define MUTATE(stmt) do {						\
		bad = h;						\
		stmt;							\
		rehash(&bad);						\
		assert_int_equal(seg_header_check(&bad, 0x0123456789abcdefull, 3, 42, 7, 1000), -EIO); \
	} while (0)
	MUTATE(bad.magic ^= 1);
	MUTATE(bad.version = 2);
	MUTATE(bad.header_size = 128);
	MUTATE(bad.vid ^= 1ull << 40);
	MUTATE(bad.seq = 2);
	MUTATE(bad.gen = 43);
	MUTATE(bad.segment = 6);
	MUTATE(bad.length = 1001);
#undef MUTATE

	/* Any bit flipped without fixing the CRC: the header CRC catches it,
	 * including in fields the caller does not compare (obj_off, crc, reserved). */
	quiet = quiet_begin();
	for (size_t bit = 0; bit < offsetof(struct seg_header, hcrc) * 8; bit++) {
		bad = h;
		((unsigned char *)&bad)[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		if (seg_header_check(&bad, 0x0123456789abcdefull, 3, 42, 7, 1000) != -EIO)
			failed_bit = (int)bit;
	}
	quiet_end(quiet);
	assert_int_equal(failed_bit, -1);
	bad = h;
	bad.hcrc ^= 0x100;
	assert_int_equal(seg_header_check(&bad, 0x0123456789abcdefull, 3, 42, 7, 1000), -EIO);
	/* A zeroed (never written) extent is not a header. */
	memset(&bad, 0, sizeof(bad));
	assert_int_equal(seg_header_check(&bad, 0, 0, 0, 0, 0), -EIO);

	/* Space: header plus payload rounded up to SEG_ALIGN. */
	assert_int_equal(seg_extent_space(0), SEG_ALIGN);
	assert_int_equal(seg_extent_space(SEG_ALIGN - SEG_HEADER_SIZE), SEG_ALIGN);
	assert_int_equal(seg_extent_space(SEG_ALIGN - SEG_HEADER_SIZE + 1), 2 * SEG_ALIGN);
	assert_int_equal(seg_extent_space(SEG_PAYLOAD_MAX), SEG_EXTENT_MAX);
}

/* ---- files ------------------------------------------------------------------- */

static void seg_path(const struct fixture *f, uint32_t id, char *out, size_t len)
{
	snprintf(out, len, "%s/segments/%06u", f->dir, id);
}

static void test_files_created(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = NULL;
	char path[512];
	struct stat sb;
	uint32_t nmade = 0;

	assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 0, 1, &sf), 0);
	assert_non_null(seg_files_made(sf, &nmade));
	assert_int_equal(nmade, 3);
	assert_int_equal(seg_count(sf), 3);
	assert_int_equal(seg_size(sf), 2 * MiB);
	for (uint32_t i = 0; i < 3; i++) {
		seg_path(f, i, path, sizeof(path));
		assert_int_equal(stat(path, &sb), 0);
		assert_int_equal(sb.st_size, 2 * MiB);
		/* Preallocated, not sparse: appends never meet ENOSPC later. */
		assert_true((uint64_t)sb.st_blocks * 512 >= 2 * MiB);
		assert_true(seg_fd(sf, i) >= 0);
	}
	/* Written with zeros: no stale bytes of an earlier file ever read back. */
	{
		static unsigned char buf[64 * 1024], zero[64 * 1024];

		for (uint64_t off = 0; off < 2 * MiB; off += sizeof(buf)) {
			assert_int_equal(pread(seg_fd(sf, 2), buf, sizeof(buf), (off_t)off),
					 (ssize_t)sizeof(buf));
			assert_memory_equal(buf, zero, sizeof(buf));
		}
	}
	seg_path(f, 3, path, sizeof(path));
	assert_int_equal(stat(path, &sb), -1);
	assert_int_equal(seg_fd(sf, 3), -1);
	assert_int_equal(seg_fd(sf, UINT32_MAX), -1);
	snprintf(path, sizeof(path), "%s/segments.map", f->dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_true(sb.st_size >= 4096 + 3 * 8);

	/* The descriptors are the segment files: a write lands in the file. */
	assert_int_equal(pwrite(seg_fd(sf, 1), "hello", 5, 4096), 5);
	seg_files_close(sf);
	seg_files_close(NULL);
	{
		char buf[6] = { 0 };
		int fd;

		seg_path(f, 1, path, sizeof(path));
		fd = open(path, O_RDONLY);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, buf, 5, 4096), 5);
		assert_string_equal(buf, "hello");
		close(fd);
	}

	/* Reopen without create: fine, sizes kept. */
	sf = NULL;
	assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 0, 0, &sf), 0);
	seg_files_close(sf);

	/* Without create, a missing segment is an error, not a new file. */
	sf = NULL;
	assert_int_equal(seg_files_open(f->dir, 4, 2 * MiB, 0, 0, &sf), -ENOENT);
	assert_null(sf);
	seg_path(f, 3, path, sizeof(path));
	assert_int_equal(stat(path, &sb), -1);

	/* Without create, a short segment is -EIO; with create it is extended. */
	seg_path(f, 2, path, sizeof(path));
	assert_int_equal(truncate(path, 4096), 0);
	assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 0, 0, &sf), -EIO);
	assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 0, 1, &sf), 0);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 2 * MiB);
	/* ... and said so: the store reports what that lost. */
	{
		const struct seg_made *made;
		uint32_t n = 0;

		made = seg_files_made(sf, &n);
		assert_int_equal(n, 1);
		assert_int_equal(made[0].id, 2);
		assert_int_equal(made[0].size, 4096);
	}
	seg_files_close(sf);

	/* O_DIRECT descriptors where the file system allows them. */
	{
		char probe[512];
		int fd;

		snprintf(probe, sizeof(probe), "%s/direct-probe", f->dir);
		fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
		if (fd >= 0) {
			close(fd);
			unlink(probe);
			sf = NULL;
			assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 1, 0, &sf), 0);
			assert_true(fcntl(seg_fd(sf, 0), F_GETFL) & O_DIRECT);
			seg_files_close(sf);
		} else {
			print_message("O_DIRECT refused here (%s): direct open not tested\n",
				      strerror(errno));
		}
	}
}

/*
 * SEG_READONLY (a store on a read-only file system): the files open to be
 * read, nothing is made, and the map is this process's copy: a generation
 * set here never reaches the file.
 */
static void test_files_readonly(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = NULL, *ro = NULL;
	uint32_t nmade = 1;

	assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 0, SEG_CREATE, &sf), 0);
	seg_map_set_gen(sf, 1, 7);
	seg_files_close(sf);

	assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 0, SEG_READONLY, &ro), 0);
	assert_int_equal(fcntl(seg_fd(ro, 0), F_GETFL) & O_ACCMODE, O_RDONLY);
	seg_files_made(ro, &nmade);
	assert_int_equal(nmade, 0);
	assert_int_equal(seg_map_gen(ro, 1), 7);
	seg_map_set_gen(ro, 1, 9);
	assert_int_equal(seg_map_gen(ro, 1), 9);
	seg_files_close(ro);
	sf = NULL;
	assert_int_equal(seg_files_open(f->dir, 3, 2 * MiB, 0, 0, &sf), 0);
	assert_int_equal(seg_map_gen(sf, 1), 7);
	seg_files_close(sf);

	/* Read-only, a store that would need more segments is not made. */
	ro = NULL;
	assert_int_equal(seg_files_open(f->dir, 4, 2 * MiB, 0, SEG_CREATE | SEG_READONLY, &ro),
			 -ENOENT);
	assert_null(ro);
}

static void test_files_missing_dir(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = NULL;
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/does-not-exist", f->dir);
	assert_true(seg_files_open(dir, 2, MiB, 0, 0, &sf) < 0);
	assert_null(sf);
}

/* ---- the generation map ------------------------------------------------------- */

static void test_map_shared(void **state)
{
	struct fixture *f = *state;
	struct seg_files *a = NULL, *b = NULL;

	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 1, &a), 0);
	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 0, &b), 0);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(seg_map_gen(a, i), 0);

	seg_map_set_gen(a, 2, 77);
	assert_int_equal(seg_map_gen(b, 2), 77);
	seg_map_set_gen(b, 3, 0xffffffffffull);
	assert_int_equal(seg_map_gen(a, 3), 0xffffffffffull);
	assert_int_equal(seg_map_gen(a, 0), 0);
	assert_int_equal(seg_map_gen(a, 1), 0);
	seg_files_close(a);
	seg_files_close(b);

	/* The map is a file: a later opener sees the same generations. */
	a = NULL;
	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 0, &a), 0);
	assert_int_equal(seg_map_gen(a, 2), 77);
	assert_int_equal(seg_map_gen(a, 3), 0xffffffffffull);

	/* Growing the store keeps them, and the new segments start unknown. The
	 * map grows past its first page of generations; the files are kept
	 * tiny (creating them writes every byte). */
	b = NULL;
	assert_int_equal(seg_files_open(f->dir, 600, SEG_ALIGN, 0, 1, &b), 0);
	assert_int_equal(seg_map_gen(b, 2), 77);
	assert_int_equal(seg_map_gen(b, 599), 0);
	seg_map_set_gen(b, 599, 9);
	assert_int_equal(seg_map_gen(b, 599), 9);
	assert_int_equal(seg_map_gen(a, 2), 77);
	seg_map_set_gen(b, 2, 78);
	assert_int_equal(seg_map_gen(a, 2), 78);
	seg_files_close(a);
	seg_files_close(b);
}

static void test_map_stale(void **state)
{
	struct fixture *f = *state;
	struct seg_files *a = NULL, *b = NULL;
	char path[512];
	int fd;

	/* A new map knows nothing: stale until someone rebuilds it. */
	assert_int_equal(seg_files_open(f->dir, 3, MiB, 0, 1, &a), 0);
	assert_true(seg_map_stale(a));
	seg_map_set_gen(a, 1, 5);
	seg_map_mark_fresh(a);
	assert_false(seg_map_stale(a));
	seg_files_close(a);

	/* Same boot: the next opener trusts it. */
	a = NULL;
	assert_int_equal(seg_files_open(f->dir, 3, MiB, 0, 0, &a), 0);
	assert_false(seg_map_stale(a));
	assert_int_equal(seg_map_gen(a, 1), 5);
	seg_files_close(a);

	/* A map made under another boot id (a reboot happened): stale. */
	snprintf(path, sizeof(path), "%s/segments.map", f->dir);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	{
		/* Header: magic (8), nsegs (8), boot id (40). */
		char boot[40];

		assert_int_equal(pread(fd, boot, sizeof(boot), 16), (ssize_t)sizeof(boot));
		assert_int_equal(strlen(boot), 36);
		boot[0] = boot[0] == '0' ? '1' : '0';
		assert_int_equal(pwrite(fd, boot, sizeof(boot), 16), (ssize_t)sizeof(boot));
	}
	a = NULL;
	assert_int_equal(seg_files_open(f->dir, 3, MiB, 0, 0, &a), 0);
	assert_true(seg_map_stale(a));
	seg_map_mark_fresh(a);
	assert_false(seg_map_stale(a));
	seg_files_close(a);

	/* A bad magic: stale. */
	{
		uint64_t zero = 0;

		assert_int_equal(pwrite(fd, &zero, 8, 0), 8);
	}
	a = NULL;
	assert_int_equal(seg_files_open(f->dir, 3, MiB, 0, 0, &a), 0);
	assert_true(seg_map_stale(a));
	seg_map_mark_fresh(a);
	seg_files_close(a);
	close(fd);

	/* A map made for fewer segments than the store now has: stale. */
	a = NULL;
	assert_int_equal(seg_files_open(f->dir, 3, MiB, 0, 0, &a), 0);
	assert_false(seg_map_stale(a));
	assert_int_equal(seg_files_open(f->dir, 5, MiB, 0, 1, &b), 0);
	assert_true(seg_map_stale(b));
	seg_map_mark_fresh(b);
	seg_files_close(a);
	seg_files_close(b);
	b = NULL;
	assert_int_equal(seg_files_open(f->dir, 5, MiB, 0, 0, &b), 0);
	assert_false(seg_map_stale(b));
	seg_files_close(b);
}

/* ---- generations only grow ----------------------------------------------------- */

static void test_map_gen_monotonic(void **state)
{
	struct fixture *f = *state;
	struct seg_files *a = NULL, *b = NULL;

	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 1, &a), 0);
	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 0, &b), 0);
	seg_map_set_gen(a, 1, 10);
	/* A late writer of an older generation does not win... */
	seg_map_set_gen(b, 1, 9);
	assert_int_equal(seg_map_gen(a, 1), 10);
	seg_map_set_gen(b, 1, 0);
	assert_int_equal(seg_map_gen(b, 1), 10);
	/* ... a newer one does, seen through every mapping. */
	seg_map_set_gen(b, 1, 11);
	assert_int_equal(seg_map_gen(a, 1), 11);
	assert_int_equal(seg_map_gen(a, 0), 0);
	seg_files_close(a);
	seg_files_close(b);
}

struct raiser {
	pthread_t thread;
	struct seg_files *sf;
	uint64_t from, step;
};

static void *raise_run(void *arg)
{
	struct raiser *r = arg;

	for (uint64_t g = r->from; g <= 200000; g += r->step)
		seg_map_set_gen(r->sf, 2, g);
	return NULL;
}

/* Racing raisers through two mappings: the largest generation wins. */
static void test_map_gen_race(void **state)
{
	struct fixture *f = *state;
	struct seg_files *a = NULL, *b = NULL;
	struct raiser r[4];

	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 1, &a), 0);
	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 0, &b), 0);
	for (int i = 0; i < 4; i++) {
		/* Interleaved steps through both mappings: every store races. */
		r[i] = (struct raiser){ .sf = i % 2 ? a : b, .from = (uint64_t)i + 1, .step = 4 };
		assert_int_equal(pthread_create(&r[i].thread, NULL, raise_run, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(r[i].thread, NULL), 0);
	assert_int_equal(seg_map_gen(a, 2), 200000);
	assert_int_equal(seg_map_gen(b, 2), 200000);
	seg_files_close(a);
	seg_files_close(b);
}

/* ---- append locks --------------------------------------------------------------- */

static struct seg_files *open_files(struct fixture *f, uint32_t nsegs)
{
	struct seg_files *sf = NULL;

	assert_int_equal(seg_files_open(f->dir, nsegs, MiB, 0, 1, &sf), 0);
	return sf;
}

/*
 * Pins: counted per process (two pins, one unpin: still pinned), seen by a
 * probe on the lock descriptor of the same process and of another store,
 * independent of the append locks and of other segments, gone with the last
 * unpin or with the seg_files.
 */
static void test_pins(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = open_files(f, 4), *other = NULL;
	int a = seg_lock_fd_open(sf), b;

	assert_int_equal(seg_files_open(f->dir, 4, MiB, 0, 0, &other), 0);
	b = seg_lock_fd_open(other);
	assert_true(a >= 0 && b >= 0);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(seg_pin_probe(a, i), 0);
	assert_int_equal(seg_pin(sf, 2), 0);
	assert_int_equal(seg_pin(sf, 2), 0);
	assert_int_equal(seg_pin_probe(a, 2), -EAGAIN);
	assert_int_equal(seg_pin_probe(b, 2), -EAGAIN);
	assert_int_equal(seg_pin_probe(b, 1), 0);
	assert_int_equal(seg_pin_probe(b, 3), 0);
	/* The probe leaves nothing behind, and append locks are other bytes. */
	assert_int_equal(seg_pin_probe(b, 1), 0);
	assert_int_equal(seg_append_trylock(b, 2), 0);
	seg_append_unlock(b, 2);
	/* Another store's pin of the same segment counts on its own. */
	assert_int_equal(seg_pin(other, 2), 0);
	seg_unpin(sf, 2);
	assert_int_equal(seg_pin_probe(a, 2), -EAGAIN);
	seg_unpin(sf, 2);
	assert_int_equal(seg_pin_probe(a, 2), -EAGAIN);	/* other's */
	seg_unpin(other, 2);
	assert_int_equal(seg_pin_probe(a, 2), 0);
	/* Unpinning what is not pinned changes nothing; out of range fails. */
	seg_unpin(sf, 1);
	assert_int_equal(seg_pin(sf, 1), 0);
	assert_int_equal(seg_pin_probe(b, 1), -EAGAIN);
	assert_int_equal(seg_pin(sf, 4), -EINVAL);
	/* Closing the files drops the pins. */
	seg_files_close(sf);
	assert_int_equal(seg_pin_probe(b, 1), 0);
	close(a);
	close(b);
	seg_files_close(other);
}

/* A segment mapped whole shows the file's bytes, and stays the same mapping. */
static void test_mapped(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = open_files(f, 2);
	char path[600], buf[100];
	const char *p;
	int fd;

	snprintf(path, sizeof(path), "%s/segments/%06u", f->dir, 1u);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	memset(buf, 0x5a, sizeof(buf));
	assert_int_equal(pwrite(fd, buf, sizeof(buf), (off_t)(MiB - sizeof(buf))),
			 (ssize_t)sizeof(buf));
	close(fd);
	p = seg_mapped(sf, 1);
	assert_non_null(p);
	assert_memory_equal(p + MiB - sizeof(buf), buf, sizeof(buf));
	assert_int_equal(p[0], 0);
	assert_ptr_equal(seg_mapped(sf, 1), p);
	assert_null(seg_mapped(sf, 2));
	seg_files_close(sf);
}

static void test_append_lock(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = open_files(f, 4);
	int a = seg_lock_fd_open(sf), b = seg_lock_fd_open(sf);

	assert_true(a >= 0 && b >= 0 && a != b);
	assert_int_equal(seg_append_trylock(a, 0), 0);
	/* Taken again by its holder: fine (a lock of one descriptor). */
	assert_int_equal(seg_append_trylock(a, 0), 0);
	/* Another descriptor: refused at once, never waits. */
	assert_int_equal(seg_append_trylock(b, 0), -EAGAIN);
	/* Other segments are independent, neighbours included. */
	assert_int_equal(seg_append_trylock(b, 1), 0);
	assert_int_equal(seg_append_trylock(a, 1), -EAGAIN);
	assert_int_equal(seg_append_trylock(b, 3), 0);
	assert_int_equal(seg_append_trylock(a, 2), 0);

	/* Unlock hands it over. */
	seg_append_unlock(a, 0);
	assert_int_equal(seg_append_trylock(b, 0), 0);
	assert_int_equal(seg_append_trylock(a, 0), -EAGAIN);
	/* Unlocking what one does not hold changes nothing. */
	seg_append_unlock(a, 0);
	assert_int_equal(seg_append_trylock(a, 0), -EAGAIN);

	/* Closing the descriptor drops every lock it held. */
	close(b);
	assert_int_equal(seg_append_trylock(a, 0), 0);
	assert_int_equal(seg_append_trylock(a, 1), 0);
	assert_int_equal(seg_append_trylock(a, 3), 0);

	/* A second seg_files of the same directory (another store, another
	 * process) shares the locks. */
	{
		struct seg_files *sf2 = open_files(f, 4);
		int c = seg_lock_fd_open(sf2);

		assert_true(c >= 0);
		assert_int_equal(seg_append_trylock(c, 1), -EAGAIN);
		assert_int_equal(seg_append_trylock(c, 2), -EAGAIN);
		seg_append_unlock(a, 2);
		assert_int_equal(seg_append_trylock(c, 2), 0);
		assert_int_equal(seg_append_trylock(a, 2), -EAGAIN);
		close(c);
		seg_files_close(sf2);
	}
	/* Closing the seg_files does not drop locks held through a lock fd. */
	seg_files_close(sf);
	sf = open_files(f, 4);
	b = seg_lock_fd_open(sf);
	assert_int_equal(seg_append_trylock(b, 0), -EAGAIN);
	close(a);
	assert_int_equal(seg_append_trylock(b, 0), 0);
	close(b);
	seg_files_close(sf);
}

/* Threads of one store share its lock descriptor; a lock taken in one thread
 * is the store's, as the allocator needs. */
struct trylock_job {
	int fd;
	uint32_t id;
	int rc;
};

static void *trylock_run(void *arg)
{
	struct trylock_job *j = arg;

	j->rc = seg_append_trylock(j->fd, j->id);
	return NULL;
}

static void test_append_lock_threads(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = open_files(f, 4);
	int a = seg_lock_fd_open(sf), b = seg_lock_fd_open(sf);
	struct trylock_job j = { .fd = a, .id = 3, .rc = 1 };
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, trylock_run, &j), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(j.rc, 0);
	/* Held by descriptor a although its thread is gone. */
	assert_int_equal(seg_append_trylock(b, 3), -EAGAIN);
	assert_int_equal(seg_append_trylock(a, 3), 0);
	j = (struct trylock_job){ .fd = b, .id = 3, .rc = 1 };
	assert_int_equal(pthread_create(&th, NULL, trylock_run, &j), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(j.rc, -EAGAIN);
	close(a);
	close(b);
	seg_files_close(sf);
}

/* A process that dies holding an append lock loses it: how recovery tells a
 * dead appender from a live one. */
static void test_append_lock_process_death(void **state)
{
	struct fixture *f = *state;
	struct seg_files *sf = open_files(f, 4);
	int a = seg_lock_fd_open(sf);
	int up[2], down[2];
	pid_t pid;
	char ch;

	assert_true(a >= 0);
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	assert_int_equal(seg_append_trylock(a, 0), 0);	/* before the child tries it */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Its own descriptor: an inherited one would share the parent's locks. */
		int fd = seg_lock_fd_open(sf);
		char ok = fd >= 0 && seg_append_trylock(fd, 3) == 0 &&
			  seg_append_trylock(fd, 0) == -EAGAIN ? 'y' : 'n';

		/* Parked until killed, or until the parent is gone (EOF). */
		close(down[1]);
		if (write(up[1], &ok, 1) != 1)
			_exit(2);
		if (read(down[0], &ch, 1) < 0)
			_exit(3);
		_exit(0);
	}
	f->child = pid;
	assert_int_equal(read(up[0], &ch, 1), 1);
	assert_int_equal(ch, 'y');
	/* Alive: its lock holds, across processes. */
	assert_int_equal(seg_append_trylock(a, 3), -EAGAIN);
	/* kill -9: the kernel drops it. */
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	f->child = 0;
	assert_int_equal(seg_append_trylock(a, 3), 0);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	close(a);
	seg_files_close(sf);
}

/* seg_payload_crc: each chunk's CRC, and the whole payload's, as computed
 * directly, for lengths around the chunk size and up to a full extent, and
 * first chunks from one byte to a whole chunk. */
static void test_payload_crc(void **state)
{
	static const uint32_t lens[] = {
		1, 4095, SEG_CHUNK - 1, SEG_CHUNK, SEG_CHUNK + 1, 3 * SEG_CHUNK + 77,
		SEG_PAYLOAD_MAX - 1, SEG_PAYLOAD_MAX,
	};
	static const uint32_t firsts[] = { 1, 64, 4096, SEG_CHUNK - 1, SEG_CHUNK };
	char *buf = malloc(SEG_PAYLOAD_MAX);
	uint32_t chunk_crc[SEG_CHUNKS_MAX];

	(void)state;
	assert_non_null(buf);
	test_fill(buf, SEG_PAYLOAD_MAX, 5, 0);
	assert_int_equal(SEG_CHUNKS_MAX, seg_chunks(SEG_PAYLOAD_MAX, 1));
	assert_int_equal(seg_chunk_first(0), SEG_CHUNK);
	assert_int_equal(seg_chunk_first(SEG_PAYLOAD_MAX - SEG_HEADER_SIZE), SEG_HEADER_SIZE);
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		for (size_t j = 0; j < ARRAY_SIZE(firsts); j++) {
			uint32_t len = lens[i], first = firsts[j];
			unsigned n = seg_chunks(len, first);

			assert_int_equal(seg_payload_crc(buf, len, first, chunk_crc),
					 kvt_crc32c(0, buf, len));
			assert_int_equal(seg_chunk_start(first, 0), 0);
			for (unsigned c = 0; c < n; c++) {
				uint32_t p = seg_chunk_start(first, c);
				uint32_t q = MIN(seg_chunk_start(first, c + 1), len);

				assert_true(p < q);
				assert_int_equal(seg_chunk_of(first, p), c);
				assert_int_equal(seg_chunk_of(first, q - 1), c);
				assert_int_equal(chunk_crc[c], kvt_crc32c(0, buf + p, q - p));
			}
			assert_true(seg_chunk_start(first, n) >= len);
		}
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_fill_check),
		cmocka_unit_test(test_payload_crc),
		cmocka_unit_test_setup_teardown(test_files_created, setup, teardown),
		cmocka_unit_test_setup_teardown(test_files_readonly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_files_missing_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_shared, setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_stale, setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_gen_monotonic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_gen_race, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_lock, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mapped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_lock_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_lock_process_death, setup, teardown),
	};

	kvt_log_set_level(KVT_LOG_ERR);
	if (getenv("KVT_TEST_FILTER"))	/* e.g. "test_reclaim_*" */
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
