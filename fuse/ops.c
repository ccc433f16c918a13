/*
 * ops.c - the FUSE low-level operations: requests in, library calls out.
 *
 * Each operation resolves inode numbers to nodes (node.c), nodes to bucket
 * and key, calls the engine, and replies. Errors travel as negative errnos
 * and become a reply in one place, reply_err() (kvfs_errno maps them).
 *
 * What a key-value store cannot be asked for fails with a clear errno and
 * never reaches the engine: hard links and device nodes, FIFOs and sockets
 * (EPERM), RENAME_EXCHANGE (EINVAL), names over 255 bytes or keys over
 * 1024 (ENAMETOOLONG), names that are not UTF-8 (EILSEQ), a file at the root
 * where only buckets live (EPERM), a rename across buckets (EXDEV: mv then
 * copies).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "kvfs.h"
#include "log.h"

static struct kvfs *req_kv(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, kvfs_errno(rc));
}

/*
 * For what fh_open() and kvfs_stat_node() answer: their -ESTALE says the
 * kernel's name is out of date and goes to the kernel as is, which walks
 * the path again (once) revalidating each name; kvfs_errno() would make it
 * EIO, as it must for the engine's ESTALE.
 */
static void reply_name_err(fuse_req_t req, int rc)
{
	if (rc == -ESTALE)
		fuse_reply_err(req, ESTALE);
	else
		reply_err(req, rc);
}

/* Replies an entry for child `name` of parent, as s describes it. */
static void reply_entry(fuse_req_t req, struct kvfs *kv, struct node *parent, const char *name,
			const struct kvfs_stat *s)
{
	struct fuse_entry_param e;
	struct node *n = node_link(kv, parent, name, s->type);

	if (!n) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = n->ino;
	e.attr = s->st;
	e.attr.st_ino = n->ino;
	e.attr_timeout = kv->attr_timeout;
	e.entry_timeout = kv->entry_timeout;
	node_attr_reply(kv, n, &e.attr);
	/* What the kernel was told, for fstat once the name is gone. */
	pthread_mutex_lock(&kv->lock);
	n->last = e.attr;
	n->has_last = 1;
	pthread_mutex_unlock(&kv->lock);
	if (fuse_reply_entry(req, &e) != 0)
		node_unlink_lookup(kv, n);
	node_put(kv, n);
}

/* ---- the session -------------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_write = KVFS_IO_SIZE;
	if (conn->max_readahead > KVFS_IO_SIZE)
		conn->max_readahead = KVFS_IO_SIZE;
	/* O_TRUNC arrives with open, so truncation joins the new version. */
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/*
	 * Write-through: every write reaches the daemon before close, which is
	 * when a version is published. No splice: every byte is copied into
	 * the engine's aligned buffers and checksummed anyway.
	 */
	conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ |
				  FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	/* No lock operations here: the kernel keeps locks local to this node. */
	conn->want &= ~(unsigned)(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
}

/* ---- names ------------------------------------------------------------------ */

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *kv = req_kv(req);
	struct node *p = node_get(kv, parent), *c;
	char *bucket = NULL, *key = NULL;
	struct kvfs_stat s;
	int rc;

	if (!p) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (strlen(name) > KVFS_NAME_MAX) {
		rc = -ENAMETOOLONG;
		goto out;
	}
	if (p->type == NODE_ROOT) {
		rc = kvt_bucket_name_valid(name) ? kvfs_stat_key(kv, name, "", &s) : -ENOENT;
		if (rc == 0)
			reply_entry(req, kv, p, name, &s);
		goto out;
	}
	c = node_child(kv, p, name);
	if (c) {
		int writing;

		/*
		 * A file being written here has the size of its writes so far,
		 * which only the node knows: the stored version's size, in an
		 * entry reply, moved the kernel's size under the writer, whose
		 * next write at the end then landed inside the file.
		 */
		pthread_mutex_lock(&kv->lock);
		writing = c->pending || c->nwriters > 0;
		pthread_mutex_unlock(&kv->lock);
		rc = writing ? kvfs_stat_node(kv, c, &s) : 1;
		node_put(kv, c);
		if (rc == 0) {
			reply_entry(req, kv, p, name, &s);
			goto out;
		}
	}
	rc = kvfs_child_key(kv, p, name, &bucket, &key);
	if (rc == -EILSEQ)
		rc = -ENOENT;	/* no key can have that name */
	if (rc == 0)
		rc = kvfs_stat_key(kv, bucket, key, &s);
	if (rc == 0)
		reply_entry(req, kv, p, name, &s);
