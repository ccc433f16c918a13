/*
 * gw.h - what the gateway's files share: the server, one request, the HTTP
 * helpers (gw_http.c) and the S3 operations (s3_ops_*.c).
 *
 * A request's life, with the function that moves it on:
 *
 *   uri log callback (http_uri_cb): a gw_req is made, the raw URI kept
 *     -> first access call (http_begin): route, authenticate, op->start
 *        (a PUT opens its writer here; an error is answered at once and the
 *        body is never read)
 *     -> access calls with data (http_body): aws-chunked decoding, digests,
 *        into the writer or a bounded buffer; errors are remembered and the
 *        rest of the body is drained
 *     -> last access call (http_end): digests checked, op->finish answers
 *     -> completion callback (http_completed): access log, metrics; a writer
 *        still open (client gone, timeout, error) is aborted: nothing appears
 */
#ifndef GW_H
#define GW_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gw_util.h"
#include "kvtier.h"
#include "s3_auth.h"
#include "s3_error.h"
#include "s3_route.h"

#define GW_DEFAULT_LISTEN "127.0.0.1:9000"
#define GW_DEFAULT_REGION "us-east-1"
#define GW_DEFAULT_DOMAIN "localhost"
#define GW_UPLOADS_BUCKET ".uploads"	/* internal bucket of multipart parts */
#define GW_MAX_HEADER_BYTES (16 * 1024)
#define GW_CONN_MEMORY (64 * 1024)	/* libmicrohttpd's pool per connection */
/*
 * Upload bodies up to this size are staged in the request (rq->body) and
 * reach the writer at the end; larger ones stream from the first byte past
 * it. The engine's writer holds one extent payload (1 MiB) in memory
 * before it writes anyway, so staging that much holds no more of the body;
 * what it saves is the writer's I/O context (4 MiB of registered, pinned
 * buffers) for the whole time a client takes to send: 64 slow 256 KiB PUTs
 * held 64 of them.
 */
#define GW_STAGE_MAX (1u << 20)
/*
 * Worker lanes (gw_work.c): threads of the read lane and of the write lane
 * per libmicrohttpd polling thread, and how many uploads may stream into
 * writers at once (each writer holds a 4 MiB engine I/O context from its
 * first write to its commit: 16 of them are 64 MiB, against the 256 MiB
 * the whole gateway may use with 64 connections).
 */
#define GW_READ_WORKERS_PER_THREAD 1
#define GW_WRITE_WORKERS_PER_THREAD 2
#define GW_RECALL_WORKERS_PER_THREAD 2
#define GW_STREAMS_MAX 16
/*
 * A stream slot is not held for ever, nor waited for for ever: libmicrohttpd's
 * --timeout sees only silence, and neither a suspended connection (it is not
 * timed at all) nor a client that trickles a byte a second. Sixteen such
 * clients held every slot, and every other large upload waited for good.
 *
 * A body that waits for a slot longer than half of --timeout is refused 503
 * SlowDown (gw_work_expire, from the main thread's tick: within a second
 * more), before its client's own idle timeout, which SDKs set like ours
 * (botocore: 60 s), gives up without an answer.
 *
 * A body past its stage (holding a slot, or drained after an error) must
 * bring GW_STREAM_MIN_RATE bytes a second, judged over each --timeout
 * seconds from when its connection last resumed (a wait for the write lane
 * or for a slot is not the client's); a slower one is cut, its slot freed
 * (http_too_slow). 64 KiB/s: sixteen clients must send 8 Mbit/s between
 * them to keep every slot, and an upload of a KV cache from a client that
 * slow is not one a tier is for. With --timeout 0 (never), neither applies.
 */
#define GW_STREAM_MIN_RATE (64u << 10)
/*
 * The write lane's nice value (gw_work.c); 0: off. At 5, an ad-hoc probe
 * gave lookups a p50 of 0.15 ms once and 5 ms in a rerun under 16 streaming
 * 32 MiB uploads, while a single PUT's p50 rose from 1.4 to 8-20 ms when
 * other processes kept the 2 CPUs busy: a gateway on a shared node must not
 * yield its writes to them. Off until a quiet machine says otherwise.
 */
#define GW_WRITE_NICE 0
#define GW_TRIM_SLACK (32u << 20)	/* free heap kept between malloc_trim()s */
#define GW_MAX_XML_BODY (2u << 20)	/* DeleteObjects of 1000 long keys fits */
#define GW_MAX_LOOKUP_BODY (8u << 20)
#define GW_MIN_PART_SIZE (5u << 20)	/* S3: every part but the last */
#define GW_MAX_PART_NUMBER 10000
/* Stored standard headers live among the metadata under a name no HTTP
 * header can have (':' is not a token character), so no x-amz-meta-* name
 * can collide with them. */
