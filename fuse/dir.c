/*
 * dir.c - directory handles: listings fetched a page at a time.
 *
 * A directory "a/b" lists the keys under "a/b/" with delimiter "/": objects
 * are its files and symbolic links, common prefixes its subdirectories. The
 * handle fetches pages of DH_PAGE entries as the kernel reads on and keeps
 * what it fetched, so a readdir offset (an index into that list, after "."
 * and "..") stays valid for seekdir and rewinddir while the handle lives.
 *
 * Names a file system cannot show are left out: the directory's own marker
 * ("a/b/" itself), empty or "."/".." components (S3 keys such as "a//b"),
 * names over 255 bytes, and a prefix that has the name of a file (attr.c:
 * the file wins).
 *
 * Files created through this mount and not yet closed exist only here (a
 * file is published when it is closed): the end of a listing adds them,
 * so that `ls` while cp or an inference engine writes shows the files being
 * written, as on any file system, with their size so far; and those that
 * were being written when the listing began and were published since,
 * which the page read before their close did not hold.
 *
 * readdirplus hands the kernel an inode per entry: its lookup count is
 * raised only for entries that fit in the reply.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs.h"
#include "log.h"
#include "util.h"

#define DH_PAGE 1000

struct dent {
	char *name;
	enum node_type type;
	int full;		/* st is complete (files); directories get a getattr */
	struct stat st;
	uint64_t cseq;		/* kvfs.cseq before st was read (node_attr_fresh) */
};

struct dh {
	pthread_mutex_t lock;
	struct node *node;
	char *bucket;
	char *prefix;		/* "a/b/", or "" for a bucket */
	size_t plen;
	struct dent *ents;
	size_t n, cap;
	char *cont;		/* continuation token of the next page */
	int done;
	uint64_t cseq;		/* kvfs.cseq before the page being pushed was read */
	struct node **early;	/* files being written when the listing began */
	size_t nearly;
};

static int dh_push(struct dh *d, const char *name, size_t len, enum node_type type, int full,
		   const struct stat *st)
{
	struct dent *e;

	if (UTIL_GROW(d->ents, d->n, d->cap) < 0)
		return -ENOMEM;
	e = &d->ents[d->n];
	e->name = strndup(name, len);
	if (!e->name)
		return -ENOMEM;
	e->type = type;
	e->full = full;
	e->st = *st;
	e->cseq = d->cseq;
	d->n++;
	return 0;
}

static int name_ok(const char *name, size_t len)
{
	if (len == 0 || len > KVFS_NAME_MAX)
		return 0;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return 0;
	return 1;
}

/*
 * Was a file called name (len bytes) already listed? Entries are in key
 * order and a file "x" sorts before the prefix "x/", with only names
 * starting "x" and a byte below '/' in between: walk back over those.
 */
static int file_listed(const struct dh *d, const char *name, size_t len)
{
	for (size_t i = d->n; i-- > 0;) {
		const struct dent *e = &d->ents[i];
		int c = strncmp(e->name, name, len);

		if (c < 0)
			return 0;
		if (c == 0 && e->name[len] == '\0' && e->type != NODE_DIR)
			return 1;
	}
	return 0;
}

struct bucket_walk {
	struct kvfs *kv;
	struct dh *d;
};

static int bucket_cb(void *arg, const char *name, int64_t ctime_ns)
{
	struct bucket_walk *bw = arg;
	struct kvt_object o = { .mtime_ns = ctime_ns };
	struct stat st;

	kvfs_attr_dir(bw->kv, &o, &st);
	return dh_push(bw->d, name, strlen(name), NODE_BUCKET, 1, &st);
}

static int dent_listed(const struct dh *d, const char *name)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->ents[i].name, name) == 0)
			return 1;
	return 0;
}

/* A file of this directory, under kv->lock. */
static int dh_holds_locked(const struct dh *d, const struct node *n)
{
	return n->parent == d->node && n->hashed && n->type == NODE_FILE;
}

/*
 * The files of this directory being written here and not yet published
 * (node.pending), found by a walk of the inode table under its lock, with
 * a reference each, into d->early: at the start of a listing.
 */
static int dh_note_early(struct kvfs *kv, struct dh *d)
{
	size_t cap = 0;
	int rc = 0;

	pthread_mutex_lock(&kv->lock);
	for (size_t b = 0; b < kv->nbuckets && rc == 0; b++) {
		for (struct node *n = kv->by_ino[b]; n && rc == 0; n = n->ino_next) {
			if (!dh_holds_locked(d, n) || !n->pending)
				continue;
			rc = UTIL_GROW(d->early, d->nearly, cap);
			if (rc == 0) {
				n->refs++;
				d->early[d->nearly++] = n;
			}
		}
	}
	pthread_mutex_unlock(&kv->lock);
	return rc;
}

static void dh_drop_early(struct kvfs *kv, struct dh *d)
{
	for (size_t i = 0; i < d->nearly; i++)
		node_put(kv, d->early[i]);
	free(d->early);
	d->early = NULL;
	d->nearly = 0;
}

