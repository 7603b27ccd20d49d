"""The deploy's Grafana provisioning: against an in-process double of Grafana's HTTP API and a stubbed
`grafana` control plane, the data source, folder and dashboards end up as the dashboards need them,
and no token outlives the call."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from stacks.grafana_provisioning.handler import SERVICE_ACCOUNT, GrafanaApiError, handle
from stacks.images import DASHBOARDS, dashboard_files

WORKSPACE = "g-0123456789"
TOKEN = "glsa_test_token"


class FakeGrafana(ThreadingHTTPServer):
    """The few endpoints the handler calls, with Grafana's status codes; every call recorded."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), GrafanaRequest)
        self.calls: list[tuple[str, str]] = []
        self.datasources: dict[str, dict[str, Any]] = {}
        self.folders: dict[str, dict[str, Any]] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.fail_dashboards = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class GrafanaRequest(BaseHTTPRequestHandler):
    server: FakeGrafana

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        return loaded

    def _route(self) -> None:
        self.server.calls.append((self.command, self.path))
        authorized = self.headers.get("Authorization") == f"Bearer {TOKEN}"
        status, body = self._dispatch() if authorized else (401, {"message": "Unauthorized"})
        self._answer(status, body)

    def _dispatch(self) -> tuple[int, object]:
        parts = self.path.strip("/").split("/")
        if parts[:2] == ["api", "datasources"]:
            return self._datasources(parts[3] if len(parts) > 3 else None)
        if parts[:2] == ["api", "folders"]:
            return self._store(self.server.folders, parts[2] if len(parts) > 2 else None)
        if parts == ["api", "dashboards", "db"] and self.command == "POST":
            return self._dashboard(self._body())
        return 404, {"message": "no such endpoint"}

    def _datasources(self, uid: str | None) -> tuple[int, object]:
        if self.command == "POST":
            body = self._body()
            self.server.datasources[body["uid"]] = body
            return 200, {"message": "Datasource added"}
        return self._store(self.server.datasources, uid)

    def _store(self, store: dict[str, dict[str, Any]], uid: str | None) -> tuple[int, object]:
        """GET by uid (404 when absent), PUT by uid, POST with the uid in the body."""
        if self.command == "GET":
            found = store.get(uid or "")
            return (200, found) if found else (404, {"message": "not found"})
        body = self._body()
        store[uid or body["uid"]] = body
        return 200, body

    def _dashboard(self, body: dict[str, Any]) -> tuple[int, object]:
        if self.server.fail_dashboards:
            return 500, {"message": "database is locked"}
        if body["folderUid"] not in self.server.folders:
            return 400, {"message": "folder not found"}
        self.server.dashboards[body["dashboard"]["uid"]] = body
        return 200, {"status": "success"}

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_PUT(self) -> None:
        self._route()


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    server = FakeGrafana()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def event(grafana: FakeGrafana, request_type: str = "Create") -> dict[str, Any]:
    return {
        "RequestType": request_type,
        "RequestId": "req-1",
        "PhysicalResourceId": f"{WORKSPACE}/synapse-provisioning",
        "ResourceProperties": {
            "WorkspaceId": WORKSPACE,
            "GrafanaUrl": grafana.url + "/",
            "PrometheusUrl": "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1/",
            "ScrapeInterval": "30s",
            "Region": "eu-west-1",
            "DatasourceUid": "prometheus",
            "Folder": "Synapse",
            "DashboardsDigest": "abc",
        },
    }


