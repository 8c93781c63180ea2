"""Only the optional C accelerator lives here; everything else is in pyproject.toml.

``minikafka.protocol._records`` runs the per-message loops of ``protocol/records.py``. It is
built when a C compiler, Python's headers and zlib's are present; when they are not, the
build says so and goes on (``optional=True``), and ``protocol.records`` uses its pure-Python
loops instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "minikafka.protocol._records",
            sources=["protocol/_records.c"],
            libraries=["z"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
