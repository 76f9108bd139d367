"""The one-line progress display of long commands (a run's cells, a report's pages, a
benchmark's points): rich, on stderr, imported only when a display starts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def progress_bar(name: str, console: Any = None) -> Iterator[Any]:
    """A progress line fed by the runner's progress callback: done/total, failures,
    elapsed, the runner's ETA and the cell that just finished (`live_line`)."""
    with live_line(name, console) as set_fields:

        def update(p: Any) -> None:
            eta = "eta --" if p.eta_s is None else f"eta {_duration(p.eta_s)}"
            set_fields(
                p.done,
                p.total,
                failed=p.failed,
                clock=f"{_duration(p.elapsed_s)} {eta}",
                last=p.last or "",
            )

        yield update


def _status_text(name: str, f: dict[str, Any], width: int) -> Any:
    """One line of at most `width` cells: `name ━━━━ done/total · N failed · clock · last`.
    Done/total always shows; what does not fit goes — the last cell first, then the bar,
    the clock and the failures — and a long name or cell is cut with an ellipsis."""
    from rich.text import Text

    done, total = f.get("done", 0), f.get("total")
    count = f"{done}/{'?' if total is None else total}"
    label = Text(name)
    label.truncate(max(8, width // 3), overflow="ellipsis")
    line = Text()
    line.append(label.plain, style="bold")
    room = width - line.cell_len - 1 - len(count)
    extras = []
    for e in ([f"{f['failed']} failed"] if "failed" in f else []) + (
        [f["clock"]] if f.get("clock") else []
    ):
        if room >= len(e) + 3:
            extras.append(e)
            room -= len(e) + 3
    last = f.get("last") or ""
    # the bar takes what the whole last cell leaves, else shares the room with it
    spare = room - 1 - (Text(last).cell_len + 3 if last else 0)
    bar = min(40, spare if spare >= 10 else (room - 1) // 2)
    if bar >= 6:
        filled = round(bar * min(done, total) / total) if total else 0
        line.append(" ")
        line.append("━" * filled, style="bar.finished" if filled == bar else "bar.complete")
        line.append("━" * (bar - filled), style="bar.back")
        room -= bar + 1
    line.append(" ")
    line.append(count, style="green")
    for e in extras:
        line.append(f" · {e}")
    if last and room >= 6:
        rest = Text(last)
        rest.truncate(room - 3, overflow="ellipsis")
        line.append(" · ")
        line.append_text(rest)
    line.no_wrap = True
    return line


@contextlib.contextmanager
def live_line(name: str, console: Any = None) -> Iterator[Any]:
    """A one-line live display on stderr: `set_fields(done, total, **fields)` updates it.

    The line fits the console (`_status_text`), so done/total stays visible at 80
    columns and narrower. Ctrl-C stops the display before anything else prints (a SIGINT
    handler while it runs), so its last state shows once, above the caller's message."""
    import signal
    import threading

    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = console or Console(stderr=True)
    fields: dict[str, Any] = {}

    class Line:
        def __rich__(self) -> Any:
            if not fields:  # nothing to show yet (a command that fails first shows none)
                return Text("")
            return _status_text(name, fields, max(console.width - 1, 20))

    live = Live(Line(), console=console, refresh_per_second=4, transient=False)

    def set_fields(done: int, total: int, **more: Any) -> None:
        fields.update(more, done=done, total=total)

    def on_sigint(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):
            live.stop()
        if callable(previous) and previous is not on_sigint:
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else None
    if main_thread:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        with live:
            yield set_fields
    finally:
        if main_thread and signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, previous or signal.default_int_handler)
        if fields and not console.is_terminal:  # rich leaves a log's last line open
            console.file.write("\n")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"


@contextlib.contextmanager
def iteration_bar(name: str, console: Any = None) -> Iterator[Any]:
    """A progress line (`live_line`) fed by `tick(done, total)`."""
    with live_line(name, console) as set_fields:
        yield set_fields
