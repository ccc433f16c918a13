/*
 * s3_auth.c - AWS Signature Version 4, as S3 speaks it.
 *
 * A request is signed over its canonical form (method, URI, query, the
 * headers named in SignedHeaders, and the payload's hash), with a key
 * derived from the user's secret, the day, the region and the service:
 *
 *   kDate = HMAC("AWS4" + secret, yyyymmdd); kRegion = HMAC(kDate, region)
 *   kService = HMAC(kRegion, "s3");          kSigning = HMAC(kService, "aws4_request")
 *   signature = hex(HMAC(kSigning, "AWS4-HMAC-SHA256\n" + amz-date + "\n" +
 *                         scope + "\n" + hex(SHA256(canonical request))))
 *
 * The signature comes in the Authorization header or, for presigned URLs,
 * in the query (X-Amz-Signature). Signatures are compared in constant time
 * (CRYPTO_memcmp): a byte-by-byte strcmp would tell an attacker how much of
 * a forged signature was right.
 *
 * The canonical URI is the path decoded once and encoded again with SigV4's
 * rules (every byte but A-Z a-z 0-9 - _ . ~ and '/' as %XX), which is what
 * the SDKs sign. A client that encodes differently but signed the path
 * exactly as it sent it is accepted too: the raw path is tried second.
 * S3 does not normalise the path ("a//b" stays), and neither do we.
 *
 * Bodies: x-amz-content-sha256 is either the hex SHA-256 of the body
 * (checked by the caller once the body is in), UNSIGNED-PAYLOAD, or one of
 * the aws-chunked modes, where each chunk carries a signature chained to the
 * previous one, starting from the request's ("seed") signature:
 *
 *   chunk sig = HMAC(kSigning, "AWS4-HMAC-SHA256-PAYLOAD\n" + amz-date +
 *                    "\n" + scope + "\n" + previous sig + "\n" +
 *                    hex(SHA256("")) + "\n" + hex(SHA256(chunk data)))
 *
 * The decoder (chunk_*) is a state machine fed with whatever piece of the
 * body arrives; a chunk's bytes go on to the sink before its signature is
 * checked, which is safe because the sink is an uncommitted writer: one bad
 * signature fails the request and nothing becomes visible.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier.h"
#include "s3_auth.h"

#define AUTH_ALGO "AWS4-HMAC-SHA256"
#define AUTH_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---- users -------------------------------------------------------------- */

static void auth_user_clear(struct auth_user *u)
{
	free(u->access);
	if (u->secret) {
		OPENSSL_cleanse(u->secret, strlen(u->secret));
		free(u->secret);
	}
	for (size_t j = 0; j < u->nbuckets; j++)
		free(u->buckets[j]);
	free(u->buckets);
	memset(u, 0, sizeof(*u));
}

void auth_creds_release(struct auth_creds *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nusers; i++)
		auth_user_clear(&c->users[i]);
	free(c->users);
	c->users = NULL;
	c->nusers = 0;
}

static int auth_add_word(struct auth_user *u, int field, const char *w, size_t len)
{
	char *s = strndup(w, len);
	char **v;

	if (!s)
		return -ENOMEM;
	if (field == 0) {
		u->access = s;
	} else if (field == 1) {
		u->secret = s;
	} else {
		v = realloc(u->buckets, (u->nbuckets + 1) * sizeof(*v));
		if (!v) {
			free(s);
			return -ENOMEM;
		}
		u->buckets = v;
		u->buckets[u->nbuckets++] = s;
	}
	return 0;
}

int auth_creds_parse(struct auth_creds *c, const char *text, const char *name, char *err,
		     size_t errlen)
{
	const char *p = text;
	int lineno = 0, rc = 0;

	memset(c, 0, sizeof(*c));
	while (*p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		const char *q = p, *end = p + len;
		struct auth_user u = { 0 };
		int field = 0;

		lineno++;
		while (q < end) {
			const char *w;

			while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
				q++;
			if (q == end || *q == '#')
				break;
			w = q;
			while (q < end && *q != ' ' && *q != '\t' && *q != '\r')
				q++;
			rc = auth_add_word(&u, field, w, (size_t)(q - w));
			if (rc < 0)
				goto bad_user;
			if (field >= 2 && !kvt_bucket_name_valid(u.buckets[u.nbuckets - 1])) {
				snprintf(err, errlen, "%s:%d: '%s' is not a bucket name", name,
					 lineno, u.buckets[u.nbuckets - 1]);
				rc = -EINVAL;
				goto bad_user;
			}
			field++;
		}
		if (field == 1) {
			snprintf(err, errlen, "%s:%d: expected ACCESS_KEY SECRET_KEY [BUCKET ...]",
				 name, lineno);
			rc = -EINVAL;
			goto bad_user;
		}
		if (field >= 2) {
			struct auth_user *v;

			if (auth_creds_find(c, u.access)) {
				snprintf(err, errlen, "%s:%d: access key '%s' given twice", name,
					 lineno, u.access);
				rc = -EINVAL;
				goto bad_user;
			}
			v = realloc(c->users, (c->nusers + 1) * sizeof(*v));
			if (!v) {
				rc = -ENOMEM;
				goto bad_user;
			}
			c->users = v;
			c->users[c->nusers++] = u;
		}
		p = eol ? eol + 1 : end;
		continue;
bad_user:
		auth_user_clear(&u);
		if (rc == -ENOMEM)
			snprintf(err, errlen, "%s: out of memory", name);
		auth_creds_release(c);
		return rc;
	}
	if (c->nusers == 0) {
		snprintf(err, errlen, "%s: no users (one a line: ACCESS_KEY SECRET_KEY [BUCKET ...])",
			 name);
		return -EINVAL;
	}
	return 0;
}

