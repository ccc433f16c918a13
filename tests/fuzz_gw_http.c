/*
 * fuzz_gw_http.c - fuzz target for whole HTTP requests: the bytes a client
 * sends, through libmicrohttpd's parser, the gateway's routing,
 * authentication, body handling and S3 operations, into a real store.
 *
 * The gateway runs in this process as kvtier-gateway runs it (the same MHD
 * callbacks of gateway/gw_http.c, the same store and credentials), but with
 * no listening socket: each input is written into one end of a socket pair
 * whose other end is handed to libmicrohttpd with MHD_add_connection(), then
 * the write side is shut and the answer read to its end. No port, no
 * network, and nothing of the request is parsed by this file on the
 * server's behalf.
 *
 * Authentication would stop almost every mutant at the door, so an input may
 * ask to be signed: a header line "x-fuzz-sign: ACCESS" is replaced by a
 * valid SigV4 Authorization (and x-amz-date) of the request as this file
 * reads it, for that user of the test credentials ("full" may touch every
 * bucket, "scoped" only bucket "mine"). Where this reading differs from
 * libmicrohttpd's, the signature fails, which is a fine input too.
 *
 * No input could name an open multipart upload (their ids are 128 random
 * bits), so none reached what follows the upload's lookup: UploadPart,
 * UploadPartCopy and its x-amz-copy-source-range, Complete, Abort and
 * ListParts answered NoSuchUpload. The harness keeps one open upload of
 * key u1 in bucket "mine" and an object "mine/src" to copy from, and the
 * text "x-fuzz-upload" anywhere in an input stands for that upload's id;
 * an input that completes or aborts it gets a new one next time (when the
 * inputs' own uploads fill the limits, the harness removes those of
 * "mine" first).
 *
 * Promises checked on every answer:
 *  - it is one HTTP/1.x response with a status line, header lines of the
 *    form "Name: value" (no header a client injected with CR or LF), and,
 *    when it is a success, a request id;
 *  - a request that is not signed by a known user never gets a 2xx, except
 *    /health and /metrics, the anonymous operator endpoints;
 *  - user "scoped" never gets a 2xx for another bucket's objects;
 *  - the gateway never answers 500 (an internal error is a bug);
 *  - an UploadPartCopy into the harness's upload, sent alone, that
 *    succeeds made a part of exactly the source's bytes its
 *    x-amz-copy-source-range names ("bytes=FIRST-LAST", decimal, inside
 *    the source, by the rule as written here; all of them without one):
 *    its ETag is their MD5; and a range that the rule refuses is refused.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../gateway/gw.h"
#include "../gateway/s3_route.h"
#include "../gateway/s3_xml.h"

/*
 * Whether every 2xx answer in resp is /health's or /metrics' by its body:
 * the second opinion when the request line is too mangled to say which
 * path libmicrohttpd took from it. An empty 2xx body proves nothing.
 */
static bool fuzz_operator_answers(const struct gw_buf *resp)
{
	const char *p = resp->data, *end = p ? p + resp->len : NULL;

	/*
	 * Every status line, not answer after answer by Content-Length:
	 * libmicrohttpd's own 400 repeats its header block as its body
	 * (0.9.75), which a walk by length reads as junk (a campaign's /health
	 * and /metrics pipelined before a bad request). The answer's first
	 * bytes say what it is, even when it was cut short.
	 */
	while (p && p < end) {
		const char *body = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
		const char *next = memmem(p + 1, (size_t)(end - p - 1), "HTTP/1.", 7);
		unsigned status = 0;

		if (sscanf(p, "HTTP/1.%*1[01] %3u ", &status) == 1 && status >= 200 &&
		    status < 300) {
			if (!body || end - body < 4 + 7)
				return false;
			body += 4;
			if (memcmp(body, "ok\n", 3) != 0 && memcmp(body, "# HELP ", 7) != 0)
				return false;
		}
		p = next;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_HDRS 64
#define FUZZ_REGION "us-east-1"

static const char fuzz_users[] =
	"full fullsecretfullsecretfullsecret00\n"
	"scoped scopedsecretscopedsecretscoped00 mine\n";

static struct auth_creds fuzz_creds;
static struct gw_server fuzz_srv = { .access_fd = -1, .creds = &fuzz_creds };
static char fuzz_root[PATH_MAX / 2];

static void fuzz_fail(const char *what, const char *resp, size_t len)
{
	fprintf(stderr, "fuzz_gw_http: broken promise: %s\n--- response ---\n%.*s\n", what,
		(int)(len > 2000 ? 2000 : len), resp);
	abort();
}

static void fuzz_cleanup(void)
{
	char cmd[PATH_MAX];

	if (fuzz_srv.mhd)
		MHD_stop_daemon(fuzz_srv.mhd);
	gw_prestage_wait(&fuzz_srv);
	s3_uploads_release_all(&fuzz_srv);
	kvt_store_close(fuzz_srv.st);
	auth_creds_release(&fuzz_creds);
	kvt_config_release(&fuzz_srv.cfg);
	xml_global_release();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_root);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_gw_http: cannot remove '%s'\n", fuzz_root);
}

static void fuzz_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	if (getenv("FUZZ_VERBOSE"))
		vfprintf(stderr, fmt, ap);
}

