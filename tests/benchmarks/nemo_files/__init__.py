"""Benchmark files written the NeMo Evaluator 0.3.0 way (its README and API reference), by us.

They import only `nemo_evaluator`, never nel: the tests load the same files in nel and in
the real NeMo Evaluator and compare what each does with them.
"""
