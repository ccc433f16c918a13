/*
 * bench_trace_io.c - `kvtier bench trace`: one request of the trace, replayed
 * through the S3 gateway or the FUSE mount, the way an inference engine
 * would before prefill:
 *
 *   lookup  the longest stored prefix of the request's blocks, and the tier
 *           of each (S3: POST /BUCKET?kvtier-lookup, one round trip; FUSE:
 *           stat of each block file until one is missing, as a POSIX
 *           client finds its prefix; then, outside the timed lookup, the
 *           user.kvtier.tier xattr of the prefix, which only this bench's
 *           hot/recall accounting needs)
 *   read    every block of that prefix; a cold one is recalled from G4 by
 *           the read itself (the gateway's GET, the mount's open)
 *   write   every block after the prefix (the engine recomputed them), with
 *           the request's conversation as the session
 *           (x-amz-meta-kvtier-session, or the user.kvtier.session xattr set
 *           on the new file before it is closed)
 *
 * Keys are content-addressed, "blk-<hash id>", so conversations that share
 * a prefix share its blocks. A block's bytes are a function of its id (and
 * the block size), so every read is checked byte for byte: a wrong byte is
 * counted and reported, never ignored.
 *
 * The S3 client is libcurl with its own SigV4 signer (CURLOPT_AWS_SIGV4),
 * one easy handle per worker, so its connection stays open between requests.
 * curl 7.88 signs the payload hash but does not send x-amz-content-sha256,
 * which S3 requires; every request therefore says UNSIGNED-PAYLOAD, as SDKs
 * do on loopback when told to skip payload signing.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "bench_trace.h"

#define BT_ERR_SHOWN 10		/* error lines printed per configuration */

const char *const bt_lat_names[BT_NLATS] = { "lookup", "read_hot", "read_recall", "write",
					      "lookup_from_due" };
const char *const bt_face_names[BT_NFACES] = { "s3", "fuse" };

enum bt_tier { TIER_MISSING, TIER_HOT, TIER_COLD };

static void bt_count(uint64_t *c, uint64_t n)
{
	__atomic_add_fetch(c, n, __ATOMIC_RELAXED);
}

static void bt_error(struct bt_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bt_error(struct bt_run *r, const char *fmt, ...)
{
	uint64_t n = __atomic_add_fetch(&r->c.errors, 1, __ATOMIC_RELAXED);
	char line[512];
	va_list ap;

	if (n > BT_ERR_SHOWN)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%skvtier: bench trace: %s: %s%s\n", r->b->tty ? "\r\033[K" : "",
		bt_cfg_names[r->cfg], line, n == BT_ERR_SHOWN ? " (further errors only counted)" : "");
}

void bt_series_add(struct bt_series *s, double v)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 1024;
		float *nv = realloc(s->v, cap * sizeof(*nv));

		if (!nv)
			return;	/* a latency fewer; the counters still hold */
		s->v = nv;
		s->cap = cap;
	}
	s->v[s->n++] = (float)v;
}

