/*
 * catalog.c - the SQLite catalog shared by every kvtier process.
 *
 * One database file in WAL mode. Readers never block writers and a read
 * never turns into a write (access times are batched by the store). Every
 * connection sets a busy timeout, so processes that write at once queue
 * instead of failing; writes use BEGIN IMMEDIATE so that two writers never
 * deadlock upgrading a read lock.
 *
 * Order of a write: the data is on the device, then the transaction that
 * publishes it commits. A row in `extents` therefore always points at bytes
 * that were written; bytes without a row are garbage that reclaim frees.
 *
 * The schema carries a version in PRAGMA user_version; cat_open() applies
 * the migrations a database lacks, in order, each in its own transaction.
 * Later schema changes append a step to `migrations`, never edit one.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "log.h"
#include "segment.h"
#include "util.h"

static const char *const migrations[] = {
	/* 1: the first schema. */
	"CREATE TABLE settings(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE buckets(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
	"  ctime INTEGER NOT NULL);"
	"CREATE TABLE objects(id INTEGER PRIMARY KEY, bucket INTEGER NOT NULL,"
	"  key TEXT NOT NULL, vid INTEGER NOT NULL, size INTEGER NOT NULL,"
	"  etag TEXT NOT NULL, crc32c INTEGER NOT NULL, content_type TEXT, meta BLOB,"
	"  mtime INTEGER NOT NULL, session TEXT NOT NULL,"
	"  tier INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0,"
	"  UNIQUE(bucket, key));"
	"CREATE INDEX objects_session ON objects(bucket, session);"
	"CREATE TABLE extents(object INTEGER NOT NULL, seq INTEGER NOT NULL,"
	"  segment INTEGER NOT NULL, gen INTEGER NOT NULL, offset INTEGER NOT NULL,"
	"  length INTEGER NOT NULL, crc INTEGER NOT NULL, obj_off INTEGER NOT NULL,"
	"  hvid INTEGER NOT NULL, hseq INTEGER NOT NULL,"
	"  PRIMARY KEY(object, seq)) WITHOUT ROWID;"
	"CREATE INDEX extents_segment ON extents(segment, offset);"
	"CREATE TABLE segments(id INTEGER PRIMARY KEY, state INTEGER NOT NULL,"
	"  gen INTEGER NOT NULL, live INTEGER NOT NULL, used INTEGER NOT NULL,"
	"  last_access INTEGER NOT NULL);"
	"CREATE TABLE sessions(bucket INTEGER NOT NULL, name TEXT NOT NULL,"
	"  last_access INTEGER NOT NULL, PRIMARY KEY(bucket, name)) WITHOUT ROWID;",
	/* 2: POSIX metadata for the FUSE view (mode 0644 = 420). */
	"ALTER TABLE objects ADD COLUMN mode INTEGER NOT NULL DEFAULT 420;"
	"ALTER TABLE objects ADD COLUMN uid INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE objects ADD COLUMN gid INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE objects ADD COLUMN atime INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE objects ADD COLUMN ctime INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE objects ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;",
	/* 3: G4. tier is the demotion state (enum kvt_tier); g4_vid the version
	 * whose bytes G4 holds verified (0: none); g4_attempts failed tries. */
	"ALTER TABLE objects ADD COLUMN g4_vid INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE objects ADD COLUMN g4_attempts INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE objects ADD COLUMN g4_etag TEXT;"
	"CREATE INDEX objects_g4 ON objects(bucket, session, tier);",
	/* 4: G4 housekeeping. g4_uploads: multipart uploads in flight, so that
	 * the next run aborts what a killed one left (cold.h, cold_journal).
	 * g4_dead: keys whose G4 copy and manifest entry no longer stand for
	 * an object here (deleted, overwritten, renamed, moved to another
	 * session); the migrator rewrites their manifests and deletes the
	 * copies (migrate.c, g4_sweep), so an import never brings them back.
	 * The triggers fill it in the transaction that deletes or moves. A
	 * renamed object's G4 copy is under its old name: it must be uploaded
	 * again before it may go cold, unless it is cold already: then its
	 * copy stays under the old name, which migration 5 records (this
	 * version did not: see migration 10). */
	"CREATE TABLE g4_uploads(upload_id TEXT PRIMARY KEY, url TEXT NOT NULL,"
	"  key TEXT NOT NULL, started INTEGER NOT NULL, pid INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE g4_dead(id INTEGER PRIMARY KEY, bucket INTEGER NOT NULL,"
	"  key TEXT NOT NULL, session TEXT NOT NULL);"
	"CREATE TRIGGER objects_g4_deleted AFTER DELETE ON objects WHEN OLD.g4_vid <> 0 BEGIN"
	"  INSERT INTO g4_dead(bucket, key, session) VALUES(OLD.bucket, OLD.key, OLD.session);"
	" END;"
	"CREATE TRIGGER objects_g4_moved AFTER UPDATE OF key, session ON objects"
	" WHEN OLD.g4_vid <> 0 AND (OLD.key <> NEW.key OR OLD.session <> NEW.session) BEGIN"
	"  INSERT INTO g4_dead(bucket, key, session) VALUES(OLD.bucket, OLD.key, OLD.session);"
	"  UPDATE objects SET g4_vid = 0, g4_etag = NULL"
	"   WHERE id = NEW.id AND OLD.key <> NEW.key AND NEW.tier <> 2;"
	" END;",
	/* 5: G4 names. g4_key is where G4 holds the object's bytes when that
	 * is not "BUCKET/KEY" (NULL): a cold object renamed keeps its copy
	 * under the old name (renaming it in G4 would mean a download and an
	 * upload inside a FUSE rename), and an upload whose own name another
	 * object's copy holds goes to ".kvtier/versions/BUCKET/VID" instead
	 * (migrate.c, demote_upload_once). g4_dead rows carry the name too,
	 * so the sweep deletes the copy that went dead, and never one that an
	 * object still names (cat_g4_name_taken). */
	"ALTER TABLE objects ADD COLUMN g4_key TEXT;"
	"ALTER TABLE g4_dead ADD COLUMN g4_key TEXT;"
	"DROP TRIGGER objects_g4_deleted;"
	"DROP TRIGGER objects_g4_moved;"
	"CREATE TRIGGER objects_g4_deleted AFTER DELETE ON objects WHEN OLD.g4_vid <> 0 BEGIN"
	"  INSERT INTO g4_dead(bucket, key, session, g4_key)"
	"   VALUES(OLD.bucket, OLD.key, OLD.session, OLD.g4_key);"
	" END;"
	"CREATE TRIGGER objects_g4_moved AFTER UPDATE OF key, session ON objects"
	" WHEN OLD.g4_vid <> 0 AND (OLD.key <> NEW.key OR OLD.session <> NEW.session) BEGIN"
	"  INSERT INTO g4_dead(bucket, key, session, g4_key)"
	"   VALUES(OLD.bucket, OLD.key, OLD.session, OLD.g4_key);"
	"  UPDATE objects SET g4_vid = 0, g4_etag = NULL, g4_key = NULL"
	"   WHERE id = NEW.id AND OLD.key <> NEW.key AND NEW.tier <> 2;"
	"  UPDATE objects SET g4_key = (SELECT name FROM buckets WHERE id = NEW.bucket)"
	"   || '/' || OLD.key"
	"   WHERE id = NEW.id AND OLD.key <> NEW.key AND NEW.tier = 2 AND OLD.g4_key IS NULL;"
	" END;",
	/* 6: every upload asks whether its G4 name is taken (cat_g4_name_taken);
	 * without an index that scanned the bucket, and with 40,000 objects
	 * it was two thirds of a trace replay's demotion time. */
	"CREATE INDEX objects_g4_key ON objects(bucket, g4_key) WHERE g4_key IS NOT NULL;",
	/* 7: the chunk checksums of an extent's payload (segment.h), as
	 * little-endian 32-bit words: the first chunk's length, then CRC32C of
	 * each chunk (cat_extent.chunk0, chunk_crc); NULL for extents written
	 * before, which are read and verified whole. */
	"ALTER TABLE extents ADD COLUMN crcs BLOB;",
	/* 8: extents of up to 1 MiB of payload (SEG_PAYLOAD_MAX); before, 1 MiB
	 * less the header. A kvtier from before reads into 1 MiB buffers: the
	 * version makes it refuse this store rather than read one. */
	"INSERT OR REPLACE INTO settings(name, value) VALUES('extent_payload_max', 1048576);",
	/* 9: G4 manifests name the store that owns their session (migrate.c,
	 * manifest_owner), and no other store's sweep deletes its copies. A
	 * kvtier of schema 8 from before (35a5ef0) opened the store without a
	 * word and swept the copies of a session another store had imported
	 * from it: the version makes it refuse this store instead. */
	"INSERT OR REPLACE INTO settings(name, value) VALUES('g4_manifest_owner', 1);",
	/* 10: g4_dead rows from before migration 5 name no G4 copy (g4_key),
	 * and a kvtier of schema 4 wrote one, with the old key, for a cold
	 * object renamed through the mount that kept its g4_vid and its only
	 * copy under that old key: migration 5 could not tell which object,
	 * recall looked for the new name, and the sweep deleted the copy.
	 * unproven marks every row from before this one that names no copy:
	 * before the sweep deletes such a copy, a demotion puts over it, or
	 * after a recall found an object's own name empty, the copy is claimed
	 * by any cold object with no recorded name whose bytes it holds and
	 * whose own name does not (migrate.c, g4_claim_unproven). */
	"ALTER TABLE g4_dead ADD COLUMN unproven INTEGER NOT NULL DEFAULT 0;"
	"UPDATE g4_dead SET unproven = 1 WHERE g4_key IS NULL;"
	"CREATE INDEX g4_dead_unproven ON g4_dead(bucket, key) WHERE unproven = 1;",
	/* 11: g4_claim_unproven() asks, once for each unproven row, for the
	 * bucket's cold objects with no recorded G4 name of the copy's size
	 * and ETag, or, where G4 gives none (file://), CRC32C
	 * (cat_g4_cold_unnamed): without an index that scanned the bucket,
	 * 1.4 s a row at 500,000 cold objects, so the first sweep after an
	 * upgrade took hours; and blocks of one size are the rule, so the
	 * size alone does not narrow it. recall_unproven() asks for a
	 * session's unproven rows (cat_g4_dead_unproven_in), where it read
	 * every g4_dead row of the store. No row is made unproven after
	 * migration 10: that index only shrinks. */
	"CREATE INDEX objects_g4_unnamed ON objects(bucket, size, coalesce(g4_etag, ''))"
	" WHERE tier = 2 AND g4_key IS NULL;"
	"CREATE INDEX objects_g4_unnamed_crc ON objects(bucket, size, crc32c)"
	" WHERE tier = 2 AND g4_key IS NULL;"
	"CREATE INDEX g4_dead_unproven_session ON g4_dead(bucket, session) WHERE unproven = 1;",
	/* 12: objects_session (bucket, session) is the head of objects_g4
	 * (bucket, session, tier), which every query by session searches
	 * instead (EXPLAIN QUERY PLAN of each statement the tests prepare,
	 * with the index and without: none used it). Kept, it was one more
	 * page of the WAL for each object put or deleted, 1 of 8 for a new
	 * key (docs/benchmarks.md, "the fixed cost of a small PUT"). */
	"DROP INDEX IF EXISTS objects_session;",
};

/* The columns cat_object_from_row() reads, in its order; extents follow. */
#define OBJ_COLS "o.id, o.vid, o.size, o.etag, o.crc32c, o.content_type, o.meta, o.mtime," \
	" o.session, o.tier, o.pinned, o.key, o.bucket, o.mode, o.uid, o.gid, o.atime," \
	" o.ctime, o.kind"
#define OBJ_NCOLS 19

/*
 * An object reclaim keeps (relocates, never drops), o of objects joined
 * with b of buckets: pinned, or of an internal bucket (bucket_internal_name:
 * a name that starts with '.'): the gateway's multipart uploads in
 * progress, the mount's parts. One definition for reclaim and stat.
 */
#define SQL_KEPT "(o.pinned OR substr(b.name, 1, 1) = '.')"

enum stmt_id {
	S_BEGIN, S_BEGIN_READ, S_COMMIT, S_ROLLBACK, S_SAVEPOINT, S_ROLLBACK_TO, S_RELEASE,
	S_SETTING_GET, S_SETTING_SET, S_SETTING_ADD, S_SEG_COUNT, S_SEG_INSERT, S_SEG_TRIM,
	S_BUCKET_INSERT, S_BUCKET_ID, S_BUCKET_DELETE, S_BUCKET_HAS_OBJECTS,
	S_BUCKET_LIST,
	S_OBJ_LOOKUP, S_OBJ_GET, S_OBJ_EXTENTS, S_OBJ_INSERT, S_OBJ_REPLACE, S_OBJ_DELETE_ID,
	S_EXT_INSERT, S_EXT_OF_OBJ, S_SEG_LIVE_SUB, S_BUCKET_EXISTS, S_OBJ_KEY, S_OBJ_LOOKUP_FULL, S_OBJ_HEAD_BY_NAME, S_OBJ_HEAD_OR_UNDER, S_EXT_ADOPT, S_OBJ_GET_ID,
	S_OBJ_SETATTR, S_OBJ_SET_SESSION, S_OBJ_RENAME, S_OBJ_RENAME_PREFIX, S_PREFIX_HAS_OTHER, S_PREFIX_LONGEST, S_EXT_DELETE_OBJ, S_OBJ_VID, S_OBJ_DROP_STATE, S_OBJ_PIN,
	S_OBJ_RANGE, S_OBJ_RANGE_INCL, S_OBJ_WALK,
	S_OBJ_STATE,
	S_SEG_GET, S_SEG_LIST, S_SEG_LIVE_ADD, S_SEG_CLAIM, S_SEG_NEXT_FREE, S_SEG_NEXT_PARTIAL,
	S_SEG_REOPEN,
	S_SEG_SET_STATE, S_SEG_HAS_EXTENTS, S_SEG_FREE, S_SEG_VICTIM, S_SEG_VICTIM_EMPTY,
	S_SEG_COUNTS,
	S_SEG_OBJECTS, S_SEG_KEPT_SPACE, S_SEG_EXT_END, S_SEG_LEAST_USED,
	S_EXT_GET, S_EXT_MOVE, S_SEG_SET_LIVE, S_SEG_EXT_SPACE,
	S_SESSION_TOUCH, S_SEG_TOUCH, S_COUNTER_ADD, S_COUNTER_ONCE, S_COUNTER_GET, S_DATA_VERSION,
	S_STAT_OBJECTS, S_STAT_INTERNAL, S_STAT_TIERS, S_STAT_BUCKETS, S_STAT_SESSIONS, S_STAT_SEGS,
	S_G4_VICTIM,
	S_COUNT
};

