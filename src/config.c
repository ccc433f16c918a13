/*
 * config.c - kvtier.conf, the one configuration file every binary reads.
 *
 * The file is INI: "[section]" headers, "key = value" lines, comments from
 * ';' or '#' at the start of a line (or " ;" after a value). inih does the
 * tokenising; everything else comes from one table, cfg_keys[]: each row is
 * a key's section, its name, its type, where it lives in struct kvt_config
 * and its default, written as it would be in the file. The defaults
 * (kvt_config_init), the parser and the error messages all read that table,
 * so a new key is one row, and a new section ([gateway], [fuse], [g4]) is a
 * few rows plus, if its keys must agree with each other, one function in
 * cfg_checks[]. etc/kvtier.conf and man/kvtier.conf.5 list the same keys and
 * defaults; tests/test_config.c checks that the example file matches.
 *
 * The parser is strict because a typo must not quietly run a store with a
 * default (a misspelt "capacty = 2T" would leave a 4G hot tier). An unknown
 * section or key, a bad value, a key given twice, a line inih cannot parse:
 * each fails the whole load with one line naming the file, the line and the
 * key, "kvtier.conf:12: unknown key 'capacty' in [store]". Loading is all or
 * nothing: the file is read into a copy of cfg, and cfg changes only once the
 * whole file and the cross-checks have passed.
 *
 * inih is fed through our own line reader, cfg_read_line(), not ini_parse():
 *  - line numbers stay true: inih reads a line longer than its buffer in
 *    pieces and counts each piece as a line; we reject such a line whole;
 *  - lines are left-trimmed before inih sees them, which turns off inih's
 *    continuation lines: inih hands an indented line to the handler as one
 *    more value of the key above it, so an indented "  capacity = 2T" would
 *    be taken for a second value of, say, dir;
 *  - section headers are checked as they are read, so an empty misspelt
 *    section is caught too (inih calls the handler only for keys);
 *  - a line whose first separator is ':' is refused: inih takes "key : value"
 *    as well as "key = value", which kvtier.conf(5) does not document;
 *  - memory stays bounded and a file over CFG_MAX_FILE is refused.
 * The first error in the file is the one reported, whether inih or we found
 * it: inih returns the line of its first failure, we keep our first message.
 *
 * inih's runtime switches (Debian's build exports ini_allow_multiline and
 * others) are left alone: they are process-wide, and other builds lack them.
 */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"
#include "log.h"
#include "util.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"	/* the Makefile passes -DSYSCONFDIR=$(sysconfdir) */
#endif

enum cfg_type {
	CFG_TYPE_PATH,		/* char *, an absolute path */
	CFG_TYPE_STRING,	/* char *, any text without spaces */
	CFG_TYPE_SIZE,		/* uint64_t bytes in [min, max], kvt_parse_size() */
	CFG_TYPE_FRACTION,	/* double in [0, 1], "0.9" or "90%" */
	CFG_TYPE_ENUM,		/* an enum: value i is spelt names[i] */
	CFG_TYPE_UNSIGNED,	/* unsigned in [min, max] */
	CFG_TYPE_DURATION,	/* uint64_t seconds in [min, max], kvt_parse_duration() */
	CFG_TYPE_MODE,		/* unsigned permission bits, octal: 0644 */
	CFG_TYPE_LISTEN,	/* char *, an address to listen on, kvt_parse_listen() */
};

struct cfg_key {
	const char *section;
	const char *name;
	enum cfg_type type;
	size_t offset;			/* of the field in struct kvt_config */
	const char *def;		/* the default, spelt as in the file */
	uint64_t min, max;		/* UNSIGNED, SIZE, DURATION: inclusive range */
	const char *const *names;	/* CFG_TYPE_ENUM: NULL-terminated */
};

/*
 * The offset of member m of struct kvt_config, which must have type t: a row
 * whose type does not match its field fails to compile, rather than writing
 * a double over a pointer.
 */
#define CFG_AT(m, t) (offsetof(struct kvt_config, m) + 0 * sizeof(char[ \
	__builtin_types_compatible_p(__typeof__(((struct kvt_config *)0)->m), t) ? 1 : -1]))
/* Enums are written through an int, so only their size has to match. */
#define CFG_AT_ENUM(m) (offsetof(struct kvt_config, m) + 0 * sizeof(char[ \
	sizeof(((struct kvt_config *)0)->m) == sizeof(int) ? 1 : -1]))

#define CFG_PATH(sec, key, m, d) \
	{ .section = sec, .name = key, .type = CFG_TYPE_PATH, .offset = CFG_AT(m, char *), .def = d }
#define CFG_STRING(sec, key, m, d) \
	{ .section = sec, .name = key, .type = CFG_TYPE_STRING, .offset = CFG_AT(m, char *), .def = d }
