"""Custom resource handler: writes Synapse's data source and dashboards into Amazon Managed Grafana.

Managed Grafana reads no provisioning files, so the deploy does what a person would do in the UI,
through Grafana's HTTP API: the Prometheus data source (uid `prometheus`, the one the dashboards'
`datasource` variable selects, signing its queries to AMP with the workspace's IAM role), a
"Synapse" folder, and every dashboard of the Lambda's `dashboards/` folder, overwritten each time.

Access is a service-account token that lives for one invocation: created here, deleted before
returning, so no Grafana credential is stored anywhere. Delete leaves Grafana as it is: deleting
the stack deletes the workspace, and with it everything written here.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

LOGGER = logging.getLogger(__name__)
DASHBOARDS = Path(__file__).resolve().parent / "dashboards"
SERVICE_ACCOUNT = "synapse-provisioning"
# Long enough for the calls below; the token is deleted as soon as they are done anyway.
TOKEN_SECONDS = 600
HTTP_TIMEOUT_S = 15
NOT_FOUND = 404


class GrafanaControlPlane(Protocol):
    """The calls this handler makes on boto3's `grafana` client (the test seam)."""

    def list_workspace_service_accounts(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def create_workspace_service_account(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def create_workspace_service_account_token(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def delete_workspace_service_account_token(self, **kwargs: Any) -> Mapping[str, Any]: ...


class GrafanaApiError(RuntimeError):
    """Grafana answered a call with an unexpected status; the deploy fails with this message."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """What to provision, from the custom resource's properties."""

    workspace_id: str
    grafana_url: str
    prometheus_url: str
    region: str
    datasource_uid: str
    folder: str
    scrape_interval: str  # the agent's, so that Grafana's $__rate_interval spans enough samples

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Target:
        return cls(
            workspace_id=str(properties["WorkspaceId"]),
            grafana_url=str(properties["GrafanaUrl"]).rstrip("/"),
            prometheus_url=str(properties["PrometheusUrl"]).rstrip("/"),
            region=str(properties["Region"]),
            datasource_uid=str(properties["DatasourceUid"]),
            folder=str(properties["Folder"]),
            # Absent from a resource made before the interval was passed (a rollback's old properties).
            scrape_interval=str(properties.get("ScrapeInterval", "")),
        )

    @property
    def folder_uid(self) -> str:
        return self.folder.lower()


class GrafanaHttp:
    """Grafana's HTTP API with a bearer token: JSON in, JSON out, a status to decide on."""

    def __init__(self, base_url: str, token: str) -> None:
        self._base_url = base_url
        self._token = token

    def call(self, method: str, path: str, body: object | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self._base_url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def expect(self, method: str, path: str, body: object | None = None) -> Any:
        status, answer = self.call(method, path, body)
        if not 200 <= status < 300:
            raise GrafanaApiError(f"{method} {path}: HTTP {status}: {str(answer)[:500]}")
        return answer


def datasource(target: Target) -> dict[str, Any]:
    """AMP as Grafana's default Prometheus, its queries signed with the workspace's IAM role."""
    return {
        "uid": target.datasource_uid,
        "name": "Amazon Managed Service for Prometheus",
        "type": "prometheus",
        "access": "proxy",
        "url": target.prometheus_url,
        "isDefault": True,
        "jsonData": {
            "httpMethod": "POST",
            "sigV4Auth": True,
            # "Workspace IAM role" in Managed Grafana's data source page.
            "sigV4AuthType": "ec2_iam_role",
            "sigV4Region": target.region,
            **({"timeInterval": target.scrape_interval} if target.scrape_interval else {}),
        },
    }


def provision(grafana: GrafanaHttp, target: Target, dashboards: Mapping[str, dict[str, Any]]) -> list[str]:
    """Creates or updates the data source, the folder and every dashboard; returns the dashboards' uids."""
    source = datasource(target)
    path = f"/api/datasources/uid/{target.datasource_uid}"
    status, _ = grafana.call("GET", path)
    if status == NOT_FOUND:
        grafana.expect("POST", "/api/datasources", source)
    else:
        grafana.expect("PUT", path, source)

    status, _ = grafana.call("GET", f"/api/folders/{target.folder_uid}")
    if status == NOT_FOUND:
        grafana.expect("POST", "/api/folders", {"uid": target.folder_uid, "title": target.folder})

    uids = []
    for name, board in sorted(dashboards.items()):
        # `id` is the board's row in one Grafana's database: dropped, so the uid alone matches.
        body = {
            "dashboard": {**board, "id": None},
            "folderUid": target.folder_uid,
            "overwrite": True,
            "message": f"Synapse deploy: dashboards/{name}",
        }
        grafana.expect("POST", "/api/dashboards/db", body)
        uids.append(str(board["uid"]))
    return uids


@contextmanager
def service_account_token(control: GrafanaControlPlane, workspace_id: str, name: str) -> Iterator[str]:
    """A fresh admin token for this invocation only, deleted on the way out whatever happened."""
    account_id = _service_account(control, workspace_id)
    token = control.create_workspace_service_account_token(
        workspaceId=workspace_id, serviceAccountId=account_id, name=name, secondsToLive=TOKEN_SECONDS
    )["serviceAccountToken"]
    try:
        yield str(token["key"])
    finally:
        control.delete_workspace_service_account_token(
            workspaceId=workspace_id, serviceAccountId=account_id, tokenId=str(token["id"])
        )


def _service_account(control: GrafanaControlPlane, workspace_id: str) -> str:
    """The provisioning service account, created on the first deploy and reused after."""
    next_token: str | None = None
    while True:
        page = control.list_workspace_service_accounts(
            workspaceId=workspace_id, **({"nextToken": next_token} if next_token else {})
        )
        for account in page["serviceAccounts"]:
            if account["name"] == SERVICE_ACCOUNT:
                return str(account["id"])
        next_token = page.get("nextToken")
        if not next_token:
            break
    created = control.create_workspace_service_account(
        workspaceId=workspace_id, name=SERVICE_ACCOUNT, grafanaRole="ADMIN"
    )
    return str(created["id"])


def load_dashboards(folder: Path) -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def handle(
    event: Mapping[str, Any], *, control: GrafanaControlPlane, dashboards_dir: Path = DASHBOARDS
) -> dict[str, Any]:
    """One custom resource event; the result is what the Provider framework sends to CloudFormation."""
    target = Target.from_properties(event["ResourceProperties"])
    physical_id = f"{target.workspace_id}/synapse-provisioning"
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", physical_id)}
    dashboards = load_dashboards(dashboards_dir)
    with service_account_token(control, target.workspace_id, f"deploy-{event['RequestId']}") as token:
        uids = provision(GrafanaHttp(target.grafana_url, token), target, dashboards)
    LOGGER.info("provisioned data source %s and dashboards %s", target.datasource_uid, uids)
    return {"PhysicalResourceId": physical_id, "Data": {"Dashboards": ",".join(uids)}}


def on_event(event: Mapping[str, Any], _context: object) -> dict[str, Any]:
    """Lambda entry point (custom_resources.Provider's on_event handler)."""
    import boto3  # the Lambda runtime's copy; imported here so the tests need no AWS region

    region = str(event["ResourceProperties"]["Region"])
    control = cast(GrafanaControlPlane, boto3.client("grafana", region_name=region))
    return handle(event, control=control)
