#!/usr/bin/env python3
"""The times of a `make test` run, from its JUnit XML files (one per part): the 30 slowest tests,
the time of each test file, and each part's wall time. Printed at the end of `make test`, so that
drift shows; docs/testing.md quotes it.

    python scripts/test-times.py .test-results/*.xml [--slowest 30]

--order FILE writes the order in which make test's first part hands its files to the workers
(tests/file-order.txt, which tests/conftest.py reads): the parallel part's files, longest first.
Re-derive it from a clean CI run's times when files have grown or moved:

    python scripts/test-times.py .test-results/parallel.xml --order tests/file-order.txt
"""

import argparse
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--slowest", type=int, default=30)
    parser.add_argument("--order", metavar="FILE",
                        help="write the files longest first, one a line, to FILE")
    args = parser.parse_args(argv)
    tests, parts = [], []
    for name in args.files:
        try:
            root = ElementTree.parse(name).getroot()
        except (OSError, ElementTree.ParseError) as error:
            print(f"test-times: {name}: {error}", file=sys.stderr)
            continue
        for suite in root.iter("testsuite"):
            parts.append((Path(name).stem, float(suite.get("time", 0)),
                          int(suite.get("tests", 0))))
            for case in suite.iter("testcase"):
                path = case.get("classname", "").replace(".", "/") + ".py"
                tests.append((float(case.get("time", 0)), path, case.get("name", "")))
    if not tests:
        return 0
    print(f"\n---- the {min(args.slowest, len(tests))} slowest tests")
    for seconds, path, name in sorted(tests, reverse=True)[:args.slowest]:
        print(f"{seconds:8.2f} s  {path}::{name}")
    files = defaultdict(lambda: [0.0, 0])
    for seconds, path, _ in tests:
        files[path][0] += seconds
        files[path][1] += 1
    print("\n---- time per test file (tests)")
    for path, (seconds, count) in sorted(files.items(), key=lambda item: -item[1][0]):
        print(f"{seconds:8.1f} s  {count:4d}  {path}")
    if args.order:
        order = sorted(files.items(), key=lambda item: -item[1][0])
        Path(args.order).write_text(
            "# make test's first part: its files longest first (scripts/test-times.py --order)\n"
            + "".join(f"{Path(path).name}  {seconds:.0f} s\n" for path, (seconds, _) in order))
    print("\n---- parts (wall time)")
    for name, seconds, count in parts:
        print(f"{seconds:8.1f} s  {count:4d} tests  {name}")
    print(f"{sum(s for _, s, _ in parts):8.1f} s  {len(tests):4d} tests  in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
