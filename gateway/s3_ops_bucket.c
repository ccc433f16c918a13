/*
 * s3_ops_bucket.c - the service and bucket operations: ListBuckets,
 * CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation/Versioning/Acl,
 * the three listings (ListObjects v1, ListObjectsV2, ListObjectVersions) and
 * DeleteObjects.
 *
 * Listings are one engine call each, kvt_object_list(), which pages in key
 * order and rolls keys up into common prefixes; this file only maps S3's
 * three dialects of paging (marker, continuation-token, key-marker) onto it.
 * Our buckets are unversioned: ListObjectVersions lists each object once,
 * as its only and latest version, with VersionId "null", which is what S3
 * answers for a bucket that never had versioning.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "log.h"
#include "s3_xml.h"

static void s3_owner(struct gw_buf *b, const struct gw_req *rq, const char *elem)
{
	xml_open(b, elem);
	xml_elem(b, "ID", rq->user->access);
	xml_elem(b, "DisplayName", rq->user->access);
	xml_close(b, elem);
}

/* ---- ListBuckets -------------------------------------------------------- */

struct s3_bucket_walk {
	struct gw_req *rq;
	struct gw_buf *b;
};

static int s3_bucket_row(void *arg, const char *name, int64_t ctime_ns)
{
	struct s3_bucket_walk *w = arg;
	char date[40];

	if (!auth_user_may(w->rq->user, name))
		return 0;
	gw_time_iso(date, sizeof(date), ctime_ns);
	xml_open(w->b, "Bucket");
	xml_elem(w->b, "Name", name);
	xml_elem(w->b, "CreationDate", date);
	xml_close(w->b, "Bucket");
	return 0;
}

void s3_op_list_buckets(struct gw_req *rq)
{
	struct gw_buf b;
	struct s3_bucket_walk w = { .rq = rq, .b = &b };
	int rc;

	gw_buf_init(&b);
	xml_begin(&b, "ListAllMyBucketsResult");
	s3_owner(&b, rq, "Owner");
	xml_open(&b, "Buckets");
	rc = kvt_bucket_list(rq->srv->st, s3_bucket_row, &w);
	if (rc < 0) {
		gw_buf_release(&b);
		http_send_errno(rq, rc, S3_CTX_ANY);
		return;
	}
	xml_close(&b, "Buckets");
	xml_close(&b, "ListAllMyBucketsResult");
	http_send_xml(rq, 200, &b);
}

/* ---- bucket ------------------------------------------------------------- */

void s3_op_create_bucket(struct gw_req *rq)
{
	struct MHD_Response *resp;
	char loc[80];
	int rc;

	/* An optional <CreateBucketConfiguration>: any region is ours. */
	if (rq->body.len > 0) {
		enum s3_code code = xml_parse_root(rq->body.data, rq->body.len,
						   "CreateBucketConfiguration");

		if (code != S3_OK) {
			http_send_error(rq, code, NULL);
			return;
		}
	}
	if (!kvt_bucket_name_valid(rq->route.bucket)) {
		http_send_error(rq, S3_INVALID_BUCKET_NAME, NULL);
		return;
	}
	rc = kvt_bucket_create(rq->srv->st, rq->route.bucket);
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_BUCKET);
		return;
	}
	resp = http_response_empty();
	if (resp) {
		snprintf(loc, sizeof(loc), "/%s", rq->route.bucket);
		MHD_add_response_header(resp, "Location", loc);
	}
	http_send(rq, 200, resp);
}

void s3_op_head_bucket(struct gw_req *rq)
{
	int rc = kvt_bucket_exists(rq->srv->st, rq->route.bucket);
	struct MHD_Response *resp;

	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_BUCKET);
		return;
	}
	resp = http_response_empty();
	if (resp)
		MHD_add_response_header(resp, "x-amz-bucket-region", rq->srv->opt.region);
	http_send(rq, 200, resp);
}

void s3_op_delete_bucket(struct gw_req *rq)
{
	char prefix[KVT_BUCKET_MAX + 2];
	int rc = kvt_bucket_delete(rq->srv->st, rq->route.bucket);

	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_BUCKET);
		return;
	}
	/* Uploads never completed die with their bucket, as in S3. */
	snprintf(prefix, sizeof(prefix), "%s/", rq->route.bucket);
	s3_uploads_purge(rq->srv, prefix);
	http_send_empty(rq, 204);
}

void s3_op_get_bucket_location(struct gw_req *rq)
{
	struct gw_buf b;

	if (!s3_bucket_ok(rq, rq->route.bucket))
		return;
	gw_buf_init(&b);
	xml_begin(&b, "LocationConstraint");
	/* us-east-1 is spelt as an empty constraint, as S3 does. */
	if (strcmp(rq->srv->opt.region, "us-east-1") != 0)
		xml_escape(&b, rq->srv->opt.region);
	xml_close(&b, "LocationConstraint");
	http_send_xml(rq, 200, &b);
}

