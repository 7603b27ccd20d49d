#!/bin/bash
# Synapse GPU instance (ECS-optimized Amazon Linux 2023), every boot (cloud-init per-boot), and again as
# `prewarm.sh release` in a unit of its own. Only the warm group's instances have work here (HOOK set):
# - headed for the warm pool (target state Warmed:*): pull the worker image, so that a later scale-out
#   starts from a disk that already holds it, then release the launch hook, which lets Auto Scaling stop
#   the instance (the manager then lowers its volume to gp3's baseline: manager/providers/warm_volumes.py).
# - headed into service (out of the pool, or launched straight in while the pool refills): nothing to
#   prepare, and nothing the ECS agent waits for. The AMI starts the agent only after cloud-init's final
#   stage, which runs this script, so the hook's release (an AWS CLI install on a new instance, two API
#   calls) is handed to a unit of its own, and this script ends at once. The agent itself reads only the
#   target state, InService already, not the hook's.
# The burst group (HOOK empty) never enters a warm pool: the script ends at once there.
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

# log PRIORITY MESSAGE...: to the journal, as `synapse-prewarm`.
log() {
  local priority=$1
  shift
  echo "synapse-prewarm: $*" | systemd-cat -t synapse-prewarm -p "$priority"
}

# The ECS-optimized AMI ships without the AWS CLI; AL2023 packages v2 as awscli-2 (dnf, not yum).
install_cli() { command -v aws >/dev/null || timeout "$CLI_INSTALL_S" dnf install -y -q awscli-2; }

# Tried three times, a few seconds apart: a hook left unreleased holds the instance until its heartbeat
# runs out. Fails only when every try did: `systemctl status synapse-prewarm-release` then shows it
# failed, and the journal has the error.
release_hook() {
  local instance_id group
  instance_id=$(imds instance-id)
  for attempt in 1 2 3; do
    install_cli &&
      group=$(aws autoscaling describe-auto-scaling-instances --region "$REGION" --instance-ids \
        "$instance_id" --query 'AutoScalingInstances[0].AutoScalingGroupName' --output text) &&
      aws autoscaling complete-lifecycle-action --region "$REGION" --auto-scaling-group-name "$group" \
        --lifecycle-hook-name "$HOOK" --instance-id "$instance_id" --lifecycle-action-result CONTINUE &&
      return 0
    [ "$attempt" = 3 ] || sleep $((attempt * 5))
  done
  log err "could not release the launch hook of $instance_id"
  return 1
}

if [ "${1:-}" = release ]; then
  release_hook
  exit
fi

# The target state appears shortly after boot. Waiting for it here also spares the ECS agent (started
# after this script) a full minute: an agent that finds no target state yet sleeps a minute before it asks
# again (amazon-ecs-agent, agent/app/agent.go: asgLifecyclePollWait).
state=""
for _ in $(seq 1 $((STATE_WAIT_S / 5))); do
  state=$(imds autoscaling/target-lifecycle-state) && [ -n "$state" ] && break
  sleep 5
done
log info "target state '${state:-unknown}'"

if [[ "$state" != Warmed:* ]]; then
  systemd-run --no-block --quiet --unit synapse-prewarm-release /bin/bash "$0" release ||
    release_hook
  exit 0
fi

install_cli
systemctl start docker
registry="${IMAGE%%/*}"
if aws ecr get-login-password --region "$REGION" |
  docker login --username AWS --password-stdin "$registry" >/dev/null &&
  timeout "$PULL_TIMEOUT_S" docker pull --quiet "$IMAGE"; then
  log info "pulled $IMAGE"
else
  log info "pull of $IMAGE failed; the task will pull it at start instead"
fi
release_hook
exit 0
