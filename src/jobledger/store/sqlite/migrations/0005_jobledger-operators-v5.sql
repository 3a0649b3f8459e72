-- jobledger schema v5 (SQLite): what deploys, crashes and operators need. docs/schema.md lists
-- every column and index with the reason it exists.
--
-- occurrences.started_at  when the handler of the current attempt began (NULL while the attempt
--                         is only claimed, e.g. buffered ahead of a free slot): crash recovery
--                         gives a never-started attempt back instead of spending it, and an
--                         outcome-unknown case says when its handler began.

ALTER TABLE occurrences ADD COLUMN started_at INTEGER CHECK (started_at IS NULL OR started_at >= 0);

-- Operator reads and prune at any size (docs/schema.md, "Version 5: operator reads"). Listing
-- pages go newest first by seq (the rowid: insertion order), so each listing index ends in the
-- rowid and a page is one index range, whatever the table holds; counts are bounded walks of
-- the status index (status, kind). The status index replaces v4's (status, created_at): it
-- changes on the same writes as before, and serves a kind's pages too (one range per status),
-- so v4's kind index is dropped: an enqueue writes one index fewer. The job index changes only
-- when a row is inserted or deleted. The two dead-letter indexes hold dead letters only, most recently
-- settled first: a row enters them when it dead-letters and leaves when it is requeued or
-- pruned. jobledger_keys_occurrence lets a prune (and a job removal) find the key of an
-- occurrence it deletes without reading every key: one entry per key, written with the key.
DROP INDEX jobledger_occurrences_status;
CREATE INDEX jobledger_occurrences_status ON occurrences(status, kind);
DROP INDEX jobledger_occurrences_kind;
DROP INDEX jobledger_occurrences_job;
CREATE INDEX jobledger_occurrences_job ON occurrences(job_id);
CREATE INDEX jobledger_occurrences_dead_letters ON occurrences(settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter';
CREATE INDEX jobledger_occurrences_dead_letters_job
  ON occurrences(job_id, settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter';
CREATE INDEX jobledger_keys_occurrence ON jobledger_keys(occurrence_id);
