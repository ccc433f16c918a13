/*
 * kvtier_fuse.c - kvtier-fuse: the store as a file system.
 *
 *   kvtier-fuse [-c FILE] MOUNTPOINT [-f] [-d] [-s] [-o OPTIONS]
 *
 * Reads kvtier.conf (its [store] and [fuse] sections), opens the store,
 * mounts, and serves requests with libfuse's multithreaded loop until
 * unmounted (fusermount3 -u, umount) or told to stop (SIGTERM, SIGINT,
 * SIGHUP), then unmounts cleanly. Without -f it detaches, but only once the
 * mount is ready, so that `mount -t kvtier` returns a usable mount or an
 * error, not a promise.
 *
 * Options of its own, also accepted inside -o: staging=DIR (temp files of
 * random writes; default <store dir>/fuse-staging), max_streams=N (files
 * streaming into the store at once; more are staged; default 32),
 * log=FILE (where a detached daemon's log lines go; default syslog).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "kvfs.h"
#include "log.h"
#include "util.h"

struct cli_opts {
	char *config;
	char *staging;
	char *log;
	unsigned max_streams;
	int verbose;
	int help;
	int version;
};

enum { KEY_HELP, KEY_VERSION, KEY_VERBOSE };

#define OPT(t, m) { t, offsetof(struct cli_opts, m), 1 }
static const struct fuse_opt cli_spec[] = {
	OPT("-c %s", config),
	OPT("--config=%s", config),
	OPT("staging=%s", staging),
	OPT("max_streams=%u", max_streams),
	OPT("log=%s", log),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("-v", KEY_VERBOSE),
	FUSE_OPT_KEY("--verbose", KEY_VERBOSE),
	FUSE_OPT_END
};

static int cli_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct cli_opts *o = data;

	(void)arg;
	(void)outargs;
	switch (key) {
	case KEY_HELP:
		o->help = 1;
		return 0;
	case KEY_VERSION:
		o->version = 1;
		return 0;
	case KEY_VERBOSE:
		o->verbose = 1;
		return 0;
	default:
		return 1;	/* keep it for fuse_parse_cmdline() */
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvtier-fuse [-c FILE] MOUNTPOINT [-f] [-d] [-s] [-v] [-o OPTION[,OPTION...]]\n"
		"\n"
		"Mounts the kvtier store named by FILE (default: $KVTIER_CONF, else\n"
		SYSCONFDIR "/kvtier.conf) on MOUNTPOINT: /<bucket>/<key> as files.\n"
		"\n"
		"  -c, --config=FILE   kvtier.conf to read ([store] and [fuse])\n"
		"  -f                  stay in the foreground\n"
		"  -d                  foreground, with FUSE debug output\n"
		"  -s                  one thread\n"
		"  -v, --verbose       log debug lines\n"
		"  -o staging=DIR      temp files of random writes (<store dir>/fuse-staging)\n"
		"  -o max_streams=N    files streaming into the store at once (32)\n"
		"  -o log=FILE         log of a detached daemon (syslog)\n"
		"  -o allow_other,default_permissions,...   mount options: see mount.fuse3(8)\n"
		"\n"
		"See kvtier-fuse(8).\n");
}

/*
 * A detached daemon's standard streams: /dev/null, and for stderr the log
 * if one was given; else its log lines go to syslog (the journal under
 * systemd), not nowhere: a checksum failure or a damaged catalog must be
 * seen by someone.
 */
static int redirect_stdio(const char *log)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC), err = -1;

	if (null < 0)
		return -errno;
	if (log) {
		err = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (err < 0) {
			int rc = -errno;

			close(null);
			return rc;
		}
	}
	dup2(null, STDIN_FILENO);
	dup2(null, STDOUT_FILENO);
	dup2(err >= 0 ? err : null, STDERR_FILENO);
	if (err < 0)
		kvt_log_to_syslog();
	close(null);
	if (err >= 0)
		close(err);
	return 0;
}

/*
 * The kernel starts a FUSE mount's readahead at the block layer's default,
 * 128 KiB (VM_READAHEAD_PAGES), and only ever lowers it to max_readahead
 * in the INIT reply: so a sequential read costs a round trip to this
 * daemon, and a wakeup of one of its threads, every 128 KiB. On a busy
 * machine those wakeups, not the store, set the pace (kvtier bench fuse:
 * a 2 MiB file read in 16 requests). Raised to KVFS_IO_SIZE, a 2 MiB KV
 * block is read in two requests of one extent each. Writable only by root
 * (the mount is then root's anyway); elsewhere the default stays.
 *
 * It must be written after the kernel took the INIT reply, which sets the
 * readahead to min(current, max_readahead) and offers only the current
 * value as max_readahead: so a thread of its own waits for the mount to
 * answer a stat(2) (INIT done, the loop serving), then writes it.
 */
