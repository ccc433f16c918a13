/*
 * attr.c - what the store says about a name, as the kernel wants to see it.
 *
 * An object is a file or a symbolic link (its posix.kind). A directory is
 * not an object but a key prefix: "a/b" is a directory when the marker
 * object "a/b/" exists (mkdir made it; it carries the directory's mode and
 * owner) or when any key starts with "a/b/". When S3 holds both a key "a"
 * and keys under "a/", the file wins and the directory is hidden, here and
 * in listings (dir.c): a file system cannot show two entries of one name.
 *
 * Objects written through S3 carry no POSIX metadata: the engine stores mode
 * 0644 without file-type bits. Objects written here always carry type bits,
 * so mode & S_IFMT == 0 means "none given" and [fuse] uid, gid and file_mode
 * apply instead.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvfs.h"
#include "log.h"

static int64_t ts_to_ns(struct timespec ts)
{
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t kvfs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts_to_ns(ts);
}

static struct timespec ns_to_ts(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	if (ts.tv_nsec < 0) {
		ts.tv_sec--;
		ts.tv_nsec += 1000000000;
	}
	return ts;
}

char *kvfs_join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	char *s = malloc(dl + nl + 2);

	if (!s)
		return NULL;
	memcpy(s, dir, dl);
	if (dl)
		s[dl++] = '/';
	memcpy(s + dl, name, nl + 1);
	return s;
}

int kvfs_child_key(struct kvfs *kv, struct node *parent, const char *name, char **bucket,
		   char **key)
{
	char *dir = NULL;
	int rc;

	*bucket = *key = NULL;
	if (strlen(name) > KVFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (parent->type == NODE_ROOT)
		return -EPERM;
	if (parent->type != NODE_BUCKET && parent->type != NODE_DIR)
		return -ENOTDIR;
	rc = node_path(kv, parent, bucket, &dir);
	if (rc < 0)
		return rc;
	*key = kvfs_join(dir, name);
	free(dir);
	if (!*key) {
		rc = -ENOMEM;
		goto fail;
	}
	/* S3's limit; kvt_key_valid() also refuses what is not UTF-8. */
	rc = kvt_key_valid(*key);
	if (rc < 0)
		goto fail;
	return 0;
fail:
	free(*bucket);
	free(*key);
	*bucket = *key = NULL;
	return rc;
}

/* The POSIX metadata an object shows: its own, or [fuse]'s when it has none. */
static void attr_posix(struct kvfs *kv, const struct kvt_object *o, mode_t *perm, uid_t *uid,
		       gid_t *gid)
{
	if ((o->posix.mode & S_IFMT) == 0) {
		/* A link's permissions are never used: 0777, as symlink(2) makes. */
		*perm = o->posix.kind == KVT_KIND_SYMLINK ? 0777 : kv->cfg.fuse.file_mode & 07777;
		*uid = kv->cfg.fuse.uid;
		*gid = kv->cfg.fuse.gid;
	} else {
		*perm = o->posix.mode & 07777;
		*uid = o->posix.uid;
		*gid = o->posix.gid;
	}
}

void kvfs_attr_object(struct kvfs *kv, const struct kvt_object *o, struct stat *st)
{
	mode_t perm;
	uid_t uid;
	gid_t gid;

	attr_posix(kv, o, &perm, &uid, &gid);
	memset(st, 0, sizeof(*st));
	st->st_mode = (o->posix.kind == KVT_KIND_SYMLINK ? S_IFLNK : S_IFREG) | perm;
	st->st_nlink = 1;
	st->st_uid = uid;
	st->st_gid = gid;
	st->st_size = (off_t)o->size;
	st->st_blksize = KVFS_BLKSIZE;
	st->st_blocks = (blkcnt_t)((o->size + 511) / 512);
	st->st_mtim = ns_to_ts(o->mtime_ns);
	st->st_atim = ns_to_ts(o->posix.atime_ns ? o->posix.atime_ns : o->mtime_ns);
	st->st_ctim = ns_to_ts(o->posix.ctime_ns ? o->posix.ctime_ns : o->mtime_ns);
}