#define GW_SYSMETA_PREFIX ":"
/*
 * A multipart object's part sizes, for GET ?partNumber=N: runs of
 * "SIZE*COUNT" joined by ',' ("8388608*12,1234*1"). Kept only while its
 * ETag says "-N" parts with the same N. GW_PARTS_META_MAX only guards
 * against a bug: 10000 parts of all different sizes take at most 230000
 * bytes (20 digits, "*1,"), 13 per part of up to 5 GiB; at 5 MiB or more a
 * part, that is under 3 bytes of metadata per MiB of object, so HEAD and
 * GET stay cheap. Not user metadata, it does not count against
 * KVT_META_MAX (GW_SYSMETA_PREFIX), so the object can still be rewritten
 * through the mount or copied by kvtier cp.
 */
#define GW_PARTS_META GW_SYSMETA_PREFIX "parts"
#define GW_PARTS_META_MAX (256u << 10)

struct gw_options {
	const char *config;		/* -c */
	const char *listen;		/* --listen ADDR:PORT */
	const char *credentials;	/* --credentials FILE */
	const char *domain;		/* --domain: virtual-host style under it */
	const char *region;		/* --region, for GetBucketLocation */
	const char *access_log;		/* --access-log FILE, "-" = stdout */
	const char *tls_cert;		/* --tls-cert PEM: serve HTTPS */
	const char *tls_key;		/* --tls-key PEM */
	const char *metrics_listen;	/* --metrics-listen: /metrics, /health apart */
	unsigned threads;		/* --threads */
	unsigned timeout;		/* --timeout seconds of idle connection */
	unsigned max_connections;
	uint64_t max_object;		/* largest single PUT */
	unsigned max_uploads;		/* open multipart uploads, in all */
	unsigned max_uploads_bucket;	/* ... and in one bucket */
	uint64_t upload_max_age;	/* seconds; older uploads are swept away */
	uint64_t min_part;		/* smallest part but the last */
	bool foreground;
	bool verbose;
};

/*
 * Open multipart uploads, counted per bucket and in all, to refuse a new one
 * past the limits (s3_uploads_*, s3_ops_multipart.c). Counted at startup from
 * .uploads and kept by this process: +1 at Create, -1 for each upload's meta
 * object this process deletes (Complete, Abort, a bucket's deletion, the
 * sweep of stale uploads). Another gateway on the same store counts its own.
 */
struct gw_upload_count {
	char bucket[KVT_BUCKET_MAX + 1];
	unsigned n;
};

struct gw_uploads {
	pthread_mutex_t lock;
	unsigned total;
	struct gw_upload_count *v;	/* buckets with n > 0, unordered */
	size_t nv, cap;
};

/* ---- gw_work.c: the worker lanes ---------------------------------------- */

enum gw_lane {
	GW_LANE_INLINE,			/* on the polling thread: cannot block */
	GW_LANE_READ,			/* large GET bodies */
	GW_LANE_WRITE,			/* catalog and hot-tier writes */
	GW_LANE_RECALL,			/* GETs of cold objects: they wait on G4 */
	GW_LANE_COUNT,
};

/* One piece of blocking work for a suspended connection. */
struct gw_job {
	struct gw_job *next;
	void (*run)(struct gw_job *j);
	struct MHD_Connection *conn;	/* resumed once run returns */
	bool *has_slot;			/* gw_work_submit_streaming: the request's flag */
	int64_t slot_deadline_ns;	/* ... and when its wait for a slot ends (monotonic) */
	bool no_slot;			/* the wait ended without a slot: run was not called */
	bool done;			/* atomic: set by the worker before the resume */
};

struct gw_work;

/* A streamed body waits at most slot_wait_ns for a stream slot (gw_work_expire); 0: for ever. */
int gw_work_new(unsigned nread, unsigned nwrite, unsigned nrecall, unsigned streams,
		int64_t slot_wait_ns, struct gw_work **out);
/* Runs what is queued, resumes every connection, joins the workers. */
void gw_work_stop(struct gw_work *w);
void gw_work_free(struct gw_work *w);
/* True without lanes (w NULL) or once stopping: run the work where you are. */
bool gw_work_stopping(const struct gw_work *w);
/*
 * Suspends j->conn and queues j on lane; false (nothing done) when there are
 * no lanes or they are stopping: the caller runs the work itself.
 */
