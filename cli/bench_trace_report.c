/*
 * bench_trace_report.c - what `kvtier bench trace` says at the end: a table
 * on stdout with the goals of issue 6 judged, OUT/report.json, a timeline
 * per configuration (OUT/<name>/timeline.tsv) and two plots drawn by
 * gnuplot (OUT/hit_ratio.png, OUT/occupancy.png) from OUT/plots.gp. Without
 * gnuplot the data and the script are still written, and it says so.
 *
 * The prefix hit ratio is (hot hits + recalls) / blocks requested: a block
 * counts as found if it was in the stored prefix the lookup returned and
 * read back byte-exact, whether from the hot tier or recalled from G4.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_trace.h"
#include "cli.h"

#define MIB (1024.0 * 1024.0)

static int bt_cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

/* Sorts v; the q-quantile (nearest rank). */
static double bt_quantile(float *v, size_t n, double q)
{
	size_t k;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), bt_cmp_float);
	k = (size_t)(q * (double)n);
	if (k >= n)
		k = n - 1;
	return v[k];
}

/* Merges the workers' series of one kind (face -1: every face) and takes p50, p99 (ms). */
static void bt_merge(struct bt_run *r, int face, enum bt_lat lat, double out[2], size_t *n)
{
	size_t total = 0, off = 0;
	float *all;

	out[0] = out[1] = 0;
	*n = 0;
	for (unsigned k = 0; k < r->nclients; k++)
		for (int f = 0; f < BT_NFACES; f++)
			if (face < 0 || f == face)
				total += r->clients[k].lat[f][lat].n;
	if (total == 0 || !(all = malloc(total * sizeof(*all))))
		return;
	for (unsigned k = 0; k < r->nclients; k++)
		for (int f = 0; f < BT_NFACES; f++) {
			const struct bt_series *s = &r->clients[k].lat[f][lat];

			if ((face >= 0 && f != face) || s->n == 0)
				continue;	/* an empty series may have no buffer */
			memcpy(all + off, s->v, s->n * sizeof(*all));
			off += s->n;
		}
	out[0] = bt_quantile(all, total, 0.50) / 1e3;
	out[1] = bt_quantile(all, total, 0.99) / 1e3;
	*n = total;
	free(all);
}

void bt_run_finish(struct bt_run *r)
{
	size_t total = 0, off = 0;
	float *all;

	if (!r->clients)
		return;
	for (int f = 0; f <= BT_NFACES; f++)
		for (int l = 0; l < BT_NLATS; l++)
			bt_merge(r, f == BT_NFACES ? -1 : f, (enum bt_lat)l, r->p[f][l], &r->pn[f][l]);
	for (unsigned k = 0; k < r->nclients; k++)
		total += r->clients[k].lag.n;
	if (total == 0 || !(all = malloc(total * sizeof(*all))))
		return;
	for (unsigned k = 0; k < r->nclients; k++) {
		if (r->clients[k].lag.n == 0)
			continue;	/* no buffer behind an empty series */
		memcpy(all + off, r->clients[k].lag.v, r->clients[k].lag.n * sizeof(*all));
		off += r->clients[k].lag.n;
	}
	r->lag_p50 = bt_quantile(all, total, 0.50);
	r->lag_p99 = bt_quantile(all, total, 0.99);
	r->lag_max = all[total - 1];
	free(all);
}

static double bt_hit(const struct bt_run *r)
{
	return r->c.blocks ? (double)(r->c.hot + r->c.recalled) / (double)r->c.blocks : 0;
}

static double bt_mibps(const struct bt_run *r)
{
	return r->wall > 0 ? (double)(r->c.bytes_read + r->c.bytes_written) / MIB / r->wall : 0;
}