static const char *const stmt_sql[S_COUNT] = {
	[S_BEGIN] = "BEGIN IMMEDIATE",
	[S_BEGIN_READ] = "BEGIN",
	[S_COMMIT] = "COMMIT",
	[S_ROLLBACK] = "ROLLBACK",
	[S_SAVEPOINT] = "SAVEPOINT put",
	[S_ROLLBACK_TO] = "ROLLBACK TO put",
	[S_RELEASE] = "RELEASE put",
	[S_SETTING_GET] = "SELECT value FROM settings WHERE name = ?1",
	[S_SETTING_SET] = "INSERT OR REPLACE INTO settings(name, value) VALUES(?1, ?2)",
	[S_SETTING_ADD] = "INSERT OR IGNORE INTO settings(name, value) VALUES(?1, ?2)",
	[S_SEG_COUNT] = "SELECT count(*) FROM segments",
	[S_SEG_INSERT] = "INSERT INTO segments(id, state, gen, live, used, last_access)"
			 " VALUES(?1, 0, 1, 0, 0, 0)",
	[S_SEG_TRIM] = "DELETE FROM segments WHERE id >= ?1 AND state = 0",
	[S_BUCKET_INSERT] = "INSERT INTO buckets(name, ctime) VALUES(?1, ?2)",
	[S_BUCKET_ID] = "SELECT id FROM buckets WHERE name = ?1",
	[S_BUCKET_DELETE] = "DELETE FROM buckets WHERE id = ?1",
	[S_BUCKET_HAS_OBJECTS] = "SELECT 1 FROM objects WHERE bucket = ?1 LIMIT 1",
	[S_BUCKET_LIST] = "SELECT name, ctime FROM buckets ORDER BY name",
	/* Column 4: whether a put may replace the row in place (cat_put_in_tx). */
	[S_OBJ_LOOKUP] = "SELECT id, vid, etag, pinned, tier = 0 AND g4_vid = 0 AND g4_key IS NULL,"
			 " session FROM objects WHERE bucket = ?1 AND key = ?2",
	[S_OBJ_GET] = "SELECT " OBJ_COLS " FROM objects o WHERE o.bucket = ?1 AND o.key = ?2",
	[S_OBJ_EXTENTS] = "SELECT seq, segment, gen, offset, length, crc, obj_off, hvid, hseq,"
			  " crcs FROM extents WHERE object = ?1 ORDER BY seq",
	[S_OBJ_INSERT] = "INSERT INTO objects(bucket, key, vid, size, etag, crc32c,"
			 " content_type, meta, mtime, session, tier, pinned, mode, uid, gid,"
			 " atime, ctime, kind) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 0,"
			 " ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
	/*
	 * S_OBJ_INSERT's row over row ?18 of the same bucket, key and session,
	 * hot and never in G4 (so no trigger has anything to do): the columns
	 * no index holds, and those of G4 a new row starts with. A column added
	 * to objects is set here too (test_catalog: test_object_replace_in_place).
	 */
	[S_OBJ_REPLACE] = "UPDATE objects SET vid = ?3, size = ?4, etag = ?5, crc32c = ?6,"
			  " content_type = ?7, meta = ?8, mtime = ?9, pinned = ?11, mode = ?12,"
			  " uid = ?13, gid = ?14, atime = ?15, ctime = ?16, kind = ?17,"
			  " g4_attempts = 0, g4_etag = NULL WHERE id = ?18",
	[S_OBJ_DELETE_ID] = "DELETE FROM objects WHERE id = ?1",
	[S_EXT_INSERT] = "INSERT INTO extents(object, seq, segment, gen, offset, length,"
			 " crc, obj_off, hvid, hseq, crcs)"
			 " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	[S_EXT_OF_OBJ] = "SELECT segment, length FROM extents WHERE object = ?1",
	[S_SEG_LIVE_SUB] = "UPDATE segments SET live = max(live - ?2, 0) WHERE id = ?1",
	[S_BUCKET_EXISTS] = "SELECT 1 FROM buckets WHERE id = ?1",
	[S_OBJ_KEY] = "SELECT bucket, key FROM objects WHERE id = ?1",
	[S_OBJ_GET_ID] = "SELECT vid, size, (SELECT count(*) FROM extents WHERE object = ?1)"
			 " FROM objects WHERE id = ?1",
	[S_OBJ_HEAD_BY_NAME] = "SELECT " OBJ_COLS " FROM buckets b JOIN objects o ON o.bucket = b.id"
			       " WHERE b.name = ?1 AND o.key = ?2",
	/* Object ?2, then the first key in [?3, ?4): two index probes, one row each. */
	[S_OBJ_HEAD_OR_UNDER] = "SELECT * FROM (SELECT " OBJ_COLS " FROM buckets b JOIN objects o"
				" ON o.bucket = b.id WHERE b.name = ?1 AND o.key = ?2)"
				" UNION ALL SELECT * FROM (SELECT " OBJ_COLS " FROM buckets b"
				" JOIN objects o ON o.bucket = b.id WHERE b.name = ?1"
				" AND o.key >= ?3 AND o.key < ?4 ORDER BY o.key LIMIT 1)",
	[S_OBJ_SETATTR] = "UPDATE objects SET mode = coalesce(?3, mode), uid = coalesce(?4, uid),"
			  " gid = coalesce(?5, gid), atime = coalesce(?6, atime),"
			  " mtime = coalesce(?7, mtime), ctime = ?8 WHERE bucket = ?1 AND key = ?2",
	[S_OBJ_SET_SESSION] = "UPDATE objects SET session = ?3 WHERE bucket = ?1 AND key = ?2",
	[S_OBJ_RENAME] = "UPDATE objects SET key = ?3, ctime = ?4 WHERE bucket = ?1 AND key = ?2",
	/* Every key under prefix ?2 moves under prefix ?3; ?4 bounds the old prefix. */
	[S_OBJ_RENAME_PREFIX] = "UPDATE objects SET key = ?3 || substr(key, length(?2) + 1), ctime = ?5"
				" WHERE bucket = ?1 AND key >= ?2 AND key < ?4",
	[S_PREFIX_HAS_OTHER] = "SELECT 1 FROM objects WHERE bucket = ?1 AND key > ?2 AND key < ?3"
			       " LIMIT 1",
	[S_PREFIX_LONGEST] = "SELECT max(length(CAST(key AS BLOB))) FROM objects"
			     " WHERE bucket = ?1 AND key >= ?2 AND key < ?3",
	[S_EXT_ADOPT] = "UPDATE extents SET object = ?2, seq = seq + ?3, obj_off = obj_off + ?4"
			" WHERE object = ?1",
	/* The reader's one query: object and extents in one implicit read
	 * transaction, so they always belong together. */
	[S_OBJ_LOOKUP_FULL] = "SELECT " OBJ_COLS ","
			      " e.seq, e.segment, e.gen, e.offset, e.length, e.crc, e.obj_off,"
			      " e.hvid, e.hseq, e.crcs"
			      " FROM buckets b JOIN objects o ON o.bucket = b.id"
			      " LEFT JOIN extents e ON e.object = o.id"
			      " WHERE b.name = ?1 AND o.key = ?2 ORDER BY e.seq",
	[S_EXT_DELETE_OBJ] = "DELETE FROM extents WHERE object = ?1",
	[S_OBJ_VID] = "SELECT vid FROM objects WHERE id = ?1",
	[S_OBJ_DROP_STATE] = "SELECT vid, tier, g4_vid = vid, key = session FROM objects WHERE id = ?1",
	[S_OBJ_PIN] = "UPDATE objects SET pinned = ?3 WHERE bucket = ?1 AND key = ?2",
	[S_OBJ_RANGE] = "SELECT " OBJ_COLS " FROM objects o WHERE o.bucket = ?1 AND o.key > ?2"
			" AND o.key < ?3 ORDER BY o.key LIMIT ?4",
	[S_OBJ_RANGE_INCL] = "SELECT " OBJ_COLS " FROM objects o WHERE o.bucket = ?1"
			     " AND o.key >= ?2 AND o.key < ?3 ORDER BY o.key LIMIT ?4",
	[S_OBJ_WALK] = "SELECT o.id, o.bucket, b.name, o.key FROM objects o"
		       " JOIN buckets b ON b.id = o.bucket WHERE o.id > ?1 ORDER BY o.id LIMIT 256",
	/* A batch lookup's probe: two columns off the (bucket, key) index. */
	[S_OBJ_STATE] = "SELECT tier, size FROM objects WHERE bucket = ?1 AND key = ?2",
	[S_SEG_GET] = "SELECT id, state, gen, live, used, last_access FROM segments WHERE id = ?1",
	[S_SEG_LIST] = "SELECT id, state, gen, live, used, last_access FROM segments ORDER BY id",
	[S_SEG_LIVE_ADD] = "UPDATE segments SET live = live + ?3, last_access = max(last_access, ?4)"
			   " WHERE id = ?1 AND gen = ?2 AND state IN (1, 2, 3)",
	[S_SEG_CLAIM] = "UPDATE segments SET state = 1, used = 0, live = 0, last_access = ?2"
			" WHERE id = ?1 AND state = 0 RETURNING gen",
	[S_SEG_NEXT_FREE] = "SELECT id FROM segments WHERE state = 0 AND id > ?1 ORDER BY id LIMIT 1",
	[S_SEG_NEXT_PARTIAL] = "SELECT id, used FROM segments WHERE state = 2 AND used > 0"
			       " AND used <= ?2 AND id > ?1 ORDER BY id LIMIT 1",
	[S_SEG_REOPEN] = "UPDATE segments SET state = 1, last_access = ?3"
			 " WHERE id = ?1 AND state = 2 AND used = ?2 RETURNING gen",
	[S_SEG_SET_STATE] = "UPDATE segments SET state = ?3,"
			    " used = CASE WHEN ?4 < 0 THEN used ELSE ?4 END"
			    " WHERE id = ?1 AND state = ?2",
	[S_SEG_HAS_EXTENTS] = "SELECT 1 FROM extents WHERE segment = ?1 LIMIT 1",
	[S_SEG_FREE] = "UPDATE segments SET state = 0, gen = gen + 1, live = 0, used = 0"
		       " WHERE id = ?1 RETURNING gen",
	[S_SEG_VICTIM] = "SELECT id FROM segments WHERE state = 2"
			 " ORDER BY live > 0, last_access, id LIMIT 1",
	[S_SEG_VICTIM_EMPTY] = "SELECT id FROM segments WHERE state = 2 AND live = 0"
			       " ORDER BY last_access, id LIMIT 1",
	[S_SEG_COUNTS] = "SELECT state, count(*) FROM segments GROUP BY state",
	[S_SEG_OBJECTS] = "SELECT DISTINCT o.id, o.vid, " SQL_KEPT
			  " FROM extents e JOIN objects o ON o.id = e.object"
			  " JOIN buckets b ON b.id = o.bucket WHERE e.segment = ?1",
	/* What relocating a segment's kept objects copies: seg_extent_space()
	 * of each of their extents in it. */
	[S_SEG_KEPT_SPACE] = "SELECT coalesce(sum((?2 + e.length + ?3 - 1) / ?3 * ?3), 0)"
			     " FROM extents e JOIN objects o ON o.id = e.object"
			     " JOIN buckets b ON b.id = o.bucket"
			     " WHERE e.segment = ?1 AND " SQL_KEPT,
	/* Where the last extent anyone committed in a segment ends. */
	[S_SEG_EXT_END] = "SELECT coalesce(max(offset + (?2 + length + ?3 - 1) / ?3 * ?3), 0)"
			  " FROM extents WHERE segment = ?1",
	/* The part-full sealed segment with the most room (S_SEG_NEXT_PARTIAL's). */
	[S_SEG_LEAST_USED] = "SELECT min(used) FROM segments WHERE state = 2 AND used > 0",
	[S_EXT_GET] = "SELECT segment, gen, offset, length FROM extents WHERE object = ?1 AND seq = ?2",
	[S_EXT_MOVE] = "UPDATE extents SET segment = ?3, gen = ?4, offset = ?5"
		       " WHERE object = ?1 AND seq = ?2",
	[S_SEG_SET_LIVE] = "UPDATE segments SET live = ?2 WHERE id = ?1",
	/* What fsck counts toward a segment: extents of its generation, of
	 * objects that are not cold (seg_extent_space() of each). */
	[S_SEG_EXT_SPACE] = "SELECT coalesce(sum((?3 + e.length + ?4 - 1) / ?4 * ?4), 0)"
			    " FROM extents e JOIN objects o ON o.id = e.object"
			    " WHERE e.segment = ?1 AND e.gen = ?2 AND o.tier != 2",
	[S_SESSION_TOUCH] = "INSERT INTO sessions(bucket, name, last_access) VALUES(?1, ?2, ?3)"
			    " ON CONFLICT(bucket, name) DO UPDATE SET"
			    " last_access = max(last_access, excluded.last_access)",
	[S_SEG_TOUCH] = "UPDATE segments SET last_access = max(last_access, ?2) WHERE id = ?1",
	[S_COUNTER_ADD] = "INSERT INTO counters(name, value) VALUES(?1, ?2)"
			  " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
	[S_COUNTER_ONCE] = "INSERT OR IGNORE INTO counters(name, value) VALUES(?1, 1)",
	[S_COUNTER_GET] = "SELECT value FROM counters WHERE name = ?1",
	[S_DATA_VERSION] = "PRAGMA data_version",
	/* What a user sees: not the objects of internal buckets (a multipart
	 * upload's parts, the mount's), which pinned_internal counts. */
	[S_STAT_OBJECTS] = "SELECT count(*), coalesce(sum(o.size), 0), coalesce(sum(o.pinned), 0)"
			   " FROM objects o JOIN buckets b ON b.id = o.bucket"
			   " WHERE substr(b.name, 1, 1) <> '.'",
	/* Kept as pinned, not pinned themselves (kvt_store_stat.pinned_internal). */
	[S_STAT_INTERNAL] = "SELECT count(*) FROM objects o JOIN buckets b ON b.id = o.bucket"
			    " WHERE " SQL_KEPT " AND NOT o.pinned",
	[S_STAT_TIERS] = "SELECT o.tier, count(*) FROM objects o JOIN buckets b ON b.id = o.bucket"
			 " WHERE substr(b.name, 1, 1) <> '.' GROUP BY o.tier",
	/* Not the internal ones (".uploads", ".fuse"): no listing shows them. */
	[S_STAT_BUCKETS] = "SELECT count(*) FROM buckets WHERE substr(name, 1, 1) <> '.'",
	/* A session's row outlives its last object (its access time, for the
	 * demoter): only one that still has an object is counted. */
	[S_STAT_SESSIONS] = "SELECT count(*) FROM sessions s JOIN buckets b ON b.id = s.bucket"
			    " WHERE substr(b.name, 1, 1) <> '.' AND EXISTS(SELECT 1 FROM objects o"
			    " WHERE o.bucket = s.bucket AND o.session = s.name)",
	[S_STAT_SEGS] = "SELECT coalesce(sum(live), 0), count(*) FROM segments",
	/* Reclaim's look at each object of a victim, at every demoter pass
	 * (cat_g4_victim): not one of the G4 statements prepared per call. */
	[S_G4_VICTIM] = "SELECT b.name, o.key, o.session, o.g4_vid = o.vid"
			" FROM objects o JOIN buckets b ON b.id = o.bucket"
			" WHERE o.id = ?1 AND o.vid = ?2",
};

struct cat {
	sqlite3 *db;
	sqlite3_stmt *stmt[S_COUNT];
	int writing;		/* holds cat_write_lock */
	int disk_full;		/* the last write found its file system full */
	unsigned *wal_frames;	/* cat_watch_wal(), or NULL */
};

/*
 * Write transactions of one process take turns on this mutex before they ask
 * SQLite. Without it, threads that find the write lock taken go to SQLite's
 * busy handler, which sleeps 1 to 100 ms at a time however soon the lock
 * frees: concurrent PUTs spent most of their time asleep (kvtier bench
 * engine, 8 in flight). Between processes, cat_busy() waits instead.
 */
static pthread_mutex_t cat_write_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Another process holds the write lock: a commit takes about 100 us, so
 * poll often at first, then back off; give up after about 30 s.
 */
static int cat_busy(void *arg, int n)
{
	struct timespec ts = { 0, n < 10 ? 20000 : n < 100 ? 200000 : 2000000 };

	(void)arg;
	if (n > 15100)
		return 0;
	nanosleep(&ts, NULL);
	return 1;
}

/* When a full disk was last logged: it is said once per 10 s, not per commit. */
static int64_t cat_full_logged;
/* The same for a damaged catalog, which every query after may meet. */
static int64_t cat_damage_logged;
/* Set for good once any query of this process met a damaged page. */
static int cat_damage_flag;
/* Set when a write of this process found the catalog's file system full,
 * cleared by the next commit: cat_full_seen(). */
static int cat_full_flag;

/*
 * -EMFILE or -ENFILE when the file SQLite could not open failed for want of
 * a descriptor, else 0. SQLITE_CANTOPEN says neither: a gateway at its
 * open-file limit logged its catalog as missing, or as not writable.
 */
static int cat_out_of_fds(struct cat *c)
{
	int e = sqlite3_system_errno(c->db);

	return e == EMFILE || e == ENFILE ? -e : 0;
}

/* Maps an SQLite result code to a negative errno: one place for it. */
static int cat_errno(struct cat *c, int rc, const char *what)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return 0;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		log_err(0, "catalog busy during %s: %s", what, sqlite3_errmsg(c->db));
		return -EBUSY;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_FULL:
		c->disk_full = 1;
		__atomic_store_n(&cat_full_flag, 1, __ATOMIC_RELAXED);
		if (log_every(&cat_full_logged, 10))
			log_err(0, "catalog cannot grow during %s: the file system holding '%s' is full",
				what, sqlite3_db_filename(c->db, "main"));
		return -ENOSPC;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		/* -EUCLEAN, as file systems answer for their own damage: not an
		 * I/O error a retry may get past, nor a damaged extent. */
		__atomic_store_n(&cat_damage_flag, 1, __ATOMIC_RELAXED);
		if (log_every(&cat_damage_logged, 10))
			log_err(0, "the catalog '%s' is damaged (%s, during %s): see kvtier fsck",
				sqlite3_db_filename(c->db, "main"), sqlite3_errmsg(c->db), what);
		return -EUCLEAN;
	case SQLITE_READONLY:
		/* No handle: cat_open_readonly() refused, and said why. */
		if (!c->db || sqlite3_db_readonly(c->db, "main") == 1)
			return -EROFS;	/* a store opened read-only: the caller says so */
		log_err(0, "catalog cannot be written during %s: %s", what, sqlite3_errmsg(c->db));
		return -EACCES;
	case SQLITE_CANTOPEN:
	case SQLITE_PERM:
		if (cat_out_of_fds(c)) {
			log_err(cat_out_of_fds(c), "catalog cannot open a file during %s", what);
			return cat_out_of_fds(c);
		}
		log_err(0, "catalog cannot be written during %s: %s", what, sqlite3_errmsg(c->db));
		return -EACCES;
	default:
		if (sqlite3_extended_errcode(c->db) == SQLITE_IOERR_SHMSIZE) {
			c->disk_full = 1;
			__atomic_store_n(&cat_full_flag, 1, __ATOMIC_RELAXED);
			log_err(0, "catalog cannot be opened: no room for '%s-shm' (file system full)",
				sqlite3_db_filename(c->db, "main"));
			return -ENOSPC;
		}
		log_err(0, "catalog error during %s: %s", what, sqlite3_errmsg(c->db));
		return -EIO;
	}
}