/* splitmix64: a block's bytes from its id, cheap and the same everywhere. */
void bt_block_fill(uint64_t id, unsigned char *buf, uint64_t size)
{
	uint64_t x = id * 0x9e3779b97f4a7c15ull ^ size;
	uint64_t i;

	for (i = 0; i + 8 <= size; i += 8) {
		uint64_t z = (x += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(buf + i, &z, 8);
	}
	for (; i < size; i++)
		buf[i] = (unsigned char)(id >> (8 * (i % 8)));
}

/* ---- the S3 client ------------------------------------------------------------ */

static size_t bt_curl_take(char *data, size_t size, size_t n, void *arg)
{
	struct bt_client *cl = arg;
	size_t len = size * n;

	if (cl->resp_len + len + 1 > cl->resp_cap) {
		size_t cap = 2 * (cl->resp_len + len + 1);
		char *p = realloc(cl->resp, cap);

		if (!p)
			return 0;	/* curl fails the transfer */
		cl->resp = p;
		cl->resp_cap = cap;
	}
	memcpy(cl->resp + cl->resp_len, data, len);
	cl->resp_len += len;
	cl->resp[cl->resp_len] = '\0';
	return len;
}

int bt_client_init(struct bt_client *cl, const struct bt *b)
{
	struct curl_slist *l = NULL;

	memset(cl, 0, sizeof(*cl));
	cl->resp_cap = b->o.block_size + 65536;
	if (!(cl->resp = malloc(cl->resp_cap)) || !(cl->expect = malloc(b->o.block_size)))
		return -ENOMEM;
	if (b->o.via == BT_VIA_FUSE)
		return 0;
	if (!(cl->curl = curl_easy_init()))
		return -ENOMEM;
	/* "Expect:" off: no 100-continue round trip before each body. */
	l = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	l = l ? curl_slist_append(l, "Expect:") : NULL;
	cl->hdrs_get = l;
	l = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	l = l ? curl_slist_append(l, "Expect:") : NULL;
	l = l ? curl_slist_append(l, "Content-Type: text/plain") : NULL;
	cl->hdrs_post = l;
	return cl->hdrs_get && cl->hdrs_post ? 0 : -ENOMEM;
}

void bt_client_release(struct bt_client *cl)
{
	if (cl->curl)
		curl_easy_cleanup(cl->curl);
	curl_slist_free_all(cl->hdrs_get);
	curl_slist_free_all(cl->hdrs_post);
	free(cl->resp);
	free(cl->expect);
	for (int f = 0; f < BT_NFACES; f++)
		for (int l = 0; l < BT_NLATS; l++)
			free(cl->lat[f][l].v);
	free(cl->lag.v);
	memset(cl, 0, sizeof(*cl));
}

/*
 * One signed request; the body (if any) from data. Returns the HTTP status,
 * or -EIO when the transfer failed (cl->errbuf says why).
 */
static long bt_s3(struct bt_run *r, struct bt_client *cl, const char *method, const char *path,
		  struct curl_slist *hdrs, const void *data, size_t len)
{
	CURL *c = cl->curl;
	char userpwd[128];
	long status = 0;
	CURLcode cc;

	snprintf(cl->url, sizeof(cl->url), "http://127.0.0.1:%d/%s", r->port, path);
	snprintf(userpwd, sizeof(userpwd), BT_ACCESS ":%s", r->b->secret);
	/* A reset keeps the handle's open connection: only the options go. */
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, cl->url);
	curl_easy_setopt(c, CURLOPT_AWS_SIGV4, "aws:amz:" BT_REGION ":s3");
	curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cl->errbuf);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bt_curl_take);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, cl);
	if (strcmp(method, "GET") != 0) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, data);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	cl->errbuf[0] = '\0';
	cl->resp_len = 0;
	if (cl->resp)
		cl->resp[0] = '\0';
	cc = curl_easy_perform(c);
	if (cc != CURLE_OK) {
		if (!cl->errbuf[0])
			snprintf(cl->errbuf, sizeof(cl->errbuf), "%s", curl_easy_strerror(cc));
		return -EIO;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	return status;
}

/*
 * The tier of every key, from a KvLookupResult (the gateway answers for all
 * keys, not only the prefix). Returns the length of the stored prefix.
 */
static long bt_parse_lookup(const char *xml, enum bt_tier *tiers, uint32_t n)
{
	const char *p = strstr(xml, "<Stored>");
	long stored;

	if (!p)
		return -EPROTO;
	stored = strtol(p + 8, NULL, 10);
	if (stored < 0 || stored > (long)n)
		return -EPROTO;
	p = strstr(p, "<Key>");
	for (uint32_t i = 0; i < n; i++) {
		if (!p || !(p = strstr(p, "<Tier>")))
			return -EPROTO;
		p += 6;
		if (strncmp(p, "hot<", 4) == 0 || strncmp(p, "demoting<", 9) == 0)
			tiers[i] = TIER_HOT;
		else if (strncmp(p, "missing<", 8) == 0)
			tiers[i] = TIER_MISSING;
		else
			tiers[i] = TIER_COLD;
	}
	return stored;
}

static long bt_s3_lookup(struct bt_run *r, struct bt_client *cl, const struct bt_req *q,
			 enum bt_tier *tiers)
{
	size_t cap = (size_t)q->nids * 24 + 1, len = 0;
	char *body = malloc(cap);
	long status, rc;

	if (!body)
		return -ENOMEM;
	for (uint32_t i = 0; i < q->nids; i++)
		len += (size_t)snprintf(body + len, cap - len, "blk-%" PRIu64 "\n", q->ids[i]);
	status = bt_s3(r, cl, "POST", BT_BUCKET "?kvtier-lookup", cl->hdrs_post, body, len);
	free(body);
	if (status != 200) {
		bt_error(r, "lookup: %s %ld %.200s", cl->url, status,
			 status < 0 ? cl->errbuf : cl->resp ? cl->resp : "");
		return -EIO;
	}
	rc = bt_parse_lookup(cl->resp, tiers, q->nids);
	if (rc < 0)
		bt_error(r, "lookup: cannot parse the answer: %.200s", cl->resp);
	return rc;
}