static void fuzz_init(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	struct gw_options *o = &fuzz_srv.opt;
	char dir[PATH_MAX], err[256];

	/*
	 * OpenSSL's exit handler (OPENSSL_cleanup) must run after fuzz_cleanup,
	 * so it is registered first, here. Otherwise a later call registers it
	 * (the store's first digest initialises only OpenSSL's base, which
	 * registers nothing), it runs first and deletes the key of OpenSSL's
	 * per-thread state while libmicrohttpd's thread still runs, and that
	 * thread's DRBG and error queue are never freed: LeakSanitizer reported
	 * them. Not opts 0: that returns at once once anything initialised the
	 * base.
	 */
	if (!OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL))
		abort();
	kvt_log_set_level(getenv("FUZZ_VERBOSE") ? KVT_LOG_INFO : KVT_LOG_ERR);
	snprintf(fuzz_root, sizeof(fuzz_root), "%s/fuzz_gw_http.XXXXXX", base);
	if (!mkdtemp(fuzz_root))
		abort();
	snprintf(dir, sizeof(dir), "%s/data", fuzz_root);
	kvt_config_init(&fuzz_srv.cfg);
	free(fuzz_srv.cfg.store.dir);
	fuzz_srv.cfg.store.dir = strdup(dir);
	fuzz_srv.cfg.store.capacity = 8u << 20;
	fuzz_srv.cfg.store.segment_size = 1u << 20;
	fuzz_srv.cfg.store.io = KVT_IO_SYNC;
	/* What kvtier-gateway's main() sets from its defaults. */
	o->domain = GW_DEFAULT_DOMAIN;
	o->region = FUZZ_REGION;
	o->threads = 1;
	o->timeout = 5;
	o->max_connections = 16;
	o->max_object = 1u << 20;
	o->min_part = 16;
	/* Few, in a store of 8 MiB: 0, as before, refused every upload. */
	o->max_uploads = 64;
	o->max_uploads_bucket = 16;
	if (auth_creds_parse(&fuzz_creds, fuzz_users, "fuzz", err, sizeof(err)) < 0 ||
	    kvt_store_open(&fuzz_srv.cfg, KVT_OPEN_CREATE, &fuzz_srv.st) < 0 ||
	    kvt_bucket_create_internal(fuzz_srv.st, GW_UPLOADS_BUCKET) < 0 ||
	    s3_uploads_init(&fuzz_srv) < 0) {
		fprintf(stderr, "fuzz_gw_http: cannot set up: %s\n", err);
		abort();
	}
	/* Buckets for the seeds to find: one of each user's. */
	kvt_bucket_create(fuzz_srv.st, "mine");
	kvt_bucket_create(fuzz_srv.st, "theirs");
	xml_global_init();
	fuzz_srv.mhd = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC |
		MHD_USE_ERROR_LOG, 0, NULL, NULL, http_access_cb, &fuzz_srv,
		MHD_OPTION_EXTERNAL_LOGGER, fuzz_mhd_log, NULL,
		MHD_OPTION_URI_LOG_CALLBACK, http_uri_cb, &fuzz_srv,
		MHD_OPTION_NOTIFY_COMPLETED, http_completed_cb, &fuzz_srv,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->timeout,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)o->max_connections,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
		MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (size_t)(16 * 1024),
		MHD_OPTION_END);
	if (!fuzz_srv.mhd)
		abort();
	atexit(fuzz_cleanup);
}

