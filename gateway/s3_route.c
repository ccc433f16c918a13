/*
 * s3_route.c - request routing: which bucket, which key, which operation.
 *
 * Addressing. Path style names the bucket in the first path segment
 * ("/bucket/key"); virtual-host style in the Host header
 * ("bucket.localhost:9000", with --domain localhost), the whole path then
 * being the key. The path is split on the raw bytes first and each piece is
 * percent-decoded exactly once afterwards, so an encoded "%2F" in a key
 * stays inside the key and a key's own '%' survives ("a%25b" is "a%b").
 * S3 does not normalise paths: "a//b", "a/./b" and "a/" are distinct keys,
 * so nothing here collapses or resolves segments.
 *
 * Operations. S3 selects an operation by method, by whether a bucket and a
 * key are named, and by "sub-resources": query parameters without which the
 * request means something else (?uploads, ?delete, ?location ...). Other
 * parameters are arguments (prefix, max-keys) or noise clients add
 * (x-id=PutObject from recent SDKs) and never change the operation.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw_util.h"
#include "s3_route.h"

static const char *const s3_op_names[S3_OP_COUNT] = {
	[S3_OP_UNKNOWN] = "Unknown",
	[S3_OP_UNSUPPORTED] = "Unsupported",
	[S3_OP_NOT_ALLOWED] = "NotAllowed",
	[S3_OP_BAD_VERSION] = "BadVersion",
	[S3_OP_HEALTH] = "Health",
	[S3_OP_METRICS] = "Metrics",
	[S3_OP_LIST_BUCKETS] = "ListBuckets",
	[S3_OP_CREATE_BUCKET] = "CreateBucket",
	[S3_OP_HEAD_BUCKET] = "HeadBucket",
	[S3_OP_DELETE_BUCKET] = "DeleteBucket",
	[S3_OP_GET_BUCKET_LOCATION] = "GetBucketLocation",
	[S3_OP_GET_BUCKET_VERSIONING] = "GetBucketVersioning",
	[S3_OP_GET_BUCKET_ACL] = "GetBucketAcl",
	[S3_OP_LIST_OBJECTS] = "ListObjects",
	[S3_OP_LIST_OBJECTS_V2] = "ListObjectsV2",
	[S3_OP_LIST_OBJECT_VERSIONS] = "ListObjectVersions",
	[S3_OP_LIST_MULTIPART_UPLOADS] = "ListMultipartUploads",
	[S3_OP_DELETE_OBJECTS] = "DeleteObjects",
	[S3_OP_PUT_OBJECT] = "PutObject",
	[S3_OP_COPY_OBJECT] = "CopyObject",
	[S3_OP_GET_OBJECT] = "GetObject",
	[S3_OP_HEAD_OBJECT] = "HeadObject",
	[S3_OP_DELETE_OBJECT] = "DeleteObject",
	[S3_OP_GET_OBJECT_ACL] = "GetObjectAcl",
	[S3_OP_CREATE_MULTIPART] = "CreateMultipartUpload",
	[S3_OP_UPLOAD_PART] = "UploadPart",
	[S3_OP_UPLOAD_PART_COPY] = "UploadPartCopy",
	[S3_OP_COMPLETE_MULTIPART] = "CompleteMultipartUpload",
	[S3_OP_ABORT_MULTIPART] = "AbortMultipartUpload",
	[S3_OP_LIST_PARTS] = "ListParts",
	[S3_OP_KV_LOOKUP] = "KvLookup",
	[S3_OP_KV_PRESTAGE] = "KvPrestage",
};

const char *s3_op_name(enum s3_op op)
{
	return op < S3_OP_COUNT && s3_op_names[op] ? s3_op_names[op] : "Unknown";
}

void s3_route_release(struct s3_route *r)
{
	if (!r)
		return;
	free(r->bucket);
	free(r->key);
	free(r->raw_path);
	free(r->raw_query);
	for (size_t i = 0; i < r->nparams; i++) {
		free(r->params[i].name);
		free(r->params[i].value);
	}
	free(r->params);
	memset(r, 0, sizeof(*r));
}

static int s3_route_query(struct s3_route *r, const char *q)
{
	const char *p = q;

	while (*p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		size_t nlen = eq ? (size_t)(eq - p) : len;
		struct s3_param *prm;

		if (len > 0) {
			if (r->nparams == S3_ROUTE_MAX_PARAMS)
				return -EINVAL;
			if (!r->params) {
				r->params = calloc(S3_ROUTE_MAX_PARAMS, sizeof(*r->params));
				if (!r->params)
					return -ENOMEM;
			}
			prm = &r->params[r->nparams];
			prm->name = gw_url_decode(p, nlen, true, NULL);
			prm->value = eq ? gw_url_decode(eq + 1, len - nlen - 1, true, NULL)
					: strdup("");
			if (!prm->name || !prm->value) {
				free(prm->name);
				free(prm->value);
				prm->name = prm->value = NULL;
				return -EINVAL;
			}
			r->nparams++;
		}
		p += len;
		if (*p == '&')
			p++;
	}
	return 0;
}

/* The bucket named by host under domain, or NULL. */
static char *s3_route_vhost(const char *host, const char *domain)
{
	size_t hlen, dlen;
	const char *colon;

	if (!host || !domain || !*domain)
		return NULL;
	/* "[::1]:9000" names no bucket; "b.localhost:9000" drops its port. */
	if (host[0] == '[')
		return NULL;
	colon = strrchr(host, ':');
	hlen = colon ? (size_t)(colon - host) : strlen(host);
	dlen = strlen(domain);
	if (hlen <= dlen + 1 || host[hlen - dlen - 1] != '.' ||
	    strncasecmp(host + hlen - dlen, domain, dlen) != 0)
		return NULL;
	return strndup(host, hlen - dlen - 1);
}

