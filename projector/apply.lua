-- The apply script, protocol 5: one board's batch, written atomically.
-- Embedded in the programs at build time with its SHA1 (projector/apply.h
-- documents the request and the replies; projector/apply.c encodes them).
--
-- KEYS: [1] the board's applied-offset markers (hash), [2] the markers of
--       boards written without a script (sorted set, ZADD GT), [3] its
--       fence, [4] its dedupe set, [5 .. n+4] window keys, latest boards
--       also [n+5 .. 2n+4] their event-time hashes and [2n+5] ~newest.
-- ARGV: [1] protocol, [2] mode b|l|s, [3] order d|a, [4] tie bits,
--       [5] later time makes a larger tie 1|0, [6] sum_min, [7] sum_max,
--       [8] n keys, [9] segments, [10] dedupe window in seconds (0: off),
--       [11] latest boards: b (may start ~newest) or w (per-window stamps
--       only), [12] latest boards: "<prefix>{<tag>}:", the start of the
--       board's key names;
--       4 per segment: marker field, first and last offset, count of its
--       event ids; the event ids, segment by segment (each segment's
--       newest first), as pairs: stamp (event time in seconds * 2^20 +
--       fingerprint), id; then their offsets in the same order; latest boards
--       then per segment the count of its players and per player: the
--       player, its newest ("<stamp>|<window>|...|", see latest() below, or
--       "" when its entries hold no value); then per key: expiry kind n|a|t,
--       expiry value, latest boards the window's name (calendar windows;
--       "" for custom ones), the count of plain entries of each segment, the
--       count of special entries of each segment, the plain entries
--       (segment by segment), the special entries (flags first: r|rv, and
--       for latest boards v, a value with a stamp of its own).
--       Plain entry: best composite, member; latest composite, member (its
--       stamp is its player's newest); sum delta, tie, member. Special:
--       flags, then the same, latest boards with the stamp before the
--       member. Decaying boards (best) add KEYS [n+5 .. n+8] (~patches,
--       ~decay, the overall board, its shadow) and a section after the
--       keys' (see decay_write below).
--
-- Nothing is written before every check has passed: Redis keeps a script's
-- earlier writes when a later call fails. Every key is touched before the
-- first write: markers by HMGET and ZMSCORE, sum windows by ZMSCORE, latest
-- boards' ~newest and the stamps they read by HMGET, the dedupe set by
-- ZRANGE (its newest), and the other keys they write by TYPE.
if ARGV[1] ~= '5' then return {'protocol', '5', ARGV[1]} end
local CHUNK = 6000 -- values per call: unpack of ~8,000 fails on Redis 7.0
-- Numbers the request and the markers hold as strings are converted with
-- "+ 0" on the paths every request takes (its segments, keys, a latest
-- board's players, a sum board's entries): one strtod, where tonumber makes
-- two (Lua 5.1 checks, then converts).
local function refused(r, name)
  return r.err and string.find(r.err, "can't run this command", 1, true) and {'noperm', name}
end

-- A decaying board's rebuild, one step (rebuild.c drives it).
-- KEYS: [1] ~decay (gen, rebuilding, holder, until, rule, finished: the
--       gen last rebuilt and its holder), [2] the shadow, [3]
--       the overall board, [4] ~patches.
-- ARGV: [2] R, [3] take|chunk|rekey|finish, [4] holder, [5] lease in ms;
--       take: [6] the caller's rule (another one starts a rebuild: an idle
--       board found by the sweep after a settings change); it answers the
--       patches with their scores;
--       chunk, rekey and finish: [6] gen; chunk: [7] GT|LT, then composite,
--       member pairs for the shadow; rekey: score, member pairs, the whole
--       of ~patches as the caller's configuration orders it (a new gen).
if ARGV[2] == 'R' then
  local step, holder = ARGV[3], ARGV[4]
  local st = redis.pcall('HMGET', KEYS[1], 'gen', 'rebuilding', 'holder', 'until', 'rule',
                         'finished')
  if st.err then return refused(st, 'hmget') or {'wrongtype', KEYS[1]} end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local till = string.format('%.0f', now + tonumber(ARGV[5]))
  if step == 'take' then
    -- another's lease first: a pod of other settings must not undo its work
    if st[2] and st[3] and st[3] ~= holder and tonumber(st[4]) > now then
      return {'busy', st[3], string.format('%.0f', tonumber(st[4]) - now)}
    end
    if st[5] ~= ARGV[6] then
      st[1] = tostring((tonumber(st[1]) or 0) + 1)
      st[2] = '1'
      redis.call('HSET', KEYS[1], 'gen', st[1], 'rebuilding', '1', 'rule', ARGV[6])
      redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '+inf')
    end
    if not st[2] then return {'done'} end
    redis.call('HSET', KEYS[1], 'holder', holder, 'until', till)
    local r = {'go', st[1]}
    for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')) do r[#r + 1] = m end
    return r
  end
  -- this gen rebuilt already by this holder: a finish sent again after its
  -- reply was lost (one whose lease ran out while another finished: stale)
  if step == 'finish' and not st[2] and st[6] == ARGV[6] .. ' ' .. holder then return {'ok'} end
  if not st[2] or st[1] ~= ARGV[6] or st[3] ~= holder then return {'stale'} end
  if step == 'chunk' then
    for i = 8, #ARGV, CHUNK do
      redis.call('ZADD', KEYS[2], ARGV[7], unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
    end
    redis.call('HSET', KEYS[1], 'until', till)
    return {'ok'}
  end
  if step == 'rekey' then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '+inf')
    for i = 7, #ARGV, CHUNK do
      redis.call('ZADD', KEYS[4], unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
    end
    redis.call('HSET', KEYS[1], 'gen', tostring(tonumber(st[1]) + 1))
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '+inf')
    return {'ok'}
  end
  if redis.acl_check_cmd and not redis.acl_check_cmd('RENAME', KEYS[2], KEYS[3]) then
    return {'noperm', 'rename'}
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('RENAME', KEYS[2], KEYS[3])
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '+inf')
  end
  redis.call('HDEL', KEYS[1], 'rebuilding', 'holder', 'until')
  redis.call('HSET', KEYS[1], 'finished', st[1] .. ' ' .. holder)
  return {'ok'}
end

