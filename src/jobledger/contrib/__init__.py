"""Integrations with web frameworks (optional extras; the core never imports them)."""
