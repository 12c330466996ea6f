-- contextstore: RedisContextCache.clear, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:cache:lru      zset: cached keys scored by recency
-- KEYS[2]  cs:{ns}:cache:ttl      zset: cached keys scored by expiry deadline
-- ARGV[1]  the entry key prefix, cs:{ns}:cache:e:
--
-- Deletes every entry and both zsets; the stats hash (hits, misses, seq) is kept. Returns
-- how many keys were cached. Entries are reached as ARGV[1] .. member: same {ns} hash tag,
-- same slot as KEYS (see cache_put.lua).

local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #members, 1000 do
    local entries = {}
    for j = i, math.min(i + 999, #members) do
        entries[#entries + 1] = ARGV[1] .. members[j]
    end
    redis.call('DEL', unpack(entries))
end
redis.call('DEL', KEYS[1], KEYS[2])
return #members
