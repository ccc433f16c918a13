/*
 * s3_error.c - S3 error codes (name, HTTP status, message) and the single
 * place where an engine errno becomes one of them. Every error response the
 * gateway sends goes through s3_err_*(); nothing else spells a code.
 *
 * The engine speaks negative errnos (kvtier.h): the table s3_errno_map[]
 * gives each one an S3 code, with rows specific to what was being done
 * (an -ENOENT is NoSuchBucket when the bucket was asked for, NoSuchKey for
 * an object, NoSuchUpload for a multipart upload) before a catch-all row.
 *
 * Where one S3 code stands for causes an operator must tell apart (a 503
 * ServiceUnavailable for the partner's bucket missing, the partner down, a
 * read-only store), the row has a reason of its own: the access log and
 * /metrics (metrics.c) count by code and reason, so their label values are
 * this table's, a bounded set. No two rows have both the same code and
 * the same reason: /metrics would list one series twice.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>

#include "gw_util.h"
#include "s3_error.h"

static const struct {
	const char *name;
	unsigned status;
	const char *message;
	const char *reason;	/* NULL: the code says it all */
} s3_codes[S3_CODE_COUNT] = {
	[S3_OK] = { "OK", 200, "OK" },
	[S3_ACCESS_DENIED] = { "AccessDenied", 403, "Access Denied" },
	[S3_BAD_DIGEST] = { "BadDigest", 400,
		"The Content-MD5 or checksum you specified did not match what we received." },
	[S3_BUCKET_ALREADY_OWNED] = { "BucketAlreadyOwnedByYou", 409,
		"Your previous request to create the named bucket succeeded and you already own it." },
	[S3_BUCKET_NOT_EMPTY] = { "BucketNotEmpty", 409,
		"The bucket you tried to delete is not empty" },
	[S3_ENTITY_TOO_LARGE] = { "EntityTooLarge", 400,
		"Your proposed upload exceeds the maximum allowed size" },
	[S3_ENTITY_TOO_SMALL] = { "EntityTooSmall", 400,
		"Your proposed upload is smaller than the minimum allowed object size." },
	[S3_INCOMPLETE_BODY] = { "IncompleteBody", 400,
		"You did not provide the number of bytes specified by the Content-Length HTTP header." },
	[S3_INTERNAL_ERROR] = { "InternalError", 500,
		"We encountered an internal error. Please try again." },
	[S3_INVALID_ACCESS_KEY_ID] = { "InvalidAccessKeyId", 403,
		"The AWS Access Key Id you provided does not exist in our records." },
	[S3_INVALID_ARGUMENT] = { "InvalidArgument", 400, "Invalid Argument" },
	[S3_INVALID_BUCKET_NAME] = { "InvalidBucketName", 400,
		"The specified bucket is not valid." },
	[S3_INVALID_DIGEST] = { "InvalidDigest", 400,
		"The Content-MD5 or checksum you specified is not valid." },
	[S3_INVALID_OBJECT_STATE] = { "InvalidObjectState", 403,
		"The object is in the cold tier and is not readable until it is recalled." },
	[S3_INVALID_PART] = { "InvalidPart", 400,
		"One or more of the specified parts could not be found. The part might not have been "
		"uploaded, or the specified entity tag might not have matched the part's entity tag." },
	[S3_INVALID_PART_ORDER] = { "InvalidPartOrder", 400,
		"The list of parts was not in ascending order. Parts must be ordered by part number." },
	[S3_INVALID_RANGE] = { "InvalidRange", 416, "The requested range is not satisfiable" },
	[S3_INVALID_REQUEST] = { "InvalidRequest", 400, "Invalid Request" },
	[S3_INVALID_URI] = { "InvalidURI", 400, "Couldn't parse the specified URI." },
	[S3_KEY_TOO_LONG] = { "KeyTooLongError", 400, "Your key is too long" },
	[S3_MALFORMED_XML] = { "MalformedXML", 400,
		"The XML you provided was not well-formed or did not validate against our published schema." },
	[S3_MAX_MESSAGE_LENGTH_EXCEEDED] = { "MaxMessageLengthExceeded", 400,
		"Your request was too big." },
	[S3_METADATA_TOO_LARGE] = { "MetadataTooLarge", 400,
		"Your metadata headers exceed the maximum allowed metadata size." },
	[S3_METHOD_NOT_ALLOWED] = { "MethodNotAllowed", 405,
		"The specified method is not allowed against this resource." },
	[S3_MISSING_CONTENT_LENGTH] = { "MissingContentLength", 411,
		"You must provide the Content-Length HTTP header." },
	[S3_MISSING_SECURITY_HEADER] = { "MissingSecurityHeader", 400,
		"Your request is missing a required header." },
	[S3_NO_SUCH_BUCKET] = { "NoSuchBucket", 404, "The specified bucket does not exist" },
	[S3_NO_SUCH_KEY] = { "NoSuchKey", 404, "The specified key does not exist." },
	[S3_NO_SUCH_UPLOAD] = { "NoSuchUpload", 404,
		"The specified multipart upload does not exist. The upload ID might be invalid, or the "
		"multipart upload might have been aborted or completed." },
	[S3_NOT_IMPLEMENTED] = { "NotImplemented", 501,
		"A header or query you provided asks for something this server does not support." },
	[S3_NOT_MODIFIED] = { "NotModified", 304, "Not Modified" },
	[S3_PRECONDITION_FAILED] = { "PreconditionFailed", 412,
		"At least one of the pre-conditions you specified did not hold" },
	[S3_REQUEST_HEADER_TOO_LARGE] = { "RequestHeaderSectionTooLarge", 400,
		"Your request header section exceeds the maximum allowed size." },
	[S3_REQUEST_TIME_TOO_SKEWED] = { "RequestTimeTooSkewed", 403,
		"The difference between the request time and the current time is too large." },
	/* -ENOMEM, and a response that could not be allocated (http_send_nomem):
	 * not the store's InternalError (nothing is wrong with it or the
	 * request) nor SlowDown (the client's rate may not be the cause); a
	 * 503 with Retry-After, which clients retry, as S3 does when it is
	 * short of a resource. */
	[S3_NO_MEMORY] = { "ServiceUnavailable", 503,
		"The server is out of memory for this request now. Please retry later.",
		"no-memory" },
	[S3_SIGNATURE_DOES_NOT_MATCH] = { "SignatureDoesNotMatch", 403,
		"The request signature we calculated does not match the signature you provided. "
		"Check your key and signing method." },
	[S3_SLOW_DOWN] = { "SlowDown", 503, "Please reduce your request rate." },
	/* -ENOSPC: a SlowDown of its own, for the log and /metrics to tell a
	 * full node from one busy for a moment. */
	[S3_NO_ROOM] = { "SlowDown", 503,
		"No room: the hot tier is full and nothing more can be evicted, or the disk under "
		"the store is full. Please reduce your request rate.", "no-room" },
	[S3_AUTH_HEADER_MALFORMED] = { "AuthorizationHeaderMalformed", 400,
		"The authorization header is malformed." },
	[S3_CONTENT_SHA256_MISMATCH] = { "XAmzContentSHA256Mismatch", 400,
		"The provided 'x-amz-content-sha256' header does not match what was computed." },
	[S3_EXPIRED_PRESIGNED] = { "AccessDenied", 403, "Request has expired", "expired" },
	[S3_CONDITIONAL_CONFLICT] = { "ConditionalRequestConflict", 409,
		"A conflicting operation occurred during the conditional write. Please retry." },
	[S3_INVALID_PART_NUMBER] = { "InvalidPartNumber", 416,
		"The requested partnumber is not satisfiable" },
	/* S3 has no code for it (its limits are not per server); SlowDown with
	 * Retry-After is what every SDK already backs off on. */
	[S3_TOO_MANY_UPLOADS] = { "SlowDown", 503,
		"Too many multipart uploads are open. Complete or abort some, or retry later.",
		"too-many-uploads" },
	[S3_READ_ONLY] = { "ServiceUnavailable", 503,
		"The store is on a read-only file system: it serves reads and refuses writes.",
		"read-only" },
	[S3_PARTNER_UNAVAILABLE] = { "ServiceUnavailable", 503,
		"The object is in the cold tier, whose partner store cannot be reached now. "
		"Nothing is lost: retry later.", "g4-unreachable" },
	/* Not the store's InternalError (500: as -EIO it was one), nor the
	 * partner down: [g4] url names a bucket the partner lacks. A 503
	 * all the same, which clients retry: nothing is lost, and once the
	 * bucket is there again (or the url right) the read works. */
	[S3_PARTNER_NO_BUCKET] = { "ServiceUnavailable", 503,
		"The object is in the cold tier, and the bucket that holds it does not exist at the "
		"partner store (deleted, or misnamed in this node's [g4] url). Nothing is lost: the "
		"object is readable once the bucket is there again.", "g4-no-bucket" },
	/* A streamed upload that waited too long for a stream slot (gw.h). */
	[S3_NO_STREAM_SLOT] = { "SlowDown", 503,
		"Too many uploads are streaming at once and this one waited too long for its turn. "
		"Please retry later.", "no-stream-slot" },
	/* S3's words; here also a body that arrives too slowly (gw.h). */
	[S3_REQUEST_TIMEOUT] = { "RequestTimeout", 400,
		"Your socket connection to the server was not read from or written to within the "
		"timeout period. Idle connections will be closed." },
};

