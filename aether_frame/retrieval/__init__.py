"""Retrieval: lexical + vector hybrid ranking for the EVIDENCE and MEMORY layers."""
