"""Where a process spent its time, from py-spy's collapsed stacks (``bench/service.py --profile``).

py-spy does not always see that a thread is waiting (a thread pool's idle worker, the
event loop in ``select``): samples whose innermost frame is such a wait are left out, so
the shares are of the time some thread was working. Prints how that time split between
the event loop's thread and the others, the functions the process was *in* (self time,
by file:line), and the functions *under* which it was (inclusive time, by function),
optionally only those whose file matches ``--only`` (e.g. ``handrail/``); with
``--only``, also each sample charged to the innermost line of such a file on its stack
(the line of your code that spent it, in whatever library).

Run::

    .venv/bin/python bench/profile_summary.py /tmp/prof/postgres-cycle.txt --only handrail/ --top 25
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
SITE = re.compile(r".*?/(site-packages|lib/python3\.\d+)/")
THREAD = re.compile(r"^thread \(\d+\): (?P<name>.*)$")
# Innermost frames that are a thread waiting, not working.
IDLE = {
    ("selectors.py", "EpollSelector.select"),
    ("threading.py", "Condition.wait"),
    ("threading.py", "Event.wait"),
    ("queue.py", "Queue.get"),
    ("concurrent/futures/thread.py", "_worker"),
}


def short(path: str) -> str:
    path = SITE.sub("", path)
    return path.split("/src/", 1)[-1]


def parse(
    path: Path, only: str | None = None
) -> tuple[int, Counter[str], Counter[str], Counter[str], Counter[str]]:
    total = 0
    nearest: Counter[str] = Counter()
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    for raw in path.read_text().splitlines():
        stack, _, count = raw.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = []
        thread = "?"
        for part in stack.split(";"):
            named = THREAD.match(part)
            if named is not None:
                thread = "event loop (MainThread)" if named["name"] == "MainThread" else "other threads"
                continue
            found = FRAME.match(part)
            if found is None:
                continue
            frames.append((found["function"], short(found["file"]), found["line"] or "?"))
        if not frames or (frames[-1][1], frames[-1][0]) in IDLE:
            continue
        total += n
        threads[thread] += n
        function, file, line = frames[-1]
        own[f"{file}:{line} {function}"] += n
        for name in {f"{file} {function}" for function, file, _ in frames}:
            under[name] += n
        if only:
            mine = [f for f in frames if only in f[1]]
            if mine:
                function, file, line = mine[-1]
                nearest[f"{file}:{line} {function}"] += n
    return total, own, under, threads, nearest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--only", help="inclusive rows only for files containing this")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    for path in args.files:
        total, own, under, threads, nearest = parse(path, args.only)
        print(f"== {path} ({total} working samples)")
        print("  " + ", ".join(f"{name} {100 * n / total:.0f}%" for name, n in threads.most_common()))
        print("self time, by line:")
        for name, n in own.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {name}")
        print("inclusive time, by function" + (f" (files with {args.only!r})" if args.only else "") + ":")
        rows = [(name, n) for name, n in under.most_common() if not args.only or args.only in name]
        for name, n in rows[: args.top]:
            print(f"  {100 * n / total:5.1f}%  {name}")
        if args.only:
            print(f"by the innermost line in files with {args.only!r} (what that line spends, all callees):")
            for name, n in nearest.most_common(args.top):
                print(f"  {100 * n / total:5.1f}%  {name}")
        print()


if __name__ == "__main__":
    main()
