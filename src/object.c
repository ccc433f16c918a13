/*
 * object.c - objects as a whole: key rules, head, delete, copy, pin and
 * listing. Writing and reading bytes are writer.c and reader.c.
 *
 * Keys are compared as bytes, so listings come out in the order S3 gives
 * (UTF-8 byte order), and S3 does not normalise keys: "a//b", "a/b" and
 * "a/./b" are three different keys.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "util.h"

const char *kvt_tier_name(enum kvt_tier tier)
{
	static const char *const names[] = { "hot", "demoting", "cold", "recalling" };

	return (unsigned)tier < ARRAY_SIZE(names) ? names[tier] : "unknown";
}

void kvt_meta_free(struct kvt_meta *meta, size_t n)
{
	for (size_t i = 0; meta && i < n; i++) {
		free(meta[i].name);
		free(meta[i].value);
	}
	free(meta);
}

void kvt_object_free(struct kvt_object *obj)
{
	if (!obj)
		return;
	kvt_meta_free(obj->meta, obj->nmeta);
	free(obj->bucket);
	free(obj->key);
	free(obj->content_type);
	free(obj->session);
	free(obj);
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		size_t n;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			cp = c & 0x07;
		} else {
			return 0;
		}
		for (size_t k = 1; k <= n; k++) {
			if (i + k >= len || (s[i + k] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += n + 1;
	}
	return 1;
}

int kvt_key_valid(const char *key)
{
	size_t len;

	if (!key)
		return -EINVAL;
	len = strlen(key);
	if (len == 0)
		return -EINVAL;
	if (len > KVT_KEY_MAX)
		return -ENAMETOOLONG;
	return utf8_valid((const unsigned char *)key, len) ? 0 : -EILSEQ;
}

/* Hands the catalog's object to the caller, named with its bucket; frees co. */
static int object_from_cat(struct cat_object *co, const char *bucket, struct kvt_object **out)
{
	*out = co->obj;
	co->obj = NULL;
	cat_object_free(co);
	(*out)->bucket = strdup(bucket);
	if (!(*out)->bucket) {
		kvt_object_free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

int kvt_object_head(struct kvt_store *st, const char *bucket, const char *key,
		    struct kvt_object **out)
{
	struct cat *c = store_cat(st);
	struct cat_object *co = NULL;
	int rc;

	if (!c)
		return -ENOMEM;
	rc = kvt_key_valid(key);
	if (rc < 0)
		return rc;
	/* One query (one read transaction) for bucket and object. */
	rc = cat_object_lookup(c, bucket, key, 0, &co);
	if (rc < 0)
		return rc;
	return object_from_cat(co, bucket, out);
}

int kvt_object_head_name(struct kvt_store *st, const char *bucket, const char *key,
			 struct kvt_object **out)
{
	struct cat *c = store_cat(st);
	struct cat_object *co = NULL;
	char *under = NULL, *upper = NULL;
	size_t len;
	int rc;

	if (!c)
		return -ENOMEM;
	rc = kvt_key_valid(key);
	if (rc < 0)
		return rc;
	len = strlen(key);
	if (len + 1 <= KVT_KEY_MAX) {	/* else no key can be under it */
		/* The keys under "key/" are those in ["key/", "key0"): '0' follows '/'. */
		under = malloc(len + 2);
		upper = malloc(len + 2);
		if (!under || !upper) {
			free(under);
			free(upper);
			return -ENOMEM;
		}
		snprintf(under, len + 2, "%s/", key);
		snprintf(upper, len + 2, "%s0", key);
	}
	rc = cat_object_lookup_or_under(c, bucket, key, under, upper, &co);
	free(under);
	free(upper);
	return rc < 0 ? rc : object_from_cat(co, bucket, out);
}

int kvt_object_lookup_many(struct kvt_store *st, const char *bucket, const char *const *keys,
			   size_t n, struct kvt_key_state *out)
{
	struct cat *c = store_cat(st);
	const char **valid = NULL;
	int64_t bucket_id;
	int rc;

	if (!c)
		return -ENOMEM;
	valid = malloc((n ? n : 1) * sizeof(*valid));
	if (!valid)
		return -ENOMEM;
	/* An invalid key cannot be stored: missing, without a query. */
	for (size_t i = 0; i < n; i++)
		valid[i] = kvt_key_valid(keys[i]) == 0 ? keys[i] : NULL;
	/*
	 * A deferred read transaction: a snapshot of the WAL, no lock a writer
	 * waits for and none a writer's commit holds, so a lookup neither
	 * stalls nor is stalled by PUTs; and one snapshot for all n keys
	 * instead of one per statement.
	 */
	rc = cat_begin_read(c);
	if (rc < 0)
		goto out;
	rc = store_bucket_id(st, bucket, &bucket_id);
	if (rc == 0)
		rc = cat_object_states(c, bucket_id, valid, n, out);
	cat_rollback(c);
out:
	free(valid);
	return rc;
}

/* The bucket id of bucket, after checking key; the common prologue. */
static int object_prologue(struct kvt_store *st, const char *bucket, const char *key,
			   struct cat **c, int64_t *bucket_id)
{
	int rc;

	*c = store_cat(st);
	if (!*c)
		return -ENOMEM;
	rc = kvt_key_valid(key);
	return rc < 0 ? rc : store_bucket_id(st, bucket, bucket_id);
}

int kvt_object_delete_if(struct kvt_store *st, const char *bucket, const char *key,
			 int (*precondition)(void *arg, const char *etag), void *arg)
{
	struct cat *c;
	int64_t bucket_id;
	int rc = object_prologue(st, bucket, key, &c, &bucket_id);

	return rc < 0 ? rc : cat_object_delete(c, bucket_id, key, precondition, arg);
}

int kvt_object_delete(struct kvt_store *st, const char *bucket, const char *key)
{
	return kvt_object_delete_if(st, bucket, key, NULL, NULL);
}

int kvt_object_pin(struct kvt_store *st, const char *bucket, const char *key, int pinned)
{
	struct cat *c;
	int64_t bucket_id;
	int rc = object_prologue(st, bucket, key, &c, &bucket_id);

	return rc < 0 ? rc : cat_object_set_pin(c, bucket_id, key, pinned);
}

int kvt_object_copy(struct kvt_store *st, const char *src_bucket, const char *src_key,
		    const char *dst_bucket, const char *dst_key,
		    const struct kvt_put_opts *opts, struct kvt_object **info)
{
	struct kvt_reader *r = NULL;
	struct kvt_writer *w = NULL;
	struct kvt_put_opts copy;
	const struct kvt_object *src;
	size_t chunk = st->payload_max;
	char *buf = NULL;
	uint64_t off = 0;
	int rc;

	rc = kvt_reader_open(st, src_bucket, src_key, &r);
	if (rc < 0)
		return rc;
	src = kvt_reader_object(r);
	if (!opts) {
		/* Same bytes, same description: S3's COPY metadata directive. */
		copy = (struct kvt_put_opts){
			.flags = src->pinned ? KVT_PUT_PIN : 0,
			.content_type = src->content_type,
			.session = src->session,
			.etag = src->etag,	/* the same bytes: S3 keeps the ETag */
			.posix = &src->posix,
			.meta = src->meta,
			.nmeta = src->nmeta,
		};
		opts = &copy;
	}
	buf = malloc(chunk);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	rc = kvt_writer_open(st, dst_bucket, dst_key, opts, &w);
	if (rc < 0)
		goto out;
	while (off < src->size) {
		ssize_t n = kvt_reader_pread(r, buf, chunk, off);

		if (n <= 0) {
			rc = n < 0 ? (int)n : -EIO;
			goto out;
		}
		rc = kvt_writer_write(w, buf, (size_t)n);
		if (rc < 0)
			goto out;
		off += (uint64_t)n;
	}
	rc = kvt_writer_commit(w, info);
	w = NULL;
out:
	kvt_writer_abort(w);
	kvt_reader_close(r);
	free(buf);
	return rc;
}

/*
 * The parts of a compose as the catalog has them now: ids, versions, total
 * size and combined CRC32C. -ESTALE if a part's ETag is not the one its
 * caller named (part_etags, may be NULL), -ENOENT if a part is gone.
 */
static int compose_read_parts(struct cat *c, int64_t parts_id, const char *const *part_keys,
			      const char *const *part_etags, size_t nparts, int64_t *ids,
			      uint64_t *vids, uint64_t *size, uint32_t *crc)
{
	*size = 0;
	*crc = 0;
	for (size_t i = 0; i < nparts; i++) {
		struct cat_object *part = NULL;
		int rc = cat_object_get(c, parts_id, part_keys[i], 0, &part);

		if (rc < 0)
			return rc;
		if (part_etags && strcmp(part->obj->etag, part_etags[i]) != 0) {
			cat_object_free(part);
			return -ESTALE;
		}
		ids[i] = part->id;
		vids[i] = part->vid;
		*crc = kvt_crc32c_combine(*crc, part->obj->crc32c, part->obj->size);
		*size += part->obj->size;
		cat_object_free(part);
	}
	return 0;
}

int kvt_object_compose(struct kvt_store *st, const char *bucket, const char *key,
		       const char *parts_bucket, const char *const *part_keys,
		       const char *const *part_etags, size_t nparts,
		       const struct kvt_put_opts *opts, struct kvt_object **info)
{
	static const struct kvt_put_opts none;
	struct cat *c = store_cat(st);
	int64_t bucket_id, parts_id, *ids = NULL;
	uint64_t *vids = NULL, size = 0;
	uint32_t crc = 0;
	char etag[KVT_ETAG_MAX], *session = NULL;
	struct cat_put put;
	int rc;

	if (!c)
		return -ENOMEM;
	if (!opts)
		opts = &none;
	rc = kvt_key_valid(key);
	if (rc == 0)
		rc = store_bucket_id(st, bucket, &bucket_id);
	if (rc == 0)
		rc = store_bucket_id(st, parts_bucket, &parts_id);
	if (rc < 0)
		return rc;
	ids = calloc(nparts ? nparts : 1, sizeof(*ids));
	vids = calloc(nparts ? nparts : 1, sizeof(*vids));
	session = store_session_of(st, key, opts->session);
	if (!ids || !vids || !session) {
		rc = -ENOMEM;
		goto out;
	}
	/*
	 * The parts are read (and their ETags checked) outside the catalog
	 * transaction that takes their extents, but that transaction takes
	 * each only at the version read here (cat_object_put_parts, -ESTALE
	 * otherwise): the ETag checked is the ETag of the bytes composed. A
	 * part re-uploaded in between is read and checked again.
	 */
	for (int tries = 0;; tries++) {
		rc = compose_read_parts(c, parts_id, part_keys, part_etags, nparts, ids, vids,
					&size, &crc);
		if (rc < 0)
			goto out;
		if (opts->etag)
			snprintf(etag, sizeof(etag), "%s", opts->etag);
		else
			snprintf(etag, sizeof(etag), "\"%08x%016llx-%zu\"", crc,
				 (unsigned long long)size, nparts);
		put = (struct cat_put){
			.bucket_id = bucket_id,
			.key = key,
			.vid = store_new_vid(st),
			.size = size,
			.etag = etag,
			.crc32c = crc,
			.content_type = opts->content_type,
			.meta = opts->meta,
			.nmeta = opts->nmeta,
			.mtime_ns = opts->mtime_ns ? opts->mtime_ns : util_now_ns(),
			.session = session,
			.pinned = !!(opts->flags & KVT_PUT_PIN),
			.keep_pin = !!(opts->flags & KVT_PUT_KEEP_PIN),
			.if_none_match = !!(opts->flags & KVT_PUT_IF_NONE_MATCH),
			.precondition = opts->precondition,
			.precondition_arg = opts->precondition_arg,
		};
		store_posix_fill(&put.posix, opts->posix, put.mtime_ns);
		rc = cat_object_put_parts(c, &put, ids, vids, nparts, NULL, NULL);
		if (rc != -ESTALE)
			break;
		if (tries == 2) {
			rc = -EAGAIN;	/* the parts keep changing under us */
			goto out;
		}
	}
	if (rc == 0 && info)
		rc = kvt_object_head(st, bucket, key, info);
out:
	free(ids);
	free(vids);
	free(session);
	return rc;
}

int kvt_object_setattr(struct kvt_store *st, const char *bucket, const char *key, unsigned mask,
		       const struct kvt_posix *posix, int64_t mtime_ns)
{
	struct cat *c;
	int64_t bucket_id;
	int rc = object_prologue(st, bucket, key, &c, &bucket_id);

	return rc < 0 ? rc : cat_object_setattr(c, bucket_id, key, mask, posix, mtime_ns,
						 util_now_ns());
}

int kvt_object_set_session(struct kvt_store *st, const char *bucket, const char *key,
			   const char *session)
{
	struct cat *c;
	int64_t bucket_id;
	char *dflt = NULL;
	int rc = object_prologue(st, bucket, key, &c, &bucket_id);

	if (rc < 0)
		return rc;
	if (!session && !(session = dflt = store_session_of(st, key, NULL)))
		return -ENOMEM;
	rc = kvt_key_valid(session);	/* as a writer's (writer.c) */
	if (rc == 0)
		rc = cat_object_set_session(c, bucket_id, key, session, util_now_ns());
	free(dflt);
	return rc;
}

static char *prefix_upper(const char *s);

int kvt_object_rename(struct kvt_store *st, const char *bucket, const char *from, const char *to,
		      unsigned flags)
{
	char *from_upper = NULL, *to_upper = NULL;
	struct cat *c;
	int64_t bucket_id;
	size_t flen, tlen;
	int rc = object_prologue(st, bucket, from, &c, &bucket_id);

	if (rc == 0)
		rc = kvt_key_valid(to);
	if (rc < 0)
		return rc;
	if (!(flags & KVT_RENAME_PREFIX))
		return cat_object_rename(c, bucket_id, from, to, !!(flags & KVT_RENAME_NOREPLACE),
					 util_now_ns());
	flen = strlen(from);
	tlen = strlen(to);
	if (from[flen - 1] != '/' || to[tlen - 1] != '/')
		return -EINVAL;
	/* A directory cannot move inside itself. */
	if (tlen >= flen && strncmp(to, from, flen) == 0)
		return -EINVAL;
	from_upper = prefix_upper(from);
	to_upper = prefix_upper(to);
	if (!from_upper || !to_upper)
		rc = -ENOMEM;
	else
		rc = cat_object_rename_prefix(c, bucket_id, from, to, from_upper, to_upper,
					      util_now_ns());
	free(from_upper);
	free(to_upper);
	return rc;
}

/* ---- listing --------------------------------------------------------------- */

/*
 * The smallest string greater than every string that starts with s: s with
 * its last byte incremented (carrying past 0xff). NULL if there is none.
 */
static char *prefix_upper(const char *s)
{
	size_t len = strlen(s);
	char *u;

	while (len > 0 && (unsigned char)s[len - 1] == 0xff)
		len--;
	if (len == 0)
		return NULL;
	u = strndup(s, len);
	if (u)
		u[len - 1] = (char)((unsigned char)u[len - 1] + 1);
	return u;
}

static char *token_encode(const char *marker)
{
	size_t len = strlen(marker);
	char *t = malloc(2 * len + 1);

	if (t)
		util_hex(t, marker, len);
	return t;
}

static int token_decode(const char *token, char **out)
{
	size_t len = strlen(token);
	char *m;

	if (len % 2 || len / 2 > KVT_KEY_MAX)
		return -EINVAL;
	m = malloc(len / 2 + 1);
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < len / 2; i++) {
		unsigned v = 0;

		for (int k = 0; k < 2; k++) {
			char ch = token[2 * i + k];

			v <<= 4;
			if (ch >= '0' && ch <= '9')
				v |= (unsigned)(ch - '0');
			else if (ch >= 'a' && ch <= 'f')
				v |= (unsigned)(ch - 'a' + 10);
			else {
				free(m);
				return -EINVAL;
			}
		}
		m[i] = (char)v;
		if (v == 0) {
			free(m);
			return -EINVAL;
		}
	}
	m[len / 2] = '\0';
	*out = m;
	return 0;
}

struct list_state {
	struct kvt_list *list;
	const char *prefix;
	size_t prefix_len;
	const char *delim;
	const char *marker;	/* list only what sorts after this */
	unsigned limit;
	char *cursor;		/* where the next query starts */
	int inclusive;		/* ... and whether it includes cursor */
	int full;		/* limit reached and one more entry seen */
	int jumped;		/* a common prefix moved the cursor */
	size_t cap_objects, cap_prefixes;
};

static int list_push_prefix(struct list_state *ls, char *cp)
{
	struct kvt_list *l = ls->list;

	if (UTIL_GROW(l->prefixes, l->nprefixes, ls->cap_prefixes) < 0)
		return -ENOMEM;
	l->prefixes[l->nprefixes++] = cp;
	return 0;
}

static int list_push_object(struct list_state *ls, struct kvt_object *o)
{
	struct kvt_list *l = ls->list;

	if (UTIL_GROW(l->objects, l->nobjects, ls->cap_objects) < 0)
		return -ENOMEM;
	l->objects[l->nobjects++] = o;
	return 0;
}

static void list_set_cursor(struct list_state *ls, char *cursor, int inclusive)
{
	free(ls->cursor);
	ls->cursor = cursor;
	ls->inclusive = inclusive;
}

/* One row of a listing query. Returns non-zero to stop the query. */
static int list_row(void *arg, struct kvt_object *o)
{
	struct list_state *ls = arg;
	struct kvt_list *l = ls->list;
	const char *d = NULL;
	char *cp = NULL;

	if (ls->delim && *ls->delim)
		d = strstr(o->key + ls->prefix_len, ls->delim);
	if (d) {
		cp = strndup(o->key, (size_t)(d - o->key) + strlen(ls->delim));
		kvt_object_free(o);
		if (!cp)
			return -ENOMEM;
		/* Next query starts past every key under this common prefix. */
		list_set_cursor(ls, prefix_upper(cp), 1);
		ls->jumped = 1;
		if (ls->marker && strcmp(cp, ls->marker) <= 0) {
			free(cp);	/* returned on an earlier page */
			return 1;
		}
		if (l->nobjects + l->nprefixes == ls->limit) {
			free(cp);
			ls->full = 1;
			return 1;
		}
		free(l->next_marker);
		l->next_marker = strdup(cp);
		if (list_push_prefix(ls, cp) < 0) {
			free(cp);
			return -ENOMEM;
		}
		return 1;
	}
	list_set_cursor(ls, strdup(o->key), 0);
	if (l->nobjects + l->nprefixes == ls->limit) {
		kvt_object_free(o);
		ls->full = 1;
		return 1;
	}
	free(l->next_marker);
	l->next_marker = strdup(o->key);
	if (list_push_object(ls, o) < 0) {
		kvt_object_free(o);
		return -ENOMEM;
	}
	return 0;
}

int kvt_object_list(struct kvt_store *st, const char *bucket,
		    const struct kvt_list_opts *opts, struct kvt_list **out)
{
	struct cat *c = store_cat(st);
	struct list_state ls = { 0 };
	char *upper = NULL, *token_marker = NULL;
	int64_t bucket_id;
	int rc;

	if (!c)
		return -ENOMEM;
	rc = store_bucket_id(st, bucket, &bucket_id);
	if (rc < 0)
		return rc;
	ls.list = calloc(1, sizeof(*ls.list));
	if (!ls.list)
		return -ENOMEM;
	ls.prefix = opts->prefix ? opts->prefix : "";
	ls.prefix_len = strlen(ls.prefix);
	ls.delim = opts->delimiter;
	ls.limit = opts->limit;
	if (opts->continuation && *opts->continuation) {
		rc = token_decode(opts->continuation, &token_marker);
		if (rc < 0)
			goto fail;
		ls.marker = token_marker;
	} else if (opts->start_after && *opts->start_after) {
		ls.marker = opts->start_after;
	}
	/* Start at the later of the prefix and the marker. */
	if (ls.marker && strcmp(ls.marker, ls.prefix) >= 0)
		list_set_cursor(&ls, strdup(ls.marker), 0);
	else
		list_set_cursor(&ls, strdup(ls.prefix), 1);
	upper = ls.prefix_len ? prefix_upper(ls.prefix) : NULL;
	if (!ls.cursor) {
		rc = -ENOMEM;
		goto fail;
	}

	rc = cat_begin_read(c);
	while (rc == 0 && !ls.full) {
		size_t before = ls.list->nobjects + ls.list->nprefixes;
		unsigned batch = MIN(ls.limit + 1 - (unsigned)before, 1000u);

		ls.jumped = 0;
		rc = cat_object_range(c, bucket_id, ls.cursor, ls.inclusive, upper, batch,
				      list_row, &ls);
		if (rc < 0 || !ls.cursor)
			break;
		/* The query ran dry without a jump: nothing is left. */
		if (!ls.jumped && !ls.full &&
		    ls.list->nobjects + ls.list->nprefixes - before < batch)
			break;
		if (upper && strcmp(ls.cursor, upper) >= 0)
			break;
	}
	cat_rollback(c);
	if (rc < 0)
		goto fail;
	/* max-keys=0 asks for nothing, not for a page: S3 says not truncated. */
	ls.list->truncated = ls.full && ls.limit > 0;
	if (ls.list->truncated && ls.list->next_marker) {
		ls.list->next_continuation = token_encode(ls.list->next_marker);
		if (!ls.list->next_continuation) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	*out = ls.list;
	ls.list = NULL;
fail:
	kvt_list_free(ls.list);
	free(ls.cursor);
	free(upper);
	free(token_marker);
	return rc;
}

void kvt_list_free(struct kvt_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->nobjects; i++)
		kvt_object_free(l->objects[i]);
	for (size_t i = 0; i < l->nprefixes; i++)
		free(l->prefixes[i]);
	free(l->objects);
	free(l->prefixes);
	free(l->next_continuation);
	free(l->next_marker);
	free(l);
}
