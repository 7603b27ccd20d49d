"""The worker image's size, as worker_image/Dockerfile builds it: the cold-start plan times its pull from
these (planner/cold_start.py, whose SOURCES say how each is estimated), and the stacks reserve room for it
on a GPU instance's root volume. Estimates until a deploy measures them: `docker image inspect` of the
built image gives the extracted size, ECR's console the compressed one."""

from __future__ import annotations

IMAGE_COMPRESSED_GB = 11.0  # as ECR stores it: what a cold instance downloads
IMAGE_EXTRACTED_GB = 24.0  # on the instance's disk, once extracted
