/*
 * segment.h - the hot tier's segment store: fixed-size preallocated segment
 * files, the extent format, and the locks and generations that keep readers
 * in any process from seeing bytes of another object.
 *
 * On disk, DIR/segments/NNNNNN are the segment files and DIR/segments.map is
 * a small file every process maps shared: a header and one 64-bit generation
 * per segment.
 *
 * A segment's generation grows each time it is freed, and a segment is
 * rewritten only after it is freed. An extent records the generation it was
 * written in. A reader loads the segment's generation before and after its
 * read (a seqlock): if both equal the extent's, the segment was not freed,
 * so not rewritten, while the bytes were read; otherwise the read fails
 * with -ESTALE and no byte of it is used. Readers that copy take no lock;
 * none makes reclaim wait (a pin, below, only keeps a freed segment from
 * being reused while it is held).
 *
 * The append lock of segment i (byte i of the map file, an open file
 * description lock) is held by the process appending to i or emptying it;
 * the kernel drops it when that process dies, which is how crash recovery
 * tells a live owner from a dead one, and it keeps a segment from being
 * claimed until whoever freed it has published the new generation.
 *
 * A pin (a shared lock on byte SEG_PIN_BASE + i of the map file, through a
 * descriptor of its own, counted per process) keeps segment i from being
 * claimed for new appends: a reader that sends an extent's bytes straight
 * from the page cache, after checking them, holds one from before its
 * generation check until the last byte has left (seg_pin). Reclaim may free
 * a pinned segment (its generation grows, new readers get -ESTALE), but the
 * claimer probes the pin (seg_pin_probe) before the first byte is written
 * and takes another segment while any process holds one.
 *
 * An extent is a SEG_HEADER_SIZE header followed by its payload, padded to
 * SEG_ALIGN; the header names the object version, the extent's place in it,
 * the segment generation, and carries CRC32C of the payload and of itself.
 *
 * The catalog also keeps CRC32C of each chunk of a payload, so a read of
 * part of an extent reads and verifies only the chunks it touches: a random
 * 64 KiB read of a 1 MiB extent no longer costs 1 MiB of disk and checksum.
 * The chunks follow the object's offsets as they were when the extent was
 * written: the first ends where the offset reaches a multiple of SEG_CHUNK
 * (it is `first` bytes, 1 to SEG_CHUNK), the others are SEG_CHUNK bytes but
 * the last, so a read aligned to 64 KiB of the object touches one chunk.
 */
#ifndef KVT_SEGMENT_H
#define KVT_SEGMENT_H

#include <stdint.h>
#include <string.h>

#define SEG_ALIGN 4096
#define SEG_HEADER_SIZE 64
/*
 * An extent carries up to 1 MiB of payload, so KV blocks (powers of two of
 * 1 MiB and up) split into whole extents, and a reader asking for aligned
 * MiBs (the kernel's readahead, an S3 range) reads one extent per MiB; the
 * header makes it SEG_ALIGN more on disk.
 */
#define SEG_PAYLOAD_MAX (1024 * 1024)
#define SEG_EXTENT_MAX (SEG_PAYLOAD_MAX + SEG_ALIGN)	/* header + payload, padded */
#define SEG_MAGIC 0x4b565445u		/* "KVTE" */
#define SEG_PIN_BASE ((int64_t)1 << 32)	/* map-file byte of segment 0's pin */
#define SEG_USERS_BYTE ((int64_t)1 << 33)	/* read-locked by every process with the store open */
#define SEG_HOLD_BASE ((int64_t)3 << 32)	/* map-file byte of segment 0's hold */
#define SEG_CHUNK (64 * 1024)		/* payload bytes per chunk checksum */
#define SEG_CHUNKS_MAX ((SEG_PAYLOAD_MAX + SEG_CHUNK - 1) / SEG_CHUNK + 1)

struct seg_header {
	uint32_t magic;
	uint16_t version;	/* 1 */
	uint16_t header_size;	/* SEG_HEADER_SIZE */
	uint64_t vid;		/* object version */
	uint64_t obj_off;	/* payload offset within the object */
	uint64_t gen;		/* segment generation */
	uint32_t seq;		/* extent number within the object */
	uint32_t length;	/* payload bytes */
	uint32_t crc;		/* CRC32C of the payload */
	uint32_t segment;
	uint8_t reserved[12];
	uint32_t hcrc;		/* CRC32C of the bytes above */
};

_Static_assert(sizeof(struct seg_header) == SEG_HEADER_SIZE, "extent header is 64 bytes");

