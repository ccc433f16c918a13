/*
 * test_config.c - kvtier.conf parsing (src/config.c).
 *
 * Each test writes a small file with mkstemp(), loads it and checks either
 * the fields or the exact error line an operator would see: the message is
 * the interface here, since it is all a person has to find a typo with.
 * test_example_file keeps etc/kvtier.conf and the built-in defaults in step.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

/* Writes len bytes to a new temporary file; caller unlinks and frees. */
static char *conf_write_len(const char *text, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	char *path = malloc(512);
	int fd;

	assert_non_null(path);
	snprintf(path, 512, "%s/kvtier-conf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
	return path;
}

static char *conf_write(const char *text)
{
	return conf_write_len(text, strlen(text));
}

static void conf_remove(char *path)
{
	unlink(path);
	free(path);
}

/* Loads text into a fresh config; 0 or the load's negative errno. */
static int conf_load(struct kvt_config *cfg, const char *text, char *err, size_t errlen)
{
	char *path = conf_write(text);
	int rc;

	kvt_config_init(cfg);
	rc = kvt_config_load(cfg, path, err, errlen);
	if (rc == 0)
		assert_string_equal(cfg->path, path);
	conf_remove(path);
	return rc;
}

/*
 * Loads len bytes of text and checks that it fails with rc and the message
 * "<path><suffix>", e.g. suffix ":2: unknown key 'capacty' in [store]".
 */
static void expect_error_len(const char *text, size_t len, int rc, const char *suffix)
{
	struct kvt_config cfg, def;
	char *path = conf_write_len(text, len);
	char err[512], want[1024];

	kvt_config_init(&cfg);
	kvt_config_init(&def);
	assert_int_equal(kvt_config_load(&cfg, path, err, sizeof(err)), rc);
	snprintf(want, sizeof(want), "%s%s", path, suffix);
	assert_string_equal(err, want);
	/* A failed load changes nothing. */
	assert_null(cfg.path);
	assert_true(cfg.store.capacity == def.store.capacity);
	assert_string_equal(cfg.store.dir, def.store.dir);
	kvt_config_release(&cfg);
	kvt_config_release(&def);
	conf_remove(path);
}

static void expect_error(const char *text, int rc, const char *suffix)
{
	expect_error_len(text, strlen(text), rc, suffix);
}

static void assert_defaults(const struct kvt_config *cfg)
{
	assert_string_equal(cfg->store.dir, "/var/lib/kvtier");
	assert_true(cfg->store.capacity == 4ull << 30);
	assert_true(cfg->store.segment_size == 256ull << 20);
	assert_true(cfg->store.high_watermark == 0.90);
	assert_true(cfg->store.low_watermark == 0.80);
	assert_int_equal(cfg->store.io, KVT_IO_URING);
	assert_int_equal(cfg->store.session_depth, 1);
	assert_int_equal(cfg->store.access_flush_ms, 1000);
}

static void test_defaults(void **state)
{
	struct kvt_config cfg;

	(void)state;
	kvt_config_init(&cfg);
	assert_null(cfg.path);
	assert_defaults(&cfg);
	kvt_config_release(&cfg);
}

static void test_all_keys(void **state)
{
	struct kvt_config cfg;
	char err[512] = "untouched";

	(void)state;
	assert_int_equal(conf_load(&cfg,
		"[store]\n"
		"dir = /srv/kvtier data\n"
		"capacity = 2T\n"
		"segment_size = 1G\n"
		"high_watermark = 0.95\n"
		"low_watermark = 0.5\n"
		"io = sync\n"
		"session_depth = 16\n"
		"access_flush_ms = 250\n", err, sizeof(err)), 0);
	assert_string_equal(err, "");
	assert_string_equal(cfg.store.dir, "/srv/kvtier data");
	assert_true(cfg.store.capacity == 2ull << 40);
	assert_true(cfg.store.segment_size == 1ull << 30);
	assert_true(cfg.store.high_watermark == 0.95);
	assert_true(cfg.store.low_watermark == 0.5);
	assert_int_equal(cfg.store.io, KVT_IO_SYNC);
	assert_int_equal(cfg.store.session_depth, 16);
	assert_int_equal(cfg.store.access_flush_ms, 250);
	kvt_config_release(&cfg);
}

/* Keys not in the file keep their defaults. */
static void test_partial_file(void **state)
{
	struct kvt_config cfg;
	char err[512];

	(void)state;
	assert_int_equal(conf_load(&cfg, "[store]\nio = sync\n", err, sizeof(err)), 0);
	assert_int_equal(cfg.store.io, KVT_IO_SYNC);
	cfg.store.io = KVT_IO_URING;
	assert_defaults(&cfg);
	kvt_config_release(&cfg);
}

static void test_size_suffixes(void **state)
{
	static const struct { const char *text; uint64_t bytes; } cases[] = {
		{ "8589934592", 8ull << 30 },
		{ "8388608K", 8ull << 30 },
		{ "8192M", 8ull << 30 },
		{ "8G", 8ull << 30 },
		{ "8g", 8ull << 30 },
		{ "8Gi", 8ull << 30 },
		{ "8GiB", 8ull << 30 },
		{ "8gib", 8ull << 30 },
		{ "8GB", 8ull << 30 },
		{ "1T", 1ull << 40 },
		{ "1TiB", 1ull << 40 },
	};
	char text[128], err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvt_config cfg;

		snprintf(text, sizeof(text), "[store]\ncapacity = %s\n", cases[i].text);
		assert_int_equal(conf_load(&cfg, text, err, sizeof(err)), 0);
		assert_true(cfg.store.capacity == cases[i].bytes);
		kvt_config_release(&cfg);
	}
}

