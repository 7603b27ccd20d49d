"""The engine's lifecycle: the checkpoint loaded where Triton placed the instance, Hugging Face
transformers' continuous batching (`init_continuous_batching`) started and warmed up, requests added to
its running batch, the dispatcher thread, a rebuild when the generation thread dies, the stop at unload.

New requests join the running batch at the next step. One dispatcher thread reads the engine's streamed
outputs and hands them to the streamer (engine_stream.py), polls Triton for cancellations every few
milliseconds, and watches the engine thread: when it dies, the requests it held fail and a new engine
takes over.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import llguidance.hf
import llguidance.numpy
import torch
import triton_python_backend_utils as pb_utils
from engine_generation import Generation
from engine_intake import Admission, engine_kwargs
from engine_prefix_cache import PrefixCacheMeter
from engine_rules import EngineSettings, end_ids
from engine_sampler import install
from engine_stream import Active, Metrics, Streamer
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

POLL_S = 0.005  # how often the dispatcher wakes without output
# How often it asks Triton whether each request was cancelled, and looks at the engine's health: each
# is_cancelled() is a round trip to the server, per request (every 5 ms at 64 requests: 12,800 a
# second). A cancelled request leaves within 50 ms, under a step of the engine on the CPU.
CHECK_S = 0.05
COLLECT_AT_MOST = 4096  # outputs read before the dispatcher answers, so a flood cannot starve the polls
WARMUP_TIMEOUT_S = 120.0
# The unload's bound: half of Triton's exit timeout (EXIT_TIMEOUT_S, worker_image/triton_server.py).
STOP_TIMEOUT_S = 10.0
# The unload's share for the dispatcher:
# a daemon thread, left behind if it is stuck, so the generation thread's stop still fits.
DISPATCHER_JOIN_S = 2.0


def instance_device(args: dict[str, Any]) -> torch.device:
    """The device Triton placed this instance on (its instance group): never a silent fallback.

    An instance placed on a GPU where CUDA does not work fails to load, so that its worker fails too;
    running on the CPU instead would serve far slower while the GPU is billed.
    """
    if args.get("model_instance_kind") != "GPU":
        return torch.device("cpu")
    gpu = int(args.get("model_instance_device_id", 0))
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"synapse_llm: Triton placed this instance on GPU {gpu}, but torch {torch.__version__} (built "
            f"for CUDA {torch.version.cuda}) cannot use CUDA here: the host's NVIDIA driver is missing or "
            "older than that CUDA, or the container was given no GPU"
        )
    if gpu >= torch.cuda.device_count():
        raise RuntimeError(f"synapse_llm: placed on GPU {gpu}, but torch sees {torch.cuda.device_count()}")
    return torch.device("cuda", gpu)


class _QuietPsutil(logging.Filter):
    """HF CB logs an ERROR on CPU when psutil is absent, though the cache is sized from the config."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "psutil" not in record.getMessage()


