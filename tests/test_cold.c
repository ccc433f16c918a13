/*
 * test_cold.c - the cold tier (src/cold*.c) and the library side of G4
 * (src/migrate.c): the file:// layout, demotion, recall on read, import on
 * a second store, and faults from a partner that fails, lies about a put or
 * damages a get. Through every fault: nothing is lost, the error is clear,
 * and a later run completes. Two processes' background demoters on one
 * store never run a pass at once (the "demoter" lock). The S3 tier's
 * answers to conditional requests are read as a fake partner gives them
 * (fake_s3_start()).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "testlib.h"
#include "util.h"

#define CAP (64u << 20)
#define SEG (4u << 20)

/* A scratch store whose G4 is the default, file://<store dir>/g4 (testlib
 * makes pure cache nodes). */
static void g4_env_init(struct test_env *env, uint64_t capacity, uint64_t segment_size)
{
	test_env_init(env, capacity, segment_size);
	free(env->cfg.g4.url);
	env->cfg.g4.url = NULL;
}

/* The scratch stores of a and b, that share one G4 directory (under a's). */
static void two_envs(struct test_env *a, struct test_env *b)
{
	char url[600];

	g4_env_init(a, CAP, SEG);
	g4_env_init(b, CAP, SEG);
	snprintf(url, sizeof(url), "file://%s/shared-g4", a->dir);
	a->cfg.g4.url = strdup(url);
	b->cfg.g4.url = strdup(url);
}

/* Two stores, a's and b's, that share one G4 directory (under a's). */
static void two_nodes(struct test_env *a, struct test_env *b, struct kvt_store **sa,
		      struct kvt_store **sb)
{
	two_envs(a, b);
	*sa = test_store_open(a);
	*sb = test_store_open(b);
}

static void two_nodes_close(struct test_env *a, struct test_env *b, struct kvt_store *sa,
			    struct kvt_store *sb)
{
	kvt_store_close(sa);
	kvt_store_close(sb);
	test_env_release(a);
	test_env_release(b);
}

static int src_bytes(void *arg, void *buf, size_t len, uint64_t off)
{
	test_fill(buf, len, (uint64_t)(uintptr_t)arg, off);
	return 0;
}

static int file_exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0;
}

/* Keys S3 keeps apart stay apart, and none escapes the directory. */
static void test_file_layout(void **state)
{
	static const char *const keys[] = {
		"b/a", "b/a/b", "b/a//b", "b/a/./b", "b/../x", "b/dir/", "b/%41", "b/A",
		"b/caf\xc3\xa9", "b/sp ace",
	};
	struct test_env env;
	struct cold *c = NULL;
	char dir[512], path[1024], *buf = NULL;
	size_t len = 0;
	uint64_t size = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	snprintf(dir, sizeof(dir), "%s/g4", env.dir);
	assert_int_equal(cold_file_new(dir, &c), 0);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		struct cold_put_info info = { .verified = 0 };

		assert_int_equal(cold_put(c, keys[i], 1000 + i, NULL, src_bytes, (void *)(uintptr_t)i,
					  &info), 0);
		assert_true(info.etag[0] == '"');
		assert_true(info.verified);
	}
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		char *want = malloc(1000 + i);

		assert_int_equal(cold_head(c, keys[i], &size), 0);
		assert_int_equal(size, 1000 + i);
		assert_int_equal(cold_get_buf(c, keys[i], 1 << 20, &buf, &len), 0);
		assert_int_equal(len, 1000 + i);
		test_fill(want, len, i, 0);
		assert_memory_equal(buf, want, len);
		free(buf);
		free(want);
	}
	/* Readable layout; ".." does not climb out. */
	snprintf(path, sizeof(path), "%s/b/a%%", dir);
	assert_true(file_exists(path));
	snprintf(path, sizeof(path), "%s/b/%%2E%%2E/x%%", dir);
	assert_true(file_exists(path));
	snprintf(path, sizeof(path), "%s/x%%", env.dir);
	assert_false(file_exists(path));
	assert_int_equal(cold_head(c, "b/nothing", &size), -ENOENT);
	assert_int_equal(cold_get_buf(c, "b/nothing", 100, &buf, &len), -ENOENT);
	assert_int_equal(cold_del(c, "b/a"), 0);
	assert_int_equal(cold_head(c, "b/a", &size), -ENOENT);
	assert_int_equal(cold_head(c, "b/a/b", &size), 0);
	cold_free(c);
	test_env_release(&env);
}

/*
 * Conditional puts (cold.h, put_if) of the file tier, and through the
 * fault tier: only over what was read, or where nothing is; a refusal
 * writes nothing. Processes racing for one absent key: one wins.
 */
static void test_file_put_if(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct cold *inner = NULL, *c = NULL;
	char dir[512], e1[KVT_ETAG_MAX], e2[KVT_ETAG_MAX], *buf = NULL;
	unsigned wins = 0;
	pid_t kids[4];
	size_t len = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	snprintf(dir, sizeof(dir), "%s/g4", env.dir);
	assert_int_equal(cold_file_new(dir, &inner), 0);
	assert_int_equal(cold_fault_new(inner, &plan, &c), 0);
	assert_int_equal(cold_get_buf_etag(c, "b/m", 100, &buf, &len, e1), -ENOENT);
	assert_int_equal(cold_put_buf_if(c, "b/m", COLD_ABSENT, "one", 3, NULL), 0);
	assert_int_equal(cold_put_buf_if(c, "b/m", COLD_ABSENT, "two", 3, NULL), -ECANCELED);
	assert_int_equal(cold_get_buf_etag(c, "b/m", 100, &buf, &len, e1), 0);
	assert_memory_equal(buf, "one", 3);
	free(buf);
	assert_true(e1[0] == '"');
	assert_int_equal(cold_put_buf_if(c, "b/m", e1, "three", 5, NULL), 0);
	/* What was read before that write is stale now. */
	assert_int_equal(cold_put_buf_if(c, "b/m", e1, "four", 4, NULL), -ECANCELED);
	assert_int_equal(cold_get_buf_etag(c, "b/m", 100, &buf, &len, e2), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "three", 5);
	free(buf);
	assert_string_not_equal(e1, e2);
	/* Deleted only as read, under the same lock. */
	assert_int_equal(cold_del_if(c, "b/m", e1), -ECANCELED);
	assert_int_equal(cold_head(c, "b/m", NULL), 0);
	assert_int_equal(cold_del_if(c, "b/m", e2), 0);
	assert_int_equal(cold_head(c, "b/m", NULL), -ENOENT);
	assert_int_equal(cold_del_if(c, "b/m", e2), -ECANCELED);
	/* Gone since it was read: refused, not written again. */
	assert_int_equal(cold_put_buf_if(c, "b/m", COLD_ABSENT, "three", 5, NULL), 0);
	assert_int_equal(cold_del(c, "b/m"), 0);
	assert_int_equal(cold_put_buf_if(c, "b/m", e2, "five", 4, NULL), -ECANCELED);
	assert_int_equal(cold_head(c, "b/m", NULL), -ENOENT);

	for (unsigned i = 0; i < 4; i++) {
		kids[i] = fork();
		assert_true(kids[i] >= 0);
		if (kids[i] == 0) {
			struct cold *k = NULL;
			int won = 0;

			if (cold_file_new(dir, &k) < 0)
				_exit(255);
			for (unsigned j = 0; j < 50; j++) {
				char key[32];

				snprintf(key, sizeof(key), "race/%u", j);
				won += cold_put_buf_if(k, key, COLD_ABSENT, &i, sizeof(i), NULL) == 0;
			}
			cold_free(k);
			_exit(won);
		}
	}
	for (unsigned i = 0; i < 4; i++) {
		int st;

		assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) <= 50);
		wins += (unsigned)WEXITSTATUS(st);
	}
	assert_int_equal(wins, 50);
	cold_free(c);
	test_env_release(&env);
}

/* Whether DIR/rel is there (a file or a directory). */
static int g4_has(const char *dir, const char *rel)
{
	char path[1024];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return file_exists(path);
}

/*
 * A delete, plain or conditional, removes the directories it leaves empty
 * up to the tier's own: a G4 directory where each version's copy is put
 * and swept filled with empty directories (fuzz_names: 200 inputs a second,
 * 80 after 30 s), and a listing or backup of it walked them all.
 */
static void test_file_prune(void **state)
{
	struct test_env env;
	struct cold *c = NULL;
	char dir[512], etag[KVT_ETAG_MAX], *buf = NULL;
	size_t len = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	snprintf(dir, sizeof(dir), "%s/g4", env.dir);
	assert_int_equal(cold_file_new(dir, &c), 0);
	assert_int_equal(cold_put_buf(c, "b/x/y/k1", "1", 1, NULL), 0);
	assert_int_equal(cold_put_buf(c, "b/x/y/k2", "2", 1, NULL), 0);
	assert_int_equal(cold_put_buf(c, "b/x/z", "3", 1, NULL), 0);
	/* Only what is empty goes, deepest first. */
	assert_int_equal(cold_del(c, "b/x/y/k1"), 0);
	assert_true(g4_has(dir, "b/x/y/k2%"));
	assert_int_equal(cold_del(c, "b/x/y/k2"), 0);
	assert_false(g4_has(dir, "b/x/y"));
	assert_true(g4_has(dir, "b/x/z%"));
	assert_int_equal(cold_del(c, "b/x/z"), 0);
	assert_false(g4_has(dir, "b"));
	assert_true(g4_has(dir, ""));
	assert_int_equal(cold_del(c, "b/x/z"), -ENOENT);
	assert_true(g4_has(dir, ""));

	/* A copy and a manifest: the store's directory and manifests/ stay. */
	assert_int_equal(cold_put_buf(c, ".kvtier/stores/S1/b/s/k~1", "c", 1, NULL), 0);
	assert_int_equal(cold_put_buf_if(c, COLD_MANIFEST_PREFIX "b/s.json", COLD_ABSENT, "{}", 2,
					 NULL), 0);
	assert_int_equal(cold_put_buf(c, COLD_MANIFEST_HASHED "b/00.json", "{}", 2, NULL), 0);
	assert_int_equal(cold_del(c, ".kvtier/stores/S1/b/s/k~1"), 0);
	assert_false(g4_has(dir, ".kvtier/stores/S1/b"));
	assert_true(g4_has(dir, ".kvtier/stores/S1"));
	assert_int_equal(cold_get_buf_etag(c, COLD_MANIFEST_PREFIX "b/s.json", 100, &buf, &len,
					   etag), 0);
	free(buf);
	assert_int_equal(cold_del_if(c, COLD_MANIFEST_PREFIX "b/s.json", etag), 0);
	assert_false(g4_has(dir, ".kvtier/manifests/b"));
	assert_int_equal(cold_del(c, COLD_MANIFEST_HASHED "b/00.json"), 0);
	assert_false(g4_has(dir, ".kvtier/manifests/_sha256"));
	assert_true(g4_has(dir, ".kvtier/manifests"));
	assert_true(g4_has(dir, ".kvtier/tmp"));
	assert_true(g4_has(dir, ".kvtier/cond.lock"));
	cold_free(c);
	test_env_release(&env);
}

struct prune_race {
	struct cold *c;
	const char *victim;	/* deleted as the put pulls its first bytes */
};

static int src_delete_first(void *arg, void *buf, size_t len, uint64_t off)
{
	struct prune_race *r = arg;

	if (off == 0 && r->victim)
		assert_int_equal(cold_del(r->c, r->victim), 0);
	memset(buf, 'p', len);
	return 0;
}

/*
 * A put whose directory a delete removes between the put's mkdir and its
 * rename (the delete of the one other file there) makes it again, in this
 * process (deterministically: the delete runs in the put's source) and
 * in two that put and delete in one directory at once.
 */
static void test_file_prune_race(void **state)
{
	struct test_env env;
	struct cold *c = NULL;
	struct prune_race r;
	char dir[512], *buf = NULL;
	pid_t kids[2];
	size_t len = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	snprintf(dir, sizeof(dir), "%s/g4", env.dir);
	assert_int_equal(cold_file_new(dir, &c), 0);
	assert_int_equal(cold_put_buf(c, "b/x/y/old", "o", 1, NULL), 0);
	r = (struct prune_race){ .c = c, .victim = "b/x/y/old" };
	assert_int_equal(cold_put(c, "b/x/y/new", 3, NULL, src_delete_first, &r, NULL), 0);
	assert_false(g4_has(dir, "b/x/y/old%"));
	assert_int_equal(cold_get_buf(c, "b/x/y/new", 100, &buf, &len), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(buf, "ppp", 3);
	free(buf);
	/* The same under the lock of a conditional put. */
	r.victim = "b/x/y/new";
	assert_int_equal(cold_put_if(c, "b/x/q", COLD_ABSENT, 1, NULL, src_delete_first, &r, NULL),
			 0);
	assert_true(g4_has(dir, "b/x/q%"));
	assert_false(g4_has(dir, "b/x/y"));
	assert_int_equal(cold_del(c, "b/x/q"), 0);
	assert_false(g4_has(dir, "b"));

	/* Two processes, each putting and deleting its own key in one
	 * directory that each delete may leave empty: no put fails. */
	for (unsigned i = 0; i < 2; i++) {
		kids[i] = fork();
		assert_true(kids[i] >= 0);
		if (kids[i] == 0) {
			struct cold *k = NULL;
			char key[32];
			int bad = 0;

			snprintf(key, sizeof(key), "b/d1/d2/d3/k%u", i);
			if (cold_file_new(dir, &k) < 0)
				_exit(255);
			for (unsigned j = 0; j < 150; j++)
				bad += cold_put_buf(k, key, "k", 1, NULL) != 0 ||
				       cold_del(k, key) != 0;
			cold_free(k);
			_exit(bad > 200 ? 200 : bad);
		}
	}
	for (unsigned i = 0; i < 2; i++) {
		int st;

		assert_int_equal(waitpid(kids[i], &st, 0), kids[i]);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}
	assert_false(g4_has(dir, "b"));
	cold_free(c);
	test_env_release(&env);
}

/*
 * A fake S3 partner on 127.0.0.1 (a thread): each request, read whole,
 * gets the next of its answers, raw, with "Connection: close" after the
 * status line, and the connection is closed (curl, told nothing, reused
 * it for the next request, found it dead and rewound the body: "seek
 * callback returned error 2", 1 run in 40 on a loaded machine); its
 * method, path and If-Match / If-None-Match (or Range) header are
 * recorded in log, one line each.
 */
struct fake_s3 {
	int lfd, port;
	const char *const *answers;	/* NULL-terminated; then 500 */
	unsigned next;
	char log[4096];
	pthread_t th;
};

static void fake_s3_write(int c, const char *a, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t w = write(c, a + off, len - off);

		if (w <= 0)
			break;
		off += (size_t)w;
	}
}

static void fake_s3_serve(struct fake_s3 *f, int c)
{
	char buf[16384], *end = NULL, *cond = NULL, line[300];
	const char *a;
	size_t n = 0;
	long long body = 0;

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
		if (!strncasecmp(h + 2, "If-Match:", 9) || !strncasecmp(h + 2, "If-None-Match:", 14) ||
		    !strncasecmp(h + 2, "Range:", 6))
			cond = h + 2;
	}
	body -= (long long)(n - (size_t)(end + 4 - buf));
	while (body > 0) {
		char sink[16384];
		ssize_t r = read(c, sink, sizeof(sink));

		if (r <= 0)
			return;
		body -= r;
	}
	snprintf(line, sizeof(line), "%.*s %.*s\n", (int)strcspn(buf, "\r"), buf,
		 cond ? (int)strcspn(cond, "\r") : 0, cond ? cond : "");
	strncat(f->log, line, sizeof(f->log) - strlen(f->log) - 1);
	a = f->answers[f->next] ? f->answers[f->next++] :
				  "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
	n = strcspn(a, "\r") + 2;
	fake_s3_write(c, a, n);
	fake_s3_write(c, "Connection: close\r\n", 19);
	fake_s3_write(c, a + n, strlen(a + n));
}

static void *fake_s3_run(void *arg)
{
	struct fake_s3 *f = arg;

	for (;;) {
		int c = accept(f->lfd, NULL, NULL);

		if (c < 0)
			return NULL;	/* fake_s3_stop() shut the socket down */
		fake_s3_serve(f, c);
		shutdown(c, SHUT_RDWR);
		close(c);
	}
}

/* A cold tier on s3://BUCKET/pfx at a fake partner giving answers; puts
 * over part_size (0: the default, 8 MiB) are multipart uploads whose parts
 * go one at a time, so that they take the answers in order. */
static struct cold *fake_s3_start_parts(struct fake_s3 *f, const struct test_env *env,
					const char *const *answers, uint64_t part_size)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t salen = sizeof(sa);
	char keys[600], endpoint[64];
	struct cold_opts o = { .url = "s3://gone/pfx", .endpoint = endpoint, .credentials = keys,
			       .part_size = part_size, .jobs = part_size ? 1 : 0 };
	struct cold *c = NULL;
	FILE *kf;

	memset(f, 0, sizeof(*f));
	f->answers = answers;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 16), 0);
	assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&sa, &salen), 0);
	f->port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&f->th, NULL, fake_s3_run, f), 0);
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", f->port);
	snprintf(keys, sizeof(keys), "%s/s3keys", env->dir);
	kf = fopen(keys, "w");
	assert_non_null(kf);
	fputs("access_key = AK\nsecret_key = SK\n", kf);
	assert_int_equal(fclose(kf), 0);
	assert_int_equal(chmod(keys, 0600), 0);
	assert_int_equal(cold_s3_new(&o, &c), 0);
	return c;
}

static struct cold *fake_s3_start(struct fake_s3 *f, const struct test_env *env,
				  const char *const *answers)
{
	return fake_s3_start_parts(f, env, answers, 0);
}

static void fake_s3_stop(struct fake_s3 *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	assert_int_equal(pthread_join(f->th, NULL), 0);
	close(f->lfd);
}

/* Standard error into the file at path (emptied) until stderr_back(). */
static int stderr_to(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int saved = dup(STDERR_FILENO);

	assert_true(fd >= 0 && saved >= 0 && dup2(fd, STDERR_FILENO) >= 0);
	close(fd);
	return saved;
}

static void stderr_back(int saved)
{
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
}

/* An S3 error answer: "404 Not Found", "NoSuchKey"; caller frees. */
static char *s3_err(const char *status, const char *code)
{
	char *xml = NULL, *a = NULL;

	assert_true(asprintf(&xml, "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s"
			     "</Code><Message>m</Message></Error>", code) > 0);
	assert_true(asprintf(&a, "HTTP/1.1 %s\r\nContent-Type: application/xml\r\n"
			     "Content-Length: %zu\r\n\r\n%s", status, strlen(xml), xml) > 0);
	free(xml);
	return a;
}

/*
 * A 404 to a conditional put is a changed manifest only when it says the
 * key is absent (AWS: 404 NoSuchKey to If-Match). 404 NoSuchBucket (the
 * partner bucket gone, or [g4] url misnamed) was taken for one too: the
 * migrator read the manifest again five times and logged "changed in g4
 * each of 5 times". Now it is -ENXIO, logged as the missing bucket.
 */
static void test_s3_put_if_no_bucket(void **state)
{
	char *nb = s3_err("404 Not Found", "NoSuchBucket"),
	     *nk = s3_err("404 Not Found", "NoSuchKey"),
	     *pf = s3_err("412 Precondition Failed", "PreconditionFailed");
	const char *answers[] = { nb, nb, nk, pf, NULL };
	struct test_env env;
	struct fake_s3 f;
	struct cold *c;

	(void)state;
	test_env_init(&env, CAP, SEG);
	c = fake_s3_start(&f, &env, answers);
	assert_int_equal(cold_put_buf_if(c, "b/m", COLD_ABSENT, "one", 3, NULL), -ENXIO);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", "one", 3, NULL), -ENXIO);
	/* The key gone since it was read, or changed: read it again. */
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", "one", 3, NULL), -ECANCELED);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", "one", 3, NULL), -ECANCELED);
	cold_free(c);
	fake_s3_stop(&f);
	assert_string_equal(f.log, "PUT /gone/pfx/b/m HTTP/1.1 If-None-Match: *\n"
				   "PUT /gone/pfx/b/m HTTP/1.1 If-Match: \"e1\"\n"
				   "PUT /gone/pfx/b/m HTTP/1.1 If-Match: \"e1\"\n"
				   "PUT /gone/pfx/b/m HTTP/1.1 If-Match: \"e1\"\n");
	free(nb);
	free(nk);
	free(pf);
	test_env_release(&env);
}

/* A multipart upload's answers at a fake partner: its initiation's (upload
 * "up-1"), a part's with ETag, or its completion's, with body. */
#define S3_INITIATED \
	"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: 100\r\n\r\n" \
	"<InitiateMultipartUploadResult><Key>k</Key><UploadId>up-1</UploadId>" \
	"</InitiateMultipartUploadResult>"
#define S3_PART_OK "HTTP/1.1 200 OK\r\nETag: \"not-an-md5\"\r\nContent-Length: 0\r\n\r\n"
#define S3_ABORTED "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
#define S3_PUT_OK "HTTP/1.1 200 OK\r\nETag: \"e2\"\r\nContent-Length: 0\r\n\r\n"

/*
 * A 501 NotImplemented (or 405) to a multipart upload's initiation or to a
 * part, neither of which carries the condition, was taken for the partner
 * refusing conditional puts: the put returned -EOPNOTSUPP and every later
 * conditional put of the process did too without asking (manifests were
 * written without If-Match, with a warning). It is a failed put (-EIO),
 * and the next conditional put still carries its condition; a refused
 * condition (the completion's 501) still turns them off.
 */
static void test_s3_put_if_unsupported_upload(void **state)
{
	char *ni = s3_err("501 Not Implemented", "NotImplemented"),
	     *na = s3_err("405 Method Not Allowed", "MethodNotAllowed");
	const char *answers[] = { ni, S3_PUT_OK,
				  S3_INITIATED, na, S3_ABORTED, S3_PUT_OK,
				  S3_INITIATED, S3_PART_OK, S3_PART_OK, S3_PART_OK, ni, S3_ABORTED,
				  NULL };
	char body[3000];
	struct test_env env;
	struct fake_s3 f;
	struct cold *c;

	(void)state;
	memset(body, 'x', sizeof(body));
	test_env_init(&env, CAP, SEG);
	c = fake_s3_start_parts(&f, &env, answers, 1024);
	/* The initiation refused: no condition was asked. */
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", body, sizeof(body), NULL), -EIO);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", "one", 3, NULL), 0);
	/* A part refused: neither. */
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", body, sizeof(body), NULL), -EIO);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", "one", 3, NULL), 0);
	/* The completion, which carries it, refused: no more conditions. */
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", body, sizeof(body), NULL),
			 -EOPNOTSUPP);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", "one", 3, NULL), -EOPNOTSUPP);
	cold_free(c);
	fake_s3_stop(&f);
	assert_string_equal(f.log, "POST /gone/pfx/b/m?uploads= HTTP/1.1 \n"
				   "PUT /gone/pfx/b/m HTTP/1.1 If-Match: \"e1\"\n"
				   "POST /gone/pfx/b/m?uploads= HTTP/1.1 \n"
				   "PUT /gone/pfx/b/m?partNumber=1&uploadId=up-1 HTTP/1.1 \n"
				   "DELETE /gone/pfx/b/m?uploadId=up-1 HTTP/1.1 \n"
				   "PUT /gone/pfx/b/m HTTP/1.1 If-Match: \"e1\"\n"
				   "POST /gone/pfx/b/m?uploads= HTTP/1.1 \n"
				   "PUT /gone/pfx/b/m?partNumber=1&uploadId=up-1 HTTP/1.1 \n"
				   "PUT /gone/pfx/b/m?partNumber=2&uploadId=up-1 HTTP/1.1 \n"
				   "PUT /gone/pfx/b/m?partNumber=3&uploadId=up-1 HTTP/1.1 \n"
				   "POST /gone/pfx/b/m?uploadId=up-1 HTTP/1.1 If-Match: \"e1\"\n"
				   "DELETE /gone/pfx/b/m?uploadId=up-1 HTTP/1.1 \n");
	free(ni);
	free(na);
	test_env_release(&env);
}

/*
 * S3 sends a completion's "200 OK" before it is done, and a completion
 * that fails after it has its <Error> in the body (AWS,
 * CompleteMultipartUpload): a conditional one's PreconditionFailed there,
 * or NoSuchKey for If-Match, was -EIO, where the same code as a 412 or 404
 * is -ECANCELED (read the manifest again), and ConditionalRequestConflict
 * -EIO where a 409 is -EAGAIN. Each is now as its status would be; the
 * upload is aborted. An unconditional put asked nothing: -EIO still.
 */
static void test_s3_put_if_completion_error_body(void **state)
{
	char *pf = s3_err("200 OK", "PreconditionFailed"), *nk = s3_err("200 OK", "NoSuchKey"),
	     *cc = s3_err("200 OK", "ConditionalRequestConflict");
	const char *answers[] = {
		S3_INITIATED, S3_PART_OK, S3_PART_OK, S3_PART_OK, pf, S3_ABORTED,
		S3_INITIATED, S3_PART_OK, S3_PART_OK, S3_PART_OK, nk, S3_ABORTED,
		S3_INITIATED, S3_PART_OK, S3_PART_OK, S3_PART_OK, cc, S3_ABORTED,
		S3_INITIATED, S3_PART_OK, S3_PART_OK, S3_PART_OK, nk, S3_ABORTED,
		S3_INITIATED, S3_PART_OK, S3_PART_OK, S3_PART_OK, pf, S3_ABORTED,
		NULL };
	char body[3000];
	struct test_env env;
	struct fake_s3 f;
	struct cold *c;

	(void)state;
	memset(body, 'x', sizeof(body));
	test_env_init(&env, CAP, SEG);
	c = fake_s3_start_parts(&f, &env, answers, 1024);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", body, sizeof(body), NULL),
			 -ECANCELED);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", body, sizeof(body), NULL),
			 -ECANCELED);
	assert_int_equal(cold_put_buf_if(c, "b/m", "\"e1\"", body, sizeof(body), NULL),
			 -EAGAIN);
	/* If-None-Match: * is not refused with NoSuchKey: that is something else. */
	assert_int_equal(cold_put_buf_if(c, "b/m", COLD_ABSENT, body, sizeof(body), NULL), -EIO);
	assert_int_equal(cold_put_buf(c, "b/m", body, sizeof(body), NULL), -EIO);
	cold_free(c);
	fake_s3_stop(&f);
	/* Each upload aborted after its completion. */
	for (const char *p = f.log; (p = strstr(p, "POST /gone/pfx/b/m?uploadId=up-1")); p++)
		assert_non_null(strstr(p, "\nDELETE /gone/pfx/b/m?uploadId=up-1 "));
	assert_non_null(strstr(f.log, "POST /gone/pfx/b/m?uploadId=up-1 HTTP/1.1 If-None-Match: *\n"));
	free(pf);
	free(nk);
	free(cc);
	test_env_release(&env);
}

/*
 * cold_s3_new() with [g4] credentials holding text; what it logged goes
 * to log (size bytes, NUL-terminated). Returns its result.
 */
