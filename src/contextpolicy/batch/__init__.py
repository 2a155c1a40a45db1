"""The batch layer: whole tables of conversations (Arrow, Parquet) at once.

It is the home of the columnar path: the kernel's ``utf8_lengths``, ``role_codes_utf8`` and
``trim_cut_many`` work on Arrow buffers without creating a Python object per message, and the
engines that run over many machines call in here. pyarrow is an optional extra, imported only
when this layer is used (``pip install contextpolicy[arrow]``).
"""

from .table import FIGURE_COLUMNS, Reduced, figures_schema, reduce_table, release_memory

__all__ = ["FIGURE_COLUMNS", "Reduced", "figures_schema", "reduce_table", "release_memory"]
