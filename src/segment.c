/*
 * segment.c - segment files, the shared generation map, and the byte-range
 * locks that order readers, appenders and reclaim across processes. See
 * segment.h for the protocol; this file only implements its pieces.
 *
 * The map's generations are a cache of the catalog's: they live in a shared
 * mapping so that a reader checks one without a query. The map does not
 * survive a reboot reliably (it is never fsynced), so it records the boot id
 * it was made under; the store rebuilds it from the catalog after a reboot.
 * Within one boot it is authoritative the moment a segment is freed or
 * claimed: both write it while holding the segment's append lock.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier.h"
#include "log.h"
#include "segment.h"
#include "util.h"

#define MAP_MAGIC 0x4b56544d50ull	/* "KVTMP" */
#define MAP_HEADER 4096			/* the generations start here */

struct map_header {
	uint64_t magic;
	uint64_t nsegs;
	char boot_id[40];
};

struct seg_files {
	char *dir;
	uint32_t nsegs;
	uint64_t size;
	int direct;
	int readonly;		/* SEG_READONLY: nothing here is written */
	struct seg_made *made;	/* files this open made or filled up, by id */
	uint32_t nmade;
	size_t made_cap;
	int64_t progress_ns;	/* log_every() of seg_files_open() */
	int *fds;
	int *cfds;		/* without O_DIRECT, opened on first use; -1: not yet */
	int map_fd;
	size_t map_len;
	void *map;
	uint64_t *gens;
	int stale;
	char **maps;		/* whole segments mapped read-only; NULL: not yet */
	pthread_mutex_t pin_lock;	/* orders pins[i] 0 <-> 1 with the lock */
	uint32_t *pins;		/* this process's pins per segment, then its holds */
	int pin_fd;		/* its own open file description: see seg_pin() */
};

void seg_header_fill(struct seg_header *h, uint64_t vid, uint32_t seq, uint64_t obj_off,
		     uint64_t gen, uint32_t segment, uint32_t length, uint32_t crc)
{
	memset(h, 0, sizeof(*h));
	h->magic = SEG_MAGIC;
	h->version = 1;
	h->header_size = SEG_HEADER_SIZE;
	h->vid = vid;
	h->obj_off = obj_off;
	h->gen = gen;
	h->seq = seq;
	h->length = length;
	h->crc = crc;
	h->segment = segment;
	h->hcrc = kvt_crc32c(0, h, offsetof(struct seg_header, hcrc));
}

uint32_t seg_payload_crc(const void *payload, uint32_t length, uint32_t first,
			 uint32_t *chunk_crc)
{
	const char *p = payload;
	uint32_t crc = 0, off = 0;

	for (unsigned k = 0; off < length; k++) {
		uint32_t n = MIN(k == 0 ? first : SEG_CHUNK, length - off);

		chunk_crc[k] = kvt_crc32c(0, p + off, n);
		crc = kvt_crc32c_combine(crc, chunk_crc[k], n);
		off += n;
	}
	return crc;
}

const char *seg_header_fault(const struct seg_header *h, uint64_t vid, uint32_t seq,
			     uint64_t gen, uint32_t segment, uint32_t length)
{
	const char *why = NULL;

	if (h->magic != SEG_MAGIC)
		why = "bad magic";
	else if (h->hcrc != kvt_crc32c(0, h, offsetof(struct seg_header, hcrc)))
		why = "header checksum mismatch";
	else if (h->version != 1 || h->header_size != SEG_HEADER_SIZE)
		why = "unknown header version";	/* its layout is not the one we read */
	else if (h->vid != vid || h->seq != seq)
		why = "header names another object";
	else if (h->gen != gen || h->segment != segment)
		why = "header from another segment generation";
	else if (h->length != length)
		why = "header length mismatch";
	return why;
}

