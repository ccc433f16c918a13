/*
 * bench_gateway.c - `kvtier bench gateway`: kvtier-gateway against nginx and
 * redis-server on loopback, measured in the same run.
 *
 * Why these two: the gateway's goals are stated against them. nginx serving
 * the same bytes as static files is what "as fast as a web server" means
 * for GET, and nginx's WebDAV PUT (body to a temp file, then rename) is the
 * nearest web-server equivalent of a PUT; redis-server SET/GET is the
 * remote store LMCache ships with. Goals (issue 3): GET 2 MiB and 32 MiB
 * >= 1.0x nginx, GET 4 KiB >= 0.7x nginx req/s, PUT 2 MiB >= 0.8x nginx
 * DAV, >= 1.0x Redis for values of 256 KiB and up, and the gateway's
 * resident memory under 256 MiB with 64 connections streaming 32 MiB.
 *
 * All three servers are scratch children of this process, in a scratch
 * directory under DIR, on 127.0.0.1 ports of their own, stopped and removed
 * at the end (unless --keep):
 *
 *   setup --> start servers --> prefill --> cells --> report --> cleanup
 *   (dir,     (gateway: port 0   (GET key    (per size, conns, op, run:
 *    config,   and its log;       sets, the   kvtier, nginx, redis
 *    creds)    nginx, redis:      same bytes  back to back)
 *              a free port)       in all 3)
 *
 * The load generator is here too, so that all three meet the same client:
 * one thread per connection, plain blocking sockets, HTTP/1.1 keep-alive
 * (RESP for Redis), one request in flight per connection. S3 requests are
 * signed per request with SigV4 header auth over UNSIGNED-PAYLOAD, as the
 * SDKs sign PUTs over TLS-less loopback when told to skip the payload hash;
 * the signing key is derived once a day, so a request costs one SHA-256 and
 * one HMAC on the client.
 *
 * A measurement lasts --seconds. MB/s counts body bytes moved inside that
 * window, req/s and latencies count requests completed inside it; at the
 * deadline a transfer still in flight is abandoned (the connection closed),
 * so that 64 connections of 32 MiB objects stop on time and are not
 * credited with bytes moved after it. GET reads random keys of a prefilled
 * set of the size (64 keys, 16 of 32 MiB); PUT overwrites one key per
 * connection, so the live data stays bounded and the store's reclaim meets
 * only overwritten objects.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define GB_BUCKET "bench"
#define GB_ACCESS "AKIDKVTIERBENCH"
#define GB_REGION "us-east-1"
#define GB_MAX_LIST 8
#define GB_MAX_CONNS 256
#define GB_MAX_RUNS 15
#define GB_SINK (256 << 10)		/* receive chunk, discarded */
#define GB_RBUF (16 << 10)		/* response headers and RESP lines */
#define GB_REQ 2048			/* request line and headers */
#define MIB (1024.0 * 1024.0)

enum gb_op { GB_GET, GB_PUT };
enum gb_sys { SYS_KVT, SYS_NGINX, SYS_REDIS, SYS_N };

static const char *const gb_op_names[] = { "GET", "PUT" };
static const char *const gb_sys_names[] = { "kvtier", "nginx", "redis" };

struct gb_opts {
	char *dir;
	uint64_t sizes[GB_MAX_LIST];
	unsigned nsizes;
	unsigned conns[GB_MAX_LIST];
	unsigned nconns;
	unsigned seconds;
	unsigned runs;
	unsigned threads;		/* the gateway's --threads; 0: its default */
	uint64_t capacity;
	const char *cached_read_max;	/* [store] cached_read_max; NULL: the default */
	int keep;
	const char *out;
	unsigned ops;			/* bit GB_GET, bit GB_PUT: the operations measured */
};

/* One measurement of one system. */
struct gb_result {
	int ok;
	double rps, bps;
	double p50_ms, p99_ms;
	uint64_t errors;
	long rss_kib;			/* kvtier: the gateway's peak VmRSS during it */
};

struct gb_cell {
	enum gb_op op;
	uint64_t size;
	unsigned conns;
	unsigned nruns;
	struct gb_result r[SYS_N][GB_MAX_RUNS];
	struct gb_result med[SYS_N];
};

struct gb_rss {
	long idle, peak, peak_anon, peak_file;	/* KiB: VmRSS and its parts at its peak */
	long peak_own;			/* KiB: the peak of RssAnon + RssShmem */
};

struct gb {
	struct gb_opts o;
	char *scratch;			/* DIR/kvtier-bench-gw.XXXXXX */
	char gw_path[4096], nginx_path[4096], redis_path[4096];
	pid_t pid[SYS_N];
	int port[SYS_N];
	char host[SYS_N][32];		/* "127.0.0.1:PORT" */
	char secret[41];
	unsigned char *src;		/* max(size) bytes: every object's contents */
	uint64_t max_size;
	struct gb_cell *cells;
	unsigned ncells;
	struct gb_rss rss;
	char nginx_version[128], redis_version[128];
	char start_date[64];
	char cmdline[1024];
};

/* ---- small helpers -------------------------------------------------------- */

static void gb_size_str(uint64_t size, char *buf, size_t len)
{
	if (size >= (1 << 20) && size % (1 << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "M", size >> 20);
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "K", size >> 10);
	else
		snprintf(buf, len, "%" PRIu64, size);
}

/* The value of "Name:" in /proc/PID/status, in KiB; -1 when unreadable. */
/* VmRSS, RssAnon, RssFile and RssShmem of pid, in KiB. */
static int gb_proc_status(pid_t pid, long *rss, long *anon, long *file, long *shmem)
{
	char path[64], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return -errno;
	*rss = *anon = *file = *shmem = -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "VmRSS:", 6) == 0)
			*rss = strtol(line + 6, NULL, 10);
		else if (strncmp(line, "RssAnon:", 8) == 0)
			*anon = strtol(line + 8, NULL, 10);
		else if (strncmp(line, "RssFile:", 8) == 0)
			*file = strtol(line + 8, NULL, 10);
		else if (strncmp(line, "RssShmem:", 9) == 0)
			*shmem = strtol(line + 9, NULL, 10);
	}
	fclose(f);
	return *rss < 0 ? -EIO : 0;
}

/* PATH first, then the sbin directories a non-root PATH lacks. */
/* The gateway built alongside this binary: same directory as /proc/self/exe. */
static int gb_find_gateway(char *out, size_t len)
{
	char self[4096], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n < 0)
		return -errno;
	self[n] = '\0';
	if ((slash = strrchr(self, '/')))
		*slash = '\0';
	if (snprintf(out, len, "%s/kvtier-gateway", self) >= (int)len)
		return -ENAMETOOLONG;
	return access(out, X_OK) == 0 ? 0 : -ENOENT;
}

/* First line of `PROG ARG 2>&1`, for the report. */
/* A loopback port nobody listens on now (the server binds it next). */
static int gb_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -errno;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Blocking, but woken every 200 ms to look at the deadline. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

/*
 * fork + exec with stdout and stderr to log; the child gets SIGTERM if this
 * process dies, so an interrupted benchmark leaves no servers behind.
 */
/* SIGTERM, up to 20 s, then SIGKILL. */
/* ---- SigV4 ------------------------------------------------------------------ */