/* 0 with the bytes in cl->resp, -ENOENT if the object is gone, else -EIO. */
static int bt_s3_get(struct bt_run *r, struct bt_client *cl, uint64_t id)
{
	char path[64];
	long status;

	snprintf(path, sizeof(path), BT_BUCKET "/blk-%" PRIu64, id);
	status = bt_s3(r, cl, "GET", path, cl->hdrs_get, NULL, 0);
	if (status == 200)
		return 0;
	if (status == 404)
		return -ENOENT;
	bt_error(r, "GET %s: %ld %.200s", cl->url, status, status < 0 ? cl->errbuf : cl->resp);
	return -EIO;
}

static int bt_s3_put(struct bt_run *r, struct bt_client *cl, uint64_t id, uint32_t conv)
{
	struct curl_slist *h = NULL, *l;
	char path[64], session[64];
	long status;

	snprintf(path, sizeof(path), BT_BUCKET "/blk-%" PRIu64, id);
	snprintf(session, sizeof(session), "x-amz-meta-kvtier-session: conv-%" PRIu32, conv);
	h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (h && (l = curl_slist_append(h, "Expect:")))
		h = l;
	if (h && (l = curl_slist_append(h, "Content-Type: application/octet-stream")))
		h = l;
	if (h && (l = curl_slist_append(h, session)))
		h = l;
	if (!h)
		return -ENOMEM;
	status = bt_s3(r, cl, "PUT", path, h, cl->expect, r->b->o.block_size);
	curl_slist_free_all(h);
	if (status == 200)
		return 0;
	bt_error(r, "PUT %s: %ld %.200s", cl->url, status, status < 0 ? cl->errbuf : cl->resp);
	return -EIO;
}

const char *const bt_gw_op_names[BT_GW_NOPS] = { "KvLookup", "GetObject", "PutObject" };

/* One operation's histogram out of a /metrics text. */
static void bt_gw_hist_parse(const char *text, const char *op, struct bt_gw_hist *h)
{
	char bucket[128], sum[128];
	double le[32], sum_s = 0;
	uint64_t cum[32];
	size_t nb = 0, lb, ls;
	const char *p;

	lb = (size_t)snprintf(bucket, sizeof(bucket),
			      "kvtier_gateway_request_duration_seconds_bucket{op=\"%s\",le=\"", op);
	ls = (size_t)snprintf(sum, sizeof(sum), "kvtier_gateway_request_duration_seconds_sum"
			      "{op=\"%s\"} ", op);
	memset(h, 0, sizeof(*h));
	for (p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, bucket, lb) == 0 && nb < 32) {
			const char *v = p + lb, *q = strstr(v, "} ");

			le[nb] = strncmp(v, "+Inf", 4) == 0 ? INFINITY : strtod(v, NULL);
			cum[nb] = q ? strtoull(q + 2, NULL, 10) : 0;
			h->n = cum[nb++];
		} else if (strncmp(p, sum, ls) == 0) {
			sum_s = strtod(p + ls, NULL);
		}
	}
	h->mean = h->n ? sum_s * 1e3 / (double)h->n : 0;
	for (int k = 0; k < 2; k++) {
		const double q = k ? 0.99 : 0.50;

		for (size_t i = 0; i < nb && h->n; i++) {
			if ((double)cum[i] >= q * (double)h->n) {
				h->le[k] = le[i] * 1e3;
				break;
			}
		}
	}
}

/*
 * The gateway's histograms from its /metrics (unauthenticated on the S3
 * port when no metrics listener is configured, as here).
 */
int bt_gateway_scrape(struct bt_run *r)
{
	struct bt_client cl;
	CURL *c;
	int rc = -EIO;

	if (r->port <= 0)
		return 0;
	memset(&cl, 0, sizeof(cl));
	if (!(c = curl_easy_init()))
		return -ENOMEM;
	snprintf(cl.url, sizeof(cl.url), "http://127.0.0.1:%d/metrics", r->port);
	curl_easy_setopt(c, CURLOPT_URL, cl.url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bt_curl_take);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &cl);
	if (curl_easy_perform(c) == CURLE_OK && cl.resp) {
		for (int op = 0; op < BT_GW_NOPS; op++)
			bt_gw_hist_parse(cl.resp, bt_gw_op_names[op], &r->gw[op]);
		rc = 0;
	}
	curl_easy_cleanup(c);
	free(cl.resp);
	return rc;
}

/* ---- the FUSE mount -------------------------------------------------------------- */

