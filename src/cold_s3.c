/*
 * cold_s3.c - the cold tier in a partner S3 bucket (`s3://BUCKET/PREFIX`),
 * through libs3: Ceph RGW, MinIO, AWS, any S3.
 *
 * The G4 key "BUCKET/KEY" is the S3 key "PREFIX/BUCKET/KEY". An S3 PUT is
 * atomic, so an interrupted put leaves nothing and the next run puts again.
 * [g4] endpoint "http://HOST:PORT" or "HOST:PORT" (https) names the partner
 * and selects path-style addressing, which every S3 clone speaks; unset, AWS
 * with virtual-host style. [g4] credentials is a file of two lines,
 * "access_key = ..." and "secret_key = ...", readable by its owner only.
 *
 * Errors: 404 -> -ENOENT; 500, 503 and SlowDown -> -EAGAIN (retry later,
 * nothing lost); no answer (refused, dropped, timed out) -> -EHOSTUNREACH;
 * anything else -> -EIO, logged with the partner's message.
 *
 * TODO(issue 5): multipart uploads with parallel parts ([g4] part_size),
 * aborting stale ones in cleanup(); SigV4 with [g4] region (libs3 2.0 signs
 * V2 only).
 */
#include "config.h"

#include <errno.h>
#include <libs3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cold.h"
#include "log.h"
#include "util.h"

struct cold_s3 {
	struct cold base;
	char *bucket, *prefix, *host;
	char access[512], secret[512];
	S3BucketContext ctx;
};

struct s3_call {
	S3Status status;
	char msg[256];
	char etag[KVT_ETAG_MAX];
	uint64_t length;
	/* put */
	cold_source_fn src;
	void *arg;
	uint64_t off, size;
	int src_rc;
	/* get */
	cold_sink_fn sink;
	int sink_rc;
	uint64_t got;
};

static pthread_once_t s3_once = PTHREAD_ONCE_INIT;
static S3Status s3_init_status;

static void s3_init(void)
{
	s3_init_status = S3_initialize("kvtier", S3_INIT_ALL, NULL);
}

static S3Status s3_props(const S3ResponseProperties *p, void *data)
{
	struct s3_call *c = data;

	if (p->eTag)
		snprintf(c->etag, sizeof(c->etag), "%s", p->eTag);
	c->length = p->contentLength;
	return S3StatusOK;
}

static void s3_complete(S3Status status, const S3ErrorDetails *err, void *data)
{
	struct s3_call *c = data;

	c->status = status;
	if (err && err->message)
		snprintf(c->msg, sizeof(c->msg), "%s", err->message);
}

static int s3_errno(struct cold_s3 *s, const struct s3_call *c, const char *what, const char *key)
{
	int rc;

	if (c->src_rc < 0)
		return c->src_rc;
	if (c->sink_rc < 0)
		return c->sink_rc;
	switch (c->status) {
	case S3StatusOK:
		return 0;
	case S3StatusErrorNoSuchKey:
	case S3StatusHttpErrorNotFound:
		return -ENOENT;
	case S3StatusHttpErrorUnknown:	/* 500, 503: libs3 has no name for them */
	case S3StatusErrorSlowDown:
	case S3StatusErrorInternalError:
	case S3StatusErrorRequestTimeout:	/* the partner's word: we were slow */
		rc = -EAGAIN;
		break;
	case S3StatusConnectionFailed:	/* also a connection dropped half way */
	case S3StatusInternalError:	/* libs3's word for other curl failures (a
					 * send or receive cut off by a partner that
					 * went away: test_migrate_s3.sh) */
	case S3StatusNameLookupError:
	case S3StatusFailedToConnect:
		rc = -EHOSTUNREACH;
		break;
	default:
		rc = -EIO;
	}
	log_err(0, "s3 %s of '%s' in bucket '%s' failed: %s%s%s", what, key, s->bucket,
		S3_get_status_name(c->status), c->msg[0] ? ": " : "", c->msg);
	return rc;
}

/* PREFIX/KEY: caller frees. */
static char *s3_key(struct cold_s3 *s, const char *key)
{
	size_t len = strlen(s->prefix) + strlen(key) + 2;
	char *k = malloc(len);

	if (k)
		snprintf(k, len, "%s%s%s", s->prefix, s->prefix[0] ? "/" : "", key);
	return k;
}

static int s3_put_data(int size, char *buf, void *data)
{
	struct s3_call *c = data;
	size_t n = (size_t)MIN((uint64_t)size, c->size - c->off);

	if (n == 0)
		return 0;
	c->src_rc = c->src(c->arg, buf, n, c->off);
	if (c->src_rc < 0)
		return -1;	/* aborts the request */
	c->off += n;
	return (int)n;
}

static int s3_put(struct cold *cold, const char *key, uint64_t size, const char *ctype,
		  cold_source_fn src, void *arg, char *etag)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_call c = { .status = S3StatusInternalError, .src = src, .arg = arg, .size = size };
	S3PutProperties props = { .contentType = ctype, .expires = -1 };
	S3PutObjectHandler h = { { s3_props, s3_complete }, s3_put_data };
	char *k = s3_key(s, key);
	int rc;

	if (!k)
		return -ENOMEM;
	S3_put_object(&s->ctx, k, size, &props, NULL, &h, &c);
	rc = s3_errno(s, &c, "put", k);
	if (rc == 0 && etag)
		snprintf(etag, KVT_ETAG_MAX, "%s", c.etag);
	free(k);
	return rc;
}

