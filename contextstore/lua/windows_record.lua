-- contextstore: RedisWindows.record, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:win  hash:
--            agg        "<total> <n> <resp> <len> <chunks> <fails>": records ever (the count
--                       that decides auto-tune), samples in the window, and their four sums
--            "0".."99"  a ring of the last `window` samples, "<resp> <len> <chunks> <failed>";
--                       record number t (1-based) is kept in field (t - 1) % window
-- ARGV[1]  the sample: "<response_ms> <context_length> <chunk_count> <failed 0|1>", the
--          response time written as Python's repr, so no precision is lost
-- ARGV[2]  the window size (100)
--
-- Overwrites the oldest sample once the window is full, updates the sums, and returns the
-- new agg string (numbers written with %.17g, exact for every double). The total is only
-- ever incremented here, atomically, so exactly one record of the fleet sees 20, one 40, ...
--
-- The sums are kept up to date (O(1) per record, three commands, one key) rather than
-- recomputed over the window each time: summary() is then one HGET, as cheap as a GET.
-- Adding and subtracting floats can drift by a few ulps and inf - inf is nan, so every ten
-- windows (total a multiple of 10 * window), and whenever a sum is not finite, the sums and
-- the sample count are recomputed from the ring (amortised: a fraction of a command). A
-- sample that does not parse counts as zeros, an agg that does not parse restarts the
-- windows; neither can make this script fail.

local function parse_sample(sample)
    local r, l, c, f = string.match(sample or '', '^(%S+) (%S+) (%S+) (%S+)$')
    return tonumber(r) or 0, tonumber(l) or 0, tonumber(c) or 0, tonumber(f) or 0
end

local function finite(x)
    return x == x and x ~= math.huge and x ~= -math.huge
end

local key, sample, window = KEYS[1], ARGV[1], tonumber(ARGV[2])
local total, n, resp, len, chunks, fails = 0, 0, 0, 0, 0, 0
local agg = redis.call('HGET', key, 'agg')
if agg then
    local a, b, c, d, e, f = string.match(agg, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
    total, n = tonumber(a) or 0, tonumber(b) or 0
    resp, len = tonumber(c) or 0, tonumber(d) or 0
    chunks, fails = tonumber(e) or 0, tonumber(f) or 0
    if not (finite(total) and total >= 0 and finite(n)) then
        -- Not written by this script: start again from empty windows.
        total, n, resp, len, chunks, fails = 0, 0, 0, 0, 0, 0
    end
end

local slot = tostring(total % window)
total = total + 1
if n >= window then
    local r, l, c, f = parse_sample(redis.call('HGET', key, slot))
    resp, len, chunks, fails = resp - r, len - l, chunks - c, fails - f
else
    n = n + 1
end
local r, l, c, f = parse_sample(sample)
resp, len, chunks, fails = resp + r, len + l, chunks + c, fails + f

if total % (10 * window) == 0 or not finite(resp + len + chunks + fails) then
    redis.call('HSET', key, slot, sample)
    n, resp, len, chunks, fails = 0, 0, 0, 0, 0
    local fields = redis.call('HGETALL', key)
    for i = 1, #fields, 2 do
        if fields[i] ~= 'agg' then
            r, l, c, f = parse_sample(fields[i + 1])
            n, resp, len, chunks, fails = n + 1, resp + r, len + l, chunks + c, fails + f
        end
    end
end

agg = string.format('%.17g %.17g %.17g %.17g %.17g %.17g', total, n, resp, len, chunks, fails)
redis.call('HSET', key, slot, sample, 'agg', agg)
return agg