struct gb_signer {
	const char *secret;
	char day[9];			/* yyyymmdd the key is for */
	unsigned char key[32];
};

static void gb_hmac(unsigned char out[32], const void *key, size_t klen, const char *msg)
{
	unsigned int len = 32;

	HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &len);
}

static void gb_hex(char *out, const unsigned char *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

/*
 * Writes the x-amz-* and Authorization header lines for METHOD PATH to hdr
 * (each ending "\r\n"). The payload is UNSIGNED-PAYLOAD; the signed headers
 * are host, x-amz-content-sha256 and x-amz-date.
 */
static int gb_sign(struct gb_signer *s, const char *method, const char *path, const char *host,
		   char *hdr, size_t len)
{
	char date[17], creq[1024], sts[512], hash[65], sig[65], k[64];
	unsigned char d[32];
	struct tm tm;
	time_t t = time(NULL);

	gmtime_r(&t, &tm);
	strftime(date, sizeof(date), "%Y%m%dT%H%M%SZ", &tm);
	if (strncmp(s->day, date, 8) != 0) {
		memcpy(s->day, date, 8);
		s->day[8] = '\0';
		snprintf(k, sizeof(k), "AWS4%s", s->secret);
		gb_hmac(d, k, strlen(k), s->day);
		gb_hmac(d, d, 32, GB_REGION);
		gb_hmac(d, d, 32, "s3");
		gb_hmac(s->key, d, 32, "aws4_request");
	}
	snprintf(creq, sizeof(creq),
		 "%s\n%s\n\nhost:%s\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:%s\n\n"
		 "host;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD",
		 method, path, host, date);
	SHA256((const unsigned char *)creq, strlen(creq), d);
	gb_hex(hash, d, 32);
	snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s/" GB_REGION "/s3/aws4_request\n%s",
		 date, s->day, hash);
	gb_hmac(d, s->key, 32, sts);
	gb_hex(sig, d, 32);
	return snprintf(hdr, len,
			"x-amz-content-sha256: UNSIGNED-PAYLOAD\r\nx-amz-date: %s\r\n"
			"Authorization: AWS4-HMAC-SHA256 Credential=" GB_ACCESS "/%s/" GB_REGION
			"/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
			"Signature=%s\r\n", date, s->day, sig) >= (int)len ? -ENAMETOOLONG : 0;
}

/* ---- the load generator: one connection, one request at a time ------------ */

/* What a request returns besides 0 and a negative errno. */
#define GB_ABORT 1			/* the deadline passed mid-transfer */

struct gb_client {
	struct gb *b;
	enum gb_sys sys;
	int fd;
	char *rbuf;			/* GB_RBUF: headers, RESP lines */
	size_t rlen, roff;
	char *sink;			/* GB_SINK: bodies, discarded */
	struct gb_signer signer;
	int64_t deadline;		/* 0: none (prefill) */
	uint64_t bytes;			/* body bytes moved before the deadline */
	char err[160];			/* the first error, for the report */
};

static void gb_client_error(struct gb_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void gb_client_error(struct gb_client *c, const char *fmt, ...)
{
	va_list ap;

	if (c->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
}

static int gb_client_connect(struct gb_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->rlen = c->roff = 0;
	c->fd = gb_connect(c->b->port[c->sys]);
	return c->fd < 0 ? c->fd : 0;
}

static int gb_client_init(struct gb_client *c, struct gb *b, enum gb_sys sys)
{
	memset(c, 0, sizeof(*c));
	c->b = b;
	c->sys = sys;
	c->fd = -1;
	c->signer.secret = b->secret;
	c->rbuf = malloc(GB_RBUF);
	c->sink = malloc(GB_SINK);
	if (!c->rbuf || !c->sink)
		return -ENOMEM;
	return gb_client_connect(c);
}

static void gb_client_release(struct gb_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->rbuf);
	free(c->sink);
	c->fd = -1;
	c->rbuf = c->sink = NULL;
}

static int gb_past(const struct gb_client *c, int64_t *now)
{
	*now = bench_mono_ns();
	return c->deadline && *now >= c->deadline;
}

/* Sends iov in full; counts the bytes of body (after the first skip bytes). */
static int gb_send(struct gb_client *c, struct iovec *iov, int n, size_t skip)
{
	int64_t now;

	while (n > 0) {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w;

		w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (gb_past(c, &now))
					return GB_ABORT;
				continue;
			}
			return -errno;
		}
		if (!gb_past(c, &now) && (size_t)w > skip)
			c->bytes += (size_t)w - skip;
		skip = (size_t)w >= skip ? 0 : skip - (size_t)w;
		while (n > 0 && (size_t)w >= iov[0].iov_len) {
			w -= (ssize_t)iov[0].iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov[0].iov_base = (char *)iov[0].iov_base + w;
			iov[0].iov_len -= (size_t)w;
		}
		if (c->deadline && now >= c->deadline && n > 0)
			return GB_ABORT;
	}
	return 0;
}

/* More bytes into rbuf; 0 or GB_ABORT or a negative errno (-EPIPE: closed). */
static int gb_fill(struct gb_client *c)
{
	int64_t now;

	if (c->roff > 0) {
		memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
		c->rlen -= c->roff;
		c->roff = 0;
	}
	if (c->rlen == GB_RBUF)
		return -E2BIG;
	for (;;) {
		ssize_t r = recv(c->fd, c->rbuf + c->rlen, GB_RBUF - c->rlen, 0);

		if (r > 0) {
			c->rlen += (size_t)r;
			return 0;
		}
		if (r == 0)
			return -EPIPE;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (gb_past(c, &now))
			return GB_ABORT;
	}
}

/* Reads and discards n body bytes, counting those before the deadline. */
static int gb_discard(struct gb_client *c, uint64_t n)
{
	int64_t now;
	size_t have = c->rlen - c->roff;

	if (have > 0) {
		size_t take = have < n ? have : (size_t)n;

		c->roff += take;
		n -= take;
		if (!gb_past(c, &now))
			c->bytes += take;
	}
	while (n > 0) {
		ssize_t r = recv(c->fd, c->sink, n < GB_SINK ? (size_t)n : GB_SINK, 0);

		if (r == 0)
			return -EPIPE;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -errno;
		} else {
			n -= (uint64_t)r;
		}
		if (gb_past(c, &now))
			return n > 0 ? GB_ABORT : 0;
		if (r > 0)
			c->bytes += (uint64_t)r;
	}
	return 0;
}