void kvfs_attr_dir(struct kvfs *kv, const struct kvt_object *marker, struct stat *st)
{
	int64_t t = marker ? marker->mtime_ns : kv->start_ns;

	memset(st, 0, sizeof(*st));
	if (marker && (marker->posix.mode & S_IFMT) != 0) {
		st->st_mode = S_IFDIR | (marker->posix.mode & 07777);
		st->st_uid = marker->posix.uid;
		st->st_gid = marker->posix.gid;
	} else {
		st->st_mode = S_IFDIR | (kv->cfg.fuse.dir_mode & 07777);
		st->st_uid = kv->cfg.fuse.uid;
		st->st_gid = kv->cfg.fuse.gid;
	}
	st->st_nlink = 2;
	st->st_blksize = KVFS_BLKSIZE;
	st->st_mtim = ns_to_ts(t);
	st->st_atim = ns_to_ts(marker && marker->posix.atime_ns ? marker->posix.atime_ns : t);
	st->st_ctim = ns_to_ts(marker && marker->posix.ctime_ns ? marker->posix.ctime_ns : t);
}

/* Does any key start with prefix? 1, 0 or -errno. */
static int prefix_used(struct kvfs *kv, const char *bucket, const char *prefix)
{
	struct kvt_list_opts lo = { .prefix = prefix, .limit = 1 };
	struct kvt_list *l = NULL;
	int rc = kvt_object_list(kv->st, bucket, &lo, &l);

	if (rc < 0)
		return rc;
	rc = l->nobjects + l->nprefixes > 0;
	kvt_list_free(l);
	return rc;
}

int kvfs_stat_key(struct kvfs *kv, const char *bucket, const char *key, struct kvfs_stat *out)
{
	struct kvt_object *o = NULL;
	size_t len = strlen(key);
	int rc;

	memset(out, 0, sizeof(*out));
	if (!*key) {
		rc = kvt_bucket_exists(kv->st, bucket);
		if (rc < 0)
			return rc;
		out->type = NODE_BUCKET;
		kvfs_attr_dir(kv, NULL, &out->st);
		return 0;
	}
	/* The object, else the directory "key/" (its marker or a key below). */
	rc = kvt_object_head_name(kv->st, bucket, key, &o);
	if (rc < 0)
		return rc;
	if (strcmp(o->key, key) == 0) {
		out->type = o->posix.kind == KVT_KIND_SYMLINK ? NODE_SYMLINK : NODE_FILE;
		kvfs_attr_object(kv, o, &out->st);
		snprintf(out->etag, sizeof(out->etag), "%s", o->etag);
	} else if (strlen(o->key) == len + 1) {
		out->type = NODE_DIR;
		out->has_marker = 1;
		kvfs_attr_dir(kv, o, &out->st);
	} else {
		out->type = NODE_DIR;
		kvfs_attr_dir(kv, NULL, &out->st);
	}
	kvt_object_free(o);
	return 0;
}