static void *raise_readahead(void *arg)
{
	char *mountpoint = arg;	/* ours to free */
	char path[96], val[32], line[8192], mnt[PATH_MAX], *real;
	unsigned maj = 0, min = 0;
	int fd, len, found = 0;
	FILE *f;

	struct stat st;

	if (stat(mountpoint, &st) < 0 || !(real = realpath(mountpoint, NULL))) {
		free(mountpoint);
		return NULL;
	}
	free(mountpoint);
	if ((f = fopen("/proc/self/mountinfo", "r"))) {
		while (fgets(line, sizeof(line), f)) {
			unsigned a, b;

			/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT ..."; the newest mount wins. */
			if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mnt) == 3 &&
			    strcmp(mnt, real) == 0 && strstr(line, " - fuse")) {
				maj = a;
				min = b;
				found = 1;
			}
		}
		fclose(f);
	}
	free(real);
	if (!found || major(st.st_dev) != maj || minor(st.st_dev) != min)
		return NULL;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		log_msg(KVT_LOG_DEBUG, -errno, "cannot raise the readahead in '%s'", path);
		return NULL;
	}
	len = snprintf(val, sizeof(val), "%d", KVFS_IO_SIZE / 1024);
	if (write(fd, val, (size_t)len) != len)
		log_msg(KVT_LOG_DEBUG, -errno, "cannot raise the readahead in '%s'", path);
	close(fd);
	return NULL;
}

/* Was -o NAME=... given anywhere? */
static int has_opt(const struct fuse_args *args, const char *name)
{
	for (int i = 1; i < args->argc; i++)
		if (strstr(args->argv[i], name))
			return 1;
	return 0;
}

/* The mount table shows "kvtier" and the configuration, not "fuse.kvtier-fuse";
 * allow_other always comes with default_permissions. */
