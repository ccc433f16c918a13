/*
 * bench_trace.h - what the parts of `kvtier bench trace` share: the trace in
 * memory, one configuration's run (servers, counters, timeline) and the
 * per-worker client state. bench_trace.c runs the configurations,
 * bench_trace_load.c reads the trace, bench_trace_io.c replays one request
 * through the gateway or the mount, bench_trace_report.c prints and writes
 * what was measured.
 */
#ifndef KVT_BENCH_TRACE_H
#define KVT_BENCH_TRACE_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvtier.h"

#define BT_BUCKET "trace"
#define BT_ACCESS "AKIDKVTIERTRACE"
#define BT_REGION "us-east-1"

enum bt_face { BT_S3, BT_FUSE, BT_NFACES };
enum bt_via { BT_VIA_S3, BT_VIA_FUSE, BT_VIA_BOTH };
/* The three configurations, run one after another in this order. */
enum bt_cfg { BT_KVTIER, BT_UNBOUNDED, BT_NOG4, BT_NCFGS };
/*
 * Latency series. Each is timed from the moment the client sends, except
 * BT_LOOKUP_DUE: the lookup's answer timed from the request's due time on
 * the trace clock (timestamp / --speed), so it adds the lag of the replay
 * (a request waiting for a worker) to BT_LOOKUP: what an inference engine
 * whose prompt arrived at that time would wait for the answer.
 */
enum bt_lat { BT_LOOKUP, BT_READ_HOT, BT_READ_RECALL, BT_WRITE, BT_LOOKUP_DUE, BT_NLATS };

/*
 * The gateway's own view of its requests (/metrics, scraped before it
 * stops): from the request line to the last byte sent, so without the
 * client, the network and any wait before the gateway's thread reads the
 * request. p50/p99 are the histogram's upper bounds (ms; INFINITY past 10 s).
 */
enum bt_gw_op { BT_GW_LOOKUP, BT_GW_GET, BT_GW_PUT, BT_GW_NOPS };
struct bt_gw_hist {
	uint64_t n;
	double mean;
	double le[2];
};

extern const char *const bt_gw_op_names[BT_GW_NOPS];
extern const char *const bt_cfg_names[BT_NCFGS];
extern const char *const bt_lat_names[BT_NLATS];
extern const char *const bt_face_names[BT_NFACES];

/* One request of the trace. */
struct bt_req {
	double ts;		/* trace time, seconds */
	uint32_t nids;
	uint64_t *ids;		/* into bt_trace.ids */
	uint32_t conv;		/* conversation, from prefix continuation */
	uint8_t resumed;	/* a later turn of its conversation */
	uint8_t face;		/* enum bt_face */
};

struct bt_trace {
	struct bt_req *reqs;
	size_t nreqs;
	uint64_t *ids;		/* every request's ids, back to back */
	uint64_t nrefs;		/* block references */
	uint64_t distinct;	/* distinct block ids */
	uint32_t nconvs;
	uint32_t nresumed;	/* requests that continue a conversation */
	double duration;	/* last timestamp, seconds */
};

/*
 * Loads up to max requests (0: all) of the trace at path, derives its
 * conversations, keeps every sample-th conversation (1: all) and counts
 * the working set of what is kept (bench_trace_load.c). 0, or a negative
 * errno after a message naming the file (and line), and nothing held.
 * Release with bt_trace_release().
 */
int bt_trace_load(struct bt_trace *t, const char *path, size_t max, unsigned sample,
		  enum bt_via via);
void bt_trace_release(struct bt_trace *t);

/* A growable series of latencies (microseconds). */
struct bt_series {
	float *v;
	size_t n, cap;
};

/* Counters of one configuration, updated by the workers (atomically). */
struct bt_counts {
	uint64_t requests;
	uint64_t blocks;
	uint64_t hot;		/* in the stored prefix, hot at lookup */
	uint64_t recalled;	/* in the stored prefix, cold at lookup: read recalls */
	uint64_t missed;	/* after the stored prefix: written */
	uint64_t lost;		/* in the prefix at lookup, gone at read: written */
	uint64_t present;	/* missed, but stored after the gap: not written */
	uint64_t written;	/* blocks written */
	uint64_t bytes_read;
	uint64_t bytes_written;
	uint64_t errors;	/* failed operations */
	uint64_t wrong_blocks;	/* blocks read back with a wrong byte */
	uint64_t wrong_bytes;
};

