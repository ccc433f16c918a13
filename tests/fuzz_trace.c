/*
 * fuzz_trace.c - fuzz target for the traces `kvtier bench trace` reads
 * (cli/bench_trace_load.c): a file a user names, so outside input.
 *
 * Each input is written to a file in a scratch directory (on /dev/shm when
 * there is one) and loaded as a whole trace, then again keeping every
 * second conversation. Promises checked:
 *  - no crash, no leak (the sanitizers), whatever the bytes;
 *  - a load fails with -EINVAL (or -ENOMEM) and holds nothing, or gives a
 *    trace that keeps its own rules: at least one request, times from 0,
 *    finite and never going back, every request's ids the next ones of the
 *    id array, conversations numbered from 0 below nconvs, each resumed
 *    request in a conversation an earlier request began, the faces of
 *    --via both alternating by conversation, and no more distinct ids than
 *    references;
 *  - keeping every second conversation keeps no more than the whole.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli/bench_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir[PATH_MAX / 2];
static char fuzz_path[PATH_MAX];

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_trace: broken promise: %s\n", what);
		abort();
	}
}

static void fuzz_cleanup(void)
{
	unlink(fuzz_path);
	rmdir(fuzz_dir);
}

static void fuzz_init(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

	snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/fuzz_trace.XXXXXX", base);
	fuzz_require(mkdtemp(fuzz_dir) != NULL, "a scratch directory");
	snprintf(fuzz_path, sizeof(fuzz_path), "%s/trace.jsonl", fuzz_dir);
	atexit(fuzz_cleanup);
}

/* The rules of a loaded trace, kept by via (every conversation kept). */
static void fuzz_check_whole(const struct bt_trace *t, enum bt_via via)
{
	uint64_t refs = 0, resumed = 0;

	fuzz_require(t->nreqs > 0 && t->reqs && t->ids, "a loaded trace has requests and ids");
	fuzz_require(t->reqs[0].ts == 0, "times start at 0");
	for (size_t i = 0; i < t->nreqs; i++) {
		const struct bt_req *q = &t->reqs[i];

		fuzz_require(isfinite(q->ts) && q->ts >= 0, "finite times");
		fuzz_require(i == 0 || q->ts >= t->reqs[i - 1].ts, "times never go back");
		fuzz_require(q->ids == t->ids + refs, "a request's ids follow the one before's");
		refs += q->nids;
		fuzz_require(q->conv < t->nconvs, "conversations below nconvs");
		if (q->resumed) {
			size_t k = 0;

			while (k < i && t->reqs[k].conv != q->conv)
				k++;
			fuzz_require(k < i, "a resumed request continues an earlier conversation");
			resumed++;
		}
		if (via == BT_VIA_BOTH)
			fuzz_require(q->face == q->conv % 2, "--via both: faces by conversation");
		else
			fuzz_require(q->face == (via == BT_VIA_S3 ? BT_S3 : BT_FUSE), "one face");
	}
	fuzz_require(refs == t->nrefs, "nrefs counts every id");
	fuzz_require(t->distinct <= t->nrefs, "no more distinct ids than references");
	fuzz_require(resumed == t->nresumed, "nresumed counts the resumed requests");
	fuzz_require(t->duration == t->reqs[t->nreqs - 1].ts, "the duration is the last time");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bt_trace whole, half;
	FILE *f;
	int rc;

	if (size > 64 * 1024)
		return 0;	/* longer traces only take longer to say the same */
	if (!fuzz_dir[0])
		fuzz_init();
	f = fopen(fuzz_path, "w");
	fuzz_require(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "the input is written");

	rc = bt_trace_load(&whole, fuzz_path, 0, 1, size % 3 == 0 ? BT_VIA_BOTH :
			   size % 3 == 1 ? BT_VIA_S3 : BT_VIA_FUSE);
	fuzz_require(rc == 0 || rc == -EINVAL || rc == -ENOMEM, "-EINVAL for a bad trace");
	if (rc < 0) {
		fuzz_require(!whole.reqs && !whole.ids && whole.nreqs == 0, "a failed load holds nothing");
		return 0;
	}
	fuzz_check_whole(&whole, size % 3 == 0 ? BT_VIA_BOTH : size % 3 == 1 ? BT_VIA_S3 :
			 BT_VIA_FUSE);

	rc = bt_trace_load(&half, fuzz_path, 0, 2, BT_VIA_BOTH);
	fuzz_require(rc == 0, "a trace that loads whole loads sampled");
	fuzz_require(half.nreqs <= whole.nreqs && half.nrefs <= whole.nrefs &&
		     half.distinct <= whole.distinct && half.nconvs <= whole.nconvs,
		     "every second conversation keeps no more than the whole");
	for (size_t i = 0; i < half.nreqs; i++)
		fuzz_require(half.reqs[i].conv < half.nconvs && half.reqs[i].ts >= 0 &&
			     (i == 0 || half.reqs[i].ts >= half.reqs[i - 1].ts),
			     "a sampled trace keeps the rules");
	bt_trace_release(&half);
	bt_trace_release(&whole);
	return 0;
}
