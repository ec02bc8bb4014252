-- A replay run's mark, "<epoch> <host> <pid> <ms>" (replay/lease.h): in its
-- fences, its reopening notes and the e:<window> of the windows it reopens.
-- later_mark(found, ours): whether the mark found where this run would
-- write its own is another run's of an epoch at least ours, one that took
-- the lease after ours ran out while this run was stalled. An earlier
-- release's value ("<host> <pid> <ms>") counts as epoch 0: nobody's later.
-- Put in place of "-- include mark.lua" at build time (lb_embed_lua).
local function mark_epoch(v) return tonumber(string.match(v, '^(%d+) %S+ %d+ %d+$')) or 0 end
local function later_mark(found, ours)
  return found ~= ours and mark_epoch(found) >= mark_epoch(ours)
end
