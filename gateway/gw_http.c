/*
 * gw_http.c - one HTTP request through libmicrohttpd, from the request line
 * to the access-log line (the life cycle is drawn in gw.h).
 *
 * Bodies stream. libmicrohttpd hands the body over in pieces as big as its
 * connection buffer; each piece goes through the aws-chunked decoder (when
 * the client streams that way), the digests the client asked us to check
 * (x-amz-content-sha256, Content-MD5, x-amz-checksum-*) and then straight
 * into the engine's writer, so memory per upload is bounded whatever the
 * object size. The first GW_STAGE_MAX bytes wait in the request and reach
 * the writer when more arrive or at the end (gw.h says why): a small object
 * is written only once its digests have been checked. Nothing is committed until every digest and signature has
 * been checked at the end of the body; any failure, a client that goes
 * away, or a timeout ends in kvt_writer_abort() from http_completed_cb(), so
 * no partial object ever becomes visible.
 *
 * An error found while the body is still arriving is remembered and the
 * rest of the body drained: libmicrohttpd wants a response only once the
 * upload is consumed. Errors found before the body (authentication, a
 * missing bucket) are answered at once, before "100 Continue", and
 * libmicrohttpd closes the connection instead of reading the body.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "metrics.h"
#include "s3_xml.h"
#include "util.h"

/* ---- the operation table ------------------------------------------------ */

static void http_op_health(struct gw_req *rq);
static void http_op_metrics(struct gw_req *rq);
static void http_op_unsupported(struct gw_req *rq);
static void http_op_not_allowed(struct gw_req *rq);
static void http_op_bad_version(struct gw_req *rq);

const struct gw_op_def s3_op_defs[S3_OP_COUNT] = {
	[S3_OP_UNSUPPORTED] = { .finish = http_op_unsupported },
	[S3_OP_NOT_ALLOWED] = { .finish = http_op_not_allowed },
	[S3_OP_BAD_VERSION] = { .finish = http_op_bad_version },
	[S3_OP_HEALTH] = { .finish = http_op_health },
	[S3_OP_METRICS] = { .finish = http_op_metrics },
	[S3_OP_LIST_BUCKETS] = { .finish = s3_op_list_buckets },
	[S3_OP_CREATE_BUCKET] = { .finish = s3_op_create_bucket, .body_max = 64 * 1024, .lane = GW_LANE_WRITE },
	[S3_OP_HEAD_BUCKET] = { .finish = s3_op_head_bucket },
	[S3_OP_DELETE_BUCKET] = { .finish = s3_op_delete_bucket, .lane = GW_LANE_WRITE },
	[S3_OP_GET_BUCKET_LOCATION] = { .finish = s3_op_get_bucket_location },
	[S3_OP_GET_BUCKET_VERSIONING] = { .finish = s3_op_get_bucket_versioning },
	[S3_OP_GET_BUCKET_ACL] = { .finish = s3_op_get_acl },
	[S3_OP_LIST_OBJECTS] = { .finish = s3_op_list_objects },
	[S3_OP_LIST_OBJECTS_V2] = { .finish = s3_op_list_objects },
	[S3_OP_LIST_OBJECT_VERSIONS] = { .finish = s3_op_list_objects },
	[S3_OP_LIST_MULTIPART_UPLOADS] = { .finish = s3_op_list_multipart_uploads },
	[S3_OP_DELETE_OBJECTS] = { .finish = s3_op_delete_objects, .body_max = GW_MAX_XML_BODY, .lane = GW_LANE_WRITE },
	[S3_OP_PUT_OBJECT] = { .start = s3_op_put_object_start, .finish = s3_op_put_object, .lane = GW_LANE_WRITE },
	[S3_OP_COPY_OBJECT] = { .finish = s3_op_copy_object, .lane = GW_LANE_WRITE },
	[S3_OP_GET_OBJECT] = { .finish = s3_op_get_object },
	[S3_OP_HEAD_OBJECT] = { .finish = s3_op_get_object },
	[S3_OP_DELETE_OBJECT] = { .finish = s3_op_delete_object, .lane = GW_LANE_WRITE },
	[S3_OP_GET_OBJECT_ACL] = { .finish = s3_op_get_acl },
	[S3_OP_CREATE_MULTIPART] = { .finish = s3_op_create_multipart, .lane = GW_LANE_WRITE },
	[S3_OP_UPLOAD_PART] = { .start = s3_op_upload_part_start, .finish = s3_op_upload_part, .lane = GW_LANE_WRITE },
	[S3_OP_UPLOAD_PART_COPY] = { .finish = s3_op_upload_part_copy, .lane = GW_LANE_WRITE },
	[S3_OP_COMPLETE_MULTIPART] = { .finish = s3_op_complete_multipart,
				       .body_max = GW_MAX_XML_BODY, .lane = GW_LANE_WRITE },
	[S3_OP_ABORT_MULTIPART] = { .finish = s3_op_abort_multipart, .lane = GW_LANE_WRITE },
	[S3_OP_LIST_PARTS] = { .finish = s3_op_list_parts },
	[S3_OP_KV_LOOKUP] = { .finish = s3_op_kv_lookup, .body_max = GW_MAX_LOOKUP_BODY },
	[S3_OP_KV_PRESTAGE] = { .finish = s3_op_kv_prestage, .body_max = GW_MAX_LOOKUP_BODY, .lane = GW_LANE_WRITE },
};

/* ---- responses ---------------------------------------------------------- */

const char *http_hdr(const struct gw_req *rq, const char *name)
{
	return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name);
}

struct MHD_Response *http_response_empty(void)
{
	return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
}