int s3_route_parse(struct s3_route *r, const char *raw_uri, const char *host, const char *domain)
{
	const char *q, *path, *slash;
	size_t plen;
	int rc = -ENOMEM;

	memset(r, 0, sizeof(*r));
	if (!raw_uri || raw_uri[0] != '/')
		return -EINVAL;
	q = strchr(raw_uri, '?');
	plen = q ? (size_t)(q - raw_uri) : strlen(raw_uri);
	r->raw_path = strndup(raw_uri, plen);
	r->raw_query = strdup(q ? q + 1 : "");
	if (!r->raw_path || !r->raw_query)
		goto fail;
	/* A fragment never reaches a server; one that does is not a key byte. */
	if (memchr(raw_uri, '#', plen)) {
		rc = -EINVAL;
		goto fail;
	}
	rc = s3_route_query(r, r->raw_query);
	if (rc < 0)
		goto fail;

	path = r->raw_path + 1;
	r->bucket = s3_route_vhost(host, domain);
	if (r->bucket) {
		r->vhost = true;
		if (*r->bucket == '\0') {
			rc = -EINVAL;
			goto fail;
		}
	} else {
		slash = strchr(path, '/');
		if (*path == '\0')
			return 0;	/* "/": the service */
		r->bucket = gw_url_decode(path, slash ? (size_t)(slash - path) : strlen(path),
					  false, NULL);
		if (!r->bucket) {
			rc = -EINVAL;
			goto fail;
		}
		path = slash ? slash + 1 : path + strlen(path);
	}
	if (*path != '\0') {
		r->key = gw_url_decode(path, strlen(path), false, &r->key_len);
		if (!r->key) {
			rc = -EINVAL;
			goto fail;
		}
	}
	return 0;
fail:
	s3_route_release(r);
	return rc;
}

const char *s3_route_param(const struct s3_route *r, const char *name)
{
	for (size_t i = 0; i < r->nparams; i++)
		if (strcmp(r->params[i].name, name) == 0)
			return r->params[i].value;
	return NULL;
}

/* Sub-resources of S3 that we do not implement: asking for one is a 501. */
static const char *const s3_unsupported[] = {
	"accelerate", "analytics", "cors", "encryption", "intelligent-tiering", "inventory",
	"legal-hold", "lifecycle", "logging", "metrics", "notification", "object-lock",
	"ownershipControls", "policy", "policyStatus", "publicAccessBlock", "replication",
	"requestPayment", "restore", "retention", "select", "tagging", "torrent", "website",
	"attributes",
};

