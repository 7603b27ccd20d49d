"""The front door: the Lambda handler behind API Gateway (and behind the local gateway)."""