#define CFG_SIZE(sec, key, m, d) CFG_SIZE_RANGE(sec, key, m, d, 0, UINT64_MAX)
#define CFG_SIZE_RANGE(sec, key, m, d, lo, hi) \
	{ .section = sec, .name = key, .type = CFG_TYPE_SIZE, .offset = CFG_AT(m, uint64_t), \
	  .def = d, .min = lo, .max = hi }
#define CFG_FRACTION(sec, key, m, d) \
	{ .section = sec, .name = key, .type = CFG_TYPE_FRACTION, .offset = CFG_AT(m, double), .def = d }
#define CFG_ENUM(sec, key, m, d, n) \
	{ .section = sec, .name = key, .type = CFG_TYPE_ENUM, .offset = CFG_AT_ENUM(m), .def = d, \
	  .names = n }
#define CFG_UNSIGNED(sec, key, m, d, lo, hi) \
	{ .section = sec, .name = key, .type = CFG_TYPE_UNSIGNED, .offset = CFG_AT(m, unsigned), \
	  .def = d, .min = lo, .max = hi }
#define CFG_DURATION(sec, key, m, d) CFG_DURATION_RANGE(sec, key, m, d, 0, KVT_DURATION_MAX)
#define CFG_DURATION_RANGE(sec, key, m, d, lo, hi) \
	{ .section = sec, .name = key, .type = CFG_TYPE_DURATION, .offset = CFG_AT(m, uint64_t), \
	  .def = d, .min = lo, .max = hi }

#define CFG_MODE(sec, key, m, d) \
	{ .section = sec, .name = key, .type = CFG_TYPE_MODE, .offset = CFG_AT(m, unsigned), .def = d }
#define CFG_LISTEN(sec, key, m, d) \
	{ .section = sec, .name = key, .type = CFG_TYPE_LISTEN, .offset = CFG_AT(m, char *), .def = d }

/* In the order of enum kvt_io_kind. */
static const char *const cfg_io_names[] = { "uring", "sync", NULL };

/*
 * Every key of kvtier.conf. Keep etc/kvtier.conf and man/kvtier.conf.5 in step.
 * A range is what the program honours: a value it would clamp or replace is
 * refused here, where the error can name the line.
 */
static const struct cfg_key cfg_keys[] = {
	CFG_PATH("store", "dir", store.dir, "/var/lib/kvtier"),
	CFG_SIZE("store", "capacity", store.capacity, "4G"),
	CFG_SIZE("store", "segment_size", store.segment_size, "256M"),
	CFG_FRACTION("store", "high_watermark", store.high_watermark, "0.90"),
	CFG_FRACTION("store", "low_watermark", store.low_watermark, "0.80"),
	CFG_ENUM("store", "io", store.io, "uring", cfg_io_names),
	CFG_UNSIGNED("store", "session_depth", store.session_depth, "1", 1, 16),
	CFG_UNSIGNED("store", "access_flush_ms", store.access_flush_ms, "1000", 1, 86400000),
	CFG_SIZE("store", "cached_read_max", store.cached_read_max, "256K"),
	CFG_DURATION("store", "space_wait", store.space_wait, "30s"),
	CFG_LISTEN("gateway", "listen", gateway.listen, "127.0.0.1:9000"),
	CFG_UNSIGNED("gateway", "threads", gateway.threads, "4", 1, KVT_GW_THREADS_MAX),
	CFG_PATH("gateway", "credentials", gateway.credentials, NULL),
	CFG_PATH("gateway", "tls_cert", gateway.tls_cert, NULL),
	CFG_PATH("gateway", "tls_key", gateway.tls_key, NULL),
	CFG_LISTEN("gateway", "metrics_listen", gateway.metrics_listen, NULL),
	CFG_STRING("gateway", "region", gateway.region, "us-east-1"),
	CFG_STRING("gateway", "domain", gateway.domain, "localhost"),
	CFG_DURATION_RANGE("gateway", "timeout", gateway.timeout, "60s", 0, KVT_GW_TIMEOUT_MAX),
	CFG_UNSIGNED("gateway", "max_connections", gateway.max_connections, "1024", 1,
		     KVT_GW_CONNECTIONS_MAX),
	CFG_SIZE_RANGE("gateway", "max_object", gateway.max_object, "5G", 1, UINT64_MAX),
	CFG_UNSIGNED("gateway", "max_uploads", gateway.max_uploads, "10000", 1, 10000000),
	CFG_UNSIGNED("gateway", "max_uploads_per_bucket", gateway.max_uploads_per_bucket, "1000", 1,
		     10000000),
	CFG_DURATION_RANGE("gateway", "upload_max_age", gateway.upload_max_age, "7d", 1,
			   KVT_DURATION_MAX),
	CFG_STRING("gateway", "access_log", gateway.access_log, "-"),
	CFG_UNSIGNED("fuse", "uid", fuse.uid, "0", 0, 4294967294u),
	CFG_UNSIGNED("fuse", "gid", fuse.gid, "0", 0, 4294967294u),
	CFG_MODE("fuse", "file_mode", fuse.file_mode, "0644"),
	CFG_MODE("fuse", "dir_mode", fuse.dir_mode, "0755"),
	CFG_UNSIGNED("fuse", "attr_timeout", fuse.attr_timeout, "1", 0, 86400),
	CFG_UNSIGNED("fuse", "entry_timeout", fuse.entry_timeout, "1", 0, 86400),
	CFG_STRING("g4", "url", g4.url, NULL),
	CFG_DURATION("g4", "idle", g4.idle, "24h"),
	CFG_UNSIGNED("g4", "jobs", g4.jobs, "4", 1, 64),
	CFG_SIZE("g4", "part_size", g4.part_size, "8M"),
	CFG_STRING("g4", "endpoint", g4.endpoint, NULL),
	CFG_STRING("g4", "region", g4.region, "us-east-1"),
	CFG_PATH("g4", "credentials", g4.credentials, NULL),
	CFG_PATH("g4", "ca_file", g4.ca_file, NULL),
};

