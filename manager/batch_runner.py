"""The Batch API's runner: validates a batch's input file, expands its lines into jobs with backpressure,
records each line's result once, and writes the output and error files.

Every step keeps its state in Redis and can be done twice without harm, so a manager killed at any point
(kill -9) leaves a batch the next runner finishes with every line exactly once in one of its files:

- a line's job id is derived from the batch and the line (contract/batches.line_job_id): a line claimed
  but whose job is not found is submitted (again), never as a second job;
- a line is claimed (`batch:{id}:inflight`) and the cursor advanced in one script, at most
  `batch_lines_in_flight` at a time;
- a result is written with HSETNX and its count raised in the same script, so a line ends once;
- the output files have fixed ids and are written whole before the batch's status says they exist.

The input is never held whole (a 200 MB file, a 1 GB manager): validation streams through the batch's
own copy once and keeps per line only its byte span (16 bytes); a line's custom_id and body are read back,
a window of lines per ranged read, when the runner submits, answers or stops it.

One manager works on a batch at a time (a lease renewed every tick): two would race to submit the same
line. The lease outlives a tick by far, and a killed manager's batch waits at most BATCH_LEASE_MS.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from contract.batches import (
    OUTPUT_PURPOSE,
    BatchRecord,
    BatchStatus,
    FileRecord,
    batch_record_of,
    error_list,
    line_job_id,
    output_file_id,
    read_batch,
)
from contract.catalog_build import catalog_of
from contract.job_store import JobStore, Written
from contract.jobs import MAX_TIMEOUT_MS, Job, JobStatus
from contract.keys import (
    ACTIVE_BATCHES_KEY,
    batch_inflight_key,
    batch_key,
    batch_lease_key,
    batch_results_key,
)
from contract.redis_client import SyncRedis, sync_client
from contract.settings import Settings
from manager import batch_scripts, metrics
from openai_api.batch_lines import (
    Line,
    line_answer,
    line_job,
    read_line,
    request_spans,
    result_line,
    scan_input,
)
from openai_api.errors import Problem, openai_body
from openai_api.file_records import save_file
from openai_api.file_store import FileStore, chunks_of, file_store_for

log = logging.getLogger(__name__)

BATCH_LEASE_MS = 10_000
STOP_CHUNK = 1000  # stopped lines recorded per round trip
# Lines claimed, built and submitted per round trip (a pipeline of the submit script), rather than a round
# trip or two per line: a 10,000-line chat batch on gpu-sim went from 321-343 to 369 lines/s.
CLAIM_CHUNK = 256
WINDOW_BYTES = 8 * 1024 * 1024  # the most of the input one ranged read brings back (unless a line is longer)
OUTPUT, ERROR = "o", "e"  # a stored result's first character: which file the line goes to
STOPPED_MESSAGES = {
    "batch_cancelled": "the batch was cancelled before this request ran",
    "batch_expired": "the batch's completion window ended before this request ran",
}

FILE_GONE = {"code": "file_not_found", "message": "the input file was deleted", "param": None, "line": None}


def tokens_of(body: dict[str, Any]) -> tuple[int, int]:
    """An answer's (input, output) tokens, from its `usage` as the /v1 route reports it (an embedding
    has no completion tokens); (0, 0) for an error body."""
    usage = body.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    return prompt, int(usage.get("completion_tokens") or 0)


def stopped_line(batch_id: str, custom_id: str, line: int, code: str) -> str:
    """The error file's line of a line the batch's cancel or expiry stopped before it ran."""
    error = {"code": code, "message": STOPPED_MESSAGES[code]}
    return result_line(custom_id, line_job_id(batch_id, line), None, None, error)


def input_copy_id(batch_id: str) -> str:
    """The batch's own copy of its input, in the file store beside the tenant's files (no record lists it)."""
    return f"{batch_id}.input"


def line_timeout_ms(window_left_ms: int) -> int:
    """A line's job timeout: the batch's window left, within what a job may ask for (`synapse plan batch`
    times the autoscaler's deadline with it)."""
    return max(1000, min(window_left_ms, MAX_TIMEOUT_MS))


class Results:
    """The results a pass finds, recorded together: one round trip per file, not one per line."""

    def __init__(self) -> None:
        self.pairs: dict[str, list[str]] = {OUTPUT: [], ERROR: []}
        self.tokens: dict[str, tuple[int, int]] = {OUTPUT: (0, 0), ERROR: (0, 0)}

    def add(self, line: int, file: str, text: str, tokens: tuple[int, int] = (0, 0)) -> None:
        """The line's result; `tokens` (input, output) of an answered line go to the batch's usage."""
        self.pairs[file] += [str(line), file + text]
        prompt, completion = self.tokens[file]
        self.tokens[file] = (prompt + tokens[0], completion + tokens[1])


class BatchRunner:
    """One pass (`tick`) works every active batch whose lease it holds; the manager calls it in a loop."""

    def __init__(self, client: SyncRedis, files: FileStore, cfg: Settings, holder: str) -> None:
        self._redis = client
        self._files = files
        self._cfg = cfg
        self._holder = holder
        self._catalog = catalog_of(cfg)  # the models a line may name, as the front door reads them
        self._jobs = JobStore(client, cfg.job_ttl_s, cfg.max_queue_length)
        self._spans: dict[str, array[int]] = {}  # each batch's line spans, found again after a restart
        self._moved = False  # whether this pass moved a batch on

    @classmethod
    def for_settings(cls, cfg: Settings, holder: str) -> BatchRunner:
        """A runner on a client of its own: it runs on a thread, beside the manager's event loop."""
        return cls(sync_client(cfg, max_connections=2), file_store_for(cfg), cfg, holder)

    def tick(self) -> bool:
        """True when the pass moved some batch on (a line submitted or answered, a status changed): the
        manager then goes round again at once rather than after its pause."""
        self._moved = False
        active: set[str] = self._redis.smembers(ACTIVE_BATCHES_KEY)  # type: ignore[assignment]
        self._export(sorted(active))
        for gone in self._spans.keys() - active:  # batches another manager finished
            del self._spans[gone]
        for batch_id in sorted(active):
            held = self._redis.eval(
                batch_scripts.LEASE, 1, batch_lease_key(batch_id), self._holder, BATCH_LEASE_MS
            )
            if held != 1:  # type: ignore[comparison-overlap]
                continue
            try:
                self.work(batch_id)
            except Exception:
                log.exception("batch %s: this pass failed; the next one goes on from its state", batch_id)
        return self._moved

    def _export(self, active: list[str]) -> None:
        """Batches by status, fleet-wide (manager/metrics.py): every active batch's record, one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for batch_id in active:
            pipe.hgetall(batch_key(batch_id))
        records = [record for fields in pipe.execute() if (record := batch_record_of(fields)) is not None]
        metrics.set_batch_api(records, time.time())

    def work(self, batch_id: str) -> None:
        batch = read_batch(self._redis, batch_id)
        if batch is None:
            self._redis.srem(ACTIVE_BATCHES_KEY, batch_id)
            return
        status = batch.status
        if status.is_final:
            self._retire(batch_id)
        elif status is BatchStatus.VALIDATING:
            self._validate(batch)
        elif status is BatchStatus.FINALIZING:
            self._finalise(batch, BatchStatus.FINALIZING, BatchStatus.COMPLETED, "completed_at")
        else:
            self._run(batch)

    def _move(self, batch_id: str, old: BatchStatus, new: BatchStatus, **fields: str) -> bool:
        pairs = [part for item in fields.items() for part in item]
        moved = bool(
            self._redis.eval(batch_scripts.MOVE, 1, batch_key(batch_id), old.value, new.value, *pairs)
        )
        self._moved |= moved
        return moved

    def _input(self, batch: BatchRecord) -> array[int]:
        """A running batch's line spans, in its own copy of the input (the tenant may delete theirs)."""
        cached = self._spans.get(batch.id)
        if cached is None:
            copy = chunks_of(self._files, batch.tenant, input_copy_id(batch.id))
            cached = self._spans[batch.id] = request_spans(copy)  # the copy passed validation
        return cached

    def _lines_at(self, batch: BatchRecord, wanted: Iterable[int]) -> dict[int, Line]:
        """The lines asked for, read from the batch's copy a window (WINDOW_BYTES) at a time."""
        spans, found = self._input(batch), {}
        numbers = sorted(set(wanted))
        while numbers:
            first = spans[2 * numbers[0]]
            group = [n for n in numbers if spans[2 * n + 1] - first <= WINDOW_BYTES] or numbers[:1]
            end = spans[2 * group[-1] + 1]
            data = self._files.read_range(batch.tenant, input_copy_id(batch.id), first, end - first) or b""
            for n in group:
                found[n] = read_line(data[spans[2 * n] - first : spans[2 * n + 1] - first])
            numbers = numbers[len(group) :]
        return found

    def _validate(self, batch: BatchRecord) -> None:
        """Copies the input file for the batch, streaming, and checks the copy; a valid one runs."""
        tenant, copy_id, source = batch.tenant, input_copy_id(batch.id), batch.input_file_id
        spans: array[int] = array("q")
        expected = self._files.size(tenant, source)
        problems: list[dict[str, Any]] = [FILE_GONE]
        if expected is not None:
            copied = self._files.write(tenant, copy_id, chunks_of(self._files, tenant, source))
            if copied == expected:  # else the tenant deleted the file while it was copied
                spans, problems = scan_input(
                    chunks_of(self._files, tenant, copy_id), batch.endpoint, self._cfg.batch_max_lines
                )
        now = str(int(time.time()))
        if problems:
            self._files.delete(tenant, copy_id)
            failed = {"errors": error_list(problems), "failed_at": now}
            if self._move(batch.id, BatchStatus.VALIDATING, BatchStatus.FAILED, **failed):
                metrics.record_batch_api_final(BatchStatus.FAILED, batch.created_at, int(now))
            return
        self._spans[batch.id] = spans
        self._move(
            batch.id, BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS,
            total=str(len(spans) // 2), next_line="0", in_progress_at=now,
        )  # fmt: skip

    def _run(self, batch: BatchRecord) -> None:
        batch_id = batch.id
        status = batch.status
        if status is BatchStatus.IN_PROGRESS and batch.expired_at is None and time.time() >= batch.expires_at:
            now = int(time.time())
            self._redis.hset(batch_key(batch_id), "expired_at", str(now))
            batch = replace(batch, times={**batch.times, "expired_at": now})
        stop_code = (
            "batch_cancelled" if status is BatchStatus.CANCELLING
            else "batch_expired" if batch.expired_at is not None else None
        )  # fmt: skip
        total = len(self._input(batch)) // 2 if batch.total else 0
        if total != batch.total:
            log.error("batch %s: its copy of the input is gone; it cannot go on", batch_id)
            return
        if stop_code is not None:
            self._stop_unclaimed(batch, total, stop_code)
        self._collect(batch, stop_code)
        if stop_code is None:
            self._expand(batch, total)
        if self._redis.hlen(batch_inflight_key(batch_id)) or self._unclaimed(batch_id, total):
            return
        if stop_code == "batch_cancelled":
            self._finalise(batch, BatchStatus.CANCELLING, BatchStatus.CANCELLED, "cancelled_at")
        elif stop_code == "batch_expired":
            self._finalise(batch, BatchStatus.IN_PROGRESS, BatchStatus.EXPIRED, "expired_at")
        elif self._move(
            batch_id, BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING, finalizing_at=str(int(time.time()))
        ):
            self._finalise(batch, BatchStatus.FINALIZING, BatchStatus.COMPLETED, "completed_at")

    def _unclaimed(self, batch_id: str, total: int) -> bool:
        claimed: str | None = self._redis.hget(batch_key(batch_id), "next_line")  # type: ignore[assignment]
        return int(claimed or 0) < total

    def _record(self, batch_id: str, results: Results) -> None:
        """Each line's result, once, a round trip per file."""
        keys = (batch_results_key(batch_id), batch_inflight_key(batch_id), batch_key(batch_id))
        for file, counter in ((OUTPUT, "completed"), (ERROR, "failed")):
            pairs = results.pairs[file]
            if not pairs:
                continue
            recorded = self._redis.eval(
                batch_scripts.RECORD, 3, *keys, counter, *results.tokens[file], *pairs
            )
            metrics.BATCH_API_LINES.labels(counter).inc(int(recorded))  # type: ignore[arg-type]
            self._moved |= bool(recorded)

    def _stop_unclaimed(self, batch: BatchRecord, total: int, code: str) -> None:
        """Lines never claimed end now, each with the stop's error; their results before the cursor moves,
        so that a runner killed in between finds them still unclaimed (and records each once). A round
        trip per STOP_CHUNK lines: a 50,000-line batch stops in a few dozen, well inside its lease."""
        first = batch.next_line
        for start in range(first, total, STOP_CHUNK):
            results = Results()
            for line, read in self._lines_at(batch, range(start, min(start + STOP_CHUNK, total))).items():
                results.add(line, ERROR, stopped_line(batch.id, read.custom_id, line, code))
            self._record(batch.id, results)
        self._redis.hset(batch_key(batch.id), "next_line", str(max(first, total)))

    def _collect(self, batch: BatchRecord, stop_code: str | None) -> None:
        """Results of the lines in flight whose jobs ended; a claimed line without its job gets it (a
        runner stopped between claim and submit, or a store that lost it)."""
        batch_id = batch.id
        in_flight: list[str] = self._redis.hkeys(batch_inflight_key(batch_id))  # type: ignore[assignment]
        claimed = [int(key) for key in in_flight]
        found = self._jobs.get_many([line_job_id(batch_id, line) for line in claimed])  # one round trip
        lines = self._lines_at(  # read back only the lines this pass may answer, submit or stop
            batch,
            [
                line
                for line, read in zip(claimed, found, strict=True)
                if read is None or stop_code is not None or read.status.is_final
            ],
        )
        results, unsubmitted = Results(), []
        for line, read in zip(claimed, found, strict=True):
            job_id = line_job_id(batch_id, line)
            stopped = (
                None if stop_code is None else stopped_line(batch_id, lines[line].custom_id, line, stop_code)
            )
            record = read
            if record is None:
                if stopped is not None:
                    results.add(line, ERROR, stopped)
                elif (job := self._line_job(batch, line, lines[line], results)) is not None:
                    unsubmitted.append(job)
                continue
            if record.status is JobStatus.QUEUED and stop_code is not None:
                self._jobs.cancel(record, STOPPED_MESSAGES[stop_code])
                record = self._jobs.get(job_id) or record
            if record.status is JobStatus.CANCELLED and stopped is not None:
                results.add(line, ERROR, stopped)
            elif record.status.is_final:
                code, body = line_answer(batch.endpoint, lines[line].body, record)
                text = result_line(lines[line].custom_id, job_id, code, body, None)
                results.add(line, OUTPUT if code == 200 else ERROR, text, tokens_of(body))
        self._record(batch_id, results)
        # Claimed lines without their job (a runner stopped between claim and submit, or a full queue or
        # quota): submitted again; one still refused waits, claimed, for a later pass.
        self._moved |= Written.YES in self._jobs.submit_many(unsubmitted, batch.max_inflight)

    def _expand(self, batch: BatchRecord, total: int) -> None:
        """Claims and submits lines while the batch has room in flight, CLAIM_CHUNK lines per round trip
        (read back from the input, built, then submitted in one pipeline). A line whose job the queue
        or the tenant's quota refuses waits, claimed, for a later pass, and so do the lines after it."""
        keys = (batch_key(batch.id), batch_inflight_key(batch.id))
        while True:
            reply = self._redis.eval(
                batch_scripts.CLAIM, 2, *keys, total, self._cfg.batch_lines_in_flight, CLAIM_CHUNK
            )
            first, count = (int(part) for part in reply)  # type: ignore[union-attr]
            if first < 0:
                return
            lines = self._lines_at(batch, range(first, first + count))
            results, built = Results(), []
            for line in range(first, first + count):
                job = self._line_job(batch, line, lines[line], results)
                if job is not None:
                    built.append(job)
            written = self._jobs.submit_many(built, batch.max_inflight)
            self._record(batch.id, results)
            self._moved |= Written.YES in written
            if any(outcome is not Written.YES for outcome in written):
                return

    def _line_job(self, batch: BatchRecord, line: int, read: Line, results: Results) -> Job | None:
        """A claimed line's job; None, its refusal added to `results`, when the /v1 route would refuse it."""
        job_id = line_job_id(batch.id, line)
        timeout_ms = line_timeout_ms(batch.expires_at * 1000 - int(time.time() * 1000))
        job = line_job(
            batch.endpoint,
            read.body,
            cfg=self._cfg,
            catalog=self._catalog,
            tenant=batch.tenant,
            timeout_ms=timeout_ms,
            job_id=job_id,
        )
        if isinstance(job, Problem):
            results.add(line, ERROR, result_line(read.custom_id, job_id, job.status, openai_body(job), None))
            return None
        return job

    def _finalise(self, batch: BatchRecord, old: BatchStatus, new: BatchStatus, stamp: str) -> None:
        """Writes the output and error files (fixed ids: a second run rewrites the same ones), then moves
        the batch to its final status naming them."""
        batch_id, tenant = batch.id, batch.tenant
        results: dict[str, str] = self._redis.hgetall(batch_results_key(batch_id))  # type: ignore[assignment]
        ordered = [results[k] for k in sorted(results, key=int)]
        ids: dict[str, str] = {}
        now = int(time.time())
        for kind, mark, field in (("output", OUTPUT, "output_file_id"), ("errors", ERROR, "error_file_id")):
            chosen = [r[1:] for r in ordered if r[0] == mark]
            if not chosen:
                continue
            data = ("\n".join(chosen) + "\n").encode("utf-8")
            file_id = output_file_id(batch_id, kind)
            name = f"{batch_id}_{kind}.jsonl"
            record = FileRecord(
                file_id, tenant, filename=name, purpose=OUTPUT_PURPOSE, size=len(data), created_at=now
            )
            save_file(self._redis, self._files, record, data, self._cfg.file_retention_days)
            ids[field] = file_id
        if self._move(batch_id, old, new, **ids, **{stamp: str(now)}):
            metrics.record_batch_api_final(new, batch.created_at, now)
            self._retire(batch_id)

    def _retire(self, batch_id: str) -> None:
        """A final batch leaves the runners' set; its results stay as long as a job's record would."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.expire(batch_results_key(batch_id), self._cfg.job_ttl_s)
        pipe.delete(batch_inflight_key(batch_id))
        pipe.srem(ACTIVE_BATCHES_KEY, batch_id)
        pipe.execute()
        tenant = self._redis.hget(batch_key(batch_id), "tenant")
        if isinstance(tenant, str):
            self._files.delete(tenant, input_copy_id(batch_id))
        self._spans.pop(batch_id, None)
        log.info("batch %s is final", batch_id)