static void test_percent_watermarks(void **state)
{
	static const struct { const char *high, *low; double h, l; } cases[] = {
		{ "95%", "85%", 0.95, 0.85 },
		{ "85.5%", "0.5%", 0.855, 0.005 },
		{ "100%", "1%", 1.0, 0.01 },
		{ "1", ".8", 1.0, 0.8 },
		{ "0.9", "80%", 0.9, 0.8 },	/* mixed spellings */
		{ "0.90000000000000000000", "0.000001", 0.9, 0.000001 },
		{ "099.99999999999999999%", "0000.5", 0.999999999999999, 0.5 },
	};
	char text[128], err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvt_config cfg;

		snprintf(text, sizeof(text),
			 "[store]\nhigh_watermark = %s\nlow_watermark = %s\n",
			 cases[i].high, cases[i].low);
		assert_int_equal(conf_load(&cfg, text, err, sizeof(err)), 0);
		/* Exact: "90%" must give the same double as 0.9 does. */
		assert_true(cfg.store.high_watermark == cases[i].h);
		assert_true(cfg.store.low_watermark == cases[i].l);
		kvt_config_release(&cfg);
	}
}

static void test_unknown_key(void **state)
{
	(void)state;
	expect_error("[store]\ncapacty = 2T\n", -EINVAL,
		     ":2: unknown key 'capacty' in [store]");
	expect_error("; comment\n\n[store]\ndir = /x\nDir = /y\n", -EINVAL,
		     ":5: unknown key 'Dir' in [store]");
}

static void test_unknown_section(void **state)
{
	(void)state;
	expect_error("[stor]\ncapacity = 2T\n", -EINVAL, ":1: unknown section [stor]");
	/* An empty section is caught too, though inih reports no key in it. */
	expect_error("[store]\ncapacity = 8G\n\n[gatewayy]\n", -EINVAL,
		     ":4: unknown section [gatewayy]");
	expect_error("[]\n", -EINVAL, ":1: unknown section []");
	expect_error("[ store ]\n", -EINVAL, ":1: unknown section [ store ]");
	expect_error("dir = /x\n", -EINVAL, ":1: key 'dir' before any [section]");
	/* inih would drop what follows ']'. */
	expect_error("[store] capacity = 8G\n", -EINVAL,
		     ":1: unexpected text after [store]");
}

