/*
 * kvtier.c - the admin command: `kvtier [-c FILE] [-v|-q] COMMAND ...`.
 *
 * A thin front end over the public engine interface (kvtier.h), as the
 * gateway and the FUSE mount are: each command parses its own options with
 * getopt_long, opens the store, makes one or a few library calls and turns
 * the result into output and an exit status. Nothing here knows the catalog
 * or the segment format; what the engine refuses, it refuses for every front
 * end alike.
 *
 * Output is for people and for scripts at once: results go to stdout (`ls`
 * looks like `aws s3 ls`, `stat --json` is one JSON object), and a failure is
 * one line on stderr, "kvtier: get: no such object 'b/k'", with an exit
 * status from cli.h: 0 done, 1 the operation failed, 2 a bad command line or
 * configuration, 3 fsck found damage it did not repair, 4 store-id found
 * the store not where its id was given.
 *
 * `put` streams its input into a writer, so nothing is visible until the
 * whole input has been read and committed. `get` writes FILE.tmp-PID and
 * renames it over FILE only once every byte has been read back and its
 * checksum verified: a failed or interrupted get leaves no partial file.
 *
 * The engine's own log lines ("kvtier: error: checksum mismatch in extent
 * ...") go to stderr as well, above the command's one-line verdict; -q keeps
 * only errors, -v adds what the engine does.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvtier.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"	/* the Makefile passes -DSYSCONFDIR=$(sysconfdir) */
#endif

#define CHUNK (1024 * 1024)	/* bytes per read and write when streaming */
#define LIST_PAGE 1000		/* entries per kvt_object_list page, as S3 */

struct cli {
	const char *cmd;		/* for error messages: "get" */
	struct kvt_config cfg;
	struct kvt_store *st;
	int verbose;			/* -v: 1, -q: -1 */
	int open_err;			/* why cli_open failed, a negative errno */
};

struct cli_cmd {
	const char *name;
	int (*fn)(struct cli *c, int argc, char **argv);
	const char *args;		/* usage after the command name */
	const char *summary;
};

static const struct cli_cmd *cli_find(const char *name);

/* ---- messages ------------------------------------------------------------ */

static void cli_error(const struct cli *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* One line on stderr: "kvtier: CMD: message". */
static void cli_error(const struct cli *c, const char *fmt, ...)
{
	char line[2048];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "kvtier: %s%s", c->cmd ? c->cmd : "",
		     c->cmd ? ": " : "");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

/* The words an operator needs for what the CLI asked; kvt_strerror for the rest. */
static const char *cli_strerror(int rc)
{
	switch (-rc) {
	case ENOENT:		return "no such bucket or object";
	case EEXIST:		return "already exists";
	case ENOTEMPTY:		return "bucket not empty";
	case ENAMETOOLONG:	return "key too long (over 1024 bytes)";
	case EILSEQ:		return "key is not valid UTF-8";
	case EINVAL:		return "invalid argument";
	case E2BIG:		return "metadata over 2048 bytes";
	case ENOMEM:		return "out of memory";
	default:		return kvt_strerror(rc);
	}
}

/*
 * Reports a failed engine call on bucket (and key, if not NULL) and returns
 * the exit status. ENOENT is told apart by asking whether the bucket exists,
 * because the engine returns the same errno for a missing bucket and a
 * missing object.
 */
static int cli_fail(struct cli *c, int rc, const char *bucket, const char *key)
{
	switch (bucket ? -rc : 0) {
	case ENOENT:
		if (key && c->st && kvt_bucket_exists(c->st, bucket) == 0)
			cli_error(c, "no such object '%s/%s'", bucket, key);
		else
			cli_error(c, "no such bucket '%s'", bucket);
		return CLI_FAIL;
	case EEXIST:
		if (key)
			cli_error(c, "object '%s/%s' already exists", bucket, key);
		else
			cli_error(c, "bucket '%s' already exists", bucket);
		return CLI_FAIL;
	case ENOTEMPTY:
		cli_error(c, "bucket '%s' is not empty", bucket);
		return CLI_FAIL;
	default:
		if (key)
			cli_error(c, "'%s/%s': %s", bucket, key, cli_strerror(rc));
		else if (bucket)
			cli_error(c, "'%s': %s", bucket, cli_strerror(rc));
		else
			cli_error(c, "%s", cli_strerror(rc));
		return CLI_FAIL;
	}
}

/*
 * getopt's own messages would name argv[0], which for a command is "get";
 * opterr is off and this says it in our one-line form instead.
 */
static void cli_bad_option(struct cli *c, int ch, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "?";

	if (ch == ':')
		cli_error(c, "option '%s' needs an argument", arg);
	else if (optopt > 0 && optopt < 256 && arg[0] == '-' && arg[1] != '-')
		cli_error(c, "unknown option '-%c'", optopt);
	else
		cli_error(c, "unknown option '%s'", arg);
}

static int cli_usage(struct cli *c)
{
	const struct cli_cmd *cmd = cli_find(c->cmd);

	if (cmd)
		fprintf(stderr, "usage: kvtier %s %s\n", cmd->name, cmd->args);
	fprintf(stderr, "Try 'kvtier help' for more information.\n");
	return CLI_USAGE;
}

/*
 * The names and keys on the command line are checked before the store is
 * opened: a malformed one is a usage error with a precise message, not an
 * EINVAL from deep in the engine.
 */
static int cli_check_bucket(struct cli *c, const char *bucket)
{
	if (kvt_bucket_name_valid(bucket))
		return 0;
	cli_error(c, "invalid bucket name '%s' (3-63 of a-z 0-9 . -, starting and "
		  "ending with a letter or digit)", bucket);
	return CLI_USAGE;
}

static int cli_check_key(struct cli *c, const char *key)
{
	int rc = kvt_key_valid(key);

	switch (-rc) {
	case 0:
		return 0;
	case ENAMETOOLONG:
		cli_error(c, "key too long (%zu bytes, at most %d)", strlen(key), KVT_KEY_MAX);
		break;
	case EILSEQ:
		cli_error(c, "key is not valid UTF-8");
		break;
	default:
		cli_error(c, "invalid key '%s'", key);
		break;
	}
	return CLI_USAGE;
}

static int cli_check_object(struct cli *c, const char *bucket, const char *key)
{
	int rc = cli_check_bucket(c, bucket);

	return rc ? rc : cli_check_key(c, key);
}

/* "64.0 MiB" for people; exact byte counts are printed beside it. */
static const char *cli_human(uint64_t n, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)n;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", n);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

/* ---- the store ----------------------------------------------------------- */

/*
 * Whether dir already holds a store. The engine opens a missing store with
 * one log line of its own; asking first lets `init` say "created" or "opened"
 * and every other command fail with one line. catalog.db is the file whose
 * presence the engine itself takes for "a store" (store.c).
 */
static int cli_store_exists(const char *dir)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/catalog.db", dir);
	return access(path, F_OK) == 0;
}