/* The prepared statement id, reset and unbound, ready for binds. */
static sqlite3_stmt *cat_stmt(struct cat *c, enum stmt_id id)
{
	sqlite3_stmt *s = c->stmt[id];

	if (!s) {
		if (sqlite3_prepare_v3(c->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
				       &s, NULL) != SQLITE_OK) {
			log_err(0, "cannot prepare '%s': %s", stmt_sql[id], sqlite3_errmsg(c->db));
			return NULL;
		}
		c->stmt[id] = s;
	}
	return s;
}

/* Steps a statement that returns no rows (or ignores them) and resets it. */
static int cat_exec_stmt(struct cat *c, sqlite3_stmt *s, const char *what)
{
	int rc = sqlite3_step(s);

	while (rc == SQLITE_ROW)
		rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return cat_errno(c, rc, what);
}

static void cat_done(sqlite3_stmt *s)
{
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
}

/* Row exists? 0, -ENOENT or an error. The statement takes one integer. */
static int cat_exists(struct cat *c, enum stmt_id id, int64_t arg)
{
	sqlite3_stmt *s = cat_stmt(c, id);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, arg);
	rc = sqlite3_step(s);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "exists");
}

static int cat_exec(struct cat *c, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(c->db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK) {
		log_err(0, "catalog: %s", msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return cat_errno(c, rc, "exec");
	}
	return 0;
}

/* PRAGMA user_version, or -1 if it cannot be read. */
static int cat_schema_version(struct cat *c)
{
	sqlite3_stmt *s = NULL;
	int version = -1;

	if (sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW)
		version = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	return version;
}

static int cat_migrate(struct cat *c)
{
	sqlite3_stmt *s = NULL;
	int version = 0, rc;

	/*
	 * Up to date (every connection but a new store's first): no write
	 * transaction. Each new thread's connection took the write lock here,
	 * so it waited for whatever write transaction ran, a group commit
	 * included, before its first operation.
	 */
	version = cat_schema_version(c);
	if (version == (int)ARRAY_SIZE(migrations))
		return 0;
	/*
	 * An older kvtier's catalog on a read-only file system cannot be
	 * brought up to date, and this kvtier's queries need the columns the
	 * migrations add: refused saying so ("attempt to write a readonly
	 * database" before). A newer one is refused below either way.
	 */
	if (version >= 0 && version < (int)ARRAY_SIZE(migrations) &&
	    sqlite3_db_readonly(c->db, "main") == 1) {
		log_err(0, "the catalog's schema is version %d, an older kvtier's: this kvtier"
			" (%d) upgrades it at its first open, which its read-only file system"
			" does not allow; open the store once where it can be written, or read"
			" it with the kvtier that made it", version, (int)ARRAY_SIZE(migrations));
		return -EROFS;
	}
	version = 0;
	rc = cat_exec(c, "BEGIN IMMEDIATE");
	if (rc < 0)
		return rc;
	if (sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW)
		version = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	if (version > (int)ARRAY_SIZE(migrations)) {
		log_err(0, "catalog schema version %d is newer than this kvtier (%d)",
			version, (int)ARRAY_SIZE(migrations));
		cat_exec(c, "ROLLBACK");
		return -EPROTO;
	}
	for (; version < (int)ARRAY_SIZE(migrations); version++) {
		char pragma[64];

		rc = cat_exec(c, migrations[version]);
		if (rc < 0)
			goto fail;
		snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", version + 1);
		rc = cat_exec(c, pragma);
		if (rc < 0)
			goto fail;
	}
	return cat_exec(c, "COMMIT");
fail:
	cat_exec(c, "ROLLBACK");
	return rc;
}

static pthread_once_t cat_library_once = PTHREAD_ONCE_INIT;

/*
 * SQLite's process-wide settings, before its first use. Without memory
 * statistics: with them every sqlite3_malloc and sqlite3_free of every
 * connection takes one global mutex. During a trace replay through the
 * mount, that mutex had 48% of the futex waits of kvtier-fuse's threads
 * (perf, 40 s): a lookup behind a thread that read many catalog pages
 * waited milliseconds whenever that thread was preempted holding it.
 * Without the statistics those waits are gone. An application that set
 * SQLite up before us keeps its settings (sqlite3_config then answers
 * SQLITE_MISUSE, which is fine).
 */
static void cat_library_init(void)
{
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
	sqlite3_initialize();
}

/*
 * A catalog on a read-only file system. With its -wal and -shm files there
 * (kvtier keeps them) SQLite reads it as usual. Without the -shm file
 * SQLite cannot read a WAL database on such a file system at all, since it
 * cannot make that file again. Then, if the WAL holds nothing (it is gone,
 * or empty as the last clean close leaves it), the database file alone is
 * the whole catalog: it is opened immutable. A WAL with commits in it
 * cannot be read without its -shm file: refused, saying why.
 */
static int cat_open_readonly(const char *path, sqlite3 **db)
{
	static const char hex[] = "0123456789ABCDEF";
	int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
	char wal[4200], shm[4200], uri[3 * 4096 + 32], *u = uri;
	struct stat sb;

	snprintf(wal, sizeof(wal), "%s-wal", path);
	snprintf(shm, sizeof(shm), "%s-shm", path);
	if (stat(wal, &sb) < 0) {
		if (errno != ENOENT)
			return SQLITE_CANTOPEN;
	} else if (access(shm, F_OK) == 0) {
		return sqlite3_open_v2(path, db, flags & ~SQLITE_OPEN_URI, NULL);
	} else if (sb.st_size > 0) {
		log_err(0, "the catalog's '%s' file is missing and its file system is read-only: "
			"the catalog's last changes, in '%s', cannot be read without it; "
			"open the store once where it can be written", shm, wal);
		return SQLITE_READONLY;
	}
	if (strlen(path) > 4096)
		return SQLITE_CANTOPEN;
	u += sprintf(u, "file:");
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		if (isalnum(*p) || strchr("/-._~", *p)) {
			*u++ = (char)*p;
		} else {
			*u++ = '%';
			*u++ = hex[*p >> 4];
			*u++ = hex[*p & 15];
		}
	}
	strcpy(u, "?immutable=1");
	return sqlite3_open_v2(uri, db, flags, NULL);
}

int cat_open(const char *path, unsigned flags, struct cat **out)
{
	struct cat *c = calloc(1, sizeof(*c));
	int readonly = (flags & CAT_READONLY) != 0;
	int rc;

	if (!c)
		return -ENOMEM;
	pthread_once(&cat_library_once, cat_library_init);
	rc = readonly ? cat_open_readonly(path, &c->db)
		      : sqlite3_open_v2(path, &c->db,
					SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
					(flags & CAT_CREATE ? SQLITE_OPEN_CREATE : 0), NULL);
	if (rc != SQLITE_OK) {
		rc = rc == SQLITE_CANTOPEN && !cat_out_of_fds(c) ? -ENOENT : cat_errno(c, rc, "open");
		goto fail;
	}
	sqlite3_busy_handler(c->db, cat_busy, NULL);
	/*
	 * The -wal and -shm files stay when the last connection closes. On a
	 * full disk the store must still open and serve reads; a first opener
	 * that has to create the -shm file again cannot (SQLITE_IOERR_SHMSIZE),
	 * and the WAL's room, kept while a process has the store open, lets
	 * small commits go on for a while.
	 *
	 * journal_size_limit: a WAL that grew while readers held checkpoints
	 * off (682 MB in kvtier bench engine, PUT 64K at 8 and 32 in flight)
	 * is cut back to 128 MiB when it next starts over, rather than keep
	 * its high-water size for good; 128 MiB is what it grows to between
	 * two checkpoints under steady writes (CKPT_WAL_FRAMES, store.c), so
	 * that steady state does not cut and grow it every time. And the last
	 * clean close, which checkpoints it all, leaves it empty, so that the
	 * store can be read on a read-only file system even without its -shm
	 * file.
	 */
	sqlite3_file_control(c->db, "main", SQLITE_FCNTL_PERSIST_WAL, &(int){ 1 });
	/*
	 * Checkpoints run in the store's flusher thread (cat_checkpoint), not
	 * inside whichever commit crosses the threshold: that commit would
	 * wait for an fsync.
	 *
	 * No mmap. A read transaction that finds the database changed by
	 * another connection resets its pager, and with mmap also unmaps the
	 * whole file (pagerBeginReadTransaction); the next page read maps it
	 * again and faults every page in. In a daemon where PUTs commit all
	 * the time that was every lookup and every GET: a munmap with its TLB
	 * shootdown to every CPU running the process, then a mmap. Read by
	 * pread, the same lookup of 24 keys beside one PUT stream answered at
	 * p50/p99 0.51-0.66/1.2-1.4 ms against 0.91-1.13/1.9-2.7 ms
	 * (docs/benchmarks.md, "Catalog reads without mmap"). A reader alone
	 * loses: kvt_object_head with 1,000,000 objects fell from 88k to 58k-72k
	 * per CPU-second, still above the 50k goal.
	 */
	rc = readonly ? 0 : cat_exec(c, "PRAGMA journal_mode = WAL;");
	if (rc == 0)
		rc = cat_exec(c, "PRAGMA synchronous = NORMAL;"
				 "PRAGMA wal_autocheckpoint = 0;"
				 "PRAGMA journal_size_limit = 134217728;"
				 "PRAGMA mmap_size = 0;"
				 "PRAGMA cache_size = -8192;"
				 "PRAGMA temp_store = MEMORY;");
	if (rc < 0)
		goto fail;
	rc = cat_migrate(c);
	if (rc < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	cat_close(c);
	return rc;
}

void cat_close(struct cat *c)
{
	if (!c)
		return;
	for (int i = 0; i < S_COUNT; i++)
		sqlite3_finalize(c->stmt[i]);
	sqlite3_close_v2(c->db);
	free(c);
}

static int cat_run(struct cat *c, enum stmt_id id, const char *what)
{
	sqlite3_stmt *s = cat_stmt(c, id);

	return s ? cat_exec_stmt(c, s, what) : -EIO;
}

int cat_begin(struct cat *c)
{
	int rc;

	pthread_mutex_lock(&cat_write_lock);
	c->disk_full = 0;
	rc = cat_run(c, S_BEGIN, "begin");
	if (rc < 0)
		pthread_mutex_unlock(&cat_write_lock);
	else
		c->writing = 1;
	return rc;
}

/* Ends a write transaction's turn. */
static void cat_write_done(struct cat *c)
{
	if (c->writing) {
		c->writing = 0;
		pthread_mutex_unlock(&cat_write_lock);
	}
}

int cat_begin_read(struct cat *c)
{
	return cat_run(c, S_BEGIN_READ, "begin");
}

int cat_commit(struct cat *c)
{
	int rc = cat_run(c, S_COMMIT, "commit");

	if (rc < 0)
		cat_rollback(c);
	else if (__atomic_load_n(&cat_full_flag, __ATOMIC_RELAXED))
		__atomic_store_n(&cat_full_flag, 0, __ATOMIC_RELAXED);
	cat_write_done(c);
	return rc;
}

void cat_rollback(struct cat *c)
{
	if (!sqlite3_get_autocommit(c->db))
		cat_run(c, S_ROLLBACK, "rollback");
	cat_write_done(c);
}

static int cat_wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
	struct cat *c = arg;

	(void)db;
	(void)name;
	__atomic_store_n(c->wal_frames, (unsigned)frames, __ATOMIC_RELAXED);
	return SQLITE_OK;
}

void cat_watch_wal(struct cat *c, unsigned *frames)
{
	c->wal_frames = frames;
	sqlite3_wal_hook(c->db, cat_wal_hook, c);
}

int cat_disk_full(const struct cat *c)
{
	return c->disk_full;
}

int cat_full_seen(void)
{
	return __atomic_load_n(&cat_full_flag, __ATOMIC_RELAXED);
}

int cat_damage_seen(void)
{
	return __atomic_load_n(&cat_damage_flag, __ATOMIC_RELAXED);
}

int cat_quick_check(struct cat *c, char *msg, size_t len)
{
	sqlite3_stmt *s = NULL;
	const char *r;
	int rc;

	msg[0] = '\0';
	rc = sqlite3_prepare_v2(c->db, "PRAGMA quick_check(1)", -1, &s, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		r = (const char *)sqlite3_column_text(s, 0);
		if (r && strcmp(r, "ok") == 0) {
			rc = 0;
		} else {
			snprintf(msg, len, "%s", r ? r : "no answer");
			__atomic_store_n(&cat_damage_flag, 1, __ATOMIC_RELAXED);
			rc = -EUCLEAN;
		}
	} else {
		/* Damage that stops the check itself: SQLite's message says what. */
		snprintf(msg, len, "%s", sqlite3_errmsg(c->db));
		rc = cat_errno(c, rc, "quick check");
	}
	sqlite3_finalize(s);
	for (char *p = msg; (p = strchr(p, '\n')); )
		*p = ' ';	/* one log line */
	return rc;
}

int cat_checkpoint(struct cat *c, int restart)
{
	int rc = sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);

	if (restart && (rc == SQLITE_OK || rc == SQLITE_BUSY)) {
		sqlite3_busy_timeout(c->db, 100);
		rc = sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_RESTART, NULL, NULL);
		sqlite3_busy_handler(c->db, cat_busy, NULL);
		if (rc == SQLITE_BUSY)
			return 1;
	}

	/* Busy: a reader or another checkpoint is in the way; next time. */
	return rc == SQLITE_OK || rc == SQLITE_BUSY ? 0 : cat_errno(c, rc, "checkpoint");
}

/* ---- settings and geometry --------------------------------------------- */

static int cat_setting_get(struct cat *c, const char *name, int64_t *value)
{
	sqlite3_stmt *s = cat_stmt(c, S_SETTING_GET);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*value = sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "setting");
}

static int cat_setting_set(struct cat *c, const char *name, int64_t value)
{
	sqlite3_stmt *s = cat_stmt(c, S_SETTING_SET);

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, value);
	return cat_exec_stmt(c, s, "setting");
}

int cat_store_id(struct cat *c, uint64_t *id)
{
	int64_t v = 0;
	int rc = cat_setting_get(c, "store_id", &v);

	if (rc == -ENOENT) {
		/* Two processes may both make one: the first row stays. */
		sqlite3_stmt *s = cat_stmt(c, S_SETTING_ADD);

		if (!s)
			return -EIO;
		sqlite3_bind_text(s, 1, "store_id", -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, (int64_t)((util_random64() >> 1) | 1));
		rc = cat_exec_stmt(c, s, "store id");
		if (rc == 0)
			rc = cat_setting_get(c, "store_id", &v);
	}
	*id = (uint64_t)v;
	return rc;
}

/*
 * The place is three settings rows beside store_id (no schema change: a
 * kvtier from before ignores them, and records nothing).
 */
static const char *const place_names[] = {
	"store_place_machine", "store_place_ino", "store_place_btime",
};

int cat_store_place(struct cat *c, struct cat_place *p)
{
	int64_t v[3] = { 0 };
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < 3; i++)
		rc = cat_setting_get(c, place_names[i], &v[i]);
	p->machine = (uint64_t)v[0];
	p->ino = (uint64_t)v[1];
	p->btime_ns = v[2];
	return rc;
}

/* The three rows of p in the open transaction: added, or replaced. */
static int cat_place_rows(struct cat *c, const struct cat_place *p, int replace)
{
	const int64_t v[3] = { (int64_t)p->machine, (int64_t)p->ino, p->btime_ns };
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < 3; i++) {
		sqlite3_stmt *s = cat_stmt(c, replace ? S_SETTING_SET : S_SETTING_ADD);

		if (!s)
			return -EIO;
		sqlite3_bind_text(s, 1, place_names[i], -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, v[i]);
		rc = cat_exec_stmt(c, s, "store place");
	}
	return rc;
}

int cat_store_place_set(struct cat *c, const struct cat_place *p, int replace)
{
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	rc = cat_place_rows(c, p, replace);
	if (rc < 0) {
		cat_rollback(c);
		return rc;
	}
	return cat_commit(c);
}

int cat_store_copied(struct cat *c, int *copied)
{
	int64_t v = 0;
	int rc = cat_setting_get(c, "store_id_copied", &v);

	*copied = rc == 0 && v;
	return rc == -ENOENT ? 0 : rc;
}

int cat_store_id_new(struct cat *c, const struct cat_place *p, uint64_t *id)
{
	uint64_t fresh = (util_random64() >> 1) | 1;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	rc = cat_setting_set(c, "store_id", (int64_t)fresh);
	if (rc == 0)
		rc = cat_setting_set(c, "store_id_copied", 1);
	/* What the old id left to do in G4 is the original's: its copies
	 * and manifests to delete, its multipart uploads to abort. */
	if (rc == 0)
		rc = cat_exec(c, "DELETE FROM g4_dead; DELETE FROM g4_uploads;");
	if (rc == 0)
		rc = cat_place_rows(c, p, 1);
	if (rc < 0) {
		cat_rollback(c);
		return rc;
	}
	rc = cat_commit(c);
	if (rc == 0)
		*id = fresh;
	return rc;
}

int cat_segment_count(struct cat *c, uint32_t *n)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_COUNT);
	int rc;

	if (!s)
		return -EIO;
	rc = sqlite3_step(s);
	*n = rc == SQLITE_ROW ? (uint32_t)sqlite3_column_int64(s, 0) : 0;
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : cat_errno(c, rc, "segment count");
}

