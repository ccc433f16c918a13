/*
 * gateway.c - kvtier-gateway: the S3 endpoint over the engine.
 *
 * main() reads kvtier.conf (the [store] section: which data directory),
 * the command line (which overrides the file, DESIGN.md), and the
 * credentials file; opens the store; and starts libmicrohttpd with its
 * internal thread pool, one epoll loop per thread, each thread serving its
 * own connections from the first byte to the last. Engine calls that may
 * block run on worker lanes (gw_work.c) while their connection is
 * suspended; a request's engine handles are used by one thread at a time,
 * as kvtier.h asks. Then it waits for SIGTERM
 * or SIGINT: libmicrohttpd is stopped (connections still uploading are
 * ended and their writers aborted, see gw_http.c), then the store closed,
 * which flushes batched access times.
 *
 * Signals are blocked before any thread starts, so they reach only the main
 * thread's sigwait(); no handler runs in a random worker. SIGHUP rereads the
 * credentials file (a bad file is refused and the old users stay) and
 * reopens the access log, for key rotation and logrotate.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "s3_xml.h"
#include "util.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif

/* What kvt_parse_listen() takes, for --listen and --metrics-listen. */
#define GW_LISTEN_FORMS "expected ADDR:PORT (IPv4, dotted decimal), [ADDR6]:PORT or PORT, " \
	"numeric, PORT from 0 to 65535"


static void gw_usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-gateway [-c FILE] [--listen ADDR:PORT] [--credentials FILE]\n"
		"                      [--threads N] [--domain NAME] [--region NAME]\n"
		"                      [--timeout SECONDS] [--max-connections N]\n"
		"                      [--max-object SIZE] [--access-log FILE|-|off]\n"
		"                      [--tls-cert PEM --tls-key PEM] [--metrics-listen ADDR:PORT]\n"
		"                      [-f | -d] [-v] [-h] [--version]\n"
		"\n"
		"S3-compatible endpoint over a kvtier store. See kvtier-gateway(8).\n"
		"\n"
		"  -c, --config FILE      kvtier.conf (default $KVTIER_CONF, then "
		SYSCONFDIR "/kvtier.conf);\n"
		"                         its [gateway] section gives the defaults of the flags\n"
		"      --listen ADDR:PORT address to serve ([gateway] listen, default "
		GW_DEFAULT_LISTEN ")\n"
		"      --credentials FILE users: 'ACCESS SECRET [BUCKET ...]' a line, mode 0600\n"
		"                         ([gateway] credentials; required)\n"
		"      --threads N        worker threads, each with its own epoll loop\n"
		"                         ([gateway] threads, default 4)\n"
		"      --domain NAME      virtual-host style: Host BUCKET.NAME names a bucket\n"
		"                         (default " GW_DEFAULT_DOMAIN "; '' turns it off)\n"
		"      --region NAME      the region of SigV4 scopes and GetBucketLocation\n"
		"                         ([gateway] region, default " GW_DEFAULT_REGION ")\n"
		"      --timeout SECONDS  close connections idle this long (default 60)\n"
		"      --max-connections N  (default 1024)\n"
		"      --max-object SIZE  largest PutObject or part (default 5G)\n"
		"      --min-part-size SIZE  smallest multipart part but the last (default 5M)\n"
		"      --max-uploads N    open multipart uploads in all ([gateway] max_uploads,\n"
		"                         default 10000); more are refused with 503 SlowDown\n"
		"      --max-uploads-per-bucket N  ... and in one bucket (default 1000)\n"
		"      --upload-max-age DURATION  uploads older than this are removed with their\n"
		"                         parts ([gateway] upload_max_age, default 7d)\n"
		"      --access-log FILE  one line per request; '-' stdout (default), 'off'\n"
		"      --tls-cert PEM     serve HTTPS with this certificate (and --tls-key)\n"
		"      --tls-key PEM      its private key\n"
		"      --metrics-listen ADDR:PORT  serve /metrics and /health there, unsigned,\n"
		"                         and not on --listen\n"
		"  -f, --foreground       stay in the foreground (the default)\n"
		"  -d, --daemon           detach from the terminal\n"
		"  -v, --verbose          log every error response\n");
}

