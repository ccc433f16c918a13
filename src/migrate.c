/*
 * migrate.c - the library side of G4: demotion of idle sessions, recall of
 * cold objects, import of sessions another node demoted, and each session's
 * manifest. kvtier-migrate (migrate/) is a thin front end over it; readers
 * call recall_object() when they meet a cold object.
 *
 * Per object, the state lives in the catalog (objects.tier, g4_vid; see
 * catalog.c), so a kill -9 at any point is finished by the next run:
 *
 *        demote_session():           demote_upload():        demote_session():
 *        cat_g4_demote_begin()       put, read back, verify  manifest, then
 *   HOT ----------------------> DEMOTING ----------------> (uploaded) -----> COLD
 *    ^                              cat_g4_set_uploaded()     cat_g4_mark_cold()
 *    |                                                                      |
 *    +----------------------------------------------------------------------+
 *          recall_object(): under the object's recall lock, get, verify
 *          size and CRC32C, write extents, cat_g4_recalled() (a recall
 *          killed half way leaves the object cold and its extents garbage)
 *
 * A demotion that cannot write the manifest turns the session's objects
 * back to HOT, their copies kept (cat_g4_demote_abort()).
 *
 * Invariants: an object's hot extents are freed only after G4 holds its
 * bytes verified and the session's manifest lists it; a G4 put is atomic
 * (cold.h), so running a step twice writes the same object again, never a
 * second one. The manifest is rewritten whole on every demotion of its
 * session, from the catalog, and lists every object of it whose current
 * version G4 holds verified (g4_vid = vid): cold, demoting or recalled;
 * the sweep rewrites it too, for a session an object left or went to
 * with its copy (sweep_moved(), the new one first).
 * Reclaim turns such an object cold instead of dropping it (catalog.c,
 * cat_object_drop), once g4_victim_copy_holds() has proven the copy.
 *
 * G4 names: a store puts each version it uploads under a name of its own,
 * ".kvtier/stores/STORE/BUCKET/KEY~VID", or, where the partner cannot hold
 * one that long (cold_key_fits(): S3's 1024 bytes, prefix included),
 * ".kvtier/stores/STORE/.versions/BUCKET/VID" (g4_upload_name()). No
 * bucket starts with '.', so none is ever an object's "BUCKET/KEY"; an
 * operator browsing the partner bucket reads whose copy of which key it
 * is. The store, because two stores over one G4 (two nodes, or a store
 * and its copy after kvtier store-id --new, which share VIDs too) that
 * each demoted an object at one key put both to "BUCKET/KEY": the second
 * went over the first's copy, and one's sweep deleted the other's. The
 * version, because a name kept for a key's next version writes over the
 * copy of the one before, which another store that imported the session
 * may still read (import keeps names), and which a dead row still names.
 * So a copy is written by one store, for one version, and no upload goes
 * over another object's. The catalog records the name (objects.g4_key),
 * the manifest lists it as g4_key and import keeps it (g4_name_parse()
 * checks it is one of the bucket's). Copies from before are read,
 * imported, swept and demoted again where they are: "BUCKET/KEY" (g4_key
 * NULL; a cold object renamed records it, catalog migration 5) and
 * ".kvtier/versions/BUCKET/VID". The sweep deletes a copy another store
 * wrote only for a session this store owns by its manifest (sweep_copy()),
 * and no store writes a manifest naming itself for a session G4 holds
 * none of while its objects name another store's copies
 * (session_copies_owner()): it would own them by that manifest.
 *
 * Concurrent recalls of one object coalesce into one fetch, across threads
 * and processes (g4_lock(), recall_object()); so do two demotions of one
 * session. RECALLING is not persisted: the lock, which dies with its
 * holder, stands for it.
 *
 * Between nodes over one G4, the manifest names the store that owns the
 * session; every write of it (demotion, sweep, import), and the sweep's
 * delete of it, is conditional on the manifest as read (cold_put_if(),
 * manifest_claim(); cold_del_if(), manifest_delete()), so one node never
 * writes over, or deletes, the owner another node's import put there. The
 * owner is the store's id, which a copy of the store directory keeps: a
 * store that is not where its id was given (store_g4_owned(), store.c)
 * demotes, sweeps and imports nothing (-EREMCHG), and recalls.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "util.h"

#define MANIFEST_MAX (64u << 20)
/* "kvtier_manifest" of what manifest_write() writes; one of a larger
 * number is a newer kvtier's, which this one refuses (manifest_read()).
 * 2: a g4_key may be a per-store name (".kvtier/stores/"), which a kvtier
 * of format 1 took for another bucket's and failed the import on; by the
 * format it says to upgrade instead. Format 1 is read as ever. */
#define MANIFEST_FORMAT 2

/* The cold tier's journal of multipart uploads is the catalog's g4_uploads. */
static int g4_journal_begin(void *arg, const char *url, const char *pkey, const char *upload_id)
{
	struct cat *c = store_cat(arg);

	return c ? cat_g4_upload_begin(c, url, pkey, upload_id, util_now_ns()) : -ENOMEM;
}

static void g4_journal_end(void *arg, const char *upload_id)
{
	struct cat *c = store_cat(arg);

	/* If this fails the row stays, and the next run's abort finds the
	 * upload gone (-ENOENT) and forgets it. */
	if (c)
		cat_g4_upload_end(c, upload_id);
}

int store_cold(struct kvt_store *st, struct cold **out)
{
	int rc = 0;

	pthread_mutex_lock(&st->cold_lock);
	if (!st->cold) {
		struct cold_opts o = {
			.url = st->g4_url,
			.endpoint = st->g4_endpoint,
			.region = st->g4_region,
			.credentials = st->g4_credentials,
			.ca_file = st->g4_ca_file,
			.store_dir = st->dir,
			.part_size = st->g4_part_size,
			.jobs = st->g4_jobs,
		};

		rc = cold_new(&o, &st->cold);
		if (st->cold && st->g4_stop_ns)
			cold_stop_at(st->cold, st->g4_stop_ns);
	}
	if (st->cold && !st->cold->journal.begin) {
		struct cold_journal j = { g4_journal_begin, g4_journal_end, st };

		cold_set_journal(st->cold, &j);
	}
	*out = st->cold;
	pthread_mutex_unlock(&st->cold_lock);
	return rc;
}

void kvt_store_stop_g4(struct kvt_store *st, unsigned grace_ms)
{
	pthread_mutex_lock(&st->cold_lock);
	st->g4_stop_ns = util_mono_ns() + (int64_t)grace_ms * 1000000;
	if (st->cold)
		cold_stop_at(st->cold, st->g4_stop_ns);
	pthread_mutex_unlock(&st->cold_lock);
}

void store_set_cold(struct kvt_store *st, struct cold *c)
{
	pthread_mutex_lock(&st->cold_lock);
	cold_free(st->cold);
	st->cold = c;
	pthread_mutex_unlock(&st->cold_lock);
}

/*
 * One demotion of a session, and one recall of an object, at a time, across
 * threads and processes: an OFD byte-range lock on DIR/g4.lock, one byte
 * chosen by a hash of the name. OFD locks belong to the open file
 * description, so two threads of one process exclude each other as two
 * processes do, and the kernel drops the lock of a process that dies: a
 * recall killed half way leaves nothing to clean up (no persisted RECALLING
 * state that would need an owner and a lease). Two names that share a byte
 * are only serialised. Returns the fd that holds the lock (close() drops
 * it), -EBUSY if it is taken and !wait, or -errno.
 */
int g4_lock(struct kvt_store *st, const char *kind, const char *a, const char *b, int wait)
{
	char path[4096];
	uint64_t h = 14695981039346656037ull;
	const char *parts[3] = { kind, a, b };
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1 };
	int fd;

	for (int i = 0; i < 3; i++)
		for (const char *p = parts[i]; ; p++) {
			h = (h ^ (unsigned char)*p) * 1099511628211ull;
			if (!*p)
				break;
		}
	fl.l_start = (off_t)(h & ((1ull << 40) - 1));
	snprintf(path, sizeof(path), "%s/g4.lock", st->dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		int rc = -errno;

		log_err(rc, "cannot open '%s'", path);
		return rc;
	}
	while (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) < 0) {
		int rc = -errno;

		if (rc == -EINTR)
			continue;
		close(fd);
		if (rc == -EAGAIN || rc == -EACCES)
			return -EBUSY;
		log_err(rc, "cannot lock '%s'", path);
		return rc;
	}
	return fd;
}

void g4_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

/* ---- what one kvt_g4_* run shares among its jobs --------------------------- */

/*
 * A run's limits: retries with exponential backoff of transfers the partner
 * failed with 500, 503 or no answer, and one byte rate over every transfer
 * of the run, in all its threads (a token bucket: each chunk reserves its
 * time slot and sleeps until it). NULL: one try, no limit (reads, reclaim).
 */
struct g4_ctl {
	const int *stop;	/* kvt_g4_opts.stop */
	unsigned retries;
	unsigned object_jobs;	/* objects of one session uploaded at once */
	uint64_t rate;		/* bytes/s, 0: none */
	pthread_mutex_t lock;
	int64_t rate_next_ns;	/* when the next byte may go */
};

static void g4_ctl_init(struct g4_ctl *ctl, const struct kvt_g4_opts *o)
{
	memset(ctl, 0, sizeof(*ctl));
	pthread_mutex_init(&ctl->lock, NULL);
	ctl->stop = o ? o->stop : NULL;
	ctl->retries = o ? o->retries : 0;
	ctl->object_jobs = 1;
	ctl->rate = o ? o->limit_rate : 0;
}

static void g4_ctl_release(struct g4_ctl *ctl)
{
	pthread_mutex_destroy(&ctl->lock);
}

static void g4_sleep_ns(int64_t ns)
{
	struct timespec ts = { ns / 1000000000, ns % 1000000000 };

	while (ns > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Accounts len bytes against the run's rate; sleeps until their slot. */
static void g4_rate_take(struct g4_ctl *ctl, size_t len)
{
	int64_t now, start;

	if (!ctl || !ctl->rate || !len)
		return;
	now = util_now_ns();
	pthread_mutex_lock(&ctl->lock);
	start = MAX(now, ctl->rate_next_ns);
	ctl->rate_next_ns = start + (int64_t)(len * 1000000000.0 / (double)ctl->rate);
	pthread_mutex_unlock(&ctl->lock);
	g4_sleep_ns(start - now);
}

/* Whether the run was told to stop (kvt_g4_opts.stop). */
static int g4_stopping(const struct g4_ctl *ctl)
{
	return ctl && ctl->stop && __atomic_load_n(ctl->stop, __ATOMIC_ACQUIRE);
}

/*
 * After try number `attempt` (0 first) failed with rc: 1 if it should go
 * again, after sleeping 250 ms << attempt (at most 8 s) plus up to a
 * quarter of that at random, so that many jobs do not come back at once.
 */
static int g4_backoff(const struct g4_ctl *ctl, unsigned attempt, int rc, const char *what)
{
	int64_t ns;

	if (!ctl || !g4_transient(rc) || attempt >= ctl->retries || g4_stopping(ctl))
		return 0;
	ns = MIN((int64_t)250000000 << MIN(attempt, 5u), (int64_t)8000000000);
	ns += (int64_t)((uint64_t)util_now_ns() % (uint64_t)(ns / 4 + 1));
	log_info("%s: %s; try %u of %u in %.2f s", what, strerror(-rc), attempt + 2,
		 ctl->retries + 1, ns / 1e9);
	g4_sleep_ns(ns);
	return 1;
}

/*
 * Runs fn(arg, i) for i in [0, n) in `jobs` threads (the caller is one of
 * them); each takes the next i. Threads that cannot start leave the work to
 * the others.
 */
struct g4_pool {
	pthread_mutex_t lock;
	size_t next, n;
	void (*fn)(void *arg, size_t i);
	void *arg;
};

static void *g4_pool_worker(void *p)
{
	struct g4_pool *pool = p;

	for (;;) {
		size_t i;

		pthread_mutex_lock(&pool->lock);
		i = pool->next < pool->n ? pool->next++ : pool->n;
		pthread_mutex_unlock(&pool->lock);
		if (i >= pool->n)
			return NULL;
		pool->fn(pool->arg, i);
	}
}

static void g4_parallel(unsigned jobs, size_t n, void (*fn)(void *arg, size_t i), void *arg)
{
	struct g4_pool pool = { .n = n, .fn = fn, .arg = arg };
	pthread_t th[64];
	unsigned started = 0;

	pthread_mutex_init(&pool.lock, NULL);
	jobs = MIN(MAX(jobs, 1u), 64u);
	while (started + 1 < jobs && started + 1 < n &&
	       util_thread_start(&th[started], NULL, g4_pool_worker, &pool) == 0)
		started++;
	g4_pool_worker(&pool);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&pool.lock);
}

/* "BUCKET/KEY": caller frees. */
static char *g4_object_key(const char *bucket, const char *key)
{
	size_t len = strlen(bucket) + strlen(key) + 2;
	char *k = malloc(len);

	if (k)
		snprintf(k, len, "%s/%s", bucket, key);
	return k;
}

/* Where G4 holds an object: the name the catalog recorded (cat_g4_obj,
 * cat_g4_name()), else "BUCKET/KEY". Caller frees. */
static char *g4_name(const char *bucket, const char *key, const char *g4_key)
{
	return g4_key ? strdup(g4_key) : g4_object_key(bucket, key);
}

/* Where store `store` puts its copies (see the head comment). */
#define G4_STORES ".kvtier/stores/"
/* ... of versions whose name would not fit the partner; no bucket starts
 * with '.', so none is ever taken for one. */
#define G4_STORE_VERSIONS ".versions/"
/* Where a kvtier from before per-store names put a version whose own name
 * another object's copy held (a cold object renamed away from it). */
#define G4_VERSIONS ".kvtier/versions/"

/* ".kvtier/stores/STORE/BUCKET/KEY~VID" or, with !key,
 * ".kvtier/stores/STORE/.versions/BUCKET/VID". Caller frees. */
static char *g4_store_key(uint64_t store, const char *bucket, const char *key, uint64_t vid)
{
	size_t len = strlen(G4_STORES G4_STORE_VERSIONS) + strlen(bucket) +
		     (key ? strlen(key) : 0) + 40;
	char *k = malloc(len);

	if (k && key)
		snprintf(k, len, G4_STORES "%016" PRIx64 "/%s/%s~%016" PRIx64, store, bucket, key,
			 vid);
	else if (k)
		snprintf(k, len, G4_STORES "%016" PRIx64 "/" G4_STORE_VERSIONS "%s/%016" PRIx64,
			 store, bucket, vid);
	return k;
}

/* Whether s is 16 lower-case hex digits (an id, a version), into *v. */
static int g4_hex16(const char *s, size_t len, uint64_t *v)
{
	if (len != 16 || strspn(s, "0123456789abcdef") < 16)
		return 0;
	*v = strtoull(s, NULL, 16);
	return 1;
}

/* What a G4 name of bucket's copies is. */
enum g4_kind {
	G4_OWN,			/* "BUCKET/KEY", from before per-store names */
	G4_VERSION,		/* ".kvtier/versions/BUCKET/VID", from before them too */
	G4_STORE,		/* ".kvtier/stores/STORE/BUCKET/KEY~VID" */
	G4_STORE_VERSION,	/* ".kvtier/stores/STORE/.versions/BUCKET/VID" */
};

/*
 * The one reader of G4 names (import's check of a manifest's g4_key, the
 * sweep's of whose copy it deletes): the kind of name, *store the store
 * whose per-store name it is (0 for the two older kinds), and *key,
 * *keylen the key inside it (G4_OWN, G4_STORE; else NULL). -EINVAL if it
 * names no copy of bucket's: the manifest is whoever can write the
 * partner bucket, and must not point recall at another bucket's bytes
 * (docs/security.md, G4).
 */
static int g4_name_parse(const char *name, const char *bucket, uint64_t *store,
			 const char **key, size_t *keylen)
{
	size_t blen = strlen(bucket), n;
	const char *p;
	uint64_t v;

	*store = 0;
	*key = NULL;
	*keylen = 0;
	if (!strncmp(name, bucket, blen) && name[blen] == '/') {
		if (kvt_key_valid(name + blen + 1) < 0)
			return -EINVAL;
		*key = name + blen + 1;
		*keylen = strlen(*key);
		return G4_OWN;
	}
	if (!strncmp(name, G4_VERSIONS, strlen(G4_VERSIONS))) {
		p = name + strlen(G4_VERSIONS);
		return !strncmp(p, bucket, blen) && p[blen] == '/' &&
		       g4_hex16(p + blen + 1, strlen(p + blen + 1), &v) ? G4_VERSION : -EINVAL;
	}
	if (strncmp(name, G4_STORES, strlen(G4_STORES)) != 0)
		return -EINVAL;
	p = name + strlen(G4_STORES);
	if (!g4_hex16(p, MIN(strlen(p), (size_t)16), store) || p[16] != '/' || !*store)
		return -EINVAL;
	p += 17;
	if (!strncmp(p, G4_STORE_VERSIONS, strlen(G4_STORE_VERSIONS))) {
		p += strlen(G4_STORE_VERSIONS);
		return !strncmp(p, bucket, blen) && p[blen] == '/' &&
		       g4_hex16(p + blen + 1, strlen(p + blen + 1), &v) ? G4_STORE_VERSION : -EINVAL;
	}
	if (strncmp(p, bucket, blen) != 0 || p[blen] != '/')
		return -EINVAL;
	p += blen + 1;
	n = strlen(p);
	if (n < 18 || p[n - 17] != '~' || !g4_hex16(p + n - 16, 16, &v))
		return -EINVAL;
	{
		char *k = strndup(p, n - 17);
		int valid = k && kvt_key_valid(k) == 0;

		free(k);
		if (!valid)
			return -EINVAL;
	}
	*key = p;
	*keylen = n - 17;
	return G4_STORE;
}

/*
 * The name an upload of co by store self gets: ".kvtier/stores/SELF/
 * BUCKET/KEY~VID", unless the partner cannot hold one that long
 * (cold_key_fits()) or an object of this store names it already; then
 * ".kvtier/stores/SELF/.versions/BUCKET/VID". Caller frees *out. 1 for a
 * version's name (it carries no key), 0 for the other, or -errno.
 */
static int g4_upload_name(struct cat *c, struct cold *cold, uint64_t self, const char *bucket,
			  const struct cat_object *co, char **out)
{
	char *k = g4_store_key(self, bucket, co->obj->key, co->vid);
	int rc = k ? 0 : -ENOMEM;

	if (rc == 0 && cold_key_fits(cold, k))
		rc = cat_g4_name_taken(c, co->bucket_id, co->id, k, NULL);
	else if (rc == 0)
		rc = 1;
	if (rc == 1) {
		free(k);
		k = g4_store_key(self, bucket, NULL, co->vid);
		rc = k ? 1 : -ENOMEM;
	}
	if (rc < 0) {
		free(k);
		return rc;
	}
	*out = k;
	return rc;
}

/*
 * The G4 key of a session's manifest, into *key (caller frees):
 * ".kvtier/manifests/BUCKET/SESSION.json", where every manifest was
 * before, unless the partner cannot hold that name (cold_key_fits(): on
 * file:// a component over NAME_MAX once encoded, as "SESSION.json" of a
 * one-component id of 252 bytes; on S3 over 1024 bytes with the prefix,
 * or a component over 255); then COLD_MANIFEST_HASHED "BUCKET/HEX.json",
 * HEX the SHA-256 of the id's bytes (before, such a session's manifest
 * write failed at every run, and nothing of it went cold). Every store
 * over one G4 computes the same name from the bucket and the id alone
 * (import has nothing else); the manifest holds the whole id, which
 * manifest_read() compares. 1 for the hashed name, 0 for the other,
 * -ENAMETOOLONG (logged) when the partner cannot hold that one either.
 */
static int g4_manifest_key(struct cold *cold, const char *bucket, const char *session,
			   char **key)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	char hex[2 * EVP_MAX_MD_SIZE + 1];
	size_t len = strlen(COLD_MANIFEST_HASHED) + strlen(bucket) + strlen(session) +
		     sizeof(hex) + 8;
	unsigned mdlen = 0;

	*key = malloc(len);
	if (!*key)
		return -ENOMEM;
	snprintf(*key, len, COLD_MANIFEST_PREFIX "%s/%s.json", bucket, session);
	if (cold_key_fits(cold, *key))
		return 0;
	if (!EVP_Digest(session, strlen(session), md, &mdlen, EVP_sha256(), NULL)) {
		free(*key);
		*key = NULL;
		return -ENOMEM;
	}
	util_hex(hex, md, mdlen);
	snprintf(*key, len, COLD_MANIFEST_HASHED "%s/%s.json", bucket, hex);
	if (cold_key_fits(cold, *key))
		return 1;
	log_err(0, "g4 '%s' cannot hold the manifest of session '%s' of bucket '%s', not even"
		" as '%s' (too long a name for it): the session is neither demoted nor imported,"
		" its objects stay as they are", cold->url, session, bucket, *key);
	free(*key);
	*key = NULL;
	return -ENAMETOOLONG;
}