static void bt_fuse_path(const struct bt_run *r, uint64_t id, char *out, size_t len)
{
	snprintf(out, len, "%s/" BT_BUCKET "/blk-%" PRIu64, r->mnt, id);
}

/*
 * stat of each block until one is missing: the lookup a POSIX client makes,
 * answered at *answered. Then the tier of each block of that prefix, for
 * the accounting; a block gone by then (dropped, or a file another request
 * is still writing, listed but not yet published) ends the prefix there.
 */
static long bt_fuse_lookup(struct bt_run *r, const struct bt_req *q, enum bt_tier *tiers,
			   double *answered)
{
	char path[4400], tier[32];
	struct stat sb;
	uint32_t i, n;

	for (n = 0; n < q->nids; n++) {
		bt_fuse_path(r, q->ids[n], path, sizeof(path));
		if (stat(path, &sb) < 0) {
			if (errno == ENOENT)
				break;
			bt_error(r, "stat '%s': %s", path, strerror(errno));
			return -EIO;
		}
	}
	*answered = bt_now();
	for (i = 0; i < n; i++) {
		ssize_t len;

		bt_fuse_path(r, q->ids[i], path, sizeof(path));
		len = getxattr(path, "user.kvtier.tier", tier, sizeof(tier) - 1);
		if (len < 0) {
			if (errno == ENOENT || errno == ENODATA)
				break;
			bt_error(r, "getxattr '%s' user.kvtier.tier: %s", path, strerror(errno));
			return -EIO;
		}
		tier[len] = '\0';
		tiers[i] = (strcmp(tier, "hot") == 0 || strcmp(tier, "demoting") == 0)
			   ? TIER_HOT : TIER_COLD;
	}
	return i;
}

/* Whether block id is there (published, or being written by another request). */
static int bt_fuse_exists(struct bt_run *r, uint64_t id)
{
	char path[4400];
	struct stat sb;

	bt_fuse_path(r, id, path, sizeof(path));
	return stat(path, &sb) == 0;
}

static int bt_fuse_get(struct bt_run *r, struct bt_client *cl, uint64_t id)
{
	char path[4400];
	int fd, rc = 0;

	bt_fuse_path(r, id, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return -ENOENT;
		bt_error(r, "open '%s': %s", path, strerror(errno));
		return -EIO;
	}
	cl->resp_len = 0;
	for (;;) {
		ssize_t n;

		if (cl->resp_len == cl->resp_cap) {
			rc = -EFBIG;	/* larger than a block: counted as wrong below */
			break;
		}
		n = read(fd, cl->resp + cl->resp_len, cl->resp_cap - cl->resp_len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			/* Dropped by reclaim after the open: a miss, as in S3's 404. */
			if (errno != ENOENT && errno != ESTALE)
				bt_error(r, "read '%s': %s", path, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		cl->resp_len += (size_t)n;
	}
	close(fd);
	if (rc == -ENOENT || rc == -ESTALE)
		return -ENOENT;
	return rc == -EFBIG ? 0 : rc < 0 ? -EIO : 0;
}

static int bt_fuse_put(struct bt_run *r, struct bt_client *cl, uint64_t id, uint32_t conv)
{
	char path[4400], session[32];
	const unsigned char *p = cl->expect;
	size_t left = r->b->o.block_size;
	int fd, rc = 0;

	bt_fuse_path(r, id, path, sizeof(path));
	snprintf(session, sizeof(session), "conv-%" PRIu32, conv);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		bt_error(r, "create '%s': %s", path, strerror(errno));
		return -EIO;
	}
	/*
	 * Set while the file is open, the session goes with the version close
	 * publishes. A failure is counted, and the bytes are written anyway:
	 * close publishes whatever the file holds, and an empty block would
	 * be counted again, as wrong bytes, by the next read of it.
	 */
	if (fsetxattr(fd, "user.kvtier.session", session, strlen(session), 0) < 0) {
		rc = -errno;
		bt_error(r, "setxattr '%s' user.kvtier.session: %s", path, strerror(errno));
	}
	while (left > 0) {
		ssize_t n = write(fd, p, left);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			bt_error(r, "write '%s': %s", path, strerror(errno));
			break;
		}
		p += n;
		left -= (size_t)n;
	}
	if (close(fd) < 0 && rc == 0) {
		rc = -errno;
		bt_error(r, "close '%s' (publish): %s", path, strerror(errno));
	}
	return rc < 0 ? -EIO : 0;
}

/* ---- one request --------------------------------------------------------------- */