int auth_creds_load(struct auth_creds *c, const char *path, char *err, size_t errlen)
{
	struct stat st;
	struct gw_buf b;
	char chunk[4096];
	int fd, rc = 0;
	ssize_t n;

	memset(c, 0, sizeof(*c));
	gw_buf_init(&b);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(err, errlen, "%s: not a regular file", path);
		goto out;
	}
	/* Secrets: like ssh with a private key, refuse what others could read. */
	if (st.st_mode & 077) {
		rc = -EPERM;
		snprintf(err, errlen, "%s: holds secret keys but its mode is %04o: it must not be "
			 "accessible by group or others (chmod 600 '%s')", path,
			 (unsigned)(st.st_mode & 07777), path);
		goto out;
	}
	if (st.st_uid != geteuid()) {
		rc = -EPERM;
		snprintf(err, errlen, "%s: holds secret keys but belongs to uid %u, not to us (%u)",
			 path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto out;
	}
	while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
		if (b.len + (size_t)n > (1u << 20)) {
			rc = -EFBIG;
			snprintf(err, errlen, "%s: larger than 1 MiB", path);
			goto out;
		}
		gw_buf_append(&b, chunk, (size_t)n);
	}
	if (n < 0 || gw_buf_failed(&b)) {
		rc = n < 0 ? -errno : -ENOMEM;
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(-rc));
		goto out;
	}
	if (memchr(gw_buf_str(&b), '\0', b.len)) {
		rc = -EINVAL;
		snprintf(err, errlen, "%s: holds a NUL byte", path);
		goto out;
	}
	rc = auth_creds_parse(c, gw_buf_str(&b), path, err, errlen);
out:
	if (b.data)
		OPENSSL_cleanse(b.data, b.len);
	gw_buf_release(&b);
	if (fd >= 0)
		close(fd);
	return rc;
}

const struct auth_user *auth_creds_find(const struct auth_creds *c, const char *access)
{
	for (size_t i = 0; i < c->nusers; i++)
		if (strcmp(c->users[i].access, access) == 0)
			return &c->users[i];
	return NULL;
}

bool auth_user_may(const struct auth_user *u, const char *bucket)
{
	/*
	 * ".name" is an internal bucket (kvt_bucket_create_internal: the
	 * gateway's .uploads holds every bucket's multipart parts and
	 * manifests): no user's, not even one allowed every bucket.
	 */
	if (bucket && bucket[0] == '.')
		return false;
	if (!bucket || u->nbuckets == 0)
		return true;
	for (size_t i = 0; i < u->nbuckets; i++)
		if (strcmp(u->buckets[i], bucket) == 0)
			return true;
	return false;
}

/* ---- canonical request -------------------------------------------------- */

const char *auth_hdr_get(const struct auth_hdr *hdrs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(hdrs[i].name, name) == 0)
			return hdrs[i].value;
	return NULL;
}

int auth_canonical_uri(struct gw_buf *out, const char *raw_path)
{
	size_t len;
	char *dec = gw_url_decode(raw_path, strlen(raw_path), false, &len);
	int rc;

	if (!dec)
		return -EINVAL;
	if (len == 0)
		rc = gw_buf_putc(out, '/');
	else
		rc = gw_url_encode(out, dec, len, true);
	free(dec);
	return rc;
}

struct auth_qp {
	char *name;	/* encoded */
	char *value;	/* encoded */
	bool bare;	/* "?acl": no '=' on the wire */
};

static int auth_qp_cmp(const void *a, const void *b)
{
	const struct auth_qp *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

/* Decoded once and encoded the SigV4 way: "a b" and "a%20b" sign alike. */
static char *auth_reencode(const char *s, size_t len)
{
	struct gw_buf b;
	size_t dlen;
	char *dec = gw_url_decode(s, len, false, &dlen);

	if (!dec)
		return NULL;
	gw_buf_init(&b);
	gw_url_encode(&b, dec, dlen, false);
	free(dec);
	if (gw_buf_failed(&b)) {
		gw_buf_release(&b);
		return NULL;
	}
	return gw_buf_detach(&b, NULL);
}

/*
 * bare_ok: a parameter sent without '=' ("?acl") is written "acl", not SigV4's
 * "acl=": what curl up to 8.x signs. Only ever a second attempt.
 */
static int auth_canonical_query(struct gw_buf *out, const char *raw_query, bool presigned,
				bool bare_ok, bool *any_bare)
{
	struct auth_qp *qp = NULL;
	size_t n = 0, cap = 0;
	const char *p = raw_query;
	int rc = 0;

	while (*p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		size_t nlen = eq ? (size_t)(eq - p) : len;

		if (len > 0) {
			if (n == cap) {
				struct auth_qp *v;

				cap = cap ? cap * 2 : 8;
				v = realloc(qp, cap * sizeof(*qp));
				if (!v) {
					rc = -ENOMEM;
					goto out;
				}
				qp = v;
			}
			qp[n].name = auth_reencode(p, nlen);
			qp[n].value = eq ? auth_reencode(eq + 1, len - nlen - 1) : strdup("");
			qp[n].bare = !eq;
			if (!eq && any_bare)
				*any_bare = true;
			if (!qp[n].name || !qp[n].value) {
				free(qp[n].name);
				free(qp[n].value);
				rc = -EINVAL;
				goto out;
			}
			if (presigned && strcmp(qp[n].name, "X-Amz-Signature") == 0) {
				free(qp[n].name);
				free(qp[n].value);
			} else {
				n++;
			}
		}
		p += len;
		if (*p == '&')
			p++;
	}
	if (n > 1)
		qsort(qp, n, sizeof(*qp), auth_qp_cmp);
	for (size_t i = 0; i < n; i++) {
		if (bare_ok && qp[i].bare)
			gw_buf_printf(out, "%s%s", i ? "&" : "", qp[i].name);
		else
			gw_buf_printf(out, "%s%s=%s", i ? "&" : "", qp[i].name, qp[i].value);
	}
	rc = gw_buf_failed(out) ? -ENOMEM : 0;
out:
	for (size_t i = 0; i < n; i++) {
		free(qp[i].name);
		free(qp[i].value);
	}
	free(qp);
	return rc;
}

/* A header value as SigV4 wants it: trimmed, runs of blanks made one space. */
static void auth_put_value(struct gw_buf *out, const char *v)
{
	bool space = false, started = false;

	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = started;
			continue;
		}
		if (space)
			gw_buf_putc(out, ' ');
		space = false;
		started = true;
		gw_buf_putc(out, *v);
	}
}