-- A split board's merged top of one window, one step (tops.c drives it).
-- KEYS: [1] ~tops (per window: g:<window> its generation, h: and u: the
--       refresher's lease), [2] the merged top.
-- ARGV: [2] T, [3] take|write, [4] holder, [5] lease in ms, [6] window;
--       write: [7] the generation taken, [8] when the top expires (ms
--       since the epoch, the last shard key's PEXPIRETIME; -1 never, -2 no
--       shard has the window: the top is deleted), then
--       composite, member pairs, the merged top.
if ARGV[2] == 'T' then
  local g, h, u = 'g:' .. ARGV[6], 'h:' .. ARGV[6], 'u:' .. ARGV[6]
  local st = redis.pcall('HMGET', KEYS[1], g, h, u)
  if st.err then return refused(st, 'hmget') or {'wrongtype', KEYS[1]} end
  if ARGV[3] == 'take' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if st[2] and st[2] ~= ARGV[4] and tonumber(st[3]) > now then
      return {'busy', st[2], string.format('%.0f', tonumber(st[3]) - now)}
    end
    redis.call('HSET', KEYS[1], h, ARGV[4], u, string.format('%.0f', now + tonumber(ARGV[5])))
    return {'go', st[1] or '0'}
  end
  if st[2] ~= ARGV[4] or (st[1] or '0') ~= ARGV[7] then return {'stale'} end
  local ty = redis.call('TYPE', KEYS[2]).ok
  if ty ~= 'none' and ty ~= 'zset' then return {'wrongtype', KEYS[2]} end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '+inf')
  if ARGV[8] == '-2' then -- the window is gone: so are its top, whatever
    -- entries came with it, and its fields (a snapshot taken before has
    -- lost its lease, and is refused)
    redis.call('HDEL', KEYS[1], g, h, u)
    return {'ok', '0'}
  end
  for i = 9, #ARGV, CHUNK do
    redis.call('ZADD', KEYS[2], unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
  end
  if tonumber(ARGV[8]) > 0 and #ARGV > 8 then redis.call('PEXPIREAT', KEYS[2], ARGV[8]) end
  local gen = tostring(tonumber(ARGV[7]) + 1)
  redis.call('HSET', KEYS[1], g, gen)
  redis.call('HDEL', KEYS[1], h, u)
  return {'ok', gen}
end

-- A closed window's final standings, one step (closer.c drives it).
-- KEYS: [1] the board's markers (hash), [2] its markers written without a
--       script (sorted set), [3] ~open, [4] ~final (per window: s:<w>
--       claimed|published, or reopening|reopened (replay --republish), c:
--       closed at, n: players, o: each partition's close offset, h: and u:
--       the publisher's lease, p: the holder that published it, r:<w>:<part>
--       the record's bytes, e: the replay run that reopened it last),
--       [5] the
--       window key, [6] the final key, [7] the slot's ~intact mark (apply.h:
--       none, and the node was replaced empty or flushed since; a claim
--       then freezes nothing and answers lost, until replay rebuilt it).
-- ARGV: [2] C, [3] claim|keep|done|restore|reopen|reopened|unreopen, [4] holder, [5]
--       lease in ms, [6] the window ("weekly:2026-W48"); claim: [7] top (0:
--       all), [8] d|a, [9] closed at (ms); keep: [7] part, [8] its bytes
--       (the first kept stay: the answer is them); done: [7] 1 keep the
--       final key, 0 not.
if ARGV[2] == 'C' then
  local w = ARGV[6]
  local st = redis.pcall('HMGET', KEYS[4], 's:' .. w, 'h:' .. w, 'u:' .. w, 'p:' .. w, 'e:' .. w)
  if st.err then return refused(st, 'hmget') or {'wrongtype', KEYS[4]} end
  -- reopen, reopened, unreopen: [4] is the replay run's mark
  -- (projector/mark.lua), kept by reopen; a later run's found there (we
  -- were stalled past our lease) means this run changes nothing
  if ARGV[3] == 'reopen' or ARGV[3] == 'reopened' or ARGV[3] == 'unreopen' then
    -- include mark.lua
    if st[5] and later_mark(st[5], ARGV[4]) then return {'taken', st[5]} end
  end
  -- restore (published.h): a window the results topic says was published,
  -- put back where ~final lost it: [7] closed at, [8] players, [9] the
  -- close offsets, [10] 1 keep the final key, then its composite and
  -- member pairs
  if ARGV[3] == 'restore' then
    if st[1] then return {'present', st[1]} end
    local ty = redis.call('TYPE', KEYS[6]).ok
    if ty ~= 'none' and ty ~= 'zset' then return {'wrongtype', KEYS[6]} end
    redis.call('DEL', KEYS[6])
    if ARGV[10] == '1' then
      for i = 11, #ARGV, 7000 do
        redis.call('ZADD', KEYS[6], unpack(ARGV, i, math.min(i + 6999, #ARGV)))
      end
    end
    redis.call('HSET', KEYS[4], 's:' .. w, 'published', 'c:' .. w, ARGV[7], 'n:' .. w, ARGV[8],
               'o:' .. w, ARGV[9])
    redis.call('HDEL', KEYS[3], w)
    return {'restored'}
  end
  -- reopen (replay --republish): a published window is written again (the
  -- F section takes only claimed and published ones as closed) and nobody
  -- claims it while replay rebuilds it whole; reopened, once replay swapped
  -- it in: listed in ~open as due at once, the next claim freezes it afresh
  if ARGV[3] == 'reopen' then
    if st[1] == 'claimed' then return {'claimed', st[2] or ''} end
    if not st[1] then return {'open'} end
    redis.call('HSET', KEYS[4], 's:' .. w, 'reopening', 'e:' .. w, ARGV[4])
    redis.call('HDEL', KEYS[4], 'p:' .. w) -- published again by the next claim's holder
    return {'ok'}
  end
  if ARGV[3] == 'reopened' then
    if st[1] ~= 'reopening' then return {'stale', st[1] or ''} end
    redis.call('HSET', KEYS[3], w, redis.call('HGET', KEYS[4], 'c:' .. w) or '0')
    redis.call('HSET', KEYS[4], 's:' .. w, 'reopened')
    return {'ok'}
  end
  -- unreopen (replay --republish): one left reopening whose live key has
  -- since expired (its ttl) cannot be rebuilt: published again as it
  -- closed (its final key and its record stand), out of ~open
  if ARGV[3] == 'unreopen' then
    if st[1] ~= 'reopening' then return {'stale', st[1] or ''} end
    redis.call('HSET', KEYS[4], 's:' .. w, 'published')
    redis.call('HDEL', KEYS[3], w)
    return {'ok'}
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if ARGV[3] == 'claim' then
    if st[1] == 'published' then -- listed again (a replay's ~open): no more
      redis.call('HDEL', KEYS[3], w)
      return {'published'}
    end
    if st[1] == 'reopening' then return {'reopening'} end
    if st[2] and st[2] ~= ARGV[4] and tonumber(st[3]) > now then return {'busy', st[2]} end
    if not st[1] or st[1] == 'reopened' then
      local intact = redis.pcall('EXISTS', KEYS[7])
      if type(intact) == 'table' then return refused(intact, 'exists') or {'error', intact.err} end
      if intact == 0 then return {'lost'} end
      -- the standings, frozen with each partition's close offset: the
      -- first offset whose events come too late (the board's markers + 1)
      for _, k in ipairs({5, 6}) do
        local ty = redis.call('TYPE', KEYS[k]).ok
        if ty ~= 'none' and ty ~= 'zset' then return {'wrongtype', KEYS[k]} end
      end
      local marks = redis.pcall('HGETALL', KEYS[1])
      if marks.err then return refused(marks, 'hgetall') or {'wrongtype', KEYS[1]} end
      local zmarks = redis.pcall('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
      if zmarks.err then return refused(zmarks, 'zrange') or {'wrongtype', KEYS[2]} end
      local at, order = {}, {}
      for _, list in ipairs({marks, zmarks}) do
        for i = 1, #list, 2 do
          local f, v = list[i], tonumber(list[i + 1])
          if not at[f] then order[#order + 1] = f end
          if not at[f] or v > at[f] then at[f] = v end
        end
      end
      table.sort(order)
      local offsets = {}
      for i, f in ipairs(order) do offsets[i] = f .. '=' .. string.format('%.0f', at[f] + 1) end
      redis.call('DEL', KEYS[6])
      local players = redis.call('ZCARD', KEYS[5])
      if players > 0 then
        local stop = tonumber(ARGV[7]) > 0 and tonumber(ARGV[7]) - 1 or -1
        if ARGV[8] == 'd' then
          redis.call('ZRANGESTORE', KEYS[6], KEYS[5], 0, stop, 'REV')
        else
          redis.call('ZRANGESTORE', KEYS[6], KEYS[5], 0, stop)
        end
      end
      redis.call('HSET', KEYS[4], 's:' .. w, 'claimed', 'c:' .. w, ARGV[9], 'n:' .. w, players,
                 'o:' .. w, table.concat(offsets, ','))
      redis.call('HDEL', KEYS[3], w)
    end
    redis.call('HSET', KEYS[4], 'h:' .. w, ARGV[4], 'u:' .. w,
               string.format('%.0f', now + tonumber(ARGV[5])))
    local meta = redis.call('HMGET', KEYS[4], 'c:' .. w, 'n:' .. w, 'o:' .. w)
    return {'go', meta[1], meta[2], meta[3]}
  end
  -- published by this holder (p:), nobody's lease left: a done sent again
  -- after its reply was lost. A publisher whose lease ran out while
  -- another finished is stale: the window was published once, by the other
  if ARGV[3] == 'done' and st[1] == 'published' and not st[2] and st[4] == ARGV[4] then
    return {'ok'}
  end
  if st[1] ~= 'claimed' or st[2] ~= ARGV[4] then return {'stale'} end
  if ARGV[3] == 'keep' then
    local field = 'r:' .. w .. ':' .. ARGV[7]
    redis.call('HSETNX', KEYS[4], field, ARGV[8])
    return {'ok', redis.call('HGET', KEYS[4], field)}
  end
  -- done: every part acknowledged
  local drop = {'h:' .. w, 'u:' .. w}
  for _, f in ipairs(redis.call('HKEYS', KEYS[4])) do
    if string.sub(f, 1, #w + 3) == 'r:' .. w .. ':' then drop[#drop + 1] = f end
  end
  redis.call('HDEL', KEYS[4], unpack(drop))
  redis.call('HSET', KEYS[4], 's:' .. w, 'published', 'p:' .. w, ARGV[4])
  if ARGV[7] == '0' then redis.call('DEL', KEYS[6]) end
  return {'ok'}
end

local mode, order = ARGV[2], ARGV[3]
local nkeys, nseg = tonumber(ARGV[8]), tonumber(ARGV[9])
-- replay's fence (a string) holds the board; a hash there is the mark of a
-- latest board that keeps ~newest (see latest() below): it fences only the
-- previous release, whose script takes any key there for replay's
local fence = redis.call('TYPE', KEYS[3]).ok
if fence ~= 'none' and fence ~= 'hash' then return {'fenced', KEYS[3]} end
-- a decaying board (best only): KEYS[D] ~patches, [D + 1] ~decay, [D + 2]
-- its overall board, [D + 3] the shadow a rebuild fills
-- after the window keys (and latest boards' stamps and ~newest): a
-- decaying board's four keys, then, for windows with final standings,
-- ~open and ~final
local extra = #KEYS - 4 - nkeys - ((mode == 'l') and nkeys + 1 or 0)
local D = (mode == 'b' and extra >= 4) and nkeys + 5 or nil
local F = (extra == 2 or extra == 6) and #KEYS - 1 or nil

-- which segments were applied before: the larger of the two markers (a
-- board's profile may have changed between the two ways of writing)
local fields = {}
for s = 1, nseg do fields[s] = ARGV[9 + 4 * s] end
local marks = redis.pcall('HMGET', KEYS[1], unpack(fields))
if marks.err then return refused(marks, 'hmget') or {'wrongtype', KEYS[1]} end
local zmarks = redis.pcall('ZMSCORE', KEYS[2], unpack(fields))
if zmarks.err then return refused(zmarks, 'zmscore') or {'wrongtype', KEYS[2]} end
for s = 1, nseg do
  if zmarks[s] and (not marks[s] or zmarks[s] + 0 > marks[s] + 0) then
    marks[s] = zmarks[s]
  end
end
local apply, applied, skipped, partial, moved = {}, 0, 0, {}, {}
for s = 1, nseg do
  local p = 9 + 4 * s
  local m = marks[s] and marks[s] + 0 or -1
  if m >= ARGV[p + 2] + 0 then
    skipped = skipped + 1
  elseif m < ARGV[p + 1] + 0 then
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
-- nothing to write: whether a rebuild its holder left is due (the caller
-- takes it on)
local function left_rebuilding()
  if not D then return false end
  local r = redis.pcall('HMGET', KEYS[D + 1], 'rebuilding')
  return not r.err and r[1] and true or false
end
-- a board with final standings goes on to name the closed windows its
-- events touch (see the F section), applied or not
if applied == 0 and not F then
  if left_rebuilding() then return {'ok', 0, skipped, 'rebuilding'} end
  return {'ok', 0, skipped}
end

-- The caller's ACL user may call every command this script calls after
-- its first write (a refused call would leave the writes before it, and a
-- retry would apply them again); the reads before it fail harmlessly.
local w = KEYS[5] or KEYS[1]
for _, call in ipairs({{'ZADD', w, '0', 'm'}, {'ZREM', w, 'm'}, {'HSET', KEYS[1], 'f', '0'},
                       {'HDEL', KEYS[1], 'f'}, {'PEXPIRE', w, '1'}, {'PEXPIREAT', w, '1'},
                       {'ZRANGE', KEYS[4], '0', '0'}, {'ZREMRANGEBYSCORE', KEYS[4], '0', '0'},
                       {'TIME'}}) do
  if redis.acl_check_cmd and not redis.acl_check_cmd(unpack(call)) then -- Redis 7 on
    return {'noperm', string.lower(call[1])}
  end
end

local width = (mode == 's') and 3 or 2 -- a plain entry's values
local swidth = (mode == 'l') and 4 or width + 1 -- a special entry's: its flags first

-- dedupe: the ids of the applied segments' events (each once: the planner
-- leaves a retry within the batch out), as (stamp, id) pairs, a segment's
-- in one run, newest first, then each id's offset in the same order. An
-- event whose time is more than the window behind the set's newest is
-- outside the window: it counts, and its id is neither looked up nor
-- recorded (the set holds no id that old with its own stamp, but those a
-- window made smaller left, which count as forgotten).
-- One the set holds makes the call write nothing and name them (field,
-- offset, d: the same stamp, c: another), and the caller plans the board
-- again without them. Only the ids within the window behind the newest
-- after this request are recorded: each segment's first ones (found by
-- bisection, as are those looked up), which ZADD takes as they are
local dwin, pos = tonumber(ARGV[10]), 13 + 4 * nseg
local idruns, allids = {}, 0 -- the applied segments': segment, first pair, count, number
for s = 1, nseg do
  local ns = ARGV[12 + 4 * s] + 0
  if apply[s] and ns > 0 then idruns[#idruns + 1] = {s, pos, ns, allids} end
  allids = allids + ns
  pos = pos + 2 * ns
end
local offsets = pos
pos = pos + allids
-- latest boards: each segment's players with their newest (latest() below)
local players = {}
if mode == 'l' then
  for s = 1, nseg do
    local n = ARGV[pos] + 0
    players[s] = {pos + 1, n}
    pos = pos + 1 + 2 * n
  end
end
-- the set's newest second before and after this request, and how many of
-- a run's ids have a stamp of at least 'from' (second)
local unit, was, newest = 2 ^ 20, nil, nil
local function within(r, from)
  local lo, hi, bound = 0, r[3], from * unit
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ARGV[r[2] + 2 * mid] + 0 < bound then hi = mid else lo = mid + 1 end
  end
  return lo
end
if #idruns > 0 then
  local top = redis.pcall('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  if top.err then return refused(top, 'zrange') or {'wrongtype', KEYS[4]} end
  was = top[2] and math.floor((top[2] + 0) / unit)
  newest = was
  for _, r in ipairs(idruns) do
    local second = math.floor((ARGV[r[2]] + 0) / unit)
    if not newest or second > newest then newest = second end
  end
  if was then
    -- an id held with a stamp the window has passed counts as forgotten
    -- (the window is smaller than when the set was last trimmed)
    local ids, n, from = {}, 0, (was - dwin) * unit
    for _, r in ipairs(idruns) do
      r[5] = within(r, was - dwin) -- looked up
      for e = r[2] + 1, r[2] + 2 * r[5] - 1, 2 do
        n = n + 1
        ids[n] = ARGV[e]
      end
    end
    -- the x-th id looked up: its run and its place in the run
    local function id_at(x)
      for _, r in ipairs(idruns) do
        if x <= r[5] then return r, x - 1 end
        x = x - r[5]
      end
    end
    local dups = {}
    for i = 1, n, CHUNK do
      local j = math.min(i + CHUNK - 1, n)
      local got = redis.pcall('ZMSCORE', KEYS[4], unpack(ids, i, j))
      if got.err then return refused(got, 'zmscore') or {'wrongtype', KEYS[4]} end
      for x = i, j do
        local held = got[x - i + 1]
        if held and held + 0 >= from and #dups < CHUNK then
          local r, k = id_at(x)
          dups[#dups + 1] = ARGV[9 + 4 * r[1]]
          dups[#dups + 1] = ARGV[offsets + r[4] + k]
          dups[#dups + 1] = (held + 0 == ARGV[r[2] + 2 * k] + 0) and 'd' or 'c'
        end
      end
    end
    if #dups > 0 then return {'duplicate', unpack(dups)} end
  end
end

-- records the ids with the writes; when the newest second moved, forgets
-- those the window behind it has passed, and the set expires a week past
-- the window after it (an instant of event time, the same for a replay;
-- none when that is already past)
local function remember()
  if not newest then return end
  for _, r in ipairs(idruns) do
    local last = r[2] + 2 * within(r, newest - dwin) - 1
    for i = r[2], last, CHUNK do
      redis.call('ZADD', KEYS[4], unpack(ARGV, i, math.min(i + CHUNK - 1, last)))
    end
  end
  if was and newest == was then return end
  if was then
    local from = string.format('%.0f', (newest - dwin) * unit)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. from)
  end
  local expire = (newest + dwin + 604800) * 1000
  if expire > tonumber(redis.call('TIME')[1]) * 1000 then
    redis.call('PEXPIREAT', KEYS[4], string.format('%.0f', expire))
  end
end

-- where each key's entries are, and which to apply
local keys = {}
for k = 1, nkeys do
  local key = {name = KEYS[k + 4], kind = ARGV[pos], at = ARGV[pos + 1], runs = {}, specials = {},
               segments = 0}
  if key.kind ~= 'n' then
    local at = tonumber(key.at)
    if not at or at <= 0 or at > 9007199254740992 or at % 1 ~= 0 then
      return {'badarg', key.name}
    end
  end
  local c0 = pos + 2 -- the first count
  if mode == 'l' then -- and each plain run's and special entry's segment
    key.window, key.pruns, key.sseg, c0 = ARGV[pos + 2], {}, {}, pos + 3
  end
  local plain = c0 + 2 * nseg
  local plains, special = {}, plain -- each segment's plain entries
  for s = 1, nseg do
    plains[s] = ARGV[c0 - 1 + s] + 0
    special = special + width * plains[s]
  end
  local at_special = special
  for s = 1, nseg do
    local np, ns = plains[s], ARGV[c0 - 1 + nseg + s] + 0
    key.touched = key.touched or np > 0 or ns > 0 -- applied or not
    if apply[s] and np > 0 then
      key.segments = key.segments + 1
      key.runs[#key.runs + 1] = {plain, plain + width * np - 1}
      if key.pruns then key.pruns[#key.pruns + 1] = {plain, plain + width * np - 1, s} end
    end
    if apply[s] then
      for e = 0, ns - 1 do
        key.specials[#key.specials + 1] = at_special + e * swidth
        if key.sseg then key.sseg[#key.specials] = s end
      end
    end
    plain = plain + width * np
    at_special = at_special + swidth * ns
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

-- a decaying board's section: "D", max_age, the order (v: versions, the
-- age counting the patches after; l: a configured list, the age the
-- distance in it), the rule (stacking, tax, max_age, scale, order, key, the
-- list: a change of it starts a rebuild), patches; per patch its member in
-- ~patches and its score there, its entries' count per segment, the
-- entries: the taxed composites at ages 0..max_age packed in one argument
-- (16 digits each), the player
local decay
if D and ARGV[pos] == 'D' then
  local A, at = tonumber(ARGV[pos + 1]), pos + 5
  decay = {A = A, list = ARGV[pos + 2] == 'l', rule = ARGV[pos + 3], patches = {}, members = {},
           new = {}}
  for _ = 1, tonumber(ARGV[pos + 4]) do
    local patch, e = {member = ARGV[at], score = ARGV[at + 1], runs = {}}, at + 2 + nseg
    for s = 1, nseg do
      local n = tonumber(ARGV[at + 1 + s])
      if apply[s] and n > 0 then patch.runs[#patch.runs + 1] = {e, n} end
      e = e + 2 * n
    end
    if #patch.runs > 0 then
      decay.patches[#decay.patches + 1] = patch
      decay.members[#decay.members + 1] = patch.member
    end
    at = e
  end
  pos = at
end

-- final standings (README "Final standings"): "F", a count, then per window
-- key that closes its index among the window keys and the instant it
-- closes (event time, ms). An open one is listed in ~open (window -> that
-- instant) for the closer; a closed one (~final's s:<window> is claimed or
-- published) is written no more: every event applied here comes after its
-- close offsets (they are the markers when it closed). Each closed window
-- any event of the request is for, applied now or before (a request sent
-- again after its reply was lost, records read again), is named with its
-- close offsets: the caller finds its late events by their offsets
local opening, late = {}, {}
if F and ARGV[pos] == 'F' then
  local fields, names = {}, {}
  for i = 1, tonumber(ARGV[pos + 1]) do
    local key = keys[tonumber(ARGV[pos + 2 * i])]
    names[i] = string.match(key.name, '}:(.*)$')
    fields[i] = 's:' .. names[i]
    key.closes = ARGV[pos + 2 * i + 1]
  end
  if #fields > 0 then
    local closed = redis.pcall('HMGET', KEYS[F + 1], unpack(fields))
    if closed.err then return refused(closed, 'hmget') or {'wrongtype', KEYS[F + 1]} end
    local t = redis.call('TYPE', KEYS[F]).ok
    if t ~= 'none' and t ~= 'hash' then return {'wrongtype', KEYS[F]} end
    for i = 1, #fields do
      local key = keys[tonumber(ARGV[pos + 2 * i])]
      if closed[i] == 'claimed' or closed[i] == 'published' then
        if key.touched then
          late[#late + 1] = names[i]
          late[#late + 1] = 'o:' .. names[i]
        end
        key.busy = false
      elseif key.busy then
        opening[#opening + 1] = names[i]
        opening[#opening + 1] = key.closes
      end
    end
    if #late > 0 then
      local named = {}
      for i = 2, #late, 2 do named[#named + 1] = late[i] end
      local at = redis.call('HMGET', KEYS[F + 1], unpack(named))
      for i = 2, #late, 2 do late[i] = at[i / 2] or '' end
    end
  end
end
local opened = false -- a window listed in ~open for the first time
local function note_open()
  if #opening > 0 then opened = redis.call('HSET', KEYS[F], unpack(opening)) > 0 end
end
-- the answer: "ok", applied, skipped, then "rebuilding" when a rebuild is
-- due, "opened" when ~open has a window more (the closer looks at it soon:
-- a late event may open a window the watermark passed long ago), then
-- "late" and each closed window the events are for with its close offsets
-- ("<marker field>=<offset>,...")
local function answer(rebuilding)
  local r = {'ok', applied, skipped}
  if rebuilding then r[#r + 1] = 'rebuilding' end
  if opened then r[#r + 1] = 'opened' end
  if #late > 0 then
    r[#r + 1] = 'late'
    for _, v in ipairs(late) do r[#r + 1] = v end
  end
  return r
end
if applied == 0 then return answer(left_rebuilding()) end

-- the patches not seen before, the rebuild state; the overall board and
-- its shadow are sorted sets
local function decay_check()
  local st = redis.pcall('HMGET', KEYS[D + 1], 'gen', 'rebuilding', 'rule')
  if st.err then return refused(st, 'hmget') or {'wrongtype', KEYS[D + 1]} end
  decay.gen, decay.building = tonumber(st[1]) or 0, st[2] and true or false
  decay.changed = st[3] ~= decay.rule
  if #decay.members > 0 then
    local known = redis.pcall('ZMSCORE', KEYS[D], unpack(decay.members))
    if known.err then return refused(known, 'zmscore') or {'wrongtype', KEYS[D]} end
    for i, patch in ipairs(decay.patches) do
      if not known[i] then decay.new[#decay.new + 1] = patch end
    end
  end
  for i = 2, 3 do
    if not check_type(KEYS[D + i]) then return {'wrongtype', KEYS[D + i]} end
  end
end

-- registers new patches (a rebuild starts: gen + 1, its shadow emptied;
-- the same when the rule changed), then writes each entry at its patch's
-- age to the overall board, and to the shadow while a rebuild runs
local function decay_write(gtlt)
  -- a new patch moves ages: in version order always; with a list only a
  -- newer one than the newest written (the ages count from it)
  local moves = decay.changed or (#decay.new > 0 and not decay.list)
  if decay.list and #decay.new > 0 and not moves then
    local last = redis.call('ZRANGE', KEYS[D], -1, -1, 'WITHSCORES')
    for _, patch in ipairs(decay.new) do
      moves = moves or not last[2] or tonumber(patch.score) > tonumber(last[2])
    end
  end
  if #decay.new > 0 and not moves then
    local nx = {}
    for i, patch in ipairs(decay.new) do nx[2 * i - 1], nx[2 * i] = patch.score, patch.member end
    redis.call('ZADD', KEYS[D], 'NX', unpack(nx))
  end
  if moves then
    local nx = {}
    for i, patch in ipairs(decay.new) do nx[2 * i - 1], nx[2 * i] = patch.score, patch.member end
    if #nx > 0 then redis.call('ZADD', KEYS[D], 'NX', unpack(nx)) end
    redis.call('HSET', KEYS[D + 1], 'gen', decay.gen + 1, 'rebuilding', '1', 'rule', decay.rule)
    redis.call('ZREMRANGEBYSCORE', KEYS[D + 3], '-inf', '+inf')
    decay.building = true
  end
  if #decay.patches == 0 then return end
  local seen = redis.call('ZRANGE', KEYS[D], 0, -1, 'WITHSCORES')
  local count, age = #seen / 2, {}
  local top = tonumber(seen[2 * count])
  for i = 1, count do
    age[seen[2 * i - 1]] = decay.list and top - tonumber(seen[2 * i]) or count - i
  end
  local out, n = {}, 0
  for _, patch in ipairs(decay.patches) do
    local from = 16 * math.min(age[patch.member], decay.A) + 1
    for _, run in ipairs(patch.runs) do
      for e = run[1], run[1] + 2 * (run[2] - 1), 2 do
        out[n + 1], out[n + 2] = string.sub(ARGV[e], from, from + 15), ARGV[e + 1]
        n = n + 2
      end
    end
  end
  for i = 1, n, CHUNK do
    local j = math.min(i + CHUNK - 1, n)
    redis.call('ZADD', KEYS[D + 2], gtlt, unpack(out, i, j))
    if decay.building then redis.call('ZADD', KEYS[D + 3], gtlt, unpack(out, i, j)) end
  end
end

if mode == 'b' then
  for _, key in ipairs(keys) do
    if key.busy and not check_type(key.name) then return {'wrongtype', key.name} end
  end
  if decay then
    local failed = decay_check()
    if failed then return failed end
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
  if decay then decay_write(gtlt) end
  note_open()
  remember()
  redis.call('HSET', KEYS[1], unpack(moved))
  return answer(decay and decay.building)
end

-- Latest boards: a player's entry in a window is its event with the
-- greatest stamp ("<event time, ms, 15 digits>:<offset, 20 digits>": fixed
-- widths, so strings compare as the pairs do; equal ones lose).
--
-- ~newest (KEYS[2n+5], a hash) keeps one value per player: a bound, at or
-- above the stamp of every entry the player has on the board, then the
-- calendar windows whose entry holds exactly that stamp:
-- "<stamp>|alltime|daily:2026-11-28|...|" ("<stamp>|" naming none). A
-- window's event-time hash (<window>:~ts) holds the player's stamp there
-- where ~newest does not name the window; where it does, the hash may hold
-- an older one, never read. So:
--   - an entry stamped above its player's bound wins in each of its
--     windows without a read: events in time order cost no stamp at all;
--   - an older one loses where ~newest names its window (the entry there
--     holds the bound), and is compared with the window's hash elsewhere;
--   - when a player's bound moves on, the windows it leaves get the old
--     bound in their hash: "moves", into windows this request may not
--     name, found by name under the board's tag (ARGV[12], which a replay's
--     staging keys share: their hashes stay with them);
--   - a retraction takes its window out of the player's value (and its
--     hash entry goes); the bound stays, still at or above every entry.
-- Custom windows are never named (their names come from the events): they
-- keep each stamp in their hash. A board of the previous release (its keys
-- exist, ~newest does not) and one whose request says w (replay --window,
-- whose swapped windows must carry their own stamps) keep per-window stamps
-- only, read and written for every entry, as protocol 4 did. Where
-- ~newest exists, requests saying w keep it too. A board keeping ~newest
-- has a hash as its fence key ("apply" 5): the previous release's script
-- takes the key for replay's fence and writes nothing there.
local function latest()
  local H, base = KEYS[2 * nkeys + 5], ARGV[12]
  -- (its fence a hash: it keeps ~newest, no need to look)
  local native, start = fence == 'hash' or redis.call('EXISTS', H) == 1, false
  if not native and ARGV[11] == 'b' and redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
    native, start = true, true -- a new board
  end
  -- the players of the applied segments: ms[i], its newest vs[i] (its first
  -- segment's), index[player] = i; twice: a player in two segments
  local ms, vs, nm, index, twice = {}, {}, 0, {}, false
  for s = 1, nseg do
    if apply[s] then
      local a, n = players[s][1], players[s][2]
      for i = a, a + 2 * (n - 1), 2 do
        local m = ARGV[i]
        if index[m] then
          twice = true
        else
          nm = nm + 1
          ms[nm], vs[nm], index[m] = m, ARGV[i + 1], nm
        end
      end
    end
  end
  local cur = {} -- what ~newest holds for them (false: nothing)
  if native and not start then
    for i = 1, nm, CHUNK do
      local j = math.min(i + CHUNK - 1, nm)
      local got = redis.pcall('HMGET', H, unpack(ms, i, j))
      if got.err then return refused(got, 'hmget') or {'wrongtype', H} end
      for x = i, j do cur[x] = got[x - i + 1] end
    end
  end
  local ss = {} -- the stamp of each player's newest
  for i = 1, nm do ss[i] = vs[i] ~= '' and string.sub(vs[i], 1, 36) or false end
  local decl = {} -- calendar window name -> its key's number
  for k, key in ipairs(keys) do
    if key.window ~= '' then decl[key.window] = k end
    if key.busy and not check_type(key.name) then return {'wrongtype', key.name} end
  end

  -- moves: per window name, the players and the bound they leave there;
  -- checked (and their expiry found) before any write
  local moves, targets = {}, {}
  local function move(w, m, bound)
    local list = moves[w]
    if not list then
      list = {}
      moves[w] = list
    end
    list[#list + 1] = m
    list[#list + 1] = bound
  end
  -- a key the request does not name, refused by Redis: on another node
  -- while its slot migrates (Redis 7.0: "... non local key ..."), or not ours
  local function elsewhere(r, command, name)
    if string.find(r.err, 'non local key', 1, true) then return {'moving', name} end
    return refused(r, command) or {'error', r.err}
  end
  -- the windows player i's old bound leaves get it in their hash, but for
  -- those 'stays' keeps (named again, or written or emptied by the request)
  local function leave(i, stays)
    local c = cur[i]
    local bound = string.sub(c, 1, 36)
    for w in string.gmatch(string.sub(c, 37), '[^|]+') do
      if not stays(w) then move(w, ms[i], bound) end
    end
  end
  local function check_moves()
    for w, list in pairs(moves) do
      local t = {name = base .. w .. ':~ts', list = list}
      local k = decl[w]
      if k then
        t.key = keys[k]
        local ty = redis.call('TYPE', t.name).ok
        if ty ~= 'none' and ty ~= 'hash' then return {'wrongtype', t.name} end
      else -- not in the request: on this node unless its slot is moving
        local ty = redis.pcall('TYPE', t.name)
        if ty.err then return elsewhere(ty, 'type', t.name) end
        if ty.ok ~= 'none' and ty.ok ~= 'hash' then return {'wrongtype', t.name} end
        local at = redis.pcall('PEXPIRETIME', base .. w)
        if type(at) == 'table' then return elsewhere(at, 'pexpiretime', base .. w) end
        t.at = at
      end
      if not t.at or t.at ~= -2 then targets[#targets + 1] = t end -- -2: the window is gone
    end
  end
  local function write_moves()
    for _, t in ipairs(targets) do
      for i = 1, #t.list, CHUNK do
        redis.call('HSET', t.name, unpack(t.list, i, math.min(i + CHUNK - 1, #t.list)))
      end
      if t.key then
        expire(t.name, t.key)
      elseif t.at >= 0 then
        redis.call('PEXPIREAT', t.name, t.at)
      end
    end
  end
  -- the writes, once every check passed: per key (out[k]) the players it
  -- loses (their stamps too), its ZADD arguments (none: straight from the
  -- request), the stamps for its hash; then the moves
  local function write_keys(out)
    for k, key in ipairs(keys) do
      local o = out[k]
      if o then
        local stamps_key, gone, hash = KEYS[nkeys + 4 + k], o.gone or {}, o.hash
        for i = 1, #gone, CHUNK do
          local j = math.min(i + CHUNK - 1, #gone)
          redis.call('ZREM', key.name, unpack(gone, i, j))
          redis.call('HDEL', stamps_key, unpack(gone, i, j))
        end
        if o.adds then
          for i = 1, #o.adds, CHUNK do
            redis.call('ZADD', key.name, unpack(o.adds, i, math.min(i + CHUNK - 1, #o.adds)))
          end
        else
          for _, r in ipairs(key.runs) do
            for i = r[1], r[2], CHUNK do
              redis.call('ZADD', key.name, unpack(ARGV, i, math.min(i + CHUNK - 1, r[2])))
            end
          end
        end
        expire(key.name, key)
        for i = 1, #hash, CHUNK do
          redis.call('HSET', stamps_key, unpack(hash, i, math.min(i + CHUNK - 1, #hash)))
        end
        if #hash > 0 then expire(stamps_key, key) end
      end
    end
    write_moves()
  end
  local function finish(hwrites)
    if start then redis.call('HSET', H, '', '5') end
    for i = 1, #hwrites, CHUNK do
      redis.call('HSET', H, unpack(hwrites, i, math.min(i + CHUNK - 1, #hwrites)))
    end
    if native and fence == 'none' then redis.call('HSET', KEYS[3], 'apply', '5') end
    note_open()
    remember()
    redis.call('HSET', KEYS[1], unpack(moved))
    return answer(false)
  end

  -- the common case, without retractions and with each player in one
  -- segment: a player stamped above its bound ("fast") wins in every
  -- window its request names (plain entries hold its newest; v ones, older
  -- events of the batch, win where above the bound); another one loses
  -- where its value names the window and is compared with the window's hash
  -- elsewhere. A window whose players are all fast, without v entries,
  -- goes to ZADD straight from the request, and so does ~newest when every
  -- player is fast.
  local general = twice
  for _, key in ipairs(keys) do
    for _, p in ipairs(key.busy and key.specials or {}) do
      if ARGV[p] ~= 'v' then general = true end
    end
  end
  if not general then
    local fast, nfast = {}, 0
    for i = 1, nm do
      if native and (not cur[i] or ss[i] > cur[i]) then
        fast[i] = true
        nfast = nfast + 1
      end
    end
    local done = {} -- done[i][window]: a v entry of a fast player won there
    local out = {} -- per key: its ZADD arguments (false: straight) and its hash's
    for k, key in ipairs(keys) do
      if key.busy then
        local custom, pat = key.window == '', '|' .. key.window .. '|'
        local straight = not custom and #key.specials == 0
        for _, r in ipairs(straight and key.runs or {}) do
          for p = r[1], r[2], 2 do
            if not fast[index[ARGV[p + 1]]] then straight = false end
          end
        end
        local adds, na, hash, nh = {}, 0, {}, 0
        local rm, rv, rs, nr = {}, {}, {}, 0 -- to read: player, composite, stamp
        local function consider(m, v, st, c)
          if native and (not c or st > c) then
            adds[na + 1], adds[na + 2] = v, m
            na = na + 2
            return true
          end
          if not (native and not custom and string.find(c, pat, 37, true)) then
            nr = nr + 1
            rm[nr], rv[nr], rs[nr] = m, v, st
          end
        end
        if not straight then
          for _, r in ipairs(key.runs) do
            for p = r[1], r[2], 2 do
              local m = ARGV[p + 1]
              local i = index[m]
              if consider(m, ARGV[p], ss[i], cur[i]) and custom then
                hash[nh + 1], hash[nh + 2] = m, ss[i]
                nh = nh + 2
              end
            end
          end
          for _, p in ipairs(key.specials) do
            local m, st = ARGV[p + 3], ARGV[p + 2]
            local i = index[m]
            if consider(m, ARGV[p + 1], st, cur[i]) then
              hash[nh + 1], hash[nh + 2] = m, st
              nh = nh + 2
              if fast[i] and not custom then
                done[i] = done[i] or {}
                done[i][key.window] = true
              end
            end
          end
        end
        local stamps_key = KEYS[nkeys + 4 + k]
        for i = 1, nr, CHUNK do
          local j = math.min(i + CHUNK - 1, nr)
          local got = redis.pcall('HMGET', stamps_key, unpack(rm, i, j))
          if got.err then return refused(got, 'hmget') or {'wrongtype', stamps_key} end
          for x = i, j do
            local c = got[x - i + 1]
            if not c or rs[x] > c then
              adds[na + 1], adds[na + 2] = rv[x], rm[x]
              hash[nh + 1], hash[nh + 2] = rm[x], rs[x]
              na, nh = na + 2, nh + 2
            end
          end
        end
        if nr == 0 and nh > 0 then
          local ty = redis.call('TYPE', stamps_key).ok
          if ty ~= 'none' and ty ~= 'hash' then return {'wrongtype', stamps_key} end
        end
        out[k] = {adds = not straight and adds, hash = hash}
      end
    end
    for i = 1, nm do -- the windows a fast player's old bound leaves
      local c, v = cur[i], vs[i]
      if fast[i] and c and string.sub(c, 37) ~= string.sub(v, 37) then
        local won = done[i] or {}
        leave(i, function(w) return won[w] or string.find(v, '|' .. w .. '|', 37, true) end)
      end
    end
    local failed = check_moves()
    if failed then return failed end
    write_keys(out)
    local hwrites = {}
    if nfast == nm then
      for s = 1, nseg do
        local a, n = players[s][1], players[s][2]
        if apply[s] and n > 0 then
          for i = a, a + 2 * n - 1, CHUNK do
            redis.call('HSET', H, unpack(ARGV, i, math.min(i + CHUNK - 1, a + 2 * n - 1)))
          end
        end
      end
    else
      for i = 1, nm do
        if fast[i] then hwrites[#hwrites + 1], hwrites[#hwrites + 2] = ms[i], vs[i] end
      end
    end
    return finish(hwrites)
  end

  -- otherwise each entry is decided in turn: a plain one's stamp is its
  -- player's newest in its segment
  local of
  if twice then
    of = {}
    for s = 1, nseg do
      if apply[s] then
        local t, a, n = {}, players[s][1], players[s][2]
        for i = a, a + 2 * (n - 1), 2 do t[ARGV[i]] = string.sub(ARGV[i + 1], 1, 36) end
        of[s] = t
      end
    end
  end
  local won, gone = {}, {} -- per player: its greatest winning stamp; windows it left
  local plans = {}
  for k, key in ipairs(keys) do
    if key.busy then
      local ent, ne = {}, 0 -- flags, composite, stamp, player: 4 per entry
      for _, r in ipairs(key.pruns) do
        for p = r[1], r[2], 2 do
          local m = ARGV[p + 1]
          ent[ne + 1], ent[ne + 2], ent[ne + 4] = '', ARGV[p], m
          ent[ne + 3] = twice and of[r[3]][m] or ss[index[m]]
          ne = ne + 4
        end
      end
      for _, p in ipairs(key.specials) do
        ent[ne + 1], ent[ne + 2], ent[ne + 3], ent[ne + 4] = ARGV[p], ARGV[p + 1], ARGV[p + 2],
                                                             ARGV[p + 3]
        ne = ne + 4
      end
      -- the players whose first entry here must read the window's hash
      local pat = '|' .. key.window .. '|'
      local function named(c) return key.window ~= '' and string.find(c, pat, 37, true) end
      local seen, reads, nr = {}, {}, 0
      for e = 1, ne, 4 do
        local m = ent[e + 3]
        if not seen[m] then
          seen[m] = true
          local c = cur[index[m]]
          if string.sub(ent[e], 1, 1) ~= 'r' and
              not (native and (not c or ent[e + 2] > c or named(c))) then
            nr = nr + 1
            reads[nr] = m
          end
        end
      end
      local stamps_key = KEYS[nkeys + 4 + k]
      local held = {}
      for i = 1, nr, CHUNK do
        local j = math.min(i + CHUNK - 1, nr)
        local got = redis.pcall('HMGET', stamps_key, unpack(reads, i, j))
        if got.err then return refused(got, 'hmget') or {'wrongtype', stamps_key} end
        for x = i, j do held[reads[x]] = got[x - i + 1] end
      end
      if nr == 0 then
        local ty = redis.call('TYPE', stamps_key).ok
        if ty ~= 'none' and ty ~= 'hash' then return {'wrongtype', stamps_key} end
      end
      -- now[m]: the newest stamp in the window as the entries go (false:
      -- none); value[m]: the composite to write, false for nothing
      local now, value, stamp, removed, order, norder = {}, {}, {}, {}, {}, 0
      for e = 1, ne, 4 do
        local flags, m, st = ent[e], ent[e + 3], ent[e + 2]
        local i = index[m]
        if value[m] == nil then
          norder = norder + 1
          order[norder], value[m] = m, false
          local c = cur[i]
          if not native then
            now[m] = held[m] or false
          elseif not c or st > c then
            now[m] = false -- above everything the player has
          elseif named(c) then
            now[m] = string.sub(c, 1, 36)
          else
            now[m] = held[m] or false
          end
        end
        if string.sub(flags, 1, 1) == 'r' then
          removed[m], now[m], value[m] = true, false, false
          if key.window ~= '' then
            local g = gone[i]
            if not g then
              g = {}
              gone[i] = g
            end
            g[key.window] = true
          end
        end
        if flags ~= 'r' and (not now[m] or st > now[m]) then
          now[m], value[m], stamp[m] = st, ent[e + 1], st
          if not won[i] or st > won[i] then won[i] = st end
        end
      end
      plans[k] = {value = value, stamp = stamp, removed = removed, order = order, n = norder}
    end
  end

  -- ~newest: each player's new bound and the windows holding it
  local hwrites, keep = {}, {} -- keep[i][window]: named by the player's new value
  if native then
    for i = 1, nm do
      local m, c, w = ms[i], cur[i], won[i]
      local bound = c and string.sub(c, 1, 36)
      local names, set = {}, {}
      if w and (not bound or w > bound) then
        for k, key in ipairs(keys) do
          local plan = plans[k]
          if plan and key.window ~= '' and plan.value[m] and plan.stamp[m] == w then
            names[#names + 1], set[key.window] = key.window, true
          end
        end
        bound = w
      elseif c then
        local left = gone[i] or {}
        for name in string.gmatch(string.sub(c, 37), '[^|]+') do
          if not left[name] then names[#names + 1], set[name] = name, true end
        end
      end
      if bound then
        keep[i] = set
        table.sort(names) -- byte order, as the request's newest values have them
        local v = bound .. '|' .. (#names > 0 and table.concat(names, '|') .. '|' or '')
        if v ~= c then hwrites[#hwrites + 1], hwrites[#hwrites + 2] = m, v end
        if c then -- the windows the old bound leaves, unless written or left here
          local left = gone[i] or {}
          leave(i, function(w)
            local k = decl[w]
            return set[w] or left[w] or (k and plans[k] and plans[k].value[m])
          end)
        end
      end
    end
  end
  local failed = check_moves()
  if failed then return failed end
  local out = {}
  for k, key in ipairs(keys) do
    local plan = plans[k]
    if plan then
      local value, stamp = plan.value, plan.stamp
      local o = {gone = {}, adds = {}, hash = {}}
      for x = 1, plan.n do
        local m = plan.order[x]
        local v = value[m]
        if v then
          o.adds[#o.adds + 1] = v
          o.adds[#o.adds + 1] = m
          local set = keep[index[m]]
          if not (set and set[key.window]) then
            o.hash[#o.hash + 1] = m
            o.hash[#o.hash + 1] = stamp[m]
          end
        elseif plan.removed[m] then
          o.gone[#o.gone + 1] = m
        end
      end
      out[k] = o
    end
  end
  write_keys(out)
  return finish(hwrites)
end
if mode == 'l' then return latest() end

-- sum: read what is there, decide in Lua, then write. Per member only
-- strings and numbers: no table per entry.
local later_larger = ARGV[5] == '1'
local scale = 2 ^ tonumber(ARGV[4])
local smin, smax = tonumber(ARGV[6]), tonumber(ARGV[7])
local overflow, plans = {}, {}
-- a player's new total (its composite, the text ZADD takes) from what the
-- window holds ('c', a string or nil) and an entry's delta and tie; one
-- leaving [sum_min, sum_max] is named in 'overflow' (up to CHUNK values,
-- which unpack takes: the caller plans the board again without those named,
-- and the next answer names the rest)
local function total(k, m, c, delta, tie)
  local sum = 0
  tie = tie + 0
  if c then
    c = c + 0
    sum = math.floor(c / scale)
    local old = c - sum * scale
    if (later_larger and old > tie) or (not later_larger and old < tie) then tie = old end
  end
  sum = sum + delta
  if (sum < smin or sum > smax) and #overflow < CHUNK then
    overflow[#overflow + 1] = tostring(k)
    overflow[#overflow + 1] = m
  end
  -- an integer below 2^53 in magnitude: %d (a C long) prints it exactly,
  -- and far cheaper than %.0f
  return string.format('%d', sum * scale + tie)
end
for k, key in ipairs(keys) do
  if key.busy then
    -- where the key's entries are: plain ones, then special ones (whose
    -- flags come first), each at its value
    local at, members, n = {}, {}, 0
    for _, r in ipairs(key.runs) do
      for p = r[1], r[2], width do n = n + 1; at[n] = p; members[n] = ARGV[p + 2] end
    end
    local nplain = n
    for _, p in ipairs(key.specials) do n = n + 1; at[n] = p + 1; members[n] = ARGV[p + 3] end
    -- each player once, no retraction (the common case): arrays only
    local once = n == nplain
    if once and key.segments > 1 then -- a player's events in two partitions?
      local seen = {}
      for i = 1, n do
        if seen[members[i]] then once = false end
        seen[members[i]] = true
      end
    end
    local held = {}
    for i = 1, n, CHUNK do
      local j = math.min(i + CHUNK - 1, n)
      local got = redis.pcall('ZMSCORE', key.name, unpack(members, i, j))
      if got.err then return refused(got, 'zmscore') or {'wrongtype', key.name} end
      for x = i, j do held[x] = got[x - i + 1] end
    end
    if once then
      local adds = {}
      for i = 1, n do
        local p, m = at[i], members[i]
        adds[2 * i - 1], adds[2 * i] = total(k, m, held[i], ARGV[p], ARGV[p + 1]), m
      end
      plans[k] = {adds = adds}
    else
      local current = {}
      for i = 1, n do current[members[i]] = held[i] or nil end
      -- value[m]: what to write, false for nothing
      local value, removed, order, norder = {}, {}, {}, 0
      for i = 1, n do
        local p, m = at[i], members[i]
        if value[m] == nil then norder = norder + 1; order[norder] = m; value[m] = false end
        local flags = (i > nplain) and ARGV[p - 1] or ''
        if flags ~= '' then removed[m] = true; current[m] = nil; value[m] = false end
        if flags ~= 'r' then
          local v = total(k, m, current[m], ARGV[p], ARGV[p + 1])
          current[m] = v
          value[m] = v
        end
      end
      local gone, adds = {}, {}
      for i = 1, norder do
        local m = order[i]
        if value[m] then
          adds[#adds + 1] = value[m]
          adds[#adds + 1] = m
        elseif removed[m] then
          gone[#gone + 1] = m
        end
      end
      plans[k] = {adds = adds, gone = gone}
    end
  end
end
if #overflow > 0 then return {'overflow', unpack(overflow)} end

for k, key in ipairs(keys) do
  local plan = plans[k]
  if plan then
    local gone, adds = plan.gone or {}, plan.adds
    for i = 1, #gone, CHUNK do
      redis.call('ZREM', key.name, unpack(gone, i, math.min(i + CHUNK - 1, #gone)))
    end
    for i = 1, #adds, CHUNK do
      redis.call('ZADD', key.name, unpack(adds, i, math.min(i + CHUNK - 1, #adds)))
    end
    expire(key.name, key)
  end
end
note_open()
remember()
redis.call('HSET', KEYS[1], unpack(moved))
return answer(false)