void bt_print_run_line(const struct bt_run *r)
{
	printf("%-9s done in %.0f s: hit ratio %.3f (%" PRIu64 " hot, %" PRIu64 " recalled, %"
	       PRIu64 " missed of %" PRIu64 " blocks), %" PRIu64 " demoted, lag p99 %.3f s, %"
	       PRIu64 " errors, %" PRIu64 " wrong bytes\n",
	       bt_cfg_names[r->cfg], r->wall, bt_hit(r), r->c.hot, r->c.recalled, r->c.missed,
	       r->c.blocks, r->demote_objects, r->lag_p99 / 1e3, r->c.errors, r->c.wrong_bytes);
	fflush(stdout);
}

static const struct bt_run *bt_get(const struct bt *b, enum bt_cfg c)
{
	return b->runs[c].ran ? &b->runs[c] : NULL;
}

static void bt_goal(const char *what, int have, double v, int met, const char *detail)
{
	if (!have)
		printf("  %-44s not measured (%s)\n", what, detail);
	else
		printf("  %-44s %-10.3f %s%s%s\n", what, v, met ? "met" : "NOT met",
		       detail[0] ? "  " : "", detail);
}

/* A p50 or p99 as the gateway's histogram bounds it. */
static void bt_le(char *out, size_t len, double le_ms)
{
	if (isinf(le_ms))
		snprintf(out, len, ">10000");
	else
		snprintf(out, len, "<=%g", le_ms);
}

/*
 * Where a lookup's time goes, per configuration and face: the client's
 * time from the send, the same from the request's due time (adding the
 * replay's lag), and for S3 the gateway's own time from its /metrics.
 */
static void bt_print_lookup_split(const struct bt *b)
{
	printf("\nlookup, ms p50/p99: from the send (client); from the due time on the trace "
	       "clock (lag + lookup);\nthe gateway's own time, request line to last byte "
	       "(its /metrics histogram: upper bounds):\n");
	printf("%-9s %-5s | %-15s %-17s | %-22s\n", "config", "face", "from send",
	       "from due time", "in the gateway");
	for (int c = 0; c < BT_NCFGS; c++) {
		const struct bt_run *r = bt_get(b, (enum bt_cfg)c);

		for (int f = 0; r && f < BT_NFACES; f++) {
			char send[40], due[40], gw[64] = "-", a[24], z[24];

			if (!r->pn[f][BT_LOOKUP])
				continue;
			snprintf(send, sizeof(send), "%.2f/%.2f", r->p[f][BT_LOOKUP][0],
				 r->p[f][BT_LOOKUP][1]);
			snprintf(due, sizeof(due), "%.2f/%.2f", r->p[f][BT_LOOKUP_DUE][0],
				 r->p[f][BT_LOOKUP_DUE][1]);
			if (f == BT_S3 && r->gw[BT_GW_LOOKUP].n) {
				bt_le(a, sizeof(a), r->gw[BT_GW_LOOKUP].le[0]);
				bt_le(z, sizeof(z), r->gw[BT_GW_LOOKUP].le[1]);
				snprintf(gw, sizeof(gw), "%s/%s (mean %.2f)", a, z,
					 r->gw[BT_GW_LOOKUP].mean);
			} else if (f == BT_FUSE) {
				snprintf(gw, sizeof(gw), "(stat per block)");
			}
			printf("%-9s %-5s | %-15s %-17s | %-22s\n", bt_cfg_names[c], bt_face_names[f],
			       send, due, gw);
		}
	}
	/* A request waits for its gateway thread while another connection's
	 * request runs on it: the gateway's own GET and PUT times say how long. */
	for (int c = 0; c < BT_NCFGS; c++) {
		const struct bt_run *r = bt_get(b, (enum bt_cfg)c);

		if (!r || !r->gw[BT_GW_LOOKUP].n)
			continue;
		printf("%-9s the gateway's own p50/p99 ms:", bt_cfg_names[c]);
		for (int op = 0; op < BT_GW_NOPS; op++) {
			char a[24], z[24];

			bt_le(a, sizeof(a), r->gw[op].le[0]);
			bt_le(z, sizeof(z), r->gw[op].le[1]);
			printf("%s %s %s/%s (mean %.2f, n %" PRIu64 ")", op ? "," : "", bt_gw_op_names[op],
			       a, z, r->gw[op].mean, r->gw[op].n);
		}
		printf("\n");
	}
}

