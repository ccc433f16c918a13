/*
 * s3_xml.c - S3's XML documents.
 *
 * Writing is plain text into a gw_buf with escaping: responses are flat and
 * a DOM would only cost memory. Reading uses libxml2 with the network off
 * (XML_PARSE_NONET), entities not substituted, and any DOCTYPE refused: a
 * request body has no business declaring entities, and refusing them shuts
 * out the "billion laughs" and external-entity (XXE) attacks whatever
 * libxml2's own limits are. Every malformed or unexpected document is
 * MalformedXML, as S3 answers.
 */
#include "config.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "s3_xml.h"

/* ---- writing ------------------------------------------------------------ */

void xml_escape(struct gw_buf *b, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		switch (c) {
		case '&': gw_buf_puts(b, "&amp;"); break;
		case '<': gw_buf_puts(b, "&lt;"); break;
		case '>': gw_buf_puts(b, "&gt;"); break;
		/* Quotes are left alone: we write no attribute values from data. */
		default:
			/* Control bytes as character references, as S3 writes them. */
			if (c < 0x20 && c != '\t' && c != '\n')
				gw_buf_printf(b, "&#x%X;", c);
			else
				gw_buf_putc(b, (char)c);
		}
	}
}

void xml_begin(struct gw_buf *b, const char *root)
{
	gw_buf_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<%s xmlns=\"" S3_XMLNS "\">",
		      root);
}

void xml_open(struct gw_buf *b, const char *name)
{
	gw_buf_printf(b, "<%s>", name);
}

void xml_close(struct gw_buf *b, const char *name)
{
	gw_buf_printf(b, "</%s>", name);
}

void xml_elem(struct gw_buf *b, const char *name, const char *text)
{
	gw_buf_printf(b, "<%s>", name);
	xml_escape(b, text ? text : "");
	gw_buf_printf(b, "</%s>", name);
}

void xml_elem_key(struct gw_buf *b, const char *name, const char *text, bool url)
{
	struct gw_buf enc;

	if (!url) {
		xml_elem(b, name, text);
		return;
	}
	gw_buf_init(&enc);
	/* S3 keeps '/' as it is in url-encoded listings. */
	gw_url_encode(&enc, text ? text : "", text ? strlen(text) : 0, true);
	xml_elem(b, name, gw_buf_str(&enc));
	if (gw_buf_failed(&enc))
		b->failed = true;
	gw_buf_release(&enc);
}

void xml_elemf(struct gw_buf *b, const char *name, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	xml_elem(b, name, text);
}

/* ---- reading ------------------------------------------------------------ */

void xml_global_init(void)
{
	xmlInitParser();
}

void xml_global_release(void)
{
	xmlCleanupParser();
}

static xmlDocPtr xml_read(const char *body, size_t len)
{
	xmlDocPtr doc;

	if (len == 0 || len > (64u << 20))
		return NULL;
	doc = xmlReadMemory(body, (int)len, "body.xml", NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
			    XML_PARSE_NOCDATA);
	if (!doc)
		return NULL;
	if (doc->intSubset || doc->extSubset || !xmlDocGetRootElement(doc)) {
		xmlFreeDoc(doc);
		return NULL;
	}
	return doc;
}

static bool xml_is(xmlNodePtr n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

/* The text of an element that holds only text; NULL otherwise. Caller frees. */
static char *xml_text(xmlNodePtr n)
{
	struct gw_buf b;

	gw_buf_init(&b);
	for (xmlNodePtr c = n->children; c; c = c->next) {
		if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) {
			gw_buf_puts(&b, (const char *)c->content);
		} else if (c->type != XML_COMMENT_NODE) {
			gw_buf_release(&b);
			return NULL;
		}
	}
	if (gw_buf_failed(&b)) {
		gw_buf_release(&b);
		return NULL;
	}
	return gw_buf_detach(&b, NULL);
}

static int xml_push_key(struct xml_keylist *l, char *key)
{
	char **v = realloc(l->keys, (l->n + 1) * sizeof(*v));

	if (!v)
		return -1;
	l->keys = v;
	l->keys[l->n++] = key;
	return 0;
}

/* <Object>'s key, version and ETag, owned by l from here on, even on failure. */
static int xml_push_object(struct xml_keylist *l, char *key, char *version, char *etag)
{
	char **v = realloc(l->versions, (l->n + 1) * sizeof(*v));
	char **e = v ? realloc(l->etags, (l->n + 1) * sizeof(*e)) : NULL;

	if (v)
		l->versions = v;
	if (e)
		l->etags = e;
	if (!v || !e || xml_push_key(l, key) < 0) {
		free(key);
		free(version);
		free(etag);
		return -1;
	}
	l->versions[l->n - 1] = version;
	l->etags[l->n - 1] = etag;
	return 0;
}

void xml_keylist_release(struct xml_keylist *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		free(l->keys[i]);
		if (l->versions)
			free(l->versions[i]);
		if (l->etags)
			free(l->etags[i]);
	}
	free(l->keys);
	free(l->versions);
	free(l->etags);
	memset(l, 0, sizeof(*l));
}

void xml_partlist_release(struct xml_partlist *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->parts[i].etag);
	free(l->parts);
	memset(l, 0, sizeof(*l));
}