static int auth_canonical_request2(struct gw_buf *out, const char *method, const char *canon_uri,
				   const char *raw_query, bool presigned, bool bare_ok,
				   bool *any_bare, const struct auth_hdr *hdrs, size_t nhdrs,
				   const char *signed_headers, const char *payload_hash)
{
	const char *p = signed_headers;
	int rc;

	gw_buf_printf(out, "%s\n%s\n", method, canon_uri);
	rc = auth_canonical_query(out, raw_query, presigned, bare_ok, any_bare);
	if (rc < 0)
		return rc;
	gw_buf_putc(out, '\n');
	while (*p) {
		const char *semi = strchr(p, ';');
		size_t len = semi ? (size_t)(semi - p) : strlen(p);
		bool first = true;

		if (len == 0)
			return -EINVAL;
		for (size_t i = 0; i < len; i++)
			gw_buf_putc(out, (char)tolower((unsigned char)p[i]));
		gw_buf_putc(out, ':');
		for (size_t i = 0; i < nhdrs; i++) {
			if (strlen(hdrs[i].name) != len || strncasecmp(hdrs[i].name, p, len) != 0)
				continue;
			if (!first)
				gw_buf_putc(out, ',');
			auth_put_value(out, hdrs[i].value);
			first = false;
		}
		gw_buf_putc(out, '\n');
		p += len;
		if (*p == ';')
			p++;
	}
	gw_buf_printf(out, "\n%s\n%s", signed_headers, payload_hash);
	return gw_buf_failed(out) ? -ENOMEM : 0;
}

int auth_canonical_request(struct gw_buf *out, const char *method, const char *canon_uri,
			   const char *raw_query, bool presigned, const struct auth_hdr *hdrs,
			   size_t nhdrs, const char *signed_headers, const char *payload_hash)
{
	return auth_canonical_request2(out, method, canon_uri, raw_query, presigned, false, NULL,
				       hdrs, nhdrs, signed_headers, payload_hash);
}

/* ---- parsing the credential and the Authorization header ---------------- */

static int auth_copy(char *dst, size_t dlen, const char *s, size_t len)
{
	if (len == 0 || len >= dlen || memchr(s, '\0', len))
		return -EINVAL;
	memcpy(dst, s, len);
	dst[len] = '\0';
	return 0;
}

int auth_parse_credential(const char *cred, struct auth_authz *a)
{
	const char *f[5];
	size_t l[5];
	const char *p = cred;

	for (int i = 0; i < 5; i++) {
		const char *slash = strchr(p, '/');

		if ((i < 4) != (slash != NULL))
			return -EINVAL;
		f[i] = p;
		l[i] = slash ? (size_t)(slash - p) : strlen(p);
		p += l[i] + (slash ? 1 : 0);
	}
	if (auth_copy(a->access, sizeof(a->access), f[0], l[0]) < 0 ||
	    auth_copy(a->date, sizeof(a->date), f[1], l[1]) < 0 || l[1] != 8 ||
	    auth_copy(a->region, sizeof(a->region), f[2], l[2]) < 0 ||
	    auth_copy(a->service, sizeof(a->service), f[3], l[3]) < 0 ||
	    l[4] != strlen("aws4_request") || strncmp(f[4], "aws4_request", l[4]) != 0)
		return -EINVAL;
	for (int i = 0; i < 8; i++)
		if (!isdigit((unsigned char)a->date[i]))
			return -EINVAL;
	return 0;
}

