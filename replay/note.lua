-- One of replay's reopening notes (<prefix>~replay-reopening, lease.h) set
-- or deleted, unless a later run's (later_mark, projector/mark.lua) is
-- there: a run stalled past its lease leaves it. Embedded at build time
-- (replay/CMakeLists.txt).
-- KEYS: [1] the notes. ARGV: [1] our mark, [2] the field ("<window>
-- <board>"), [3] set|del. Answers 1, or 0 when a later run's note is there.
-- include mark.lua
local found = redis.call('HGET', KEYS[1], ARGV[2])
if found and later_mark(found, ARGV[1]) then return 0 end
if ARGV[3] == 'set' then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[1])
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
return 1
