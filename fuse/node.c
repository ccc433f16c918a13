/*
 * node.c - the inode table: fuse_ino_t <-> (bucket, key).
 *
 * The kernel names files by inode number and expects the same number for a
 * name for as long as it remembers that name (lookup counts, FORGET). Keys
 * are not numbered in the store, so the daemon numbers them here, in
 * increasing order and never reusing a number (generation is always 0).
 *
 * Nodes form a tree of (parent, name) so that renaming a directory renames
 * everything below it without touching a descendant. Two hash tables find a
 * node by number and by (parent, name). One mutex, kvfs.lock, guards the
 * table and every node field; nobody holds it across a store call.
 *
 * Life of a node:
 *
 *   node_link --lookup reply--> hashed --node_unhash/node_move--> detached
 *        \                        |                                  |
 *         `----------- nlookup == 0 && refs == 0 (node_forget, node_put) --> freed
 *
 * A child holds a reference on its parent, so a path can always be walked
 * up to the root while any descendant lives.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs.h"
#include "log.h"
#include "util.h"

static size_t hash_ino(fuse_ino_t ino, size_t nbuckets)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 17) & (nbuckets - 1);
}

static size_t hash_name(fuse_ino_t parent, const char *name, size_t nbuckets)
{
	uint64_t h = 0xcbf29ce484222325ull ^ parent;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return (size_t)(h ^ (h >> 29)) & (nbuckets - 1);
}

static void ino_insert(struct kvfs *kv, struct node *n)
{
	size_t b = hash_ino(n->ino, kv->nbuckets);

	n->ino_next = kv->by_ino[b];
	kv->by_ino[b] = n;
}

static void ino_remove(struct kvfs *kv, struct node *n)
{
	struct node **pp = &kv->by_ino[hash_ino(n->ino, kv->nbuckets)];

	while (*pp && *pp != n)
		pp = &(*pp)->ino_next;
	if (*pp)
		*pp = n->ino_next;
}

static void name_insert(struct kvfs *kv, struct node *n)
{
	size_t b = hash_name(n->parent->ino, n->name, kv->nbuckets);

	n->name_next = kv->by_name[b];
	kv->by_name[b] = n;
	n->hashed = 1;
}

static void name_remove(struct kvfs *kv, struct node *n)
{
	struct node **pp;

	if (!n->hashed)
		return;
	pp = &kv->by_name[hash_name(n->parent->ino, n->name, kv->nbuckets)];
	while (*pp && *pp != n)
		pp = &(*pp)->name_next;
	if (*pp)
		*pp = n->name_next;
	n->hashed = 0;
}

/* Doubles both tables when they fill; on failure they stay as they are. */
static void table_grow(struct kvfs *kv)
{
	size_t old = kv->nbuckets, nb = old * 2;
	struct node **bi, **bn;

	if (kv->count < old)
		return;
	bi = calloc(nb, sizeof(*bi));
	bn = calloc(nb, sizeof(*bn));
	if (!bi || !bn) {
		free(bi);
		free(bn);
		return;
	}
	for (size_t i = 0; i < old; i++) {
		struct node *n, *next;

		for (n = kv->by_ino[i]; n; n = next) {
			next = n->ino_next;
			n->ino_next = bi[hash_ino(n->ino, nb)];
			bi[hash_ino(n->ino, nb)] = n;
		}
		for (n = kv->by_name[i]; n; n = next) {
			size_t b = hash_name(n->parent->ino, n->name, nb);

			next = n->name_next;
			n->name_next = bn[b];
			bn[b] = n;
		}
	}
	free(kv->by_ino);
	free(kv->by_name);
	kv->by_ino = bi;
	kv->by_name = bn;
	kv->nbuckets = nb;
}