static bool s3_route_unsupported(const struct s3_route *r)
{
	for (size_t i = 0; i < GW_ARRAY_SIZE(s3_unsupported); i++)
		if (s3_route_param(r, s3_unsupported[i]))
			return true;
	return false;
}

#define HAS(name) (s3_route_param(r, (name)) != NULL)

enum s3_op s3_route_op(const struct s3_route *r, const char *method, bool has_copy_source)
{
	const bool get = strcmp(method, "GET") == 0, head = strcmp(method, "HEAD") == 0;
	const bool put = strcmp(method, "PUT") == 0, post = strcmp(method, "POST") == 0;
	const bool del = strcmp(method, "DELETE") == 0;

	if (!r->bucket)
		return get || head ? S3_OP_LIST_BUCKETS : S3_OP_NOT_ALLOWED;
	if (s3_route_unsupported(r))
		return S3_OP_UNSUPPORTED;
	/* Our extensions are a POST to a bucket; a GET was listed, a PUT or a
	 * DELETE made or removed the bucket. */
	if ((HAS("kvtier-lookup") || HAS("kvtier-prestage")) && !(post && !r->key))
		return S3_OP_NOT_ALLOWED;
	if (!r->key) {
		if (get) {
			if (HAS("location"))
				return S3_OP_GET_BUCKET_LOCATION;
			if (HAS("versioning"))
				return S3_OP_GET_BUCKET_VERSIONING;
			if (HAS("acl"))
				return S3_OP_GET_BUCKET_ACL;
			if (HAS("uploads"))
				return S3_OP_LIST_MULTIPART_UPLOADS;
			if (HAS("versions"))
				return S3_OP_LIST_OBJECT_VERSIONS;
			if (HAS("list-type")) {
				const char *t = s3_route_param(r, "list-type");

				return strcmp(t, "2") == 0 ? S3_OP_LIST_OBJECTS_V2 : S3_OP_UNSUPPORTED;
			}
			return S3_OP_LIST_OBJECTS;
		}
		if (head)
			return S3_OP_HEAD_BUCKET;
		if (put)
			return HAS("acl") || HAS("versioning") ? S3_OP_UNSUPPORTED
							       : S3_OP_CREATE_BUCKET;
		if (del)
			return S3_OP_DELETE_BUCKET;
		if (post) {
			if (HAS("delete"))
				return S3_OP_DELETE_OBJECTS;
			if (HAS("kvtier-lookup"))
				return S3_OP_KV_LOOKUP;
			if (HAS("kvtier-prestage"))
				return S3_OP_KV_PRESTAGE;
			return S3_OP_UNSUPPORTED;
		}
		return S3_OP_NOT_ALLOWED;
	}
	/*
	 * Buckets are never versioned: every object is version "null" (as
	 * ListObjectVersions says). Another id names no version here, and
	 * ignoring it made DELETE ?versionId=X delete the current object.
	 */
	if (HAS("versionId") && strcmp(s3_route_param(r, "versionId"), "null") != 0)
		return S3_OP_BAD_VERSION;
	if (get) {
		if (HAS("uploadId"))
			return S3_OP_LIST_PARTS;
		if (HAS("acl"))
			return S3_OP_GET_OBJECT_ACL;
		return S3_OP_GET_OBJECT;
	}
	if (head)
		return S3_OP_HEAD_OBJECT;
	if (put) {
		if (HAS("acl"))
			return S3_OP_UNSUPPORTED;
		if (HAS("uploadId") || HAS("partNumber"))
			return has_copy_source ? S3_OP_UPLOAD_PART_COPY : S3_OP_UPLOAD_PART;
		return has_copy_source ? S3_OP_COPY_OBJECT : S3_OP_PUT_OBJECT;
	}
	if (del)
		return HAS("uploadId") ? S3_OP_ABORT_MULTIPART : S3_OP_DELETE_OBJECT;
	if (post) {
		if (HAS("uploads"))
			return S3_OP_CREATE_MULTIPART;
		if (HAS("uploadId"))
			return S3_OP_COMPLETE_MULTIPART;
		return S3_OP_UNSUPPORTED;
	}
	return S3_OP_NOT_ALLOWED;
}
