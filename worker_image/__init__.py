"""The GPU worker: Triton Inference Server and the agent that runs beside it."""