int node_table_init(struct kvfs *kv)
{
	pthread_rwlockattr_t ra;

	pthread_mutex_init(&kv->lock, NULL);
	util_cond_init(&kv->cache_cond);
	/* A steady stream of publishes must not starve a rename. */
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&kv->names, &ra);
	pthread_rwlockattr_destroy(&ra);
	kv->nbuckets = 1024;
	kv->by_ino = calloc(kv->nbuckets, sizeof(*kv->by_ino));
	kv->by_name = calloc(kv->nbuckets, sizeof(*kv->by_name));
	if (!kv->by_ino || !kv->by_name)
		return -ENOMEM;
	kv->next_ino = FUSE_ROOT_ID + 1;
	kv->root = (struct node){
		.ino = FUSE_ROOT_ID,
		.name = (char *)"",
		.type = NODE_ROOT,
		.refs = 1,	/* never freed */
		.hashed = 1,
	};
	ino_insert(kv, &kv->root);
	return 0;
}

void node_table_release(struct kvfs *kv)
{
	for (size_t i = 0; kv->by_ino && i < kv->nbuckets; i++) {
		struct node *n, *next;

		for (n = kv->by_ino[i]; n; n = next) {
			next = n->ino_next;
			if (n != &kv->root) {
				free(n->name);
				free(n->psession);
				free(n->nocache_name);
				free(n);
			}
		}
	}
	free(kv->by_ino);
	free(kv->by_name);
	kv->by_ino = kv->by_name = NULL;
	pthread_mutex_destroy(&kv->lock);
	pthread_cond_destroy(&kv->cache_cond);
	pthread_rwlock_destroy(&kv->names);
}

static struct node *ino_find(struct kvfs *kv, fuse_ino_t ino)
{
	struct node *n = kv->by_ino[hash_ino(ino, kv->nbuckets)];

	while (n && n->ino != ino)
		n = n->ino_next;
	return n;
}

static struct node *name_find(struct kvfs *kv, struct node *parent, const char *name)
{
	struct node *n = kv->by_name[hash_name(parent->ino, name, kv->nbuckets)];

	while (n && !(n->parent == parent && strcmp(n->name, name) == 0))
		n = n->name_next;
	return n;
}

/* Frees n if nothing holds it, then walks up: its parent lost a child. */
static void node_maybe_free(struct kvfs *kv, struct node *n)
{
	while (n && n != &kv->root && n->nlookup == 0 && n->refs == 0) {
		struct node *parent = n->parent;

		name_remove(kv, n);
		ino_remove(kv, n);
		kv->count--;
		free(n->name);
		free(n->psession);
		free(n->nocache_name);
		free(n);
		n = parent;
		if (n)
			n->refs--;
	}
}

struct node *node_get(struct kvfs *kv, fuse_ino_t ino)
{
	struct node *n;

	pthread_mutex_lock(&kv->lock);
	n = ino_find(kv, ino);
	if (n)
		n->refs++;
	pthread_mutex_unlock(&kv->lock);
	return n;
}

void node_put_locked(struct kvfs *kv, struct node *n)
{
	if (!n)
		return;
	n->refs--;
	node_maybe_free(kv, n);
}

void node_put(struct kvfs *kv, struct node *n)
{
	if (!n)
		return;
	pthread_mutex_lock(&kv->lock);
	node_put_locked(kv, n);
	pthread_mutex_unlock(&kv->lock);
}

struct node *node_child(struct kvfs *kv, struct node *parent, const char *name)
{
	struct node *n;

	pthread_mutex_lock(&kv->lock);
	n = name_find(kv, parent, name);
	if (n)
		n->refs++;
	pthread_mutex_unlock(&kv->lock);
	return n;
}

struct node *node_link(struct kvfs *kv, struct node *parent, const char *name,
		       enum node_type type)
{
	struct node *n;

	pthread_mutex_lock(&kv->lock);
	n = name_find(kv, parent, name);
	if (n && n->type != type) {
		/* Replaced by something else (through S3, say): a new inode. */
		name_remove(kv, n);
		n = NULL;
	}
	if (!n) {
		n = calloc(1, sizeof(*n));
		if (!n || !(n->name = strdup(name))) {
			free(n);
			pthread_mutex_unlock(&kv->lock);
			return NULL;
		}
		n->ino = kv->next_ino++;
		n->type = type;
		n->ksize = -1;
		n->parent = parent;
		parent->refs++;
		ino_insert(kv, n);
		name_insert(kv, n);
		kv->count++;
		table_grow(kv);
	}
	n->nlookup++;
	n->refs++;
	pthread_mutex_unlock(&kv->lock);
	return n;
}

