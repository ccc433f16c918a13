/*
 * gw_util.c - the gateway's small helpers (see gw_util.h): buffers, percent
 * coding, dates, base64 and checksums. Pure functions over bytes, shared by
 * the server and the fuzz targets.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw_util.h"
#include "kvtier.h"

/* ---- growable buffer ---------------------------------------------------- */

void gw_buf_init(struct gw_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void gw_buf_release(struct gw_buf *b)
{
	if (!b)
		return;
	free(b->data);
	gw_buf_init(b);
}

void gw_buf_reset(struct gw_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

static int gw_buf_grow(struct gw_buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (b->failed)
		return -ENOMEM;
	if (extra > SIZE_MAX / 2 - b->len)
		goto fail;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p)
		goto fail;
	b->data = p;
	b->cap = cap;
	return 0;
fail:
	b->failed = true;
	return -ENOMEM;
}

int gw_buf_reserve(struct gw_buf *b, size_t n)
{
	return gw_buf_grow(b, n);
}

int gw_buf_append(struct gw_buf *b, const void *p, size_t n)
{
	if (gw_buf_grow(b, n) < 0)
		return -ENOMEM;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int gw_buf_puts(struct gw_buf *b, const char *s)
{
	return gw_buf_append(b, s, strlen(s));
}

int gw_buf_putc(struct gw_buf *b, char c)
{
	return gw_buf_append(b, &c, 1);
}

int gw_buf_printf(struct gw_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || gw_buf_grow(b, (size_t)n) < 0)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

const char *gw_buf_str(const struct gw_buf *b)
{
	return b->data ? b->data : "";
}

char *gw_buf_detach(struct gw_buf *b, size_t *len)
{
	char *p = b->data;

	if (len)
		*len = b->len;
	if (!p)
		p = calloc(1, 1);
	gw_buf_init(b);
	return p;
}

/* ---- percent coding ----------------------------------------------------- */

static int gw_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *gw_url_decode(const char *s, size_t len, bool plus_space, size_t *outlen)
{
	char *out = malloc(len + 1);
	size_t n = 0;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= len)
				goto bad;
			hi = gw_hexval(s[i + 1]);
			lo = gw_hexval(s[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				goto bad;
			out[n++] = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '\0') {
			goto bad;
		} else if (c == '+' && plus_space) {
			out[n++] = ' ';
		} else {
			out[n++] = c;
		}
	}
	out[n] = '\0';
	if (outlen)
		*outlen = n;
	return out;
bad:
	free(out);
	return NULL;
}

int gw_url_encode(struct gw_buf *out, const char *s, size_t len, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && keep_slash)) {
			gw_buf_putc(out, (char)c);
		} else {
			char e[3] = { '%', hex[c >> 4], hex[c & 15] };

			gw_buf_append(out, e, 3);
		}
	}
	return gw_buf_failed(out) ? -ENOMEM : 0;
}

/* ---- time --------------------------------------------------------------- */

void gw_time_http(char *out, size_t len, time_t t)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	/* Not strftime(%a): day and month names must not follow the locale. */
	static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
	static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	snprintf(out, len, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday,
		 months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

void gw_time_iso(char *out, size_t len, int64_t ns)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;

	gmtime_r(&t, &tm);
	snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (int)((ns / 1000000) % 1000));
}

static int gw_month(const char *m)
{
	static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

	for (int i = 0; i < 12; i++)
		if (strncasecmp(m, months[i], 3) == 0)
			return i;
	return -1;
}

static time_t gw_timegm_checked(struct tm *tm)
{
	if (tm->tm_mon < 0 || tm->tm_mday < 1 || tm->tm_mday > 31 || tm->tm_hour > 23 ||
	    tm->tm_min > 59 || tm->tm_sec > 60 || tm->tm_year < 70 || tm->tm_year > 1100)
		return -1;
	return timegm(tm);
}