void bt_print_report(const struct bt *b)
{
	const struct bt_run *k = bt_get(b, BT_KVTIER), *u = bt_get(b, BT_UNBOUNDED),
			    *n = bt_get(b, BT_NOG4);
	const double bmib = (double)b->o.block_size / MIB;
	char detail[256];
	int any = 0;

	for (int c = 0; c < BT_NCFGS; c++)
		any |= b->runs[c].ran;
	if (!any)
		return;
	printf("\n%-9s %6s %7s %6s %7s %7s %7s %5s | %-13s %-13s %-13s %-13s | %6s %6s %-14s %6s | %8s %8s\n",
	       "config", "reqs", "blocks", "hit", "hot", "recall", "miss", "lost",
	       "lookup ms", "read hot ms", "recall ms", "write ms",
	       "MiB/s", "req/s", "lag s", "errors", "hot MiB", "G4 MiB");
	printf("%-9s %6s %7s %6s %7s %7s %7s %5s | %-13s %-13s %-13s %-13s | %6s %6s %-14s %6s | %8s %8s\n",
	       "", "", "", "ratio", "hits", "s", "es", "", "p50/p99", "p50/p99", "p50/p99",
	       "p50/p99", "", "", "p50/p99/max", "", "(end)", "(end)");
	for (int c = 0; c < BT_NCFGS; c++) {
		const struct bt_run *r = bt_get(b, (enum bt_cfg)c);
		char lat[BT_NLATS][32], lag[48];

		if (!r)
			continue;
		for (int l = 0; l < BT_NLATS; l++) {
			if (r->pn[BT_NFACES][l])
				snprintf(lat[l], sizeof(lat[l]), "%.2f/%.2f", r->p[BT_NFACES][l][0],
					 r->p[BT_NFACES][l][1]);
			else
				snprintf(lat[l], sizeof(lat[l]), "-");
		}
		snprintf(lag, sizeof(lag), "%.2f/%.2f/%.2f", r->lag_p50 / 1e3, r->lag_p99 / 1e3,
			 r->lag_max / 1e3);
		printf("%-9s %6" PRIu64 " %7" PRIu64 " %6.3f %7" PRIu64 " %7" PRIu64 " %7" PRIu64
		       " %5" PRIu64 " | %-13s %-13s %-13s %-13s | %6.1f %6.1f %-14s %6" PRIu64
		       " | %8.0f %8.0f\n",
		       bt_cfg_names[c], r->c.requests, r->c.blocks, bt_hit(r), r->c.hot, r->c.recalled,
		       r->c.missed, r->c.lost, lat[0], lat[1], lat[2], lat[3], bt_mibps(r),
		       r->wall > 0 ? (double)r->c.requests / r->wall : 0, lag,
		       r->c.errors + r->c.wrong_blocks, (double)r->end_hot_objects * bmib,
		       (double)r->g4_bytes / MIB);
	}
	if (b->o.via == BT_VIA_BOTH) {
		printf("\nlatency by face, ms p50/p99 (requests of even conversations through S3, "
		       "odd through FUSE):\n");
		printf("%-9s %-5s | %-13s %-13s %-13s %-13s\n", "config", "face", "lookup",
		       "read hot", "recall", "write");
		for (int c = 0; c < BT_NCFGS; c++) {
			const struct bt_run *r = bt_get(b, (enum bt_cfg)c);

			for (int f = 0; r && f < BT_NFACES; f++) {
				printf("%-9s %-5s |", bt_cfg_names[c], bt_face_names[f]);
				for (int l = 0; l < BT_LOOKUP_DUE; l++) {
					char cell[32] = "-";

					if (r->pn[f][l])
						snprintf(cell, sizeof(cell), "%.2f/%.2f", r->p[f][l][0],
							 r->p[f][l][1]);
					printf(" %-13s", cell);
				}
				printf("\n");
			}
		}
	}
	bt_print_lookup_split(b);
	printf("\nhit ratio = (hot hits + recalls) / blocks requested. A miss is a block after "
	       "the stored prefix: written unless\nalready stored past a gap. lost: in the prefix "
	       "at lookup, gone at read (a miss).\n");
	for (int c = 0; c < BT_NCFGS; c++) {
		const struct bt_run *r = bt_get(b, (enum bt_cfg)c);

		if (r)
			printf("%-9s writes %" PRIu64 ", misses already stored %" PRIu64 "\n",
			       bt_cfg_names[c], r->c.written, r->c.present);
	}
	if (k)
		printf("kvtier: demoted %" PRIu64 " objects (%.0f MiB) in %" PRIu64 " migrator runs "
		       "(%.1f s in all), %" PRIu64 " failures; evicted by reclaim %" PRIu64 "\n",
		       k->demote_objects, (double)k->demote_bytes / MIB, k->demote_runs,
		       k->demote_seconds, k->demote_failures, k->evicted_objects);
	if (n)
		printf("nog4: %s; evicted by reclaim %" PRIu64 "\n",
		       n->g4_none ? "[g4] url = none" : "G4 configured but no demotion runs (this "
		       "engine has no [g4] url = none)", n->evicted_objects);

	printf("\ngoals (issue 6), with a bounded hot tier of %.0f%% of the working set:\n",
	       (k || n) && b->working_set ? 100.0 * (double)(k ? k : n)->capacity /
	       (double)b->working_set : 0.0);
	snprintf(detail, sizeof(detail), "%.3f vs %.3f", k ? bt_hit(k) : 0, u ? bt_hit(u) : 0);
	bt_goal("hit ratio kvtier / unbounded >= 0.95", k && u && bt_hit(u) > 0,
		k && u && bt_hit(u) > 0 ? bt_hit(k) / bt_hit(u) : 0,
		k && u && bt_hit(u) > 0 && bt_hit(k) >= 0.95 * bt_hit(u),
		k && u ? detail : "needs kvtier and unbounded");
	snprintf(detail, sizeof(detail), "%.3f vs %.3f", k ? bt_hit(k) : 0, n ? bt_hit(n) : 0);
	bt_goal("hit ratio kvtier / nog4 >= 1.5", k && n && bt_hit(n) > 0,
		k && n && bt_hit(n) > 0 ? bt_hit(k) / bt_hit(n) : 0,
		k && n && bt_hit(n) > 0 && bt_hit(k) >= 1.5 * bt_hit(n),
		k && n ? detail : "needs kvtier and nog4 with hits");
	for (int f = 0; k && f <= BT_NFACES; f++) {
		char what[64];

		if (f < BT_NFACES && b->o.via != BT_VIA_BOTH)
			continue;
		if (f == BT_NFACES && b->o.via == BT_VIA_BOTH)
			continue;
		snprintf(what, sizeof(what), "kvtier lookup p99 < 1 ms%s%s", f < BT_NFACES ? " via " : "",
			 f < BT_NFACES ? bt_face_names[f] : "");
		snprintf(detail, sizeof(detail), "ms from the send; mean %.1f blocks a lookup",
			 k->c.requests ? (double)k->c.blocks / (double)k->c.requests : 0);
		bt_goal(what, k->pn[f][BT_LOOKUP] > 0, k->p[f][BT_LOOKUP][1],
			k->p[f][BT_LOOKUP][1] < 1.0, detail);
	}
	if (k) {
		snprintf(detail, sizeof(detail), "s; p50 %.3f, max %.3f; %.0f s of wall time for "
			 "%.0f s of trace at --speed %g%s", k->lag_p50 / 1e3, k->lag_max / 1e3,
			 k->wall, b->t.duration, b->o.speed,
			 b->o.speed == 1 ? "" : " (the goal is at --speed 1)");
		bt_goal("kvtier keeps up: lag p99 < 1 s", 1, k->lag_p99 / 1e3, k->lag_p99 < 1e3, detail);
	}
	fflush(stdout);
}

