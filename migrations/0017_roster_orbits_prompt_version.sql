-- Issue 16. The roster agrees with itself: every stored orbit but Atlas's (0) is its
-- family's display ring, the mapping `synedre.agents.display_ring` owns (direction 1,
-- cadrage and execution 2, validation 3); tests/test_agents.py checks the seed against
-- that function, so a drift here fails the suite.
UPDATE synedre.agents
   SET orbite = CASE group_name WHEN 'direction' THEN 1 WHEN 'cadrage' THEN 2
                                WHEN 'execution' THEN 2 WHEN 'validation' THEN 3 END
 WHERE orbite <> 0;

-- The version of the prompt templates a launch was given (prompts/launch.*.<version>.txt).
ALTER TABLE synedre.launches ADD COLUMN prompt_version text;