enum s3_code xml_parse_delete(const char *body, size_t len, struct xml_keylist *out)
{
	xmlDocPtr doc = xml_read(body, len);
	xmlNodePtr root;
	enum s3_code code = S3_MALFORMED_XML;

	memset(out, 0, sizeof(*out));
	if (!doc)
		return S3_MALFORMED_XML;
	root = xmlDocGetRootElement(doc);
	if (!xml_is(root, "Delete"))
		goto out;
	for (xmlNodePtr n = root->children; n; n = n->next) {
		if (xml_is(n, "Quiet")) {
			char *t = xml_text(n);

			if (!t)
				goto out;
			out->quiet = strcmp(t, "true") == 0;
			free(t);
		} else if (xml_is(n, "Object")) {
			char *key = NULL, *version = NULL, *etag = NULL, **field;
			bool bad = false;

			for (xmlNodePtr c = n->children; c && !bad; c = c->next) {
				field = xml_is(c, "Key") ? &key : xml_is(c, "VersionId") ? &version
					: xml_is(c, "ETag") ? &etag : NULL;
				if (!field)
					continue;
				/* a second <Key> would leave the first undeleted, unsaid */
				bad = *field != NULL;
				if (!bad) {
					*field = xml_text(c);
					bad = !*field;
				}
			}
			if (bad || !key || out->n == XML_MAX_DELETE) {
				free(key);
				free(version);
				free(etag);
				goto out;
			}
			if (xml_push_object(out, key, version, etag) < 0)
				goto out;
		} else if (n->type == XML_ELEMENT_NODE) {
			goto out;
		}
	}
	if (out->n == 0)
		goto out;
	code = S3_OK;
out:
	if (code != S3_OK)
		xml_keylist_release(out);
	xmlFreeDoc(doc);
	return code;
}

enum s3_code xml_parse_complete(const char *body, size_t len, struct xml_partlist *out)
{
	xmlDocPtr doc = xml_read(body, len);
	xmlNodePtr root;
	enum s3_code code = S3_MALFORMED_XML;

	memset(out, 0, sizeof(*out));
	if (!doc)
		return S3_MALFORMED_XML;
	root = xmlDocGetRootElement(doc);
	if (!xml_is(root, "CompleteMultipartUpload"))
		goto out;
	for (xmlNodePtr n = root->children; n; n = n->next) {
		struct xml_part p = { 0 };
		struct xml_part *v;
		char *num = NULL;

		if (!xml_is(n, "Part")) {
			if (n->type == XML_ELEMENT_NODE)
				goto out;
			continue;
		}
		for (xmlNodePtr c = n->children; c; c = c->next) {
			if (xml_is(c, "PartNumber")) {
				free(num);
				num = xml_text(c);
			} else if (xml_is(c, "ETag")) {
				free(p.etag);
				p.etag = xml_text(c);
			}
		}
		if (num) {
			char *end;
			unsigned long v2 = strtoul(num, &end, 10);

			if (*end == '\0' && end != num && v2 >= 1 && v2 <= XML_MAX_PARTS)
				p.number = (unsigned)v2;
			free(num);
		}
		if (!p.number || !p.etag || out->n == XML_MAX_PARTS) {
			free(p.etag);
			goto out;
		}
		v = realloc(out->parts, (out->n + 1) * sizeof(*v));
		if (!v) {
			free(p.etag);
			code = S3_INTERNAL_ERROR;
			goto out;
		}
		out->parts = v;
		out->parts[out->n++] = p;
	}
	if (out->n == 0)
		goto out;
	code = S3_OK;
out:
	if (code != S3_OK)
		xml_partlist_release(out);
	xmlFreeDoc(doc);
	return code;
}

static enum s3_code xml_collect_keys(xmlNodePtr n, size_t max, struct xml_keylist *out)
{
	for (; n; n = n->next) {
		if (xml_is(n, "Key")) {
			char *k = xml_text(n);

			if (!k || out->n == max || xml_push_key(out, k) < 0) {
				free(k);
				return S3_MALFORMED_XML;
			}
		} else if (n->type == XML_ELEMENT_NODE) {
			enum s3_code code = xml_collect_keys(n->children, max, out);

			if (code != S3_OK)
				return code;
		}
	}
	return S3_OK;
}

enum s3_code xml_parse_keys(const char *body, size_t len, size_t max, struct xml_keylist *out)
{
	xmlDocPtr doc = xml_read(body, len);
	enum s3_code code;

	memset(out, 0, sizeof(*out));
	if (!doc)
		return S3_MALFORMED_XML;
	code = xml_collect_keys(xmlDocGetRootElement(doc)->children, max, out);
	if (code != S3_OK)
		xml_keylist_release(out);
	xmlFreeDoc(doc);
	return code;
}

enum s3_code xml_parse_root(const char *body, size_t len, const char *root)
{
	xmlDocPtr doc = xml_read(body, len);
	enum s3_code code;

	if (!doc)
		return S3_MALFORMED_XML;
	code = xml_is(xmlDocGetRootElement(doc), root) ? S3_OK : S3_MALFORMED_XML;
	xmlFreeDoc(doc);
	return code;
}
