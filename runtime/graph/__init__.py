"""Logical plan -> job graph (operators, edges, chains)."""
