/*
 * fuzz_g4_s3.c - fuzz target for what a partner S3 store answers the
 * engine's S3 client (src/cold_s3.c): status lines, headers (ETag,
 * Content-Length) and XML documents (errors, uploads listings) from a
 * partner's store are outside input like a request's.
 *
 * A fake partner runs in this process: a thread on 127.0.0.1 (a free port)
 * that reads each request and answers it with the input's bytes, raw, then
 * closes the connection. The input's first byte picks the operation (head,
 * get, put, delete, the cleanup of stale multipart uploads, which lists
 * uploads and aborts those it finds, a conditional put with If-Match or
 * If-None-Match: * as one PUT or on the completion of a multipart upload,
 * or a conditional delete; or, no partner asked, reading the input as the
 * [g4] credentials file), the rest is the answers: split at
 * FUZZ_NEXT_ANSWER, the n-th request gets the n-th answer and every
 * request past the last the last one (so a multipart upload's initiation,
 * parts and completion can each get their own). One client takes every
 * input, as a process's client takes every answer: it first found that
 * Debian 12's libcurl crashed when an easy handle kept for its connection
 * got an answer whose first header line is folded (src/cold_s3.c,
 * s3_multi_get). A client whose conditional requests were refused as
 * unsupported asks no more in its process, so after such an answer the
 * target checks that, then takes a fresh client. Promises checked:
 *  - no crash, no leak (the sanitizers), whatever the answer;
 *  - every operation returns 0 or one of the errors of cold.h (-ENOENT,
 *    -EIO, -EAGAIN, -EHOSTUNREACH, -EOPNOTSUPP, -ENXIO for NoSuchBucket;
 *    -ECANCELED for the conditional ones); a put, or a conditional delete,
 *    never -ENOENT, which callers take for a key changed meanwhile, no
 *    failure;
 *  - a get that succeeds delivered exactly the size it reports;
 *  - a put that succeeds with verified set had the partner name the MD5
 *    of what was sent, and its ETag is quoted;
 *  - a conditional request carries its condition, exactly as asked, and
 *    only on the PUT, the completion of the upload or the DELETE;
 *  - a credentials file makes a client or -EINVAL;
 *  - a conditional put or delete answers -EOPNOTSUPP only when a request
 *    that carried its condition was refused, and is then not asked of the
 *    partner again (-EOPNOTSUPP at once); answered anything else, it is.
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
#define FUZZ_PART_SIZE 1024	/* the multipart client's: 3 parts of a put */
#define FUZZ_NEXT_ANSWER "\n--next-answer--\n"
#define FUZZ_ANSWERS_MAX 16
/* What a conditional request compares: an MD5 ETag, as get_etag answers. */
#define FUZZ_MATCH "\"0123456789abcdef0123456789abcdef\""

enum fuzz_op {
	FUZZ_HEAD, FUZZ_GET, FUZZ_PUT, FUZZ_DEL, FUZZ_CLEANUP,
	FUZZ_PUT_IF,		/* If-Match: FUZZ_MATCH on one PUT */
	FUZZ_PUT_ABSENT,	/* If-None-Match: * on one PUT */
	FUZZ_PUT_IF_MPU,	/* If-Match on the completion of a multipart upload */
	FUZZ_DEL_IF,		/* If-Match on the DELETE */
	FUZZ_KEYS,		/* the input is the [g4] credentials file, no answer */
	FUZZ_NOPS
};

static char fuzz_dir[PATH_MAX / 2];
static char fuzz_keys[PATH_MAX], fuzz_endpoint[64];
static struct cold *fuzz_cold, *fuzz_cold_mpu;	/* part_size 8 MiB, FUZZ_PART_SIZE */
static int fuzz_lfd = -1;
static pthread_mutex_t fuzz_lock = PTHREAD_MUTEX_INITIALIZER;
/* Under fuzz_lock: the answers, and what the partner saw. */
static const uint8_t *fuzz_answer[FUZZ_ANSWERS_MAX];
static size_t fuzz_answer_len[FUZZ_ANSWERS_MAX];
static unsigned fuzz_nanswers;
static unsigned fuzz_nreq;	/* requests read whole */
static const char *fuzz_cond;	/* the condition asked, NULL: none */
static unsigned fuzz_ncond;	/* requests that carried it */
static int fuzz_cond_wrong;	/* a condition not as asked, or where it has no place */

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_g4_s3: broken promise: %s\n", what);
		abort();
	}
}

