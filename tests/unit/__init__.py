"""Unit tests: one module each, no Docker, no network (`scripts/test.sh --unit`)."""