/* An HTTP/1.1 response: status, then a Content-Length body (discarded). */
static int gb_http_response(struct gb_client *c, int *status, uint64_t *body)
{
	char *end, *p, *line;
	int rc, close_after = 0;
	uint64_t clen = 0;
	int have_clen = 0;

	while (!(end = memmem(c->rbuf + c->roff, c->rlen - c->roff, "\r\n\r\n", 4)))
		if ((rc = gb_fill(c)))
			return rc;
	*end = '\0';
	line = c->rbuf + c->roff;
	if (strncmp(line, "HTTP/1.", 7) != 0 || strlen(line) < 12) {
		gb_client_error(c, "bad status line '%.60s'", line);
		return -EPROTO;
	}
	*status = atoi(line + 9);
	for (p = strstr(line, "\r\n"); p && p < end; p = strstr(p, "\r\n")) {
		p += 2;
		if (strncasecmp(p, "content-length:", 15) == 0) {
			clen = strtoull(p + 15, NULL, 10);
			have_clen = 1;
		} else if (strncasecmp(p, "connection:", 11) == 0) {
			const char *eol = strstr(p, "\r\n");
			const char *cl = strcasestr(p, "close");

			close_after = cl && (!eol || cl < eol);
		} else if (strncasecmp(p, "transfer-encoding:", 18) == 0) {
			gb_client_error(c, "chunked response (status %s) not supported", line + 9);
			return -EPROTO;
		}
	}
	c->roff = (size_t)(end + 4 - c->rbuf);
	if (!have_clen && *status != 204 && *status != 304 && *status >= 200) {
		gb_client_error(c, "response without Content-Length: '%.60s'", line);
		return -EPROTO;
	}
	*body = clen;
	if ((rc = gb_discard(c, clen)))
		return rc;
	if (close_after)
		rc = gb_client_connect(c);
	return rc;
}

/* A RESP reply: "+OK" or "$N" with N bytes (discarded); *n = N or 0. */
static int gb_resp_reply(struct gb_client *c, uint64_t *n)
{
	char *eol;
	int rc;

	while (!(eol = memmem(c->rbuf + c->roff, c->rlen - c->roff, "\r\n", 2)))
		if ((rc = gb_fill(c)))
			return rc;
	*eol = '\0';
	*n = 0;
	switch (c->rbuf[c->roff]) {
	case '+':
		c->roff = (size_t)(eol + 2 - c->rbuf);
		return 0;
	case '$': {
		long long len = strtoll(c->rbuf + c->roff + 1, NULL, 10);

		c->roff = (size_t)(eol + 2 - c->rbuf);
		if (len < 0) {
			gb_client_error(c, "redis: %s", "nil reply (key missing)");
			return -ENOENT;
		}
		*n = (uint64_t)len;
		if ((rc = gb_discard(c, *n)))
			return rc;
		/* The trailing CRLF is not body: do not count it. */
		while (c->rlen - c->roff < 2)
			if ((rc = gb_fill(c)))
				return rc;
		c->roff += 2;
		return 0;
	}
	default:
		gb_client_error(c, "redis: '%.100s'", c->rbuf + c->roff);
		c->roff = (size_t)(eol + 2 - c->rbuf);
		return -EIO;
	}
}

/*
 * One request: op on key (size bytes for PUT, expected size for GET).
 * Returns 0 when it completed as expected, GB_ABORT at the deadline, or a
 * negative errno (the connection is then unusable: the caller reconnects).
 */
static int gb_request(struct gb_client *c, enum gb_op op, const char *key, uint64_t size)
{
	char req[GB_REQ], path[256], auth[512];
	struct iovec iov[3];
	int n = 0, rc, status = 0, len;
	uint64_t got = 0;
	const char *host = c->b->host[c->sys];

	switch (c->sys) {
	case SYS_KVT:
		snprintf(path, sizeof(path), "/" GB_BUCKET "/%s", key);
		if ((rc = gb_sign(&c->signer, gb_op_names[op], path, host, auth, sizeof(auth))))
			return rc;
		if (op == GB_GET)
			len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n",
				       path, host, auth);
		else
			len = snprintf(req, sizeof(req), "PUT %s HTTP/1.1\r\nHost: %s\r\n"
				       "Content-Length: %" PRIu64 "\r\n%s\r\n", path, host, size, auth);
		break;
	case SYS_NGINX:
		if (op == GB_GET)
			len = snprintf(req, sizeof(req), "GET /g/%s HTTP/1.1\r\nHost: %s\r\n\r\n",
				       key, host);
		else
			len = snprintf(req, sizeof(req), "PUT /dav/%s HTTP/1.1\r\nHost: %s\r\n"
				       "Content-Length: %" PRIu64 "\r\n\r\n", key, host, size);
		break;
	default:
		if (op == GB_GET)
			len = snprintf(req, sizeof(req), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n",
				       strlen(key), key);
		else
			len = snprintf(req, sizeof(req), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%" PRIu64
				       "\r\n", strlen(key), key, size);
		break;
	}
	if (len < 0 || len >= (int)sizeof(req))
		return -ENAMETOOLONG;
	iov[n].iov_base = req;
	iov[n++].iov_len = (size_t)len;
	if (op == GB_PUT) {
		iov[n].iov_base = c->b->src;
		iov[n++].iov_len = size;
		if (c->sys == SYS_REDIS) {
			iov[n].iov_base = (char *)"\r\n";
			iov[n++].iov_len = 2;
		}
	}
	if ((rc = gb_send(c, iov, n, (size_t)len)))
		return rc;
	if (c->sys == SYS_REDIS) {
		rc = gb_resp_reply(c, &got);
	} else {
		rc = gb_http_response(c, &status, &got);
		if (rc == 0 && (status < 200 || status > 299)) {
			gb_client_error(c, "HTTP status %d", status);
			return -EIO;
		}
	}
	if (rc == 0 && op == GB_GET && got != size) {
		gb_client_error(c, "%s", "GET returned the wrong size");
		return -EIO;
	}
	return rc;
}

/* ---- one measurement ---------------------------------------------------------- */

struct gb_worker {
	struct gb_client c;
	pthread_t tid;
	unsigned id, nconns;
	enum gb_op op;
	uint64_t size;
	unsigned nkeys;
	pthread_barrier_t *bar;
	const int64_t *deadline;
	double *lat;			/* ms of each request completed in time */
	size_t nlat, caplat;
	uint64_t ops, errors;
	uint64_t rng;
	int started;
};

static unsigned gb_nkeys(uint64_t size)
{
	return size >= (32u << 20) ? 16 : 64;
}

static void gb_get_key(char *out, size_t len, uint64_t size, unsigned i)
{
	snprintf(out, len, "g-%" PRIu64 "-%u", size, i);
}

static void *gb_worker_run(void *arg)
{
	struct gb_worker *w = arg;
	char key[64];

	pthread_barrier_wait(w->bar);
	w->c.deadline = *w->deadline;
	if (w->op == GB_PUT)
		snprintf(key, sizeof(key), "p-%" PRIu64 "-%u", w->size, w->id);
	for (;;) {
		int64_t t0 = bench_mono_ns(), t1;
		int rc;

		if (t0 >= w->c.deadline)
			break;
		if (w->op == GB_GET) {
			w->rng ^= w->rng << 13;
			w->rng ^= w->rng >> 7;
			w->rng ^= w->rng << 17;
			gb_get_key(key, sizeof(key), w->size, (unsigned)(w->rng % w->nkeys));
		}
		rc = gb_request(&w->c, w->op, key, w->size);
		t1 = bench_mono_ns();
		if (rc == GB_ABORT || (rc == 0 && t1 > w->c.deadline))
			break;
		if (rc < 0) {
			w->errors++;
			if (t1 >= w->c.deadline || gb_client_connect(&w->c) < 0)
				break;
			continue;
		}
		w->ops++;
		if (w->nlat == w->caplat) {
			size_t cap = w->caplat ? 2 * w->caplat : 4096;
			double *p = realloc(w->lat, cap * sizeof(*p));

			if (!p)
				break;
			w->lat = p;
			w->caplat = cap;
		}
		w->lat[w->nlat++] = (double)(t1 - t0) / 1e6;
	}
	return NULL;
}

