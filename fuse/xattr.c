/*
 * xattr.c - the names and values of kvtier-fuse's extended attributes.
 *
 * Any process that can reach the mount sends these bytes: a name of up to
 * 255 bytes and a value of up to 64 KiB, any bytes at all (the kernel's
 * limits). The operations of ops.c (op_setxattr, op_getxattr,
 * op_removexattr) ask here what a name is and what a value says, before
 * anything touches a node or the store; the fuzz target names checks both
 * against rules written again there.
 *
 *   user.kvtier.tier, .etag, .checksum   read-only
 *   user.kvtier.session                  1..KVT_KEY_MAX bytes, a key's rules
 *   user.kvtier.pin                      "1" or "0", nothing else
 *   user.kvtier.prestage                 any value: setting it is the request
 *   user.kvtier.<other>                  none of ours: cannot be set
 *   user.<other>                         not kept here
 *   outside user. (security., system.)   no labels or ACLs here at all
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs.h"

enum kvfs_xattr kvfs_xattr_name(const char *name)
{
	static const struct { const char *name; enum kvfs_xattr x; } ours[] = {
		{ XATTR_TIER, KVFS_XATTR_TIER }, { XATTR_SESSION, KVFS_XATTR_SESSION },
		{ XATTR_ETAG, KVFS_XATTR_ETAG }, { XATTR_CHECKSUM, KVFS_XATTR_CHECKSUM },
		{ XATTR_PIN, KVFS_XATTR_PIN }, { XATTR_PRESTAGE, KVFS_XATTR_PRESTAGE },
	};

	if (strncmp(name, "user.", 5) != 0)
		return KVFS_XATTR_FOREIGN;
	if (strncmp(name, "user.kvtier.", 12) != 0)
		return KVFS_XATTR_USER;
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (strcmp(name, ours[i].name) == 0)
			return ours[i].x;
	return KVFS_XATTR_UNKNOWN;
}

int kvfs_xattr_session(const char *value, size_t size, char **session)
{
	char *s;
	int rc;

	*session = NULL;
	/* A NUL inside would cut the session short in every C string after. */
	if (size == 0 || size > KVT_KEY_MAX || memchr(value, '\0', size))
		return -EINVAL;
	/* Not strndup(): value has no NUL after it, and strndup() may look
	 * for one past size (ASan's strict_string_checks reads it so). */
	s = malloc(size + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, value, size);
	s[size] = '\0';
	/* It names G4's manifest of the session: a key's rules. */
	rc = kvt_key_valid(s);
	if (rc < 0) {
		free(s);
		return rc;
	}
	*session = s;
	return 0;
}

int kvfs_xattr_pin(const char *value, size_t size, int *pin)
{
	if (size != 1 || (value[0] != '0' && value[0] != '1'))
		return -EINVAL;
	*pin = value[0] == '1';
	return 0;
}
