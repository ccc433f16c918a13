/*
 * s3_ops_kv.c - kvtier's extensions to S3, under ?kvtier-* sub-resources.
 *
 * POST /BUCKET?kvtier-lookup
 *   The call an inference engine makes before prefill: given the keys of a
 *   prompt's KV blocks in prefix order, how many leading ones are stored,
 *   and in which tier each is. One round trip instead of one HEAD a block.
 * POST /BUCKET?kvtier-prestage
 *   Bring keys into the hot tier ahead of decode. Returns at once. Recall
 *   from G4 lands with the migrator; until then hot keys are reported hot
 *   and cold ones as pending.
 *
 * Request body, either form (chosen by its first non-blank byte):
 *   text: one key a line, "\n" or "\r\n" line ends, blank lines ignored;
 *         keys are raw UTF-8, nothing is escaped (a key holding a newline
 *         needs the XML form)
 *   XML:  <Lookup><Key>k1</Key><Key>k2</Key>...</Lookup> (any root element)
 * At most 10000 keys. The answer is XML (see man/kvtier-gateway.8) and
 * repeats the count in the header x-kvtier-stored.
 *
 * A lookup sits on the path of every prompt (before prefill), so it costs
 * one catalog read transaction whatever the number of keys
 * (kvt_object_lookup_many: one prepared statement stepped once a key, tier
 * and size only), writes nothing, touches no access time (a lookup is not
 * a use: the reads that follow are) and takes no lock that a writer's
 * commit holds. A catalog error fails the whole answer: reporting a stored
 * key as missing would make the engine recompute blocks it has.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "metrics.h"
#include "s3_xml.h"

#define S3_KV_MAX_KEYS 10000

static enum s3_code s3_kv_keys(struct gw_req *rq, struct xml_keylist *out)
{
	const char *p = rq->body.data ? rq->body.data : "";
	const char *end = p + rq->body.len;
	const char *q = p;

	memset(out, 0, sizeof(*out));
	while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
		q++;
	if (q < end && *q == '<')
		return xml_parse_keys(rq->body.data, rq->body.len, S3_KV_MAX_KEYS, out);
	if (memchr(p, '\0', rq->body.len))
		return S3_INVALID_ARGUMENT;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char **v;

		if (len && p[len - 1] == '\r')
			len--;
		if (len) {
			if (out->n == S3_KV_MAX_KEYS)
				goto bad;
			v = realloc(out->keys, (out->n + 1) * sizeof(*v));
			if (!v)
				goto nomem;
			out->keys = v;
			out->keys[out->n] = strndup(p, len);
			if (!out->keys[out->n])
				goto nomem;
			out->n++;
			/* Keys are UTF-8: others went back raw, and the answer was not XML. */
			if (kvt_key_valid(out->keys[out->n - 1]) == -EILSEQ)
				goto bad;
		}
		p = nl ? nl + 1 : end;
	}
	return S3_OK;
bad:
	xml_keylist_release(out);
	return S3_INVALID_ARGUMENT;
nomem:
	xml_keylist_release(out);
	return S3_NO_MEMORY;
}

/*
 * A prestage in the background: the request returns at once, the recall
 * (a network fetch per object) never holds an HTTP thread. The server
 * waits for these before it closes the store (gw_prestage_wait), once it
 * has told them to start nothing more (srv->stopping): with the partner
 * silent, ten prestages each retrying every object held a SIGTERM 732 s.
 * At most GW_PRESTAGE_MAX at once; more are 503 SlowDown (each was a
 * thread of its own, 180 of them seen).
 */
#define GW_PRESTAGE_MAX 16

struct prestage_job {
	struct gw_server *srv;
	char *bucket;
	char *session;		/* a whole session, or */
	char **keys;		/* these keys */
	size_t nkeys;
};

static void prestage_job_free(struct prestage_job *j)
{
	for (size_t i = 0; i < j->nkeys; i++)
		free(j->keys[i]);
	free(j->keys);
	free(j->session);
	free(j->bucket);
	free(j);
}