void s3_op_get_bucket_versioning(struct gw_req *rq)
{
	struct gw_buf b;

	if (!s3_bucket_ok(rq, rq->route.bucket))
		return;
	gw_buf_init(&b);
	xml_begin(&b, "VersioningConfiguration");
	xml_close(&b, "VersioningConfiguration");
	http_send_xml(rq, 200, &b);
}

void s3_op_get_acl(struct gw_req *rq)
{
	struct gw_buf b;

	if (!s3_bucket_ok(rq, rq->route.bucket))
		return;
	if (rq->route.key) {
		struct kvt_object *o = NULL;
		int rc = kvt_object_head(rq->srv->st, rq->route.bucket, rq->route.key, &o);

		kvt_object_free(o);
		if (rc < 0) {
			http_send_errno(rq, rc, S3_CTX_OBJECT);
			return;
		}
	}
	/* No ACLs here: the owner has full control, nobody else anything. */
	gw_buf_init(&b);
	xml_begin(&b, "AccessControlPolicy");
	s3_owner(&b, rq, "Owner");
	gw_buf_puts(&b, "<AccessControlList><Grant><Grantee "
			"xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
			"xsi:type=\"CanonicalUser\">");
	xml_elem(&b, "ID", rq->user->access);
	xml_elem(&b, "DisplayName", rq->user->access);
	gw_buf_puts(&b, "</Grantee><Permission>FULL_CONTROL</Permission></Grant>"
			"</AccessControlList>");
	xml_close(&b, "AccessControlPolicy");
	http_send_xml(rq, 200, &b);
}

/* ---- listings ----------------------------------------------------------- */

/* max-keys: 0 to 1000 (more is capped to 1000, as S3). */
static bool s3_max_keys(struct gw_req *rq, const char *name, unsigned *out)
{
	const char *v = s3_route_param(&rq->route, name);
	char *end;
	long n;

	*out = 1000;
	if (!v)
		return true;
	n = strtol(v, &end, 10);
	if (*v == '\0' || *end || n < 0) {
		char msg[96];

		snprintf(msg, sizeof(msg), "Provided %s not an integer or within integer range", name);
		http_send_error(rq, S3_INVALID_ARGUMENT, msg);
		return false;
	}
	*out = n > 1000 ? 1000 : (unsigned)n;
	return true;
}