int seg_header_check(const struct seg_header *h, uint64_t vid, uint32_t seq, uint64_t gen,
		     uint32_t segment, uint32_t length)
{
	const char *why = seg_header_fault(h, vid, seq, gen, segment, length);

	if (!why)
		return 0;
	log_err(0, "extent %u of version %016llx in segment %u: %s", seq,
		(unsigned long long)vid, segment, why);
	return -EIO;
}

void seg_file_path(const char *dir, uint32_t id, char *path, size_t len)
{
	snprintf(path, len, "%s/segments/%06u", dir, id);
}

/*
 * Preallocates a segment file by writing zeros, not with fallocate(): on
 * ext4 and XFS a first write into fallocated space must convert the extent
 * from unwritten to written in a journal transaction when the write
 * completes, which makes every first O_DIRECT append to a segment cost
 * milliseconds. Written once here, appends are plain overwrites.
 */
static int seg_file_fill(int fd, uint64_t from, uint64_t size, int direct)
{
	size_t chunk;
	void *zero;
	int rc = 0;

	from = from / SEG_ALIGN * SEG_ALIGN;
	chunk = (size_t)MIN((uint64_t)8 << 20, size - MIN(from, size));
	if (chunk == 0)
		return 0;
	zero = util_aligned_alloc(SEG_ALIGN, chunk);
	if (!zero)
		return -ENOMEM;
	memset(zero, 0, chunk);
	while (from < size && rc == 0) {
		size_t n = (size_t)MIN((uint64_t)chunk, size - from);
		ssize_t w = pwrite(fd, zero, n, (off_t)from);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			rc = w < 0 ? -errno : -EIO;
		else
			from += (uint64_t)w;
	}
	free(zero);
	/* Buffered writes must reach the file before O_DIRECT reads bypass the cache. */
	if (rc == 0 && !direct && fdatasync(fd) < 0)
		rc = -errno;
	return rc;
}

static int seg_note_made(struct seg_files *sf, uint32_t id, uint64_t size)
{
	if (UTIL_GROW(sf->made, sf->nmade, sf->made_cap) < 0)
		return -ENOMEM;
	sf->made[sf->nmade++] = (struct seg_made){ .id = id, .size = size };
	return 0;
}

const struct seg_made *seg_files_made(const struct seg_files *sf, uint32_t *n)
{
	*n = sf->nmade;
	return sf->made;
}

static int seg_file_open(struct seg_files *sf, uint32_t id, int create)
{
	char path[4200];
	struct stat sb;
	int fd, rc;

	seg_file_path(sf->dir, id, path, sizeof(path));
	fd = open(path, (sf->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC | (create ? O_CREAT : 0) |
			(sf->direct ? O_DIRECT : 0), 0600);
	if (fd < 0) {
		rc = -errno;
		log_err(rc, "cannot open segment '%s'", path);
		return rc;
	}
	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		goto fail;
	}
	if ((uint64_t)sb.st_size < sf->size) {
		if (!create) {
			rc = -EIO;
			log_err(0, "segment '%s' is %lld bytes, expected %llu", path,
				(long long)sb.st_size, (unsigned long long)sf->size);
			goto fail;
		}
		rc = seg_file_fill(fd, (uint64_t)sb.st_size, sf->size, sf->direct);
		if (rc < 0) {
			log_err(rc, "cannot preallocate segment '%s'", path);
			goto fail;
		}
		rc = seg_note_made(sf, id, (uint64_t)sb.st_size);
		if (rc < 0)
			goto fail;
	}
	sf->fds[id] = fd;
	return 0;
fail:
	close(fd);
	return rc;
}