static void test_bad_values(void **state)
{
	static const struct { const char *line, *suffix; } cases[] = {
		{ "capacity = abc", "bad value 'abc' for [store] capacity: expected a size like 256M" },
		{ "capacity = -1G", "bad value '-1G' for [store] capacity: expected a size like 256M" },
		{ "capacity = 1.5G", "bad value '1.5G' for [store] capacity: expected a size like 256M" },
		{ "capacity = 4 G", "bad value '4 G' for [store] capacity: expected a size like 256M" },
		{ "capacity = 4G # half", "bad value '4G # half' for [store] capacity: expected a size like 256M" },
		{ "capacity = 16777216T", "bad value '16777216T' for [store] capacity: expected a size like 256M" },
		{ "capacity =", "bad value '' for [store] capacity: expected a size like 256M" },
		{ "segment_size = 0x100000", "bad value '0x100000' for [store] segment_size: expected a size like 256M" },
		{ "high_watermark = 95", "bad value '95' for [store] high_watermark: expected a fraction like 0.9 or 90%" },
		{ "high_watermark = 101%", "bad value '101%' for [store] high_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = 0,8", "bad value '0,8' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = 8e-1", "bad value '8e-1' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = nan", "bad value 'nan' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = -0.5", "bad value '-0.5' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = .", "bad value '.' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = 1000000000000000", "bad value '1000000000000000' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = 0.5.", "bad value '0.5.' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "low_watermark = 50%%", "bad value '50%%' for [store] low_watermark: expected a fraction like 0.9 or 90%" },
		{ "io = aio", "bad value 'aio' for [store] io: expected uring or sync" },
		{ "io = URING", "bad value 'URING' for [store] io: expected uring or sync" },
		{ "session_depth = 0", "bad value '0' for [store] session_depth: expected a whole number from 1 to 16" },
		{ "session_depth = 17", "bad value '17' for [store] session_depth: expected a whole number from 1 to 16" },
		{ "session_depth = 2x", "bad value '2x' for [store] session_depth: expected a whole number from 1 to 16" },
		{ "access_flush_ms = 0", "bad value '0' for [store] access_flush_ms: expected a whole number from 1 to 86400000" },
		{ "access_flush_ms = 99999999999999999999", "bad value '99999999999999999999' for [store] access_flush_ms: expected a whole number from 1 to 86400000" },
		{ "dir = var/lib/kvtier", "bad value 'var/lib/kvtier' for [store] dir: expected an absolute path" },
		{ "dir = \"/var/lib/kvtier\"", "bad value '\"/var/lib/kvtier\"' for [store] dir: expected an absolute path" },
		{ "dir =", "bad value '' for [store] dir: expected an absolute path" },
	};
	char text[256], suffix[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(text, sizeof(text), "[store]\n%s\n", cases[i].line);
		snprintf(suffix, sizeof(suffix), ":2: %s", cases[i].suffix);
		expect_error(text, -EINVAL, suffix);
	}
}

/*
 * [gateway] values the gateway would not honour are refused at load: before,
 * max_object = 0 refused every PUT, upload_max_age = 0 became 7d and a
 * timeout past 100000s became 100000s, all without a word.
 */
static void test_gateway_ranges(void **state)
{
	static const struct { const char *line, *suffix; } cases[] = {
		{ "max_object = 0", "bad value '0' for [gateway] max_object: expected a size like 256M, at least 1" },
		{ "upload_max_age = 0", "bad value '0' for [gateway] upload_max_age: expected a duration like 90s, 15m, 24h or 7d, at least 1s" },
		{ "timeout = 36500d", "bad value '36500d' for [gateway] timeout: expected a duration like 90s, 15m, 24h or 7d, from 0s to 100000s" },
		{ "timeout = 100001", "bad value '100001' for [gateway] timeout: expected a duration like 90s, 15m, 24h or 7d, from 0s to 100000s" },
		{ "max_connections = 1000001", "bad value '1000001' for [gateway] max_connections: expected a whole number from 1 to 1000000" },
		{ "threads = 1025", "bad value '1025' for [gateway] threads: expected a whole number from 1 to 1024" },
	};
	struct kvt_config cfg;
	char text[256], suffix[512], err[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(text, sizeof(text), "[gateway]\n%s\n", cases[i].line);
		snprintf(suffix, sizeof(suffix), ":2: %s", cases[i].suffix);
		expect_error(text, -EINVAL, suffix);
	}
	/* The limits themselves are honoured as written; a timeout of 0 is none. */
	assert_int_equal(conf_load(&cfg, "[gateway]\nmax_object = 1\nupload_max_age = 1s\n"
				   "timeout = 100000s\nmax_connections = 1000000\nthreads = 1024\n",
				   err, sizeof(err)), 0);
	assert_true(cfg.gateway.max_object == 1);
	assert_true(cfg.gateway.upload_max_age == 1);
	assert_true(cfg.gateway.timeout == KVT_GW_TIMEOUT_MAX);
	assert_int_equal(cfg.gateway.max_connections, KVT_GW_CONNECTIONS_MAX);
	assert_int_equal(cfg.gateway.threads, KVT_GW_THREADS_MAX);
	kvt_config_release(&cfg);
	assert_int_equal(conf_load(&cfg, "[gateway]\ntimeout = 0\n", err, sizeof(err)), 0);
	assert_true(cfg.gateway.timeout == 0);
	kvt_config_release(&cfg);
}

/*
 * Listen addresses are numeric and strict: getaddrinfo(), which the gateway
 * used alone, wrapped port 65536 to 0 and 70000 to 4464, read 010.0.0.1 as
 * 8.0.0.1 and 127.1 as 127.0.0.1, and took ::1:9000 for [::1]:9000; and a
 * bad address in kvtier.conf is refused at load, naming its line, as every
 * other bad value.
 */
static void test_listen(void **state)
{
	static const struct { const char *s; int family; const char *addr; unsigned port; } ok[] = {
		{ "127.0.0.1:9000", AF_INET, "127.0.0.1", 9000 },
		{ "0.0.0.0:65535", AF_INET, "0.0.0.0", 65535 },
		{ "10.1.2.3:0", AF_INET, "10.1.2.3", 0 },
		{ ":9000", AF_INET, "0.0.0.0", 9000 },
		{ "9000", AF_INET, "0.0.0.0", 9000 },
		{ "0", AF_INET, "0.0.0.0", 0 },
		{ "[::1]:9000", AF_INET6, "::1", 9000 },
		{ "[::]:00080", AF_INET6, "::", 80 },
		{ "[0:0::1]:1", AF_INET6, "::1", 1 },
		{ "[::ffff:1.2.3.4]:5", AF_INET6, "::ffff:1.2.3.4", 5 },
	};
	static const char *const bad[] = {
		"127.0.0.1:65536", "127.0.0.1:70000", "127.0.0.1:99999999999999999999",
		"010.0.0.1:80", "127.1:80", "2130706433:80", "0x7f.0.0.1:80", "1:80",
		"127.0.0.1:+80", "127.0.0.1: 80", "127.0.0.1:-1", "127.0.0.1:0x50", "127.0.0.1:",
		"127.0.0.1", "127.0.0.1 :80", "localhost:80", "::1:9000", "::1", "[::1]", "[::1]:",
		"[::1]9000", "[127.0.0.1]:80", "[]:80", "[::1:80", "", ":", "[", "]:80",
	};
	struct sockaddr_storage ss;
	socklen_t len;
	struct kvt_config cfg;
	char text[256], suffix[512], err[512], addr[64];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		const void *a;
		unsigned port;

		len = 0;
		if (kvt_parse_listen(ok[i].s, &ss, &len) != 0)
			fail_msg("'%s' refused", ok[i].s);
		assert_int_equal(ss.ss_family, ok[i].family);
		if (ok[i].family == AF_INET) {
			a = &((struct sockaddr_in *)&ss)->sin_addr;
			port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
			assert_int_equal(len, sizeof(struct sockaddr_in));
		} else {
			a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
			port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
			assert_int_equal(len, sizeof(struct sockaddr_in6));
		}
		assert_non_null(inet_ntop(ok[i].family, a, addr, sizeof(addr)));
		assert_string_equal(addr, ok[i].addr);
		assert_int_equal(port, ok[i].port);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (kvt_parse_listen(bad[i], &ss, &len) != -EINVAL)
			fail_msg("'%s' taken", bad[i]);
	for (int metrics = 0; metrics < 2; metrics++) {
		const char *key = metrics ? "metrics_listen" : "listen";

		snprintf(text, sizeof(text), "[gateway]\n%s = 127.0.0.1:65536\n", key);
		snprintf(suffix, sizeof(suffix), ":2: bad value '127.0.0.1:65536' for [gateway] %s: "
			 "expected ADDR:PORT (IPv4, dotted decimal), [ADDR6]:PORT or PORT, numeric, "
			 "PORT from 0 to 65535", key);
		expect_error(text, -EINVAL, suffix);
		snprintf(text, sizeof(text), "[gateway]\n%s = [::1]:9100\n", key);
		assert_int_equal(conf_load(&cfg, text, err, sizeof(err)), 0);
		assert_string_equal(metrics ? cfg.gateway.metrics_listen : cfg.gateway.listen,
				    "[::1]:9100");
		kvt_config_release(&cfg);
	}
}

static void test_cross_checks(void **state)
{
	(void)state;
	expect_error("[store]\nsegment_size = 1000000\n", -EINVAL,
		     ": [store] segment_size must be a multiple of 4K");
	expect_error("[store]\nsegment_size = 512K\n", -EINVAL,
		     ": [store] segment_size must be at least 1M");
	expect_error("[store]\ncapacity = 256M\n", -EINVAL,
		     ": [store] capacity must hold at least 2 segments of segment_size");
	expect_error("[store]\ncapacity = 3G\nsegment_size = 2G\n", -EINVAL,
		     ": [store] capacity must hold at least 2 segments of segment_size");
	/* 2^32 + 3 segments of 4M: wrapped to a 12 MiB store before. */
	expect_error("[store]\ncapacity = 18014398526242816\nsegment_size = 4M\n", -EINVAL,
		     ": [store] capacity must be at most 4294967295 segments of segment_size");
	expect_error("[store]\ncapacity = 16384T\nsegment_size = 4M\n", -EINVAL,
		     ": [store] capacity must be at most 4294967295 segments of segment_size");
	expect_error("[store]\nlow_watermark = 0\n", -EINVAL,
		     ": [store] low_watermark must be above 0");
	expect_error("[store]\nlow_watermark = 0.9\n", -EINVAL,
		     ": [store] low_watermark must be below high_watermark");
	expect_error("[store]\nhigh_watermark = 50%\n", -EINVAL,
		     ": [store] low_watermark must be below high_watermark");
	/* Threads beyond the connections never serve one: the later line of
	 * the two is named (the default threads is 4). */
	expect_error("[gateway]\nmax_connections = 2\n", -EINVAL,
		     ":2: [gateway] max_connections (2) must be at least threads (4): each thread"
		     " serves its own share of the connections, and those beyond them would"
		     " never have one");
	expect_error("[gateway]\nmax_connections = 7\n\nthreads = 8\n", -EINVAL,
		     ":4: [gateway] max_connections (7) must be at least threads (8): each thread"
		     " serves its own share of the connections, and those beyond them would"
		     " never have one");
}

/* The limits themselves are accepted. */
static void test_cross_check_limits(void **state)
{
	struct kvt_config cfg;
	char err[512];

	(void)state;
	assert_int_equal(conf_load(&cfg,
		"[store]\ncapacity = 2M\nsegment_size = 1M\n"
		"high_watermark = 1\nlow_watermark = 0.999\n", err, sizeof(err)), 0);
	assert_true(cfg.store.capacity == 2u << 20);
	assert_true(cfg.store.segment_size == 1u << 20);
	kvt_config_release(&cfg);
}

static void test_missing_file(void **state)
{
	struct kvt_config cfg;
	char err[512];

	(void)state;
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, "/nonexistent/kvtier.conf", err, sizeof(err)),
			 -ENOENT);
	assert_string_equal(err, "/nonexistent/kvtier.conf: cannot open: No such file or directory");
	assert_null(cfg.path);
	assert_defaults(&cfg);
	kvt_config_release(&cfg);
}

