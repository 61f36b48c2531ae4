"""What the benchmarks in bench/ share with the test suite (bench/ never imports `tests`; the
suite may import from here): adversarial replies for the scorers, and a NeMo Gym launcher."""
