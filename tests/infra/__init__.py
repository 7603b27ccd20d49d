"""Infrastructure tests: the synthesized CDK templates, cdk-nag and cfn-lint."""
