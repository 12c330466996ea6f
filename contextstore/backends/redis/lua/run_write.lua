-- contextstore: the write phase of one engine run, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:cache:e:<key>  the entry to write
-- KEYS[2]  cs:{ns}:cache:lru      recency zset
-- KEYS[3]  cs:{ns}:cache:ttl      deadline zset
-- KEYS[4]  cs:{ns}:cache:stats    hits / misses / seq hash
-- KEYS[5]  cs:{ns}:win            the adaptive windows hash
-- ARGV[1]  the cache key (the zset member)
-- ARGV[2]  the value to cache (ENTRY_MAGIC .. UTF-8 text); '' to cache nothing (a hit, or
--          a context the guard refused)
-- ARGV[3]  TTL in milliseconds (>= 1)
-- ARGV[4]  max_size (>= 1)
-- ARGV[5]  the entry key prefix, cs:{ns}:cache:e:
-- ARGV[6]  the sample (32 bytes, see lib_windows_record.lua); '' to record nothing
-- ARGV[7]  the window size (100)
--
-- Returns {dropped, agg}: the cache put of lib_cache_put.lua (entries dropped or evicted;
-- 0 when nothing was cached) and the windows' new agg (nil when nothing was recorded).
-- Exactly what a put followed by a record would do, in one call: the total the record
-- returns is still the fleet's, so exactly one run of the fleet sees 20, one 40, ...

--! include lib_cache_put.lua
--! include lib_windows_record.lua

local dropped = 0
if ARGV[2] ~= '' then
    dropped = cache_put(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2],
        tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])
end
local agg = false
if ARGV[6] ~= '' then
    agg = windows_record(KEYS[5], ARGV[6], tonumber(ARGV[7]))
end
return {dropped, agg}
