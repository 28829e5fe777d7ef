"""The AI facade (SPEC §10): every LLM call in Synedre goes through `complete` or `embed`."""
from synedre.ai.facade import (
    AIError,
    Completion,
    Embedding,
    FeatureRouting,
    Route,
    complete,
    embed,
    last_failure,
    load_routing,
)

__all__ = ["AIError", "Completion", "Embedding", "FeatureRouting", "Route", "complete", "embed",
           "last_failure", "load_routing"]
