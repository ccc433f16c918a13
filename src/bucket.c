/*
 * bucket.c - buckets: the namespaces objects live in.
 *
 * Names follow S3's rules for new buckets (3-63 characters of lower-case
 * letters, digits, '.' and '-', beginning and ending with a letter or digit,
 * not shaped like an IP address), so that every bucket is reachable both
 * path-style and virtual-host-style, and every name is safe as a directory
 * name on the FUSE side and as a path component in G4.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "util.h"

int kvt_bucket_name_valid(const char *name)
{
	size_t len = name ? strlen(name) : 0, dots = 0;
	int digits_and_dots = 1;

	if (len < KVT_BUCKET_MIN || len > KVT_BUCKET_MAX)
		return 0;
	if (!isalnum((unsigned char)name[0]) || !isalnum((unsigned char)name[len - 1]))
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)name[i];

		if (!(islower(ch) || isdigit(ch) || ch == '.' || ch == '-'))
			return 0;
		if (ch == '.' && (name[i + 1] == '.' || name[i + 1] == '-' ||
				  (i > 0 && name[i - 1] == '-')))
			return 0;
		if (!isdigit(ch) && ch != '.')
			digits_and_dots = 0;
		dots += ch == '.';
	}
	/* "192.168.5.4" would be taken for an address; "2024" is a fine name in S3. */
	return !(digits_and_dots && dots == 3);
}

/* ".name": the internal buckets of kvt_bucket_create_internal(). */
int bucket_internal_name(const char *name)
{
	size_t len = name ? strlen(name) : 0;

	if (len < 2 || len > KVT_BUCKET_MAX || name[0] != '.')
		return 0;
	for (size_t i = 1; i < len; i++)
		if (!(islower((unsigned char)name[i]) || isdigit((unsigned char)name[i]) ||
		      name[i] == '-'))
			return 0;
	return 1;
}

int kvt_bucket_create_internal(struct kvt_store *st, const char *name)
{
	struct cat *c = store_cat(st);
	int rc;

	if (!c)
		return -ENOMEM;
	if (!bucket_internal_name(name))
		return -EINVAL;
	/* Asked first: a daemon starting on a full disk must not need a write. */
	if (cat_bucket_id(c, name, &(int64_t){ 0 }) == 0)
		return 0;
	rc = cat_bucket_create(c, name, util_now_ns());
	return rc == -EEXIST ? 0 : rc;
}

int kvt_bucket_create(struct kvt_store *st, const char *name)
{
	struct cat *c = store_cat(st);

	if (!c)
		return -ENOMEM;
	if (!kvt_bucket_name_valid(name))
		return -EINVAL;
	return cat_bucket_create(c, name, util_now_ns());
}

int kvt_bucket_delete(struct kvt_store *st, const char *name)
{
	struct cat *c = store_cat(st);

	if (!c)
		return -ENOMEM;
	if (!kvt_bucket_name_valid(name))
		return -ENOENT;
	/* Writers of this process must not take the old id from the cache. */
	store_bucket_forget(st, name);
	return cat_bucket_delete(c, name);
}

int kvt_bucket_exists(struct kvt_store *st, const char *name)
{
	int64_t id;

	return store_bucket_id(st, name, &id);
}

struct bucket_walk {
	int (*fn)(void *arg, const char *name, int64_t ctime_ns);
	void *arg;
};

static int bucket_list_one(void *arg, const char *name, int64_t ctime_ns)
{
	struct bucket_walk *bw = arg;

	return name[0] == '.' ? 0 : bw->fn(bw->arg, name, ctime_ns);
}

int kvt_bucket_list(struct kvt_store *st,
		    int (*fn)(void *arg, const char *name, int64_t ctime_ns), void *arg)
{
	struct cat *c = store_cat(st);
	struct bucket_walk bw = { fn, arg };

	if (!c)
		return -ENOMEM;
	return cat_bucket_list(c, bucket_list_one, &bw);
}