static int gb_measure(struct gb *b, enum gb_sys sys, enum gb_op op, uint64_t size,
		      unsigned conns, struct gb_result *res)
{
	struct gb_worker *w = calloc(conns, sizeof(*w));
	pthread_barrier_t bar;
	int64_t deadline = 0, start;
	double *all = NULL, secs = b->o.seconds;
	size_t nall = 0;
	uint64_t bytes = 0;
	unsigned nstarted = 0, ninit = 0;
	int rc = 0;
	const char *err = NULL;

	memset(res, 0, sizeof(*res));
	if (!w)
		return -ENOMEM;
	pthread_barrier_init(&bar, NULL, conns + 1);
	for (unsigned i = 0; i < conns; i++) {
		w[i].id = i;
		w[i].nconns = conns;
		w[i].op = op;
		w[i].size = size;
		w[i].nkeys = gb_nkeys(size);
		w[i].bar = &bar;
		w[i].deadline = &deadline;
		w[i].rng = 0x9e3779b97f4a7c15ull * (i + 1) ^ (uint64_t)bench_mono_ns();
		rc = gb_client_init(&w[i].c, b, sys);
		ninit++;
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		fprintf(stderr, "kvtier: bench gateway: cannot connect to %s: %s\n",
			gb_sys_names[sys], strerror(-rc));
		/* Release the clients made so far; no thread has started. */
		goto out;
	}
	for (unsigned i = 0; i < conns; i++) {
		if (pthread_create(&w[i].tid, NULL, gb_worker_run, &w[i]) != 0)
			break;
		w[i].started = 1;
		nstarted++;
	}
	if (nstarted < conns) {
		/* The barrier needs every party: make up the missing ones and stop at once. */
		rc = -EAGAIN;
		deadline = bench_mono_ns();
		for (unsigned i = nstarted; i < conns; i++)
			pthread_barrier_wait(&bar);
		pthread_barrier_wait(&bar);
		goto join;
	}
	start = bench_mono_ns();
	deadline = start + (int64_t)b->o.seconds * 1000000000;
	pthread_barrier_wait(&bar);
	if (sys == SYS_KVT) {
		/* The gateway's resident memory, sampled while the load runs. */
		while (bench_mono_ns() < deadline) {
			long rss, anon, file, shmem;
			bool goal_cell = op == GB_GET && size >= (32u << 20) && conns >= 64;

			usleep(100000);
			if (gb_proc_status(b->pid[SYS_KVT], &rss, &anon, &file, &shmem) < 0)
				continue;
			if (rss > res->rss_kib)
				res->rss_kib = rss;
			if (goal_cell && rss > b->rss.peak) {
				b->rss.peak = rss;
				b->rss.peak_anon = anon;
				b->rss.peak_file = file;
			}
			if (goal_cell && anon + shmem > b->rss.peak_own)
				b->rss.peak_own = anon + shmem;
		}
	}
join:
	for (unsigned i = 0; i < conns; i++) {
		if (!w[i].started)
			continue;
		pthread_join(w[i].tid, NULL);
		res->errors += w[i].errors;
		bytes += w[i].c.bytes;
		nall += w[i].nlat;
		if (w[i].c.err[0] && !err)
			err = w[i].c.err;
	}
	if (rc < 0)
		goto out;
	if (nall && !(all = malloc(nall * sizeof(*all)))) {
		rc = -ENOMEM;
		goto out;
	}
	nall = 0;
	for (unsigned i = 0; i < conns; i++) {
		memcpy(all + nall, w[i].lat, w[i].nlat * sizeof(*all));
		nall += w[i].nlat;
	}
	qsort(all, nall, sizeof(*all), bench_cmp_double);
	/*
	 * A window shorter than one request (32 MiB at 64 connections) still
	 * moved bytes: MiB/s counts, req/s is 0 and the latencies are unknown.
	 */
	res->ok = nall > 0 || bytes > 0;
	res->rps = (double)nall / secs;
	res->bps = (double)bytes / secs;
	if (nall) {
		res->p50_ms = all[(nall - 1) / 2];
		res->p99_ms = all[(size_t)((double)(nall - 1) * 0.99)];
	}
	if (err)
		fprintf(stderr, "kvtier: bench gateway: %s %s %" PRIu64 " x%u: %" PRIu64
			" errors, first: %s\n", gb_sys_names[sys], gb_op_names[op], size, conns,
			res->errors, err);
out:
	for (unsigned i = 0; i < ninit; i++) {
		gb_client_release(&w[i].c);
		free(w[i].lat);
	}
	pthread_barrier_destroy(&bar);
	free(all);
	free(w);
	return rc;
}

/* ---- the servers ------------------------------------------------------------- */

static int gb_start_gateway(struct gb *b)
{
	char conf[4300], creds[4300], log[4300], text[8192], threads[16], *argv[16];
	int n = 0, rc;

	snprintf(conf, sizeof(conf), "%s/kvtier.conf", b->scratch);
	snprintf(creds, sizeof(creds), "%s/credentials", b->scratch);
	snprintf(log, sizeof(log), "%s/gateway.log", b->scratch);
	snprintf(text, sizeof(text), "[store]\ndir = %s/store\ncapacity = %" PRIu64
		 "\nsegment_size = 64M\n%s%s%s", b->scratch, b->o.capacity,
		 b->o.cached_read_max ? "cached_read_max = " : "",
		 b->o.cached_read_max ? b->o.cached_read_max : "", b->o.cached_read_max ? "\n" : "");
	if ((rc = bench_write_file(conf, 0644, text, strlen(text))))
		return rc;
	snprintf(text, sizeof(text), GB_ACCESS " %s\n", b->secret);
	if ((rc = bench_write_file(creds, 0600, text, strlen(text))))
		return rc;
	argv[n++] = b->gw_path;
	argv[n++] = (char *)"-c";
	argv[n++] = conf;
	argv[n++] = (char *)"--listen";
	argv[n++] = (char *)"127.0.0.1:0";
	argv[n++] = (char *)"--credentials";
	argv[n++] = creds;
	argv[n++] = (char *)"--region";
	argv[n++] = (char *)GB_REGION;
	/* Logging every request would measure the log: nginx's is off too. */
	argv[n++] = (char *)"--access-log";
	argv[n++] = (char *)"off";
	if (b->o.threads) {
		snprintf(threads, sizeof(threads), "%u", b->o.threads);
		argv[n++] = (char *)"--threads";
		argv[n++] = threads;
	}
	argv[n] = NULL;
	if ((b->pid[SYS_KVT] = bench_spawn(argv, log)) < 0)
		return (int)b->pid[SYS_KVT];
	/* A new store zero-fills its segments first: allow it time. */
	for (int i = 0; i < 1200; i++) {
		FILE *f = fopen(log, "r");
		int status;

		while (f && fgets(text, sizeof(text), f)) {
			char *p = strstr(text, "serving S3 on");

			if (p && (p = strstr(p, "(port ")))
				b->port[SYS_KVT] = atoi(p + 6);
		}
		if (f)
			fclose(f);
		if (b->port[SYS_KVT] > 0)
			break;
		if (waitpid(b->pid[SYS_KVT], &status, WNOHANG) == b->pid[SYS_KVT]) {
			b->pid[SYS_KVT] = -1;
			fprintf(stderr, "kvtier: bench gateway: kvtier-gateway exited; see '%s'\n", log);
			return -ECHILD;
		}
		usleep(100000);
	}
	if (b->port[SYS_KVT] <= 0) {
		fprintf(stderr, "kvtier: bench gateway: kvtier-gateway did not start; see '%s'\n", log);
		return -ETIMEDOUT;
	}
	return 0;
}

