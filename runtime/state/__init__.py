"""Key groups and state."""
