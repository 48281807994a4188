"""kvtrace: a columnar trace warehouse and query toolkit for LLM-inference research."""

__version__ = "0.1.0"

from kvtrace.errors import KvtraceError
from kvtrace.warehouse import Warehouse, connect

__all__ = ["KvtraceError", "Warehouse", "__version__", "connect"]