static int s3_keys_try(const struct test_env *env, const char *text, char *log, size_t size)
{
	char keys[600], logpath[600];
	struct cold_opts o = { .url = "s3://b/pfx", .endpoint = "http://127.0.0.1:9",
			       .credentials = keys };
	struct cold *c = NULL;
	int saved = dup(STDERR_FILENO), fd, rc;
	ssize_t n;
	FILE *kf;

	snprintf(keys, sizeof(keys), "%s/s3keys-try", env->dir);
	snprintf(logpath, sizeof(logpath), "%s/s3keys-log", env->dir);
	kf = fopen(keys, "w");
	assert_non_null(kf);
	fputs(text, kf);
	assert_int_equal(fclose(kf), 0);
	assert_int_equal(chmod(keys, 0600), 0);
	fd = open(logpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(saved >= 0 && fd >= 0);
	assert_true(dup2(fd, STDERR_FILENO) >= 0);
	rc = cold_s3_new(&o, &c);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	n = pread(fd, log, size - 1, 0);
	assert_true(n >= 0);
	log[n] = '\0';
	close(fd);
	assert_true((rc == 0) == (c != NULL));
	cold_free(c);
	return rc;
}

/*
 * The [g4] credentials file was read in pieces of 599 bytes: a longer
 * comment was split and its rest refused as a "bad line" (which line, it
 * did not say), and a value over 511 bytes was cut short without a word,
 * a wrong secret that every request of the partner refused. Lines are
 * read whole; an over-long value is refused naming its line.
 */
static void test_s3_keys_long_lines(void **state)
{
	char text[2048], log[2048], v[700];
	struct test_env env;

	(void)state;
	test_env_init(&env, CAP, SEG);
	memset(v, 'c', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	snprintf(text, sizeof(text), "# %s\naccess_key = AK\nsecret_key = SK\n", v);
	assert_int_equal(s3_keys_try(&env, text, log, sizeof(log)), 0);
	assert_string_equal(log, "");
	/* A 520-byte secret was cut to 511 bytes and taken. */
	v[520] = '\0';
	snprintf(text, sizeof(text), "access_key = AK\nsecret_key = %s\n", v);
	assert_int_equal(s3_keys_try(&env, text, log, sizeof(log)), -EINVAL);
	assert_non_null(strstr(log, "line 2 of the g4 credentials"));
	assert_non_null(strstr(log, "the value is longer than 511 bytes"));
	v[520] = 'c';
	snprintf(text, sizeof(text), "access_key = AK\n\nsecret_key = %s\n", v);
	assert_int_equal(s3_keys_try(&env, text, log, sizeof(log)), -EINVAL);
	assert_non_null(strstr(log, "line 3 of the g4 credentials"));
	assert_int_equal(s3_keys_try(&env, "access_key = AK\nsecret key = SK\n", log,
				     sizeof(log)), -EINVAL);
	assert_non_null(strstr(log, "bad line 2 in the g4 credentials"));
	test_env_release(&env);
}

/*
 * cold_del_if(c, "b/m", "\"e1\"") n times, each returning want[i], at a
 * fake partner giving answers (NULL-terminated, each allocated, freed
 * here): the first `asked` calls reach it as conditional DELETEs, the rest
 * are answered without asking.
 */
static void del_if_answers(char **answers, const int *want, size_t n, size_t asked)
{
	const char *a[8] = { NULL };
	char log[1024] = "";
	struct test_env env;
	struct fake_s3 f;
	struct cold *c;

	assert_true(n < ARRAY_SIZE(a));
	for (size_t i = 0; i < n && answers[i]; i++)
		a[i] = answers[i];
	test_env_init(&env, CAP, SEG);
	c = fake_s3_start(&f, &env, a);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(cold_del_if(c, "b/m", "\"e1\""), want[i]);
	cold_free(c);
	fake_s3_stop(&f);
	for (size_t i = 0; i < asked; i++)
		strcat(log, "DELETE /gone/pfx/b/m HTTP/1.1 If-Match: \"e1\"\n");
	assert_string_equal(f.log, log);
	for (size_t i = 0; i < n && answers[i]; i++)
		free(answers[i]);
	test_env_release(&env);
}

/*
 * The S3 tier's conditional delete (a sweep's manifest delete): DELETE
 * with If-Match; a changed or gone manifest is -ECANCELED, a missing
 * bucket -ENXIO, and a partner without conditional deletes (501) -EOPNOTSUPP,
 * not asked again.
 */
static void test_s3_del_if(void **state)
{
	char *answers[] = { s3_err("412 Precondition Failed", "PreconditionFailed"),
			    s3_err("404 Not Found", "NoSuchKey"),
			    strdup("HTTP/1.1 204 No Content\r\n\r\n"),
			    s3_err("404 Not Found", "NoSuchBucket"),
			    s3_err("501 Not Implemented", "NotImplemented"), NULL };
	const int want[] = { -ECANCELED, -ECANCELED, 0, -ENXIO, -EOPNOTSUPP, -EOPNOTSUPP };

	(void)state;
	del_if_answers(answers, want, ARRAY_SIZE(want), 5);
}

/*
 * A 400 that says what is wrong with the request's credentials
 * (ExpiredToken when temporary credentials ran out) is not a partner
 * without conditional deletes: it was taken for one, and every later
 * sweep of the process deleted manifests unconditionally, reopening the
 * window an import lost its manifest in. It is -EIO, and the next delete
 * is conditional again; a 400 about the header still turns them off.
 */
static void test_s3_del_if_400_credentials(void **state)
{
	char *answers[] = { s3_err("400 Bad Request", "ExpiredToken"),
			    s3_err("400 Bad Request", "AuthorizationHeaderMalformed"),
			    s3_err("412 Precondition Failed", "PreconditionFailed"),
			    s3_err("400 Bad Request", "InvalidArgument"), NULL };
	const int want[] = { -EIO, -EIO, -ECANCELED, -EOPNOTSUPP, -EOPNOTSUPP };

	(void)state;
	del_if_answers(answers, want, ARRAY_SIZE(want), 4);
}

/*
 * A 404 NoSuchBucket (the partner bucket of [g4] url gone, or misnamed) is
 * no missing key, for any request: it was -ENOENT, so a sweep took each
 * DELETE of a deleted key's copy for "already gone" and forgot it (the
 * copies stayed in the real bucket for ever), a recall said the copy was
 * deleted since its demotion, and kvtier-migrate said "cannot open g4: No
 * such file or directory". Nor is it the store's own failure: as -EIO,
 * a recall through the gateway was a 500 InternalError; -ENXIO is a 503
 * that names the missing bucket (s3_error.c). A HEAD's 404 has no body:
 * it is asked again as a GET of the first byte, whose code tells the two
 * apart.
 */
static void test_s3_no_bucket(void **state)
{
	char *nb = s3_err("404 Not Found", "NoSuchBucket"),
	     *nk = s3_err("404 Not Found", "NoSuchKey");
	const char *h404 = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
	const char *answers[] = { nb, nb, nb, nb, nb, h404, nb, h404, nk, nb, nb, nk, NULL };
	size_t big = (8u << 20) + 1;	/* over part_size: multipart */
	char *buf = calloc(1, big);
	struct test_env env;
	struct fake_s3 f;
	struct cold *c;
	char *got = NULL;
	size_t glen = 0;
	uint64_t size = 0;

	(void)state;
	assert_non_null(buf);
	test_env_init(&env, CAP, SEG);
	c = fake_s3_start(&f, &env, answers);
	assert_int_equal(cold_get_buf(c, "b/k", 64, &got, &glen), -ENXIO);
	assert_null(got);
	assert_int_equal(cold_del(c, "b/k"), -ENXIO);
	assert_int_equal(cold_del_if(c, "b/k", "\"e1\""), -ENXIO);
	assert_int_equal(cold_put_buf(c, "b/k", "one", 3, NULL), -ENXIO);
	assert_int_equal(cold_put_buf(c, "b/k", buf, big, NULL), -ENXIO);
	assert_int_equal(cold_head(c, "b/k", &size), -ENXIO);
	/* The key alone missing is still -ENOENT. */
	assert_int_equal(cold_head(c, "b/k", &size), -ENOENT);
	assert_int_equal(cold_cleanup(c), -ENXIO);
	assert_int_equal(cold_abort_upload(c, "pfx/b/k", "u1"), -ENXIO);
	assert_int_equal(cold_del(c, "b/k"), -ENOENT);
	cold_free(c);
	fake_s3_stop(&f);
	assert_string_equal(f.log, "GET /gone/pfx/b/k HTTP/1.1 \n"
				   "DELETE /gone/pfx/b/k HTTP/1.1 \n"
				   "DELETE /gone/pfx/b/k HTTP/1.1 If-Match: \"e1\"\n"
				   "PUT /gone/pfx/b/k HTTP/1.1 \n"
				   "POST /gone/pfx/b/k?uploads= HTTP/1.1 \n"
				   "HEAD /gone/pfx/b/k HTTP/1.1 \n"
				   "GET /gone/pfx/b/k HTTP/1.1 Range: bytes=0-0\n"
				   "HEAD /gone/pfx/b/k HTTP/1.1 \n"
				   "GET /gone/pfx/b/k HTTP/1.1 Range: bytes=0-0\n"
				   "GET /gone/?prefix=pfx%2F&uploads= HTTP/1.1 \n"
				   "DELETE /gone/pfx/b/k?uploadId=u1 HTTP/1.1 \n"
				   "DELETE /gone/pfx/b/k HTTP/1.1 \n");
	free(buf);
	free(nb);
	free(nk);
	test_env_release(&env);
}

/* Temporary files of dead processes go; a live process's stay. */
static void test_file_cleanup(void **state)
{
	struct test_env env;
	struct cold *c = NULL;
	char dir[512], host[256], dead[1024], live[1024];
	FILE *f;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	snprintf(dir, sizeof(dir), "%s/g4", env.dir);
	assert_int_equal(cold_file_new(dir, &c), 0);
	assert_int_equal(cold_put_buf(c, "b/k", "x", 1, NULL), 0);	/* makes .kvtier/tmp */
	gethostname(host, sizeof(host));
	for (char *p = host; *p; p++)
		if (*p == '.' || *p == '/')
			*p = '_';
	/* pid_max is at most 4194304: this one cannot be alive. */
	snprintf(dead, sizeof(dead), "%s/.kvtier/tmp/%s.%d.0", dir, host, 99999999);
	snprintf(live, sizeof(live), "%s/.kvtier/tmp/%s.%ld.0", dir, host, (long)getpid());
	f = fopen(dead, "w");
	assert_non_null(f);
	fclose(f);
	f = fopen(live, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(cold_cleanup(c), 0);
	assert_false(file_exists(dead));
	assert_true(file_exists(live));
	unlink(live);
	cold_free(c);
	test_env_release(&env);
}

static enum kvt_tier tier_of(struct kvt_store *st, const char *b, const char *k)
{
	struct kvt_object *o = NULL;
	enum kvt_tier t;

	assert_int_equal(kvt_object_head(st, b, k, &o), 0);
	t = o->tier;
	kvt_object_free(o);
	return t;
}

/* Where G4 holds the copy of b/k's version (kvt_object_g4_name()); caller frees. */
static char *g4_name_of(struct kvt_store *st, const char *b, const char *k)
{
	char *name = NULL;

	assert_int_equal(kvt_object_g4_name(st, b, k, &name), 0);
	return name;
}

/* The file that holds it in the file:// G4 directory gdir; caller frees. */
static char *g4_file_of(struct kvt_store *st, const char *gdir, const char *b, const char *k)
{
	char *name = g4_name_of(st, b, k), *path = cold_file_name(gdir, name);

	assert_non_null(path);
	free(name);
	return path;
}

/* The file an upload of b/k's version by st makes in the file:// G4
 * directory gdir, whether or not the catalog has recorded it yet:
 * ".kvtier/stores/STORE/BUCKET/KEY~VID" (migrate.c). Caller frees. */
static char *g4_upload_file(struct kvt_store *st, const char *gdir, const char *b,
			    const char *k)
{
	struct cat_object *co = NULL;
	char name[1200], *path;
	uint64_t id = 0;

	assert_int_equal(cat_store_id(store_cat(st), &id), 0);
	assert_int_equal(cat_object_lookup(store_cat(st), b, k, 0, &co), 0);
	snprintf(name, sizeof(name), ".kvtier/stores/%016" PRIx64 "/%s/%s~%016" PRIx64, id, b, k,
		 co->vid);
	cat_object_free(co);
	path = cold_file_name(gdir, name);
	assert_non_null(path);
	return path;
}

/* The G4 directory of env's store (the default, file://<store dir>/g4). */
static const char *g4_dir(const struct test_env *env)
{
	static __thread char dir[600];

	snprintf(dir, sizeof(dir), "%s/g4", env->cfg.store.dir);
	return dir;
}

static struct kvt_g4_opts session_opts(const char *b, const char *s)
{
	return (struct kvt_g4_opts){ .bucket = b, .session = s };
}

/* Demote, read back (recall), demote again without a new upload. */
static void test_demote_recall(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = { .idle = 0 };
	struct kvt_store_stat ss;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/big", 5 * 1024 * 1024 + 17, 1), 0);
	assert_int_equal(test_put(st, "kvs", "s1/small", 10, 2), 0);
	assert_int_equal(test_put(st, "kvs", "s1/empty", 0, 3), 0);
	assert_int_equal(test_put(st, "kvs", "s2/x", 4096, 4), 0);
	usleep(2000);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.sessions, 2);
	assert_int_equal(rep.objects, 4);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(st, "kvs", "s1/big"), KVT_TIER_COLD);
	assert_int_equal(kvt_store_stat(st, &ss), 0);
	assert_int_equal(ss.tier_count[KVT_TIER_COLD], 4);
	/* Hot extents are gone: live bytes hold nothing of them. */
	assert_int_equal(ss.live_bytes, 0);

	/* Nothing left to demote. */
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 0);

	/* A read recalls, byte-exact. */
	assert_int_equal(test_check(st, "kvs", "s1/big", 5 * 1024 * 1024 + 17, 1), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/big"), KVT_TIER_HOT);
	assert_int_equal(test_check(st, "kvs", "s1/empty", 0, 3), 0);
	/* Prestage the rest of the session. */
	assert_int_equal(kvt_g4_recall_session(st, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 1);	/* small: big and empty came back above */
	assert_int_equal(tier_of(st, "kvs", "s1/small"), KVT_TIER_HOT);
	assert_int_equal(test_check(st, "kvs", "s1/small", 10, 2), 0);

	/* Recalled objects go back without an upload, unless G4 lost them. */
	{
		struct cold *cold = NULL;
		char *name = g4_name_of(st, "kvs", "s1/big");
		uint64_t id = 0;

		/* Under this store's id, a name for this version of its own. */
		assert_int_equal(cat_store_id(store_cat(st), &id), 0);
		assert_int_equal(strncmp(name, ".kvtier/stores/", 15), 0);
		assert_int_equal(strtoull(name + 15, NULL, 16), id);
		assert_int_equal(strncmp(name + 31, "/kvs/s1/big~", 12), 0);
		assert_int_equal(strlen(name), 31 + 12 + 16);
		assert_int_equal(store_cold(st, &cold), 0);
		assert_int_equal(cold_del(cold, name), 0);
		o = session_opts("kvs", "s1");
		assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
		assert_int_equal(rep.objects, 3);
		assert_int_equal(cold_head(cold, name, NULL), 0);
		assert_int_equal(test_check(st, "kvs", "s1/big", 5 * 1024 * 1024 + 17, 1), 0);
		free(name);
	}

	/* An overwritten cold object is simply the new hot one. */
	assert_int_equal(test_put(st, "kvs", "s2/x", 8192, 5), 0);
	assert_int_equal(tier_of(st, "kvs", "s2/x"), KVT_TIER_HOT);
	o = session_opts("kvs", "s2");
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(test_check(st, "kvs", "s2/x", 8192, 5), 0);
	/* Deleting a cold object works like any delete. */
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(kvt_object_delete(st, "kvs", "s2/x"), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Pinned objects stay hot; sessions not idle stay hot. */
static void test_demote_rules(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = { .idle = 3600 };
	struct kvt_writer *w;
	struct kvt_put_opts po = { .flags = KVT_PUT_PIN };

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 100, 1), 0);
	assert_int_equal(kvt_writer_open(st, "kvs", "s1/pinned", &po, &w), 0);
	assert_int_equal(kvt_writer_write(w, "abc", 3), 0);
	assert_int_equal(kvt_writer_commit(w, NULL), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);	/* idle 1h: nothing */
	assert_int_equal(rep.objects, 0);
	o.idle = 0;
	o.dry_run = 1;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	o.dry_run = 0;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(tier_of(st, "kvs", "s1/pinned"), KVT_TIER_HOT);
	kvt_store_close(st);
	test_env_release(&env);
}

/* A store whose cold tier is the default directory wrapped in a fault plan. */
static struct kvt_store *open_faulty(struct test_env *env, struct cold_fault_plan *plan)
{
	struct kvt_store *st = test_store_open(env);
	struct cold *inner = NULL, *f = NULL;
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/g4", env->cfg.store.dir);
	assert_int_equal(cold_file_new(dir, &inner), 0);
	assert_int_equal(cold_fault_new(inner, plan, &f), 0);
	store_set_cold(st, f);
	return st;
}

/*
 * The listing of multipart uploads that starts every kvtier-migrate run is
 * tried again, as every other request, when the partner answers 503 or
 * drops the connection; before, one such answer ended the run, "nothing
 * was moved".
 */
static void test_cleanup_retried(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_opts o = { .retries = 2 };

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	plan.fail_cleanups = 2;
	plan.err = -EAGAIN;
	assert_int_equal(kvt_g4_cleanup(st, &o, NULL), 0);
	assert_int_equal(plan.fail_cleanups, 0);
	plan.fail_cleanups = 1;
	plan.err = -ECONNRESET;
	assert_int_equal(kvt_g4_cleanup(st, &o, NULL), 0);
	/* More than the retries, or none asked for: the run ends, as before. */
	plan.fail_cleanups = 3;
	assert_int_equal(kvt_g4_cleanup(st, &o, NULL), -ECONNRESET);
	plan.fail_cleanups = 1;
	plan.err = -EAGAIN;
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), -EAGAIN);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A multipart upload an interrupted run left that the partner will not
 * abort now stays recorded for the next run, and counts as a failure of
 * this one: only logged, the run said "0 failures" and exited 0.
 */
static void test_cleanup_abort_failed(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct kvt_g4_report rep;
	struct test_env env;
	struct kvt_store *st;
	struct cold *cold;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(store_cold(st, &cold), 0);
	assert_int_equal(cat_g4_upload_begin(store_cat(st), cold->url, "b/k", "up1", 1), 0);
	plan.fail_aborts = 1;
	plan.err = -EIO;
	assert_int_equal(kvt_g4_cleanup(st, NULL, &rep), 0);
	assert_int_equal(plan.fail_aborts, 0);
	assert_int_equal(rep.failures, 1);
	/* The next run, the partner answering, forgets it (a file:// G4 has
	 * none to abort: EOPNOTSUPP, said and not retried). */
	assert_int_equal(kvt_g4_cleanup(st, NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(kvt_g4_cleanup(st, NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Failed, short and damaged transfers: nothing lost, a later run finishes. */
static void test_faults(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_reader *r = NULL;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 300000, 1), 0);
	assert_int_equal(test_put(st, "kvs", "s1/b", 3000, 2), 0);

	/* The partner answers 503 to the first put: one failure, the other moves. */
	plan.fail_puts = 1;
	plan.err = -EAGAIN;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_DEMOTING);
	assert_int_equal(test_check(st, "kvs", "s1/a", 300000, 1), 0);	/* still readable */

	/* It stores one byte short and says yes: the bytes sent do not match the
	 * object (size and CRC32C of what the source served), so it stays DEMOTING. */
	plan.short_puts = 1;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_DEMOTING);

	/* A later run completes. */
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);

	/* Recall: unreachable, then damaged in transit; the object stays cold. */
	plan.fail_gets = 1;
	plan.err = -EIO;
	assert_int_equal(kvt_reader_open(st, "kvs", "s1/a", &r), -EIO);
	plan.corrupt_gets = 1;
	assert_int_equal(kvt_reader_open(st, "kvs", "s1/a", &r), -EIO);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	/* Then it works, byte-exact. */
	assert_int_equal(test_check(st, "kvs", "s1/a", 300000, 1), 0);
	assert_int_equal(test_check(st, "kvs", "s1/b", 3000, 2), 0);
	/* The garbage of the failed recalls is reclaimable, fsck is clean. */
	{
		struct kvt_fsck_report fr;

		assert_int_equal(kvt_store_fsck(st, 0, &fr), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A recalled object demoted again: G4 still holds its version, so nothing
 * is uploaded if the partner confirms it. If the partner does not answer
 * that check, the object is not marked cold on an unconfirmed copy, and
 * not uploaded again either (an upload over the verified copy that a fault
 * cuts would leave a partner like s3rver holding a short object: the chaos
 * test lost s03/cli-3 that way).
 */
static void test_redemote_after_recall(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	unsigned puts;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 200000, 5), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", 200000, 5), 0);	/* recalled */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	puts = plan.puts;

	/* The partner does not answer the check: no upload, not cold. */
	plan.fail_heads = 1;
	plan.err = -EHOSTUNREACH;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(plan.puts, puts + 1);	/* the session's manifest only */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_DEMOTING);

	/* It answers: cold again without a byte uploaded (the manifest aside). */
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(plan.puts, puts + 2);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", 200000, 5), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Changes 4 bytes of the file G4 holds as b/k's copy, keeping its size. */
static void damage_g4_copy(struct test_env *env, struct kvt_store *st, const char *b,
			   const char *k)
{
	char *path = g4_file_of(st, g4_dir(env), b, k);
	FILE *f;

	f = fopen(path, "r+");
	free(path);
	assert_non_null(f);
	assert_int_equal(fseek(f, 5000, SEEK_SET), 0);
	assert_int_equal(fwrite("XXXX", 1, 4, f), 4);
	assert_int_equal(fclose(f), 0);
}

/*
 * A recalled object demoted again while G4's copy was damaged (or put over
 * by another node) with its size kept. The demotion checked only the size,
 * marked the object cold and freed the hot extents, the only good bytes:
 * every read failed from then on. The copy must be proven: on a tier
 * without an ETag that follows the bytes (file://) by reading it back, on
 * one with (S3's MD5; the fault tier's etag_heads here) by that ETag, with
 * no read. A copy that fails is uploaded again from the hot extents.
 */
static void test_redemote_damaged_copy(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	unsigned puts, gets;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 100000, 6), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(test_check(st, "kvs", "s1/a", 100000, 6), 0);	/* recalled */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);

	/* file://: read back, found damaged, uploaded again. */
	damage_g4_copy(&env, st, "kvs", "s1/a");
	puts = plan.puts;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(plan.puts, puts + 2);	/* the object and the manifest */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", 100000, 6), 0);

	/* An ETag that follows the bytes: an intact copy is trusted with no
	 * read and no upload, a damaged one is uploaded again. */
	plan.etag_heads = 1;
	puts = plan.puts;
	gets = plan.gets;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(plan.puts, puts + 1);	/* the manifest only */
	assert_int_equal(plan.gets, gets + 2);	/* the manifest's owner, twice */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", 100000, 6), 0);
	damage_g4_copy(&env, st, "kvs", "s1/a");
	puts = plan.puts;
	gets = plan.gets;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(plan.puts, puts + 2);
	assert_int_equal(plan.gets, gets + 2);	/* the manifest's owner, twice */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", 100000, 6), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * The same for a copy under an old name (a cold object renamed, then
 * recalled): uploaded again under the new name, and the damaged copy under
 * the old one goes with the next sweep. Before, once a sweep had passed
 * the rename's record (the name still taken then), nothing recorded it.
 */
static void test_redemote_damaged_renamed_copy(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct stat sb;
	char *path, *now;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 100000, 7), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	path = g4_file_of(st, g4_dir(&env), "kvs", "s1/a");
	assert_int_equal(kvt_object_rename(st, "kvs", "s1/a", "s1/b", 0), 0);
	/* The rename's dead row, done: the cold object still names the copy. */
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), 0);
	assert_int_equal(test_check(st, "kvs", "s1/b", 100000, 7), 0);	/* recalled */
	damage_g4_copy(&env, st, "kvs", "s1/b");
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(st, "kvs", "s1/b"), KVT_TIER_COLD);
	now = g4_file_of(st, g4_dir(&env), "kvs", "s1/b");
	assert_string_not_equal(now, path);
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), 0);
	assert_int_equal(stat(path, &sb), -1);
	assert_int_equal(errno, ENOENT);
	assert_true(file_exists(now));
	assert_int_equal(test_check(st, "kvs", "s1/b", 100000, 7), 0);
	free(path);
	free(now);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * Frees every sealed segment it can, as a writer's reclaim would not (it
 * leaves proofs to the demoter); -ENOSPC when fewer than all are free.
 */
static void reclaim_all(struct kvt_store *st)
{
	struct kvt_store_stat s;
	int rc;

	assert_int_equal(kvt_store_stat(st, &s), 0);
	rc = kvt_store_reclaim(st, (unsigned)s.segments);
	assert_true(rc == 0 || rc == -ENOSPC);
}

/*
 * Reclaim of a recalled object while G4's copy was damaged (or put over by
 * another node) with its size kept. The object kept g4_vid, so reclaim took
 * that copy for its own, turned the object cold and freed the hot extents,
 * the only good bytes: every read failed from then on. The copy must be
 * proven as a demotion proves it (test_redemote_damaged_copy): read back on
 * file://, by its ETag where the partner gives one that follows the bytes
 * (the fault tier's etag_heads). A copy that fails is uploaded again before
 * the segment goes; one that holds goes cold with no upload.
 */
static void test_reclaim_damaged_copy(void **state)
{
	const uint64_t size = (1u << 20) - 64;	/* one extent fills a segment */
	struct cold_fault_plan plan = { 0 };
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_g4_report rep;
	struct test_env env;
	struct kvt_store *st;
	unsigned puts, gets;

	(void)state;
	g4_env_init(&env, CAP, 1u << 20);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", size, 6), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);

	/* file://: recalled, its copy damaged, its segment sealed (the
	 * next put) and reclaimed: read back, found damaged, uploaded again. */
	assert_int_equal(test_check(st, "kvs", "s1/a", size, 6), 0);	/* recalled */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	damage_g4_copy(&env, st, "kvs", "s1/a");
	assert_int_equal(test_put(st, "kvs", "other1", 1000, 2), 0);
	puts = plan.puts;
	reclaim_all(st);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", size, 6), 0);
	assert_int_equal(plan.puts, puts + 2);	/* the object and the manifest */

	/* An ETag that follows the bytes: an intact copy is trusted with no
	 * read and no upload, a damaged one is uploaded again. */
	plan.etag_heads = 1;
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	assert_int_equal(test_put(st, "kvs", "other2", 1000, 3), 0);
	puts = plan.puts;
	gets = plan.gets;
	reclaim_all(st);
	assert_int_equal(plan.puts, puts);
	assert_int_equal(plan.gets, gets);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", size, 6), 0);
	damage_g4_copy(&env, st, "kvs", "s1/a");
	assert_int_equal(test_put(st, "kvs", "other3", 1000, 4), 0);
	puts = plan.puts;
	gets = plan.gets;
	reclaim_all(st);
	assert_int_equal(plan.puts, puts + 2);
	assert_int_equal(plan.gets, gets + 2);	/* the manifest's owner, twice */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", size, 6), 0);
	test_fsck_clean(st);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Two stores over one G4: demoted on A, imported and recalled on B. */
static void test_import(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_object *obj = NULL;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 2 * 1024 * 1024, 7), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5, 8), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);

	assert_int_equal(kvt_g4_import_session(sb, "kvs", "nosuch", NULL, &rep), -ENOENT);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(tier_of(sb, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 2 * 1024 * 1024, 7), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 5, 8), 0);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/b", &obj), 0);
	assert_string_equal(obj->session, "s1");
	kvt_object_free(obj);
	/* Importing again changes nothing: B has its own versions now. */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 0);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * A session handed over (docs/operations.md, "Scaling past one node"):
 * demoted on A, imported on B, then deleted on A. A's sweep must leave the
 * G4 copies and the manifest to B, whose catalog names them: the session
 * is B's now, and so is a later import by a third node.
 */
