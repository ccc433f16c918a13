/*
 * cold_s3.c - the cold tier in a partner S3 bucket (`s3://BUCKET/PREFIX`),
 * over libcurl with its SigV4 signer: Ceph RGW, MinIO, AWS, any S3.
 *
 * The G4 key "BUCKET/KEY" is the S3 key "PREFIX/BUCKET/KEY", with "." and
 * ".." components, empty components and '%' encoded (cold_s3_key()), so no
 * key climbs out of PREFIX or lands on another; the URL path is then
 * percent-encoded as SigV4 canonicalises it, and libcurl is told to leave
 * it alone (CURLOPT_PATH_AS_IS: by default it merges "/../").
 *
 * [g4] endpoint "http://HOST:PORT" or "HOST:PORT" (https) names the partner
 * and selects path-style addressing, which every S3 clone speaks; unset,
 * AWS with virtual-host style. [g4] region is the SigV4 scope
 * ("aws:amz:REGION:s3"; us-east-1 by default), [g4] ca_file the PEM of the
 * CAs that sign a private partner's certificate. [g4] credentials is a file
 * of two lines, "access_key = ..." and "secret_key = ...", readable by its
 * owner only. Payloads go as UNSIGNED-PAYLOAD (TLS or loopback carry them;
 * the ETag check below proves them): a streamed body cannot be hashed
 * before it is sent.
 *
 * Connections are kept: multi handles wait in a pool between requests with
 * their connections, and each request is a fresh easy handle run on one
 * (s3_run).
 *
 * A put of up to [g4] part_size is one PUT; a larger one a multipart upload
 * whose parts go in parallel ([g4] jobs threads; the source is read in
 * order, one part at a time, under a lock). Each part's ETag must be the
 * MD5 of what was sent, and the completed object's the MD5 of the parts'
 * MD5s "-N" (or, as s3rver answers, the MD5 of the whole object): G4 then
 * holds exactly those bytes without reading them back. Any failure aborts
 * the upload. The journal (cold.h; the catalog) records an upload between
 * its initiation and its completion or abort, so one killed half way is
 * aborted by the next run; cleanup() also aborts uploads under PREFIX that
 * are older than a day, which a lost catalog no longer knows.
 *
 * A conditional put (put_if) sends If-Match: ETAG, or If-None-Match: *,
 * on the PUT, or on the completion of a multipart upload; a conditional
 * delete (del_if) If-Match: ETAG on the DELETE.
 *
 * Errors: 404 -> -ENOENT, but a put's (PUT or POST: a part's NoSuchUpload
 * once another node's cleanup aborted the upload) -> -EIO, logged: the put
 * failed, no key is missing (demotion took -ENOENT for an object changed
 * meanwhile, and counted no failure); and 404 NoSuchBucket (the bucket of
 * [g4] url gone, or misnamed) -> -ENXIO for every request, logged as the
 * missing bucket: it is no missing key, and no failure of the store either
 * (-EIO was a gateway's 500 InternalError); a HEAD's 404, which has no
 * body to say which, is asked again as a GET (s3_head_absent()); 500, 503 and SlowDown -> -EAGAIN
 * (retry later, nothing lost); a conditional request's 412, or an
 * If-Match's 404 NoSuchKey (AWS: the key is absent), -> -ECANCELED, and
 * its 409 ConditionalRequestConflict -> -EAGAIN (so too these codes in
 * the <Error> of a conditional completion's 200); a conditional delete's
 * 400 -> -EOPNOTSUPP (no If-Match there) unless its code is about the
 * credentials (s3_credentials_code()); 501 or 405 -> -EOPNOTSUPP, but to a
 * multipart upload's initiation or part, which carry no condition, -EIO
 * (the put failed; conditional puts stay on); no answer (refused,
 * dropped, timed out, stalled) -> -EHOSTUNREACH; anything else -> -EIO,
 * logged with the partner's message.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "cold.h"
#include "log.h"
#include "util.h"

#define S3_POOL_MAX 64		/* idle multi handles kept, with their connections */
#define S3_BUFS_MAX 16		/* idle part buffers kept */
#define S3_RESP_MAX (1u << 20)	/* an error or XML answer, at most */
#define S3_PARTS_MAX 10000	/* S3's limit */
#define S3_STALE_NS (24ll * 3600 * 1000000000)	/* cleanup() aborts uploads older */

struct cold_s3 {
	struct cold base;
	char *bucket, *prefix;
	char *origin;		/* "http[s]://HOST[:PORT]" */
	int path_style;		/* /BUCKET/KEY on origin, else BUCKET.origin */
	char *ca_file;
	char sigv4[128];	/* "aws:amz:REGION:s3" */
	char userpwd[1100];	/* "ACCESS:SECRET" */
	uint64_t part_size;
	unsigned jobs;
	pthread_mutex_t lock;
	CURLM *idle[S3_POOL_MAX];
	unsigned nidle;
	char *bufs[S3_BUFS_MAX];	/* idle buffers of part_size bytes */
	unsigned nbufs;
	int no_cond;		/* 1: a conditional put's condition was answered 501 or 405:
				 * put_if asks no more */
	int no_del_cond;	/* 1: the same for a conditional delete (501 or 400): del_if */
	struct log_limit no_bucket;	/* s3_perform()'s NoSuchBucket line */
	struct log_limit no_answer;	/* ... and its line for no answer */
};

/* One request and what came back. */
struct s3_req {
	const char *method;	/* GET HEAD PUT POST DELETE */
	const char *pkey;	/* partner key; NULL: the bucket */
	const char *query;	/* canonical: sorted, encoded, "name=value&..." */
	const char *ctype;
	const char *cond;	/* "If-Match: ETAG" or "If-None-Match: *", or NULL */
	const char *range;	/* "Range: bytes=A-B", or NULL */
	int quiet_unsupported;	/* a 501 or 405 is an answer, not an error to log */
	/* body: from src (len bytes at off), or from mem */
	cold_source_fn src;
	void *arg;
	uint64_t off, len, sent;
	const char *mem;
	EVP_MD_CTX *md5;	/* hashes what is sent, if not NULL */
	int src_rc;
	/* answer: a 2xx GET body to sink, anything else into resp */
	cold_sink_fn sink;
	void *sink_arg;
	int sink_rc;
	uint64_t got;
	long status;
	char etag[KVT_ETAG_MAX];
	uint64_t length;
	char *resp;
	size_t resp_len, resp_cap;
	char errbuf[CURL_ERROR_SIZE];
	CURL *curl;
};

static pthread_once_t s3_once = PTHREAD_ONCE_INIT;
static CURLcode s3_init_rc;