/* ---- streaming an object's hot extents out -------------------------------- */

struct extent_src {
	struct kvt_store *st;
	struct io_ctx *io;
	struct cat_object *co;
	size_t next;		/* extent to read next */
	const char *payload;	/* of the extent in the buffer */
	uint64_t ext_off, ext_len;	/* its place in the object */
	uint32_t crc;		/* of what was served */
	struct g4_ctl *ctl;
};

/* Serves [off, off + len) in order; reads and verifies each extent once. */
static int extent_source(void *arg, void *buf, size_t len, uint64_t off)
{
	struct extent_src *es = arg;
	char *out = buf;

	while (len > 0) {
		if (!es->payload || off >= es->ext_off + es->ext_len) {
			const struct cat_extent *e;
			void *b = io_buf(es->io, 0);
			int rc;

			if (es->next >= es->co->nextents)
				return -EIO;	/* the catalog's extents do not cover size */
			e = &es->co->extents[es->next++];
			rc = store_read_extent(es->st, es->io, 0, b, es->co->vid, e);
			if (rc < 0)
				return rc;
			es->payload = (const char *)b + SEG_HEADER_SIZE;
			es->ext_off = e->obj_off;
			es->ext_len = e->length;
			continue;
		}
		{
			size_t n = (size_t)MIN((uint64_t)len, es->ext_off + es->ext_len - off);

			memcpy(out, es->payload + (off - es->ext_off), n);
			es->crc = kvt_crc32c(es->crc, out, n);
			g4_rate_take(es->ctl, n);
			out += n;
			off += n;
			len -= n;
		}
	}
	return 0;
}

struct crc_sink {
	uint32_t crc;
	uint64_t size;
	struct g4_ctl *ctl;
};

static int crc_sink(void *arg, const void *buf, size_t len)
{
	struct crc_sink *cs = arg;

	g4_rate_take(cs->ctl, len);
	cs->crc = kvt_crc32c(cs->crc, buf, len);
	cs->size += len;
	return 0;
}

/*
 * Uploads one DEMOTING object and verifies it: the bytes sent are the
 * object's (size and CRC32C of what the hot tier served), and the partner
 * stored exactly them (its ETag is the MD5 of what was sent: cold.h,
 * cold_put_info). Only a partner that gives nothing to compare is read back
 * (size and CRC32C). Then the catalog says G4 holds it, under the name this
 * store gave it (g4_upload_name()). -ENOENT: it changed meanwhile. Under
 * the key's lock (and demote_session()'s; a version's name under its own
 * too), so that g4_sweep() never deletes a copy that an upload has just
 * made, nor the one it is making:
 * the copy is recorded dead before the put (cat_g4_put_pending()) and
 * claimed with the record.
 */
struct g4_pending {
	int64_t id;		/* its g4_dead row, 0: none yet */
	char *name;		/* the copy that row names */
};

static int demote_upload_once(struct kvt_store *st, struct cold *cold, const char *bucket,
			      uint64_t self, struct cat_g4_obj *go, struct g4_ctl *ctl,
			      struct g4_pending *pend)
{
	struct cat *c = store_cat(st);
	struct kvt_object *o = go->co->obj;
	struct extent_src es = { .st = st, .ctl = ctl };
	struct crc_sink cs = { .ctl = ctl };
	struct cold_put_info info = { .verified = 0 };
	char *gkey = NULL;
	uint64_t got = 0;
	int rc, lock = -1, nlock = -1;

	if (!c) {
		rc = -ENOMEM;
		goto out;
	}
	lock = g4_lock(st, "key", bucket, o->key, 1);
	if (lock < 0) {
		rc = lock;
		goto out;
	}
	rc = cat_object_lookup(c, bucket, o->key, 1, &es.co);
	if (rc < 0)
		goto out;
	if (es.co->vid != go->co->vid) {
		rc = -ENOENT;
		goto out;
	}
	rc = g4_upload_name(c, cold, self, bucket, go->co, &gkey);
	if (rc == 1) {
		/* A version's name carries no key, and a rename keeps the
		 * version: the dead row that names it may be of another key
		 * than this one, and its sweep locks the name (sweep_copy()). */
		nlock = g4_lock(st, "name", bucket, gkey, 1);
		rc = nlock < 0 ? nlock : 0;
	}
	if (rc < 0)
		goto out;
	rc = store_io_get(st, &es.io);
	if (rc < 0)
		goto out;
	/* Dead until recorded: a kill between the put and the record left a
	 * copy no row named, never deleted. A put that fails leaves it too: a
	 * partner may keep a cut PUT. One row for all the tries of a name. */
	if (!pend->id || strcmp(pend->name, gkey) != 0) {
		char *name = strdup(gkey);

		rc = name ? cat_g4_put_pending(c, go->co, gkey, &pend->id) : -ENOMEM;
		if (rc < 0) {
			free(name);
			goto out;
		}
		free(pend->name);
		pend->name = name;
	}
	rc = cold_put(cold, gkey, o->size, o->content_type, extent_source, &es, &info);
	if (rc < 0) {
		if (rc != -ESTALE)	/* moved meanwhile: demote_upload() looks again */
			log_err(rc, "cannot upload '%s' to g4", gkey);
		goto out;
	}
	if (es.crc != o->crc32c) {
		log_err(0, "'%s/%s' read back from the hot tier with crc32c %08x, not %08x",
			bucket, o->key, es.crc, o->crc32c);
		rc = -EIO;
		goto out;
	}
	if (!info.verified) {
		/* Nothing to compare: read it back (twice the traffic). */
		rc = cold_get(cold, gkey, crc_sink, &cs, &got);
		if (rc < 0) {
			log_err(rc, "cannot read back '%s' from g4", gkey);
			goto out;
		}
		if (cs.size != o->size || cs.crc != o->crc32c) {
			log_err(0, "g4 holds '%s' as %" PRIu64 " bytes with crc32c %08x, not %"
				PRIu64 " with %08x", gkey, cs.size, cs.crc, o->size, o->crc32c);
			rc = -EIO;
			goto out;
		}
	}
	rc = cat_g4_set_uploaded(c, go->co, info.etag, gkey, pend->id);
	if (rc == 0) {
		go->g4_vid = go->co->vid;
		snprintf(go->g4_etag, sizeof(go->g4_etag), "%s", info.etag);
		free(go->g4_key);
		go->g4_key = gkey;
		gkey = NULL;
	}
out:
	g4_unlock(nlock);
	g4_unlock(lock);
	store_io_put(st, es.io);
	cat_object_free(es.co);
	free(gkey);
	return rc;
}

/*
 * -ESTALE from an upload: reclaim freed the extents it was reading (the
 * version was overwritten and its space reused, or a pinned object was
 * relocated). It looks again: another version is -ENOENT, the same one is
 * uploaded from where it is now. Counted as a failure, it made a tiny hot
 * tier under churn refuse writes (ENOSPC: the demoter freed nothing) with
 * G4 working.
 */
#define DEMOTE_STALE_TRIES 3

static int demote_upload(struct kvt_store *st, struct cold *cold, const char *bucket,
			 uint64_t self, struct cat_g4_obj *go, struct g4_ctl *ctl)
{
	struct g4_pending pend = { 0 };
	unsigned attempt = 0, stale = 0;
	int rc;

	for (;;) {
		rc = demote_upload_once(st, cold, bucket, self, go, ctl, &pend);
		if (rc == -ESTALE && stale++ < DEMOTE_STALE_TRIES)
			continue;
		if (!g4_backoff(ctl, attempt++, rc, go->co->obj->key))
			break;
	}
	free(pend.name);
	return rc;
}

/* ---- manifests: JSON, written and read here only ---------------------------- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/*
 * What a conditional manifest write compares (cold.h, put_if): found, the
 * manifest's ETag as read, or COLD_ABSENT when there was none. A tier
 * without conditional puts, or a manifest read with no ETag (a partner
 * whose GET answers none), gives nothing to compare: the write is plain.
 */
struct manifest_tag {
	char etag[KVT_ETAG_MAX];
	int found;
};

/* put_if's match for what t read; NULL: nothing to compare. */
static const char *manifest_match(const struct manifest_tag *t)
{
	return t->found && !t->etag[0] ? NULL : t->etag;
}

/* The session's manifest: every object G4 holds verified at its version,
 * and the store that owns the session (cat_store_id()). With match (not
 * NULL) only while G4 holds the manifest that was read (cold_put_if()):
 * -ECANCELED, not logged, if it changed since. */
static int manifest_write(struct cold *cold, const char *bucket, const char *session,
			  uint64_t owner, const struct cat_g4_obj *v, size_t n,
			  const char *match, struct g4_ctl *ctl)
{
	static int warned;
	char *text = NULL, *key = NULL;
	size_t len = 0, count = 0;
	int rc = g4_manifest_key(cold, bucket, session, &key);
	FILE *f;

	if (rc < 0)
		return rc;
	f = open_memstream(&text, &len);
	if (!f) {
		free(key);
		return -ENOMEM;
	}
	fprintf(f, "{\"kvtier_manifest\": %d, \"bucket\": ", MANIFEST_FORMAT);
	json_str(f, bucket);
	fprintf(f, ", \"session\": ");
	json_str(f, session);
	fprintf(f, ", \"owner\": \"%016" PRIx64 "\",\n \"objects\": [", owner);
	for (size_t i = 0; i < n; i++) {
		const struct kvt_object *o = v[i].co->obj;

		if (v[i].g4_vid != v[i].co->vid)
			continue;	/* not (yet) in G4 at this version */
		fprintf(f, "%s\n  {\"key\": ", count++ ? "," : "");
		json_str(f, o->key);
		fprintf(f, ", \"g4_key\": ");
		{
			char *gk = g4_name(bucket, o->key, v[i].g4_key);

			json_str(f, gk ? gk : "");
			free(gk);
		}
		fprintf(f, ", \"size\": %" PRIu64 ", \"crc32c\": \"%08x\", \"etag\": ", o->size,
			o->crc32c);
		json_str(f, o->etag);
		fprintf(f, ", \"g4_etag\": ");
		json_str(f, v[i].g4_etag);
		fprintf(f, ", \"content_type\": ");
		if (o->content_type)
			json_str(f, o->content_type);
		else
			fprintf(f, "null");
		fprintf(f, ", \"mtime_ns\": %" PRId64 ", \"mode\": %u, \"uid\": %u, \"gid\": %u,"
			" \"kind\": %d, \"pinned\": %d, \"meta\": {", o->mtime_ns, o->posix.mode,
			o->posix.uid, o->posix.gid, (int)o->posix.kind, o->pinned);
		for (size_t m = 0; m < o->nmeta; m++) {
			fprintf(f, "%s", m ? ", " : "");
			json_str(f, o->meta[m].name);
			fprintf(f, ": ");
			json_str(f, o->meta[m].value);
		}
		fprintf(f, "}}");
	}
	fprintf(f, "\n]}\n");
	if (fclose(f) != 0) {
		free(text);
		free(key);
		return -ENOMEM;
	}
	for (unsigned attempt = 0;;) {
		rc = match ? cold_put_buf_if(cold, key, match, text, len, "application/json") :
			     cold_put_buf(cold, key, text, len, "application/json");
		if (rc == -EOPNOTSUPP && match) {
			if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
				log_warn(0, "g4 '%s' offers no conditional put: manifests are written"
					 " over whatever is there, and an import elsewhere that"
					 " lands between a demotion's owner check and its write is"
					 " lost (kvtier-migrate(8))", cold->url);
			match = NULL;
			continue;
		}
		if (!g4_backoff(ctl, attempt++, rc, key))
			break;
	}
	if (rc < 0 && rc != -ECANCELED)
		log_err(rc, "cannot write the manifest '%s'", key);
	free(text);
	free(key);
	return rc;
}

