/*
 * metrics.c - Prometheus text exposition for /metrics.
 *
 * Request counters are a fixed table (operation x status) of relaxed
 * atomics: a request costs a few atomic adds and no lock, and a scrape reads
 * whatever the counters hold (Prometheus counters need only be monotonic).
 * Errors are counted apart, by the row of s3_error.c's table they were
 * answered with (its S3 code and reason: a bounded label set), not by
 * operation, which would multiply the series.
 * The hot tier's figures are read fresh from the engine on every scrape.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "gw.h"
#include "metrics.h"

static const unsigned metrics_statuses[] = {
	200, 202, 204, 206, 304, 400, 403, 404, 405, 409, 411, 412, 416, 500, 501, 503, 0 /* other */
};
#define METRICS_NSTATUS GW_ARRAY_SIZE(metrics_statuses)

/* Upper bounds in seconds; the last bucket is +Inf. */
static const double metrics_bounds[] = {
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
#define METRICS_NBUCKETS (GW_ARRAY_SIZE(metrics_bounds) + 1)

static uint64_t metrics_requests[S3_OP_COUNT][METRICS_NSTATUS];
static uint64_t metrics_latency[S3_OP_COUNT][METRICS_NBUCKETS];
static uint64_t metrics_latency_sum_us[S3_OP_COUNT];
static uint64_t metrics_errors[S3_CODE_COUNT];
static uint64_t metrics_bytes_in, metrics_bytes_out;
/* Keys answered by ?kvtier-lookup: hot, cold (a recall away), missing. */
static uint64_t metrics_lookup_keys[3];

static void metrics_add(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static uint64_t metrics_get(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

void metrics_request(enum s3_op op, unsigned status, enum s3_code code, uint64_t bytes_in,
		     uint64_t bytes_out, int64_t latency_ns)
{
	size_t s, b;
	double secs = latency_ns > 0 ? (double)latency_ns / 1e9 : 0;

	if (op >= S3_OP_COUNT)
		op = S3_OP_UNKNOWN;
	for (s = 0; s < METRICS_NSTATUS - 1 && metrics_statuses[s] != status; s++)
		;
	for (b = 0; b < METRICS_NBUCKETS - 1 && secs > metrics_bounds[b]; b++)
		;
	metrics_add(&metrics_requests[op][s], 1);
	if (code != S3_OK && code < S3_CODE_COUNT)
		metrics_add(&metrics_errors[code], 1);
	metrics_add(&metrics_latency[op][b], 1);
	metrics_add(&metrics_latency_sum_us[op], (uint64_t)(latency_ns > 0 ? latency_ns / 1000 : 0));
	metrics_add(&metrics_bytes_in, bytes_in);
	metrics_add(&metrics_bytes_out, bytes_out);
}

void metrics_lookup(uint64_t hot, uint64_t cold, uint64_t missing)
{
	metrics_add(&metrics_lookup_keys[0], hot);
	metrics_add(&metrics_lookup_keys[1], cold);
	metrics_add(&metrics_lookup_keys[2], missing);
}

void metrics_render(struct gw_buf *b, struct kvt_store *st, struct gw_work *w)
{
	static const char *const lookup_results[] = { "hot", "cold", "missing" };
	struct kvt_store_stat ss;

	gw_buf_puts(b, "# HELP kvtier_gateway_requests_total S3 requests answered, by operation "
		       "and HTTP status.\n# TYPE kvtier_gateway_requests_total counter\n");
	for (int op = 0; op < S3_OP_COUNT; op++) {
		for (size_t s = 0; s < METRICS_NSTATUS; s++) {
			uint64_t v = metrics_get(&metrics_requests[op][s]);
			char status[16];

			if (!v)
				continue;
			if (metrics_statuses[s])
				snprintf(status, sizeof(status), "%u", metrics_statuses[s]);
			else
				snprintf(status, sizeof(status), "other");
			gw_buf_printf(b, "kvtier_gateway_requests_total{op=\"%s\",status=\"%s\"} %llu\n",
				      s3_op_name((enum s3_op)op), status, (unsigned long long)v);
		}
	}
	gw_buf_puts(b, "# HELP kvtier_gateway_errors_total S3 error responses, by code and, where "
		       "one code has several causes, reason.\n"
		       "# TYPE kvtier_gateway_errors_total counter\n");
	for (int code = 0; code < S3_CODE_COUNT; code++) {
		uint64_t v = metrics_get(&metrics_errors[code]);
		const char *reason = s3_err_reason((enum s3_code)code);

		if (v)
			gw_buf_printf(b, "kvtier_gateway_errors_total{code=\"%s\"%s%s%s} %llu\n",
				      s3_err_name((enum s3_code)code), *reason ? ",reason=\"" : "",
				      reason, *reason ? "\"" : "", (unsigned long long)v);
	}
	gw_buf_printf(b, "# HELP kvtier_gateway_received_bytes_total Request body bytes read.\n"
		      "# TYPE kvtier_gateway_received_bytes_total counter\n"
		      "kvtier_gateway_received_bytes_total %llu\n",
		      (unsigned long long)metrics_get(&metrics_bytes_in));
	gw_buf_printf(b, "# HELP kvtier_gateway_sent_bytes_total Response body bytes sent.\n"
		      "# TYPE kvtier_gateway_sent_bytes_total counter\n"
		      "kvtier_gateway_sent_bytes_total %llu\n",
		      (unsigned long long)metrics_get(&metrics_bytes_out));
	gw_buf_puts(b, "# HELP kvtier_gateway_lookup_keys_total Keys asked about by kvtier-lookup, "
		       "by what they were: hot, cold (in G4) or missing.\n"
		       "# TYPE kvtier_gateway_lookup_keys_total counter\n");
	for (size_t i = 0; i < GW_ARRAY_SIZE(lookup_results); i++)
		gw_buf_printf(b, "kvtier_gateway_lookup_keys_total{result=\"%s\"} %llu\n",
			      lookup_results[i], (unsigned long long)metrics_get(&metrics_lookup_keys[i]));
	gw_buf_puts(b, "# HELP kvtier_gateway_request_duration_seconds Time from the request "
		       "line to the last byte sent.\n"
		       "# TYPE kvtier_gateway_request_duration_seconds histogram\n");
	for (int op = 0; op < S3_OP_COUNT; op++) {
		uint64_t cum = 0;

		for (size_t i = 0; i < METRICS_NBUCKETS; i++)
			cum += metrics_get(&metrics_latency[op][i]);
		if (!cum)
			continue;
		cum = 0;
		for (size_t i = 0; i < METRICS_NBUCKETS; i++) {
			cum += metrics_get(&metrics_latency[op][i]);
			if (i < METRICS_NBUCKETS - 1)
				gw_buf_printf(b, "kvtier_gateway_request_duration_seconds_bucket"
					      "{op=\"%s\",le=\"%g\"} %llu\n", s3_op_name((enum s3_op)op),
					      metrics_bounds[i], (unsigned long long)cum);
			else
				gw_buf_printf(b, "kvtier_gateway_request_duration_seconds_bucket"
					      "{op=\"%s\",le=\"+Inf\"} %llu\n",
					      s3_op_name((enum s3_op)op), (unsigned long long)cum);
		}
		gw_buf_printf(b, "kvtier_gateway_request_duration_seconds_sum{op=\"%s\"} %.6f\n"
			      "kvtier_gateway_request_duration_seconds_count{op=\"%s\"} %llu\n",
			      s3_op_name((enum s3_op)op),
			      (double)metrics_get(&metrics_latency_sum_us[op]) / 1e6,
			      s3_op_name((enum s3_op)op), (unsigned long long)cum);
	}
	if (w) {
		unsigned held, waiting;

		gw_work_slots(w, &held, &waiting);
		gw_buf_printf(b, "# HELP kvtier_gateway_stream_slots_held Large uploads streaming "
			      "into the store now, each holding one of the stream slots.\n"
			      "# TYPE kvtier_gateway_stream_slots_held gauge\n"
			      "kvtier_gateway_stream_slots_held %u\n"
			      "# HELP kvtier_gateway_stream_slot_waiters Large uploads waiting for "
			      "a stream slot.\n"
			      "# TYPE kvtier_gateway_stream_slot_waiters gauge\n"
			      "kvtier_gateway_stream_slot_waiters %u\n",
			      held, waiting);
	}
	gw_buf_printf(b, "# HELP kvtier_catalog_damaged 1 once this process met a damaged catalog page.\n"
		      "# TYPE kvtier_catalog_damaged gauge\nkvtier_catalog_damaged %d\n",
		      kvt_store_catalog_damaged(st));
	if (kvt_store_stat(st, &ss) < 0) {
		gw_buf_puts(b, "# kvt_store_stat failed: hot-tier figures left out\n");
		return;
	}
	gw_buf_printf(b,
		"# HELP kvtier_hot_capacity_bytes Bytes of NVMe the hot tier may use.\n"
		"# TYPE kvtier_hot_capacity_bytes gauge\nkvtier_hot_capacity_bytes %llu\n"
		"# HELP kvtier_hot_used_bytes Bytes in hot-tier segments that are not free.\n"
		"# TYPE kvtier_hot_used_bytes gauge\nkvtier_hot_used_bytes %llu\n"
		"# HELP kvtier_hot_live_bytes Bytes of committed extents.\n"
		"# TYPE kvtier_hot_live_bytes gauge\nkvtier_hot_live_bytes %llu\n"
		"# HELP kvtier_catalog_bytes Bytes of the catalog (catalog.db and its -wal).\n"
		"# TYPE kvtier_catalog_bytes gauge\nkvtier_catalog_bytes %llu\n"
		"# HELP kvtier_disk_free_bytes Room left on the file system under the store; "
		"the catalog grows into it, and writes fail when it is gone.\n"
		"# TYPE kvtier_disk_free_bytes gauge\nkvtier_disk_free_bytes %llu\n"
		"# HELP kvtier_objects Objects, as listings show them (no multipart upload's parts).\n"
		"# TYPE kvtier_objects gauge\nkvtier_objects %llu\n"
		"# HELP kvtier_object_bytes Sum of object sizes.\n"
		"# TYPE kvtier_object_bytes gauge\nkvtier_object_bytes %llu\n"
		"# HELP kvtier_internal_objects Objects of internal buckets (multipart uploads in "
		"progress, the mount's parts), kept by reclaim as if pinned.\n"
		"# TYPE kvtier_internal_objects gauge\nkvtier_internal_objects %llu\n"
		"# HELP kvtier_buckets Buckets.\n# TYPE kvtier_buckets gauge\nkvtier_buckets %llu\n"
		"# HELP kvtier_sessions Sessions with at least one object.\n"
		"# TYPE kvtier_sessions gauge\nkvtier_sessions %llu\n"
		"# HELP kvtier_evicted_objects_total Objects dropped by reclaim since the store was made.\n"
		"# TYPE kvtier_evicted_objects_total counter\nkvtier_evicted_objects_total %llu\n"
		"# HELP kvtier_reclaimed_segments_total Segments freed by reclaim.\n"
		"# TYPE kvtier_reclaimed_segments_total counter\nkvtier_reclaimed_segments_total %llu\n"
		"# HELP kvtier_checksum_failures_total Damaged extents found, each counted once.\n"
		"# TYPE kvtier_checksum_failures_total counter\nkvtier_checksum_failures_total %llu\n"
		"# HELP kvtier_demoted_objects_total Objects moved to G4 and freed from the hot tier.\n"
		"# TYPE kvtier_demoted_objects_total counter\nkvtier_demoted_objects_total %llu\n"
		"# HELP kvtier_recalled_objects_total Objects brought back from G4.\n"
		"# TYPE kvtier_recalled_objects_total counter\nkvtier_recalled_objects_total %llu\n",
		(unsigned long long)ss.capacity, (unsigned long long)ss.used_bytes,
		(unsigned long long)ss.live_bytes, (unsigned long long)ss.catalog_bytes,
		(unsigned long long)ss.disk_free_bytes, (unsigned long long)ss.objects,
		(unsigned long long)ss.object_bytes, (unsigned long long)ss.pinned_internal,
		(unsigned long long)ss.buckets,
		(unsigned long long)ss.sessions, (unsigned long long)ss.evicted_objects,
		(unsigned long long)ss.reclaimed_segments, (unsigned long long)ss.checksum_failures,
		(unsigned long long)ss.demoted_objects, (unsigned long long)ss.recalled_objects);
	gw_buf_puts(b, "# HELP kvtier_objects_by_tier Objects by tier state.\n"
		       "# TYPE kvtier_objects_by_tier gauge\n");
	for (int t = 0; t < 4; t++)
		gw_buf_printf(b, "kvtier_objects_by_tier{tier=\"%s\"} %llu\n",
			      kvt_tier_name((enum kvt_tier)t), (unsigned long long)ss.tier_count[t]);
}
