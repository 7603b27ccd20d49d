"""A new GPU instance's root volume: gp3 provisioned past its baseline, so that a new instance reads the
AMI's snapshot and extracts the worker image sooner. stacks/workers.py sets these figures on both groups'
launch templates, manager/providers/warm_volumes.py lowers a stopped warm-pool instance to the baseline,
and planner/cold_start.py times the paths with them: one place for all three.

Both groups launch with it, since both start new instances that pull the whole image: a burst instance,
and a warm-group instance launched straight into service while its pool refills. Neither bills the extra
past its life: they are terminated with their volumes. An instance stopped into the warm pool is lowered
to gp3's baseline (3,000 IOPS, 125 MiB/s) by the manager within a minute: a stopped instance keeps its
volume, and provisioned throughput and IOPS bill by the month whether it runs or not, so on a stopped one
they would add to the idle bill. The initialization rate bills once, when a volume is made.

gp3 includes 3,000 IOPS and 125 MiB/s, and its throughput may be at most 0.25 MiB/s per provisioned IOPS
(https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-performance). A volume may be
modified again once the last modification completes, up to four times in 24 hours
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifyVolume.html): a warm-pool volume is
lowered once.
"""

from __future__ import annotations

from contract.prices import HOURS_PER_MONTH

GP3_BASELINE_IOPS = 3_000
GP3_BASELINE_THROUGHPUT_MIB_S = 125
GP3_MIB_S_PER_IOPS = 0.25

# What the CPU lets Docker write while it extracts the image, in MiB/s of extracted files: the layers are
# applied one at a time, each inflated as a single gzip stream (Go's compress/gzip, or unpigz where it is
# installed: neither inflates in parallel) on one core of a 4-vCPU g5/g6.xlarge, then written file by file.
# An estimate; a deploy measures it as the pull's "Extracting" time.
IMAGE_EXTRACTION_MIB_S = 250
# Twice the extraction's rate: the download writes the next layers (ECR, about 150 MB/s) onto the same
# volume while the earlier ones extract, and the extraction reads its compressed layer back. Past that, more
# throughput buys nothing the CPU can use.
LAUNCH_THROUGHPUT_MIB_S = 500
# 500 MiB/s needs 2,000 IOPS at the least, and the baseline's 3,000 carry it only in writes of 170 KiB or
# more. The image is mostly small files (Python packages, CUDA headers, the Triton tree), whose writes are
# far smaller than EBS's 256 KiB I/O: twice the baseline carries 500 MiB/s in writes of 85 KiB.
LAUNCH_IOPS = 6_000
# The most EBS offers (100 to 300 MiB/s, https://docs.aws.amazon.com/ebs/latest/userguide/initalize-volume.html):
# the whole AMI snapshot (30 GiB at most) is then on the volume within about 100 s of its creation, about
# when the instance has booted, so the boot's first reads wait little and the image is later extracted onto
# a volume that is no longer initializing. A lower rate costs less but finishes minutes later.
VOLUME_INITIALIZATION_RATE_MIB_S = 300

# us-east-1 list prices (https://aws.amazon.com/ebs/pricing/): gp3 throughput over 125 MiB/s and IOPS over
# 3,000 bill by the month (prorated by the hour) while the volume exists; a provisioned initialization rate
# bills once per volume, per GiB of snapshot data per MiB/s of rate (the page's example 12: 250 GiB at
# 200 MiB/s for $0.60).
GP3_THROUGHPUT_PER_MIB_S_MONTH = 0.040
GP3_IOPS_PER_IOPS_MONTH = 0.005
INITIALIZATION_PER_GIB_PER_MIB_S = 0.000012


def provisioned_per_hour() -> float:
    """What the launch volume's throughput and IOPS past gp3's baseline add to an hour of a new instance."""
    throughput = (LAUNCH_THROUGHPUT_MIB_S - GP3_BASELINE_THROUGHPUT_MIB_S) * GP3_THROUGHPUT_PER_MIB_S_MONTH
    iops = (LAUNCH_IOPS - GP3_BASELINE_IOPS) * GP3_IOPS_PER_IOPS_MONTH
    return (throughput + iops) / HOURS_PER_MONTH


def initialization_per_launch(snapshot_gib: float) -> float:
    """What the provisioned initialization rate costs once per new instance, for `snapshot_gib` of data."""
    return snapshot_gib * VOLUME_INITIALIZATION_RATE_MIB_S * INITIALIZATION_PER_GIB_PER_MIB_S