static int cli_open(struct cli *c)
{
	int rc;

	if (!cli_store_exists(c->cfg.store.dir)) {
		cli_error(c, "no store in '%s' (run 'kvtier init' first)", c->cfg.store.dir);
		return CLI_FAIL;
	}
	rc = kvt_store_open(&c->cfg, 0, &c->st);
	if (rc < 0) {
		c->open_err = rc;
		/* EINVAL: the configuration does not fit the store (it shrank). */
		cli_error(c, "cannot open the store in '%s': %s", c->cfg.store.dir,
			  rc == -EINVAL ? "it does not match the configuration" : cli_strerror(rc));
		return rc == -EINVAL ? CLI_USAGE : CLI_FAIL;
	}
	return 0;
}

/* ---- local files --------------------------------------------------------- */

/* Writes all of buf, retrying short writes; 0 or -errno. */
static int cli_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= n;
	}
	return 0;
}

/* Reads until buf is full or the input ends; the count or -errno. */
static ssize_t cli_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += n;
	}
	return got;
}

/*
 * The temporary file of a `get` in progress. A signal handler removes it, so
 * that an interrupted get leaves nothing behind either: unlink() is
 * async-signal-safe, and the default action then runs as if we had not been
 * here.
 */
static char cli_tmp_path[4200];