/*
 * An S3 error all the same: its body is small enough to fit where the
 * response meant did not. Where even it cannot be built, nothing is sent: the
 * access handler returns MHD_NO (a status set, nothing queued), which drops
 * the connection (libmicrohttpd sends no answer of its own), and the access
 * log and /metrics name the code as for one sent. Before, every such request
 * was logged as a 500 with no code, and its connection dropped.
 */
void http_send_nomem(struct gw_req *rq)
{
	if (rq->queued)
		return;
	if (rq->err_code != S3_NO_MEMORY) {
		http_send_error(rq, S3_NO_MEMORY, NULL);	/* back here if it fails */
		return;
	}
	rq->status = s3_err_status(S3_NO_MEMORY);
}

void http_send(struct gw_req *rq, unsigned status, struct MHD_Response *resp)
{
	if (!resp) {
		http_send_nomem(rq);
		return;
	}
	if (rq->queued) {
		log_err(0, "request %s: a second response (%u) after %u", rq->id, status,
			rq->status);
		MHD_destroy_response(resp);
		return;
	}
	MHD_add_response_header(resp, "x-amz-request-id", rq->id);
	MHD_add_response_header(resp, "x-amz-id-2", rq->id);
	MHD_add_response_header(resp, "Server", "kvtier");
	if (rq->in_worker) {
		/* On a lane: the polling thread queues it when the connection resumes. */
		rq->kept = resp;
		rq->kept_status = status;
		rq->queued = true;
		rq->status = status;
		return;
	}
	if (MHD_queue_response(rq->conn, status, resp) == MHD_YES) {
		rq->queued = true;
		rq->status = status;
	} else {
		log_err(0, "request %s: cannot queue a %u response", rq->id, status);
	}
	MHD_destroy_response(resp);
}

void http_send_buf(struct gw_req *rq, unsigned status, const char *ctype, struct gw_buf *b)
{
	struct MHD_Response *resp;
	size_t len;
	char *data;

	if (gw_buf_failed(b)) {
		gw_buf_release(b);
		http_send_nomem(rq);
		return;
	}
	data = gw_buf_detach(b, &len);
	resp = data ? MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE) : NULL;
	if (!resp) {
		free(data);
		http_send_nomem(rq);
		return;
	}
	if (ctype)
		MHD_add_response_header(resp, "Content-Type", ctype);
	rq->bytes_out += len;
	http_send(rq, status, resp);
}

void http_send_xml(struct gw_req *rq, unsigned status, struct gw_buf *b)
{
	http_send_buf(rq, status, "application/xml", b);
}

void http_send_empty(struct gw_req *rq, unsigned status)
{
	http_send(rq, status, http_response_empty());
}

void http_send_error(struct gw_req *rq, enum s3_code code, const char *msg)
{
	struct gw_buf b;
	unsigned status = s3_err_status(code);
	struct MHD_Response *resp;
	size_t len;
	char *data;

	if (!rq->queued)
		rq->err_code = code;	/* a second response is dropped, and not it */
	gw_buf_init(&b);
	gw_buf_puts(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>");
	xml_elem(&b, "Code", s3_err_name(code));
	xml_elem(&b, "Message", msg && *msg ? msg : s3_err_message(code));
	gw_buf_puts(&b, "<Resource>");
	if (rq->route.bucket) {
		gw_buf_putc(&b, '/');
		xml_escape(&b, rq->route.bucket);
		if (rq->route.key) {
			gw_buf_putc(&b, '/');
			xml_escape(&b, rq->route.key);
		}
	} else {
		xml_escape(&b, rq->route.raw_path ? rq->route.raw_path : "/");
	}
	gw_buf_puts(&b, "</Resource>");
	if (rq->route.bucket && (code == S3_NO_SUCH_BUCKET || code == S3_BUCKET_NOT_EMPTY ||
				 code == S3_BUCKET_ALREADY_OWNED))
		xml_elem(&b, "BucketName", rq->route.bucket);
	if (rq->route.key && code == S3_NO_SUCH_KEY)
		xml_elem(&b, "Key", rq->route.key);
	xml_elem(&b, "RequestId", rq->id);
	xml_elem(&b, "HostId", rq->id);
	gw_buf_puts(&b, "</Error>");
	if (gw_buf_failed(&b)) {
		gw_buf_release(&b);
		http_send_nomem(rq);
		return;
	}
	data = gw_buf_detach(&b, &len);
	resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(data);
		http_send_nomem(rq);
		return;
	}
	MHD_add_response_header(resp, "Content-Type", "application/xml");
	/* The hot tier is full: tell clients when to come back (SDKs honour it). */
	if (status == 503)
		MHD_add_response_header(resp, "Retry-After", "1");
	if (rq->err_hdr_name)
		MHD_add_response_header(resp, rq->err_hdr_name, rq->err_hdr_value);
	if (rq->srv->opt.verbose)
		log_info("request %s: %s %s: %u %s: %s", rq->id, rq->method, rq->raw_uri, status,
			 s3_err_name(code), msg && *msg ? msg : s3_err_message(code));
	rq->bytes_out += len;
	http_send(rq, status, resp);
}

void http_send_errno(struct gw_req *rq, int rc, enum s3_ctx ctx)
{
	enum s3_code code = s3_err_from_errno(rc, ctx);

	if (code == S3_INTERNAL_ERROR)
		log_err(rc, "request %s: %s %s", rq->id, rq->method, rq->raw_uri);
	http_send_error(rq, code, NULL);
}

void http_send_errno_obj(struct gw_req *rq, const char *bucket, int rc, enum s3_ctx ctx)
{
	/* The engine says -ENOENT for a missing bucket and a missing key alike. */
	if (rc == -ENOENT && kvt_bucket_exists(rq->srv->st, bucket) == -ENOENT) {
		http_send_error(rq, S3_NO_SUCH_BUCKET, NULL);
		return;
	}
	http_send_errno(rq, rc, ctx);
}