/* A PEM file into memory, for libmicrohttpd; NULL (and a message) on failure. */
static char *gw_read_pem(const char *path, bool secret)
{
	struct gw_buf b;
	char chunk[4096];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	gw_buf_init(&b);
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "kvtier-gateway: %s: cannot open: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (secret && (st.st_mode & 007))
		log_warn(0, "'%s' holds a private key and is readable by others", path);
	while ((n = read(fd, chunk, sizeof(chunk))) > 0 && b.len < (1u << 20))
		gw_buf_append(&b, chunk, (size_t)n);
	close(fd);
	if (n < 0 || gw_buf_failed(&b) || !strstr(gw_buf_str(&b), "-----BEGIN ")) {
		fprintf(stderr, "kvtier-gateway: %s: not a PEM file\n", path);
		gw_buf_release(&b);
		return NULL;
	}
	return gw_buf_detach(&b, NULL);
}

/*
 * libmicrohttpd's error log. cls is a GW_BIND_ERR-byte buffer for why the
 * listening socket could not be bound: libmicrohttpd says "Failed to bind
 * to port 0" for an address given with MHD_OPTION_SOCK_ADDR, whatever its
 * port, so that line is kept for the caller's own error, which names the
 * address, instead of being logged.
 */
#define GW_BIND_ERR 128

static void gw_mhd_log(void *cls, const char *fmt, va_list ap)
{
	static const char bind_failed[] = "Failed to bind to port ";
	char msg[512], *why;
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	if (cls && strncmp(msg, bind_failed, sizeof(bind_failed) - 1) == 0 &&
	    (why = strstr(msg, ": "))) {
		snprintf(cls, GW_BIND_ERR, "%s", why + 2);
		return;
	}
	log_warn(0, "libmicrohttpd: %s", msg);
}

/*
 * A detached gateway's standard streams, once it serves: /dev/null, and its
 * log lines go to syslog. Until then they were the caller's, for the reason
 * a start failed.
 */
static int gw_redirect_stdio(void)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null < 0)
		return -errno;
	dup2(null, STDIN_FILENO);
	dup2(null, STDOUT_FILENO);
	dup2(null, STDERR_FILENO);
	close(null);
	kvt_log_to_syslog();
	return 0;
}

static void gw_log_serving(struct gw_server *srv, bool tls)
{
	const struct gw_options *o = &srv->opt;
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);

	log_info("serving S3 on %s (port %u)%s, %u threads, store '%s'", o->listen,
		 di ? di->port : 0, tls ? " over TLS" : "", o->threads, srv->cfg.store.dir);
	if (srv->metrics_mhd) {
		di = MHD_get_daemon_info(srv->metrics_mhd, MHD_DAEMON_INFO_BIND_PORT);
		log_info("serving /metrics and /health on %s (port %u)", o->metrics_listen,
			 di ? di->port : 0);
	}
}

static void gw_creds_free(struct auth_creds *c)
{
	if (!c)
		return;
	auth_creds_release(c);
	free(c);
}

/*
 * SIGHUP: reread the credentials file and reopen the access log. The new
 * users take effect for requests that start after the swap; a file that
 * fails to load (bad line, wrong mode) leaves the old users in place.
 */
static void gw_reload(struct gw_server *srv)
{
	struct auth_creds *fresh = calloc(1, sizeof(*fresh)), **r;
	char err[512];

	if (!fresh || auth_creds_load(fresh, srv->opt.credentials, err, sizeof(err)) < 0) {
		log_err(0, "SIGHUP: credentials not reloaded, the old users stay: %s",
			fresh ? err : strerror(ENOMEM));
		free(fresh);
		fresh = NULL;
	}
	r = fresh ? realloc(srv->retired, (srv->nretired + 1) * sizeof(*r)) : NULL;
	if (fresh && !r) {
		log_err(-ENOMEM, "SIGHUP: credentials not reloaded");
		gw_creds_free(fresh);
		fresh = NULL;
	}
	if (fresh) {
		srv->retired = r;
		srv->retired[srv->nretired++] = srv->creds;
		__atomic_store_n(&srv->creds, fresh, __ATOMIC_RELEASE);
		log_info("SIGHUP: %zu users from '%s'", fresh->nusers, srv->opt.credentials);
	}
	if (srv->access_fd > STDERR_FILENO) {
		/* dup2 swaps the file under the same descriptor: no writer sees -1. */
		int fd = open(srv->opt.access_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);

		if (fd < 0 || dup3(fd, srv->access_fd, O_CLOEXEC) < 0)
			log_err(-errno, "SIGHUP: cannot reopen access log '%s'", srv->opt.access_log);
		if (fd >= 0)
			close(fd);
	}
}