static void cli_on_signal(int sig)
{
	if (cli_tmp_path[0])
		unlink(cli_tmp_path);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void cli_trap_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = cli_on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

/* ---- commands ------------------------------------------------------------ */

/*
 * Every command takes -h/--help; the rest of its options are its own. optind
 * = 0 makes GNU getopt start afresh on the command's argv, where argv[0] is
 * the command name.
 */
#define CLI_HELP_OPTION { "help", no_argument, NULL, 'h' }

static int cli_help_cmd(struct cli *c)
{
	const struct cli_cmd *cmd = cli_find(c->cmd);

	printf("usage: kvtier %s %s\n  %s\n", cmd->name, cmd->args, cmd->summary);
	return CLI_OK;
}

/*
 * For commands whose only option (besides --help) is the switch `flag`
 * (NULL: none), which sets *flag_set: parses it and checks the operand
 * count. Returns the index of the first operand, or -1 with *status set.
 */
static int cli_args(struct cli *c, int argc, char **argv, int min, int max, const char *flag,
		    int *flag_set, int *status)
{
	/* With flag NULL, the second entry ends the table. */
	const struct option opts[] = {
		CLI_HELP_OPTION,
		{ flag, no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (ch == 'f') {
			*flag_set = 1;
			continue;
		}
		if (ch != 'h')
			cli_bad_option(c, ch, argv);
		*status = ch == 'h' ? cli_help_cmd(c) : cli_usage(c);
		return -1;
	}
	if (argc - optind < min || argc - optind > max) {
		*status = cli_usage(c);
		return -1;
	}
	return optind;
}

/* For commands with no options of their own: checks the operand count. */
static int cli_plain_args(struct cli *c, int argc, char **argv, int min, int max, int *status)
{
	return cli_args(c, argc, argv, min, max, NULL, NULL, status);
}

static int cmd_init(struct cli *c, int argc, char **argv)
{
	struct kvt_store_stat s;
	char hcap[32], hseg[32];
	int rc, existed, status = CLI_OK;

	if (cli_plain_args(c, argc, argv, 0, 0, &status) < 0)
		return status;
	existed = cli_store_exists(c->cfg.store.dir);
	/* Writing the segment files of a large store takes minutes: on a
	 * terminal, show the engine's progress lines. */
	if (c->verbose == 0 && isatty(STDERR_FILENO))
		kvt_log_set_level(KVT_LOG_INFO);
	rc = kvt_store_open(&c->cfg, KVT_OPEN_CREATE, &c->st);
	if (rc < 0) {
		cli_error(c, "cannot create a store in '%s': %s", c->cfg.store.dir,
			  cli_strerror(rc));
		return rc == -EINVAL ? CLI_USAGE : CLI_FAIL;
	}
	rc = kvt_store_stat(c->st, &s);
	if (rc < 0)
		return cli_fail(c, rc, NULL, NULL);
	if (s.segments < c->cfg.store.capacity / s.segment_size) {
		/* Opened at the size it has (the engine said why): not what was asked. */
		cli_error(c, "cannot grow the store in '%s': %s", c->cfg.store.dir,
			  kvt_store_readonly(c->st) ? cli_strerror(-EROFS)
			  : "another kvtier process has it open; stop them all, then run init");
		return CLI_FAIL;
	}
	printf("%s store in '%s'\n", existed ? "opened existing" : "created", c->cfg.store.dir);
	printf("  capacity:  %s (%" PRIu64 " bytes)\n", cli_human(s.capacity, hcap, sizeof(hcap)),
	       s.capacity);
	printf("  segments:  %" PRIu64 " of %s\n", s.segments,
	       cli_human(s.segment_size, hseg, sizeof(hseg)));
	printf("  io:        %s\n", s.io);
	if (c->cfg.path)
		printf("  config:    %s\n", c->cfg.path);
	return CLI_OK;
}

static int cmd_mb(struct cli *c, int argc, char **argv)
{
	int i, rc, status = CLI_OK;

	if ((i = cli_plain_args(c, argc, argv, 1, 1, &status)) < 0)
		return status;
	if ((rc = cli_check_bucket(c, argv[i])) || (rc = cli_open(c)))
		return rc;
	rc = kvt_bucket_create(c->st, argv[i]);
	if (rc < 0)
		return cli_fail(c, rc, argv[i], NULL);
	if (c->verbose > 0)
		printf("make_bucket: %s\n", argv[i]);
	return CLI_OK;
}

static int cmd_rb(struct cli *c, int argc, char **argv)
{
	int i, rc, status = CLI_OK;

	if ((i = cli_plain_args(c, argc, argv, 1, 1, &status)) < 0)
		return status;
	if ((rc = cli_check_bucket(c, argv[i])) || (rc = cli_open(c)))
		return rc;
	rc = kvt_bucket_delete(c->st, argv[i]);
	if (rc < 0)
		return cli_fail(c, rc, argv[i], NULL);
	if (c->verbose > 0)
		printf("remove_bucket: %s\n", argv[i]);
	return CLI_OK;
}

/* "2026-11-29 17:00:00" in local time, as `aws s3 ls` prints it. */
static const char *cli_ls_time(int64_t ns, char *buf, size_t len)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;

	if (!localtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(buf, len, "%19s", "?");
	return buf;
}

static int cli_print_bucket(void *arg, const char *name, int64_t ctime_ns)
{
	char when[32];

	(void)arg;
	printf("%s %s\n", cli_ls_time(ctime_ns, when, sizeof(when)), name);
	return 0;
}

static int cmd_buckets(struct cli *c, int argc, char **argv)
{
	int rc, status = CLI_OK;

	if (cli_plain_args(c, argc, argv, 0, 0, &status) < 0)
		return status;
	if ((rc = cli_open(c)))
		return rc;
	rc = kvt_bucket_list(c->st, cli_print_bucket, NULL);
	return rc < 0 ? cli_fail(c, rc, NULL, NULL) : CLI_OK;
}

/*
 * Lists one bucket a page at a time. A page holds objects and common
 * prefixes in two sorted arrays; they are merged so that the output is in
 * key order, as S3 tools print it. Without -r, names are shown relative to
 * the prefix up to its last '/', as `aws s3 ls s3://b/dir/` does.
 */
static int cmd_ls(struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "recursive", no_argument, NULL, 'r' },
		CLI_HELP_OPTION,
		{ NULL, 0, NULL, 0 },
	};
	struct kvt_list_opts lo = { .limit = LIST_PAGE };
	struct kvt_list *page = NULL;
	char *token = NULL, when[32];
	const char *bucket, *prefix = "", *slash;
	size_t strip = 0;
	int ch, rc, recursive = 0, status = CLI_OK;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "+:rh", opts, NULL)) != -1) {
		switch (ch) {
		case 'r':
			recursive = 1;
			break;
		case 'h':
			return cli_help_cmd(c);
		default:
			cli_bad_option(c, ch, argv);
			return cli_usage(c);
		}
	}
	/* `kvtier ls` alone lists buckets, as `aws s3 ls` does. */
	if (argc - optind == 0 && !recursive)
		return cmd_buckets(c, 1, argv);
	if (argc - optind < 1 || argc - optind > 2)
		return cli_usage(c);
	bucket = argv[optind];
	if (argc - optind == 2)
		prefix = argv[optind + 1];
	if ((rc = cli_check_bucket(c, bucket)) || (rc = cli_open(c)))
		return rc;
	lo.prefix = prefix;
	lo.delimiter = recursive ? NULL : "/";
	slash = strrchr(prefix, '/');
	if (!recursive && slash)
		strip = slash - prefix + 1;

	do {
		size_t io = 0, ip = 0;

		lo.continuation = token;
		rc = kvt_object_list(c->st, bucket, &lo, &page);
		if (rc < 0) {
			status = cli_fail(c, rc, bucket, NULL);
			goto out;
		}
		while (io < page->nobjects || ip < page->nprefixes) {
			const struct kvt_object *o = io < page->nobjects ? page->objects[io] : NULL;
			const char *p = ip < page->nprefixes ? page->prefixes[ip] : NULL;

			if (p && (!o || strcmp(p, o->key) < 0)) {
				printf("%30s %s\n", "PRE", p + strip);
				ip++;
			} else {
				printf("%s %10" PRIu64 " %s\n",
				       cli_ls_time(o->mtime_ns, when, sizeof(when)), o->size,
				       o->key + strip);
				io++;
			}
		}
		free(token);
		token = NULL;
		if (page->truncated) {
			/* Taken from the page, which is freed before the next call. */
			token = strdup(page->next_continuation ? page->next_continuation : "");
			if (!token || !*token) {
				status = cli_fail(c, token ? -EIO : -ENOMEM, bucket, NULL);
				goto out;
			}
		}
		kvt_list_free(page);
		page = NULL;
	} while (token);
out:
	kvt_list_free(page);
	free(token);
	return status;
}

/* Lower-cases NAME and splits "name=value" in place; -1 if malformed. */
static int cli_parse_meta(char *arg, struct kvt_meta *m)
{
	char *eq = strchr(arg, '=');

	if (!eq || eq == arg)
		return -1;
	*eq = '\0';
	/* S3 sends user metadata as x-amz-meta-NAME headers: NAME is an HTTP token. */
	for (char *p = arg; *p; p++) {
		if (!isgraph((unsigned char)*p) || strchr("()<>@,;:\\\"/[]?={}", *p))
			return -1;
		*p = (char)tolower((unsigned char)*p);
	}
	m->name = arg;
	m->value = eq + 1;
	return 0;
}