/* ---- the special endpoints ---------------------------------------------- */

static void http_op_health(struct gw_req *rq)
{
	struct kvt_store_stat ss;
	struct gw_buf b;

	gw_buf_init(&b);
	/* Some reads may still work; the node should be drained all the same. */
	if (kvt_store_catalog_damaged(rq->srv->st)) {
		gw_buf_puts(&b, "catalog: damaged (see the log and kvtier fsck)\n");
		http_send_buf(rq, 503, "text/plain", &b);
		return;
	}
	if (kvt_store_stat(rq->srv->st, &ss) < 0) {
		gw_buf_puts(&b, "store: unavailable\n");
		http_send_buf(rq, 503, "text/plain", &b);
		return;
	}
	/* Alive, and serving reads, either way: 200. What a write would meet
	 * is said for the operator and a readiness check to read. */
	gw_buf_printf(&b, "ok\nobjects: %llu\nhot_used_bytes: %llu\nhot_capacity_bytes: %llu\n"
		      "disk_free_bytes: %llu\nwrites: %s\n",
		      (unsigned long long)ss.objects, (unsigned long long)ss.used_bytes,
		      (unsigned long long)ss.capacity, (unsigned long long)ss.disk_free_bytes,
		      kvt_store_readonly(rq->srv->st) ? "refused (read-only file system)" :
		      kvt_store_disk_full(rq->srv->st) ? "refused (disk full)" :
		      kvt_store_writes_full(rq->srv->st) ? "refused (hot tier full)" : "ok");
	http_send_buf(rq, 200, "text/plain", &b);
}

static void http_op_metrics(struct gw_req *rq)
{
	struct gw_buf b;

	gw_buf_init(&b);
	metrics_render(&b, rq->srv->st, rq->srv->work);
	http_send_buf(rq, 200, "text/plain; version=0.0.4", &b);
}

static void http_op_unsupported(struct gw_req *rq)
{
	http_send_error(rq, S3_NOT_IMPLEMENTED, NULL);
}

static void http_op_not_allowed(struct gw_req *rq)
{
	http_send_error(rq, S3_METHOD_NOT_ALLOWED, NULL);
}

static void http_op_bad_version(struct gw_req *rq)
{
	http_send_error(rq, S3_INVALID_ARGUMENT, "Invalid version id specified");
}

/* ---- connections -------------------------------------------------------- */

/* The IP address of sa into addr (INET6_ADDRSTRLEN); left alone for other families. */
static void http_addr(const struct sockaddr *sa, char *addr, size_t len)
{
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, addr,
			  (socklen_t)len);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
			  addr, (socklen_t)len);
}

/*
 * libmicrohttpd's --timeout sees only silence: a client that sends its
 * request head one header line every 2 s was never cut, and ten such held
 * every --max-connections slot (a new client's ListBuckets waited 43 s, as
 * long as they went on). So a head must come whole within --timeout of the
 * accept, or of the end of the previous request on a kept connection.
 *
 * Each connection is on srv->conns from its start to its close (http_conn_cb,
 * under conns_lock); head_since is when its head began to be awaited, set at
 * the start and by http_completed_cb, and 0 from the first access call of a
 * request (the head is all in; a slow body is http_too_slow()'s). The main
 * thread's tick shuts down the socket of one past its deadline, under
 * conns_lock, which the close notification takes before libmicrohttpd closes
 * the descriptor: it never touches another connection's fd. libmicrohttpd
 * then sees the end of the stream and closes the connection as its own.
 * Cost: a lock and a list insert or remove per connection; a relaxed store
 * per request.
 */
#define GW_HEAD_SLACK_NS 250000000	/* past --timeout: see http_cut_slow_heads */

struct gw_conn {
	struct gw_conn *prev, *next;
	int fd;
	bool cut;			/* shut down: logged once */
	int64_t head_since;		/* atomic, monotonic ns; 0: not awaiting a head */
};

void http_conn_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
		  enum MHD_ConnectionNotificationCode toe)
{
	struct gw_server *srv = cls;
	struct gw_conn *c = *socket_context;
	const union MHD_ConnectionInfo *ci;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (!c)
			return;
		pthread_mutex_lock(&srv->conns_lock);
		if (c->prev)
			c->prev->next = c->next;
		else
			srv->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		pthread_mutex_unlock(&srv->conns_lock);
		free(c);
		*socket_context = NULL;
		return;
	}
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!srv->opt.timeout || !ci)
		return;	/* --timeout 0: never timed */
	c = calloc(1, sizeof(*c));
	if (!c)
		return;	/* no deadline for this one; its idle timeout still holds */
	c->fd = ci->connect_fd;
	c->head_since = util_mono_ns();
	pthread_mutex_lock(&srv->conns_lock);
	c->next = srv->conns;
	if (c->next)
		c->next->prev = c;
	srv->conns = c;
	pthread_mutex_unlock(&srv->conns_lock);
	*socket_context = c;
}

/* The connection's head is awaited from now_ns on; 0: it is all in. */
static void http_conn_head(struct MHD_Connection *conn, int64_t now_ns)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct gw_conn *c = ci ? ci->socket_context : NULL;

	if (c)
		__atomic_store_n(&c->head_since, now_ns, __ATOMIC_RELAXED);
}

/*
 * A connection idle since its accept or its last request is libmicrohttpd's
 * to close, at --timeout to the millisecond: the deadline of a head falls
 * GW_HEAD_SLACK_NS later, so that such a one is not cut here and logged as
 * a slow head in the same instant.
 */
