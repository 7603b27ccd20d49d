"""`synapse keys`: the local stack's tenants and their API keys, in `<state_dir>/keys.json`.

  synapse keys create --tenant NAME [--max-inflight N] [--rate R] [--burst B]
  synapse keys list
  synapse keys revoke KEY_ID
  synapse keys tenant NAME [--max-inflight N] [--rate R] [--burst B] [--show-secret]

`create` prints the new key, and nothing else, on stdout (`KEY=$(synapse keys create --tenant acme)`);
the file keeps only its SHA-256, so it is shown this once. A tenant's first key creates the tenant, and
its webhook secret (what its callbacks are signed with) goes to stderr; `tenant NAME --show-secret`
prints it again. Limits given to `create` or `tenant` replace the tenant's own: jobs in flight, requests a
second and the burst above it (0: no limit). A running gateway sees every change within a second.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from contract.settings import Settings
from contract.tenants import LIMITS, KeyBook, Tenant, keys_file

COLUMNS = ("ID", "TENANT", "CREATED", "REVOKED", "MAX-INFLIGHT", "RATE/S", "BURST")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="synapse keys", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="a new API key for a tenant (created if new); prints the key")
    create.add_argument("--tenant", required=True, help="lowercase letters, digits and dashes")
    _limit_arguments(create)
    sub.add_parser("list", help="every key: id, tenant, created, revoked, the tenant's limits; never a key")
    revoke = sub.add_parser("revoke", help="a key stops working (within a second on a running gateway)")
    revoke.add_argument("key_id", metavar="KEY_ID", help="as `synapse keys list` shows it")
    tenant = sub.add_parser("tenant", help="show a tenant's limits, or change them")
    tenant.add_argument("name", metavar="NAME")
    _limit_arguments(tenant)
    tenant.add_argument("--show-secret", action="store_true", help="print the tenant's webhook secret")
    return parser


def _limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-inflight", type=_at_least_zero(int), help="jobs not yet final; 0: no limit")
    parser.add_argument("--rate", type=_at_least_zero(float), help="requests a second; 0: no limit")
    parser.add_argument("--burst", type=_at_least_zero(int), help="requests at once above the rate")


def _at_least_zero(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < 0:
            raise argparse.ArgumentTypeError("0 (no limit) or more")
        return value

    return parse


def _limits(args: argparse.Namespace) -> dict[str, float | int | None]:
    return dict(zip(LIMITS, (args.max_inflight, args.rate, args.burst), strict=True))


def _limit(value: float, unit: str = "") -> str:
    return f"{value:g}{unit}" if value else "none"


def _listing(book: KeyBook) -> str:
    rows = [COLUMNS]
    for record in book.keys:
        tenant = book.tenants.get(record.tenant) or Tenant(record.tenant, "")
        created = datetime.fromtimestamp(record.created_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        rows.append((
            record.id, record.tenant, created, "yes" if record.revoked else "no",
            _limit(tenant.max_inflight), _limit(tenant.rate_per_s), _limit(tenant.burst),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _describe(tenant: Tenant) -> str:
    return (
        f"tenant {tenant.name}: max in flight {_limit(tenant.max_inflight)}, "
        f"rate {_limit(tenant.rate_per_s, '/s')}, burst {_limit(tenant.burst)}"
    )


def _create(book: KeyBook, args: argparse.Namespace) -> None:
    is_new = args.tenant not in book.tenants
    tenant = book.tenant(args.tenant, **_limits(args))
    key, record = book.add_key(tenant.name)
    print(key)
    print(f"{record.id} of {_describe(tenant)}", file=sys.stderr)
    if is_new:
        print(f"its webhook secret (signs its callbacks): {tenant.webhook_secret}", file=sys.stderr)


def _tenant(book: KeyBook, args: argparse.Namespace) -> None:
    if args.name not in book.tenants:
        raise KeyError(f"no tenant {args.name!r}; `synapse keys create --tenant {args.name}` makes one")
    tenant = book.tenant(args.name, **_limits(args))
    print(_describe(tenant))
    if args.show_secret:
        print(tenant.webhook_secret)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    path = keys_file(Settings.from_env().state_dir)
    try:
        if args.action == "list":  # a read: no lock, no write
            print(_listing(KeyBook.load(path)))
            return
        with KeyBook.editing(path) as book:
            if args.action == "create":
                _create(book, args)
            elif args.action == "revoke":
                record = book.revoke(args.key_id)
                print(f"revoked {record.id} of tenant {record.tenant}")
            else:
                _tenant(book, args)
    except (KeyError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else exc
        sys.exit(f"synapse keys: {message}")