/* A kvtier.conf is a few kilobytes; anything this big is not one. */
#define CFG_MAX_FILE (1 << 20)

/* One file being read: the state cfg_read_line() and cfg_handler() share. */
struct cfg_parse {
	FILE *f;
	struct kvt_config *cfg;		/* the copy being filled */
	char buf[4096];			/* the line being read */
	size_t bytes;			/* of the file read so far */
	int lineno;			/* of the line inih is working on */
	int read_errno;			/* set if reading the file failed */
	int err_line;			/* of the first error; 0 for none yet */
	int err_rc;			/* its negative errno */
	char msg[320];			/* its message, without "path:line: " */
	int seen[ARRAY_SIZE(cfg_keys)];	/* line each key was set on, or 0 */
};

static void *cfg_field(struct kvt_config *cfg, const struct cfg_key *k)
{
	return (char *)cfg + k->offset;
}

/* GNU strerror_r, as log.c: strerror() is not thread-safe. */
static const char *cfg_strerror(int err, char *buf, size_t len)
{
	return strerror_r(err < 0 ? -err : err, buf, len);
}

/* A decimal number without sign or blanks; *end is where the digits stop. */
static int cfg_parse_u64(const char *s, uint64_t *out, const char **end)
{
	uint64_t v = 0;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = *s - '0';

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	*end = s;
	return 0;
}

int kvt_parse_size(const char *s, uint64_t *out)
{
	const char *end;
	unsigned shift = 0;
	uint64_t v;
	int rc = cfg_parse_u64(s, &v, &end);

	if (rc < 0)
		return rc;
	switch (*end) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	}
	if (shift) {
		/* "4G", "4Gi", "4GiB", "4GB" all mean 4 << 30: no SI units here. */
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'b' || *end == 'B')
			end++;
	}
	if (*end != '\0')
		return -EINVAL;
	if (v > UINT64_MAX >> shift)
		return -ERANGE;
	*out = v << shift;
	return 0;
}

int kvt_parse_duration(const char *s, uint64_t *seconds)
{
	const char *end;
	uint64_t v, mul = 1;
	int rc = cfg_parse_u64(s, &v, &end);

	if (rc < 0)
		return rc;
	/* Lower case only: "15M" could as well be months as minutes. */
	switch (*end) {
	case 's': mul = 1; end++; break;
	case 'm': mul = 60; end++; break;
	case 'h': mul = 3600; end++; break;
	case 'd': mul = 86400; end++; break;
	}
	if (*end != '\0')
		return -EINVAL;
	if (v > KVT_DURATION_MAX / mul)
		return -ERANGE;
	*seconds = v * mul;
	return 0;
}

/*
 * "127.0.0.1:9000", "[::1]:9000", "[fe80::1%eth0]:9000", ":9000" or "9000"
 * (the last two: every IPv4 address). Numeric, and strictly: getaddrinfo()
 * alone, which this used to be, took "127.1", "2130706433" and "010.0.0.1"
 * (octal, 8.0.0.1) for IPv4 addresses, " 80" and "+80" for ports, and
 * wrapped a port past 65535 (70000 was 4464, and 65536 was 0, any port the
 * kernel picks). An IPv4 address is dotted decimal (inet_pton), an IPv6 one
 * is in brackets, as in a URL, since "::1:9000" is an address of its own,
 * and the port is 0 to 65535 in decimal.
 */