/* Bytes of segment space an extent of `length` payload bytes takes. */
static inline uint64_t seg_extent_space(uint32_t length)
{
	return ((uint64_t)SEG_HEADER_SIZE + length + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
}

/* Zeroes the padding after an extent's payload in buf, so that the file
 * never holds stale heap bytes. */
static inline void seg_extent_pad(void *buf, uint32_t length)
{
	memset((char *)buf + SEG_HEADER_SIZE + length, 0,
	       seg_extent_space(length) - SEG_HEADER_SIZE - length);
}

/* The first chunk's length for a payload at object offset obj_off. */
static inline uint32_t seg_chunk_first(uint64_t obj_off)
{
	return SEG_CHUNK - (uint32_t)(obj_off % SEG_CHUNK);
}

/* Chunks of a payload of `length` bytes whose first chunk is `first`. */
static inline unsigned seg_chunks(uint32_t length, uint32_t first)
{
	return length <= first ? 1 : 1 + (length - first + SEG_CHUNK - 1) / SEG_CHUNK;
}

/* Payload offset where chunk k starts. */
static inline uint32_t seg_chunk_start(uint32_t first, unsigned k)
{
	return k == 0 ? 0 : first + (k - 1) * SEG_CHUNK;
}

/* The chunk holding payload offset p. */
static inline unsigned seg_chunk_of(uint32_t first, uint64_t p)
{
	return p < first ? 0 : 1 + (unsigned)((p - first) / SEG_CHUNK);
}

/*
 * CRC32C of each chunk of payload into chunk_crc (seg_chunks(length,
 * first) of them), in one pass; returns the CRC32C of the whole payload.
 */
uint32_t seg_payload_crc(const void *payload, uint32_t length, uint32_t first,
			 uint32_t *chunk_crc);

void seg_header_fill(struct seg_header *h, uint64_t vid, uint32_t seq, uint64_t obj_off,
		     uint64_t gen, uint32_t segment, uint32_t length, uint32_t crc);
/*
 * Checks a header read from disk against what the catalog expects; 0, or
 * -EIO with the reason logged (the payload CRC is the caller's to check).
 * seg_header_fault() only says why (NULL: sound), for callers that name
 * the object themselves.
 */
const char *seg_header_fault(const struct seg_header *h, uint64_t vid, uint32_t seq,
			     uint64_t gen, uint32_t segment, uint32_t length);
int seg_header_check(const struct seg_header *h, uint64_t vid, uint32_t seq, uint64_t gen,
		     uint32_t segment, uint32_t length);

/* The file of segment id in the store at dir. */
void seg_file_path(const char *dir, uint32_t id, char *path, size_t len);

struct seg_files;

enum {
	SEG_CREATE = 1,		/* make (and fill) what is missing */
	SEG_READONLY = 2,	/* a read-only file system: open to read, write nothing */
};

/*
 * Opens (with SEG_CREATE: makes) the segment files of dir: nsegs files of
 * size bytes each, and the shared map. direct: open segment files with
 * O_DIRECT.
 */
int seg_files_open(const char *dir, uint32_t nsegs, uint64_t size, int direct, unsigned flags,
		   struct seg_files **out);
void seg_files_close(struct seg_files *sf);

/* A segment file that seg_files_open made, or filled up to size. */
struct seg_made {
	uint32_t id;
	uint64_t size;		/* what it was: 0 if it was missing */
};

/* The files this open made or filled up, by ascending id; *n of them. */
const struct seg_made *seg_files_made(const struct seg_files *sf, uint32_t *n);

int seg_fd(struct seg_files *sf, uint32_t id);
/*
 * A descriptor of segment id that reads through the page cache (the O_DIRECT
 * one where it cannot be opened). The kernel keeps cached pages coherent
 * with O_DIRECT writes, and a reader verifies what it reads either way.
 */
int seg_cached_fd(struct seg_files *sf, uint32_t id);
uint32_t seg_count(const struct seg_files *sf);
uint64_t seg_size(const struct seg_files *sf);

/* The map's generation of segment id (what readers compare against). */
uint64_t seg_map_gen(struct seg_files *sf, uint32_t id);
/* True if the map was made before the last reboot (generations unknown). */
int seg_map_stale(struct seg_files *sf);
/* Raises the map's generation of id to gen; never lowers it. */
void seg_map_set_gen(struct seg_files *sf, uint32_t id, uint64_t gen);
void seg_map_mark_fresh(struct seg_files *sf);

/*
 * Segment id mapped read-only and shared, whole, on first use and until
 * seg_files_close(): readers check and send extents from the page cache
 * without a copy. NULL if it cannot be mapped (the caller reads instead).
 */
const char *seg_mapped(struct seg_files *sf, uint32_t id);

/*
 * Pins segment id for this process (counted: the lock is taken by the first
 * pin and dropped by the last unpin); 0 or -errno. Waits only for a claimer's
 * probe, which holds the byte for two system calls.
 */
int seg_pin(struct seg_files *sf, uint32_t id);
void seg_unpin(struct seg_files *sf, uint32_t id);
/* 0 if no process pins id, -EAGAIN if one does (lock_fd: seg_lock_fd_open). */
int seg_pin_probe(int lock_fd, uint32_t id);

/*
 * A hold (a shared lock on byte SEG_HOLD_BASE + i, counted per process as
 * pins are) asks reclaim to take other segments first: an open reader of a
 * version holds the segments of its extents, so that a version replaced
 * while it is read stays readable as long as reclaim finds other victims
 * (reclaim.c, "Open readers"). Unlike a pin it never keeps a freed segment
 * from being claimed: a reader left open for hours costs no space.
 */
int seg_hold(struct seg_files *sf, uint32_t id);
void seg_unhold(struct seg_files *sf, uint32_t id);
/* 0 if no process holds id, -EAGAIN if one does. */
int seg_hold_probe(int lock_fd, uint32_t id);

/* A descriptor for append locks: locks of one descriptor do not exclude
 * each other, so each store opens its own. */
int seg_lock_fd_open(struct seg_files *sf);
/* 0, or -EAGAIN if another descriptor holds it. */
int seg_append_trylock(int lock_fd, uint32_t id);
void seg_append_unlock(int lock_fd, uint32_t id);

#endif /* KVT_SEGMENT_H */