static void s3_global_init(void)
{
	s3_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

/* ---- handles --------------------------------------------------------------- */

/*
 * Connections are kept between requests, in the connection cache of a
 * multi handle; each request gets a fresh easy handle, run on a multi
 * handle taken from the pool (s3_run). Easy handles kept for their
 * connections crashed Debian 12's libcurl (7.88.1): an answer whose first
 * header line is folded, on a handle that took an answer before, unfolds
 * into a header of that earlier answer, freed by then (curl issue 11620,
 * fixed in 8.3.0; tests/fuzz_g4_s3 found it). A fresh handle refuses such
 * an answer (CURLE_BAD_FUNCTION_ARGUMENT: -EIO).
 */
static CURLM *s3_multi_get(struct cold_s3 *s)
{
	CURLM *m = NULL;

	pthread_mutex_lock(&s->lock);
	if (s->nidle > 0)
		m = s->idle[--s->nidle];
	pthread_mutex_unlock(&s->lock);
	return m ? m : curl_multi_init();
}

static void s3_multi_put(struct cold_s3 *s, CURLM *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&s->lock);
	if (s->nidle < S3_POOL_MAX) {
		s->idle[s->nidle++] = m;
		m = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	if (m)
		curl_multi_cleanup(m);
}

/* curl_easy_perform(e), on m's connections; CURLE_ABORTED_BY_CALLBACK
 * once the tier is stopped (cold_stop_at()). */
static CURLcode s3_run(const struct cold_s3 *s, CURLM *m, CURL *e)
{
	CURLcode cc = CURLE_FAILED_INIT;
	int running = 1, left;
	CURLMsg *msg;

	if (cold_stopped(&s->base))
		return CURLE_ABORTED_BY_CALLBACK;
	if (curl_multi_add_handle(m, e) != CURLM_OK)
		return cc;
	while (running) {
		CURLMcode mc = curl_multi_perform(m, &running);

		if (mc == CURLM_OK && running && cold_stopped(&s->base)) {
			curl_multi_remove_handle(m, e);
			return CURLE_ABORTED_BY_CALLBACK;
		}
		if (mc == CURLM_OK && running)
			mc = curl_multi_poll(m, NULL, 0, 1000, NULL);
		if (mc != CURLM_OK) {
			cc = mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_RECV_ERROR;
			curl_multi_remove_handle(m, e);
			return cc;
		}
	}
	while ((msg = curl_multi_info_read(m, &left)))
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == e)
			cc = msg->data.result;
	curl_multi_remove_handle(m, e);
	return cc;
}

/*
 * A multipart upload's part buffers (part_size bytes) are kept between
 * uploads: fresh from malloc, every page of one faults on its first write,
 * and on this project's virtual machines those faults were most of a
 * demotion's CPU (docs/benchmarks.md, "Demotion of 32 MiB blocks"). The
 * pool holds as many as were ever in use at once, at most S3_BUFS_MAX (a
 * migrator run of 4 jobs: 16 x 8 MiB; a gateway's pressure demotion: 4),
 * until the cold tier is closed.
 */
static char *s3_buf_get(struct cold_s3 *s, uint64_t size)
{
	char *b = NULL;

	if (size == s->part_size) {
		pthread_mutex_lock(&s->lock);
		if (s->nbufs > 0)
			b = s->bufs[--s->nbufs];
		pthread_mutex_unlock(&s->lock);
	}
	return b ? b : util_big_alloc(size);
}

static void s3_buf_put(struct cold_s3 *s, char *b, uint64_t size)
{
	if (b && size == s->part_size) {
		pthread_mutex_lock(&s->lock);
		if (s->nbufs < S3_BUFS_MAX) {
			s->bufs[s->nbufs++] = b;
			b = NULL;
		}
		pthread_mutex_unlock(&s->lock);
	}
	util_big_free(b, size);
}

/* ---- small text helpers ------------------------------------------------------ */

/* Appends s percent-encoded as SigV4 wants it (keep: '/' too if slash). */
static void s3_uri_encode(FILE *f, const char *s, int slash)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '_' || ch == '.' || ch == '~' || (slash && ch == '/'))
			fputc(ch, f);
		else
			fprintf(f, "%%%02X", ch);
	}
}

/* The text of the first <tag>...</tag> at or after *from, XML entities
 * decoded, into out; *from moves past it. 0, or -ENOENT. */
