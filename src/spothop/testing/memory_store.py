"""In-memory object stores for tests and benchmarks, which see every read.

:func:`memory_filesystem` registers an fsspec protocol (``name://bucket/path``)
backed by memory of its own. Each read (``cat_file``, ``open`` for reading)
calls ``on_read(path, size)`` first. A test records which bucket, standing for
a region's store, was read. A benchmark sleeps there for a round trip and a
bandwidth::

    reads = []
    fs = memory_filesystem("countmem", lambda path, size: reads.append(path))
    Checkpointer("countmem://primary/run", replicas={"r1": "countmem://r1/run"})
    ...
    fs.clear()  # forget every file

Contract: the class is fsspec's ``MemoryFileSystem`` with its own ``store`` and
``pseudo_dirs``, so two protocols never share files. ``on_read`` runs on the
reading thread and may block. Registering a name again replaces the class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

OnRead = Callable[[str, int], None]


class _HookedMemory(MemoryFileSystem):  # type: ignore[misc]  # fsspec ships no types
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    on_read: ClassVar[OnRead | None] = None
    prefix: ClassVar[str] = ""

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and cls.prefix and path.startswith(cls.prefix):
            path = path[len(cls.prefix) :]
        return super()._strip_protocol(path)

    def _read(self, path: str, size: int) -> None:
        hook = type(self).on_read
        if hook is not None:
            hook(self._strip_protocol(path), size)

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        data = super().cat_file(path, start, end, **kwargs)
        self._read(path, len(data))
        return data

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        handle = super()._open(path, mode, *args, **kwargs)
        if "r" in mode:
            self._read(path, int(self.size(path)))
        return handle

    @classmethod
    def clear(cls) -> None:
        """Forget every file of this protocol."""
        cls.store.clear()
        cls.pseudo_dirs[:] = [""]


def memory_filesystem(name: str, on_read: OnRead | None = None) -> type[_HookedMemory]:
    """Register ``name://`` as a fresh in-memory store calling ``on_read`` before each read."""
    cls = type(
        f"MemoryFileSystem_{name}",
        (_HookedMemory,),
        {
            "protocol": (name,),
            "store": {},
            "pseudo_dirs": [""],
            "on_read": staticmethod(on_read) if on_read is not None else None,
            "prefix": f"{name}://",
        },
    )
    fsspec.register_implementation(name, cls, clobber=True)
    return cls
