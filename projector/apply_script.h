/* The server-side half of a board's batch: a Redis Lua script.
 *
 * The semantics issue allows a Lua script for this, and it is, with replay's
 * swap script (replay/replay.c), the only code in the project that is not C
 * or shell: exactly-once across redelivery, zombie pods and replay needs a
 * check and a write in one atomic step on the server, which MULTI alone
 * cannot express. The script is small, takes every decision from its
 * arguments, and is loaded by SHA1 on every connection.
 *
 * KEYS: [1] the board's applied-offset marker hash "<prefix>{B}:~applied"
 *       [2] the board's fence "<prefix>{B}:~fence": while replay swaps the
 *           board, the script writes nothing and answers {"fenced", key}
 *       [3 .. n+2] the window keys
 *       [n+3 .. 2n+2] (latest boards only) each window key's event-time hash
 *                     "<window key>:~ts"
 * ARGV: [1] protocol "1"      [2] mode "b" best, "l" latest, "s" sum
 *       [3] "d" desc or "a" asc (best: ZADD GT or LT)
 *       [4] T, the tie bits   [5] "1" when a later time makes a larger tie
 *       [6] sum_min [7] sum_max   [8] n, the window keys   [9] segments
 *       then per segment: marker field "<topic>:<partition>", first and last
 *         offset of the board's events from that partition in this batch
 *       then per window key: expiry kind ("n" none, "a" PEXPIREAT, "t"
 *         PEXPIRE), expiry value, entry count, and per entry:
 *         segment number, flags ("r" retracted, "v" has a value, "rv" both:
 *         retracted, then submitted again),
 *         best: composite, member
 *         latest: composite, "<ts ms, 15 digits>:<offset, 20 digits>", member
 *         sum: delta, tie, member
 *
 * A segment whose marker is at or past its last offset was applied before
 * and is skipped; one before its first offset is applied; one in between
 * (the previous attempt's batch ended mid-way) makes the script write
 * nothing and answer {"partial", field, marker, ...}, and the caller plans
 * the board again without the events already applied. A sum leaving
 * [sum_min, sum_max] likewise answers {"overflow", key number, member, ...}
 * and writes nothing; a key of the wrong type answers {"wrongtype", key};
 * an expiry time Redis would refuse answers {"badarg", key}, before any
 * write.
 * Otherwise it writes everything, sets every applied segment's marker to
 * its last offset and answers {"ok", applied segments, skipped segments}.
 */
#ifndef LB_APPLY_SCRIPT_H
#define LB_APPLY_SCRIPT_H

