/*
 * fuzz_manifest.c - fuzz target for session manifests: the JSON a node
 * reads back from G4 (kvt_g4_import_session, src/migrate.c) to learn a
 * session another node demoted. G4 is a partner's object store, so its
 * bytes are outside input like a request's.
 *
 * The target is the whole import, not just the JSON reader: a real store in
 * a scratch directory (on /dev/shm when there is one), its file:// cold tier,
 * each input put there as the manifest of session "s" of bucket "fz", then
 * imported. Promises checked:
 *  - no crash, no leak (the sanitizers);
 *  - what was imported is what the catalog lists: as many objects as the
 *    report counts, each with a valid key and cold (nothing of a manifest
 *    becomes hot bytes without a recall that verifies them);
 *  - the catalog stays consistent (kvt_store_fsck is clean) whatever the
 *    manifest said.
 * Between inputs the bucket is emptied, so each input starts from the same
 * state and a crash replays from its file alone.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"
#include "cold.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_BUCKET "fz"
#define FUZZ_SESSION "s"
#define FUZZ_MANIFEST COLD_MANIFEST_PREFIX FUZZ_BUCKET "/" FUZZ_SESSION ".json"

static char fuzz_root[PATH_MAX / 2];
static struct kvt_config fuzz_cfg;
static struct kvt_store *fuzz_st;

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_manifest: broken promise: %s\n", what);
		abort();
	}
}

static void fuzz_cleanup(void)
{
	char cmd[PATH_MAX];

	kvt_store_close(fuzz_st);
	kvt_config_release(&fuzz_cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_root);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_manifest: cannot remove '%s'\n", fuzz_root);
}

static void fuzz_init(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	char dir[PATH_MAX];

	/* Errors only: the fuzzer makes plenty of them on purpose. */
	kvt_log_set_level(getenv("FUZZ_VERBOSE") ? KVT_LOG_INFO : KVT_LOG_ERR);
	snprintf(fuzz_root, sizeof(fuzz_root), "%s/fuzz_manifest.XXXXXX", base);
	fuzz_require(mkdtemp(fuzz_root) != NULL, "a scratch directory");
	snprintf(dir, sizeof(dir), "%s/data", fuzz_root);
	kvt_config_init(&fuzz_cfg);
	free(fuzz_cfg.store.dir);
	fuzz_cfg.store.dir = strdup(dir);
	fuzz_cfg.store.capacity = 8u << 20;
	fuzz_cfg.store.segment_size = 1u << 20;
	fuzz_cfg.store.io = KVT_IO_SYNC;
	fuzz_require(fuzz_cfg.store.dir && kvt_store_open(&fuzz_cfg, KVT_OPEN_CREATE, &fuzz_st) == 0,
		     "the store opens");
	atexit(fuzz_cleanup);
}

/* Deletes every object of the bucket, and the bucket. */
static void fuzz_empty_bucket(void)
{
	struct kvt_list_opts lo = { .limit = 1000 };
	struct kvt_list *l = NULL;

	if (kvt_bucket_exists(fuzz_st, FUZZ_BUCKET) < 0)
		return;
	fuzz_require(kvt_object_list(fuzz_st, FUZZ_BUCKET, &lo, &l) == 0, "list to empty");
	for (size_t i = 0; i < l->nobjects; i++)
		fuzz_require(kvt_object_delete(fuzz_st, FUZZ_BUCKET, l->objects[i]->key) == 0,
			     "an imported object can be deleted");
	fuzz_require(!l->truncated, "no more than 1000 objects from one manifest here");
	kvt_list_free(l);
	fuzz_require(kvt_bucket_delete(fuzz_st, FUZZ_BUCKET) == 0, "the emptied bucket goes");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvt_list_opts lo = { .limit = 1000 };
	struct kvt_list *l = NULL;
	struct kvt_g4_report rep;
	struct kvt_fsck_report fr;
	struct cold *cold;
	int rc;

	/* Bigger manifests only take longer to say the same. */
	if (size > 64 * 1024)
		return 0;
	if (!fuzz_st)
		fuzz_init();
	fuzz_require(store_cold(fuzz_st, &cold) == 0, "the cold tier");
	fuzz_require(cold_put_buf(cold, FUZZ_MANIFEST, data, size, "application/json") == 0,
		     "the manifest is put");

	rc = kvt_g4_import_session(fuzz_st, FUZZ_BUCKET, FUZZ_SESSION, NULL, &rep);
	fuzz_require(rc == 0 || rc == -EINVAL || rc == -EPROTO,
		     "a bad manifest is -EINVAL (-EPROTO: a newer format), nothing else");
	if (rc == 0) {
		fuzz_require(kvt_object_list(fuzz_st, FUZZ_BUCKET, &lo, &l) == 0, "list");
		fuzz_require(l->nobjects == rep.objects, "the catalog lists what was imported");
		for (size_t i = 0; i < l->nobjects; i++) {
			const struct kvt_object *o = l->objects[i];

			fuzz_require(kvt_key_valid(o->key) == 0, "imported keys are valid");
			fuzz_require(o->tier == KVT_TIER_COLD, "imported objects are cold");
		}
		kvt_list_free(l);
	} else {
		fuzz_require(rep.objects == 0, "a refused manifest imports nothing");
	}
	rc = kvt_store_fsck(fuzz_st, 0, &fr);
	fuzz_require(rc == 0, "the catalog stays consistent");
	fuzz_empty_bucket();
	return 0;
}