/* Compares what was read of block id with its bytes; counts a mismatch. */
static void bt_verify(struct bt_run *r, struct bt_client *cl, uint64_t id)
{
	uint64_t size = r->b->o.block_size, wrong = 0;

	bt_block_fill(id, cl->expect, size);
	if (cl->resp_len == size && memcmp(cl->resp, cl->expect, size) == 0)
		return;
	for (uint64_t i = 0; i < size; i++)
		wrong += i >= cl->resp_len || (unsigned char)cl->resp[i] != cl->expect[i];
	if (cl->resp_len > size)
		wrong += cl->resp_len - size;
	bt_count(&r->c.wrong_blocks, 1);
	bt_count(&r->c.wrong_bytes, wrong);
	bt_error(r, "block %" PRIu64 ": %" PRIu64 " wrong bytes (read %zu of %" PRIu64 ")", id,
		 wrong, cl->resp_len, size);
}

void bt_replay_one(struct bt_run *r, struct bt_client *cl, size_t i)
{
	const struct bt_req *q = &r->b->t.reqs[i];
	const enum bt_face face = (enum bt_face)q->face;
	enum bt_tier *tiers = calloc(q->nids ? q->nids : 1, sizeof(*tiers));
	uint8_t *rewrite = calloc(q->nids ? q->nids : 1, 1);
	uint64_t hot = 0, recalled = 0, missed = 0, lost = 0, present = 0, written = 0;
	const double due = r->t0 + q->ts / r->b->o.speed;
	double t, answered = 0;
	long stored;

	if (!tiers || !rewrite) {
		bt_error(r, "request %zu: out of memory", i);
		goto out;
	}
	t = bt_now();
	if (face == BT_S3) {
		stored = bt_s3_lookup(r, cl, q, tiers);
		answered = bt_now();
	} else {
		stored = bt_fuse_lookup(r, q, tiers, &answered);
	}
	if (stored < 0)
		goto out;	/* counted as an error; the request is not replayed */
	bt_series_add(&cl->lat[face][BT_LOOKUP], (answered - t) * 1e6);
	bt_series_add(&cl->lat[face][BT_LOOKUP_DUE], (answered - due) * 1e6);

	for (long k = 0; k < stored; k++) {
		uint64_t id = q->ids[k];
		int rc;

		t = bt_now();
		rc = face == BT_S3 ? bt_s3_get(r, cl, id) : bt_fuse_get(r, cl, id);
		if (rc == -ENOENT) {
			/* Dropped between lookup and read: recomputed and written. */
			lost++;
			rewrite[k] = 1;
			continue;
		}
		if (rc < 0) {
			rewrite[k] = 1;
			continue;
		}
		bt_series_add(&cl->lat[face][tiers[k] == TIER_HOT ? BT_READ_HOT : BT_READ_RECALL],
			      (bt_now() - t) * 1e6);
		bt_count(&r->c.bytes_read, cl->resp_len);
		bt_verify(r, cl, id);
		if (tiers[k] == TIER_HOT)
			hot++;
		else
			recalled++;
	}
	for (uint32_t k = 0; k < q->nids; k++) {
		uint64_t id = q->ids[k];
		int rc;

		if ((long)k < stored && !rewrite[k])
			continue;
		missed++;
		/*
		 * Recomputed, but stored only if not there already, as a
		 * content-addressed cache client checks before a put: a block
		 * after a gap in the prefix may be stored (another conversation
		 * wrote it). The S3 lookup gave every key's tier; the mount is asked.
		 */
		if ((long)k >= stored &&
		    (face == BT_S3 ? tiers[k] != TIER_MISSING : bt_fuse_exists(r, id))) {
			present++;
			continue;
		}
		bt_block_fill(id, cl->expect, r->b->o.block_size);
		t = bt_now();
		rc = face == BT_S3 ? bt_s3_put(r, cl, id, q->conv) : bt_fuse_put(r, cl, id, q->conv);
		if (rc < 0)
			continue;
		bt_series_add(&cl->lat[face][BT_WRITE], (bt_now() - t) * 1e6);
		bt_count(&r->c.bytes_written, r->b->o.block_size);
		written++;
	}
	bt_count(&r->c.present, present);
	bt_count(&r->c.written, written);
	bt_count(&r->c.hot, hot);
	bt_count(&r->c.recalled, recalled);
	bt_count(&r->c.missed, missed);
	bt_count(&r->c.lost, lost);
	bt_count(&r->c.blocks, q->nids);
	bt_count(&r->c.requests, 1);
out:
	free(tiers);
	free(rewrite);
}
