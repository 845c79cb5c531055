"""The bundled NPU simulator: the CalRT 0.7.6 surface of the two-chiplet Calculet NPU in numpy.

Plain Python, numpy, ml_dtypes and packaging; it never imports Django. See docs/simulator.md.
"""
