"""After the launch: contract, deploy, QA, iteration, compaction (SPEC §9, §11)."""