static void test_directory(void **state)
{
	struct kvt_config cfg;
	char err[512];

	(void)state;
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, "/", err, sizeof(err)), -EISDIR);
	assert_string_equal(err, "/: cannot read: Is a directory");
	kvt_config_release(&cfg);
}

static void test_empty_file(void **state)
{
	struct kvt_config cfg;
	char err[512];

	(void)state;
	assert_int_equal(conf_load(&cfg, "", err, sizeof(err)), 0);
	assert_non_null(cfg.path);
	assert_defaults(&cfg);
	kvt_config_release(&cfg);
	/* Only comments and a section without keys. */
	assert_int_equal(conf_load(&cfg, "# nothing\n; here\n\n[store]\n", err, sizeof(err)), 0);
	assert_defaults(&cfg);
	kvt_config_release(&cfg);
}

static void test_comments(void **state)
{
	struct kvt_config cfg;
	char err[512];

	(void)state;
	assert_int_equal(conf_load(&cfg,
		"\xEF\xBB\xBF# kvtier.conf, with a UTF-8 byte order mark\r\n"
		"; a comment\r\n"
		"   # an indented comment\r\n"
		"\r\n"
		"[store] ; the hot tier\r\n"
		"capacity = 8G ; an inline comment\r\n"
		"\t  segment_size=512M\r\n"		/* indented: not a continuation */
		"  [store]\r\n"				/* a section may come back */
		"io\t=\tsync\r\n"
		"session_depth = 2", err, sizeof(err)), 0);	/* no final newline */
	assert_true(cfg.store.capacity == 8ull << 30);
	assert_true(cfg.store.segment_size == 512ull << 20);
	assert_int_equal(cfg.store.io, KVT_IO_SYNC);
	assert_int_equal(cfg.store.session_depth, 2);
	kvt_config_release(&cfg);
}

