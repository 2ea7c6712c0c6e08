"""Channels between subtasks: batching, credit-based flow control, events in order with data."""