def control_plane(*, existing_account: bool) -> tuple[Any, Stubber]:
    """A real boto3 `grafana` client whose answers are stubbed; the stub checks every request."""
    client = boto3.client(
        "grafana", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    accounts = [{"id": "7", "name": SERVICE_ACCOUNT, "grafanaRole": "ADMIN", "isDisabled": "false"}]
    stubber.add_response(
        "list_workspace_service_accounts",
        {"workspaceId": WORKSPACE, "serviceAccounts": accounts if existing_account else []},
        {"workspaceId": WORKSPACE},
    )
    if not existing_account:
        stubber.add_response(
            "create_workspace_service_account",
            {"id": "7", "name": SERVICE_ACCOUNT, "grafanaRole": "ADMIN", "workspaceId": WORKSPACE},
            {"workspaceId": WORKSPACE, "name": SERVICE_ACCOUNT, "grafanaRole": "ADMIN"},
        )
    stubber.add_response(
        "create_workspace_service_account_token",
        {
            "workspaceId": WORKSPACE,
            "serviceAccountId": "7",
            "serviceAccountToken": {"id": "tok-1", "name": "deploy-req-1", "key": TOKEN},
        },
        {"workspaceId": WORKSPACE, "serviceAccountId": "7", "name": "deploy-req-1", "secondsToLive": ANY},
    )
    stubber.add_response(
        "delete_workspace_service_account_token",
        {"workspaceId": WORKSPACE, "serviceAccountId": "7", "tokenId": "tok-1"},
        {"workspaceId": WORKSPACE, "serviceAccountId": "7", "tokenId": "tok-1"},
    )
    stubber.activate()
    return client, stubber


def test_create_writes_the_data_source_the_folder_and_every_dashboard(grafana: FakeGrafana) -> None:
    client, stubber = control_plane(existing_account=False)

    result = handle(event(grafana), control=client, dashboards_dir=DASHBOARDS)

    stubber.assert_no_pending_responses()  # the admin account was created, the token deleted
    source = grafana.datasources["prometheus"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert source["url"] == "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1"
    assert source["jsonData"]["sigV4Auth"] is True
    assert source["jsonData"]["sigV4Region"] == "eu-west-1"
    assert source["jsonData"]["timeInterval"] == "30s", "$__rate_interval must span the agent's samples"
    assert grafana.folders == {"synapse": {"uid": "synapse", "title": "Synapse"}}
    expected = {json.loads(path.read_text())["uid"] for path in dashboard_files()}
    assert set(grafana.dashboards) == expected
    assert all(d["overwrite"] and d["folderUid"] == "synapse" for d in grafana.dashboards.values())
    assert result["PhysicalResourceId"] == f"{WORKSPACE}/synapse-provisioning"
    assert set(result["Data"]["Dashboards"].split(",")) == expected


def test_update_overwrites_what_is_there_with_the_existing_account(grafana: FakeGrafana) -> None:
    handle(event(grafana), control=control_plane(existing_account=False)[0], dashboards_dir=DASHBOARDS)
    grafana.datasources["prometheus"]["url"] = "http://edited-in-the-ui"
    grafana.calls.clear()
    client, stubber = control_plane(existing_account=True)

    handle(event(grafana, "Update"), control=client, dashboards_dir=DASHBOARDS)

    stubber.assert_no_pending_responses()
    assert ("PUT", "/api/datasources/uid/prometheus") in grafana.calls
    assert ("POST", "/api/datasources") not in grafana.calls
    assert ("POST", "/api/folders") not in grafana.calls
    assert grafana.datasources["prometheus"]["url"].startswith("https://aps-workspaces")


def test_a_grafana_failure_fails_the_deploy_and_still_deletes_the_token(grafana: FakeGrafana) -> None:
    grafana.fail_dashboards = True
    client, stubber = control_plane(existing_account=True)

    with pytest.raises(GrafanaApiError, match=r"POST /api/dashboards/db: HTTP 500"):
        handle(event(grafana), control=client, dashboards_dir=DASHBOARDS)

    stubber.assert_no_pending_responses()


def test_delete_leaves_grafana_alone(grafana: FakeGrafana) -> None:
    client = boto3.client(
        "grafana", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    stubber.activate()  # no response queued: any control-plane call would fail the test

    result = handle(event(grafana, "Delete"), control=client, dashboards_dir=DASHBOARDS)

    assert grafana.calls == []
    assert result == {"PhysicalResourceId": f"{WORKSPACE}/synapse-provisioning"}
