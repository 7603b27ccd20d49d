"""The contract every Synapse deployable speaks: job schema, Redis keys, settings, worker registry."""
