"""Proposal policies: the offline transformation library (rules/) and the LLM policy (llm/)."""