/* ---- signing, as a client would ------------------------------------------ */

struct fuzz_req {
	char method[32];
	char path[2048], query[2048];
	char names[FUZZ_MAX_HDRS][64];
	char values[FUZZ_MAX_HDRS][512];
	struct auth_hdr hdrs[FUZZ_MAX_HDRS];
	size_t nhdrs;
	char sign_as[64];	/* the user x-fuzz-sign named, or "" */
	size_t head_len;	/* bytes of the request line and headers */
};

static int fuzz_cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *fuzz_secret(const char *access)
{
	const struct auth_user *u = auth_creds_find(&fuzz_creds, access);

	return u ? u->secret : NULL;
}

/* Reads the head of data as a client meant it; false if it has no shape. */
static bool fuzz_parse(const char *data, size_t size, struct fuzz_req *r)
{
	const char *p = data, *end = data + size, *eol, *sp, *q;
	size_t n;

	memset(r, 0, sizeof(*r));
	eol = memchr(p, '\n', size);
	if (!eol)
		return false;
	sp = memchr(p, ' ', (size_t)(eol - p));
	if (!sp || (size_t)(sp - p) >= sizeof(r->method))
		return false;
	memcpy(r->method, p, (size_t)(sp - p));
	p = sp + 1;
	sp = memchr(p, ' ', (size_t)(eol - p));
	if (!sp)
		return false;
	q = memchr(p, '?', (size_t)(sp - p));
	n = (size_t)((q ? q : sp) - p);
	if (n >= sizeof(r->path))
		return false;
	memcpy(r->path, p, n);
	if (q) {
		n = (size_t)(sp - q - 1);
		if (n >= sizeof(r->query))
			return false;
		memcpy(r->query, q + 1, n);
	}
	p = eol + 1;
	while (p < end) {
		const char *colon, *v, *ve;

		eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			return false;
		ve = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
		if (ve == p) {
			r->head_len = (size_t)(eol + 1 - data);
			return true;
		}
		colon = memchr(p, ':', (size_t)(ve - p));
		if (!colon || (size_t)(colon - p) >= sizeof(r->names[0]) ||
		    r->nhdrs == FUZZ_MAX_HDRS)
			return false;
		for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++)
			;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		if ((size_t)(ve - v) >= sizeof(r->values[0]))
			return false;
		memcpy(r->names[r->nhdrs], p, (size_t)(colon - p));
		r->names[r->nhdrs][colon - p] = '\0';
		memcpy(r->values[r->nhdrs], v, (size_t)(ve - v));
		r->values[r->nhdrs][ve - v] = '\0';
		if (strcasecmp(r->names[r->nhdrs], "x-fuzz-sign") == 0)
			snprintf(r->sign_as, sizeof(r->sign_as), "%s", r->values[r->nhdrs]);
		else if (strcasecmp(r->names[r->nhdrs], "authorization") != 0 &&
			 strcasecmp(r->names[r->nhdrs], "x-amz-date") != 0)
			r->nhdrs++;
		p = eol + 1;
	}
	return false;
}

