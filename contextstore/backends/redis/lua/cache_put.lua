-- contextstore: RedisContextCache.put, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:cache:e:<key>  the entry to write
-- KEYS[2]  cs:{ns}:cache:lru      recency zset
-- KEYS[3]  cs:{ns}:cache:ttl      deadline zset
-- KEYS[4]  cs:{ns}:cache:stats    hits / misses / seq hash
-- ARGV[1]  the cache key (the zset member)
-- ARGV[2]  the value: ENTRY_MAGIC .. UTF-8 text
-- ARGV[3]  TTL in milliseconds (>= 1)
-- ARGV[4]  max_size (>= 1)
-- ARGV[5]  the entry key prefix, cs:{ns}:cache:e:
--
-- Returns how many entries were dropped or evicted: see lib_cache_put.lua.

--! include lib_cache_put.lua

return cache_put(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], tonumber(ARGV[3]),
    tonumber(ARGV[4]), ARGV[5])
