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
	size_t len = name ? strlen(name) : 0;
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
	}
	/* "192.168.5.4" would be taken for an address. */
	return !digits_and_dots;
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
	return cat_bucket_delete(c, name);
}

int kvt_bucket_exists(struct kvt_store *st, const char *name)
{
	int64_t id;

	return store_bucket_id(st, name, &id);
}

int kvt_bucket_list(struct kvt_store *st,
		    int (*fn)(void *arg, const char *name, int64_t ctime_ns), void *arg)
{
	struct cat *c = store_cat(st);

	if (!c)
		return -ENOMEM;
	return cat_bucket_list(c, fn, arg);
}