/* The signed request: head rewritten with Authorization, body as it was. */
static bool fuzz_sign(const char *data, size_t size, struct fuzz_req *r, struct gw_buf *out)
{
	const char *secret = fuzz_secret(r->sign_as), *names[FUZZ_MAX_HDRS + 1];
	const char *payload = "UNSIGNED-PAYLOAD";
	char amz_date[17], day[9], scope[96], k0[128], sig[65], h[65];
	struct gw_buf creq, uri, sh, sts;
	uint8_t a[32], b[32];
	time_t now = time(NULL);
	struct tm tm;
	bool ok;

	if (!secret || r->nhdrs + 2 > FUZZ_MAX_HDRS)
		return false;
	gmtime_r(&now, &tm);
	strftime(amz_date, sizeof(amz_date), "%Y%m%dT%H%M%SZ", &tm);
	strftime(day, sizeof(day), "%Y%m%d", &tm);
	snprintf(scope, sizeof(scope), "%s/" FUZZ_REGION "/s3/aws4_request", day);
	snprintf(r->names[r->nhdrs], sizeof(r->names[0]), "x-amz-date");
	snprintf(r->values[r->nhdrs], sizeof(r->values[0]), "%s", amz_date);
	r->nhdrs++;
	for (size_t i = 0; i < r->nhdrs; i++)
		if (!strcasecmp(r->names[i], "x-amz-content-sha256"))
			payload = NULL;
	if (payload && r->nhdrs < FUZZ_MAX_HDRS) {
		/* Without it the signature covers an empty body (AWS's rule). */
		snprintf(r->names[r->nhdrs], sizeof(r->names[0]), "x-amz-content-sha256");
		snprintf(r->values[r->nhdrs], sizeof(r->values[0]), "%s", payload);
		r->nhdrs++;
	}
	for (size_t i = 0; i < r->nhdrs; i++) {
		for (char *c = r->names[i]; *c; c++)
			*c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
		r->hdrs[i] = (struct auth_hdr){ r->names[i], r->values[i] };
		names[i] = r->names[i];
		if (!strcmp(r->names[i], "x-amz-content-sha256"))
			payload = r->values[i];
	}
	qsort(names, r->nhdrs, sizeof(names[0]), fuzz_cmp_names);
	gw_buf_init(&sh);
	for (size_t i = 0; i < r->nhdrs; i++)
		if (i == 0 || strcmp(names[i], names[i - 1]))
			gw_buf_printf(&sh, "%s%s", sh.len ? ";" : "", names[i]);
	gw_buf_init(&uri);
	gw_buf_init(&creq);
	gw_buf_init(&sts);
	ok = auth_canonical_uri(&uri, r->path) == 0 &&
	     auth_canonical_request(&creq, r->method, gw_buf_str(&uri), r->query, false, r->hdrs,
				    r->nhdrs, gw_buf_str(&sh), payload) == 0;
	if (ok) {
		gw_sha256_hex(h, gw_buf_str(&creq), creq.len);
		gw_buf_printf(&sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date, scope, h);
		snprintf(k0, sizeof(k0), "AWS4%s", secret);
		gw_hmac_sha256(a, k0, strlen(k0), day, strlen(day));
		gw_hmac_sha256(b, a, 32, FUZZ_REGION, strlen(FUZZ_REGION));
		gw_hmac_sha256(a, b, 32, "s3", 2);
		gw_hmac_sha256(b, a, 32, "aws4_request", strlen("aws4_request"));
		gw_hmac_sha256(a, b, 32, gw_buf_str(&sts), sts.len);
		gw_hex(sig, a, 32);
		/* The request line as it came, then our reading of the headers. */
		gw_buf_append(out, data, (size_t)((const char *)memchr(data, '\n', size) + 1 - data));
		for (size_t i = 0; i < r->nhdrs; i++)
			gw_buf_printf(out, "%s: %s\r\n", r->names[i], r->values[i]);
		gw_buf_printf(out, "Authorization: AWS4-HMAC-SHA256 Credential=%s/%s, "
			      "SignedHeaders=%s, Signature=%s\r\n\r\n", r->sign_as, scope,
			      gw_buf_str(&sh), sig);
		gw_buf_append(out, data + r->head_len, size - r->head_len);
		ok = !gw_buf_failed(out);
	}
	gw_buf_release(&sh);
	gw_buf_release(&uri);
	gw_buf_release(&creq);
	gw_buf_release(&sts);
	return ok;
}

/* ---- one exchange --------------------------------------------------------- */

