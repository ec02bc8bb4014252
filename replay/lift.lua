-- replay's fence lifted from a board it did not swap (swap.lua lifts it from
-- those it did). Embedded at build time (replay/CMakeLists.txt).
-- KEYS: [1] the board's fence, [2] its ~newest.
-- A latest board keeping ~newest has the hash there again (apply.lua): it
-- holds pods of the previous release off the board, and the apply script
-- would put it back only at the board's next write, which such a pod could
-- come before.
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[1], 'apply', '5') end
return 'OK'
