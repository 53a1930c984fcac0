"""The benchmark's sections, one module each (``bench.runner.SECTIONS`` names them)."""