/* Sends req, reads the answer to EOF into resp. */
static void fuzz_exchange(const char *req, size_t len, struct gw_buf *resp)
{
	struct sockaddr_in peer = { .sin_family = AF_INET, .sin_port = htons(40000) };
	int sv[2];
	size_t off = 0;
	char buf[16384];

	peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	if (MHD_add_connection(fuzz_srv.mhd, sv[1], (struct sockaddr *)&peer, sizeof(peer)) !=
	    MHD_YES) {
		close(sv[0]);
		return;		/* libmicrohttpd closed sv[1] */
	}
	/* Write and read together: the answer may come before the request ends. */
	for (;;) {
		struct pollfd pfd = { .fd = sv[0], .events = POLLIN | (off < len ? POLLOUT : 0) };
		int n = poll(&pfd, 1, 10000);

		if (n <= 0) {
			if (getenv("FUZZ_VERBOSE"))
				fprintf(stderr, "fuzz_gw_http: poll timed out, %zu bytes in\n", resp->len);
			break;	/* MHD's own timeout is 5 s: something hangs */
		}
		if ((pfd.revents & POLLOUT) && off < len) {
			ssize_t w = send(sv[0], req + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (w < 0 && errno != EAGAIN) {
				off = len;
			} else if (w > 0) {
				off += (size_t)w;
			}
			if (off == len)
				shutdown(sv[0], SHUT_WR);
		}
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = recv(sv[0], buf, sizeof(buf), MSG_DONTWAIT);

			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
				break;
			if (r > 0)
				gw_buf_append(resp, buf, (size_t)r);
		}
		if (len == 0 && off == 0) {
			shutdown(sv[0], SHUT_WR);
			off = 1;	/* an empty request: shut once */
			len = 1;
		}
	}
	close(sv[0]);
}

/* Sends req as it is, or signed if it asks to be; r gets the harness's reading. */
static bool fuzz_send(const char *req, size_t size, struct fuzz_req *r, struct gw_buf *resp)
{
	struct gw_buf signed_req;
	bool sign;

	gw_buf_init(&signed_req);
	sign = fuzz_parse(req, size, r) && r->sign_as[0] && fuzz_sign(req, size, r, &signed_req);
	if (sign && getenv("FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz_gw_http: signed as\n%.*s\n", (int)signed_req.len,
			gw_buf_str(&signed_req));
	if (sign)
		fuzz_exchange(gw_buf_str(&signed_req), signed_req.len, resp);
	else
		fuzz_exchange(req, size, resp);
	gw_buf_release(&signed_req);
	return sign;
}

/* ---- the harness's upload -------------------------------------------------- */

#define FUZZ_UPLOAD_MARK "x-fuzz-upload"
#define FUZZ_UPLOAD_KEY "u1"
#define FUZZ_SOURCE_KEY "src"
#define FUZZ_SOURCE_SIZE 5000

static char fuzz_upload[64];	/* its id; "" when there is none */

static bool fuzz_exists(const char *bucket, const char *key)
{
	struct kvt_object *o = NULL;
	int rc = kvt_object_head(fuzz_srv.st, bucket, key, &o);

	kvt_object_free(o);
	return rc == 0;
}

/* "mine/src": bytes that differ at every offset, mod 251. */
static void fuzz_source_ensure(void)
{
	struct kvt_put_opts opts = { .flags = KVT_PUT_MD5_ETAG };
	struct kvt_writer *w = NULL;
	char buf[FUZZ_SOURCE_SIZE];

	if (fuzz_exists("mine", FUZZ_SOURCE_KEY))
		return;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i % 251);
	if (kvt_writer_open(fuzz_srv.st, "mine", FUZZ_SOURCE_KEY, &opts, &w) < 0)
		return;		/* a full store: the copies answer 404 */
	if (kvt_writer_write(w, buf, sizeof(buf)) < 0 || kvt_writer_commit(w, NULL) < 0)
		kvt_writer_abort(w);
}

