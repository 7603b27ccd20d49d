"""Infrastructure tests: the synthesized CDK templates, cdk-nag and cfn-lint.

The package is imported before any test module, and so before aws_cdk starts the jsii runtime: it runs
on the wheel's Node 24 (stacks/node.py), not whatever Node the machine has, which would print jsii's
end-of-life banner into the test output.
"""

from stacks.node import use_wheel_node

use_wheel_node()
