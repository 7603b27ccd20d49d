"""The burst group's root volume: gp3 provisioned past its baseline, so that a new burst instance reads
the AMI's snapshot and extracts the worker image sooner. stacks/workers.py sets these figures on the burst
group's launch template and planner/cold_start.py times the cold path with them: one place for both.

Only the burst group gets the throughput and IOPS. Its instances are launched on demand and terminated
with their volumes, so what they add bills only while a burst instance exists. The warm group keeps gp3's
baseline: a stopped warm-pool instance keeps its volume, and provisioned throughput and IOPS bill by the
month whether the instance runs or not, so on the warm group they would add to the idle bill. The
initialization rate bills once, when a volume is made, so both groups' volumes have it: a warm-pool
instance is prepared sooner, and one the warm group launches while its pool refills boots sooner.

gp3 includes 3,000 IOPS and 125 MiB/s, and its throughput may be at most 0.25 MiB/s per provisioned IOPS
(https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-performance).
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
BURST_THROUGHPUT_MIB_S = 500
# 500 MiB/s needs 2,000 IOPS at the least, and the baseline's 3,000 carry it only in writes of 170 KiB or
# more. The image is mostly small files (Python packages, CUDA headers, the Triton tree), whose writes are
# far smaller than EBS's 256 KiB I/O: twice the baseline carries 500 MiB/s in writes of 85 KiB.
BURST_IOPS = 6_000
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
    """What the burst volume's throughput and IOPS past gp3's baseline add to an hour of a burst instance."""
    throughput = (BURST_THROUGHPUT_MIB_S - GP3_BASELINE_THROUGHPUT_MIB_S) * GP3_THROUGHPUT_PER_MIB_S_MONTH
    iops = (BURST_IOPS - GP3_BASELINE_IOPS) * GP3_IOPS_PER_IOPS_MONTH
    return (throughput + iops) / HOURS_PER_MONTH


def initialization_per_launch(snapshot_gib: float) -> float:
    """What the provisioned initialization rate costs once per burst instance, for `snapshot_gib` of data."""
    return snapshot_gib * VOLUME_INITIALIZATION_RATE_MIB_S * INITIALIZATION_PER_GIB_PER_MIB_S
