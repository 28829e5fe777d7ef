"""Calibration report: how well classification did over a window (SPEC section 12)."""