void http_cut_slow_heads(struct gw_server *srv)
{
	int64_t now = util_mono_ns();
	int64_t max = (int64_t)srv->opt.timeout * 1000000000 + GW_HEAD_SLACK_NS;

	pthread_mutex_lock(&srv->conns_lock);
	for (struct gw_conn *c = srv->conns; c; c = c->next) {
		int64_t since = __atomic_load_n(&c->head_since, __ATOMIC_RELAXED);
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char addr[INET6_ADDRSTRLEN] = "-";

		if (c->cut || !since || now - since < max)
			continue;
		if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0)
			http_addr((struct sockaddr *)&ss, addr, sizeof(addr));
		log_info("client %s: no complete request head in %u s: closed", addr,
			 srv->opt.timeout);
		shutdown(c->fd, SHUT_RDWR);
		c->cut = true;
	}
	pthread_mutex_unlock(&srv->conns_lock);
}

/* ---- the request -------------------------------------------------------- */

void *http_uri_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct gw_server *srv = cls;
	struct gw_req *rq = calloc(1, sizeof(*rq));
	uint64_t n;

	if (!rq)
		return NULL;
	rq->srv = srv;
	rq->conn = conn;
	rq->start_ns = util_mono_ns();
	rq->raw_uri = strdup(uri ? uri : "");
	rq->decoded_len = -1;
	n = __atomic_add_fetch(&srv->reqid_seq, 1, __ATOMIC_RELAXED);
	snprintf(rq->id, sizeof(rq->id), "%016llX", (unsigned long long)(srv->reqid_base + n));
	gw_buf_init(&rq->body);
	return rq;
}

static void http_req_free(struct gw_req *rq)
{
	if (rq->kept)
		MHD_destroy_response(rq->kept);
	kvt_reader_close(rq->reader);
	kvt_writer_abort(rq->writer);
	gw_work_slot_put(rq->srv->work, &rq->has_slot);
	s3_route_release(&rq->route);
	free(rq->hdrs);
	free(rq->raw_uri);
	gw_buf_release(&rq->body);
	chunk_release(&rq->chunk);
	EVP_MD_CTX_free(rq->payload_sha);
	EVP_MD_CTX_free(rq->md5);
	gw_cks_release(&rq->cks);
	kvt_meta_free(rq->meta, rq->nmeta);
	free(rq->part_key);
	free(rq->content_type);
	free(rq);
}

struct http_hdr_walk {
	struct gw_req *rq;
	size_t cap;
	size_t bytes;
	bool failed;
};

static enum MHD_Result http_hdr_iter(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct http_hdr_walk *w = cls;
	struct gw_req *rq = w->rq;

	if (UTIL_GROW(rq->hdrs, rq->nhdrs, w->cap) < 0) {
		w->failed = true;
		return MHD_NO;
	}
	rq->hdrs[rq->nhdrs].name = key;
	rq->hdrs[rq->nhdrs].value = value ? value : "";
	rq->nhdrs++;
	w->bytes += strlen(key) + (value ? strlen(value) : 0) + 4;
	return MHD_YES;
}

/*
 * Anonymous GET of /health or /metrics: the operator's endpoints, on the S3
 * listener unless --metrics-listen gave them one of their own.
 */
static enum s3_op http_special(struct gw_req *rq, bool metrics_daemon)
{
	if (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "HEAD") != 0)
		return S3_OP_UNKNOWN;
	if (rq->srv->opt.metrics_listen && !metrics_daemon)
		return S3_OP_UNKNOWN;
	if (http_hdr(rq, "Authorization") || strstr(rq->route.raw_query, "X-Amz-Signature"))
		return S3_OP_UNKNOWN;
	if (rq->route.vhost || rq->route.key || !rq->route.bucket)
		return S3_OP_UNKNOWN;
	if (strcmp(rq->route.raw_path, "/health") == 0)
		return S3_OP_HEALTH;
	if (strcmp(rq->route.raw_path, "/metrics") == 0)
		return S3_OP_METRICS;
	return S3_OP_UNKNOWN;
}

/* Content-MD5, x-amz-checksum-* and x-amz-trailer: what the body must hash to. */
static enum s3_code http_setup_digests(struct gw_req *rq)
{
	const char *md5 = http_hdr(rq, "Content-MD5");
	const char *trailer = http_hdr(rq, "x-amz-trailer");
	enum gw_cks_algo algo = GW_CKS_NONE;

	if (md5) {
		if (gw_base64_decode(md5, rq->want_md5, 16) < 0)
			return S3_INVALID_DIGEST;
		rq->md5 = EVP_MD_CTX_new();
		if (!rq->md5 || EVP_DigestInit_ex(rq->md5, EVP_md5(), NULL) != 1)
			return S3_INTERNAL_ERROR;
	}
	for (size_t i = 0; i < rq->nhdrs; i++) {
		const char *n = rq->hdrs[i].name;
		enum gw_cks_algo a;

		if (strncasecmp(n, "x-amz-checksum-", 15) != 0)
			continue;
		a = gw_cks_algo_parse(n + 15);
		if (a == GW_CKS_NONE)
			continue;	/* x-amz-checksum-mode, -type: not digests */
		if (algo != GW_CKS_NONE)
			return S3_INVALID_REQUEST;	/* S3 takes one */
		algo = a;
		snprintf(rq->cks_header, sizeof(rq->cks_header), "x-amz-checksum-%s",
			 gw_cks_algo_name(a));
		snprintf(rq->want_cks, sizeof(rq->want_cks), "%s", rq->hdrs[i].value);
	}
	if (trailer) {
		if (!rq->chunked || algo != GW_CKS_NONE ||
		    strncasecmp(trailer, "x-amz-checksum-", 15) != 0 ||
		    (algo = gw_cks_algo_parse(trailer + 15)) == GW_CKS_NONE)
			return S3_INVALID_REQUEST;
		snprintf(rq->cks_header, sizeof(rq->cks_header), "x-amz-checksum-%s",
			 gw_cks_algo_name(algo));
		rq->cks_in_trailer = true;
	}
	if (algo != GW_CKS_NONE && gw_cks_init(&rq->cks, algo) < 0)
		return S3_INTERNAL_ERROR;
	return S3_OK;
}

