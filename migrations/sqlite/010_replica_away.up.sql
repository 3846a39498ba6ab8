-- Whether the chain was away from its routing key's first replica when this response ran, because
-- that replica was down (docs/fleet.md, "Failover and return"): the chain's next turn goes back
-- to it once it is healthy again, from whichever respgate replica takes the turn.
ALTER TABLE responses ADD COLUMN replica_away INTEGER NOT NULL DEFAULT 0;