int kvt_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6;
	struct addrinfo *res = NULL;
	char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 1];
	const char *h = s, *port, *end;
	size_t hlen;
	uint64_t p;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		h = s + 1;
		hlen = (size_t)(close - h);
		port = close + 2;
	} else {
		const char *colon = strrchr(s, ':');

		hlen = colon ? (size_t)(colon - s) : 0;
		port = colon ? colon + 1 : s;
		if (memchr(s, ':', hlen))
			return -EINVAL;	/* IPv6 without brackets */
	}
	if (cfg_parse_u64(port, &p, &end) < 0 || *end != '\0' || p > 65535 ||
	    hlen >= sizeof(host) || (s[0] == '[' && hlen == 0))
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	if (s[0] == '[') {
		/* getaddrinfo(), not inet_pton(): it knows scope ids, "%eth0". */
		const struct addrinfo hints = { .ai_family = AF_INET6, .ai_socktype = SOCK_STREAM,
						.ai_flags = AI_NUMERICHOST };

		if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res ||
		    res->ai_addrlen > sizeof(*ss)) {
			if (res)
				freeaddrinfo(res);
			return -EINVAL;
		}
		memcpy(ss, res->ai_addr, res->ai_addrlen);
		*len = res->ai_addrlen;
		freeaddrinfo(res);
		in6 = (struct sockaddr_in6 *)ss;
		/* The kernel binds a scope only for a link-local address, and
		 * ignores any other's: "[::1%eth0]" is no address to give. */
		if (in6->sin6_scope_id && !IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) &&
		    !IN6_IS_ADDR_MC_LINKLOCAL(&in6->sin6_addr))
			return -EINVAL;
		in6->sin6_port = htons((uint16_t)p);
		return 0;
	}
	in->sin_family = AF_INET;
	in->sin_port = htons((uint16_t)p);
	if (hlen == 0)
		in->sin_addr.s_addr = htonl(INADDR_ANY);
	else if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
		return -EINVAL;
	*len = sizeof(*in);
	return 0;
}

/*
 * "0.9", ".9", "90%", "85.5%". Parsed by hand, not with strtod(), which
 * follows the locale's decimal point and also takes "nan", "1e-1" and hex.
 * The digits are kept as an integer and divided once by a power of ten, both
 * exact in a double, so "0.9" and "90%" give the same double as 0.9 in C;
 * significant digits past the 15th are dropped.
 */