static void test_handover_kept(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);

	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/b"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);

	/* B carries on: a new block, demoted again; A's sweep still leaves it. */
	assert_int_equal(test_put(sb, "kvs", "s1/c", 3000, 3), 0);
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/c", 3000, 3), 0);

	/* A takes it back: its import sees B's manifest, whole. */
	assert_int_equal(kvt_g4_import_session(sa, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 3);
	assert_int_equal(test_check(sa, "kvs", "s1/c", 3000, 3), 0);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * The node a session came from read it once more before it moved on (a
 * recalled object, hot and in G4). Its demotion of that leftover must not
 * take the session back: it rewrote the manifest from its own catalog,
 * dropping the block the new owner added and naming itself the owner, and
 * its sweep then deleted the copies B's cold objects still need.
 */
static void test_handover_recalled_left(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	uint64_t redemoted;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);	/* recalled */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(test_put(sb, "kvs", "s1/c", 3000, 3), 0);
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);

	/* A's nightly run: its recalled s1/a is idle, but the session is B's. */
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	redemoted = rep.objects;
	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/b"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/c", 3000, 3), 0);
	assert_int_equal(redemoted, 0);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * A node writes into a session another store imported (the fleet's rule
 * broken: one conversation on two nodes). Its demotion neither uploads
 * over the owner's copies nor takes the manifest, and says so: a failure,
 * the object hot. It said nothing and exited 0, and reclaim logged the
 * session "demoted under pressure: 0 objects".
 */
static void test_handover_written_here(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 5000, 2), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(rep.objects, 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/a"), KVT_TIER_HOT);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 5000, 2), 0);
	/* Taken back, it goes. */
	assert_int_equal(kvt_g4_import_session(sa, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 5000, 2), 0);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * A session comes back to the node it left, which imports it again: what
 * the owner overwrote or deleted meanwhile replaces what this node had of
 * it (cold, or recalled and not written since). Kept, the old s1/a failed
 * every recall on the owner's bytes, s1/b was listed with its copy gone,
 * and the import wrote both into the manifest again for the next node.
 */
static void test_handover_back(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_object *obj = NULL;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/c", 6000, 3), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/c", 6000, 3), 0);	/* recalled */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(test_put(sb, "kvs", "s1/a", 71000, 11), 0);
	assert_int_equal(test_put(sb, "kvs", "s1/c", 6000, 13), 0);
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/b"), 0);
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);

	assert_int_equal(kvt_g4_import_session(sa, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 71000, 11), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/c", 6000, 13), 0);
	assert_int_equal(kvt_object_head(sa, "kvs", "s1/b", &obj), -ENOENT);
	/* The manifest A wrote serves a third node as B's did. */
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 71000, 11), 0);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

static int dead_count(void *arg, int64_t id, int64_t bucket_id, const char *bucket,
		      const char *key, const char *session, const char *g4_key, int unproven)
{
	(void)id;
	(void)bucket_id;
	(void)bucket;
	(void)key;
	(void)session;
	(void)g4_key;
	(void)unproven;
	++*(size_t *)arg;
	return 0;
}

/* Whether the manifest of kvs/s1 names st's store as its owner. */
static int manifest_names(struct cold *cold, struct kvt_store *st)
{
	char *text = NULL, want[64];
	size_t len = 0;
	uint64_t id = 0;
	int found;

	assert_int_equal(cat_store_id(store_cat(st), &id), 0);
	snprintf(want, sizeof(want), "\"owner\": \"%016" PRIx64 "\"", id);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	found = strstr(text, want) != NULL;
	free(text);
	return found;
}

static void text_replace(char **text, const char *from, const char *to);

/*
 * a, with kvs/s1 demoted (s1/a 70000 bytes of seed 1, s1/b 5000 of seed 2,
 * both cold), closed, and its store directory copied with cp -a to b's,
 * as a VM image or a disk snapshot of it would be; G4 is one, under a's.
 */
static void copied_node(struct test_env *a, struct test_env *b)
{
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_g4_report rep;
	struct kvt_store *st;
	char cmd[700];

	two_envs(a, b);
	st = test_store_open(a);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(st, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);
	kvt_store_close(st);
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", a->cfg.store.dir, b->cfg.store.dir);
	assert_int_equal(system(cmd), 0);
}

/*
 * A store copied with cp -a kept the original's id, and with it took the
 * original's sessions for its own: its sweep deleted the G4 copy of an
 * object deleted in the copy, which the original still named cold (its
 * read failed), and its demotion wrote over the original's manifest. The
 * copy now writes and deletes nothing in G4 (-EREMCHG), and still recalls.
 */
static void test_copied_store_leaves_g4(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct cold *cold;

	(void)state;
	copied_node(&a, &b);
	sb = test_store_open(&b);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 5000, 2), 0);	/* a recall */
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), -EREMCHG);
	assert_int_equal(test_put(sb, "kvs", "s1/c", 3000, 3), 0);
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), -EREMCHG);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), -EREMCHG);
	kvt_store_close(sb);
	sa = test_store_open(&a);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_true(manifest_names(cold, sa));
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);	/* the original goes on */
	kvt_store_close(sa);
	test_env_release(&a);
	test_env_release(&b);
}

/*
 * A manifest written by a kvtier from before 2026-12-03 names no owner; a
 * copy given a new id took such a session for its own, like the sessions
 * it made: its sweep wrote the manifest naming itself and deleted the copy
 * of what it deleted, which the original still named cold. A copy leaves
 * such a session to the store it was copied from.
 */
static void test_store_id_new_unnamed_manifest(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct cold *cold;
	char *text = NULL, owner[64];
	size_t len = 0;
	uint64_t id = 0;

	(void)state;
	copied_node(&a, &b);
	sa = test_store_open(&a);
	assert_int_equal(cat_store_id(store_cat(sa), &id), 0);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	snprintf(owner, sizeof(owner), ", \"owner\": \"%016" PRIx64 "\"", id);
	text_replace(&text, owner, "");
	assert_int_equal(cold_put_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", text, strlen(text),
				      "application/json"), 0);
	free(text);
	sb = test_store_open(&b);
	assert_int_equal(kvt_store_identity_set(sb, KVT_IDENTITY_NEW, NULL), 0);
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	assert_null(strstr(text, "\"owner\""));
	free(text);
	kvt_store_close(sb);
	kvt_store_close(sa);
	test_env_release(&a);
	test_env_release(&b);
}

/* Writes len bytes of seed as bucket/key in session `session`. */
static int put_in_session(struct kvt_store *st, const char *b, const char *k, size_t len,
			  uint64_t seed, const char *session)
{
	struct kvt_put_opts po = { .session = session };

	return test_put_opts(st, b, k, len, seed, &po);
}

/*
 * Two stores over one G4, each with its own object at one key: a
 * conversation's key on node A, the same key on node B in a session of
 * its own (set by the client, or another session_depth). G4 named both
 * copies "BUCKET/KEY": B's upload went over A's copy, and A's recall then
 * failed its CRC32C, A's committed object lost. Each store's copies are
 * its own.
 */
static void test_two_stores_one_key(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "llama"), 0);
	assert_int_equal(kvt_bucket_create(sb, "llama"), 0);
	assert_int_equal(test_put(sa, "llama", "conv-1/b0", 70000, 1), 0);
	assert_int_equal(put_in_session(sb, "llama", "conv-1/b0", 70000, 2, "b-1"), 0);
	o = session_opts("llama", "conv-1");
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	o = session_opts("llama", "b-1");
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(sa, "llama", "conv-1/b0"), KVT_TIER_COLD);
	assert_int_equal(tier_of(sb, "llama", "conv-1/b0"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "llama", "conv-1/b0", 70000, 1), 0);
	assert_int_equal(test_check(sb, "llama", "conv-1/b0", 70000, 2), 0);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * The same, B first: then A's upload went over B's copy, and when B
 * deleted its object, B's sweep deleted "BUCKET/KEY", A's only copy.
 */
static void test_two_stores_one_key_swept(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "llama"), 0);
	assert_int_equal(kvt_bucket_create(sb, "llama"), 0);
	assert_int_equal(test_put(sa, "llama", "conv-2/b0", 70000, 3), 0);
	assert_int_equal(put_in_session(sb, "llama", "conv-2/b0", 70000, 4, "b-2"), 0);
	o = session_opts("llama", "b-2");
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	o = session_opts("llama", "conv-2");
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(kvt_object_delete(sb, "llama", "conv-2/b0"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(tier_of(sa, "llama", "conv-2/b0"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "llama", "conv-2/b0", 70000, 3), 0);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * The same between a store and its copy given kvtier store-id --new: both
 * hold one version of conv-1/b0, hot, and each demotes it in a session of
 * its own. Both uploads went to "BUCKET/KEY", and the copy's sweep of its
 * deleted object deleted the original's only copy.
 */
static void test_store_id_new_one_key(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o;
	char cmd[700];

	(void)state;
	two_envs(&a, &b);
	sa = test_store_open(&a);
	assert_int_equal(kvt_bucket_create(sa, "llama"), 0);
	assert_int_equal(test_put(sa, "llama", "conv-1/b0", 70000, 1), 0);
	kvt_store_close(sa);
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", a.cfg.store.dir, b.cfg.store.dir);
	assert_int_equal(system(cmd), 0);
	sa = test_store_open(&a);
	sb = test_store_open(&b);
	assert_int_equal(kvt_store_identity_set(sb, KVT_IDENTITY_NEW, NULL), 0);
	assert_int_equal(kvt_object_set_session(sb, "llama", "conv-1/b0", "copy"), 0);

	o = session_opts("llama", "conv-1");
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	o = session_opts("llama", "copy");
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(kvt_object_delete(sb, "llama", "conv-1/b0"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(tier_of(sa, "llama", "conv-1/b0"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "llama", "conv-1/b0", 70000, 1), 0);
	test_fsck_clean(sa);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * A copy given a new id keeps the original's cold objects, named by the
 * original's copies. The original moves them to another session, and its
 * sweep deletes the old session's manifest (it lists nothing now) and
 * keeps the copies, which its objects still name. The copy then deletes
 * one: with no manifest to name an owner, its sweep deleted the copy the
 * original still reads. A copy another store wrote goes only with a
 * session this store took over (its manifest names this store).
 */
/* sb given a new id, the copy of sa; sa moves s1's cold objects to s2,
 * and its sweep deletes s1's manifest, listing nothing now. */
static void moved_to_s2(struct kvt_store *sa, struct kvt_store *sb)
{
	struct cold *cold;
	char *text = NULL;
	size_t len = 0;

	assert_int_equal(kvt_store_identity_set(sb, KVT_IDENTITY_NEW, NULL), 0);
	assert_int_equal(kvt_object_set_session(sa, "kvs", "s1/a", "s2"), 0);
	assert_int_equal(kvt_object_set_session(sa, "kvs", "s1/b", "s2"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), -ENOENT);
}

static void test_store_id_new_moved_session(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;

	(void)state;
	copied_node(&a, &b);
	sa = test_store_open(&a);
	sb = test_store_open(&b);
	moved_to_s2(sa, sb);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);	/* recalled */
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/b"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/b"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "kvs", "s1/b", 5000, 2), 0);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * The same, the copy deleting one object at a time. Its first sweep found
 * no manifest of s1 (the original's sweep had deleted it), wrote one
 * naming the copy and listing s1/b under the original's copy, and its
 * next sweep took that manifest for one the copy had imported: it deleted
 * the original's copy of s1/b, which the original's s1/b (now in s2)
 * still named. A session G4 holds no manifest of, whose objects here name
 * another store's copies, is that store's: nothing of it is claimed, nor
 * deleted, here.
 */
static void test_store_id_new_moved_session_one_by_one(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct cold *cold;
	char *text = NULL;
	size_t len = 0;

	(void)state;
	copied_node(&a, &b);
	sa = test_store_open(&a);
	sb = test_store_open(&b);
	moved_to_s2(sa, sb);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	/* Nor does a demotion of what the copy writes there claim it. */
	assert_int_equal(test_put(sb, "kvs", "s1/c", 3000, 3), 0);
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(rep.objects, 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), -ENOENT);
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/b"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(tier_of(sa, "kvs", "s1/b"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	/* With none of them left, the session is the copy's to demote. */
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(test_check(sb, "kvs", "s1/c", 3000, 3), 0);
	two_nodes_close(&a, &b, sa, sb);
}

static void g4_to_legacy(const struct test_env *env, struct kvt_store *st, const char *gdir,
			 const char *b, const char *session, const char *const *keys, size_t n);

/*
 * The same over copies named "BUCKET/KEY", as a kvtier from before
 * per-store names left them, which name no store: the copy's sweep
 * deleted the original's copy of s1/a at once (no manifest, so no owner
 * to leave it to), and of s1/b once it was alone. In a store given a new
 * id they are the original's, as a manifest that names no owner is.
 */
static void test_store_id_new_moved_session_legacy(void **state)
{
	static const char *const keys[] = { "s1/a", "s1/b" };
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	char gdir[600], cmd[1300], *name;

	(void)state;
	two_envs(&a, &b);
	snprintf(gdir, sizeof(gdir), "%s/shared-g4", a.dir);
	sa = test_store_open(&a);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);
	g4_to_legacy(&a, sa, gdir, "kvs", "s1", keys, 2);
	kvt_store_close(sa);
	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", a.cfg.store.dir, b.cfg.store.dir);
	assert_int_equal(system(cmd), 0);
	sa = test_store_open(&a);
	sb = test_store_open(&b);
	moved_to_s2(sa, sb);
	name = g4_name_of(sb, "kvs", "s1/a");
	assert_string_equal(name, "kvs/s1/a");
	free(name);
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/b"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/b"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "kvs", "s1/b", 5000, 2), 0);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * kvtier store-id: --new gives the copy an id of its own, and its sweep
 * leaves what the old id owns (its deleted object's copy, the manifest);
 * --keep records a moved store's place and keeps its id. The machine is
 * part of the place; a store with no place recorded gets one at its open.
 */
static void test_store_identity(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_store_identity ia, ib;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s2");
	struct cold *cold;
	char path[400], cmd[1000];
	const char *real = store_machine_id_path;
	FILE *f;

	(void)state;
	copied_node(&a, &b);
	sa = test_store_open(&a);
	assert_int_equal(kvt_store_identity(sa, &ia), 0);
	assert_true(ia.recorded && ia.matches);
	sb = test_store_open(&b);
	assert_int_equal(kvt_store_identity(sb, &ib), 0);
	assert_true(ib.recorded);
	assert_false(ib.matches);
	assert_true(ib.id == ia.id);
	assert_true(ib.was.ino == ia.here.ino && ib.here.ino != ia.here.ino);

	/* A copy: a new id, and the original's copies stay. */
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_store_identity_set(sb, KVT_IDENTITY_NEW, &ib), 0);
	assert_true(ib.matches && ib.id != ia.id);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_true(manifest_names(cold, sa));
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	/* Its own sessions it demotes. */
	assert_int_equal(test_put(sb, "kvs", "s2/a", 3000, 3), 0);
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(rep.failures, 0);
	kvt_store_close(sb);

	/* Moved: copied, the original gone; --keep keeps the id. */
	kvt_store_close(sa);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -a '%s' '%s' && rm -rf '%s'",
		 b.cfg.store.dir, a.cfg.store.dir, b.cfg.store.dir, a.cfg.store.dir);
	assert_int_equal(system(cmd), 0);
	sb = test_store_open(&b);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), -EREMCHG);
	assert_int_equal(kvt_store_identity_set(sb, KVT_IDENTITY_KEEP, &ib), 0);
	assert_true(ib.matches && ib.id == ia.id);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);

	/* Another machine (a disk snapshot attached there) is another place. */
	snprintf(path, sizeof(path), "%s/machine-id", a.dir);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "0123456789abcdef0123456789abcdef\n");
	fclose(f);
	store_machine_id_path = path;
	assert_int_equal(kvt_store_identity(sb, &ib), 0);
	store_machine_id_path = real;
	assert_false(ib.matches);
	assert_true(ib.here.machine == 0x0123456789abcdefULL);
	kvt_store_close(sb);

	/* A store from before places were recorded: recorded at its open. */
	test_catalog_exec(&b, "DELETE FROM settings WHERE name LIKE 'store_place_%'");
	sb = test_store_open(&b);
	assert_int_equal(kvt_store_identity(sb, &ib), 0);
	assert_true(ib.recorded && ib.matches && ib.id == ia.id);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	kvt_store_close(sb);
	test_env_release(&a);
	test_env_release(&b);
}

/*
 * A copy that fills its hot tier: the demoter's pressure demotion of each
 * session is refused (-EREMCHG), and every pass (each second while the
 * store stays full) logged one line a session, "cannot demote session ...
 * under pressure; its objects stay hot: Remote address changed", which
 * named neither the copy nor what to do. The refusal is said once, by
 * store_g4_owned(); the writes still end in -ENOSPC and lose nothing.
 */
static void test_copied_store_pressure_log(void **state)
{
	struct test_env a, b;
	struct kvt_store *sb;
	char key[64], path[600], *log = NULL;
	int saved, rc = 0, written = 0, pressure = 0, copy = 0, full = 0;
	size_t len = 0;
	FILE *f;

	(void)state;
	copied_node(&a, &b);
	snprintf(path, sizeof(path), "%s/stderr", b.dir);
	saved = stderr_to(path);
	sb = test_store_open(&b);
	for (int i = 0; i < 64 && rc == 0; i++) {
		snprintf(key, sizeof(key), "p%d/blk", i);
		rc = test_put(sb, "kvs", key, 2 * 1024 * 1024, 100 + (uint64_t)i);
		written += rc == 0;
	}
	kvt_store_close(sb);
	stderr_back(saved);
	assert_int_equal(rc, -ENOSPC);
	assert_true(written > 1);
	assert_non_null(f = fopen(path, "r"));
	while (getline(&log, &len, f) > 0) {
		fputs(log, stderr);
		pressure += strstr(log, "under pressure") != NULL;
		copy += strstr(log, "not where its id was given") != NULL &&
			!strstr(log, "no room in the hot tier");
		full += strstr(log, "no room in the hot tier") && strstr(log, "kvtier store-id");
	}
	free(log);
	fclose(f);
	assert_int_equal(pressure, 0);
	/* Once for this store: said once a process, an earlier test's copy
	 * (test_store_identity) had it said, and this one said nothing. */
	assert_int_equal(copy, 1);
	assert_true(full >= 1);	/* the write refused says why */
	test_env_release(&a);
	test_env_release(&b);
}

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * store_g4_owned() on a copy asked the catalog, and read /etc/machine-id
 * and statx'd the store, at every call: 25 us, once a session at each
 * demoter pass (each second while the copy is full: a quarter of the
 * demoter's time, 26 ms a second with 3000 sessions). It asks again once
 * a second, so a `kvtier store-id --keep` in another process (here
 * another handle) takes effect in a running one within a second.
 */
static void test_copied_store_owned_cost(void **state)
{
	struct test_env a, b;
	struct kvt_store *sb, *other = NULL;
	double t0, cpu;
	int64_t asked;
	int rc = 0;

	(void)state;
	copied_node(&a, &b);
	sb = test_store_open(&b);
	t0 = thread_cpu_s();
	for (int i = 0; i < 100000; i++)
		rc = store_g4_owned(sb);
	cpu = thread_cpu_s() - t0;
	assert_int_equal(rc, -EREMCHG);
	fprintf(stderr, "store_g4_owned() refused: %.3f us a call\n", cpu * 10);
	assert_true(cpu < 0.5);	/* 2.5 s before, at 25 us a call */

	/* kvtier store-id --keep through a handle of its own, as another
	 * process would (not a fork: TSan refuses threads after a fork of a
	 * process that has some). */
	assert_int_equal(kvt_store_open(&b.cfg, 0, &other), 0);
	assert_int_equal(kvt_store_identity_set(other, KVT_IDENTITY_KEEP, NULL), 0);
	kvt_store_close(other);
	asked = util_mono_ns();
	while ((rc = store_g4_owned(sb)) == -EREMCHG && util_mono_ns() - asked < 5000000000LL)
		usleep(10000);
	assert_int_equal(rc, 0);
	assert_true(util_mono_ns() - asked < 3000000000LL);	/* 1 s, and room for a load */
	kvt_store_close(sb);
	test_env_release(&a);
	test_env_release(&b);
}

/*
 * The CPU time of a writer's reclaim over one victim whose every object
 * (1 byte, a 4 KiB extent) is of a session of its own that G4 lacks: seg
 * bytes, seg / 4096 sessions. It leaves the victim whole for the demoter.
 */
static double reclaim_victim_cpu(uint64_t seg)
{
	const int n = (int)(seg / 4096) + 8;	/* a segment full, the next begun */
	struct test_env env;
	struct kvt_store *st;
	struct kvt_store_stat s;
	char key[64];
	double t0, cpu = 0;
	int rc;

	g4_env_init(&env, 4 * seg, seg);
	env.cfg.store.high_watermark = 1.0;	/* no demoter pass meanwhile */
	env.cfg.store.low_watermark = 0.99;
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "s%05d/b", i);
		assert_int_equal(test_put(st, "kvs", key, 1, (uint64_t)i), 0);
	}
	assert_int_equal(kvt_store_stat(st, &s), 0);
	assert_int_equal(s.segments_sealed, 1);
	for (int i = 0; i < 3; i++) {	/* the least of three */
		t0 = thread_cpu_s();
		rc = reclaim_run(st, (unsigned)s.segments, 0);
		t0 = thread_cpu_s() - t0;
		cpu = i == 0 || t0 < cpu ? t0 : cpu;
		assert_int_equal(rc, -ENOSPC);
	}
	fprintf(stderr, "a writer's reclaim of a victim of %d sessions: %.1f ms of CPU\n",
		n - 8, cpu * 1e3);
	assert_int_equal(kvt_store_stat(st, &s), 0);
	assert_int_equal(s.segments_sealed, 1);	/* whole: G4 lacks all of it */
	assert_int_equal(test_check(st, "kvs", "s00000/b", 1, 0), 0);
	kvt_store_close(st);
	test_env_release(&env);
	return cpu;
}

/*
 * Reclaim kept the sessions of a victim's objects to demote, and those it
 * had tried, in lists it searched with strcmp for every object: a victim
 * of n sessions cost n^2 / 2 comparisons at each writer's reclaim and at
 * each demoter pass, and a demoter's pass over a full copy of 3060
 * sessions spent two thirds of its time there. A search tree now: eight
 * times the sessions cost eight times as much (and a little more: log n),
 * not 64 (a ratio, which neither a slow machine nor a sanitizer's build
 * moves much).
 */
static void test_reclaim_many_sessions_cost(void **state)
{
	double small, large;

	(void)state;
	small = reclaim_victim_cpu(4u << 20);
	large = reclaim_victim_cpu(32u << 20);
	fprintf(stderr, "eight times the sessions: %.1f times the CPU\n", large / small);
	assert_true(large < 16 * small);	/* 33 to 38 times before */
}

/*
 * One pass of the demoter over a full store whose partner refuses every
 * session alike (err: does not answer, -EHOSTUNREACH; says later,
 * -EAGAIN; its bucket missing, -ENXIO): how many requests reached the
 * partner, and how many "under pressure" lines were logged. Checked, the
 * next pass asks again, and once the partner is back a pass demotes and
 * nothing is lost.
 */
