/*
 * fuzz_names.c - fuzz target for the names that come from outside and end
 * up as paths: bucket names (kvt_bucket_name_valid, src/bucket.c, and the
 * internal ".name" buckets), object keys (kvt_key_valid, src/object.c; the
 * gateway, the mount and manifest import all call it), and the mapping of a
 * G4 key to a file of the file:// cold tier (src/cold_file.c); and the
 * extended attributes of kvtier-fuse (fuse/xattr.c), whose names and
 * values any process on the mount sends: a session set there names G4's
 * manifest of it.
 *
 * Promises checked, each against an independent statement of the rule
 * written here, so that a bug has to be made twice to go unseen:
 *  - a bucket name is valid exactly when S3's rules for new buckets say so,
 *    and a valid one is a safe single path component (never ".", "..", no
 *    '/', no NUL);
 *  - an internal bucket name starts with '.', is neither "." nor "..";
 *  - a key is valid exactly when it is 1..KVT_KEY_MAX bytes of well-formed
 *    UTF-8 (Unicode table 3-7), checked here by another decoder;
 *  - in the file cold tier, every valid "BUCKET/KEY" is stored as exactly one
 *    file inside the tier's directory, never outside (no "..", no absolute
 *    path, no NUL can move it), two different keys never share a file, and
 *    what is put reads back, and deleting it leaves no directory behind.
 *    The one refusal allowed is -ENAMETOOLONG, when an encoded component
 *    exceeds NAME_MAX;
 *  - an attribute name is one of the six user.kvtier.* names exactly, or
 *    another user.kvtier.*, another user.*, or outside user.*;
 *  - a value of user.kvtier.session is taken exactly when it is 1..1024
 *    bytes of UTF-8 without a NUL, and is then those very bytes; else
 *    -EINVAL (empty, too long, a NUL) or -EILSEQ (not UTF-8);
 *  - a value of user.kvtier.pin is taken exactly when it is "0" or "1".
 *
 * Input: the name to try, up to its first NUL. For the cold tier it is the
 * key, under the bucket "fz"; a second key, the same with its last byte
 * dropped, is put alongside to catch two keys mapped to one file. As an
 * attribute value it is the whole input, NULs and all.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier.h"
#include "cold.h"
#include "store.h"
#include "../fuse/kvfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int ok, const char *what, const char *name)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_names: broken promise: %s (name of %zu bytes)\n", what,
		name ? strlen(name) : 0);
	abort();
}

/* ---- the rules, stated again ------------------------------------------- */

static bool ref_bucket_valid(const char *s)
{
	size_t n = strlen(s);
	bool ip_like = true;
	int dots = 0;

	if (n < 3 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

		if (!alnum && c != '.' && c != '-')
			return false;
		if ((i == 0 || i == n - 1) && !alnum)
			return false;
		/* A label between dots begins and ends with a letter or digit. */
		if (c == '.' && (s[i + 1] == '.' || s[i + 1] == '-' || s[i - 1] == '-'))
			return false;
		if (c == '.')
			dots++;
		else if (c < '0' || c > '9')
			ip_like = false;
	}
	return !(ip_like && dots == 3);
}

/* Well-formed UTF-8 after the Unicode Standard's table 3-7. */
static bool ref_utf8(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char b = s[i];
		unsigned char lo = 0x80, hi = 0xbf;
		size_t more;

		if (b <= 0x7f) {
			i++;
			continue;
		}
		if (b >= 0xc2 && b <= 0xdf)
			more = 1;
		else if (b == 0xe0)
			more = 2, lo = 0xa0;
		else if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef)
			more = 2;
		else if (b == 0xed)
			more = 2, hi = 0x9f;
		else if (b == 0xf0)
			more = 3, lo = 0x90;
		else if (b >= 0xf1 && b <= 0xf3)
			more = 3;
		else if (b == 0xf4)
			more = 3, hi = 0x8f;
		else
			return false;
		if (n - i - 1 < more)
			return false;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (size_t k = 2; k <= more; k++)
			if (s[i + k] < 0x80 || s[i + k] > 0xbf)
				return false;
		i += more + 1;
	}
	return true;
}

/* What an attribute name is, by kvtier-fuse(8)'s list. */
static enum kvfs_xattr ref_xattr_name(const char *name)
{
	static const char *const ours[] = { "tier", "session", "etag", "checksum", "pin",
					    "prestage" };
	static const enum kvfs_xattr is[] = { KVFS_XATTR_TIER, KVFS_XATTR_SESSION,
					      KVFS_XATTR_ETAG, KVFS_XATTR_CHECKSUM,
					      KVFS_XATTR_PIN, KVFS_XATTR_PRESTAGE };
	const size_t n = strlen(name);

