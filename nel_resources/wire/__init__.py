"""Talking to model endpoints over HTTP: the wire protocol, the lean client, URLs and their credentials, redaction, OpenAI fields, and request pacing (concurrency, deadlines, hang cut)."""