/* A small JSON reader: enough for manifests, strict about the rest. */
enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype type;
	char *str;		/* J_STR text, J_NUM digits; J_OBJ: this value's name */
	char *name;		/* member name when inside an object */
	size_t n;
	struct jval *kids;
};

static void jval_release(struct jval *v)
{
	for (size_t i = 0; i < v->n; i++)
		jval_release(&v->kids[i]);
	free(v->kids);
	free(v->str);
	free(v->name);
}

struct jparse {
	const char *p, *end;
	int depth;
};

static void j_ws(struct jparse *jp)
{
	while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\n' || *jp->p == '\t' ||
				   *jp->p == '\r'))
		jp->p++;
}

static int j_hex4(const char *p, unsigned *out)
{
	unsigned v = 0;

	for (int i = 0; i < 4; i++) {
		char ch = p[i];

		v <<= 4;
		if (ch >= '0' && ch <= '9')
			v |= (unsigned)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			v |= (unsigned)(ch - 'a' + 10);
		else if (ch >= 'A' && ch <= 'F')
			v |= (unsigned)(ch - 'A' + 10);
		else
			return -EINVAL;
	}
	*out = v;
	return 0;
}

static int j_string(struct jparse *jp, char **out)
{
	size_t cap = 16, n = 0;
	char *s = malloc(cap);

	if (!s)
		return -ENOMEM;
	jp->p++;	/* the opening quote */
	while (jp->p < jp->end && *jp->p != '"') {
		char buf[4];
		size_t k = 1;

		buf[0] = *jp->p++;
		if (buf[0] == '\\') {
			unsigned cp;

			if (jp->p >= jp->end)
				goto bad;
			switch (*jp->p++) {
			case '"': buf[0] = '"'; break;
			case '\\': buf[0] = '\\'; break;
			case '/': buf[0] = '/'; break;
			case 'n': buf[0] = '\n'; break;
			case 't': buf[0] = '\t'; break;
			case 'r': buf[0] = '\r'; break;
			case 'b': buf[0] = '\b'; break;
			case 'f': buf[0] = '\f'; break;
			case 'u':
				/* We write \u only below 0x20; others take one BMP code point. */
				if (jp->end - jp->p < 4 || j_hex4(jp->p, &cp) < 0 || cp == 0 ||
				    (cp >= 0xd800 && cp <= 0xdfff))
					goto bad;
				jp->p += 4;
				if (cp < 0x80) {
					buf[0] = (char)cp;
				} else if (cp < 0x800) {
					buf[0] = (char)(0xc0 | cp >> 6);
					buf[1] = (char)(0x80 | (cp & 0x3f));
					k = 2;
				} else {
					buf[0] = (char)(0xe0 | cp >> 12);
					buf[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
					buf[2] = (char)(0x80 | (cp & 0x3f));
					k = 3;
				}
				break;
			default:
				goto bad;
			}
		} else if ((unsigned char)buf[0] < 0x20) {
			goto bad;
		}
		if (n + k + 1 > cap) {
			char *ns = realloc(s, cap *= 2);

			if (!ns) {
				free(s);
				return -ENOMEM;
			}
			s = ns;
		}
		memcpy(s + n, buf, k);
		n += k;
	}
	if (jp->p >= jp->end)
		goto bad;
	jp->p++;
	s[n] = '\0';
	*out = s;
	return 0;
bad:
	free(s);
	return -EINVAL;
}

static int j_value(struct jparse *jp, struct jval *v);

static int j_push(struct jval *parent, size_t *cap, struct jval **slot)
{
	if (parent->n == *cap) {
		struct jval *k = realloc(parent->kids, (*cap = *cap ? 2 * *cap : 8) * sizeof(*k));

		if (!k)
			return -ENOMEM;
		parent->kids = k;
	}
	*slot = &parent->kids[parent->n++];
	memset(*slot, 0, sizeof(**slot));
	return 0;
}

static int j_container(struct jparse *jp, struct jval *v, char close)
{
	size_t cap = 0;
	int rc;

	if (++jp->depth > 16)
		return -EINVAL;
	jp->p++;
	j_ws(jp);
	if (jp->p < jp->end && *jp->p == close) {
		jp->p++;
		jp->depth--;
		return 0;
	}
	for (;;) {
		struct jval *k;
		char *name = NULL;

		j_ws(jp);
		if (close == '}') {
			if (jp->p >= jp->end || *jp->p != '"')
				return -EINVAL;
			rc = j_string(jp, &name);
			if (rc < 0)
				return rc;
			j_ws(jp);
			if (jp->p >= jp->end || *jp->p != ':') {
				free(name);
				return -EINVAL;
			}
			jp->p++;
		}
		rc = j_push(v, &cap, &k);
		if (rc < 0) {
			free(name);
			return rc;
		}
		k->name = name;
		rc = j_value(jp, k);
		if (rc < 0)
			return rc;
		j_ws(jp);
		if (jp->p < jp->end && *jp->p == ',') {
			jp->p++;
			continue;
		}
		if (jp->p < jp->end && *jp->p == close) {
			jp->p++;
			jp->depth--;
			return 0;
		}
		return -EINVAL;
	}
}

static int j_value(struct jparse *jp, struct jval *v)
{
	j_ws(jp);
	if (jp->p >= jp->end)
		return -EINVAL;
	switch (*jp->p) {
	case '{':
		v->type = J_OBJ;
		return j_container(jp, v, '}');
	case '[':
		v->type = J_ARR;
		return j_container(jp, v, ']');
	case '"':
		v->type = J_STR;
		return j_string(jp, &v->str);
	}
	if (jp->end - jp->p >= 4 && !strncmp(jp->p, "null", 4)) {
		v->type = J_NULL;
		jp->p += 4;
		return 0;
	}
	if (jp->end - jp->p >= 4 && !strncmp(jp->p, "true", 4)) {
		v->type = J_BOOL;
		v->str = strdup("1");
		jp->p += 4;
		return v->str ? 0 : -ENOMEM;
	}
	if (jp->end - jp->p >= 5 && !strncmp(jp->p, "false", 5)) {
		v->type = J_BOOL;
		v->str = strdup("0");
		jp->p += 5;
		return v->str ? 0 : -ENOMEM;
	}
	{
		const char *s = jp->p;

		if (jp->p < jp->end && *jp->p == '-')
			jp->p++;
		while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			jp->p++;
		if (jp->p == s || (jp->p == s + 1 && *s == '-'))
			return -EINVAL;
		v->type = J_NUM;
		v->str = strndup(s, (size_t)(jp->p - s));
		return v->str ? 0 : -ENOMEM;
	}
}

static const struct jval *j_get(const struct jval *obj, const char *name, enum jtype type)
{
	for (size_t i = 0; obj->type == J_OBJ && i < obj->n; i++)
		if (obj->kids[i].name && !strcmp(obj->kids[i].name, name))
			return obj->kids[i].type == type ? &obj->kids[i] : NULL;
	return NULL;
}

static int j_u64(const struct jval *obj, const char *name, uint64_t *out)
{
	const struct jval *v = j_get(obj, name, J_NUM);
	char *end;

	if (!v || v->str[0] == '-')
		return -EINVAL;
	errno = 0;
	*out = strtoull(v->str, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

/* The session's manifest from G4, parsed into root (caller releases it):
 * 0, -ENOENT, -EINVAL for one kvtier did not write for this bucket and
 * session, -EPROTO for one of a newer format, -EEXIST for another
 * session's at this one's hashed name (g4_manifest_key()), or
 * -ENAMETOOLONG for one the partner cannot hold (all logged). */
static int manifest_read(struct cold *cold, const char *bucket, const char *session,
			 struct jval *root, struct manifest_tag *tag)
{
	char etag[KVT_ETAG_MAX] = "";
	char *text = NULL, *key = NULL;
	const struct jval *mb, *ms;
	struct jparse jp;
	uint64_t format;
	size_t len = 0;
	int hashed = g4_manifest_key(cold, bucket, session, &key), rc;

	if (hashed < 0)
		return hashed;
	rc = cold_get_buf_etag(cold, key, MANIFEST_MAX, &text, &len, etag);
	if (tag) {
		tag->found = rc == 0;
		snprintf(tag->etag, sizeof(tag->etag), "%s", rc == 0 ? etag : COLD_ABSENT);
	}
	if (rc < 0) {
		char also[96];

		/* The bucket missing (-ENXIO): the S3 tier's line names it,
		 * where this one said "No such device or address". A partner
		 * that does not answer: once a minute (cold.h). */
		if (rc != -ENOENT && rc != -ENXIO &&
		    (!g4_transient(rc) ||
		     log_limit(&cold->manifest_no_answer, LOG_REPEAT_SECONDS, "manifest reads",
			       also, sizeof(also))))
			log_err(rc, "cannot read the manifest '%s'%s", key,
				g4_transient(rc) ? also : "");
		goto out;
	}
	jp = (struct jparse){ .p = text, .end = text + len };
	rc = j_value(&jp, root);
	if (rc == 0) {
		j_ws(&jp);
		if (jp.p != jp.end)
			rc = -EINVAL;
	}
	mb = j_get(root, "bucket", J_STR);
	ms = j_get(root, "session", J_STR);
	if (rc == 0 && hashed && j_get(root, "objects", J_ARR) && mb && ms &&
	    (strcmp(mb->str, bucket) || strcmp(ms->str, session))) {
		/* Two ids of one SHA-256, or a manifest put there by hand: the
		 * other session's, neither imported as this one nor written
		 * over by it. */
		log_err(0, "the manifest '%s' in g4 is of session '%s' of bucket '%s', not of"
			" session '%s' whose name it has: left alone, and the session is neither"
			" demoted nor imported", key, ms->str, mb->str, session);
		rc = -EEXIST;
	} else if (rc < 0 || !j_get(root, "objects", J_ARR) || !mb || !ms ||
		   strcmp(mb->str, bucket) || strcmp(ms->str, session)) {
		log_err(0, "the manifest '%s' in g4 is not one kvtier can read", key);
		rc = -EINVAL;
	} else if (j_u64(root, "kvtier_manifest", &format) == 0 && format > MANIFEST_FORMAT) {
		/* One G4 serves nodes upgraded one at a time: what a newer
		 * kvtier wrote is neither read as this format nor written over
		 * (manifest_owner() fails with it too). */
		log_err(0, "the manifest '%s' in g4 is of format %" PRIu64 ", which a newer kvtier"
			" wrote; this one reads format %d: session '%s' of bucket '%s' is left"
			" alone until this node's kvtier is upgraded", key, format,
			MANIFEST_FORMAT, session, bucket);
		rc = -EPROTO;
	}
out:
	free(text);
	free(key);
	return rc;
}

/* A manifest's owner that no store has: one that names none, read by a
 * store given a new id (g4_self()). Ids are odd and below 2^63. */
#define OWNER_UNNAMED UINT64_MAX

/*
 * This store's id (*self), and whose a manifest that names no owner is
 * (*unnamed): this store's, unless its id is new since it was copied
 * (kvtier store-id --new): then such a session (demoted by a kvtier from
 * before 2026-12-03) may be the original's, whose copies the sweep here
 * deleted, and it is left alone.
 */
static int g4_self(struct cat *c, uint64_t *self, uint64_t *unnamed)
{
	int copied = 0;
	int rc = cat_store_id(c, self);

	if (rc == 0)
		rc = cat_store_copied(c, &copied);
	*unnamed = copied ? OWNER_UNNAMED : 0;
	return rc;
}

/* The store that owns the session by its manifest; 0 when none is named (no
 * manifest, or one unreadable), and unnamed for one written before
 * manifests named owners (g4_self()). tag (may be NULL) gets what a write
 * after this read compares. */
static int manifest_owner(struct cold *cold, const char *bucket, const char *session,
			  uint64_t unnamed, uint64_t *owner, struct manifest_tag *tag,
			  struct g4_ctl *ctl)
{
	struct jval root = { 0 };
	const struct jval *ow;
	int rc;

	for (unsigned attempt = 0;; attempt++) {
		rc = manifest_read(cold, bucket, session, &root, tag);
		if (!g4_backoff(ctl, attempt, rc, "the manifest's owner"))
			break;
		jval_release(&root);
		root = (struct jval){ 0 };
	}
	*owner = 0;
	ow = rc == 0 ? j_get(&root, "owner", J_STR) : NULL;
	if (ow && strlen(ow->str) == 16 && strspn(ow->str, "0123456789abcdef") == 16)
		*owner = strtoull(ow->str, NULL, 16);
	else if (rc == 0)
		*owner = unnamed;
	jval_release(&root);
	return rc == -ENOENT || rc == -EINVAL ? 0 : rc;
}

/*
 * Whose a session is that G4 holds no manifest of naming an owner (none,
 * or none kvtier can read), by the copies this catalog lists of it (v, n):
 * the store whose id a copy's name carries, if not this one (self); for a
 * name from before per-store names ("BUCKET/KEY", ".kvtier/versions/"),
 * which carries none, unnamed (g4_self(): the original's in a store given
 * a new id); 0 when every copy is this store's. Claimed by a manifest
 * naming this store, such a session was taken for one it had imported,
 * and its sweep deleted those copies, which the store that wrote them may
 * still name: the original of a copy given a new id had moved the objects
 * to another session (deleting the old one's manifest), and read them as
 * I/O errors there. The objects in mine (nmine ids, ascending; may be
 * NULL) are left out: they moved in from a session this store owns by
 * its manifest (sweep_moved()), where their copies were this store's to
 * list whoever wrote them.
 */
static int id_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static uint64_t session_copies_owner(const char *bucket, const struct cat_g4_obj *v, size_t n,
				     uint64_t self, uint64_t unnamed, const int64_t *mine,
				     size_t nmine)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t writer = 0;
		const char *in;
		size_t inlen;

		if (v[i].g4_vid != v[i].co->vid)
			continue;	/* no copy of this version */
		if (nmine && bsearch(&v[i].co->id, mine, nmine, sizeof(*mine), id_cmp))
			continue;
		if (v[i].g4_key)
			g4_name_parse(v[i].g4_key, bucket, &writer, &in, &inlen);
		if (!writer)
			writer = unnamed;
		if (writer && writer != self)
			return writer;
	}
	return 0;
}

/* "store ID", or for OWNER_UNNAMED the store this one was copied from. */
static const char *owner_name(uint64_t owner, char *buf, size_t len)
{
	if (owner == OWNER_UNNAMED)
		snprintf(buf, len, "the store this one was copied from");
	else
		snprintf(buf, len, "store %016" PRIx64, owner);
	return buf;
}

/* How often manifest_claim() reads again a manifest that changed between
 * its read and its write before it gives up for this run. */
#define MANIFEST_CLAIM_TRIES 5

/*
 * The manifest written from v, naming self, unless another store owns the
 * session: read with its ETag, its owner checked, and written only while
 * G4 still holds what was read (cold_put_if()). Another node's import that
 * lands between the check and the write (kvtier-migrate --import writes
 * the manifest naming its store) makes the write fail, not go over it:
 * then the manifest is read again, and if it names another store now, 0
 * with *owner that store, nothing written. Before, the write named this
 * store again, and its sweep deleted the copies the importer had taken.
 * mine, nmine: as session_copies_owner() takes them.
 */
static int manifest_claim(struct cold *cold, const char *bucket, const char *session,
			  uint64_t self, uint64_t unnamed, const struct cat_g4_obj *v, size_t n,
			  const int64_t *mine, size_t nmine, uint64_t *owner, struct g4_ctl *ctl)
{
	struct manifest_tag tag;
	int rc;

	for (unsigned attempt = 0;; attempt++) {
		rc = manifest_owner(cold, bucket, session, unnamed, owner, &tag, ctl);
		if (rc == 0 && !*owner) {
			char who[64];

			*owner = session_copies_owner(bucket, v, n, self, unnamed, mine, nmine);
			if (*owner)
				log_info("session '%s' of bucket '%s' has no manifest in g4 that names"
					 " its owner, and its objects here name copies %s wrote: left"
					 " to it", session, bucket, owner_name(*owner, who, sizeof(who)));
		}
		if (rc < 0 || (*owner && *owner != self))
			return rc;
		rc = manifest_write(cold, bucket, session, self, v, n, manifest_match(&tag), ctl);
		if (rc != -ECANCELED)
			return rc;
		if (attempt + 1 == MANIFEST_CLAIM_TRIES) {
			log_err(rc, "the manifest of session '%s' of bucket '%s' changed in g4 each"
				" of %u times between its read and its write: left for the next run",
				session, bucket, MANIFEST_CLAIM_TRIES);
			return -EAGAIN;
		}
		log_info("the manifest of session '%s' of bucket '%s' changed in g4 since it was"
			 " read: reading it again", session, bucket);
	}
}

/* ---- demotion ---------------------------------------------------------------- */

struct session_ref {
	int64_t bucket_id;
	char *bucket, *session;
};

struct session_list {
	struct session_ref *v;
	size_t n, cap;
};

static int session_collect(void *arg, int64_t bucket_id, const char *bucket, const char *session)
{
	struct session_list *l = arg;

	if (UTIL_GROW(l->v, l->n, l->cap) < 0)
		return -ENOMEM;
	l->v[l->n].bucket_id = bucket_id;
	l->v[l->n].bucket = strdup(bucket);
	l->v[l->n].session = strdup(session);
	if (!l->v[l->n].bucket || !l->v[l->n].session) {
		free(l->v[l->n].bucket);
		free(l->v[l->n].session);
		return -ENOMEM;
	}
	l->n++;
	return 0;
}

static void session_list_release(struct session_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].bucket);
		free(l->v[i].session);
	}
	free(l->v);
}