static void http_begin(struct gw_req *rq)
{
	struct gw_server *srv = rq->srv;
	struct http_hdr_walk walk = { .rq = rq };
	struct auth_input in;
	const char *dlen;
	enum s3_code code;
	int rc;

	MHD_get_connection_values(rq->conn, MHD_HEADER_KIND, http_hdr_iter, &walk);
	if (walk.failed) {
		http_send_nomem(rq);
		return;
	}
	if (!rq->raw_uri) {
		http_send_error(rq, S3_INTERNAL_ERROR, NULL);
		return;
	}
	rc = s3_route_parse(&rq->route, rq->raw_uri, http_hdr(rq, "Host"), srv->opt.domain);
	if (rc < 0) {
		http_send_error(rq, rc == -ENOMEM ? S3_NO_MEMORY : S3_INVALID_URI, NULL);
		return;
	}
	if (walk.bytes > GW_MAX_HEADER_BYTES) {
		http_send_error(rq, S3_REQUEST_HEADER_TOO_LARGE, NULL);
		return;
	}
	{
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_DAEMON);
		const bool metrics_daemon = ci && srv->metrics_mhd && ci->daemon == srv->metrics_mhd;

		rq->op = http_special(rq, metrics_daemon);
		if (rq->op != S3_OP_UNKNOWN) {
			rq->def = &s3_op_defs[rq->op];
			return;
		}
		if (metrics_daemon) {
			/* The metrics listener serves nothing else, S3 least of all. */
			struct gw_buf b;

			gw_buf_init(&b);
			gw_buf_puts(&b, "only /metrics and /health here\n");
			http_send_buf(rq, 404, "text/plain", &b);
			return;
		}
	}
	rq->op = s3_route_op(&rq->route, rq->method, http_hdr(rq, "x-amz-copy-source") != NULL);

	in = (struct auth_input){
		.method = rq->method,
		.raw_path = rq->route.raw_path,
		.raw_query = rq->route.raw_query,
		.hdrs = rq->hdrs,
		.nhdrs = rq->nhdrs,
		.now = time(NULL),
		.creds = gw_creds(srv),
		.region = srv->opt.region,
	};
	code = auth_verify(&in, &rq->auth);
	if (code != S3_OK) {
		http_send_error(rq, code, rq->auth.msg);
		return;
	}
	rq->user = rq->auth.user;
	if (rq->route.bucket && !auth_user_may(rq->user, rq->route.bucket)) {
		http_send_error(rq, S3_ACCESS_DENIED, NULL);
		return;
	}
	rq->def = &s3_op_defs[rq->op];
	if (!rq->def->finish) {
		http_send_error(rq, S3_NOT_IMPLEMENTED, NULL);
		return;
	}

	/* How the body arrives and what it must hash to. */
	rq->chunked = rq->auth.payload >= AUTH_PAYLOAD_STREAMING;
	if (rq->chunked && chunk_init(&rq->chunk, &rq->auth) < 0) {
		http_send_error(rq, S3_NO_MEMORY, NULL);
		return;
	}
	dlen = http_hdr(rq, "x-amz-decoded-content-length");
	if (dlen) {
		char *end;
		unsigned long long v = strtoull(dlen, &end, 10);

		if (*end || end == dlen || dlen[0] == '-') {
			http_send_error(rq, S3_INVALID_ARGUMENT, "Bad x-amz-decoded-content-length");
			return;
		}
		rq->decoded_len = (int64_t)v;
	} else if (rq->chunked) {
		http_send_error(rq, S3_MISSING_CONTENT_LENGTH,
				"aws-chunked bodies need x-amz-decoded-content-length");
		return;
	}
	if (rq->auth.payload == AUTH_PAYLOAD_SHA256) {
		rq->payload_sha = EVP_MD_CTX_new();
		if (!rq->payload_sha || EVP_DigestInit_ex(rq->payload_sha, EVP_sha256(), NULL) != 1) {
			http_send_error(rq, S3_NO_MEMORY, NULL);
			return;
		}
	}
	code = http_setup_digests(rq);
	if (code != S3_OK) {
		http_send_error(rq, code, NULL);
		return;
	}
	rq->body_mode = rq->def->body_max ? GW_BODY_BUFFER : GW_BODY_DISCARD;
	rq->body_max = rq->def->body_max;
	if (rq->def->start)
		rq->def->start(rq);
}

void http_body_to_writer(struct gw_req *rq, struct kvt_writer *w)
{
	const char *cl = http_hdr(rq, "Content-Length");
	uint64_t size = rq->decoded_len >= 0 ? (uint64_t)rq->decoded_len
					     : (cl ? strtoull(cl, NULL, 10) : UINT64_MAX);

	rq->writer = w;
	rq->body_mode = GW_BODY_WRITER;
	/*
	 * A body known to fit is staged in one allocation of its own size; a
	 * larger one goes through a stage of one extent and a piece, written to
	 * the engine on the write lane each time it fills (http_flush).
	 */
	if (size > 0 && size <= GW_STAGE_MAX)
		gw_buf_reserve(&rq->body, (size_t)size);
	else if (size > GW_STAGE_MAX)
		gw_buf_reserve(&rq->body, GW_STAGE_MAX + GW_CONN_MEMORY);
}

