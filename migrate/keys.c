/*
 * keys.c - the file of kvtier-migrate --recall-keys: one BUCKET/KEY a line.
 *
 * A line ends at '\n'; the '\r's just before it (a file written on Windows)
 * are not part of it, and neither is a last line's missing '\n'. Blank
 * lines (nothing, or only spaces and tabs) and lines starting with '#' are
 * skipped; every other line is a key, whole, blanks and all, in the order
 * of the file. Whether a key names an object is the recall's to say (it
 * counts a failure and goes on with the others). A line holding a NUL byte
 * refuses the whole file, naming the line: the file is no text, and the
 * key would be the line cut at the NUL, another key (the reader kept it so
 * before, and recalled an object the line did not name). So did a read
 * that failed (a directory given for the file read as an empty one) and an
 * allocation that failed (the keys read until then were recalled, and the
 * run said nothing of the rest).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "keys.h"
#include "util.h"

int keys_read(FILE *f, struct keys *k, size_t *line)
{
	char *buf = NULL;
	size_t cap = 0;
	ssize_t len;
	int rc = 0;

	memset(k, 0, sizeof(*k));
	*line = 0;
	errno = 0;
	while ((len = getline(&buf, &cap, f)) >= 0) {
		(*line)++;
		if (len > 0 && buf[len - 1] == '\n')
			len--;
		while (len > 0 && buf[len - 1] == '\r')
			len--;
		if (memchr(buf, '\0', (size_t)len)) {
			rc = -EINVAL;
			goto out;
		}
		buf[len] = '\0';
		if (buf[0] == '#' || buf[strspn(buf, " \t")] == '\0')
			continue;
		if (UTIL_GROW(k->v, k->n, k->cap) < 0 || !(k->v[k->n] = strndup(buf, (size_t)len))) {
			rc = -ENOMEM;
			goto out;
		}
		k->n++;
	}
	if (ferror(f))
		rc = errno ? -errno : -EIO;
out:
	free(buf);
	if (rc < 0)
		keys_release(k);
	return rc;
}

void keys_release(struct keys *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i]);
	free(k->v);
	memset(k, 0, sizeof(*k));
}