static bool auth_is_hex64(const char *s)
{
	if (strlen(s) != 64)
		return false;
	for (int i = 0; i < 64; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

int auth_parse_authorization(const char *value, struct auth_authz *out)
{
	const char *p;
	bool cred = false, sh = false, sig = false;

	memset(out, 0, sizeof(*out));
	if (strncmp(value, AUTH_ALGO " ", strlen(AUTH_ALGO) + 1) != 0)
		return -EINVAL;
	p = value + strlen(AUTH_ALGO) + 1;
	while (*p) {
		const char *end, *eq;
		size_t len;

		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		end = strchr(p, ',');
		len = end ? (size_t)(end - p) : strlen(p);
		while (len > 0 && p[len - 1] == ' ')
			len--;
		eq = memchr(p, '=', len);
		if (!eq)
			return -EINVAL;
		if ((size_t)(eq - p) == 10 && strncmp(p, "Credential", 10) == 0) {
			char c[512];

			if (auth_copy(c, sizeof(c), eq + 1, len - 11) < 0 ||
			    auth_parse_credential(c, out) < 0)
				return -EINVAL;
			cred = true;
		} else if ((size_t)(eq - p) == 13 && strncmp(p, "SignedHeaders", 13) == 0) {
			if (auth_copy(out->signed_headers, sizeof(out->signed_headers), eq + 1,
				      len - 14) < 0)
				return -EINVAL;
			sh = true;
		} else if ((size_t)(eq - p) == 9 && strncmp(p, "Signature", 9) == 0) {
			if (auth_copy(out->signature, sizeof(out->signature), eq + 1, len - 10) < 0 ||
			    !auth_is_hex64(out->signature))
				return -EINVAL;
			sig = true;
		} else {
			return -EINVAL;
		}
		p += end ? (size_t)(end - p) : strlen(p);
	}
	return cred && sh && sig ? 0 : -EINVAL;
}

/* ---- verification ------------------------------------------------------- */

/*
 * The derived key changes once a day per user, region and service: each
 * thread keeps the last one (four HMACs saved on nearly every request).
 * A user is known by the address of its secret: credential sets replaced by
 * SIGHUP stay allocated (gw.h), so an address is never reused for another.
 */
struct auth_key_cache {
	const char *user;		/* the secret's address, never its bytes */
	char date[9], region[64], service[16];
	uint8_t key[32];
};

static __thread struct auth_key_cache auth_cache;

static void auth_signing_key(uint8_t key[32], const char *secret, const char *date,
			     const char *region, const char *service)
{
	struct auth_key_cache *c = &auth_cache;
	char k0[300];
	uint8_t a[32], b[32];
	int n;

	if (c->user == secret) {
		if (strcmp(c->date, date) == 0 && strcmp(c->region, region) == 0 &&
		    strcmp(c->service, service) == 0) {
			memcpy(key, c->key, 32);
			return;
		}
	}
	n = snprintf(k0, sizeof(k0), "AWS4%s", secret);
	gw_hmac_sha256(a, k0, (size_t)n, date, strlen(date));
	gw_hmac_sha256(b, a, 32, region, strlen(region));
	gw_hmac_sha256(a, b, 32, service, strlen(service));
	gw_hmac_sha256(key, a, 32, "aws4_request", strlen("aws4_request"));
	OPENSSL_cleanse(k0, sizeof(k0));
	if (strlen(date) < sizeof(c->date) && strlen(region) < sizeof(c->region) &&
	    strlen(service) < sizeof(c->service)) {
		c->user = secret;
		snprintf(c->date, sizeof(c->date), "%s", date);
		snprintf(c->region, sizeof(c->region), "%s", region);
		snprintf(c->service, sizeof(c->service), "%s", service);
		memcpy(c->key, key, 32);
	} else {
		c->user = NULL;
	}
}

static void auth_sign(char out[65], const uint8_t key[32], const char *sts)
{
	uint8_t mac[32];

	gw_hmac_sha256(mac, key, 32, sts, strlen(sts));
	gw_hex(out, mac, 32);
}

/* Signature over the canonical request creq; 0 or -ENOMEM. */
static int auth_signature(char out[65], const struct auth_result *res, const char *creq)
{
	struct gw_buf sts;
	char h[65];

	gw_sha256_hex(h, creq, strlen(creq));
	gw_buf_init(&sts);
	gw_buf_printf(&sts, AUTH_ALGO "\n%s\n%s\n%s", res->amz_date, res->scope, h);
	if (gw_buf_failed(&sts)) {
		gw_buf_release(&sts);
		return -ENOMEM;
	}
	auth_sign(out, res->key, gw_buf_str(&sts));
	gw_buf_release(&sts);
	return 0;
}

/* The query parameter name of raw_query, decoded; NULL if absent. Caller frees. */
static char *auth_query_get(const char *raw_query, const char *name)
{
	const char *p = raw_query;
	size_t nl = strlen(name);

	while (*p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);

		if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=')
			return gw_url_decode(p + nl + 1, len - nl - 1, false, NULL);
		p += len;
		if (*p == '&')
			p++;
	}
	return NULL;
}

static enum s3_code auth_fail(struct auth_result *out, enum s3_code code, const char *msg)
{
	snprintf(out->msg, sizeof(out->msg), "%s", msg);
	return code;
}

/* Whether name is one of the ';'-separated names of signed_headers. */
static bool auth_is_signed(const char *signed_headers, const char *name)
{
	const char *p = signed_headers;
	size_t nlen = strlen(name);

	while (*p) {
		const char *semi = strchr(p, ';');
		size_t len = semi ? (size_t)(semi - p) : strlen(p);

		if (len == nlen && strncasecmp(p, name, len) == 0)
			return true;
		p += len + (semi ? 1 : 0);
	}
	return false;
}

/*
 * An x-amz-* or x-kvtier-* header the signature does not cover could be
 * added by anyone holding a presigned URL (or on the path): it would turn a
 * PutObject into a CopyObject (x-amz-copy-source), pin the object, set its
 * metadata. S3 refuses such requests; so do we. x-amz-date and
 * x-amz-content-sha256 are bound by the string to sign all the same.
 * Returns the first such header's name, or NULL.
 */
static const char *auth_unsigned_header(const struct auth_input *in, const char *signed_headers)
{
	for (size_t i = 0; i < in->nhdrs; i++) {
		const char *n = in->hdrs[i].name;

		if (strncasecmp(n, "x-amz-", 6) != 0 && strncasecmp(n, "x-kvtier-", 9) != 0)
			continue;
		if (strcasecmp(n, "x-amz-date") == 0 || strcasecmp(n, "x-amz-content-sha256") == 0)
			continue;
		if (!auth_is_signed(signed_headers, n))
			return n;
	}
	return NULL;
}

/*
 * SigV4 takes the request's time from x-amz-date, else from Date (RFC 9110's
 * format), which the string to sign carries as yyyymmddThhmmssZ.
 */
static bool auth_date_from_http(const char *value, char out[17])
{
	time_t t = value ? gw_time_parse_http(value) : -1;
	struct tm tm;

	return t >= 0 && gmtime_r(&t, &tm) && strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm) == 16;
}