/*
 * Notes the condition of one request (head: its request line and headers,
 * cond: its If-Match or If-None-Match line, or NULL): it must be the one
 * asked, on the PUT of a key, the completion of an upload or the DELETE
 * of a key, never on an upload's initiation, its parts or its abort.
 */
static void fuzz_check_cond(const char *head, const char *cond)
{
	char want[sizeof(FUZZ_MATCH) + 16];
	int query = memchr(head, '?', strcspn(head, "\r")) != NULL;
	int place;
	size_t n;

	if (!cond)
		return;
	pthread_mutex_lock(&fuzz_lock);
	fuzz_ncond++;
	if (fuzz_cond) {
		snprintf(want, sizeof(want), fuzz_cond[0] ? "If-Match: %s" : "If-None-Match: *",
			 fuzz_cond);
		place = (!strncmp(head, "PUT ", 4) && !query) ||
			(!strncmp(head, "DELETE ", 7) && !query) ||
			(!strncmp(head, "POST ", 5) && query && !strstr(head, "uploads="));
		n = strlen(want);
		if (strncmp(cond, want, n) != 0 || (cond[n] != '\r' && cond[n] != '\0') || !place)
			fuzz_cond_wrong = 1;
	} else {
		fuzz_cond_wrong = 1;
	}
	pthread_mutex_unlock(&fuzz_lock);
}

