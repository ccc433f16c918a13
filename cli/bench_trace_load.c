/*
 * bench_trace_load.c - reading a trace in the Mooncake format for `kvtier
 * bench trace`, and deriving its conversations (bench_trace.c says how).
 *
 * The trace file is outside input: any file a user names. A line that is
 * not {"timestamp": finite ms, "hash_ids": [unsigned integers]} (other
 * fields are ignored), timestamps that go back, or a file without a request
 * is refused with the file and line named, before anything starts.
 * tests/fuzz_trace.c holds it to that.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_trace.h"

/* Open addressing, 64-bit keys (0 is empty), for prefixes and distinct ids. */
struct bt_map {
	uint64_t *keys;
	uint32_t *vals;
	size_t mask;
};

static int bt_map_init(struct bt_map *m, size_t n)
{
	size_t cap = 1024;

	while (cap < 2 * n)
		cap *= 2;
	m->mask = cap - 1;
	m->keys = calloc(cap, sizeof(*m->keys));
	m->vals = calloc(cap, sizeof(*m->vals));
	return m->keys && m->vals ? 0 : -ENOMEM;
}

static void bt_map_release(struct bt_map *m)
{
	free(m->keys);
	free(m->vals);
}

static uint64_t bt_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x ? x : 1;
}

/* The slot of key: where it is, or the empty one where it would go. */
static size_t bt_map_slot(const struct bt_map *m, uint64_t key)
{
	size_t i = (size_t)key & m->mask;

	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & m->mask;
	return i;
}

/*
 * "timestamp" (finite milliseconds) and "hash_ids" (unsigned decimal
 * integers) of one line; other fields are ignored.
 */
static int bt_parse_line(char *line, double *ts, uint64_t **ids, size_t *nids, size_t *cap)
{
	char *p = strstr(line, "\"timestamp\""), *end;

	if (!p || !(p = strchr(p, ':')))
		return -EINVAL;
	*ts = strtod(p + 1, &end) / 1000.0;
	if (end == p + 1 || !isfinite(*ts))
		return -EINVAL;
	if (!(p = strstr(line, "\"hash_ids\"")) || !(p = strchr(p, '[')))
		return -EINVAL;
	p++;
	*nids = 0;
	for (;;) {
		unsigned long long v;

		while (*p == ' ' || *p == ',' || *p == '\t')
			p++;
		if (*p == ']')
			return 0;
		/* strtoull() would take "-1" as 2^64 - 1. */
		if (*p < '0' || *p > '9')
			return -EINVAL;
		errno = 0;
		v = strtoull(p, &end, 10);
		if (end == p || errno)
			return -EINVAL;
		p = end;
		if (*nids == *cap) {
			size_t nc = *cap ? 2 * *cap : 4096;
			uint64_t *n = realloc(*ids, nc * sizeof(*n));

			if (!n)
				return -ENOMEM;
			*ids = n;
			*cap = nc;
		}
		(*ids)[(*nids)++] = v;
	}
}