/* An open upload of mine/u1 in fuzz_upload, made through the gateway if need be. */
static void fuzz_upload_ensure(void)
{
	static const char create[] = "POST /mine/" FUZZ_UPLOAD_KEY "?uploads HTTP/1.1\r\n"
				     "Host: localhost\r\nx-fuzz-sign: full\r\n\r\n";
	char mkey[128];

	kvt_bucket_create(fuzz_srv.st, "mine");	/* an input may have deleted it */
	fuzz_source_ensure();
	if (fuzz_upload[0]) {
		snprintf(mkey, sizeof(mkey), "mine/%s/meta", fuzz_upload);
		if (fuzz_exists(GW_UPLOADS_BUCKET, mkey))
			return;
		fuzz_upload[0] = '\0';
	}
	for (int attempt = 0; attempt < 2 && !fuzz_upload[0]; attempt++) {
		struct fuzz_req *r = malloc(sizeof(*r));
		const char *id, *end;
		struct gw_buf resp;

		if (!r)
			return;
		gw_buf_init(&resp);
		fuzz_send(create, sizeof(create) - 1, r, &resp);
		id = strstr(gw_buf_str(&resp), "<UploadId>");
		end = id ? strstr(id, "</UploadId>") : NULL;
		if (end && (size_t)(end - id - 10) < sizeof(fuzz_upload))
			snprintf(fuzz_upload, sizeof(fuzz_upload), "%.*s", (int)(end - id - 10),
				 id + 10);
		else if (strstr(gw_buf_str(&resp), "SlowDown"))
			s3_uploads_purge(&fuzz_srv, "mine/");	/* the inputs' uploads */
		gw_buf_release(&resp);
		free(r);
	}
}

/* data with every FUZZ_UPLOAD_MARK replaced by the upload's id, into out. */
static void fuzz_upload_subst(const uint8_t *data, size_t size, struct gw_buf *out)
{
	const char *p = (const char *)data, *end = p + size, *m;

	while ((m = memmem(p, (size_t)(end - p), FUZZ_UPLOAD_MARK,
			   sizeof(FUZZ_UPLOAD_MARK) - 1))) {
		gw_buf_append(out, p, (size_t)(m - p));
		gw_buf_puts(out, fuzz_upload);
		p = m + sizeof(FUZZ_UPLOAD_MARK) - 1;
	}
	gw_buf_append(out, p, (size_t)(end - p));
}

/* ---- UploadPartCopy's range ------------------------------------------------- */

static const char fuzz_twice[] = "";

/* The header's value as the harness read it; NULL if absent, fuzz_twice if sent twice. */
static const char *fuzz_hdr(const struct fuzz_req *r, const char *name)
{
	const char *v = NULL;

	for (size_t i = 0; i < r->nhdrs; i++) {
		if (strcasecmp(r->names[i], name) != 0)
			continue;
		if (v)
			return fuzz_twice;
		v = r->values[i];
	}
	return v;
}

/* Decimal digits at *p, saturating at UINT64_MAX; false if there are none. */
static bool ref_digits(const char **p, uint64_t *v)
{
	const char *s = *p;

	*v = 0;
	for (; *s >= '0' && *s <= '9'; s++)
		*v = *v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : *v * 10 + (uint64_t)(*s - '0');
	if (s == *p)
		return false;
	*p = s;
	return true;
}

/* S3's rule: "bytes=FIRST-LAST", decimal, FIRST <= LAST < size; none: everything. */
static bool ref_copy_range(const char *v, uint64_t size, uint64_t *first, uint64_t *len)
{
	uint64_t a, b;

	if (!v) {
		*first = 0;
		*len = size;
		return true;
	}
	if (strncmp(v, "bytes=", 6) != 0)
		return false;
	v += 6;
	if (!ref_digits(&v, &a) || *v++ != '-' || !ref_digits(&v, &b) || *v || a > b || b >= size)
		return false;
	*first = a;
	*len = b - a + 1;
	return true;
}

/*
 * When r (the whole input, size bytes, signed) was an UploadPartCopy into
 * the harness's upload, checks what its answer resp says against the
 * source as it is now (nothing else ran meanwhile).
 */
