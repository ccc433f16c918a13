/*
 * metrics.h - the gateway's counters, exported as Prometheus text on
 * /metrics together with the hot tier's figures from kvt_store_stat().
 */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include <stdint.h>

#include "gw_util.h"
#include "kvtier.h"
#include "s3_error.h"
#include "s3_route.h"

struct gw_work;

/* Counts one finished request, and the S3 error it was answered (S3_OK:
 * none). Thread-safe (atomics), never blocks. */
void metrics_request(enum s3_op op, unsigned status, enum s3_code code, uint64_t bytes_in,
		     uint64_t bytes_out, int64_t latency_ns);
/* Counts the keys of one kvtier-lookup by what they were. */
void metrics_lookup(uint64_t hot, uint64_t cold, uint64_t missing);
/* The whole exposition into b; w's stream slots unless w is NULL. */
void metrics_render(struct gw_buf *b, struct kvt_store *st, struct gw_work *w);

#endif /* GW_METRICS_H */