static int add_names(struct fuse_args *args)
{
	if (!has_opt(args, "subtype=") && fuse_opt_add_arg(args, "-osubtype=kvtier") < 0)
		return -1;
	if (!has_opt(args, "fsname=") && fuse_opt_add_arg(args, "-ofsname=kvtier") < 0)
		return -1;
	/*
	 * The daemon makes no permission checks of its own (no access op, no
	 * checks in open or create): the kernel's default_permissions does
	 * them from the modes and owners we report. With allow_other but
	 * without it, every local user could read and write every file.
	 */
	if (has_opt(args, "allow_other") && !has_opt(args, "default_permissions")) {
		log_info("allow_other: adding default_permissions (the kernel checks modes)");
		if (fuse_opt_add_arg(args, "-odefault_permissions") < 0)
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts fo;
	struct cli_opts o = { .max_streams = 32 };
	struct fuse_loop_config *loop = NULL;
	struct statvfs vfs;
	static struct kvfs kv;
	char err[512];
	int status = 1, notify_fd = -1, mounted = 0, signals = 0, rc;

	memset(&fo, 0, sizeof(fo));
	kv.staging_fd = kv.owner_fd = -1;
	pthread_mutex_init(&kv.spare_lock, NULL);
	pthread_mutex_init(&kv.staging_lock, NULL);
	kvt_config_init(&kv.cfg);
	kvt_log_set_ident("kvtier-fuse");
	if (fuse_opt_parse(&args, &o, cli_spec, cli_proc) < 0) {
		status = 2;
		goto out;
	}
	if (o.help) {
		usage(stdout);
		printf("\nFUSE options:\n");
		fuse_cmdline_help();
		fuse_lowlevel_help();
		status = 0;
		goto out;
	}
	if (o.version) {
		printf("kvtier-fuse %s\n", PACKAGE_VERSION);
		fuse_lowlevel_version();
		status = 0;
		goto out;
	}
	if (add_names(&args) < 0)
		goto out;
	if (fuse_parse_cmdline(&args, &fo) != 0) {
		status = 2;
		goto out;
	}
	if (!fo.mountpoint) {
		usage(stderr);
		status = 2;
		goto out;
	}
	if (o.max_streams == 0) {
		fprintf(stderr, "kvtier-fuse: max_streams must be at least 1\n");
		status = 2;
		goto out;
	}
	rc = kvt_config_load_default(&kv.cfg, o.config, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvtier-fuse: %s\n", err);
		status = 2;
		goto out;
	}
	if (o.verbose || fo.debug)
		kvt_log_set_level(KVT_LOG_DEBUG);
	kv.max_streams = o.max_streams;
	kv.attr_timeout = kv.cfg.fuse.attr_timeout;
	kv.entry_timeout = kv.cfg.fuse.entry_timeout;
	kv.start_ns = kvfs_now_ns();
	kv.staging = o.staging ? strdup(o.staging)
			       : kvfs_join(kv.cfg.store.dir, "fuse-staging");
	if (!kv.staging)
		goto out;

	/* Every file staged for a random write holds a temp file open here,
	 * and thousands of files may be open through the mount at once. */
	util_raise_nofile(UINT64_MAX);
	/* A store on a read-only file system opens to be read (kvt_store_open):
	 * mounted read-only, the kernel answers EROFS to every write. */
	if (statvfs(kv.cfg.store.dir, &vfs) == 0 && (vfs.f_flag & ST_RDONLY) &&
	    fuse_opt_add_arg(&args, "-oro") != 0)
		goto out;
	/* Options first: a bad one must not cost a store creation. */
	kv.se = fuse_session_new(&args, &kvfs_ops, sizeof(kvfs_ops), &kv);
	if (!kv.se) {
		status = 2;	/* libfuse said which option it did not know */
		goto out;
	}
	if (!fo.foreground && util_detach(&notify_fd) < 0)
		goto out;
	rc = kvt_store_open(&kv.cfg, KVT_OPEN_CREATE, &kv.st);
	if (rc < 0) {
		log_err(rc, "cannot open the store in '%s'", kv.cfg.store.dir);
		goto out;
	}
	if ((!kvt_store_readonly(kv.st) && kvfs_parts_init(&kv) < 0) || node_table_init(&kv) < 0)
		goto out;
	if (fuse_set_signal_handlers(kv.se) != 0 || kvfs_notify_start(&kv) < 0)
		goto out;
	signals = 1;
	if (fuse_session_mount(kv.se, fo.mountpoint) != 0)
		goto out;
	mounted = 1;
	{
		pthread_t t;
		char *mp = strdup(fo.mountpoint);	/* the thread's: it may outlive main's */

		if (mp && pthread_create(&t, NULL, raise_readahead, mp) == 0)
			pthread_detach(t);
		else
			free(mp);
	}
	if (!fo.foreground) {
		rc = redirect_stdio(o.log);
		if (rc < 0) {
			log_err(rc, "cannot open the log '%s'", o.log);
			goto out;
		}
		if (chdir("/") < 0)
			goto out;
	}
	log_info("mounted '%s' on '%s'", kv.cfg.store.dir, fo.mountpoint);
	kvfs_staging_limit(&kv, fo.singlethread ? 1 : fo.max_threads && fo.max_threads != UINT_MAX ?
				fo.max_threads : KVFS_LOOP_THREADS);
	util_detach_done(&notify_fd, 0);

	if (fo.singlethread) {
		rc = fuse_session_loop(kv.se);
	} else {
		loop = fuse_loop_cfg_create();
		if (!loop)
			goto out;
		fuse_loop_cfg_set_clone_fd(loop, (unsigned)fo.clone_fd);
		/* UINT_MAX: not given, libfuse's defaults stand. */
		if (fo.max_idle_threads != UINT_MAX)
			fuse_loop_cfg_set_idle_threads(loop, fo.max_idle_threads);
		if (fo.max_threads != UINT_MAX)
			fuse_loop_cfg_set_max_threads(loop, fo.max_threads);
		/* fh_read_push: fewer than half the loop's threads at once (file.c). */
		kv.push_max = ((fo.max_threads && fo.max_threads != UINT_MAX ?
				fo.max_threads : KVFS_LOOP_THREADS) - 1) / 2;
		rc = fuse_session_loop_mt(kv.se, loop);
	}
	/* A signal ends the loop with its number; that is a clean stop. */
	status = rc < 0 ? 1 : 0;
	log_info("unmounting '%s'", fo.mountpoint);
out:
	util_detach_done(&notify_fd, status ? status : 1);
	if (kv.st)
		fh_release_orphans(&kv);
	kvfs_notify_stop(&kv);
	if (mounted)
		fuse_session_unmount(kv.se);
	if (signals)
		fuse_remove_signal_handlers(kv.se);
	/* Cold opens reply from their threads: before the session goes. */
	if (kv.st)
		kvt_store_stop_g4(kv.st, KVT_G4_STOP_GRACE_MS);
	kvfs_prestage_wait(&kv);
	if (kv.se)
		fuse_session_destroy(kv.se);
	fuse_loop_cfg_destroy(loop);
	if (kv.st)
		kvfs_parts_release(&kv);
	kvt_store_close(kv.st);
	if (kv.by_ino)
		node_table_release(&kv);
	while (kv.nspare > 0)
		free(kv.spare[--kv.nspare]);
	if (kv.staging_fd >= 0)
		close(kv.staging_fd);
	free(kv.staging);
	kvt_config_release(&kv.cfg);
	free(fo.mountpoint);
	fuse_opt_free_args(&args);
	free(o.config);
	free(o.staging);
	free(o.log);
	return status;
}