int cat_segment_trim(struct cat *c, uint32_t nsegs)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_TRIM);

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, nsegs);
	return cat_exec_stmt(c, s, "segment trim");
}

int cat_init_geometry(struct cat *c, uint64_t segment_size, uint32_t nsegs)
{
	sqlite3_stmt *s;
	int64_t have_size = 0;
	uint32_t have = 0;
	int rc;

	/* Asked first, without the write lock: most opens change nothing, and
	 * a store on a read-only file system can change nothing. */
	if (cat_setting_get(c, "segment_size", &have_size) == 0 &&
	    (uint64_t)have_size == segment_size && cat_segment_count(c, &have) == 0 &&
	    have == nsegs)
		return 0;
	rc = cat_begin(c);
	if (rc < 0)
		return rc;
	rc = cat_setting_get(c, "segment_size", &have_size);
	if (rc == -ENOENT) {
		rc = cat_setting_set(c, "segment_size", (int64_t)segment_size);
		have_size = (int64_t)segment_size;
	}
	if (rc < 0)
		goto fail;
	if ((uint64_t)have_size != segment_size) {
		log_err(0, "the store was made with segment_size %lld; the configuration says %llu",
			(long long)have_size, (unsigned long long)segment_size);
		rc = -EINVAL;
		goto fail;
	}
	rc = cat_segment_count(c, &have);
	if (rc < 0)
		goto fail;
	/* Capacity may grow; shrinking would strand the objects in the tail. */
	if (have > nsegs) {
		log_err(0, "the store has %u segments; capacity now allows %u (shrinking is not supported)",
			have, nsegs);
		rc = -EINVAL;
		goto fail;
	}
	for (uint32_t i = have; i < nsegs; i++) {
		s = cat_stmt(c, S_SEG_INSERT);
		if (!s) {
			rc = -EIO;
			goto fail;
		}
		sqlite3_bind_int64(s, 1, i);
		rc = cat_exec_stmt(c, s, "segment insert");
		if (rc < 0)
			goto fail;
	}
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

/* ---- buckets ------------------------------------------------------------ */

int cat_bucket_create(struct cat *c, const char *name, int64_t ctime_ns)
{
	sqlite3_stmt *s = cat_stmt(c, S_BUCKET_INSERT);

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, ctime_ns);
	return cat_exec_stmt(c, s, "bucket create");
}

int cat_bucket_id(struct cat *c, const char *name, int64_t *id)
{
	sqlite3_stmt *s = cat_stmt(c, S_BUCKET_ID);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*id = sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "bucket");
}

int cat_bucket_delete(struct cat *c, const char *name)
{
	sqlite3_stmt *s;
	int64_t id;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	rc = cat_bucket_id(c, name, &id);
	if (rc < 0)
		goto fail;
	rc = cat_exists(c, S_BUCKET_HAS_OBJECTS, id);
	if (rc != -ENOENT) {
		rc = rc == 0 ? -ENOTEMPTY : rc;
		goto fail;
	}
	s = cat_stmt(c, S_BUCKET_DELETE);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, id);
	rc = cat_exec_stmt(c, s, "bucket delete");
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

int cat_bucket_list(struct cat *c, int (*fn)(void *, const char *, int64_t), void *arg)
{
	sqlite3_stmt *s = cat_stmt(c, S_BUCKET_LIST);
	int rc;

	if (!s)
		return -EIO;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (fn(arg, (const char *)sqlite3_column_text(s, 0), sqlite3_column_int64(s, 1)))
			break;
	}
	cat_done(s);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "bucket list");
}

/* ---- objects ------------------------------------------------------------ */

/* User metadata is stored as "name\0value\0name\0value\0". */
static int meta_encode(const struct kvt_meta *meta, size_t n, char **out, size_t *outlen)
{
	size_t len = 0, off = 0;
	char *buf;

	for (size_t i = 0; i < n; i++)
		len += strlen(meta[i].name) + strlen(meta[i].value) + 2;
	buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		size_t a = strlen(meta[i].name) + 1, b = strlen(meta[i].value) + 1;

		memcpy(buf + off, meta[i].name, a);
		memcpy(buf + off + a, meta[i].value, b);
		off += a + b;
	}
	*out = buf;
	*outlen = len;
	return 0;
}

static int meta_decode(const char *blob, size_t len, struct kvt_object *obj)
{
	size_t n = 0, off;

	for (off = 0; off < len; off++)
		n += blob[off] == '\0';
	n /= 2;
	if (n == 0)
		return 0;
	obj->meta = calloc(n, sizeof(*obj->meta));
	if (!obj->meta)
		return -ENOMEM;
	off = 0;
	for (size_t i = 0; i < n; i++) {
		obj->meta[i].name = strdup(blob + off);
		off += strlen(blob + off) + 1;
		obj->meta[i].value = strdup(blob + off);
		off += strlen(blob + off) + 1;
		obj->nmeta++;
		if (!obj->meta[i].name || !obj->meta[i].value)
			return -ENOMEM;
	}
	return 0;
}

static char *col_strdup(sqlite3_stmt *s, int col)
{
	const unsigned char *t = sqlite3_column_text(s, col);

	return t ? strdup((const char *)t) : NULL;
}

/*
 * Subtracts the space of object id's extents from their segments, drops
 * them. The space is summed per segment here: a GROUP BY in the query sorted
 * the extents in a temporary b-tree first, which made this function cost
 * 20,600 instructions for an object of one extent against 14,900
 * (callgrind; docs/benchmarks.md, "the fixed cost of a small PUT").
 */
static int cat_release_extents(struct cat *c, int64_t id)
{
	sqlite3_stmt *s = cat_stmt(c, S_EXT_OF_OBJ);
	int64_t *acc = NULL;	/* segment, space; segment, space; ... */
	size_t n = 0, cap = 0, i;
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t seg = sqlite3_column_int64(s, 0);
		uint64_t space = seg_extent_space((uint32_t)sqlite3_column_int64(s, 1));

		for (i = 0; i < n && acc[i] != seg; i += 2)
			;
		if (i == n) {
			if (UTIL_GROW(acc, n + 1, cap) < 0) {
				rc = SQLITE_NOMEM;
				break;
			}
			acc[n++] = seg;
			acc[n++] = 0;
		}
		acc[i + 1] += (int64_t)space;
	}
	cat_done(s);
	if (rc != SQLITE_DONE) {
		rc = cat_errno(c, rc, "extent space");
		goto out;
	}
	rc = 0;
	for (i = 0; i < n && rc == 0; i += 2) {
		s = cat_stmt(c, S_SEG_LIVE_SUB);
		if (!s) {
			rc = -EIO;
			break;
		}
		sqlite3_bind_int64(s, 1, acc[i]);
		sqlite3_bind_int64(s, 2, acc[i + 1]);
		rc = cat_exec_stmt(c, s, "segment live");
	}
	if (rc < 0)
		goto out;
	s = cat_stmt(c, S_EXT_DELETE_OBJ);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	sqlite3_bind_int64(s, 1, id);
	rc = cat_exec_stmt(c, s, "extent delete");
out:
	free(acc);
	return rc;
}

static int cat_delete_id(struct cat *c, int64_t id)
{
	sqlite3_stmt *s;
	int rc = cat_release_extents(c, id);

	if (rc < 0)
		return rc;
	s = cat_stmt(c, S_OBJ_DELETE_ID);
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	return cat_exec_stmt(c, s, "object delete");
}

/*
 * Writes the object row of p (meta already encoded): a new row, whose row id
 * goes to *id, or, if *id is not 0, over row *id (S_OBJ_REPLACE).
 */
static int cat_write_object(struct cat *c, const struct cat_put *p, const char *meta,
			    size_t metalen, int pinned, int64_t *id)
{
	sqlite3_stmt *s = cat_stmt(c, *id ? S_OBJ_REPLACE : S_OBJ_INSERT);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, p->bucket_id);
	sqlite3_bind_text(s, 2, p->key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, (int64_t)p->vid);
	sqlite3_bind_int64(s, 4, (int64_t)p->size);
	sqlite3_bind_text(s, 5, p->etag, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 6, p->crc32c);
	if (p->content_type)
		sqlite3_bind_text(s, 7, p->content_type, -1, SQLITE_STATIC);
	if (metalen)
		sqlite3_bind_blob(s, 8, meta, (int)metalen, SQLITE_STATIC);
	sqlite3_bind_int64(s, 9, p->mtime_ns);
	sqlite3_bind_text(s, 10, p->session, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 11, pinned);
	sqlite3_bind_int64(s, 12, p->posix.mode);
	sqlite3_bind_int64(s, 13, p->posix.uid);
	sqlite3_bind_int64(s, 14, p->posix.gid);
	sqlite3_bind_int64(s, 15, p->posix.atime_ns);
	sqlite3_bind_int64(s, 16, p->posix.ctime_ns);
	sqlite3_bind_int(s, 17, p->posix.kind);
	if (*id) {
		sqlite3_bind_int64(s, 18, *id);
		return cat_exec_stmt(c, s, "object replace");
	}
	rc = cat_exec_stmt(c, s, "object insert");
	if (rc == 0)
		*id = sqlite3_last_insert_rowid(c->db);
	return rc;
}

/* Inserts extents of object id and adds their space to their segments. */
static int cat_insert_extents(struct cat *c, int64_t id, const struct cat_extent *ext,
			      size_t n, int64_t when_ns)
{
	for (size_t i = 0; i < n; i++) {
		const struct cat_extent *e = &ext[i];
		uint64_t space = ALIGN_UP((uint64_t)SEG_HEADER_SIZE + e->length, SEG_ALIGN);
		sqlite3_stmt *s = cat_stmt(c, S_EXT_INSERT);
		int rc;

		if (!s)
			return -EIO;
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_int64(s, 2, e->seq);
		sqlite3_bind_int64(s, 3, e->segment);
		sqlite3_bind_int64(s, 4, (int64_t)e->gen);
		sqlite3_bind_int64(s, 5, (int64_t)e->offset);
		sqlite3_bind_int64(s, 6, e->length);
		sqlite3_bind_int64(s, 7, e->crc);
		sqlite3_bind_int64(s, 8, (int64_t)e->obj_off);
		sqlite3_bind_int64(s, 9, (int64_t)e->hvid);
		sqlite3_bind_int64(s, 10, e->hseq);
		if (e->nchunks > 0 && e->nchunks == seg_chunks(e->length, e->chunk0)) {
			uint8_t crcs[4 * (1 + SEG_CHUNKS_MAX)];

			for (int b = 0; b < 4; b++)
				crcs[b] = (uint8_t)(e->chunk0 >> (8 * b));
			for (uint32_t k = 0; k < e->nchunks; k++)
				for (int b = 0; b < 4; b++)
					crcs[4 * (k + 1) + b] = (uint8_t)(e->chunk_crc[k] >> (8 * b));
			sqlite3_bind_blob(s, 11, crcs, (int)(4 * (1 + e->nchunks)), SQLITE_TRANSIENT);
		} else {
			sqlite3_bind_null(s, 11);
		}
		rc = cat_exec_stmt(c, s, "extent insert");
		if (rc < 0)
			return rc;
		/* The segment must still be the generation the bytes went to. */
		s = cat_stmt(c, S_SEG_LIVE_ADD);
		if (!s)
			return -EIO;
		sqlite3_bind_int64(s, 1, e->segment);
		sqlite3_bind_int64(s, 2, (int64_t)e->gen);
		sqlite3_bind_int64(s, 3, (int64_t)space);
		sqlite3_bind_int64(s, 4, when_ns);
		rc = cat_exec_stmt(c, s, "segment live");
		if (rc < 0)
			return rc;
		if (sqlite3_changes(c->db) != 1) {
			log_err(0, "segment %u was reclaimed before its extents were committed",
				e->segment);
			return -ESTALE;
		}
	}
	return 0;
}

/*
 * Moves the extents of part objects, in order, to the end of object id
 * (which has nextents already) and drops the parts. The bytes stay where
 * they are; each part must still be the version its caller read.
 */
static int cat_adopt_parts(struct cat *c, int64_t id, size_t nextents, const int64_t *parts,
			   const uint64_t *part_vids, size_t nparts)
{
	int64_t seq = (int64_t)nextents, off = 0;

	for (size_t i = 0; i < nparts; i++) {
		sqlite3_stmt *s = cat_stmt(c, S_OBJ_GET_ID);
		int64_t size, count;
		int rc;

		if (!s)
			return -EIO;
		sqlite3_bind_int64(s, 1, parts[i]);
		rc = sqlite3_step(s);
		if (rc != SQLITE_ROW || (uint64_t)sqlite3_column_int64(s, 0) != part_vids[i]) {
			cat_done(s);
			return rc == SQLITE_ROW || rc == SQLITE_DONE ? -ESTALE : cat_errno(c, rc, "part");
		}
		size = sqlite3_column_int64(s, 1);
		count = sqlite3_column_int64(s, 2);
		cat_done(s);
		s = cat_stmt(c, S_EXT_ADOPT);
		if (!s)
			return -EIO;
		sqlite3_bind_int64(s, 1, parts[i]);
		sqlite3_bind_int64(s, 2, id);
		sqlite3_bind_int64(s, 3, seq);
		sqlite3_bind_int64(s, 4, off);
		rc = cat_exec_stmt(c, s, "adopt extents");
		if (rc < 0)
			return rc;
		s = cat_stmt(c, S_OBJ_DELETE_ID);
		if (!s)
			return -EIO;
		sqlite3_bind_int64(s, 1, parts[i]);
		rc = cat_exec_stmt(c, s, "part delete");
		if (rc < 0)
			return rc;
		seq += count;
		off += size;
	}
	return 0;
}

int cat_object_put(struct cat *c, const struct cat_put *p, int64_t *id_out, uint64_t *freed_vid)
{
	return cat_object_put_parts(c, p, NULL, NULL, 0, id_out, freed_vid);
}

/*
 * The body of a put, inside a write transaction the caller holds: replaces
 * any earlier version of the key (its extents give their space back) and
 * publishes p. On failure the transaction holds partial changes: the caller
 * rolls it (or a savepoint around it) back.
 */
static int cat_put_in_tx(struct cat *c, const struct cat_put *p, const int64_t *parts,
			 const uint64_t *part_vids, size_t nparts, int64_t *id_out,
			 uint64_t *freed_vid)
{
	sqlite3_stmt *s;
	char *meta = NULL;
	size_t metalen = 0;
	int64_t id, replace = 0;
	int pinned = !!p->pinned, rc;

	rc = meta_encode(p->meta, p->nmeta, &meta, &metalen);
	if (rc < 0)
		return rc;

	/* The bucket may have been deleted while the bytes were written. */
	rc = cat_exists(c, S_BUCKET_EXISTS, p->bucket_id);
	if (rc == 0 && p->bucket) {
		/* ... and its id given to another bucket since (ids are reused). */
		int64_t id_now;

		rc = cat_bucket_id(c, p->bucket, &id_now);
		if (rc == 0 && id_now != p->bucket_id)
			rc = -ENOENT;
	}
	if (rc < 0)
		goto out;

	s = cat_stmt(c, S_OBJ_LOOKUP);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	sqlite3_bind_int64(s, 1, p->bucket_id);
	sqlite3_bind_text(s, 2, p->key, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		id = sqlite3_column_int64(s, 0);
		if (freed_vid)
			*freed_vid = (uint64_t)sqlite3_column_int64(s, 1);
		if (p->keep_pin && sqlite3_column_int(s, 3))
			pinned = 1;
		/*
		 * A version that is hot, never went to G4 and stays in its
		 * session is replaced in place, keeping its row and id. A new
		 * row has a new id, and every index of objects holds the id: a
		 * put dirtied the index pages of the key and of the session
		 * twice over and two table pages: 10 pages of the WAL for each
		 * overwrite of a 64 KiB object, against 5 in place
		 * (docs/benchmarks.md, "the fixed cost of a small PUT"). The
		 * rest go the long way, so that the triggers record what G4
		 * holds of the version replaced.
		 */
		if (sqlite3_column_int(s, 4) && p->session &&
		    !strcmp((const char *)sqlite3_column_text(s, 5), p->session))
			replace = id;
		/* The condition sees the version this transaction replaces ("" for
		 * an ETag never set: NULL would say there is no object). */
		if (p->precondition) {
			const char *etag = (const char *)sqlite3_column_text(s, 2);

			rc = p->precondition(p->precondition_arg, etag ? etag : "");
		} else {
			rc = 0;
		}
		cat_done(s);
		if (rc < 0)
			goto out;
		if (p->if_none_match) {
			rc = -EEXIST;
			goto out;
		}
		rc = replace ? cat_release_extents(c, id) : cat_delete_id(c, id);
		if (rc < 0)
			goto out;
	} else {
		cat_done(s);
		if (rc != SQLITE_DONE) {
			rc = cat_errno(c, rc, "object lookup");
			goto out;
		}
		rc = p->precondition ? p->precondition(p->precondition_arg, NULL) : 0;
		if (rc < 0)
			goto out;
	}

	id = replace;
	rc = cat_write_object(c, p, meta, metalen, pinned, &id);
	if (rc < 0)
		goto out;
	if (p->pinned_out)
		*p->pinned_out = pinned;
	rc = cat_insert_extents(c, id, p->extents, p->nextents, p->mtime_ns);
	if (rc < 0)
		goto out;
	rc = cat_adopt_parts(c, id, p->nextents, parts, part_vids, nparts);
	if (rc < 0)
		goto out;
	rc = cat_touch_session(c, p->bucket_id, p->session, p->mtime_ns);
	if (rc == 0 && id_out)
		*id_out = id;
out:
	free(meta);
	return rc;
}