static int cmd_put(struct cli *c, int argc, char **argv)
{
	enum { OPT_CONTENT_TYPE = 256, OPT_SESSION, OPT_META, OPT_IF_NONE_MATCH, OPT_PIN };
	static const struct option opts[] = {
		{ "pin", no_argument, NULL, OPT_PIN },
		{ "content-type", required_argument, NULL, OPT_CONTENT_TYPE },
		{ "session", required_argument, NULL, OPT_SESSION },
		{ "meta", required_argument, NULL, OPT_META },
		{ "if-none-match", no_argument, NULL, OPT_IF_NONE_MATCH },
		CLI_HELP_OPTION,
		{ NULL, 0, NULL, 0 },
	};
	struct kvt_put_opts po = { .flags = KVT_PUT_MD5_ETAG };
	struct kvt_meta *meta = NULL;
	struct kvt_writer *w = NULL;
	struct kvt_object *info = NULL;
	const char *bucket, *key, *file;
	char *buf = NULL;
	int ch, rc, fd = -1, status = CLI_OK;

	/* At most one --meta per argument: size the array once. */
	meta = calloc(argc, sizeof(*meta));
	if (!meta)
		return cli_fail(c, -ENOMEM, NULL, NULL);
	po.meta = meta;
	optind = 0;
	while ((ch = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (ch) {
		case OPT_PIN:
			po.flags |= KVT_PUT_PIN;
			break;
		case OPT_CONTENT_TYPE:
			po.content_type = optarg;
			break;
		case OPT_SESSION:
			po.session = optarg;
			break;
		case OPT_META:
			if (cli_parse_meta(optarg, &meta[po.nmeta]) < 0) {
				cli_error(c, "invalid --meta '%s' (expected name=value)", optarg);
				status = CLI_USAGE;
				goto out;
			}
			po.nmeta++;
			break;
		case OPT_IF_NONE_MATCH:
			po.flags |= KVT_PUT_IF_NONE_MATCH;
			break;
		case 'h':
			status = cli_help_cmd(c);
			goto out;
		default:
			cli_bad_option(c, ch, argv);
			status = cli_usage(c);
			goto out;
		}
	}
	if (argc - optind != 3) {
		status = cli_usage(c);
		goto out;
	}
	bucket = argv[optind];
	key = argv[optind + 1];
	file = argv[optind + 2];
	if ((status = cli_check_object(c, bucket, key)))
		goto out;
	if (strcmp(file, "-") == 0) {
		fd = STDIN_FILENO;
	} else if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0) {
		cli_error(c, "cannot open '%s': %s", file, strerror(errno));
		status = CLI_FAIL;
		goto out;
	}
	buf = malloc(CHUNK);
	if (!buf) {
		status = cli_fail(c, -ENOMEM, NULL, NULL);
		goto out;
	}
	if ((status = cli_open(c)))
		goto out;
	{
		struct stat sb;

		if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
			po.size = (uint64_t)sb.st_size;	/* too large: refused before any write */
	}
	rc = kvt_writer_open(c->st, bucket, key, &po, &w);
	if (rc < 0) {
		status = cli_fail(c, rc, bucket, key);
		goto out;
	}
	for (;;) {
		ssize_t n = cli_read_full(fd, buf, CHUNK);

		if (n < 0) {
			cli_error(c, "cannot read '%s': %s", file, strerror((int)-n));
			status = CLI_FAIL;
			goto out;
		}
		if (n == 0)
			break;
		rc = kvt_writer_write(w, buf, n);
		if (rc < 0) {
			status = cli_fail(c, rc, bucket, key);
			goto out;
		}
	}
	/* commit frees the writer whatever it returns. */
	rc = kvt_writer_commit(w, &info);
	w = NULL;
	if (rc < 0) {
		status = cli_fail(c, rc, bucket, key);
		goto out;
	}
	if (c->verbose > 0)
		printf("upload: %s to %s/%s (%" PRIu64 " bytes, etag %s)\n", file, bucket, key,
		       info->size, info->etag);
out:
	kvt_writer_abort(w);
	kvt_object_free(info);
	if (fd > STDIN_FILENO)
		close(fd);
	free(buf);
	free(meta);
	return status;
}

/* Copies every byte of r to fd; 0, or an exit status after reporting. */
static int cli_copy_out(struct cli *c, struct kvt_reader *r, int fd, const char *bucket,
			const char *key, const char *file)
{
	uint64_t size = kvt_reader_object(r)->size, off = 0;
	char *buf = malloc(CHUNK);
	int rc, status = CLI_OK;

	if (!buf)
		return cli_fail(c, -ENOMEM, NULL, NULL);
	while (off < size) {
		ssize_t n = kvt_reader_pread(r, buf, CHUNK, off);

		/* A read that ends before the size the catalog gave is damage too. */
		if (n == 0)
			n = -EIO;
		if (n < 0) {
			status = cli_fail(c, (int)n, bucket, key);
			goto out;
		}
		rc = cli_write_all(fd, buf, n);
		if (rc < 0) {
			cli_error(c, "cannot write '%s': %s", file, strerror(-rc));
			status = CLI_FAIL;
			goto out;
		}
		off += n;
	}
out:
	free(buf);
	return status;
}

static int cmd_get(struct cli *c, int argc, char **argv)
{
	struct kvt_reader *r = NULL;
	const char *bucket, *key, *file;
	struct stat sb;
	int i, rc, fd = -1, status;

	if ((i = cli_plain_args(c, argc, argv, 3, 3, &status)) < 0)
		return status;
	bucket = argv[i];
	key = argv[i + 1];
	file = argv[i + 2];
	if ((status = cli_check_object(c, bucket, key)) || (status = cli_open(c)))
		return status;
	/* Open the object first: a missing one must not create any file. */
	rc = kvt_reader_open(c->st, bucket, key, &r);
	if (rc < 0)
		return cli_fail(c, rc, bucket, key);

	if (strcmp(file, "-") == 0) {
		status = cli_copy_out(c, r, STDOUT_FILENO, bucket, key, "standard output");
		goto out;
	}
	/*
	 * Something that is not a regular file (/dev/null, a FIFO) is written
	 * in place: renaming over it would replace the device node.
	 */
	if (stat(file, &sb) == 0 && !S_ISREG(sb.st_mode)) {
		if (S_ISDIR(sb.st_mode)) {
			cli_error(c, "cannot write '%s': %s", file, strerror(EISDIR));
			status = CLI_FAIL;
			goto out;
		}
		fd = open(file, O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			cli_error(c, "cannot open '%s': %s", file, strerror(errno));
			status = CLI_FAIL;
			goto out;
		}
		status = cli_copy_out(c, r, fd, bucket, key, file);
		goto out;
	}
	if ((size_t)snprintf(cli_tmp_path, sizeof(cli_tmp_path), "%s.tmp-%ld", file,
			     (long)getpid()) >= sizeof(cli_tmp_path)) {
		cli_tmp_path[0] = '\0';
		cli_error(c, "cannot write '%s': %s", file, strerror(ENAMETOOLONG));
		status = CLI_FAIL;
		goto out;
	}
	cli_trap_signals();
	fd = open(cli_tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0) {
		cli_error(c, "cannot create '%s': %s", cli_tmp_path, strerror(errno));
		cli_tmp_path[0] = '\0';
		status = CLI_FAIL;
		goto out;
	}
	status = cli_copy_out(c, r, fd, bucket, key, cli_tmp_path);
	if (status)
		goto out;
	/* The new file must be whole on disk before its name points at it. */
	rc = fsync(fd);
	if (close(fd) < 0)
		rc = -1;
	fd = -1;
	if (rc < 0) {
		cli_error(c, "cannot write '%s': %s", cli_tmp_path, strerror(errno));
		status = CLI_FAIL;
		goto out;
	}
	if (rename(cli_tmp_path, file) < 0) {
		cli_error(c, "cannot rename '%s' to '%s': %s", cli_tmp_path, file, strerror(errno));
		status = CLI_FAIL;
		goto out;
	}
	cli_tmp_path[0] = '\0';
out:
	if (fd >= 0)
		close(fd);
	if (cli_tmp_path[0]) {
		unlink(cli_tmp_path);
		cli_tmp_path[0] = '\0';
	}
	kvt_reader_close(r);
	return status;
}