static int s3_xml_text(const char **from, const char *end, const char *tag, char *out,
		       size_t cap)
{
	char open[64], close[64];
	const char *a, *b;
	size_t n = 0;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = *from ? strstr(*from, open) : NULL;
	if (!a || a >= end)
		return -ENOENT;
	a += strlen(open);
	b = strstr(a, close);
	if (!b || b > end)
		return -ENOENT;
	*from = b + strlen(close);
	while (a < b && n + 1 < cap) {
		static const struct { const char *ent; char ch; } ents[] = {
			{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
			{ "&quot;", '"' }, { "&apos;", '\'' },
		};
		size_t i;

		if (*a == '&') {
			for (i = 0; i < ARRAY_SIZE(ents); i++)
				if (!strncmp(a, ents[i].ent, strlen(ents[i].ent)))
					break;
			if (i < ARRAY_SIZE(ents)) {
				out[n++] = ents[i].ch;
				a += strlen(ents[i].ent);
				continue;
			}
			if (a[1] == '#') {
				char *e;
				unsigned long cp = a[2] == 'x' ? strtoul(a + 3, &e, 16)
							       : strtoul(a + 2, &e, 10);

				if (*e == ';' && cp > 0 && cp < 0x80) {
					out[n++] = (char)cp;
					a = e + 1;
					continue;
				}
			}
		}
		out[n++] = *a++;
	}
	out[n] = '\0';
	return 0;
}

/* An ETag without quotes (plain or &quot;), lower case, into out. */
static void s3_etag_bare(const char *etag, char *out, size_t cap)
{
	size_t n = 0;

	for (const char *p = etag; *p && n + 1 < cap; p++) {
		if (*p == '"')
			continue;
		if (!strncmp(p, "&quot;", 6)) {
			p += 5;
			continue;
		}
		out[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
	}
	out[n] = '\0';
}

static void s3_hex(const unsigned char *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

/* Whether bare looks like an MD5 ("32 hex") or a multipart ETag ("-N"). */
static int s3_etag_is_md5(const char *bare)
{
	size_t i;

	for (i = 0; i < 32; i++)
		if (!((bare[i] >= '0' && bare[i] <= '9') || (bare[i] >= 'a' && bare[i] <= 'f')))
			return 0;
	if (bare[32] == '\0')
		return 1;
	if (bare[32] != '-' || !bare[33])
		return 0;
	for (i = 33; bare[i]; i++)
		if (bare[i] < '0' || bare[i] > '9')
			return 0;
	return 1;
}

/* ---- one request --------------------------------------------------------------- */

static size_t s3_on_header(char *buf, size_t size, size_t n, void *arg)
{
	struct s3_req *r = arg;
	size_t len = size * n;

	if (len >= 5 && !strncmp(buf, "HTTP/", 5)) {
		r->etag[0] = '\0';	/* a new answer (after a 100 Continue) */
		r->length = 0;
	} else if (len > 5 && !strncasecmp(buf, "ETag:", 5)) {
		const char *v = buf + 5;
		size_t vl = len - 5;

		while (vl && (*v == ' ' || *v == '\t'))
			v++, vl--;
		while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
			vl--;
		snprintf(r->etag, sizeof(r->etag), "%.*s", (int)vl, v);
	} else if (len > 15 && !strncasecmp(buf, "Content-Length:", 15)) {
		r->length = strtoull(buf + 15, NULL, 10);
	}
	return len;
}

static size_t s3_on_body(char *buf, size_t size, size_t n, void *arg)
{
	struct s3_req *r = arg;
	size_t len = size * n;

	if (!r->status)
		curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->sink && r->status / 100 == 2) {
		r->sink_rc = r->sink(r->sink_arg, buf, len);
		if (r->sink_rc < 0)
			return 0;	/* curl fails the transfer */
		r->got += len;
		return len;
	}
	/* An error document or an XML answer: keep it (bounded). */
	if (r->resp_len + len + 1 > r->resp_cap) {
		size_t cap = MAX(r->resp_cap * 2, r->resp_len + len + 1);
		char *b;

		if (cap > S3_RESP_MAX)
			return len;	/* the rest is of no use to us */
		b = realloc(r->resp, cap);
		if (!b)
			return 0;
		r->resp = b;
		r->resp_cap = cap;
	}
	memcpy(r->resp + r->resp_len, buf, len);
	r->resp_len += len;
	r->resp[r->resp_len] = '\0';
	return len;
}

static size_t s3_on_read(char *buf, size_t size, size_t n, void *arg)
{
	struct s3_req *r = arg;
	size_t want = (size_t)MIN((uint64_t)(size * n), r->len - r->sent);

	if (want == 0)
		return 0;
	if (r->mem) {
		memcpy(buf, r->mem + r->sent, want);
	} else {
		r->src_rc = r->src(r->arg, buf, want, r->off + r->sent);
		if (r->src_rc < 0)
			return CURL_READFUNC_ABORT;
	}
	if (r->md5)
		EVP_DigestUpdate(r->md5, buf, want);
	r->sent += want;
	return want;
}

/*
 * curl rewinds a body when a kept connection turned out dead after some of
 * it was sent. A body in memory rewinds; a streamed one only if nothing was
 * pulled yet (the source is read once, in order): the transfer then fails
 * as "no answer", and the caller's retry starts the put again.
 */
static int s3_on_seek(void *arg, curl_off_t offset, int origin)
{
	struct s3_req *r = arg;

	if (origin != SEEK_SET || offset != 0)
		return CURL_SEEKFUNC_CANTSEEK;
	if (r->mem || r->sent == 0) {
		r->sent = 0;
		return CURL_SEEKFUNC_OK;
	}
	return CURL_SEEKFUNC_CANTSEEK;
}

/* Whether a conditional request's header is If-Match (else If-None-Match). */
static int s3_cond_is_match(const char *cond)
{
	return !strncmp(cond, "If-Match:", 9);
}

/*
 * Whether a 400's code is about the request's credentials, which any
 * request may meet (temporary ones that ran out): not a partner without
 * conditional deletes, which s3_del_if() then stops asking for in this
 * process, every later manifest delete unconditional.
 */
static int s3_credentials_code(const char *code)
{
	static const char *const codes[] = {
		"ExpiredToken", "InvalidToken", "TokenRefreshRequired",
		"AuthorizationHeaderMalformed", "IncompleteSignature", "InvalidSecurity",
	};

	for (size_t i = 0; i < ARRAY_SIZE(codes); i++)
		if (!strcmp(code, codes[i]))
			return 1;
	return 0;
}

/* The partner's <Code> and <Message>, for a log line. */
static void s3_error_text(const struct s3_req *r, char *code, size_t ccap, char *msg,
			  size_t mcap)
{
	const char *p = r->resp, *end = r->resp ? r->resp + r->resp_len : NULL;

	code[0] = msg[0] = '\0';
	if (!p)
		return;
	if (s3_xml_text(&p, end, "Code", code, ccap) < 0)
		code[0] = '\0';
	p = r->resp;
	if (s3_xml_text(&p, end, "Message", msg, mcap) < 0)
		msg[0] = '\0';
}

/*
 * Sends r; 0 for a 2xx answer, else the errno of the table above (logged,
 * but for -ENOENT). what names the operation in the log line.
 */
static int s3_perform(struct cold_s3 *s, struct s3_req *r, const char *what)
{
	struct curl_slist *h = NULL, *l;
	CURLM *m = NULL;
	char *url = NULL, ctype[300], code[128], msg[256], also[96] = "";
	size_t ulen = 0;
	FILE *f = open_memstream(&url, &ulen);
	CURLcode cc;
	int rc;

	if (!f)
		return -ENOMEM;
	if (s->path_style) {
		fprintf(f, "%s/", s->origin);
		s3_uri_encode(f, s->bucket, 0);
	} else {
		fprintf(f, "%.*s%s.%s", (int)(strstr(s->origin, "://") + 3 - s->origin), s->origin,
			s->bucket, strstr(s->origin, "://") + 3);
	}
	fputc('/', f);
	if (r->pkey)
		s3_uri_encode(f, r->pkey, 1);
	if (r->query)
		fprintf(f, "?%s", r->query);
	if (fclose(f) != 0) {
		free(url);
		return -ENOMEM;
	}
	h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	/* No 100-continue round trip before each body. */
	if (h && (l = curl_slist_append(h, "Expect:")))
		h = l;
	if (h && r->ctype) {
		snprintf(ctype, sizeof(ctype), "Content-Type: %s", r->ctype);
		if ((l = curl_slist_append(h, ctype)))
			h = l;
	}
	if (h && r->cond && (l = curl_slist_append(h, r->cond)))
		h = l;
	if (h && r->range && (l = curl_slist_append(h, r->range)))
		h = l;
	m = s3_multi_get(s);
	r->curl = curl_easy_init();
	if (!h || !m || !r->curl) {
		rc = -ENOMEM;
		goto out;
	}
	curl_easy_setopt(r->curl, CURLOPT_URL, url);
	curl_easy_setopt(r->curl, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(r->curl, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(r->curl, CURLOPT_USERPWD, s->userpwd);
	curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(r->curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(r->curl, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT, 10L);
	/* A partner that stalls: less than 1 byte/s for 30 s is no answer. */
	curl_easy_setopt(r->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(r->curl, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(r->curl, CURLOPT_ERRORBUFFER, r->errbuf);
	curl_easy_setopt(r->curl, CURLOPT_HEADERFUNCTION, s3_on_header);
	curl_easy_setopt(r->curl, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, s3_on_body);
	curl_easy_setopt(r->curl, CURLOPT_WRITEDATA, r);
	if (s->ca_file)
		curl_easy_setopt(r->curl, CURLOPT_CAINFO, s->ca_file);
	if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(r->curl, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(r->method, "PUT") || !strcmp(r->method, "POST")) {
		curl_easy_setopt(r->curl, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(r->curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->len);
		curl_easy_setopt(r->curl, CURLOPT_READFUNCTION, s3_on_read);
		curl_easy_setopt(r->curl, CURLOPT_READDATA, r);
		curl_easy_setopt(r->curl, CURLOPT_SEEKFUNCTION, s3_on_seek);
		curl_easy_setopt(r->curl, CURLOPT_SEEKDATA, r);
		curl_easy_setopt(r->curl, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
		if (!strcmp(r->method, "POST"))
			curl_easy_setopt(r->curl, CURLOPT_CUSTOMREQUEST, "POST");
	} else if (strcmp(r->method, "GET") != 0) {
		curl_easy_setopt(r->curl, CURLOPT_CUSTOMREQUEST, r->method);
	}
	r->errbuf[0] = '\0';
	cc = s3_run(s, m, r->curl);
	if (r->src_rc < 0 || r->sink_rc < 0) {
		rc = r->src_rc < 0 ? r->src_rc : r->sink_rc;
		goto out;
	}
	if (cc != CURLE_OK) {
		switch (cc) {
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_CONNECT:
		case CURLE_OPERATION_TIMEDOUT:
		case CURLE_SEND_ERROR:
		case CURLE_RECV_ERROR:
		case CURLE_GOT_NOTHING:
		case CURLE_PARTIAL_FILE:
		case CURLE_HTTP2_STREAM:
		case CURLE_SEND_FAIL_REWIND:	/* a kept connection died mid-body */
			rc = -EHOSTUNREACH;
			break;
		case CURLE_ABORTED_BY_CALLBACK:	/* s3_run(): cold_stop_at() */
			snprintf(r->errbuf, sizeof(r->errbuf), "stopped: the process is shutting down");
			rc = -EHOSTUNREACH;
			break;
		default:
			rc = -EIO;	/* TLS that does not verify, a bad URL ... */
		}
		/* No answer: said once a minute, as a gateway's clients ask
		 * again at each 503's Retry-After: 1 while the partner is away. */
		if (rc != -EHOSTUNREACH ||
		    log_limit(&s->no_answer, LOG_REPEAT_SECONDS, "requests", also, sizeof(also)))
			log_err(0, "s3 %s of '%s' in bucket '%s' failed: %s%s", what,
				r->pkey ? r->pkey : "", s->bucket,
				r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc), also);
		goto out;
	}
	curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->status / 100 == 2) {
		rc = 0;
		goto out;
	}
	s3_error_text(r, code, sizeof(code), msg, sizeof(msg));
	if (r->status == 404 && !strcmp(code, "NoSuchBucket")) {
		/* Not the key: the bucket is gone, or misnamed, and every
		 * request will fail so. Taken for a manifest that changed, it
		 * was read again five times to no end; taken for "no such
		 * key", a sweep forgot the copies it could not delete (they
		 * stayed in the real bucket for ever), and a recall said the
		 * copy was deleted since its demotion. Said once a minute: a
		 * gateway's clients ask again at each 503's Retry-After: 1. */
		if (log_limit(&s->no_bucket, LOG_REPEAT_SECONDS, "requests", also, sizeof(also))) {
			log_err(0, "s3 %s%s%s%s failed: the bucket '%s' does not exist at the"
				" partner (HTTP 404 NoSuchBucket; is [g4] url '%s' right?)%s",
				what, r->pkey ? " of '" : "", r->pkey ? r->pkey : "",
				r->pkey ? "'" : "", s->bucket, s->base.url, also);
		}
		rc = -ENXIO;
		goto out;
	}
	if (r->cond && (r->status == 412 || (r->status == 404 && s3_cond_is_match(r->cond) &&
					     (!code[0] || !strcmp(code, "NoSuchKey")))))
		rc = -ECANCELED;	/* not as the caller read it: not an error here */
	else if (r->status == 404 && !r->cond && strcmp(r->method, "PUT") != 0 &&
		 strcmp(r->method, "POST") != 0)
		rc = -ENOENT;	/* a put's falls to -EIO (below) */
	else if (r->status == 409 && !strcmp(code, "ConditionalRequestConflict"))
		rc = -EAGAIN;
	else if (r->status == 500 || r->status == 503 || !strcmp(code, "SlowDown") ||
		 !strcmp(code, "InternalError") || !strcmp(code, "RequestTimeout"))
		rc = -EAGAIN;
	else if (r->status == 501 || r->status == 405 || !strcmp(code, "NotImplemented"))
		rc = -EOPNOTSUPP;
	else if (r->status == 400 && r->cond && !strcmp(r->method, "DELETE") &&
		 !s3_credentials_code(code))
		rc = -EOPNOTSUPP;	/* a partner without conditional deletes (s3_del_if) */
	else
		rc = -EIO;
	/* A conditional put's 501 is the partner saying it has none: the
	 * caller writes plain, and says so once (migrate.c, manifest_write). */
	if (rc != -ENOENT && rc != -ECANCELED &&
	    !(rc == -EOPNOTSUPP && (r->quiet_unsupported || r->cond)))
		log_err(0, "s3 %s of '%s' in bucket '%s' failed: HTTP %ld%s%s%s%s", what,
			r->pkey ? r->pkey : "", s->bucket, r->status, code[0] ? " " : "", code,
			msg[0] ? ": " : "", msg);
out:
	curl_easy_cleanup(r->curl);
	r->curl = NULL;
	s3_multi_put(s, m);
	curl_slist_free_all(h);
	free(url);
	return rc;
}

static void s3_req_release(struct s3_req *r)
{
	free(r->resp);
	r->resp = NULL;
}

/* ---- put ------------------------------------------------------------------------ */

/* Compares the partner's ETag with what we hashed; sets info. */
static int s3_check_etag(struct cold_s3 *s, const char *pkey, const char *etag,
			 const char *want, const char *alt, struct cold_put_info *info)
{
	char bare[KVT_ETAG_MAX - 2];

	s3_etag_bare(etag, bare, sizeof(bare));
	if (info) {
		snprintf(info->etag, KVT_ETAG_MAX, "\"%s\"", bare);
		info->verified = 0;
	}
	if (!s3_etag_is_md5(bare))
		return 0;	/* nothing to compare: the caller reads back */
	if (strcmp(bare, want) != 0 && (!alt || strcmp(bare, alt) != 0)) {
		log_err(0, "s3 put of '%s' in bucket '%s': the partner answered ETag %s, but what"
			" was sent has MD5 %s", pkey, s->bucket, bare, want);
		return -EIO;
	}
	if (info)
		info->verified = 1;
	return 0;
}

static int s3_put_single(struct cold_s3 *s, const char *pkey, uint64_t size, const char *ctype,
			 const char *cond, cold_source_fn src, void *arg,
			 struct cold_put_info *info)
{
	struct s3_req r = { .method = "PUT", .pkey = pkey, .ctype = ctype, .cond = cond,
			    .src = src, .arg = arg, .len = size };
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned dlen = 0;
	char hex[40];
	int rc;

	r.md5 = EVP_MD_CTX_new();
	if (!r.md5 || !EVP_DigestInit_ex(r.md5, EVP_md5(), NULL)) {
		rc = -ENOMEM;
		goto out;
	}
	rc = s3_perform(s, &r, "put");
	if (rc < 0)
		goto out;
	if (r.sent != size) {
		log_err(0, "s3 put of '%s': %" PRIu64 " of %" PRIu64 " bytes sent", pkey, r.sent,
			size);
		rc = -EIO;
		goto out;
	}
	EVP_DigestFinal_ex(r.md5, d, &dlen);
	s3_hex(d, dlen, hex);
	rc = s3_check_etag(s, pkey, r.etag, hex, NULL, info);
out:
	EVP_MD_CTX_free(r.md5);
	s3_req_release(&r);
	return rc;
}

/* A multipart upload in flight. */
struct s3_mpu {
	struct cold_s3 *s;
	const char *pkey, *upload_id;
	uint64_t size, part_size;
	unsigned nparts;
	cold_source_fn src;
	void *arg;
	pthread_mutex_t lock;	/* the source, next, rc */
	unsigned next;		/* next part to read */
	int rc;			/* first failure: every worker stops */
	EVP_MD_CTX *whole;	/* MD5 of the whole object, parts in order */
	unsigned char (*md5)[16];	/* of each part */
};

static void *s3_mpu_worker(void *arg)
{
	struct s3_mpu *m = arg;
	char *buf = s3_buf_get(m->s, m->part_size), query[1200], hex[40], what[32];
	char *qid = NULL;
	size_t qlen = 0;
	FILE *f;

	f = open_memstream(&qid, &qlen);
	if (f) {
		s3_uri_encode(f, m->upload_id, 0);
		if (fclose(f) != 0) {
			free(qid);
			qid = NULL;
		}
	}
	if (!buf || !qid) {
		pthread_mutex_lock(&m->lock);
		if (!m->rc)
			m->rc = -ENOMEM;
		pthread_mutex_unlock(&m->lock);
		goto out;
	}
	for (;;) {
		struct s3_req r = { .method = "PUT", .pkey = m->pkey, .mem = buf };
		unsigned i;
		uint64_t off, len;
		unsigned char d[EVP_MAX_MD_SIZE];
		unsigned dlen = 0;
		EVP_MD_CTX *md;
		int rc;

		/* The source is read in order, one part at a time. */
		pthread_mutex_lock(&m->lock);
		if (m->rc || m->next >= m->nparts) {
			pthread_mutex_unlock(&m->lock);
			break;
		}
		i = m->next++;
		off = (uint64_t)i * m->part_size;
		len = MIN(m->part_size, m->size - off);
		rc = m->src(m->arg, buf, len, off);
		if (rc == 0)
			EVP_DigestUpdate(m->whole, buf, len);
		else
			m->rc = rc;
		pthread_mutex_unlock(&m->lock);
		if (rc < 0)
			break;
		md = EVP_MD_CTX_new();
		if (!md || !EVP_DigestInit_ex(md, EVP_md5(), NULL) ||
		    !EVP_DigestUpdate(md, buf, len) || !EVP_DigestFinal_ex(md, d, &dlen)) {
			EVP_MD_CTX_free(md);
			rc = -ENOMEM;
		} else {
			EVP_MD_CTX_free(md);
			memcpy(m->md5[i], d, 16);
			s3_hex(d, 16, hex);
			snprintf(query, sizeof(query), "partNumber=%u&uploadId=%s", i + 1, qid);
			r.query = query;
			r.len = len;
			snprintf(what, sizeof(what), "put of part %u", i + 1);
			rc = s3_perform(m->s, &r, what);
			if (rc == -EOPNOTSUPP)
				rc = -EIO;	/* no condition refused: s3_put_multipart() */
			if (rc == 0) {
				char bare[KVT_ETAG_MAX];

				s3_etag_bare(r.etag, bare, sizeof(bare));
				/* A part's ETag is its MD5 on every S3 we know; one
				 * that is no MD5 we cannot check here (the whole
				 * object's ETag still is). */
				if (s3_etag_is_md5(bare) && strcmp(bare, hex) != 0) {
					log_err(0, "s3 part %u of '%s': the partner answered ETag"
						" %s, but what was sent has MD5 %s", i + 1, m->pkey,
						bare, hex);
					rc = -EIO;
				}
			}
		}
		s3_req_release(&r);
		if (rc < 0) {
			pthread_mutex_lock(&m->lock);
			if (!m->rc)
				m->rc = rc;
			pthread_mutex_unlock(&m->lock);
			break;
		}
	}
out:
	free(qid);
	s3_buf_put(m->s, buf, m->part_size);
	return NULL;
}

/* "uploadId=ID", encoded: caller frees. */
static char *s3_upload_query(const char *upload_id)
{
	char *q = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&q, &len);

	if (!f)
		return NULL;
	fputs("uploadId=", f);
	s3_uri_encode(f, upload_id, 0);
	if (fclose(f) != 0) {
		free(q);
		return NULL;
	}
	return q;
}

static int s3_abort(struct cold_s3 *s, const char *pkey, const char *upload_id)
{
	struct s3_req r = { .method = "DELETE", .pkey = pkey };
	char *q = s3_upload_query(upload_id);
	int rc;

	if (!q)
		return -ENOMEM;
	r.query = q;
	rc = s3_perform(s, &r, "abort of a multipart upload");
	s3_req_release(&r);
	free(q);
	return rc;
}

static int s3_abort_upload(struct cold *cold, const char *pkey, const char *upload_id)
{
	return s3_abort((struct cold_s3 *)cold, pkey, upload_id);
}

static int s3_put_multipart(struct cold_s3 *s, const char *pkey, uint64_t size,
			    const char *ctype, const char *cond, cold_source_fn src, void *arg,
			    struct cold_put_info *info)
{
	struct s3_req r = { .method = "POST", .pkey = pkey, .query = "uploads=", .ctype = ctype };
	struct s3_mpu m = { .s = s, .pkey = pkey, .size = size, .src = src, .arg = arg };
	char upload_id[1024], *q = NULL, *xml = NULL, want[48], whole[40];
	const char *p;
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned dlen = 0, nthreads = 0;
	pthread_t th[64];
	size_t xlen = 0;
	EVP_MD_CTX *md = NULL;
	int rc, journaled = 0, aborted = 0;
	FILE *f;

	m.part_size = s->part_size;
	if (size / m.part_size >= S3_PARTS_MAX)	/* S3 allows 10000 parts */
		m.part_size = ((size / S3_PARTS_MAX) + (1u << 20)) & ~((uint64_t)(1u << 20) - 1);
	m.nparts = (unsigned)((size + m.part_size - 1) / m.part_size);
	pthread_mutex_init(&m.lock, NULL);
	m.whole = EVP_MD_CTX_new();
	m.md5 = calloc(m.nparts, sizeof(*m.md5));
	if (!m.whole || !m.md5 || !EVP_DigestInit_ex(m.whole, EVP_md5(), NULL)) {
		rc = -ENOMEM;
		goto out;
	}
	/* 1. Initiate. A 501 or 405 here, or to a part, refused no condition
	 * (only the completion carries it): a failed put, logged, and no
	 * reason for s3_put_any() to stop asking conditional puts. */
	rc = s3_perform(s, &r, "initiation of a multipart upload");
	if (rc == -EOPNOTSUPP)
		rc = -EIO;
	if (rc == 0) {
		p = r.resp;
		if (s3_xml_text(&p, r.resp ? r.resp + r.resp_len : NULL, "UploadId", upload_id,
				sizeof(upload_id)) < 0 || !upload_id[0]) {
			log_err(0, "s3 multipart upload of '%s': no UploadId in the answer", pkey);
			rc = -EIO;
		}
	}
	s3_req_release(&r);
	if (rc < 0)
		goto out;
	m.upload_id = upload_id;
	if (s->base.journal.begin) {
		rc = s->base.journal.begin(s->base.journal.arg, s->base.url, pkey, upload_id);
		if (rc < 0) {
			log_err(rc, "cannot record the multipart upload of '%s'", pkey);
			goto fail;
		}
		journaled = 1;
	}
	/* 2. Parts, in parallel; the caller's thread is one of the workers. */
	{
		unsigned want_threads = MIN(MIN(MAX(s->jobs, 1u), 64u), m.nparts);

		log_debug("multipart upload of '%s': %u parts of %" PRIu64 " bytes, %u in parallel",
			  pkey, m.nparts, m.part_size, want_threads);

		while (nthreads + 1 < want_threads &&
		       util_thread_start(&th[nthreads], NULL, s3_mpu_worker, &m) == 0)
			nthreads++;
		s3_mpu_worker(&m);
		for (unsigned i = 0; i < nthreads; i++)
			pthread_join(th[i], NULL);
	}
	rc = m.rc;
	if (rc < 0)
		goto fail;
	/* 3. Complete, and check the ETag against the parts' MD5s. */
	f = open_memstream(&xml, &xlen);
	if (!f) {
		rc = -ENOMEM;
		goto fail;
	}
	fputs("<CompleteMultipartUpload>", f);
	md = EVP_MD_CTX_new();
	if (md)
		EVP_DigestInit_ex(md, EVP_md5(), NULL);
	for (unsigned i = 0; i < m.nparts; i++) {
		char hex[40];

		s3_hex(m.md5[i], 16, hex);
		fprintf(f, "<Part><PartNumber>%u</PartNumber><ETag>\"%s\"</ETag></Part>", i + 1,
			hex);
		if (md)
			EVP_DigestUpdate(md, m.md5[i], 16);
	}
	fputs("</CompleteMultipartUpload>", f);
	if (fclose(f) != 0 || !md || !EVP_DigestFinal_ex(md, d, &dlen)) {
		rc = -ENOMEM;
		goto fail;
	}
	s3_hex(d, 16, want);
	snprintf(want + 32, sizeof(want) - 32, "-%u", m.nparts);
	EVP_DigestFinal_ex(m.whole, d, &dlen);
	s3_hex(d, 16, whole);
	q = s3_upload_query(upload_id);
	if (!q) {
		rc = -ENOMEM;
		goto fail;
	}
	/* A condition is the completion's (S3 checks it there); refused,
	 * the upload is aborted below. */
	r = (struct s3_req){ .method = "POST", .pkey = pkey, .query = q, .mem = xml,
			     .len = xlen, .ctype = "application/xml", .cond = cond };
	rc = s3_perform(s, &r, "completion of a multipart upload");
	if (rc == 0) {
		char code[128] = "", etag[KVT_ETAG_MAX];
		const char *end = r.resp ? r.resp + r.resp_len : NULL;

		/* S3 may answer 200 and an <Error> in the body: it sends the
		 * 200 before it is done (AWS, CompleteMultipartUpload). A
		 * condition that failed there is as its status would be
		 * (s3_perform()): PreconditionFailed, or NoSuchKey for
		 * If-Match, -ECANCELED, not logged; ConditionalRequestConflict
		 * -EAGAIN. */
		p = r.resp;
		if (!r.resp || strstr(r.resp, "<Error>")) {
			p = r.resp;
			if (r.resp)
				s3_xml_text(&p, end, "Code", code, sizeof(code));
			if (cond && (!strcmp(code, "PreconditionFailed") ||
				     (s3_cond_is_match(cond) && !strcmp(code, "NoSuchKey"))))
				rc = -ECANCELED;
			else if (!strcmp(code, "SlowDown") || !strcmp(code, "InternalError") ||
				 (cond && !strcmp(code, "ConditionalRequestConflict")))
				rc = -EAGAIN;
			else
				rc = -EIO;
			if (rc != -ECANCELED)
				log_err(0, "s3 completion of the multipart upload of '%s' failed: %s",
					pkey, code[0] ? code : "no answer");
		} else if (s3_xml_text(&p, end, "ETag", etag, sizeof(etag)) < 0) {
			etag[0] = '\0';
		}
		if (rc == 0) {
			/* Completed: the upload is no more, whatever the check says. */
			aborted = 1;
			rc = s3_check_etag(s, pkey, etag, want, whole, info);
		}
	}
	s3_req_release(&r);
	if (rc == 0 || aborted)
		goto done;
fail:
	/* 4. Abort on any failure: the partner keeps parts until told. */
	if (s3_abort(s, pkey, upload_id) == 0 || !journaled)
		aborted = 1;
	else
		log_err(0, "the multipart upload '%s' of '%s' stays recorded; the next run aborts"
			" it", upload_id, pkey);
done:
	if (journaled && aborted && s->base.journal.end)
		s->base.journal.end(s->base.journal.arg, upload_id);
out:
	EVP_MD_CTX_free(md);
	EVP_MD_CTX_free(m.whole);
	free(m.md5);
	free(xml);
	free(q);
	pthread_mutex_destroy(&m.lock);
	return rc;
}

/* A put; with match (not NULL) a conditional one (cold.h, put_if). */
static int s3_put_any(struct cold *cold, const char *key, const char *match, uint64_t size,
		      const char *ctype, cold_source_fn src, void *arg,
		      struct cold_put_info *info)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	char *k = cold_s3_key(s->prefix, key), cond[KVT_ETAG_MAX + 16];
	int rc;

	if (!k)
		return -ENOMEM;
	/* Refused once, every conditional put would be refused again: one
	 * request (and one failed body upload) less per manifest write. */
	if (match && __atomic_load_n(&s->no_cond, __ATOMIC_RELAXED)) {
		free(k);
		return -EOPNOTSUPP;
	}
	if (match)
		snprintf(cond, sizeof(cond), match[0] ? "If-Match: %s" : "If-None-Match: *",
			 match);
	if (size > s->part_size)
		rc = s3_put_multipart(s, k, size, ctype, match ? cond : NULL, src, arg, info);
	else
		rc = s3_put_single(s, k, size, ctype, match ? cond : NULL, src, arg, info);
	if (match && rc == -EOPNOTSUPP)
		__atomic_store_n(&s->no_cond, 1, __ATOMIC_RELAXED);
	free(k);
	return rc;
}

static int s3_put(struct cold *cold, const char *key, uint64_t size, const char *ctype,
		  cold_source_fn src, void *arg, struct cold_put_info *info)
{
	return s3_put_any(cold, key, NULL, size, ctype, src, arg, info);
}

static int s3_put_if(struct cold *cold, const char *key, const char *match, uint64_t size,
		     const char *ctype, cold_source_fn src, void *arg,
		     struct cold_put_info *info)
{
	return s3_put_any(cold, key, match, size, ctype, src, arg, info);
}

/* ---- get, head, delete ------------------------------------------------------------ */

/*
 * The partner key the libs3 client (before cold_s3_key()) gave key:
 * "PREFIX/KEY" as it is. Since then '%' is "%25", so an object of a key
 * with '%' demoted by that client is not found under its new name; a get
 * tries this one next. NULL when there is none to try: no '%' in key (the
 * names agree), or a ".", ".." or empty component, which partners
 * normalised, so the old client never stored such a key as itself.
 *
 * Only get falls back: recall checks size and CRC32C of what comes back,
 * which matters because the old name of "a%25b" is the new name of "a%b".
 * Head does not (a size that matched by chance would let demotion trust
 * another object's copy; without it the object is uploaded again under its
 * new name), nor does delete (it could delete that other copy): a legacy
 * copy of a deleted key stays at the partner.
 */
static char *s3_legacy_key(const char *prefix, const char *key)
{
	const char *comp = key;
	size_t len = strlen(prefix) + strlen(key) + 2;
	char *k;

	if (!strchr(key, '%'))
		return NULL;
	for (;;) {
		const char *slash = strchr(comp, '/');
		size_t clen = slash ? (size_t)(slash - comp) : strlen(comp);

		if ((clen == 0 && slash) || (clen == 1 && comp[0] == '.') ||
		    (clen == 2 && !strncmp(comp, "..", 2)))
			return NULL;
		if (!slash)
			break;
		comp = slash + 1;
	}
	k = malloc(len);
	if (k)
		snprintf(k, len, "%s%s%s", prefix, prefix[0] ? "/" : "", key);
	return k;
}

/* etag (may be NULL) gets the GET's ETag as the partner answered it, which
 * is what If-Match compares: of the bytes streamed, whatever it is. */
static int s3_get_etag(struct cold *cold, const char *key, cold_sink_fn sink, void *arg,
		       uint64_t *size, char *etag)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_req r = { .method = "GET", .sink = sink, .sink_arg = arg };
	char *k = cold_s3_key(s->prefix, key), *legacy = NULL;
	int rc;

	if (!k)
		return -ENOMEM;
	r.pkey = k;
	rc = s3_perform(s, &r, "get");
	if (rc == -ENOENT && r.got == 0 && (legacy = s3_legacy_key(s->prefix, key)) != NULL) {
		log_info("'%s' is not at the partner; trying '%s', its name before '%%' was"
			 " encoded", k, legacy);
		s3_req_release(&r);
		r = (struct s3_req){ .method = "GET", .sink = sink, .sink_arg = arg };
		r.pkey = legacy;
		rc = s3_perform(s, &r, "get");
	}
	if (rc == 0 && r.length && r.got != r.length) {
		log_err(0, "s3 get of '%s': %" PRIu64 " of %" PRIu64 " bytes", k, r.got, r.length);
		rc = -EHOSTUNREACH;
	}
	if (rc == 0 && size)
		*size = r.got;
	/* Bytes of the old name are no ETag of key's: "", nothing to compare. */
	if (rc == 0 && etag)
		snprintf(etag, KVT_ETAG_MAX, "%s", legacy ? "" : r.etag);
	s3_req_release(&r);
	free(legacy);
	free(k);
	return rc;
}

static int s3_get(struct cold *cold, const char *key, cold_sink_fn sink, void *arg,
		  uint64_t *size)
{
	return s3_get_etag(cold, key, sink, arg, size, NULL);
}

/* A GET's sink for s3_head_absent(): whatever comes is of no use. */
static int s3_discard(void *arg, const void *buf, size_t len)
{
	(void)arg;
	(void)buf;
	(void)len;
	return 0;
}

/*
 * A HEAD's 404 has no body to say whether the key or the bucket is
 * missing: it is asked again as a GET of the key's first byte (the same
 * permission as the HEAD), whose 404 says which. -ENOENT for NoSuchKey,
 * -ENXIO (logged by s3_perform) for NoSuchBucket: a misnamed [g4] url made
 * the sweep take every copy of a deleted key for gone (it proved its
 * unproven rows on the HEAD's word), and demotion forget copies it had
 * verified. Only a HEAD's 404 costs this second request, and HEAD is
 * asked only of copies expected there (migrate.c). The key there by now
 * (2xx, or 416 for an empty object): -EAGAIN, ask again later.
 */
static int s3_head_absent(struct cold_s3 *s, const char *pkey)
{
	struct s3_req r = { .method = "GET", .pkey = pkey, .range = "Range: bytes=0-0",
			    .sink = s3_discard };
	int rc = s3_perform(s, &r, "head");

	s3_req_release(&r);
	if (rc == 0 || (rc == -EIO && r.status == 416))
		return -EAGAIN;
	return rc;
}

/* The ETag only when it is an MD5 (or "MD5-N"), quoted as put recorded it:
 * another ETag (SSE-KMS) need not change with the bytes. */
static int s3_head(struct cold *cold, const char *key, uint64_t *size, char *etag)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_req r = { .method = "HEAD" };
	char *k = cold_s3_key(s->prefix, key);
	int rc;

	if (etag)
		etag[0] = '\0';
	if (!k)
		return -ENOMEM;
	r.pkey = k;
	rc = s3_perform(s, &r, "head");
	if (rc == -ENOENT)
		rc = s3_head_absent(s, k);
	if (rc == 0 && size)
		*size = r.length;
	if (rc == 0 && etag) {
		char bare[KVT_ETAG_MAX - 2];

		s3_etag_bare(r.etag, bare, sizeof(bare));
		if (s3_etag_is_md5(bare))
			snprintf(etag, KVT_ETAG_MAX, "\"%s\"", bare);
	}
	s3_req_release(&r);
	free(k);
	return rc;
}

static int s3_del(struct cold *cold, const char *key)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_req r = { .method = "DELETE" };
	char *k = cold_s3_key(s->prefix, key);
	int rc;

	if (!k)
		return -ENOMEM;
	r.pkey = k;
	rc = s3_perform(s, &r, "delete");
	s3_req_release(&r);
	free(k);
	return rc;
}

/*
 * DELETE with If-Match: ETAG (AWS since 2025-09: 412 when the ETag differs,
 * 404 NoSuchKey when the key is gone; both -ECANCELED). Partners without
 * it answer 501 NotImplemented, or 400 to a header they do not know:
 * -EOPNOTSUPP, not logged, and not asked again in this process.
 */
static int s3_del_if(struct cold *cold, const char *key, const char *match)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	struct s3_req r = { .method = "DELETE", .quiet_unsupported = 1 };
	char *k, cond[KVT_ETAG_MAX + 16];
	int rc;

	if (!match[0] || __atomic_load_n(&s->no_del_cond, __ATOMIC_RELAXED))
		return -EOPNOTSUPP;	/* S3 has no "delete if absent" */
	k = cold_s3_key(s->prefix, key);
	if (!k)
		return -ENOMEM;
	snprintf(cond, sizeof(cond), "If-Match: %s", match);
	r.pkey = k;
	r.cond = cond;
	rc = s3_perform(s, &r, "conditional delete");
	if (rc == -EOPNOTSUPP)
		__atomic_store_n(&s->no_del_cond, 1, __ATOMIC_RELAXED);
	s3_req_release(&r);
	free(k);
	return rc;
}

/* "2026-11-29T23:00:00.000Z" -> ns since the epoch; -1 if it is not one. */
static int64_t s3_iso_ns(const char *t)
{
	struct tm tm = { 0 };
	const char *end = strptime(t, "%Y-%m-%dT%H:%M:%S", &tm);
	time_t sec;

	if (!end)
		return -1;
	sec = timegm(&tm);
	/* The partner's date: before 1970, or past 2262 (tests/fuzz_g4_s3), is none. */
	if (sec < 0 || sec > INT64_MAX / 1000000000)
		return -1;
	return (int64_t)sec * 1000000000;
}

/*
 * Uploads under PREFIX that were initiated more than a day ago: what a run
 * killed before its journal was written, or a catalog that was lost, left.
 * A day, because another node's run over the same bucket may still be
 * uploading. A partner that cannot list them (s3rver) is left alone.
 */
static int s3_cleanup(struct cold *cold)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;
	char keym[1100] = "", idm[1100] = "";
	int64_t now = (int64_t)time(NULL) * 1000000000;
	int rc = 0, pages = 0;

	do {
		struct s3_req r = { .method = "GET" };
		char *q = NULL, trunc[16] = "";
		size_t qlen = 0;
		const char *p, *end;
		FILE *f = open_memstream(&q, &qlen);

		if (!f)
			return -ENOMEM;
		if (keym[0]) {
			fputs("key-marker=", f);
			s3_uri_encode(f, keym, 0);
			fputc('&', f);
		}
		fputs("prefix=", f);
		if (s->prefix[0]) {
			s3_uri_encode(f, s->prefix, 0);
			fputs("%2F", f);
		}
		if (idm[0]) {
			fputs("&upload-id-marker=", f);
			s3_uri_encode(f, idm, 0);
		}
		fputs("&uploads=", f);
		if (fclose(f) != 0) {
			free(q);
			return -ENOMEM;
		}
		r.query = q;
		r.quiet_unsupported = 1;
		rc = s3_perform(s, &r, "listing of multipart uploads");
		free(q);
		if (rc == -EOPNOTSUPP) {
			log_info("g4 '%s' cannot list multipart uploads: stale ones are aborted from"
				 " the catalog only", s->base.url);
			s3_req_release(&r);
			return 0;
		}
		if (rc < 0 || !r.resp) {
			s3_req_release(&r);
			return rc;
		}
		end = r.resp + r.resp_len;
		p = r.resp;
		while ((p = strstr(p, "<Upload>")) != NULL && p < end) {
			const char *uend = strstr(p, "</Upload>"), *u;
			char key[1100], id[1100], init[64];
			int64_t t;

			if (!uend)
				break;
			u = p;
			if (s3_xml_text(&u, uend, "Key", key, sizeof(key)) < 0)
				key[0] = '\0';
			u = p;
			if (s3_xml_text(&u, uend, "UploadId", id, sizeof(id)) < 0)
				id[0] = '\0';
			u = p;
			if (s3_xml_text(&u, uend, "Initiated", init, sizeof(init)) < 0)
				init[0] = '\0';
			p = uend;
			t = init[0] ? s3_iso_ns(init) : -1;
			if (!key[0] || !id[0] || t < 0 || now - t < S3_STALE_NS)
				continue;
			if (s3_abort(s, key, id) == 0)
				log_info("aborted the multipart upload '%s' of '%s', initiated %s and"
					 " left behind", id, key, init);
		}
		p = r.resp;
		s3_xml_text(&p, end, "IsTruncated", trunc, sizeof(trunc));
		p = r.resp;
		if (s3_xml_text(&p, end, "NextKeyMarker", keym, sizeof(keym)) < 0)
			keym[0] = '\0';
		p = r.resp;
		if (s3_xml_text(&p, end, "NextUploadIdMarker", idm, sizeof(idm)) < 0)
			idm[0] = '\0';
		s3_req_release(&r);
		if (strcmp(trunc, "true") != 0 || !keym[0])
			break;
	} while (++pages < 1000);
	return 0;
}

