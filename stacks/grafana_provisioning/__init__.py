"""The Lambda that provisions Managed Grafana (handler.py); its asset is staged by stacks/monitoring.py."""