/* One line of the timeline, sampled about once a second of wall time. */
struct bt_sample {
	double wall;		/* since the replay started */
	double trace;		/* the trace clock then */
	struct bt_counts c;
	uint64_t hot_objects, cold_objects;
	uint64_t used_bytes;	/* hot-tier bytes in segments in use */
	uint64_t demoted_objects;
};

/* One worker's client: a curl handle (keep-alive) and its buffers. */
struct bt_client {
	void *curl;		/* CURL * */
	void *hdrs_put, *hdrs_post, *hdrs_get;	/* struct curl_slist * */
	char *resp;		/* response body of GET and lookup */
	size_t resp_len, resp_cap;
	unsigned char *expect;	/* a block's expected bytes */
	char url[512];
	char errbuf[256];
	struct bt_series lat[BT_NFACES][BT_NLATS];
	struct bt_series lag;	/* ms behind the trace clock when a worker took it */
};

/* Everything about one configuration's run. */
struct bt_run {
	struct bt *b;
	enum bt_cfg cfg;
	char dir[4200];		/* OUT/<name> */
	char store_dir[4300], g4_dir[4300], mnt[4300], conf[4300], creds[4300];
	uint64_t capacity, segment_size;
	int demote;		/* the migrator runs */
	int g4_none;		/* [g4] url = none was accepted by the engine */
	pid_t gw_pid, fuse_pid;
	int port;
	int mounted;
	struct kvt_store *st;
	struct kvt_config kcfg;
	int kcfg_loaded;

	/* the replay */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t next_ready;	/* requests released to the workers so far */
	size_t next_taken;
	int done;		/* no more requests will be released */
	double t0;		/* wall clock (CLOCK_MONOTONIC s) at trace time 0 */
	struct bt_counts c;
	struct bt_client *clients;
	unsigned nclients;

	/* demotion and the timeline */
	uint64_t demote_runs, demote_objects, demote_bytes, demote_failures;
	double demote_seconds;
	struct bt_sample *samples;
	size_t nsamples, samples_cap;

	/* results */
	double wall;		/* seconds of the replay */
	uint64_t end_hot_objects, end_cold_objects, end_used_bytes, g4_bytes;
	uint64_t evicted_objects, checksum_failures;
	double p[BT_NFACES + 1][BT_NLATS][2];	/* [face or all][lat][p50, p99] ms */
	size_t pn[BT_NFACES + 1][BT_NLATS];
	double lag_p50, lag_p99, lag_max;	/* ms */
	struct bt_gw_hist gw[BT_GW_NOPS];
	int ran;
};

struct bt_opts {
	const char *trace;
	enum bt_via via;
	uint64_t block_size;
	uint64_t hot_capacity;	/* 0: a quarter of the working set */
	double speed;
	uint64_t idle;		/* trace seconds */
	size_t requests;	/* 0: all */
	unsigned sample;	/* every sample-th conversation */
	const char *out;
	unsigned workers;
	unsigned configs;	/* bit per enum bt_cfg */
	int keep;
};

struct bt {
	struct bt_opts o;
	struct bt_trace t;
	char out[4096];		/* absolute */
	char self_dir[4096];	/* where kvtier, kvtier-gateway, kvtier-fuse live */
	char secret[41];
	char date[64];
	char cmdline[1024];
	uint64_t working_set;	/* distinct blocks x block size */
	uint64_t idle_wall;	/* seconds of wall time given to the migrator */
	int tty;
	struct bt_run runs[BT_NCFGS];
};

extern volatile sig_atomic_t bt_stop;

double bt_now(void);

/* bench_trace_io.c */
int bt_client_init(struct bt_client *cl, const struct bt *b);
void bt_client_release(struct bt_client *cl);
void bt_series_add(struct bt_series *s, double v);
/* Replays request i of the trace; counts into r->c. */
void bt_replay_one(struct bt_run *r, struct bt_client *cl, size_t i);
/* The bytes of block id (size bytes), the same in every run. */
void bt_block_fill(uint64_t id, unsigned char *buf, uint64_t size);
/* Reads the gateway's latency histograms of enum bt_gw_op into r->gw. */
int bt_gateway_scrape(struct bt_run *r);

/* bench_trace_report.c */
void bt_run_finish(struct bt_run *r);
void bt_print_run_line(const struct bt_run *r);
void bt_print_report(const struct bt *b);
int bt_write_json(const struct bt *b);
int bt_write_timelines_and_plots(const struct bt *b);

#endif /* KVT_BENCH_TRACE_H */
