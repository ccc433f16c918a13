/*
 * keys.h - the file of kvtier-migrate --recall-keys (migrate/keys.c).
 */
#ifndef MIGRATE_KEYS_H
#define MIGRATE_KEYS_H

#include <stddef.h>
#include <stdio.h>

/* The keys of a file, in its order. Release with keys_release(). */
struct keys {
	char **v;
	size_t n, cap;
};

/*
 * Reads f to its end into k (which needs no initialising): 0, or -EINVAL
 * for a line holding a NUL byte (*line is its number, from 1), -ENOMEM, or
 * the negative errno of a failed read. On failure k holds nothing.
 */
int keys_read(FILE *f, struct keys *k, size_t *line);
void keys_release(struct keys *k);

#endif /* MIGRATE_KEYS_H */