/* "2026-11-29T17:00:00.123456789Z": ISO 8601, UTC, to the nanosecond. */
static const char *cli_iso_time(int64_t ns, char *buf, size_t len)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	char day[32];

	if (!gmtime_r(&t, &tm) || strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(buf, len, "?");
	else
		snprintf(buf, len, "%s.%09dZ", day, (int)(ns % 1000000000));
	return buf;
}

/* x-amz-checksum-crc32c: the big-endian CRC in base64, so it can be compared. */
static const char *cli_crc_base64(uint32_t crc, char *buf)
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	unsigned char b[4] = { crc >> 24, crc >> 16, crc >> 8, crc };

	buf[0] = b64[b[0] >> 2];
	buf[1] = b64[(b[0] & 3) << 4 | b[1] >> 4];
	buf[2] = b64[(b[1] & 15) << 2 | b[2] >> 6];
	buf[3] = b64[b[2] & 63];
	buf[4] = b64[b[3] >> 2];
	buf[5] = b64[(b[3] & 3) << 4];
	buf[6] = buf[7] = '=';
	buf[8] = '\0';
	return buf;
}

static int cmd_head(struct cli *c, int argc, char **argv)
{
	struct kvt_object *o = NULL;
	char when[48], b64[9], *g4 = NULL;
	int i, rc, status = CLI_OK;

	if ((i = cli_plain_args(c, argc, argv, 2, 2, &status)) < 0)
		return status;
	if ((status = cli_check_object(c, argv[i], argv[i + 1])) || (status = cli_open(c)))
		return status;
	rc = kvt_object_head(c->st, argv[i], argv[i + 1], &o);
	if (rc < 0)
		return cli_fail(c, rc, argv[i], argv[i + 1]);
	printf("bucket:        %s\n", argv[i]);
	printf("key:           %s\n", o->key ? o->key : argv[i + 1]);
	printf("size:          %" PRIu64 "\n", o->size);
	printf("etag:          %s\n", o->etag);
	printf("crc32c:        %08" PRIx32 " (%s)\n", o->crc32c, cli_crc_base64(o->crc32c, b64));
	printf("mtime:         %s\n", cli_iso_time(o->mtime_ns, when, sizeof(when)));
	printf("content-type:  %s\n", o->content_type ? o->content_type : "-");
	printf("session:       %s\n", o->session ? o->session : "-");
	printf("tier:          %s\n", kvt_tier_name(o->tier));
	printf("pinned:        %s\n", o->pinned ? "yes" : "no");
	/* Where an operator finds its copy in the partner bucket. */
	kvt_object_g4_name(c->st, argv[i], argv[i + 1], &g4);
	printf("g4:            %s\n", g4 ? g4 : "-");
	for (size_t m = 0; m < o->nmeta; m++)
		printf("meta:          %s=%s\n", o->meta[m].name, o->meta[m].value);
	free(g4);
	kvt_object_free(o);
	return CLI_OK;
}

static int cmd_rm(struct cli *c, int argc, char **argv)
{
	int i, rc, status = CLI_OK;

	if ((i = cli_plain_args(c, argc, argv, 2, 2, &status)) < 0)
		return status;
	if ((status = cli_check_object(c, argv[i], argv[i + 1])) || (status = cli_open(c)))
		return status;
	/* S3 answers a DELETE of nothing with 204; an operator wants to know. */
	rc = kvt_object_delete(c->st, argv[i], argv[i + 1]);
	if (rc < 0)
		return cli_fail(c, rc, argv[i], argv[i + 1]);
	if (c->verbose > 0)
		printf("delete: %s/%s\n", argv[i], argv[i + 1]);
	return CLI_OK;
}

static int cmd_cp(struct cli *c, int argc, char **argv)
{
	struct kvt_object *info = NULL;
	int i, rc, status = CLI_OK;

	if ((i = cli_plain_args(c, argc, argv, 4, 4, &status)) < 0)
		return status;
	if ((status = cli_check_object(c, argv[i], argv[i + 1])) ||
	    (status = cli_check_object(c, argv[i + 2], argv[i + 3])) ||
	    (status = cli_open(c)))
		return status;
	rc = kvt_object_head(c->st, argv[i], argv[i + 1], &info);
	kvt_object_free(info);
	info = NULL;
	/* Name the side that is missing: the source object, else the destination bucket. */
	if (rc < 0)
		return cli_fail(c, rc, argv[i], argv[i + 1]);
	rc = kvt_object_copy(c->st, argv[i], argv[i + 1], argv[i + 2], argv[i + 3], NULL, &info);
	if (rc < 0)
		return cli_fail(c, rc, argv[i + 2], rc == -ENOENT ? NULL : argv[i + 3]);
	if (c->verbose > 0)
		printf("copy: %s/%s to %s/%s (etag %s)\n", argv[i], argv[i + 1], argv[i + 2],
		       argv[i + 3], info->etag);
	kvt_object_free(info);
	return CLI_OK;
}

static int cli_pin(struct cli *c, int argc, char **argv, int pinned)
{
	int i, rc, status = CLI_OK;

	if ((i = cli_plain_args(c, argc, argv, 2, 2, &status)) < 0)
		return status;
	if ((status = cli_check_object(c, argv[i], argv[i + 1])) || (status = cli_open(c)))
		return status;
	rc = kvt_object_pin(c->st, argv[i], argv[i + 1], pinned);
	return rc < 0 ? cli_fail(c, rc, argv[i], argv[i + 1]) : CLI_OK;
}