	if (n < 5 || memcmp(name, "user.", 5) != 0)
		return KVFS_XATTR_FOREIGN;
	if (n < 12 || memcmp(name + 5, "kvtier.", 7) != 0)
		return KVFS_XATTR_USER;
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (n == 12 + strlen(ours[i]) && memcmp(name + 12, ours[i], n - 12) == 0)
			return is[i];
	return KVFS_XATTR_UNKNOWN;
}

static void fuzz_xattr(const char *name, const uint8_t *data, size_t size)
{
	const char *v = (const char *)data;
	bool nul = memchr(data, '\0', size) != NULL;
	char *session = NULL;
	int rc, pin = -1;

	fuzz_require(kvfs_xattr_name(name) == ref_xattr_name(name),
		     "an attribute name is what kvtier-fuse(8) lists", name);

	rc = kvfs_xattr_session(v, size, &session);
	if (size == 0 || size > KVT_KEY_MAX || nul)
		fuzz_require(rc == -EINVAL && !session,
			     "an empty, too long or NUL-holding session is EINVAL", name);
	else if (!ref_utf8(data, size))
		fuzz_require(rc == -EILSEQ && !session, "a session not UTF-8 is EILSEQ", name);
	else
		fuzz_require(rc == 0 && session && strlen(session) == size &&
			     memcmp(session, data, size) == 0,
			     "a session of 1..1024 bytes of UTF-8 is taken as it is", name);
	free(session);

	rc = kvfs_xattr_pin(v, size, &pin);
	if (size == 1 && (v[0] == '0' || v[0] == '1'))
		fuzz_require(rc == 0 && pin == (v[0] == '1'), "a pin is 0 or 1", name);
	else
		fuzz_require(rc == -EINVAL, "a pin is nothing but 0 or 1", name);
}

/* ---- the file cold tier -------------------------------------------------- */

static char fuzz_root[PATH_MAX / 2];	/* what this process made */
static char fuzz_dir[PATH_MAX];	/* the tier's directory, fuzz_root/a/b/g4 */
static struct cold *fuzz_cold;
static size_t fuzz_files;

static int fuzz_count(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	/* The tier's own temporary files (DIR/.kvtier/tmp/) are not objects. */
	if (flag == FTW_F && strncmp(path + strlen(fuzz_dir), "/.kvtier/tmp/", 13) != 0)
		fuzz_files++;
	return 0;
}

static size_t fuzz_objects(void)
{
	fuzz_files = 0;
	if (nftw(fuzz_dir, fuzz_count, 16, FTW_PHYS) < 0)
		abort();
	return fuzz_files;
}

/* Removes what is under the tier, but its own DIR/.kvtier/. */
static int fuzz_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	if (ftw->level == 0 || strncmp(path + strlen(fuzz_dir), "/.kvtier", 8) == 0)
		return 0;
	return remove(path) < 0 ? -1 : 0;
}

/*
 * A delete left the key's directories (cold_file removed none), so each
 * input left some behind and fuzz_objects() walked them all, every input's
 * since the start: a campaign ran 200 inputs a second at first, 80 after
 * 30 s, 22 later on, each in nftw(). Every input starts from an empty tier,
 * which fuzz_cold_put() checks its deletes leave so too.
 */
static void fuzz_cold_clear(void)
{
	if (nftw(fuzz_dir, fuzz_rm, 16, FTW_PHYS | FTW_DEPTH) < 0)
		abort();
}

static void fuzz_cleanup(void)
{
	char cmd[PATH_MAX + 32];

	cold_free(fuzz_cold);
	/* The directory holds only what this process made. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_root);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_names: cannot remove '%s'\n", fuzz_root);
}

static void fuzz_cold_init(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

	/* Two levels of canary directories above the tier catch a key that climbs. */
	snprintf(fuzz_root, sizeof(fuzz_root), "%s/fuzz_names.XXXXXX", base);
	if (!mkdtemp(fuzz_root))
		abort();
	snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/a/b/g4", fuzz_root);
	if (cold_file_new(fuzz_dir, &fuzz_cold) < 0)
		abort();
	atexit(fuzz_cleanup);
}

/* Entries in dir (besides "." and ".."). */
static size_t fuzz_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	if (!d)
		abort();
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

