/*
 * s3_error.h - S3 error codes and the one table that maps an engine errno to
 * one of them.
 */
#ifndef S3_ERROR_H
#define S3_ERROR_H

enum s3_code {
	S3_OK = 0,
	S3_ACCESS_DENIED,
	S3_BAD_DIGEST,
	S3_BUCKET_ALREADY_OWNED,
	S3_BUCKET_NOT_EMPTY,
	S3_ENTITY_TOO_LARGE,
	S3_ENTITY_TOO_SMALL,
	S3_INCOMPLETE_BODY,
	S3_INTERNAL_ERROR,
	S3_INVALID_ACCESS_KEY_ID,
	S3_INVALID_ARGUMENT,
	S3_INVALID_BUCKET_NAME,
	S3_INVALID_DIGEST,
	S3_INVALID_OBJECT_STATE,
	S3_INVALID_PART,
	S3_INVALID_PART_ORDER,
	S3_INVALID_RANGE,
	S3_INVALID_REQUEST,
	S3_INVALID_URI,
	S3_KEY_TOO_LONG,
	S3_MALFORMED_XML,
	S3_MAX_MESSAGE_LENGTH_EXCEEDED,
	S3_METADATA_TOO_LARGE,
	S3_METHOD_NOT_ALLOWED,
	S3_MISSING_CONTENT_LENGTH,
	S3_MISSING_SECURITY_HEADER,
	S3_NO_SUCH_BUCKET,
	S3_NO_SUCH_KEY,
	S3_NO_SUCH_UPLOAD,
	S3_NOT_IMPLEMENTED,
	S3_NOT_MODIFIED,
	S3_PRECONDITION_FAILED,
	S3_REQUEST_HEADER_TOO_LARGE,
	S3_REQUEST_TIME_TOO_SKEWED,
	S3_NO_MEMORY,
	S3_SIGNATURE_DOES_NOT_MATCH,
	S3_SLOW_DOWN,
	S3_AUTH_HEADER_MALFORMED,
	S3_CONTENT_SHA256_MISMATCH,
	S3_EXPIRED_PRESIGNED,
	S3_CONDITIONAL_CONFLICT,
	S3_INVALID_PART_NUMBER,
	S3_TOO_MANY_UPLOADS,
	S3_READ_ONLY,
	S3_PARTNER_UNAVAILABLE,
	S3_PARTNER_NO_BUCKET,
	S3_NO_STREAM_SLOT,
	S3_REQUEST_TIMEOUT,
	S3_NO_ROOM,
	S3_CODE_COUNT
};

/* What an -ENOENT or -EEXIST means depends on what was asked. */
enum s3_ctx {
	S3_CTX_ANY,
	S3_CTX_BUCKET,		/* the bucket itself: create, delete, head */
	S3_CTX_OBJECT,		/* an object of a bucket that exists */
	S3_CTX_UPLOAD,		/* a multipart upload */
	S3_CTX_PUT,		/* a conditional write (If-None-Match: *) */
};

/* "NoSuchKey" */
const char *s3_err_name(enum s3_code code);
unsigned s3_err_status(enum s3_code code);
/* "g4-no-bucket": what tells this row from others of its code (the access
 * log, /metrics); "" where the code says it all. */
const char *s3_err_reason(enum s3_code code);
/* A sentence for <Message>. */
const char *s3_err_message(enum s3_code code);
/* The S3 error for a negative errno from the engine. */
enum s3_code s3_err_from_errno(int rc, enum s3_ctx ctx);

#endif /* S3_ERROR_H */