static int gb_start_nginx(struct gb *b)
{
	char conf[4300], log[4300], elog[4300], text[8192], *argv[10];
	int rc;

	if ((b->port[SYS_NGINX] = bench_free_port()) < 0)
		return b->port[SYS_NGINX];
	snprintf(conf, sizeof(conf), "%s/nginx.conf", b->scratch);
	snprintf(log, sizeof(log), "%s/nginx.log", b->scratch);
	snprintf(elog, sizeof(elog), "%s/nginx-error.log", b->scratch);
	/*
	 * Debian's defaults where they matter (sendfile, tcp_nopush, workers =
	 * cores), no access log, and keep-alive without a request limit, as the
	 * gateway's. DAV PUT spools the body to client_body_temp_path and
	 * renames it into place: the temp path is on the same filesystem.
	 */
	snprintf(text, sizeof(text),
		 "daemon off;\n"
		 "master_process on;\n"
		 "%s"
		 "worker_processes auto;\n"
		 "pid %s/nginx.pid;\n"
		 "error_log %s warn;\n"
		 "events { worker_connections 4096; }\n"
		 "http {\n"
		 "  access_log off;\n"
		 "  sendfile on;\n"
		 "  tcp_nopush on;\n"
		 "  tcp_nodelay on;\n"
		 "  keepalive_timeout 120;\n"
		 "  keepalive_requests 100000000;\n"
		 "  default_type application/octet-stream;\n"
		 "  client_body_temp_path %s/nginx-body;\n"
		 "  client_max_body_size 0;\n"
		 "  server {\n"
		 "    listen 127.0.0.1:%d;\n"
		 "    root %s/www;\n"
		 "    location /dav/ {\n"
		 "      dav_methods PUT;\n"
		 "      create_full_put_path on;\n"
		 "    }\n"
		 "  }\n"
		 "}\n",
		 geteuid() == 0 ? "user root;\n" : "", b->scratch, elog, b->scratch,
		 b->port[SYS_NGINX], b->scratch);
	if ((rc = bench_write_file(conf, 0644, text, strlen(text))))
		return rc;
	argv[0] = b->nginx_path;
	argv[1] = (char *)"-c";
	argv[2] = conf;
	argv[3] = (char *)"-p";
	argv[4] = b->scratch;
	argv[5] = (char *)"-e";
	argv[6] = elog;
	argv[7] = NULL;
	if ((b->pid[SYS_NGINX] = bench_spawn(argv, log)) < 0)
		return (int)b->pid[SYS_NGINX];
	if ((rc = bench_wait_port(b->pid[SYS_NGINX], b->port[SYS_NGINX], 10))) {
		if (rc == -ECHILD)
			b->pid[SYS_NGINX] = -1;
		fprintf(stderr, "kvtier: bench gateway: nginx did not start; see '%s' and '%s'\n",
			log, elog);
	}
	return rc;
}

static int gb_start_redis(struct gb *b)
{
	char log[4300], port[16], *argv[16];
	int rc;

	if ((b->port[SYS_REDIS] = bench_free_port()) < 0)
		return b->port[SYS_REDIS];
	snprintf(log, sizeof(log), "%s/redis.log", b->scratch);
	snprintf(port, sizeof(port), "%d", b->port[SYS_REDIS]);
	argv[0] = b->redis_path;
	argv[1] = (char *)"--port";
	argv[2] = port;
	argv[3] = (char *)"--bind";
	argv[4] = (char *)"127.0.0.1";
	argv[5] = (char *)"--save";
	argv[6] = (char *)"";
	argv[7] = (char *)"--appendonly";
	argv[8] = (char *)"no";
	argv[9] = (char *)"--dir";
	argv[10] = b->scratch;
	argv[11] = NULL;
	if ((b->pid[SYS_REDIS] = bench_spawn(argv, log)) < 0)
		return (int)b->pid[SYS_REDIS];
	if ((rc = bench_wait_port(b->pid[SYS_REDIS], b->port[SYS_REDIS], 10))) {
		if (rc == -ECHILD)
			b->pid[SYS_REDIS] = -1;
		fprintf(stderr, "kvtier: bench gateway: redis-server did not start; see '%s'\n", log);
	}
	return rc;
}

/* The GET key sets, the same bytes in all three: nginx's as files. */
static int gb_prefill(struct gb *b)
{
	struct gb_client c[SYS_N];
	char path[4400], key[64];
	int rc = 0;

	for (int s = 0; s < SYS_N; s++)
		c[s].fd = -1, c[s].rbuf = c[s].sink = NULL;
	for (int s = 0; s < SYS_N && rc == 0; s++)
		if (s != SYS_NGINX)
			rc = gb_client_init(&c[s], b, (enum gb_sys)s);
	if (rc < 0)
		goto out;
	/* The bucket (PUT /bench is CreateBucket). */
	{
		char auth[512], req[1024];
		struct iovec iov;
		int status;
		uint64_t got;

		if ((rc = gb_sign(&c[SYS_KVT].signer, "PUT", "/" GB_BUCKET, b->host[SYS_KVT], auth,
				  sizeof(auth))))
			goto out;
		snprintf(req, sizeof(req), "PUT /" GB_BUCKET " HTTP/1.1\r\nHost: %s\r\n"
			 "Content-Length: 0\r\n%s\r\n", b->host[SYS_KVT], auth);
		iov.iov_base = req;
		iov.iov_len = strlen(req);
		if ((rc = gb_send(&c[SYS_KVT], &iov, 1, 0)) == 0)
			rc = gb_http_response(&c[SYS_KVT], &status, &got);
		if (rc == 0 && status != 200) {
			fprintf(stderr, "kvtier: bench gateway: CreateBucket: HTTP status %d\n", status);
			rc = -EIO;
		}
		if (rc)
			goto out;
	}
	snprintf(path, sizeof(path), "%s/www/g", b->scratch);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		goto out;
	}
	for (unsigned i = 0; i < b->o.nsizes && rc == 0; i++) {
		uint64_t size = b->o.sizes[i];

		for (unsigned k = 0; k < gb_nkeys(size) && rc == 0; k++) {
			gb_get_key(key, sizeof(key), size, k);
			snprintf(path, sizeof(path), "%s/www/g/%s", b->scratch, key);
			if ((rc = bench_write_file(path, 0644, b->src, size)))
				break;
			if ((rc = gb_request(&c[SYS_KVT], GB_PUT, key, size)))
				break;
			rc = gb_request(&c[SYS_REDIS], GB_PUT, key, size);
		}
	}
	if (rc) {
		for (int s = 0; s < SYS_N; s++)
			if (c[s].err[0])
				fprintf(stderr, "kvtier: bench gateway: prefill %s: %s\n",
					gb_sys_names[s], c[s].err);
	}
