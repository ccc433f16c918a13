/*
 * fuzz_listen.c - fuzz target for the addresses kvtier-gateway listens on:
 * [gateway] listen and metrics_listen of kvtier.conf, --listen and
 * --metrics-listen (kvt_parse_listen, src/config.c).
 *
 * Input: the address, up to its first NUL (a command-line argument and a
 * value of kvtier.conf end there). Promises checked, each against a
 * statement of the rule written here:
 *  - an address is taken exactly when it is "A.B.C.D:PORT" (four decimal
 *    numbers 0..255 without leading zeros), ":PORT" or "PORT", or
 *    "[ADDR6]:PORT" with an IPv6 address inet_pton() takes (a scope,
 *    "%eth0", is the resolver's to judge); PORT is decimal, 0..65535;
 *  - what is taken has the family its form says, the port its digits say,
 *    and for IPv4 the very address written (0.0.0.0 for none);
 *  - it round-trips: printed by getnameinfo() as "HOST:PORT" or
 *    "[HOST]:PORT", it parses to the same address, port and scope.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int ok, const char *what, const char *s)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_listen: broken promise: %s (address '%s')\n", what, s);
	abort();
}

/* ---- the rule, stated again ---------------------------------------------- */

/* Decimal digits, any number of them (leading zeros too); -1 past 65535. */
static long ref_port(const char *s)
{
	long v = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
		if (v > 65535)
			return -1;
	}
	return v;
}

/* Four decimal numbers 0..255 between dots, none with a leading zero. */
static bool ref_ipv4(const char *s, size_t n)
{
	int parts = 0;
	size_t i = 0;

	while (parts < 4) {
		size_t start = i;
		unsigned v = 0;

		while (i < n && s[i] >= '0' && s[i] <= '9' && i - start < 4)
			v = v * 10 + (unsigned)(s[i++] - '0');
		if (i == start || i - start > 3 || v > 255 || (s[start] == '0' && i - start > 1))
			return false;
		if (++parts < 4) {
			if (i == n || s[i] != '.')
				return false;
			i++;
		}
	}
	return i == n;
}

struct ref_addr {
	bool ok;
	int family;
	long port;
	bool scoped;		/* an IPv6 address with "%scope" */
	char host[256];		/* as written, without brackets */
};

static struct ref_addr ref_parse(const char *s)
{
	struct ref_addr r = { .ok = false };
	const char *port, *h = s;
	size_t hlen;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		struct in6_addr a6;
		char *pct;

		if (!close || close[1] != ':')
			return r;
		h = s + 1;
		hlen = (size_t)(close - h);
		port = close + 2;
		if (hlen == 0 || hlen >= sizeof(r.host))
			return r;
		memcpy(r.host, h, hlen);
		r.host[hlen] = '\0';
		pct = strchr(r.host, '%');
		r.scoped = pct != NULL;
		if (pct)
			*pct = '\0';
		if (inet_pton(AF_INET6, r.host, &a6) != 1)
			return r;
		if (pct)
			*pct = '%';
		r.family = AF_INET6;
	} else {
		const char *colon = strrchr(s, ':');

		hlen = colon ? (size_t)(colon - s) : 0;
		port = colon ? colon + 1 : s;
		if (hlen >= sizeof(r.host) || (hlen && !ref_ipv4(s, hlen)))
			return r;
		memcpy(r.host, s, hlen);
		r.host[hlen] = '\0';
		r.family = AF_INET;
	}
	r.port = ref_port(port);
	r.ok = r.port >= 0;
	return r;
}

/* ---- the target ------------------------------------------------------------ */

static unsigned fuzz_port(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
					: ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* The same address, port and (IPv6) scope. */
static bool fuzz_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family || fuzz_port(a) != fuzz_port(b))
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0 &&
	       ((const struct sockaddr_in6 *)a)->sin6_scope_id ==
	       ((const struct sockaddr_in6 *)b)->sin6_scope_id;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_storage ss, again;
	socklen_t len = 0, len2 = 0;
	struct ref_addr ref;
	char host[NI_MAXHOST], serv[NI_MAXSERV], printed[NI_MAXHOST + NI_MAXSERV + 4];
	char *s;
	int rc;

	if (size > 4096)
		return 0;
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	rc = kvt_parse_listen(s, &ss, &len);
	ref = ref_parse(s);
	fuzz_require(rc == 0 || rc == -EINVAL, "a refusal is -EINVAL", s);
	if (rc < 0) {
		/* A scope the resolver does not know (no such interface) may be refused. */
		fuzz_require(!ref.ok || ref.scoped, "a well-formed address is taken", s);
		goto out;
	}
	fuzz_require(ref.ok, "only a well-formed address is taken", s);
	fuzz_require(ss.ss_family == ref.family, "the family its form says", s);
	fuzz_require(len == (ref.family == AF_INET ? sizeof(struct sockaddr_in)
						   : sizeof(struct sockaddr_in6)),
		     "the length of its family", s);
	fuzz_require(fuzz_port(&ss) == (unsigned)ref.port, "the port its digits say", s);

	fuzz_require(getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), serv,
				 sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0,
		     "a taken address can be printed", s);
	if (ref.family == AF_INET)
		fuzz_require(strcmp(host, ref.host[0] ? ref.host : "0.0.0.0") == 0,
			     "an IPv4 address is the one written", s);
	snprintf(printed, sizeof(printed), ref.family == AF_INET6 ? "[%s]:%s" : "%s:%s", host,
		 serv);
	fuzz_require(kvt_parse_listen(printed, &again, &len2) == 0 && len2 == len,
		     "its printed form is taken", s);
	fuzz_require(fuzz_same(&ss, &again), "its printed form is the same address", s);
out:
	free(s);
	return 0;
}