void node_unlink_lookup(struct kvfs *kv, struct node *n)
{
	pthread_mutex_lock(&kv->lock);
	if (n->nlookup > 0)
		n->nlookup--;
	node_maybe_free(kv, n);
	pthread_mutex_unlock(&kv->lock);
}

void node_forget(struct kvfs *kv, fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n;

	pthread_mutex_lock(&kv->lock);
	n = ino_find(kv, ino);
	if (n && n != &kv->root) {
		n->nlookup = nlookup > n->nlookup ? 0 : n->nlookup - nlookup;
		node_maybe_free(kv, n);
	}
	pthread_mutex_unlock(&kv->lock);
}

void node_unhash(struct kvfs *kv, struct node *parent, const char *name)
{
	struct node *n;

	pthread_mutex_lock(&kv->lock);
	n = name_find(kv, parent, name);
	if (n) {
		name_remove(kv, n);
		n->unlinked = 1;
	}
	pthread_mutex_unlock(&kv->lock);
}

void node_changed_locked(struct kvfs *kv, struct node *n)
{
	n->cseq = ++kv->cseq;
}

uint64_t node_cseq(struct kvfs *kv)
{
	uint64_t c;

	pthread_mutex_lock(&kv->lock);
	c = kv->cseq;
	pthread_mutex_unlock(&kv->lock);
	return c;
}

int node_attr_fresh(struct kvfs *kv, struct node *parent, const char *name, uint64_t cseq)
{
	struct node *n;
	int fresh;

	pthread_mutex_lock(&kv->lock);
	n = name_find(kv, parent, name);
	fresh = !n || (n->cseq <= cseq && n->nwriters == 0 && !n->pending);
	pthread_mutex_unlock(&kv->lock);
	return fresh;
}

void node_detach_locked(struct kvfs *kv, struct node *n)
{
	name_remove(kv, n);
	n->unlinked = 1;
}

void node_supersede_locked(struct kvfs *kv, struct node *n)
{
	name_remove(kv, n);
}

/*
 * One name, not the whole directory: LMCache keeps its whole cache in one
 * directory, and one chunk rewritten beside its reader put every chunk's
 * open on direct I/O for FH_NOCACHE_NS (no page cache, and mmap(MAP_SHARED)
 * failed ENODEV).
 */
void node_nocache_locked(struct node *dir, const char *name, int64_t until)
{
	int same = dir->nocache_name && strcmp(dir->nocache_name, name) == 0;
	int active = dir->nocache_until > kvfs_now_ns();

	if (!same) {
		free(dir->nocache_name);
		dir->nocache_name = active ? NULL : strdup(name);	/* NULL: every name */
	}
	dir->nocache_until = until;
}

int node_nocache(const struct node *n, int64_t now)
{
	const struct node *dir = n->parent;

	return dir && dir->nocache_until > now &&
	       (!dir->nocache_name || !n->name || strcmp(dir->nocache_name, n->name) == 0);
}

void node_attr_reply(struct kvfs *kv, struct node *n, struct stat *st)
{
	if (n && S_ISDIR(st->st_mode))
		kvfs_dir_times(kv, n, st);
	if (!n || !S_ISREG(st->st_mode))
		return;
	pthread_mutex_lock(&kv->lock);
	if (n->ncache > 0) {
		st->st_size = (off_t)n->csize;
		st->st_blocks = (blkcnt_t)((n->csize + 511) / 512);
	}
	/* A writer's own writes and O_TRUNC move the kernel's size. */
	n->ksize = n->nwriters > 0 || n->wwait > 0 ? -1 : (int64_t)st->st_size;
	pthread_mutex_unlock(&kv->lock);
}

