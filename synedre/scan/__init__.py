"""Antivirus scanning: the clamd client."""
