-- contextstore: RedisContextCache.stats, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:cache:lru      zset: cached keys scored by recency
-- KEYS[2]  cs:{ns}:cache:ttl      zset: cached keys scored by expiry deadline (server ms)
-- KEYS[3]  cs:{ns}:cache:stats    hash: hits, misses, seq
-- ARGV[1]  the entry key prefix, cs:{ns}:cache:e:
--
-- Forgets the entries whose deadline has passed (so size counts live entries only; no miss
-- is counted), then returns {size, hits, misses}. Entries are reached as ARGV[1] .. member:
-- same {ns} hash tag, same slot as KEYS (see cache_put.lua).

local time = redis.call('TIME')
local now_ms = time[1] * 1000 + math.floor(time[2] / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. now_ms)
for i = 1, #expired, 1000 do
    local slice = {unpack(expired, i, math.min(i + 999, #expired))}
    local entries = {}
    for j, m in ipairs(slice) do
        entries[j] = ARGV[1] .. m
    end
    redis.call('DEL', unpack(entries))
    redis.call('ZREM', KEYS[1], unpack(slice))
    redis.call('ZREM', KEYS[2], unpack(slice))
end
local counters = redis.call('HMGET', KEYS[3], 'hits', 'misses')
return {redis.call('ZCARD', KEYS[1]), tonumber(counters[1]) or 0, tonumber(counters[2]) or 0}
