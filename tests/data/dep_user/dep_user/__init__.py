"""dep_user: built against farm's demo_ext wheel; importing needs no GPU."""

from ._C import built_against

__all__ = ["built_against"]
