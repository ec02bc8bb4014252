-- The apply script, protocol 2: one board's batch, written atomically.
-- Embedded in the programs at build time with its SHA1 (projector/apply.h
-- documents the request and the replies; projector/apply.c encodes them).
--
-- KEYS: [1] the board's applied-offset markers (hash), [2] its fence,
--       [3 .. n+2] window keys, latest boards also [n+3 .. 2n+2] their
--       event-time hashes.
-- ARGV: [1] protocol, [2] mode b|l|s, [3] order d|a, [4] tie bits,
--       [5] later time makes a larger tie 1|0, [6] sum_min, [7] sum_max,
--       [8] n keys, [9] segments; 3 per segment: marker field, first and
--       last offset; then per key: expiry kind n|a|t, expiry value, the
--       count of plain entries of each segment, the count of special
--       entries of each segment, the plain entries (segment by segment),
--       the special entries (flags r|rv first).
--       Entry: best composite, member; latest composite, stamp, member;
--       sum delta, tie, member.
--
-- Nothing is written before every check has passed: Redis keeps a script's
-- earlier writes when a later call fails. Every key is touched before the
-- first write: markers by HMGET, sum windows by ZMSCORE, latest stamps by
-- HMGET, and the other window keys (best, latest) by TYPE.
if ARGV[1] ~= '2' then return {'protocol', '2', ARGV[1]} end
local mode, order = ARGV[2], ARGV[3]
local nkeys, nseg = tonumber(ARGV[8]), tonumber(ARGV[9])
if redis.call('EXISTS', KEYS[2]) == 1 then return {'fenced', KEYS[2]} end

