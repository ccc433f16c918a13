/*
 * cold_file.c - the cold tier in a local directory (`file:///DIR`): the
 * embedded default, so a fresh checkout runs end to end with no server, and
 * the way two nodes share a G4 over a shared file system.
 *
 * Layout, readable by an operator: the G4 key "BUCKET/a/b" is the file
 * DIR/BUCKET/a/b%. Each '/'-separated component is percent-encoded (bytes
 * outside [A-Za-z0-9._~-], and '%'), "." and ".." are written "%2E" and
 * "%2E%2E" and an empty component is "%", so no key escapes DIR and the S3
 * keys "a//b", "a/b" and "a/./b" stay three files. The '%' that ends every
 * file name (it cannot appear unencoded in a component) keeps "a" and
 * "a/b" apart: S3 allows both, a file system cannot hold a file "a" and a
 * directory "a".
 *
 * A put writes DIR/.kvtier/tmp/HOST.PID.RANDOM, fsyncs it, renames it into
 * place and fsyncs the directory: atomic and durable before the hot copy is
 * freed. A put killed half way leaves only its temporary file, which
 * cleanup() removes once its process is gone.
 *
 * A delete removes the directories it leaves empty, deepest first, up to
 * the tier's own (cf_prune()): every version of every object has a name of
 * its own, many components deep, so a tier that kept them filled with
 * empty directories that a listing or a backup walks. A put into a
 * directory a delete in another process removes between its mkdir and its
 * rename makes it again (cf_dir_open()): rmdir() takes only an empty
 * directory, and a rename into one removed fails with ENOENT.
 *
 * A conditional put (put_if) compares and renames, a conditional delete (del_if) compares and
 * unlinks, under a lock file: see cf_cond_lock() for what that guarantees
 * between processes.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cold.h"
#include "log.h"
#include "util.h"

#define CF_CHUNK (1u << 20)

struct cold_file {
	struct cold base;
	char *dir;
	char host[256];
};

static int cf_safe(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '_' || ch == '~' || ch == '-';
}

/* DIR/<encoded key>%: caller frees. */
static char *cf_path(struct cold_file *cf, const char *key)
{
	size_t len = strlen(key), cap = strlen(cf->dir) + 3 * len + 16, n;
	char *p = malloc(cap);
	const char *comp = key;

	if (!p)
		return NULL;
	n = (size_t)snprintf(p, cap, "%s/", cf->dir);
	for (;;) {
		const char *slash = strchr(comp, '/');
		size_t clen = slash ? (size_t)(slash - comp) : strlen(comp);

		if (clen == 0)
			p[n++] = '%';
		else if ((clen == 1 && comp[0] == '.') || (clen == 2 && !strncmp(comp, "..", 2)))
			for (size_t i = 0; i < clen; i++)
				n += (size_t)sprintf(p + n, "%%2E");
		else
			for (size_t i = 0; i < clen; i++) {
				unsigned char ch = (unsigned char)comp[i];

				if (cf_safe(ch))
					p[n++] = (char)ch;
				else
					n += (size_t)sprintf(p + n, "%%%02X", ch);
			}
		if (!slash)
			break;
		p[n++] = '/';
		comp = slash + 1;
	}
	p[n++] = '%';
	p[n] = '\0';
	return p;
}

static int cf_mkdirs_for(const char *path)
{
	char *d = strdup(path), *slash;
	int rc;

	if (!d)
		return -ENOMEM;
	slash = strrchr(d, '/');
	if (slash)
		*slash = '\0';
	rc = util_mkdir_p(d);
	free(d);
	return rc;
}

/*
 * How many times a put makes its directory again after a delete in another
 * process removed it (ENOENT): each time means a delete emptied it in the
 * meantime, so running out takes that many deletes racing one put.
 */
#define CF_TRIES 16

/*
 * Opens path's directory in *dfd, making it and those above first. Another
 * process's delete (cf_prune()) may remove any of them once it is empty,
 * between two of util_mkdir_p()'s mkdirs or before the open: ENOENT, made
 * again CF_TRIES times at most.
 */
static int cf_dir_open(const char *path, int *dfd)
{
	char *d = strdup(path), *slash;
	int rc = 0;

	if (!d)
		return -ENOMEM;
	slash = strrchr(d, '/');
	if (slash)
		*slash = '\0';
	for (unsigned tries = 0; tries < CF_TRIES; tries++) {
		rc = util_mkdir_p(d);
		if (rc == 0) {
			*dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			rc = *dfd < 0 ? -errno : 0;
		}
		if (rc != -ENOENT)
			break;
	}
	if (rc < 0)
		log_err(rc, "cannot make directories for '%s'", path);
	free(d);
	return rc;
}

