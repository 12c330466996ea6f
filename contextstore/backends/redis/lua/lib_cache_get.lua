-- contextstore library: the cache's get, as a function (cache_get.lua, run_read.lua).
-- Included by `--! include lib_cache_get.lua`; see contextstore/backends/redis/scripts.py.
--
-- entry   cs:{ns}:cache:e:<key>  the entry: ENTRY_MAGIC .. text, with a PX TTL
-- lru     cs:{ns}:cache:lru      zset: cached keys scored by recency
-- ttl     cs:{ns}:cache:ttl      zset: cached keys scored by expiry deadline (server ms)
-- stats   cs:{ns}:cache:stats    hash: hits, misses, seq (the recency sequence)
-- member  the cache key (the zset member)
-- magic   ENTRY_MAGIC, the prefix every value this cache writes starts with
--
-- A hit returns the stored value, magic included (the client strips it; copying the text
-- here would cost more), and makes the entry the most recently used; its TTL is left
-- alone: a get does not make an entry younger. A miss returns false. A value Redis has
-- expired is simply absent. A value without the magic, or a key of another type, was not
-- written by this cache: it is deleted and the get is a miss. The client still checks that
-- the text is UTF-8 (see cache_reject.lua).

local function cache_get(entry, lru, ttl, stats, member, magic)
    local value = redis.pcall('GET', entry)
    if type(value) == 'string' and string.sub(value, 1, #magic) == magic then
        redis.call('ZADD', lru, redis.call('HINCRBY', stats, 'seq', 1), member)
        redis.call('HINCRBY', stats, 'hits', 1)
        return value
    end
    if value then
        redis.call('DEL', entry)
    end
    -- The entry is gone (expired, evicted, or foreign): forget its recency and deadline too.
    redis.call('ZREM', lru, member)
    redis.call('ZREM', ttl, member)
    redis.call('HINCRBY', stats, 'misses', 1)
    return false
end
