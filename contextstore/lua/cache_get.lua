-- contextstore: RedisContextCache.get, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:cache:e:<key>  the entry: ENTRY_MAGIC .. text, with a PX TTL
-- KEYS[2]  cs:{ns}:cache:lru      zset: cached keys scored by recency
-- KEYS[3]  cs:{ns}:cache:ttl      zset: cached keys scored by expiry deadline (server ms)
-- KEYS[4]  cs:{ns}:cache:stats    hash: hits, misses, seq (the recency sequence)
-- ARGV[1]  the cache key (the zset member)
-- ARGV[2]  ENTRY_MAGIC, the prefix every value this cache writes starts with
--
-- A hit returns the stored value, magic included (the client strips it; copying the text
-- here would cost more), and makes the entry the most recently used; its TTL is left
-- alone: a get does not make an entry younger. A miss returns nil. A value Redis has expired
-- is simply absent. A value without the magic, or a key of another type, was not written by
-- this cache: it is deleted and the get is a miss. The client still checks that the text is
-- UTF-8 (see cache_reject.lua).

local value = redis.pcall('GET', KEYS[1])
local magic = ARGV[2]
if type(value) == 'string' and string.sub(value, 1, #magic) == magic then
    redis.call('ZADD', KEYS[2], redis.call('HINCRBY', KEYS[4], 'seq', 1), ARGV[1])
    redis.call('HINCRBY', KEYS[4], 'hits', 1)
    return value
end
if value then
    redis.call('DEL', KEYS[1])
end
-- The entry is gone (expired, evicted, or foreign): forget its recency and deadline too.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[4], 'misses', 1)
return false