out:
	if (rc < 0)
		reply_err(req, rc);
	node_put(kv, p);
	free(bucket);
	free(key);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	node_forget(req_kv(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct kvfs *kv = req_kv(req);

	for (size_t i = 0; i < count; i++)
		node_forget(kv, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *kv = req_kv(req);
	struct node *n = node_get(kv, ino);
	struct kvfs_stat s;
	int rc;

	(void)fi;
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	rc = kvfs_stat_node(kv, n, &s);
	if (rc < 0) {
		reply_name_err(req, rc);
	} else {
		node_attr_reply(kv, n, &s.st);
		fuse_reply_attr(req, &s.st, kv->attr_timeout);
	}
	node_put(kv, n);
}

/*
 * chmod, chown, utimens on a file or directory in the store. Objects that
 * carry no POSIX metadata (S3) first get the one they were shown with, so a
 * chmod does not also turn the owner into root.
 */
static int setattr_store(struct kvfs *kv, struct node *n, unsigned mask,
			 const struct kvt_posix *want, int64_t mtime_ns)
{
	char *bucket = NULL, *key = NULL, *okey = NULL;
	struct kvt_object *o = NULL;
	struct kvt_posix p;
	int rc = node_path(kv, n, &bucket, &key);

	if (rc < 0)
		return rc;
	if (n->type == NODE_DIR) {
		okey = kvfs_join(key, "");
		if (!okey) {
			rc = -ENOMEM;
			goto out;
		}
	}
	rc = kvt_object_head(kv->st, bucket, okey ? okey : key, &o);
	if (rc == -ENOENT && n->type == NODE_DIR) {
		/* A directory that is only a prefix: give it a marker to hold them. */
		struct kvt_put_opts opts = { .flags = KVT_PUT_IF_NONE_MATCH, .posix = &p };
		struct stat st;

		kvfs_attr_dir(kv, NULL, &st);
		memset(&p, 0, sizeof(p));
		p.mode = st.st_mode;
		p.uid = st.st_uid;
		p.gid = st.st_gid;
		p.kind = KVT_KIND_DIR;
		rc = kvfs_put_empty(kv, bucket, okey, &opts);
		if (rc == 0 || rc == -EEXIST)
			rc = kvt_object_head(kv->st, bucket, okey, &o);
	}
	if (rc < 0)
		goto out;
	if (mask & (KVT_ATTR_MODE | KVT_ATTR_UID | KVT_ATTR_GID)) {
		struct stat st;

		if (n->type == NODE_DIR)
			kvfs_attr_dir(kv, o, &st);
		else
			kvfs_attr_object(kv, o, &st);
		p = *want;
		if (!(mask & KVT_ATTR_MODE))
			p.mode = st.st_mode;
		else
			p.mode = (st.st_mode & S_IFMT) | (want->mode & 07777);
		if (!(mask & KVT_ATTR_UID))
			p.uid = st.st_uid;
		if (!(mask & KVT_ATTR_GID))
			p.gid = st.st_gid;
		mask |= KVT_ATTR_MODE | KVT_ATTR_UID | KVT_ATTR_GID;
	} else {
		p = *want;
	}
	rc = kvt_object_setattr(kv->st, bucket, okey ? okey : key, mask, &p, mtime_ns);
	if (rc == 0 && n->type == NODE_DIR && (mask & KVT_ATTR_MTIME)) {
		/* touch -d: the time given, not that of the last change here. */
		pthread_mutex_lock(&kv->lock);
		n->dmtime = 0;
		pthread_mutex_unlock(&kv->lock);
	}
out:
	kvt_object_free(o);
	free(bucket);
	free(key);
	free(okey);
	return rc;
}

/*
 * A change to n's stored version (attributes, session, pin) that found none
 * (deleted through S3, or dropped by reclaim, since the open), while a
 * version is being written here (writing): close publishes that one with
 * the change, so the change is done.
 */
static int change_kept(int rc, int writing)
{
	return rc == -ENOENT && writing ? 0 : rc;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct kvfs *kv = req_kv(req);
	struct node *n = node_get(kv, ino);
	struct kvt_posix p;
	struct kvfs_stat s;
	int64_t now = kvfs_now_ns(), mtime = 0;
	unsigned mask = 0;
	int rc = 0, pending, writing;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&p, 0, sizeof(p));
	if (to_set & FUSE_SET_ATTR_MODE) {
		mask |= KVT_ATTR_MODE;
		p.mode = attr->st_mode & 07777;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		mask |= KVT_ATTR_UID;
		p.uid = attr->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		mask |= KVT_ATTR_GID;
		p.gid = attr->st_gid;
	}
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
		mask |= KVT_ATTR_ATIME;
		p.atime_ns = to_set & FUSE_SET_ATTR_ATIME_NOW
			     ? now
			     : (int64_t)attr->st_atim.tv_sec * 1000000000 + attr->st_atim.tv_nsec;
	}
	if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
		mask |= KVT_ATTR_MTIME;
		mtime = to_set & FUSE_SET_ATTR_MTIME_NOW
			? now
			: (int64_t)attr->st_mtim.tv_sec * 1000000000 + attr->st_mtim.tv_nsec;
	}

	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (n->type != NODE_FILE) {
			rc = n->type == NODE_SYMLINK ? -EINVAL : -EISDIR;
			goto out;
		}
		if (fi && fi->fh && fh_writable((struct fh *)(uintptr_t)fi->fh)) {
			rc = fh_truncate(kv, (struct fh *)(uintptr_t)fi->fh, (uint64_t)attr->st_size);
		} else {
			rc = kvfs_truncate_node(kv, n, (uint64_t)attr->st_size);
		}
		if (rc < 0)
			goto out;
	}

	if (mask) {
		if (n->type == NODE_ROOT || n->type == NODE_BUCKET) {
			/* Buckets have no metadata to keep: times are ignored. */
			if (mask & (KVT_ATTR_MODE | KVT_ATTR_UID | KVT_ATTR_GID))
				rc = -EPERM;
			goto out;
		}
		pthread_mutex_lock(&kv->lock);
		pending = n->pending;
		if (pending) {
			/* Not in the store yet: kept for the publish. */
			if (mask & KVT_ATTR_MODE)
				n->cposix.mode = (n->cposix.mode & S_IFMT) | p.mode;
			if (mask & KVT_ATTR_UID)
				n->cposix.uid = p.uid;
			if (mask & KVT_ATTR_GID)
				n->cposix.gid = p.gid;
			if (mask & KVT_ATTR_ATIME)
				n->cposix.atime_ns = p.atime_ns;
		}
		writing = n->nwriters > 0;
		if (writing) {
			/* Versions published by open handles carry the change too. */
			struct node_pend *pd = &n->pend;

			pd->mask |= mask;
			if (mask & KVT_ATTR_MODE)
				pd->posix.mode = p.mode;
			if (mask & KVT_ATTR_UID)
				pd->posix.uid = p.uid;
			if (mask & KVT_ATTR_GID)
				pd->posix.gid = p.gid;
			if (mask & KVT_ATTR_ATIME)
				pd->posix.atime_ns = p.atime_ns;
			if (mask & KVT_ATTR_MTIME)
				pd->mtime_ns = mtime;
		}
		pthread_mutex_unlock(&kv->lock);
		if (!pending) {
			pthread_rwlock_rdlock(&kv->names);
			rc = setattr_store(kv, n, mask, &p, mtime);
			pthread_rwlock_unlock(&kv->names);
		}
		rc = change_kept(rc, writing && n->type == NODE_FILE);
		if (rc < 0)
			goto out;
	}
out:
	if (rc == 0 && (mask || (to_set & FUSE_SET_ATTR_SIZE))) {
		pthread_mutex_lock(&kv->lock);
		node_changed_locked(kv, n);	/* listings fetched before are stale */
		pthread_mutex_unlock(&kv->lock);
	}
	if (rc == 0)
		rc = kvfs_stat_node(kv, n, &s);
	if (rc < 0) {
		reply_name_err(req, rc);
	} else {
		node_attr_reply(kv, n, &s.st);
		fuse_reply_attr(req, &s.st, kv->attr_timeout);
	}
	node_put(kv, n);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct kvfs *kv = req_kv(req);
	struct node *n = node_get(kv, ino);
	char *bucket = NULL, *key = NULL, buf[KVFS_LINK_MAX + 1];
	struct kvt_reader *r = NULL;
	ssize_t len = 0;
	int rc;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	rc = n->type == NODE_SYMLINK ? node_path(kv, n, &bucket, &key) : -EINVAL;
	if (rc == 0)
		rc = kvt_reader_open(kv->st, bucket, key, &r);
	if (rc == 0) {
		len = kvt_reader_pread(r, buf, KVFS_LINK_MAX, 0);
		if (len < 0)
			rc = (int)len;
	}
	if (rc < 0) {
		reply_err(req, rc);
	} else {
		buf[len] = '\0';
		fuse_reply_readlink(req, buf);
	}
	kvt_reader_close(r);
	free(bucket);
	free(key);
	node_put(kv, n);
}

