"""The thin ADK glue: sources → compiler → request rewrite → manifest."""