static void http_body_fail(struct gw_req *rq, enum s3_code code, const char *msg)
{
	if (rq->body_err != S3_OK)
		return;
	rq->body_err = code;
	snprintf(rq->body_msg, sizeof(rq->body_msg), "%s", msg ? msg : "");
	/* Give the hot tier its space back now, not when the drain ends. */
	kvt_writer_abort(rq->writer);
	rq->writer = NULL;
	gw_work_slot_put(rq->srv->work, &rq->has_slot);
}

static enum s3_code http_write(struct gw_req *rq, const char *data, size_t len)
{
	int rc = kvt_writer_write(rq->writer, data, len);

	if (rc < 0) {
		enum s3_code code = s3_err_from_errno(rc, S3_CTX_OBJECT);

		if (code == S3_INTERNAL_ERROR)
			log_err(rc, "request %s: cannot write '%s/%s'", rq->id, rq->route.bucket,
				rq->route.key);
		return code;
	}
	return S3_OK;
}

/* The staged bytes into the writer; the stage stays allocated for more. */
static enum s3_code http_unstage(struct gw_req *rq)
{
	enum s3_code code = rq->body.len ? http_write(rq, rq->body.data, rq->body.len) : S3_OK;

	gw_buf_reset(&rq->body);
	rq->streaming = true;
	return code;
}

/*
 * The ETag of a body sent with Content-MD5, for a writer to take instead of
 * hashing every byte again (MD5 is the slowest pass over a body): http_end
 * refuses a body that does not hash to it before anything is committed.
 * 0 when no Content-MD5 was sent.
 */
int http_content_md5_etag(const struct gw_req *rq, char *etag, size_t len)
{
	char hex[2 * 16 + 1];

	if (!rq->md5)
		return 0;
	gw_hex(hex, rq->want_md5, 16);
	snprintf(etag, len, "\"%s\"", hex);
	return 1;
}

/* Payload bytes (after aws-chunked decoding). */
static enum s3_code http_payload(void *arg, const char *data, size_t len)
{
	struct gw_req *rq = arg;

	if (rq->md5)
		EVP_DigestUpdate(rq->md5, data, len);
	if (rq->cks.algo != GW_CKS_NONE)
		gw_cks_update(&rq->cks, data, len);
	rq->payload_len += len;
	if (rq->decoded_len >= 0 && rq->payload_len > (uint64_t)rq->decoded_len)
		return S3_INCOMPLETE_BODY;
	switch (rq->body_mode) {
	case GW_BODY_DISCARD:
		break;
	case GW_BODY_BUFFER:
		if (rq->body.len + len > rq->body_max)
			return S3_MAX_MESSAGE_LENGTH_EXCEEDED;
		if (gw_buf_append(&rq->body, data, len) < 0)
			return S3_NO_MEMORY;
		break;
	case GW_BODY_WRITER:
		if (rq->payload_len > rq->srv->opt.max_object)
			return S3_ENTITY_TOO_LARGE;
		/* Staged; past GW_STAGE_MAX the access handler flushes it (http_flush). */
		if (gw_buf_append(&rq->body, data, len) < 0)
			return S3_NO_MEMORY;
		break;
	}
	return S3_OK;
}

static void http_body(struct gw_req *rq, const char *data, size_t len)
{
	enum s3_code code;

	rq->bytes_in += len;
	if (rq->body_err != S3_OK || rq->queued)
		return;		/* draining */
	if (rq->payload_sha)
		EVP_DigestUpdate(rq->payload_sha, data, len);
	if (rq->chunked)
		code = chunk_feed(&rq->chunk, data, len, http_payload, rq);
	else
		code = http_payload(rq, data, len);
	if (code != S3_OK)
		http_body_fail(rq, code, NULL);
}

/* The body is in: every digest and signature must hold before op->finish. */
static void http_end(struct gw_req *rq)
{
	uint8_t d[EVP_MAX_MD_SIZE];
	unsigned n = 0;

	if (rq->body_err == S3_OK && rq->chunked && chunk_finish(&rq->chunk) != S3_OK)
		http_body_fail(rq, S3_INCOMPLETE_BODY, "The aws-chunked body ended early.");
	if (rq->body_err == S3_OK && rq->decoded_len >= 0 &&
	    rq->payload_len != (uint64_t)rq->decoded_len)
		http_body_fail(rq, S3_INCOMPLETE_BODY,
			       "The body does not hold x-amz-decoded-content-length bytes.");
	if (rq->body_err == S3_OK && rq->payload_sha) {
		char hex[65];

		EVP_DigestFinal_ex(rq->payload_sha, d, &n);
		gw_hex(hex, d, 32);
		if (!gw_secure_eq(hex, rq->auth.payload_sha256))
			http_body_fail(rq, S3_CONTENT_SHA256_MISMATCH, rq->auth.implied_empty ?
				       "No x-amz-content-sha256 header: the signature covers an "
				       "empty body only (send UNSIGNED-PAYLOAD or the body's SHA-256)"
				       : NULL);
	}
	if (rq->body_err == S3_OK && rq->md5) {
		EVP_DigestFinal_ex(rq->md5, d, &n);
		if (n != 16 || memcmp(d, rq->want_md5, 16) != 0)
			http_body_fail(rq, S3_BAD_DIGEST,
				       "The Content-MD5 you specified did not match what we received.");
	}
	if (rq->body_err == S3_OK && rq->cks.algo != GW_CKS_NONE) {
		char got[96];

		if (rq->cks_in_trailer) {
			const char *v = chunk_trailer(&rq->chunk, rq->cks_header);

			if (!v)
				http_body_fail(rq, S3_INVALID_REQUEST,
					       "The trailer named in x-amz-trailer did not come.");
			else
				snprintf(rq->want_cks, sizeof(rq->want_cks), "%s", v);
		}
		if (rq->body_err == S3_OK &&
		    (gw_cks_final(&rq->cks, got, sizeof(got)) < 0 || strcmp(got, rq->want_cks) != 0)) {
			char msg[160];

			snprintf(msg, sizeof(msg), "The %s you specified did not match the "
				 "calculated checksum.", rq->cks_header);
			http_body_fail(rq, S3_BAD_DIGEST, msg);
		}
	}
	/*
	 * Every digest held: what is staged goes to the writer only now (all of
	 * a small body, the tail of a streamed one).
	 */
	if (rq->body_err == S3_OK && rq->body_mode == GW_BODY_WRITER) {
		enum s3_code code = http_unstage(rq);

		gw_buf_release(&rq->body);
		gw_buf_init(&rq->body);
		if (code != S3_OK)
			http_body_fail(rq, code, NULL);
	}
	if (rq->body_err != S3_OK) {
		http_send_error(rq, rq->body_err, rq->body_msg[0] ? rq->body_msg : NULL);
		return;
	}
	rq->def->finish(rq);
}

