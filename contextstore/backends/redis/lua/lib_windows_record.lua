-- contextstore library: the windows' record, as a function (windows_record.lua,
-- run_write.lua). Included by `--! include lib_windows_record.lua`; see
-- contextstore/backends/redis/scripts.py.
--
-- key      cs:{ns}:win  hash, every number a little-endian IEEE 754 double:
--            agg        48 bytes, struct '<dddddd': total (records ever, the count that
--                       decides auto-tune), n (samples in the window), and their four sums
--                       resp, len, chunks, fails
--            "0".."99"  a ring of the last `window` samples, 32 bytes each, struct '<dddd':
--                       response_ms, context_length, chunk_count, failed (0 or 1); record
--                       number t (1-based) is kept in field (t - 1) % window
-- sample   the sample, 32 bytes '<dddd' as above (packed by the client: exact)
-- window   the window size (100)
--
-- Overwrites the oldest sample once the window is full, updates the sums, and returns the
-- new agg (48 bytes). Binary doubles, not text: exact for every double, and neither side
-- formats or parses numbers (that was most of this script's time). The total is only ever
-- incremented here, atomically, so exactly one record of the fleet sees 20, one 40, ...
--
-- The sums are kept up to date (O(1) per record, three commands, one key) rather than
-- recomputed over the window each time: summary() is then one HGET, as cheap as a GET.
-- Adding and subtracting floats can drift by a few ulps and inf - inf is nan, so every ten
-- windows (total a multiple of 10 * window), and whenever a sum is not finite, the sums and
-- the sample count are recomputed from the ring (amortised: a fraction of a command). A
-- sample that is not 32 bytes counts as zeros, an agg that is not 48 bytes of sane counts
-- restarts the windows; neither can make this script fail.

-- Redis (and Valkey) load the struct library into every script. fakeredis, which some run
-- in tests, has none: for it, the same bytes are made here (math.frexp/ldexp are exact).
local struct = struct or (function()
    local function encode(x)
        local sign, exp, mant = 0, 0, 0
        if x < 0 or (x == 0 and 1 / x < 0) then
            sign, x = 128, -x
        end
        if x ~= x then
            exp, mant = 2047, 2 ^ 51
        elseif x == math.huge then
            exp = 2047
        elseif x > 0 then
            local m, e = math.frexp(x)
            if e > -1022 then
                exp, mant = e + 1022, (m * 2 - 1) * 2 ^ 52
            else
                mant = math.ldexp(m, e + 1074)
            end
        end
        local bytes = {}
        for i = 1, 6 do
            bytes[i] = mant % 256
            mant = math.floor(mant / 256)
        end
        bytes[7] = exp % 16 * 16 + mant
        bytes[8] = sign + math.floor(exp / 16)
        return string.char(unpack(bytes))
    end
    local function decode(s, at)
        local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(s, at, at + 7)
        local sign = b8 >= 128 and -1 or 1
        local exp = b8 % 128 * 16 + math.floor(b7 / 16)
        local mant = ((((b7 % 16 * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 2 ^ 16
            + b2 * 256 + b1
        if exp == 2047 then
            return mant == 0 and sign * math.huge or 0 / 0
        elseif exp == 0 then
            return sign * math.ldexp(mant, -1074)
        end
        return sign * math.ldexp(mant + 2 ^ 52, exp - 1075)
    end
    -- Only the formats used below: '<' and a run of 'd'.
    return {
        pack = function(_, ...)
            local out = {}
            for i = 1, select('#', ...) do
                out[i] = encode(select(i, ...))
            end
            return table.concat(out)
        end,
        unpack = function(format, s)
            local out = {}
            for i = 1, #format - 1 do
                out[i] = decode(s, 8 * i - 7)
            end
            return unpack(out)
        end,
    }
end)()

local function finite(x)
    return x == x and x ~= math.huge and x ~= -math.huge
end

local function read_sample(bytes)
    if type(bytes) == 'string' and #bytes == 32 then
        return struct.unpack('<dddd', bytes)
    end
    return 0, 0, 0, 0
end

local function windows_record(key, sample, window)
    local total, n, resp, len, chunks, fails = 0, 0, 0, 0, 0, 0
    local agg = redis.call('HGET', key, 'agg')
    if agg and #agg == 48 then
        total, n, resp, len, chunks, fails = struct.unpack('<dddddd', agg)
        -- Counts are whole and in range (nan fails every comparison); totals up to 2^53 count
        -- exactly. Anything else was not written by this script: start again, empty.
        if not (total >= 0 and total < 2 ^ 53 and total % 1 == 0
                and n >= 0 and n <= window and n % 1 == 0) then
            total, n, resp, len, chunks, fails = 0, 0, 0, 0, 0, 0
        end
    end

    local slot = tostring(total % window)
    total = total + 1
    local r, l, c, f
    if n >= window then
        r, l, c, f = read_sample(redis.call('HGET', key, slot))
        resp, len, chunks, fails = resp - r, len - l, chunks - c, fails - f
    else
        n = n + 1
    end
    r, l, c, f = read_sample(sample)
    resp, len, chunks, fails = resp + r, len + l, chunks + c, fails + f

    if total % (10 * window) == 0 or not finite(resp + len + chunks + fails) then
        redis.call('HSET', key, slot, sample)
        n, resp, len, chunks, fails = 0, 0, 0, 0, 0
        local fields = redis.call('HGETALL', key)
        for i = 1, #fields, 2 do
            if fields[i] ~= 'agg' then
                r, l, c, f = read_sample(fields[i + 1])
                n, resp, len, chunks, fails = n + 1, resp + r, len + l, chunks + c, fails + f
            end
        end
    end

    agg = struct.pack('<dddddd', total, n, resp, len, chunks, fails)
    redis.call('HSET', key, slot, sample, 'agg', agg)
    return agg
end
