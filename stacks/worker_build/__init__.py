"""The worker image, built in the account during the deploy (construct.py), and the Lambda that starts
its build and waits for it (handler.py)."""