static void pressure_refused(int err)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_store_stat s;
	char key[64], path[600], *line = NULL;
	unsigned asked;
	size_t len = 0;
	int saved, rc, lines = 0, manifest_lines;
	FILE *f;

	g4_env_init(&env, CAP, SEG);
	env.cfg.store.high_watermark = 1.0;	/* no pass but this test's */
	env.cfg.store.low_watermark = 0.99;
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "p%d/blk", i);
		assert_int_equal(test_put(st, "kvs", key, 1u << 20, 300 + (uint64_t)i), 0);
	}
	assert_int_equal(kvt_store_stat(st, &s), 0);
	__atomic_store_n(&plan.err, err, __ATOMIC_SEQ_CST);
	__atomic_store_n(&plan.fail_gets, ~0u, __ATOMIC_SEQ_CST);
	__atomic_store_n(&plan.fail_puts, ~0u, __ATOMIC_SEQ_CST);
	__atomic_store_n(&plan.fail_heads, ~0u, __ATOMIC_SEQ_CST);
	snprintf(path, sizeof(path), "%s/stderr", env.dir);
	for (int pass = 0; pass < 2; pass++) {
		asked = __atomic_load_n(&plan.gets, __ATOMIC_SEQ_CST) +
			__atomic_load_n(&plan.puts, __ATOMIC_SEQ_CST);
		saved = stderr_to(path);
		rc = kvt_store_reclaim(st, (unsigned)s.segments);
		stderr_back(saved);
		asked = __atomic_load_n(&plan.gets, __ATOMIC_SEQ_CST) +
			__atomic_load_n(&plan.puts, __ATOMIC_SEQ_CST) - asked;
		assert_non_null(f = fopen(path, "r"));
		lines = 0;
		manifest_lines = 0;
		while (getline(&line, &len, f) > 0) {
			lines += strstr(line, "under pressure") != NULL;
			manifest_lines += strstr(line, "cannot read the manifest") != NULL;
		}
		fclose(f);
		fprintf(stderr, "pass %d, %s: %u requests to the partner, %d lines 'under pressure',"
			" %d 'cannot read the manifest'\n", pass, strerror(-err), asked, lines,
			manifest_lines);
		assert_int_equal(rc, -ENOSPC);
		/* Asked once (the first session's manifest), not once a session;
		 * not answered, twice: the next session's tells the partner's
		 * silence from the first session's own. */
		assert_int_equal(asked, err == -ENXIO ? 1 : 2);	/* 39 before: each session in a sealed segment */
		/* Said at the first pass, then once a minute: a full store
		 * passes every second (1 and 1 a pass before; 39 before that). */
		assert_int_equal(lines, pass == 0);
		assert_true(manifest_lines <= (pass == 0));
	}
	free(line);
	__atomic_store_n(&plan.fail_gets, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&plan.fail_puts, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&plan.fail_heads, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(kvt_store_reclaim(st, 4), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "p%d/blk", i);
		assert_int_equal(test_check(st, "kvs", key, 1u << 20, 300 + (uint64_t)i), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A demoter's pass over a full store asked the partner for every session
 * even when the answer could not differ from the first one's: the partner
 * not answering or saying later, or its bucket missing, cost one request,
 * and two log lines, a session at every pass (6120 lines a second with
 * 3060 sessions).
 * The first such answer ends the asking for the pass (the second in a row
 * for a partner that does not answer); the next asks again.
 */
static void test_pressure_refused_store_wide(void **state)
{
	(void)state;
	pressure_refused(-EHOSTUNREACH);
	pressure_refused(-EAGAIN);	/* a 503 SlowDown, or a 500 */
	pressure_refused(-ENXIO);
}

/* The faults of plan for the G4 copies st makes of session's objects in
 * bucket kvs alone (cold_fault_plan.only). */
static void fault_only_copies(struct kvt_store *st, struct cold_fault_plan *plan,
			      const char *session)
{
	uint64_t self = 0;

	assert_int_equal(cat_store_id(store_cat(st), &self), 0);
	snprintf(plan->only, sizeof(plan->only), ".kvtier/stores/%016" PRIx64 "/kvs/%s/", self,
		 session);
}

/* Counts the lines of the file at path that hold what. */
static unsigned lines_with(const char *path, const char *what)
{
	char line[2048];
	unsigned n = 0;
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/*
 * A full store whose partner fails one session, p0, the coldest, and
 * answers for the others: the manifest of p0 not answering (manifest, 1)
 * or its uploads answered 503 (0). How many times a demoter's pass asked
 * the partner about p0 (*fault: the faults it took), and how many lines
 * said it could not demote p0.
 */
struct one_fails {
	struct cold_fault_plan plan;
	struct test_env env;
	struct kvt_store *st;
	unsigned *fault;	/* plan.fail_gets or plan.fail_puts */
	char log[600];
};

static int one_fails_pass(struct one_fails *t, unsigned need, unsigned *asked, unsigned *lines)
{
	unsigned before = __atomic_load_n(t->fault, __ATOMIC_SEQ_CST);
	int saved = stderr_to(t->log), rc;
	int64_t t0 = util_mono_ns();

	rc = kvt_store_reclaim(t->st, need);
	stderr_back(saved);
	fprintf(stderr, "a pass of %.3f s\n", (util_mono_ns() - t0) / 1e9);
	*asked = before - __atomic_load_n(t->fault, __ATOMIC_SEQ_CST);
	*lines = lines_with(t->log, "cannot demote session 'p0'");
	return rc;
}

static void pressure_one_fails(int manifest)
{
	struct one_fails t = { .plan = { 0 } };
	struct kvt_store_stat s;
	unsigned asked, lines;
	char key[64];
	int cold = 0;

	g4_env_init(&t.env, CAP, SEG);
	t.env.cfg.store.high_watermark = 1.0;	/* no pass but this test's */
	t.env.cfg.store.low_watermark = 0.99;
	t.st = open_faulty(&t.env, &t.plan);
	/* Longer than the first pass takes under a sanitizer (0.2 s here). */
	t.st->backoff_ms = 2500;
	snprintf(t.log, sizeof(t.log), "%s/stderr", t.env.dir);
	assert_int_equal(kvt_bucket_create(t.st, "kvs"), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "p%d/blk", i);
		assert_int_equal(test_put(t.st, "kvs", key, 1u << 20, 300 + (uint64_t)i), 0);
	}
	assert_int_equal(kvt_store_stat(t.st, &s), 0);
	if (manifest) {
		snprintf(t.plan.only, sizeof(t.plan.only), COLD_MANIFEST_PREFIX "kvs/p0.json");
		t.plan.err = -EHOSTUNREACH;
		t.fault = &t.plan.fail_gets;
	} else {
		fault_only_copies(t.st, &t.plan, "p0");
		t.plan.err = -EAGAIN;
		t.fault = &t.plan.fail_puts;
	}
	t.plan.fail_gets = t.plan.fail_puts = t.plan.fail_heads = 1000;

	/* Every segment wanted: p0's stays whole, the rest go to G4 (but
	 * p39's, still open). */
	assert_int_equal(one_fails_pass(&t, (unsigned)s.segments, &asked, &lines), -ENOSPC);
	for (int i = 1; i < 39; i++) {
		snprintf(key, sizeof(key), "p%d/blk", i);
		cold += tier_of(t.st, "kvs", key) == KVT_TIER_COLD;
	}
	fprintf(stderr, "%s of p0 failing: %d of the 38 others cold, p0 asked %u times, %u lines\n",
		manifest ? "the manifest" : "the uploads", cold, asked, lines);
	assert_int_not_equal(tier_of(t.st, "kvs", "p0/blk"), KVT_TIER_COLD);
	assert_int_equal(cold, 38);	/* 0 before, for the manifest */
	assert_int_equal(asked, 1);
	assert_int_equal(lines, 1);
	/* The next pass leaves p0 alone, and says nothing of it. */
	assert_int_equal(one_fails_pass(&t, (unsigned)s.segments, &asked, &lines), -ENOSPC);
	assert_int_equal(asked, 0);	/* 1 before, for the uploads */
	assert_int_equal(lines, 0);	/* 1 before */

	/* Its back-off over, it is asked again, and backs off twice as long;
	 * its failure was said less than a minute ago. */
	usleep(2600 * 1000);
	if (manifest) {
		assert_int_equal(one_fails_pass(&t, (unsigned)s.segments, &asked, &lines), -ENOSPC);
		assert_int_equal(asked, 1);
		assert_int_equal(lines, 0);
		usleep(2600 * 1000);
		assert_int_equal(one_fails_pass(&t, (unsigned)s.segments, &asked, &lines), -ENOSPC);
		assert_int_equal(asked, 0);
		usleep(2600 * 1000);
	}

	/* The partner answers for p0 again: once its back-off is over, it goes. */
	t.plan.fail_gets = t.plan.fail_puts = t.plan.fail_heads = 0;
	assert_int_equal(one_fails_pass(&t, (unsigned)s.segments, &asked, &lines), -ENOSPC);
	assert_int_equal(lines, 0);
	assert_int_equal(tier_of(t.st, "kvs", "p0/blk"), KVT_TIER_COLD);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "p%d/blk", i);
		assert_int_equal(test_check(t.st, "kvs", key, 1u << 20, 300 + (uint64_t)i), 0);
	}
	kvt_store_close(t.st);
	test_env_release(&t.env);
}

/*
 * A full store of recalled sessions, G4 holding each: reclaim proves each
 * copy before its object goes cold. The partner not answering for q0's
 * copy, the coldest, and answering the others: one proof unanswered was
 * taken for the partner down, and the pass proved nothing else; the next
 * began with q0 again, and no recalled object went cold.
 */
static void test_pressure_one_proof_fails(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_store_stat s;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = { .idle = 0 };
	char key[64], log[600];
	int cold = 0, saved;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	env.cfg.store.high_watermark = 1.0;	/* no pass but this test's */
	env.cfg.store.low_watermark = 0.99;
	st = open_faulty(&env, &plan);
	snprintf(log, sizeof(log), "%s/stderr", env.dir);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "q%d/blk", i);
		assert_int_equal(test_put(st, "kvs", key, 1u << 20, 900 + (uint64_t)i), 0);
	}
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 40);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "q%d/blk", i);
		assert_int_equal(test_check(st, "kvs", key, 1u << 20, 900 + (uint64_t)i), 0);
	}
	assert_int_equal(kvt_store_stat(st, &s), 0);
	fault_only_copies(st, &plan, "q0");
	plan.err = -EHOSTUNREACH;
	plan.fail_heads = plan.fail_gets = 1000;
	for (int pass = 0; pass < 2; pass++) {
		saved = stderr_to(log);
		assert_int_equal(kvt_store_reclaim(st, (unsigned)s.segments), -ENOSPC);
		stderr_back(saved);
		assert_int_equal(tier_of(st, "kvs", "q0/blk"), KVT_TIER_HOT);
		/* Asked once a pass, however often its victim comes round. */
		assert_int_equal(lines_with(log, "cannot prove g4's copy of 'kvs/q0/blk'"), 1);
	}
	/* All but q1 and q2, in q0's segment, which stays whole (q39's, still
	 * open, is not counted). */
	for (int i = 1; i < 39; i++) {
		snprintf(key, sizeof(key), "q%d/blk", i);
		cold += tier_of(st, "kvs", key) == KVT_TIER_COLD;
	}
	fprintf(stderr, "q0's copy not answering: %d of 38 other recalled objects cold\n", cold);
	assert_int_equal(cold, 36);	/* 33 before */
	plan.fail_heads = plan.fail_gets = 0;
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "q%d/blk", i);
		assert_int_equal(test_check(st, "kvs", key, 1u << 20, 900 + (uint64_t)i), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * The nightly demotion (kvtier-migrate) of six idle sessions of four
 * objects each, with the partner not answering about n0 (its manifest,
 * manifest 1, or its uploads, 0) and answering
 * the others: the others go, n0's objects stay hot and count as failures,
 * and the output names n0. How many times the partner was asked about n0.
 */
static unsigned demote_one_fails(int manifest)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = { .idle = 0, .jobs = 1, .retries = 1 };
	unsigned *fault = manifest ? &plan.fail_gets : &plan.fail_puts;
	char key[64], log[600];
	int saved;

	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	snprintf(log, sizeof(log), "%s/stderr", env.dir);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 24; i++) {
		snprintf(key, sizeof(key), "n%d/b%d", i / 4, i % 4);
		assert_int_equal(test_put(st, "kvs", key, 8192, 500 + (uint64_t)i), 0);
	}
	if (manifest)
		snprintf(plan.only, sizeof(plan.only), COLD_MANIFEST_PREFIX "kvs/n0.json");
	else
		fault_only_copies(st, &plan, "n0");
	plan.err = -EHOSTUNREACH;
	plan.fail_gets = plan.fail_puts = plan.fail_heads = 1000;
	saved = stderr_to(log);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	stderr_back(saved);
	assert_int_equal(rep.sessions, 5);
	assert_int_equal(rep.objects, 20);
	assert_int_equal(rep.failures, 4);
	for (int i = 0; i < 24; i++) {
		snprintf(key, sizeof(key), "n%d/b%d", i / 4, i % 4);
		assert_int_equal(tier_of(st, "kvs", key) == KVT_TIER_COLD, i >= 4);
	}
	assert_true(lines_with(log, "session 'n0' of bucket 'kvs'") >= 1);
	for (int i = 0; i < 24; i++) {
		snprintf(key, sizeof(key), "n%d/b%d", i / 4, i % 4);
		assert_int_equal(test_check(st, "kvs", key, 8192, 500 + (uint64_t)i), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
	return 1000 - *fault;
}

/*
 * One session the partner fails in a nightly run does not stop the run:
 * the next sessions are demoted, and the run says which session failed.
 * Its uploads not answered, one object's tries are enough: the rest of
 * the session is left for the next run. Each tried in turn through all
 * its retries, a session of many objects whose copies timed out held the
 * run for their number times the retries, and no line named the session.
 */
static void test_demote_one_session_fails(void **state)
{
	unsigned asked;

	(void)state;
	asked = demote_one_fails(1);
	assert_int_equal(asked, 2);	/* the manifest read, tried again once */
	asked = demote_one_fails(0);
	fprintf(stderr, "n0's uploads failing: the partner asked %u times\n", asked);
	assert_int_equal(asked, 2);	/* 8 before: each of 4 objects twice */
}

/*
 * A recalled session demoted again proves each copy before it goes cold;
 * the partner not answering for the first proof leaves the rest of the
 * session untried, and untried, no copy of it is proven: none goes cold.
 */
static void test_demote_unanswered_unproven(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "r0");
	char key[64];

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "r0/b%d", i);
		assert_int_equal(test_put(st, "kvs", key, 8192, 700 + (uint64_t)i), 0);
	}
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 3);
	assert_int_equal(kvt_g4_recall_session(st, "kvs", "r0", NULL, &rep), 0);
	fault_only_copies(st, &plan, "r0");
	plan.err = -EHOSTUNREACH;
	plan.fail_heads = plan.fail_gets = 1000;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 3);
	assert_int_equal(rep.objects, 0);
	assert_int_equal(plan.fail_heads + plan.fail_gets, 1999);	/* one proof asked */
	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "r0/b%d", i);
		assert_int_not_equal(tier_of(st, "kvs", key), KVT_TIER_COLD);
	}
	plan.fail_heads = plan.fail_gets = 0;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 3);
	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "r0/b%d", i);
		assert_int_equal(test_check(st, "kvs", key, 8192, 700 + (uint64_t)i), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * One session whose demotion the partner fails every time, while it
 * answers for the others, held up every other demotion under pressure: a
 * manifest read that timed out was taken for the partner's silence, the
 * pass ended there, and the next began with the same session, the
 * coldest, so the others never moved and the hot tier stayed full. Its
 * uploads failing, it was asked again, and logged again, at every pass.
 */
static void test_pressure_one_session_fails(void **state)
{
	(void)state;
	pressure_one_fails(1);
	pressure_one_fails(0);
}

/* Points the manifest's entry for s1/b at another bucket's copy; *orig
 * (caller frees), if not NULL, is the manifest as it was. */
static void manifest_damage_b(struct cold *cold, char **orig)
{
	char *text = NULL;
	size_t len = 0;

	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	if (orig)
		*orig = strdup(text);
	{
		const char *at = strstr(text, "\"key\": \"s1/b\", \"g4_key\": \"");
		char from[600];

		assert_non_null(at);
		at += strlen("\"key\": \"s1/b\", ");
		snprintf(from, sizeof(from), "%.*s", (int)(strchr(at + 11, '"') + 1 - at), at);
		text_replace(&text, from, "\"g4_key\": \"other/x\"");
	}
	assert_int_equal(cold_put_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", text, strlen(text),
				      "application/json"), 0);
	free(text);
}

/*
 * An import with an entry that can never be imported (a manifest whose
 * entry points into another bucket) leaves nothing behind: the session
 * stays A's, so B must not list what it did import, since A's sweep
 * deletes those copies. Before, B kept them cold and every read failed
 * once A deleted its objects. Nor does the rollback record B's old view
 * of the session, which the import had replaced, as a dead copy for B's
 * sweep: it is rolled back, not deleted.
 */
static void test_handover_partial_import(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_object *obj = NULL;
	struct cold *cold = NULL;
	char *orig = NULL;
	size_t dead = 0;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	manifest_damage_b(cold, &orig);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(rep.objects, 0);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/a", &obj), -ENOENT);
	assert_int_equal(kvt_bucket_delete(sb, "kvs"), -ENOENT);
	assert_true(manifest_names(cold, sa));

	/* B has had the session, A took it back and wrote s1/a again. */
	assert_int_equal(cold_put_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", orig, strlen(orig),
				      "application/json"), 0);
	free(orig);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(kvt_g4_import_session(sa, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 71000, 11), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	manifest_damage_b(cold, NULL);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/a", &obj), 0);
	assert_int_equal(obj->size, 70000);	/* B's old view, as before the import */
	kvt_object_free(obj);
	assert_int_equal(cat_g4_dead(store_cat(sb), dead_count, &dead), 0);
	assert_int_equal(dead, 0);
	assert_true(manifest_names(cold, sa));
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 71000, 11), 0);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