void s3_op_list_objects(struct gw_req *rq)
{
	const struct s3_route *r = &rq->route;
	const bool v2 = rq->op == S3_OP_LIST_OBJECTS_V2;
	const bool versions = rq->op == S3_OP_LIST_OBJECT_VERSIONS;
	const char *prefix = s3_route_param(r, "prefix");
	const char *delim = s3_route_param(r, "delimiter");
	const char *enc = s3_route_param(r, "encoding-type");
	const char *token = v2 ? s3_route_param(r, "continuation-token") : NULL;
	const char *start_after = v2 ? s3_route_param(r, "start-after")
				     : s3_route_param(r, versions ? "key-marker" : "marker");
	const char *fetch_owner = s3_route_param(r, "fetch-owner");
	const bool owner = !v2 || (fetch_owner && strcmp(fetch_owner, "true") == 0);
	struct kvt_list_opts lo = { 0 };
	struct kvt_list *l = NULL;
	unsigned max_keys;
	bool url, truncated;
	struct gw_buf b;
	int rc;

	if (enc && strcmp(enc, "url") != 0) {
		http_send_error(rq, S3_INVALID_ARGUMENT, "Invalid Encoding Method specified in Request");
		return;
	}
	url = enc != NULL;
	if (!s3_max_keys(rq, versions ? "max-keys" : "max-keys", &max_keys))
		return;
	if (token && *token == '\0') {
		http_send_error(rq, S3_INVALID_ARGUMENT,
				"The continuation token provided is incorrect");
		return;
	}
	lo.prefix = prefix;
	lo.delimiter = delim && *delim ? delim : NULL;
	lo.start_after = start_after;
	lo.continuation = token;
	lo.limit = max_keys;
	rc = kvt_object_list(rq->srv->st, r->bucket, &lo, &l);
	if (rc == -EINVAL && token) {
		http_send_error(rq, S3_INVALID_ARGUMENT,
				"The continuation token provided is incorrect");
		return;
	}
	if (rc < 0) {
		http_send_errno(rq, rc, S3_CTX_BUCKET);
		return;
	}
	/* max-keys=0 asks for nothing and gets nothing, not a page to follow. */
	truncated = l->truncated && max_keys > 0;

	gw_buf_init(&b);
	xml_begin(&b, versions ? "ListVersionsResult" : "ListBucketResult");
	xml_elem(&b, "Name", r->bucket);
	xml_elem_key(&b, "Prefix", prefix ? prefix : "", url);
	if (versions) {
		xml_elem_key(&b, "KeyMarker", start_after ? start_after : "", url);
		xml_elem(&b, "VersionIdMarker", s3_route_param(r, "version-id-marker"));
	} else if (v2) {
		if (token)
			xml_elem(&b, "ContinuationToken", token);
		if (start_after)
			xml_elem_key(&b, "StartAfter", start_after, url);
		xml_elemf(&b, "KeyCount", "%zu", l->nobjects + l->nprefixes);
	} else {
		xml_elem_key(&b, "Marker", start_after ? start_after : "", url);
	}
	xml_elemf(&b, "MaxKeys", "%u", max_keys);
	if (lo.delimiter)
		xml_elem_key(&b, "Delimiter", lo.delimiter, url);
	if (url)
		xml_elem(&b, "EncodingType", "url");
	xml_elem(&b, "IsTruncated", truncated ? "true" : "false");
	if (truncated && l->next_marker) {
		if (versions) {
			xml_elem_key(&b, "NextKeyMarker", l->next_marker, url);
			xml_elem(&b, "NextVersionIdMarker", "null");
		} else if (v2) {
			xml_elem(&b, "NextContinuationToken", l->next_continuation);
		} else {
			xml_elem_key(&b, "NextMarker", l->next_marker, url);
		}
	}
	for (size_t i = 0; i < l->nobjects; i++) {
		const struct kvt_object *o = l->objects[i];
		char date[40];

		gw_time_iso(date, sizeof(date), o->mtime_ns);
		xml_open(&b, versions ? "Version" : "Contents");
		xml_elem_key(&b, "Key", o->key, url);
		if (versions) {
			xml_elem(&b, "VersionId", "null");
			xml_elem(&b, "IsLatest", "true");
		}
		xml_elem(&b, "LastModified", date);
		xml_elem(&b, "ETag", o->etag);
		xml_elemf(&b, "Size", "%llu", (unsigned long long)o->size);
		xml_elem(&b, "StorageClass", "STANDARD");
		if (owner)
			s3_owner(&b, rq, "Owner");
		xml_close(&b, versions ? "Version" : "Contents");
	}
	for (size_t i = 0; i < l->nprefixes; i++) {
		xml_open(&b, "CommonPrefixes");
		xml_elem_key(&b, "Prefix", l->prefixes[i], url);
		xml_close(&b, "CommonPrefixes");
	}
	xml_close(&b, versions ? "ListVersionsResult" : "ListBucketResult");
	kvt_list_free(l);
	http_send_xml(rq, 200, &b);
}

/* ---- DeleteObjects ------------------------------------------------------ */

void s3_op_delete_objects(struct gw_req *rq)
{
	struct xml_keylist keys;
	struct gw_buf b;
	enum s3_code code;

	if (!s3_bucket_ok(rq, rq->route.bucket))
		return;
	code = xml_parse_delete(rq->body.data, rq->body.len, &keys);
	if (code != S3_OK) {
		http_send_error(rq, code, NULL);
		return;
	}
	gw_buf_init(&b);
	xml_begin(&b, "DeleteResult");
	for (size_t i = 0; i < keys.n; i++) {
		const char *version = keys.versions[i], *etag = keys.etags[i];
		int rc;

		if (version && strcmp(version, "null") != 0) {
			/* Never versioned: no such version (s3_route_op). */
			xml_open(&b, "Error");
			xml_elem(&b, "Key", keys.keys[i]);
			xml_elem(&b, "VersionId", version);
			xml_elem(&b, "Code", s3_err_name(S3_INVALID_ARGUMENT));
			xml_elem(&b, "Message", "Invalid version id specified");
			xml_close(&b, "Error");
			continue;
		}
		rc = s3_delete_if(rq, keys.keys[i], etag);
		if (rc == 0 || (rc == -ENOENT && !etag)) {
			/* A key that was not there is deleted all the same (S3). */
			if (!keys.quiet) {
				xml_open(&b, "Deleted");
				xml_elem(&b, "Key", keys.keys[i]);
				if (version)
					xml_elem(&b, "VersionId", version);
				xml_close(&b, "Deleted");
			}
			continue;
		}
		code = rc == -ECANCELED ? S3_PRECONDITION_FAILED
		       : rc == -ENOENT ? S3_NO_SUCH_KEY : s3_err_from_errno(rc, S3_CTX_OBJECT);
		xml_open(&b, "Error");
		xml_elem(&b, "Key", keys.keys[i]);
		xml_elem(&b, "Code", s3_err_name(code));
		xml_elem(&b, "Message", s3_err_message(code));
		xml_close(&b, "Error");
	}
	xml_close(&b, "DeleteResult");
	xml_keylist_release(&keys);
	http_send_xml(rq, 200, &b);
}