/* Whether key, as cold_file encodes it, is too long a file name or path. */
static bool fuzz_too_long(const char *key)
{
	size_t enc = 0, total = strlen(fuzz_dir) + 1;

	for (const char *p = key;; p++) {
		if (*p == '/' || *p == '\0') {
			if (enc + 1 > NAME_MAX)	/* + the '%' a file name ends with */
				return true;
			total += enc + 1;
			enc = 0;
			if (!*p)
				return total >= PATH_MAX;
			continue;
		}
		enc += ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			(*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '~' ||
			*p == '-') ? 1 : 3;
	}
}

static void fuzz_cold_put(const char *key)
{
	char g4[KVT_KEY_MAX + 8], g4b[KVT_KEY_MAX + 8], canary[PATH_MAX + 16];
	size_t klen = strlen(key), len = 0;
	char *buf = NULL;
	int rc, rc2 = -1;

	fuzz_cold_clear();
	snprintf(g4, sizeof(g4), "fz/%s", key);
	rc = cold_put_buf(fuzz_cold, g4, key, klen, NULL);
	if (rc == -ENAMETOOLONG && fuzz_too_long(g4))
		return;
	fuzz_require(rc == 0, "a valid key can be put", key);
	fuzz_require(fuzz_objects() == 1, "a put makes one file inside the tier", key);
	/* Nothing may appear next to the tier or above it. */
	snprintf(canary, sizeof(canary), "%s/..", fuzz_dir);
	fuzz_require(fuzz_entries(canary) == 1, "nothing lands beside the tier", key);
	snprintf(canary, sizeof(canary), "%s/../..", fuzz_dir);
	fuzz_require(fuzz_entries(canary) == 1, "nothing lands above the tier", key);

	/* A second key, one byte shorter: its own file, and the first intact. */
	if (klen > 1) {
		snprintf(g4b, sizeof(g4b), "fz/%.*s", (int)(klen - 1), key);
		rc2 = cold_put_buf(fuzz_cold, g4b, "x", 1, NULL);
		if (rc2 == 0)
			fuzz_require(fuzz_objects() == 2, "two keys are two files", key);
	}
	rc = cold_get_buf(fuzz_cold, g4, KVT_KEY_MAX + 1, &buf, &len);
	fuzz_require(rc == 0 && len == klen && memcmp(buf, key, klen) == 0,
		     "what is put reads back", key);
	free(buf);
	fuzz_require(cold_del(fuzz_cold, g4) == 0, "a put key can be deleted", key);
	if (rc2 == 0)
		fuzz_require(cold_del(fuzz_cold, g4b) == 0, "the second key can be deleted", key);
	fuzz_require(fuzz_objects() == 0, "deleting both leaves nothing", key);
	/* Not even a directory: only the tier's own .kvtier/ is left. */
	fuzz_require(fuzz_entries(fuzz_dir) == 1, "deleting both leaves no directory", key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *name;
	size_t len;
	bool valid, ref;
	int rc;

	if (size > 4 * KVT_KEY_MAX)
		return 0;
	if (!fuzz_cold)
		fuzz_cold_init();
	name = malloc(size + 1);
	if (!name)
		return 0;
	memcpy(name, data, size);
	name[size] = '\0';	/* a NUL inside ends the name, as in every C API */
	len = strlen(name);

	valid = kvt_bucket_name_valid(name) != 0;
	ref = ref_bucket_valid(name);
	fuzz_require(valid == ref, "bucket names follow S3's rules", name);
	if (valid)
		fuzz_require(strcmp(name, ".") && strcmp(name, "..") && !strchr(name, '/'),
			     "a bucket is one safe path component", name);
	if (bucket_internal_name(name))
		fuzz_require(name[0] == '.' && strcmp(name, ".") && strcmp(name, "..") &&
			     !strchr(name, '/') && !kvt_bucket_name_valid(name),
			     "an internal bucket is a safe component no client can name", name);

	rc = kvt_key_valid(name);
	ref = len >= 1 && len <= KVT_KEY_MAX && ref_utf8((const unsigned char *)name, len);
	fuzz_require((rc == 0) == ref, "keys are 1..1024 bytes of UTF-8", name);
	fuzz_require(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG || rc == -EILSEQ,
		     "a refused key says why with a known errno", name);
	if (rc == 0)
		fuzz_cold_put(name);
	fuzz_xattr(name, data, size);
	free(name);
	return 0;
}
