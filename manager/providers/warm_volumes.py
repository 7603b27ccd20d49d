"""Stopped warm-pool instances keep their root volumes at gp3's baseline.

Every GPU instance launches with a root volume provisioned for a cold start (contract/launch_volume.py):
a burst instance, or a warm-group one launched straight into service, pulls the whole image onto it. An
instance stopped into the warm pool keeps its volume, and provisioned throughput and IOPS bill by the
month whether it runs or not. So the leader's manager, which runs at zero too, lowers the volume of every
stopped instance of the workers' groups (only warm-pool instances are ever stopped) once a minute, a few
API calls. Here and not on the instance: a step that fails there (a throttle, a modification that EBS
later marks failed, a launch hook that timed out first) would leave the volume provisioned with nobody to
see it; here the next pass tries again and logs each failure, and the instances hold no right to modify
volumes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from contract.launch_volume import GP3_BASELINE_IOPS, GP3_BASELINE_THROUGHPUT_MIB_S

log = logging.getLogger(__name__)

INTERVAL_S = 60.0
# ModifyVolume's error code for a volume whose last modification has not completed: lowering is under way.
MODIFICATION_UNDER_WAY_CODE = "IncorrectModificationState"


def is_provisioned(volume: dict[str, Any]) -> bool:
    """A gp3 volume with throughput or IOPS past the baseline, which bills by the month."""
    return volume.get("VolumeType") == "gp3" and (
        int(volume.get("Iops") or 0) > GP3_BASELINE_IOPS
        or int(volume.get("Throughput") or 0) > GP3_BASELINE_THROUGHPUT_MIB_S
    )


class WarmVolumes:
    """Lowers the provisioned root volumes of the groups' stopped instances, at most once an interval."""

    def __init__(
        self,
        ec2: Any,
        groups: tuple[str, ...],
        *,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ec2 = ec2
        self._groups = groups
        self._interval_s = interval_s
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        """Whether a pass is due; a True answer starts the next interval."""
        now = self._clock()
        if self._last is not None and now - self._last < self._interval_s:
            return False
        self._last = now
        return True

    def lower_stopped(self) -> list[str]:
        """One pass (blocking): the volumes it asked EBS to lower. Failures are logged, never raised: the
        next pass tries again."""
        try:
            stopped = self._stopped_instances()
            volumes = self._provisioned_volumes(stopped) if stopped else []
        except (BotoCoreError, ClientError) as exc:
            log.warning("could not read the warm pool's stopped instances and volumes: %s", exc)
            return []
        return [volume for volume in volumes if self._lower(volume)]

    def _stopped_instances(self) -> list[str]:
        filters = [
            {"Name": "tag:aws:autoscaling:groupName", "Values": list(self._groups)},
            {"Name": "instance-state-name", "Values": ["stopped"]},
        ]
        pages = self._ec2.get_paginator("describe_instances").paginate(Filters=filters)
        return [
            instance["InstanceId"]
            for page in pages
            for reservation in page["Reservations"]
            for instance in reservation["Instances"]
        ]

    def _provisioned_volumes(self, instances: list[str]) -> list[str]:
        filters = [{"Name": "attachment.instance-id", "Values": instances}]
        pages = self._ec2.get_paginator("describe_volumes").paginate(Filters=filters)
        return [volume["VolumeId"] for page in pages for volume in page["Volumes"] if is_provisioned(volume)]

    def _lower(self, volume: str) -> bool:
        try:
            self._ec2.modify_volume(
                VolumeId=volume, Iops=GP3_BASELINE_IOPS, Throughput=GP3_BASELINE_THROUGHPUT_MIB_S
            )
        except (BotoCoreError, ClientError) as exc:
            code = exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None
            if code == MODIFICATION_UNDER_WAY_CODE:
                log.info("volume %s: a modification is still under way; the next pass looks again", volume)
            else:
                log.warning("could not lower volume %s of a stopped warm-pool instance: %s", volume, exc)
            return False
        log.info(
            "volume %s of a stopped warm-pool instance lowered to %d IOPS, %d MiB/s",
            volume, GP3_BASELINE_IOPS, GP3_BASELINE_THROUGHPUT_MIB_S,
        )  # fmt: skip
        return True
