-- jobledger schema v5 (SQLite): what deploys, crashes and operators need. docs/schema.md lists
-- every column and index with the reason it exists.
--
-- occurrences.started_at  when the handler of the current attempt began (NULL while the attempt
--                         is only claimed, e.g. buffered ahead of a free slot): crash recovery
--                         gives a never-started attempt back instead of spending it, and an
--                         outcome-unknown case says when its handler began.

ALTER TABLE occurrences ADD COLUMN started_at INTEGER CHECK (started_at IS NULL OR started_at >= 0);

-- Flows after a fix (SPEC §14): a requeue that revived the children its dead letter had
-- cancelled; the dead letter's earlier outcome then no longer decides them (revive.py).
ALTER TABLE jobledger_requeues ADD COLUMN revived_children INTEGER NOT NULL DEFAULT 0
  CHECK (revived_children IN (0, 1));