bool gw_work_submit(struct gw_work *w, enum gw_lane lane, struct gw_job *j);
/* The same on the write lane for a streamed upload, which needs a stream
 * slot first (*has_slot: the request holds one, set when it gets it). */
bool gw_work_submit_streaming(struct gw_work *w, struct gw_job *j, bool *has_slot);
/* Gives the request's stream slot back (to the first waiter); accepts none. */
void gw_work_slot_put(struct gw_work *w, bool *has_slot);
/* Stream slots held, and flushes waiting for one, now (for /metrics: it
 * takes the slot lock and walks the waiters; no request path calls it). */
void gw_work_slots(struct gw_work *w, unsigned *held, unsigned *waiting);
/*
 * Resumes, without running them, the jobs that have waited for a slot past
 * their deadline, with j->no_slot set; called each second by the main thread.
 */
void gw_work_expire(struct gw_work *w);

struct gw_server {
	struct gw_options opt;
	struct kvt_config cfg;
	struct kvt_store *st;
	/*
	 * The users. SIGHUP swaps in a newly read set; requests in flight keep
	 * pointers into the old one, so retired sets stay allocated (a few
	 * hundred bytes a reload) until exit. Read with gw_creds().
	 */
	struct auth_creds *creds;
	struct auth_creds **retired;
	size_t nretired;
	struct MHD_Daemon *mhd;
	struct MHD_Daemon *metrics_mhd;	/* only with --metrics-listen */
	uint64_t reqid_base;
	uint64_t reqid_seq;		/* atomic */
	int access_fd;			/* -1: no access log */
	unsigned prestaging;		/* atomic: prestage threads still running */
	int stopping;			/* atomic: shutting down; prestages start nothing more */
	struct gw_uploads uploads;
	struct gw_work *work;		/* NULL: everything inline (the fuzz harness) */
	uint64_t cached_read_max;	/* the store's: GETs up to it are read inline */
	/* Open connections, for the deadline of a request head (http_conn_cb). */
	pthread_mutex_t conns_lock;
	struct gw_conn *conns;
};

static inline const struct auth_creds *gw_creds(struct gw_server *srv)
{
	return __atomic_load_n(&srv->creds, __ATOMIC_ACQUIRE);
}

enum gw_body_mode {
	GW_BODY_DISCARD,		/* an operation without a body: ignored */
	GW_BODY_BUFFER,			/* small XML or key lists, up to body_max */
	GW_BODY_WRITER,			/* object bytes, into rq->writer */
};

struct gw_req;

/* One S3 operation: start runs before the body (may answer), finish after. */
struct gw_op_def {
	void (*start)(struct gw_req *rq);
	void (*finish)(struct gw_req *rq);
	size_t body_max;		/* GW_BODY_BUFFER when non-zero */
	enum gw_lane lane;		/* where the end of the request (finish) runs */
};

struct gw_req {
	struct gw_server *srv;
	struct MHD_Connection *conn;
	char *raw_uri;			/* owned */
	char id[17];			/* x-amz-request-id */
	int64_t start_ns;		/* monotonic */
	const char *method;		/* MHD's, valid for the request */
	enum s3_op op;
	const struct gw_op_def *def;
	struct s3_route route;
	struct auth_hdr *hdrs;		/* owned array; strings are MHD's */
	size_t nhdrs;
	struct auth_result auth;
	const struct auth_user *user;
	bool began;
	bool queued;			/* a response is queued */
	bool ended;			/* http_end ran */
	unsigned status;
	enum s3_code err_code;		/* the S3 error answered (access log, /metrics) */
	uint64_t bytes_in, bytes_out;

	/* the body */
	enum gw_body_mode body_mode;
	size_t body_max;
	struct gw_buf body;		/* GW_BODY_BUFFER; GW_BODY_WRITER: staged bytes */
	bool streaming;			/* GW_BODY_WRITER: past GW_STAGE_MAX, to the writer */
	bool chunked;
	struct chunk_dec chunk;
	void *payload_sha;		/* EVP_MD_CTX, signed payloads */
	void *md5;			/* EVP_MD_CTX, when Content-MD5 was sent */
	uint8_t want_md5[16];
	struct gw_cks cks;		/* x-amz-checksum-* or x-amz-trailer */
	char cks_header[64];		/* "x-amz-checksum-crc32" */
	char want_cks[96];		/* its value; "" until a trailer brings it */
	bool cks_in_trailer;
	uint64_t payload_len;
	int64_t decoded_len;		/* x-amz-decoded-content-length, or -1 */
	enum s3_code body_err;
	char body_msg[160];

