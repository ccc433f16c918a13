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

int cold_new(const char *url, const char *endpoint, const char *credentials,
	     const char *store_dir, struct cold **out)
{
	char def[4096];

	if (!url) {
		if (!store_dir)
			return -EINVAL;
		snprintf(def, sizeof(def), "file://%s/g4", store_dir);
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
		return cold_s3_new(url, endpoint, credentials, out);
	log_err(0, "g4 url '%s' is neither file:///DIR nor s3://BUCKET/PREFIX", url);
	return -EINVAL;
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
	char etag[64];

	return cold_put(c, key, len, content_type, cold_mem_source, &m, etag);
}

int cold_get_buf(struct cold *c, const char *key, size_t max, char **buf, size_t *len)
{
	struct cold_mem m = { .max = max };
	uint64_t size;
	int rc = cold_get(c, key, cold_mem_sink, &m, &size);

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