enum s3_code auth_verify(const struct auth_input *in, struct auth_result *out)
{
	const char *authz = auth_hdr_get(in->hdrs, in->nhdrs, "authorization");
	char *q_algo = NULL, *q_cred = NULL, *q_date = NULL, *q_exp = NULL, *q_sh = NULL,
	     *q_sig = NULL, *q_sha = NULL;
	const char *payload_hash, *date;
	char http_date[17];	/* a Date header's time as yyyymmddThhmmssZ */
	struct auth_authz a;
	struct gw_buf creq, uri;
	char sig[65];
	enum s3_code code = S3_OK;
	time_t t;

	memset(out, 0, sizeof(*out));
	gw_buf_init(&creq);
	gw_buf_init(&uri);
	if (authz) {
		if (strncmp(authz, "AWS ", 4) == 0) {
			code = auth_fail(out, S3_INVALID_REQUEST,
					 "Signature Version 2 is not supported: use AWS4-HMAC-SHA256");
			goto out;
		}
		if (auth_parse_authorization(authz, &a) < 0) {
			code = auth_fail(out, S3_AUTH_HEADER_MALFORMED,
					 "The authorization header is malformed.");
			goto out;
		}
		date = auth_hdr_get(in->hdrs, in->nhdrs, "x-amz-date");
		if (!date && !auth_date_from_http(auth_hdr_get(in->hdrs, in->nhdrs, "date"),
						  http_date)) {
			code = auth_fail(out, S3_ACCESS_DENIED,
					 "AWS authentication requires a valid Date or x-amz-date header");
			goto out;
		}
		if (!date)
			date = http_date;
		payload_hash = auth_hdr_get(in->hdrs, in->nhdrs, "x-amz-content-sha256");
		/*
		 * S3 requires the header. Without it the signature can only have
		 * covered an empty body (what curl --aws-sigv4 signs for -T), so
		 * that is what the body is checked against.
		 */
		if (!payload_hash) {
			payload_hash = AUTH_EMPTY_SHA256;
			out->implied_empty = true;
		}
	} else {
		q_algo = auth_query_get(in->raw_query, "X-Amz-Algorithm");
		if (!q_algo && (q_cred = auth_query_get(in->raw_query, "AWSAccessKeyId"))) {
			code = auth_fail(out, S3_INVALID_REQUEST,
					 "Signature Version 2 presigned URLs are not supported: "
					 "presign with AWS4-HMAC-SHA256 (s3v4)");
			goto out;
		}
		if (!q_algo) {
			code = auth_fail(out, S3_ACCESS_DENIED,
					 "Anonymous access is not allowed: sign the request (SigV4)");
			goto out;
		}
		q_cred = auth_query_get(in->raw_query, "X-Amz-Credential");
		q_date = auth_query_get(in->raw_query, "X-Amz-Date");
		q_exp = auth_query_get(in->raw_query, "X-Amz-Expires");
		q_sh = auth_query_get(in->raw_query, "X-Amz-SignedHeaders");
		q_sig = auth_query_get(in->raw_query, "X-Amz-Signature");
		q_sha = auth_query_get(in->raw_query, "X-Amz-Content-Sha256");
		memset(&a, 0, sizeof(a));
		if (strcmp(q_algo, AUTH_ALGO) != 0 || !q_cred || !q_date || !q_exp || !q_sh ||
		    !q_sig || auth_parse_credential(q_cred, &a) < 0 ||
		    auth_copy(a.signed_headers, sizeof(a.signed_headers), q_sh, strlen(q_sh)) < 0 ||
		    auth_copy(a.signature, sizeof(a.signature), q_sig, strlen(q_sig)) < 0 ||
		    !auth_is_hex64(a.signature)) {
			code = auth_fail(out, S3_AUTH_HEADER_MALFORMED,
					 "The presigned query (X-Amz-*) is incomplete or malformed.");
			goto out;
		}
		date = q_date;
		payload_hash = q_sha ? q_sha : "UNSIGNED-PAYLOAD";
		out->presigned = true;
	}

