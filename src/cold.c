/*
 * cold.c - choosing a cold tier from its URL, and the helpers every
 * implementation shares. See cold.h.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold.h"
#include "log.h"
#include "util.h"

int cold_new(const struct cold_opts *o, struct cold **out)
{
	const char *url = o->url;
	char def[4096];

	if (!url) {
		if (!o->store_dir)
			return -EINVAL;
		snprintf(def, sizeof(def), "file://%s/g4", o->store_dir);
		url = def;
	}
	if (strcmp(url, COLD_URL_NONE) == 0)
		return -ENODEV;	/* a pure cache node: nothing to demote to */
	if (strncmp(url, "file://", 7) == 0) {
		if (url[7] != '/') {
			log_err(0, "g4 url '%s' must name an absolute directory: file:///DIR", url);
			return -EINVAL;
		}
		return cold_file_new(url + 7, out);
	}
	if (strncmp(url, "s3://", 5) == 0 && url[5] && url[5] != '/')
		return cold_s3_new(o, out);
	log_err(0, "g4 url '%s' is neither file:///DIR nor s3://BUCKET/PREFIX", url);
	return -EINVAL;
}

void cold_set_journal(struct cold *c, const struct cold_journal *j)
{
	c->journal = *j;
	if (c->ops->set_journal)
		c->ops->set_journal(c, j);
}

void cold_stop_at(struct cold *c, int64_t deadline)
{
	__atomic_store_n(&c->stop_ns, deadline, __ATOMIC_RELEASE);
}

int cold_stopped(const struct cold *c)
{
	int64_t stop = __atomic_load_n(&c->stop_ns, __ATOMIC_ACQUIRE);

	return stop && util_mono_ns() >= stop;
}

void cold_free(struct cold *c)
{
	if (c)
		c->ops->free(c);
}

struct cold_mem {
	const char *src;
	char *buf;
	size_t len, cap, max;
};

static int cold_mem_source(void *arg, void *buf, size_t len, uint64_t off)
{
	struct cold_mem *m = arg;

	memcpy(buf, m->src + off, len);
	return 0;
}

static int cold_mem_sink(void *arg, const void *buf, size_t len)
{
	struct cold_mem *m = arg;

	if (m->len + len > m->max)
		return -EFBIG;
	if (m->len + len + 1 > m->cap) {
		size_t cap = (m->len + len + 1) * 2;
		char *b = realloc(m->buf, cap);

		if (!b)
			return -ENOMEM;
		m->buf = b;
		m->cap = cap;
	}
	memcpy(m->buf + m->len, buf, len);
	m->len += len;
	m->buf[m->len] = '\0';
	return 0;
}

int cold_put_buf(struct cold *c, const char *key, const void *buf, size_t len,
		 const char *content_type)
{
	struct cold_mem m = { .src = buf };

	return cold_put(c, key, len, content_type, cold_mem_source, &m, NULL);
}

int cold_put_buf_if(struct cold *c, const char *key, const char *match, const void *buf,
		    size_t len, const char *content_type)
{
	struct cold_mem m = { .src = buf };

	return cold_put_if(c, key, match, len, content_type, cold_mem_source, &m, NULL);
}

int cold_get_buf(struct cold *c, const char *key, size_t max, char **buf, size_t *len)
{
	char etag[KVT_ETAG_MAX];

	return cold_get_buf_etag(c, key, max, buf, len, etag);
}

int cold_get_buf_etag(struct cold *c, const char *key, size_t max, char **buf, size_t *len,
		      char *etag)
{
	struct cold_mem m = { .max = max };
	uint64_t size;
	int rc = cold_get_etag(c, key, cold_mem_sink, &m, &size, etag);

	if (rc == 0 && !m.buf) {
		m.buf = calloc(1, 1);
		if (!m.buf)
			rc = -ENOMEM;
	}
	if (rc < 0) {
		free(m.buf);
		return rc;
	}
	*buf = m.buf;
	*len = m.len;
	return 0;
}

int cold_components_fit(const char *name, size_t max)
{
	for (;;) {
		const char *slash = strchr(name, '/');
		size_t len = slash ? (size_t)(slash - name) : strlen(name);

		if (len > max)
			return 0;
		if (!slash)
			return 1;
		name = slash + 1;
	}
}

char *cold_s3_key(const char *prefix, const char *key)
{
	size_t cap = strlen(prefix) + 3 * strlen(key) + 8, n = 0;
	char *k = malloc(cap);
	const char *comp = key;

	if (!k)
		return NULL;
	if (prefix[0])
		n = (size_t)snprintf(k, cap, "%s/", prefix);
	/* S3 does not normalise paths, but libcurl and some partners do (and
	 * s3rver or MinIO store keys as files): "a/../b" must not become "b".
	 * Injective: a component maps to one that is never empty, ".", ".."
	 * or another component's image; only the last may stay empty. */
	for (;;) {
		const char *slash = strchr(comp, '/');
		size_t clen = slash ? (size_t)(slash - comp) : strlen(comp);

		if (clen == 0) {
			/* "a//b" must not become "a/b"; a trailing '/' (a directory
			 * marker, "a/") is S3's own convention and stays. */
			if (slash)
				k[n++] = '%';
		} else if ((clen == 1 && comp[0] == '.') || (clen == 2 && !strncmp(comp, "..", 2))) {
			for (size_t i = 0; i < clen; i++)
				n += (size_t)sprintf(k + n, "%%2E");
		} else {
			for (size_t i = 0; i < clen; i++) {
				if (comp[i] == '%')
					n += (size_t)sprintf(k + n, "%%25");
				else
					k[n++] = comp[i];
			}
		}
		if (!slash)
			break;
		k[n++] = '/';
		comp = slash + 1;
	}
	k[n] = '\0';
	return k;
}
