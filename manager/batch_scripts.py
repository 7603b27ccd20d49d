"""The Batch API runner's Redis scripts: each step that must happen once (a line claimed, a result
recorded, a status moved, the lease taken) is one script, so a runner killed between two calls leaves a
state the next runner goes on from (manager/batch_runner.py)."""

# KEYS: batch, its in-flight lines. ARGV: lines in all, most in flight. The next line's number, claimed;
# or -1: the batch is not running, is stopping, has every line claimed, or has its most in flight.
CLAIM = """
local batch = redis.call('HMGET', KEYS[1], 'status', 'next_line', 'expired_at')
if batch[1] ~= 'in_progress' or batch[3] then
  return -1
end
local n = tonumber(batch[2] or '0')
if n >= tonumber(ARGV[1]) or redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[2]) then
  return -1
end
redis.call('HSET', KEYS[2], n, '1')
redis.call('HSET', KEYS[1], 'next_line', n + 1)
return n
"""

# KEYS: results, in-flight lines, batch. ARGV: the count the lines raise, the input and output tokens
# they add to the batch's usage, then line/stored result pairs. Each line's result is written once, and
# counted once; returns how many this call recorded.
RECORD = """
local added = 0
for i = 4, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    added = added + 1
  end
  redis.call('HDEL', KEYS[2], ARGV[i])
end
if added > 0 then
  redis.call('HINCRBY', KEYS[3], ARGV[1], added)
  if tonumber(ARGV[2]) + tonumber(ARGV[3]) > 0 then
    redis.call('HINCRBY', KEYS[3], 'input_tokens', ARGV[2])
    redis.call('HINCRBY', KEYS[3], 'output_tokens', ARGV[3])
  end
end
return added
"""

# KEYS: batch. ARGV: the status it must have, the new one, then field/value pairs. 1 if it moved.
MOVE = """
if redis.call('HGET', KEYS[1], 'status') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[2])
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
"""

# KEYS: lease. ARGV: holder, ms. 1 if the holder has (or now takes) the lease.
LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