static void fuzz_check_part_copy(const struct fuzz_req *r, size_t size, const struct gw_buf *resp)
{
	const char *range = fuzz_hdr(r, "x-amz-copy-source-range");
	const char *src = fuzz_hdr(r, "x-amz-copy-source"), *host = fuzz_hdr(r, "host");
	const char *body = gw_buf_str(resp), *etag;
	char uri[sizeof(r->path) + sizeof(r->query) + 2], hex[33];
	struct kvt_reader *rd = NULL;
	uint8_t md5[16];
	char *sb = NULL, *sk = NULL, *buf = NULL;
	struct s3_route route;
	uint64_t first = 0, len = 0;
	bool copied, refused, ok;

	copied = strstr(body, "<CopyPartResult") != NULL;
	refused = strstr(body, "x-amz-copy-source-range") != NULL;
	/* Sent alone, and read by the harness as by libmicrohttpd: one of each header. */
	if ((!copied && !refused) || !fuzz_upload[0] || r->head_len != size ||
	    strcmp(r->method, "PUT") || !src || src == fuzz_twice || range == fuzz_twice ||
	    host == fuzz_twice)
		return;
	snprintf(uri, sizeof(uri), "%s%s%s", r->path, r->query[0] ? "?" : "", r->query);
	if (s3_route_parse(&route, uri, host, GW_DEFAULT_DOMAIN) != 0)
		return;
	ok = route.bucket && !strcmp(route.bucket, "mine") && route.key &&
	     !strcmp(route.key, FUZZ_UPLOAD_KEY) && s3_route_param(&route, "uploadId") &&
	     !strcmp(s3_route_param(&route, "uploadId"), fuzz_upload) &&
	     s3_route_op(&route, "PUT", true) == S3_OP_UPLOAD_PART_COPY;
	s3_route_release(&route);
	if (!ok || s3_copy_source(src, &sb, &sk) != S3_OK ||
	    kvt_reader_open(fuzz_srv.st, sb, sk, &rd) < 0)
		goto out;
	ok = ref_copy_range(range, kvt_reader_object(rd)->size, &first, &len);
	if (refused && ok)
		fuzz_fail("UploadPartCopy takes every range inside the source", body, resp->len);
	if (copied && !ok)
		fuzz_fail("UploadPartCopy copies no range the rule refuses", body, resp->len);
	if (!copied)
		goto out;
	buf = malloc(len ? len : 1);
	if (!buf || kvt_reader_pread(rd, buf, len, first) != (ssize_t)len)
		goto out;	/* the source is cold, or its recall failed: nothing to compare */
	EVP_Digest(buf, len, md5, NULL, EVP_md5(), NULL);
	gw_hex(hex, md5, sizeof(md5));
	etag = strstr(body, "<ETag>");
	if (!etag || etag[6] != '"' || strncmp(etag + 7, hex, 32) || etag[39] != '"')
		fuzz_fail("a copied part is the bytes the range names (its ETag, their MD5)", body,
			  resp->len);
out:
	kvt_reader_close(rd);
	free(buf);
	free(sb);
	free(sk);
}

