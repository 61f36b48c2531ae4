"""Model services nel talks to or runs: launched model servers (`launch`).

The model client stays in `nel_resources.model_client`.
"""
