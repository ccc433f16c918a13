/*
 * bench.c - what the benchmark commands share: option lists, medians, and
 * for the benchmarks that start other programs (bench fuse, bench migrate)
 * spawning, stopping and timing them in a scratch directory.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int bench_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int bench_parse_list(const char *s, int sizes, unsigned max_count, uint64_t *vals,
		     unsigned max_n, unsigned *n)
{
	char buf[256], *tok, *save = NULL;
	int rc;

	if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
		return -EINVAL;
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		unsigned u = 0;

		if (*n == max_n)
			return -E2BIG;
		if (sizes) {
			rc = kvt_parse_size(tok, &v);
			if (rc == 0 && (v == 0 || v > (1ull << 30)))
				rc = -EINVAL;
		} else {
			rc = bench_parse_uint(tok, 1, max_count, &u);
			v = u;
		}
		if (rc < 0)
			return rc;
		vals[(*n)++] = v;
	}
	return *n ? 0 : -EINVAL;
}

int bench_opt_match(const char *arg, const char *name, int takes_value, int *i, int argc,
		    char **argv, const char **val)
{
	size_t len = strlen(name);

	if (strncmp(arg, name, len) != 0)
		return 0;
	if (arg[len] == '\0') {
		if (!takes_value) {
			*val = NULL;
			return 1;
		}
		if (*i + 1 >= argc)
			return -1;
		*val = argv[++*i];
		return 1;
	}
	if (arg[len] == '=' && takes_value) {
		*val = arg + len + 1;
		return 1;
	}
	return 0;
}

int bench_opt_checked(const char *bench, const char *arg, int m, int rc)
{
	if (rc == 0 && m < 0)
		rc = -EINVAL;
	if (rc < 0)
		fprintf(stderr, "kvtier: bench %s: bad value for '%s'\n", bench, arg);
	return rc;
}

int bench_opt_dir(const struct kvt_config *cfg, const char *dir, char **out)
{
	if (!dir)
		dir = cfg && cfg->store.dir ? cfg->store.dir : "/var/tmp";
	*out = strdup(dir);
	return *out ? 0 : -ENOMEM;
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double bench_median(double *v, unsigned n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- processes and scratch files, for the benchmarks that start others ---- */

int64_t bench_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int bench_find_sibling(const char *name, char *out, size_t len)
{
	char self[4096], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n < 0)
		return -errno;
	self[n] = '\0';
	if ((slash = strrchr(self, '/')))
		*slash = '\0';
	if (snprintf(out, len, "%s/%s", self, name) >= (int)len)
		return -ENAMETOOLONG;
	return access(out, X_OK) == 0 ? 0 : -ENOENT;
}

int bench_find_program(const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");
	char buf[4096], *dir, *save = NULL;
	static const char *const extra[] = { "/usr/sbin", "/usr/local/sbin", "/sbin" };

	snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
	for (dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/%s", dir, name);
		if (access(out, X_OK) == 0)
			return 0;
	}
	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
		snprintf(out, len, "%s/%s", extra[i], name);
		if (access(out, X_OK) == 0)
			return 0;
	}
	out[0] = '\0';
	return -ENOENT;
}

void bench_version(const char *prog, const char *arg, char *out, size_t len)
{
	char cmd[4200];
	FILE *p;

	out[0] = '\0';
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", prog, arg);
	if (!(p = popen(cmd, "r")))
		return;
	if (fgets(out, (int)len, p))
		out[strcspn(out, "\n")] = '\0';
	pclose(p);
}

int bench_write_file(const char *path, mode_t mode, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	const char *p = data;
	int rc = 0;

	if (fd < 0)
		return -errno;
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

static int bench_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void bench_rm_rf(const char *path)
{
	/* FTW_MOUNT: never into a mount point a failed unmount left behind. */
	nftw(path, bench_rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

int bench_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd < 0)
		return -errno;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &al) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

int bench_wait_port(pid_t pid, int port, unsigned seconds)
{
	for (unsigned i = 0; i < seconds * 20; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
		int status, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -errno;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			close(fd);
			return 0;
		}
		close(fd);
		if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid)
			return -ECHILD;
		usleep(50000);
	}
	return -ETIMEDOUT;
}

pid_t bench_spawn(char *const argv[], const char *log)
{
	pid_t parent = getpid(), pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) :
			       open("/dev/null", O_WRONLY);
		int nul = open("/dev/null", O_RDONLY);

		/* An interrupted benchmark leaves no servers behind. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent || fd < 0 || nul < 0)
			_exit(127);
		dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

void bench_stop(pid_t pid)
{
	int status;

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < 200; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return;
		usleep(100000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

int bench_run(char *const argv[], const char *log, double *seconds)
{
	int64_t t0 = bench_mono_ns();
	pid_t pid = bench_spawn(argv, log);
	int status;

	if (pid < 0)
		return (int)pid;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (seconds)
		*seconds = (double)(bench_mono_ns() - t0) / 1e9;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

void bench_random_fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = 0x2545f4914f6cdd1dull ^ seed;
	unsigned char *p = buf;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	for (; i < len; i++)
		p[i] = (unsigned char)(x >> (8 * (i % 8)));
}

int bench_secret(char *out, size_t n)
{
	unsigned char rnd[32];
	size_t want = (n - 1) / 2;
	FILE *f = fopen("/dev/urandom", "r");

	if (want > sizeof(rnd))
		want = sizeof(rnd);
	if (!f || fread(rnd, 1, want, f) != want) {
		if (f)
			fclose(f);
		return -EIO;
	}
	fclose(f);
	for (size_t i = 0; i < want; i++)
		snprintf(out + 2 * i, 3, "%02x", rnd[i]);
	return 0;
}

void bench_machine(char *out, size_t len)
{
	char line[256], model[128] = "";
	struct utsname u;
	long mem_kib = 0;
	FILE *f;

	if ((f = fopen("/proc/cpuinfo", "r"))) {
		while (fgets(line, sizeof(line), f))
			if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
				snprintf(model, sizeof(model), "%s", strchr(line, ':') + 2);
				model[strcspn(model, "\n")] = '\0';
				break;
			}
		fclose(f);
	}
	if ((f = fopen("/proc/meminfo", "r"))) {
		while (fgets(line, sizeof(line), f))
			if (strncmp(line, "MemTotal:", 9) == 0)
				mem_kib = strtol(line + 9, NULL, 10);
		fclose(f);
	}
	uname(&u);
	snprintf(out, len, "%s, %ld CPUs, %.0f GiB RAM, Linux %s %s", model[0] ? model : "?",
		 sysconf(_SC_NPROCESSORS_ONLN), mem_kib / 1048576.0, u.release, u.machine);
}

double bench_load1(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}