static void g4_progress(const struct kvt_g4_opts *o, const char *bucket, const char *key,
			uint64_t size, int rc)
{
	if (o && o->progress)
		o->progress(o->arg, bucket, key, size, rc);
}

/* Counts what a demotion of the session would move. */
static int demote_dry(struct cat *c, const struct session_ref *s, const struct kvt_g4_opts *o,
		      struct kvt_g4_report *rep)
{
	struct cat_g4_obj *v = NULL;
	size_t n = 0, moved = 0;
	int rc = cat_g4_session_objects(c, s->bucket_id, s->session,
					1u << KVT_TIER_HOT | 1u << KVT_TIER_DEMOTING, &v, &n);

	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		const struct kvt_object *ob = v[i].co->obj;

		if (ob->tier == KVT_TIER_HOT && ob->pinned)
			continue;
		moved++;
		rep->objects++;
		rep->bytes += ob->size;
		g4_progress(o, s->bucket, ob->key, ob->size, 0);
	}
	rep->sessions += moved > 0;
	cat_g4_objs_free(v, n);
	return 0;
}

/*
 * Step 1 of a demotion, for object i of the session: upload and verify it
 * unless G4 holds it already. Objects of one session go in parallel
 * (g4_ctl.object_jobs), each in its own thread with its own catalog
 * connection; a failure is counted and marked, and the others go on.
 * But once the partner has not answered for one of them through all its
 * retries (refused, dropped, timed out: g4_transient() but for a 503),
 * the objects of the session not started yet are not tried in this run
 * (unanswered): they stay hot, counted as failures, and the run goes on
 * with the next session. Each tried in turn, a session of 100 objects
 * whose copies always timed out held its job for 100 times the retries
 * (about 16 s of backoff each, for kvtier-migrate, plus the timeouts),
 * and a demoter's pass for 100 timeouts.
 */
struct demote_step {
	struct kvt_store *st;
	struct cold *cold;
	const struct session_ref *s;
	const struct kvt_g4_opts *o;
	struct g4_ctl *ctl;
	struct cat_g4_obj *v;
	uint64_t self;		/* this store's id: its uploads' names */
	atomic_uint failures;
	atomic_int unanswered;	/* the partner's silence that ended one, or 0 */
};

static void demote_step_fail(struct demote_step *d, struct cat *c, struct cat_g4_obj *go,
			     int rc)
{
	if (c)
		cat_g4_failed(c, go->co->id);
	if (g4_transient(rc) && rc != -EAGAIN)	/* a 503 is an answer, and quick */
		atomic_store(&d->unanswered, rc);
	atomic_fetch_add(&d->failures, 1);
	g4_progress(d->o, d->s->bucket, go->co->obj->key, go->co->obj->size, rc);
}

/*
 * Whether G4's copy gkey of go, recorded as verified when it was uploaded,
 * still holds exactly its bytes: 1 if it does, 0 if the partner says it is
 * gone or holds others, -errno if it did not answer. The size proves
 * nothing: a copy damaged in G4, or put over by another node, keeps it, and
 * a recalled object demoted again on a size check was marked cold and lost
 * its only good bytes. So the ETag the upload recorded, where the partner
 * gives one that follows the bytes (S3's MD5), else a read of the copy,
 * size and CRC32C (file://, where that read is local; SSE-KMS).
 */
static int g4_copy_holds(struct cold *cold, const char *gkey, const struct cat_g4_obj *go,
			 struct g4_ctl *ctl)
{
	const struct kvt_object *o = go->co->obj;
	struct crc_sink cs = { .ctl = ctl };
	char etag[KVT_ETAG_MAX] = "";
	uint64_t size = 0, got = 0;
	int rc = cold_head_etag(cold, gkey, &size, etag);

	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	if (size != o->size)
		return 0;
	if (etag[0] && go->g4_etag[0]) {
		if (strcmp(etag, go->g4_etag) == 0)
			return 1;
		log_err(0, "g4 holds '%s' with ETag %s, not %s as uploaded: uploading it again",
			 gkey, etag, go->g4_etag);
		return 0;
	}
	rc = cold_get(cold, gkey, crc_sink, &cs, &got);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0) {
		log_err(rc, "cannot read back '%s' from g4", gkey);
		return rc;
	}
	if (cs.size != o->size || cs.crc != o->crc32c) {
		log_err(0, "g4 holds '%s' as %" PRIu64 " bytes with crc32c %08x, not %" PRIu64
			" with %08x: uploading it again", gkey, cs.size, cs.crc, o->size, o->crc32c);
		return 0;
	}
	return 1;
}

int g4_victim_copy_holds(struct kvt_store *st, int64_t id, uint64_t vid, const char *bucket)
{
	struct cat *c = store_cat(st);
	struct cat_g4_obj *go = NULL;
	struct cold *cold;
	char *gkey = NULL;
	int rc;

	if (!c)
		return -ENOMEM;
	rc = store_cold(st, &cold);
	if (rc < 0)
		return rc;
	rc = cat_g4_object(c, id, vid, &go);
	if (rc < 0)
		return rc;
	if (go->g4_vid != vid) {
		rc = -ENOENT;	/* forgotten meanwhile: nothing to prove */
		goto out;
	}
	gkey = g4_name(bucket, go->co->obj->key, go->g4_key);
	rc = gkey ? g4_copy_holds(cold, gkey, go, NULL) : -ENOMEM;
out:
	free(gkey);
	cat_g4_objs_free(go, 1);
	return rc;
}

/*
 * A g4_dead row a kvtier of schema 4 left (catalog migration 10, unproven)
 * names "BUCKET/KEY" with no g4_key, and may be the only copy of a cold
 * object renamed away from KEY through the mount: that kvtier kept the
 * object's g4_vid and dropped its old name, so recall looked for the new
 * one and the sweep deleted this copy. The copy is claimed, as g4_key, by
 * every cold object with no recorded name whose bytes it holds (size and
 * the ETag the upload recorded, else size and CRC32C of a read of it) and
 * whose own name does not hold them (g4_copy_holds()); once named, no sweep
 * deletes it and recall reads it. One HEAD and a search of an index by
 * size and ETag, or, with no ETag, by size and the CRC32C of a read of the
 * copy (only if an object of its size could take it); then the rows are
 * proven, so this runs once per row. Caller holds the key lock of
 * (bucket, key), as the sweep takes it. Objects claimed, or -errno (then
 * the copy must stay, and the rows unproven). An upload never goes to
 * "BUCKET/KEY" any more, so a demotion no longer claims first.
 */
static int g4_claim_unproven(struct cat *c, struct cold *cold, int64_t bucket_id,
			     const char *bucket, const char *key)
{
	char *gkey = g4_object_key(bucket, key);
	char etag[KVT_ETAG_MAX] = "";
	struct crc_sink cs = { .ctl = NULL };
	struct cat_g4_obj *v = NULL;
	uint64_t size = 0, got = 0;
	size_t n = 0;
	int have_crc = 0, claimed = 0, rc;

	if (!gkey)
		return -ENOMEM;
	rc = cold_head_etag(cold, gkey, &size, etag);
	if (rc == -ENOENT) {
		rc = 0;		/* nothing there to keep */
		goto out;
	}
	if (rc == 0 && etag[0]) {
		rc = cat_g4_cold_unnamed(c, bucket_id, key, size, etag, 0, &v, &n);
	} else if (rc == 0) {
		/* No ETag: the copy's CRC32C, read once, and only if an object
		 * of its size could take it, finds those whose bytes it may be
		 * (blocks of one size are the rule: by size, each row read
		 * the bucket's every cold object). */
		rc = cat_g4_cold_unnamed_sized(c, bucket_id, key, size);
		if (rc == 1)
			rc = cold_get(cold, gkey, crc_sink, &cs, &got);
		if (rc == 0 && cs.size == size) {
			have_crc = 1;
			rc = cat_g4_cold_unnamed(c, bucket_id, key, size, NULL, cs.crc, &v, &n);
		}
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const struct kvt_object *o = v[i].co->obj;
		char *own;
		int r;

		/* Both ETags there: the query compared them. */
		if (!etag[0] || !v[i].g4_etag[0]) {
			if (!have_crc) {
				rc = cold_get(cold, gkey, crc_sink, &cs, &got);
				if (rc < 0)
					break;
				have_crc = 1;
			}
			if (cs.size != o->size || cs.crc != o->crc32c)
				continue;
		}
		own = g4_object_key(bucket, o->key);
		r = own ? g4_copy_holds(cold, own, &v[i], NULL) : -ENOMEM;
		free(own);
		if (r < 0) {
			rc = r;
			break;
		}
		if (r == 1)
			continue;	/* the same bytes, its own copy */
		r = cat_g4_name_found(c, v[i].co->id, v[i].co->vid, gkey);
		if (r == -ENOENT)
			continue;	/* changed meanwhile */
		if (r < 0) {
			rc = r;
			break;
		}
		log_info("'%s/%s' is in g4 under its name before a rename that a kvtier of"
			 " schema 4 did not record, '%s': recorded", bucket, o->key, gkey);
		claimed++;
	}
	if (rc == -ENOENT)
		rc = 0;		/* gone between the HEAD and the read */
out:
	/* Checked: each row costs its HEAD once, whichever path comes first. */
	if (rc == 0)
		rc = cat_g4_dead_proven(c, bucket_id, key);
	if (rc < 0)
		log_err(rc, "cannot tell whether g4's '%s' is a renamed object's only copy;"
			" it stays", gkey);
	cat_g4_objs_free(v, n);
	free(gkey);
	return rc < 0 ? rc : claimed;
}

static void demote_step_one(void *arg, size_t i)
{
	struct demote_step *d = arg;
	struct cat *c = store_cat(d->st);
	struct cat_g4_obj *go = &d->v[i];
	int rc = 0;

	if (go->co->obj->tier != KVT_TIER_DEMOTING)
		return;
	rc = atomic_load(&d->unanswered);
	if (rc < 0 || !c) {
		/* Not tried, so no attempt to record; nor a copy proven, so
		 * not marked cold in this run (step 3). */
		go->g4_vid = 0;
		demote_step_fail(d, NULL, go, rc < 0 ? rc : -ENOMEM);
		return;
	}
	if (go->g4_vid == go->co->vid) {
		/* Uploaded before (a crash, or recalled since): still there? */
		char *gkey = g4_name(d->s->bucket, go->co->obj->key, go->g4_key);

		rc = gkey ? g4_copy_holds(d->cold, gkey, go, d->ctl) : -ENOMEM;
		free(gkey);
		if (rc == 1)
			return;
		/*
		 * Gone or changed in G4: upload again, but only on the
		 * partner's word (not when it did not answer), and only
		 * once the catalog no longer calls that copy verified:
		 * reclaim would turn the object cold on a copy being
		 * rewritten, and a partner may keep a cut PUT.
		 */
		if (rc == 0) {
			rc = cat_g4_forget(c, go->co->id, go->co->vid);
			if (rc == -ENOENT)
				return;	/* changed or cold meanwhile */
		}
		go->g4_vid = 0;	/* not marked cold in this run (step 3) */
		if (rc < 0) {
			demote_step_fail(d, c, go, rc);
			return;
		}
	}
	rc = demote_upload(d->st, d->cold, d->s->bucket, d->self, go, d->ctl);
	if (rc < 0 && rc != -ENOENT)	/* -ENOENT: overwritten or deleted meanwhile */
		demote_step_fail(d, c, go, rc);
}

/*
 * A session whose manifest names another store: left alone here. What this
 * node recalled of it before it moved is no matter (reclaim turns it cold);
 * what was written here since is the fleet's rule broken (a conversation
 * on two nodes at once), and a recalled object whose copy the owner
 * rewrote is only this node's old version: uploaded, either went over the
 * owner's copy. They stay hot, counted as failed, said why.
 */
static int demote_foreign(struct cat *c, const struct session_ref *s, uint64_t owner,
			  int unlisted, struct kvt_g4_report *rep)
{
	struct cat_g4_obj *v = NULL;
	size_t n = 0, written = 0;
	char who[64];
	int rc = cat_g4_session_objects(c, s->bucket_id, s->session,
					1u << KVT_TIER_HOT | 1u << KVT_TIER_DEMOTING, &v, &n);

	owner_name(owner, who, sizeof(who));
	for (size_t i = 0; rc == 0 && i < n; i++)
		written += v[i].g4_vid != v[i].co->vid && !v[i].co->obj->pinned;
	cat_g4_objs_free(v, n);
	if (rc < 0)
		return rc;
	if (unlisted) {
		/* No manifest to import: what takes it back is the objects here
		 * that name that store's copies going. */
		if (written)
			log_err(0, "session '%s' of bucket '%s' has no manifest in g4 that names its"
				" owner, and its objects here name copies %s wrote, which a"
				" demotion here would take for this store's: %zu of its objects,"
				" written here, stay hot; delete here those that name that store's"
				" copies to demote the session", s->session, s->bucket, who,
				written);
		else
			log_info("session '%s' of bucket '%s' has no manifest in g4 that names its"
				 " owner, and its objects here name copies %s wrote: not demoted"
				 " here", s->session, s->bucket, who);
		rep->failures += written;
		return 0;
	}
	if (!written) {
		log_info("session '%s' of bucket '%s' belongs to %s: not demoted here (import it"
			 " to take it back)", s->session, s->bucket, who);
		return 0;
	}
	log_err(0, "session '%s' of bucket '%s' belongs to %s, and g4 does not hold %zu of its"
		" objects as this store has them (written here, or rewritten there): they stay"
		" hot, not demoted over that store's; import the session here to take it back"
		" (a conversation goes to one node at a time)", s->session, s->bucket, who,
		written);
	rep->failures += written;
	return 0;
}

/*
 * A session demote_session() refused whole (a manifest of a newer format,
 * -EPROTO; a partner that did not answer about it; a catalog error) before
 * any of its objects was counted: each object it leaves hot counts as a
 * failure, and a session whose objects cannot be counted as one. Logged,
 * and not counted, a nightly run that demoted nothing of it exited 0.
 */
static void demote_refused(struct cat *c, const struct session_ref *s,
			   struct kvt_g4_report *rep)
{
	struct cat_g4_obj *v = NULL;
	size_t n = 0, left = 0;
	int rc = c ? cat_g4_session_objects(c, s->bucket_id, s->session,
					    1u << KVT_TIER_HOT | 1u << KVT_TIER_DEMOTING,
					    &v, &n) : -ENOMEM;

	for (size_t i = 0; rc == 0 && i < n; i++)
		left += !(v[i].co->obj->tier == KVT_TIER_HOT && v[i].co->obj->pinned);
	cat_g4_objs_free(v, n);
	rep->failures += rc < 0 || !left ? 1 : left;
}

static int demote_session(struct kvt_store *st, struct cold *cold, const struct session_ref *s,
			  const struct kvt_g4_opts *o, struct kvt_g4_report *rep,
			  struct g4_ctl *ctl)
{
	struct cat *c = store_cat(st);
	struct cat_g4_obj *v = NULL;
	size_t n = 0, moved = 0, demoting = 0;
	int count = 0, lock = -1, rc;
	uint64_t self, unnamed, owner = 0, failed0 = rep->failures;