class Engine:
    """One model's engine, running from construction (checkpoint loaded, warmed up, dispatching) to stop()."""

    def __init__(self, name: str, settings: EngineSettings, checkpoint: Path, device: torch.device) -> None:
        self.name = name
        self.settings = settings
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        # bfloat16 on a GPU (float16 overflows in llama-family activations); float32 on the CPU, where
        # half precision has no fast kernels.
        on_gpu = device.type == "cuda"
        self.model = AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=torch.bfloat16 if on_gpu else torch.float32
        )
        self.model = self.model.to(device).eval()
        settings.check_model(int(self.model.config.max_position_embeddings))
        self.eos_ids = end_ids(self.tokenizer.eos_token_id, self.model.generation_config.eos_token_id)
        self.vocab_size = int(self.model.config.vocab_size)
        self.grammar_tokenizer = llguidance.hf.from_tokenizer(self.tokenizer)
        logging.getLogger("ContinuousBatchingLogger").addFilter(_QuietPsutil())
        self.metrics = Metrics(name)
        self.prefix_cache = PrefixCacheMeter(self.metrics)
        self.streamer = Streamer(name, self.eos_ids, self.grammar_tokenizer, self.metrics, self._cancel)
        self._ids = itertools.count()
        self._closing = threading.Event()
        self.manager = self._start_manager()
        self._warm_up()
        self._dispatcher = threading.Thread(target=self._dispatch, name=f"{name}-dispatch", daemon=True)
        self._dispatcher.start()

    def _start_manager(self) -> Any:
        s = self.settings
        eos = min(self.eos_ids, default=-1)
        # Greedy for HF: the sampler (engine_sampler.py) leaves one possible token per row.
        generation = GenerationConfig(
            do_sample=False, max_new_tokens=16, eos_token_id=eos, pad_token_id=max(eos, 0)
        )
        batching = ContinuousBatchingConfig(
            page_size=s.block_size,
            num_blocks=s.num_blocks,
            max_batch_tokens=s.max_batch_tokens,
            max_requests_per_batch=s.max_num_seqs,
            # Prefix caching: a prompt's complete blocks shared with every later prompt that starts alike.
            allow_block_sharing=s.prefix_caching,
            # One step at a time: the sampler keeps a step's parameters from its preparation to its logits.
            use_async_batching=False,
            use_cuda_graph=False,
        )
        manager = self.model.init_continuous_batching(generation, batching)
        # llguidance's numpy helpers: its torch ones import torch's compiler, which Triton's stub cannot load.
        bitmask = (llguidance.numpy.allocate_token_bitmask, llguidance.numpy.fill_next_token_bitmask)
        install(manager, self.streamer.rows, bitmask)
        manager.start()
        return manager

    def _warm_up(self) -> None:
        """One short request, so the first client's time to first token is not the cache's creation."""
        token = next(iter(self.eos_ids), 0)
        rid = self.manager.add_request([token], request_id="warmup", max_new_tokens=2, streaming=False)
        deadline = time.monotonic() + WARMUP_TIMEOUT_S
        while rid is not None and time.monotonic() < deadline:
            out = self.manager.get_result(timeout=0.5)
            if out is not None and out.request_id == rid:
                return
            if self.manager.background_thread_status.fatal_error is not None:
                raise RuntimeError(
                    f"engine failed while warming up: {self.manager.background_thread_status.fatal_error}"
                )
        raise RuntimeError("engine did not answer its warm-up request")

    def add(self, request: Any, sender: Any, admission: Admission) -> bool:
        """Puts the request's choices in the running batch, each a sequence under its own id; False where
        the engine refused one (it is failing, and the dispatcher rebuilds it), none of them then kept."""
        params = admission.params
        base = f"r{next(self._ids)}"
        engine_ids = (base,) if params.n == 1 else tuple(f"{base}.{i}" for i in range(params.n))
        active = Active(
            request, sender, admission.options, params, admission.prompt, len(admission.tokens), engine_ids,
            [Generation(self._decode, params.stop, self.eos_ids, params.max_tokens) for _ in engine_ids],
            admission.rows, [0] * params.n,
        )  # fmt: skip
        random_seed = secrets.randbits(63)
        added = 0
        with self.streamer.lock:
            self.streamer.register(active)
            try:
                for index, rid in enumerate(engine_ids):
                    kwargs = engine_kwargs(params, index, random_seed)
                    if self.manager.add_request(
                        admission.tokens, request_id=rid, max_new_tokens=params.max_tokens, streaming=True,
                        **kwargs,
                    ) is None:  # fmt: skip
                        break  # refused: a failing engine, which the dispatcher rebuilds
                    added += 1
            finally:
                if added < len(engine_ids):
                    for rid in engine_ids[:added]:
                        self.manager.cancel_request(rid)
                    self.streamer.release(engine_ids)
        return added == len(engine_ids)

    def _decode(self, tokens: Any) -> str:
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True))

    def _cancel(self, rid: str) -> None:
        self.manager.cancel_request(rid)

    def _restart(self, reason: str) -> None:
        """The generation thread died: every request it held fails, and a new engine takes over."""
        pb_utils.Logger.log_error(f"{self.name}: engine failed ({reason}); rebuilding it")
        with self.streamer.lock:
            failed = self.streamer.take_all()
            self.streamer.rows.clear()
            old = self.manager
            try:
                old.stop(block=True, timeout=STOP_TIMEOUT_S, hard_stop=True)
            except Exception:
                failure = traceback.format_exc()
                pb_utils.Logger.log_error(f"{self.name}: stopping the failed engine: {failure}")
            self.manager = self._start_manager()
        self.streamer.fail(failed, f"the engine failed while generating ({reason}); retry")
        self.metrics.add("synapse_engine_restarts_total", 1)

    def stop(self) -> None:
        """The model unloads: the dispatcher ends, and the requests still in the engine fail."""
        self.metrics.close()
        self._closing.set()
        self._dispatcher.join(timeout=DISPATCHER_JOIN_S)
        with self.streamer.lock:
            left = self.streamer.take_all()
            # A hard stop: a flush would generate every live request to its end first, and the thread is
            # not a daemon, so one still running keeps the stub (and the unload) alive past Triton's exit.
            self.manager.stop(block=True, timeout=STOP_TIMEOUT_S - DISPATCHER_JOIN_S, hard_stop=True)
        self.streamer.fail(left, "the model is unloading; retry")

    # ---------------------------------------------------------------- dispatcher

    def _dispatch(self) -> None:
        last_poll = 0.0
        while not self._closing.is_set():
            try:
                latest = self._collect()
                generated = sum(self.streamer.deliver(out) for out in latest.values())
                self.metrics.add("synapse_engine_generated_tokens_total", generated)
                now = time.monotonic()
                if now - last_poll >= CHECK_S:
                    last_poll = now
                    self.streamer.drop_cancelled()
                    self._check_engine()
                    self.prefix_cache.watch(self.manager)
                    self.streamer.publish_sequences(self._scheduled())
            except Exception:
                pb_utils.Logger.log_error(f"{self.name}: dispatcher: {traceback.format_exc()}")
                time.sleep(POLL_S)

    def _collect(self) -> dict[str, Any]:
        """The engine's outputs so far, the latest per request (they are cumulative)."""
        manager = self.manager
        latest: dict[str, Any] = {}
        out = manager.get_result(timeout=POLL_S)
        for _ in range(COLLECT_AT_MOST):
            if out is None:
                break
            latest[out.request_id] = out
            out = manager.get_result(timeout=0)
        if out is not None:
            latest[out.request_id] = out
        if not latest and manager.background_thread_status.fatal_error is not None:
            time.sleep(POLL_S)  # get_result returns at once from a dead engine
        return latest

    def _scheduled(self) -> int:
        """The sequences HF's scheduler holds, running or waiting."""
        scheduler = getattr(getattr(self.manager, "batch_processor", None), "scheduler", None)
        return len(scheduler.active_requests) + len(scheduler.waiting_requests) if scheduler else 0

    def _check_engine(self) -> None:
        manager = self.manager
        fatal = manager.background_thread_status.fatal_error
        if fatal is not None or not manager.is_running():
            self._restart(str(fatal) if fatal is not None else "the generation thread exited")