static int cmd_pin(struct cli *c, int argc, char **argv)
{
	return cli_pin(c, argc, argv, 1);
}

static int cmd_unpin(struct cli *c, int argc, char **argv)
{
	return cli_pin(c, argc, argv, 0);
}

/* Writes s as a JSON string: paths may hold quotes and control bytes. */
static void cli_json_string(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void cli_stat_json(const struct cli *c, const struct kvt_store_stat *s)
{
	const struct { const char *name; uint64_t v; } f[] = {
		{ "capacity", s->capacity },
		{ "segment_size", s->segment_size },
		{ "used_bytes", s->used_bytes },
		{ "live_bytes", s->live_bytes },
		{ "catalog_bytes", s->catalog_bytes },
		{ "disk_free_bytes", s->disk_free_bytes },
		{ "segments", s->segments },
		{ "segments_free", s->segments_free },
		{ "segments_open", s->segments_open },
		{ "segments_sealed", s->segments_sealed },
		{ "buckets", s->buckets },
		{ "objects", s->objects },
		{ "object_bytes", s->object_bytes },
		{ "sessions", s->sessions },
		{ "pinned", s->pinned },
		{ "pinned_internal", s->pinned_internal },
		{ "evicted_objects", s->evicted_objects },
		{ "reclaimed_segments", s->reclaimed_segments },
		{ "checksum_failures", s->checksum_failures },
		{ "demoted_objects", s->demoted_objects },
		{ "recalled_objects", s->recalled_objects },
	};

	printf("{\"dir\":");
	cli_json_string(c->cfg.store.dir);
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		printf(",\"%s\":%" PRIu64, f[i].name, f[i].v);
	printf(",\"tiers\":{");
	for (int t = KVT_TIER_HOT; t <= KVT_TIER_RECALLING; t++)
		printf("%s\"%s\":%" PRIu64, t ? "," : "", kvt_tier_name(t), s->tier_count[t]);
	printf("},\"io\":");
	cli_json_string(s->io);
	printf("}\n");
}

static void cli_stat_text(const struct cli *c, const struct kvt_store_stat *s)
{
	char h1[32], h2[32];

	printf("store:               %s\n", c->cfg.store.dir);
	printf("capacity:            %s (%" PRIu64 " segments of %s)\n",
	       cli_human(s->capacity, h1, sizeof(h1)), s->segments,
	       cli_human(s->segment_size, h2, sizeof(h2)));
	printf("used:                %s (%" PRIu64 " bytes)\n",
	       cli_human(s->used_bytes, h1, sizeof(h1)), s->used_bytes);
	printf("live:                %s (%" PRIu64 " bytes)\n",
	       cli_human(s->live_bytes, h1, sizeof(h1)), s->live_bytes);
	printf("segments:            %" PRIu64 " free, %" PRIu64 " open, %" PRIu64 " sealed\n",
	       s->segments_free, s->segments_open, s->segments_sealed);
	printf("catalog:             %s, %s left on its disk\n",
	       cli_human(s->catalog_bytes, h1, sizeof(h1)),
	       cli_human(s->disk_free_bytes, h2, sizeof(h2)));
	printf("buckets:             %" PRIu64 "\n", s->buckets);
	printf("objects:             %" PRIu64 " (%s, %" PRIu64 " bytes)\n", s->objects,
	       cli_human(s->object_bytes, h1, sizeof(h1)), s->object_bytes);
	printf("sessions:            %" PRIu64 "\n", s->sessions);
	printf("tiers:               %" PRIu64 " hot, %" PRIu64 " demoting, %" PRIu64
	       " cold, %" PRIu64 " recalling\n", s->tier_count[KVT_TIER_HOT],
	       s->tier_count[KVT_TIER_DEMOTING], s->tier_count[KVT_TIER_COLD],
	       s->tier_count[KVT_TIER_RECALLING]);
	printf("pinned:              %" PRIu64 "\n", s->pinned);
	/* Kept by reclaim all the same: an operator who finds the tier full
	 * with "pinned: 0" must see what holds it (open multipart uploads). */
	printf("pinned internally:   %" PRIu64 " (uploads in progress, the mount's parts)\n",
	       s->pinned_internal);
	printf("evicted objects:     %" PRIu64 "\n", s->evicted_objects);
	printf("reclaimed segments:  %" PRIu64 "\n", s->reclaimed_segments);
	printf("checksum failures:   %" PRIu64 "\n", s->checksum_failures);
	printf("demoted to G4:       %" PRIu64 "\n", s->demoted_objects);
	printf("recalled from G4:    %" PRIu64 "\n", s->recalled_objects);
	printf("io:                  %s\n", s->io);
}

static int cmd_stat(struct cli *c, int argc, char **argv)
{
	struct kvt_store_stat s;
	int rc, json = 0, status = CLI_OK;

	if (cli_args(c, argc, argv, 0, 0, "json", &json, &status) < 0)
		return status;
	if ((rc = cli_open(c)))
		return rc;
	rc = kvt_store_stat(c->st, &s);
	if (rc < 0)
		return cli_fail(c, rc, NULL, NULL);
	if (json)
		cli_stat_json(c, &s);
	else
		cli_stat_text(c, &s);
	return CLI_OK;
}

static int cmd_fsck(struct cli *c, int argc, char **argv)
{
	struct kvt_fsck_report rep;
	int rc, repair = 0, status = CLI_OK;

	if (cli_args(c, argc, argv, 0, 0, "repair", &repair, &status) < 0)
		return status;
	if ((rc = cli_open(c))) {
		/* A damaged page of the segments or settings table fails the
		 * open itself, before the quick check below could say so. */
		if (c->open_err != -EUCLEAN)
			return rc;
		printf("status:              catalog damaged\n");
		return CLI_DAMAGED;
	}
	memset(&rep, 0, sizeof(rep));
	rc = kvt_store_fsck(c->st, repair ? KVT_FSCK_REPAIR : 0, &rep);
	if (rc == -EUCLEAN) {
		/* Damage, though not of a kind any repair here mends. */
		cli_fail(c, rc, NULL, NULL);
		printf("status:              catalog damaged\n");
		return CLI_DAMAGED;
	}
	if (rc < 0)
		return cli_fail(c, rc, NULL, NULL);
	printf("objects checked:     %" PRIu64 "\n", rep.objects_checked);
	printf("extents checked:     %" PRIu64 "\n", rep.extents_checked);
	printf("bytes checked:       %" PRIu64 "\n", rep.bytes_checked);
	printf("checksum errors:     %" PRIu64 "\n", rep.checksum_errors);
	printf("header errors:       %" PRIu64 "\n", rep.header_errors);
	printf("catalog errors:      %" PRIu64 "\n", rep.catalog_errors);
	printf("repaired:            %" PRIu64 "\n", rep.repaired);
	if (rc > 0) {
		printf("status:              damaged%s\n",
		       rep.unrepairable ? " (some of it no repair mends: see the log)" :
		       repair ? "" : " (run 'kvtier fsck --repair')");
		return CLI_DAMAGED;
	}
	printf("status:              %s\n", rep.repaired ? "repaired" : "clean");
	return CLI_OK;
}

static int cmd_reclaim(struct cli *c, int argc, char **argv)
{
	struct kvt_store_stat before, after;
	int rc, status = CLI_OK;

	if (cli_plain_args(c, argc, argv, 0, 0, &status) < 0)
		return status;
	if ((rc = cli_open(c)))
		return rc;
	rc = kvt_store_stat(c->st, &before);
	if (rc == 0)
		rc = kvt_store_reclaim(c->st, 0);
	if (rc >= 0)
		rc = kvt_store_stat(c->st, &after);
	if (rc < 0)
		return cli_fail(c, rc, NULL, NULL);
	/* Counted from stat: the counter is the store's, across every process. */
	printf("reclaimed %" PRIu64 " segments, evicted %" PRIu64 " objects; %" PRIu64
	       " of %" PRIu64 " segments free\n",
	       after.reclaimed_segments - before.reclaimed_segments,
	       after.evicted_objects - before.evicted_objects, after.segments_free,
	       after.segments);
	return CLI_OK;
}

/* "machine 0123456789abcdef, inode 131, born 2026-12-04 00:49:01.123456789 UTC" */
static void cli_place(const char *label, const struct kvt_store_place *p)
{
	char when[64] = "unknown";
	time_t t = (time_t)(p->btime_ns / 1000000000);
	struct tm tm;

	if (p->btime_ns && gmtime_r(&t, &tm))
		snprintf(when + strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm),
			 sizeof(when) - 19, ".%09" PRId64 " UTC", p->btime_ns % 1000000000);
	printf("%-10s machine %016" PRIx64 "%s, directory inode %" PRIu64 ", born %s\n", label,
	       p->machine, p->machine ? "" : " (no /etc/machine-id, or a transient one)", p->ino, when);
}