static void test_syntax_errors(void **state)
{
	(void)state;
	expect_error("[store]\ncapacity\n", -EINVAL,
		     ":2: syntax error: expected [section] or key = value");
	expect_error("[store\ncapacity = 8G\n", -EINVAL,
		     ":1: syntax error: expected [section] or key = value");
	/* inih splits at ':' as at '='; the documented format is key = value. */
	expect_error("[store]\ncapacity : 8G\n", -EINVAL,
		     ":2: syntax error: expected [section] or key = value");
	expect_error("[gateway]\nlisten: 127.0.0.1:9000\n", -EINVAL,
		     ":2: syntax error: expected [section] or key = value");
	/* The first error in the file is the one reported, whoever found it. */
	expect_error("[store]\ncapacty = 8G\ngarbage\n", -EINVAL,
		     ":2: unknown key 'capacty' in [store]");
	expect_error("[store]\ngarbage\ncapacty = 8G\n", -EINVAL,
		     ":2: syntax error: expected [section] or key = value");
}

static void test_duplicate_key(void **state)
{
	(void)state;
	expect_error("[store]\ncapacity = 8G\nio = sync\n[store]\ncapacity = 16G\n", -EINVAL,
		     ":5: duplicate key 'capacity' in [store], first set on line 2");
}

