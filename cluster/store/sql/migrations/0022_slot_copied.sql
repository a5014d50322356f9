-- Version 22: a move's copy is one transaction on the target, and says so
-- (issue 42, cluster/store/postgres/moves.py).
--
-- A batch's rows are COPYed straight into their tables, without staging
-- and merging them (ON CONFLICT DO NOTHING cost as much as the copy
-- itself). The same transaction fences the batch's slots 'copied' on the
-- target: still not served there (every fence refuses writes), but holding
-- the batch's rows, all of them. A copy run again finds its slots 'copied'
-- and has nothing to do; one cut short left nothing behind. The flip
-- unfences them; a roll-back deletes the rows and fences them 'absent',
-- again in one transaction, so a target holds a slot's rows exactly when
-- it serves the slot or has it 'copied'.
ALTER TABLE slot_fences DROP CONSTRAINT slot_fences_state_check;
ALTER TABLE slot_fences ADD CONSTRAINT slot_fences_state_check
    CHECK (state IN ('moving', 'absent', 'copied'));

-- Their staging and merging, no longer called.
DROP FUNCTION vakit_slot_stage(text);
DROP FUNCTION vakit_slot_merge(text);