/* Checks every response in resp; returns how many 2xx came. */
static unsigned fuzz_check(const struct gw_buf *resp)
{
	const char *p = resp->data, *end = p ? p + resp->len : NULL;
	unsigned ok = 0;

	while (p && p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		unsigned status = 0;
		bool has_id = false;
		long clen = -1;

		if (!eol)
			break;	/* the connection ended mid-answer (a client-side EOF) */
		if (sscanf(p, "HTTP/1.%*1[01] %3u ", &status) != 1 || status < 100 || status > 599)
			fuzz_fail("an answer starts with a status line", p, (size_t)(end - p));
		if (status == 500)
			fuzz_fail("no internal errors", p, (size_t)(end - p));
		ok += status >= 200 && status < 300;
		if (getenv("FUZZ_VERBOSE"))
			fprintf(stderr, "fuzz_gw_http: answer %u\n%.*s\n", status,
				(int)(end - p > 1500 ? 1500 : end - p), p);
		for (p = eol + 1; p < end; p = eol + 1) {
			const char *colon;

			eol = memchr(p, '\n', (size_t)(end - p));
			if (!eol || eol == p || eol[-1] != '\r')
				fuzz_fail("header lines end in CRLF", p, (size_t)(end - p));
			if (eol == p + 1)
				break;	/* the blank line */
			colon = memchr(p, ':', (size_t)(eol - p));
			if (!colon || colon == p)
				fuzz_fail("a header line is Name: value", p, (size_t)(end - p));
			for (const char *c = p; c < colon; c++)
				if (*c <= ' ' || *c >= 0x7f)
					fuzz_fail("header names are tokens", p, (size_t)(end - p));
			if ((size_t)(colon - p) == 16 && !strncasecmp(p, "x-amz-request-id", 16))
				has_id = true;
			if ((size_t)(colon - p) == 14 && !strncasecmp(p, "content-length", 14))
				clen = strtol(colon + 1, NULL, 10);
		}
		/* libmicrohttpd answers requests it cannot parse itself, without one. */
		if (status >= 200 && status < 300 && !has_id)
			fuzz_fail("every success carries a request id", resp->data, resp->len);
		if (!eol)
			break;
		p = eol + 1;
		/*
		 * An answer to HEAD has Content-Length and no body: when the next
		 * answer starts right here and not after clen bytes, it was one
		 * (a campaign read "TTP/1.1 200" past a HEAD's 404).
		 */
		if (clen > 0 && end - p >= 7 && !strncmp(p, "HTTP/1.", 7) &&
		    !(clen <= end - p - 7 && !strncmp(p + clen, "HTTP/1.", 7)) && p + clen != end)
			continue;
		/* A body we can skip only when its length is known; else stop. */
		if (clen < 0 || clen > end - p)
			break;
		p += clen;
	}
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *req;
	struct fuzz_req *r;
	struct gw_buf input, resp;
	unsigned ok;
	bool sign;

	if (size > 64 * 1024)
		return 0;
	if (!fuzz_srv.mhd)
		fuzz_init();
	r = malloc(sizeof(*r));
	if (!r)
		return 0;
	gw_buf_init(&input);
	gw_buf_init(&resp);
	if (memmem(data, size, FUZZ_UPLOAD_MARK, sizeof(FUZZ_UPLOAD_MARK) - 1)) {
		fuzz_upload_ensure();
		fuzz_upload_subst(data, size, &input);
		if (gw_buf_failed(&input))
			goto out;
		data = (const uint8_t *)gw_buf_str(&input);
		size = input.len;
	}
	req = (const char *)data;
	sign = fuzz_send(req, size, r, &resp);
	ok = fuzz_check(&resp);
	if (ok && !sign) {
		/* Anonymous success: only the operator endpoints give it. The
		 * request line alone says which path: what lies between the first
		 * space and the HTTP version, read as libmicrohttpd reads it, a C
		 * string (campaigns found "GET\0\x01\xf5\0 /health\0\xff HTTP/1.1"
		 * answered as /health). Its headers may be junk it tolerates. */
		const char *eol = memchr(req, '\n', size);
		size_t len = eol ? (size_t)(eol - req) : size;
		const char *sp = memchr(req, ' ', len);
		const char *version = memmem(req, len, " HTTP/", 6);
		char target[64] = "";

		if (sp && version && version > sp) {
			size_t n;

			while (sp < version && *sp == ' ')
				sp++;	/* "GET  /health HTTP/1.1"; req is not a C string */
			n = (size_t)(version - sp);
			memcpy(target, sp, n < sizeof(target) - 1 ? n : sizeof(target) - 1);
			target[strcspn(target, "?")] = '\0';	/* "/health?versionId= HTTm /" */
		}
		if (strcmp(target, "/health") != 0 && strcmp(target, "/metrics") != 0 &&
		    !fuzz_operator_answers(&resp))
			fuzz_fail("only /health and /metrics answer 2xx without a signature",
				  resp.data, resp.len);
	}
	if (ok && sign && !strcmp(r->sign_as, "scoped")) {
		/* Path style: /BUCKET[/KEY]; "scoped" owns "mine" only. */
		const char *b = r->path + 1;
		size_t blen = strcspn(b, "/");
		bool vhost = false;

		for (size_t i = 0; i < r->nhdrs; i++)
			if (!strcmp(r->names[i], "host") && strstr(r->values[i], "." GW_DEFAULT_DOMAIN))
				vhost = true;
		if (!vhost && blen > 0) {
			size_t n = 0;
			char *bucket = gw_url_decode(b, blen, false, &n);

			if (bucket && strcmp(bucket, "mine") != 0)
				fuzz_fail("a scoped user touches only its buckets", resp.data,
					  resp.len);
			free(bucket);
		}
	}
	if (sign)
		fuzz_check_part_copy(r, size, &resp);
out:
	gw_buf_release(&input);
	gw_buf_release(&resp);
	free(r);
	return 0;
}