time_t gw_time_parse_http(const char *s)
{
	struct tm tm;
	char wd[16], mon[4];
	int n = 0;

	memset(&tm, 0, sizeof(tm));
	/* RFC 1123: "Sun, 06 Nov 1994 08:49:37 GMT" */
	if (sscanf(s, "%15[A-Za-z], %d %3s %d %d:%d:%d GMT%n", wd, &tm.tm_mday, mon,
		   &tm.tm_year, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) == 7 && n > 0 &&
	    s[n] == '\0') {
		tm.tm_year -= 1900;
		tm.tm_mon = gw_month(mon);
		return gw_timegm_checked(&tm);
	}
	/* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
	n = 0;
	if (sscanf(s, "%15[A-Za-z], %d-%3s-%d %d:%d:%d GMT%n", wd, &tm.tm_mday, mon,
		   &tm.tm_year, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) == 7 && n > 0 &&
	    s[n] == '\0') {
		if (tm.tm_year < 70)
			tm.tm_year += 100;
		else if (tm.tm_year >= 1900)
			tm.tm_year -= 1900;
		tm.tm_mon = gw_month(mon);
		return gw_timegm_checked(&tm);
	}
	/* asctime: "Sun Nov  6 08:49:37 1994" */
	n = 0;
	if (sscanf(s, "%15s %3s %d %d:%d:%d %d%n", wd, mon, &tm.tm_mday, &tm.tm_hour,
		   &tm.tm_min, &tm.tm_sec, &tm.tm_year, &n) == 7 && n > 0 && s[n] == '\0') {
		tm.tm_year -= 1900;
		tm.tm_mon = gw_month(mon);
		return gw_timegm_checked(&tm);
	}
	return -1;
}

time_t gw_time_parse_amz(const char *s)
{
	struct tm tm;

	if (strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z')
		return -1;
	for (int i = 0; i < 15; i++)
		if (i != 8 && (s[i] < '0' || s[i] > '9'))
			return -1;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0') - 1900;
	tm.tm_mon = (s[4] - '0') * 10 + (s[5] - '0') - 1;
	tm.tm_mday = (s[6] - '0') * 10 + (s[7] - '0');
	tm.tm_hour = (s[9] - '0') * 10 + (s[10] - '0');
	tm.tm_min = (s[11] - '0') * 10 + (s[12] - '0');
	tm.tm_sec = (s[13] - '0') * 10 + (s[14] - '0');
	if (tm.tm_mon > 11)
		return -1;
	return gw_timegm_checked(&tm);
}

/* ---- hex and base64 ----------------------------------------------------- */

void gw_hex(char *out, const void *buf, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = buf;

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = hex[p[i] >> 4];
		out[2 * i + 1] = hex[p[i] & 15];
	}
	out[2 * len] = '\0';
}

static const char gw_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void gw_base64_encode(char *out, const uint8_t *in, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < len)
			v |= in[i + 2];
		out[o++] = gw_b64[v >> 18 & 63];
		out[o++] = gw_b64[v >> 12 & 63];
		out[o++] = i + 1 < len ? gw_b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < len ? gw_b64[v & 63] : '=';
	}
	out[o] = '\0';
}

int gw_base64_decode(const char *s, uint8_t *out, size_t outlen)
{
	size_t len = strlen(s), n = 0;
	uint32_t acc = 0;
	int bits = 0;

	if (len != (outlen + 2) / 3 * 4)
		return -1;
	for (size_t i = 0; i < len; i++) {
		const char *p;

		if (s[i] == '=') {
			/* Padding only at the very end, at most two. */
			for (size_t j = i; j < len; j++)
				if (s[j] != '=')
					return -1;
			if (len - i > 2)
				return -1;
			break;
		}
		p = memchr(gw_b64, s[i], 64);
		if (!p || s[i] == '\0')
			return -1;
		acc = acc << 6 | (uint32_t)(p - gw_b64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (n >= outlen)
				return -1;
			out[n++] = (uint8_t)(acc >> bits);
		}
	}
	return n == outlen ? 0 : -1;
}

