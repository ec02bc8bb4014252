-- replay's fence on a board: set, or lifted from a board it did not swap
-- (swap.lua lifts it from those it did). Embedded at build time
-- (replay/CMakeLists.txt); swap.c documents when each is sent.
-- KEYS: [1] the board's fence, [2] its ~newest.
-- ARGV: [1] set|lift, [2] the fence's value, "<epoch> <lease value>"
--       (lease.h: "<epoch> <host> <pid> <ms>"), [3] its TTL in ms.
-- The fence of a later run (later_mark, projector/mark.lua) is neither
-- overwritten nor lifted: setting fails, and the run stops; lifting
-- leaves it.
-- include mark.lua
local held = redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1])
local later = held and later_mark(held, ARGV[2])
if ARGV[1] == 'set' then
  if later then
    -- (short: replay shows the first 120 characters)
    return redis.error_reply('ERR lease lost: a later replay run holds ' .. KEYS[1] .. ' (' ..
                             held .. ')')
  end
  return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
if later then return redis.status_reply('OK') end
-- a latest board keeping ~newest has the hash there again (apply.lua): it
-- holds pods of the previous release off the board, and the apply script
-- would put it back only at the board's next write, which such a pod could
-- come before
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[1], 'apply', '5') end
return redis.status_reply('OK')