static int cfg_parse_fraction(const char *s, double *out)
{
	uint64_t mant = 0;
	int digits = 0, scale = 0;
	bool any = false, dot = false;
	double p = 1, v;

	for (; *s; s++) {
		if (*s >= '0' && *s <= '9') {
			any = true;
			if (mant == 0 && *s == '0') {
				scale += dot;	/* a leading zero: "0.000001" */
				continue;
			}
			/* 15 digits: mant < 2^53 stays exact; later ones are noise. */
			if (digits == 15) {
				if (!dot)
					return -EINVAL;	/* 1e15 is not a fraction */
				continue;
			}
			digits++;
			scale += dot;
			mant = mant * 10 + (*s - '0');
		} else if (*s == '.' && !dot) {
			dot = true;
		} else {
			break;
		}
	}
	if (!any)
		return -EINVAL;
	if (*s == '%') {
		scale += 2;
		s++;
	}
	if (*s != '\0')
		return -EINVAL;
	while (scale-- > 0)
		p *= 10;
	v = (double)mant / p;
	if (v > 1)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Sets k's field from its text: 0, -EINVAL for a bad value, or -ENOMEM. */
static int cfg_set(struct kvt_config *cfg, const struct cfg_key *k, const char *text)
{
	void *field = cfg_field(cfg, k);
	const char *end;
	uint64_t u;
	double d;
	char *s;
	int rc;

	switch (k->type) {
	case CFG_TYPE_PATH:
		/*
		 * Absolute only: every process sharing a store must open the
		 * same directory, whatever its working directory (a daemon's
		 * is "/"). This also rejects a quoted value, which inih keeps
		 * quotes and all.
		 */
		if (text[0] != '/')
			return -EINVAL;
		s = strdup(text);
		if (!s)
			return -ENOMEM;
		free(*(char **)field);
		*(char **)field = s;
		return 0;
	case CFG_TYPE_STRING:
	case CFG_TYPE_LISTEN: {
		struct sockaddr_storage ss;
		socklen_t sslen;

		/* One word: a value with a space in it is a typo, not a name. */
		if (!*text || strpbrk(text, " \t\"'"))
			return -EINVAL;
		if (k->type == CFG_TYPE_LISTEN && kvt_parse_listen(text, &ss, &sslen) < 0)
			return -EINVAL;
		s = strdup(text);
		if (!s)
			return -ENOMEM;
		free(*(char **)field);
		*(char **)field = s;
		return 0;
	}
	case CFG_TYPE_SIZE:
		rc = kvt_parse_size(text, &u);
		if (rc < 0 || u < k->min || u > k->max)
			return -EINVAL;
		*(uint64_t *)field = u;
		return 0;
	case CFG_TYPE_FRACTION:
		rc = cfg_parse_fraction(text, &d);
		if (rc < 0)
			return rc;
		*(double *)field = d;
		return 0;
	case CFG_TYPE_ENUM:
		for (int i = 0; k->names[i]; i++) {
			if (strcmp(text, k->names[i]) == 0) {
				*(int *)field = i;
				return 0;
			}
		}
		return -EINVAL;
	case CFG_TYPE_UNSIGNED:
		rc = cfg_parse_u64(text, &u, &end);
		if (rc < 0 || *end != '\0' || u < k->min || u > k->max)
			return -EINVAL;
		*(unsigned *)field = (unsigned)u;
		return 0;
	case CFG_TYPE_DURATION:
		rc = kvt_parse_duration(text, &u);
		if (rc < 0 || u < k->min || u > k->max)
			return -EINVAL;
		*(uint64_t *)field = u;
		return 0;
	case CFG_TYPE_MODE: {
		char *mend = NULL;
		unsigned long m;

		if (text[0] < '0' || text[0] > '7')
			return -EINVAL;
		errno = 0;
		m = strtoul(text, &mend, 8);
		if (errno || *mend != '\0' || m > 07777)
			return -EINVAL;
		*(unsigned *)field = (unsigned)m;
		return 0;
	}
	}
	return -EINVAL;
}

/* What a bad value of k should have looked like, for the error message. */
static void cfg_expect(const struct cfg_key *k, char *buf, size_t len)
{
	size_t n;

	switch (k->type) {
	case CFG_TYPE_PATH:
		snprintf(buf, len, "expected an absolute path");
		return;
	case CFG_TYPE_STRING:
		snprintf(buf, len, "expected one word without spaces or quotes");
		return;
	case CFG_TYPE_SIZE:
		n = snprintf(buf, len, "expected a size like 256M");
		if (k->min > 0 && n < len)
			snprintf(buf + n, len - n, ", at least %" PRIu64, k->min);
		return;
	case CFG_TYPE_FRACTION:
		snprintf(buf, len, "expected a fraction like 0.9 or 90%%");
		return;
	case CFG_TYPE_ENUM:
		/* "expected uring or sync", "expected a, b or c" */
		n = snprintf(buf, len, "expected");
		for (int i = 0; k->names[i] && n < len; i++) {
			const char *sep = i == 0 ? " " : k->names[i + 1] ? ", " : " or ";

			n += snprintf(buf + n, len - n, "%s%s", sep, k->names[i]);
		}
		return;
	case CFG_TYPE_UNSIGNED:
		snprintf(buf, len, "expected a whole number from %" PRIu64 " to %" PRIu64,
			 k->min, k->max);
		return;
	case CFG_TYPE_DURATION:
		n = snprintf(buf, len, "expected a duration like 90s, 15m, 24h or 7d");
		if (k->max < KVT_DURATION_MAX && n < len)
			snprintf(buf + n, len - n, ", from %" PRIu64 "s to %" PRIu64 "s",
				 k->min, k->max);
		else if (k->min > 0 && n < len)
			snprintf(buf + n, len - n, ", at least %" PRIu64 "s", k->min);
		return;
	case CFG_TYPE_MODE:
		snprintf(buf, len, "expected octal permission bits like 0644");
		return;
	case CFG_TYPE_LISTEN:
		snprintf(buf, len, "expected ADDR:PORT (IPv4, dotted decimal), [ADDR6]:PORT or "
			 "PORT, numeric, PORT from 0 to 65535");
		return;
	}
	snprintf(buf, len, "unknown type");
}

/* Records the first error of a file; returns 0, inih's "handler failed". */
static int cfg_fail(struct cfg_parse *p, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int cfg_fail(struct cfg_parse *p, int rc, const char *fmt, ...)
{
	va_list ap;

	if (p->err_line)
		return 0;
	p->err_line = p->lineno;
	p->err_rc = rc;
	va_start(ap, fmt);
	vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
	va_end(ap);
	return 0;
}

static bool cfg_section_known(const char *name, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
		if (strlen(cfg_keys[i].section) == len &&
		    memcmp(cfg_keys[i].section, name, len) == 0)
			return true;
	}
	return false;
}

/* s is a left-trimmed line starting with '['. */
static void cfg_check_section(struct cfg_parse *p, const char *s)
{
	const char *end = strchr(s + 1, ']');
	const char *rest;

	if (!end)
		return;		/* inih reports it as a syntax error */
	if (!cfg_section_known(s + 1, end - (s + 1))) {
		cfg_fail(p, -EINVAL, "unknown section [%.*s]", (int)(end - (s + 1)), s + 1);
		return;
	}
	/* inih ignores whatever follows ']': "[store] dir = /x" would lose a key. */
	rest = end + 1 + strspn(end + 1, " \t");
	if (*rest != '\0' && *rest != ';' && *rest != '#')
		cfg_fail(p, -EINVAL, "unexpected text after [%.*s]", (int)(end - (s + 1)), s + 1);
}

/*
 * inih's ini_reader: hands inih the next whole line of the file, without its
 * leading blanks, with a '\n', in str (num bytes). A line that does not fit
 * or holds a NUL byte is recorded as an error and handed over as a blank
 * line, so inih neither parses a piece of it nor miscounts lines. Memory is
 * bounded whatever the file: a line is read into a fixed buffer (the rest of
 * a longer one is only counted), and reading stops after CFG_MAX_FILE bytes,
 * since "--config /dev/zero" must fail, not eat the machine.
 */
static char *cfg_read_line(char *str, int num, void *stream)
{
	struct cfg_parse *p = stream;
	size_t len = 0, raw = 0;
	bool nul = false;
	char *s;
	int c;

	if (p->read_errno || num < 2)
		return NULL;	/* no inih has a buffer under 2 bytes */
	while ((c = getc(p->f)) != EOF && c != '\n') {
		if (++p->bytes > CFG_MAX_FILE) {
			p->read_errno = EFBIG;
			return NULL;
		}
		if (c == '\0')
			nul = true;
		if (raw < sizeof(p->buf) - 1)
			p->buf[raw] = c;
		raw++;
	}
	if (c == EOF) {
		if (ferror(p->f)) {
			p->read_errno = errno ? errno : EIO;
			return NULL;
		}
		if (raw == 0)
			return NULL;	/* the end; a last line without '\n' was read */
	}
	p->bytes++;
	p->lineno++;
	if (nul) {
		cfg_fail(p, -EINVAL, "line holds a NUL byte");
		goto blank;
	}
	if (raw >= sizeof(p->buf)) {
		cfg_fail(p, -EINVAL, "line is longer than %d bytes", num - 2);
		goto blank;
	}
	len = raw;
	while (len > 0 && p->buf[len - 1] == '\r')
		len--;
	p->buf[len] = '\0';
	s = p->buf;
	/* Strip a UTF-8 byte order mark here so the section check sees '['. */
	if (p->lineno == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3;
	while (isspace((unsigned char)*s))
		s++;
	len = strlen(s);
	if (len + 2 > (size_t)num) {
		cfg_fail(p, -EINVAL, "line is longer than %d bytes", num - 2);
		goto blank;
	}
	if (*s == '[') {
		cfg_check_section(p, s);
	} else if (*s && *s != ';' && *s != '#' && s[strcspn(s, "=:")] == ':') {
		/* inih splits "key : value" at the ':' too; the format is key = value. */
		cfg_fail(p, -EINVAL, "syntax error: expected [section] or key = value");
		goto blank;
	}
	memcpy(str, s, len);
	str[len] = '\n';
	str[len + 1] = '\0';
	return str;
blank:
	str[0] = '\n';
	str[1] = '\0';
	return str;
}

/* inih's handler: one "key = value" of [section]. Returns 0 on an error. */
static int cfg_handler(void *user, const char *section, const char *name, const char *value)
{
	struct cfg_parse *p = user;
	const struct cfg_key *k = NULL;
	bool known_section = false;
	char expect[128];
	size_t i;
	int rc;

	if (!name)
		return 1;	/* an inih built to report new sections: checked already */
	if (!value)		/* an inih built to allow keys without '=' */
		return cfg_fail(p, -EINVAL, "key '%s' in [%s] has no value", name, section);
	for (i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
		if (strcmp(cfg_keys[i].section, section) != 0)
			continue;
		known_section = true;
		if (strcmp(cfg_keys[i].name, name) == 0) {
			k = &cfg_keys[i];
			break;
		}
	}
	if (!k) {
		if (section[0] == '\0')
			return cfg_fail(p, -EINVAL, "key '%s' before any [section]", name);
		if (!known_section)
			return cfg_fail(p, -EINVAL, "unknown section [%s]", section);
		return cfg_fail(p, -EINVAL, "unknown key '%s' in [%s]", name, section);
	}
	if (p->seen[i])
		return cfg_fail(p, -EINVAL, "duplicate key '%s' in [%s], first set on line %d",
				name, section, p->seen[i]);
	p->seen[i] = p->lineno;
	rc = cfg_set(p->cfg, k, value);
	if (rc == -ENOMEM)
		return cfg_fail(p, rc, "out of memory");
	if (rc < 0) {
		cfg_expect(k, expect, sizeof(expect));
		return cfg_fail(p, rc, "bad value '%s' for [%s] %s: %s",
				value, section, name, expect);
	}
	return 1;
}

/* Rules between keys of [store]; msg gets "[store] ..." on failure. */
static int cfg_check_store(const struct kvt_config *cfg, const int *seen, int *line,
			   char *msg, size_t len)
{
	const uint64_t seg = cfg->store.segment_size;
	const double high = cfg->store.high_watermark;
	const double low = cfg->store.low_watermark;

	(void)seen;
	(void)line;
	/* Extents are 4 KiB-aligned O_DIRECT writes; a segment must hold whole ones. */
	if (seg % 4096 != 0) {
		snprintf(msg, len, "[store] segment_size must be a multiple of 4K");
		return -EINVAL;
	}
	if (seg < (1u << 20)) {
		snprintf(msg, len, "[store] segment_size must be at least 1M");
		return -EINVAL;
	}
	/* Reclaim frees whole segments: with one, there is none to write into meanwhile. */
	if (cfg->store.capacity / 2 < seg) {
		snprintf(msg, len, "[store] capacity must hold at least 2 segments of segment_size");
		return -EINVAL;
	}
	/* Segments are numbered with 32 bits (store.c: nsegs): more wrapped
	 * round to a store of capacity mod 2^32 segments, silently. */
	if (cfg->store.capacity / seg > UINT32_MAX) {
		snprintf(msg, len, "[store] capacity must be at most 4294967295 segments of segment_size");
		return -EINVAL;
	}
	if (!(low > 0)) {
		snprintf(msg, len, "[store] low_watermark must be above 0");
		return -EINVAL;
	}
	if (!(low < high)) {
		snprintf(msg, len, "[store] low_watermark must be below high_watermark");
		return -EINVAL;
	}
	if (!(high <= 1)) {
		snprintf(msg, len, "[store] high_watermark must be at most 1");
		return -EINVAL;
	}
	return 0;
}

/* [g4]: a url kvtier can open, or "none" (a pure cache node without a cold
 * tier); S3 parts within S3's limits (5M to 5G). */
static int cfg_check_g4(const struct kvt_config *cfg, const int *seen, int *line,
			char *msg, size_t len)
{
	const char *url = cfg->g4.url;

	(void)seen;
	(void)line;
	if (url && !(strncmp(url, "file:///", 8) == 0 || strcmp(url, "none") == 0 ||
		     (strncmp(url, "s3://", 5) == 0 && url[5] && url[5] != '/'))) {
		snprintf(msg, len, "[g4] url must be file:///DIR, s3://BUCKET/PREFIX or none");
		return -EINVAL;
	}
	if (cfg->g4.part_size < (5u << 20) || cfg->g4.part_size > (5ull << 30)) {
		snprintf(msg, len, "[g4] part_size must be from 5M to 5G");
		return -EINVAL;
	}
	return 0;
}

/* The line key section.name was set on (cfg_parse.seen), or 0. */
static int cfg_seen_line(const int *seen, const char *section, const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++)
		if (strcmp(cfg_keys[i].section, section) == 0 && strcmp(cfg_keys[i].name, name) == 0)
			return seen[i];
	return 0;
}

/*
 * [gateway]: libmicrohttpd shares max_connections out among the threads,
 * each serving its own share: with fewer connections than threads, the
 * threads beyond them (and their workers) never have one to serve.
 * *line gets the later line of the two keys.
 */
static int cfg_check_gateway(const struct kvt_config *cfg, const int *seen, int *line,
			     char *msg, size_t len)
{
	if (cfg->gateway.max_connections < cfg->gateway.threads) {
		*line = MAX(cfg_seen_line(seen, "gateway", "threads"),
			    cfg_seen_line(seen, "gateway", "max_connections"));
		snprintf(msg, len, "[gateway] max_connections (%u) must be at least threads (%u):"
			 " each thread serves its own share of the connections, and those"
			 " beyond them would never have one", cfg->gateway.max_connections,
			 cfg->gateway.threads);
		return -EINVAL;
	}
	return 0;
}

/* One per section whose keys must agree with each other; *line (0 if
 * unset) is the line to name. */
static int (*const cfg_checks[])(const struct kvt_config *cfg, const int *seen, int *line,
				 char *msg, size_t len) = {
	cfg_check_store,
	cfg_check_g4,
	cfg_check_gateway,
};

/* Keys whose field is a heap string. */
static int cfg_is_text(const struct cfg_key *k)
{
	return k->type == CFG_TYPE_PATH || k->type == CFG_TYPE_STRING || k->type == CFG_TYPE_LISTEN;
}

/* A deep copy of src; on failure dst holds nothing to release. */
static int cfg_copy(struct kvt_config *dst, const struct kvt_config *src)
{
	size_t i;

	*dst = *src;
	dst->path = NULL;
	for (i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
		if (cfg_is_text(&cfg_keys[i]))
			*(char **)cfg_field(dst, &cfg_keys[i]) = NULL;
	}
	if (src->path && !(dst->path = strdup(src->path)))
		goto nomem;
	for (i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
		char *s;

		if (!cfg_is_text(&cfg_keys[i]))
			continue;
		s = *(char *const *)((const char *)src + cfg_keys[i].offset);
		if (s && !(*(char **)cfg_field(dst, &cfg_keys[i]) = strdup(s)))
			goto nomem;
	}
	return 0;
nomem:
	kvt_config_release(dst);
	return -ENOMEM;
}

void kvt_config_init(struct kvt_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
		const struct cfg_key *k = &cfg_keys[i];
		int rc = k->def ? cfg_set(cfg, k, k->def) : 0;	/* no default: unset */

		/*
		 * The defaults are constants that test_config parses; what can
		 * fail is strdup() of a few bytes, and init has no way to say
		 * so. A process that cannot allocate that cannot run a store.
		 */
		if (rc < 0) {
			log_err(rc, "cannot set the default of [%s] %s", k->section, k->name);
			abort();
		}
	}
}

