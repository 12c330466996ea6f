-- contextstore: the read phase of one engine run, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:cache:e:<key>  the entry
-- KEYS[2]  cs:{ns}:cache:lru      recency zset
-- KEYS[3]  cs:{ns}:cache:ttl      deadline zset
-- KEYS[4]  cs:{ns}:cache:stats    hits / misses / seq hash
-- KEYS[5]  cs:{ns}:win            the adaptive windows hash
-- ARGV[1]  the cache key (the zset member); '' when the run reads no cache entry
-- ARGV[2]  ENTRY_MAGIC
-- ARGV[3]  '1' to read the windows' agg, '0' not to
--
-- Returns {value, agg}: the cache get of lib_cache_get.lua (the value, magic included, or
-- nil) and the windows' 48-byte agg as RedisWindows.summary reads it (nil when absent or
-- not asked for). Exactly what a get followed by a summary would return, in one call.

--! include lib_cache_get.lua

local value = false
if ARGV[1] ~= '' then
    value = cache_get(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
end
local agg = false
if ARGV[3] == '1' then
    agg = redis.call('HGET', KEYS[5], 'agg')
end
return {value, agg}