/* inih would split a long line and count its pieces as lines. */
static void test_long_line(void **state)
{
	char text[1024];
	struct kvt_config cfg;
	char *path, err[512], want[600];
	int n;

	(void)state;
	n = snprintf(text, sizeof(text), "[store]\ndir = /");
	memset(text + n, 'x', 500);
	snprintf(text + n + 500, sizeof(text) - n - 500, "\ncapacty = 1G\n");
	path = conf_write(text);
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: line is longer than ", path);
	assert_memory_equal(err, want, strlen(want));
	kvt_config_release(&cfg);
	conf_remove(path);
	/* A line of 150 bytes fits any inih build we know of. */
	n = snprintf(text, sizeof(text), "[store]\ndir = /");
	memset(text + n, 'y', 150);
	snprintf(text + n + 150, sizeof(text) - n - 150, "\ncapacity = 1G\n");
	assert_int_equal(conf_load(&cfg, text, err, sizeof(err)), 0);
	assert_int_equal(strlen(cfg.store.dir), 151);
	assert_true(cfg.store.capacity == 1u << 30);
	kvt_config_release(&cfg);
}

/* Memory stays bounded: a huge line is counted, not stored; a huge file fails. */
static void test_huge_input(void **state)
{
	const size_t big = 2 << 20;
	char *text = malloc(big + 1);
	struct kvt_config cfg;
	char *path, err[512], want[600];
	int n;

	(void)state;
	assert_non_null(text);
	n = snprintf(text, big, "[store]\n\ndir = /");
	memset(text + n, 'x', 100000);
	strcpy(text + n + 100000, "\ncapacity = 1G\n");
	path = conf_write(text);
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:3: line is longer than ", path);
	assert_memory_equal(err, want, strlen(want));
	conf_remove(path);

	/* Over 1M of comments: whatever it is, it is not a kvtier.conf. */
	for (size_t i = 0; i < big; i += 64)
		memcpy(text + i, "# padding padding padding padding padding padding padding paddi\n", 64);
	text[big] = '\0';
	path = conf_write(text);
	assert_int_equal(kvt_config_load(&cfg, path, err, sizeof(err)), -EFBIG);
	snprintf(want, sizeof(want), "%s: cannot read: File too large", path);
	assert_string_equal(err, want);
	conf_remove(path);

	assert_int_equal(kvt_config_load(&cfg, "/dev/zero", err, sizeof(err)), -EFBIG);
	assert_string_equal(err, "/dev/zero: cannot read: File too large");
	assert_null(cfg.path);
	assert_defaults(&cfg);
	kvt_config_release(&cfg);
	free(text);
}

static void test_nul_byte(void **state)
{
	static const char text[] = "[store]\ncapacity = 8G\0junk\nio = sync\n";

	(void)state;
	expect_error_len(text, sizeof(text) - 1, -EINVAL, ":2: line holds a NUL byte");
}