int cat_object_put_parts(struct cat *c, const struct cat_put *p, const int64_t *parts,
			 const uint64_t *part_vids, size_t nparts, int64_t *id_out,
			 uint64_t *freed_vid)
{
	int64_t id = 0;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	rc = cat_put_in_tx(c, p, parts, part_vids, nparts, &id, freed_vid);
	if (rc < 0) {
		cat_rollback(c);
		return rc;
	}
	rc = cat_commit(c);
	if (rc == 0 && id_out)
		*id_out = id;
	return rc;
}

int cat_object_put_group(struct cat *c, const struct cat_put *const *puts, size_t n, int *rcs)
{
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		/*
		 * Each put inside its own savepoint, so that one that fails (a
		 * precondition, If-None-Match, a bucket deleted meanwhile, a
		 * segment reclaimed) is undone alone and the others still
		 * commit, exactly as if each had its own transaction.
		 */
		rc = cat_run(c, S_SAVEPOINT, "savepoint");
		if (rc < 0)
			goto fail;
		rcs[i] = cat_put_in_tx(c, puts[i], NULL, NULL, 0, NULL, NULL);
		if (rcs[i] < 0) {
			/* Some errors (I/O, a full disk) end the whole transaction. */
			if (sqlite3_get_autocommit(c->db)) {
				rc = rcs[i];
				goto fail;
			}
			rc = cat_run(c, S_ROLLBACK_TO, "rollback to savepoint");
			if (rc < 0)
				goto fail;
		}
		rc = cat_run(c, S_RELEASE, "release savepoint");
		if (rc < 0)
			goto fail;
	}
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

/* A cat_object from the OBJ_COLS of a row. */
static int cat_object_from_row(sqlite3_stmt *s, struct cat_object **out)
{
	struct cat_object *co = calloc(1, sizeof(*co));
	struct kvt_object *o = co ? calloc(1, sizeof(*o)) : NULL;
	const char *etag;
	int rc;

	if (!o) {
		free(co);
		return -ENOMEM;
	}
	co->obj = o;
	co->id = sqlite3_column_int64(s, 0);
	co->bucket_id = sqlite3_column_int64(s, 12);
	o->posix.mode = (uint32_t)sqlite3_column_int64(s, 13);
	o->posix.uid = (uint32_t)sqlite3_column_int64(s, 14);
	o->posix.gid = (uint32_t)sqlite3_column_int64(s, 15);
	o->posix.atime_ns = sqlite3_column_int64(s, 16);
	o->posix.ctime_ns = sqlite3_column_int64(s, 17);
	o->posix.kind = sqlite3_column_int(s, 18);
	co->vid = (uint64_t)sqlite3_column_int64(s, 1);
	o->size = (uint64_t)sqlite3_column_int64(s, 2);
	etag = (const char *)sqlite3_column_text(s, 3);
	snprintf(o->etag, sizeof(o->etag), "%s", etag ? etag : "");
	o->crc32c = (uint32_t)sqlite3_column_int64(s, 4);
	o->content_type = col_strdup(s, 5);
	rc = meta_decode(sqlite3_column_blob(s, 6), (size_t)sqlite3_column_bytes(s, 6), o);
	o->mtime_ns = sqlite3_column_int64(s, 7);
	o->session = col_strdup(s, 8);
	o->tier = sqlite3_column_int(s, 9);
	o->pinned = sqlite3_column_int(s, 10);
	o->key = col_strdup(s, 11);
	if (rc < 0 || !o->key || !o->session) {
		cat_object_free(co);
		return -ENOMEM;
	}
	*out = co;
	return 0;
}

static int cat_extent_push(struct cat_object *co, size_t *cap, const struct cat_extent *e)
{
	if (UTIL_GROW(co->extents, co->nextents, *cap) < 0)
		return -ENOMEM;
	co->extents[co->nextents++] = *e;
	return 0;
}

/* The extent in columns col..col+9 (seq, segment, gen, offset, length, crc,
 * obj_off, hvid, hseq, crcs). */
static void cat_extent_from_row(sqlite3_stmt *s, int col, struct cat_extent *e)
{
	const uint8_t *crcs;
	int nbytes;

	e->seq = (uint32_t)sqlite3_column_int64(s, col);
	e->segment = (uint32_t)sqlite3_column_int64(s, col + 1);
	e->gen = (uint64_t)sqlite3_column_int64(s, col + 2);
	e->offset = (uint64_t)sqlite3_column_int64(s, col + 3);
	e->length = (uint32_t)sqlite3_column_int64(s, col + 4);
	e->crc = (uint32_t)sqlite3_column_int64(s, col + 5);
	e->obj_off = (uint64_t)sqlite3_column_int64(s, col + 6);
	e->hvid = (uint64_t)sqlite3_column_int64(s, col + 7);
	e->hseq = (uint32_t)sqlite3_column_int64(s, col + 8);
	/* Chunk checksums that do not fit the length are not used: the
	 * extent is verified whole, as one written before they existed. */
	crcs = sqlite3_column_blob(s, col + 9);
	nbytes = sqlite3_column_bytes(s, col + 9);
	e->nchunks = 0;
	e->chunk0 = 0;
	if (crcs && nbytes >= 8 && nbytes % 4 == 0 &&
	    nbytes <= (int)(4 * (1 + SEG_CHUNKS_MAX))) {
		uint32_t w[1 + SEG_CHUNKS_MAX], n = (uint32_t)nbytes / 4;

		for (uint32_t k = 0; k < n; k++)
			w[k] = (uint32_t)crcs[4 * k] | (uint32_t)crcs[4 * k + 1] << 8 |
			       (uint32_t)crcs[4 * k + 2] << 16 | (uint32_t)crcs[4 * k + 3] << 24;
		if (w[0] >= 1 && w[0] <= SEG_CHUNK && n - 1 == seg_chunks(e->length, w[0])) {
			e->chunk0 = w[0];
			e->nchunks = n - 1;
			memcpy(e->chunk_crc, w + 1, 4 * e->nchunks);
		}
	}
}

static int cat_extents_load(struct cat *c, struct cat_object *co)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_EXTENTS);
	size_t cap = 0;
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, co->id);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct cat_extent e;

		cat_extent_from_row(s, 0, &e);
		if (cat_extent_push(co, &cap, &e) < 0) {
			cat_done(s);
			return -ENOMEM;
		}
	}
	cat_done(s);
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "extents");
}

void cat_object_free(struct cat_object *co)
{
	if (!co)
		return;
	kvt_object_free(co->obj);
	free(co->extents);
	free(co);
}

int cat_object_get(struct cat *c, int64_t bucket_id, const char *key, int with_extents,
		   struct cat_object **out)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_GET);
	struct cat_object *co = NULL;
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		cat_done(s);
		return rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "object get");
	}
	rc = cat_object_from_row(s, &co);
	cat_done(s);
	if (rc == 0 && with_extents)
		rc = cat_extents_load(c, co);
	if (rc < 0) {
		cat_object_free(co);
		return rc;
	}
	*out = co;
	return 0;
}

/*
 * Whether the extents of a hot object hold it whole: in order, from byte 0
 * to its size, no gap, no overlap. Anything else is a damaged catalog (a
 * row deleted or changed by hand, a bug in compose or relocation), and a
 * reader must fail rather than return a short object or other bytes: with
 * a row missing `kvtier get` exited 0 with the wrong bytes. Cold objects
 * have no extents here. No kvtier writes a tier past cold (a recall makes a
 * cold object hot in one commit): one is damage, or a newer kvtier's, and
 * read as cold it said "No data available".
 */
static int cat_extents_whole(const struct cat_object *co, const char *bucket)
{
	const struct kvt_object *o = co->obj;
	uint64_t off = 0;
	size_t i;

	if ((unsigned)o->tier > KVT_TIER_COLD) {
		log_err(0, "'%s/%s': tier %d in the catalog is none this kvtier knows (0 hot,"
			" 1 demoting, 2 cold); kvtier fsck tells what is damaged", bucket, o->key,
			(int)o->tier);
		return -EIO;
	}
	if (o->tier != KVT_TIER_HOT && o->tier != KVT_TIER_DEMOTING)
		return 0;
	for (i = 0; i < co->nextents; i++) {
		const struct cat_extent *e = &co->extents[i];

		if (e->seq != i || e->obj_off != off || e->length == 0)
			break;
		off += e->length;
	}
	if (i == co->nextents && off == o->size)
		return 0;
	log_err(0, "'%s/%s': the catalog's extents do not hold the object whole (%zu of %zu"
		" extents in order, %llu of %llu bytes); kvtier fsck tells what is damaged",
		bucket, o->key, i, co->nextents, (unsigned long long)off,
		(unsigned long long)o->size);
	return -EIO;
}

int cat_object_lookup(struct cat *c, const char *bucket, const char *key, int with_extents,
		      struct cat_object **out)
{
	sqlite3_stmt *s = cat_stmt(c, with_extents ? S_OBJ_LOOKUP_FULL : S_OBJ_HEAD_BY_NAME);
	struct cat_object *co = NULL;
	size_t cap = 0;
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, bucket, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct cat_extent e;

		if (!co && cat_object_from_row(s, &co) < 0)
			break;
		if (!with_extents || sqlite3_column_type(s, OBJ_NCOLS) == SQLITE_NULL)
			continue;	/* an empty object has no extents */
		cat_extent_from_row(s, OBJ_NCOLS, &e);
		if (cat_extent_push(co, &cap, &e) < 0)
			break;
	}
	cat_done(s);
	if (rc != SQLITE_DONE) {
		cat_object_free(co);
		return rc == SQLITE_ROW ? -ENOMEM : cat_errno(c, rc, "object lookup");
	}
	if (!co)
		return -ENOENT;
	if (with_extents && cat_extents_whole(co, bucket) < 0) {
		cat_object_free(co);
		return -EIO;
	}
	*out = co;
	return 0;
}

int cat_object_lookup_or_under(struct cat *c, const char *bucket, const char *key,
			       const char *under, const char *under_upper, struct cat_object **out)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_HEAD_OR_UNDER);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, bucket, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, under, -1, SQLITE_STATIC);	/* NULL: no range */
	sqlite3_bind_text(s, 4, under_upper, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		rc = cat_object_from_row(s, out) < 0 ? -ENOMEM : 0;
	else if (rc == SQLITE_DONE)
		rc = -ENOENT;
	else
		rc = cat_errno(c, rc, "object lookup");
	cat_done(s);
	return rc;
}

int cat_object_states(struct cat *c, int64_t bucket_id, const char *const *keys, size_t n,
		      struct kvt_key_state *out)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_STATE);
	int rc = 0;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	for (size_t i = 0; i < n && rc == 0; i++) {
		int r;

		memset(&out[i], 0, sizeof(out[i]));
		if (!keys[i])
			continue;
		sqlite3_bind_text(s, 2, keys[i], -1, SQLITE_STATIC);
		r = sqlite3_step(s);
		if (r == SQLITE_ROW) {
			out[i].found = 1;
			out[i].tier = sqlite3_column_int(s, 0);
			out[i].size = (uint64_t)sqlite3_column_int64(s, 1);
		} else if (r != SQLITE_DONE) {
			rc = cat_errno(c, r, "object states");
		}
		sqlite3_reset(s);
	}
	cat_done(s);
	return rc;
}

int cat_object_delete(struct cat *c, int64_t bucket_id, const char *key,
		      int (*precondition)(void *arg, const char *etag), void *arg)
{
	sqlite3_stmt *s;
	int64_t id;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_stmt(c, S_OBJ_LOOKUP);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	id = sqlite3_column_int64(s, 0);
	if (rc != SQLITE_ROW) {
		cat_done(s);
		rc = rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "object lookup");
		goto fail;
	}
	rc = precondition ? precondition(arg, (const char *)sqlite3_column_text(s, 2)) : 0;
	cat_done(s);
	if (rc == 0)
		rc = cat_delete_id(c, id);
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

static int cat_g4_drop_to_cold(struct cat *c, int64_t id, uint64_t vid);

int cat_object_drop(struct cat *c, int64_t id, uint64_t vid, int keep_session_state,
		    int g4_proven)
{
	sqlite3_stmt *s;
	int tier, in_g4, plain_cache;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	/*
	 * Reclaim decided from what it read before this transaction; decide
	 * again from the row as it is now. Meanwhile the migrator may have
	 * turned the object cold (its extents are gone from the victim: nothing
	 * to drop) or a new demotion may have begun.
	 */
	s = cat_stmt(c, S_OBJ_DROP_STATE);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	/* Overwritten or deleted since reclaim looked: nothing to drop. */
	if (rc != SQLITE_ROW || (uint64_t)sqlite3_column_int64(s, 0) != vid) {
		cat_done(s);
		rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "object vid");
		goto fail;
	}
	tier = sqlite3_column_int(s, 1);
	in_g4 = sqlite3_column_int(s, 2);
	plain_cache = sqlite3_column_int(s, 3);
	cat_done(s);
	if (tier != KVT_TIER_HOT && tier != KVT_TIER_DEMOTING) {
		rc = -ENOENT;	/* cold or being recalled: holds no extent of the victim */
		goto fail;
	}
	/*
	 * G4 holds this version verified: it goes cold, not away (migrate.c),
	 * but only on a copy reclaim has just proven to hold its bytes. A
	 * recalled object keeps g4_vid, and G4's copy may have been damaged or
	 * put over since: cold on it, the object was lost. Not proven (G4 took
	 * it since reclaim looked): reclaim looks again.
	 */
	if (in_g4 && !g4_proven) {
		rc = -EAGAIN;
		goto fail;
	}
	if (in_g4) {
		rc = cat_g4_drop_to_cold(c, id, vid);
		if (rc < 0)
			goto fail;
		rc = cat_counter_add(c, "reclaimed_to_cold", 1);
		if (rc < 0)
			goto fail;
		return cat_commit(c);
	}
	/* Session state G4 lacks is demoted first, never dropped (reclaim.c). */
	if (keep_session_state && !plain_cache) {
		rc = -EAGAIN;
		goto fail;
	}
	rc = cat_delete_id(c, id);
	if (rc < 0)
		goto fail;
	rc = cat_counter_add(c, "evicted_objects", 1);
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

int cat_object_drop_id(struct cat *c, int64_t id)
{
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	rc = cat_delete_id(c, id);
	if (rc < 0) {
		cat_rollback(c);
		return rc;
	}
	return cat_commit(c);
}

int cat_object_drop_version(struct cat *c, int64_t id, uint64_t vid)
{
	sqlite3_stmt *s;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_stmt(c, S_OBJ_VID);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		rc = (uint64_t)sqlite3_column_int64(s, 0) == vid ? 0 : -ESTALE;
	else
		rc = rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "object version");
	cat_done(s);
	if (rc == 0)
		rc = cat_delete_id(c, id);
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

int cat_object_set_pin(struct cat *c, int64_t bucket_id, const char *key, int pinned)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_PIN);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 3, pinned ? 1 : 0);
	rc = cat_exec_stmt(c, s, "object pin");
	if (rc == 0 && sqlite3_changes(c->db) == 0)
		rc = -ENOENT;
	return rc;
}

int cat_object_range(struct cat *c, int64_t bucket_id, const char *after, int inclusive,
		     const char *upper, unsigned limit,
		     int (*fn)(void *arg, struct kvt_object *obj), void *arg)
{
	sqlite3_stmt *s = cat_stmt(c, inclusive ? S_OBJ_RANGE_INCL : S_OBJ_RANGE);
	int rc, stop = 0;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, after ? after : "", -1, SQLITE_STATIC);
	/* Keys are UTF-8 and never hold the byte 0xff: it bounds every key. */
	sqlite3_bind_text(s, 3, upper ? upper : "\xff", -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct cat_object *co = NULL;
		struct kvt_object *o;

		if (cat_object_from_row(s, &co) < 0) {
			rc = SQLITE_NOMEM;
			break;
		}
		o = co->obj;
		co->obj = NULL;
		cat_object_free(co);
		/* fn owns o from here; negative is an error, positive stops. */
		stop = fn(arg, o);
		if (stop) {
			rc = SQLITE_DONE;
			break;
		}
	}
	cat_done(s);
	if (stop < 0)
		return stop;
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "object list");
}

/* ---- segments ----------------------------------------------------------- */

static void seg_row(sqlite3_stmt *s, struct cat_segment *out)
{
	out->id = (uint32_t)sqlite3_column_int64(s, 0);
	out->state = sqlite3_column_int(s, 1);
	out->gen = (uint64_t)sqlite3_column_int64(s, 2);
	out->live = (uint64_t)sqlite3_column_int64(s, 3);
	out->used = (uint64_t)sqlite3_column_int64(s, 4);
	out->last_access = sqlite3_column_int64(s, 5);
}

int cat_segment_get(struct cat *c, uint32_t id, struct cat_segment *out)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_GET);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		seg_row(s, out);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "segment");
}