/* Reclaim turns an object G4 holds cold instead of dropping it. */
static void test_reclaim_to_cold(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	char key[64];

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/kept", 2 * 1024 * 1024, 11), 0);
	assert_int_equal(test_put(st, "kvs", "s1/never", 1024 * 1024, 12), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);
	/* Recalled: hot again, and G4 still holds it. */
	assert_int_equal(test_check(st, "kvs", "s1/kept", 2 * 1024 * 1024, 11), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/kept"), KVT_TIER_HOT);
	/* Plain cache (keys that name no session), twice the hot tier:
	 * reclaim must make room. */
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "cache-%d", i);
		assert_int_equal(test_put(st, "kvs", key, 2 * 1024 * 1024, 100 + (uint64_t)i), 0);
	}
	assert_int_equal(tier_of(st, "kvs", "s1/kept"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/kept", 2 * 1024 * 1024, 11), 0);
	/* s1/never stayed cold; plain cache without a G4 copy is dropped as before. */
	assert_int_equal(tier_of(st, "kvs", "s1/never"), KVT_TIER_COLD);
	{
		struct kvt_object *obj = NULL;

		assert_int_equal(kvt_object_head(st, "kvs", "cache-0", &obj), -ENOENT);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

static int exists(struct kvt_store *st, const char *b, const char *k)
{
	struct kvt_object *o = NULL;
	int rc = kvt_object_head(st, b, k, &o);

	kvt_object_free(o);
	assert_true(rc == 0 || rc == -ENOENT);
	return rc == 0;
}

/*
 * Pressure: twice the hot tier of session state and plain cache. Every
 * session object stays readable (hot, or cold and recalled), plain cache
 * is dropped. With the partner down, writes fail with -ENOSPC rather than
 * lose a session; when it is back, demotion makes room again.
 */
static void test_pressure_demote(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	char key[64];
	int cold = 0, dropped = 0, rc = 0, written = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 64; i++) {
		if (i % 4 == 3)
			snprintf(key, sizeof(key), "cache-%d", i);
		else
			snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		assert_int_equal(test_put(st, "kvs", key, 2 * 1024 * 1024, 1000 + (uint64_t)i), 0);
	}
	/* Atomic: the background demoter counts them meanwhile. */
	assert_true(__atomic_load_n(&plan.puts, __ATOMIC_SEQ_CST) > 0);
	for (int i = 0; i < 64; i++) {
		if (i % 4 == 3) {
			snprintf(key, sizeof(key), "cache-%d", i);
			if (!exists(st, "kvs", key))
				dropped++;
			else
				assert_int_not_equal(tier_of(st, "kvs", key), KVT_TIER_COLD);
			continue;
		}
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		cold += tier_of(st, "kvs", key) == KVT_TIER_COLD;
	}
	assert_true(cold > 0);
	assert_true(dropped > 0);
	/* Every session object, byte-exact: reading the cold ones recalls them
	 * and demotes others to make room. */
	for (int i = 0; i < 64; i++) {
		if (i % 4 == 3)
			continue;
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		assert_int_equal(test_check(st, "kvs", key, 2 * 1024 * 1024, 1000 + (uint64_t)i), 0);
	}

	/* The partner goes away: new sessions fill the store, then -ENOSPC. */
	/* Atomic: the background demoter reads the plan meanwhile. */
	__atomic_store_n(&plan.err, -EAGAIN, __ATOMIC_SEQ_CST);
	__atomic_store_n(&plan.fail_puts, 1u << 30, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 64 && rc == 0; i++) {
		snprintf(key, sizeof(key), "down%d/blk", i);
		rc = test_put(st, "kvs", key, 2 * 1024 * 1024, 5000 + (uint64_t)i);
		written += rc == 0;
	}
	assert_int_equal(rc, -ENOSPC);
	for (int i = 0; i < written; i++) {
		snprintf(key, sizeof(key), "down%d/blk", i);
		assert_int_equal(test_check(st, "kvs", key, 2 * 1024 * 1024, 5000 + (uint64_t)i), 0);
	}
	for (int i = 0; i < 64; i++) {
		if (i % 4 == 3)
			continue;
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		assert_true(exists(st, "kvs", key));
	}
	/* It is back: the next write demotes and succeeds. */
	__atomic_store_n(&plan.fail_puts, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(test_put(st, "kvs", "after/blk", 2 * 1024 * 1024, 9000), 0);
	for (int i = 0; i < written; i++) {
		snprintf(key, sizeof(key), "down%d/blk", i);
		assert_int_equal(test_check(st, "kvs", key, 2 * 1024 * 1024, 5000 + (uint64_t)i), 0);
	}
	{
		struct kvt_fsck_report fr;

		/* Beside the background demoter, which may still reclaim: fsck
		 * judges one snapshot and confirms against the catalog now. */
		assert_true(st->demoter_running);
		assert_int_equal(kvt_store_fsck(st, 0, &fr), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A cold tier that notes which thread uploads: a writer must never be the
 * one (the background demoter is). It wraps a real tier, here the fault
 * injector over the file one.
 */
struct cold_who {
	struct cold base;
	struct cold *inner;
	pthread_t writer;
	unsigned puts_by_writer, puts_by_others;	/* atomic */
};

static int who_put(struct cold *c, const char *key, uint64_t size, const char *ctype,
		   cold_source_fn src, void *arg, struct cold_put_info *info)
{
	struct cold_who *w = (struct cold_who *)c;

	__atomic_add_fetch(pthread_equal(pthread_self(), w->writer) ? &w->puts_by_writer :
			   &w->puts_by_others, 1, __ATOMIC_SEQ_CST);
	return cold_put(w->inner, key, size, ctype, src, arg, info);
}

static int who_get(struct cold *c, const char *key, cold_sink_fn sink, void *arg, uint64_t *size)
{
	return cold_get(((struct cold_who *)c)->inner, key, sink, arg, size);
}

static int who_head(struct cold *c, const char *key, uint64_t *size, char *etag)
{
	return cold_head_etag(((struct cold_who *)c)->inner, key, size, etag);
}

static int who_del(struct cold *c, const char *key)
{
	return cold_del(((struct cold_who *)c)->inner, key);
}

static void who_set_journal(struct cold *c, const struct cold_journal *j)
{
	cold_set_journal(((struct cold_who *)c)->inner, j);
}

static void who_free(struct cold *c)
{
	struct cold_who *w = (struct cold_who *)c;

	cold_free(w->inner);
	free(w->base.url);
	free(w);
}

static const struct cold_ops who_ops = {
	.name = "who", .put = who_put, .get = who_get, .head = who_head, .del = who_del,
	.set_journal = who_set_journal, .free = who_free,
};

/* A store whose G4 is file -> fault(plan) -> who; *who stays the store's. */
static struct kvt_store *open_who(struct test_env *env, struct cold_fault_plan *plan,
				  struct cold_who **who)
{
	struct kvt_store *st = test_store_open(env);
	struct cold *inner = NULL, *f = NULL;
	struct cold_who *w = calloc(1, sizeof(*w));
	char dir[512];

	assert_non_null(w);
	snprintf(dir, sizeof(dir), "%s/g4", env->cfg.store.dir);
	assert_int_equal(cold_file_new(dir, &inner), 0);
	assert_int_equal(cold_fault_new(inner, plan, &f), 0);
	w->base.ops = &who_ops;
	w->base.url = strdup(f->url);
	w->inner = f;
	w->writer = pthread_self();
	store_set_cold(st, &w->base);
	*who = w;
	return st;
}

/* Waits up to 60 s for the fill to drop below the high watermark. */
static int wait_below_high(struct kvt_store *st)
{
	for (int i = 0; i < 600; i++) {
		if (!store_above_high(st, NULL))
			return 0;
		usleep(100 * 1000);
	}
	return -ETIMEDOUT;
}

/*
 * Pressure demotion runs in the background demoter, never in the writer
 * that needs space (a trace replay saw such writes stall for seconds): the
 * hot tier is filled with session state three times over, every upload
 * happens on another thread, the fill comes back below the high watermark
 * without another write, and every byte reads back.
 */
static void test_demoter_background(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct cold_who *who = NULL;
	struct test_env env;
	struct kvt_store *st;
	char key[64];
	int cold = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_who(&env, &plan, &who);
	assert_true(st->demoter_running);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 96; i++) {
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		assert_int_equal(test_put(st, "kvs", key, 2 * 1024 * 1024, 3000 + (uint64_t)i), 0);
	}
	assert_int_equal(wait_below_high(st), 0);
	assert_int_equal(__atomic_load_n(&who->puts_by_writer, __ATOMIC_SEQ_CST), 0);
	assert_true(__atomic_load_n(&who->puts_by_others, __ATOMIC_SEQ_CST) > 0);
	for (int i = 0; i < 96; i++) {
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		cold += tier_of(st, "kvs", key) == KVT_TIER_COLD;
	}
	assert_true(cold >= 48);
	/* Reading them recalls them, and the demoter makes room again. */
	for (int i = 0; i < 96; i++) {
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		assert_int_equal(test_check(st, "kvs", key, 2 * 1024 * 1024, 3000 + (uint64_t)i), 0);
	}
	assert_int_equal(__atomic_load_n(&who->puts_by_writer, __ATOMIC_SEQ_CST), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A demoter's pass frees the coldest segment as soon as that segment's
 * sessions are in G4. It used to set the segment aside after demoting
 * them and go on to the next, demoting the session state of every sealed
 * segment before it freed one: on a full hot tier (a trace replay with
 * 33 segments), writers waited out [store] space_wait. Fourteen sealed
 * segments hold a session each; two must be freed: the two coldest
 * sessions go to G4, the rest stay hot.
 */
static void test_demoter_frees_coldest_first(void **state)
{
	const uint64_t size = 900 * 1024;	/* 4 to a segment */
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	char key[64];

	(void)state;
	g4_env_init(&env, CAP, SEG);
	/* The demoter stays idle: below the high watermark, a segment free. */
	env.cfg.store.high_watermark = 0.99;
	env.cfg.store.low_watermark = 0.95;
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		assert_int_equal(test_put(st, "kvs", key, size, 7000 + (uint64_t)i), 0);
	}
	assert_int_equal(plan.puts, 0);
	assert_int_equal(kvt_store_reclaim(st, 3), 0);
	/* Two sessions of four objects and a manifest each; a little slack. */
	assert_in_range(plan.puts, 10, 15);
	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		if (i < 8)
			assert_int_equal(tier_of(st, "kvs", key), KVT_TIER_COLD);
		else if (i >= 16)
			assert_int_equal(tier_of(st, "kvs", key), KVT_TIER_HOT);
	}
	/*
	 * Read back after every tier is checked: the recalls fill the freed
	 * segments, and the demoter's next tick (once a second; more than the
	 * whole loop takes under load) rightly demotes the next coldest.
	 */
	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "s%d/blk%d", i / 4, i);
		assert_int_equal(test_check(st, "kvs", key, size, 7000 + (uint64_t)i), 0);
	}
	test_fsck_clean(st);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A cold tier that watches which process uploads, in memory every process
 * shares (MAP_SHARED): puts in flight per process, and how many began while
 * another process had one in flight. Every upload of a pressure demotion
 * happens inside a demoter pass, so two passes at once in two processes
 * show up as overlapping puts; the "demoter" lock must keep them apart.
 */
#define WATCH_PROCS 2

struct put_watch {
	unsigned active[WATCH_PROCS];	/* atomic */
	unsigned puts[WATCH_PROCS];
	unsigned overlaps;
};

struct cold_watch {
	struct cold base;
	struct cold *inner;
	struct put_watch *watch;
	int slot;
};

static int watch_put(struct cold *c, const char *key, uint64_t size, const char *ctype,
		     cold_source_fn src, void *arg, struct cold_put_info *info)
{
	struct cold_watch *w = (struct cold_watch *)c;
	struct put_watch *pw = w->watch;
	int rc;

	__atomic_add_fetch(&pw->active[w->slot], 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&pw->puts[w->slot], 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < WATCH_PROCS; i++)
		if (i != w->slot && __atomic_load_n(&pw->active[i], __ATOMIC_SEQ_CST) > 0)
			__atomic_add_fetch(&pw->overlaps, 1, __ATOMIC_SEQ_CST);
	rc = cold_put(w->inner, key, size, ctype, src, arg, info);
	__atomic_sub_fetch(&pw->active[w->slot], 1, __ATOMIC_SEQ_CST);
	return rc;
}

static int watch_get(struct cold *c, const char *key, cold_sink_fn sink, void *arg, uint64_t *size)
{
	return cold_get(((struct cold_watch *)c)->inner, key, sink, arg, size);
}

static int watch_head(struct cold *c, const char *key, uint64_t *size, char *etag)
{
	return cold_head_etag(((struct cold_watch *)c)->inner, key, size, etag);
}

static int watch_del(struct cold *c, const char *key)
{
	return cold_del(((struct cold_watch *)c)->inner, key);
}

static void watch_set_journal(struct cold *c, const struct cold_journal *j)
{
	cold_set_journal(((struct cold_watch *)c)->inner, j);
}

static void watch_free(struct cold *c)
{
	struct cold_watch *w = (struct cold_watch *)c;

	cold_free(w->inner);
	free(w->base.url);
	free(w);
}

static const struct cold_ops watch_ops = {
	.name = "watch", .put = watch_put, .get = watch_get, .head = watch_head,
	.del = watch_del, .set_journal = watch_set_journal, .free = watch_free,
};

/*
 * One of the two processes: its own store on the shared directory, its G4
 * the shared file one behind a stall (so that a pass lasts) and the watch;
 * writes 32 blocks of session state (2 MiB, two per session) into a 64 MiB
 * tier that the other process fills too, then waits for the fill to come
 * back below the high watermark. Exits 0, or 1 saying why.
 */
static int demoter_proc(struct test_env *env, struct put_watch *watch, int slot)
{
	struct cold_fault_plan plan = { .stall_ms = 20 };
	struct kvt_store *st = NULL;
	struct cold *inner = NULL, *f = NULL;
	struct cold_watch *w = calloc(1, sizeof(*w));
	char dir[512], key[64];
	int rc = w ? kvt_store_open(&env->cfg, 0, &st) : -ENOMEM;

	snprintf(dir, sizeof(dir), "%s/g4", env->cfg.store.dir);
	if (rc == 0)
		rc = cold_file_new(dir, &inner);
	if (rc == 0)
		rc = cold_fault_new(inner, &plan, &f);
	if (rc < 0) {
		fprintf(stderr, "process %d: cannot open: %s\n", slot, strerror(-rc));
		return 1;
	}
	w->base.ops = &watch_ops;
	w->base.url = strdup(f->url);
	w->inner = f;
	w->watch = watch;
	w->slot = slot;
	store_set_cold(st, &w->base);
	for (int i = 0; i < 32 && rc == 0; i++) {
		snprintf(key, sizeof(key), "p%d-s%d/blk%d", slot, i / 2, i);
		rc = test_put(st, "kvs", key, 2 * 1024 * 1024, 100 * (uint64_t)slot + (uint64_t)i);
		if (rc < 0)
			fprintf(stderr, "process %d: put '%s': %s\n", slot, key, strerror(-rc));
	}
	if (rc == 0 && wait_below_high(st) < 0) {
		fprintf(stderr, "process %d: still above the high watermark after 60 s\n", slot);
		rc = -ETIMEDOUT;
	}
	kvt_store_close(st);
	return rc == 0 ? 0 : 1;
}

/*
 * Two processes on one store, both above the high watermark, both with a
 * background demoter: never two demotion passes at once (no upload of one
 * process while the other's is in flight), and in the end the store is
 * below the high watermark with every block readable, hot or recalled.
 * Without the "demoter" lock in demoter_pass() this fails (overlaps > 0).
 */
static void test_demoter_two_procs(void **state)
{
	struct put_watch *watch;
	struct test_env env;
	struct kvt_store *st;
	struct kvt_store_stat ss;
	pid_t pid[WATCH_PROCS];
	char key[64];

	(void)state;
	watch = mmap(NULL, sizeof(*watch), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	assert_true(watch != MAP_FAILED);
	memset(watch, 0, sizeof(*watch));
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	/* A store, its connections and its locks never cross a fork. */
	kvt_store_close(st);
	for (int i = 0; i < WATCH_PROCS; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0)
			_exit(demoter_proc(&env, watch, i));
	}
	for (int i = 0; i < WATCH_PROCS; i++) {
		int status = 0;

		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	fprintf(stderr, "uploads: %u by process 0, %u by process 1, %u overlapping\n",
		watch->puts[0], watch->puts[1], watch->overlaps);
	assert_int_equal(watch->overlaps, 0);
	/* 128 MiB of session state went through a 64 MiB tier: demoted. */
	assert_true(watch->puts[0] + watch->puts[1] >= 16);
	st = test_store_open(&env);
	assert_false(store_above_high(st, NULL));
	assert_int_equal(kvt_store_stat(st, &ss), 0);
	assert_true(ss.demoted_objects >= 16);
	/* Nothing lost: every block reads back, recalled where it is cold (the
	 * demoter of this process makes room again as they come back). */
	for (int p = 0; p < WATCH_PROCS; p++) {
		for (int i = 0; i < 32; i++) {
			snprintf(key, sizeof(key), "p%d-s%d/blk%d", p, i / 2, i);
			assert_int_equal(test_check(st, "kvs", key, 2 * 1024 * 1024,
						    100 * (uint64_t)p + (uint64_t)i), 0);
		}
	}
	kvt_store_close(st);
	munmap(watch, sizeof(*watch));
	test_env_release(&env);
}

/*
 * Space truly exhausted: the partner is slow, the hot tier full of session
 * state G4 lacks. A writer waits at most [store] space_wait, then fails
 * with -ENOSPC; nothing written before is lost, and once the demoter has
 * caught up the next write succeeds.
 */
static void test_demoter_bounded_wait(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct cold_who *who = NULL;
	struct test_env env;
	struct kvt_store *st;
	char key[64];
	int written = 0, rc = 0;
	int64_t t0, waited_ms;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	env.cfg.store.space_wait = 1;
	st = open_who(&env, &plan, &who);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	__atomic_store_n(&plan.stall_ms, 4000, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 64 && rc == 0; i++) {
		struct timespec a, b;

		snprintf(key, sizeof(key), "w%d/blk", i);
		clock_gettime(CLOCK_MONOTONIC, &a);
		rc = test_put(st, "kvs", key, 2 * 1024 * 1024, 7000 + (uint64_t)i);
		clock_gettime(CLOCK_MONOTONIC, &b);
		t0 = (int64_t)(b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
		written += rc == 0;
		waited_ms = t0;
	}
	assert_int_equal(rc, -ENOSPC);
	/* Bounded: space_wait (1 s), not the partner's 4 s per upload. */
	assert_true(waited_ms >= 900);
	assert_true(waited_ms < 3500);
	assert_int_equal(__atomic_load_n(&who->puts_by_writer, __ATOMIC_SEQ_CST), 0);
	/* The partner is fast again: the demoter catches up, writes go on. */
	__atomic_store_n(&plan.stall_ms, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(wait_below_high(st), 0);
	assert_int_equal(test_put(st, "kvs", "after/blk", 2 * 1024 * 1024, 9100), 0);
	for (int i = 0; i < written; i++) {
		snprintf(key, sizeof(key), "w%d/blk", i);
		assert_int_equal(test_check(st, "kvs", key, 2 * 1024 * 1024, 7000 + (uint64_t)i), 0);
	}
	assert_int_equal(test_check(st, "kvs", "after/blk", 2 * 1024 * 1024, 9100), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Passes st's demoter has ended, read under its lock as the engine does. */
static uint64_t demoter_passes(struct kvt_store *st)
{
	uint64_t n;

	pthread_mutex_lock(&st->demoter_lock);
	n = st->demoter_passes;
	pthread_mutex_unlock(&st->demoter_lock);
	return n;
}

/*
 * A pass that cannot start (another process holds the "demoter" lock, or
 * g4.lock cannot be opened: a gateway out of file descriptors) waits for
 * the next tick like one that freed nothing. Run again at each kick, the
 * demoter and a writer waiting for room woke each other back to back: a
 * gateway at its open-file limit logged "cannot open '.../g4.lock'" 340,000
 * times in seconds (810 MB of log).
 */
static void test_demoter_pass_refused(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	uint64_t passes;
	char key[64];
	int lock, rc = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	env.cfg.store.space_wait = 1;
	st = test_store_open(&env);
	assert_true(st->demoter_running);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	lock = g4_lock(st, "demoter", "", "", 0);
	assert_true(lock >= 0);
	for (int i = 0; i < 64 && rc == 0; i++) {
		snprintf(key, sizeof(key), "r%d/blk", i);
		passes = demoter_passes(st);
		rc = test_put(st, "kvs", key, 2 * 1024 * 1024, 8000 + (uint64_t)i);
	}
	assert_int_equal(rc, -ENOSPC);
	/* The last put waited its space_wait (1 s): a pass a tick, not a spin. */
	assert_true(demoter_passes(st) - passes <= 4);
	g4_unlock(lock);
	assert_int_equal(wait_below_high(st), 0);
	assert_int_equal(test_put(st, "kvs", "after/blk", 2 * 1024 * 1024, 9200), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/* s1/a (size bytes of seed 21) in G4 and cold, on a store whose G4 obeys plan. */
static struct kvt_store *cold_one(struct test_env *env, struct cold_fault_plan *plan,
				  size_t size)
{
	struct kvt_store *st = open_faulty(env, plan);
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");

	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", size, 21), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	return st;
}

struct recall_arg {
	struct kvt_store *st;
	int rc;
};

static void *recall_thread(void *arg)
{
	struct recall_arg *ra = arg;

	ra->rc = test_check(ra->st, "kvs", "s1/a", 3 * 1024 * 1024, 21);
	return NULL;
}

/* Four threads read s1/a of st at once; ra[i].rc is each one's test_check(). */
static void recall_four(struct kvt_store *st, struct recall_arg ra[4])
{
	pthread_t th[4];

	for (int i = 0; i < 4; i++) {
		ra[i] = (struct recall_arg){ st, 1 };
		assert_int_equal(pthread_create(&th[i], NULL, recall_thread, &ra[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
}

/* Four threads read one cold object at once: one fetch from the partner. */
static void test_recall_coalesce_threads(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct recall_arg ra[4];
	unsigned gets;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = cold_one(&env, &plan, 3 * 1024 * 1024);
	gets = plan.gets;
	plan.stall_ms = 300;	/* a slow partner: the four overlap */
	recall_four(st, ra);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ra[i].rc, 0);
	assert_int_equal(plan.gets - gets, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * Four threads read one cold object at once and the partner fails, slowly:
 * one fetch, whose failure all four get. Each tried the partner again once
 * the one before it had failed: the fourth waited four timeouts.
 */
static void test_recall_failure_shared(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct recall_arg ra[4];
	unsigned gets;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = cold_one(&env, &plan, 3 * 1024 * 1024);
	gets = plan.gets;
	plan.err = -ETIMEDOUT;	/* a partner that does not answer */
	plan.fail_gets = 100;
	plan.stall_ms = 300;
	recall_four(st, ra);
	for (int i = 0; i < 4; i++)
		assert_true(ra[i].rc < 0);
	assert_int_equal(plan.gets - gets, 1);
	/* A later read tries the partner again, and recalls once it answers. */
	plan.fail_gets = 0;
	plan.stall_ms = 0;
	assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Two processes, each with its own store handle, read one cold object at
 * once: one fetch. The plan lives in shared memory, so both count in it. */
static void test_recall_coalesce_procs(void **state)
{
	struct cold_fault_plan *plan;
	struct test_env env;
	struct kvt_store *st;
	pid_t pid[2];
	unsigned gets;

	(void)state;
	plan = mmap(NULL, sizeof(*plan), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(plan != MAP_FAILED);
	memset(plan, 0, sizeof(*plan));
	g4_env_init(&env, CAP, SEG);
	st = cold_one(&env, plan, 3 * 1024 * 1024);
	kvt_store_close(st);
	gets = plan->gets;
	plan->stall_ms = 500;
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			struct kvt_store *cs = NULL;
			struct cold *inner = NULL, *f = NULL;
			char dir[512];
			int rc = kvt_store_open(&env.cfg, 0, &cs);

			snprintf(dir, sizeof(dir), "%s/g4", env.cfg.store.dir);
			if (rc == 0)
				rc = cold_file_new(dir, &inner);
			if (rc == 0)
				rc = cold_fault_new(inner, plan, &f);
			if (rc == 0) {
				store_set_cold(cs, f);
				rc = kvt_object_recall(cs, "kvs", "s1/a");
			}
			kvt_store_close(cs);
			_exit(rc == 0 ? 0 : 1);
		}
	}
	for (int i = 0; i < 2; i++) {
		int status = 0;

		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	assert_int_equal(plan->gets - gets, 1);
	plan->stall_ms = 0;
	st = open_faulty(&env, plan);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
	kvt_store_close(st);
	munmap(plan, sizeof(*plan));
	test_env_release(&env);
}

/* The partner does not answer, answers 503, drops the connection half way:
 * -EHOSTUNREACH (503 with Retry-After at the gateway, EIO in the mount),
 * the object stays cold and intact in G4, and a later read works. */
static void test_recall_unreachable(void **state)
{
	static const int errs[] = { -EHOSTUNREACH, -EAGAIN, -ECONNRESET };
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_reader *r = NULL;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = cold_one(&env, &plan, 3 * 1024 * 1024);
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		plan.err = errs[i];
		plan.fail_gets = 1;
		assert_int_equal(kvt_reader_open(st, "kvs", "s1/a", &r), -EHOSTUNREACH);
		plan.drop_gets = 1;
		assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -EHOSTUNREACH);
		assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	}
	assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
	{
		struct kvt_fsck_report fr;

		assert_int_equal(kvt_store_fsck(st, 0, &fr), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/* st's G4 back to the plain directory it was demoted to (open_faulty()). */
static void cold_dir_again(struct kvt_store *st, const struct test_env *env)
{
	struct cold *c = NULL;
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/g4", env->cfg.store.dir);
	assert_int_equal(cold_file_new(dir, &c), 0);
	store_set_cold(st, c);
}

/*
 * The partner has no bucket of [g4] url (deleted, or misnamed): a recall
 * is -ENXIO, which the gateway answers with a 503 that says so and the
 * mount with ENXIO; it was -EIO, the gateway's 500 InternalError, the
 * store's own failure. One GET each (no retry: none would do better, no
 * HEAD for a copy gone astray); the object stays cold and intact, and
 * reads once the bucket is there.
 */
static void test_recall_no_bucket(void **state)
{
	char *nb = s3_err("404 Not Found", "NoSuchBucket");
	const char *answers[] = { nb, nb, NULL };
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_reader *r = NULL;
	struct fake_s3 f;
	char *name, want[400];

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = cold_one(&env, &plan, 3 * 1024 * 1024);
	store_set_cold(st, fake_s3_start(&f, &env, answers));
	assert_int_equal(kvt_reader_open(st, "kvs", "s1/a", &r), -ENXIO);
	assert_null(r);
	assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -ENXIO);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	cold_dir_again(st, &env);
	fake_s3_stop(&f);
	name = g4_name_of(st, "kvs", "s1/a");
	snprintf(want, sizeof(want), "GET /gone/pfx/%s HTTP/1.1 \nGET /gone/pfx/%s HTTP/1.1 \n",
		 name, name);
	free(name);
	assert_string_equal(f.log, want);
	assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	test_fsck_clean(st);
	kvt_store_close(st);
	free(nb);
	test_env_release(&env);
}

/*
 * A recall with the partner's bucket missing logged two lines (the S3
 * tier's and the recall's), and kvtier-gateway answers it 503 with
 * Retry-After: 1: a client retrying every second filled the log. Each
 * line is said the first time, then once a minute, the recall's with the
 * count of those it left out.
 */
static void test_recall_no_bucket_logged_once(void **state)
{
	char *nb = s3_err("404 Not Found", "NoSuchBucket"), logpath[600];
	const char *answers[] = { nb, nb, nb, nb, nb, NULL };
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct fake_s3 f;
	struct cold *c;
	int saved;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = cold_one(&env, &plan, 3 * 1024 * 1024);
	c = fake_s3_start(&f, &env, answers);
	store_set_cold(st, c);
	snprintf(logpath, sizeof(logpath), "%s/recall.log", env.dir);
	saved = stderr_to(logpath);
	for (int i = 0; i < 4; i++)
		assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -ENXIO);
	c->recall_no_bucket.last_ns -= (LOG_REPEAT_SECONDS + 1) * 1000000000ll;
	assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -ENXIO);
	stderr_back(saved);
	assert_int_equal(lines_with(logpath, "the bucket 'gone' does not exist at the partner"), 1);
	assert_int_equal(lines_with(logpath, "cannot recall 'kvs/s1/a': the bucket of g4"), 2);
	assert_int_equal(lines_with(logpath, "(3 more recalls failed so since this was last said)"),
			 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	cold_dir_again(st, &env);
	fake_s3_stop(&f);
	assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
	kvt_store_close(st);
	free(nb);
	test_env_release(&env);
}

/*
 * The same for a partner that does not answer (here: nothing listens on
 * its port): each recall logged the S3 tier's "Couldn't connect" and its
 * own "does not answer", two lines a second for a client that retries at
 * the gateway's Retry-After: 1. Each is said the first time, then once a
 * minute, the recall's with the count of those it left out.
 */
static void test_recall_unreachable_logged_once(void **state)
{
	const char *answers[] = { NULL };
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct fake_s3 f;
	struct cold *c;
	char logpath[600];
	int saved;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = cold_one(&env, &plan, 3 * 1024 * 1024);
	c = fake_s3_start(&f, &env, answers);
	fake_s3_stop(&f);	/* its port answers no more */
	store_set_cold(st, c);
	snprintf(logpath, sizeof(logpath), "%s/recall.log", env.dir);
	saved = stderr_to(logpath);
	for (int i = 0; i < 4; i++)
		assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -EHOSTUNREACH);
	c->recall_no_answer.last_ns -= (LOG_REPEAT_SECONDS + 1) * 1000000000ll;
	assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -EHOSTUNREACH);
	stderr_back(saved);
	assert_int_equal(lines_with(logpath, "in bucket 'gone' failed: "), 1);
	assert_int_equal(lines_with(logpath, "cannot recall 'kvs/s1/a': g4 "), 2);
	assert_int_equal(lines_with(logpath, "(3 more recalls failed so since this was last said)"),
			 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	cold_dir_again(st, &env);
	assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * The sweep with the partner's bucket missing: each session with deleted
 * keys asked for its manifest and logged its own failure (a store with
 * thousands floods the log every night). The first one that finds the
 * bucket missing ends the asking: one GET, one line with the count of
 * sessions left. Every session still counts as a failure, and keeps its
 * dead entries, which a run with the bucket there deletes.
 */
static void test_sweep_no_bucket(void **state)
{
	char *nb = s3_err("404 Not Found", "NoSuchBucket");
	const char *answers[] = { nb, nb, nb, nb, NULL };
	struct cold_fault_plan plan = { 0 };
	struct kvt_g4_report rep;
	struct test_env env;
	struct kvt_store *st;
	struct fake_s3 f;
	size_t dead = 0;
	char key[32], *gpath = NULL;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 3; i++) {
		struct kvt_g4_opts o;

		snprintf(key, sizeof(key), "s%d/a", i);
		assert_int_equal(test_put(st, "kvs", key, 1000, 30 + i), 0);
		snprintf(key, sizeof(key), "s%d", i);
		o = session_opts("kvs", key);
		assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
		assert_int_equal(rep.objects, 1);
		snprintf(key, sizeof(key), "s%d/a", i);
		if (i == 0)
			gpath = g4_file_of(st, g4_dir(&env), "kvs", key);
		assert_int_equal(kvt_object_delete(st, "kvs", key), 0);
	}
	store_set_cold(st, fake_s3_start(&f, &env, answers));
	/* The listing of uploads that follows fails too: kvtier-migrate's exit 2. */
	assert_int_equal(kvt_g4_cleanup(st, NULL, &rep), -ENXIO);
	assert_int_equal(rep.failures, 3);
	cold_dir_again(st, &env);
	fake_s3_stop(&f);
	assert_string_equal(f.log, "GET /gone/pfx/.kvtier/manifests/kvs/s0.json HTTP/1.1 \n"
				   "GET /gone/?prefix=pfx%2F&uploads= HTTP/1.1 \n");
	assert_int_equal(cat_g4_dead(store_cat(st), dead_count, &dead), 0);
	assert_int_equal(dead, 3);
	assert_true(file_exists(gpath));
	assert_int_equal(kvt_g4_cleanup(st, NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	dead = 0;
	assert_int_equal(cat_g4_dead(store_cat(st), dead_count, &dead), 0);
	assert_int_equal(dead, 0);
	assert_false(file_exists(gpath));
	free(gpath);
	kvt_store_close(st);
	free(nb);
	test_env_release(&env);
}

/* The hot tier is full of pinned objects: the recall fails with -ENOSPC,
 * loses nothing, and succeeds once there is room. */
static void test_recall_disk_full(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct kvt_put_opts po = { .flags = KVT_PUT_PIN };
	struct test_env env;
	struct kvt_store *st;
	char key[64];
	int rc = 0, pinned = 0;

	(void)state;
	g4_env_init(&env, 32u << 20, SEG);
	st = cold_one(&env, &plan, 3 * 1024 * 1024);
	while (rc == 0 && pinned < 64) {
		struct kvt_writer *w = NULL;
		char *buf = malloc(1024 * 1024);

		assert_non_null(buf);
		test_fill(buf, 1024 * 1024, 77, 0);
		snprintf(key, sizeof(key), "pin-%d", pinned);
		rc = kvt_writer_open(st, "kvs", key, &po, &w);
		if (rc == 0)
			rc = kvt_writer_write(w, buf, 1024 * 1024);
		if (rc == 0)
			rc = kvt_writer_commit(w, NULL);
		else
			kvt_writer_abort(w);
		free(buf);
		pinned += rc == 0;
	}
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -ENOSPC);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	for (int i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "pin-%d", i);
		assert_int_equal(kvt_object_delete(st, "kvs", key), 0);
	}
	assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * A write to the hot tier fails during a recall (the 1st, 2nd or 3rd of
 * the object's three extents, written while the rest is still fetched):
 * the recall fails with -EIO once every write in flight is back, the object
 * stays cold and whole in G4, and the next recall brings it back.
 */
static void test_recall_write_fails(void **state)
{
	for (unsigned long nth = 1; nth <= 3; nth++) {
		struct io_fault_plan fault = { .kind = IO_FAULT_EIO, .ops = 1u << IO_WRITE,
					       .nth = nth };
		struct cold_fault_plan plan = { 0 };
		struct kvt_fsck_report fr;
		struct test_env env;
		struct kvt_store *st;

		(void)state;
		g4_env_init(&env, 32u << 20, SEG);
		st = cold_one(&env, &plan, 3 * 1024 * 1024);
		store_set_fault_plan(st, &fault);
		assert_int_equal(kvt_object_recall(st, "kvs", "s1/a"), -EIO);
		assert_int_equal(fault.injected, 1);
		assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
		store_set_fault_plan(st, NULL);
		assert_int_equal(test_check(st, "kvs", "s1/a", 3 * 1024 * 1024, 21), 0);
		assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
		assert_int_equal(kvt_store_fsck(st, 0, &fr), 0);
		kvt_store_close(st);
		test_env_release(&env);
	}
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void count_progress(void *arg, const char *bucket, const char *key, uint64_t size, int rc)
{
	unsigned *calls = arg;

	(void)bucket;
	(void)key;
	(void)size;
	(void)rc;
	(*calls)++;	/* the library serialises calls: no lock here */
}

/*
 * Four jobs over eight sessions while the partner answers 503 now and then
 * and drops a transfer half way: retries with backoff finish the run with
 * no failure. Then a recall of a session and of a list, in parallel, and a
 * rate limit that holds.
 */
static void test_jobs_retries_rate(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	unsigned calls = 0;
	struct kvt_g4_opts o = { .jobs = 4, .retries = 4, .progress = count_progress,
				 .arg = &calls };
	const char *keys[] = { "kvs/s0/k0", "kvs/s1/k1", "kvs/nosuch", "nobucketkey" };
	char key[64];
	int64_t t0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 16; i++) {
		snprintf(key, sizeof(key), "s%d/k%d", i % 8, i / 8);
		assert_int_equal(test_put(st, "kvs", key, 300000 + (size_t)i, 300 + (uint64_t)i), 0);
	}
	plan.err = -EAGAIN;
	plan.fail_puts = 3;
	plan.drop_puts = 2;
	/* Two puts the partner cannot prove (an ETag that is no MD5): those
	 * are read back, and both read-backs fail once. */
	plan.unverified_puts = 2;
	plan.fail_gets = 2;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 16);
	assert_int_equal(rep.sessions, 8);
	assert_int_equal(calls, 16);
	assert_true(plan.fail_puts == 0 && plan.drop_puts == 0 && plan.fail_gets == 0 &&
		    plan.unverified_puts == 0);
	for (int i = 0; i < 16; i++) {
		snprintf(key, sizeof(key), "s%d/k%d", i % 8, i / 8);
		assert_int_equal(tier_of(st, "kvs", key), KVT_TIER_COLD);
	}
	/* Without retries the same faults are failures, and nothing is lost. */
	o.retries = 0;
	plan.fail_gets = 1;
	assert_int_equal(kvt_g4_recall_session(st, "kvs", "s3", &o, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(rep.objects, 1);
	o.retries = 4;
	plan.fail_gets = 1;
	assert_int_equal(kvt_g4_recall_session(st, "kvs", "s3", &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(st, "kvs", "s3/k1"), KVT_TIER_HOT);
	/* A list: the bad lines fail, the good ones come back. */
	assert_int_equal(kvt_g4_recall_keys(st, keys, 4, &o, &rep), 0);
	assert_int_equal(rep.failures, 2);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(tier_of(st, "kvs", "s0/k0"), KVT_TIER_HOT);
	assert_int_equal(tier_of(st, "kvs", "s1/k1"), KVT_TIER_HOT);
	assert_int_equal(tier_of(st, "kvs", "s2/k0"), KVT_TIER_COLD);
	for (int i = 0; i < 16; i++) {
		snprintf(key, sizeof(key), "s%d/k%d", i % 8, i / 8);
		assert_int_equal(test_check(st, "kvs", key, 300000 + (size_t)i, 300 + (uint64_t)i), 0);
	}
	/* A partner that takes 100 ms per put and get. The sixteen objects
	 * recalled above go back (a manifest put for each of their eight
	 * sessions) with eight new sessions of one object (put, manifest: a
	 * verified put is not read back): four jobs keep several puts waiting
	 * on the partner at once. Counted, not timed: a loaded machine (CI
	 * under TSan) stretches any time limit. */
	for (int i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "slow%d/x", i);
		assert_int_equal(test_put(st, "kvs", key, 4096, 700 + (uint64_t)i), 0);
	}
	plan.stall_ms = 100;
	o = (struct kvt_g4_opts){ .jobs = 4 };
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 16 + 8);
	assert_true(plan.max_stalled >= 2);
	plan.stall_ms = 0;
	/* 5 MiB up at 4 MiB/s (a verified put is not read back): the limiter
	 * lets each piece go once the ones before it are paid for, so at least
	 * the first 4 MiB's second. */
	assert_int_equal(test_put(st, "kvs", "rate/x", 5u << 20, 99), 0);
	o = (struct kvt_g4_opts){ .bucket = "kvs", .session = "rate", .limit_rate = 4u << 20,
				  .jobs = 4 };
	t0 = mono_ns();
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_true(mono_ns() - t0 >= 850000000);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * One session of many objects (one long conversation; the benchmark's
 * blocks) goes up several objects at once when the run has jobs to spare:
 * with a partner that holds every put 100 ms, more than one waits at a
 * time. Counted, not timed. Failures among them are counted once each,
 * and those objects stay readable for the next run.
 */
static void test_demote_objects_parallel(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = { .bucket = "kvs", .session = "one", .jobs = 4 };
	char key[64];
	unsigned puts;
	int demoting = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (int i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "one/x%d", i);
		assert_int_equal(test_put(st, "kvs", key, 70000, 800 + (uint64_t)i), 0);
	}
	plan.stall_ms = 100;
	plan.err = -EIO;
	plan.fail_puts = 2;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 2);
	assert_int_equal(rep.objects, 6);
	assert_true(plan.max_stalled >= 2 && plan.max_stalled <= 4);
	for (int i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "one/x%d", i);
		demoting += tier_of(st, "kvs", key) == KVT_TIER_DEMOTING;
		assert_int_equal(test_check(st, "kvs", key, 70000, 800 + (uint64_t)i), 0);
	}
	assert_int_equal(demoting, 2);
	/* The checks above recalled the six: they go back without a put. */
	plan.stall_ms = 0;
	puts = plan.puts;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 8);
	assert_int_equal(plan.puts - puts, 2 + 1);	/* and the manifest */
	kvt_store_close(st);
	test_env_release(&env);
}

/* [g4] url = none: a pure cache node. Nothing to demote to, so reclaim
 * drops what it must free, and the G4 calls say -ENODEV. */
static void test_g4_none(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_object *obj = NULL;
	char key[64];
	int dropped = 0;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	free(env.cfg.g4.url);
	env.cfg.g4.url = strdup("none");
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 4096, 1), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), -ENODEV);
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), -ENODEV);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	/* Twice the hot tier: the oldest go, sessions and plain cache alike. */
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), i % 2 ? "s%d/blk" : "cache-%d", i);
		assert_int_equal(test_put(st, "kvs", key, 2 * 1024 * 1024, 100 + (uint64_t)i), 0);
	}
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), i % 2 ? "s%d/blk" : "cache-%d", i);
		if (kvt_object_head(st, "kvs", key, &obj) == -ENOENT)
			dropped++;
		else
			kvt_object_free(obj);
		obj = NULL;
	}
	assert_true(dropped >= 32);
	assert_int_equal(kvt_object_head(st, "kvs", "s1/a", &obj), -ENOENT);
	assert_int_equal(test_check(st, "kvs", "s63/blk", 2 * 1024 * 1024, 163), 0);
	kvt_store_close(st);
	test_env_release(&env);
}


/* Number of object files (their names end in '%') under dir, recursively;
 * manifests and temporary files aside. */
static int count_objects(const char *dir)
{
	char cmd[1200];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "find '%s' \\( -path '*/.kvtier/manifests' -o -path"
		 " '*/.kvtier/tmp' \\) -prune -o -type f -name '*%%' -print | wc -l", dir);
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_int_equal(fscanf(p, "%d", &n), 1);
	pclose(p);
	return n;
}

/*
 * Keys with "..", ".", empty components and "//" neither climb out of G4
 * nor land on one another: in a file:// G4 through a whole demotion and
 * recall, and in the S3 key mapping (cold_s3_key(), which
 * test_migrate_s3.sh drives against s3rver).
 */
static void test_keys_stay_inside(void **state)
{
	static const char *const keys[] = {
		"s/x", "s//x", "s/./x", "s/../x", "s/../../x", "s/%2E%2E/x", "s/%/x", "s/%25/x",
		"s/x/", "s/x/..", "s/.", "s/..", "s/...", "s/x//", "s/%2E", "s/x/%",
	};
	const size_t n = sizeof(keys) / sizeof(keys[0]);
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s");
	char g4[600], above[600], *mapped[sizeof(keys) / sizeof(keys[0])];

	(void)state;
	/* The mapping of S3 keys: injective, and no component is ".", ".." or
	 * empty, but for the last one of a directory marker ("s/x/"). */
	for (size_t i = 0; i < n; i++) {
		char gkey[128], *copy, *comp, *save = NULL;

		snprintf(gkey, sizeof(gkey), "kvs/%s", keys[i]);
		mapped[i] = cold_s3_key("kvtier/g4", gkey);
		assert_non_null(mapped[i]);
		assert_true(strncmp(mapped[i], "kvtier/g4/kvs/", 14) == 0);
		copy = strdup(mapped[i]);
		/* strtok_r skips empty components: count the slashes instead. */
		for (const char *p = mapped[i]; *p; p++)
			assert_false(p[0] == '/' && p[1] == '/');
		/* Only a key that ends in '/' (a directory marker) maps to one. */
		assert_int_equal(mapped[i][strlen(mapped[i]) - 1] == '/',
				 keys[i][strlen(keys[i]) - 1] == '/');
		for (comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
			assert_string_not_equal(comp, ".");
			assert_string_not_equal(comp, "..");
		}
		free(copy);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(mapped[i], mapped[j]);
	}
	/* Ordinary keys keep their names (G4 written before stays readable). */
	{
		char *k = cold_s3_key("p", "kvs/s1/blk-01.bin");

		assert_string_equal(k, "p/kvs/s1/blk-01.bin");
		free(k);
	}
	for (size_t i = 0; i < n; i++)
		free(mapped[i]);

	/* A file:// G4 two levels below the scratch directory. */
	g4_env_init(&env, CAP, SEG);
	snprintf(g4, sizeof(g4), "%s/deep/er/g4", env.dir);
	snprintf(above, sizeof(above), "%s/deep", env.dir);
	free(env.cfg.g4.url);
	env.cfg.g4.url = malloc(strlen(g4) + 8);
	sprintf(env.cfg.g4.url, "file://%s", g4);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(test_put(st, "kvs", keys[i], 1000 + i, 900 + i), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, n);
	assert_int_equal(count_objects(g4), (int)n);
	assert_int_equal(count_objects(above), (int)n);	/* nothing beside or above */
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(tier_of(st, "kvs", keys[i]), KVT_TIER_COLD);
		assert_int_equal(test_check(st, "kvs", keys[i], 1000 + i, 900 + i), 0);
	}
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * An object deleted, overwritten or renamed after its session went to G4
 * does not come back through G4: the next kvtier-migrate run (its
 * kvt_g4_cleanup()) rewrites the manifest without it and deletes its G4
 * copy when the key is gone; another node importing the session gets only
 * what still stands, and this node's overwritten object stays the new one.
 */
static void test_deleted_stay_deleted(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_object *obj = NULL;
	struct cold *cold = NULL;
	char *text = NULL, *deleted, *overwritten, *renamed, *kept, *renamed2;
	size_t len = 0;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/deleted", 70000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/overwritten", 70000, 2), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/renamed", 70000, 3), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/kept", 70000, 4), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 4);
	/* Recall one, so that it is hot while G4 still holds it. */
	assert_int_equal(test_check(sa, "kvs", "s1/renamed", 70000, 3), 0);
	assert_int_equal(store_cold(sa, &cold), 0);
	deleted = g4_name_of(sa, "kvs", "s1/deleted");
	overwritten = g4_name_of(sa, "kvs", "s1/overwritten");
	renamed = g4_name_of(sa, "kvs", "s1/renamed");
	kept = g4_name_of(sa, "kvs", "s1/kept");

	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/deleted"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/overwritten", 5000, 22), 0);
	assert_int_equal(kvt_object_rename(sa, "kvs", "s1/renamed", "s1/renamed2", 0), 0);
	/* Until the sweep, the manifest still lists them. */
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	assert_non_null(strstr(text, "\"s1/deleted\""));
	free(text);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	assert_null(strstr(text, "\"s1/deleted\""));
	assert_null(strstr(text, "\"s1/overwritten\""));
	assert_null(strstr(text, "\"s1/renamed\""));
	assert_non_null(strstr(text, "\"s1/kept\""));
	free(text);
	assert_int_equal(cold_head(cold, deleted, NULL), -ENOENT);
	assert_int_equal(cold_head(cold, renamed, NULL), -ENOENT);
	/* The new version is not in G4: nothing stands for the old copy. Kept,
	 * it stayed in G4 for good once the key was deleted (no trigger fires
	 * for a version G4 never had). */
	assert_int_equal(cold_head(cold, overwritten, NULL), -ENOENT);
	assert_int_equal(cold_head(cold, kept, NULL), 0);
	/* A second sweep has nothing left to do. */
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);

	/* The other node imports only what stands. */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/deleted", &obj), -ENOENT);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/overwritten", &obj), -ENOENT);
	assert_int_equal(test_check(sb, "kvs", "s1/kept", 70000, 4), 0);

	/* This node, once it takes the session back (B's import took it): the
	 * new version, the renamed object at its new name; the renamed one is
	 * uploaded again before it may go cold. */
	assert_int_equal(kvt_g4_import_session(sa, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/overwritten", 5000, 22), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/renamed2"), KVT_TIER_COLD);
	renamed2 = g4_name_of(sa, "kvs", "s1/renamed2");
	assert_int_equal(cold_head(cold, renamed2, NULL), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/renamed2", 70000, 3), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/overwritten", 5000, 22), 0);
	assert_int_equal(kvt_object_head(sa, "kvs", "s1/deleted", &obj), -ENOENT);

	/* Overwritten, swept, then deleted: its copy goes (a helper's case). */
	free(overwritten);
	overwritten = g4_name_of(sa, "kvs", "s1/overwritten");
	assert_int_equal(test_put(sa, "kvs", "s1/overwritten", 6000, 23), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/overwritten"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(cold_head(cold, overwritten, NULL), -ENOENT);
	free(deleted);
	free(overwritten);
	free(renamed);
	free(renamed2);
	free(kept);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * Demotes session s1 in a child process whose G4 ends it right after the
 * first put is stored (cold_fault_plan.exit_after_put): a kill -9 between
 * the put and the catalog's record of it. The caller has no store open.
 */
/* run(st) on env's store in a child killed once its first put is stored
 * (cold_fault_plan.exit_after_put). */
static void killed_after_put(struct test_env *env, void (*run)(struct kvt_store *st))
{
	int status = 0;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct cold_fault_plan plan = { .exit_after_put = 1 };
		struct kvt_store *st = NULL;
		struct cold *inner = NULL, *f = NULL;
		char dir[512];

		snprintf(dir, sizeof(dir), "%s/g4", env->cfg.store.dir);
		if (kvt_store_open(&env->cfg, 0, &st) == 0 && cold_file_new(dir, &inner) == 0 &&
		    cold_fault_new(inner, &plan, &f) == 0) {
			store_set_cold(st, f);
			run(st);
		}
		_exit(1);	/* no put was stored */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), COLD_FAULT_EXIT);
}