/*
 * Removes the directories above path (a file just removed) that are empty
 * now, deepest first, but DIR and the tier's own: DIR/.kvtier, its
 * tmp/, stores/ and manifests/, and each store's .kvtier/stores/STORE/,
 * a handful that no key adds to, which an operator finds where the layout
 * says. rmdir() takes an empty directory only, so the first one still
 * holding something (ENOTEMPTY, EEXIST; EBUSY: a mount point, or an NFS
 * file still open), or one another delete removed (ENOENT: it goes on
 * up), stops it; so does any other refusal, logged: the delete is done.
 */
static void cf_prune(struct cold_file *cf, const char *path)
{
	size_t root = strlen(cf->dir) + 1;
	char *d = strdup(path), *slash;

	if (!d)
		return;		/* the directories stay: nothing is lost */
	while ((slash = strrchr(d + root, '/'))) {
		const char *rel = d + root, *in;

		*slash = '\0';
		if (!strcmp(rel, ".kvtier"))
			break;
		if (!strncmp(rel, ".kvtier/", 8)) {
			in = rel + 8;
			if (!strncmp(in, "stores/", 7))
				in += 7;
			if (!strchr(in, '/'))
				break;
		}
		if (rmdir(d) < 0) {
			if (errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT &&
			    errno != EBUSY)
				log_warn(-errno, "cannot remove the empty directory '%s'", d);
			break;
		}
	}
	free(d);
}

char *cold_file_name(const char *dir, const char *key)
{
	struct cold_file cf = { .dir = (char *)dir };

	return cf_path(&cf, key);
}

/* The ETag get_etag answers and put_if compares: CRC32C and size of the
 * bytes, in the format put answers. */
static void cf_etag(char *etag, uint32_t crc, uint64_t size)
{
	snprintf(etag, KVT_ETAG_MAX, "\"%08x%016llx\"", crc, (unsigned long long)size);
}

static int cf_put(struct cold *c, const char *key, uint64_t size, const char *content_type,
		  cold_source_fn src, void *arg, struct cold_put_info *info)
{
	struct cold_file *cf = (struct cold_file *)c;
	char *path = cf_path(cf, key), tmp[4096], *buf = malloc(CF_CHUNK);
	uint64_t off = 0;
	uint32_t crc = 0;
	int fd = -1, dfd = -1, rc;

	(void)content_type;	/* the manifest keeps it; a file has none */
	tmp[0] = '\0';
	if (!path || !buf) {
		rc = -ENOMEM;
		goto out;
	}
	snprintf(tmp, sizeof(tmp), "%s/.kvtier/tmp/%s.%ld.%016llx", cf->dir, cf->host,
		 (long)getpid(), (unsigned long long)util_random64());
	rc = cf_mkdirs_for(tmp);
	if (rc < 0) {
		log_err(rc, "cannot make directories for '%s'", tmp);
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		log_err(rc, "cannot create '%s'", tmp);
		goto out;
	}
	/* Before the bytes are pulled, so that a name the directory cannot
	 * hold fails first. */
	rc = cf_dir_open(path, &dfd);
	if (rc < 0)
		goto out;
	while (off < size) {
		size_t n = (size_t)MIN((uint64_t)CF_CHUNK, size - off);

		rc = src(arg, buf, n, off);
		if (rc < 0)
			goto out;
		crc = kvt_crc32c(crc, buf, n);
		for (size_t done = 0; done < n;) {
			ssize_t w = write(fd, buf + done, n - done);

			if (w < 0) {
				if (errno == EINTR)
					continue;
				rc = -errno;
				log_err(rc, "cannot write '%s'", tmp);
				goto out;
			}
			done += (size_t)w;
		}
		off += n;
	}
	if (fsync(fd) < 0) {
		rc = -errno;
		log_err(rc, "cannot sync '%s'", tmp);
		goto out;
	}
	close(fd);
	fd = -1;
	/* dfd is the directory itself: a delete that removed it since fails
	 * this rename (ENOENT), and one that removes it after cannot make the
	 * fsync below fail. */
	for (unsigned tries = 1;; tries++) {
		if (renameat(AT_FDCWD, tmp, dfd, strrchr(path, '/') + 1) == 0)
			break;
		rc = -errno;
		if (rc != -ENOENT || tries == CF_TRIES || access(tmp, F_OK) < 0) {
			log_err(rc, "cannot rename '%s' to '%s'", tmp, path);
			goto out;
		}
		close(dfd);
		dfd = -1;
		rc = cf_dir_open(path, &dfd);
		if (rc < 0)
			goto out;
	}
	tmp[0] = '\0';
	rc = fsync(dfd) < 0 ? -errno : 0;
	if (rc < 0)
		log_err(rc, "cannot sync the directory of '%s'", path);
	if (info) {
		cf_etag(info->etag, crc, size);
		/* Every byte pulled was written and is durable: a local file
		 * system that lies about that is not one G4 can be on. */
		info->verified = rc == 0;
	}
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	if (rc < 0 && tmp[0])
		unlink(tmp);
	/* Nor does a failed put leave the directories it made. */
	if (rc < 0 && path)
		cf_prune(cf, path);
	free(path);
	free(buf);
	return rc;
}