int cat_segment_list(struct cat *c, int (*fn)(void *, const struct cat_segment *), void *arg)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_LIST);
	int rc;

	if (!s)
		return -EIO;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct cat_segment seg;

		seg_row(s, &seg);
		if (fn(arg, &seg)) {
			rc = SQLITE_DONE;
			break;
		}
	}
	cat_done(s);
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "segment list");
}

int cat_segment_next_free(struct cat *c, uint32_t after, uint32_t *id)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_NEXT_FREE);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, after == UINT32_MAX ? -1 : (int64_t)after);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*id = (uint32_t)sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOSPC : cat_errno(c, rc, "free segment");
}

/* Steps an UPDATE ... RETURNING gen that changes at most one row. */
static int cat_returning_gen(struct cat *c, sqlite3_stmt *s, uint64_t *gen, const char *what)
{
	int rc = sqlite3_step(s), rc2;

	if (rc == SQLITE_ROW)
		*gen = (uint64_t)sqlite3_column_int64(s, 0);
	/* RETURNING rows must be stepped to the end before the change counts. */
	rc2 = rc == SQLITE_ROW ? sqlite3_step(s) : rc;
	cat_done(s);
	if (rc == SQLITE_ROW && rc2 == SQLITE_DONE)
		return 0;
	return rc == SQLITE_DONE ? -EBUSY : cat_errno(c, rc == SQLITE_ROW ? rc2 : rc, what);
}

int cat_segment_claim(struct cat *c, uint32_t id, uint64_t *gen)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_CLAIM);

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, util_now_ns());
	return cat_returning_gen(c, s, gen, "claim");
}

int cat_segment_next_partial(struct cat *c, uint32_t after, uint64_t max_used, uint32_t *id,
			     uint64_t *used)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_NEXT_PARTIAL);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, after == UINT32_MAX ? -1 : (int64_t)after);
	sqlite3_bind_int64(s, 2, (int64_t)max_used);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*id = (uint32_t)sqlite3_column_int64(s, 0);
		*used = (uint64_t)sqlite3_column_int64(s, 1);
	}
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "partial segment");
}

int cat_segment_reopen(struct cat *c, uint32_t id, uint64_t used, uint64_t *gen)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_REOPEN);

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)used);
	sqlite3_bind_int64(s, 3, util_now_ns());
	return cat_returning_gen(c, s, gen, "reopen");
}

int cat_segment_set_state(struct cat *c, uint32_t id, enum seg_state from,
			  enum seg_state to, uint64_t used)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_SET_STATE);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int(s, 2, from);
	sqlite3_bind_int(s, 3, to);
	sqlite3_bind_int64(s, 4, used == SEG_USED_KEEP ? -1 : (int64_t)used);
	rc = cat_exec_stmt(c, s, "segment state");
	if (rc == 0 && sqlite3_changes(c->db) != 1)
		rc = -ESTALE;
	return rc;
}

int cat_segment_free(struct cat *c, uint32_t id, uint64_t *new_gen)
{
	sqlite3_stmt *s;
	int rc = cat_exists(c, S_SEG_HAS_EXTENTS, id);

	if (rc == 0)
		return -EBUSY;
	if (rc != -ENOENT)
		return rc;
	s = cat_stmt(c, S_SEG_FREE);
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*new_gen = (uint64_t)sqlite3_column_int64(s, 0);
		rc = sqlite3_step(s);
	}
	cat_done(s);
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "segment free");
}

int cat_segment_pick_victim(struct cat *c, int empty_only, uint32_t *id)
{
	sqlite3_stmt *s = cat_stmt(c, empty_only ? S_SEG_VICTIM_EMPTY : S_SEG_VICTIM);
	int rc;

	if (!s)
		return -EIO;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*id = (uint32_t)sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "victim");
}

int cat_segment_counts(struct cat *c, uint64_t counts[4])
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_COUNTS);
	int rc;

	if (!s)
		return -EIO;
	memset(counts, 0, 4 * sizeof(counts[0]));
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int state = sqlite3_column_int(s, 0);

		if (state >= 0 && state < 4)
			counts[state] = (uint64_t)sqlite3_column_int64(s, 1);
	}
	cat_done(s);
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "segment counts");
}

int cat_segment_objects(struct cat *c, uint32_t id,
			int (*fn)(void *arg, int64_t obj, uint64_t vid, int pinned), void *arg)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_OBJECTS);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (fn(arg, sqlite3_column_int64(s, 0), (uint64_t)sqlite3_column_int64(s, 1),
		       sqlite3_column_int(s, 2))) {
			rc = SQLITE_DONE;
			break;
		}
	}
	cat_done(s);
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "segment objects");
}

int cat_segment_kept_space(struct cat *c, uint32_t id, uint64_t *space)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_KEPT_SPACE);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, SEG_HEADER_SIZE);
	sqlite3_bind_int64(s, 3, SEG_ALIGN);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*space = (uint64_t)sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : cat_errno(c, rc, "segment kept space");
}

int cat_segment_extents_end(struct cat *c, uint32_t id, uint64_t *end)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_EXT_END);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, SEG_HEADER_SIZE);
	sqlite3_bind_int64(s, 3, SEG_ALIGN);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*end = (uint64_t)sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : cat_errno(c, rc, "segment extents end");
}

int cat_segment_least_used(struct cat *c, uint64_t *used)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_LEAST_USED);
	int rc, found = 0;

	if (!s)
		return -EIO;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
		*used = (uint64_t)sqlite3_column_int64(s, 0);
		found = 1;
	}
	cat_done(s);
	if (rc != SQLITE_ROW)
		return cat_errno(c, rc, "least used segment");
	return found ? 0 : -ENOENT;
}

int cat_extent_move(struct cat *c, int64_t obj, uint64_t vid, const struct cat_extent *to,
		    uint32_t space)
{
	sqlite3_stmt *s;
	int64_t old_seg;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_stmt(c, S_OBJ_VID);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, obj);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW || (uint64_t)sqlite3_column_int64(s, 0) != vid) {
		cat_done(s);
		rc = -ENOENT;
		goto fail;
	}
	cat_done(s);
	s = cat_stmt(c, S_EXT_GET);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, obj);
	sqlite3_bind_int64(s, 2, to->seq);
	rc = sqlite3_step(s);
	old_seg = sqlite3_column_int64(s, 0);
	cat_done(s);
	if (rc != SQLITE_ROW) {
		rc = -ENOENT;
		goto fail;
	}
	s = cat_stmt(c, S_EXT_MOVE);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, obj);
	sqlite3_bind_int64(s, 2, to->seq);
	sqlite3_bind_int64(s, 3, to->segment);
	sqlite3_bind_int64(s, 4, (int64_t)to->gen);
	sqlite3_bind_int64(s, 5, (int64_t)to->offset);
	rc = cat_exec_stmt(c, s, "extent move");
	if (rc < 0)
		goto fail;
	s = cat_stmt(c, S_SEG_LIVE_SUB);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, old_seg);
	sqlite3_bind_int64(s, 2, space);
	rc = cat_exec_stmt(c, s, "segment live");
	if (rc < 0)
		goto fail;
	s = cat_stmt(c, S_SEG_LIVE_ADD);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, to->segment);
	sqlite3_bind_int64(s, 2, (int64_t)to->gen);
	sqlite3_bind_int64(s, 3, space);
	sqlite3_bind_int64(s, 4, 0);
	rc = cat_exec_stmt(c, s, "segment live");
	if (rc == 0 && sqlite3_changes(c->db) != 1)
		rc = -ESTALE;
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

int cat_segment_set_live(struct cat *c, uint32_t id, uint64_t live)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_SET_LIVE);

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)live);
	return cat_exec_stmt(c, s, "segment live");
}

int cat_segment_recount(struct cat *c, uint32_t id, int repair, uint64_t *live, uint64_t *space)
{
	struct cat_segment seg;
	sqlite3_stmt *s;
	int rc = repair ? cat_begin(c) : cat_begin_read(c);

	if (rc < 0)
		return rc;
	rc = cat_segment_get(c, id, &seg);
	if (rc < 0)
		goto out;
	*live = *space = seg.live;
	if (seg.state == SEG_FREE)
		goto out;	/* nothing counts in a free segment */
	s = cat_stmt(c, S_SEG_EXT_SPACE);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)seg.gen);
	sqlite3_bind_int64(s, 3, SEG_HEADER_SIZE);
	sqlite3_bind_int64(s, 4, SEG_ALIGN);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*space = (uint64_t)sqlite3_column_int64(s, 0);
	cat_done(s);
	rc = rc == SQLITE_ROW ? 0 : cat_errno(c, rc, "segment space");
	if (rc == 0 && repair && *space != *live)
		rc = cat_segment_set_live(c, id, *space);
out:
	if (rc == 0 && repair)
		return cat_commit(c);
	cat_rollback(c);
	return rc;
}

/* ---- access times and counters ------------------------------------------ */

int cat_touch_session(struct cat *c, int64_t bucket_id, const char *session, int64_t when_ns)
{
	sqlite3_stmt *s = cat_stmt(c, S_SESSION_TOUCH);

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, session, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, when_ns);
	return cat_exec_stmt(c, s, "session touch");
}

int cat_touch_segment(struct cat *c, uint32_t id, int64_t when_ns)
{
	sqlite3_stmt *s = cat_stmt(c, S_SEG_TOUCH);

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, when_ns);
	return cat_exec_stmt(c, s, "segment touch");
}

int cat_counter_add(struct cat *c, const char *name, int64_t delta)
{
	sqlite3_stmt *s = cat_stmt(c, S_COUNTER_ADD);

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, delta);
	return cat_exec_stmt(c, s, "counter");
}

int cat_counter_once(struct cat *c, const char *name)
{
	sqlite3_stmt *s = cat_stmt(c, S_COUNTER_ONCE);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	rc = cat_exec_stmt(c, s, "counter");
	return rc < 0 ? rc : sqlite3_changes(c->db) == 1;
}

int cat_counter_get(struct cat *c, const char *name, uint64_t *value)
{
	sqlite3_stmt *s = cat_stmt(c, S_COUNTER_GET);
	int rc;

	if (!s)
		return -EIO;
	*value = 0;
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*value = (uint64_t)sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "counter");
}

/* One-row aggregate query: copies up to n integer columns into out. */
static int cat_aggregate(struct cat *c, enum stmt_id id, uint64_t *out, int n)
{
	sqlite3_stmt *s = cat_stmt(c, id);
	int rc;

	if (!s)
		return -EIO;
	rc = sqlite3_step(s);
	for (int i = 0; i < n && rc == SQLITE_ROW; i++)
		out[i] = (uint64_t)sqlite3_column_int64(s, i);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : cat_errno(c, rc, "stat");
}

int cat_data_version(struct cat *c, int64_t *version)
{
	uint64_t v = 0;
	int rc = cat_aggregate(c, S_DATA_VERSION, &v, 1);

	*version = (int64_t)v;
	return rc;
}

int cat_stat(struct cat *c, struct kvt_store_stat *st)
{
	uint64_t objs[3] = { 0 }, segs[2] = { 0 }, counts[4];
	sqlite3_stmt *s;
	int rc = cat_begin_read(c);

	if (rc < 0)
		return rc;
	if ((rc = cat_aggregate(c, S_STAT_OBJECTS, objs, 3)) < 0 ||
	    (rc = cat_aggregate(c, S_STAT_INTERNAL, &st->pinned_internal, 1)) < 0 ||
	    (rc = cat_aggregate(c, S_STAT_BUCKETS, &st->buckets, 1)) < 0 ||
	    (rc = cat_aggregate(c, S_STAT_SESSIONS, &st->sessions, 1)) < 0 ||
	    (rc = cat_aggregate(c, S_STAT_SEGS, segs, 2)) < 0 ||
	    (rc = cat_segment_counts(c, counts)) < 0 ||
	    (rc = cat_counter_get(c, "evicted_objects", &st->evicted_objects)) < 0 ||
	    (rc = cat_counter_get(c, "reclaimed_segments", &st->reclaimed_segments)) < 0 ||
	    (rc = cat_counter_get(c, "checksum_failures", &st->checksum_failures)) < 0 ||
	    (rc = cat_counter_get(c, "demoted_objects", &st->demoted_objects)) < 0 ||
	    (rc = cat_counter_get(c, "recalled_objects", &st->recalled_objects)) < 0)
		goto out;
	st->objects = objs[0];
	st->object_bytes = objs[1];
	st->pinned = objs[2];
	st->live_bytes = segs[0];
	st->segments = segs[1];
	st->segments_free = counts[SEG_FREE];
	st->segments_open = counts[SEG_OPEN];
	st->segments_sealed = counts[SEG_SEALED] + counts[SEG_RECLAIMING];
	memset(st->tier_count, 0, sizeof(st->tier_count));
	s = cat_stmt(c, S_STAT_TIERS);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int tier = sqlite3_column_int(s, 0);

		if (tier >= 0 && tier < 4)
			st->tier_count[tier] = (uint64_t)sqlite3_column_int64(s, 1);
	}
	cat_done(s);
	rc = rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "stat");
out:
	cat_rollback(c);
	return rc;
}

/* ---- fsck --------------------------------------------------------------- */

int cat_object_walk(struct cat *c, int (*fn)(void *arg, struct cat_object *co), void *arg)
{
	int64_t after = -1;

	for (;;) {
		sqlite3_stmt *s = cat_stmt(c, S_OBJ_WALK);
		struct { int64_t bucket; char *bucket_name; char *key; } batch[256];
		int n = 0, rc;

		if (!s)
			return -EIO;
		sqlite3_bind_int64(s, 1, after);
		while (n < 256 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
			after = sqlite3_column_int64(s, 0);
			batch[n].bucket = sqlite3_column_int64(s, 1);
			batch[n].bucket_name = col_strdup(s, 2);
			batch[n].key = col_strdup(s, 3);
			n++;
		}
		cat_done(s);
		rc = 0;
		for (int i = 0; i < n; i++) {
			struct cat_object *co = NULL;

			if (rc == 0 && batch[i].key && batch[i].bucket_name &&
			    cat_object_get(c, batch[i].bucket, batch[i].key, 1, &co) == 0) {
				co->obj->bucket = batch[i].bucket_name;
				batch[i].bucket_name = NULL;
				rc = fn(arg, co);
				cat_object_free(co);
			}
			free(batch[i].bucket_name);
			free(batch[i].key);
		}
		if (rc || n < 256)
			return rc;
	}
}

int cat_sync(struct cat *c)
{
	int rc = cat_exec(c, "PRAGMA synchronous = FULL");

	/* In WAL mode a FULL commit syncs the log, and with it every commit before. */
	if (rc == 0)
		rc = cat_begin(c);
	if (rc == 0) {
		rc = cat_counter_add(c, "syncs", 1);
		rc = rc == 0 ? cat_commit(c) : (cat_rollback(c), rc);
	}
	cat_exec(c, "PRAGMA synchronous = NORMAL");
	return rc;
}

int cat_object_by_id(struct cat *c, int64_t id, struct cat_object **out)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_KEY);
	int64_t bucket;
	char *key;
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		cat_done(s);
		return rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "object by id");
	}
	bucket = sqlite3_column_int64(s, 0);
	key = col_strdup(s, 1);
	cat_done(s);
	if (!key)
		return -ENOMEM;
	rc = cat_object_get(c, bucket, key, 1, out);
	free(key);
	return rc;
}

int cat_object_setattr(struct cat *c, int64_t bucket_id, const char *key, unsigned mask,
		       const struct kvt_posix *p, int64_t mtime_ns, int64_t now_ns)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_SETATTR);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	/* Unbound parameters are NULL: coalesce() keeps the old value. */
	if (mask & KVT_ATTR_MODE)
		sqlite3_bind_int64(s, 3, p->mode);
	if (mask & KVT_ATTR_UID)
		sqlite3_bind_int64(s, 4, p->uid);
	if (mask & KVT_ATTR_GID)
		sqlite3_bind_int64(s, 5, p->gid);
	if (mask & KVT_ATTR_ATIME)
		sqlite3_bind_int64(s, 6, p->atime_ns);
	if (mask & KVT_ATTR_MTIME)
		sqlite3_bind_int64(s, 7, mtime_ns);
	sqlite3_bind_int64(s, 8, now_ns);
	rc = cat_exec_stmt(c, s, "setattr");
	if (rc == 0 && sqlite3_changes(c->db) == 0)
		rc = -ENOENT;
	return rc;
}

int cat_object_set_session(struct cat *c, int64_t bucket_id, const char *key, const char *session,
			   int64_t now_ns)
{
	sqlite3_stmt *s;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_stmt(c, S_OBJ_SET_SESSION);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, session, -1, SQLITE_STATIC);
	rc = cat_exec_stmt(c, s, "set session");
	if (rc == 0 && sqlite3_changes(c->db) == 0)
		rc = -ENOENT;
	if (rc == 0)
		rc = cat_touch_session(c, bucket_id, session, now_ns);
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

/* The id of bucket/key, or -ENOENT. */
static int cat_object_id(struct cat *c, int64_t bucket_id, const char *key, int64_t *id)
{
	sqlite3_stmt *s = cat_stmt(c, S_OBJ_LOOKUP);
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*id = sqlite3_column_int64(s, 0);
	cat_done(s);
	return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "object id");
}

