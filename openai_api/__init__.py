"""The OpenAI-compatible API with no transport: request models, a request's job, a finished job's body,
error bodies, the Batch API's lines and the file store. The front door's routes and the manager's Batch
API runner both use it; it imports only the shared contract."""