/* ---- checksums ---------------------------------------------------------- */

static uint32_t gw_crc32_table[256];
static uint64_t gw_crc64_table[256];

__attribute__((constructor)) static void gw_crc_tables(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		uint64_t d = i;

		for (int k = 0; k < 8; k++) {
			c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
			d = d & 1 ? 0x9A6C9329AC4BC9B5ull ^ (d >> 1) : d >> 1;
		}
		gw_crc32_table[i] = c;
		gw_crc64_table[i] = d;
	}
}

uint32_t gw_crc32(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	while (len--)
		crc = gw_crc32_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

uint64_t gw_crc64nvme(uint64_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	while (len--)
		crc = gw_crc64_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static const struct {
	enum gw_cks_algo algo;
	const char *name;
} gw_cks_names[] = {
	{ GW_CKS_CRC32, "crc32" },
	{ GW_CKS_CRC32C, "crc32c" },
	{ GW_CKS_CRC64NVME, "crc64nvme" },
	{ GW_CKS_SHA1, "sha1" },
	{ GW_CKS_SHA256, "sha256" },
};

enum gw_cks_algo gw_cks_algo_parse(const char *name)
{
	for (size_t i = 0; i < GW_ARRAY_SIZE(gw_cks_names); i++)
		if (strcasecmp(name, gw_cks_names[i].name) == 0)
			return gw_cks_names[i].algo;
	return GW_CKS_NONE;
}

const char *gw_cks_algo_name(enum gw_cks_algo algo)
{
	for (size_t i = 0; i < GW_ARRAY_SIZE(gw_cks_names); i++)
		if (gw_cks_names[i].algo == algo)
			return gw_cks_names[i].name;
	return "none";
}

int gw_cks_init(struct gw_cks *c, enum gw_cks_algo algo)
{
	const EVP_MD *md = NULL;

	memset(c, 0, sizeof(*c));
	c->algo = algo;
	if (algo == GW_CKS_SHA1)
		md = EVP_sha1();
	else if (algo == GW_CKS_SHA256)
		md = EVP_sha256();
	if (md) {
		c->md = EVP_MD_CTX_new();
		if (!c->md || EVP_DigestInit_ex(c->md, md, NULL) != 1) {
			EVP_MD_CTX_free(c->md);
			c->md = NULL;
			return -ENOMEM;
		}
	}
	return 0;
}

void gw_cks_update(struct gw_cks *c, const void *buf, size_t len)
{
	switch (c->algo) {
	case GW_CKS_NONE:
		break;
	case GW_CKS_CRC32:
		c->crc = gw_crc32((uint32_t)c->crc, buf, len);
		break;
	case GW_CKS_CRC32C:
		c->crc = kvt_crc32c((uint32_t)c->crc, buf, len);
		break;
	case GW_CKS_CRC64NVME:
		c->crc = gw_crc64nvme(c->crc, buf, len);
		break;
	case GW_CKS_SHA1:
	case GW_CKS_SHA256:
		EVP_DigestUpdate(c->md, buf, len);
		break;
	}
}

int gw_cks_final(struct gw_cks *c, char *out, size_t len)
{
	uint8_t d[EVP_MAX_MD_SIZE];
	unsigned n = 0;

	switch (c->algo) {
	case GW_CKS_NONE:
		return -EINVAL;
	case GW_CKS_CRC32:
	case GW_CKS_CRC32C:
		for (int i = 0; i < 4; i++)
			d[i] = (uint8_t)(c->crc >> (24 - 8 * i));
		n = 4;
		break;
	case GW_CKS_CRC64NVME:
		for (int i = 0; i < 8; i++)
			d[i] = (uint8_t)(c->crc >> (56 - 8 * i));
		n = 8;
		break;
	case GW_CKS_SHA1:
	case GW_CKS_SHA256:
		if (EVP_DigestFinal_ex(c->md, d, &n) != 1)
			return -EIO;
		break;
	}
	if (len < (n + 2) / 3 * 4 + 1)
		return -ENOSPC;
	gw_base64_encode(out, d, n);
	return 0;
}

void gw_cks_release(struct gw_cks *c)
{
	if (!c)
		return;
	EVP_MD_CTX_free(c->md);
	c->md = NULL;
	c->algo = GW_CKS_NONE;
}

/*
 * SHA-256 for SigV4, several times a request. OpenSSL 3 looks an algorithm
 * up in its provider store at every EVP_sha256() init and HMAC() call (a
 * lock shared by all threads and a few microseconds each); SHA-256 is
 * fetched once here, each thread keeps a context, and HMAC is the two
 * hashes of RFC 2104 over it.
 */
static EVP_MD *gw_sha256_md;
static pthread_once_t gw_sha256_once = PTHREAD_ONCE_INIT;
static pthread_key_t gw_sha256_key;	/* the thread's EVP_MD_CTX, freed at its exit */

static void gw_sha256_ctx_free(void *ctx)
{
	EVP_MD_CTX_free(ctx);
}

static void gw_sha256_fetch(void)
{
	gw_sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (pthread_key_create(&gw_sha256_key, gw_sha256_ctx_free) != 0)
		abort();	/* only at the first request, and only without memory */
}

/* SHA-256 of the concatenation of n pieces. */
static void gw_sha256_pieces(uint8_t out[32], const void *const *p, const size_t *len, int n)
{
	const EVP_MD *md;
	unsigned olen = 0;

	EVP_MD_CTX *ctx;

	pthread_once(&gw_sha256_once, gw_sha256_fetch);
	md = gw_sha256_md ? gw_sha256_md : EVP_sha256();
	ctx = pthread_getspecific(gw_sha256_key);
	if (!ctx && (ctx = EVP_MD_CTX_new()) && pthread_setspecific(gw_sha256_key, ctx) != 0) {
		EVP_MD_CTX_free(ctx);
		ctx = NULL;
	}
	if (!ctx || EVP_DigestInit_ex(ctx, md, NULL) != 1) {
		memset(out, 0, 32);	/* matches no signature */
		return;
	}
	for (int i = 0; i < n; i++)
		EVP_DigestUpdate(ctx, p[i], len[i]);
	EVP_DigestFinal_ex(ctx, out, &olen);
}

void gw_sha256_hex(char out[65], const void *buf, size_t len)
{
	uint8_t d[32];

	gw_sha256_pieces(d, &buf, &len, 1);
	gw_hex(out, d, 32);
}

void gw_hmac_sha256(uint8_t out[32], const void *key, size_t keylen, const void *msg, size_t len)
{
	uint8_t k[64] = { 0 }, ipad[64], opad[64], inner[32];
	const void *p[2];
	size_t l[2];

	if (keylen > sizeof(k)) {
		p[0] = key;
		l[0] = keylen;
		gw_sha256_pieces(k, p, l, 1);
	} else {
		memcpy(k, key, keylen);
	}
	for (int i = 0; i < 64; i++) {
		ipad[i] = k[i] ^ 0x36;
		opad[i] = k[i] ^ 0x5c;
	}
	p[0] = ipad, l[0] = 64, p[1] = msg, l[1] = len;
	gw_sha256_pieces(inner, p, l, 2);
	p[0] = opad, l[0] = 64, p[1] = inner, l[1] = 32;
	gw_sha256_pieces(out, p, l, 2);
	OPENSSL_cleanse(k, sizeof(k));
	OPENSSL_cleanse(ipad, sizeof(ipad));
	OPENSSL_cleanse(opad, sizeof(opad));
}

bool gw_secure_eq(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	/* Lengths are public (a signature is 64 hex digits); bytes are not. */
	if (la != lb)
		return false;
	return CRYPTO_memcmp(a, b, la) == 0;
}
