"""The Synapse CDK stacks, one module per stack; app.py composes them.

network (VPC, endpoints, discovery), data (ElastiCache, model store), api (API Gateway and the
front-door Lambda), workers (cluster, GPU warm pool, Triton service), manager_service (Fargate),
monitoring (Prometheus, Pushgateway, Grafana). config holds the context values; nag the
cdk-nag suppressions' shape; bundling and images build the Lambda zip and monitoring images; node
picks the Node.js that jsii runs on, before any stack module starts it.
"""

from stacks.node import use_wheel_node

use_wheel_node()