/* Adds n and a copy of its name (a rename may change it once kv->lock is
 * let go), with a reference; under kv->lock. */
static int dh_pending_push(struct node *n, struct node ***v, char ***names, size_t *nv,
			   size_t *cap)
{
	if (*nv == *cap) {
		size_t c = *cap ? 2 * *cap : 16;
		struct node **nvv = realloc(*v, c * sizeof(**v));
		char **nn = nvv ? realloc(*names, c * sizeof(**names)) : NULL;

		if (nvv)
			*v = nvv;
		if (nn)
			*names = nn;
		if (!nvv || !nn)
			return -ENOMEM;
		*cap = c;
	}
	if (!((*names)[*nv] = strdup(n->name)))
		return -ENOMEM;
	n->refs++;
	(*v)[(*nv)++] = n;
	return 0;
}

/*
 * Appends the files of this directory that are being written here and not
 * yet published, and those that were when the listing began (d->early):
 * published since, the page that would hold them may have been read
 * before, and a file that existed all along went unlisted.
 */
static int dh_add_pending(struct kvfs *kv, struct dh *d)
{
	struct node **v = NULL;
	char **names = NULL;
	size_t nv = 0, cap = 0;
	int rc = 0;

	pthread_mutex_lock(&kv->lock);
	for (size_t b = 0; b < kv->nbuckets && rc == 0; b++)
		for (struct node *n = kv->by_ino[b]; n && rc == 0; n = n->ino_next)
			if (dh_holds_locked(d, n) && n->pending)
				rc = dh_pending_push(n, &v, &names, &nv, &cap);
	for (size_t i = 0; i < d->nearly && rc == 0; i++)
		if (dh_holds_locked(d, d->early[i]) && !d->early[i]->pending)
			rc = dh_pending_push(d->early[i], &v, &names, &nv, &cap);
	pthread_mutex_unlock(&kv->lock);
	dh_drop_early(kv, d);
	d->cseq = node_cseq(kv);
	for (size_t i = 0; i < nv; i++) {
		struct kvfs_stat s;

		/* Published meanwhile: then the listing may already have it. */
		if (rc == 0 && !dent_listed(d, names[i]) && kvfs_stat_node(kv, v[i], &s) == 0)
			rc = dh_push(d, names[i], strlen(names[i]), NODE_FILE, 1, &s.st);
		node_put(kv, v[i]);
		free(names[i]);
	}
	free(v);
	free(names);
	return rc;
}

/* Appends the next page of the listing. */
static int dh_fetch(struct kvfs *kv, struct dh *d)
{
	struct kvt_list_opts lo = {
		.prefix = d->prefix,
		.delimiter = "/",
		.continuation = d->cont,
		.limit = DH_PAGE,
	};
	struct kvt_list *l = NULL;
	size_t i = 0, j = 0;
	int rc;

	d->cseq = node_cseq(kv);	/* before the store is read */
	if (d->node->type == NODE_ROOT) {
		struct bucket_walk bw = { kv, d };

		d->done = 1;
		return kvt_bucket_list(kv->st, bucket_cb, &bw);
	}
	if (d->n == 0 && !d->cont && !d->early) {
		rc = dh_note_early(kv, d);	/* the listing begins */
		if (rc < 0)
			return rc;
	}
	rc = kvt_object_list(kv->st, d->bucket, &lo, &l);
	if (rc < 0)
		return rc;
	/* Objects and prefixes, merged back into key order. */
	while (rc == 0 && (i < l->nobjects || j < l->nprefixes)) {
		struct stat st;

		if (j == l->nprefixes ||
		    (i < l->nobjects && strcmp(l->objects[i]->key, l->prefixes[j]) < 0)) {
			const struct kvt_object *o = l->objects[i++];
			const char *name = o->key + d->plen;
			size_t len = strlen(name);

			if (!name_ok(name, len))
				continue;
			kvfs_attr_object(kv, o, &st);
			rc = dh_push(d, name, len,
				     o->posix.kind == KVT_KIND_SYMLINK ? NODE_SYMLINK : NODE_FILE, 1,
				     &st);
		} else {
			const char *name = l->prefixes[j++] + d->plen;
			size_t len = strlen(name) - 1;	/* without the '/' */

			if (!name_ok(name, len) || file_listed(d, name, len))
				continue;
			kvfs_attr_dir(kv, NULL, &st);
			rc = dh_push(d, name, len, NODE_DIR, 0, &st);
		}
	}
	if (rc == 0) {
		free(d->cont);
		d->cont = NULL;
		d->done = !l->truncated;
		if (l->truncated && !(d->cont = strdup(l->next_continuation)))
			rc = -ENOMEM;
	}
	kvt_list_free(l);
	if (rc == 0 && d->done)
		rc = dh_add_pending(kv, d);
	return rc;
}

