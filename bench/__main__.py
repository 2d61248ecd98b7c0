"""``make bench``: run the benchmarks that exist so far, print a table, write bench/results/<date>.json.

Only figure 6 (the in-process processor pipeline) exists yet; the cluster figures of issue 7
(time to first chunk, throughput, concurrency, signal latency, scaling) are still to be written.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

from bench import pipeline


def main() -> int:
    results = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": {
        "python": sys.version.split()[0], "platform": platform.platform(), "processor": platform.processor()},
        "pipeline": pipeline.run()}
    out = Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    p = results["pipeline"]
    print("processor pipeline (process_output_stream, pass-through), per chunk:")
    print(f"  {'processors':>10}  {'us/chunk':>9}  {'x baseline':>10}")
    for n, us in p["us_per_chunk"].items():
        print(f"  {n:>10}  {us:>9}  {p['ratio_to_baseline'][n]:>10}")
    print(f"  per extra processor: {p['us_per_extra_processor']} us (target <= 3); "
          f"3 processors: {p['us_per_chunk']['3']} us (target <= 20)")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
