"""The compiled part of msgx: the FLTR walk of ``msgx_engine/handlers/_record_walk.c`` (P35).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built (no C
compiler, no lxml headers), msgx installs and runs the same extraction in Python
(``handlers/whole_record.py``), only slower.
"""

from setuptools import Extension, setup

try:
    import lxml
except ImportError:            # the build environment lacks lxml (pyproject's build requires have it)
    extensions = []
else:
    extensions = [Extension("msgx_engine.handlers._record_walk", ["msgx_engine/handlers/_record_walk.c"],
                            include_dirs=lxml.get_include(), optional=True)]

setup(ext_modules=extensions)