char *dh_hidden_key(struct kvfs *kv, const char *bucket, const char *key)
{
	struct kvt_list_opts lo = { .delimiter = "/", .limit = DH_PAGE };
	struct kvt_list *l = NULL;
	char *prefix = kvfs_join(key, ""), *hidden = NULL;
	size_t plen;
	int shown = 0;

	lo.prefix = prefix;
	if (!prefix || kvt_object_list(kv->st, bucket, &lo, &l) < 0)
		goto out;
	plen = strlen(prefix);
	for (size_t i = 0; i < l->nobjects && !shown; i++) {
		const char *k = l->objects[i]->key;

		if (name_ok(k + plen, strlen(k + plen)))
			shown = 1;
		else if (!hidden && k[plen])	/* the directory's marker hides nothing */
			hidden = strdup(k);
	}
	for (size_t j = 0; j < l->nprefixes && !shown; j++) {
		const char *k = l->prefixes[j];

		if (name_ok(k + plen, strlen(k + plen) - 1))
			shown = 1;
		else if (!hidden)
			hidden = strdup(k);
	}
	if (shown || l->truncated) {
		free(hidden);
		hidden = NULL;
	}
out:
	kvt_list_free(l);
	free(prefix);
	return hidden;
}

int dh_open(struct kvfs *kv, struct node *n, struct dh **out)
{
	struct dh *d = calloc(1, sizeof(*d));
	char *key = NULL;
	int rc = 0;

	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_lock(&kv->lock);
	n->refs++;
	d->node = n;
	pthread_mutex_unlock(&kv->lock);
	if (n->type != NODE_ROOT) {
		rc = node_path(kv, n, &d->bucket, &key);
		if (rc == 0) {
			d->prefix = *key ? kvfs_join(key, "") : strdup("");
			if (!d->prefix)
				rc = -ENOMEM;
			else
				d->plen = strlen(d->prefix);
		}
	}
	free(key);
	if (rc < 0) {
		dh_release(kv, d);
		return rc;
	}
	*out = d;
	return 0;
}

void dh_release(struct kvfs *kv, struct dh *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n; i++)
		free(d->ents[i].name);
	free(d->ents);
	free(d->cont);
	dh_drop_early(kv, d);
	free(d->bucket);
	free(d->prefix);
	node_put(kv, d->node);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

void dh_readdir(struct kvfs *kv, fuse_req_t req, struct dh *d, size_t size, off_t off, int plus)
{
	char *buf = malloc(size);
	size_t pos = 0;
	int rc = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&d->lock);
	if (off == 0 && d->n > 0 && d->done) {
		/* rewinddir: list again, so new entries show up. */
		for (size_t i = 0; i < d->n; i++)
			free(d->ents[i].name);
		d->n = 0;
		d->done = 0;
		free(d->cont);
		d->cont = NULL;
	}
	for (;; off++) {
		struct fuse_entry_param e;
		const char *name;
		struct node *n = NULL;
		int linked = 0;
		size_t need;

		memset(&e, 0, sizeof(e));
		if (off < 2) {
			name = off == 0 ? "." : "..";
			e.attr.st_mode = S_IFDIR;
			pthread_mutex_lock(&kv->lock);
			e.attr.st_ino = off == 0 || !d->node->parent ? d->node->ino
								    : d->node->parent->ino;
			pthread_mutex_unlock(&kv->lock);
		} else {
			size_t i = (size_t)off - 2;
			const struct dent *de;

			while (i >= d->n && !d->done && rc == 0)
				rc = dh_fetch(kv, d);
			if (rc < 0 || i >= d->n)
				break;
			de = &d->ents[i];
			name = de->name;
			e.attr = de->st;
			if (plus && (de->type == NODE_DIR ||
				     node_attr_fresh(kv, d->node, name, de->cseq))) {
				need = fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0);
				if (need > size - pos)
					break;
				n = node_link(kv, d->node, name, de->type);
				if (!n) {
					rc = -ENOMEM;
					break;
				}
				linked = 1;
				e.ino = n->ino;
				e.attr_timeout = de->full ? kv->attr_timeout : 0;
				e.entry_timeout = kv->entry_timeout;
				node_attr_reply(kv, n, &e.attr);
			} else {
				/*
				 * Changed here since the page was read (published,
				 * written, renamed): its attributes there are old, and
				 * the kernel would apply them to the inode (a reader
				 * then read the file cut at its old size). Node id 0
				 * gives the name alone; a lookup fetches the rest.
				 */
				n = node_child(kv, d->node, name);
			}
			/* Without an inode yet, any number will do for d_ino. */
			e.attr.st_ino = n ? n->ino : (fuse_ino_t)0xffffffffu;
		}
		if (plus)
			need = fuse_add_direntry_plus(req, buf + pos, size - pos, name, &e, off + 1);
		else
			need = fuse_add_direntry(req, buf + pos, size - pos, name, &e.attr, off + 1);
		if (need > size - pos) {
			if (linked)
				node_unlink_lookup(kv, n);
			node_put(kv, n);
			break;
		}
		pos += need;
		node_put(kv, n);
	}
	pthread_mutex_unlock(&d->lock);
	/* An error after some entries: send those, the next call reports it. */
	if (rc < 0 && pos == 0)
		fuse_reply_err(req, kvfs_errno(rc));
	else
		fuse_reply_buf(req, buf, pos);
	free(buf);
}