	/* The time: inside the skew, and for a URL not expired. */
	t = gw_time_parse_amz(date);
	if (t < 0 || strncmp(date, a.date, 8) != 0) {
		code = auth_fail(out, S3_AUTH_HEADER_MALFORMED,
				 "X-Amz-Date is not yyyymmddThhmmssZ or not the credential's day.");
		goto out;
	}
	if (out->presigned) {
		char *end;
		long exp = strtol(q_exp, &end, 10);

		if (*end || end == q_exp || exp < 1 || exp > AUTH_PRESIGN_MAX_EXPIRES) {
			code = auth_fail(out, S3_AUTH_HEADER_MALFORMED,
					 "X-Amz-Expires must be from 1 to 604800 seconds.");
			goto out;
		}
		if (t - in->now > AUTH_SKEW_SECONDS) {
			code = auth_fail(out, S3_REQUEST_TIME_TOO_SKEWED,
					 "The presigned URL is not valid yet.");
			goto out;
		}
		if (in->now > t + exp) {
			code = auth_fail(out, S3_EXPIRED_PRESIGNED, "Request has expired");
			goto out;
		}
	} else if (t - in->now > AUTH_SKEW_SECONDS || in->now - t > AUTH_SKEW_SECONDS) {
		code = auth_fail(out, S3_REQUEST_TIME_TOO_SKEWED,
				 "The difference between the request time and the current time is "
				 "too large.");
		goto out;
	}
	if (in->region && strcmp(a.region, in->region) != 0) {
		char msg[256];

		snprintf(msg, sizeof(msg), "The authorization header is malformed; the region '%.64s' "
			 "is wrong; expecting '%.64s'", a.region, in->region);
		code = auth_fail(out, S3_AUTH_HEADER_MALFORMED, msg);
		goto out;
	}
	if (strcmp(a.service, "s3") != 0) {
		code = auth_fail(out, S3_AUTH_HEADER_MALFORMED, "The credential's service is not s3.");
		goto out;
	}