/* A failed load leaves cfg as it was; a good one overlays it. */
static void test_load_is_atomic(void **state)
{
	struct kvt_config cfg;
	char *a = conf_write("[store]\ncapacity = 8G\ndir = /a\n");
	char *b = conf_write("[store]\ncapacity = 16G\ndir = /b\nbogus = 1\n");
	char *c = conf_write("[store]\nio = sync\n");
	char err[512];

	(void)state;
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, a, err, sizeof(err)), 0);
	assert_int_equal(kvt_config_load(&cfg, b, err, sizeof(err)), -EINVAL);
	assert_string_equal(cfg.path, a);
	assert_string_equal(cfg.store.dir, "/a");
	assert_true(cfg.store.capacity == 8ull << 30);
	assert_int_equal(kvt_config_load(&cfg, c, err, sizeof(err)), 0);
	assert_string_equal(cfg.path, c);
	assert_string_equal(cfg.store.dir, "/a");
	assert_true(cfg.store.capacity == 8ull << 30);
	assert_int_equal(cfg.store.io, KVT_IO_SYNC);
	kvt_config_release(&cfg);
	conf_remove(a);
	conf_remove(b);
	conf_remove(c);
}

static void test_release_twice(void **state)
{
	struct kvt_config cfg;
	char err[512];

	(void)state;
	kvt_config_init(&cfg);
	kvt_config_release(&cfg);
	kvt_config_release(&cfg);
	assert_null(cfg.store.dir);
	assert_null(cfg.path);
	assert_int_equal(conf_load(&cfg, "[store]\ndir = /x\n", err, sizeof(err)), 0);
	kvt_config_release(&cfg);
	kvt_config_release(&cfg);
	kvt_config_release(NULL);
}

static void test_error_buffer(void **state)
{
	struct kvt_config cfg;
	char *path = conf_write("[store]\ncapacty = 2T\n");
	char err[10];

	(void)state;
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, NULL, err, sizeof(err)), -EINVAL);
	assert_true(kvt_config_load_default(&cfg, NULL, NULL, 0) <= 0);
	assert_int_equal(kvt_config_load(&cfg, path, NULL, 0), -EINVAL);
	assert_int_equal(kvt_config_load(&cfg, path, err, 0), -EINVAL);
	memset(err, 'z', sizeof(err));
	assert_int_equal(kvt_config_load(&cfg, path, err, sizeof(err)), -EINVAL);
	assert_int_equal(strlen(err), sizeof(err) - 1);
	assert_memory_equal(err, path, sizeof(err) - 1);
	kvt_config_release(&cfg);
	conf_remove(path);
}

static void test_load_default(void **state)
{
	struct kvt_config cfg;
	char *path = conf_write("[store]\nsession_depth = 3\n");
	char err[512];
	const char *saved = getenv("KVTIER_CONF");
	char *keep = saved ? strdup(saved) : NULL;

	(void)state;
	/* An explicit path wins over the environment. */
	setenv("KVTIER_CONF", "/nonexistent/kvtier.conf", 1);
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load_default(&cfg, path, err, sizeof(err)), 0);
	assert_int_equal(cfg.store.session_depth, 3);
	kvt_config_release(&cfg);

	/* $KVTIER_CONF names a file that must exist. */
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load_default(&cfg, NULL, err, sizeof(err)), -ENOENT);
	assert_string_equal(err, "/nonexistent/kvtier.conf: cannot open: No such file or directory");
	kvt_config_release(&cfg);

	setenv("KVTIER_CONF", path, 1);
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load_default(&cfg, NULL, err, sizeof(err)), 0);
	assert_int_equal(cfg.store.session_depth, 3);
	assert_string_equal(cfg.path, path);
	kvt_config_release(&cfg);

	/* Unset or empty: SYSCONFDIR/kvtier.conf if it exists, else the defaults. */
	for (int empty = 0; empty < 2; empty++) {
		if (empty)
			setenv("KVTIER_CONF", "", 1);
		else
			unsetenv("KVTIER_CONF");
		if (access(SYSCONFDIR "/kvtier.conf", F_OK) == 0)
			break;	/* installed here: its content is not ours to know */
		kvt_config_init(&cfg);
		strcpy(err, "untouched");
		assert_int_equal(kvt_config_load_default(&cfg, NULL, err, sizeof(err)), 0);
		assert_string_equal(err, "");
		assert_null(cfg.path);
		assert_defaults(&cfg);
		kvt_config_release(&cfg);
	}

	if (keep)
		setenv("KVTIER_CONF", keep, 1);
	else
		unsetenv("KVTIER_CONF");
	free(keep);
	conf_remove(path);
}

