/*
 * fuzz_g4_s3.c - fuzz target for what a partner S3 store answers the
 * engine's S3 client (src/cold_s3.c): status lines, headers (ETag,
 * Content-Length) and XML documents (errors, uploads listings) from a
 * partner's store are outside input like a request's.
 *
 * A fake partner runs in this process: a thread on 127.0.0.1 (a free port)
 * that reads each request and answers it with the input's bytes, raw, then
 * closes the connection. The input's first byte picks the operation (head,
 * get, put, delete, or the cleanup of stale multipart uploads, which lists
 * uploads and aborts those it finds), the rest is the answer to every
 * request of it. One client takes every input, as a process's client takes
 * every answer: it first found that Debian 12's libcurl crashed when an easy
 * handle kept for its connection got an answer whose first header line is
 * folded (src/cold_s3.c, s3_multi_get). Promises checked:
 *  - no crash, no leak (the sanitizers), whatever the answer;
 *  - every operation returns 0 or one of the errors of cold.h (-ENOENT,
 *    -EIO, -EAGAIN, -EHOSTUNREACH, -EOPNOTSUPP, -ENXIO for NoSuchBucket);
 *    a put never -ENOENT, which its callers take for a key changed
 *    meanwhile, no failure;
 *  - a get that succeeds delivered exactly the size it reports;
 *  - a put that succeeds with verified set had the partner name the MD5
 *    of what was sent, and its ETag is quoted.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "kvtier.h"
#include "cold.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_PUT_SIZE 3000	/* under curl's Expect: 100-continue threshold */

static char fuzz_dir[PATH_MAX / 2];
static char fuzz_keys[PATH_MAX], fuzz_endpoint[64];
static struct cold *fuzz_cold;
static int fuzz_lfd = -1;
static pthread_mutex_t fuzz_lock = PTHREAD_MUTEX_INITIALIZER;
static const uint8_t *fuzz_answer;	/* under fuzz_lock */
static size_t fuzz_answer_len;

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_g4_s3: broken promise: %s\n", what);
		abort();
	}
}

/* Reads one request (head, and a body of Content-Length), answers, closes. */
static void fuzz_serve(int c)
{
	struct timeval tv = { .tv_sec = 2 };
	char buf[16384];
	size_t n = 0;
	long long body = 0;
	char *end = NULL;

	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (n < sizeof(buf) - 1 && !end) {
		ssize_t r = read(c, buf + n, sizeof(buf) - 1 - n);

		if (r <= 0)
			return;
		n += (size_t)r;
		buf[n] = '\0';
		end = strstr(buf, "\r\n\r\n");
	}
	if (!end)
		return;
	for (char *h = strstr(buf, "\r\n"); h && h < end; h = strstr(h + 2, "\r\n"))
		if (!strncasecmp(h + 2, "Content-Length:", 15))
			body = atoll(h + 17);
	body -= (long long)(n - (size_t)(end + 4 - buf));
	while (body > 0) {
		ssize_t r = read(c, buf, sizeof(buf));

		if (r <= 0)
			return;
		body -= r;
	}
	pthread_mutex_lock(&fuzz_lock);
	for (size_t off = 0; off < fuzz_answer_len;) {
		ssize_t w = write(c, fuzz_answer + off, fuzz_answer_len - off);

		if (w <= 0)
			break;
		off += (size_t)w;
	}
	pthread_mutex_unlock(&fuzz_lock);
}

static void *fuzz_partner(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(fuzz_lfd, NULL, NULL);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		fuzz_serve(c);
		shutdown(c, SHUT_RDWR);
		close(c);
	}
}

static void fuzz_cleanup(void)
{
	char path[PATH_MAX];

	cold_free(fuzz_cold);
	snprintf(path, sizeof(path), "%s/keys", fuzz_dir);
	unlink(path);
	rmdir(fuzz_dir);
}