int bt_trace_load(struct bt_trace *t, const char *path, size_t max, unsigned sample,
			 enum bt_via via)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t linecap = 0, cap = 0, idcap = 0, lineno = 0;
	uint64_t *tmp = NULL, *hash = NULL;
	size_t tmpcap = 0;
	struct bt_map prefixes = { 0 }, ids = { 0 };
	int rc = 0;

	memset(t, 0, sizeof(*t));
	if (!f) {
		rc = -errno;
		fprintf(stderr, "kvtier: bench trace: cannot open '%s': %s\n", path, strerror(errno));
		return rc;
	}
	while (getline(&line, &linecap, f) > 0 && (max == 0 || t->nreqs < max)) {
		size_t n = 0;
		double ts;

		lineno++;
		if (strspn(line, " \t\r\n") == strlen(line))
			continue;
		rc = bt_parse_line(line, &ts, &tmp, &n, &tmpcap);
		if (rc < 0) {
			fprintf(stderr, "kvtier: bench trace: %s:%zu: expected {\"timestamp\": ms, "
				"\"hash_ids\": [...]}\n", path, lineno);
			goto out;
		}
		if (t->nreqs == cap) {
			size_t nc = cap ? 2 * cap : 1024;
			struct bt_req *r = realloc(t->reqs, nc * sizeof(*r));

			if (!r)
				goto nomem;
			t->reqs = r;
			cap = nc;
		}
		if (t->nrefs + n > idcap || !t->ids) {	/* never NULL: ids + 0 */
			size_t nc = idcap ? 2 * idcap : 65536;
			uint64_t *r;

			while (nc < t->nrefs + n)
				nc *= 2;
			if (!(r = realloc(t->ids, nc * sizeof(*r))))
				goto nomem;
			t->ids = r;
			idcap = nc;
		}
		if (n > 0)	/* tmp is NULL until a line has ids */
			memcpy(t->ids + t->nrefs, tmp, n * sizeof(*tmp));
		t->reqs[t->nreqs] = (struct bt_req){ .ts = ts, .nids = (uint32_t)n };
		/* An offset until the array stops moving. */
		t->reqs[t->nreqs].ids = (uint64_t *)(uintptr_t)t->nrefs;
		t->nrefs += n;
		t->nreqs++;
	}
	if (t->nreqs == 0) {
		fprintf(stderr, "kvtier: bench trace: no requests in '%s'\n", path);
		rc = -EINVAL;
		goto out;
	}
	for (size_t i = 0; i < t->nreqs; i++) {
		t->reqs[i].ids = t->ids + (uintptr_t)t->reqs[i].ids;
		if (i > 0 && t->reqs[i].ts < t->reqs[i - 1].ts) {
			fprintf(stderr, "kvtier: bench trace: '%s': timestamps go back at request %zu\n",
				path, i + 1);
			rc = -EINVAL;
			goto out;
		}
	}
	/* Times from the first request on. */
	for (size_t i = t->nreqs; i-- > 0;)
		t->reqs[i].ts -= t->reqs[0].ts;
	t->duration = t->reqs[t->nreqs - 1].ts;

	if (bt_map_init(&prefixes, t->nrefs) < 0 || bt_map_init(&ids, t->nrefs) < 0)
		goto nomem;
	for (size_t i = 0; i < t->nreqs; i++) {
		struct bt_req *q = &t->reqs[i];
		uint64_t h = 0x6a09e667f3bcc908ull;
		size_t best = 0;
		uint32_t from = 0;

		free(hash);
		if (!(hash = malloc((q->nids + 1) * sizeof(*hash))))
			goto nomem;
		for (uint32_t k = 0; k < q->nids; k++) {
			size_t s;

			h = bt_mix(h ^ bt_mix(q->ids[k] + 0x9e3779b97f4a7c15ull * (k + 1)));
			hash[k] = h;
			s = bt_map_slot(&prefixes, h);
			if (prefixes.keys[s]) {
				best = k + 1;
				from = prefixes.vals[s];
			}
		}
		if (best > 0 && 4 * best >= 3 * (size_t)t->reqs[from].nids) {
			q->conv = t->reqs[from].conv;
			q->resumed = 1;
		} else {
			q->conv = t->nconvs++;
		}
		/* The latest request holding a prefix is the one a later turn continues. */
		for (uint32_t k = 0; k < q->nids; k++) {
			size_t s = bt_map_slot(&prefixes, hash[k]);

			prefixes.keys[s] = hash[k];
			prefixes.vals[s] = (uint32_t)i;
		}
	}
	{
		/* Every sample-th conversation, renumbered, with all its turns. */
		size_t kept = 0;
		uint32_t nconvs = t->nconvs;
		uint32_t *renum = malloc((nconvs ? nconvs : 1) * sizeof(*renum));
		double t0 = -1;

		if (!renum)
			goto nomem;
		t->nconvs = 0;
		for (uint32_t c = 0; c < nconvs; c++)
			renum[c] = c % sample == 0 ? t->nconvs++ : UINT32_MAX;
		t->nrefs = 0;
		for (size_t i = 0; i < t->nreqs; i++) {
			struct bt_req q = t->reqs[i];

			if (renum[q.conv] == UINT32_MAX)
				continue;
			q.conv = renum[q.conv];
			q.face = via == BT_VIA_S3 ? BT_S3 : via == BT_VIA_FUSE ? BT_FUSE
				 : (uint8_t)(q.conv % 2);
			if (t0 < 0)
				t0 = q.ts;
			q.ts -= t0;
			t->nresumed += q.resumed;
			t->nrefs += q.nids;
			for (uint32_t k = 0; k < q.nids; k++) {
				size_t s = bt_map_slot(&ids, bt_mix(q.ids[k]));

				if (!ids.keys[s]) {
					ids.keys[s] = bt_mix(q.ids[k]);
					t->distinct++;
				}
			}
			t->reqs[kept++] = q;
		}
		free(renum);
		t->nreqs = kept;
		t->duration = kept ? t->reqs[kept - 1].ts : 0;
	}
	goto out;
nomem:
	rc = -ENOMEM;
	fprintf(stderr, "kvtier: bench trace: out of memory loading '%s'\n", path);
out:
	bt_map_release(&prefixes);
	bt_map_release(&ids);
	free(hash);
	free(tmp);
	free(line);
	fclose(f);
	if (rc < 0)
		bt_trace_release(t);
	return rc;
}

void bt_trace_release(struct bt_trace *t)
{
	free(t->reqs);
	free(t->ids);
	memset(t, 0, sizeof(*t));
}
