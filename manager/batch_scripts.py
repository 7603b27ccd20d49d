"""The Batch API runner's Redis scripts: each step that must happen once (a line claimed, a result
recorded, a status moved, the lease taken) is one script, so a runner killed between two calls leaves a
state the next runner goes on from (manager/batch_runner.py)."""

# KEYS: batch, its in-flight lines. ARGV: lines in all, most in flight, most to claim now. Claims the
# next lines, as many as the batch has left, has room in flight for and are asked for; returns the first
# one's number and how many, or {-1, 0}: the batch is not running, is stopping, has every line claimed,
# or has its most in flight.
CLAIM = """
local batch = redis.call('HMGET', KEYS[1], 'status', 'next_line', 'expired_at')
if batch[1] ~= 'in_progress' or batch[3] then
  return {-1, 0}
end
local first = tonumber(batch[2] or '0')
local room = tonumber(ARGV[2]) - redis.call('HLEN', KEYS[2])
local count = math.min(tonumber(ARGV[1]) - first, room, tonumber(ARGV[3]))
if count <= 0 then
  return {-1, 0}
end
for n = first, first + count - 1 do
  redis.call('HSET', KEYS[2], n, '1')
end
redis.call('HSET', KEYS[1], 'next_line', first + count)
return {first, count}
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
