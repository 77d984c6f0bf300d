"""Keep the distribution name `mmcv` for mmcv 1.7.2 built with its CUDA ops, and compile its C++
files as C++20 where torch's headers need it.

- setup.py names the distribution `mmcv-full` whenever MMCV_WITH_OPS=1 (the recipe sets it so the
  ops are compiled); the name PyPI's 1.x builds with ops use, and the public farm publishes, is
  `mmcv`.
- for torch > 1.12.1 it gives the C++ files `-std=c++17` (`/std:c++17` on Windows), so torch's own
  standard never applies: torch 2.14's ATen.h refuses C++17 on every compiler, and torch 2.13's
  headers need C++20 under MSVC. Both become `_FARM_STD` (`_edit.std_block`: 17 as before, 20
  where torch needs it). Its CUDA files get `-std=c++17` from a second block of the same function
  (nvcc, not Windows), which becomes `_FARM_STD` too: torch appends its own standard only when none
  is given, and nvcc keeps the last `-std` it sees.

Run in the checkout's root; idempotent.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _edit import edit, std_block

OLD = "name='mmcv' if os.getenv('MMCV_WITH_OPS', '0') == '0' else 'mmcv-full',"
NEW = "name='mmcv',  # farm: the name with ops too"

setup = pathlib.Path("setup.py")
text = setup.read_text()
if OLD in text:
    setup.write_text(text.replace(OLD, NEW, 1))
    print("mmcv: the distribution keeps the name mmcv with ops")
elif NEW in text:
    print("mmcv: setup.py already patched")
else:  # upstream changed: the wheel would come out under another name
    sys.exit("mmcv: setup.py no longer has the name switch this patch replaces; review the patch")

STD_MARK = "# farm: the C++ standard"
STD_OLD = """        if platform.system() != 'Windows':
            if parse_version(torch.__version__) <= parse_version('1.12.1'):
                extra_compile_args['cxx'] = ['-std=c++14']
            else:
                extra_compile_args['cxx'] = ['-std=c++17']
        else:
            if parse_version(torch.__version__) <= parse_version('1.12.1'):
                extra_compile_args['cxx'] = ['/std:c++14']
            else:
                extra_compile_args['cxx'] = ['/std:c++17']
"""
STD_NEW = (std_block(17, indent="        ")
           + STD_OLD.replace("['-std=c++17']", "[f'-std=c++{_FARM_STD}']  " + STD_MARK)
                    .replace("['/std:c++17']", "[f'/std:c++{_FARM_STD}']  " + STD_MARK))
NVCC_OLD = """            else:
                extra_compile_args['nvcc'] += ['-std=c++17']
"""
NVCC_NEW = NVCC_OLD.replace("['-std=c++17']", "[f'-std=c++{_FARM_STD}']  " + STD_MARK)
edit("setup.py", "mmcv", [(STD_OLD, STD_NEW), (NVCC_OLD, NVCC_NEW)], STD_MARK)
