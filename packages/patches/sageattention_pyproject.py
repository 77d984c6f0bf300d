"""SageAttention 2: its build requirements without their upper bounds.

Its pyproject.toml asks for ``setuptools>=62,<75``, ``wheel>=0.38,<0.44`` and
``packaging>=21,<24``. farm builds without isolation, in the cell's environment with torch, and
``python -m build`` checks those requirements against it: torch 2.14.1 requires
``setuptools>=77.0.3``, so no environment holds both and the build stops before compiling ("ERROR
Unmet dependencies ... setuptools<75,>=62"). setup.py uses none of what the bounds guard against
(it builds torch extensions with torch's own ``BuildExtension``); the lower bounds stay. Run at
the source root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit

MARK = "# farm: no upper bounds"
edit("pyproject.toml", "sageattention", [
    ('  "setuptools>=62,<75",\n', f'  "setuptools>=62",  {MARK}: torch 2.14 requires setuptools>=77.0.3\n'),
    ('  "wheel>=0.38,<0.44",\n', f'  "wheel>=0.38",  {MARK}\n'),
    ('  "packaging>=21,<24",\n', f'  "packaging>=21",  {MARK}\n'),
], MARK)
