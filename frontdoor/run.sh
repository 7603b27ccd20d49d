#!/bin/bash
# The streaming function's handler (stacks/front_door.py): the Lambda Web Adapter execs it and relays
# each request to the server on 127.0.0.1:$AWS_LWA_PORT. The managed runtime's bootstrap, which puts
# the asset and the runtime's own packages (boto3) on the path, does not run here, so this does.
PYTHONPATH="${LAMBDA_TASK_ROOT:-.}:${LAMBDA_RUNTIME_DIR:-/var/runtime}${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m frontdoor.http_server
