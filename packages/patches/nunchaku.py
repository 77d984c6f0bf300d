"""Let farm write nunchaku's local version label.

Its setup.py appends a label of its own to the version (``1.2.1+cu12.8torch2.8``, from torch's
CUDA and version); farm's stamp then adds the cell's (``+cu128torch2.8``), and a version cannot
have two. The line is removed, so the wheel is ``1.2.1`` as released and farm labels it like every
other cell. Run at the checkout's root; idempotent.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit

MARK = "# farm: the local version label is farm's"
OLD = ('    # Version format: 1.2.0+cu12.4torch2.4\n'
       '    version = f"{version}+cu{cuda_version}torch{torch_major_minor_version}"\n')
NEW = f"""    {MARK} (+cu128torch2.8, written when the wheel is stamped)
"""

edit("setup.py", "nunchaku", [(OLD, NEW)], MARK)