int cat_object_rename(struct cat *c, int64_t bucket_id, const char *from, const char *to,
		      int noreplace, int64_t now_ns)
{
	sqlite3_stmt *s;
	int64_t from_id, to_id;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	rc = cat_object_id(c, bucket_id, from, &from_id);
	if (rc < 0)
		goto fail;
	rc = cat_object_id(c, bucket_id, to, &to_id);
	if (rc == 0 && to_id == from_id)
		goto done;	/* rename to itself: nothing to do */
	if (rc == 0 && noreplace) {
		rc = -EEXIST;
		goto fail;
	}
	/* The old target goes in the same transaction: nobody sees neither. */
	if (rc == 0)
		rc = cat_delete_id(c, to_id);
	else if (rc == -ENOENT)
		rc = 0;
	if (rc < 0)
		goto fail;
	s = cat_stmt(c, S_OBJ_RENAME);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, from, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, to, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, now_ns);
	rc = cat_exec_stmt(c, s, "rename");
	if (rc < 0)
		goto fail;
done:
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

int cat_object_rename_prefix(struct cat *c, int64_t bucket_id, const char *from, const char *to,
			     const char *from_upper, const char *to_upper, int64_t now_ns)
{
	sqlite3_stmt *s;
	int64_t marker;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	/* POSIX: a directory may replace an empty one only. */
	s = cat_stmt(c, S_PREFIX_HAS_OTHER);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, to, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, to_upper, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	cat_done(s);
	if (rc == SQLITE_ROW) {
		rc = -ENOTEMPTY;
		goto fail;
	}
	/* Every key keeps within KVT_KEY_MAX bytes: a longer one no S3 call
	 * and no path could reach (found by a helper, renaming a directory
	 * to a longer name over a 1024-byte key). */
	if (strlen(to) > strlen(from)) {
		s = cat_stmt(c, S_PREFIX_LONGEST);
		if (!s) {
			rc = -EIO;
			goto fail;
		}
		sqlite3_bind_int64(s, 1, bucket_id);
		sqlite3_bind_text(s, 2, from, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, from_upper, -1, SQLITE_STATIC);
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW && (size_t)sqlite3_column_int64(s, 0) + strlen(to) - strlen(from) >
					KVT_KEY_MAX)
			rc = -ENAMETOOLONG;
		else
			rc = rc == SQLITE_ROW ? 0 : cat_errno(c, rc, "rename prefix");
		cat_done(s);
		if (rc < 0)
			goto fail;
	}
	rc = cat_object_id(c, bucket_id, to, &marker);
	if (rc == 0)
		rc = cat_delete_id(c, marker);
	else if (rc == -ENOENT)
		rc = 0;
	if (rc < 0)
		goto fail;
	s = cat_stmt(c, S_OBJ_RENAME_PREFIX);
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, from, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, to, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, from_upper, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, now_ns);
	rc = cat_exec_stmt(c, s, "rename prefix");
	if (rc == 0 && sqlite3_changes(c->db) == 0)
		rc = -ENOENT;
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

/* ---- G4: demotion state, recall and import (migrate.c) --------------------
 *
 * An object's tier column is its demotion state (enum kvt_tier):
 *
 *        cat_g4_demote_begin()      cat_g4_mark_cold()
 *   HOT ---------------------> DEMOTING ------------------> COLD
 *    ^ ^      (uploaded and verified: cat_g4_set_uploaded)    |
 *    | +-------------------------+                            |
 *    |   cat_g4_demote_abort()   (no manifest written)        |
 *    +--------------------------------------------------------+
 *                          cat_g4_recalled()
 *
 * g4_vid names the version G4 holds verified: DEMOTING with g4_vid = vid
 * needs no new upload after a crash, only the manifest and the mark. A
 * recalled object keeps g4_vid, so demoting it again uploads nothing if G4's
 * copy still proves to hold its bytes (migrate.c, g4_copy_holds).
 * These statements are prepared per call: none of them is on the data path
 * except the recall's, which follows a fetch from the partner. Reclaim's
 * look at a victim's objects (cat_g4_victim) is, at every demoter pass, and
 * is in stmt_sql: prepared here, it was 30% of a pass over a full copy.
 */

static sqlite3_stmt *cat_g4_prep(struct cat *c, const char *sql)
{
	sqlite3_stmt *s = NULL;

	if (sqlite3_prepare_v2(c->db, sql, -1, &s, NULL) != SQLITE_OK) {
		log_err(0, "cannot prepare '%s': %s", sql, sqlite3_errmsg(c->db));
		sqlite3_finalize(s);
		return NULL;
	}
	return s;
}

/* Runs a prepared one-shot statement, finalizes it; *changes if not NULL. */
static int cat_g4_run(struct cat *c, sqlite3_stmt *s, const char *what, int *changes)
{
	int rc = sqlite3_step(s);

	while (rc == SQLITE_ROW)
		rc = sqlite3_step(s);
	sqlite3_finalize(s);
	rc = cat_errno(c, rc, what);
	if (rc == 0 && changes)
		*changes = sqlite3_changes(c->db);
	return rc;
}

int cat_g4_sessions(struct cat *c, int64_t idle_before_ns,
		    int (*fn)(void *arg, int64_t bucket_id, const char *bucket,
			      const char *session),
		    void *arg)
{
	sqlite3_stmt *s = cat_g4_prep(c,
		"SELECT s.bucket, b.name, s.name FROM sessions s JOIN buckets b ON b.id = s.bucket"
		" WHERE substr(b.name, 1, 1) <> '.' AND ((s.last_access < ?1 AND EXISTS("
		"  SELECT 1 FROM objects o WHERE o.bucket = s.bucket AND o.session = s.name"
		"  AND o.tier = 0 AND o.pinned = 0)) OR EXISTS("
		"  SELECT 1 FROM objects o WHERE o.bucket = s.bucket AND o.session = s.name"
		"  AND o.tier = 1)) ORDER BY b.name, s.name");
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, idle_before_ns);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int r = fn(arg, sqlite3_column_int64(s, 0), (const char *)sqlite3_column_text(s, 1),
			   (const char *)sqlite3_column_text(s, 2));

		if (r != 0) {
			sqlite3_finalize(s);
			return r < 0 ? r : 0;
		}
	}
	sqlite3_finalize(s);
	return cat_errno(c, rc, "g4 sessions");
}

/* sql, an UPDATE of the objects of bucket ?1's session ?2, run. */
static int cat_g4_session_update(struct cat *c, const char *sql, int64_t bucket_id,
				 const char *session, const char *what, int *count)
{
	sqlite3_stmt *s = cat_g4_prep(c, sql);

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, session, -1, SQLITE_TRANSIENT);
	return cat_g4_run(c, s, what, count);
}

int cat_g4_demote_begin(struct cat *c, int64_t bucket_id, const char *session, int *count)
{
	return cat_g4_session_update(c, "UPDATE objects SET tier = 1 WHERE bucket = ?1"
				     " AND session = ?2 AND tier = 0 AND pinned = 0",
				     bucket_id, session, "demote begin", count);
}

int cat_g4_demote_abort(struct cat *c, int64_t bucket_id, const char *session)
{
	return cat_g4_session_update(c, "UPDATE objects SET tier = 0 WHERE bucket = ?1"
				     " AND session = ?2 AND tier = 1",
				     bucket_id, session, "demote abort", NULL);
}

void cat_g4_objs_free(struct cat_g4_obj *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		cat_object_free(v[i].co);
		free(v[i].g4_key);
	}
	free(v);
}

#define G4_OBJ_COLS OBJ_COLS ", o.g4_vid, o.g4_attempts, o.g4_etag, o.g4_key"
/* The columns cat_g4_dead_rows() reads, in its order. */
#define G4_DEAD_COLS "d.id, d.bucket, b.name, d.key, d.session, d.g4_key, d.unproven"

/*
 * The statements whose plan cat_plan() shows, those of the migrator whose
 * cost grew with the store's size. cat_g4_cold_unnamed()'s
 * runs once per unproven g4_dead row: each is one search of a partial
 * index of migration 11, by size and the ETag G4 gave, or by size and the
 * copy's CRC32C. Its order is "+o.key", after the search: with "o.key"
 * SQLite took the key's index for the order and walked the whole bucket.
 */
#define SQL_G4_COLD_UNNAMED "SELECT " G4_OBJ_COLS " FROM objects o" \
	" WHERE o.bucket = ?1 AND o.tier = 2 AND o.g4_key IS NULL" \
	" AND o.g4_vid = o.vid AND o.key <> ?2 AND o.size = ?3"

static const struct {
	const char *name, *sql;
} cat_plans[] = {
	{ "g4 cold unnamed sized", "SELECT 1 FROM objects o WHERE o.bucket = ?1 AND o.tier = 2"
	  " AND o.g4_key IS NULL AND o.g4_vid = o.vid AND o.key <> ?2 AND o.size = ?3 LIMIT 1" },
	{ "g4 cold unnamed etag", SQL_G4_COLD_UNNAMED
	  " AND coalesce(o.g4_etag, '') IN (?4, '') ORDER BY +o.key" },
	{ "g4 cold unnamed crc", SQL_G4_COLD_UNNAMED " AND o.crc32c = ?4 ORDER BY +o.key" },
	/* Every demotion, sweep, import and recall of a session reads it;
	 * ordered by "o.key", SQLite walked the bucket's every object. */
	{ "g4 session objects", "SELECT " G4_OBJ_COLS " FROM objects o WHERE o.bucket = ?1"
	  " AND o.session = ?2 AND ((?3 >> o.tier) & 1) ORDER BY +o.key" },
	{ "g4 dead unproven in", "SELECT " G4_DEAD_COLS " FROM g4_dead d JOIN buckets b ON b.id = d.bucket"
	  " WHERE d.bucket = ?1 AND d.session = ?2 AND d.unproven = 1 AND d.g4_key IS NULL"
	  " AND d.key <> ?3 ORDER BY d.id" },
};

static const char *cat_plan_sql(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(cat_plans); i++)
		if (!strcmp(cat_plans[i].name, name))
			return cat_plans[i].sql;
	return NULL;
}

int cat_plan(struct cat *c, const char *name, char **plan)
{
	const char *sql = cat_plan_sql(name);
	char *eqp = sql ? sqlite3_mprintf("EXPLAIN QUERY PLAN %s", sql) : NULL;
	sqlite3_stmt *s = NULL;
	char *out = NULL;
	size_t len = 0;
	int rc;

	*plan = NULL;
	if (!sql)
		return -ENOENT;
	s = eqp ? cat_g4_prep(c, eqp) : NULL;
	sqlite3_free(eqp);
	if (!s)
		return eqp ? -EIO : -ENOMEM;
	/* Rows of (id, parent, notused, detail): the details, one a line. */
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *d = (const char *)sqlite3_column_text(s, 3);
		size_t dl = d ? strlen(d) : 0;
		char *more = realloc(out, len + dl + 2);

		if (!more) {
			rc = SQLITE_NOMEM;
			break;
		}
		out = more;
		memcpy(out + len, d ? d : "", dl);
		len += dl;
		out[len++] = '\n';
		out[len] = '\0';
	}
	sqlite3_finalize(s);
	rc = cat_errno(c, rc, "query plan");
	if (rc < 0) {
		free(out);
		return rc;
	}
	*plan = out ? out : strdup("");
	return *plan ? 0 : -ENOMEM;
}

/* A row of G4_OBJ_COLS into *go; -ENOMEM leaves nothing to free. */
static int cat_g4_obj_from_row(sqlite3_stmt *s, struct cat_g4_obj *go)
{
	struct cat_object *co = NULL;

	memset(go, 0, sizeof(*go));
	if (cat_object_from_row(s, &co) < 0)
		return -ENOMEM;
	go->g4_key = col_strdup(s, OBJ_NCOLS + 3);
	if (!go->g4_key && sqlite3_column_type(s, OBJ_NCOLS + 3) != SQLITE_NULL) {
		cat_object_free(co);
		return -ENOMEM;
	}
	go->co = co;
	go->g4_vid = (uint64_t)sqlite3_column_int64(s, OBJ_NCOLS);
	go->attempts = (unsigned)sqlite3_column_int64(s, OBJ_NCOLS + 1);
	snprintf(go->g4_etag, sizeof(go->g4_etag), "%s",
		 sqlite3_column_text(s, OBJ_NCOLS + 2) ?
		 (const char *)sqlite3_column_text(s, OBJ_NCOLS + 2) : "");
	return 0;
}

int cat_g4_object(struct cat *c, int64_t id, uint64_t vid, struct cat_g4_obj **out)
{
	sqlite3_stmt *s = cat_g4_prep(c, "SELECT " G4_OBJ_COLS " FROM objects o"
				      " WHERE o.id = ?1 AND o.vid = ?2");
	struct cat_g4_obj *go = calloc(1, sizeof(*go));
	int rc;

	*out = NULL;
	if (!s || !go) {
		sqlite3_finalize(s);
		free(go);
		return s ? -ENOMEM : -EIO;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		rc = cat_g4_obj_from_row(s, go);
	else
		rc = rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "g4 object");
	sqlite3_finalize(s);
	if (rc < 0) {
		free(go);
		return rc;
	}
	*out = go;
	return 0;
}

/* The rows of s, a statement of G4_OBJ_COLS, in *out; finalizes s. */
static int cat_g4_objs_collect(struct cat *c, sqlite3_stmt *s, const char *what,
			       struct cat_g4_obj **out, size_t *nout)
{
	struct cat_g4_obj *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (UTIL_GROW(v, n, cap) < 0) {
			rc = SQLITE_NOMEM;
			break;
		}
		if (cat_g4_obj_from_row(s, &v[n]) < 0) {
			rc = SQLITE_NOMEM;
			break;
		}
		n++;
	}
	sqlite3_finalize(s);
	rc = cat_errno(c, rc, what);
	if (rc < 0) {
		cat_g4_objs_free(v, n);
		return rc;
	}
	*out = v;
	*nout = n;
	return 0;
}

int cat_g4_session_objects(struct cat *c, int64_t bucket_id, const char *session, unsigned tiers,
			   struct cat_g4_obj **out, size_t *nout)
{
	sqlite3_stmt *s = cat_g4_prep(c, cat_plan_sql("g4 session objects"));

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, session, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(s, 3, tiers);
	return cat_g4_objs_collect(c, s, "g4 session objects", out, nout);
}

/* A g4_dead row for the copy of co under g4_key (NULL: "BUCKET/KEY"). */
static int cat_g4_dead_add(struct cat *c, const struct cat_object *co, const char *g4_key)
{
	sqlite3_stmt *s = cat_g4_prep(c, "INSERT INTO g4_dead(bucket, key, session, g4_key)"
				      " VALUES(?1, ?2, ?3, ?4)");

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, co->bucket_id);
	sqlite3_bind_text(s, 2, co->obj->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, co->obj->session, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, g4_key, -1, SQLITE_TRANSIENT);	/* NULL binds NULL */
	return cat_g4_run(c, s, "g4 dead", NULL);
}

int cat_g4_put_pending(struct cat *c, const struct cat_object *co, const char *g4_key,
		       int64_t *id)
{
	int rc = cat_g4_dead_add(c, co, g4_key);

	if (rc == 0)
		*id = sqlite3_last_insert_rowid(c->db);
	return rc;
}

/*
 * The key and the session are checked as well as the version: a rename
 * keeps the object's id and version, and a copy uploaded under the old
 * name, taken for one under the new, made a cold object that no recall
 * could find (the rename's trigger only fires for a copy already recorded).
 */
int cat_g4_set_uploaded(struct cat *c, const struct cat_object *co, const char *g4_etag,
			const char *g4_key, int64_t pending)
{
	sqlite3_stmt *s;
	int changes = 0, rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_g4_prep(c, "UPDATE objects SET g4_vid = ?2, g4_etag = ?3, g4_key = ?4"
			" WHERE id = ?1 AND vid = ?2 AND tier = 1 AND key = ?5 AND session = ?6");
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, co->id);
	sqlite3_bind_int64(s, 2, (int64_t)co->vid);
	sqlite3_bind_text(s, 3, g4_etag, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(s, 4, g4_key, -1, SQLITE_TRANSIENT);	/* NULL binds NULL */
	sqlite3_bind_text(s, 5, co->obj->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 6, co->obj->session, -1, SQLITE_STATIC);
	rc = cat_g4_run(c, s, "g4 uploaded", &changes);
	if (rc == 0 && changes == 1 && pending) {
		/* The copy is the object's now: no longer the sweep's. */
		s = cat_g4_prep(c, "DELETE FROM g4_dead WHERE id = ?1");
		if (!s) {
			rc = -EIO;
			goto fail;
		}
		sqlite3_bind_int64(s, 1, pending);
		rc = cat_g4_run(c, s, "g4 pending done", NULL);
	} else if (rc == 0 && changes == 0 && !pending) {
		rc = cat_g4_dead_add(c, co, g4_key);	/* pending says it already */
	}
	if (rc < 0)
		goto fail;
	rc = cat_commit(c);
	return rc < 0 ? rc : changes == 1 ? 0 : -ENOENT;
fail:
	cat_rollback(c);
	return rc;
}

/*
 * A copy under another name than the object's (a renamed cold object,
 * recalled since) is recorded dead first: the upload that follows goes to
 * the object's own name, and nothing else would ever delete the old one.
 */
