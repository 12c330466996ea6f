-- contextstore: RedisContextCache.get, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:cache:e:<key>  the entry
-- KEYS[2]  cs:{ns}:cache:lru      recency zset
-- KEYS[3]  cs:{ns}:cache:ttl      deadline zset
-- KEYS[4]  cs:{ns}:cache:stats    hits / misses / seq hash
-- ARGV[1]  the cache key (the zset member)
-- ARGV[2]  ENTRY_MAGIC
--
-- The value (magic included) on a hit, nil on a miss: see lib_cache_get.lua.

--! include lib_cache_get.lua

return cache_get(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
