"""The one progress callback of the library.

Every long operation takes `progress: Progress | None` and calls
`progress(task, done, total)` as it goes: `task` names the work ("embedding",
"chunking", "searching", ...), `done` and `total` count its units (texts,
documents, queries, pairs; `total` None when unknown). The CLI renders it as
a progress bar on stderr (only on a terminal); the Python API passes None
unless the caller gives a callback.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Callable, Optional

Progress = Callable[[str, int, Optional[int]], None]

#: True while a command runs with `-q/--quiet` (set by the CLI): the notes that no
#: progress callback reaches (the first-use model conversion's) are not printed either.
QUIET: ContextVar[bool] = ContextVar("rag_quiet", default=False)
