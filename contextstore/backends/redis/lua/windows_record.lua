-- contextstore: RedisWindows.record, one atomic round trip.
--
-- KEYS[1]  cs:{ns}:win  the windows hash (layout in lib_windows_record.lua)
-- ARGV[1]  the sample, 32 bytes '<dddd': response_ms, context_length, chunk_count, failed
-- ARGV[2]  the window size (100)
--
-- Returns the new agg (48 bytes): see lib_windows_record.lua.

--! include lib_windows_record.lua

return windows_record(KEYS[1], ARGV[1], tonumber(ARGV[2]))
