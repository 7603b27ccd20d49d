"""Schemathesis hooks for test_openapi_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

Which served models embed is the model catalog's to say (contract/catalog.py), not the spec's: a
completion or chat that names one is a 400 `embedding_model` (tests/integration/test_embeddings.py
asserts it), not a schema-valid body the API should take. Such bodies are not drawn, so every other 400
on those routes still fails the fuzz run.
"""

from __future__ import annotations

from typing import Any

import schemathesis

from contract.catalog import ModelKind
from contract.catalog_build import catalog_of
from contract.settings import Settings

# The fuzz run's stack: its models and their repository (SYNAPSE_MODEL_REPOSITORY, set by the test).
EMBEDDING_MODELS = frozenset(catalog_of(Settings.from_env()).names(ModelKind.EMBEDDING))
TEXT_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions"})


@schemathesis.hook
def filter_body(ctx: schemathesis.HookContext, body: Any) -> bool:
    operation = ctx.operation
    asks_text = operation is not None and operation.path in TEXT_ROUTES
    if not (asks_text and isinstance(body, dict)):
        return True
    model = body.get("model")
    return not (isinstance(model, str) and model in EMBEDDING_MODELS)