/*
 * Every connection holds a descriptor, and so does the store: each segment
 * twice, g4.lock and G4 files while it demotes or recalls, the io_uring
 * pool (kvt_store_nofile_want(): 2 per segment + 256). So does each
 * polling thread beside its connections: libmicrohttpd's eventfd, and a
 * catalog connection (catalog.db and its -wal; the -shm is shared) of its
 * own and of each of its workers (gw_work_new). Measured after load, at
 * --threads 1, 4 and 16: 7, 16 and 52 connections, 1, 4 and 16 eventfds.
 * Counted in 256, --threads 64 held 832 more than that, which connections
 * took. Connections past what the open-file limit leaves took the
 * descriptors the store needed: at ulimit -n 300 with 400 idle clients,
 * GETs of cold objects answered 503 (g4.lock, manifests: EMFILE). Capped,
 * the rest wait in the kernel's backlog, as max_connections promises. The
 * soft limit is raised first, as far as the hard one allows (systemd's soft
 * 1024 would otherwise cap the default max_connections on every start).
 */
#define GW_FDS_PER_THREAD                                                                  \
	(1 + 2 * (1 + GW_READ_WORKERS_PER_THREAD + GW_WRITE_WORKERS_PER_THREAD +          \
		  GW_RECALL_WORKERS_PER_THREAD))

static unsigned gw_connection_cap(struct kvt_store *st, unsigned want, unsigned threads)
{
	uint64_t store, have, room;

	store = kvt_store_nofile_want(st) + (uint64_t)GW_FDS_PER_THREAD * threads;
	have = util_raise_nofile(store + want);
	room = have > store + threads ? have - store : threads;	/* each thread its share */
	if (room >= want)
		return want;
	if (have < store + threads) {
		log_warn(0, "the open-file limit (%llu) is below the %llu descriptors that the "
			 "store, %u threads and a connection each may hold: requests may fail "
			 "with EMFILE (raise ulimit -n or LimitNOFILE=)", (unsigned long long)have,
			 (unsigned long long)(store + threads), threads);
		return threads;
	}
	log_warn(0, "the open-file limit (%llu) leaves room for %llu connections beside the "
		 "%llu descriptors of the store and %u threads, not max_connections' %u: more "
		 "wait in the kernel's backlog (raise ulimit -n or LimitNOFILE=)",
		 (unsigned long long)have, (unsigned long long)room, (unsigned long long)store,
		 threads, want);
	return (unsigned)room;
}

