"""API Gateway's account-level CloudWatch role, set by the deploy only where the account has none."""