/* Creates child name of parent as a file (mknod), symlink or directory. */
static void make_child(fuse_req_t req, fuse_ino_t parent, const char *name, enum kvt_kind kind,
		       mode_t mode, const char *target)
{
	static const struct kvt_meta symlink_meta = { (char *)"kvtier-symlink", (char *)"1" };
	struct kvfs *kv = req_kv(req);
	struct node *p = node_get(kv, parent), *c = NULL;
	char *bucket = NULL, *key = NULL, *okey = NULL;
	struct kvt_put_opts opts = { .flags = KVT_PUT_IF_NONE_MATCH };
	struct kvt_writer *w = NULL;
	struct kvt_posix posix;
	struct kvfs_stat s;
	int rc;

	if (!p) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (p->type == NODE_ROOT && kind == KVT_KIND_DIR) {
		/* mkdir at the root makes a bucket. */
		rc = strlen(name) > KVFS_NAME_MAX ? -ENAMETOOLONG
		     : kvt_bucket_name_valid(name) ? kvt_bucket_create(kv->st, name) : -EINVAL;
		if (rc == 0)
			rc = kvfs_stat_key(kv, name, "", &s);
		goto out;
	}
	rc = kvfs_child_key(kv, p, name, &bucket, &key);
	if (rc < 0)
		goto out;
	c = node_child(kv, p, name);
	if (c) {
		pthread_mutex_lock(&kv->lock);
		rc = c->pending ? -EEXIST : 0;
		pthread_mutex_unlock(&kv->lock);
		if (rc < 0)
			goto out;
	}
	rc = kvfs_stat_key(kv, bucket, key, &s);
	if (rc == 0)
		rc = -EEXIST;
	if (rc != -ENOENT)
		goto out;
	kvfs_posix_new(fuse_req_ctx(req), kind, kind == KVT_KIND_SYMLINK ? 0777 : mode, &posix);
	opts.posix = &posix;
	if (kind == KVT_KIND_DIR) {
		okey = kvfs_join(key, "");
		rc = !okey ? -ENOMEM : strlen(okey) > KVT_KEY_MAX ? -ENAMETOOLONG : 0;
		if (rc == 0)
			rc = kvfs_put_empty(kv, bucket, okey, &opts);
	} else if (kind == KVT_KIND_SYMLINK) {
		/* S3 sees the link as an object whose bytes are the target. */
		opts.meta = &symlink_meta;
		opts.nmeta = 1;
		rc = kvt_writer_open(kv->st, bucket, key, &opts, &w);
		if (rc == 0)
			rc = kvt_writer_write(w, target, strlen(target));
		if (rc == 0)
			rc = kvt_writer_commit(w, NULL);
		else
			kvt_writer_abort(w);
	} else {
		rc = kvfs_put_empty(kv, bucket, key, &opts);
	}
	if (rc == 0)
		rc = kvfs_stat_key(kv, bucket, key, &s);
	if (rc == 0)
		kvfs_dir_touch(kv, p);
out:
	if (rc == 0)
		reply_entry(req, kv, p, name, &s);
	else
		reply_err(req, rc);
	node_put(kv, c);
	node_put(kv, p);
	free(bucket);
	free(key);
	free(okey);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     dev_t rdev)
{
	(void)rdev;
	/* Device nodes, FIFOs and sockets have no place in an object store. */
	if (!S_ISREG(mode)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	make_child(req, parent, name, KVT_KIND_FILE, mode, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make_child(req, parent, name, KVT_KIND_DIR, mode, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	if (strlen(link) > KVFS_LINK_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	make_child(req, parent, name, KVT_KIND_SYMLINK, 0777, link);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino;
	(void)newparent;
	(void)newname;
	fuse_reply_err(req, EPERM);	/* an object has exactly one key */
}

/* parent lost an entry: it stays a directory if that was its last
 * (kvfs_dir_keep). */
static void dir_keep_parent(struct kvfs *kv, struct node *parent)
{
	char *bucket = NULL, *key = NULL;

	if (node_path(kv, parent, &bucket, &key) == 0)
		kvfs_dir_keep(kv, bucket, key);
	free(bucket);
	free(key);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *kv = req_kv(req);
	struct node *p = node_get(kv, parent), *c = NULL;
	char *bucket = NULL, *key = NULL;
	struct kvfs_stat s;
	int rc, pending = 0;

	if (!p) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	/* Names change: no publish may sit between the delete and the unhash. */
	pthread_rwlock_wrlock(&kv->names);
	rc = p->type == NODE_ROOT ? -EISDIR : kvfs_child_key(kv, p, name, &bucket, &key);
	if (rc < 0)
		goto out;
	c = node_child(kv, p, name);
	if (c) {
		pthread_mutex_lock(&kv->lock);
		pending = c->pending;
		pthread_mutex_unlock(&kv->lock);
	}
	rc = kvt_object_delete(kv->st, bucket, key);
	if (rc == -ENOENT) {
		if (kvfs_stat_key(kv, bucket, key, &s) == 0 && s.type == NODE_DIR)
			rc = -EISDIR;
		else if (pending)
			rc = 0;	/* never published: forgetting the name is all */
	}
	if (rc < 0)
		goto out;
	node_unhash(kv, p, name);
	kvfs_dir_touch(kv, p);
	dir_keep_parent(kv, p);
out:
	pthread_rwlock_unlock(&kv->names);
	reply_err(req, rc);
	node_put(kv, c);
	node_put(kv, p);
	free(bucket);
	free(key);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *kv = req_kv(req);
	struct node *p = node_get(kv, parent), *c = NULL;
	char *bucket = NULL, *key = NULL, *okey = NULL;
	struct kvfs_stat s;
	int rc;

	if (!p) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_rwlock_wrlock(&kv->names);
	if (p->type == NODE_ROOT) {
		rc = kvt_bucket_name_valid(name) ? kvt_bucket_delete(kv->st, name) : -ENOENT;
		if (rc == 0)
			node_unhash(kv, p, name);
		goto out;
	}
	rc = kvfs_child_key(kv, p, name, &bucket, &key);
	if (rc == 0)
		rc = kvfs_stat_key(kv, bucket, key, &s);
	if (rc == 0 && s.type != NODE_DIR)
		rc = -ENOTDIR;
	if (rc == 0) {
		rc = kvfs_dir_empty(kv, bucket, key);
		rc = rc < 0 ? rc : rc ? 0 : -ENOTEMPTY;
	}
	/* It may list nothing: S3 keys such as "a//b" have no name here. The
	 * key stays (it is data); the log says which to remove through S3. */
	if (rc == -ENOTEMPTY && (okey = dh_hidden_key(kv, bucket, key))) {
		log_warn(rc, "directory '%s/%s' lists empty but holds S3 keys no name reaches "
			 "(from '%s'); remove them through S3", bucket, key, okey);
		free(okey);
		okey = NULL;
	}
	/* A file created in it and not yet published is an entry too. */
	if (rc == 0 && (c = node_child(kv, p, name)) && node_pending_under(kv, c))
		rc = -ENOTEMPTY;
	if (rc < 0)
		goto out;
	okey = kvfs_join(key, "");
	rc = okey ? kvt_object_delete(kv->st, bucket, okey) : -ENOMEM;
	if (rc == -ENOENT)
		rc = 0;	/* a directory without a marker goes with its last key */
	if (rc < 0)
		goto out;
	node_unhash(kv, p, name);
	kvfs_dir_touch(kv, p);
	dir_keep_parent(kv, p);
out:
	pthread_rwlock_unlock(&kv->names);
	reply_err(req, rc);
	node_put(kv, c);
	node_put(kv, p);
	free(bucket);
	free(key);
	free(okey);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct kvfs *kv = req_kv(req);
	struct node *p = node_get(kv, parent), *np = node_get(kv, newparent), *c = NULL;
	char *fb = NULL, *fk = NULL, *tb = NULL, *tk = NULL, *fdir = NULL, *tdir = NULL;
	struct kvfs_stat src, dst;
	int rc, pending = 0, writing = 0, dst_exists, locked = 0;

	if (!p || !np) {
		rc = -ENOENT;
		goto out;
	}
	if (flags & ~(unsigned)RENAME_NOREPLACE) {
		rc = -EINVAL;	/* RENAME_EXCHANGE, RENAME_WHITEOUT */
		goto out;
	}
	if (p->type == NODE_ROOT || np->type == NODE_ROOT) {
		rc = -EXDEV;	/* buckets are not renamed; mv copies */
		goto out;
	}
	rc = kvfs_child_key(kv, p, name, &fb, &fk);
	if (rc == 0)
		rc = kvfs_child_key(kv, np, newname, &tb, &tk);
	if (rc < 0)
		goto out;
	if (strcmp(fb, tb) != 0) {
		rc = -EXDEV;
		goto out;
	}
	if (strcmp(fk, tk) == 0)
		goto out;
	/* Names change: no publish may sit between the store's rename and the
	 * table's (it would land under the name the file just left). */
	pthread_rwlock_wrlock(&kv->names);
	locked = 1;
	c = node_child(kv, p, name);
	if (c) {
		pthread_mutex_lock(&kv->lock);
		pending = c->pending;
		writing = c->type == NODE_FILE && c->nwriters > 0;
		pthread_mutex_unlock(&kv->lock);
	}
	rc = kvfs_stat_key(kv, tb, tk, &dst);
	if (rc < 0 && rc != -ENOENT)
		goto out;
	dst_exists = rc == 0;
	if (pending) {
		/* Not in the store yet: the name moves here; the file published at
		 * close replaces whatever the new name holds then. */
		src.type = NODE_FILE;
		rc = 0;
	} else {
		rc = kvfs_stat_key(kv, fb, fk, &src);
		/* Its stored version went away since the open (deleted through
		 * S3, dropped by reclaim) while it is written here: it moves as
		 * a pending file does, and close publishes under the new name. */
		if (rc == -ENOENT && writing) {
			pending = 1;
			src.type = NODE_FILE;
			rc = 0;
		}
		if (rc < 0)
			goto out;
	}
	if (dst_exists && (flags & RENAME_NOREPLACE)) {
		rc = -EEXIST;
		goto out;
	}
	if (dst_exists && src.type != NODE_DIR && dst.type == NODE_DIR) {
		rc = -EISDIR;
		goto out;
	}
	if (dst_exists && src.type == NODE_DIR && dst.type != NODE_DIR) {
		rc = -ENOTDIR;
		goto out;
	}
	if (dst_exists && dst.type == NODE_DIR) {
		/* A file created in the target and not yet published is an entry
		 * too, as for rmdir: replacing the directory lost it. */
		struct node *t = node_child(kv, np, newname);
		int busy = t && node_pending_under(kv, t);

		node_put(kv, t);
		if (busy) {
			rc = -ENOTEMPTY;
			goto out;
		}
	}
	if (pending) {
		if (dst_exists)
			rc = kvt_object_delete(kv->st, tb, tk);
	} else if (src.type != NODE_DIR) {
		rc = kvt_object_rename(kv->st, fb, fk, tk,
				       flags & RENAME_NOREPLACE ? KVT_RENAME_NOREPLACE : 0);
	} else {
		fdir = kvfs_join(fk, "");
		tdir = kvfs_join(tk, "");
		if (!fdir || !tdir)
			rc = -ENOMEM;
		else if (strlen(tdir) > KVT_KEY_MAX)
			rc = -ENAMETOOLONG;
		else if (strncmp(tdir, fdir, strlen(fdir)) == 0)
			rc = -EINVAL;	/* into itself */
		else
			rc = kvt_object_rename(kv->st, fb, fdir, tdir, KVT_RENAME_PREFIX);
	}
	if (rc < 0)
		goto out;
	node_move(kv, p, name, np, newname);
	kvfs_dir_touch(kv, p);
	kvfs_dir_touch(kv, np);
	dir_keep_parent(kv, p);
out:
	if (locked)
		pthread_rwlock_unlock(&kv->names);
	reply_err(req, rc);
	node_put(kv, c);
	node_put(kv, p);
	node_put(kv, np);
	free(fb);
	free(fk);
	free(tb);
	free(tk);
	free(fdir);
	free(tdir);
}

/* ---- files ------------------------------------------------------------------ */

/*
 * Opening a cold object recalls it from G4 (kvt_reader_open does), which
 * waits on the network: that open is handed to a thread of its own, which
 * replies, so that no FUSE thread waits on the partner (STYLE.md) and a
 * burst of cold opens cannot take all of libfuse's threads. Counted with
 * the prestages, so the daemon waits for them before it closes the store;
 * past OPEN_COLD_MAX at once, the open is done in the calling thread.
 */
#define OPEN_COLD_MAX 64

struct open_job {
	struct kvfs *kv;
	fuse_req_t req;
	struct node *n;		/* a reference, dropped by the job */
	struct fuse_file_info fi;
};

static void open_reply(struct kvfs *kv, fuse_req_t req, struct node *n,
		       struct fuse_file_info *fi)
{
	int rc = fh_open(kv, n, fi->flags, fuse_req_ctx(req)->pid, fi);

	if (rc < 0)
		reply_name_err(req, rc);
	else if (fuse_reply_open(req, fi) != 0)
		fh_discard(kv, (struct fh *)(uintptr_t)fi->fh);	/* interrupted */
}

static void *open_cold_main(void *arg)
{
	struct open_job *j = arg;
	struct kvfs *kv = j->kv;

	open_reply(kv, j->req, j->n, &j->fi);
	node_put(kv, j->n);
	free(j);
	atomic_fetch_sub(&kv->prestaging, 1);
	return NULL;
}

/* 1 if n's object is in G4 (or on its way back) and this open would read it. */
static int open_is_cold(struct kvfs *kv, struct node *n, int flags)
{
	char *bucket = NULL, *key = NULL;
	struct kvt_object *o = NULL;
	int pending, cold = 0;

	if ((flags & O_TRUNC) && fh_flags_write(flags))
		return 0;	/* the old bytes are not needed */
	pthread_mutex_lock(&kv->lock);
	pending = n->pending;
	pthread_mutex_unlock(&kv->lock);
	if (pending || node_path(kv, n, &bucket, &key) < 0)
		return 0;
	if (kvt_object_head(kv->st, bucket, key, &o) == 0)
		cold = o->tier == KVT_TIER_COLD || o->tier == KVT_TIER_RECALLING;
	kvt_object_free(o);
	free(bucket);
	free(key);
	return cold;
}

static int open_cold_start(struct kvfs *kv, fuse_req_t req, struct node *n,
			   const struct fuse_file_info *fi)
{
	struct open_job *j;
	pthread_attr_t attr;
	pthread_t tid;
	int rc;

	if (atomic_fetch_add(&kv->prestaging, 1) >= OPEN_COLD_MAX ||
	    !(j = calloc(1, sizeof(*j)))) {
		atomic_fetch_sub(&kv->prestaging, 1);
		return -EAGAIN;
	}
	j->kv = kv;
	j->req = req;
	j->n = n;
	j->fi = *fi;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = -pthread_create(&tid, &attr, open_cold_main, j);
	pthread_attr_destroy(&attr);
	if (rc < 0) {
		free(j);
		atomic_fetch_sub(&kv->prestaging, 1);
	}
	return rc;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *kv = req_kv(req);
	struct node *n = node_get(kv, ino);

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (n->type != NODE_FILE) {
		reply_err(req, n->type == NODE_SYMLINK ? -ELOOP : -EISDIR);
	} else if (open_is_cold(kv, n, fi->flags) && open_cold_start(kv, req, n, fi) == 0) {
		return;		/* the job replies, and drops n */
	} else {
		open_reply(kv, req, n, fi);
	}
	node_put(kv, n);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct kvfs *kv = req_kv(req);
	struct node *p = node_get(kv, parent), *n = NULL, *c = NULL;
	char *bucket = NULL, *key = NULL;
	struct fuse_entry_param e;
	struct kvt_posix posix;
	struct kvfs_stat s;
	int rc, pending = 0, made = 0;

	if (!p) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	rc = kvfs_child_key(kv, p, name, &bucket, &key);
	if (rc < 0)
		goto out;
	/*
	 * -ESTALE from fh_open: the node the name had went to readers of the
	 * page cache, or lost the name meanwhile. The name is resolved again
	 * here rather than sent back: the kernel retries a path once, and an
	 * application must not see ESTALE from open(O_CREAT).
	 */
	for (int tries = 0;; tries++) {
		pending = made = 0;
		c = node_child(kv, p, name);
		if (c) {
			pthread_mutex_lock(&kv->lock);
			pending = c->pending;
			pthread_mutex_unlock(&kv->lock);
		}
		if (pending) {
			rc = kvfs_stat_node(kv, c, &s);
		} else {
			rc = kvfs_stat_key(kv, bucket, key, &s);
			if (rc < 0 && rc != -ENOENT)
				goto out;
		}
		if (rc == 0) {
			/* It exists after all (made elsewhere since the kernel looked). */
			if (fi->flags & O_EXCL)
				rc = -EEXIST;
			else if (s.type == NODE_DIR)
				rc = -EISDIR;
			else if (s.type == NODE_SYMLINK)
				rc = -EEXIST;
			if (rc < 0)
				goto out;
			n = node_link(kv, p, name, NODE_FILE);
			rc = n ? fh_open(kv, n, fi->flags, fuse_req_ctx(req)->pid, fi) : -ENOMEM;
		} else {
			kvfs_posix_new(fuse_req_ctx(req), KVT_KIND_FILE, mode, &posix);
			/* A node read through the page cache is not written (file.c). */
			if (c) {
				pthread_mutex_lock(&kv->lock);
				if (c->ncache > 0 && c->hashed) {
					node_supersede_locked(kv, c);
					node_nocache_locked(p, name, kvfs_now_ns() + 2000000000LL);
				}
				pthread_mutex_unlock(&kv->lock);
			}
			n = node_link(kv, p, name, NODE_FILE);
			rc = n ? fh_create(kv, n, fi->flags, fuse_req_ctx(req)->pid, &posix, fi)
			       : -ENOMEM;
			made = 1;
		}
		if (rc != -ESTALE || tries == 8)
			break;
		if (n)
			node_unlink_lookup(kv, n);
		node_put(kv, n);
		node_put(kv, c);
		n = c = NULL;
	}
	if (rc == 0) {
		rc = kvfs_stat_node(kv, n, &s);
		if (rc < 0)	/* the handle is not the kernel's yet: ours to drop */
			fh_discard(kv, (struct fh *)(uintptr_t)fi->fh);
	}
	if (rc < 0) {
		if (n)
			node_unlink_lookup(kv, n);
		goto out;
	}
	/* A new name in the directory, published at close or never. */
	if (made)
		kvfs_dir_touch(kv, p);
	memset(&e, 0, sizeof(e));
	e.ino = n->ino;
	e.attr = s.st;
	e.attr_timeout = kv->attr_timeout;
	e.entry_timeout = kv->entry_timeout;
	node_attr_reply(kv, n, &e.attr);
	if (fuse_reply_create(req, &e, fi) != 0) {
		fh_discard(kv, (struct fh *)(uintptr_t)fi->fh);
		node_unlink_lookup(kv, n);
	}
out:
	if (rc < 0)
		reply_name_err(req, rc);
	node_put(kv, n);
	node_put(kv, c);
	node_put(kv, p);
	free(bucket);
	free(key);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct kvfs *kv = req_kv(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct fh_reply rp;
	char *buf = NULL;
	ssize_t n;

	(void)ino;
	n = fh_read_windows(kv, h, size, off, &rp);
	if (n == -EAGAIN)
		n = fh_read_push(kv, h, size, off, &rp);
	if (n == -EAGAIN)
		n = fh_read_map(h, size, off, &rp);
	if (n == -EAGAIN) {
		buf = kvfs_iobuf_new(kv, size);
		n = buf ? fh_read(kv, h, buf, size, off) : -ENOMEM;
	}
	if (n < 0) {
		reply_err(req, (int)n);
	} else if (buf) {
		fuse_reply_buf(req, buf, (size_t)n);
	} else if (rp.n) {
		int rc = fuse_reply_iov(req, rp.iov, (int)rp.n);

		fh_read_push_rest(kv, h, &rp, rc == 0);
	} else if (rp.map) {
		unsigned niov;
		const struct iovec *iov = kvt_map_iov(rp.map, &niov);

		fuse_reply_iov(req, iov, (int)niov);
	} else {
		fuse_reply_buf(req, NULL, 0);
	}
	fh_reply_done(h, &rp);
	kvfs_iobuf_free(kv, buf, size);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	/* Direct-I/O writes carry the writer's lock owner (fi->lock_owner). */
	ssize_t n = fh_write(req_kv(req), (struct fh *)(uintptr_t)fi->fh, buf, size, off,
			     fi->lock_owner);

	(void)ino;
	if (n < 0)
		reply_err(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	reply_err(req, fh_flush(req_kv(req), (struct fh *)(uintptr_t)fi->fh, fi->lock_owner,
				fuse_req_ctx(req)->pid));
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fh_release(req_kv(req), (struct fh *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	reply_err(req, fh_fsync(req_kv(req), (struct fh *)(uintptr_t)fi->fh));
}

/* ---- directories -------------------------------------------------------------- */

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *kv = req_kv(req);
	struct node *n = node_get(kv, ino);
	struct dh *d = NULL;
	int rc;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	rc = n->type == NODE_FILE || n->type == NODE_SYMLINK ? -ENOTDIR : dh_open(kv, n, &d);
	node_put(kv, n);
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	if (fuse_reply_open(req, fi) != 0)
		dh_release(kv, d);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)ino;
	dh_readdir(req_kv(req), req, (struct dh *)(uintptr_t)fi->fh, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	(void)ino;
	dh_readdir(req_kv(req), req, (struct dh *)(uintptr_t)fi->fh, size, off, 1);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	dh_release(req_kv(req), (struct dh *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	reply_err(req, kvt_store_sync(req_kv(req)->st));
}

/* The hot tier: its capacity, and room not taken by live extents. */
static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct kvfs *kv = req_kv(req);
	struct kvt_store_stat ss;
	struct statvfs sv;
	const uint64_t bsize = 4096;
	uint64_t reserved;
	int rc = kvt_store_stat(kv->st, &ss);

	(void)ino;
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = KVFS_IO_SIZE;
	sv.f_frsize = bsize;
	sv.f_blocks = ss.capacity / bsize;
	sv.f_bfree = ss.capacity > ss.live_bytes ? (ss.capacity - ss.live_bytes) / bsize : 0;
	/* Less the segment writers leave to reclaim (kvt_store_object_max()),
	 * as a file system leaves out the blocks it reserves for root. */
	reserved = (ss.capacity - kvt_store_object_max(kv->st)) / bsize;
	sv.f_bavail = sv.f_bfree > reserved ? sv.f_bfree - reserved : 0;
	/* Objects are rows, not preallocated inodes: there is always room. */
	sv.f_files = ss.objects + (1u << 30);
	sv.f_ffree = 1u << 30;
	sv.f_favail = sv.f_ffree;
	sv.f_namemax = KVFS_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* ---- extended attributes ---------------------------------------------------------- */

static int xattr_object(struct kvfs *kv, struct node *n, struct kvt_object **o)
{
	char *bucket = NULL, *key = NULL;
	int rc = node_path(kv, n, &bucket, &key);

	if (rc == 0)
		rc = kvt_object_head(kv->st, bucket, key, o);
	free(bucket);
	free(key);
	return rc;
}

static void reply_xattr_value(fuse_req_t req, const char *value, size_t size)
{
	size_t len = strlen(value);

	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, value, len);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct kvfs *kv = req_kv(req);
	struct node *n;
	struct kvt_object *o = NULL;
	char value[KVT_KEY_MAX + 64], psession[KVT_KEY_MAX + 1] = "";
	enum kvfs_xattr x = kvfs_xattr_name(name);
	int rc = 0, pending, ppin, pcleared;

	if (x == KVFS_XATTR_FOREIGN) {
		/* No security labels, no POSIX ACLs: ENOTSUP, not ENODATA. ls -l
		 * asks for security.selinux and system.posix_acl_access on every
		 * file and, told ENOTSUP once, stops asking on this device; the
		 * kernel caches neither answer, so each would be a round trip. */
		fuse_reply_err(req, ENOTSUP);
		return;
	}
	n = node_get(kv, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_mutex_lock(&kv->lock);
	pending = n->pending;
	ppin = n->ppin;
	if (n->psession)
		snprintf(psession, sizeof(psession), "%s", n->psession);
	pcleared = n->psession && !*n->psession;
	pthread_mutex_unlock(&kv->lock);
	/* Linux asks for no user.* name of a symbolic link (op_listxattr). */
	if (x == KVFS_XATTR_USER || x == KVFS_XATTR_UNKNOWN || x == KVFS_XATTR_PRESTAGE ||
	    n->type != NODE_FILE) {
		rc = -ENODATA;
		goto out;
	}
	if (pending) {
		/* Nothing published yet; but its writer may ask what it set. */
		if (x == KVFS_XATTR_PIN)
			reply_xattr_value(req, ppin > 0 ? "1" : "0", size);
		else if (x == KVFS_XATTR_SESSION && *psession)
			reply_xattr_value(req, psession, size);
		else
			rc = -ENODATA;
		goto out;
	}
	rc = xattr_object(kv, n, &o);
	if (rc < 0)
		goto out;
	if (x == KVFS_XATTR_TIER) {
		snprintf(value, sizeof(value), "%s", kvt_tier_name(o->tier));
	} else if (x == KVFS_XATTR_SESSION && pcleared) {
		/* Cleared while open for writing: close publishes the key's own
		 * session, whatever the stored version has now (an S3 PUT with
		 * a session of its own since, say). */
		char *bucket = NULL, *key = NULL, *ks = NULL;

		rc = node_path(kv, n, &bucket, &key);
		if (rc == 0 && !(ks = kvt_key_session(kv->st, key)))
			rc = -ENOMEM;
		if (rc == 0)
			snprintf(value, sizeof(value), "%s", ks);
		free(bucket);
		free(key);
		free(ks);
		if (rc < 0)
			goto out;
	} else if (x == KVFS_XATTR_SESSION) {
		/* What close will publish, if it was set while open for writing. */
		snprintf(value, sizeof(value), "%s", *psession ? psession :
			 o->session ? o->session : "");
	} else if (x == KVFS_XATTR_ETAG) {
		/* Without S3's quotes. */
		size_t len = strlen(o->etag);

		if (len >= 2 && o->etag[0] == '"' && o->etag[len - 1] == '"')
			snprintf(value, sizeof(value), "%.*s", (int)(len - 2), o->etag + 1);
		else
			snprintf(value, sizeof(value), "%s", o->etag);
	} else if (x == KVFS_XATTR_CHECKSUM) {
		snprintf(value, sizeof(value), "%08x", o->crc32c);
	} else {
		/* The pin: what close will publish, if it was set while open for writing. */
		snprintf(value, sizeof(value), "%d", ppin ? ppin > 0 : o->pinned);
	}
	reply_xattr_value(req, value, size);
out:
	if (rc < 0)
		reply_err(req, rc);
	kvt_object_free(o);
	node_put(kv, n);
}

/*
 * Whether getxattr reads name x of n (op_getxattr), which is what listxattr
 * lists and what setxattr's XATTR_CREATE (EEXIST) and XATTR_REPLACE (ENODATA)
 * go by: a published file has them all; a file not yet published only the
 * pin and the session its writer may set before close; a directory, the
 * root and a symbolic link none (Linux answers ENODATA to any user.* name
 * of a link without asking: xattr_permission() in fs/xattr.c).
 * user.kvtier.prestage is never there: setting it is a request, not a value.
 */
static int xattr_there(struct kvfs *kv, struct node *n, enum kvfs_xattr x)
{
	int pending, psession;

	if (n->type != NODE_FILE)
		return 0;
	pthread_mutex_lock(&kv->lock);
	pending = n->pending;
	psession = n->psession && *n->psession;
	pthread_mutex_unlock(&kv->lock);
	switch (x) {
	case KVFS_XATTR_TIER:
	case KVFS_XATTR_ETAG:
	case KVFS_XATTR_CHECKSUM:
		return !pending;
	case KVFS_XATTR_SESSION:
		return !pending || psession;
	case KVFS_XATTR_PIN:
		return 1;
	default:
		return 0;
	}
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const struct { const char *name; enum kvfs_xattr x; } names[] = {
		{ XATTR_TIER, KVFS_XATTR_TIER }, { XATTR_ETAG, KVFS_XATTR_ETAG },
		{ XATTR_CHECKSUM, KVFS_XATTR_CHECKSUM }, { XATTR_SESSION, KVFS_XATTR_SESSION },
		{ XATTR_PIN, KVFS_XATTR_PIN },
	};
	char list[sizeof(XATTR_TIER XATTR_ETAG XATTR_CHECKSUM XATTR_SESSION XATTR_PIN) + 5];
	struct kvfs *kv = req_kv(req);
	struct node *n = node_get(kv, ino);
	size_t len = 0;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (xattr_there(kv, n, names[i].x)) {
			memcpy(list + len, names[i].name, strlen(names[i].name) + 1);
			len += strlen(names[i].name) + 1;
		}
	}
	node_put(kv, n);
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, list, len);
}

/*
 * user.kvtier.prestage: the session a directory names (or the object a file
 * is) comes back from G4 in a background thread, so that no FUSE thread
 * waits on the network; the daemon waits for these before it closes the
 * store (kvfs_prestage_wait).
 */
struct prestage_job {
	struct kvfs *kv;
	char *bucket;
	char *name;		/* a session, or a key */
	int session;
};

static void *prestage_main(void *arg)
{
	struct prestage_job *j = arg;
	/* [g4] jobs fetches in parallel; a partner hiccup is retried. */
	const struct kvt_g4_opts o = { .jobs = j->kv->cfg.g4.jobs, .retries = 3 };
	struct kvt_g4_report rep;
	int rc;

	if (j->session)
		rc = kvt_g4_recall_session(j->kv->st, j->bucket, j->name, &o, &rep);
	else
		rc = kvt_object_recall(j->kv->st, j->bucket, j->name);
	if (rc < 0)
		log_warn(rc, "prestage of '%s/%s' incomplete", j->bucket, j->name);
	atomic_fetch_sub(&j->kv->prestaging, 1);
	free(j->bucket);
	free(j->name);
	free(j);
	return NULL;
}

static int prestage_start(struct kvfs *kv, const char *bucket, const char *key, int dir)
{
	struct prestage_job *j = calloc(1, sizeof(*j));
	size_t len = key ? strlen(key) : 0;
	pthread_attr_t attr;
	pthread_t tid;
	int rc = 0;

	if (!j)
		return -ENOMEM;
	if (!key || !len) {
		free(j);
		return -EINVAL;	/* a bucket is not a session */
	}
	j->kv = kv;
	j->session = dir;
	j->bucket = strdup(bucket);
	if (dir) {
		/* A directory "conv42/" names the session "conv42"; one deeper
		 * than [store] session_depth, "conv42/turn1/", the session of
		 * the keys below it, "conv42". */
		unsigned depth = 0;

		if (key[len - 1] == '/')
			len--;
		for (size_t i = 0; i < len; i++)
			if (key[i] == '/' && ++depth == kv->cfg.store.session_depth)
				len = i;
	}
	j->name = strndup(key, len);
	if (!j->bucket || !j->name) {
		rc = -ENOMEM;
		goto fail;
	}
	atomic_fetch_add(&kv->prestaging, 1);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = -pthread_create(&tid, &attr, prestage_main, j);
	pthread_attr_destroy(&attr);
	if (rc == 0)
		return 0;
	atomic_fetch_sub(&kv->prestaging, 1);
fail:
	free(j->bucket);
	free(j->name);
	free(j);
	return rc;
}

void kvfs_prestage_wait(struct kvfs *kv)
{
	while (atomic_load(&kv->prestaging) > 0)
		usleep(10000);
}

/*
 * user.kvtier.pin = 1 or 0 (removexattr: 0) of a file. On a file
 * open for writing here the versions its handles publish are published
 * pinned (or not) in their own commit (fh_publish_named), so a file written
 * through the mount and pinned before close is never plain cache that
 * reclaim could drop first; the version the store has now is pinned at
 * once as well. A writer that opens meanwhile is safe either way: its
 * commit keeps the pin of the version it replaces (KVT_PUT_KEEP_PIN), and a
 * pin that lands after that commit lands on its version. A directory is
 * not an object and has no pin of its own: EISDIR, as for the session
 * (pinning what is under it now would not cover files made later). A
 * symbolic link never gets here: Linux answers EPERM to setting or removing
 * a user.* name of one without asking (xattr_permission() in fs/xattr.c);
 * `kvtier pin` pins its object.
 */
static int xattr_pin(struct kvfs *kv, struct node *n, const char *bucket, const char *key,
		     int pin)
{
	int pending, writing, rc = 0;

	if (n->type != NODE_FILE)
		return -EISDIR;
	pthread_mutex_lock(&kv->lock);
	writing = n->nwriters > 0;
	if (writing)
		n->ppin = pin ? 1 : -1;
	pending = n->pending;
	pthread_mutex_unlock(&kv->lock);
	if (!pending)
		rc = kvt_object_pin(kv->st, bucket, key, pin);
	return change_kept(rc, writing);
}

/*
 * user.kvtier.session of a file (as the pin, never a symlink): session (as
 * kvfs_xattr_session() read it), or with NULL (removexattr) the one its key
 * gives, as if it had never been set. Versions published by handles open
 * for writing go there too (n->psession, where "" is the key's own:
 * kvt_put_opts.session).
 */
static int xattr_session(struct kvfs *kv, struct node *n, const char *bucket, const char *key,
			 const char *session)
{
	int pending, writing, rc = 0;

	if (n->type != NODE_FILE)
		return -EISDIR;
	pthread_mutex_lock(&kv->lock);
	writing = n->nwriters > 0;
	if (writing) {
		free(n->psession);
		n->psession = strdup(session ? session : "");
		rc = n->psession ? 0 : -ENOMEM;
	}
	pending = n->pending;
	pthread_mutex_unlock(&kv->lock);
	if (rc == 0 && !pending)
		rc = kvt_object_set_session(kv->st, bucket, key, session);
	return change_kept(rc, writing);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct kvfs *kv = req_kv(req);
	struct node *n = node_get(kv, ino);
	enum kvfs_xattr x = kvfs_xattr_name(name);
	char *bucket = NULL, *key = NULL, *session = NULL;
	int rc = 0, pin;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_rwlock_rdlock(&kv->names);
	/* The root has no path (node_path: EISDIR for every name); it answers
	 * as a bucket does, bucket and key NULL: no session, pin or prestage. */
	if (n->type != NODE_ROOT)
		rc = node_path(kv, n, &bucket, &key);
	if (rc < 0)
		goto out;
	/*
	 * Of a name that can be set here, what a file system answers:
	 * XATTR_CREATE of one getxattr reads is EEXIST, XATTR_REPLACE of one
	 * it does not ENODATA. So the prestage, never there, takes
	 * XATTR_CREATE and refuses XATTR_REPLACE (it took both), and a
	 * session of a file not yet published takes XATTR_CREATE until one
	 * is set (it was EEXIST). A session or pin of a directory cannot be
	 * set at all: EISDIR whatever the flags (XATTR_CREATE was EEXIST).
	 */
	if (n->type != NODE_FILE && (x == KVFS_XATTR_SESSION || x == KVFS_XATTR_PIN)) {
		rc = -EISDIR;
		goto out;
	}
	if (x == KVFS_XATTR_SESSION || x == KVFS_XATTR_PIN || x == KVFS_XATTR_PRESTAGE) {
		int there = xattr_there(kv, n, x);

		if ((flags & XATTR_CREATE) && there)
			rc = -EEXIST;
		else if ((flags & XATTR_REPLACE) && !there)
			rc = -ENODATA;
		if (rc < 0)
			goto out;
	}
	switch (x) {
	case KVFS_XATTR_SESSION:
		rc = kvfs_xattr_session(value, size, &session);
		if (rc == 0)
			rc = xattr_session(kv, n, bucket, key, session);
		break;
	case KVFS_XATTR_PIN:
		rc = kvfs_xattr_pin(value, size, &pin);
		if (rc == 0)
			rc = xattr_pin(kv, n, bucket, key, pin);
		break;
	case KVFS_XATTR_PRESTAGE:
		rc = prestage_start(kv, bucket, key, n->type == NODE_DIR);
		break;
	default:
		/* Read-only, or not kept here. ENOTSUP, not EPERM: cp -a and mv
		 * copy xattrs and stay quiet about the ones a file system does
		 * not take. */
		rc = -ENOTSUP;
	}
out:
	pthread_rwlock_unlock(&kv->names);
	reply_err(req, rc);
	free(bucket);
	free(key);
	free(session);
	node_put(kv, n);
}

/*
 * setfattr -x user.kvtier.pin unpins, -x user.kvtier.session gives the file
 * back to the session of its key; the other user.kvtier names cannot be
 * removed, and no other name is there to remove (ENODATA, as a file system
 * without it answers).
 */
static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct kvfs *kv = req_kv(req);
	struct node *n;
	char *bucket = NULL, *key = NULL;
	enum kvfs_xattr x = kvfs_xattr_name(name);
	int rc;

	if (x != KVFS_XATTR_PIN && x != KVFS_XATTR_SESSION) {
		rc = x == KVFS_XATTR_FOREIGN || x == KVFS_XATTR_USER ? ENODATA : ENOTSUP;
		fuse_reply_err(req, rc);
		return;
	}
	n = node_get(kv, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_rwlock_rdlock(&kv->names);
	rc = node_path(kv, n, &bucket, &key);
	if (rc == 0)
		rc = x == KVFS_XATTR_PIN ? xattr_pin(kv, n, bucket, key, 0)
					 : xattr_session(kv, n, bucket, key, NULL);
	pthread_rwlock_unlock(&kv->names);
	reply_err(req, rc);
	free(bucket);
	free(key);
	node_put(kv, n);
}

const struct fuse_lowlevel_ops kvfs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.create = op_create,
};