static void demote_s1(struct kvt_store *st)
{
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_g4_report rep;

	kvt_g4_demote(st, &o, &rep);
}

/*
 * Killed between an object's put and its record (g4_vid): nothing named the
 * copy, and once the key was deleted no sweep ever deleted it; G4 kept it
 * for good. The copy is recorded dead before the put and claimed with the
 * record. The sweep then deletes what a killed run left, and never a copy
 * that an object still needs: the next run uploads again and goes cold.
 */
static void test_killed_after_put(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	char *path;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(st, "kvs", "s1/b", 80000, 2), 0);
	kvt_store_close(st);

	/* The next demotion finishes the work: both cold, both intact; the
	 * sweep after it (the killed run's row still there) leaves the copies
	 * they went cold on. */
	killed_after_put(&env, demote_s1);
	st = test_store_open(&env);
	path = g4_upload_file(st, g4_dir(&env), "kvs", "s1/a");
	assert_true(file_exists(path));
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_DEMOTING);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(tier_of(st, "kvs", "s1/b"), KVT_TIER_COLD);
	assert_true(file_exists(path));
	free(path);
	assert_int_equal(test_check(st, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(st, "kvs", "s1/b", 80000, 2), 0);

	/* Killed again after a put, then the key deleted: the sweep deletes
	 * the copy no object names, and only that one. */
	assert_int_equal(test_put(st, "kvs", "s1/c", 90000, 3), 0);
	kvt_store_close(st);
	killed_after_put(&env, demote_s1);
	st = test_store_open(&env);
	path = g4_upload_file(st, g4_dir(&env), "kvs", "s1/c");
	assert_true(file_exists(path));
	assert_int_equal(kvt_object_delete(st, "kvs", "s1/c"), 0);
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), 0);
	assert_false(file_exists(path));
	free(path);
	assert_int_equal(test_check(st, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(st, "kvs", "s1/b", 80000, 2), 0);
	assert_int_equal(count_objects(g4_dir(&env)), 2);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Replaces the first `from` in *text with `to`. */
static void text_replace(char **text, const char *from, const char *to)
{
	char *at = strstr(*text, from), *out;

	assert_non_null(at);
	out = malloc(strlen(*text) + strlen(to) + 1);
	sprintf(out, "%.*s%s%s", (int)(at - *text), *text, to, at + strlen(from));
	free(*text);
	*text = out;
}

/*
 * Import takes permission bits only from a manifest: set-uid, set-gid and
 * sticky bits that whoever can write the partner bucket put there are
 * dropped (docs/security.md, G4).
 */
static void test_import_mode_clamped(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_object *obj = NULL;
	struct cold *cold = NULL;
	char *text = NULL, mode[64];
	size_t len = 0;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 100, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 100, 2), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/c", 100, 3), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 3);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	/* a: set-uid and all bits; b: set-gid, sticky, a directory's type on a file. */
	snprintf(mode, sizeof(mode), "\"mode\": %u", (unsigned)(S_IFREG | 07777));
	text_replace(&text, "\"mode\": 420", mode);
	snprintf(mode, sizeof(mode), "\"mode\": %u", (unsigned)(S_IFDIR | 03755));
	text_replace(&text, "\"mode\": 420", mode);
	text_replace(&text, "\"mode\": 420", "\"mode\": 4294967295");
	assert_int_equal(cold_put_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", text, strlen(text),
				      "application/json"), 0);
	free(text);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 3);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/a", &obj), 0);
	assert_int_equal(obj->posix.mode, S_IFREG | 0777);
	kvt_object_free(obj);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/b", &obj), 0);
	assert_int_equal(obj->posix.mode, S_IFREG | 0755);
	kvt_object_free(obj);
	assert_int_equal(kvt_object_head(sb, "kvs", "s1/c", &obj), 0);
	assert_int_equal(obj->posix.mode, S_IFREG | 0777);
	kvt_object_free(obj);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 100, 1), 0);
	two_nodes_close(&a, &b, sa, sb);
}

/* Makes every object of session s1 cold on st; fails the test otherwise. */
static void all_cold(struct kvt_store *st, const char *const *keys, size_t n)
{
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_g4_report rep;

	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(tier_of(st, "kvs", keys[i]), KVT_TIER_COLD);
}

/*
 * A cold object renamed (FUSE rename, one key or a directory) keeps its
 * bytes under its old G4 name: recall finds them there, the sweep does not
 * delete them, a new object at the old key does not overwrite them, and
 * another node imports the session with it. The gateway's rename (copy of
 * the cold object, then delete) recalls it first. Before, recall looked for
 * the new name, and the next sweep deleted the only copy.
 */
static void test_rename_cold(void **state)
{
	static const char *const cold1[] = { "s1/a2", "s1/dir2/c", "s1/other" };
	static const char *const cold2[] = { "s1/a", "s1/a2", "s1/b2", "s1/dir2/c", "s1/other" };
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 300000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 200000, 2), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/dir/c", 100000, 3), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/other", 5000, 4), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 4);

	/* FUSE: rename(2) of a file and of a directory, all cold. */
	assert_int_equal(kvt_object_rename(sa, "kvs", "s1/a", "s1/a2", 0), 0);
	assert_int_equal(kvt_object_rename(sa, "kvs", "s1/dir/", "s1/dir2/", KVT_RENAME_PREFIX), 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/a2"), KVT_TIER_COLD);
	/* The gateway: CopyObject then DeleteObject. */
	assert_int_equal(kvt_object_copy(sa, "kvs", "s1/b", "kvs", "s1/b2", NULL, NULL), 0);
	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/b"), 0);
	/* A new object at the old name, and the sweep, before any recall. */
	assert_int_equal(test_put(sa, "kvs", "s1/a", 40000, 11), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);

	/* Every object reads back byte-exact, recalled from where G4 has it. */
	assert_int_equal(test_check(sa, "kvs", "s1/a2", 300000, 1), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/dir2/c", 100000, 3), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/b2", 200000, 2), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 40000, 11), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/other", 5000, 4), 0);
	/* Cold again, swept again, and read again: still there. */
	all_cold(sa, cold2, 5);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a2", 300000, 1), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 40000, 11), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/dir2/c", 100000, 3), 0);
	all_cold(sa, cold1, 3);

	/* Another node imports the session and recalls each object. */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 5);
	assert_int_equal(test_check(sb, "kvs", "s1/a2", 300000, 1), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 40000, 11), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b2", 200000, 2), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/dir2/c", 100000, 3), 0);

	/* A renamed object renamed again while hot is uploaded under its
	 * new name, and its old copy goes with the next sweep. */
	assert_int_equal(kvt_object_rename(sa, "kvs", "s1/a2", "s1/a3", 0), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/a3"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "kvs", "s1/a3", 300000, 1), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 40000, 11), 0);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * What a kvtier of schema 4 left, by SQL on today's catalog: the columns,
 * index, triggers and settings of migrations 5 and on undone (each step
 * that finds nothing to undo is passed over), that version's triggers
 * back, and user_version 4. Its rename of a cold object kept g4_vid and
 * recorded only the old key in g4_dead (no g4_key column yet).
 */
static void catalog_to_schema4(const char *dir)
{
	static const char *const steps[] = {
		"DROP INDEX IF EXISTS g4_dead_unproven_session",
		"DROP INDEX IF EXISTS objects_g4_unnamed",
		"DROP INDEX IF EXISTS objects_g4_unnamed_crc",
		"DROP INDEX IF EXISTS g4_dead_unproven",
		"ALTER TABLE g4_dead DROP COLUMN unproven",
		"DROP INDEX IF EXISTS objects_g4_key",
		"DROP TRIGGER IF EXISTS objects_g4_deleted",
		"DROP TRIGGER IF EXISTS objects_g4_moved",
		"ALTER TABLE objects DROP COLUMN g4_key",
		"ALTER TABLE g4_dead DROP COLUMN g4_key",
		"ALTER TABLE extents DROP COLUMN crcs",
		"DELETE FROM settings WHERE name IN ('extent_payload_max', 'g4_manifest_owner')",
		"CREATE TRIGGER objects_g4_deleted AFTER DELETE ON objects WHEN OLD.g4_vid <> 0 BEGIN"
		"  INSERT INTO g4_dead(bucket, key, session) VALUES(OLD.bucket, OLD.key, OLD.session);"
		" END",
		"CREATE TRIGGER objects_g4_moved AFTER UPDATE OF key, session ON objects"
		" WHEN OLD.g4_vid <> 0 AND (OLD.key <> NEW.key OR OLD.session <> NEW.session) BEGIN"
		"  INSERT INTO g4_dead(bucket, key, session) VALUES(OLD.bucket, OLD.key, OLD.session);"
		"  UPDATE objects SET g4_vid = 0, g4_etag = NULL"
		"   WHERE id = NEW.id AND OLD.key <> NEW.key AND NEW.tier <> 2;"
		" END",
		"PRAGMA user_version = 4",
	};
	char path[600];
	sqlite3 *db = NULL;
	int64_t v = -1;
	sqlite3_stmt *s = NULL;

	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	for (size_t i = 0; i < ARRAY_SIZE(steps); i++)
		sqlite3_exec(db, steps[i], NULL, NULL, NULL);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM pragma_table_info('objects')"
					    " WHERE name = 'g4_key') + (SELECT user_version FROM"
					    " pragma_user_version)", -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	assert_int_equal(v, 4);
	sqlite3_close(db);
}

/*
 * G4 as a kvtier from before per-store names left it for st's demoted
 * objects keys[] of bucket b's session: each copy at "BUCKET/KEY" (no
 * g4_key in the catalog) and the manifest, of format 1, naming them so.
 * The copies this kvtier made are moved there.
 */
static void g4_to_legacy(const struct test_env *env, struct kvt_store *st, const char *gdir,
			 const char *b, const char *session, const char *const *keys, size_t n)
{
	struct cold *cold = NULL;
	char mkey[300], *text = NULL;
	size_t len = 0;

	assert_int_equal(store_cold(st, &cold), 0);
	snprintf(mkey, sizeof(mkey), COLD_MANIFEST_PREFIX "%s/%s.json", b, session);
	assert_int_equal(cold_get_buf(cold, mkey, 1 << 20, &text, &len), 0);
	text_replace(&text, "\"kvtier_manifest\": 2,", "\"kvtier_manifest\": 1,");
	for (size_t i = 0; i < n; i++) {
		char *name = g4_name_of(st, b, keys[i]), legacy[600], from[1300], to[700];
		char *src = cold_file_name(gdir, name), *dst, *slash, *sql;

		snprintf(legacy, sizeof(legacy), "%s/%s", b, keys[i]);
		dst = cold_file_name(gdir, legacy);
		assert_non_null(src);
		assert_non_null(dst);
		slash = strrchr(dst, '/');
		*slash = '\0';
		assert_int_equal(util_mkdir_p(dst), 0);
		*slash = '/';
		assert_int_equal(rename(src, dst), 0);
		snprintf(from, sizeof(from), "\"g4_key\": \"%s\"", name);
		snprintf(to, sizeof(to), "\"g4_key\": \"%s\"", legacy);
		text_replace(&text, from, to);
		sql = sqlite3_mprintf("UPDATE objects SET g4_key = NULL WHERE key = %Q AND bucket ="
				      " (SELECT id FROM buckets WHERE name = %Q)", keys[i], b);
		test_catalog_exec(env, sql);
		sqlite3_free(sql);
		free(src);
		free(dst);
		free(name);
	}
	assert_int_equal(cold_put_buf(cold, mkey, text, strlen(text), "application/json"), 0);
	free(text);
}

/* SQL on the catalog at dir; it must succeed. */
static void catalog_exec(const char *dir, const char *sql)
{
	char path[600];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/*
 * Cold objects renamed through the mount of a kvtier of schema 4 kept
 * their only G4 copy under the old name, known only from that name's
 * g4_dead row. After the upgrade (catalog migrations 5 and on) recall
 * looked for the new name (EIO) and the first sweep deleted the old one.
 * Now each is found where G4 holds it: by a read (a2), by the sweep
 * after a demotion of a new object at the old name (b2; the new one goes
 * to a name of its own), by the sweep, which must not delete it (c2); an
 * object deleted there still has
 * its copy swept (d), and every read is byte-exact, on this store and on
 * a second one that imports the session from the manifest.
 */
static void test_rename_cold_schema4(void **state)
{
	static const char *const keys[] = { "s1/a", "s1/b", "s1/c", "s1/d" };
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	char path[600];

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	/* a and b of one size: the bytes tell them apart, not the size. */
	assert_int_equal(test_put(sa, "kvs", "s1/a", 300000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 300000, 2), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/c", 5000, 3), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/d", 7000, 4), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 4);
	snprintf(path, sizeof(path), "%s/shared-g4", a.dir);
	g4_to_legacy(&a, sa, path, "kvs", "s1", keys, 4);
	kvt_store_close(sa);

	/* The schema-4 kvtier: the mount renames three, deletes one. */
	catalog_to_schema4(a.cfg.store.dir);
	catalog_exec(a.cfg.store.dir,
		     "UPDATE objects SET key = key || '2' WHERE key IN ('s1/a', 's1/b', 's1/c');"
		     "DELETE FROM objects WHERE key = 's1/d';");

	/* Today's kvtier opens it: the read finds a2 under its old name. */
	sa = test_store_open(&a);
	assert_int_equal(tier_of(sa, "kvs", "s1/a2"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "kvs", "s1/a2", 300000, 1), 0);
	/* A new object at b's old name, demoted before any sweep. */
	assert_int_equal(test_put(sa, "kvs", "s1/b", 300000, 12), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(sa, "kvs", "s1/b"), KVT_TIER_COLD);
	/* The sweep: d's copy goes, c2's stays. */
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	snprintf(path, sizeof(path), "%s/shared-g4/kvs/s1/d%%", a.dir);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(test_check(sa, "kvs", "s1/c2", 5000, 3), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/b2", 300000, 2), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/b", 300000, 12), 0);
	/* All cold again, swept again: still there, here and on b. */
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 4);
	assert_int_equal(test_check(sa, "kvs", "s1/a2", 300000, 1), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/c2", 5000, 3), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a2", 300000, 1), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b2", 300000, 2), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 300000, 12), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/c2", 5000, 3), 0);
	test_fsck_clean(sa);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * The same against a partner whose HEAD gives an ETag (S3's MD5; the fault
 * tier's etag_heads): the copy is matched by it. A HEAD that fails leaves
 * the copy where it is for the next run, whose sweep then finds its object.
 */
static void test_rename_cold_schema4_etag(void **state)
{
	static const char *const keys[] = { "s1/a", "s1/b" };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct cold_fault_plan plan = { .etag_heads = 1 };
	char path[600];
	unsigned gets;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 100000, 1), 0);
	assert_int_equal(test_put(st, "kvs", "s1/b", 100000, 2), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);
	g4_to_legacy(&env, st, g4_dir(&env), "kvs", "s1", keys, 2);
	kvt_store_close(st);
	catalog_to_schema4(env.cfg.store.dir);
	catalog_exec(env.cfg.store.dir, "UPDATE objects SET key = 's1/a2' WHERE key = 's1/a'");

	st = open_faulty(&env, &plan);
	snprintf(path, sizeof(path), "%s/g4/kvs/s1/a%%", env.cfg.store.dir);
	plan.fail_heads = 1;
	kvt_g4_cleanup(st, NULL, NULL);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(plan.fail_heads, 0);
	gets = plan.gets;
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), 0);
	assert_int_equal(plan.gets, gets + 1);	/* the manifest's owner: the ETag matched */
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(tier_of(st, "kvs", "s1/a2"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a2", 100000, 1), 0);
	assert_int_equal(test_check(st, "kvs", "s1/b", 100000, 2), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/* ".kvtier/stores/STORE/BUCKET/KEY~VID" of st's b/k as it is now. */
static void g4_name_want(struct kvt_store *st, const char *b, const char *k, int version,
			 char *want, size_t len)
{
	struct cat_object *co = NULL;
	uint64_t id = 0;

	assert_int_equal(cat_store_id(store_cat(st), &id), 0);
	assert_int_equal(cat_object_lookup(store_cat(st), b, k, 0, &co), 0);
	if (version)
		snprintf(want, len, ".kvtier/stores/%016" PRIx64 "/.versions/%s/%016" PRIx64, id,
			 b, co->vid);
	else
		snprintf(want, len, ".kvtier/stores/%016" PRIx64 "/%s/%s~%016" PRIx64, id, b, k,
			 co->vid);
	cat_object_free(co);
}

/*
 * The names of G4 copies (migrate.c's head comment): under the store's id,
 * the key and the version; where that would not fit the partner (here a
 * last component over NAME_MAX once "~VID" is added), under the store's id
 * and the version alone. Another node imports them as they are, and once
 * the session is its own, its sweep deletes them with its objects.
 */
static void test_g4_names(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	char lkey[300], want[1400], *name, *fa, *fl;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	snprintf(lkey, sizeof(lkey), "s1/%0240d", 7);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 5000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", lkey, 6000, 2), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(rep.failures, 0);
	name = g4_name_of(sa, "kvs", "s1/a");
	g4_name_want(sa, "kvs", "s1/a", 0, want, sizeof(want));
	assert_string_equal(name, want);
	free(name);
	name = g4_name_of(sa, "kvs", lkey);
	g4_name_want(sa, "kvs", lkey, 1, want, sizeof(want));
	assert_string_equal(name, want);
	free(name);
	assert_int_equal(test_check(sa, "kvs", lkey, 6000, 2), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 5000, 1), 0);
	all_cold(sa, (const char *const[]){ "s1/a" }, 1);

	/* B imports both names as A gave them, and reads through them. */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);
	name = g4_name_of(sb, "kvs", "s1/a");
	g4_name_want(sa, "kvs", "s1/a", 0, want, sizeof(want));
	assert_string_equal(name, want);
	free(name);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 5000, 1), 0);
	assert_int_equal(test_check(sb, "kvs", lkey, 6000, 2), 0);
	/* The session is B's: what B deletes, its sweep deletes in G4. */
	snprintf(want, sizeof(want), "%s/shared-g4", a.dir);
	fa = g4_file_of(sb, want, "kvs", "s1/a");
	fl = g4_file_of(sb, want, "kvs", lkey);
	assert_true(file_exists(fa) && file_exists(fl));
	assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_object_delete(sb, "kvs", lkey), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_false(file_exists(fa));
	assert_false(file_exists(fl));
	free(fa);
	free(fl);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * kvtier store-id --new on a copy: what it uploads from then on goes
 * under its new id, beside the original's copies under the old one.
 */
