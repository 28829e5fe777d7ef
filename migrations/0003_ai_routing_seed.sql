-- Seed: AI routing per feature (SPEC §10): primary provider/model, ordered fallbacks, timeout, JSON output.
INSERT INTO synedre.ai_routing (feature, provider, model, fallbacks, timeout_s, json_output) VALUES
  ('atlas_classifier', 'mistral', 'mistral-small-latest',
   '[{"provider": "openai", "model": "gpt-4o-mini"}]', 30, true),
  ('atlas_classifier_vision', 'mistral', 'pixtral-12b-latest',
   '[{"provider": "openai", "model": "gpt-4o-mini"}]', 60, true),
  -- mistral-embed is 1024-dimensional; the local fallback must match it for pgvector.
  ('lessons_embedding', 'mistral', 'mistral-embed',
   '[{"provider": "local", "model": "hash-1024"}]', 15, false),
  -- Not claude-sonnet-4-5: the anthropic SDK lists it as end-of-life on 2026-11-30.
  ('draft_reply', 'mistral', 'mistral-small-latest',
   '[{"provider": "anthropic", "model": "claude-sonnet-5-5"}]', 30, false);
