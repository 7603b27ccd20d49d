"""`synapse keys`: create prints a working key once, list shows everything but key values, revoke ends one."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.tenants import KeyBook, keys_file
from local_stack.cli import main


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SYNAPSE_STATE_DIR", str(tmp_path))
    return tmp_path


def synapse_keys(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    main(["keys", *args])
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_create_prints_only_the_key_and_the_key_is_the_tenants(state_dir: Path, capsys):
    out, err = synapse_keys(capsys, "create", "--tenant", "acme", "--max-inflight", "3", "--rate", "2")
    key = out.strip()
    assert out == key + "\n"
    tenant = KeyBook.load(keys_file(state_dir)).resolve(key)
    assert tenant is not None
    assert (tenant.name, tenant.max_inflight, tenant.rate_per_s, tenant.burst) == ("acme", 3, 2.0, 0)
    assert tenant.webhook_secret in err, "a new tenant's webhook secret is shown once, on stderr"


def test_a_second_key_of_a_tenant_keeps_its_limits_and_shows_no_secret(state_dir: Path, capsys):
    synapse_keys(capsys, "create", "--tenant", "acme", "--max-inflight", "3")
    out, err = synapse_keys(capsys, "create", "--tenant", "acme")
    tenant = KeyBook.load(keys_file(state_dir)).resolve(out.strip())
    assert tenant is not None and tenant.max_inflight == 3
    assert tenant.webhook_secret not in err


def test_list_shows_every_key_and_the_tenants_limits_but_never_a_key_value(state_dir: Path, capsys):
    acme, _ = synapse_keys(capsys, "create", "--tenant", "acme", "--rate", "2", "--burst", "4")
    beta, _ = synapse_keys(capsys, "create", "--tenant", "beta")
    out, _ = synapse_keys(capsys, "list")
    book = KeyBook.load(keys_file(state_dir))
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "TENANT", "CREATED", "REVOKED", "MAX-INFLIGHT", "RATE/S", "BURST"]
    assert [row.split()[:2] for row in rows] == [[r.id, r.tenant] for r in book.keys]
    assert rows[0].split()[3:] == ["no", "none", "2", "4"]
    assert acme.strip() not in out and beta.strip() not in out
    assert all(record.sha256 not in out for record in book.keys)


def test_revoke_ends_a_key(state_dir: Path, capsys):
    out, _ = synapse_keys(capsys, "create", "--tenant", "acme")
    key = out.strip()
    key_id = KeyBook.load(keys_file(state_dir)).keys[0].id
    out, _ = synapse_keys(capsys, "revoke", key_id)
    assert key_id in out
    assert KeyBook.load(keys_file(state_dir)).resolve(key) is None
    listing, _ = synapse_keys(capsys, "list")
    assert listing.splitlines()[1].split()[3] == "yes"


def test_tenant_changes_limits_and_shows_the_secret_on_request(state_dir: Path, capsys):
    synapse_keys(capsys, "create", "--tenant", "acme")
    out, _ = synapse_keys(capsys, "tenant", "acme", "--max-inflight", "5", "--show-secret")
    tenant = KeyBook.load(keys_file(state_dir)).tenants["acme"]
    assert tenant.max_inflight == 5
    assert out.splitlines() == ["tenant acme: max in flight 5, rate none, burst none", tenant.webhook_secret]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("revoke", "key_nope"), "no key 'key_nope'"),
        (("tenant", "nobody", "--rate", "1"), "no tenant 'nobody'"),
        (("create", "--tenant", "Not A Name"), "lowercase letters"),
    ],
)
def test_mistakes_exit_non_zero_with_a_reason_and_change_nothing(state_dir: Path, capsys, args, says):
    with pytest.raises(SystemExit) as exited:
        main(["keys", *args])
    assert says in str(exited.value.code)
    assert not keys_file(state_dir).exists()


def test_a_negative_limit_is_refused_by_the_parser(state_dir: Path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["keys", "create", "--tenant", "acme", "--burst", "-1"])
    assert exited.value.code == 2
    assert "0 (no limit) or more" in capsys.readouterr().err