int kvfs_stat_node(struct kvfs *kv, struct node *n, struct kvfs_stat *out)
{
	char *bucket = NULL, *key = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	if (n->type == NODE_ROOT) {
		out->type = NODE_ROOT;
		kvfs_attr_dir(kv, NULL, &out->st);
		out->st.st_ino = FUSE_ROOT_ID;
		return 0;
	}
	pthread_mutex_lock(&kv->lock);
	if (n->pending) {
		/* Created here, not yet published: only this daemon knows it. */
		struct kvt_object o = { .posix = n->cposix, .mtime_ns = n->wmtime,
					.size = n->wsize };
		int unlinked = n->unlinked;

		pthread_mutex_unlock(&kv->lock);
		out->type = NODE_FILE;
		kvfs_attr_object(kv, &o, &out->st);
		if (unlinked)
			out->st.st_nlink = 0;	/* removed while open: never published */
		goto overlay;
	}
	pthread_mutex_unlock(&kv->lock);
	rc = node_path(kv, n, &bucket, &key);
	if (rc == -ENOENT) {
		/*
		 * Removed while open: fstat still answers, with no links. A node
		 * nobody has open was asked for by a path the kernel looked up
		 * before another process unlinked or renamed over it: -ESTALE,
		 * so that stat(2) looks the path up again.
		 */
		pthread_mutex_lock(&kv->lock);
		if (n->has_last && n->nopen > 0) {
			out->type = n->type;
			out->st = n->last;
			out->st.st_nlink = 0;
			rc = 0;
		} else {
			rc = -ESTALE;
		}
		pthread_mutex_unlock(&kv->lock);
		if (rc == -ESTALE && node_path_name(kv, n, &bucket, &key) == 0) {
			/*
			 * What the name holds now, as a stat a moment later would
			 * find, or ENOENT: ESTALE reached the application when the
			 * kernel's one retry met another rename. Something else
			 * than a file there is not this inode: ESTALE then.
			 */
			rc = kvfs_stat_key(kv, bucket, key, out);
			if (rc == 0 && out->type != n->type)
				rc = -ESTALE;
		}
		goto overlay_checked;
	}
	if (rc == 0)
		rc = kvfs_stat_key(kv, bucket, key, out);
	/* The name now holds something else (changed through S3). */
	if (rc == 0 && out->type != n->type)
		rc = -ENOENT;
	if (rc == -ENOENT) {
		/*
		 * Deleted through S3 (or by another process) while open here. To
		 * a writer the file is still there, and its close publishes it
		 * again. A reader reads the version it opened (kvtier-fuse(8)),
		 * so fstat answers, with no links: the kernel asks for the
		 * attributes before a read through the page cache, and an ENOENT
		 * here failed that read.
		 */
		pthread_mutex_lock(&kv->lock);
		if (n->has_last && n->nopen > 0) {
			out->type = n->type;
			out->st = n->last;
			if (n->nwriters == 0)
				out->st.st_nlink = 0;
			rc = 0;
		}
		pthread_mutex_unlock(&kv->lock);
	}
overlay_checked:
	free(bucket);
	free(key);
	if (rc < 0)
		return rc;
overlay:
	pthread_mutex_lock(&kv->lock);
	if (n->ndirty > 0) {
		out->st.st_size = (off_t)n->wsize;
		out->st.st_blocks = (blkcnt_t)((n->wsize + 511) / 512);
		out->st.st_mtim = ns_to_ts(n->wmtime);
	}
	if (n->nwriters > 0 && n->pend.mask) {
		const struct node_pend *p = &n->pend;

		if (p->mask & KVT_ATTR_MODE)
			out->st.st_mode = (out->st.st_mode & S_IFMT) | (p->posix.mode & 07777);
		if (p->mask & KVT_ATTR_UID)
			out->st.st_uid = p->posix.uid;
		if (p->mask & KVT_ATTR_GID)
			out->st.st_gid = p->posix.gid;
		if (p->mask & KVT_ATTR_ATIME)
			out->st.st_atim = ns_to_ts(p->posix.atime_ns);
		if (p->mask & KVT_ATTR_MTIME)
			out->st.st_mtim = ns_to_ts(p->mtime_ns);
	}
	out->st.st_ino = n->ino;
	n->last = out->st;
	n->has_last = 1;
	pthread_mutex_unlock(&kv->lock);
	return 0;
}

int kvfs_dir_empty(struct kvfs *kv, const char *bucket, const char *key)
{
	struct kvt_list_opts lo = { .limit = 2 };
	struct kvt_list *l = NULL;
	char *prefix = NULL;
	int rc;

	if (*key) {
		prefix = kvfs_join(key, "");
		if (!prefix)
			return -ENOMEM;
	}
	lo.prefix = prefix;
	rc = kvt_object_list(kv->st, bucket, &lo, &l);
	if (rc == 0) {
		size_t others = l->nobjects;

		/* The directory's own marker does not count. */
		for (size_t i = 0; prefix && i < l->nobjects; i++)
			if (strcmp(l->objects[i]->key, prefix) == 0)
				others--;
		rc = others == 0;
		kvt_list_free(l);
	}
	free(prefix);
	return rc;
}

