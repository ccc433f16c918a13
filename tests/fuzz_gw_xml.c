/*
 * fuzz_gw_xml.c - fuzz target for the XML request bodies the gateway reads
 * (gateway/s3_xml.c): DeleteObjects, CompleteMultipartUpload, the
 * kvtier-lookup key list and CreateBucketConfiguration. Each input is given
 * to every parser. Promises checked: a parser that succeeds returns what its
 * document type allows (1..1000 keys for Delete, 1..10000 parts numbered
 * 1..10000 for Complete), and one that fails returns nothing to free.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../gateway/s3_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_gw_xml: broken promise: %s\n", what);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int init;
	const char *body = (const char *)data;
	struct xml_keylist keys;
	struct xml_partlist parts;

	if (!init) {
		xml_global_init();
		init = 1;
	}
	if (xml_parse_delete(body, size, &keys) == S3_OK) {
		fuzz_require(keys.n >= 1 && keys.n <= XML_MAX_DELETE, "1..1000 keys");
		for (size_t i = 0; i < keys.n; i++)
			fuzz_require(keys.keys[i] != NULL, "every key is a string");
		xml_keylist_release(&keys);
	} else {
		fuzz_require(keys.keys == NULL && keys.n == 0, "failure returns nothing");
	}
	if (xml_parse_complete(body, size, &parts) == S3_OK) {
		fuzz_require(parts.n >= 1 && parts.n <= XML_MAX_PARTS, "1..10000 parts");
		for (size_t i = 0; i < parts.n; i++)
			fuzz_require(parts.parts[i].number >= 1 && parts.parts[i].number <= 10000 &&
				     parts.parts[i].etag, "part numbers in range, ETags present");
		xml_partlist_release(&parts);
	} else {
		fuzz_require(parts.parts == NULL && parts.n == 0, "failure returns nothing");
	}
	if (xml_parse_keys(body, size, 100, &keys) == S3_OK) {
		fuzz_require(keys.n <= 100, "at most max keys");
		xml_keylist_release(&keys);
	}
	xml_parse_root(body, size, "CreateBucketConfiguration");
	return 0;
}
