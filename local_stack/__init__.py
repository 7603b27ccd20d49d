"""The local stack: the whole platform on one machine, with real parts (`synapse up`)."""