	/* what operations keep between start and finish */
	struct kvt_writer *writer;
	struct kvt_put_opts put;
	struct kvt_meta *meta;		/* owned, with its strings */
	size_t nmeta;
	char *part_key;			/* UploadPart: the part's key in .uploads */
	char *content_type;
	/* A conditional write's If-Match / If-None-Match (MHD's strings) and
	 * what the commit's check found (s3_write_cond_*). */
	const char *if_match, *if_none_match;
	enum s3_code cond_code;
	const char *err_hdr_name;	/* one more header on an error (Content-Range) */
	char err_hdr_value[64];

	/* work handed to a lane (gw_work.c) while the connection is suspended */
	struct gw_job job;
	enum { GW_JOB_NONE, GW_JOB_END, GW_JOB_FINISH, GW_JOB_FLUSH } job_kind;
	enum s3_code job_code;		/* GW_JOB_FLUSH: how the write went */
	bool in_worker;			/* finish runs on a lane: responses are kept */
	enum gw_lane defer_lane;	/* finish asked to run again on this lane */
	bool has_slot;			/* holds a stream slot (gw_work_submit_streaming) */
	struct MHD_Response *kept;	/* made on a lane, queued by the polling thread */
	unsigned kept_status;
	struct kvt_reader *reader;	/* GET: opened inline, read on a lane */
	int64_t rate_ns;		/* the body's rate is judged from here; 0: not */
	uint64_t rate_bytes;		/* bytes_in then (http_too_slow) */
};

/* ---- gw_http.c ---------------------------------------------------------- */

extern const struct gw_op_def s3_op_defs[S3_OP_COUNT];

/* The MHD callbacks. */
void *http_uri_cb(void *cls, const char *uri, struct MHD_Connection *conn);
enum MHD_Result http_access_cb(void *cls, struct MHD_Connection *conn, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls);
void http_completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
		       enum MHD_RequestTerminationCode toe);
void http_conn_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
		  enum MHD_ConnectionNotificationCode toe);
/*
 * Closes the connections whose request head has not come whole within
 * --timeout of their accept or of the end of their previous request;
 * called each second by the main thread.
 */
void http_cut_slow_heads(struct gw_server *srv);

/* A request header (case-insensitive), or NULL. */
const char *http_hdr(const struct gw_req *rq, const char *name);
/* Adds x-amz-request-id and friends, queues resp with status, destroys it;
 * resp NULL (it could not be allocated) is http_send_nomem(). */
void http_send(struct gw_req *rq, unsigned status, struct MHD_Response *resp);
/* The response could not be allocated: 503 ServiceUnavailable no-memory. */
void http_send_nomem(struct gw_req *rq);
/* Waits for background prestages (s3_ops_kv.c) before the store closes. */
void gw_prestage_wait(struct gw_server *srv);
/* Body b (ownership taken) with Content-Type ctype. */
void http_send_buf(struct gw_req *rq, unsigned status, const char *ctype, struct gw_buf *b);
void http_send_xml(struct gw_req *rq, unsigned status, struct gw_buf *b);
void http_send_empty(struct gw_req *rq, unsigned status);
/* An S3 XML error; msg NULL for the code's own message. */
void http_send_error(struct gw_req *rq, enum s3_code code, const char *msg);
/* An engine errno as an S3 error. */
void http_send_errno(struct gw_req *rq, int rc, enum s3_ctx ctx);
/* After a failed object or upload call: NoSuchBucket if the bucket is gone. */
void http_send_errno_obj(struct gw_req *rq, const char *bucket, int rc, enum s3_ctx ctx);
/* A response without body, with Content-Length 0; NULL without memory. */
struct MHD_Response *http_response_empty(void);
/*
 * Called by op->finish on the polling thread: true when finish is to return
 * at once and run again on lane (rq->in_worker then true); false when it
 * should go on where it is (already on a lane, or no lanes).
 */
bool http_defer(struct gw_req *rq, enum gw_lane lane);
/* Sets the body's destination to a writer opened by op->start. */
void http_body_to_writer(struct gw_req *rq, struct kvt_writer *w);
/* The ETag a Content-MD5 header promises; 0 without one (gw_http.c). */
int http_content_md5_etag(const struct gw_req *rq, char *etag, size_t len);

/* ---- s3_ops_common (s3_ops_object.c) ------------------------------------ */

