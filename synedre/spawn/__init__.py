"""Launch stage: run the Claude Code CLI under a pty, parse and redact its stream (SPEC §8)."""