static int cf_get_etag(struct cold *c, const char *key, cold_sink_fn sink, void *arg,
		       uint64_t *size, char *etag)
{
	struct cold_file *cf = (struct cold_file *)c;
	char *path = cf_path(cf, key), *buf = malloc(CF_CHUNK);
	struct stat sb;
	uint64_t total = 0;
	uint32_t crc = 0;
	int fd = -1, rc = 0;

	if (!path || !buf) {
		rc = -ENOMEM;
		goto out;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0) {
		rc = -errno;
		if (rc != -ENOENT)
			log_err(rc, "cannot open '%s'", path);
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, buf, CF_CHUNK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			log_err(rc, "cannot read '%s'", path);
			goto out;
		}
		if (n == 0)
			break;
		if (etag)
			crc = kvt_crc32c(crc, buf, (size_t)n);
		rc = sink(arg, buf, (size_t)n);
		if (rc < 0)
			goto out;
		total += (uint64_t)n;
	}
	if (size)
		*size = total;
	if (etag)
		cf_etag(etag, crc, total);
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(buf);
	return rc;
}

static int cf_get(struct cold *c, const char *key, cold_sink_fn sink, void *arg, uint64_t *size)
{
	return cf_get_etag(c, key, sink, arg, size, NULL);
}

static int cf_null_sink(void *arg, const void *buf, size_t len)
{
	(void)arg, (void)buf, (void)len;
	return 0;
}

/*
 * Compare and rename (or unlink) under an exclusive flock() of
 * DIR/.kvtier/cond.lock: the conditional puts and deletes of every process
 * on this machine (and of machines whose shared file system carries
 * flock(), as NFSv4 and CephFS do) are one at a time, each comparing the
 * bytes there now with what its caller read. Plain puts and deletes do not
 * take the lock, so only keys that every writer puts and deletes
 * conditionally (manifests) are guarded. The comparison reads the whole
 * object: conditional puts and deletes are for small ones.
 *
 * cf_cond_lock() answers the lock's descriptor, 0 when key holds match
 * (COLD_ABSENT: nothing) or -ECANCELED in *rc; close() drops the lock.
 */
static int cf_cond_lock(struct cold_file *cf, const char *key, const char *match, int *rc)
{
	char lpath[4096], now[KVT_ETAG_MAX] = "";
	int lfd;

	snprintf(lpath, sizeof(lpath), "%s/.kvtier/cond.lock", cf->dir);
	*rc = cf_mkdirs_for(lpath);
	if (*rc < 0)
		return -1;
	lfd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lfd < 0) {
		*rc = -errno;
		log_err(*rc, "cannot open '%s'", lpath);
		return -1;
	}
	while ((*rc = flock(lfd, LOCK_EX)) < 0 && errno == EINTR)
		;
	if (*rc < 0) {
		*rc = -errno;
		log_err(*rc, "cannot lock '%s'", lpath);
		close(lfd);
		return -1;
	}
	*rc = cf_get_etag(&cf->base, key, cf_null_sink, NULL, NULL, now);
	if (*rc == -ENOENT) {
		now[0] = '\0';
		*rc = 0;
	}
	if (*rc == 0 && strcmp(now, match) != 0)
		*rc = -ECANCELED;
	return lfd;
}

static int cf_put_if(struct cold *c, const char *key, const char *match, uint64_t size,
		     const char *content_type, cold_source_fn src, void *arg,
		     struct cold_put_info *info)
{
	int rc, lfd = cf_cond_lock((struct cold_file *)c, key, match, &rc);

	if (rc == 0)
		rc = cf_put(c, key, size, content_type, src, arg, info);
	if (lfd >= 0)
		close(lfd);	/* drops the lock */
	return rc;
}


