-- contextstore: undo a hit whose text the client could not decode (rare: only a value
-- planted with the right magic but bytes that are not UTF-8). The entry is dropped and the
-- get is re-counted as a miss, so hits + misses still equals the number of gets.
--
-- KEYS[1]  cs:{ns}:cache:e:<key>  the entry
-- KEYS[2]  cs:{ns}:cache:lru      recency zset
-- KEYS[3]  cs:{ns}:cache:ttl      deadline zset
-- KEYS[4]  cs:{ns}:cache:stats    hits / misses / seq hash
-- ARGV[1]  the cache key (the zset member)

redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[4], 'hits', -1)
redis.call('HINCRBY', KEYS[4], 'misses', 1)
return 1