/* ---- report.json ----------------------------------------------------------------------- */

static void bt_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* A number, or null for what JSON cannot say (past the last bucket). */
static void bt_json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.4f", v);
	else
		fprintf(f, "null");
}

static void bt_json_run(FILE *f, const struct bt *b, const struct bt_run *r)
{
	fprintf(f, "    {\"name\": \"%s\", \"hot_capacity\": %" PRIu64 ", \"segment_size\": %" PRIu64
		", \"demotion\": %s, \"g4\": \"%s\",\n", bt_cfg_names[r->cfg], r->capacity,
		r->segment_size, r->demote ? "true" : "false",
		r->demote ? "file" : r->g4_none ? "none" : "unused");
	fprintf(f, "     \"requests\": %" PRIu64 ", \"blocks\": %" PRIu64 ", \"hot_hits\": %" PRIu64
		", \"recalls\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"lost_after_lookup\": %" PRIu64
		", \"misses_already_stored\": %" PRIu64 ", \"writes\": %" PRIu64
		", \"hit_ratio\": %.4f,\n", r->c.requests, r->c.blocks, r->c.hot, r->c.recalled,
		r->c.missed, r->c.lost, r->c.present, r->c.written, bt_hit(r));
	fprintf(f, "     \"errors\": %" PRIu64 ", \"wrong_blocks\": %" PRIu64 ", \"wrong_bytes\": %"
		PRIu64 ", \"checksum_failures\": %" PRIu64 ", \"evicted_objects\": %" PRIu64 ",\n",
		r->c.errors, r->c.wrong_blocks, r->c.wrong_bytes, r->checksum_failures,
		r->evicted_objects);
	fprintf(f, "     \"bytes_read\": %" PRIu64 ", \"bytes_written\": %" PRIu64
		", \"wall_s\": %.3f, \"mib_per_s\": %.2f, \"requests_per_s\": %.2f,\n",
		r->c.bytes_read, r->c.bytes_written, r->wall, bt_mibps(r),
		r->wall > 0 ? (double)r->c.requests / r->wall : 0);
	fprintf(f, "     \"lag_ms\": {\"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f},\n", r->lag_p50,
		r->lag_p99, r->lag_max);
	fprintf(f, "     \"gateway_ms\": {");
	for (int op = 0; op < BT_GW_NOPS; op++) {
		const struct bt_gw_hist *h = &r->gw[op];

		fprintf(f, "%s\"%s\": {\"n\": %" PRIu64 ", \"mean\": %.4f, \"p50_le\": ",
			op ? ", " : "", bt_gw_op_names[op], h->n, h->mean);
		bt_json_num(f, h->le[0]);
		fprintf(f, ", \"p99_le\": ");
		bt_json_num(f, h->le[1]);
		fprintf(f, "}");
	}
	fprintf(f, "},\n");
	fprintf(f, "     \"latency_ms\": {");
	for (int fc = 0; fc <= BT_NFACES; fc++) {
		fprintf(f, "%s\"%s\": {", fc ? ", " : "", fc == BT_NFACES ? "all" : bt_face_names[fc]);
		for (int l = 0; l < BT_NLATS; l++)
			fprintf(f, "%s\"%s\": {\"n\": %zu, \"p50\": %.4f, \"p99\": %.4f}", l ? ", " : "",
				bt_lat_names[l], r->pn[fc][l], r->p[fc][l][0], r->p[fc][l][1]);
		fprintf(f, "}");
	}
	fprintf(f, "},\n");
	fprintf(f, "     \"end\": {\"hot_objects\": %" PRIu64 ", \"hot_bytes\": %" PRIu64
		", \"g4_only_objects\": %" PRIu64 ", \"g4_only_bytes\": %" PRIu64
		", \"hot_tier_used_bytes\": %" PRIu64 ", \"g4_dir_bytes\": %" PRIu64 "},\n",
		r->end_hot_objects, r->end_hot_objects * b->o.block_size, r->end_cold_objects,
		r->end_cold_objects * b->o.block_size, r->end_used_bytes, r->g4_bytes);
	fprintf(f, "     \"demotion_runs\": {\"runs\": %" PRIu64 ", \"objects\": %" PRIu64
		", \"bytes\": %" PRIu64 ", \"failures\": %" PRIu64 ", \"seconds\": %.2f},\n",
		r->demote_runs, r->demote_objects, r->demote_bytes, r->demote_failures,
		r->demote_seconds);
	fprintf(f, "     \"timeline\": \"%s/timeline.tsv\"}", bt_cfg_names[r->cfg]);
}