/*
 * errno -> S3, first matching row wins: a row with a specific context
 * before the S3_CTX_ANY row of the same errno.
 */
static const struct {
	int err;
	enum s3_ctx ctx;
	enum s3_code code;
} s3_errno_map[] = {
	{ ENOENT, S3_CTX_OBJECT, S3_NO_SUCH_KEY },
	{ ENOENT, S3_CTX_UPLOAD, S3_NO_SUCH_UPLOAD },
	{ ENOENT, S3_CTX_ANY, S3_NO_SUCH_BUCKET },
	{ EEXIST, S3_CTX_PUT, S3_PRECONDITION_FAILED },
	{ EEXIST, S3_CTX_ANY, S3_BUCKET_ALREADY_OWNED },
	{ ENOTEMPTY, S3_CTX_ANY, S3_BUCKET_NOT_EMPTY },
	{ ENAMETOOLONG, S3_CTX_ANY, S3_KEY_TOO_LONG },
	{ E2BIG, S3_CTX_ANY, S3_METADATA_TOO_LARGE },
	{ EINVAL, S3_CTX_BUCKET, S3_INVALID_BUCKET_NAME },
	{ EINVAL, S3_CTX_ANY, S3_INVALID_ARGUMENT },
	/* -EILSEQ: a key that is not UTF-8 (kvt_key_valid): the client's error. */
	{ EILSEQ, S3_CTX_ANY, S3_INVALID_ARGUMENT },
	/* -ENOSPC: reclaim could not make room (pinned data, unsynced sessions). */
	{ ENOSPC, S3_CTX_ANY, S3_NO_ROOM },
	{ EAGAIN, S3_CTX_ANY, S3_SLOW_DOWN },
	{ EBUSY, S3_CTX_ANY, S3_SLOW_DOWN },
	/* -ESTALE: reclaim took the version being read; a retry reads the new one. */
	{ ESTALE, S3_CTX_ANY, S3_SLOW_DOWN },
	{ ENOMEM, S3_CTX_ANY, S3_NO_MEMORY },
	/* -EROFS: the store's file system went read-only (kvt_store_readonly). */
	{ EROFS, S3_CTX_ANY, S3_READ_ONLY },
	/* -EHOSTUNREACH: a cold object's recall found G4 not answering. */
	{ EHOSTUNREACH, S3_CTX_ANY, S3_PARTNER_UNAVAILABLE },
	/* -ENXIO: a cold object's recall found G4's bucket missing (NoSuchBucket). */
	{ ENXIO, S3_CTX_ANY, S3_PARTNER_NO_BUCKET },
	/* -ENODATA: the object is only in G4 (cold) until it is recalled. */
	{ ENODATA, S3_CTX_ANY, S3_INVALID_OBJECT_STATE },
	{ EACCES, S3_CTX_ANY, S3_ACCESS_DENIED },
	{ EPERM, S3_CTX_ANY, S3_ACCESS_DENIED },
	{ EFBIG, S3_CTX_ANY, S3_ENTITY_TOO_LARGE },
	{ EIO, S3_CTX_ANY, S3_INTERNAL_ERROR },
	/* -EUCLEAN: the catalog is damaged (the log says how). */
	{ EUCLEAN, S3_CTX_ANY, S3_INTERNAL_ERROR },
};

const char *s3_err_name(enum s3_code code)
{
	return code < S3_CODE_COUNT ? s3_codes[code].name : "InternalError";
}

unsigned s3_err_status(enum s3_code code)
{
	return code < S3_CODE_COUNT ? s3_codes[code].status : 500;
}

const char *s3_err_reason(enum s3_code code)
{
	return code < S3_CODE_COUNT && s3_codes[code].reason ? s3_codes[code].reason : "";
}

const char *s3_err_message(enum s3_code code)
{
	return code < S3_CODE_COUNT ? s3_codes[code].message : "Internal error";
}

enum s3_code s3_err_from_errno(int rc, enum s3_ctx ctx)
{
	int err = rc < 0 ? -rc : rc;

	for (size_t i = 0; i < GW_ARRAY_SIZE(s3_errno_map); i++) {
		if (s3_errno_map[i].err != err)
			continue;
		if (s3_errno_map[i].ctx == ctx || s3_errno_map[i].ctx == S3_CTX_ANY)
			return s3_errno_map[i].code;
	}
	return S3_INTERNAL_ERROR;
}
