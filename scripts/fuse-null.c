/*
 * fuse-null.c - the FUSE transport's ceiling for sequential reads on this
 * machine: a file system of one file of 256 MiB whose READs are answered
 * from a buffer in memory, with no disk, no checksum and no catalog behind
 * them. Not part of kvtier; docs/benchmarks.md compares kvtier-fuse with it.
 *
 *   cc -O2 -o /tmp/fuse-null scripts/fuse-null.c $(pkg-config --cflags --libs fuse3)
 *   mkdir -p /tmp/mnt && /tmp/fuse-null /tmp/mnt &
 *   echo 1024 > /sys/class/bdi/$(mountpoint -d /tmp/mnt)/read_ahead_kb
 *   dd if=/tmp/mnt/f of=/dev/null bs=1M
 *   fusermount3 -u /tmp/mnt
 *
 * It serves until unmounted. kvtier-fuse raises its mount's readahead to
 * 1 MiB the same way (fuse/kvtier_fuse.c, raise_readahead).
 */
#define FUSE_USE_VERSION 34

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <fuse_lowlevel.h>

#define NULL_SIZE (256ULL << 20)
#define NULL_IO (1 << 20)	/* max_read, as kvtier-fuse's */

static char null_bytes[NULL_IO];

static void null_stat(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)NULL_SIZE;
	}
}

static void null_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_read = NULL_IO;
	conn->max_readahead = NULL_IO;
}

static void null_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { .ino = 2, .attr_timeout = 60, .entry_timeout = 60 };

	if (parent != FUSE_ROOT_ID || strcmp(name, "f") != 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	null_stat(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void null_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	null_stat(ino, &st);
	fuse_reply_attr(req, &st, 60);
}

static void null_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	if ((unsigned long long)off >= NULL_SIZE)
		size = 0;
	else if (off + size > NULL_SIZE)
		size = (size_t)(NULL_SIZE - (unsigned long long)off);
	fuse_reply_buf(req, null_bytes, size < NULL_IO ? size : NULL_IO);
}

static const struct fuse_lowlevel_ops null_ops = {
	.init = null_init,
	.lookup = null_lookup,
	.getattr = null_getattr,
	.read = null_read,
};

int main(int argc, char **argv)
{
	char *av[] = { argv[0], "-omax_read=1048576", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(2, av);
	struct fuse_loop_config *loop = fuse_loop_cfg_create();
	struct fuse_session *se;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]);
		return 2;
	}
	memset(null_bytes, 7, sizeof(null_bytes));
	se = fuse_session_new(&args, &null_ops, sizeof(null_ops), NULL);
	if (!se || !loop || fuse_session_mount(se, argv[1]) != 0)
		return 1;
	fuse_set_signal_handlers(se);
	rc = fuse_session_loop_mt(se, loop);
	fuse_session_unmount(se);
	fuse_session_destroy(se);
	fuse_loop_cfg_destroy(loop);
	return rc < 0 ? 1 : 0;
}
