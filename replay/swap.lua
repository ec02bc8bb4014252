-- replay's swap: one board's staging copy in place of its live keys, atomically.
-- Embedded at build time (replay/CMakeLists.txt); replay.c documents the
-- arguments and the answers.
local n, mode, f = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if n > 0 and redis.call('EXISTS', KEYS[2]) == 0 then return {'gone'} end
for i = 0, f - 1 do
  local field, read = ARGV[4 + 2 * i], tonumber(ARGV[5 + 2 * i])
  local live = tonumber(redis.call('HGET', KEYS[1], field) or '-1')
  if live > read then return {'behind', field, tostring(live)} end
  local staged = tonumber(redis.call('HGET', KEYS[2], field) or '-1')
  if mode == 'exact' and live < staged then
    return {'differ', field, tostring(live), tostring(staged)}
  end
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[3 + i]) == 1 then
    redis.call('RENAME', KEYS[3 + i], KEYS[3 + n + i])
  else
    redis.call('DEL', KEYS[3 + n + i])
  end
end
for i = 4 + 2 * n, #KEYS do redis.call('DEL', KEYS[i]) end
if mode == 'advance' then
  for i = 0, f - 1 do redis.call('HSET', KEYS[1], ARGV[4 + 2 * i], ARGV[5 + 2 * i]) end
end
redis.call('DEL', KEYS[2], KEYS[3])
return {'ok'}
