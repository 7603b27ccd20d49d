"""Unit tests of the CDK app's modules. As tests/infra/__init__.py: jsii runs on the wheel's Node."""

from stacks.node import use_wheel_node

use_wheel_node()