/* ---- work on the lanes (gw_work.c) -------------------------------------- */

static void http_job_run(struct gw_job *j)
{
	struct gw_req *rq = (struct gw_req *)(void *)((char *)j - offsetof(struct gw_req, job));

	switch (rq->job_kind) {
	case GW_JOB_FLUSH:
		rq->job_code = http_unstage(rq);
		break;
	case GW_JOB_END:
		rq->in_worker = true;
		http_end(rq);
		/* The writer is committed or gone: its slot goes to the next upload now. */
		gw_work_slot_put(rq->srv->work, &rq->has_slot);
		break;
	case GW_JOB_FINISH:
		rq->in_worker = true;
		rq->def->finish(rq);
		break;
	case GW_JOB_NONE:
		break;
	}
}

/* Suspends the connection and hands the job to a lane; false: run it here. */
static bool http_submit(struct gw_req *rq, int kind, enum gw_lane lane)
{
	bool ok;

	rq->job_kind = kind;
	rq->job.run = http_job_run;
	rq->job.conn = rq->conn;
	if (kind == GW_JOB_FLUSH && !rq->has_slot)
		ok = gw_work_submit_streaming(rq->srv->work, &rq->job, &rq->has_slot);
	else
		ok = gw_work_submit(rq->srv->work, lane, &rq->job);
	if (!ok)
		rq->job_kind = GW_JOB_NONE;
	return ok;
}

/* Back on the polling thread after a lane ran the job. */
static void http_job_done(struct gw_req *rq)
{
	int kind = rq->job_kind;

	if (!__atomic_load_n(&rq->job.done, __ATOMIC_ACQUIRE)) {
		/* Not possible while suspended; never read what a lane may still write. */
		log_err(-EBUSY, "request %s: called again before its job ended", rq->id);
		return;
	}
	rq->job_kind = GW_JOB_NONE;
	rq->in_worker = false;
	if (kind != GW_JOB_FLUSH)
		return;
	if (rq->job.no_slot) {
		/* It waited for a stream slot too long (gw_work_expire); the rest drains. */
		rq->job.no_slot = false;
		http_body_fail(rq, S3_NO_STREAM_SLOT, NULL);
	} else if (rq->job_code != S3_OK) {
		http_body_fail(rq, rq->job_code, NULL);
	}
	/* The client sends again from now: its rate is judged from here (http_too_slow). */
	rq->rate_ns = util_mono_ns();
	rq->rate_bytes = rq->bytes_in;
}

/*
 * A body past its stage holds a stream slot (or drains after an error) and
 * must arrive at GW_STREAM_MIN_RATE at least, judged over each --timeout
 * seconds (gw.h says why). True when it did not: the slot is given back,
 * and the caller closes the connection, for libmicrohttpd 0.9.75 takes no
 * response before the body is all in, and waiting for that is what a slow
 * client must not be able to make us do. The access log says 400.
 */
static bool http_too_slow(struct gw_req *rq)
{
	int64_t now, dt;
	uint64_t sent;

	if (!rq->rate_ns || !rq->srv->opt.timeout)
		return false;	/* no lanes, or --timeout 0: connections are never timed */
	now = util_mono_ns();
	dt = now - rq->rate_ns;
	if (dt < (int64_t)rq->srv->opt.timeout * 1000000000)
		return false;
	sent = rq->bytes_in - rq->rate_bytes;
	if ((double)sent * 1e9 >= (double)GW_STREAM_MIN_RATE * (double)dt) {
		rq->rate_ns = now;
		rq->rate_bytes = rq->bytes_in;
		return false;
	}
	log_info("request %s: %llu bytes of body in %.1f s, under %u bytes/s: closed",
		 rq->id, (unsigned long long)sent, (double)dt / 1e9, GW_STREAM_MIN_RATE);
	http_body_fail(rq, S3_REQUEST_TIMEOUT, NULL);
	rq->status = s3_err_status(S3_REQUEST_TIMEOUT);
	rq->err_code = S3_REQUEST_TIMEOUT;
	return true;
}

/*
 * A full stage goes to the writer on the write lane, while the connection
 * waits (its client is held back by TCP); without lanes, here.
 */
static void http_flush(struct gw_req *rq)
{
	enum s3_code code;

	if (http_submit(rq, GW_JOB_FLUSH, GW_LANE_WRITE))
		return;
	code = http_unstage(rq);
	if (code != S3_OK)
		http_body_fail(rq, code, NULL);
}

