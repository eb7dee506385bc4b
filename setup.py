"""Build hook for the optional compiled sweep (everything else is in pyproject.toml).

``rdmascope.sampler._csweep`` is built when a C compiler and the Python headers are there;
``optional=True`` lets ``pip install`` succeed without them, and the sampler then uses its
pure-Python sweep (sampler/csweep.py says which one ran).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("rdmascope.sampler._csweep", ["sampler/_csweep.c"],
                             extra_compile_args=["-O2"], optional=True)])
