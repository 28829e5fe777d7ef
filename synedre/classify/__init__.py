"""Classification: prompt, guard rails, output schema, client resolution."""