static S3Status s3_get_data(int size, const char *buf, void *data)
{
	struct s3_call *c = data;

	c->sink_rc = c->sink(c->arg, buf, (size_t)size);
	if (c->sink_rc < 0)
		return S3StatusAbortedByCallback;
	c->got += (uint64_t)size;
	return S3StatusOK;
}

static int s3_get(struct cold *cold, const char *key, cold_sink_fn sink, void *arg,
		  uint64_t *size)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_call c = { .status = S3StatusInternalError, .sink = sink, .arg = arg };
	S3GetObjectHandler h = { { s3_props, s3_complete }, s3_get_data };
	char *k = s3_key(s, key);
	int rc;

	if (!k)
		return -ENOMEM;
	S3_get_object(&s->ctx, k, NULL, 0, 0, NULL, &h, &c);
	rc = s3_errno(s, &c, "get", k);
	if (rc == 0 && size)
		*size = c.got;
	free(k);
	return rc;
}

static int s3_head(struct cold *cold, const char *key, uint64_t *size)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_call c = { .status = S3StatusInternalError };
	S3ResponseHandler h = { s3_props, s3_complete };
	char *k = s3_key(s, key);
	int rc;

	if (!k)
		return -ENOMEM;
	S3_head_object(&s->ctx, k, NULL, &h, &c);
	rc = s3_errno(s, &c, "head", k);
	if (rc == 0 && size)
		*size = c.length;
	free(k);
	return rc;
}

static int s3_del(struct cold *cold, const char *key)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_call c = { .status = S3StatusInternalError };
	S3ResponseHandler h = { s3_props, s3_complete };
	char *k = s3_key(s, key);
	int rc;

	if (!k)
		return -ENOMEM;
	S3_delete_object(&s->ctx, k, NULL, &h, &c);
	rc = s3_errno(s, &c, "delete", k);
	free(k);
	return rc;
}

static void s3_free(struct cold *cold)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;

	free(s->bucket);
	free(s->prefix);
	free(s->host);
	free(cold->url);
	memset(s->secret, 0, sizeof(s->secret));
	free(s);
}

static const struct cold_ops cold_s3_ops = {
	.name = "s3",
	.put = s3_put,
	.get = s3_get,
	.head = s3_head,
	.del = s3_del,
	.free = s3_free,
};

/* "access_key = X" and "secret_key = Y", from a file only its owner reads. */
static int s3_read_keys(struct cold_s3 *s, const char *path)
{
	char line[600], name[64], value[512];
	struct stat sb;
	FILE *f = fopen(path, "r");

	if (!f) {
		log_err(-errno, "cannot open the g4 credentials '%s'", path);
		return -errno;
	}
	if (fstat(fileno(f), &sb) < 0 || (sb.st_mode & 077)) {
		log_err(0, "the g4 credentials '%s' must be readable by their owner only (chmod 600)",
			path);
		fclose(f);
		return -EACCES;
	}
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#' || line[0] == ';' || line[0] == '\n')
			continue;
		if (sscanf(line, " %63[a-z_] = %511s", name, value) != 2) {
			log_err(0, "bad line in the g4 credentials '%s'", path);
			fclose(f);
			return -EINVAL;
		}
		if (!strcmp(name, "access_key"))
			snprintf(s->access, sizeof(s->access), "%s", value);
		else if (!strcmp(name, "secret_key"))
			snprintf(s->secret, sizeof(s->secret), "%s", value);
	}
	fclose(f);
	if (!s->access[0] || !s->secret[0]) {
		log_err(0, "the g4 credentials '%s' need access_key and secret_key", path);
		return -EINVAL;
	}
	return 0;
}

int cold_s3_new(const char *url, const char *endpoint, const char *credentials,
		struct cold **out)
{
	struct cold_s3 *s = calloc(1, sizeof(*s));
	const char *b = url + 5, *slash = strchr(b, '/');
	S3Protocol proto = S3ProtocolHTTPS;
	int rc;

	if (!s)
		return -ENOMEM;
	s->base.ops = &cold_s3_ops;
	s->base.url = strdup(url);
	s->bucket = slash ? strndup(b, (size_t)(slash - b)) : strdup(b);
	s->prefix = strdup(slash ? slash + 1 : "");
	if (!s->base.url || !s->bucket || !s->prefix) {
		rc = -ENOMEM;
		goto fail;
	}
	for (size_t n = strlen(s->prefix); n > 0 && s->prefix[n - 1] == '/'; n--)
		s->prefix[n - 1] = '\0';
	if (endpoint) {
		if (!strncmp(endpoint, "http://", 7)) {
			proto = S3ProtocolHTTP;
			endpoint += 7;
		} else if (!strncmp(endpoint, "https://", 8)) {
			endpoint += 8;
		}
		s->host = strdup(endpoint);
		if (!s->host) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	if (!credentials) {
		log_err(0, "g4 url '%s' needs [g4] credentials", url);
		rc = -EINVAL;
		goto fail;
	}
	rc = s3_read_keys(s, credentials);
	if (rc < 0)
		goto fail;
	pthread_once(&s3_once, s3_init);
	if (s3_init_status != S3StatusOK) {
		log_err(0, "cannot initialise libs3: %s", S3_get_status_name(s3_init_status));
		rc = -EIO;
		goto fail;
	}
	s->ctx = (S3BucketContext){
		.hostName = s->host,
		.bucketName = s->bucket,
		.protocol = proto,
		.uriStyle = s->host ? S3UriStylePath : S3UriStyleVirtualHost,
		.accessKeyId = s->access,
		.secretAccessKey = s->secret,
	};
	*out = &s->base;
	return 0;
fail:
	s3_free(&s->base);
	return rc;
}