static int seg_map_open(struct seg_files *sf, int create)
{
	char path[4200], boot[37];
	struct map_header *h;
	struct stat sb;
	int rc;

	snprintf(path, sizeof(path), "%s/segments.map", sf->dir);
	sf->map_fd = open(path, (sf->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC | (create ? O_CREAT : 0),
			  0600);
	if (sf->map_fd < 0) {
		rc = -errno;
		log_err(rc, "cannot open '%s'", path);
		return rc;
	}
	sf->map_len = MAP_HEADER + ALIGN_UP((size_t)sf->nsegs * 8, 4096);
	if (fstat(sf->map_fd, &sb) < 0)
		return -errno;
	/* Growing is safe under concurrent openers: ftruncate only extends. */
	if ((size_t)sb.st_size < sf->map_len &&
	    (sf->readonly || ftruncate(sf->map_fd, (off_t)sf->map_len) < 0)) {
		rc = sf->readonly ? -EROFS : -errno;
		log_err(rc, "cannot size '%s'", path);
		return rc;
	}
	/* Read-only, the map is this process's copy: rebuilt here if stale. */
	sf->map = mmap(NULL, sf->map_len, PROT_READ | PROT_WRITE,
		       sf->readonly ? MAP_PRIVATE : MAP_SHARED, sf->map_fd, 0);
	if (sf->map == MAP_FAILED) {
		sf->map = NULL;
		return -errno;
	}
	sf->gens = (uint64_t *)((char *)sf->map + MAP_HEADER);
	h = sf->map;
	rc = util_boot_id(boot);
	if (rc < 0)
		snprintf(boot, sizeof(boot), "unknown");
	sf->stale = h->magic != MAP_MAGIC || h->nsegs < sf->nsegs ||
		    strncmp(h->boot_id, boot, sizeof(h->boot_id)) != 0;
	return 0;
}

int seg_files_open(const char *dir, uint32_t nsegs, uint64_t size, int direct, unsigned flags,
		   struct seg_files **out)
{
	struct seg_files *sf = calloc(1, sizeof(*sf));
	int create = (flags & SEG_CREATE) && !(flags & SEG_READONLY);
	char path[4200];
	int rc;

	if (!sf)
		return -ENOMEM;
	sf->map_fd = -1;
	sf->pin_fd = -1;
	pthread_mutex_init(&sf->pin_lock, NULL);
	sf->dir = strdup(dir);
	sf->nsegs = nsegs;
	sf->size = size;
	sf->direct = direct;
	sf->readonly = (flags & SEG_READONLY) != 0;
	sf->fds = malloc(nsegs * sizeof(*sf->fds));
	sf->cfds = malloc(nsegs * sizeof(*sf->cfds));
	sf->maps = calloc(nsegs, sizeof(*sf->maps));
	sf->pins = calloc(2 * (size_t)nsegs, sizeof(*sf->pins));
	if (!sf->dir || !sf->fds || !sf->cfds || !sf->maps || !sf->pins) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < nsegs; i++)
		sf->fds[i] = sf->cfds[i] = -1;
	snprintf(path, sizeof(path), "%s/segments", dir);
	if (create && mkdir(path, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		log_err(rc, "cannot create '%s'", path);
		goto fail;
	}
	/* Making a large store writes its whole capacity once: say how far. */
	for (uint32_t i = 0, said = 0; i < nsegs; i++) {
		rc = seg_file_open(sf, i, create);
		if (rc < 0)
			goto fail;
		if (create && log_every(&sf->progress_ns, 5) && said++)
			log_info("segment files of '%s': %u of %u ready", dir, i + 1, nsegs);
	}
	rc = seg_map_open(sf, create);
	if (rc < 0)
		goto fail;
	rc = seg_lock_fd_open(sf);
	if (rc < 0)
		goto fail;
	sf->pin_fd = rc;
	*out = sf;
	return 0;
fail:
	seg_files_close(sf);
	return rc;
}

void seg_files_close(struct seg_files *sf)
{
	if (!sf)
		return;
	for (uint32_t i = 0; sf->fds && i < sf->nsegs; i++)
		if (sf->fds[i] >= 0)
			close(sf->fds[i]);
	for (uint32_t i = 0; sf->cfds && i < sf->nsegs; i++)
		if (sf->cfds[i] >= 0)
			close(sf->cfds[i]);
	free(sf->cfds);
	for (uint32_t i = 0; sf->maps && i < sf->nsegs; i++)
		if (sf->maps[i])
			munmap(sf->maps[i], sf->size);
	free(sf->maps);
	free(sf->pins);
	free(sf->made);
	if (sf->pin_fd >= 0)
		close(sf->pin_fd);
	pthread_mutex_destroy(&sf->pin_lock);
	if (sf->map)
		munmap(sf->map, sf->map_len);
	if (sf->map_fd >= 0)
		close(sf->map_fd);
	free(sf->fds);
	free(sf->dir);
	free(sf);
}

int seg_fd(struct seg_files *sf, uint32_t id)
{
	return id < sf->nsegs ? sf->fds[id] : -1;
}

/*
 * Opened on first use and never closed before seg_files_close(): most
 * segments may never hold a small extent, and a store with thousands of
 * segments should not hold twice as many descriptors for nothing. Racing
 * openers agree through a compare-and-swap; the loser closes its own.
 */
int seg_cached_fd(struct seg_files *sf, uint32_t id)
{
	char path[4200];
	int fd, none = -1;

	if (id >= sf->nsegs)
		return -1;
	if (!sf->direct)
		return sf->fds[id];	/* already through the page cache */
	fd = __atomic_load_n(&sf->cfds[id], __ATOMIC_ACQUIRE);
	if (fd >= 0)
		return fd;
	seg_file_path(sf->dir, id, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		log_err(-errno, "cannot open segment '%s'", path);
		return sf->fds[id];	/* read it with O_DIRECT then */
	}
	if (!__atomic_compare_exchange_n(&sf->cfds[id], &none, fd, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		close(fd);
		fd = none;
	}
	return fd;
}

/*
 * Mapped whole and kept: a mapping per request would cost an munmap, whose
 * TLB shootdown (an IPI to every other CPU of the process) is what made
 * small GETs slow on a virtual machine. The pages are the page cache's,
 * clean and shared; the kernel may still drop them, and an O_DIRECT write
 * over a mapped range unmaps and invalidates it. Racing mappers agree
 * through a compare-and-swap; the loser unmaps its own.
 */
const char *seg_mapped(struct seg_files *sf, uint32_t id)
{
	char *p, *none = NULL;
	int fd;

	if (id >= sf->nsegs)
		return NULL;
	p = __atomic_load_n(&sf->maps[id], __ATOMIC_ACQUIRE);
	if (p)
		return p;
	fd = seg_cached_fd(sf, id);
	if (fd < 0)
		return NULL;
	p = mmap(NULL, sf->size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		log_err(-errno, "cannot map segment %u", id);
		return NULL;
	}
	if (!__atomic_compare_exchange_n(&sf->maps[id], &none, p, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		munmap(p, sf->size);
		p = none;
	}
	return p;
}

static int seg_lock(int fd, short type, off_t byte);

/*
 * Locks of one open file description do not exclude each other and one
 * unlock drops them all, so the process counts its pins and holds one
 * shared lock per pinned segment, on pin_fd: a descriptor of its own, so
 * that this process's claimer (on the store's lock_fd) sees them too.
 */
static int seg_pin_byte(struct seg_files *sf, uint32_t *count, int64_t byte, const char *what,
			uint32_t id)
{
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET,
			    .l_start = (off_t)byte, .l_len = 1 };
	int rc = 0;

	pthread_mutex_lock(&sf->pin_lock);
	if (*count == 0) {
		while (fcntl(sf->pin_fd, F_OFD_SETLKW, &fl) < 0) {
			if (errno != EINTR) {
				rc = -errno;
				break;
			}
		}
	}
	if (rc == 0)
		(*count)++;
	pthread_mutex_unlock(&sf->pin_lock);
	if (rc < 0)
		log_err(rc, "cannot %s segment %u", what, id);
	return rc;
}

static void seg_unpin_byte(struct seg_files *sf, uint32_t *count, int64_t byte)
{
	pthread_mutex_lock(&sf->pin_lock);
	if (*count > 0 && --*count == 0)
		seg_lock(sf->pin_fd, F_UNLCK, (off_t)byte);
	pthread_mutex_unlock(&sf->pin_lock);
}

static int seg_probe_byte(int lock_fd, int64_t byte)
{
	int rc = seg_lock(lock_fd, F_WRLCK, (off_t)byte);

	if (rc == 0)
		seg_lock(lock_fd, F_UNLCK, (off_t)byte);
	return rc;
}

int seg_pin(struct seg_files *sf, uint32_t id)
{
	if (id >= sf->nsegs)
		return -EINVAL;
	return seg_pin_byte(sf, &sf->pins[id], SEG_PIN_BASE + id, "pin", id);
}

void seg_unpin(struct seg_files *sf, uint32_t id)
{
	if (id < sf->nsegs)
		seg_unpin_byte(sf, &sf->pins[id], SEG_PIN_BASE + id);
}

int seg_pin_probe(int lock_fd, uint32_t id)
{
	return seg_probe_byte(lock_fd, SEG_PIN_BASE + id);
}

int seg_hold(struct seg_files *sf, uint32_t id)
{
	if (id >= sf->nsegs)
		return -EINVAL;
	return seg_pin_byte(sf, &sf->pins[sf->nsegs + id], SEG_HOLD_BASE + id, "hold", id);
}

void seg_unhold(struct seg_files *sf, uint32_t id)
{
	if (id < sf->nsegs)
		seg_unpin_byte(sf, &sf->pins[sf->nsegs + id], SEG_HOLD_BASE + id);
}

int seg_hold_probe(int lock_fd, uint32_t id)
{
	return seg_probe_byte(lock_fd, SEG_HOLD_BASE + id);
}

uint32_t seg_count(const struct seg_files *sf)
{
	return sf->nsegs;
}

uint64_t seg_size(const struct seg_files *sf)
{
	return sf->size;
}

uint64_t seg_map_gen(struct seg_files *sf, uint32_t id)
{
	return __atomic_load_n(&sf->gens[id], __ATOMIC_ACQUIRE);
}

void seg_map_set_gen(struct seg_files *sf, uint32_t id, uint64_t gen)
{
	uint64_t cur = __atomic_load_n(&sf->gens[id], __ATOMIC_ACQUIRE);

	/* Generations only grow: a late writer of an old value must not win. */
	while (cur < gen && !__atomic_compare_exchange_n(&sf->gens[id], &cur, gen, 0,
							 __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
		;
}

int seg_map_stale(struct seg_files *sf)
{
	return sf->stale;
}

void seg_map_mark_fresh(struct seg_files *sf)
{
	struct map_header *h = sf->map;

	if (util_boot_id(h->boot_id) < 0)
		snprintf(h->boot_id, sizeof(h->boot_id), "unknown");
	h->nsegs = sf->nsegs;
	__atomic_store_n(&h->magic, MAP_MAGIC, __ATOMIC_RELEASE);
	sf->stale = 0;
}

int seg_lock_fd_open(struct seg_files *sf)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/segments.map", sf->dir);
	fd = open(path, (sf->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int seg_lock(int fd, short type, off_t byte)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1 };

	while (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
		if (errno == EINTR)
			continue;
		return errno == EACCES ? -EAGAIN : -errno;
	}
	return 0;
}

int seg_append_trylock(int lock_fd, uint32_t id)
{
	return seg_lock(lock_fd, F_WRLCK, (off_t)id);
}

void seg_append_unlock(int lock_fd, uint32_t id)
{
	seg_lock(lock_fd, F_UNLCK, (off_t)id);
}
