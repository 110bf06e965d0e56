"""Test doubles that speak real protocols (a local OpenAI-compatible HTTP server)."""