static void *prestage_main(void *arg)
{
	struct prestage_job *j = arg;
	/* [g4] jobs fetches in parallel; a partner hiccup is retried. */
	const struct kvt_g4_opts o = { .jobs = j->srv->cfg.g4.jobs, .retries = 3,
				       .stop = &j->srv->stopping };
	struct kvt_g4_report rep;
	int rc = 0;

	if (j->session) {
		rc = kvt_g4_recall_session(j->srv->st, j->bucket, j->session, &o, &rep);
	} else {
		for (size_t i = 0; i < j->nkeys; i++) {
			int r;

			if (__atomic_load_n(&j->srv->stopping, __ATOMIC_ACQUIRE))
				break;
			r = kvt_object_recall(j->srv->st, j->bucket, j->keys[i]);

			if (r < 0 && rc == 0)
				rc = r;
		}
	}
	if (rc < 0)
		log_warn(rc, "prestage of '%s/%s' incomplete", j->bucket,
			 j->session ? j->session : "(keys)");
	__atomic_sub_fetch(&j->srv->prestaging, 1, __ATOMIC_RELEASE);
	prestage_job_free(j);
	return NULL;
}

/* Starts job (owned from here) on a detached thread; false if it could not. */
static bool prestage_start(struct prestage_job *j)
{
	pthread_attr_t attr;
	pthread_t tid;
	bool ok;

	if (__atomic_add_fetch(&j->srv->prestaging, 1, __ATOMIC_ACQUIRE) > GW_PRESTAGE_MAX) {
		__atomic_sub_fetch(&j->srv->prestaging, 1, __ATOMIC_RELEASE);
		prestage_job_free(j);
		return false;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	ok = pthread_create(&tid, &attr, prestage_main, j) == 0;
	pthread_attr_destroy(&attr);
	if (!ok) {
		__atomic_sub_fetch(&j->srv->prestaging, 1, __ATOMIC_RELEASE);
		prestage_job_free(j);
	}
	return ok;
}

void gw_prestage_wait(struct gw_server *srv)
{
	while (__atomic_load_n(&srv->prestaging, __ATOMIC_ACQUIRE) > 0)
		usleep(10000);
}

static void s3_kv_run(struct gw_req *rq, bool prestage)
{
	struct prestage_job *job = NULL;
	struct kvt_key_state *states = NULL;
	struct xml_keylist keys;
	struct gw_buf b, items;
	struct MHD_Response *resp;
	size_t stored = 0, hot = 0, cold = 0, missing = 0;
	bool prefix = true;
	enum s3_code code;
	char num[32];
	int rc;

	if (!s3_bucket_ok(rq, rq->route.bucket))
		return;
	if (prestage && s3_route_param(&rq->route, "session")) {
		struct prestage_job *j = calloc(1, sizeof(*j));

		if (j) {
			j->srv = rq->srv;
			j->bucket = strdup(rq->route.bucket);
			j->session = strdup(s3_route_param(&rq->route, "session"));
		}
		if (!j || !j->bucket || !j->session) {
			if (j)
				prestage_job_free(j);
			http_send_error(rq, S3_NO_MEMORY, NULL);
			return;
		}
		if (!prestage_start(j)) {
			http_send_error(rq, S3_SLOW_DOWN, NULL);	/* GW_PRESTAGE_MAX busy */
			return;
		}
		resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
		http_send(rq, MHD_HTTP_ACCEPTED, resp);
		return;
	}
	code = s3_kv_keys(rq, &keys);
	if (code == S3_OK && keys.n == 0)
		code = S3_INVALID_ARGUMENT;	/* an answer for no key helps no one */
	if (code != S3_OK) {
		http_send_error(rq, code, code == S3_INVALID_ARGUMENT ?
				"The body must list 1 to 10000 keys, one a line or as <Key> elements"
				: NULL);
		return;
	}
	states = calloc(keys.n ? keys.n : 1, sizeof(*states));
	rc = states ? kvt_object_lookup_many(rq->srv->st, rq->route.bucket,
					     (const char *const *)keys.keys, keys.n, states)
		    : -ENOMEM;
	if (rc < 0) {
		/* A catalog error is not a miss: the caller must not recompute
		 * blocks it has, so the whole answer fails. */
		free(states);
		xml_keylist_release(&keys);
		http_send_errno(rq, rc, S3_CTX_BUCKET);
		return;
	}
	gw_buf_init(&items);
	if (prestage) {
		job = calloc(1, sizeof(*job));
		if (job) {
			job->srv = rq->srv;
			job->bucket = strdup(rq->route.bucket);
			job->keys = calloc(keys.n, sizeof(*job->keys));
		}
	}
	for (size_t i = 0; i < keys.n; i++) {
		const struct kvt_key_state *ks = &states[i];
		bool found = ks->found;

		xml_open(&items, "Key");
		xml_elem(&items, "Name", keys.keys[i]);
		if (found && prestage && !(job && job->bucket && job->keys))
			found = false;	/* cannot queue the recall: say so below */
		if (found) {
			const bool is_hot = ks->tier == KVT_TIER_HOT || ks->tier == KVT_TIER_DEMOTING;

			xml_elem(&items, "Tier", kvt_tier_name(ks->tier));
			xml_elemf(&items, "Size", "%llu", (unsigned long long)ks->size);
			if (prestage && !is_hot && job && job->keys) {
				/* Ownership of the key moves to the job. */
				job->keys[job->nkeys++] = keys.keys[i];
				keys.keys[i] = NULL;
			}
			if (prestage)
				xml_elem(&items, "Action", is_hot ? "none" : "recall-started");
			hot += is_hot;
			cold += !is_hot;
			if (prefix)
				stored++;
		} else {
			/* Not there (or not a valid key): the stored prefix ends here. */
			xml_elem(&items, "Tier", "missing");
			missing++;
			prefix = false;
		}
		xml_close(&items, "Key");
	}
	free(states);
	if (!prestage)
		metrics_lookup(hot, cold, missing);
	if (job && job->nkeys > 0 && job->bucket)
		prestage_start(job);
	else if (job)
		prestage_job_free(job);
	gw_buf_init(&b);
	xml_begin(&b, prestage ? "KvPrestageResult" : "KvLookupResult");
	xml_elem(&b, "Bucket", rq->route.bucket);
	xml_elemf(&b, "Count", "%zu", keys.n);
	xml_elemf(&b, "Stored", "%zu", stored);
	xml_elemf(&b, "Hot", "%zu", hot);
	xml_elemf(&b, "Cold", "%zu", cold);
	xml_elemf(&b, "Missing", "%zu", missing);
	gw_buf_append(&b, gw_buf_str(&items), items.len);
	if (gw_buf_failed(&items))
		b.failed = true;
	gw_buf_release(&items);
	xml_close(&b, prestage ? "KvPrestageResult" : "KvLookupResult");
	xml_keylist_release(&keys);
	if (gw_buf_failed(&b)) {
		gw_buf_release(&b);
		http_send_error(rq, S3_NO_MEMORY, NULL);
		return;
	}
	{
		size_t len;
		char *data = gw_buf_detach(&b, &len);

		resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
		if (!resp) {
			free(data);
			http_send_nomem(rq);
			return;
		}
		rq->bytes_out += len;
	}
	MHD_add_response_header(resp, "Content-Type", "application/xml");
	snprintf(num, sizeof(num), "%zu", stored);
	MHD_add_response_header(resp, "x-kvtier-stored", num);
	http_send(rq, 200, resp);
}

void s3_op_kv_lookup(struct gw_req *rq)
{
	s3_kv_run(rq, false);
}

void s3_op_kv_prestage(struct gw_req *rq)
{
	s3_kv_run(rq, true);
}