/* S3 keys are at most 1024 bytes of UTF-8, the prefix and its '/'
 * included. */
#define S3_KEY_MAX 1024

/*
 * S3 itself limits only the whole key, but partners that keep objects as
 * files (MinIO, s3rver) refuse a path component over 255 bytes, and
 * s3rver's node process died of it (ENAMETOOLONG): a key whose last
 * component was 239 to 255 bytes went over that once a copy's name had
 * its "~VID". Such a name is too long here, and the copy goes under the
 * version's short name instead (migrate.c, g4_upload_name()).
 */
#define S3_COMPONENT_MAX 255

static int s3_key_fits(struct cold *cold, const char *key)
{
	char *k = cold_s3_key(((struct cold_s3 *)cold)->prefix, key);
	/* no memory: the put says so */
	int fits = !k || (strlen(k) <= S3_KEY_MAX && cold_components_fit(k, S3_COMPONENT_MAX));

	free(k);
	return fits;
}

static void s3_free(struct cold *cold)
{
	struct cold_s3 *s = (struct cold_s3 *)cold;

	for (unsigned i = 0; i < s->nidle; i++)
		curl_multi_cleanup(s->idle[i]);
	for (unsigned i = 0; i < s->nbufs; i++)
		util_big_free(s->bufs[i], s->part_size);
	pthread_mutex_destroy(&s->lock);
	free(s->bucket);
	free(s->prefix);
	free(s->origin);
	free(s->ca_file);
	free(cold->url);
	explicit_bzero(s->userpwd, sizeof(s->userpwd));
	free(s);
}