	if (!c)
		return -ENOMEM;
	if (o && o->dry_run)
		return demote_dry(c, s, o, rep);
	rc = g4_self(c, &self, &unnamed);
	if (rc < 0)
		goto out;
	/* Two demotions of one session (the migrator and reclaim under
	 * pressure, in two processes) would each write the manifest from what
	 * they saw: the last could omit what the first marked cold. */
	lock = g4_lock(st, "demote", s->bucket, s->session, 1);
	if (lock < 0) {
		rc = lock;
		goto out;
	}
	/* A session another store imported since is that store's: a demotion
	 * here (of what this node recalled before it moved on) rewrote its
	 * manifest from this catalog, dropping what the owner added and naming
	 * this store the owner again, whose sweep then deleted copies the
	 * owner still needs; and an upload would put over the owner's copies.
	 * Left hot: reclaim turns what G4 holds cold (cat_object_drop()). */
	rc = manifest_owner(cold, s->bucket, s->session, unnamed, &owner, NULL, ctl);
	if (rc == -ENAMETOOLONG || rc == -EEXIST) {
		/* No manifest could list them (said why: g4_manifest_key(),
		 * manifest_read()): nothing is uploaded, and they stay hot. */
		demote_refused(c, s, rep);
		rc = 0;
		goto out;
	}
	if (rc < 0)
		goto out;
	if (owner && owner != self) {
		rc = demote_foreign(c, s, owner, 0, rep);
		goto out;
	}
	/* No manifest names one: the copies its objects here name may. */
	if (!owner) {
		rc = cat_g4_session_objects(c, s->bucket_id, s->session, 0xf, &v, &n);
		if (rc < 0)
			goto out;
		owner = session_copies_owner(s->bucket, v, n, self, unnamed, NULL, 0);
		cat_g4_objs_free(v, n);
		v = NULL;
		n = 0;
		if (owner) {
			rc = demote_foreign(c, s, owner, 1, rep);
			goto out;
		}
	}
	rc = cat_g4_demote_begin(c, s->bucket_id, s->session, &count);
	if (rc == 0)
		/* Every tier: a recalled object is still in G4 and in the manifest. */
		rc = cat_g4_session_objects(c, s->bucket_id, s->session, 0xf, &v, &n);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		demoting += v[i].co->obj->tier == KVT_TIER_DEMOTING;
	if (demoting == 0)
		goto out;	/* someone else finished it meanwhile */
	/* 1. Upload and verify what G4 does not hold yet, several at once. */
	{
		struct demote_step d = { .st = st, .cold = cold, .s = s, .o = o, .ctl = ctl,
					 .v = v, .self = self };
		unsigned failed;
		int unanswered;

		g4_parallel(ctl ? ctl->object_jobs : 1, n, demote_step_one, &d);
		failed = atomic_load(&d.failures);
		unanswered = atomic_load(&d.unanswered);
		rep->failures += failed;
		/* Each upload's failure names its key; a run's output, the
		 * session (reclaim names it: g4_pressure_failed()). */
		if (failed && ctl)
			log_err(unanswered, "cannot demote %u objects of session '%s' of bucket '%s'%s;"
				" they stay hot for the next run", failed, s->session, s->bucket,
				unanswered ? " (none tried after the first g4 did not answer for)" :
				"");
	}
	/* 2. The manifest lists everything G4 holds of the session, unless
	 * another store imported it while the uploads ran, or imports it
	 * between the owner's check and the write (manifest_claim()). Its
	 * objects stay DEMOTING, hot; the next run finds the owner first. A
	 * partner that ignores conditional puts leaves that moment open. */
	rc = manifest_claim(cold, s->bucket, s->session, self, unnamed, v, n, NULL, 0, &owner,
			    ctl);
	if (rc == 0 && owner && owner != self)
		log_err(0, "session '%s' of bucket '%s' was imported by store %016" PRIx64
			" while this demotion ran: it is that store's, and its objects stay hot"
			" here", s->session, s->bucket, owner);
	if (rc < 0 || (owner && owner != self)) {
		for (size_t i = 0; i < n; i++)
			rep->failures += v[i].co->obj->tier == KVT_TIER_DEMOTING;
		/* No manifest lists them: hot again, their copies kept for the
		 * next demotion. Left demoting, every run took the session up
		 * again, idle or not, and failed the same way (a manifest the
		 * partner refuses). */
		if (rc < 0)	/* failing too, they stay demoting, as a crash leaves them */
			cat_g4_demote_abort(c, s->bucket_id, s->session);
		goto out;
	}
	/* 3. Only now may the hot copies go. */
	for (size_t i = 0; i < n; i++) {
		struct cat_g4_obj *go = &v[i];

		if (go->co->obj->tier != KVT_TIER_DEMOTING || go->g4_vid != go->co->vid)
			continue;
		rc = cat_g4_mark_cold(c, go->co->id, go->co->vid);
		if (rc == -ENOENT)
			continue;
		if (rc < 0) {
			rep->failures++;
			g4_progress(o, s->bucket, go->co->obj->key, go->co->obj->size, rc);
			continue;
		}
		moved++;
		rep->objects++;
		rep->bytes += go->co->obj->size;
		g4_progress(o, s->bucket, go->co->obj->key, go->co->obj->size, 0);
	}
	rep->sessions += moved > 0;
	rc = 0;
out:
	cat_g4_objs_free(v, n);
	g4_unlock(lock);
	if (rc < 0 && rc != -ENOMEM && rep->failures == failed0)
		demote_refused(c, s, rep);
	return rc;
}

int g4_demote_pressure(struct kvt_store *st, const char *bucket, const char *session)
{
	struct session_ref s = { .bucket = (char *)bucket, .session = (char *)session };
	struct kvt_g4_report rep = { 0 };
	struct cold *cold = NULL;
	int rc = store_g4_owned(st);

	if (rc == 0)
		rc = store_cold(st, &cold);
	if (rc == 0)
		rc = store_bucket_id(st, bucket, &s.bucket_id);
	if (rc == 0)
		rc = demote_session(st, cold, &s, NULL, &rep, NULL);
	if (rc == 0 && rep.failures)
		rc = -EIO;	/* logged by the upload */
	if (rc == 0)
		log_info("demoted session '%s' of bucket '%s' under pressure: %" PRIu64
			 " objects, %" PRIu64 " bytes", session, bucket, rep.objects, rep.bytes);
	return rc;
}

void g4_pressure_failed(struct kvt_store *st, const char *bucket, const char *session, int rc,
			int64_t again_ms, const char *also)
{
	struct cold *cold = NULL;
	char note[96] = "", again[64] = "";

	if (rc == -EREMCHG)
		return;
	/* The store's is met at each pass (every second while full): once a
	 * minute, with the count of those left out. */
	if (!also && store_cold(st, &cold) == 0 && cold &&
	    !log_limit(&cold->pressure_refused, LOG_REPEAT_SECONDS, "demotions under pressure",
		       note, sizeof(note)))
		return;
	if (again_ms > 0)
		snprintf(again, sizeof(again), ", and it is not asked again for %.1f s",
			 again_ms / 1e3);
	log_err(rc, "cannot demote session '%s' of bucket '%s' under pressure; its objects stay"
		" hot%s%s", session, bucket, again, also ? also : note);
}

/* ---- housekeeping: stale uploads, dead keys ---------------------------------- */

struct upload_ref {
	char *url, *key, *id;
	long pid;
};

struct upload_list {
	struct upload_ref *v;
	size_t n, cap;
};

static int upload_collect(void *arg, const char *url, const char *key, const char *upload_id,
			  int64_t started_ns, long pid)
{
	struct upload_list *l = arg;

	(void)started_ns;
	if (UTIL_GROW(l->v, l->n, l->cap) < 0)
		return -ENOMEM;
	l->v[l->n] = (struct upload_ref){ strdup(url), strdup(key), strdup(upload_id), pid };
	if (!l->v[l->n].url || !l->v[l->n].key || !l->v[l->n].id) {
		free(l->v[l->n].url);
		free(l->v[l->n].key);
		free(l->v[l->n].id);
		return -ENOMEM;
	}
	l->n++;
	return 0;
}

/*
 * Aborts the multipart uploads the catalog recorded and no run completed
 * (a kvtier-migrate killed half way). Runs under the migrate lock, so no
 * other run is uploading; but reclaim under pressure in the gateway or the
 * mount uploads too (g4_demote_pressure()): an upload whose process is
 * alive is left alone. Uploads of another G4 url (the configuration
 * changed) are left recorded and logged.
 */
static int g4_abort_stale(struct kvt_store *st, struct cat *c, struct cold *cold,
			  uint64_t *failed)
{
	struct upload_list l = { 0 };
	int rc = cat_g4_uploads(c, upload_collect, &l);

	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		const struct upload_ref *u = &l.v[i];
		int r;

		if (u->pid != (long)getpid() && u->pid > 0 &&
		    (kill((pid_t)u->pid, 0) == 0 || errno != ESRCH))
			continue;	/* still uploading, in another process */
		if (strcmp(u->url, cold->url) != 0) {
			log_info("multipart upload '%s' of '%s' was to g4 '%s', not '%s': left alone",
				 u->id, u->key, u->url, cold->url);
			continue;
		}
		r = cold_abort_upload(cold, u->key, u->id);
		if (r == 0)
			log_info("aborted the multipart upload '%s' of '%s', left by an interrupted"
				 " run", u->id, u->key);
		else if (r == -ENOENT)
			log_info("multipart upload '%s' of '%s' is gone from g4", u->id, u->key);
		else if (r == -EOPNOTSUPP)
			log_err(0, "g4 '%s' cannot abort the multipart upload '%s' of '%s'; its"
				" parts stay until the partner expires them", cold->url, u->id, u->key);
		else {
			(*failed)++;	/* logged; the next run tries again */
			continue;
		}
		rc = cat_g4_upload_end(c, u->id);
	}
	for (size_t i = 0; i < l.n; i++) {
		free(l.v[i].url);
		free(l.v[i].key);
		free(l.v[i].id);
	}
	free(l.v);
	(void)st;
	return rc;
}

struct dead_ref {
	int64_t id, bucket_id;
	char *bucket, *key, *session;
	char *g4_key;		/* NULL: "BUCKET/KEY" */
	int unproven;		/* 1: g4_claim_unproven() first; -1: it failed, keep the copy */
};

struct dead_list {
	struct dead_ref *v;
	size_t n, cap;
};

static void dead_list_release(struct dead_list *l)
{
	for (size_t k = 0; k < l->n; k++) {
		free(l->v[k].bucket);
		free(l->v[k].key);
		free(l->v[k].session);
		free(l->v[k].g4_key);
	}
	free(l->v);
}

static int dead_collect(void *arg, int64_t id, int64_t bucket_id, const char *bucket,
			const char *key, const char *session, const char *g4_key, int unproven)
{
	struct dead_list *l = arg;

	if (UTIL_GROW(l->v, l->n, l->cap) < 0)
		return -ENOMEM;
	l->v[l->n] = (struct dead_ref){ id, bucket_id, strdup(bucket), strdup(key), strdup(session),
					g4_key ? strdup(g4_key) : NULL, unproven && !g4_key };
	if (!l->v[l->n].bucket || !l->v[l->n].key || !l->v[l->n].session ||
	    (g4_key && !l->v[l->n].g4_key)) {
		free(l->v[l->n].bucket);
		free(l->v[l->n].key);
		free(l->v[l->n].session);
		free(l->v[l->n].g4_key);
		return -ENOMEM;
	}
	l->n++;
	return 0;
}

/*
 * Keys deleted, overwritten, renamed or moved to another session since G4
 * got them (catalog.c, g4_dead): the session's manifest is written again
 * from the catalog, so it no longer lists them and an import elsewhere
 * cannot bring them back; then the G4 copy is deleted, unless an object
 * still names it (cat_g4_name_taken: a cold object renamed away from it,
 * or a new version at the key that has been uploaded over it). Each
 * session under its demotion lock, each key under its key lock (as
 * demote_upload_once() takes it), so a demotion never loses a fresh copy.
 * A session whose manifest names another store as its owner was imported
 * there since: that store's catalog names the copies now, so they and the
 * manifest are left to it. What fails stays for the next run.
 * g4_sweep() walks the sessions; sweep_moved() (the sessions its objects
 * went to), sweep_manifest() and sweep_copy() are its steps.
 */

/*
 * The manifest mkey deleted only while G4 holds what was read (match, as
 * manifest_match() gives it; NULL: whatever it holds): -ECANCELED, not
 * logged, when it changed since. Another node's import that landed
 * between the sweep's owner check and an unconditional delete lost its
 * manifest: the session could no longer be found by name, and this
 * store's sweep went on to delete the copies the importer had taken.
 */
static int manifest_delete(struct cold *cold, const char *mkey, const char *match)
{
	static int warned;
	int rc = match ? cold_del_if(cold, mkey, match) : cold_del(cold, mkey);

	if (rc == -EOPNOTSUPP && match) {
		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			log_warn(0, "g4 '%s' offers no conditional delete: manifests are deleted"
				 " whatever they hold, and an import elsewhere that lands between"
				 " a sweep's owner check and its delete loses its manifest"
				 " (kvtier-migrate(8))", cold->url);
		rc = cold_del(cold, mkey);
	}
	if (rc == -ENOENT)
		rc = 0;
	if (rc < 0 && rc != -ECANCELED)
		log_err(rc, "cannot delete the manifest '%s'", mkey);
	return rc;
}

/* The manifest of session s written again from the catalog, or deleted
 * when G4 holds none of the session's objects any more (conditionally, as
 * it is written: manifest_delete()); neither when another store owns the
 * session (*owner, as manifest_claim() says, given mine and nmine). */
static int sweep_manifest(struct cat *c, struct cold *cold, const struct session_ref *s,
			  uint64_t self, uint64_t unnamed, const int64_t *mine, size_t nmine,
			  uint64_t *owner)
{
	struct cat_g4_obj *v = NULL;
	size_t n = 0, listed = 0;
	char *mkey;
	int rc = cat_g4_session_objects(c, s->bucket_id, s->session, 0xf, &v, &n);

	if (rc < 0)
		return rc;
	for (size_t k = 0; k < n; k++)
		listed += v[k].g4_vid == v[k].co->vid;
	if (listed) {
		rc = manifest_claim(cold, s->bucket, s->session, self, unnamed, v, n, mine, nmine,
				    owner, NULL);
		cat_g4_objs_free(v, n);
		return rc;
	}
	cat_g4_objs_free(v, n);
	rc = g4_manifest_key(cold, s->bucket, s->session, &mkey);
	if (rc < 0)
		return rc;
	for (unsigned attempt = 0;; attempt++) {
		struct manifest_tag tag;

		rc = manifest_owner(cold, s->bucket, s->session, unnamed, owner, &tag, NULL);
		if (rc < 0 || (*owner && *owner != self) || !tag.found)
			break;
		rc = manifest_delete(cold, mkey, manifest_match(&tag));
		if (rc != -ECANCELED)
			break;
		if (attempt + 1 == MANIFEST_CLAIM_TRIES) {
			log_err(rc, "the manifest of session '%s' of bucket '%s' changed in g4 each"
				" of %u times between its read and its delete: left for the next"
				" run", s->session, s->bucket, MANIFEST_CLAIM_TRIES);
			rc = -EAGAIN;
			break;
		}
		log_info("the manifest of session '%s' of bucket '%s' changed in g4 since it was"
			 " read: reading it again", s->session, s->bucket);
	}
	free(mkey);
	return rc;
}

/* The unproven entries of a session, claimed before its manifest is
 * written (so that it names the claimed copies) and before any copy is
 * deleted; one whose claim failed is marked to stay for the next run. */
static int sweep_unproven(struct kvt_store *st, struct cat *c, struct cold *cold,
			  struct dead_ref *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int klock, rc;

		if (v[i].unproven <= 0)
			continue;
		klock = g4_lock(st, "key", v[i].bucket, v[i].key, 1);
		if (klock < 0)
			return klock;
		rc = g4_claim_unproven(c, cold, v[i].bucket_id, v[i].bucket, v[i].key);
		g4_unlock(klock);
		if (rc == -ENXIO)
			return rc;	/* no bucket: no other request will do better */
		if (rc < 0)
			v[i].unproven = -1;
	}
	return 0;
}