	/* What the body is. */
	if (strcmp(payload_hash, "UNSIGNED-PAYLOAD") == 0) {
		out->payload = AUTH_PAYLOAD_UNSIGNED;
	} else if (strcmp(payload_hash, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD") == 0) {
		out->payload = AUTH_PAYLOAD_STREAMING;
	} else if (strcmp(payload_hash, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER") == 0) {
		out->payload = AUTH_PAYLOAD_STREAMING_TRAILER;
	} else if (strcmp(payload_hash, "STREAMING-UNSIGNED-PAYLOAD-TRAILER") == 0) {
		out->payload = AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER;
	} else if (auth_is_hex64(payload_hash)) {
		out->payload = AUTH_PAYLOAD_SHA256;
		memcpy(out->payload_sha256, payload_hash, 65);
	} else {
		code = auth_fail(out, S3_INVALID_ARGUMENT,
				 "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-* or a "
				 "SHA-256 in lower-case hex");
		goto out;
	}
	if (out->presigned && out->payload >= AUTH_PAYLOAD_STREAMING) {
		code = auth_fail(out, S3_INVALID_REQUEST, "A presigned URL cannot stream aws-chunked.");
		goto out;
	}

	/* Host must be signed: otherwise a request could be replayed elsewhere. */
	{
		const char *p = a.signed_headers;
		bool host = false;

		while (*p) {
			const char *semi = strchr(p, ';');
			size_t len = semi ? (size_t)(semi - p) : strlen(p);

			if (len == 4 && strncasecmp(p, "host", 4) == 0)
				host = true;
			p += len + (semi ? 1 : 0);
		}
		if (!host) {
			code = auth_fail(out, S3_ACCESS_DENIED, "SignedHeaders must include host.");
			goto out;
		}
	}

	out->user = auth_creds_find(in->creds, a.access);
	if (!out->user) {
		code = auth_fail(out, S3_INVALID_ACCESS_KEY_ID,
				 "The AWS Access Key Id you provided does not exist in our records.");
		goto out;
	}
	snprintf(out->amz_date, sizeof(out->amz_date), "%s", date);
	snprintf(out->scope, sizeof(out->scope), "%s/%s/%s/aws4_request", a.date, a.region,
		 a.service);
	auth_signing_key(out->key, out->user->secret, a.date, a.region, a.service);

	/*
	 * First the SDKs' canonical form; then the path exactly as sent; then
	 * valueless parameters without '=' (curl). Each is the request's own
	 * bytes, so trying them weakens nothing; most requests match the first.
	 */
	code = S3_SIGNATURE_DOES_NOT_MATCH;
	{
		bool any_bare = false, same_uri = false;

		for (int attempt = 0; attempt < 3 && code != S3_OK; attempt++) {
			if ((attempt == 1 && same_uri) || (attempt == 2 && !any_bare))
				continue;
			gw_buf_reset(&uri);
			gw_buf_reset(&creq);
			if (attempt != 1) {
				if (auth_canonical_uri(&uri, in->raw_path) < 0)
					continue;
			} else {
				gw_buf_puts(&uri, in->raw_path);
			}
			if (attempt == 0)
				same_uri = strcmp(gw_buf_str(&uri), in->raw_path) == 0;
			if (auth_canonical_request2(&creq, in->method, gw_buf_str(&uri),
						    in->raw_query, out->presigned, attempt == 2,
						    &any_bare, in->hdrs, in->nhdrs, a.signed_headers,
						    payload_hash) < 0 ||
			    auth_signature(sig, out, gw_buf_str(&creq)) < 0)
				continue;
			if (gw_secure_eq(sig, a.signature))
				code = S3_OK;
		}
	}
	if (code != S3_OK) {
		const char *clen = auth_hdr_get(in->hdrs, in->nhdrs, "content-length");
		const bool body = (clen && strcmp(clen, "0") != 0) ||
				  auth_hdr_get(in->hdrs, in->nhdrs, "transfer-encoding");

		out->user = NULL;
		/* curl --aws-sigv4 (before 8.x) signs a body's hash but sends no
		 * x-amz-content-sha256: say what is missing, not just "mismatch". */
		auth_fail(out, code, out->implied_empty && body ?
			  "The request has a body but no x-amz-content-sha256 header, which S3 "
			  "requires: send the body's SHA-256 there, or UNSIGNED-PAYLOAD" :
			  s3_err_message(code));
		goto out;
	}
	{
		const char *uh = auth_unsigned_header(in, a.signed_headers);

		if (uh) {
			char msg[256];

			snprintf(msg, sizeof(msg), "There were headers present in the request which "
				 "were not signed: %.64s", uh);
			code = auth_fail(out, S3_ACCESS_DENIED, msg);
			goto out;
		}
	}
	memcpy(out->signature, a.signature, 65);
out:
	if (code != S3_OK) {
		out->user = NULL;
		OPENSSL_cleanse(out->key, sizeof(out->key));
	}
	free(q_algo);
	free(q_cred);
	free(q_date);
	free(q_exp);
	free(q_sh);
	free(q_sig);
	free(q_sha);
	gw_buf_release(&creq);
	gw_buf_release(&uri);
	return code;
}

/* ---- aws-chunked -------------------------------------------------------- */

int chunk_init(struct chunk_dec *d, const struct auth_result *res)
{
	memset(d, 0, sizeof(*d));
	d->state = CHUNK_SIZE;
	d->signed_chunks = res->payload == AUTH_PAYLOAD_STREAMING ||
			   res->payload == AUTH_PAYLOAD_STREAMING_TRAILER;
	d->signed_trailer = res->payload == AUTH_PAYLOAD_STREAMING_TRAILER;
	d->trailer = res->payload == AUTH_PAYLOAD_STREAMING_TRAILER ||
		     res->payload == AUTH_PAYLOAD_STREAMING_UNSIGNED_TRAILER;
	memcpy(d->key, res->key, sizeof(d->key));
	memcpy(d->amz_date, res->amz_date, sizeof(d->amz_date));
	memcpy(d->scope, res->scope, sizeof(d->scope));
	memcpy(d->prev_sig, res->signature, sizeof(d->prev_sig));
	if (d->signed_chunks) {
		d->sha = EVP_MD_CTX_new();
		if (!d->sha)
			return -ENOMEM;
	}
	return 0;
}

void chunk_release(struct chunk_dec *d)
{
	if (!d)
		return;
	EVP_MD_CTX_free(d->sha);
	d->sha = NULL;
	OPENSSL_cleanse(d->key, sizeof(d->key));
}

/* Checks the signature of the chunk whose data hashed into d->sha. */
static enum s3_code chunk_verify(struct chunk_dec *d)
{
	uint8_t h[32];
	unsigned n = 0;
	char hex[65], sig[65];
	struct gw_buf sts;
	bool ok;

	if (!d->signed_chunks)
		return S3_OK;
	if (EVP_DigestFinal_ex(d->sha, h, &n) != 1)
		return S3_INTERNAL_ERROR;
	gw_hex(hex, h, 32);
	gw_buf_init(&sts);
	gw_buf_printf(&sts, "AWS4-HMAC-SHA256-PAYLOAD\n%s\n%s\n%s\n" AUTH_EMPTY_SHA256 "\n%s",
		      d->amz_date, d->scope, d->prev_sig, hex);
	if (gw_buf_failed(&sts)) {
		gw_buf_release(&sts);
		return S3_INTERNAL_ERROR;
	}
	auth_sign(sig, d->key, gw_buf_str(&sts));
	gw_buf_release(&sts);
	ok = gw_secure_eq(sig, d->chunk_sig);
	memcpy(d->prev_sig, d->chunk_sig, sizeof(d->prev_sig));
	return ok ? S3_OK : S3_SIGNATURE_DOES_NOT_MATCH;
}

/* "hex-size[;chunk-signature=sig]" */
static enum s3_code chunk_size_line(struct chunk_dec *d)
{
	const char *p = d->line;
	uint64_t size = 0;
	int digits = 0;

	for (; isxdigit((unsigned char)*p); p++, digits++) {
		int v = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;

		if (digits >= 15)
			return S3_INVALID_REQUEST;	/* no chunk is petabytes */
		size = size << 4 | (uint64_t)v;
	}
	if (digits == 0)
		return S3_INVALID_REQUEST;
	d->chunk_sig[0] = '\0';
	if (*p == ';') {
		const char *ext = p + 1;

		if (strncmp(ext, "chunk-signature=", 16) == 0) {
			if (strlen(ext + 16) != 64)
				return S3_INVALID_REQUEST;
			memcpy(d->chunk_sig, ext + 16, 65);
		} else if (d->signed_chunks) {
			return S3_INVALID_REQUEST;
		}
	} else if (*p != '\0') {
		return S3_INVALID_REQUEST;
	}
	if (d->signed_chunks && !d->chunk_sig[0])
		return S3_INVALID_REQUEST;
	if (d->signed_chunks && EVP_DigestInit_ex(d->sha, EVP_sha256(), NULL) != 1)
		return S3_INTERNAL_ERROR;
	d->remaining = size;
	if (size > 0) {
		d->state = CHUNK_DATA;
		return S3_OK;
	}
	/* The final, empty chunk: it is signed too. */
	if (chunk_verify(d) != S3_OK)
		return S3_SIGNATURE_DOES_NOT_MATCH;
	d->state = d->trailer ? CHUNK_TRAILER : CHUNK_END_CRLF;
	return S3_OK;
}

static enum s3_code chunk_trailer_end(struct chunk_dec *d)
{
	struct gw_buf sts, canon;
	char h[65], sig[65];
	bool ok;

	if (!d->signed_trailer)
		return S3_OK;
	if (!d->trailer_sig[0])
		return S3_SIGNATURE_DOES_NOT_MATCH;
	gw_buf_init(&canon);
	for (size_t i = 0; i < d->ntrailers; i++)
		gw_buf_printf(&canon, "%s:%s\n", d->trailers[i].name, d->trailers[i].value);
	gw_sha256_hex(h, gw_buf_str(&canon), canon.len);
	gw_buf_release(&canon);
	gw_buf_init(&sts);
	gw_buf_printf(&sts, "AWS4-HMAC-SHA256-TRAILER\n%s\n%s\n%s\n%s", d->amz_date, d->scope,
		      d->prev_sig, h);
	if (gw_buf_failed(&sts)) {
		gw_buf_release(&sts);
		return S3_INTERNAL_ERROR;
	}
	auth_sign(sig, d->key, gw_buf_str(&sts));
	gw_buf_release(&sts);
	ok = gw_secure_eq(sig, d->trailer_sig);
	return ok ? S3_OK : S3_SIGNATURE_DOES_NOT_MATCH;
}

/* One "name:value" line of the trailer, or "" at its end. */
static enum s3_code chunk_trailer_line(struct chunk_dec *d)
{
	char *colon;
	size_t nlen;
	const char *v;

	if (d->linelen == 0) {
		d->state = CHUNK_DONE;
		return chunk_trailer_end(d);
	}
	colon = strchr(d->line, ':');
	if (!colon)
		return S3_INVALID_REQUEST;
	nlen = (size_t)(colon - d->line);
	v = colon + 1;
	while (*v == ' ')
		v++;
	for (size_t i = 0; i < nlen; i++)
		d->line[i] = (char)tolower((unsigned char)d->line[i]);
	if (nlen == strlen("x-amz-trailer-signature") &&
	    strncmp(d->line, "x-amz-trailer-signature", nlen) == 0) {
		if (strlen(v) != 64)
			return S3_INVALID_REQUEST;
		memcpy(d->trailer_sig, v, 65);
		return S3_OK;
	}
	if (d->ntrailers == CHUNK_TRAILERS_MAX || nlen == 0 ||
	    nlen >= sizeof(d->trailers[0].name) || strlen(v) >= sizeof(d->trailers[0].value))
		return S3_INVALID_REQUEST;
	memcpy(d->trailers[d->ntrailers].name, d->line, nlen);
	d->trailers[d->ntrailers].name[nlen] = '\0';
	strcpy(d->trailers[d->ntrailers].value, v);
	d->ntrailers++;
	return S3_OK;
}

enum s3_code chunk_feed(struct chunk_dec *d, const char *data, size_t len,
			chunk_sink_fn sink, void *arg)
{
	enum s3_code code;

	while (len > 0) {
		switch (d->state) {
		case CHUNK_SIZE:
		case CHUNK_TRAILER:
		case CHUNK_END_CRLF:
		case CHUNK_DATA_CRLF: {
			char c = *data++;

			len--;
			if (c != '\n') {
				if (d->linelen >= sizeof(d->line) - 1 || c == '\0')
					return S3_INVALID_REQUEST;
				d->line[d->linelen++] = c;
				continue;
			}
			/* A line ends with "\r\n"; the '\r' is not part of it. */
			if (d->linelen == 0 || d->line[d->linelen - 1] != '\r')
				return S3_INVALID_REQUEST;
			d->line[--d->linelen] = '\0';
			if (d->state == CHUNK_SIZE) {
				code = chunk_size_line(d);
			} else if (d->state == CHUNK_TRAILER) {
				code = chunk_trailer_line(d);
			} else if (d->linelen != 0) {
				code = S3_INVALID_REQUEST;
			} else if (d->state == CHUNK_DATA_CRLF) {
				code = chunk_verify(d);
				d->state = CHUNK_SIZE;
			} else {
				d->state = CHUNK_DONE;
				code = S3_OK;
			}
			d->linelen = 0;
			if (code != S3_OK)
				return code;
			break;
		}
		case CHUNK_DATA: {
			size_t n = (size_t)GW_MIN((uint64_t)len, d->remaining);

			if (d->signed_chunks)
				EVP_DigestUpdate(d->sha, data, n);
			code = sink(arg, data, n);
			if (code != S3_OK)
				return code;
			d->decoded += n;
			d->remaining -= n;
			data += n;
			len -= n;
			if (d->remaining == 0)
				d->state = CHUNK_DATA_CRLF;
			break;
		}
		case CHUNK_DONE:
			return S3_INCOMPLETE_BODY;	/* bytes after the end */
		}
	}
	return S3_OK;
}

enum s3_code chunk_finish(struct chunk_dec *d)
{
	return d->state == CHUNK_DONE ? S3_OK : S3_INCOMPLETE_BODY;
}

const char *chunk_trailer(const struct chunk_dec *d, const char *name)
{
	for (size_t i = 0; i < d->ntrailers; i++)
		if (strcasecmp(d->trailers[i].name, name) == 0)
			return d->trailers[i].value;
	return NULL;
}
