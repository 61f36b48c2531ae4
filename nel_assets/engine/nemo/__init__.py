"""NeMo Evaluator 0.3.0 compatibility: its result files (written and read) and its Python API."""
