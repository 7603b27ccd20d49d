"""The capacity planner: the manager's own policies on a virtual clock, and `synapse plan`."""