static void fuzz_init(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t salen = sizeof(sa);
	struct cold_opts o = { .url = "s3://fz/pre", .endpoint = fuzz_endpoint,
			       .credentials = fuzz_keys };
	pthread_t t;
	FILE *f;

	/* Errors only: the partner fails on purpose, and each failure is a
	 * line in the log (kept: a sanitizer's report follows them). */
	kvt_log_set_level(getenv("FUZZ_VERBOSE") ? KVT_LOG_INFO : KVT_LOG_ERR);
	snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/fuzz_g4_s3.XXXXXX", base);
	fuzz_require(mkdtemp(fuzz_dir) != NULL, "a scratch directory");
	snprintf(fuzz_keys, sizeof(fuzz_keys), "%s/keys", fuzz_dir);
	f = fopen(fuzz_keys, "w");
	fuzz_require(f && fchmod(fileno(f), 0600) == 0 &&
		     fputs("access_key = AKIDFUZZ\nsecret_key = fuzzsecret\n", f) >= 0 &&
		     fclose(f) == 0, "the partner's keys file");
	fuzz_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	fuzz_require(fuzz_lfd >= 0 && bind(fuzz_lfd, (struct sockaddr *)&sa, salen) == 0 &&
		     listen(fuzz_lfd, 16) == 0 &&
		     getsockname(fuzz_lfd, (struct sockaddr *)&sa, &salen) == 0,
		     "a loopback port for the partner");
	snprintf(fuzz_endpoint, sizeof(fuzz_endpoint), "http://127.0.0.1:%u", ntohs(sa.sin_port));
	fuzz_require(pthread_create(&t, NULL, fuzz_partner, NULL) == 0, "the partner's thread");
	pthread_detach(t);
	fuzz_require(cold_s3_new(&o, &fuzz_cold) == 0, "the S3 client");
	atexit(fuzz_cleanup);
}

/* A put's bytes: a pattern, pulled in order. */
static int fuzz_source(void *arg, void *buf, size_t len, uint64_t off)
{
	(void)arg;
	for (size_t i = 0; i < len; i++)
		((uint8_t *)buf)[i] = (uint8_t)((off + i) * 31);
	return 0;
}

static int fuzz_sink(void *arg, const void *buf, size_t len)
{
	(void)buf;
	*(uint64_t *)arg += len;
	return 0;
}

static int fuzz_rc_ok(int rc)
{
	return rc == 0 || rc == -ENOENT || rc == -EIO || rc == -EAGAIN || rc == -EHOSTUNREACH ||
	       rc == -EOPNOTSUPP || rc == -ENXIO;
}

/* The hex MD5 of the bytes fuzz_source() gives for a put of FUZZ_PUT_SIZE. */
static void fuzz_put_md5(char hex[33])
{
	uint8_t buf[FUZZ_PUT_SIZE], md[16];
	unsigned mdlen = 0;

	fuzz_source(NULL, buf, sizeof(buf), 0);
	fuzz_require(EVP_Digest(buf, sizeof(buf), md, &mdlen, EVP_md5(), NULL) == 1, "md5");
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cold_put_info info;
	uint64_t got = 0, len = 0;
	char md5[33];
	int rc = 0;

	struct cold *cold;

	if (size < 1 || size > 64 * 1024)
		return 0;
	if (!fuzz_cold)
		fuzz_init();
	cold = fuzz_cold;
	pthread_mutex_lock(&fuzz_lock);
	fuzz_answer = data + 1;
	fuzz_answer_len = size - 1;
	pthread_mutex_unlock(&fuzz_lock);

	switch (data[0] % 5) {
	case 0:
		rc = cold_head(cold, "b/k", &len);
		break;
	case 1:
		rc = cold_get(cold, "b/k", fuzz_sink, &got, &len);
		break;
	case 2:
		memset(&info, 0, sizeof(info));
		rc = cold_put(cold, "b/k", FUZZ_PUT_SIZE, "application/octet-stream",
			      fuzz_source, NULL, &info);
		break;
	case 3:
		rc = cold_del(cold, "b/k");
		break;
	default:
		rc = cold_cleanup(cold);
		break;
	}
	fuzz_require(fuzz_rc_ok(rc), "only the errors of cold.h");
	fuzz_require(data[0] % 5 != 2 || rc != -ENOENT, "a put's 404 is a failure, no missing key");
	if (data[0] % 5 == 1)
		fuzz_require(rc != 0 || got == len, "a get delivers the size it reports");
	if (data[0] % 5 == 2 && rc == 0) {
		size_t n = strlen(info.etag);

		fuzz_require(n >= 2 && info.etag[0] == '"' && info.etag[n - 1] == '"',
			     "a stored object's ETag is quoted");
		fuzz_put_md5(md5);
		fuzz_require(!info.verified || (n == 34 && !strncmp(info.etag + 1, md5, 32)),
			     "verified only when the partner named the MD5 sent");
	}
	pthread_mutex_lock(&fuzz_lock);
	fuzz_answer = NULL;
	fuzz_answer_len = 0;
	pthread_mutex_unlock(&fuzz_lock);
	return 0;
}