/*
 * One dead entry's copy, deleted unless an object names it; then
 * forgotten. A copy another store wrote (its id in the name) is deleted
 * only when this store owns the session by its manifest (ours): then the
 * session came here by an import, with the names that store gave. Else
 * the copy is that store's still (this one a copy of it, with its
 * objects; or an import that never took the session), and may stand for
 * an object there that moved to another session: left to it, forgotten.
 */
static int sweep_copy(struct kvt_store *st, struct cat *c, struct cold *cold,
		      const struct dead_ref *d, uint64_t self, uint64_t unnamed, int ours)
{
	char *gkey = g4_name(d->bucket, d->key, d->g4_key), *lkey = NULL;
	const char *in = NULL;
	uint64_t writer = 0;
	size_t inlen = 0;
	int kind, klock, rc;

	if (!gkey)
		return -ENOMEM;
	kind = g4_name_parse(gkey, d->bucket, &writer, &in, &inlen);
	/* A name from before per-store names carries no store: in a store
	 * given a new id, the original may have written it (g4_self()). */
	if (!writer)
		writer = unnamed;
	if (writer && writer != self && !ours) {
		char who[64];

		log_info("'%s' in g4 is a copy %s wrote, and session '%s' of bucket '%s' is not"
			 " this store's by its manifest: left to that store", gkey,
			 owner_name(writer, who, sizeof(who)), d->session, d->bucket);
		free(gkey);
		return cat_g4_dead_done(c, d->id);
	}
	/* What an upload that writes gkey holds (demote_upload_once()): the
	 * lock of the key in the name; a version's name carries none, and a
	 * rename keeps the version, so the object uploading it may be at
	 * another key than this row's (it locked this row's key, and deleted
	 * the copy an upload of the renamed object had just recorded): the
	 * lock of the name. */
	if (in) {
		lkey = strndup(in, inlen);
		if (!lkey) {
			free(gkey);
			return -ENOMEM;
		}
	}
	klock = lkey ? g4_lock(st, "key", d->bucket, lkey, 1) : g4_lock(st, "name", d->bucket,
									   gkey, 1);
	if (klock < 0) {
		free(lkey);
		free(gkey);
		return klock;
	}
	/* Not while an object names it: a cold one renamed away, or (for
	 * "BUCKET/KEY") a new version at the key that G4 holds there. */
	rc = cat_g4_name_taken(c, d->bucket_id, 0, gkey, kind == G4_OWN ? lkey : NULL);
	if (rc == 0) {
		rc = cold_del(cold, gkey);
		if (rc == -ENOENT)
			rc = 0;
		if (rc < 0)
			log_err(rc, "cannot delete '%s' from g4", gkey);
	}
	g4_unlock(klock);
	free(lkey);
	free(gkey);
	return rc < 0 ? rc : cat_g4_dead_done(c, d->id);
}

/*
 * An object moved to another session (user.kvtier.session,
 * kvt_object_set_session()) keeps its G4 copy and leaves a dead entry in
 * the session it left. The sweep wrote that session's manifest without it
 * (or deleted it, the object its last), and nothing wrote the new one's
 * until something of the new session was demoted: no manifest listed the
 * object, and an import of either session on another store brought
 * nothing of it. Now the sessions the objects went to get their manifests
 * written again from the catalog first (sweep_moved()), then the one they
 * left: a run killed between the two writes leaves an object listed in
 * both, never in neither, and the next run, the dead entries still there,
 * writes both again.
 */
struct move_ref {
	int64_t bucket_id, id;
	char *from, *to;	/* the session it left, the one it is in */
	char *g4_key;		/* NULL: "BUCKET/KEY" */
};

struct move_list {
	struct move_ref *v;
	size_t n, cap;
};

static void move_list_release(struct move_list *l)
{
	for (size_t k = 0; k < l->n; k++) {
		free(l->v[k].from);
		free(l->v[k].to);
		free(l->v[k].g4_key);
	}
	free(l->v);
}

static int move_collect(void *arg, int64_t bucket_id, const char *from, const char *to,
			int64_t id, const char *g4_key)
{
	struct move_list *l = arg;
	struct move_ref *m;

	if (UTIL_GROW(l->v, l->n, l->cap) < 0)
		return -ENOMEM;
	m = &l->v[l->n];
	*m = (struct move_ref){ bucket_id, id, strdup(from), strdup(to),
				g4_key ? strdup(g4_key) : NULL };
	if (!m->from || !m->to || (g4_key && !m->g4_key)) {
		free(m->from);
		free(m->to);
		free(m->g4_key);
		return -ENOMEM;
	}
	l->n++;
	return 0;
}

/*
 * The moves out of session `from` of bucket (v, n, by new session and
 * object, as cat_g4_moves() gives them): each new session's manifest
 * written again, under its demotion lock, listing them. Only what is this
 * store's to list: nothing if the session they left is another store's by
 * its manifest (the objects here are this node's old view of it; that
 * store's catalog names their copies, and a manifest naming this store
 * would let its sweep delete them), and a copy another store wrote only if
 * that session is this store's by its manifest (an import), as
 * sweep_copy() deletes one. A new session another store owns (by its
 * manifest, or by the copies its objects here name) is not written: the
 * objects it would list count in *left, said why, and the caller leaves
 * the old session as it is for this run, whose manifest still lists them.
 */
static int sweep_moved(struct kvt_store *st, struct cat *c, struct cold *cold,
		       const char *bucket, const char *from, const struct move_ref *v, size_t n,
		       uint64_t self, uint64_t unnamed, size_t *left)
{
	uint64_t from_owner = 0;
	int64_t *mine = NULL;
	int rc;

	*left = 0;
	if (!n)
		return 0;
	rc = manifest_owner(cold, bucket, from, unnamed, &from_owner, NULL, NULL);
	if (rc < 0 || (from_owner && from_owner != self))
		return rc;
	mine = calloc(n, sizeof(*mine));
	if (!mine)
		return -ENOMEM;
	for (size_t i = 0, j; rc == 0 && i < n; i = j) {
		struct session_ref to = { v[i].bucket_id, (char *)bucket, v[i].to };
		uint64_t owner = 0;
		size_t nmine = 0;
		char who[64];
		int lock;

		for (j = i; j < n && !strcmp(v[j].to, v[i].to); j++) {
			uint64_t writer = 0;
			const char *in;
			size_t inlen;

			if (v[j].g4_key)
				g4_name_parse(v[j].g4_key, bucket, &writer, &in, &inlen);
			if (!writer)
				writer = unnamed;
			if (!writer || writer == self || from_owner == self)
				mine[nmine++] = v[j].id;	/* ascending: cat_g4_moves() */
		}
		if (!nmine)
			continue;
		lock = g4_lock(st, "demote", bucket, to.session, 1);
		if (lock < 0) {
			rc = lock;
			break;
		}
		rc = sweep_manifest(c, cold, &to, self, unnamed, mine, nmine, &owner);
		g4_unlock(lock);
		if (rc == 0 && owner && owner != self) {
			owner_name(owner, who, sizeof(who));
			log_err(0, "%zu objects of bucket '%s' moved here from session '%s' to"
				" session '%s', which belongs to %s: g4 lists them under '%s'"
				" still, its manifest and deleted keys left as they are, until"
				" they are moved back or to a session of this store's"
				" (user.kvtier.session)", nmine, bucket, from, to.session, who, from);
			*left += nmine;
		}
	}
	free(mine);
	return rc;
}

/* Whether move m is of the session (bucket_id, session): 0, or which
 * comes first, in cat_g4_dead()'s order. */
static int move_cmp(const struct move_ref *m, int64_t bucket_id, const char *session)
{
	if (m->bucket_id != bucket_id)
		return m->bucket_id < bucket_id ? -1 : 1;
	return strcmp(m->from, session);
}

/*
 * What it could not drop counts in *failed; -EIO if anything. With the
 * partner's bucket missing (-ENXIO: [g4] url names one deleted, or
 * misnamed), the sessions after the first that found it so are not
 * asked about: each logged its own failed request and "cannot read the
 * manifest" (thousands of lines a night on a large store), where one
 * line says it, with the count of sessions left. They count as failures
 * and keep their dead entries, as before.
 */
static int g4_sweep(struct kvt_store *st, struct cat *c, struct cold *cold, uint64_t *failed)
{
	struct dead_list l = { 0 };
	struct move_list ml = { 0 };
	size_t i = 0, m = 0, nobucket = 0;	/* sessions left for the bucket missing */
	uint64_t self = 0, unnamed = 0, failed0 = *failed;
	int rc = g4_self(c, &self, &unnamed);

	if (rc == 0)
		rc = cat_g4_dead(c, dead_collect, &l);
	if (rc == 0)
		rc = cat_g4_moves(c, move_collect, &ml);
	while (rc == 0 && i < l.n) {
		const struct dead_ref *first = &l.v[i];
		struct session_ref from = { first->bucket_id, first->bucket, first->session };
		size_t j = i, mj, left = 0;
		uint64_t owner = 0;
		int lock, r;

		while (j < l.n && l.v[j].bucket_id == first->bucket_id &&
		       !strcmp(l.v[j].session, first->session))
			j++;
		/* The moves out of it: taken after the rows, one may have none. */
		while (m < ml.n && move_cmp(&ml.v[m], first->bucket_id, first->session) < 0)
			m++;
		for (mj = m; mj < ml.n && !move_cmp(&ml.v[mj], first->bucket_id, first->session);)
			mj++;
		if (nobucket) {
			nobucket++;
			(*failed)++;
			i = j;
			m = mj;
			continue;
		}
		/* Where its objects went first; not under its lock: two demotion
		 * locks held at once may share a byte (g4_lock()). */
		r = sweep_moved(st, c, cold, first->bucket, first->session, &ml.v[m], mj - m, self,
				unnamed, &left);
		m = mj;
		if (r < 0 || left) {
			*failed += left ? left : 1;
			nobucket += r == -ENXIO;
			i = j;
			continue;
		}
		lock = g4_lock(st, "demote", first->bucket, first->session, 1);
		if (lock < 0) {
			rc = lock;
			break;
		}
		/* Copies a kvtier of schema 4 left first: the manifest then
		 * names those its objects claim, and none is deleted. */
		r = sweep_unproven(st, c, cold, &l.v[i], j - i);
		if (r == 0)
			r = sweep_manifest(c, cold, &from, self, unnamed, NULL, 0, &owner);
		if (r == 0 && owner == OWNER_UNNAMED)
			log_info("session '%s' of bucket '%s' is, by its manifest or the copies its"
				 " objects here name, from before this store's id was new: its g4"
				 " copies are left to the store it was copied from", first->session,
				 first->bucket);
		else if (r == 0 && owner && owner != self)
			log_info("session '%s' of bucket '%s' belongs to store %016" PRIx64
				 " now: its g4 copies are left to it", first->session,
				 first->bucket, owner);
		for (; r == 0 && i < j; i++) {
			int gone = owner && owner != self ? cat_g4_dead_done(c, l.v[i].id) :
				   l.v[i].unproven < 0 ? -EAGAIN :
				   sweep_copy(st, c, cold, &l.v[i], self, unnamed, owner == self);

			*failed += gone < 0;
			nobucket += gone == -ENXIO && !nobucket;
		}
		*failed += r < 0;
		nobucket += r == -ENXIO && !nobucket;
		i = j;
		g4_unlock(lock);
	}
	if (nobucket)
		log_err(0, "the bucket of g4 '%s' does not exist at the partner: the deleted keys"
			" of %zu session%s stay recorded, for a run with [g4] url right", cold->url,
			nobucket, nobucket == 1 ? "" : "s");
	dead_list_release(&l);
	move_list_release(&ml);
	if (rc == 0 && *failed > failed0)
		rc = -EIO;
	return rc;
}

int kvt_g4_cleanup(struct kvt_store *st, const struct kvt_g4_opts *o,
		   struct kvt_g4_report *rep)
{
	struct cat *c = store_cat(st);
	struct cold *cold;
	struct g4_ctl ctl;
	uint64_t failed = 0;
	/* A copy of the store would delete the copies the original's
	 * sessions still need, and abort its uploads. */
	int rc = store_g4_owned(st), r;

	if (rc == 0)
		rc = store_cold(st, &cold);
	if (rep)
		memset(rep, 0, sizeof(*rep));
	if (rc < 0)
		return rc;
	if (!c)
		return -ENOMEM;
	/* A dry run moves nothing, in G4 either: it deleted the copies and
	 * manifests of deleted keys, and aborted uploads, like a real run. */
	if (o && o->dry_run)
		return 0;
	rc = g4_abort_stale(st, c, cold, &failed);
	/* What the sweep cannot delete (a partner that refuses a DELETE, a
	 * copy it cannot reach now) stays for the next run; it must not keep
	 * this run from demoting and recalling: returned, it made every run
	 * exit 2, "cannot open g4", for as long as one copy stayed. Counted
	 * as failures, though: only logged, a run whose sweep left a deleted
	 * key's copy in G4 said "0 failures" and exited 0. */
	r = g4_sweep(st, c, cold, &failed);
	if (rep)
		rep->failures = failed;
	if (r < 0 && r != -ENOMEM)
		log_err(r, "cannot drop from g4 all that was deleted here; the next run goes on");
	else if (r < 0)
		rc = rc ? rc : r;
	/* A 503 or a dropped connection on this listing ended the run
	 * ("nothing was moved"), where every other request is tried again. */
	g4_ctl_init(&ctl, o);
	for (unsigned attempt = 0;; attempt++) {
		r = cold_cleanup(cold);
		if (!g4_backoff(&ctl, attempt, r, "the listing of multipart uploads"))
			break;
	}
	g4_ctl_release(&ctl);
	return rc ? rc : r;
}

/* One run's jobs: the work list, the merged report, one progress call at a time. */
struct g4_job {
	struct kvt_store *st;
	struct cold *cold;
	const struct kvt_g4_opts *user;	/* as the caller gave them */
	struct kvt_g4_opts o;		/* progress through job_progress() */
	struct g4_ctl ctl;
	pthread_mutex_t lock;
	struct kvt_g4_report rep;
	int rc;				/* first error that ends the run */
	struct session_list *sessions;
	const char *bucket;		/* recall of one session */
	struct cat_g4_obj *objs;
	const char *const *keys;	/* recall of a list */
};

static void job_progress(void *arg, const char *bucket, const char *key, uint64_t size, int rc)
{
	struct g4_job *j = arg;

	pthread_mutex_lock(&j->lock);
	j->user->progress(j->user->arg, bucket, key, size, rc);
	pthread_mutex_unlock(&j->lock);
}

static void job_init(struct g4_job *j, struct kvt_store *st, struct cold *cold,
		     const struct kvt_g4_opts *o)
{
	static const struct kvt_g4_opts none = { 0 };

	memset(j, 0, sizeof(*j));
	j->st = st;
	j->cold = cold;
	j->user = o ? o : &none;
	j->o = *j->user;
	if (j->o.progress) {
		j->o.progress = job_progress;
		j->o.arg = j;
	}
	g4_ctl_init(&j->ctl, o);
	pthread_mutex_init(&j->lock, NULL);
}

static void job_release(struct g4_job *j)
{
	g4_ctl_release(&j->ctl);
	pthread_mutex_destroy(&j->lock);
}

static void job_add(struct g4_job *j, const struct kvt_g4_report *r, int rc)
{
	pthread_mutex_lock(&j->lock);
	j->rep.sessions += r->sessions;
	j->rep.objects += r->objects;
	j->rep.bytes += r->bytes;
	j->rep.failures += r->failures;
	if (rc < 0 && !j->rc)
		j->rc = rc;
	pthread_mutex_unlock(&j->lock);
}

static void job_demote(void *arg, size_t i)
{
	struct g4_job *j = arg;
	const struct session_ref *s = &j->sessions->v[i];
	struct kvt_g4_report r = { 0 };
	int rc;

	if (j->rc)
		return;		/* out of memory elsewhere: stop */
	rc = demote_session(j->st, j->cold, s, &j->o, &r, &j->ctl);
	if (rc < 0 && rc != -ENOMEM) {
		log_err(rc, "cannot demote session '%s' of bucket '%s'", s->session, s->bucket);
		rc = 0;	/* the next session may fare better */
	}
	job_add(j, &r, rc);
}