/* Reads one request (head, and a body of Content-Length), answers, closes. */
static void fuzz_serve(int c)
{
	struct timeval tv = { .tv_sec = 2 };
	char buf[16384];
	size_t n = 0;
	long long body = 0;
	char *end = NULL, *cond = NULL;
	unsigned i;

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
	*end = '\0';
	for (char *h = strstr(buf, "\r\n"); h; h = strstr(h + 2, "\r\n")) {
		if (!strncasecmp(h + 2, "Content-Length:", 15))
			body = atoll(h + 17);
		if (!strncasecmp(h + 2, "If-Match:", 9) || !strncasecmp(h + 2, "If-None-Match:", 14))
			cond = h + 2;
	}
	fuzz_check_cond(buf, cond);
	body -= (long long)(n - (size_t)(end + 4 - buf));
	while (body > 0) {
		ssize_t r = read(c, buf, sizeof(buf));

		if (r <= 0)
			return;
		body -= r;
	}
	pthread_mutex_lock(&fuzz_lock);
	i = fuzz_nreq < fuzz_nanswers ? fuzz_nreq : fuzz_nanswers - 1;
	fuzz_nreq++;
	for (size_t off = 0; fuzz_nanswers && off < fuzz_answer_len[i];) {
		ssize_t w = write(c, fuzz_answer[i] + off, fuzz_answer_len[i] - off);

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
	cold_free(fuzz_cold_mpu);
	snprintf(path, sizeof(path), "%s/keys", fuzz_dir);
	unlink(path);
	rmdir(fuzz_dir);
}

/* A fresh client: 8 MiB parts (every put one PUT), or FUZZ_PART_SIZE, one
 * part at a time so that the parts take the answers in order. */
static struct cold *fuzz_client(int mpu)
{
	struct cold_opts o = { .url = "s3://fz/pre", .endpoint = fuzz_endpoint,
			       .credentials = fuzz_keys, .part_size = mpu ? FUZZ_PART_SIZE : 0,
			       .jobs = mpu ? 1 : 0 };
	struct cold *c = NULL;

	fuzz_require(cold_s3_new(&o, &c) == 0, "the S3 client");
	return c;
}

static void fuzz_init(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t salen = sizeof(sa);
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
	fuzz_cold = fuzz_client(0);
	fuzz_cold_mpu = fuzz_client(1);
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

/* A conditional one's: "not as read" instead of "not there". */
static int fuzz_cond_rc_ok(int rc)
{
	return rc != -ENOENT && (rc == -ECANCELED || fuzz_rc_ok(rc));
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


/* The input as the credentials file of a new client (s3_read_keys()). */
static int fuzz_keys_file(const uint8_t *data, size_t size)
{
	char path[PATH_MAX];
	struct cold_opts o = { .url = "s3://fz/pre", .endpoint = fuzz_endpoint,
			       .credentials = path };
	struct cold *c = NULL;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/keys-fuzzed", fuzz_dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	fuzz_require(fd >= 0 && (size == 0 || write(fd, data, size) == (ssize_t)size) &&
		     close(fd) == 0, "the fuzzed keys file");
	rc = cold_s3_new(&o, &c);
	fuzz_require(rc == 0 || rc == -EINVAL, "a client or -EINVAL");
	fuzz_require((rc == 0) == (c != NULL), "a client only when made");
	cold_free(c);
	unlink(path);
	return rc;
}

/* Sets the answers, data split at FUZZ_NEXT_ANSWER, and forgets what the
 * partner saw; cond: the condition the next requests ask, or NULL. */
static void fuzz_answers(const uint8_t *data, size_t size, const char *cond)
{
	const size_t dlen = strlen(FUZZ_NEXT_ANSWER);
	const uint8_t *p = data, *end = size ? data + size : data;	/* data NULL: none */

	pthread_mutex_lock(&fuzz_lock);
	fuzz_nanswers = 0;
	while (size && fuzz_nanswers < FUZZ_ANSWERS_MAX) {
		const uint8_t *next = memmem(p, (size_t)(end - p), FUZZ_NEXT_ANSWER, dlen);

		if (!next || fuzz_nanswers == FUZZ_ANSWERS_MAX - 1)
			next = end;
		fuzz_answer[fuzz_nanswers] = p;
		fuzz_answer_len[fuzz_nanswers++] = (size_t)(next - p);
		if (next == end)
			break;
		p = next + dlen;
	}
	fuzz_nreq = fuzz_ncond = 0;
	fuzz_cond = cond;
	fuzz_cond_wrong = 0;
	pthread_mutex_unlock(&fuzz_lock);
}

static unsigned fuzz_requests(void)
{
	unsigned n;

	pthread_mutex_lock(&fuzz_lock);
	n = fuzz_nreq;
	fuzz_require(!fuzz_cond_wrong, "a condition as asked, where it belongs");
	pthread_mutex_unlock(&fuzz_lock);
	return n;
}

/* One conditional put or delete of op with client c. */
static int fuzz_cond_op(struct cold *c, enum fuzz_op op, struct cold_put_info *info)
{
	switch (op) {
	case FUZZ_PUT_IF:
	case FUZZ_PUT_IF_MPU:
		return cold_put_if(c, "b/k", FUZZ_MATCH, FUZZ_PUT_SIZE, "application/json",
				   fuzz_source, NULL, info);
	case FUZZ_PUT_ABSENT:
		return cold_put_if(c, "b/k", COLD_ABSENT, FUZZ_PUT_SIZE, "application/json",
				   fuzz_source, NULL, info);
	default:
		return cold_del_if(c, "b/k", FUZZ_MATCH);
	}
}

/*
 * Runs a conditional op, then again on the same answers: refused as
 * unsupported (-EOPNOTSUPP), the second asks nothing of the partner; else
 * it does ask (a 400 about credentials, a 412, a partner that is down do
 * not turn conditions off). A client that turned them off is replaced.
 */
static int fuzz_cond_run(const uint8_t *data, size_t size, enum fuzz_op op,
			 struct cold_put_info *info)
{
	struct cold **c = op == FUZZ_PUT_IF_MPU ? &fuzz_cold_mpu : &fuzz_cold;
	const char *cond = op == FUZZ_PUT_ABSENT ? COLD_ABSENT : FUZZ_MATCH;
	struct cold_put_info again;
	int rc, rc2;
	unsigned n;

	fuzz_answers(data, size, cond);
	rc = fuzz_cond_op(*c, op, info);
	fuzz_require(fuzz_cond_rc_ok(rc), "only the errors of cold.h, -ECANCELED for -ENOENT");
	/* -EHOSTUNREACH may be a kept connection that the partner closed,
	 * found dead once some of a body was pulled: the request never came
	 * whole (s3_on_seek). Else the PUT or DELETE was read whole, and its
	 * condition with it; a multipart upload carries it only if it got as
	 * far as its completion. */
	n = fuzz_requests();
	fuzz_require(n > 0 || rc == -EHOSTUNREACH, "a conditional request reaches the partner");
	pthread_mutex_lock(&fuzz_lock);
	fuzz_require(fuzz_ncond > 0 || op == FUZZ_PUT_IF_MPU || rc == -EHOSTUNREACH,
		     "the condition is sent");
	/* A multipart upload's initiation or part refused (501, 405) refused
	 * no condition: it turned conditional puts off for the process. */
	fuzz_require(rc != -EOPNOTSUPP || fuzz_ncond > 0,
		     "unsupported only when a request that carried the condition was refused");
	pthread_mutex_unlock(&fuzz_lock);

	fuzz_answers(data, size, cond);
	rc2 = fuzz_cond_op(*c, op, &again);
	fuzz_require(fuzz_cond_rc_ok(rc2), "only the errors of cold.h, -ECANCELED for -ENOENT");
	n = fuzz_requests();
	if (rc == -EOPNOTSUPP)
		fuzz_require(rc2 == -EOPNOTSUPP && n == 0, "refused as unsupported, not asked again");
	else
		fuzz_require(n > 0 || rc2 == -EHOSTUNREACH,
			     "asked again unless refused as unsupported");
	if (rc == -EOPNOTSUPP || rc2 == -EOPNOTSUPP) {
		cold_free(*c);
		*c = fuzz_client(op == FUZZ_PUT_IF_MPU);
	}
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cold_put_info info;
	uint64_t got = 0, len = 0;
	enum fuzz_op op;
	char md5[33];
	int rc = 0;

	if (size < 1 || size > 64 * 1024)
		return 0;
	if (!fuzz_cold)
		fuzz_init();
	op = (enum fuzz_op)(data[0] % FUZZ_NOPS);
	memset(&info, 0, sizeof(info));
	if (op == FUZZ_KEYS) {
		rc = fuzz_keys_file(data + 1, size - 1);
		goto out;
	}
	if (op >= FUZZ_PUT_IF) {
		rc = fuzz_cond_run(data + 1, size - 1, op, &info);
		goto put_checks;
	}
	fuzz_answers(data + 1, size - 1, NULL);
	switch (op) {
	case FUZZ_HEAD:
		rc = cold_head(fuzz_cold, "b/k", &len);
		break;
	case FUZZ_GET:
		rc = cold_get(fuzz_cold, "b/k", fuzz_sink, &got, &len);
		break;
	case FUZZ_PUT:
		rc = cold_put(fuzz_cold, "b/k", FUZZ_PUT_SIZE, "application/octet-stream",
			      fuzz_source, NULL, &info);
		break;
	case FUZZ_DEL:
		rc = cold_del(fuzz_cold, "b/k");
		break;
	default:
		rc = cold_cleanup(fuzz_cold);
		break;
	}
	fuzz_require(fuzz_rc_ok(rc), "only the errors of cold.h");
	fuzz_require(op != FUZZ_PUT || rc != -ENOENT, "a put's 404 is a failure, no missing key");
	fuzz_requests();
	if (op == FUZZ_GET)
		fuzz_require(rc != 0 || got == len, "a get delivers the size it reports");
put_checks:
	if ((op == FUZZ_PUT || op == FUZZ_PUT_IF || op == FUZZ_PUT_ABSENT ||
	     op == FUZZ_PUT_IF_MPU) && rc == 0) {
		size_t n = strlen(info.etag);

		fuzz_require(n >= 2 && info.etag[0] == '"' && info.etag[n - 1] == '"',
			     "a stored object's ETag is quoted");
		fuzz_put_md5(md5);
		/* A multipart upload's ETag may also be the MD5 of its parts'
		 * MD5s "-N", which this does not compute: -3 is all it checks. */
		fuzz_require(!info.verified || (n == 34 && !strncmp(info.etag + 1, md5, 32)) ||
			     (op == FUZZ_PUT_IF_MPU && n == 36 && !strcmp(info.etag + 33, "-3\"")),
			     "verified only when the partner named the MD5 sent");
	}
out:
	if (getenv("FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz_g4_s3: op %d: %d (%s), %u requests\n", (int)op, rc,
			strerror(-rc), fuzz_requests());
	fuzz_answers(NULL, 0, NULL);
	return 0;
}
