"""Reference agents and their task sets, built only on agenttrace's public API."""