int node_pending_under(struct kvfs *kv, struct node *dir)
{
	int found = 0;

	pthread_mutex_lock(&kv->lock);
	for (size_t b = 0; b < kv->nbuckets && !found; b++) {
		for (struct node *n = kv->by_ino[b]; n && !found; n = n->ino_next) {
			if (!n->pending || !n->hashed)
				continue;
			for (const struct node *p = n->parent; p && !found; p = p->parent)
				found = p == dir;
		}
	}
	pthread_mutex_unlock(&kv->lock);
	return found;
}

void node_move(struct kvfs *kv, struct node *parent, const char *name,
	       struct node *newparent, const char *newname)
{
	struct node *n, *old;
	char *copy = strdup(newname);

	pthread_mutex_lock(&kv->lock);
	old = name_find(kv, newparent, newname);
	n = name_find(kv, parent, name);
	if (old && old != n) {
		name_remove(kv, old);
		old->unlinked = 1;
	}
	if (n && copy) {
		name_remove(kv, n);
		free(n->name);
		n->name = copy;
		copy = NULL;
		if (n->parent != newparent) {
			struct node *from = n->parent;

			newparent->refs++;
			n->parent = newparent;
			from->refs--;
			node_maybe_free(kv, from);
		}
		name_insert(kv, n);
		node_changed_locked(kv, n);
	} else if (n) {
		/* Out of memory: forget the name rather than keep a wrong one. */
		name_remove(kv, n);
	}
	pthread_mutex_unlock(&kv->lock);
	free(copy);
}

int node_path_name(struct kvfs *kv, struct node *n, char **bucket, char **key)
{
	struct node *parent;
	char *name, *dir = NULL;
	int rc;

	*bucket = *key = NULL;
	pthread_mutex_lock(&kv->lock);
	parent = n->parent;	/* n holds a reference on it */
	name = strdup(n->name);
	pthread_mutex_unlock(&kv->lock);
	if (!name)
		return -ENOMEM;
	if (!parent || parent->type == NODE_ROOT) {
		free(name);
		return -ENOENT;		/* a bucket: no name to look up again */
	}
	rc = node_path(kv, parent, bucket, &dir);
	if (rc == 0 && !(*key = kvfs_join(dir, name))) {
		free(*bucket);
		*bucket = NULL;
		rc = -ENOMEM;
	}
	free(dir);
	free(name);
	return rc;
}

int node_path(struct kvfs *kv, struct node *n, char **bucket, char **key)
{
	const struct node *chain[KVT_KEY_MAX / 2 + 2];
	size_t depth = 0, len = 0;
	const struct node *p;
	char *k = NULL, *b = NULL;
	int rc = 0;

	*bucket = *key = NULL;
	pthread_mutex_lock(&kv->lock);
	for (p = n; p && p->type != NODE_ROOT; p = p->parent) {
		if (!p->hashed) {
			rc = -ENOENT;
			goto out;
		}
		if (depth == sizeof(chain) / sizeof(chain[0])) {
			rc = -ENAMETOOLONG;
			goto out;
		}
		chain[depth++] = p;
	}
	if (depth == 0) {
		rc = -EISDIR;	/* the root has no bucket */
		goto out;
	}
	/* chain[depth - 1] is the bucket; the rest, reversed, the key. */
	for (size_t i = 0; i + 1 < depth; i++)
		len += strlen(chain[i]->name) + 1;
	if (len > KVT_KEY_MAX + 1) {
		rc = -ENAMETOOLONG;
		goto out;
	}
	b = strdup(chain[depth - 1]->name);
	k = malloc(len + 1);
	if (!b || !k) {
		rc = -ENOMEM;
		goto out;
	}
	k[0] = '\0';
	len = 0;
	for (size_t i = depth - 1; i-- > 0;) {
		size_t l = strlen(chain[i]->name);

		if (len)
			k[len++] = '/';
		memcpy(k + len, chain[i]->name, l);
		len += l;
	}
	k[len] = '\0';
	*bucket = b;
	*key = k;
	b = k = NULL;
out:
	pthread_mutex_unlock(&kv->lock);
	free(b);
	free(k);
	return rc;
}