/*
 * The store's id, whose G4 manifests name their owner, and the place it was
 * given in; --new (a copy) or --keep (the same store moved) records here.
 */
static int cmd_store_id(struct cli *c, int argc, char **argv)
{
	const struct option opts[] = {
		CLI_HELP_OPTION,
		{ "new", no_argument, NULL, 'n' },
		{ "keep", no_argument, NULL, 'k' },
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvt_store_identity id;
	int ch, rc, how = 0, force = 0;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (ch == 'f') {
			force = 1;
			continue;
		}
		if (ch == 'n' || ch == 'k') {
			int want = ch == 'n' ? KVT_IDENTITY_NEW : KVT_IDENTITY_KEEP;

			if (how && how != want) {
				cli_error(c, "--new and --keep exclude each other");
				return CLI_USAGE;
			}
			how = want;
			continue;
		}
		if (ch != 'h')
			cli_bad_option(c, ch, argv);
		return ch == 'h' ? cli_help_cmd(c) : cli_usage(c);
	}
	if (optind != argc || (force && how != KVT_IDENTITY_NEW))
		return cli_usage(c);
	if ((rc = cli_open(c)))
		return rc;
	/*
	 * --new where the id was given is no copy: a second --new (a script
	 * run at every boot), or the original by mistake. It left the store's
	 * own sessions in G4 to its old id (never demoted again, "belongs to
	 * store ...") and forgot its deleted keys' copies there.
	 */
	if (how == KVT_IDENTITY_NEW && !force) {
		rc = kvt_store_identity(c->st, &id);
		if (rc < 0)
			return cli_fail(c, rc, NULL, NULL);
		if (id.recorded && id.matches) {
			cli_error(c, "the store in '%s' is where its id %016" PRIx64 " was given: no"
				  " copy, and a new id would leave its own sessions in g4 to the old"
				  " one; --force only on a whole clone that kept the original's"
				  " machine-id", c->cfg.store.dir, id.id);
			return CLI_FAIL;
		}
	}
	rc = how ? kvt_store_identity_set(c->st, how, &id) : kvt_store_identity(c->st, &id);
	if (rc < 0)
		return cli_fail(c, rc, NULL, NULL);
	printf("id:        %016" PRIx64 "%s\n", id.id, how == KVT_IDENTITY_NEW ? " (new)" : "");
	if (id.recorded)
		cli_place("given in:", &id.was);
	else
		printf("given in:  not recorded (the store is read-only)\n");
	cli_place("here:", &id.here);
	printf("matches:   %s\n", id.matches ? "yes" :
	       "no: a copy of a store ('kvtier store-id --new'), or the store moved"
	       " ('kvtier store-id --keep'); nothing is written to g4 until then");
	/* A status of its own: monitoring need not read 'matches:'. */
	return id.matches ? CLI_OK : CLI_MOVED;
}

static int cmd_bench(struct cli *c, int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))
		return cli_help_cmd(c);
	if (argc < 2)
		return cli_usage(c);
	/* The benchmarks open their own scratch store under [store] dir. */
	optind = 0;
	if (strcmp(argv[1], "engine") == 0)
		return bench_engine_main(&c->cfg, argc - 1, argv + 1);
	if (strcmp(argv[1], "gateway") == 0)
		return bench_gateway_main(&c->cfg, argc - 1, argv + 1);
	if (strcmp(argv[1], "trace") == 0)
		return bench_trace_main(&c->cfg, argc - 1, argv + 1);
	if (strcmp(argv[1], "fuse") == 0)
		return bench_fuse_main(&c->cfg, argc - 1, argv + 1);
	if (strcmp(argv[1], "migrate") == 0)
		return bench_migrate_main(&c->cfg, argc - 1, argv + 1);
	cli_error(c, "unknown benchmark '%s' (known: engine, gateway, fuse, migrate, trace)",
		  argv[1]);
	return CLI_USAGE;
}

