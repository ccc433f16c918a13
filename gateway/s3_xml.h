/*
 * s3_xml.h - S3's XML: writing response documents, and reading the few
 * request bodies S3 defines (DeleteObjects, CompleteMultipartUpload, our
 * kvtier-lookup/prestage key lists) with libxml2.
 */
#ifndef S3_XML_H
#define S3_XML_H

#include <stdbool.h>
#include <stddef.h>

#include "gw_util.h"
#include "s3_error.h"

#define S3_XMLNS "http://s3.amazonaws.com/doc/2006-03-01/"

/* ---- writing ------------------------------------------------------------ */

/* The declaration and <root xmlns="...">. */
void xml_begin(struct gw_buf *b, const char *root);
void xml_open(struct gw_buf *b, const char *name);
void xml_close(struct gw_buf *b, const char *name);
/* <name>text</name>, text escaped. */
void xml_elem(struct gw_buf *b, const char *name, const char *text);
/* The same with text url-encoded first (encoding-type=url) when url is set. */
void xml_elem_key(struct gw_buf *b, const char *name, const char *text, bool url);
void xml_elemf(struct gw_buf *b, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void xml_escape(struct gw_buf *b, const char *s);

/* ---- reading ------------------------------------------------------------ */

#define XML_MAX_DELETE 1000	/* keys in one DeleteObjects, as S3 */
#define XML_MAX_PARTS 10000	/* parts in one multipart upload, as S3 */

struct xml_keylist {
	char **keys;
	size_t n;
	bool quiet;
	/* xml_parse_delete only: each object's <VersionId> and <ETag>, NULL
	 * where it has none. */
	char **versions, **etags;
};

struct xml_part {
	unsigned number;
	char *etag;		/* as the client wrote it, quotes and all */
};

struct xml_partlist {
	struct xml_part *parts;
	size_t n;
};

/* Once, before threads: libxml2's global state. */
void xml_global_init(void);
void xml_global_release(void);

/* <Delete><Quiet/>?<Object><Key>k</Key></Object>*</Delete> */
enum s3_code xml_parse_delete(const char *body, size_t len, struct xml_keylist *out);
/* <CompleteMultipartUpload><Part><PartNumber/><ETag/></Part>*</...> */
enum s3_code xml_parse_complete(const char *body, size_t len, struct xml_partlist *out);
/* Any root holding <Key> elements, in document order (kvtier-lookup). */
enum s3_code xml_parse_keys(const char *body, size_t len, size_t max, struct xml_keylist *out);
/* S3_OK if body is well-formed XML whose root element is root. */
enum s3_code xml_parse_root(const char *body, size_t len, const char *root);
void xml_keylist_release(struct xml_keylist *l);
void xml_partlist_release(struct xml_partlist *l);

#endif /* S3_XML_H */
