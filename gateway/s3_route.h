/*
 * s3_route.h - from a request line and its Host header to a bucket, a key,
 * query parameters and an S3 operation. Pure functions: the fuzz target
 * fuzz_gw_route drives them with raw bytes.
 */
#ifndef S3_ROUTE_H
#define S3_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

enum s3_op {
	S3_OP_UNKNOWN,		/* routing failed before an operation was known */
	S3_OP_UNSUPPORTED,	/* a sub-resource we do not implement: 501 */
	S3_OP_NOT_ALLOWED,	/* a method the resource does not take: 405 */
	S3_OP_BAD_VERSION,	/* ?versionId= other than "null" on an object: 400 */
	S3_OP_HEALTH,
	S3_OP_METRICS,
	S3_OP_LIST_BUCKETS,
	S3_OP_CREATE_BUCKET,
	S3_OP_HEAD_BUCKET,
	S3_OP_DELETE_BUCKET,
	S3_OP_GET_BUCKET_LOCATION,
	S3_OP_GET_BUCKET_VERSIONING,
	S3_OP_GET_BUCKET_ACL,
	S3_OP_LIST_OBJECTS,
	S3_OP_LIST_OBJECTS_V2,
	S3_OP_LIST_OBJECT_VERSIONS,
	S3_OP_LIST_MULTIPART_UPLOADS,
	S3_OP_DELETE_OBJECTS,
	S3_OP_PUT_OBJECT,
	S3_OP_COPY_OBJECT,
	S3_OP_GET_OBJECT,
	S3_OP_HEAD_OBJECT,
	S3_OP_DELETE_OBJECT,
	S3_OP_GET_OBJECT_ACL,
	S3_OP_CREATE_MULTIPART,
	S3_OP_UPLOAD_PART,
	S3_OP_UPLOAD_PART_COPY,
	S3_OP_COMPLETE_MULTIPART,
	S3_OP_ABORT_MULTIPART,
	S3_OP_LIST_PARTS,
	S3_OP_KV_LOOKUP,
	S3_OP_KV_PRESTAGE,
	S3_OP_COUNT
};

/* One query parameter, decoded ('+' is a space, as in form encoding). */
struct s3_param {
	char *name;
	char *value;		/* "" for "?acl" */
};

#define S3_ROUTE_MAX_PARAMS 64

struct s3_route {
	char *bucket;		/* NULL: the service (ListBuckets) */
	char *key;		/* NULL: the bucket itself; decoded once, '//' kept */
	size_t key_len;
	char *raw_path;		/* as on the wire, before '?' */
	char *raw_query;	/* as on the wire, after '?'; "" if none */
	struct s3_param *params;
	size_t nparams;
	bool vhost;		/* the bucket came from the Host header */
};

/*
 * Splits raw_uri ("/bucket/key?x=y") with host ("bucket.s3.local:9000")
 * into r. domain: the name under which Host names a bucket
 * (virtual-host style); NULL or "" turns that off. Returns 0, or -EINVAL for
 * a URI that cannot be one of ours (not starting with '/', a bad
 * %-sequence, %00, too many parameters), -ENOMEM.
 */
int s3_route_parse(struct s3_route *r, const char *raw_uri, const char *host, const char *domain);
void s3_route_release(struct s3_route *r);

/* The value of query parameter name, or NULL if absent. */
const char *s3_route_param(const struct s3_route *r, const char *name);

/* The operation of method on r; has_copy_source: x-amz-copy-source was sent. */
enum s3_op s3_route_op(const struct s3_route *r, const char *method, bool has_copy_source);

/* "PutObject", for logs and metrics. */
const char *s3_op_name(enum s3_op op);

#endif /* S3_ROUTE_H */