void kvt_config_release(struct kvt_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
		if (cfg_is_text(&cfg_keys[i])) {
			char **s = cfg_field(cfg, &cfg_keys[i]);

			free(*s);
			*s = NULL;
		}
	}
	free(cfg->path);
	cfg->path = NULL;
}

int kvt_config_load(struct kvt_config *cfg, const char *path, char *err, size_t errlen)
{
	struct cfg_parse p = { .f = NULL };
	struct kvt_config tmp;
	char ebuf[128], sink[1];
	int rc, line;

	if (!err || errlen == 0) {
		err = sink;
		errlen = sizeof(sink);
	}
	err[0] = '\0';
	if (!path) {
		snprintf(err, errlen, "no configuration file named");
		return -EINVAL;
	}
	rc = cfg_copy(&tmp, cfg);
	if (rc < 0) {
		snprintf(err, errlen, "%s: out of memory", path);
		return rc;
	}
	p.cfg = &tmp;
	p.f = fopen(path, "re");
	if (!p.f) {
		rc = -errno;
		snprintf(err, errlen, "%s: cannot open: %s", path,
			 cfg_strerror(rc, ebuf, sizeof(ebuf)));
		goto out;
	}
	line = ini_parse_stream(cfg_read_line, &p, cfg_handler, &p);
	if (p.read_errno) {
		/* e.g. EISDIR: fopen() of a directory succeeds, reading it fails. */
		rc = -p.read_errno;
		snprintf(err, errlen, "%s: cannot read: %s", path,
			 cfg_strerror(rc, ebuf, sizeof(ebuf)));
		goto out;
	}
	if (line == -2) {
		rc = -ENOMEM;
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	/*
	 * inih returns the first line that failed, ours or its own; a line
	 * before our first error is one inih could not parse (no '=', no ']').
	 */
	if (line > 0 && (p.err_line == 0 || line < p.err_line)) {
		rc = -EINVAL;
		snprintf(err, errlen, "%s:%d: syntax error: expected [section] or key = value",
			 path, line);
		goto out;
	}
	if (p.err_line) {
		rc = p.err_rc;
		snprintf(err, errlen, "%s:%d: %s", path, p.err_line, p.msg);
		goto out;
	}
	for (size_t i = 0; i < ARRAY_SIZE(cfg_checks); i++) {
		int at = 0;

		rc = cfg_checks[i](&tmp, p.seen, &at, p.msg, sizeof(p.msg));
		if (rc < 0 && at > 0) {
			snprintf(err, errlen, "%s:%d: %s", path, at, p.msg);
			goto out;
		}
		if (rc < 0) {
			snprintf(err, errlen, "%s: %s", path, p.msg);
			goto out;
		}
	}
	free(tmp.path);
	tmp.path = strdup(path);
	if (!tmp.path) {
		rc = -ENOMEM;
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	/* Success: cfg takes tmp's strings, tmp takes cfg's old ones to free. */
	{
		struct kvt_config old = *cfg;

		*cfg = tmp;
		tmp = old;
	}
	rc = 0;
out:
	kvt_config_release(&tmp);
	if (p.f)
		fclose(p.f);
	return rc;
}

int kvt_config_load_default(struct kvt_config *cfg, const char *path, char *err, size_t errlen)
{
	const char *env = getenv("KVTIER_CONF");
	const char *sys = SYSCONFDIR "/kvtier.conf";

	if (err && errlen > 0)
		err[0] = '\0';
	if (path)
		return kvt_config_load(cfg, path, err, errlen);
	/* Asked for by name: a missing file is an error, as for a path. */
	if (env && env[0] != '\0')
		return kvt_config_load(cfg, env, err, errlen);
	/*
	 * The installed file is optional: a fresh build runs on the defaults.
	 * Any other failure (EACCES) is loaded, so that it is reported.
	 */
	if (access(sys, F_OK) < 0 && (errno == ENOENT || errno == ENOTDIR))
		return 0;
	return kvt_config_load(cfg, sys, err, errlen);
}
