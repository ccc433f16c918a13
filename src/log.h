/*
 * log.h - one way to log. Messages are lower case, the subject quoted, no
 * trailing period; err is a negative (or positive) errno or 0:
 *
 *	log_err(rc, "cannot open segment '%s'", path);
 *
 * prints "kvtier: error: cannot open segment '/d/seg-7': No space left on device".
 */
#ifndef KVT_LOG_H
#define KVT_LOG_H

#include "kvtier.h"

void log_msg(enum kvt_log_level level, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_err(err, ...) log_msg(KVT_LOG_ERR, (err), __VA_ARGS__)
#define log_warn(err, ...) log_msg(KVT_LOG_WARN, (err), __VA_ARGS__)
#define log_info(...) log_msg(KVT_LOG_INFO, 0, __VA_ARGS__)
#define log_debug(...) log_msg(KVT_LOG_DEBUG, 0, __VA_ARGS__)

/*
 * For a condition that repeats until an operator acts (a full disk): true
 * at most once per `seconds` for one *last, so the log says it without
 * saying it every tick.
 */
int log_every(int64_t *last_ns, int seconds);

/*
 * As log_every(), for a failure that repeats as fast as clients ask (a
 * recall with the partner's bucket missing, or the partner not answering,
 * asked again at each 503's Retry-After: 1): true the first time, then at
 * most once per `seconds`; when true, note (n bytes) ends the line with
 * how many times it said false since: " (N more WHAT failed so since this
 * was last said)", or "" for none. Zeroed: never logged.
 */
#define LOG_REPEAT_SECONDS 60	/* a log_limit()ed line's interval */

struct log_limit {
	int64_t last_ns;
	uint64_t suppressed;
};

int log_limit(struct log_limit *l, int seconds, const char *what, char *note, size_t n);

#endif /* KVT_LOG_H */
