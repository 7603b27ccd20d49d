"""The `synapse` command on a developer's or user's machine: one subcommand per process, `up` to run
them all, and the tools (`bench`, `plan`, `models publish` and `models catalog`, `keys`, `preflight`).

Each subcommand imports its part only when it runs, so this module ties no deployable to another;
the images run their own entry points (`python -m manager`, `python -m worker_image`).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from collections.abc import Callable, Sequence

from contract.logs import configure_logging
from contract.settings import Settings


def raise_file_limit() -> None:
    """A gateway holding 1,000 connections needs more descriptors than the usual soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _run_manager(settings: Settings) -> None:
    from manager.service import run_manager

    asyncio.run(run_manager(settings))


def _run_worker(settings: Settings) -> None:
    from worker_image.agent import run_worker

    asyncio.run(run_worker(settings))


def _run_gateway(settings: Settings) -> None:
    import uvloop

    from local_stack.gateway import run_gateway

    uvloop.run(run_gateway(settings))


def _run_up(settings: Settings) -> None:
    import os

    from contract.catalog import CatalogError
    from local_stack.stack import banner, first_worker_ready, for_local_stack, local_stack
    from local_stack.supervisor import Supervisor
    from worker_image.triton_server import clean_up_after_dead_tritons

    try:
        settings = for_local_stack(settings, os.environ)
    except CatalogError as exc:  # a served model without a usable folder: say which, not a traceback
        sys.exit(f"synapse up: {exc}")
    clean_up_after_dead_tritons()  # what Tritons killed with their agents left: stubs, /dev/shm

    async def announce() -> None:
        await first_worker_ready(settings)
        print(banner(settings), flush=True)

    asyncio.run(Supervisor(local_stack(settings), on_ready=announce).run())


def _run_bench(settings: Settings, argv: Sequence[str] = ()) -> None:
    from bench.cli import main as bench

    bench(argv)


def _run_plan(settings: Settings, argv: Sequence[str] = ()) -> None:
    if argv[:1] == ["cold-start"]:
        from planner.cold_start import main as cold_start

        return cold_start(argv[1:])
    if argv[:1] == ["batch"]:
        from planner.batch import main as batch

        return batch(argv[1:])
    from planner.plan import main as plan

    plan(argv)


COMMANDS: dict[str, tuple[Callable[..., None], str]] = {
    "manager": (_run_manager, "run the workload manager (batcher, dispatcher)"),
    "worker": (_run_worker, "run a GPU worker: Triton and its agent"),
    "gateway": (_run_gateway, "run the local HTTP front door"),
    "up": (_run_up, "run the whole platform locally in the foreground"),
    "bench": (_run_bench, "run the benchmarks and write the report (`synapse bench all`; --help)"),
    "plan": (
        _run_plan,
        "size the worker pool for a load and a latency SLO (--help); `plan cold-start`: time from zero; "
        "`plan batch`: a Batch API batch's time",
    ),
}
OWN_ARGUMENTS = frozenset({"bench", "plan"})  # these parse the rest of the command line themselves


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["models"]:  # a tool with its own arguments, not a process: no settings, no logging
        from worker_image.publish import main as models_main

        return models_main(argv[1:])
    if argv[:1] == ["keys"]:  # the same: the local stack's tenants and API keys
        from local_stack.keys_cli import main as keys_main

        return keys_main(argv[1:])
    if argv[:1] == ["preflight"]:  # the same: read-only checks of an AWS account before `cdk deploy`
        from stacks.preflight import main as preflight_main

        return preflight_main(argv[1:])
    parser = argparse.ArgumentParser(prog="synapse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=name not in OWN_ARGUMENTS)
    sub.add_parser("models", help="the model catalog and the S3 model store (synapse models --help)")
    sub.add_parser("keys", help="the local stack's tenants and API keys (synapse keys --help)")
    sub.add_parser("preflight", help="check an AWS account before `cdk deploy` (synapse preflight --help)")
    args, rest = parser.parse_known_args(argv)
    if args.command in OWN_ARGUMENTS:
        raise_file_limit()
        COMMANDS[args.command][0](Settings.from_env(), rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    settings = Settings.from_env()
    configure_logging(settings.log_level, args.command)
    raise_file_limit()
    run, _ = COMMANDS[args.command]
    run(settings)


if __name__ == "__main__":
    main()