static void test_store_id_new_names(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_store_identity ib;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s2");
	char want[600], *name;

	(void)state;
	copied_node(&a, &b);
	sa = test_store_open(&a);
	sb = test_store_open(&b);
	assert_int_equal(kvt_store_identity_set(sb, KVT_IDENTITY_NEW, &ib), 0);
	assert_int_equal(test_put(sb, "kvs", "s2/a", 3000, 3), 0);
	assert_int_equal(kvt_g4_demote(sb, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	name = g4_name_of(sb, "kvs", "s2/a");
	snprintf(want, sizeof(want), ".kvtier/stores/%016" PRIx64 "/kvs/s2/a~", ib.id);
	assert_int_equal(strncmp(name, want, strlen(want)), 0);
	free(name);
	/* The original's copies stay under its id, for both. */
	name = g4_name_of(sb, "kvs", "s1/b");
	g4_name_want(sa, "kvs", "s1/b", 0, want, sizeof(want));
	assert_string_equal(name, want);
	free(name);
	assert_int_equal(test_check(sb, "kvs", "s2/a", 3000, 3), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/b", 5000, 2), 0);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * G4 as a kvtier from before per-store names left it: copies at
 * "BUCKET/KEY", a manifest of format 1 naming them so. They recall, are
 * demoted again after a recall without an upload, import on another node
 * and recall there; a new version goes to a name of its own, and the sweep
 * of the session's owner deletes the old copy.
 */
static void test_legacy_names(void **state)
{
	static const char *const keys[] = { "s1/a", "s1/b" };
	struct cold_fault_plan plan = { 0 };
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	char gdir[600], *name, *old;
	unsigned puts;

	(void)state;
	g4_env_init(&a, CAP, SEG);
	g4_env_init(&b, CAP, SEG);
	snprintf(gdir, sizeof(gdir), "file://%s/g4", a.cfg.store.dir);
	b.cfg.g4.url = strdup(gdir);
	snprintf(gdir, sizeof(gdir), "%s/g4", a.cfg.store.dir);
	sa = open_faulty(&a, &plan);
	sb = test_store_open(&b);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	g4_to_legacy(&a, sa, gdir, "kvs", "s1", keys, 2);

	name = g4_name_of(sa, "kvs", "s1/a");
	assert_string_equal(name, "kvs/s1/a");
	free(name);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	puts = plan.puts;
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(plan.puts, puts + 1);	/* the manifest only */
	assert_int_equal(tier_of(sa, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);

	/* Another node imports the manifest, of format 1 as it was. */
	g4_to_legacy(&a, sa, gdir, "kvs", "s1", keys, 0);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(rep.failures, 0);
	name = g4_name_of(sb, "kvs", "s1/b");
	assert_string_equal(name, "kvs/s1/b");
	free(name);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);

	/* A takes it back and overwrites one: the new version goes under A's
	 * name, and A's sweep deletes "kvs/s1/b". */
	assert_int_equal(kvt_g4_import_session(sa, "kvs", "s1", NULL, &rep), 0);
	old = cold_file_name(gdir, "kvs/s1/b");
	assert_true(file_exists(old));
	assert_int_equal(test_put(sa, "kvs", "s1/b", 6000, 12), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	name = g4_name_of(sa, "kvs", "s1/b");
	assert_int_equal(strncmp(name, ".kvtier/stores/", 15), 0);
	free(name);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_false(file_exists(old));
	free(old);
	assert_int_equal(test_check(sa, "kvs", "s1/b", 6000, 12), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	test_fsck_clean(sa);
	two_nodes_close(&a, &b, sa, sb);
}

/* Whether the partner can hold a name: S3's 1024 bytes, the prefix and
 * its '/' with it, after the key mapping (cold_s3_key()), and 255 a
 * component; a directory's NAME_MAX for a component once encoded, its
 * trailing '%' with it. */
static void test_key_fits(void **state)
{
	const char *answers[] = { NULL };
	struct test_env env;
	struct fake_s3 f;
	struct cold *c;
	char key[1100];

	(void)state;
	g4_env_init(&env, CAP, SEG);
	assert_int_equal(cold_file_new(g4_dir(&env), &c), 0);
	memset(key, 'k', sizeof(key));
	memcpy(key, "b/", 2);
	key[2 + 254] = '\0';		/* 254 bytes and '%' */
	assert_int_equal(cold_key_fits(c, key), 1);
	key[2 + 254] = 'k';
	key[2 + 255] = '\0';
	assert_int_equal(cold_key_fits(c, key), 0);
	key[2] = ' ';			/* "%20": two bytes more */
	key[2 + 252] = '\0';
	assert_int_equal(cold_key_fits(c, key), 1);
	key[2 + 252] = 'k';
	key[2 + 253] = '\0';
	assert_int_equal(cold_key_fits(c, key), 0);
	cold_free(c);

	c = fake_s3_start(&f, &env, answers);
	memset(key, 'k', sizeof(key));
	for (int i = 200; i < (int)sizeof(key); i += 201)
		key[i] = '/';		/* components of 200 bytes */
	key[1020] = '\0';		/* "pfx/" and 1020 bytes: 1024 */
	assert_int_equal(cold_key_fits(c, key), 1);
	key[1020] = 'k';
	key[1021] = '\0';
	assert_int_equal(cold_key_fits(c, key), 0);
	key[0] = '%';			/* "%25": two bytes more */
	key[1018] = '\0';
	assert_int_equal(cold_key_fits(c, key), 1);
	key[1018] = 'k';
	key[1019] = '\0';
	assert_int_equal(cold_key_fits(c, key), 0);
	/* A component of 255 bytes, as partners that keep files hold it
	 * (MinIO, s3rver: a longer one killed s3rver). */
	memset(key, 'k', sizeof(key));
	memcpy(key, "b/", 2);
	key[2 + 255] = '\0';
	assert_int_equal(cold_key_fits(c, key), 1);
	key[2 + 255] = 'k';
	key[2 + 256] = '\0';
	assert_int_equal(cold_key_fits(c, key), 0);
	key[2] = '%';			/* "%25": 257 */
	key[2 + 255] = '\0';
	assert_int_equal(cold_key_fits(c, key), 0);
	fake_s3_stop(&f);
	cold_free(c);
	test_env_release(&env);
}

/*
 * A manifest's g4_key is whoever can write the partner bucket: import
 * takes the forms kvtier writes, of this bucket only (g4_name_parse()),
 * and refuses the whole session for any other.
 */
static void test_import_g4_names(void **state)
{
	static const char *const good[] = {
		".kvtier/stores/3e2fd2e0f6d68521/kvs/s1/old/a~00000000000000a1",
		".kvtier/stores/3e2fd2e0f6d68521/kvs/s1/a~b~00000000000000a1",
		".kvtier/stores/3e2fd2e0f6d68521/.versions/kvs/00000000000000a1",
		".kvtier/versions/kvs/00000000000000a1",
		"kvs/s1/old",
	};
	static const char *const bad[] = {
		".kvtier/stores/3E2FD2E0F6D68521/kvs/s1/a~00000000000000a1",
		".kvtier/stores/3e2fd2e0f6d6852/kvs/s1/a~00000000000000a1",
		".kvtier/stores/0000000000000000/kvs/s1/a~00000000000000a1",
		".kvtier/stores/3e2fd2e0f6d68521/other/s1/a~00000000000000a1",
		".kvtier/stores/3e2fd2e0f6d68521/kvs/s1/a",
		".kvtier/stores/3e2fd2e0f6d68521/kvs/~00000000000000a1",
		".kvtier/stores/3e2fd2e0f6d68521/kvs/s1/a~00000000000000A1",
		".kvtier/stores/3e2fd2e0f6d68521/.versions/other/00000000000000a1",
		".kvtier/stores/3e2fd2e0f6d68521/.versions/kvs/a1",
		".kvtier/versions/other/00000000000000a1",
		".kvtier/manifests/kvs/s1.json",
		"other/s1/a",
	};
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct cold *cold = NULL;
	char *orig = NULL, *name, from[600], to[600];
	size_t len = 0;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 5000, 1), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(cold_get_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &orig,
				      &len), 0);
	name = g4_name_of(sa, "kvs", "s1/a");
	snprintf(from, sizeof(from), "\"g4_key\": \"%s\"", name);
	free(name);
	for (size_t i = 0; i < ARRAY_SIZE(good) + ARRAY_SIZE(bad); i++) {
		int ok = i < ARRAY_SIZE(good);
		char *text = strdup(orig), *g4 = NULL;

		snprintf(to, sizeof(to), "\"g4_key\": \"%s\"",
			 ok ? good[i] : bad[i - ARRAY_SIZE(good)]);
		text_replace(&text, from, to);
		assert_int_equal(cold_put_buf(cold, COLD_MANIFEST_PREFIX "kvs/s1.json", text,
					      strlen(text), "application/json"), 0);
		free(text);
		assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
		assert_int_equal(rep.objects, ok);
		assert_int_equal(rep.failures, !ok);
		if (!ok)
			continue;
		assert_int_equal(kvt_object_g4_name(sb, "kvs", "s1/a", &g4), 0);
		assert_string_equal(g4, good[i]);
		free(g4);
		assert_int_equal(kvt_object_delete(sb, "kvs", "s1/a"), 0);
		test_catalog_exec(&b, "DELETE FROM g4_dead");
	}
	free(orig);
	two_nodes_close(&a, &b, sa, sb);
}

/* The manifest of kvs/session in G4 (caller frees), NULL if there is none. */
static char *manifest_text(struct cold *cold, const char *session)
{
	char key[300], *text = NULL;
	size_t len = 0;
	int rc;

	snprintf(key, sizeof(key), COLD_MANIFEST_PREFIX "kvs/%s.json", session);
	rc = cold_get_buf(cold, key, 1 << 20, &text, &len);
	assert_true(rc == 0 || rc == -ENOENT);
	return rc == 0 ? text : NULL;
}

/* Whether the manifest of kvs/session lists key (0 if there is none). */
static int manifest_lists(struct cold *cold, const char *session, const char *key)
{
	char *text = manifest_text(cold, session), want[300];
	int found;

	snprintf(want, sizeof(want), "{\"key\": \"%s\", ", key);
	found = text && strstr(text, want) != NULL;
	free(text);
	return found;
}

/* Whether the manifest of kvs/session names st's store its owner. */
static int manifest_owned(struct cold *cold, const char *session, struct kvt_store *st)
{
	char *text = manifest_text(cold, session), want[64];
	uint64_t id = 0;
	int found;

	assert_int_equal(cat_store_id(store_cat(st), &id), 0);
	snprintf(want, sizeof(want), "\"owner\": \"%016" PRIx64 "\"", id);
	found = text && strstr(text, want) != NULL;
	free(text);
	return found;
}

/* kvs: s1/a (seed 1), s1/b (2) and s3/c (3) demoted, cold. */
static void three_cold(struct kvt_store *st)
{
	struct kvt_g4_opts o = { .idle = 0 };
	struct kvt_g4_report rep;

	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_put(st, "kvs", "s1/b", 5000, 2), 0);
	assert_int_equal(test_put(st, "kvs", "s3/c", 9000, 3), 0);
	usleep(2000);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 3);
}

/*
 * An object moved to another session (user.kvtier.session) keeps its G4
 * copy. The sweep wrote the manifest of the session it left without it
 * (and deleted s3's, c its last object), and none of the session it went
 * to until something there was demoted: no manifest listed a or c, and an
 * import of s2 on another store found no manifest. The run's sweep writes
 * the new session's manifest from the catalog, then the old one's; a
 * recalled object (c, hot with its copy) the same, for reclaim may turn it
 * cold on that copy.
 */
static void test_moved_cold_described(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct cold *cold;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	three_cold(sa);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(test_check(sa, "kvs", "s3/c", 9000, 3), 0);	/* recalled */
	assert_int_equal(kvt_object_set_session(sa, "kvs", "s1/a", "s2"), 0);
	assert_int_equal(kvt_object_set_session(sa, "kvs", "s3/c", "s2"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_true(manifest_owned(cold, "s2", sa));
	assert_true(manifest_lists(cold, "s2", "s1/a"));
	assert_true(manifest_lists(cold, "s2", "s3/c"));
	assert_false(manifest_lists(cold, "s1", "s1/a"));
	assert_true(manifest_lists(cold, "s1", "s1/b"));
	assert_null(manifest_text(cold, "s3"));
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s2", NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(tier_of(sb, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(sb, "kvs", "s3/c", 9000, 3), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	two_nodes_close(&a, &b, sa, sb);
}

static void sweep_run(struct kvt_store *st)
{
	kvt_g4_cleanup(st, NULL, NULL);
}

/*
 * Killed between the two manifest writes of a move: the new session's is
 * written first, so the object is listed in both, never in neither, and
 * the next run (the old session's dead entry still there) finishes.
 */
static void test_moved_cold_killed(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct cold *cold;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	three_cold(st);
	assert_int_equal(kvt_object_set_session(st, "kvs", "s1/a", "s2"), 0);
	kvt_store_close(st);
	killed_after_put(&env, sweep_run);	/* the sweep killed after its first write */
	st = test_store_open(&env);
	assert_int_equal(store_cold(st, &cold), 0);
	assert_true(manifest_lists(cold, "s2", "s1/a"));
	assert_true(manifest_lists(cold, "s1", "s1/a"));
	assert_int_equal(kvt_g4_cleanup(st, NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_true(manifest_lists(cold, "s2", "s1/a"));
	assert_false(manifest_lists(cold, "s1", "s1/a"));
	assert_true(manifest_lists(cold, "s1", "s1/b"));
	assert_int_equal(test_check(st, "kvs", "s1/a", 70000, 1), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/*
 * Moved into a session another store took by an import: its manifest is
 * that store's to write, and is not written over; the session the object
 * left keeps listing it (its manifest left as it was), the run fails,
 * saying why, until it is moved back. Its copy stays.
 */
static void test_moved_into_foreign_session(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct cold *cold;
	char *before, *after;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	three_cold(sa);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s3", NULL, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_true(manifest_owned(cold, "s3", sb));
	before = manifest_text(cold, "s1");
	assert_non_null(before);
	assert_int_equal(kvt_object_set_session(sa, "kvs", "s1/a", "s3"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, &rep), 0);
	assert_int_equal(rep.failures, 1);
	assert_true(manifest_owned(cold, "s3", sb));
	assert_false(manifest_lists(cold, "s3", "s1/a"));
	after = manifest_text(cold, "s1");
	assert_non_null(after);
	assert_string_equal(before, after);
	free(before);
	free(after);
	/* Moved back: one session of this store's lists it again, no failure. */
	assert_int_equal(kvt_object_set_session(sa, "kvs", "s1/a", "s1"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_true(manifest_lists(cold, "s1", "s1/a"));
	assert_true(manifest_owned(cold, "s3", sb));
	assert_int_equal(test_check(sa, "kvs", "s1/a", 70000, 1), 0);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * A session imported from another store names that store's copies; an
 * object of it moved to a session of its own here is still this store's
 * to list, though the new session has no manifest and its object names
 * another store's copy (which, for a session G4 holds none of, makes it
 * that store's: session_copies_owner()).
 */
static void test_moved_from_imported(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct cold *cold;
	char *name, *text, want[600];

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	three_cold(sa);
	assert_int_equal(store_cold(sb, &cold), 0);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);
	name = g4_name_of(sb, "kvs", "s1/a");
	assert_int_equal(kvt_object_set_session(sb, "kvs", "s1/a", "s2"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_true(manifest_owned(cold, "s2", sb));
	text = manifest_text(cold, "s2");
	assert_non_null(text);
	snprintf(want, sizeof(want), "{\"key\": \"s1/a\", \"g4_key\": \"%s\"", name);
	assert_non_null(strstr(text, want));
	free(text);
	free(name);
	assert_false(manifest_lists(cold, "s1", "s1/a"));
	assert_true(manifest_owned(cold, "s1", sb));
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);
	two_nodes_close(&a, &b, sa, sb);
}

/* A copy gone from G4 (or not the object's): the read is an I/O error. */
static void test_recall_copy_missing(void **state)
{
	struct test_env env;
	struct kvt_store *st;
	struct kvt_reader *r = NULL;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	char *path;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = test_store_open(&env);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 30000, 1), 0);
	assert_int_equal(test_put(st, "kvs", "s1/b", 20000, 2), 0);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.objects, 2);
	path = g4_file_of(st, g4_dir(&env), "kvs", "s1/a");
	assert_int_equal(unlink(path), 0);
	free(path);
	assert_int_equal(kvt_reader_open(st, "kvs", "s1/a", &r), -EIO);
	/* More bytes than the object has: another object's. */
	path = g4_file_of(st, g4_dir(&env), "kvs", "s1/b");
	assert_int_equal(truncate(path, 40000), 0);
	free(path);
	assert_int_equal(kvt_reader_open(st, "kvs", "s1/b", &r), -EIO);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(tier_of(st, "kvs", "s1/b"), KVT_TIER_COLD);
	kvt_store_close(st);
	test_env_release(&env);
}

struct demote_arg {
	struct kvt_store *st;
	const char *session;
	struct kvt_g4_report rep;
	int rc;
};

static void *demote_thread(void *arg)
{
	struct demote_arg *d = arg;
	struct kvt_g4_opts o = session_opts("kvs", d->session);

	o.jobs = 3;	/* the session's three objects, all at once */
	d->rc = kvt_g4_demote(d->st, &o, &d->rep);
	return NULL;
}

/* Until n uploads reached the partner, which holds them (plan->hold); 30 s at most. */
static void wait_held(struct cold_fault_plan *plan, unsigned n)
{
	for (int i = 0; i < 30000; i++) {
		if (__atomic_load_n(&plan->puts, __ATOMIC_SEQ_CST) >= n)
			return;
		usleep(1000);
	}
	fail_msg("%u uploads reached the partner in 30 s, not %u",
		 __atomic_load_n(&plan->puts, __ATOMIC_SEQ_CST), n);
}

/*
 * Another store imports the session while this one's demotion of it is
 * uploading (a conversation that resumed elsewhere while its last blocks
 * went to G4 at night): the owner was asked only before the uploads, and
 * the manifest written after them named this store again, so that its
 * sweep deleted copies the importer needed once it deleted its own.
 */
static void test_handover_during_demotion(void **state)
{
	struct cold_fault_plan plan = { .stall_ms = 1000 };
	struct demote_arg d = { .session = "s1" };
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_g4_report rep;
	struct test_env a, b;
	struct kvt_store *sb;
	unsigned puts;
	char url[600];
	pthread_t th;

	(void)state;
	g4_env_init(&a, CAP, SEG);
	g4_env_init(&b, CAP, SEG);
	snprintf(url, sizeof(url), "file://%s/g4", a.cfg.store.dir);
	b.cfg.g4.url = strdup(url);
	d.st = open_faulty(&a, &plan);
	sb = test_store_open(&b);
	assert_int_equal(kvt_bucket_create(d.st, "kvs"), 0);
	assert_int_equal(test_put(d.st, "kvs", "s1/a", 70000, 1), 0);
	plan.stall_ms = 0;
	assert_int_equal(kvt_g4_demote(d.st, &o, &rep), 0);
	assert_int_equal(test_put(d.st, "kvs", "s1/b", 5000, 2), 0);
	puts = plan.puts;
	plan.stall_ms = 1000;
	assert_int_equal(pthread_create(&th, NULL, demote_thread, &d), 0);
	/* s1/b's upload has begun (it stalls a second): B imports now. */
	while (__atomic_load_n(&plan.puts, __ATOMIC_SEQ_CST) == puts)
		usleep(1000);
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(d.rc, 0);
	assert_int_equal(d.rep.objects, 0);
	assert_int_equal(d.rep.failures, 1);
	assert_int_equal(tier_of(d.st, "kvs", "s1/b"), KVT_TIER_DEMOTING);

	plan.stall_ms = 0;
	assert_int_equal(kvt_object_delete(d.st, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_g4_cleanup(d.st, NULL, NULL), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(d.st, "kvs", "s1/b", 5000, 2), 0);
	kvt_store_close(d.st);
	kvt_store_close(sb);
	test_env_release(&a);
	test_env_release(&b);
}

/* Another store's import, run as the demotion's manifest write (or the
 * sweep's manifest delete) reaches G4. */
struct import_hook {
	struct kvt_store *st;
	struct kvt_g4_report rep;
	int rc, ran;
};

static void import_before_manifest(void *arg, const char *key)
{
	struct import_hook *h = arg;

	if (h->ran || strncmp(key, COLD_MANIFEST_PREFIX, strlen(COLD_MANIFEST_PREFIX)) != 0)
		return;
	h->ran = 1;
	h->rc = kvt_g4_import_session(h->st, "kvs", "s1", NULL, &h->rep);
}

/*
 * The narrower window of the same race: the import lands after the
 * demotion asked G4 for the owner the last time and before its manifest
 * write. That write went over the importer's manifest and named this
 * store again, and its sweep deleted the importer's copies. The write is
 * conditional now (cold_put_if): refused, read again, the session left to
 * the importer.
 */
static void test_handover_at_manifest_write(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct import_hook h = { 0 };
	struct kvt_g4_report rep;
	struct test_env a, b;
	struct kvt_store *sa;
	struct cold *g4 = NULL;
	char url[600], path[700], *text = NULL, *gpath;
	size_t len = 0;

	(void)state;
	g4_env_init(&a, CAP, SEG);
	g4_env_init(&b, CAP, SEG);
	snprintf(url, sizeof(url), "file://%s/g4", a.cfg.store.dir);
	b.cfg.g4.url = strdup(url);
	sa = open_faulty(&a, &plan);
	h.st = test_store_open(&b);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(test_put(sa, "kvs", "s1/b", 5000, 2), 0);
	plan.before_put = import_before_manifest;
	plan.before_put_arg = &h;
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	plan.before_put = NULL;
	assert_true(h.ran);
	assert_int_equal(h.rc, 0);
	assert_int_equal(h.rep.objects, 1);
	/* Not written over: the manifest names the importer, and s1/b stays hot. */
	assert_int_equal(rep.objects, 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(tier_of(sa, "kvs", "s1/b"), KVT_TIER_DEMOTING);
	snprintf(path, sizeof(path), "%s/g4", a.cfg.store.dir);
	assert_int_equal(cold_file_new(path, &g4), 0);
	assert_int_equal(cold_get_buf(g4, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	assert_null(strstr(text, "s1/b"));
	free(text);
	cold_free(g4);

	/* This store's sweep leaves the importer's copies alone. */
	gpath = g4_file_of(sa, g4_dir(&a), "kvs", "s1/a");
	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/a"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_true(file_exists(gpath));
	free(gpath);
	assert_int_equal(test_check(h.st, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(sa, "kvs", "s1/b", 5000, 2), 0);
	kvt_store_close(sa);
	kvt_store_close(h.st);
	test_env_release(&a);
	test_env_release(&b);
}

/*
 * The sweep of a session whose last object was deleted here deletes its
 * manifest. Another node's import that landed between the sweep's owner
 * check and that delete lost its manifest (the session could no longer be
 * found by name), and the sweep, still taking the session for this
 * store's, deleted the copies the importer had just taken. The delete is
 * conditional now (cold_del_if): refused, read again, the session left to
 * the importer.
 */
static void test_handover_at_manifest_delete(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct import_hook h = { 0 };
	struct kvt_g4_report rep;
	struct test_env a, b;
	struct kvt_store *sa;
	struct cold *g4 = NULL;
	char url[600], path[700], owner[40], *text = NULL, *gpath;
	uint64_t idb = 0;
	size_t len = 0;

	(void)state;
	g4_env_init(&a, CAP, SEG);
	g4_env_init(&b, CAP, SEG);
	snprintf(url, sizeof(url), "file://%s/g4", a.cfg.store.dir);
	b.cfg.g4.url = strdup(url);
	sa = open_faulty(&a, &plan);
	h.st = test_store_open(&b);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(test_put(sa, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	gpath = g4_file_of(sa, g4_dir(&a), "kvs", "s1/a");
	assert_int_equal(kvt_object_delete(sa, "kvs", "s1/a"), 0);
	plan.before_del = import_before_manifest;
	plan.before_del_arg = &h;
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	plan.before_del = NULL;
	assert_true(h.ran);
	assert_int_equal(h.rc, 0);
	assert_int_equal(h.rep.objects, 1);
	/* The importer's manifest stays, naming it, and so does its copy. */
	snprintf(path, sizeof(path), "%s/g4", a.cfg.store.dir);
	assert_int_equal(cold_file_new(path, &g4), 0);
	assert_int_equal(cold_get_buf(g4, COLD_MANIFEST_PREFIX "kvs/s1.json", 1 << 20, &text,
				      &len), 0);
	assert_int_equal(cat_store_id(store_cat(h.st), &idb), 0);
	snprintf(owner, sizeof(owner), "\"owner\": \"%016" PRIx64 "\"", idb);
	assert_non_null(strstr(text, owner));
	free(text);
	cold_free(g4);
	assert_true(file_exists(gpath));
	free(gpath);
	assert_int_equal(test_check(h.st, "kvs", "s1/a", 70000, 1), 0);
	kvt_store_close(sa);
	kvt_store_close(h.st);
	test_env_release(&a);
	test_env_release(&b);
}

/* The owner's demotion, run as an import's manifest write reaches G4. */
struct demote_hook {
	struct kvt_store *st;
	struct kvt_g4_report rep;
	int rc, ran;
};

static void demote_before_manifest(void *arg, const char *key)
{
	struct demote_hook *h = arg;
	struct kvt_g4_opts o = session_opts("kvs", "s1");

	if (h->ran || strncmp(key, COLD_MANIFEST_PREFIX, strlen(COLD_MANIFEST_PREFIX)) != 0)
		return;
	h->ran = 1;
	h->rc = kvt_g4_demote(h->st, &o, &h->rep);
}

/*
 * The other way round: the owner demotes more of the session while another
 * node imports it. The import's manifest, written from what it read,
 * named the importer and dropped what the owner had just added. It is
 * refused now: the import says to run it again, and that run takes all.
 */
static void test_import_during_demotion(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct demote_hook h = { 0 };
	struct kvt_g4_report rep;
	struct test_env a, b;
	struct kvt_store *sb;
	char url[600];

	(void)state;
	g4_env_init(&a, CAP, SEG);
	g4_env_init(&b, CAP, SEG);
	snprintf(url, sizeof(url), "file://%s/g4", b.cfg.store.dir);
	a.cfg.g4.url = strdup(url);
	h.st = test_store_open(&a);
	sb = open_faulty(&b, &plan);
	assert_int_equal(kvt_bucket_create(h.st, "kvs"), 0);
	assert_int_equal(test_put(h.st, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(kvt_g4_demote(h.st, &o, &rep), 0);
	assert_int_equal(test_put(h.st, "kvs", "s1/b", 5000, 2), 0);
	plan.before_put = demote_before_manifest;
	plan.before_put_arg = &h;
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), -EAGAIN);
	plan.before_put = NULL;
	assert_true(h.ran);
	assert_int_equal(h.rc, 0);
	assert_int_equal(h.rep.objects, 1);
	assert_int_equal(tier_of(h.st, "kvs", "s1/b"), KVT_TIER_COLD);
	/* Run again, the import takes what the owner added too. */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", "s1", NULL, &rep), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/a", 70000, 1), 0);
	assert_int_equal(test_check(sb, "kvs", "s1/b", 5000, 2), 0);
	kvt_store_close(h.st);
	kvt_store_close(sb);
	test_env_release(&a);
	test_env_release(&b);
}

/*
 * Renamed, or moved to another session, while its upload is in flight (a
 * FUSE mv while reclaim or the migrator demotes). A rename keeps the
 * object's id and version, and the upload used to be recorded as a copy
 * under the new name: the object went cold with no copy there, and every
 * read failed from then on.
 */
static void test_rename_during_upload(void **state)
{
	struct cold_fault_plan plan = { .stall_ms = 1, .hold = 1 };
	static const char *const cold[] = { "s1/b", "s1/dir2/c" };
	struct demote_arg d = { .session = "s1" };
	struct kvt_g4_opts o9 = session_opts("kvs", "s9");
	struct kvt_g4_report rep;
	struct test_env env;
	char *path, *path2;
	pthread_t th;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	d.st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(d.st, "kvs"), 0);
	assert_int_equal(test_put(d.st, "kvs", "s1/a", 300000, 1), 0);
	assert_int_equal(test_put(d.st, "kvs", "s1/dir/c", 200000, 2), 0);
	assert_int_equal(test_put(d.st, "kvs", "s1/d", 100000, 3), 0);
	path = g4_upload_file(d.st, g4_dir(&env), "kvs", "s1/a");
	path2 = g4_upload_file(d.st, g4_dir(&env), "kvs", "s1/dir/c");
	assert_int_equal(pthread_create(&th, NULL, demote_thread, &d), 0);
	/* The partner holds each upload: these land during them. */
	wait_held(&plan, 3);
	assert_int_equal(kvt_object_rename(d.st, "kvs", "s1/a", "s1/b", 0), 0);
	assert_int_equal(kvt_object_rename(d.st, "kvs", "s1/dir/", "s1/dir2/", KVT_RENAME_PREFIX),
			 0);
	assert_int_equal(kvt_object_set_session(d.st, "kvs", "s1/d", "s9"), 0);
	__atomic_store_n(&plan.hold, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(d.rc, 0);
	assert_int_equal(d.rep.failures, 0);

	/* None went cold on a copy under its old name or session. */
	assert_int_not_equal(tier_of(d.st, "kvs", "s1/b"), KVT_TIER_COLD);
	assert_int_not_equal(tier_of(d.st, "kvs", "s1/dir2/c"), KVT_TIER_COLD);
	assert_int_not_equal(tier_of(d.st, "kvs", "s1/d"), KVT_TIER_COLD);
	assert_int_equal(test_check(d.st, "kvs", "s1/b", 300000, 1), 0);
	assert_int_equal(test_check(d.st, "kvs", "s1/dir2/c", 200000, 2), 0);
	assert_int_equal(test_check(d.st, "kvs", "s1/d", 100000, 3), 0);

	/* The copies under the old names were recorded dead: the sweep
	 * deletes them. The next runs upload under the new names. */
	plan.stall_ms = 0;
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(access(path2, F_OK), 0);
	assert_int_equal(kvt_g4_cleanup(d.st, NULL, NULL), 0);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(access(path2, F_OK), -1);
	free(path);
	free(path2);
	all_cold(d.st, cold, 2);
	assert_int_equal(kvt_g4_demote(d.st, &o9, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(tier_of(d.st, "kvs", "s1/d"), KVT_TIER_COLD);
	assert_int_equal(kvt_g4_cleanup(d.st, NULL, NULL), 0);
	assert_int_equal(test_check(d.st, "kvs", "s1/b", 300000, 1), 0);
	assert_int_equal(test_check(d.st, "kvs", "s1/dir2/c", 200000, 2), 0);
	assert_int_equal(test_check(d.st, "kvs", "s1/d", 100000, 3), 0);
	kvt_store_close(d.st);
	test_env_release(&env);
}

/*
 * Overwritten while its upload waits on the partner, and the old version's
 * segment reclaimed before the upload reads it: the read meets -ESTALE.
 * That is the object changing, not the partner failing: no failure is
 * counted (a failed demotion makes the demoter refuse writers room), and
 * the next run uploads the new version.
 */
static void test_overwrite_during_upload(void **state)
{
	struct cold_fault_plan plan = { .stall_ms = 1, .hold = 1 };
	struct demote_arg d = { .session = "s1" };
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_store_stat s;
	uint64_t reclaimed;
	struct test_env env;
	pthread_t th;

	(void)state;
	g4_env_init(&env, CAP, 1u << 20);
	d.st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(d.st, "kvs"), 0);
	/* A segment of its own (an extent of 1 MiB - 64 fills one), sealed by the next put. */
	assert_int_equal(test_put(d.st, "kvs", "s1/a", (1u << 20) - 64, 1), 0);
	assert_int_equal(test_put(d.st, "kvs", "other", 1000, 2), 0);
	assert_int_equal(pthread_create(&th, NULL, demote_thread, &d), 0);
	wait_held(&plan, 1);
	assert_int_equal(test_put(d.st, "kvs", "s1/a", 5000, 3), 0);
	/* One segment more than are free: the emptiest first, the old version's. */
	assert_int_equal(kvt_store_stat(d.st, &s), 0);
	reclaimed = s.reclaimed_segments;
	assert_int_equal(kvt_store_reclaim(d.st, (unsigned)s.segments_free + 1), 0);
	assert_int_equal(kvt_store_stat(d.st, &s), 0);
	assert_true(s.reclaimed_segments > reclaimed);
	__atomic_store_n(&plan.hold, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(d.rc, 0);
	assert_int_equal(d.rep.failures, 0);
	assert_int_equal(test_check(d.st, "kvs", "s1/a", 5000, 3), 0);

	plan.stall_ms = 0;
	assert_int_equal(kvt_g4_demote(d.st, &o, &d.rep), 0);
	assert_int_equal(d.rep.failures, 0);
	assert_int_equal(tier_of(d.st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(d.st, "kvs", "s1/a", 5000, 3), 0);
	kvt_store_close(d.st);
	test_env_release(&env);
}

/* What the sweep's delete of a version's name waits for (before_del). */
struct sweep_race {
	struct kvt_store *st;
	struct cold_fault_plan *plan;
	const char *key;	/* the renamed object, uploading under that name */
	int waited;		/* 1: its upload was recorded before the delete */
};

static void sweep_race_before_del(void *arg, const char *key)
{
	struct sweep_race *r = arg;
	char *name = NULL;

	if (!strstr(key, "/.versions/"))
		return;		/* the manifest */
	for (int i = 0; i < 10000; i++) {
		if (kvt_object_g4_name(r->st, "kvs", r->key, &name) == 0) {
			free(name);
			r->waited = 1;
			return;
		}
		usleep(1000);
	}
}

static void *release_hold(void *arg)
{
	struct cold_fault_plan *plan = arg;

	usleep(500000);
	__atomic_store_n(&plan->hold, 0, __ATOMIC_SEQ_CST);
	return NULL;
}

/*
 * A version's name (".kvtier/stores/STORE/.versions/BUCKET/VID", for a
 * key too long for its own) carries no key, and a rename keeps the
 * version: a recalled object renamed and moved to another session is
 * uploaded again under the very name its old key's dead row names. The
 * sweep locked that row's key, the upload its new one, so the sweep
 * checked the name free, the upload put and recorded its copy, and the
 * sweep's delete took it: the object went cold with no copy (read as an
 * I/O error). Both lock the name.
 */
static void test_version_name_sweep_race(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct demote_arg d = { .session = "s2" };
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct sweep_race r = { .plan = &plan };
	struct kvt_g4_report rep;
	struct test_env env;
	char k1[300], k2[300], *name = NULL;
	pthread_t th, rel;
	unsigned puts;

	(void)state;
	snprintf(k1, sizeof(k1), "s1/%0250d", 1);
	snprintf(k2, sizeof(k2), "s1/%0250d", 2);
	g4_env_init(&env, CAP, SEG);
	d.st = r.st = open_faulty(&env, &plan);
	r.key = k2;
	assert_int_equal(kvt_bucket_create(d.st, "kvs"), 0);
	assert_int_equal(test_put(d.st, "kvs", k1, 5000, 1), 0);
	assert_int_equal(kvt_g4_demote(d.st, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(kvt_object_g4_name(d.st, "kvs", k1, &name), 0);
	assert_non_null(strstr(name, "/.versions/"));
	free(name);
	assert_int_equal(test_check(d.st, "kvs", k1, 5000, 1), 0);	/* recalled */
	assert_int_equal(kvt_object_rename(d.st, "kvs", k1, k2, 0), 0);
	assert_int_equal(kvt_object_set_session(d.st, "kvs", k2, "s2"), 0);

	puts = plan.puts;
	plan.stall_ms = 1;
	plan.hold = 1;
	plan.before_del = sweep_race_before_del;
	plan.before_del_arg = &r;
	assert_int_equal(pthread_create(&th, NULL, demote_thread, &d), 0);
	wait_held(&plan, puts + 1);	/* k2's upload, under the version's name */
	assert_int_equal(pthread_create(&rel, NULL, release_hold, &plan), 0);
	assert_int_equal(kvt_g4_cleanup(d.st, NULL, NULL), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(pthread_join(rel, NULL), 0);
	plan.before_del = NULL;
	plan.stall_ms = 0;
	assert_int_equal(d.rc, 0);
	assert_int_equal(d.rep.failures, 0);
	assert_int_equal(tier_of(d.st, "kvs", k2), KVT_TIER_COLD);
	assert_int_equal(test_check(d.st, "kvs", k2, 5000, 1), 0);
	kvt_store_close(d.st);
	test_env_release(&env);
}

/* A session id of one component of 252 bytes ("x" 252 times): its
 * manifest's last component, "SESSION.json", 257 bytes. */
static char *long_session(void)
{
	char *s = malloc(253);

	assert_non_null(s);
	memset(s, 'x', 252);
	s[252] = '\0';
	return s;
}

/* The name of a manifest that does not fit where the others are
 * (kvtier-migrate(8)): the SHA-256 of the session id, for this one. */
#define LONG_SESSION_MANIFEST COLD_MANIFEST_PREFIX \
	"_sha256/kvs/d4e4680fda132078b04db757a09faeee1e9824a84057a627f366d0bd317f01b0.json"

/*
 * A session whose manifest name a file:// G4 cannot hold (a component over
 * NAME_MAX): every kvtier-migrate run uploaded its objects, failed to
 * write the manifest and left them demoting for good, each night's run
 * uploading again; nothing became cold, and no other store could import
 * it. Its manifest goes under the SHA-256 of its id, which import
 * computes from the id alone; demotion, the sweep, import and recall
 * find it there.
 */
static void test_long_session_manifest(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o;
	char *session = long_session(), *plain = NULL, *text = NULL;
	struct cold *cold = NULL;
	size_t len = 0;

	(void)state;
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(kvt_bucket_create(sb, "kvs"), 0);
	assert_int_equal(put_in_session(sa, "kvs", "c/a", 70000, 1, session), 0);
	assert_int_equal(put_in_session(sa, "kvs", "c/b", 5000, 2, session), 0);
	o = session_opts("kvs", session);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(tier_of(sa, "kvs", "c/a"), KVT_TIER_COLD);
	assert_int_equal(tier_of(sa, "kvs", "c/b"), KVT_TIER_COLD);
	assert_int_equal(store_cold(sa, &cold), 0);
	assert_int_equal(cold_get_buf(cold, LONG_SESSION_MANIFEST, 1 << 20, &text, &len), 0);
	assert_non_null(strstr(text, session));	/* the whole id, checked when read */
	free(text);
	assert_true(asprintf(&plain, COLD_MANIFEST_PREFIX "kvs/%s.json", session) > 0);
	assert_false(cold_key_fits(cold, plain));

	/* Another store imports it by its id, and reads it back. */
	assert_int_equal(kvt_g4_import_session(sb, "kvs", session, NULL, &rep), 0);
	assert_int_equal(rep.objects, 2);
	assert_int_equal(test_check(sb, "kvs", "c/a", 70000, 1), 0);
	assert_int_equal(tier_of(sb, "kvs", "c/b"), KVT_TIER_COLD);
	/* Its sweep writes the manifest again without what it deleted ... */
	assert_int_equal(kvt_object_delete(sb, "kvs", "c/a"), 0);
	assert_int_equal(kvt_g4_cleanup(sb, NULL, NULL), 0);
	assert_int_equal(cold_get_buf(cold, LONG_SESSION_MANIFEST, 1 << 20, &text, &len), 0);
	assert_null(strstr(text, "\"c/a\""));
	assert_non_null(strstr(text, "\"c/b\""));
	free(text);
	/* ... and A, taking it back, recalls what is left. */
	assert_int_equal(kvt_g4_import_session(sa, "kvs", session, NULL, &rep), 0);
	assert_int_equal(kvt_g4_recall_session(sa, "kvs", session, NULL, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(test_check(sa, "kvs", "c/b", 5000, 2), 0);
	/* Demoted again under pressure, and swept: its last object deleted,
	 * the manifest goes too. */
	assert_int_equal(g4_demote_pressure(sa, "kvs", session), 0);
	assert_int_equal(tier_of(sa, "kvs", "c/b"), KVT_TIER_COLD);
	assert_int_equal(kvt_object_delete(sa, "kvs", "c/b"), 0);
	assert_int_equal(kvt_g4_cleanup(sa, NULL, NULL), 0);
	assert_int_equal(cold_get_buf(cold, LONG_SESSION_MANIFEST, 1 << 20, &text, &len), -ENOENT);
	test_fsck_clean(sa);
	test_fsck_clean(sb);
	free(plain);
	free(session);
	two_nodes_close(&a, &b, sa, sb);
}

/* COLD_MANIFEST_HASHED's name of bucket kvs's session (g4_manifest_key()). */
static char *hashed_manifest(const char *session)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	char hex[2 * EVP_MAX_MD_SIZE + 1], *key = NULL;
	unsigned mdlen = 0;

	assert_true(EVP_Digest(session, strlen(session), md, &mdlen, EVP_sha256(), NULL));
	util_hex(hex, md, mdlen);
	assert_true(asprintf(&key, COLD_MANIFEST_HASHED "kvs/%s.json", hex) > 0);
	return key;
}

/*
 * The manifest at a long session's hashed name names another session (two
 * ids of one SHA-256, or one put there by hand): import refuses it, not
 * taking its objects for this session's, and demotion neither writes
 * over it nor uploads anything.
 */
static void test_long_session_manifest_other(void **state)
{
	struct test_env a, b;
	struct kvt_store *sa, *sb;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o;
	struct kvt_object *obj = NULL;
	char *session = long_session(), *other = long_session(), *mkey = NULL;
	char *text = NULL, *after = NULL;
	struct cold *cold = NULL;
	size_t len = 0;

	(void)state;
	memset(other, 'y', strlen(other));
	two_nodes(&a, &b, &sa, &sb);
	assert_int_equal(kvt_bucket_create(sa, "kvs"), 0);
	assert_int_equal(put_in_session(sa, "kvs", "c/a", 70000, 1, session), 0);
	o = session_opts("kvs", session);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(store_cold(sa, &cold), 0);
	mkey = hashed_manifest(session);
	assert_string_equal(mkey, LONG_SESSION_MANIFEST);
	assert_int_equal(cold_get_buf(cold, mkey, 1 << 20, &text, &len), 0);
	free(mkey);
	mkey = hashed_manifest(other);
	assert_int_equal(cold_put_buf(cold, mkey, text, len, "application/json"), 0);

	assert_int_equal(kvt_g4_import_session(sb, "kvs", other, NULL, &rep), -EEXIST);
	assert_int_equal(kvt_object_head(sb, "kvs", "c/a", &obj), -ENOENT);
	assert_int_equal(put_in_session(sa, "kvs", "d/a", 5000, 2, other), 0);
	o = session_opts("kvs", other);
	assert_int_equal(kvt_g4_demote(sa, &o, &rep), 0);
	assert_int_equal(rep.objects, 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(tier_of(sa, "kvs", "d/a"), KVT_TIER_HOT);
	assert_int_equal(cold_get_buf(cold, mkey, 1 << 20, &after, &len), 0);
	assert_string_equal(after, text);
	free(after);
	free(text);
	free(mkey);
	free(other);
	free(session);
	two_nodes_close(&a, &b, sa, sb);
}

/*
 * A partner of short names (the fault tier's key_max, as S3's 1024 bytes
 * with a long prefix): a manifest name over the limit goes under the
 * session's SHA-256; where that does not fit either, the session is not
 * demoted, nothing of it uploaded, its objects hot, said in one line.
 * Before, its objects were uploaded and stayed demoting, the manifest
 * refused at every run.
 */
static void test_manifest_key_max(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o;
	char session[81], *mkey = NULL, *text = NULL, logpath[600];
	struct cold *cold = NULL;
	size_t len = 0;
	unsigned puts;
	int saved;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(store_cold(st, &cold), 0);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	/* ".kvtier/manifests/kvs/" and ".json" around 80 bytes: 107; under
	 * the SHA-256, 99. */
	memset(session, 'z', 80);
	session[80] = '\0';
	plan.key_max = 100;
	assert_int_equal(put_in_session(st, "kvs", "z/a", 5000, 1, session), 0);
	o = session_opts("kvs", session);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(tier_of(st, "kvs", "z/a"), KVT_TIER_COLD);
	mkey = hashed_manifest(session);
	assert_int_equal(strlen(mkey), 99);
	assert_int_equal(cold_get_buf(cold, mkey, 1 << 20, &text, &len), 0);
	assert_non_null(strstr(text, session));
	free(text);
	free(mkey);
	/* The sweep finds it there too: the session's last object deleted. */
	assert_int_equal(kvt_object_delete(st, "kvs", "z/a"), 0);
	assert_int_equal(kvt_g4_cleanup(st, NULL, NULL), 0);
	mkey = hashed_manifest(session);
	assert_int_equal(cold_head(cold, mkey, NULL), -ENOENT);
	free(mkey);

	/* 98 bytes: neither name fits. */
	plan.key_max = 98;
	memset(session, 'w', 80);
	assert_int_equal(put_in_session(st, "kvs", "w/a", 5000, 2, session), 0);
	o = session_opts("kvs", session);
	puts = plan.puts;
	snprintf(logpath, sizeof(logpath), "%s/stderr", env.dir);
	saved = stderr_to(logpath);
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	stderr_back(saved);
	assert_int_equal(rep.objects, 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(plan.puts, puts);
	assert_int_equal(tier_of(st, "kvs", "w/a"), KVT_TIER_HOT);
	assert_int_equal(lines_with(logpath, "error"), 1);
	assert_int_equal(lines_with(logpath, "cannot hold the manifest of session"), 1);
	/* Under pressure, the same. */
	assert_int_equal(g4_demote_pressure(st, "kvs", session), -EIO);
	assert_int_equal(plan.puts, puts);
	assert_int_equal(tier_of(st, "kvs", "w/a"), KVT_TIER_HOT);
	assert_int_equal(test_check(st, "kvs", "w/a", 5000, 2), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

/* Before the put of the copy of s1/a, the partner's next put is set to be
 * refused (-EACCES): the manifest's, which comes after it. */
static void refuse_next_put(void *arg, const char *key)
{
	struct cold_fault_plan *plan = arg;

	if (!strncmp(key, ".kvtier/stores/", 15)) {
		plan->err = -EACCES;
		plan->fail_puts = 1;
	}
}

/*
 * The partner refuses the manifest once the objects are up: they go back
 * to hot, not left demoting, which every later run took up again, idle
 * or not, and failed on the same way; the next run that can write it
 * uploads nothing again and marks them cold.
 */
static void test_manifest_refused_back_to_hot(void **state)
{
	struct cold_fault_plan plan = { 0 };
	struct test_env env;
	struct kvt_store *st;
	struct kvt_g4_report rep;
	struct kvt_g4_opts o = session_opts("kvs", "s1");
	struct kvt_store_stat ss;
	unsigned puts;

	(void)state;
	g4_env_init(&env, CAP, SEG);
	st = open_faulty(&env, &plan);
	assert_int_equal(kvt_bucket_create(st, "kvs"), 0);
	assert_int_equal(test_put(st, "kvs", "s1/a", 70000, 1), 0);
	plan.before_put = refuse_next_put;
	plan.before_put_arg = &plan;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	plan.before_put = NULL;
	assert_int_equal(plan.fail_puts, 0);
	assert_int_equal(rep.objects, 0);
	assert_int_equal(rep.failures, 1);
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_HOT);
	assert_int_equal(kvt_store_stat(st, &ss), 0);
	assert_int_equal(ss.tier_count[KVT_TIER_DEMOTING], 0);
	assert_int_equal(test_check(st, "kvs", "s1/a", 70000, 1), 0);

	puts = plan.puts;
	assert_int_equal(kvt_g4_demote(st, &o, &rep), 0);
	assert_int_equal(rep.failures, 0);
	assert_int_equal(rep.objects, 1);
	assert_int_equal(plan.puts, puts + 1);	/* the manifest alone */
	assert_int_equal(tier_of(st, "kvs", "s1/a"), KVT_TIER_COLD);
	assert_int_equal(test_check(st, "kvs", "s1/a", 70000, 1), 0);
	kvt_store_close(st);
	test_env_release(&env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_file_layout),
		cmocka_unit_test(test_file_cleanup),
		cmocka_unit_test(test_file_put_if),
		cmocka_unit_test(test_file_prune),
		cmocka_unit_test(test_file_prune_race),
		cmocka_unit_test(test_s3_put_if_no_bucket),
		cmocka_unit_test(test_s3_put_if_unsupported_upload),
		cmocka_unit_test(test_s3_put_if_completion_error_body),
		cmocka_unit_test(test_s3_keys_long_lines),
		cmocka_unit_test(test_s3_del_if),
		cmocka_unit_test(test_s3_del_if_400_credentials),
		cmocka_unit_test(test_s3_no_bucket),
		cmocka_unit_test(test_demote_recall),
		cmocka_unit_test(test_demote_rules),
		cmocka_unit_test(test_faults),
		cmocka_unit_test(test_cleanup_retried),
		cmocka_unit_test(test_cleanup_abort_failed),
		cmocka_unit_test(test_import),
		cmocka_unit_test(test_handover_kept),
		cmocka_unit_test(test_handover_recalled_left),
		cmocka_unit_test(test_handover_back),
		cmocka_unit_test(test_handover_written_here),
		cmocka_unit_test(test_handover_partial_import),
		cmocka_unit_test(test_reclaim_to_cold),
		cmocka_unit_test(test_pressure_demote),
		cmocka_unit_test(test_demoter_frees_coldest_first),
		cmocka_unit_test(test_demoter_background),
		cmocka_unit_test(test_demoter_bounded_wait),
		cmocka_unit_test(test_demoter_pass_refused),
		cmocka_unit_test(test_demoter_two_procs),
		cmocka_unit_test(test_recall_coalesce_threads),
		cmocka_unit_test(test_recall_failure_shared),
		cmocka_unit_test(test_recall_coalesce_procs),
		cmocka_unit_test(test_recall_unreachable),
		cmocka_unit_test(test_recall_no_bucket),
		cmocka_unit_test(test_recall_no_bucket_logged_once),
		cmocka_unit_test(test_recall_unreachable_logged_once),
		cmocka_unit_test(test_sweep_no_bucket),
		cmocka_unit_test(test_recall_disk_full),
		cmocka_unit_test(test_recall_write_fails),
		cmocka_unit_test(test_jobs_retries_rate),
		cmocka_unit_test(test_demote_objects_parallel),
		cmocka_unit_test(test_g4_none),
		cmocka_unit_test(test_keys_stay_inside),
		cmocka_unit_test(test_deleted_stay_deleted),
		cmocka_unit_test(test_rename_cold),
		cmocka_unit_test(test_rename_cold_schema4),
		cmocka_unit_test(test_rename_cold_schema4_etag),
		cmocka_unit_test(test_rename_during_upload),
		cmocka_unit_test(test_handover_during_demotion),
		cmocka_unit_test(test_handover_at_manifest_write),
		cmocka_unit_test(test_handover_at_manifest_delete),
		cmocka_unit_test(test_import_during_demotion),
		cmocka_unit_test(test_overwrite_during_upload),
		cmocka_unit_test(test_version_name_sweep_race),
		cmocka_unit_test(test_recall_copy_missing),
		cmocka_unit_test(test_redemote_after_recall),
		cmocka_unit_test(test_redemote_damaged_copy),
		cmocka_unit_test(test_redemote_damaged_renamed_copy),
		cmocka_unit_test(test_reclaim_damaged_copy),
		cmocka_unit_test(test_killed_after_put),
		cmocka_unit_test(test_import_mode_clamped),
		cmocka_unit_test(test_copied_store_leaves_g4),
		cmocka_unit_test(test_store_identity),
		cmocka_unit_test(test_copied_store_pressure_log),
		cmocka_unit_test(test_copied_store_owned_cost),
		cmocka_unit_test(test_reclaim_many_sessions_cost),
		cmocka_unit_test(test_pressure_refused_store_wide),
		cmocka_unit_test(test_pressure_one_session_fails),
		cmocka_unit_test(test_demote_one_session_fails),
		cmocka_unit_test(test_demote_unanswered_unproven),
		cmocka_unit_test(test_pressure_one_proof_fails),
		cmocka_unit_test(test_store_id_new_unnamed_manifest),
		cmocka_unit_test(test_two_stores_one_key),
		cmocka_unit_test(test_two_stores_one_key_swept),
		cmocka_unit_test(test_store_id_new_one_key),
		cmocka_unit_test(test_store_id_new_moved_session),
		cmocka_unit_test(test_store_id_new_moved_session_one_by_one),
		cmocka_unit_test(test_store_id_new_moved_session_legacy),
		cmocka_unit_test(test_g4_names),
		cmocka_unit_test(test_store_id_new_names),
		cmocka_unit_test(test_legacy_names),
		cmocka_unit_test(test_key_fits),
		cmocka_unit_test(test_import_g4_names),
		cmocka_unit_test(test_moved_cold_described),
		cmocka_unit_test(test_moved_cold_killed),
		cmocka_unit_test(test_moved_into_foreign_session),
		cmocka_unit_test(test_moved_from_imported),
		cmocka_unit_test(test_long_session_manifest),
		cmocka_unit_test(test_long_session_manifest_other),
		cmocka_unit_test(test_manifest_key_max),
		cmocka_unit_test(test_manifest_refused_back_to_hot),
	};

	if (getenv("KVT_TEST_FILTER"))	/* e.g. "test_pressure_*" */
		cmocka_set_test_filter(getenv("KVT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