bool http_defer(struct gw_req *rq, enum gw_lane lane)
{
	if (rq->in_worker || lane == GW_LANE_INLINE || gw_work_stopping(rq->srv->work))
		return false;
	rq->defer_lane = lane;
	return true;
}

/* The end of the request: on its lane, or here. */
static void http_finish(struct gw_req *rq)
{
	enum gw_lane lane;

	if (rq->body_err == S3_OK && rq->def && rq->def->lane != GW_LANE_INLINE &&
	    http_submit(rq, GW_JOB_END, rq->def->lane))
		return;
	http_end(rq);
	if (rq->queued || rq->defer_lane == GW_LANE_INLINE)
		return;
	/* finish asked for a lane (a cold GET, a large read) */
	lane = rq->defer_lane;
	rq->defer_lane = GW_LANE_INLINE;
	if (http_submit(rq, GW_JOB_FINISH, lane))
		return;
	rq->in_worker = true;	/* the lanes are stopping: run it here, as a lane would */
	rq->def->finish(rq);
	rq->in_worker = false;
}

/* Queues the response a lane made. */
static void http_queue_kept(struct gw_req *rq)
{
	struct MHD_Response *resp = rq->kept;

	rq->kept = NULL;
	if (MHD_queue_response(rq->conn, rq->kept_status, resp) != MHD_YES) {
		log_err(0, "request %s: cannot queue a %u response", rq->id, rq->kept_status);
		rq->queued = false;
	}
	MHD_destroy_response(resp);
}

enum MHD_Result http_access_cb(void *cls, struct MHD_Connection *conn, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	struct gw_req *rq = *con_cls;

	if (!rq)
		return MHD_NO;	/* no memory for it in http_uri_cb */
	if (rq->job_kind != GW_JOB_NONE)
		http_job_done(rq);
	if (!rq->began) {
		rq->began = true;
		http_conn_head(conn, 0);
		rq->conn = conn;
		rq->method = method;
		http_begin(rq);
		return rq->status && !rq->queued ? MHD_NO : MHD_YES;	/* http_send_nomem */
	}
	if (*upload_data_size > 0) {
		http_body(rq, upload_data, *upload_data_size);
		*upload_data_size = 0;
		if (http_too_slow(rq))
			return MHD_NO;
		if (rq->body_mode == GW_BODY_WRITER && rq->body_err == S3_OK && !rq->queued &&
		    rq->body.len > GW_STAGE_MAX)
			http_flush(rq);
		return MHD_YES;
	}
	if (!rq->queued && !rq->ended) {
		rq->ended = true;
		http_finish(rq);
		if (rq->job_kind != GW_JOB_NONE)
			return MHD_YES;	/* suspended: called again once the lane is done */
	}
	if (rq->kept)
		http_queue_kept(rq);
	if (!rq->queued)
		return MHD_NO;	/* could not build a response: drop the connection */
	return MHD_YES;
}

static const char *http_toe_name(enum MHD_RequestTerminationCode toe)
{
	switch (toe) {
	case MHD_REQUEST_TERMINATED_COMPLETED_OK: return "ok";
	case MHD_REQUEST_TERMINATED_WITH_ERROR: return "error";
	case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
	case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
	case MHD_REQUEST_TERMINATED_READ_ERROR: return "read-error";
	case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client-abort";
	}
	return "unknown";
}

static void http_access_log(struct gw_req *rq, enum MHD_RequestTerminationCode toe,
			    int64_t dur_ns)
{
	const union MHD_ConnectionInfo *ci;
	char addr[INET6_ADDRSTRLEN] = "-", when[32], line[1536];
	int n;

	if (rq->srv->access_fd < 0)
		return;
	ci = MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci && ci->client_addr)
		http_addr(ci->client_addr, addr, sizeof(addr));
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		gw_time_iso(when, sizeof(when), (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
	}
	/*
	 * One write(2) per line: lines from many threads never interleave.
	 * The S3 code and its reason last, "-" where there is none: a 503
	 * alone did not tell the partner's bucket missing from the partner
	 * down or a full hot tier.
	 */
	n = snprintf(line, sizeof(line), "%s %s %s %s %s %.1024s %u %s %llu %llu %.3f %s %s %s\n",
		     when, addr, rq->id, rq->user ? rq->user->access : "-",
		     rq->method ? rq->method : "-", rq->raw_uri ? rq->raw_uri : "-", rq->status,
		     s3_op_name(rq->op), (unsigned long long)rq->bytes_in,
		     (unsigned long long)rq->bytes_out, (double)dur_ns / 1e6, http_toe_name(toe),
		     rq->err_code != S3_OK ? s3_err_name(rq->err_code) : "-",
		     *s3_err_reason(rq->err_code) ? s3_err_reason(rq->err_code) : "-");
	if (n > (int)sizeof(line) - 1) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	if (write(rq->srv->access_fd, line, (size_t)n) < 0)
		return;
}

void http_completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
		       enum MHD_RequestTerminationCode toe)
{
	struct gw_req *rq = *con_cls;
	int64_t now, dur;

	if (!rq)
		return;
	*con_cls = NULL;
	/* A writer still open here was never committed: drop it (no object appears). */
	kvt_writer_abort(rq->writer);
	rq->writer = NULL;
	/*
	 * No status: libmicrohttpd answered by itself before our handler ran
	 * (a malformed or oversized request: 400, 413, 431) or the client left
	 * first; 0 is logged, and counted as "other".
	 */
	now = util_mono_ns();
	http_conn_head(conn, now);	/* a kept connection awaits its next head */
	dur = now - rq->start_ns;
	metrics_request(rq->op, rq->status, rq->err_code, rq->bytes_in, rq->bytes_out, dur);
	http_access_log(rq, toe, dur);
	http_req_free(rq);
}