int bt_write_json(const struct bt *b)
{
	const struct bt_run *k = bt_get(b, BT_KVTIER), *u = bt_get(b, BT_UNBOUNDED),
			    *n = bt_get(b, BT_NOG4);
	char path[4200];
	FILE *f;
	int first = 1;

	snprintf(path, sizeof(path), "%s/report.json", b->out);
	if (!(f = fopen(path, "w"))) {
		fprintf(stderr, "kvtier: bench trace: cannot write '%s': %s\n", path, strerror(errno));
		return -errno;
	}
	fprintf(f, "{\n  \"date\": \"%s\",\n  \"command\": ", b->date);
	bt_json_str(f, b->cmdline);
	fprintf(f, ",\n  \"trace\": {\"file\": ");
	bt_json_str(f, b->o.trace);
	fprintf(f, ", \"requests\": %zu, \"block_refs\": %" PRIu64 ", \"distinct_blocks\": %" PRIu64
		", \"conversations\": %" PRIu32 ", \"continuing_requests\": %" PRIu32
		", \"duration_s\": %.3f},\n", b->t.nreqs, b->t.nrefs, b->t.distinct, b->t.nconvs,
		b->t.nresumed, b->t.duration);
	fprintf(f, "  \"block_size\": %" PRIu64 ", \"working_set_bytes\": %" PRIu64
		", \"speed\": %g, \"idle_trace_s\": %" PRIu64 ", \"idle_wall_s\": %" PRIu64
		", \"workers\": %u, \"sample\": %u, \"via\": \"%s\", \"interrupted\": %s,\n",
		b->o.block_size, b->working_set, b->o.speed, b->o.idle, b->idle_wall, b->o.workers,
		b->o.sample,
		b->o.via == BT_VIA_S3 ? "s3" : b->o.via == BT_VIA_FUSE ? "fuse" : "both",
		bt_stop ? "true" : "false");
	fprintf(f, "  \"configs\": [\n");
	for (int c = 0; c < BT_NCFGS; c++) {
		if (!bt_get(b, (enum bt_cfg)c))
			continue;
		fprintf(f, "%s", first ? "" : ",\n");
		bt_json_run(f, b, &b->runs[c]);
		first = 0;
	}
	fprintf(f, "\n  ],\n  \"goals\": {");
	fprintf(f, "\"hit_vs_unbounded\": ");
	if (k && u && bt_hit(u) > 0)
		fprintf(f, "%.4f", bt_hit(k) / bt_hit(u));
	else
		fprintf(f, "null");
	fprintf(f, ", \"hit_vs_nog4\": ");
	if (k && n && bt_hit(n) > 0)
		fprintf(f, "%.4f", bt_hit(k) / bt_hit(n));
	else
		fprintf(f, "null");
	fprintf(f, ", \"kvtier_lookup_p99_ms\": ");
	if (k)
		fprintf(f, "%.4f", k->p[BT_NFACES][BT_LOOKUP][1]);
	else
		fprintf(f, "null");
	for (int fc = 0; fc < BT_NFACES; fc++) {
		fprintf(f, ", \"kvtier_lookup_p99_ms_%s\": ", bt_face_names[fc]);
		if (k && k->pn[fc][BT_LOOKUP])
			fprintf(f, "%.4f", k->p[fc][BT_LOOKUP][1]);
		else
			fprintf(f, "null");
	}
	fprintf(f, ", \"kvtier_lookup_from_due_p99_ms\": ");
	if (k)
		fprintf(f, "%.4f", k->p[BT_NFACES][BT_LOOKUP_DUE][1]);
	else
		fprintf(f, "null");
	fprintf(f, ", \"kvtier_lag_p50_s\": ");
	if (k)
		fprintf(f, "%.4f", k->lag_p50 / 1e3);
	else
		fprintf(f, "null");
	fprintf(f, ", \"kvtier_lag_p99_s\": ");
	if (k)
		fprintf(f, "%.4f", k->lag_p99 / 1e3);
	else
		fprintf(f, "null");
	fprintf(f, ", \"kvtier_lag_max_s\": ");
	if (k)
		fprintf(f, "%.4f", k->lag_max / 1e3);
	else
		fprintf(f, "null");
	fprintf(f, ", \"speed\": %g", b->o.speed);
	fprintf(f, "}\n}\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "kvtier: bench trace: cannot write '%s'\n", path);
		return -EIO;
	}
	return 0;
}