#define LB_APPLY_SCRIPT                                                                            \
    "local mode, order = ARGV[2], ARGV[3]\n"                                                       \
    "local scale = 2 ^ tonumber(ARGV[4])\n"                                                        \
    "local later_larger = ARGV[5] == '1'\n"                                                        \
    "local smin, smax = tonumber(ARGV[6]), tonumber(ARGV[7])\n"                                    \
    "local nkeys, nseg = tonumber(ARGV[8]), tonumber(ARGV[9])\n"                                   \
    "local pos = 10\n"                                                                             \
    "local function kind(k) return redis.call('TYPE', k).ok end\n"                                 \
    "if redis.call('EXISTS', KEYS[2]) == 1 then return {'fenced', KEYS[2]} end\n"                  \
    "local t = kind(KEYS[1])\n"                                                                    \
    "if t ~= 'hash' and t ~= 'none' then return {'wrongtype', KEYS[1]} end\n"                      \
    "for i = 3, #KEYS do\n"                                                                        \
    "  t = kind(KEYS[i])\n"                                                                        \
    "  local want = (i <= nkeys + 2) and 'zset' or 'hash'\n"                                       \
    "  if t ~= want and t ~= 'none' then return {'wrongtype', KEYS[i]} end\n"                      \
    "end\n"                                                                                        \
    "local apply, field, last, partial = {}, {}, {}, {}\n"                                         \
    "local applied, skipped = 0, 0\n"                                                              \
    "for s = 1, nseg do\n"                                                                         \
    "  local f, lo, hi = ARGV[pos], tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2])\n"            \
    "  field[s], last[s] = f, ARGV[pos + 2]\n"                                                     \
    "  pos = pos + 3\n"                                                                            \
    "  local m = redis.call('HGET', KEYS[1], f)\n"                                                 \
    "  local mn = m and tonumber(m) or -1\n"                                                       \
    "  if mn >= hi then apply[s] = false; skipped = skipped + 1\n"                                 \
    "  elseif mn < lo then apply[s] = true; applied = applied + 1\n"                               \
    "  else partial[#partial + 1] = f; partial[#partial + 1] = m end\n"                            \
    "end\n"                                                                                        \
    "if #partial > 0 then return {'partial', unpack(partial)} end\n"                               \
    "local width = (mode == 'b') and 4 or 5\n"                                                     \
    "local plans, overflow = {}, {}\n"                                                             \
    "for k = 1, nkeys do\n"                                                                        \
    "  local key = KEYS[k + 2]\n"                                                                  \
    "  local plan = {expire = ARGV[pos], at = ARGV[pos + 1], final = {}, order = {},\n"            \
    "                removed = {}}\n"                                                              \
    "  local n = tonumber(ARGV[pos + 2])\n"                                                        \
    "  pos = pos + 3\n"                                                                            \
    "  if plan.expire ~= 'n' then\n"                                                               \
    "    -- checked before any write: Redis does not undo a script's earlier\n"                    \
    "    -- writes when a later call (PEXPIRE of a time it refuses) fails\n"                       \
    "    local at = tonumber(plan.at)\n"                                                           \
    "    if not at or at <= 0 or at > 9007199254740992 or at % 1 ~= 0 then\n"                      \
    "      return {'badarg', key}\n"                                                               \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  local entries = {}\n"                                                                       \
    "  for e = 1, n do\n"                                                                          \
    "    if apply[tonumber(ARGV[pos])] then entries[#entries + 1] = pos end\n"                     \
    "    pos = pos + width\n"                                                                      \
    "  end\n"                                                                                      \
    "  -- best with no retraction: ZADD GT/LT keeps the best of duplicates itself\n"               \
    "  local fast = mode == 'b'\n"                                                                 \
    "  for _, p in ipairs(entries) do\n"                                                           \
    "    if ARGV[p + 1] ~= 'v' then fast = false; break end\n"                                     \
    "  end\n"                                                                                      \
    "  if fast then\n"                                                                             \
    "    local adds = {}\n"                                                                        \
    "    for _, p in ipairs(entries) do\n"                                                         \
    "      adds[#adds + 1] = ARGV[p + 2]; adds[#adds + 1] = ARGV[p + 3]\n"                         \
    "    end\n"                                                                                    \
    "    if #adds > 0 then plan.adds = adds end\n"                                                 \
    "  else\n"                                                                                     \
    "  local current = {}\n"                                                                       \
    "  if #entries > 0 and mode ~= 'b' then\n"                                                     \
    "    local from = (mode == 's') and key or KEYS[nkeys + 2 + k]\n"                              \
    "    local cmd = (mode == 's') and 'ZMSCORE' or 'HMGET'\n"                                     \
    "    for i = 1, #entries, 1000 do\n"                                                           \
    "      local members = {}\n"                                                                   \
    "      for j = i, math.min(i + 999, #entries) do\n"                                            \
    "        members[#members + 1] = ARGV[entries[j] + width - 1]\n"                               \
    "      end\n"                                                                                  \
    "      local got = redis.call(cmd, from, unpack(members))\n"                                   \
    "      for j, m in ipairs(members) do current[m] = got[j] or nil end\n"                        \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  for _, p in ipairs(entries) do\n"                                                           \
    "    local flags, m = ARGV[p + 1], ARGV[p + width - 1]\n"                                      \
    "    if plan.final[m] == nil then plan.order[#plan.order + 1] = m end\n"                       \
    "    if string.find(flags, 'r', 1, true) then\n"                                               \
    "      plan.removed[m] = true; current[m] = nil; plan.final[m] = false\n"                      \
    "    end\n"                                                                                    \
    "    if string.find(flags, 'v', 1, true) then\n"                                               \
    "      if mode == 'b' then\n"                                                                  \
    "        local v, old = tonumber(ARGV[p + 2]), plan.final[m]\n"                                \
    "        if not old or (order == 'd' and v > old.num) or (order == 'a' and v < old.num) "      \
    "then\n"                                                                                       \
    "          plan.final[m] = {score = ARGV[p + 2], num = v}\n"                                   \
    "        end\n"                                                                                \
    "      elseif mode == 'l' then\n"                                                              \
    "        local ord = ARGV[p + 3]\n"                                                            \
    "        if not current[m] or ord > current[m] then\n"                                         \
    "          current[m] = ord; plan.final[m] = {score = ARGV[p + 2], stamp = ord}\n"             \
    "        end\n"                                                                                \
    "      else\n"                                                                                 \
    "        local sum, tie = 0, tonumber(ARGV[p + 3])\n"                                          \
    "        local c = current[m] and tonumber(current[m])\n"                                      \
    "        if c then\n"                                                                          \
    "          sum = math.floor(c / scale)\n"                                                      \
    "          local old = c - sum * scale\n"                                                      \
    "          if (later_larger and old > tie) or (not later_larger and old < tie) then\n"         \
    "            tie = old\n"                                                                      \
    "          end\n"                                                                              \
    "        end\n"                                                                                \
    "        sum = sum + tonumber(ARGV[p + 2])\n"                                                  \
    "        if sum < smin or sum > smax then\n"                                                   \
    "          overflow[#overflow + 1] = tostring(k); overflow[#overflow + 1] = m\n"               \
    "        end\n"                                                                                \
    "        local v = string.format('%.0f', sum * scale + tie)\n"                                 \
    "        current[m] = v; plan.final[m] = {score = v}\n"                                        \
    "      end\n"                                                                                  \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  end\n"                                                                                      \
    "  plans[k] = plan\n"                                                                          \
    "end\n"                                                                                        \
    "if #overflow > 0 then return {'overflow', unpack(overflow)} end\n"                            \
    "local function chunked(cmd, key, prefix, args)\n"                                             \
    "  for i = 1, #args, 1000 do\n"                                                                \
    "    local j = math.min(i + 999, #args)\n"                                                     \
    "    if prefix then redis.call(cmd, key, prefix, unpack(args, i, j))\n"                        \
    "    else redis.call(cmd, key, unpack(args, i, j)) end\n"                                      \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "local zadd_mode = (mode == 'b') and ((order == 'd') and 'GT' or 'LT') or nil\n"               \
    "for k = 1, nkeys do\n"                                                                        \
    "  local key, plan = KEYS[k + 2], plans[k]\n"                                                  \
    "  local tskey = (mode == 'l') and KEYS[nkeys + 2 + k] or nil\n"                               \
    "  local gone, adds, stamps = {}, plan.adds or {}, {}\n"                                       \
    "  for _, m in ipairs(plan.order) do\n"                                                        \
    "    if plan.removed[m] then gone[#gone + 1] = m end\n"                                        \
    "    local f = plan.final[m]\n"                                                                \
    "    if f then\n"                                                                              \
    "      adds[#adds + 1] = f.score; adds[#adds + 1] = m\n"                                       \
    "      if tskey then stamps[#stamps + 1] = m; stamps[#stamps + 1] = f.stamp end\n"             \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  if #gone > 0 then\n"                                                                        \
    "    chunked('ZREM', key, nil, gone)\n"                                                        \
    "    if tskey then chunked('HDEL', tskey, nil, gone) end\n"                                    \
    "  end\n"                                                                                      \
    "  if #adds > 0 then chunked('ZADD', key, zadd_mode, adds) end\n"                              \
    "  if #stamps > 0 then chunked('HSET', tskey, nil, stamps) end\n"                              \
    "  if (#plan.order > 0 or plan.adds) and plan.expire ~= 'n' then\n"                            \
    "    local cmd = (plan.expire == 'a') and 'PEXPIREAT' or 'PEXPIRE'\n"                          \
    "    for _, x in ipairs(tskey and {key, tskey} or {key}) do\n"                                 \
    "      redis.call(cmd, x, plan.at, 'NX')\n"                                                    \
    "      redis.call(cmd, x, plan.at, 'GT')\n"                                                    \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "for s = 1, nseg do\n"                                                                         \
    "  if apply[s] then redis.call('HSET', KEYS[1], field[s], last[s]) end\n"                      \
    "end\n"                                                                                        \
    "return {'ok', applied, skipped}\n"

#endif