int kvt_g4_demote(struct kvt_store *st, const struct kvt_g4_opts *o, struct kvt_g4_report *rep)
{
	struct cat *c = store_cat(st);
	struct session_list l = { 0 };
	struct g4_job j;
	struct cold *cold;
	int rc;

	memset(rep, 0, sizeof(*rep));
	if (!c)
		return -ENOMEM;
	/* A copy of the store would write over the original's manifests. */
	rc = store_g4_owned(st);
	if (rc == 0)
		rc = store_cold(st, &cold);
	if (rc < 0)
		return rc;
	if (o && o->session) {
		int64_t bid;

		if (!o->bucket)
			return -EINVAL;
		rc = store_bucket_id(st, o->bucket, &bid);
		if (rc == 0)
			rc = session_collect(&l, bid, o->bucket, o->session);
	} else {
		/* The flusher's batched access times count: write them first. */
		kvt_store_flush_access(st);
		rc = cat_g4_sessions(c, util_now_ns() - (int64_t)(o ? o->idle : 0) * 1000000000,
				     session_collect, &l);
	}
	if (rc == 0) {
		/* Sessions in parallel, each in one thread that writes its
		 * manifest once its objects are up; jobs that fewer sessions
		 * leave idle upload their objects in parallel. */
		unsigned jobs = o && o->jobs ? o->jobs : 1;

		job_init(&j, st, cold, o);
		j.sessions = &l;
		j.ctl.object_jobs = l.n < jobs ? (unsigned)(jobs / MAX(l.n, 1)) : 1;
		g4_parallel(jobs, l.n, job_demote, &j);
		*rep = j.rep;
		rc = j.rc;
		job_release(&j);
	}
	session_list_release(&l);
	return rc;
}

/* ---- recall ---------------------------------------------------------------- */

/*
 * Extents of a recall being written while the next is fetched: up to
 * RECALL_BUFS of the I/O context's buffers in flight. Written one at a time,
 * a 2 MiB recall waited about 1.5 ms for its two writes with the partner's
 * bytes queued behind them (docs/benchmarks.md, "Recall latency").
 */
#define RECALL_BUFS 4

struct recall_sink {
	struct kvt_store *st;
	struct io_ctx *io;
	int io_broken;		/* io_wait() failed: never pool the context again */
	uint64_t vid;
	unsigned nbufs;		/* buffers used: at most RECALL_BUFS */
	unsigned cur;		/* the buffer being filled */
	struct io_req req[RECALL_BUFS];	/* data set: the write is in flight */
	uint32_t segment[RECALL_BUFS];	/* where each goes, for the log */
	char *buf;		/* the extent being filled: buffer cur */
	size_t fill;
	uint64_t size;		/* bytes taken so far */
	uint64_t max;		/* the object's size: more is damage */
	uint32_t crc;
	struct cat_extent *ext;
	size_t n, cap;
	int64_t space_waited_ns;	/* for room, over all its extents */
	int failed;		/* the first failed write */
	struct g4_ctl *ctl;
};

/* Waits for one write in flight; returns the first failure so far. */
static int recall_reap(struct recall_sink *rs)
{
	struct io_req *req;
	int rc = io_wait(rs->io, &req);

	if (rc < 0) {
		/* Nothing more comes back from this context. */
		rs->io_broken = 1;
		for (unsigned i = 0; i < rs->nbufs; i++)
			rs->req[i].data = NULL;
		return rs->failed = rs->failed ? rs->failed : rc;
	}
	req->data = NULL;
	if (req->res == (ssize_t)req->len) {
		store_seg_written(rs->st, rs->segment[req - rs->req]);
	} else if (!rs->failed) {
		rs->failed = req->res < 0 ? (int)req->res : -EIO;
		log_err(rs->failed, "cannot write a recalled extent to segment %u at %llu",
			rs->segment[req - rs->req], (unsigned long long)req->off);
	}
	return rs->failed;
}

/* Waits for every write in flight; returns the first failure. */
static int recall_drain(struct recall_sink *rs)
{
	for (unsigned i = 0; i < rs->nbufs; i++)
		while (rs->req[i].data && !rs->io_broken)
			recall_reap(rs);
	return rs->failed;
}

/* Sends the extent being filled to the device, and takes a free buffer. */
static int recall_flush(struct recall_sink *rs)
{
	uint32_t len = (uint32_t)rs->fill, crc;
	uint64_t space = seg_extent_space(len);
	struct store_alloc a;
	struct cat_extent *e;
	struct io_req *req;
	int rc;

	if (UTIL_GROW(rs->ext, rs->n, rs->cap) < 0)
		return -ENOMEM;
	rc = store_alloc(rs->st, space, &rs->space_waited_ns, &a);
	if (rc < 0)
		return rc;
	e = &rs->ext[rs->n];
	*e = (struct cat_extent){
		.seq = (uint32_t)rs->n,
		.segment = a.segment,
		.gen = a.gen,
		.offset = a.offset,
		.length = len,
		.obj_off = rs->size - len,
		.hvid = rs->vid,
		.hseq = (uint32_t)rs->n,
	};
	crc = store_extent_checksum(e, rs->buf + SEG_HEADER_SIZE);
	rs->crc = kvt_crc32c_combine(rs->crc, crc, len);
	seg_header_fill((struct seg_header *)rs->buf, rs->vid, e->seq, e->obj_off, e->gen,
			e->segment, len, crc);
	seg_extent_pad(rs->buf, len);
	req = &rs->req[rs->cur];
	*req = (struct io_req){
		.op = IO_WRITE,
		.fd = seg_fd(rs->st->sf, a.segment),
		.buf = rs->buf,
		.buf_index = (int)rs->cur,
		.len = space,
		.off = a.offset,
	};
	rc = io_submit(rs->io, req);
	if (rc < 0) {
		store_release(rs->st, a.segment, a.gen);
		return rc;
	}
	req->data = rs;
	rs->segment[rs->cur] = a.segment;
	rs->n++;	/* released by the caller, committed or not */
	rs->fill = 0;
	rc = io_push(rs->io);
	/* The next buffer: a free one, else the first to finish. */
	for (rs->cur = 0; rc == 0 && rs->req[rs->cur].data; ) {
		if (++rs->cur < rs->nbufs)
			continue;
		rc = recall_reap(rs);
		rs->cur = 0;
	}
	if (rc == 0)
		rs->buf = io_buf(rs->io, rs->cur);
	return rc < 0 ? rc : rs->failed;
}