/*
 * Every key man/kvtier.conf.5 documents (".BI key \" = \" ...", with more
 * than one a line as ", key2 = ") is shown in etc/kvtier.conf as "#key = ":
 * the man page says the example shows every key, and it lacked three.
 */
static void test_example_shows_man_keys(void **state)
{
	const char *top = getenv("top_srcdir");
	char path[512], line[512], key[64], want[80];
	char *example = NULL;
	size_t len = 0;
	unsigned keys = 0;
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/etc/kvtier.conf", top && *top ? top : ".");
	f = fopen(path, "r");
	assert_non_null(f);
	assert_true(getdelim(&example, &len, '\0', f) > 0);
	fclose(f);
	snprintf(path, sizeof(path), "%s/man/kvtier.conf.5", top && *top ? top : ".");
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *s = line + 4;

		if (strncmp(line, ".BI ", 4) != 0)
			continue;
		for (;;) {
			size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz_0123456789");

			if (n == 0 || n >= sizeof(key) || (strncmp(s + n, " \" = \"", 6) != 0 &&
							   strncmp(s + n, " = ", 3) != 0))
				break;
			memcpy(key, s, n);
			key[n] = '\0';
			snprintf(want, sizeof(want), "\n#%s = ", key);
			if (!strstr(example, want))
				fail_msg("etc/kvtier.conf does not show '%s'", key);
			keys++;
			s = strstr(s + n, "\", ");
			if (!s)
				break;
			s += 3;
		}
	}
	fclose(f);
	assert_true(keys >= 30);
	free(example);
}

/*
 * etc/kvtier.conf shows every key commented out as "#key = default". It must
 * load as it is, and again with those keys uncommented, giving the built-in
 * defaults both times: the example cannot drift from the code.
 */
static void test_example_file(void **state)
{
	static const char *const keys[] = {
		"dir", "capacity", "segment_size", "high_watermark", "low_watermark",
		"io", "session_depth", "access_flush_ms",
	};
	const char *top = getenv("top_srcdir");
	char path[512], line[512], err[512];
	char *text = NULL, *tmp;
	size_t textlen = 0;
	unsigned found = 0;
	struct kvt_config cfg;
	FILE *in, *out;

	(void)state;
	snprintf(path, sizeof(path), "%s/etc/kvtier.conf", top && *top ? top : ".");
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, path, err, sizeof(err)), 0);
	assert_defaults(&cfg);
	kvt_config_release(&cfg);

	in = fopen(path, "r");
	assert_non_null(in);
	out = open_memstream(&text, &textlen);
	assert_non_null(out);
	while (fgets(line, sizeof(line), in)) {
		size_t n = strspn(line + 1, "abcdefghijklmnopqrstuvwxyz_");

		if (line[0] == '#' && n > 0 && strncmp(line + 1 + n, " = ", 3) == 0) {
			for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
				if (strlen(keys[i]) == n && strncmp(line + 1, keys[i], n) == 0)
					found |= 1u << i;
			}
			fputs(line + 1, out);
		} else {
			fputs(line, out);
		}
	}
	fclose(in);
	fclose(out);
	assert_int_equal(found, (1u << (sizeof(keys) / sizeof(keys[0]))) - 1);
	tmp = conf_write(text);
	free(text);
	kvt_config_init(&cfg);
	assert_int_equal(kvt_config_load(&cfg, tmp, err, sizeof(err)), 0);
	assert_defaults(&cfg);
	kvt_config_release(&cfg);
	conf_remove(tmp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_all_keys),
		cmocka_unit_test(test_partial_file),
		cmocka_unit_test(test_size_suffixes),
		cmocka_unit_test(test_percent_watermarks),
		cmocka_unit_test(test_unknown_key),
		cmocka_unit_test(test_unknown_section),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_gateway_ranges),
		cmocka_unit_test(test_listen),
		cmocka_unit_test(test_cross_checks),
		cmocka_unit_test(test_cross_check_limits),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_directory),
		cmocka_unit_test(test_empty_file),
		cmocka_unit_test(test_comments),
		cmocka_unit_test(test_syntax_errors),
		cmocka_unit_test(test_duplicate_key),
		cmocka_unit_test(test_long_line),
		cmocka_unit_test(test_huge_input),
		cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_load_is_atomic),
		cmocka_unit_test(test_release_twice),
		cmocka_unit_test(test_error_buffer),
		cmocka_unit_test(test_load_default),
		cmocka_unit_test(test_example_file),
		cmocka_unit_test(test_example_shows_man_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