-- which segments were applied before
local fields = {}
for s = 1, nseg do fields[s] = ARGV[7 + 3 * s] end
local marks = redis.pcall('HMGET', KEYS[1], unpack(fields))
if marks.err then return {'wrongtype', KEYS[1]} end
local apply, applied, skipped, partial, moved = {}, 0, 0, {}, {}
for s = 1, nseg do
  local p = 7 + 3 * s
  local m = marks[s] and tonumber(marks[s]) or -1
  if m >= tonumber(ARGV[p + 2]) then
    skipped = skipped + 1
  elseif m < tonumber(ARGV[p + 1]) then
    apply[s] = true
    applied = applied + 1
    moved[#moved + 1] = ARGV[p]
    moved[#moved + 1] = ARGV[p + 2]
  else
    partial[#partial + 1] = ARGV[p]
    partial[#partial + 1] = marks[s]
  end
end
if #partial > 0 then return {'partial', unpack(partial)} end
if applied == 0 then return {'ok', 0, skipped} end

local width = (mode == 'b') and 2 or 3
local CHUNK = 6000 -- values per call: unpack of ~8,000 fails on Redis 7.0

-- where each key's entries are, and which to apply
local keys, pos = {}, 10 + 3 * nseg
for k = 1, nkeys do
  local key = {name = KEYS[k + 2], kind = ARGV[pos], at = ARGV[pos + 1], runs = {}, specials = {}}
  if key.kind ~= 'n' then
    local at = tonumber(key.at)
    if not at or at <= 0 or at > 9007199254740992 or at % 1 ~= 0 then
      return {'badarg', key.name}
    end
  end
  local plain = pos + 2 + 2 * nseg
  local special = plain
  for s = 1, nseg do special = special + width * tonumber(ARGV[pos + 1 + s]) end
  local at_special = special
  for s = 1, nseg do
    local np, ns = tonumber(ARGV[pos + 1 + s]), tonumber(ARGV[pos + 1 + nseg + s])
    if apply[s] and np > 0 then key.runs[#key.runs + 1] = {plain, plain + width * np - 1} end
    if apply[s] then
      for e = 0, ns - 1 do key.specials[#key.specials + 1] = at_special + e * (width + 1) end
    end
    plain = plain + width * np
    at_special = at_special + (width + 1) * ns
  end
  -- adjacent runs (every segment applied) are one run
  local merged = {}
  for _, r in ipairs(key.runs) do
    local last = merged[#merged]
    if last and last[2] + 1 == r[1] then last[2] = r[2] else merged[#merged + 1] = {r[1], r[2]} end
  end
  key.runs = merged
  key.busy = #merged > 0 or #key.specials > 0
  keys[k] = key
  pos = at_special
end

local function check_type(name)
  local t = redis.call('TYPE', name).ok
  return t == 'zset' or t == 'none'
end

local function expire(name, key)
  if key.kind == 'a' then
    redis.call('PEXPIREAT', name, key.at)
  elseif key.kind == 't' then
    redis.call('PEXPIRE', name, key.at)
  end
end

if mode == 'b' then
  for _, key in ipairs(keys) do
    if key.busy and not check_type(key.name) then return {'wrongtype', key.name} end
  end
  local gtlt = (order == 'd') and 'GT' or 'LT'
  for _, key in ipairs(keys) do
    if key.busy then
      for _, r in ipairs(key.runs) do
        for i = r[1], r[2], CHUNK do
          redis.call('ZADD', key.name, gtlt, unpack(ARGV, i, math.min(i + CHUNK - 1, r[2])))
        end
      end
      for _, p in ipairs(key.specials) do
        redis.call('ZREM', key.name, ARGV[p + 2])
        if ARGV[p] == 'rv' then redis.call('ZADD', key.name, gtlt, ARGV[p + 1], ARGV[p + 2]) end
      end
      expire(key.name, key)
    end
  end
  redis.call('HSET', KEYS[1], unpack(moved))
  return {'ok', applied, skipped}
end

-- latest and sum: read what is there, decide in Lua, then write
local later_larger = ARGV[5] == '1'
local scale = 2 ^ tonumber(ARGV[4])
local smin, smax = tonumber(ARGV[6]), tonumber(ARGV[7])
local overflow, plans = {}, {}
for k, key in ipairs(keys) do
  if key.busy then
    local entries = {}
    for _, r in ipairs(key.runs) do
      for p = r[1], r[2], width do entries[#entries + 1] = {p, ''} end
    end
    for _, p in ipairs(key.specials) do entries[#entries + 1] = {p + 1, ARGV[p]} end
    local members = {}
    for i, e in ipairs(entries) do members[i] = ARGV[e[1] + 2] end
    local from = key.name
    if mode == 'l' then
      from = KEYS[nkeys + 2 + k]
      if not check_type(key.name) then return {'wrongtype', key.name} end
    end
    local current = {}
    for i = 1, #members, CHUNK do
      local j = math.min(i + CHUNK - 1, #members)
      local got = redis.pcall((mode == 's') and 'ZMSCORE' or 'HMGET', from, unpack(members, i, j))
      if got.err then return {'wrongtype', from} end
      for x = i, j do current[members[x]] = got[x - i + 1] or nil end
    end
    local final, removed, order_seen = {}, {}, {}
    for _, e in ipairs(entries) do
      local p, flags = e[1], e[2]
      local m = ARGV[p + 2]
      if final[m] == nil then order_seen[#order_seen + 1] = m end
      if flags ~= '' then removed[m] = true; current[m] = nil; final[m] = false end
      if flags ~= 'r' then
        if mode == 'l' then
          local stamp = ARGV[p + 1]
          if not current[m] or stamp > current[m] then
            current[m] = stamp
            final[m] = {ARGV[p], stamp}
          elseif final[m] == nil then
            final[m] = false
          end
        else
          local sum, tie = 0, tonumber(ARGV[p + 1])
          local c = current[m] and tonumber(current[m])
          if c then
            sum = math.floor(c / scale)
            local old = c - sum * scale
            if (later_larger and old > tie) or (not later_larger and old < tie) then tie = old end
          end
          sum = sum + tonumber(ARGV[p])
          if sum < smin or sum > smax then
            overflow[#overflow + 1] = tostring(k)
            overflow[#overflow + 1] = m
          end
          local v = string.format('%.0f', sum * scale + tie)
          current[m] = v
          final[m] = {v}
        end
      end
    end
    plans[k] = {final = final, removed = removed, members = order_seen}
  end
end
if #overflow > 0 then return {'overflow', unpack(overflow)} end

for k, key in ipairs(keys) do
  local plan = plans[k]
  if plan then
    local stamps_key = (mode == 'l') and KEYS[nkeys + 2 + k] or nil
    local gone, adds, stamps = {}, {}, {}
    for _, m in ipairs(plan.members) do
      local f = plan.final[m]
      if f then
        adds[#adds + 1] = f[1]
        adds[#adds + 1] = m
        if stamps_key then stamps[#stamps + 1] = m; stamps[#stamps + 1] = f[2] end
      elseif plan.removed[m] then
        gone[#gone + 1] = m
      end
    end
    for i = 1, #gone, CHUNK do
      local j = math.min(i + CHUNK - 1, #gone)
      redis.call('ZREM', key.name, unpack(gone, i, j))
      if stamps_key then redis.call('HDEL', stamps_key, unpack(gone, i, j)) end
    end
    for i = 1, #adds, CHUNK do
      redis.call('ZADD', key.name, unpack(adds, i, math.min(i + CHUNK - 1, #adds)))
    end
    for i = 1, #stamps, CHUNK do
      redis.call('HSET', stamps_key, unpack(stamps, i, math.min(i + CHUNK - 1, #stamps)))
    end
    expire(key.name, key)
    if stamps_key then expire(stamps_key, key) end
  end
end
redis.call('HSET', KEYS[1], unpack(moved))
return {'ok', applied, skipped}
