"""The keys file: tenants, their keys (kept as SHA-256 only), revocation, a file no reader sees half of."""

from __future__ import annotations

import json
import multiprocessing
import stat
from pathlib import Path

import pytest

from contract.tenants import KeyBook, WatchedKeyBook, key_digest, keys_file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_file_is_an_empty_book(tmp_path: Path):
    book = KeyBook.load(keys_file(tmp_path))
    assert (book.tenants, book.keys, book.active_keys()) == ({}, [], [])


def test_a_new_key_resolves_to_its_tenant_and_the_book_keeps_only_its_hash(tmp_path: Path):
    book = KeyBook()
    key, record = book.add_key("acme")
    assert record.tenant == "acme" and record.sha256 == key_digest(key)
    book.save(keys_file(tmp_path))

    text = keys_file(tmp_path).read_text()
    again = KeyBook.load(keys_file(tmp_path))
    resolved = again.resolve(key)
    assert resolved is not None and resolved.name == "acme"
    assert resolved.webhook_secret.startswith("whsec_")
    assert key not in text
    assert again.resolve(key + "x") is None


def test_a_revoked_key_resolves_to_nothing_and_the_tenants_other_keys_still_work():
    book = KeyBook()
    first, record = book.add_key("acme")
    second, _ = book.add_key("acme")
    book.revoke(record.id)
    assert book.resolve(first) is None
    assert book.is_revoked(first) and not book.is_revoked(second)
    assert book.resolve(second) is not None
    with pytest.raises(KeyError, match="no key"):
        book.revoke("key_unknown")


def test_ensuring_a_key_adds_it_once_to_its_tenant():
    book = KeyBook()
    book.ensure_key("sk-banner", "default")
    book.ensure_key("sk-banner", "default")
    assert len(book.keys) == 1
    tenant = book.resolve("sk-banner")
    assert tenant is not None and tenant.name == "default"


def test_ensuring_a_revoked_key_never_brings_it_back_nor_moves_it():
    """The gateway ensures SYNAPSE_API_KEY at every start: a revoked one must stay revoked."""
    book = KeyBook()
    _, record = book.add_key("acme", "sk-was-acmes")
    book.revoke(record.id)

    book.ensure_key("sk-was-acmes", "default")

    assert book.resolve("sk-was-acmes") is None
    assert len(book.keys) == 1


def test_limits_given_replace_the_tenants_own_and_the_secret_stays():
    book = KeyBook()
    created = book.tenant("acme", max_inflight=3, rate_per_s=2.0, burst=None)
    changed = book.tenant("acme", rate_per_s=5.0)
    assert (changed.max_inflight, changed.rate_per_s, changed.burst) == (3, 5.0, 0)
    assert changed.webhook_secret == created.webhook_secret


@pytest.mark.parametrize("name", ["Acme", "-acme", "acme\n", "a" * 64, "", "a/b"])
def test_a_tenant_name_is_lowercase_letters_digits_and_dashes(name: str):
    with pytest.raises(ValueError, match="tenant"):
        KeyBook().tenant(name)


def test_limits_are_zero_or_more_and_known():
    with pytest.raises(ValueError, match="0 \\(no limit\\) or more"):
        KeyBook().tenant("acme", rate_per_s=-1)
    with pytest.raises(ValueError, match="unknown limits"):
        KeyBook().tenant("acme", colour="blue")


def test_the_file_is_only_its_owners_and_replaced_whole(tmp_path: Path):
    path = keys_file(tmp_path)
    book = KeyBook()
    book.add_key("acme")
    book.save(path)
    first_inode = path.stat().st_ino
    book.add_key("beta")
    book.save(path)
    assert mode(path) == 0o600
    assert path.stat().st_ino != first_inode, "a new file renamed over the old, never rewritten in place"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]
    assert set(json.loads(path.read_text())["tenants"]) == {"acme", "beta"}


def _add_keys(path: Path, tenant: str, count: int) -> None:
    for _ in range(count):
        with KeyBook.editing(path) as book:
            book.add_key(tenant)


def test_edits_from_several_processes_at_once_all_land(tmp_path: Path):
    path = keys_file(tmp_path)
    procs = [multiprocessing.Process(target=_add_keys, args=(path, f"t{i}", 10)) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert len(KeyBook.load(path).keys) == 30


def test_an_edit_that_fails_changes_nothing(tmp_path: Path):
    path = keys_file(tmp_path)
    with KeyBook.editing(path) as book:
        book.add_key("acme")
    with pytest.raises(KeyError), KeyBook.editing(path) as book:
        book.add_key("beta")
        book.revoke("key_unknown")
    assert set(KeyBook.load(path).tenants) == {"acme"}


def test_a_watched_book_sees_a_change_once_its_interval_has_passed(tmp_path: Path):
    path = keys_file(tmp_path)
    watched = WatchedKeyBook(path, interval_s=1.0)
    assert watched.book(now=0.0).keys == []
    with KeyBook.editing(path) as book:
        key, _ = book.add_key("acme")
    assert watched.book(now=0.5).resolve(key) is None, "looked at no more than once a second"
    assert watched.book(now=1.0).resolve(key) is not None


def test_a_watched_book_keeps_the_last_good_book_when_the_file_breaks(tmp_path: Path):
    path = keys_file(tmp_path)
    with KeyBook.editing(path) as book:
        key, _ = book.add_key("acme")
    watched = WatchedKeyBook(path, interval_s=1.0)
    assert watched.book(now=0.0).resolve(key) is not None
    path.write_text("{ not json")
    assert watched.book(now=2.0).resolve(key) is not None