int cat_g4_forget(struct cat *c, int64_t id, uint64_t vid)
{
	static const char *const sql[] = {
		"INSERT INTO g4_dead(bucket, key, session, g4_key)"
		" SELECT bucket, key, session, g4_key FROM objects"
		" WHERE id = ?1 AND vid = ?2 AND g4_vid = ?2 AND tier IN (0, 1) AND g4_key IS NOT NULL",
		"UPDATE objects SET g4_vid = 0, g4_etag = NULL, g4_key = NULL"
		" WHERE id = ?1 AND vid = ?2 AND g4_vid = ?2 AND tier IN (0, 1)",
	};
	int changes = 0, rc = cat_begin(c);

	for (size_t i = 0; i < 2 && rc == 0; i++) {
		sqlite3_stmt *s = cat_g4_prep(c, sql[i]);

		if (!s) {
			rc = -EIO;
			break;
		}
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_int64(s, 2, (int64_t)vid);
		rc = cat_g4_run(c, s, "g4 forget", &changes);
	}
	if (rc < 0) {
		cat_rollback(c);
		return rc;
	}
	rc = cat_commit(c);
	return rc < 0 ? rc : changes == 1 ? 0 : -ENOENT;
}

int cat_g4_failed(struct cat *c, int64_t id)
{
	sqlite3_stmt *s = cat_g4_prep(c, "UPDATE objects SET g4_attempts = g4_attempts + 1"
				      " WHERE id = ?1");

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	return cat_g4_run(c, s, "g4 attempt", NULL);
}

int cat_g4_mark_cold(struct cat *c, int64_t id, uint64_t vid)
{
	sqlite3_stmt *s;
	int changes = 0, rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_g4_prep(c, "UPDATE objects SET tier = 2, g4_attempts = 0"
			" WHERE id = ?1 AND vid = ?2 AND tier = 1 AND g4_vid = ?2");
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	rc = cat_g4_run(c, s, "mark cold", &changes);
	if (rc == 0 && changes != 1)
		rc = -ENOENT;	/* overwritten or deleted meanwhile: stays as it is */
	if (rc == 0)
		rc = cat_release_extents(c, id);
	if (rc == 0)
		rc = cat_counter_add(c, "demoted_objects", 1);
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

/* Inserts extents of object id and adds their space to their segments. */

int cat_g4_recalled(struct cat *c, int64_t id, uint64_t vid, const struct cat_extent *ext,
		    size_t n, int64_t now_ns)
{
	sqlite3_stmt *s;
	int changes = 0, rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_g4_prep(c, "UPDATE objects SET tier = 0 WHERE id = ?1 AND vid = ?2 AND tier = 2");
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	rc = cat_g4_run(c, s, "recalled", &changes);
	if (rc == 0 && changes != 1)
		rc = -ESTALE;	/* recalled by another, overwritten or deleted */
	if (rc == 0)
		rc = cat_insert_extents(c, id, ext, n, now_ns);
	if (rc == 0)
		rc = cat_counter_add(c, "recalled_objects", 1);
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

/*
 * Whether object id is only this store's old view of the session's version
 * in G4, which the manifest p came from replaces: 1 if it is of p's
 * session, unchanged here since G4 got it (g4_vid = vid; cold, or recalled
 * and not written since), not being demoted, and p is another version. The
 * session came back from the store that owns it now, which overwrote the
 * key: kept, this version failed every recall on the owner's bytes and was
 * written into the manifest again by the import. 0 if this store has a
 * version of its own, or the same one.
 */
static int cat_g4_superseded(struct cat *c, int64_t id, const struct cat_put *p)
{
	sqlite3_stmt *s = cat_g4_prep(c, "SELECT 1 FROM objects WHERE id = ?1 AND session = ?2"
				      " AND g4_vid = vid AND tier <> 1"
				      " AND NOT (size = ?3 AND crc32c = ?4 AND etag = ?5)");
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_text(s, 2, p->session, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(s, 3, (int64_t)p->size);
	sqlite3_bind_int64(s, 4, (int64_t)p->crc32c);
	sqlite3_bind_text(s, 5, p->etag, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "import superseded");
}

int cat_g4_drop_superseded(struct cat *c, int64_t id, uint64_t vid)
{
	sqlite3_stmt *s;
	int rc = cat_begin(c);

	if (rc < 0)
		return rc;
	s = cat_g4_prep(c, "SELECT 1 FROM objects WHERE id = ?1 AND vid = ?2 AND g4_vid = vid"
			" AND tier <> 1");
	if (!s) {
		rc = -EIO;
		goto fail;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_DONE) {
		rc = -ENOENT;	/* changed meanwhile: this store's own now */
		goto fail;
	}
	rc = rc == SQLITE_ROW ? cat_delete_id(c, id) : cat_errno(c, rc, "import drop");
	if (rc < 0)
		goto fail;
	return cat_commit(c);
fail:
	cat_rollback(c);
	return rc;
}

int cat_g4_import(struct cat *c, const struct cat_put *p, const char *g4_etag,
		  const char *g4_key)
{
	sqlite3_stmt *s;
	char *meta = NULL;
	size_t metalen = 0;
	int64_t id;
	int rc;

	if (!c->writing)
		return -EINVAL;	/* the caller's transaction is the whole import's */
	rc = meta_encode(p->meta, p->nmeta, &meta, &metalen);
	if (rc < 0)
		return rc;
	rc = cat_exists(c, S_BUCKET_EXISTS, p->bucket_id);
	if (rc < 0)
		goto out;
	rc = cat_object_id(c, p->bucket_id, p->key, &id);
	if (rc == 0) {
		rc = cat_g4_superseded(c, id, p);
		if (rc == 0)
			rc = -EEXIST;	/* this node has its own version: it wins */
		else if (rc == 1)
			rc = cat_delete_id(c, id);
		if (rc < 0)
			goto out;
	} else if (rc != -ENOENT) {
		goto out;
	}
	id = 0;		/* a new row */
	rc = cat_write_object(c, p, meta, metalen, !!p->pinned, &id);
	if (rc < 0)
		goto out;
	s = cat_g4_prep(c, "UPDATE objects SET tier = 2, g4_vid = vid, g4_etag = ?2, g4_key = ?3"
			" WHERE id = ?1");
	if (!s) {
		rc = -EIO;
		goto out;
	}
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_text(s, 2, g4_etag, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(s, 3, g4_key, -1, SQLITE_TRANSIENT);	/* NULL binds NULL */
	rc = cat_g4_run(c, s, "import", NULL);
	if (rc == 0)
		rc = cat_touch_session(c, p->bucket_id, p->session, p->mtime_ns);
out:
	free(meta);
	return rc;
}

int cat_g4_victim(struct cat *c, int64_t id, uint64_t vid, char **bucket, char **key,
		  char **session, int *in_g4)
{
	sqlite3_stmt *s = cat_stmt(c, S_G4_VICTIM);
	int rc;

	*bucket = *key = *session = NULL;
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*bucket = col_strdup(s, 0);
		*key = col_strdup(s, 1);
		*session = col_strdup(s, 2);
		*in_g4 = sqlite3_column_int(s, 3);
		rc = *bucket && *key && *session ? 0 : -ENOMEM;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "g4 victim");
	}
	cat_done(s);
	if (rc < 0) {
		free(*bucket);
		free(*key);
		free(*session);
		*bucket = *key = *session = NULL;
	}
	return rc;
}

/*
 * Reclaim's drop, inside its transaction, of a hot or demoting object whose
 * version vid G4 holds verified (g4_vid = vid) and whose copy reclaim has
 * just proven (reclaim.c, g4_victim_copy_holds()): the object becomes COLD
 * and its extents are released.
 */
static int cat_g4_drop_to_cold(struct cat *c, int64_t id, uint64_t vid)
{
	sqlite3_stmt *s = cat_g4_prep(c, "UPDATE objects SET tier = 2"
				      " WHERE id = ?1 AND vid = ?2 AND g4_vid = ?2 AND tier IN (0, 1)");
	int changes = 0, rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	rc = cat_g4_run(c, s, "drop to cold", &changes);
	if (rc < 0)
		return rc;
	if (changes != 1)
		return -EIO;	/* the caller checked the row in this transaction */
	return cat_release_extents(c, id);
}

/* ---- G4 housekeeping: uploads in flight, dead keys (migration 4) ---- */

int cat_g4_upload_begin(struct cat *c, const char *url, const char *key, const char *upload_id,
			int64_t now_ns)
{
	sqlite3_stmt *s = cat_g4_prep(c, "INSERT OR REPLACE INTO g4_uploads(upload_id, url, key,"
				      " started, pid) VALUES(?1, ?2, ?3, ?4, ?5)");

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, upload_id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(s, 2, url, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(s, 3, key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(s, 4, now_ns);
	sqlite3_bind_int64(s, 5, (int64_t)getpid());
	return cat_g4_run(c, s, "g4 upload begin", NULL);
}

int cat_g4_upload_end(struct cat *c, const char *upload_id)
{
	sqlite3_stmt *s = cat_g4_prep(c, "DELETE FROM g4_uploads WHERE upload_id = ?1");

	if (!s)
		return -EIO;
	sqlite3_bind_text(s, 1, upload_id, -1, SQLITE_TRANSIENT);
	return cat_g4_run(c, s, "g4 upload end", NULL);
}

int cat_g4_uploads(struct cat *c, int (*fn)(void *arg, const char *url, const char *key,
					    const char *upload_id, int64_t started_ns, long pid),
		   void *arg)
{
	sqlite3_stmt *s = cat_g4_prep(c, "SELECT url, key, upload_id, started, pid FROM g4_uploads"
				      " ORDER BY started");
	int rc;

	if (!s)
		return -EIO;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int r = fn(arg, (const char *)sqlite3_column_text(s, 0),
			   (const char *)sqlite3_column_text(s, 1),
			   (const char *)sqlite3_column_text(s, 2), sqlite3_column_int64(s, 3),
			   (long)sqlite3_column_int64(s, 4));

		if (r != 0) {
			sqlite3_finalize(s);
			return r < 0 ? r : 0;
		}
	}
	sqlite3_finalize(s);
	return cat_errno(c, rc, "g4 uploads");
}

/* Each g4_dead row s gives (G4_DEAD_COLS) to fn until it returns
 * non-zero; s finalized. */
static int cat_g4_dead_rows(struct cat *c, sqlite3_stmt *s, const char *what, cat_g4_dead_fn fn,
			    void *arg)
{
	int rc;

	if (!s)
		return -EIO;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int r = fn(arg, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
			   (const char *)sqlite3_column_text(s, 2),
			   (const char *)sqlite3_column_text(s, 3),
			   (const char *)sqlite3_column_text(s, 4),
			   (const char *)sqlite3_column_text(s, 5),
			   sqlite3_column_int(s, 6));

		if (r != 0) {
			sqlite3_finalize(s);
			return r < 0 ? r : 0;
		}
	}
	sqlite3_finalize(s);
	return cat_errno(c, rc, what);
}

int cat_g4_dead(struct cat *c, cat_g4_dead_fn fn, void *arg)
{
	return cat_g4_dead_rows(c, cat_g4_prep(c, "SELECT " G4_DEAD_COLS
					       " FROM g4_dead d JOIN buckets b ON b.id = d.bucket"
					       " ORDER BY d.bucket, d.session, d.id"),
				"g4 dead", fn, arg);
}

int cat_g4_moves(struct cat *c, cat_g4_move_fn fn, void *arg)
{
	/* One pass over g4_dead, each row's object found by its (bucket,
	 * key): asked per session, it scanned the table once for each. */
	sqlite3_stmt *s = cat_g4_prep(c, "SELECT DISTINCT d.bucket, d.session, o.session, o.id,"
				      " o.g4_key FROM g4_dead d JOIN objects o"
				      " ON o.bucket = d.bucket AND o.key = d.key"
				      " WHERE o.session <> d.session AND o.g4_vid = o.vid"
				      " AND o.g4_vid <> 0 AND o.g4_key IS d.g4_key"
				      " ORDER BY d.bucket, d.session, o.session, o.id");
	int rc;

	if (!s)
		return -EIO;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int r = fn(arg, sqlite3_column_int64(s, 0), (const char *)sqlite3_column_text(s, 1),
			   (const char *)sqlite3_column_text(s, 2), sqlite3_column_int64(s, 3),
			   (const char *)sqlite3_column_text(s, 4));

		if (r != 0) {
			sqlite3_finalize(s);
			return r < 0 ? r : 0;
		}
	}
	sqlite3_finalize(s);
	return cat_errno(c, rc, "g4 moves");
}

int cat_g4_dead_unproven_in(struct cat *c, int64_t bucket_id, const char *session,
			    const char *not_key, cat_g4_dead_fn fn, void *arg)
{
	sqlite3_stmt *s = cat_g4_prep(c, cat_plan_sql("g4 dead unproven in"));

	if (s) {
		sqlite3_bind_int64(s, 1, bucket_id);
		sqlite3_bind_text(s, 2, session, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 3, not_key, -1, SQLITE_TRANSIENT);
	}
	return cat_g4_dead_rows(c, s, "g4 dead unproven in", fn, arg);
}

int cat_g4_dead_done(struct cat *c, int64_t id)
{
	sqlite3_stmt *s = cat_g4_prep(c, "DELETE FROM g4_dead WHERE id = ?1");

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	return cat_g4_run(c, s, "g4 dead done", NULL);
}

int cat_g4_name_taken(struct cat *c, int64_t bucket_id, int64_t except_id, const char *name,
		      const char *key)
{
	/* Two searches, one index each: with OR, SQLite scanned the bucket. */
	sqlite3_stmt *s = cat_g4_prep(c, "SELECT 1 WHERE EXISTS(SELECT 1 FROM objects"
				      "  WHERE bucket = ?1 AND g4_key = ?2 AND id <> ?4)"
				      " OR EXISTS(SELECT 1 FROM objects"
				      "  WHERE bucket = ?1 AND key = ?3 AND g4_key IS NULL AND g4_vid <> 0"
				      "  AND id <> ?4)");
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(s, 3, key, -1, SQLITE_TRANSIENT);	/* NULL binds NULL */
	sqlite3_bind_int64(s, 4, except_id);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "g4 name taken");
}

int cat_g4_name(struct cat *c, int64_t id, uint64_t vid, char **g4_key)
{
	sqlite3_stmt *s = cat_g4_prep(c, "SELECT g4_key FROM objects WHERE id = ?1 AND vid = ?2");
	int rc;

	*g4_key = NULL;
	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*g4_key = col_strdup(s, 0);
		rc = *g4_key || sqlite3_column_type(s, 0) == SQLITE_NULL ? 0 : -ENOMEM;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT : cat_errno(c, rc, "g4 name");
	}
	sqlite3_finalize(s);
	return rc;
}

int cat_g4_dead_unproven(struct cat *c, int64_t bucket_id, const char *key)
{
	sqlite3_stmt *s = cat_g4_prep(c, "SELECT 1 FROM g4_dead WHERE bucket = ?1 AND key = ?2"
				      " AND unproven = 1 LIMIT 1");
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "g4 dead unproven");
}

int cat_g4_dead_proven(struct cat *c, int64_t bucket_id, const char *key)
{
	sqlite3_stmt *s = cat_g4_prep(c, "UPDATE g4_dead SET unproven = 0 WHERE bucket = ?1"
				      " AND key = ?2 AND unproven = 1");

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_TRANSIENT);
	return cat_g4_run(c, s, "g4 dead proven", NULL);
}

int cat_g4_cold_unnamed_sized(struct cat *c, int64_t bucket_id, const char *not_key,
			      uint64_t size)
{
	sqlite3_stmt *s = cat_g4_prep(c, cat_plan_sql("g4 cold unnamed sized"));
	int rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, not_key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(s, 3, (int64_t)size);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : cat_errno(c, rc, "g4 cold unnamed sized");
}

int cat_g4_cold_unnamed(struct cat *c, int64_t bucket_id, const char *not_key, uint64_t size,
			const char *g4_etag, uint32_t crc32c, struct cat_g4_obj **out, size_t *nout)
{
	sqlite3_stmt *s = cat_g4_prep(c, cat_plan_sql(g4_etag ? "g4 cold unnamed etag" :
						      "g4 cold unnamed crc"));

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, bucket_id);
	sqlite3_bind_text(s, 2, not_key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(s, 3, (int64_t)size);
	if (g4_etag)
		sqlite3_bind_text(s, 4, g4_etag, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_int64(s, 4, crc32c);
	return cat_g4_objs_collect(c, s, "g4 cold unnamed", out, nout);
}

int cat_g4_name_found(struct cat *c, int64_t id, uint64_t vid, const char *g4_key)
{
	sqlite3_stmt *s = cat_g4_prep(c, "UPDATE objects SET g4_key = ?3 WHERE id = ?1 AND vid = ?2"
				      " AND tier = 2 AND g4_vid = vid AND g4_key IS NULL");
	int changes = 0, rc;

	if (!s)
		return -EIO;
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, (int64_t)vid);
	sqlite3_bind_text(s, 3, g4_key, -1, SQLITE_TRANSIENT);
	rc = cat_g4_run(c, s, "g4 name found", &changes);
	return rc < 0 ? rc : changes == 1 ? 0 : -ENOENT;
}