out:
	for (int s = 0; s < SYS_N; s++)
		gb_client_release(&c[s]);
	if (rc < 0)
		fprintf(stderr, "kvtier: bench gateway: cannot prefill: %s\n", strerror(-rc));
	return rc;
}

/* ---- options ----------------------------------------------------------------- */

static void gb_usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier bench gateway [--dir DIR] [--sizes 4K,256K,2M,32M] [--conns 1,16,64]\n"
		"                            [--seconds N] [--runs N] [--threads N]\n"
		"                            [--capacity SIZE] [--cached-read-max SIZE]\n"
		"                            [--ops get,put] [--keep] [--out FILE]\n"
		"\n"
		"kvtier-gateway (S3, SigV4) against nginx (static GET, WebDAV PUT) and\n"
		"redis-server (GET, SET) on 127.0.0.1, all started here on scratch ports\n"
		"and data; GET and PUT of each size at each number of connections, one\n"
		"request in flight per connection; medians of --runs runs. Also the\n"
		"gateway's resident memory while 64 connections stream 32 MiB GETs.\n"
		"\n"
		"  --dir DIR         where the scratch directory goes (default: the\n"
		"                    configured [store] dir, else /var/tmp)\n"
		"  --sizes LIST      object sizes (default 4K,256K,2M,32M)\n"
		"  --conns LIST      connections (default 1,16,64)\n"
		"  --seconds N       per measurement (default 2: 216 measurements in a\n"
		"                    default run, about 8 minutes)\n"
		"  --runs N          runs per cell, alternating the three (default 3)\n"
		"  --threads N       the gateway's worker threads (default: its own)\n"
		"  --capacity SIZE   the scratch store's capacity (default 8G)\n"
		"  --cached-read-max SIZE  the store's cached_read_max: extents up to\n"
		"                    SIZE are read through the page cache (default: the\n"
		"                    store's default, 256K; 0: all O_DIRECT)\n"
		"  --ops LIST        get, put or get,put (default: both)\n"
		"  --keep            leave the scratch directory\n"
		"  --out FILE        also write the results as JSON\n");
}

/* "get", "put" or both, comma-separated, into a mask of bits 1 << GB_GET/GB_PUT. */
static int gb_parse_ops(const char *v, unsigned *ops)
{
	*ops = 0;
	while (*v) {
		size_t n = strcspn(v, ",");

		if (n == 3 && strncasecmp(v, "get", 3) == 0)
			*ops |= 1u << GB_GET;
		else if (n == 3 && strncasecmp(v, "put", 3) == 0)
			*ops |= 1u << GB_PUT;
		else
			return -EINVAL;
		v += n + (v[n] == ',');
	}
	return *ops ? 0 : -EINVAL;
}

static int gb_parse_args(const struct kvt_config *cfg, int argc, char **argv, struct gb_opts *o)
{
	uint64_t conns[GB_MAX_LIST];
	const char *dir = NULL;
	int rc = 0;

	memset(o, 0, sizeof(*o));
	o->sizes[0] = 4 << 10;
	o->sizes[1] = 256 << 10;
	o->sizes[2] = 2 << 20;
	o->sizes[3] = 32 << 20;
	o->nsizes = 4;
	o->conns[0] = 1;
	o->conns[1] = 16;
	o->conns[2] = 64;
	o->nconns = 3;
	o->seconds = 2;
	o->runs = 3;
	o->capacity = 8ull << 30;
	o->ops = 1u << GB_GET | 1u << GB_PUT;

	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i], *v = NULL;
		int m;

#define OPT(name, takes) ((m = bench_opt_match(a, name, takes, &i, argc, argv, &v)) != 0)
		if (OPT("--dir", 1)) {
			dir = v;
		} else if (OPT("--sizes", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_list(v, 1, GB_MAX_CONNS, o->sizes, GB_MAX_LIST, &o->nsizes);
		} else if (OPT("--conns", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_list(v, 0, GB_MAX_CONNS, conns, GB_MAX_LIST, &o->nconns);
			for (unsigned k = 0; rc == 0 && k < o->nconns; k++)
				o->conns[k] = (unsigned)conns[k];
		} else if (OPT("--seconds", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 3600, &o->seconds);
		} else if (OPT("--runs", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, GB_MAX_RUNS, &o->runs);
		} else if (OPT("--threads", 1)) {
			rc = m < 0 ? -EINVAL : bench_parse_uint(v, 1, 1024, &o->threads);
		} else if (OPT("--capacity", 1)) {
			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &o->capacity);
		} else if (OPT("--cached-read-max", 1)) {
			uint64_t sz;

			rc = m < 0 ? -EINVAL : kvt_parse_size(v, &sz);
			o->cached_read_max = v;
		} else if (OPT("--ops", 1)) {
			rc = m < 0 ? -EINVAL : gb_parse_ops(v, &o->ops);
		} else if (OPT("--keep", 0)) {
			o->keep = 1;
		} else if (OPT("--out", 1)) {
			o->out = v;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			gb_usage(stdout);
			return 1;
		} else {
			fprintf(stderr, "kvtier: bench gateway: unknown option '%s'\n", a);
			return -EINVAL;
		}
#undef OPT
		rc = bench_opt_checked("gateway", a, m, rc);
	}
	return rc < 0 ? rc : bench_opt_dir(cfg, dir, &o->dir);
}

/* ---- the report -------------------------------------------------------------- */

static void gb_median_cell(struct gb_cell *c)
{
	double v[GB_MAX_RUNS];

	for (int s = 0; s < SYS_N; s++) {
		struct gb_result *m = &c->med[s];
		unsigned k;

		memset(m, 0, sizeof(*m));
		/* Latencies only of runs where a request completed in the window. */
#define MED(field, cond) do { \
		k = 0; \
		for (unsigned r = 0; r < c->nruns; r++) \
			if (c->r[s][r].ok && (cond)) \
				v[k++] = c->r[s][r].field; \
		m->field = bench_median(v, k); \
	} while (0)
		MED(rps, 1);
		MED(bps, 1);
		m->ok = k > 0;
		MED(p50_ms, c->r[s][r].rps > 0);
		MED(p99_ms, c->r[s][r].rps > 0);
#undef MED
		for (unsigned r = 0; r < c->nruns; r++) {
			m->errors += c->r[s][r].errors;
			if (c->r[s][r].rss_kib > m->rss_kib)
				m->rss_kib = c->r[s][r].rss_kib;
		}
	}
}

static double gb_ratio(const struct gb_cell *c, enum gb_sys s)
{
	if (!c->med[SYS_KVT].ok || !c->med[s].ok || c->med[s].bps <= 0)
		return 0;
	return c->med[SYS_KVT].bps / c->med[s].bps;
}

static void gb_print_cell(const struct gb_cell *c)
{
	char sz[24];

	gb_size_str(c->size, sz, sizeof(sz));
	printf("%-3s %4s %3u", gb_op_names[c->op], sz, c->conns);
	for (int s = 0; s < SYS_N; s++) {
		const struct gb_result *m = &c->med[s];

		if (m->ok && m->rps > 0)
			printf(" | %8.0f %7.0f %7.2f %7.2f", m->rps, m->bps / MIB, m->p50_ms, m->p99_ms);
		else if (m->ok)
			printf(" | %8.0f %7.0f %7s %7s", m->rps, m->bps / MIB, "-", "-");
		else
			printf(" | %8s %7s %7s %7s", "-", "-", "-", "-");
	}
	printf(" | %5.2fx %5.2fx", gb_ratio(c, SYS_NGINX), gb_ratio(c, SYS_REDIS));
	for (int s = 0; s < SYS_N; s++)
		if (c->med[s].errors)
			printf("  %s errors %" PRIu64, gb_sys_names[s], c->med[s].errors);
	printf("\n");
	fflush(stdout);
}