int main(int argc, char **argv)
{
	enum { OPT_LISTEN = 256, OPT_CREDS, OPT_THREADS, OPT_DOMAIN, OPT_REGION, OPT_TIMEOUT,
	       OPT_MAXCONN, OPT_MAXOBJ, OPT_ACCESS_LOG, OPT_VERSION, OPT_MINPART, OPT_MAXUPLOADS,
	       OPT_MAXUPLOADS_BUCKET, OPT_UPLOAD_AGE, OPT_TLS_CERT,
	       OPT_TLS_KEY, OPT_METRICS_LISTEN };
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "credentials", required_argument, NULL, OPT_CREDS },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "domain", required_argument, NULL, OPT_DOMAIN },
		{ "region", required_argument, NULL, OPT_REGION },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "max-connections", required_argument, NULL, OPT_MAXCONN },
		{ "max-object", required_argument, NULL, OPT_MAXOBJ },
		{ "min-part-size", required_argument, NULL, OPT_MINPART },
		{ "max-uploads", required_argument, NULL, OPT_MAXUPLOADS },
		{ "max-uploads-per-bucket", required_argument, NULL, OPT_MAXUPLOADS_BUCKET },
		{ "upload-max-age", required_argument, NULL, OPT_UPLOAD_AGE },
		{ "access-log", required_argument, NULL, OPT_ACCESS_LOG },
		{ "tls-cert", required_argument, NULL, OPT_TLS_CERT },
		{ "tls-key", required_argument, NULL, OPT_TLS_KEY },
		{ "metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN },
		{ "foreground", no_argument, NULL, 'f' },
		{ "daemon", no_argument, NULL, 'd' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	struct gw_server srv = { .access_fd = -1, .conns_lock = PTHREAD_MUTEX_INITIALIZER };
	struct gw_options *o = &srv.opt;
	struct sockaddr_storage addr, maddr;
	socklen_t addrlen = 0;
	char *tls_cert = NULL, *tls_key = NULL;
	/* The TLS options, or nothing: libmicrohttpd complains of them without TLS. */
	struct MHD_OptionItem tls_opts[3] = {
		{ MHD_OPTION_END, 0, NULL }, { MHD_OPTION_END, 0, NULL }, { MHD_OPTION_END, 0, NULL },
	};
	/* A pool of one is no pool: libmicrohttpd warns and ignores it. */
	struct MHD_OptionItem pool_opts[2] = {
		{ MHD_OPTION_END, 0, NULL }, { MHD_OPTION_END, 0, NULL },
	};
	char bind_err[GW_BIND_ERR] = "", mbind_err[GW_BIND_ERR] = "";
	char err[512];
	sigset_t sigs;
	unsigned flags;
	int c, sig, rc, status = 1, notify_fd = -1;
	bool daemonize = false, uploads_init = false;
	uint64_t sweep_every;
	time_t next_sweep;

	kvt_log_set_ident("kvtier-gateway");
	o->min_part = GW_MIN_PART_SIZE;
	o->foreground = true;

	while ((c = getopt_long(argc, argv, "c:fdvh", longopts, NULL)) != -1) {
		char *end;
		unsigned long v;

		switch (c) {
		case 'c': o->config = optarg; break;
		case OPT_LISTEN: o->listen = optarg; break;
		case OPT_CREDS: o->credentials = optarg; break;
		case OPT_DOMAIN: o->domain = optarg; break;
		case OPT_REGION: o->region = optarg; break;
		case OPT_ACCESS_LOG: o->access_log = optarg; break;
		case OPT_TLS_CERT: o->tls_cert = optarg; break;
		case OPT_TLS_KEY: o->tls_key = optarg; break;
		case OPT_METRICS_LISTEN: o->metrics_listen = optarg; break;
		case 'f': o->foreground = true; daemonize = false; break;
		case 'd': daemonize = true; break;
		case 'v': o->verbose = true; break;
		case 'h': gw_usage(stdout); return 0;
		case OPT_VERSION: printf("kvtier-gateway %s\n", PACKAGE_VERSION); return 0;
		case OPT_THREADS:
		case OPT_TIMEOUT:
		case OPT_MAXCONN: {
			/* The ranges of kvtier.conf's keys (0, no timeout, only there). */
			unsigned long max = c == OPT_THREADS ? KVT_GW_THREADS_MAX
					    : c == OPT_TIMEOUT ? KVT_GW_TIMEOUT_MAX
							       : KVT_GW_CONNECTIONS_MAX;

			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || !*optarg || v < 1 || v > max) {
				fprintf(stderr, "kvtier-gateway: bad number '%s' for --%s: expected 1 to %lu\n",
					optarg, c == OPT_THREADS ? "threads" : c == OPT_TIMEOUT ? "timeout"
									: "max-connections", max);
				return 2;
			}
			if (c == OPT_THREADS)
				o->threads = (unsigned)v;
			else if (c == OPT_TIMEOUT)
				o->timeout = (unsigned)v;
			else
				o->max_connections = (unsigned)v;
			break;
		}
		case OPT_MAXUPLOADS:
		case OPT_MAXUPLOADS_BUCKET:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || !*optarg || v < 1 || v > 10000000) {
				fprintf(stderr, "kvtier-gateway: bad number '%s' for --%s\n", optarg,
					c == OPT_MAXUPLOADS ? "max-uploads" : "max-uploads-per-bucket");
				return 2;
			}
			if (c == OPT_MAXUPLOADS)
				o->max_uploads = (unsigned)v;
			else
				o->max_uploads_bucket = (unsigned)v;
			break;
		case OPT_UPLOAD_AGE:
			if (kvt_parse_duration(optarg, &o->upload_max_age) < 0 ||
			    o->upload_max_age == 0) {
				fprintf(stderr, "kvtier-gateway: bad duration '%s' for --upload-max-age\n",
					optarg);
				return 2;
			}
			break;
		case OPT_MAXOBJ:
		case OPT_MINPART: {
			uint64_t size;

			if (kvt_parse_size(optarg, &size) < 0 || size == 0) {
				fprintf(stderr, "kvtier-gateway: bad size '%s'\n", optarg);
				return 2;
			}
			if (c == OPT_MAXOBJ)
				o->max_object = size;
			else
				o->min_part = size;
			break;
		}
		default:
			gw_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvtier-gateway: unexpected argument '%s'\n", argv[optind]);
		gw_usage(stderr);
		return 2;
	}
	/* [gateway] of kvtier.conf gives the defaults; a flag wins over the file (DESIGN.md). */
	kvt_config_init(&srv.cfg);
	rc = kvt_config_load_default(&srv.cfg, o->config, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvtier-gateway: %s\n", err);
		status = 2;
		goto out;
	}
	if (!o->listen)
		o->listen = srv.cfg.gateway.listen ? srv.cfg.gateway.listen : GW_DEFAULT_LISTEN;
	if (!o->threads)
		o->threads = srv.cfg.gateway.threads ? srv.cfg.gateway.threads : 4;
	if (!o->credentials)
		o->credentials = srv.cfg.gateway.credentials;
	if (!o->tls_cert && !o->tls_key) {
		o->tls_cert = srv.cfg.gateway.tls_cert;
		o->tls_key = srv.cfg.gateway.tls_key;
	}
	if (!o->metrics_listen)
		o->metrics_listen = srv.cfg.gateway.metrics_listen;
	if (!o->region)
		o->region = srv.cfg.gateway.region ? srv.cfg.gateway.region : GW_DEFAULT_REGION;
	if (!o->domain)
		o->domain = srv.cfg.gateway.domain ? srv.cfg.gateway.domain : GW_DEFAULT_DOMAIN;
	if (!o->access_log)
		o->access_log = srv.cfg.gateway.access_log ? srv.cfg.gateway.access_log : "-";
	if (!o->timeout)
		o->timeout = (unsigned)srv.cfg.gateway.timeout;	/* at most KVT_GW_TIMEOUT_MAX */
	if (!o->max_connections)
		o->max_connections = srv.cfg.gateway.max_connections;
	/* As [gateway] max_connections (config.c, cfg_check_gateway). */
	if (o->max_connections < o->threads) {
		fprintf(stderr, "kvtier-gateway: max connections (%u) below threads (%u): each thread"
			" serves its own share of the connections, and those beyond them would"
			" never have one\n", o->max_connections, o->threads);
		status = 2;
		goto out;
	}
	if (!o->max_object)
		o->max_object = srv.cfg.gateway.max_object;
	if (!o->max_uploads)
		o->max_uploads = srv.cfg.gateway.max_uploads;
	if (!o->max_uploads_bucket)
		o->max_uploads_bucket = srv.cfg.gateway.max_uploads_per_bucket;
	if (!o->upload_max_age)
		o->upload_max_age = srv.cfg.gateway.upload_max_age;
	if (!o->credentials) {
		fprintf(stderr, "kvtier-gateway: no users: set [gateway] credentials in %s or give "
			"--credentials FILE (anonymous access is not allowed)\n",
			srv.cfg.path ? srv.cfg.path : "kvtier.conf");
		status = 2;
		goto out;
	}
	if (!o->tls_cert != !o->tls_key) {
		fprintf(stderr, "kvtier-gateway: a TLS certificate and its key go together "
			"(--tls-cert, --tls-key, or tls_cert and tls_key in [gateway])\n");
		status = 2;
		goto out;
	}
	if (o->metrics_listen && kvt_parse_listen(o->metrics_listen, &maddr, &addrlen) < 0) {
		fprintf(stderr, "kvtier-gateway: metrics listen '%s': " GW_LISTEN_FORMS "\n",
			o->metrics_listen);
		status = 2;
		goto out;
	}
	if (kvt_parse_listen(o->listen, &addr, &addrlen) < 0) {
		fprintf(stderr, "kvtier-gateway: listen '%s': " GW_LISTEN_FORMS "\n", o->listen);
		status = 2;
		goto out;
	}
	srv.creds = calloc(1, sizeof(*srv.creds));
	rc = srv.creds ? auth_creds_load(srv.creds, o->credentials, err, sizeof(err)) : -ENOMEM;
	if (rc < 0) {
		fprintf(stderr, "kvtier-gateway: credentials: %s\n",
			srv.creds ? err : strerror(ENOMEM));
		status = 2;
		goto out;
	}
	if (strcmp(o->access_log, "off") == 0) {
		srv.access_fd = -1;
	} else if (strcmp(o->access_log, "-") == 0) {
		srv.access_fd = STDOUT_FILENO;
	} else {
		srv.access_fd = open(o->access_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (srv.access_fd < 0) {
			log_err(-errno, "cannot open access log '%s'", o->access_log);
			goto out;
		}
	}

	if (o->tls_cert) {
		if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
			fprintf(stderr, "kvtier-gateway: this libmicrohttpd has no TLS support\n");
			status = 2;
			goto out;
		}
		tls_cert = gw_read_pem(o->tls_cert, false);
		tls_key = tls_cert ? gw_read_pem(o->tls_key, true) : NULL;
		if (!tls_cert || !tls_key) {
			status = 2;
			goto out;
		}
	}

	/* Before the store is opened: see util_detach. The directory stays:
	 * relative paths (the credentials and the access log, which SIGHUP
	 * opens again) name what they named in the foreground. */
	if (daemonize && util_detach(&notify_fd) < 0)
		goto out;
	/*
	 * Blocked before any thread starts, so every thread inherits the mask: a
	 * SIGTERM that reached a thread with it unblocked would kill the process
	 * (the default action) instead of ending in the sigtimedwait() below.
	 */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = kvt_store_open(&srv.cfg, KVT_OPEN_CREATE, &srv.st);
	if (rc < 0) {
		log_err(rc, "cannot open the store in '%s'", srv.cfg.store.dir);
		goto out;
	}
	o->max_connections = gw_connection_cap(srv.st, o->max_connections, o->threads);
	rc = kvt_bucket_create_internal(srv.st, GW_UPLOADS_BUCKET);
	if (rc == -ENOSPC || rc == -EROFS)	/* the first upload makes it, once it can */
		log_warn(rc, "cannot create the internal bucket '%s' yet", GW_UPLOADS_BUCKET);
	else if (rc < 0) {
		log_err(rc, "cannot create the internal bucket '%s'", GW_UPLOADS_BUCKET);
		goto out;
	}
	rc = s3_uploads_init(&srv);
	if (rc < 0) {
		log_err(rc, "cannot count the open multipart uploads");
		goto out;
	}
	uploads_init = true;
	if (RAND_bytes((unsigned char *)&srv.reqid_base, sizeof(srv.reqid_base)) != 1)
		srv.reqid_base = (uint64_t)getpid() << 32;
	xml_global_init();

	/*
	 * Blocking engine calls run on the worker lanes while their connection
	 * is suspended (gw_work.c); the polling threads only parse, dispatch and
	 * answer what cannot block.
	 */
	srv.cached_read_max = srv.cfg.store.cached_read_max;
	rc = gw_work_new(o->threads * GW_READ_WORKERS_PER_THREAD,
			 o->threads * GW_WRITE_WORKERS_PER_THREAD,
			 o->threads * GW_RECALL_WORKERS_PER_THREAD, GW_STREAMS_MAX,
			 (int64_t)o->timeout * 1000000000 / 2, &srv.work);
	if (rc < 0) {
		log_err(rc, "cannot start the gateway's workers");
		goto out;
	}
	/*
	 * poll(2), not epoll: libmicrohttpd 0.9.75's epoll loop never saw a
	 * close that came with the last bytes of a request cut short (a killed
	 * uploader), so the connection and its --max-connections slot stayed
	 * until --timeout: 25 such PUTs made a new client wait 57 s. Its poll
	 * loop closes them at once, and served the same req/s here (GET and
	 * PUT of 4 KiB and 256 KiB at 1 and 64 connections, docs/benchmarks.md,
	 * "Session 25").
	 */
	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG |
		MHD_ALLOW_SUSPEND_RESUME;
	if (o->metrics_listen) {
		srv.metrics_mhd = MHD_start_daemon(
			flags | (maddr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0), 0, NULL, NULL,
			http_access_cb, &srv,
			MHD_OPTION_EXTERNAL_LOGGER, gw_mhd_log, mbind_err,
			MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&maddr,
			MHD_OPTION_URI_LOG_CALLBACK, http_uri_cb, &srv,
			MHD_OPTION_NOTIFY_COMPLETED, http_completed_cb, &srv,
			MHD_OPTION_NOTIFY_CONNECTION, http_conn_cb, &srv,
			MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->timeout,
			MHD_OPTION_CONNECTION_LIMIT, (unsigned int)64,
			MHD_OPTION_END);
		if (!srv.metrics_mhd) {
			log_err(0, "cannot listen on '%s' for metrics%s%s", o->metrics_listen,
				mbind_err[0] ? ": " : "", mbind_err);
			goto out;
		}
	}
	if (addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	if (tls_cert) {
		flags |= MHD_USE_TLS;
		tls_opts[0] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0, tls_key };
		tls_opts[1] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0, tls_cert };
	}
	if (o->threads > 1)
		pool_opts[0] = (struct MHD_OptionItem){ MHD_OPTION_THREAD_POOL_SIZE, o->threads, NULL };
	srv.mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, http_access_cb, &srv,
		MHD_OPTION_EXTERNAL_LOGGER, gw_mhd_log, bind_err,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
		MHD_OPTION_ARRAY, pool_opts,
		MHD_OPTION_URI_LOG_CALLBACK, http_uri_cb, &srv,
		MHD_OPTION_NOTIFY_COMPLETED, http_completed_cb, &srv,
		/* the deadline of a request head (http_cut_slow_heads) */
		MHD_OPTION_NOTIFY_CONNECTION, http_conn_cb, &srv,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->timeout,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)o->max_connections,
		/*
		 * Header space and read buffer of a connection: bounds oversized
		 * heads (libmicrohttpd answers 431 past it; between GW_MAX_HEADER_BYTES
		 * and it, gw_http.c answers 400 RequestHeaderSectionTooLarge) and sets
		 * the size of body pieces we get. libmicrohttpd 0.9.75 zeroes the
		 * whole pool at each keep-alive request and keeps it resident, so it
		 * is sized for a 16 KiB head with room to spare, not more: 256 KiB
		 * cost a 256 KiB memset per request and 16 MiB at 64 connections.
		 */
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)GW_CONN_MEMORY,
		MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (size_t)(16 * 1024),
		/*
		 * No MHD_OPTION_LISTENING_ADDRESS_REUSE: its SO_REUSEPORT let a
		 * second gateway (another store, or one started twice) listen on
		 * the same port, and the kernel split clients between the two
		 * stores (a PUT answered 200, its GET 404). libmicrohttpd's
		 * default, SO_REUSEADDR, still restarts at once past TIME_WAIT.
		 */
		MHD_OPTION_ARRAY, tls_opts,
		MHD_OPTION_END);
	if (!srv.mhd) {
		if (bind_err[0])
			log_err(0, "cannot listen on '%s': %s", o->listen, bind_err);
		else
			log_err(0, "cannot listen on '%s' (in use, or not an address of this host?)",
				o->listen);
		goto out;
	}
	gw_log_serving(&srv, tls_cert != NULL);
	/*
	 * Detached: the caller's stderr had the lines above (with port 0, it
	 * learns the port there); syslog has them too, and whatever follows.
	 */
	if (notify_fd >= 0 && gw_redirect_stdio() == 0)
		gw_log_serving(&srv, tls_cert != NULL);
	util_detach_done(&notify_fd, 0);
	/*
	 * The main thread waits for signals and, between them, sweeps away
	 * multipart uploads older than upload_max_age (with their parts): an
	 * abandoned upload would otherwise hold hot-tier space and a place under
	 * max_uploads forever. It looks a few times per max age, at most hourly.
	 * Each second it also refuses uploads that waited too long for a stream
	 * slot (gw_work_expire): nothing else times a suspended connection; and
	 * closes connections whose request head is late (http_cut_slow_heads).
	 */
	sweep_every = GW_MIN(o->upload_max_age / 4 ? o->upload_max_age / 4 : 1, 3600);
	next_sweep = time(NULL);
	for (;;) {
		struct timespec tick = { .tv_sec = 1 };

		gw_work_expire(srv.work);
		if (o->timeout)
			http_cut_slow_heads(&srv);
		if (time(NULL) >= next_sweep) {
			rc = s3_uploads_sweep(&srv);
			if (rc < 0)
				log_warn(rc, "cannot sweep stale multipart uploads");
			next_sweep = time(NULL) + (time_t)sweep_every;
		}
		/*
		 * Give freed memory back each second. Bursts of requests leave free
		 * chunks in every worker's malloc arena (request buffers, I/O
		 * contexts beyond the engine's pool) that glibc keeps forever
		 * otherwise: RSS rose to the most concurrent PUTs ever seen and
		 * stayed there (docs/benchmarks.md, "Gateway"). A trim of idle
		 * arenas costs microseconds. It runs only when more than
		 * GW_TRIM_SLACK is free: trimming each second whatever was free made
		 * the next second's GET buffers fault their pages in again (page
		 * faults are VM exits on this kind of machine).
		 */
		{
			struct mallinfo2 mi = mallinfo2();

			if (mi.fordblks > GW_TRIM_SLACK)
				malloc_trim(0);
		}
		sig = sigtimedwait(&sigs, NULL, &tick);
		if (sig < 0)
			continue;
		if (sig == SIGHUP) {
			gw_reload(&srv);
			continue;
		}
		log_info("%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
		kvt_store_stop_g4(srv.st, KVT_G4_STOP_GRACE_MS);
		break;
	}
	status = 0;
out:
	util_detach_done(&notify_fd, status ? status : 1);
	/* libmicrohttpd must not stop with a connection suspended: drain the lanes first. */
	gw_work_stop(srv.work);
	if (srv.mhd)
		MHD_stop_daemon(srv.mhd);
	gw_work_free(srv.work);
	if (srv.metrics_mhd)
		MHD_stop_daemon(srv.metrics_mhd);
	free(tls_cert);
	if (tls_key) {
		OPENSSL_cleanse(tls_key, strlen(tls_key));
		free(tls_key);
	}
	__atomic_store_n(&srv.stopping, 1, __ATOMIC_RELEASE);
	gw_prestage_wait(&srv);
	if (uploads_init)
		s3_uploads_release_all(&srv);
	kvt_store_close(srv.st);
	gw_creds_free(srv.creds);
	for (size_t i = 0; i < srv.nretired; i++)
		gw_creds_free(srv.retired[i]);
	free(srv.retired);
	kvt_config_release(&srv.cfg);
	if (srv.access_fd > STDERR_FILENO)
		close(srv.access_fd);
	xml_global_release();
	return status;
}