static const struct cold_ops cold_s3_ops = {
	.name = "s3",
	.put = s3_put,
	.get = s3_get,
	.get_etag = s3_get_etag,
	.put_if = s3_put_if,
	.head = s3_head,
	.del = s3_del,
	.del_if = s3_del_if,
	.cleanup = s3_cleanup,
	.abort_upload = s3_abort_upload,
	.key_fits = s3_key_fits,
	.free = s3_free,
};

/*
 * "access_key = X" and "secret_key = Y", from a file only its owner reads;
 * '#' and ';' begin comments. Lines are read whole (getline): a comment
 * longer than a fixed buffer was split, and its rest refused as a "bad
 * line"; a value longer than its buffer was cut short without a word (a
 * wrong secret: every request refused) and is refused, naming its line.
 */
static int s3_read_keys(struct cold_s3 *s, const char *path)
{
	char name[64], value[512], access[512] = "", secret[512] = "", *line = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	struct stat sb;
	FILE *f = fopen(path, "r");
	int rc = 0;

	if (!f) {
		rc = -errno;
		log_err(rc, "cannot open the g4 credentials '%s'", path);
		return rc;
	}
	if (fstat(fileno(f), &sb) < 0 || (sb.st_mode & 077)) {
		log_err(0, "the g4 credentials '%s' must be readable by their owner only (chmod 600)",
			path);
		fclose(f);
		return -EACCES;
	}
	while (getline(&line, &cap, f) >= 0) {
		int end = 0;

		lineno++;
		if (line[0] == '#' || line[0] == ';' || line[0] == '\n')
			continue;
		if (sscanf(line, " %63[a-z_] = %511s%n", name, value, &end) != 2) {
			log_err(0, "bad line %u in the g4 credentials '%s': not 'name = value'",
				lineno, path);
			rc = -EINVAL;
			goto out;
		}
		if (line[end] && !strchr(" \t\r\n", line[end])) {
			log_err(0, "line %u of the g4 credentials '%s': the value is longer than"
				" %zu bytes", lineno, path, sizeof(value) - 1);
			rc = -EINVAL;
			goto out;
		}
		if (!strcmp(name, "access_key"))
			snprintf(access, sizeof(access), "%s", value);
		else if (!strcmp(name, "secret_key"))
			snprintf(secret, sizeof(secret), "%s", value);
	}
	if (ferror(f)) {
		rc = -EIO;
		log_err(0, "cannot read the g4 credentials '%s'", path);
		goto out;
	}
	if (!access[0] || !secret[0] || strchr(access, ':')) {
		log_err(0, "the g4 credentials '%s' need access_key (without ':') and secret_key",
			path);
		rc = -EINVAL;
		goto out;
	}
	snprintf(s->userpwd, sizeof(s->userpwd), "%s:%s", access, secret);
out:
	explicit_bzero(secret, sizeof(secret));
	explicit_bzero(value, sizeof(value));
	if (line)
		explicit_bzero(line, cap);
	free(line);
	fclose(f);
	return rc;
}