static void gb_print_header(void)
{
	printf("\n%-12s | %-33s | %-33s | %-33s | %s\n", "", "kvtier-gateway", "nginx",
	       "redis-server", "kvtier /");
	printf("%-3s %4s %3s", "op", "size", "con");
	for (int s = 0; s < SYS_N; s++)
		printf(" | %8s %7s %7s %7s", "req/s", "MiB/s", "p50 ms", "p99 ms");
	printf(" | %6s %6s\n", "nginx", "redis");
}

static const struct gb_cell *gb_find(const struct gb *b, enum gb_op op, uint64_t size,
				     unsigned conns)
{
	for (unsigned i = 0; i < b->ncells; i++)
		if (b->cells[i].op == op && b->cells[i].size == size && b->cells[i].conns == conns)
			return &b->cells[i];
	return NULL;
}

/* One goal: kvtier / other >= min for every measured number of connections. */
static void gb_goal(const struct gb *b, const char *what, enum gb_op op, uint64_t size,
		   enum gb_sys other, double min)
{
	int any = 0, met = 1;

	printf("  %-36s", what);
	for (unsigned k = 0; k < b->o.nconns; k++) {
		const struct gb_cell *c = gb_find(b, op, size, b->o.conns[k]);
		double r;

		if (!c || !c->med[SYS_KVT].ok || !c->med[other].ok)
			continue;
		r = gb_ratio(c, other);
		printf(" x%u %.2f", c->conns, r);
		any = 1;
		if (r < min)
			met = 0;
	}
	printf("  -> %s\n", !any ? "not measured" : met ? "met" : "MISSED");
}

static void gb_print_goals(const struct gb *b)
{
	printf("\ngoals (kvtier / other, MiB/s medians, at each number of connections):\n");
	gb_goal(b, "GET 2M >= 1.0x nginx", GB_GET, 2 << 20, SYS_NGINX, 1.0);
	gb_goal(b, "GET 32M >= 1.0x nginx", GB_GET, 32 << 20, SYS_NGINX, 1.0);
	gb_goal(b, "GET 4K >= 0.7x nginx req/s", GB_GET, 4 << 10, SYS_NGINX, 0.7);
	gb_goal(b, "PUT 2M >= 0.8x nginx DAV", GB_PUT, 2 << 20, SYS_NGINX, 0.8);
	for (unsigned i = 0; i < b->o.nsizes; i++) {
		char what[64], sz[24];

		if (b->o.sizes[i] < (256u << 10))
			continue;
		gb_size_str(b->o.sizes[i], sz, sizeof(sz));
		snprintf(what, sizeof(what), "GET %s >= 1.0x redis", sz);
		gb_goal(b, what, GB_GET, b->o.sizes[i], SYS_REDIS, 1.0);
		snprintf(what, sizeof(what), "PUT %s >= 1.0x redis", sz);
		gb_goal(b, what, GB_PUT, b->o.sizes[i], SYS_REDIS, 1.0);
	}
	/*
	 * Judged on anonymous and shared memory: GET bodies go out of the
	 * segments' mappings (kvt_reader_map), whose pages VmRSS counts under
	 * RssFile once touched. They are the page cache's, clean and
	 * reclaimable, the same pages nginx's sendfile reads, not the
	 * gateway's own memory.
	 */
	if (b->rss.peak > 0)
		printf("  %-36s %.0f MiB anon+shmem; VmRSS %.0f MiB (anon %.0f, file %.0f; idle %.0f)"
		       "  -> %s\n", "RSS, 64 x 32M GET < 256 MiB", b->rss.peak_own / 1024.0,
		       b->rss.peak / 1024.0, b->rss.peak_anon / 1024.0, b->rss.peak_file / 1024.0,
		       b->rss.idle / 1024.0, b->rss.peak_own < 256 * 1024 ? "met" : "MISSED");
	else
		printf("  %-36s not measured\n", "RSS, 64 x 32M GET < 256 MiB");
}

static void gb_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void gb_json_result(FILE *f, const struct gb_result *r)
{
	fprintf(f, "{\"ok\": %s, \"req_per_s\": %.1f, \"mib_per_s\": %.1f, \"p50_ms\": %.3f, "
		"\"p99_ms\": %.3f, \"errors\": %" PRIu64 ", \"rss_kib\": %ld}",
		r->ok ? "true" : "false", r->rps, r->bps / MIB, r->p50_ms, r->p99_ms, r->errors,
		r->rss_kib);
}

static int gb_write_json(const struct gb *b, const char *machine)
{
	FILE *f = fopen(b->o.out, "w");

	if (!f) {
		fprintf(stderr, "kvtier: bench gateway: cannot write '%s': %s\n", b->o.out,
			strerror(errno));
		return -errno;
	}
	fprintf(f, "{\n  \"benchmark\": \"kvtier bench gateway\",\n  \"date\": ");
	gb_json_string(f, b->start_date);
	fprintf(f, ",\n  \"machine\": ");
	gb_json_string(f, machine);
	fprintf(f, ",\n  \"command\": ");
	gb_json_string(f, b->cmdline);
	fprintf(f, ",\n  \"nginx\": ");
	gb_json_string(f, b->nginx_version);
	fprintf(f, ",\n  \"redis\": ");
	gb_json_string(f, b->redis_version);
	fprintf(f, ",\n  \"seconds\": %u,\n  \"runs\": %u,\n  \"cells\": [\n", b->o.seconds,
		b->o.runs);
	for (unsigned i = 0; i < b->ncells; i++) {
		const struct gb_cell *c = &b->cells[i];

		fprintf(f, "    {\"op\": \"%s\", \"size\": %" PRIu64 ", \"conns\": %u",
			gb_op_names[c->op], c->size, c->conns);
		for (int s = 0; s < SYS_N; s++) {
			fprintf(f, ",\n     \"%s\": ", gb_sys_names[s]);
			gb_json_result(f, &c->med[s]);
			fprintf(f, ",\n     \"%s_runs\": [", gb_sys_names[s]);
			for (unsigned r = 0; r < c->nruns; r++) {
				fprintf(f, r ? ", " : "");
				gb_json_result(f, &c->r[s][r]);
			}
			fprintf(f, "]");
		}
		fprintf(f, ",\n     \"ratio_nginx\": %.3f, \"ratio_redis\": %.3f}%s\n",
			gb_ratio(c, SYS_NGINX), gb_ratio(c, SYS_REDIS), i + 1 < b->ncells ? "," : "");
	}
	fprintf(f, "  ],\n  \"gateway_rss_kib\": {\"idle\": %ld, \"peak_64x32M_get\": %ld, "
		"\"peak_anon\": %ld, \"peak_file\": %ld, \"peak_anon_shmem\": %ld}\n}\n",
		b->rss.idle, b->rss.peak, b->rss.peak_anon, b->rss.peak_file, b->rss.peak_own);
	if (fclose(f) != 0)
		return -errno;
	return 0;
}