/*
 * S3_NOT_IMPLEMENTED for headers that ask for what the gateway does not do
 * and a client must not believe done: server-side encryption (SSE-S3,
 * SSE-KMS, SSE-C: the bytes would be stored in the clear, and an SSE-C
 * object read without its key) and object lock (retention, legal hold: a
 * delete would still delete). Else S3_OK.
 */
enum s3_code s3_refuse_unkept(const struct gw_req *rq);
/* Collects x-amz-meta-* and the stored standard headers into rq->meta;
 * refuses what s3_refuse_unkept() refuses: false once the error is sent. */
bool s3_collect_meta(struct gw_req *rq);
/*
 * An object written with the metadata the mount shows S3 for a symbolic
 * link (x-amz-meta-kvtier-symlink: 1) is one: opts->posix says so. A link
 * copied, or restored from a backup, through S3 is a link in the mount.
 */
void s3_put_kind(struct kvt_put_opts *opts);
/* Adds an object's stored headers, metadata, ETag, tier... to resp. */
void s3_object_headers(struct gw_req *rq, struct MHD_Response *resp, const struct kvt_object *o);
/* The checks of ETag/dates: S3_OK, S3_PRECONDITION_FAILED or S3_NOT_MODIFIED. */
enum s3_code s3_conditions(const struct kvt_object *o, const char *if_match,
			   const char *if_none_match, const char *if_modified_since,
			   const char *if_unmodified_since);
/*
 * Deletes key of rq's bucket if its ETag is one that if_match (NULL: any)
 * lists, checked in the delete's transaction: -ECANCELED if not.
 */
int s3_delete_if(struct gw_req *rq, const char *key, const char *if_match);
/* Parses "x-amz-copy-source" into bucket and key; S3_OK or an error. */
enum s3_code s3_copy_source(const char *v, char **bucket, char **key);
/*
 * Conditional writes (PutObject, CompleteMultipartUpload, CopyObject):
 * s3_write_cond_begin() reads If-Match / If-None-Match, checks them against
 * the key's current version at once (to refuse before a body is read) and
 * hooks the same check into the commit's transaction through opts; answers
 * and returns false if a condition fails now. After a failed commit,
 * s3_write_cond_failed() answers and returns true if the commit's check
 * refused it: 412 PreconditionFailed, or 409 ConditionalRequestConflict when
 * an If-Match object was deleted while the write was under way.
 */
bool s3_write_cond_begin(struct gw_req *rq, struct kvt_put_opts *opts);
bool s3_write_cond_failed(struct gw_req *rq, int rc);
/* Checks the bucket exists and the user may touch it; answers and returns false if not. */
bool s3_bucket_ok(struct gw_req *rq, const char *bucket);

/* ---- operations --------------------------------------------------------- */

void s3_op_list_buckets(struct gw_req *rq);
void s3_op_create_bucket(struct gw_req *rq);
void s3_op_head_bucket(struct gw_req *rq);
void s3_op_delete_bucket(struct gw_req *rq);
void s3_op_get_bucket_location(struct gw_req *rq);
void s3_op_get_bucket_versioning(struct gw_req *rq);
void s3_op_get_acl(struct gw_req *rq);
void s3_op_list_objects(struct gw_req *rq);
void s3_op_delete_objects(struct gw_req *rq);

void s3_op_put_object_start(struct gw_req *rq);
void s3_op_put_object(struct gw_req *rq);
void s3_op_copy_object(struct gw_req *rq);
void s3_op_get_object(struct gw_req *rq);
void s3_op_delete_object(struct gw_req *rq);

/*
 * Deletes every object of .uploads under prefix (a bucket's or an upload's);
 * returns how many uploads (meta objects) went, or a negative errno.
 */
int s3_uploads_purge(struct gw_server *srv, const char *prefix);
/* Counts the open uploads (at startup); 0 or a negative errno. */
int s3_uploads_init(struct gw_server *srv);
void s3_uploads_release_all(struct gw_server *srv);
/* Removes uploads initiated more than opt.upload_max_age ago; returns how many. */
int s3_uploads_sweep(struct gw_server *srv);
void s3_op_create_multipart(struct gw_req *rq);
void s3_op_upload_part_start(struct gw_req *rq);
void s3_op_upload_part(struct gw_req *rq);
void s3_op_upload_part_copy(struct gw_req *rq);
void s3_op_complete_multipart(struct gw_req *rq);
void s3_op_abort_multipart(struct gw_req *rq);
void s3_op_list_parts(struct gw_req *rq);
void s3_op_list_multipart_uploads(struct gw_req *rq);

void s3_op_kv_lookup(struct gw_req *rq);
void s3_op_kv_prestage(struct gw_req *rq);

#endif /* GW_H */