int cold_s3_new(const struct cold_opts *o, struct cold **out)
{
	struct cold_s3 *s = calloc(1, sizeof(*s));
	const char *url = o->url, *b = url + 5, *slash = strchr(b, '/');
	const char *region = o->region && o->region[0] ? o->region : "us-east-1";
	int rc;

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->base.ops = &cold_s3_ops;
	s->base.url = strdup(url);
	s->bucket = slash ? strndup(b, (size_t)(slash - b)) : strdup(b);
	s->prefix = strdup(slash ? slash + 1 : "");
	s->part_size = o->part_size ? o->part_size : 8u << 20;
	s->jobs = o->jobs ? o->jobs : 4;
	if (!s->base.url || !s->bucket || !s->prefix ||
	    (o->ca_file && !(s->ca_file = strdup(o->ca_file)))) {
		rc = -ENOMEM;
		goto fail;
	}
	for (size_t n = strlen(s->prefix); n > 0 && s->prefix[n - 1] == '/'; n--)
		s->prefix[n - 1] = '\0';
	if (strchr(region, ':') || strlen(region) > 64) {
		log_err(0, "[g4] region '%s' is not a region name", region);
		rc = -EINVAL;
		goto fail;
	}
	snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", region);
	if (o->endpoint) {
		const char *e = o->endpoint;
		size_t len;

		s->path_style = 1;
		len = strlen(e) + 16;
		s->origin = malloc(len);
		if (!s->origin) {
			rc = -ENOMEM;
			goto fail;
		}
		if (!strncmp(e, "http://", 7) || !strncmp(e, "https://", 8))
			snprintf(s->origin, len, "%s", e);
		else
			snprintf(s->origin, len, "https://%s", e);
		for (size_t n = strlen(s->origin); n > 0 && s->origin[n - 1] == '/'; n--)
			s->origin[n - 1] = '\0';
	} else {
		/* AWS: the bucket in the host name, the region's endpoint. */
		size_t len = strlen(region) + 32;

		s->origin = malloc(len);
		if (!s->origin) {
			rc = -ENOMEM;
			goto fail;
		}
		snprintf(s->origin, len, "https://s3.%s.amazonaws.com", region);
	}
	if (!o->credentials) {
		log_err(0, "g4 url '%s' needs [g4] credentials", url);
		rc = -EINVAL;
		goto fail;
	}
	rc = s3_read_keys(s, o->credentials);
	if (rc < 0)
		goto fail;
	pthread_once(&s3_once, s3_global_init);
	if (s3_init_rc != CURLE_OK) {
		log_err(0, "cannot initialise libcurl: %s", curl_easy_strerror(s3_init_rc));
		rc = -EIO;
		goto fail;
	}
	*out = &s->base;
	return 0;
fail:
	s3_free(&s->base);
	return rc;
}
