-- contextstore library: the cache's put, as a function (cache_put.lua, run_write.lua).
-- Included by `--! include lib_cache_put.lua`; see contextstore/backends/redis/scripts.py.
--
-- entry     cs:{ns}:cache:e:<key>  the entry to write (SET .. PX ttl)
-- lru       cs:{ns}:cache:lru      zset: cached keys scored by recency
-- ttl       cs:{ns}:cache:ttl      zset: cached keys scored by expiry deadline (server ms)
-- stats     cs:{ns}:cache:stats    hash: hits, misses, seq (the recency sequence)
-- member    the cache key (the zset member)
-- value     ENTRY_MAGIC .. UTF-8 text
-- ttl_ms    TTL in milliseconds (>= 1)
-- max_size  (>= 1)
-- prefix    the entry key prefix, cs:{ns}:cache:e:
--
-- Writes the entry with a fresh TTL and makes it the most recently used. If that added a
-- key to a full cache, first every entry whose deadline has passed is dropped, then the
-- least recently used entries are evicted until max_size remain. Returns how many entries
-- were dropped or evicted. Deadlines come from the server's clock (TIME), the clock PX
-- uses, so "expired" here agrees with Redis; no client clock is involved.
--
-- Cluster note: dropped and evicted entries are reached as prefix .. member, keys not
-- declared in KEYS. They carry the same {ns} hash tag as every declared key, so they hash to
-- the same slot, which Redis Cluster allows; the key schema is in contextstore/backends/redis/keys.py.

-- Apply fn to list in slices: unpack() of thousands of values would overflow Lua's stack.
local function in_slices(list, fn)
    for i = 1, #list, 1000 do
        fn({unpack(list, i, math.min(i + 999, #list))})
    end
end

local function cache_put(entry, lru, ttl, stats, member, value, ttl_ms, max_size, prefix)
    local function forget(members)
        local entries = {}
        for i, m in ipairs(members) do
            entries[i] = prefix .. m
        end
        redis.call('DEL', unpack(entries))
        redis.call('ZREM', ttl, unpack(members))
        return redis.call('ZREM', lru, unpack(members))
    end

    redis.call('SET', entry, value, 'PX', ttl_ms)
    local time = redis.call('TIME')
    local now_ms = time[1] * 1000 + math.floor(time[2] / 1000)
    redis.call('ZADD', ttl, now_ms + ttl_ms, member)
    if redis.call('ZADD', lru, redis.call('HINCRBY', stats, 'seq', 1), member) == 0 then
        return 0 -- the key was cached already: the size did not change
    end
    local size = redis.call('ZCARD', lru)
    if size <= max_size then
        return 0
    end
    local dropped = 0
    -- Expired entries can have any recency (a get refreshes recency, not age); the deadline
    -- index finds them all without a scan. Redis expires a key once now > deadline.
    local expired = redis.call('ZRANGEBYSCORE', ttl, '-inf', '(' .. now_ms)
    in_slices(expired, function(slice)
        dropped = dropped + forget(slice)
    end)
    size = size - dropped
    if size > max_size then
        -- The new member has the highest recency, and max_size >= 1: it is never a victim.
        local popped = redis.call('ZPOPMIN', lru, size - max_size)
        local victims = {}
        for i = 1, #popped, 2 do
            victims[#victims + 1] = popped[i]
        end
        in_slices(victims, forget)
        dropped = dropped + #victims
    end
    return dropped
end