static int cmd_help(struct cli *c, int argc, char **argv);

static const struct cli_cmd cli_cmds[] = {
	{ "init", cmd_init, "", "create the store named by the configuration" },
	{ "mb", cmd_mb, "BUCKET", "make a bucket" },
	{ "rb", cmd_rb, "BUCKET", "remove an empty bucket" },
	{ "buckets", cmd_buckets, "", "list buckets" },
	{ "put", cmd_put, "[--pin] [--content-type T] [--session S] [--meta NAME=VALUE]... "
	  "[--if-none-match] BUCKET KEY FILE", "store FILE (- for stdin) as an object" },
	{ "get", cmd_get, "BUCKET KEY FILE", "read an object into FILE (- for stdout)" },
	{ "head", cmd_head, "BUCKET KEY", "show an object's size, checksums, tier and metadata" },
	{ "ls", cmd_ls, "[-r|--recursive] [BUCKET [PREFIX]]", "list objects, as aws s3 ls" },
	{ "rm", cmd_rm, "BUCKET KEY", "remove an object" },
	{ "cp", cmd_cp, "SRCBUCKET SRCKEY DSTBUCKET DSTKEY", "copy an object with its metadata" },
	{ "pin", cmd_pin, "BUCKET KEY", "keep an object from being dropped by reclaim" },
	{ "unpin", cmd_unpin, "BUCKET KEY", "let reclaim drop an object again" },
	{ "stat", cmd_stat, "[--json]", "show the store's space, objects and counters" },
	{ "fsck", cmd_fsck, "[--repair]", "check the catalog and every checksum" },
	{ "reclaim", cmd_reclaim, "", "free segments down to the low watermark now" },
	{ "store-id", cmd_store_id, "[--new [--force] | --keep]",
	  "show the store's id and where it was given; --new for a copy of a store,"
	  " --keep for a store moved" },
	{ "bench", cmd_bench, "engine|gateway|fuse|migrate|trace [OPTIONS]",
	  "measure the engine against fio, the gateway against nginx and redis, "
	  "the mount against a plain file and s3fs, the migrator against the aws cli, "
	  "a replayed inference trace against two baselines" },
	{ "help", cmd_help, "", "show this help" },
};

static const struct cli_cmd *cli_find(const char *name)
{
	for (size_t i = 0; name && i < sizeof(cli_cmds) / sizeof(cli_cmds[0]); i++)
		if (strcmp(cli_cmds[i].name, name) == 0)
			return &cli_cmds[i];
	return NULL;
}

static void cli_help(FILE *f)
{
	fprintf(f, "usage: kvtier [-c FILE] [-v|-q] COMMAND [ARGS]\n\n"
		"  -c, --config FILE  read FILE instead of $KVTIER_CONF or "
		SYSCONFDIR "/kvtier.conf\n"
		"  -v, --verbose      say what was done; more log output\n"
		"  -q, --quiet        log errors only\n"
		"  -h, --help         show this help\n"
		"      --version      show the version\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(cli_cmds) / sizeof(cli_cmds[0]); i++)
		fprintf(f, "  %-8s %s\n", cli_cmds[i].name, cli_cmds[i].summary);
	fprintf(f, "\n'kvtier COMMAND --help' shows a command's arguments; see kvtier(1).\n");
}

static int cmd_help(struct cli *c, int argc, char **argv)
{
	const struct cli_cmd *cmd = argc > 1 ? cli_find(argv[1]) : NULL;

	if (argc > 2 || (argc == 2 && !cmd)) {
		cli_error(c, "unknown command '%s'", argv[1]);
		return CLI_USAGE;
	}
	if (cmd) {
		c->cmd = cmd->name;
		return cli_help_cmd(c);
	}
	cli_help(stdout);
	return CLI_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli c = { .cmd = NULL };
	const struct cli_cmd *cmd;
	const char *conf = NULL;
	char err[512];
	int ch, rc, status;

	kvt_log_set_ident("kvtier");
	opterr = 0;
	/* '+': stop at the command, whose options are its own. */
	while ((ch = getopt_long(argc, argv, "+:c:vqh", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			conf = optarg;
			break;
		case 'v':
			c.verbose++;
			break;
		case 'q':
			c.verbose = -1;
			break;
		case 'h':
			cli_help(stdout);
			return CLI_OK;
		case 'V':
			printf("kvtier %s\n", PACKAGE_VERSION);
			return CLI_OK;
		default:
			cli_bad_option(&c, ch, argv);
			fprintf(stderr, "Try 'kvtier help' for more information.\n");
			return CLI_USAGE;
		}
	}
	if (optind == argc) {
		cli_help(stderr);
		return CLI_USAGE;
	}
	cmd = cli_find(argv[optind]);
	if (!cmd) {
		cli_error(&c, "unknown command '%s' (try 'kvtier help')", argv[optind]);
		return CLI_USAGE;
	}
	c.cmd = cmd->name;
	if (cmd->fn == cmd_help)
		return cmd_help(&c, argc - optind, argv + optind);

	/*
	 * The engine logs what it finds as it goes (fsck's damage, a fallback
	 * to sync I/O); by default a command shows warnings and errors, -q only
	 * errors, -v also what the engine does, -vv its debug lines.
	 */
	kvt_log_set_level(c.verbose < 0 ? KVT_LOG_ERR : c.verbose == 0 ? KVT_LOG_WARN :
			  c.verbose == 1 ? KVT_LOG_INFO : KVT_LOG_DEBUG);
	kvt_config_init(&c.cfg);
	rc = kvt_config_load_default(&c.cfg, conf, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvtier: %s\n", err[0] ? err : cli_strerror(rc));
		kvt_config_release(&c.cfg);
		return CLI_USAGE;
	}
	status = cmd->fn(&c, argc - optind, argv + optind);
	kvt_store_close(c.st);
	kvt_config_release(&c.cfg);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		c.cmd = cmd->name;
		cli_error(&c, "cannot write standard output: %s", strerror(errno));
		if (status == CLI_OK)
			status = CLI_FAIL;
	}
	return status;
}
