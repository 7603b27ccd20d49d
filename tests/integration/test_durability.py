"""The local durability promise: Redis writes its append-only file before it answers, so a `kill -9` of
Redis loses no job the front door answered 202 for (only a crash of the machine can lose the last
second). Jobs are submitted through the front door's own script, then Redis is killed and restarted on
the same data folder."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import redis

from contract.job_store import JobStore
from contract.jobs import Job
from contract.keys import job_key, stream_key
from local_stack.stack import redis_argv
from tests.processes import free_port, port_open, start, stop, wait_until

JOBS = 2000


def start_redis(port: int, data: Path, log: Path) -> subprocess.Popen[bytes]:
    proc = start(redis_argv(port, data), {}, log)
    wait_until(lambda: port_open(port), 30, "redis", proc, log)
    return proc


def test_kill_9_of_redis_loses_no_accepted_job(tmp_path: Path):
    port, data, log = free_port(), tmp_path / "redis", tmp_path / "redis.log"
    proc = start_redis(port, data, log)
    client = redis.Redis(port=port, decode_responses=True)
    store = JobStore(client, job_ttl_s=3600, max_queue_length=100_000)
    accepted = []
    try:
        for i in range(JOBS):
            job = Job.new(model="durable", prompt=f"p{i}", max_tokens=1, timeout_ms=60_000)
            assert store.submit(job)
            accepted.append(job.id)
        os.killpg(proc.pid, signal.SIGKILL)  # at once, after the last 202-worthy reply
        proc.wait()
        client.close()

        proc = start_redis(port, data, log)
        client = redis.Redis(port=port, decode_responses=True)
        pipe = client.pipeline(transaction=False)
        for job_id in accepted:
            pipe.exists(job_key(job_id))
        kept = sum(pipe.execute())
        in_stream = client.xlen(stream_key("durable"))
        lost = JOBS - kept
        print(f"\nFAULT-TALLY redis-kill9: accepted={JOBS} kept={kept} in_stream={in_stream} lost={lost}")
        assert lost == 0
        assert in_stream == JOBS
    finally:
        client.close()
        stop(proc)