int kvfs_put_empty(struct kvfs *kv, const char *bucket, const char *key,
		   const struct kvt_put_opts *opts)
{
	struct kvt_writer *w = NULL;
	int rc = kvt_writer_open(kv->st, bucket, key, opts, &w);

	return rc < 0 ? rc : kvt_writer_commit(w, NULL);
}

void kvfs_dir_keep(struct kvfs *kv, const char *bucket, const char *key)
{
	struct kvt_posix p = {
		.mode = S_IFDIR | (kv->cfg.fuse.dir_mode & 07777),
		.uid = kv->cfg.fuse.uid,
		.gid = kv->cfg.fuse.gid,
		.kind = KVT_KIND_DIR,
	};
	struct kvt_put_opts opts = { .flags = KVT_PUT_IF_NONE_MATCH, .posix = &p };
	char *marker;
	int rc;

	/*
	 * A directory without a marker exists only while keys are under it;
	 * POSIX says it stays when its last entry goes, so give it one.
	 */
	if (!*key || strlen(key) + 1 > KVT_KEY_MAX)
		return;
	marker = kvfs_join(key, "");
	if (!marker)
		return;
	rc = prefix_used(kv, bucket, marker);
	if (rc == 0) {
		rc = kvfs_put_empty(kv, bucket, marker, &opts);
		if (rc < 0 && rc != -EEXIST)
			log_warn(rc, "cannot keep the empty directory '%s/%s'", bucket, key);
	}
	free(marker);
}

void kvfs_dir_touch(struct kvfs *kv, struct node *dir)
{
	/*
	 * As on any file system, for make and rsync watch a directory's mtime.
	 * Kept in the node, not the catalog: a write there would cost every
	 * create and unlink a transaction (some 100 us here), and a bucket or
	 * a prefix of S3 keys has no marker to hold times. node_attr_reply()
	 * shows it; a later utimensat() replaces it (setattr_store()).
	 */
	pthread_mutex_lock(&kv->lock);
	dir->dmtime = kvfs_now_ns();
	pthread_mutex_unlock(&kv->lock);
}

void kvfs_dir_times(struct kvfs *kv, struct node *dir, struct stat *st)
{
	int64_t t;

	pthread_mutex_lock(&kv->lock);
	t = dir->dmtime;
	pthread_mutex_unlock(&kv->lock);
	if (t > ts_to_ns(st->st_mtim))
		st->st_mtim = ns_to_ts(t);
	if (t > ts_to_ns(st->st_ctim))
		st->st_ctim = ns_to_ts(t);
}

void kvfs_posix_new(const struct fuse_ctx *ctx, enum kvt_kind kind, mode_t mode,
		    struct kvt_posix *p)
{
	static const mode_t type[] = {
		[KVT_KIND_FILE] = S_IFREG, [KVT_KIND_SYMLINK] = S_IFLNK, [KVT_KIND_DIR] = S_IFDIR,
	};

	memset(p, 0, sizeof(*p));
	p->mode = type[kind] | (mode & 07777);
	p->uid = ctx->uid;
	p->gid = ctx->gid;
	p->kind = kind;
}

int kvfs_errno(int rc)
{
	int e = rc < 0 ? -rc : rc;

	switch (e) {
	case 0:
		return 0;
	case ESTALE:	/* a version reclaimed under a reader: not the kernel's ESTALE */
	case EPIPE:
	case EHOSTUNREACH:	/* a recall the partner store did not answer */
		return EIO;
	/* ENXIO, a recall whose partner bucket is missing, goes as it is:
	 * "No such device or address" says the [g4] url names nothing,
	 * where EIO said the file or the disk was bad. */
	default:
		return e < 4096 ? e : EIO;
	}
}