/* ---- timelines and plots ----------------------------------------------------------------- */

static int bt_write_timeline(const struct bt *b, const struct bt_run *r)
{
	const double bmib = (double)b->o.block_size / MIB;
	char path[4300];
	FILE *f;

	snprintf(path, sizeof(path), "%s/timeline.tsv", r->dir);
	if (!(f = fopen(path, "w")))
		return -errno;
	fprintf(f, "# wall_s\ttrace_s\trequests\tblocks\thot_hits\trecalls\tmisses\thit_ratio\t"
		"window_hit_ratio\thot_mib\tg4_only_mib\thot_used_mib\tdemoted\n");
	for (size_t i = 0; i < r->nsamples; i++) {
		const struct bt_sample *s = &r->samples[i];
		const struct bt_sample *p = i ? &r->samples[i - 1] : NULL;
		uint64_t blocks = s->c.blocks - (p ? p->c.blocks : 0);
		uint64_t hits = s->c.hot + s->c.recalled - (p ? p->c.hot + p->c.recalled : 0);

		fprintf(f, "%.2f\t%.2f\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
			"\t%.4f\t", s->wall, s->trace, s->c.requests, s->c.blocks, s->c.hot,
			s->c.recalled, s->c.missed,
			s->c.blocks ? (double)(s->c.hot + s->c.recalled) / (double)s->c.blocks : 0);
		if (blocks)
			fprintf(f, "%.4f", (double)hits / (double)blocks);
		else
			fprintf(f, "NaN");
		fprintf(f, "\t%.2f\t%.2f\t%.2f\t%" PRIu64 "\n", (double)s->hot_objects * bmib,
			(double)s->cold_objects * bmib, (double)s->used_bytes / MIB,
			s->demoted_objects);
	}
	return fclose(f) == 0 ? 0 : -EIO;
}

