-- replay's swap: one board's staging copy in place of its live keys, atomically.
-- Embedded at build time (replay/CMakeLists.txt); swap.c documents the
-- arguments and the answers. A board's marker is the larger of its hash
-- (written by the apply script) and its sorted set (written with ZADD GT by
-- boards without a script).
local n, mode, f, open = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
-- swapped already (a resend after a lost reply): the swap leaves this field
-- in place of the staging markers, for a few minutes
if redis.call('HGET', KEYS[3], '~swapped') then return {'gone'} end
-- a later run's fence (fence.lua, later_mark; ARGV[5] is ours): this run
-- lost its lease while it was stalled, and that run may be rebuilding the
-- board
-- include mark.lua
local held = redis.call('TYPE', KEYS[5]).ok == 'string' and redis.call('GET', KEYS[5])
if held and later_mark(held, ARGV[5]) then return {'taken', held} end
local function marker(hash, zset, field)
  local h = tonumber(redis.call('HGET', hash, field) or '-1')
  local z = tonumber(redis.call('ZSCORE', zset, field) or '-1')
  return math.max(h, z)
end
for i = 0, f - 1 do
  local field, read, wrote = ARGV[6 + 3 * i], tonumber(ARGV[7 + 3 * i]), tonumber(ARGV[8 + 3 * i])
  local staged = marker(KEYS[3], KEYS[4], field)
  if staged < wrote then
    return {'lost', field, string.format('%.0f', staged), string.format('%.0f', wrote)}
  end
  local live = marker(KEYS[1], KEYS[2], field)
  if live > read then return {'behind', field, string.format('%.0f', live)} end
  if mode == 'exact' and live < staged then
    return {'differ', field, string.format('%.0f', live), string.format('%.0f', staged)}
  end
end
-- staging keys without their markers, which replay wrote nothing into
-- (deleted by hand?)
if n > 0 and redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then return {'vanished'} end
-- the windows the rebuild found open join the live ~open, but for those
-- ~final (KEYS[6]) names closed (the rebuild wrote their events before the
-- close): the closer would look at them for nothing
local function merge_open(staged, live)
  local windows = redis.call('HGETALL', staged)
  for j = 1, #windows, 2 do
    local st = redis.call('HGET', KEYS[6], 's:' .. windows[j])
    if st ~= 'claimed' and st ~= 'published' then
      redis.call('HSET', live, windows[j], windows[j + 1])
    end
  end
  redis.call('DEL', staged)
end
for i = 1, n do
  if i == open then
    merge_open(KEYS[7 + i], KEYS[7 + n + i])
  elseif redis.call('EXISTS', KEYS[7 + i]) == 1 then
    redis.call('RENAME', KEYS[7 + i], KEYS[7 + n + i])
  else
    redis.call('DEL', KEYS[7 + n + i])
  end
end
for i = 8 + 2 * n, #KEYS do redis.call('DEL', KEYS[i]) end
if mode == 'advance' then
  -- into the key the board's writes use (no stray second marker key);
  -- never backwards: the checks above found both markers at or below
  local zset = redis.call('EXISTS', KEYS[2], KEYS[4]) > 0
  for i = 0, f - 1 do
    if zset then
      redis.call('ZADD', KEYS[2], 'GT', ARGV[7 + 3 * i], ARGV[6 + 3 * i])
    else
      redis.call('HSET', KEYS[1], ARGV[6 + 3 * i], ARGV[7 + 3 * i])
    end
  end
end
-- replay's fence goes; a latest board keeping ~newest (KEYS[7], the copy's
-- or, when only windows were rebuilt, the live one) keeps the hash there
-- (apply.lua) that holds pods of the previous release off it
redis.call('DEL', KEYS[3], KEYS[4])
if redis.call('TYPE', KEYS[5]).ok ~= 'hash' then
  redis.call('DEL', KEYS[5])
  if redis.call('EXISTS', KEYS[7]) == 1 then redis.call('HSET', KEYS[5], 'apply', '5') end
end
redis.call('HSET', KEYS[3], '~swapped', '1')
redis.call('PEXPIRE', KEYS[3], 300000)
return {'ok'}
