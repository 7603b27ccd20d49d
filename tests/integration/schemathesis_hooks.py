"""Schemathesis hooks for test_openapi_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

Which served models embed is a setting the spec cannot state: a completion or chat that names one is a
400 `embedding_model` (tests/integration/test_embeddings.py asserts it), not a schema-valid body the API
should take. Such bodies are not drawn, so every other 400 on those routes still fails the fuzz run.
"""

from __future__ import annotations

from typing import Any

import schemathesis

from contract.settings import Settings

# The local stack runs on the setting's default (the fuzz run's stack sets no SYNAPSE_EMBEDDING_MODELS).
EMBEDDING_MODELS = frozenset(Settings.model_fields["embedding_models"].default)
TEXT_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions"})


@schemathesis.hook
def filter_body(ctx: schemathesis.HookContext, body: Any) -> bool:
    operation = ctx.operation
    asks_text = operation is not None and operation.path in TEXT_ROUTES
    return not (asks_text and isinstance(body, dict) and body.get("model") in EMBEDDING_MODELS)