static int recall_take(void *arg, const void *buf, size_t len)
{
	struct recall_sink *rs = arg;
	const char *p = buf;

	if (rs->size + len > rs->max)
		return -EFBIG;	/* G4 holds more than the object: not ours */
	g4_rate_take(rs->ctl, len);
	while (len > 0) {
		size_t n = MIN(len, rs->st->payload_max - rs->fill);
		int rc;

		memcpy(rs->buf + SEG_HEADER_SIZE + rs->fill, p, n);
		rs->fill += n;
		rs->size += n;
		p += n;
		len -= n;
		if (rs->fill == rs->st->payload_max) {
			rc = recall_flush(rs);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/*
 * The fetch of one cold object (co), its extents written and committed.
 * The partner's "retry later" (-EAGAIN) and "no answer" (-EHOSTUNREACH)
 * both come back as -EHOSTUNREACH, which the gateway answers with 503 and
 * Retry-After and the mount with EIO; its bucket missing (404
 * NoSuchBucket) as -ENXIO, a 503 that says so and ENXIO in the mount; a
 * full hot tier as -ENOSPC. Either way the object stays cold, and what
 * was written is released garbage.
 */
static int recall_fetch(struct kvt_store *st, struct cat *c, struct cold *cold,
			const char *bucket, const char *key, const struct cat_object *co,
			struct g4_ctl *ctl, int *astray)
{
	struct recall_sink rs = { .st = st, .ctl = ctl };
	char *gkey = NULL, *g4_key = NULL;
	uint64_t got = 0;
	int rc;

	*astray = 0;
	/* A cold object renamed keeps its copy under the old name. */
	rc = cat_g4_name(c, co->id, co->vid, &g4_key);
	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;	/* changed meanwhile: the caller looks again */
	gkey = g4_name(bucket, key, g4_key);
	if (!gkey) {
		free(g4_key);
		return -ENOMEM;
	}
	rc = store_io_get(st, &rs.io);
	if (rc < 0)
		goto out;
	rs.nbufs = MIN(rs.io->nbufs, RECALL_BUFS);
	rs.buf = io_buf(rs.io, 0);
	rs.vid = co->vid;
	rs.max = co->obj->size;
	rc = cold_get(cold, gkey, recall_take, &rs, &got);
	if (rc == 0 && rs.fill > 0)
		rc = recall_flush(&rs);
	if (recall_drain(&rs) < 0 && rc == 0)
		rc = rs.failed;
	if (rc == -EAGAIN || rc == -EHOSTUNREACH || rc == -ETIMEDOUT || rc == -ECONNRESET) {
		char also[96];

		if (log_limit(&cold->recall_no_answer, LOG_REPEAT_SECONDS, "recalls", also,
			      sizeof(also)))
			log_err(rc, "cannot recall '%s/%s': g4 '%s' does not answer; it stays cold,"
				" try again later%s", bucket, key, cold->url, also);
		rc = -EHOSTUNREACH;
		goto out;
	}
	if (rc == -ENOSPC) {
		log_err(rc, "cannot recall '%s/%s' from g4: the hot tier is full and nothing more"
			" can be evicted; it stays cold", bucket, key);
		goto out;
	}
	if (rc == -ENXIO) {
		/* The partner's bucket is gone or misnamed (cold_s3.c logged
		 * which): not a copy deleted, nor the store failing. Said once
		 * a minute: a gateway's 503 has Retry-After: 1, and a client
		 * that retries filled the log with two lines a second. */
		char also[96];

		if (log_limit(&cold->recall_no_bucket, LOG_REPEAT_SECONDS, "recalls", also,
			      sizeof(also))) {
			log_err(0, "cannot recall '%s/%s': the bucket of g4 '%s' does not exist at"
				" the partner; it stays cold until it does%s", bucket, key,
				cold->url, also);
		}
		goto out;
	}
	if (rc == -ENOENT)
		/* Over one G4, another node's sweep may have deleted it. */
		log_err(0, "cannot recall '%s/%s': g4 '%s' holds no copy '%s' (deleted since it"
			" was demoted)", bucket, key, cold->url, gkey);
	else if (rc == -EFBIG)
		/* "File too large" said nothing: the copy is another's bytes. */
		log_err(0, "cannot recall '%s/%s': g4's copy '%s' is longer than its %" PRIu64
			" bytes, so not this object's (put over since it was demoted)", bucket,
			key, gkey, co->obj->size);
	else if (rc < 0)
		log_err(rc, "cannot recall '%s/%s' from g4 '%s'", bucket, key, cold->url);
	if (rc < 0) {
		/* A copy missing, or longer than the object: for the caller an
		 * I/O error, not a missing object (the mount turned -ENOENT
		 * into ESTALE, the gateway -EFBIG into EntityTooLarge). */
		if (rc == -ENOENT || rc == -EFBIG) {
			*astray = !g4_key;
			rc = -EIO;
		}
		goto out;
	}
	if (rs.size != co->obj->size || rs.crc != co->obj->crc32c) {
		log_err(0, "g4 copy of '%s/%s' is %" PRIu64 " bytes with crc32c %08x, not %" PRIu64
			" with %08x", bucket, key, rs.size, rs.crc, co->obj->size, co->obj->crc32c);
		*astray = !g4_key;
		rc = -EIO;
		goto out;
	}
	rc = cat_g4_recalled(c, co->id, co->vid, rs.ext, rs.n, util_now_ns());
	if (rc == -ESTALE)
		rc = 0;	/* it changed meanwhile: the caller looks again */
out:
	if (rs.io)
		recall_drain(&rs);	/* nothing is released while a write of it runs */
	for (size_t i = 0; i < rs.n; i++)
		store_release(st, rs.ext[i].segment, rs.ext[i].gen);
	free(rs.ext);
	if (rs.io_broken) {
		rs.io->inflight = 0;
		io_ctx_free(rs.io);
	} else {
		store_io_put(st, rs.io);
	}
	free(gkey);
	free(g4_key);
	return rc;
}

/*
 * A cold object whose own name in G4 held no copy of it, or another's
 * bytes, may have been renamed through the mount of a kvtier of schema 4,
 * which kept its copy under the old name and recorded only that name's
 * g4_dead row (catalog migration 10): the session's unproven rows
 * (cat_g4_dead_unproven_in(): a rename keeps the session) are claimed
 * (g4_claim_unproven()), each under its key lock, until one names
 * co's copy. 1 if co has a name now, 0 if none was found, or -errno. Only
 * after a failed recall, and only for rows of co's session no path has
 * checked yet since the upgrade: a HEAD for each, once.
 */
static int recall_unproven(struct kvt_store *st, struct cat *c, struct cold *cold,
			   const char *bucket, const struct cat_object *co)
{
	struct dead_list l = { 0 };
	char *g4_key = NULL;
	/* The sweep looks further. */
	int rc = cat_g4_dead_unproven_in(c, co->bucket_id, co->obj->session, co->obj->key,
					 dead_collect, &l), found = 0;

	for (size_t i = 0; rc == 0 && !found && i < l.n; i++) {
		int klock;

		klock = g4_lock(st, "key", bucket, l.v[i].key, 1);
		if (klock < 0) {
			rc = klock;
			break;
		}
		rc = g4_claim_unproven(c, cold, co->bucket_id, bucket, l.v[i].key);
		g4_unlock(klock);
		if (rc > 0) {
			rc = cat_g4_name(c, co->id, co->vid, &g4_key);
			found = rc == 0 && g4_key;
			free(g4_key);
			g4_key = NULL;
		}
		if (rc > 0 || rc == -ENOENT)
			rc = 0;
	}
	dead_list_release(&l);
	return rc < 0 ? rc : found;
}

/*
 * Concurrent recalls of one object coalesce: the first takes the object's
 * recall lock (g4_lock(), threads and processes alike) and fetches; the
 * others wait for the lock, look again, find the object hot and return.
 * If the first failed, the next one tries the partner itself.
 */
static int recall_object_ctl(struct kvt_store *st, const char *bucket, const char *key,
			     struct g4_ctl *ctl)
{
	struct cat *c = store_cat(st);
	struct cat_object *co = NULL;
	struct cold *cold;
	int lock = -1, rc, astray = 0, waited;
	int64_t asked_ns = util_mono_ns();

	if (!c)
		return -ENOMEM;
	rc = cat_object_lookup(c, bucket, key, 0, &co);
	if (rc < 0)
		return rc;
	if (co->obj->tier != KVT_TIER_COLD)
		goto out;	/* hot already: nothing to do */
	rc = store_cold(st, &cold);
	if (rc < 0) {
		log_err(rc, "cannot recall '%s/%s': %s", bucket, key, rc == -ENODEV ?
			"[g4] url = none, this node has no cold tier" : "g4 does not open");
		goto out;
	}
	/* Taken at once, or waited for: only a waiter shares the answer of
	 * the recall before it (below). */
	lock = g4_lock(st, "recall", bucket, key, 0);
	waited = lock == -EBUSY;
	if (waited)
		lock = g4_lock(st, "recall", bucket, key, 1);
	if (lock < 0) {
		rc = lock;
		goto out;
	}
	/* Another thread or process may have brought it back meanwhile. */
	cat_object_free(co);
	co = NULL;
	rc = cat_object_lookup(c, bucket, key, 0, &co);
	if (rc < 0 || co->obj->tier != KVT_TIER_COLD)
		goto out;
	/*
	 * The partner failed a recall in this process while this one waited
	 * for the lock: that answer is this one's too. Each waiter tried the
	 * silent partner again, after the one before it had timed out: the
	 * third of three GETs of one cold key was answered after 180 s. Not
	 * one that took the lock at once: a recall of another key, started
	 * before that failure and here after it, failed for nothing
	 * (test_jobs_retries_rate under load: 2 failures for 1 fault).
	 */
	if (waited && __atomic_load_n(&st->g4_fail_ns, __ATOMIC_ACQUIRE) > asked_ns) {
		rc = __atomic_load_n(&st->g4_fail_rc, __ATOMIC_RELAXED);
		goto out;
	}
	for (unsigned attempt = 0;; attempt++) {
		rc = recall_fetch(st, c, cold, bucket, key, co, ctl, &astray);
		if (!g4_backoff(ctl, attempt, rc, key))
			break;
	}
	if (rc < 0 && astray && recall_unproven(st, c, cold, bucket, co) == 1) {
		log_info("'%s/%s' is recalled from its g4 name before a rename", bucket, key);
		for (unsigned attempt = 0;; attempt++) {
			rc = recall_fetch(st, c, cold, bucket, key, co, ctl, &astray);
			if (!g4_backoff(ctl, attempt, rc, key))
				break;
		}
	}
	if (g4_transient(rc)) {
		__atomic_store_n(&st->g4_fail_rc, rc, __ATOMIC_RELAXED);
		__atomic_store_n(&st->g4_fail_ns, util_mono_ns(), __ATOMIC_RELEASE);
	}
out:
	g4_unlock(lock);
	cat_object_free(co);
	return rc;
}

int recall_object(struct kvt_store *st, const char *bucket, const char *key)
{
	return recall_object_ctl(st, bucket, key, NULL);
}

int kvt_object_recall(struct kvt_store *st, const char *bucket, const char *key)
{
	int rc = kvt_key_valid(key);

	return rc < 0 ? rc : recall_object(st, bucket, key);
}

int kvt_object_g4_name(struct kvt_store *st, const char *bucket, const char *key, char **name)
{
	struct cat *c = store_cat(st);
	struct cat_object *co = NULL;
	struct cat_g4_obj *go = NULL;
	int rc = c ? kvt_key_valid(key) : -ENOMEM;

	*name = NULL;
	if (rc == 0)
		rc = cat_object_lookup(c, bucket, key, 0, &co);
	if (rc == 0)
		rc = cat_g4_object(c, co->id, co->vid, &go);
	if (rc == 0 && go->g4_vid != go->co->vid)
		rc = -ENOENT;
	if (rc == 0) {
		*name = g4_name(bucket, key, go->g4_key);
		rc = *name ? 0 : -ENOMEM;
	}
	cat_g4_objs_free(go, go ? 1 : 0);
	cat_object_free(co);
	return rc;
}

static void job_recall_one(struct g4_job *j, const char *bucket, const char *key, uint64_t size)
{
	struct kvt_g4_report r = { 0 };
	int rc;

	if (g4_stopping(&j->ctl)) {
		r.failures++;	/* left for later: the run was told to stop */
		job_add(j, &r, 0);
		return;
	}
	rc = j->o.dry_run ? 0 : recall_object_ctl(j->st, bucket, key, &j->ctl);

	g4_progress(&j->o, bucket, key, size, rc);
	if (rc < 0) {
		r.failures++;
	} else {
		r.objects++;
		r.bytes += size;
	}
	job_add(j, &r, rc == -ENOMEM ? rc : 0);
}

static void job_recall_obj(void *arg, size_t i)
{
	struct g4_job *j = arg;
	const struct kvt_object *ob = j->objs[i].co->obj;

	job_recall_one(j, j->bucket, ob->key, ob->size);
}

int kvt_g4_recall_session(struct kvt_store *st, const char *bucket, const char *session,
			  const struct kvt_g4_opts *o, struct kvt_g4_report *rep)
{
	struct cat *c = store_cat(st);
	struct cat_g4_obj *v = NULL;
	struct g4_job j;
	size_t n = 0;
	int64_t bid;
	int rc;

	memset(rep, 0, sizeof(*rep));
	if (!c)
		return -ENOMEM;
	rc = store_bucket_id(st, bucket, &bid);
	if (rc == 0)
		rc = cat_g4_session_objects(c, bid, session, 1u << KVT_TIER_COLD, &v, &n);
	if (rc < 0)
		return rc;
	/* Objects in parallel: a recall is one object's fetch. */
	job_init(&j, st, NULL, o);
	j.bucket = bucket;
	j.objs = v;
	g4_parallel(o ? o->jobs : 1, n, job_recall_obj, &j);
	*rep = j.rep;
	rep->sessions += rep->objects > 0;
	rc = j.rc;
	job_release(&j);
	cat_g4_objs_free(v, n);
	return rc;
}

static void job_recall_key(void *arg, size_t i)
{
	struct g4_job *j = arg;
	struct cat *c = store_cat(j->st);
	char *bucket = strdup(j->keys[i]), *slash = bucket ? strchr(bucket, '/') : NULL;
	struct cat_object *co = NULL;
	struct kvt_g4_report r = { 0 };
	int rc;

	if (!c || !bucket) {
		job_add(j, &r, -ENOMEM);
		free(bucket);
		return;
	}
	if (!slash || slash == bucket || !slash[1] || kvt_key_valid(slash + 1) < 0) {
		log_err(0, "cannot recall '%s': expected BUCKET/KEY", j->keys[i]);
		r.failures++;
		job_add(j, &r, 0);
		free(bucket);
		return;
	}
	*slash = '\0';
	rc = cat_object_lookup(c, bucket, slash + 1, 0, &co);
	if (rc < 0) {
		log_err(rc, "cannot recall '%s/%s'", bucket, slash + 1);
		g4_progress(&j->o, bucket, slash + 1, 0, rc);
		r.failures++;
		job_add(j, &r, 0);
	} else if (co->obj->tier == KVT_TIER_COLD) {
		job_recall_one(j, bucket, slash + 1, co->obj->size);
	}
	cat_object_free(co);
	free(bucket);
}

int kvt_g4_recall_keys(struct kvt_store *st, const char *const *keys, size_t n,
		       const struct kvt_g4_opts *o, struct kvt_g4_report *rep)
{
	struct g4_job j;
	int rc;

	memset(rep, 0, sizeof(*rep));
	job_init(&j, st, NULL, o);
	j.keys = keys;
	g4_parallel(o ? o->jobs : 1, n, job_recall_key, &j);
	*rep = j.rep;
	rc = j.rc;
	job_release(&j);
	return rc;
}

/* ---- import ---------------------------------------------------------------- */

/*
 * The mode a manifest entry may give: the manifest is whoever can write the
 * partner bucket, so permission bits only, never set-uid, set-gid or sticky
 * (docs/security.md, G4). A file type, if given (it says "a mode was set";
 * 0 means the mount's defaults), is the one of the entry's kind.
 */
static uint32_t import_mode(uint64_t mode, enum kvt_kind kind)
{
	static const uint32_t type[] = {
		[KVT_KIND_FILE] = S_IFREG, [KVT_KIND_SYMLINK] = S_IFLNK, [KVT_KIND_DIR] = S_IFDIR,
	};

	return ((mode & S_IFMT) ? type[kind] : 0) | (uint32_t)(mode & 0777);
}

/*
 * Where G4 holds an imported entry: NULL (*g4_key) for "BUCKET/KEY" of its
 * own key, else the manifest's g4_key, if it names a copy of this bucket
 * (g4_name_parse(): the exporter's per-store name, a renamed object's old
 * name, a version's name).
 */
static int import_g4_key(const char *bucket, const char *key, const char *given,
			 const char **g4_key)
{
	const char *in;
	uint64_t store;
	size_t inlen;
	int kind;

	*g4_key = NULL;
	if (!given)
		return 0;
	kind = g4_name_parse(given, bucket, &store, &in, &inlen);
	if (kind < 0)
		return kind;
	if (kind == G4_OWN && strcmp(in, key) == 0)
		return 0;	/* its own name */
	*g4_key = given;
	return 0;
}

/* One manifest entry as a cold object of this store. */
static int import_one(struct kvt_store *st, struct cat *c, int64_t bid, const char *bucket,
		      const char *session, const struct jval *e)
{
	const struct jval *key = j_get(e, "key", J_STR), *etag = j_get(e, "etag", J_STR);
	const struct jval *crc = j_get(e, "crc32c", J_STR), *ct = j_get(e, "content_type", J_STR);
	const struct jval *g4e = j_get(e, "g4_etag", J_STR), *meta = j_get(e, "meta", J_OBJ);
	const struct jval *g4k = j_get(e, "g4_key", J_STR);
	const char *g4_key = NULL;
	struct kvt_meta *mv = NULL;
	uint64_t size, mtime, mode, uid, gid, kind, pinned = 0;
	struct cat_put put;
	char *end;
	int rc;

	if (!key || !etag || !crc || j_u64(e, "size", &size) < 0 ||
	    j_u64(e, "mtime_ns", &mtime) < 0 || j_u64(e, "mode", &mode) < 0 ||
	    j_u64(e, "uid", &uid) < 0 || j_u64(e, "gid", &gid) < 0 || j_u64(e, "kind", &kind) < 0 ||
	    kvt_key_valid(key->str) < 0 || kind > KVT_KIND_DIR)
		return -EINVAL;
	j_u64(e, "pinned", &pinned);
	put = (struct cat_put){
		.bucket_id = bid,
		.key = key->str,
		.vid = store_new_vid(st),
		.size = size,
		.etag = etag->str,
		.crc32c = (uint32_t)strtoul(crc->str, &end, 16),
		.content_type = ct ? ct->str : NULL,
		.mtime_ns = (int64_t)mtime,
		.session = session,
		.pinned = !!pinned,
	};
	if (*end || strlen(crc->str) != 8)
		return -EINVAL;
	put.posix = (struct kvt_posix){
		.mode = import_mode(mode, (enum kvt_kind)kind), .uid = (uint32_t)uid,
		.gid = (uint32_t)gid,
		.atime_ns = (int64_t)mtime, .ctime_ns = (int64_t)mtime, .kind = (enum kvt_kind)kind,
	};
	if (meta && meta->n) {
		mv = calloc(meta->n, sizeof(*mv));
		if (!mv)
			return -ENOMEM;
		for (size_t i = 0; i < meta->n; i++) {
			if (meta->kids[i].type != J_STR) {
				free(mv);
				return -EINVAL;
			}
			mv[i].name = meta->kids[i].name;
			mv[i].value = meta->kids[i].str;
		}
		put.meta = mv;
		put.nmeta = meta->n;
	}
	rc = import_g4_key(bucket, key->str, g4k ? g4k->str : NULL, &g4_key);
	if (rc < 0)
		log_err(0, "the manifest names g4 copy '%s' for '%s/%s': not one of bucket '%s'",
			g4k->str, bucket, key->str, bucket);
	if (rc == 0)
		rc = cat_g4_import(c, &put, g4e ? g4e->str : "", g4_key);
	free(mv);
	return rc;
}

/*
 * This store's objects of the session that are only its old view of G4
 * (unchanged here since G4 got them) and that the manifest no longer
 * lists: the store that owned the session since deleted them, and its
 * sweep their copies. Kept, they were listed here and failed every read,
 * and the import wrote them into the manifest again.
 */
static int import_drop_unlisted(struct cat *c, int64_t bid, const char *bucket,
				const char *session, const struct jval *objs)
{
	struct cat_g4_obj *v = NULL;
	size_t n = 0;
	int rc = cat_g4_session_objects(c, bid, session, 0xf, &v, &n);

	for (size_t i = 0; rc == 0 && i < n; i++) {
		const struct cat_g4_obj *go = &v[i];
		size_t k = 0;

		if (go->g4_vid != go->co->vid || go->co->obj->tier == KVT_TIER_DEMOTING)
			continue;
		for (; k < objs->n; k++) {
			const struct jval *key = j_get(&objs->kids[k], "key", J_STR);

			if (key && strcmp(key->str, go->co->obj->key) == 0)
				break;
		}
		if (k < objs->n)
			continue;
		rc = cat_g4_drop_superseded(c, go->co->id, go->co->vid);
		if (rc == 0)
			log_info("'%s/%s' is no longer in session '%s' in g4 (deleted where the"
				 " session was): forgotten here", bucket, go->co->obj->key, session);
		if (rc == -ENOENT)
			rc = 0;
	}
	cat_g4_objs_free(v, n);
	return rc;
}

/*
 * The manifest written again from this store's catalog, naming it the
 * owner: the store the session came from then leaves its copies to this
 * one (g4_sweep()). Under the session's demotion lock, so that no demotion
 * here marks an object uploaded between the two. Only over the manifest
 * that was imported (tag): one the session's owner rewrote meanwhile (a
 * demotion there that added objects) is not written over, and the import
 * fails with -EAGAIN, to be run again.
 */
static int manifest_take(struct kvt_store *st, struct cold *cold, int64_t bid,
			 const char *bucket, const char *session, const struct jval *root,
			 const struct manifest_tag *tag)
{
	struct cat *c = store_cat(st);
	const struct jval *ow = j_get(root, "owner", J_STR);
	struct cat_g4_obj *v = NULL;
	size_t n = 0;
	uint64_t self = 0;
	int lock = g4_lock(st, "demote", bucket, session, 1), rc;

	if (lock < 0)
		return lock;
	rc = cat_store_id(c, &self);
	/* A manifest of this store's own was written from this catalog: all
	 * it does not list is newer here. */
	if (rc == 0 && !(ow && strtoull(ow->str, NULL, 16) == self))
		rc = import_drop_unlisted(c, bid, bucket, session, j_get(root, "objects", J_ARR));
	if (rc == 0)
		rc = cat_g4_session_objects(c, bid, session, 0xf, &v, &n);
	if (rc == 0)
		rc = manifest_write(cold, bucket, session, self, v, n, manifest_match(tag), NULL);
	if (rc == -ECANCELED) {
		log_err(0, "the manifest of session '%s' of bucket '%s' changed in g4 while it was"
			" imported (its owner wrote it again): the session stays that store's;"
			" import it again", session, bucket);
		rc = -EAGAIN;
	}
	cat_g4_objs_free(v, n);
	g4_unlock(lock);
	return rc;
}

int kvt_g4_import_session(struct kvt_store *st, const char *bucket, const char *session,
			  const struct kvt_g4_opts *o, struct kvt_g4_report *rep)
{
	struct cat *c = store_cat(st);
	struct jval root = { 0 };
	struct manifest_tag tag;
	const struct jval *objs;
	struct cold *cold;
	int64_t bid;
	int rc, made, dry = o && o->dry_run;

	memset(rep, 0, sizeof(*rep));
	if (!c)
		return -ENOMEM;
	/* It writes the manifest naming this store's id. */
	rc = store_g4_owned(st);
	if (rc == 0)
		rc = store_cold(st, &cold);
	if (rc < 0)
		return rc;
	rc = manifest_read(cold, bucket, session, &root, &tag);
	if (rc < 0)
		goto out;
	objs = j_get(&root, "objects", J_ARR);
	/* The bucket comes with the session. */
	rc = kvt_bucket_create(st, bucket);
	made = rc == 0;
	if (rc < 0 && rc != -EEXIST)
		goto out;
	rc = store_bucket_id(st, bucket, &bid);
	if (rc < 0)
		goto out;
	/*
	 * All of the manifest or none of it, in one transaction: the session
	 * becomes this store's (manifest_take) only when every entry is here,
	 * and entries kept from an import that failed were cold objects of a
	 * session still the demoting store's, whose sweep deleted their copies.
	 * Other writers of this store wait meanwhile: an import of 20,000
	 * entries held them up to about 2.5 s on a loaded 2-CPU machine (the
	 * whole import took 2.2 to 3.3 s, against 4.5 s in one transaction
	 * an entry); one of 500 entries took 20 ms in all.
	 */
	rc = dry ? 0 : cat_begin(c);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < objs->n; i++) {
		const struct jval *e = &objs->kids[i];
		const struct jval *k = j_get(e, "key", J_STR);
		uint64_t size = 0;

		j_u64(e, "size", &size);
		rc = dry ? 0 : import_one(st, c, bid, bucket, session, e);
		if (rc == -EEXIST)
			continue;	/* this node has its own version of the key */
		g4_progress(o, bucket, k ? k->str : "?", size, rc);
		if (rc < 0) {
			log_err(rc, "cannot import '%s/%s', entry %zu of the manifest of session '%s'"
				" of bucket '%s': nothing of the session is imported, and it stays"
				" the demoting node's", bucket, k ? k->str : "?", i, session, bucket);
			rep->failures++;
			break;
		}
		rep->objects++;
		rep->bytes += size;
	}
	if (rep->failures) {
		cat_rollback(c);
		rep->objects = rep->bytes = 0;
		if (made)
			kvt_bucket_delete(st, bucket);
		rc = 0;
		goto out;
	}
	rc = dry ? 0 : cat_commit(c);
	if (rc < 0)
		goto out;
	rep->sessions += rep->objects > 0;
	if (!dry)
		rc = manifest_take(st, cold, bid, bucket, session, &root, &tag);
out:
	jval_release(&root);
	return rc;
}
