#!/bin/bash
# The streaming function's handler (stacks/front_door.py): the Lambda Web Adapter execs it, then relays
# each request to the server on 127.0.0.1:$AWS_LWA_PORT. The Python runtime's own bootstrap never runs
# here, so the asset and the runtime's packages (boto3) are put on the path by hand.
PYTHONPATH="${LAMBDA_TASK_ROOT:-.}:${LAMBDA_RUNTIME_DIR:-/var/runtime}${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m frontdoor.http_server
