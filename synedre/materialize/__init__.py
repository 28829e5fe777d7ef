"""Materialization: one run, question, negotiation or advice per message."""
