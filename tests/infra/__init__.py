"""Infrastructure tests: the synthesized CDK templates, cdk-nag and cfn-lint."""

import os

# The jsii runtime prints a banner when Node is past its end of life (Debian's node on this
# machine); it is about the machine, not the app, and would bury test output. The package is
# imported before any test module, so this runs before the jsii runtime starts.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")