/* No etag: put's is the CRC32C of what was written, and a file changed
 * since (bit rot, a hand edit, another node's put of the same size) keeps
 * its size and mtime tells nothing reliable; the caller reads it back. */
static int cf_head(struct cold *c, const char *key, uint64_t *size, char *etag)
{
	char *path = cf_path((struct cold_file *)c, key);
	struct stat sb;
	int rc = 0;

	if (etag)
		etag[0] = '\0';
	if (!path)
		return -ENOMEM;
	if (stat(path, &sb) < 0)
		rc = -errno;
	else if (size)
		*size = (uint64_t)sb.st_size;
	free(path);
	return rc;
}

static int cf_del(struct cold *c, const char *key)
{
	char *path = cf_path((struct cold_file *)c, key);
	int rc = 0;

	if (!path)
		return -ENOMEM;
	if (unlink(path) < 0)
		rc = -errno;
	else
		cf_prune((struct cold_file *)c, path);
	free(path);
	return rc;
}

/* An absent key matches COLD_ABSENT, and there is nothing to delete. */
static int cf_del_if(struct cold *c, const char *key, const char *match)
{
	int rc, lfd = cf_cond_lock((struct cold_file *)c, key, match, &rc);

	if (rc == 0)
		rc = match[0] ? cf_del(c, key) : -ENOENT;
	if (lfd >= 0)
		close(lfd);	/* drops the lock */
	return rc;
}

/* Temporary files of this host whose process is gone. */
static int cf_cleanup(struct cold *c)
{
	struct cold_file *cf = (struct cold_file *)c;
	char dir[4096], path[8192];
	size_t hlen = strlen(cf->host);
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/.kvtier/tmp", cf->dir);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		long pid;

		if (strncmp(de->d_name, cf->host, hlen) != 0 || de->d_name[hlen] != '.')
			continue;
		pid = strtol(de->d_name + hlen + 1, NULL, 10);
		if (pid <= 0 || (kill((pid_t)pid, 0) < 0 && errno == ESRCH)) {
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			if (unlink(path) == 0)
				log_info("removed '%s', left by an interrupted put", path);
		}
	}
	closedir(d);
	return 0;
}

/* A name whose file name, or one of whose encoded components, the file
 * system refuses (ENAMETOOLONG) does not fit: each percent-encoded byte is
 * three. */
static int cf_key_fits(struct cold *c, const char *key)
{
	char *path = cf_path((struct cold_file *)c, key);
	int fits;

	if (!path)
		return 1;	/* the put says -ENOMEM */
	fits = strlen(path) < PATH_MAX &&
	       cold_components_fit(path + strlen(((struct cold_file *)c)->dir) + 1, NAME_MAX);
	free(path);
	return fits;
}

static void cf_free(struct cold *c)
{
	struct cold_file *cf = (struct cold_file *)c;

	free(cf->dir);
	free(c->url);
	free(cf);
}

static const struct cold_ops cold_file_ops = {
	.name = "file",
	.put = cf_put,
	.get = cf_get,
	.get_etag = cf_get_etag,
	.put_if = cf_put_if,
	.head = cf_head,
	.del = cf_del,
	.del_if = cf_del_if,
	.cleanup = cf_cleanup,
	.key_fits = cf_key_fits,
	.free = cf_free,
};

int cold_file_new(const char *dir, struct cold **out)
{
	struct cold_file *cf = calloc(1, sizeof(*cf));
	size_t len = strlen(dir);
	int rc;

	if (!cf)
		return -ENOMEM;
	while (len > 1 && dir[len - 1] == '/')
		len--;
	cf->dir = strndup(dir, len);
	cf->base.ops = &cold_file_ops;
	cf->base.url = malloc(len + 8);
	if (!cf->dir || !cf->base.url) {
		cf_free(&cf->base);
		return -ENOMEM;
	}
	snprintf(cf->base.url, len + 8, "file://%s", cf->dir);
	if (gethostname(cf->host, sizeof(cf->host) - 1) < 0 || !cf->host[0])
		snprintf(cf->host, sizeof(cf->host), "localhost");
	for (char *p = cf->host; *p; p++)
		if (*p == '.' || *p == '/')
			*p = '_';
	rc = util_mkdir_p(cf->dir);
	if (rc < 0) {
		log_err(rc, "cannot create the g4 directory '%s'", cf->dir);
		cf_free(&cf->base);
		return rc;
	}
	*out = &cf->base;
	return 0;
}
