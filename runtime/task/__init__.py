"""Subtasks: the slot loop, operator chains, operators."""
