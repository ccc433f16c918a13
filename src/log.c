/*
 * log.c - the engine's one logging function. Each line is written with one
 * write(2) so that lines from several threads and processes sharing stderr
 * do not interleave; or, for a detached daemon, handed to syslog(3).
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

static enum kvt_log_level log_level = KVT_LOG_INFO;
static const char *log_ident = "kvtier";
static int log_syslog;

void kvt_log_set_level(enum kvt_log_level level)
{
	log_level = level;
}

void kvt_log_set_ident(const char *ident)
{
	log_ident = ident;
}

void kvt_log_to_syslog(void)
{
	openlog(log_ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	log_syslog = 1;
}

void log_msg(enum kvt_log_level level, int err, const char *fmt, ...)
{
	static const char *names[] = { "error", "warning", "info", "debug" };
	static const int priorities[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char line[1024];
	va_list ap;
	int n, head;

	if (level > log_level)
		return;
	n = head = snprintf(line, sizeof(line), "%s: %s: ", log_ident, names[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	if (err) {
		char buf[128];
		const char *s = strerror_r(err < 0 ? -err : err, buf, sizeof(buf));

		n += snprintf(line + n, sizeof(line) - n, ": %s", s);
		if (n > (int)sizeof(line) - 2)
			n = sizeof(line) - 2;
	}
	if (log_syslog) {
		/* syslog has the ident and the priority: the message alone. */
		line[n] = '\0';
		syslog(priorities[level], "%s", line + head);
		return;
	}
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}

int log_every(int64_t *last_ns, int seconds)
{
	int64_t now = util_now_ns(), last = __atomic_load_n(last_ns, __ATOMIC_RELAXED);

	if (last && now - last < (int64_t)seconds * 1000000000)
		return 0;
	return __atomic_compare_exchange_n(last_ns, &last, now, 0, __ATOMIC_RELAXED,
					   __ATOMIC_RELAXED);
}

int log_limit(struct log_limit *l, int seconds, const char *what, char *note, size_t n)
{
	uint64_t more;

	if (!log_every(&l->last_ns, seconds)) {
		__atomic_add_fetch(&l->suppressed, 1, __ATOMIC_RELAXED);
		return 0;
	}
	more = __atomic_exchange_n(&l->suppressed, 0, __ATOMIC_RELAXED);
	if (more)
		snprintf(note, n, " (%" PRIu64 " more %s failed so since this was last said)",
			 more, what);
	else if (n)
		note[0] = '\0';
	return 1;
}