/* ---- main ------------------------------------------------------------------- */

int bench_gateway_main(const struct kvt_config *cfg, int argc, char **argv)
{
	struct gb b;
	char machine[512], tmpl[4200], path[4300];
	unsigned char rnd[20];
	int rc, status = CLI_FAIL;
	time_t t = time(NULL);
	struct tm tm;
	int64_t t_start = bench_mono_ns();

	memset(&b, 0, sizeof(b));
	for (int s = 0; s < SYS_N; s++)
		b.pid[s] = -1;
	rc = gb_parse_args(cfg, argc, argv, &b.o);
	if (rc == 1)
		return CLI_OK;
	if (rc < 0) {
		if (rc == -EINVAL)
			gb_usage(stderr);
		return CLI_USAGE;
	}
	gmtime_r(&t, &tm);
	strftime(b.start_date, sizeof(b.start_date), "%Y-%m-%d %H:%M UTC", &tm);
	{
		size_t off = (size_t)snprintf(b.cmdline, sizeof(b.cmdline), "kvtier bench");

		for (int i = 0; i < argc && off < sizeof(b.cmdline); i++)
			off += (size_t)snprintf(b.cmdline + off, sizeof(b.cmdline) - off, " %s", argv[i]);
	}
	if (gb_find_gateway(b.gw_path, sizeof(b.gw_path)) < 0) {
		fprintf(stderr, "kvtier: bench gateway: no kvtier-gateway next to this binary "
			"('%s'); build it with 'make kvtier-gateway'\n", b.gw_path);
		goto out;
	}
	if (bench_find_program("nginx", b.nginx_path, sizeof(b.nginx_path)) < 0 ||
	    bench_find_program("redis-server", b.redis_path, sizeof(b.redis_path)) < 0) {
		fprintf(stderr, "kvtier: bench gateway: needs nginx (with the dav module) and "
			"redis-server: apt-get install nginx-light redis-server\n");
		goto out;
	}
	bench_version(b.nginx_path, "-v", b.nginx_version, sizeof(b.nginx_version));
	bench_version(b.redis_path, "--version", b.redis_version, sizeof(b.redis_version));
	bench_machine(machine, sizeof(machine));

	/* A random secret: the gateway refuses nothing here, but it is a real user. */
	{
		FILE *f = fopen("/dev/urandom", "r");

		if (!f || fread(rnd, 1, sizeof(rnd), f) != sizeof(rnd)) {
			fprintf(stderr, "kvtier: bench gateway: cannot read /dev/urandom\n");
			if (f)
				fclose(f);
			goto out;
		}
		fclose(f);
		gb_hex(b.secret, rnd, sizeof(rnd));
	}
	if (mkdir(b.o.dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "kvtier: bench gateway: cannot make '%s': %s\n", b.o.dir,
			strerror(errno));
		goto out;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/kvtier-bench-gw.XXXXXX", b.o.dir);
	if (!mkdtemp(tmpl)) {
		fprintf(stderr, "kvtier: bench gateway: cannot make a directory in '%s': %s\n",
			b.o.dir, strerror(errno));
		goto out;
	}
	chmod(tmpl, 0755);
	b.scratch = strdup(tmpl);
	snprintf(path, sizeof(path), "%s/www", tmpl);
	if (!b.scratch || mkdir(path, 0755) < 0)
		goto out;
	snprintf(path, sizeof(path), "%s/nginx-body", tmpl);
	if (mkdir(path, 0755) < 0)
		goto out;

	for (unsigned i = 0; i < b.o.nsizes; i++)
		if (b.o.sizes[i] > b.max_size)
			b.max_size = b.o.sizes[i];
	if (!(b.src = malloc(b.max_size)))
		goto out;
	{
		uint64_t x = 0x2545f4914f6cdd1dull ^ (uint64_t)t;

		for (uint64_t i = 0; i + 8 <= b.max_size; i += 8) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			memcpy(b.src + i, &x, 8);
		}
	}

	printf("kvtier bench gateway: %s\n", b.start_date);
	printf("machine: %s\n", machine);
	printf("servers: %s; %s; %s\n", b.gw_path, b.nginx_version, b.redis_version);
	printf("scratch: %s\n", b.scratch);
	fflush(stdout);
	if ((rc = gb_start_gateway(&b)) || (rc = gb_start_nginx(&b)) || (rc = gb_start_redis(&b))) {
		fprintf(stderr, "kvtier: bench gateway: cannot start the servers: %s\n", strerror(-rc));
		goto out;
	}
	for (int s = 0; s < SYS_N; s++)
		snprintf(b.host[s], sizeof(b.host[s]), "127.0.0.1:%d", b.port[s]);
	printf("ports: kvtier-gateway %d, nginx %d, redis %d\n", b.port[SYS_KVT],
	       b.port[SYS_NGINX], b.port[SYS_REDIS]);
	if (gb_prefill(&b) < 0)
		goto out;
	{
		long rss, anon, file, shmem;

		if (gb_proc_status(b.pid[SYS_KVT], &rss, &anon, &file, &shmem) == 0)
			b.rss.idle = rss;
	}
	printf("prefilled in %.1f s; %u s per measurement, %u runs\n",
	       (double)(bench_mono_ns() - t_start) / 1e9, b.o.seconds, b.o.runs);

	b.cells = calloc((size_t)b.o.nsizes * b.o.nconns * 2, sizeof(*b.cells));
	if (!b.cells)
		goto out;
	gb_print_header();
	for (unsigned i = 0; i < b.o.nsizes; i++) {
		for (unsigned k = 0; k < b.o.nconns; k++) {
			for (int op = GB_GET; op <= GB_PUT; op++) {
				struct gb_cell *c;

				if (!(b.o.ops & 1u << op))
					continue;
				c = &b.cells[b.ncells++];

				c->op = (enum gb_op)op;
				c->size = b.o.sizes[i];
				c->conns = b.o.conns[k];
				for (unsigned r = 0; r < b.o.runs; r++) {
					for (int s = 0; s < SYS_N; s++) {
						rc = gb_measure(&b, (enum gb_sys)s, c->op, c->size,
								c->conns, &c->r[s][r]);
						if (rc < 0)
							goto out;
					}
					c->nruns++;
				}
				gb_median_cell(c);
				gb_print_cell(c);
			}
		}
	}
	printf("\nmedians of %u runs of %u s; MiB/s = 2^20 body bytes/s moved inside the window; "
	       "req/s and latencies: requests completed inside it\n", b.o.runs, b.o.seconds);
	gb_print_goals(&b);
	printf("\ntotal %.0f s\n", (double)(bench_mono_ns() - t_start) / 1e9);
	status = CLI_OK;
	if (b.o.out && gb_write_json(&b, machine) < 0)
		status = CLI_FAIL;
out:
	for (int s = 0; s < SYS_N; s++)
		bench_stop(b.pid[s]);
	if (b.scratch) {
		if (b.o.keep)
			printf("kept '%s'\n", b.scratch);
		else
			bench_rm_rf(b.scratch);
	}
	free(b.scratch);
	free(b.src);
	free(b.cells);
	free(b.o.dir);
	return status;
}
