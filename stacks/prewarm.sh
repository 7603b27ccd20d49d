#!/bin/bash
# Synapse GPU instance (ECS-optimized Amazon Linux 2023), every boot (cloud-init per-boot). Headed for
# the warm pool: pull the worker image so that a later scale-out starts from a disk that already holds
# it. Headed into service: nothing to wait for. Either way, release the lifecycle hook that holds the
# instance. A group without the hook (HOOK empty: the burst group, whose instances never enter a warm
# pool) has nothing to do here, and ends at once: the ECS agent starts only after cloud-init's final
# stage, which runs this script.
set -uo pipefail
# shellcheck disable=SC1091
source /etc/synapse/prewarm.env
[ -n "$HOOK" ] || exit 0

imds() {
  local token
  token=$(curl -sf -X PUT http://169.254.169.254/latest/api/token \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 60') || return 1
  curl -sf -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}

log() { echo "synapse-prewarm: $*" | systemd-cat -t synapse-prewarm -p info; }

# The target state appears shortly after boot; it is Warmed:Stopped on the way into the pool.
state=""
for _ in $(seq 1 $((STATE_WAIT_S / 5))); do
  state=$(imds autoscaling/target-lifecycle-state) && [ -n "$state" ] && break
  sleep 5
done
instance_id=$(imds instance-id)
log "instance $instance_id, target state '${state:-unknown}'"

# The ECS-optimized AMI ships without the AWS CLI; AL2023 packages v2 as awscli-2 (dnf, not yum).
command -v aws >/dev/null || timeout "$CLI_INSTALL_S" dnf install -y -q awscli-2

if [[ "$state" == Warmed:* ]]; then
  systemctl start docker
  registry="${IMAGE%%/*}"
  if aws ecr get-login-password --region "$REGION" |
    docker login --username AWS --password-stdin "$registry" >/dev/null &&
    timeout "$PULL_TIMEOUT_S" docker pull --quiet "$IMAGE"; then
    log "pulled $IMAGE"
  else
    log "pull of $IMAGE failed; the task will pull it at start instead"
  fi
fi

group=$(aws autoscaling describe-auto-scaling-instances --region "$REGION" \
  --instance-ids "$instance_id" --query 'AutoScalingInstances[0].AutoScalingGroupName' --output text)
aws autoscaling complete-lifecycle-action --region "$REGION" --auto-scaling-group-name "$group" \
  --lifecycle-hook-name "$HOOK" --instance-id "$instance_id" --lifecycle-action-result CONTINUE ||
  log "no lifecycle action to complete for $instance_id (hook already released?)"
exit 0