static int bt_have_gnuplot(char *out, size_t len)
{
	const char *path = getenv("PATH");
	char buf[4096], *dir, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
	for (dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/gnuplot", dir);
		if (access(out, X_OK) == 0)
			return 1;
	}
	return 0;
}

int bt_write_timelines_and_plots(const struct bt *b)
{
	char path[4200], gp[4096], cmd[8600];
	FILE *f;
	int rc = 0, any = 0, first;

	for (int c = 0; c < BT_NCFGS; c++) {
		if (!bt_get(b, (enum bt_cfg)c))
			continue;
		any = 1;
		if (bt_write_timeline(b, &b->runs[c]) < 0) {
			fprintf(stderr, "kvtier: bench trace: cannot write the timeline of %s\n",
				bt_cfg_names[c]);
			rc = -EIO;
		}
	}
	if (!any)
		return rc;
	snprintf(path, sizeof(path), "%s/plots.gp", b->out);
	if (!(f = fopen(path, "w")))
		return -errno;
	fprintf(f, "# Written by kvtier bench trace; run in this directory: gnuplot plots.gp\n"
		   "set terminal pngcairo size 1100,650 font ',11'\n"
		   "set datafile separator '\\t'\n"
		   "set key outside right top\n"
		   "set grid\n"
		   "set xlabel 'trace time (s)'\n");
	fprintf(f, "set output 'hit_ratio.png'\n"
		   "set title 'Prefix hit ratio, cumulative (lines) and per second of wall time (points)\\n"
		   "%s, blocks of %" PRIu64 " bytes, speed %g'\n"
		   "set ylabel 'hit ratio (hot + recalled) / requested'\n"
		   "set yrange [0:1]\n"
		   "plot ", b->o.trace, b->o.block_size, b->o.speed);
	first = 1;
	for (int c = 0; c < BT_NCFGS; c++) {
		if (!bt_get(b, (enum bt_cfg)c))
			continue;
		fprintf(f, "%s'%s/timeline.tsv' using 2:8 with lines lw 2 lc %d title '%s', "
			"'%s/timeline.tsv' using 2:9 with points pt 7 ps 0.3 lc %d notitle",
			first ? "" : ", \\\n     ", bt_cfg_names[c], c + 1, bt_cfg_names[c],
			bt_cfg_names[c], c + 1);
		first = 0;
	}
	fprintf(f, "\n\nset output 'occupancy.png'\n"
		   "set title 'Tier occupancy: bytes of objects in the hot tier and only in G4'\n"
		   "set ylabel 'MiB'\n"
		   "set yrange [0:*]\n"
		   "plot ");
	first = 1;
	for (int c = 0; c < BT_NCFGS; c++) {
		if (!bt_get(b, (enum bt_cfg)c))
			continue;
		fprintf(f, "%s'%s/timeline.tsv' using 2:10 with lines lw 2 lc %d title '%s hot'",
			first ? "" : ", \\\n     ", bt_cfg_names[c], c + 1, bt_cfg_names[c]);
		if (b->runs[c].demote)
			fprintf(f, ", \\\n     '%s/timeline.tsv' using 2:11 with lines lw 2 dt 2 lc %d "
				"title '%s G4 only'", bt_cfg_names[c], c + 1, bt_cfg_names[c]);
		first = 0;
	}
	fprintf(f, "\n");
	if (fclose(f) != 0)
		return -EIO;
	if (!bt_have_gnuplot(gp, sizeof(gp))) {
		printf("\nno gnuplot here (Debian: apt-get install gnuplot-nox): the plots are not "
		       "drawn;\nthe data and the script are in %s (run: cd %s && gnuplot plots.gp)\n",
		       b->out, b->out);
		return rc;
	}
	snprintf(cmd, sizeof(cmd), "cd '%s' && '%s' plots.gp", b->out, gp);
	if (system(cmd) != 0) {
		fprintf(stderr, "kvtier: bench trace: gnuplot failed on '%s'\n", path);
		return rc;
	}
	printf("\nreport: %s/report.json; plots: %s/hit_ratio.png, %s/occupancy.png\n", b->out,
	       b->out, b->out);
	return rc;
}
