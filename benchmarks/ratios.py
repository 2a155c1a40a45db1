"""Print the ratios of one benchmark run.

    pytest benchmarks --benchmark-enable --benchmark-only --benchmark-json=bench.json
    python benchmarks/ratios.py bench.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    with open(path) as fh:
        data = json.load(fh)
    by_group: dict[str, dict[str, dict]] = defaultdict(dict)
    for bench in data["benchmarks"]:
        by_group[bench["group"]][bench["extra_info"]["kind"]] = bench
    machine = data.get("machine_info", {})
    print(f"# {machine.get('cpu', {}).get('brand_raw', '?')}, python {machine.get('python_version')}")
    for group in sorted(by_group, key=_order):
        kinds = by_group[group]
        print(f"\n## {group}")
        for kind, bench in sorted(kinds.items(), key=lambda kv: kv[1]["stats"]["min"]):
            stats = bench["stats"]
            extra = bench["extra_info"]
            line = f"{kind:24s} min {stats['min'] * 1e3:10.3f} ms  median {stats['median'] * 1e3:10.3f} ms"
            if "messages" in extra:
                line += f"  {stats['min'] * 1e9 / extra['messages']:8.1f} ns/message"
            if "conversations" in extra:
                line += f"  {stats['min'] * 1e6 / extra['conversations']:8.2f} us/conversation"
            if "median_us" in extra:
                line += f" (median {extra['median_us']:.2f})"
            if "columnar_share" in extra:
                line += f"  {extra['columnar_share']:.1%} of rows columnar"
            if "bytes" in extra:
                line += f"  {extra['bytes'] / stats['min'] / 1e9:6.2f} GB/s"
            print(line)
            for name, value in extra.get("ratios", {}).items():
                print(f"  {name} = {value:.2f}")
        base = next((kinds[k] for k in ("kernel-cython", "process-cython", "orjson-loads",
                                        "reduce-table", "pyarrow-read-write")
                     if k in kinds), None)
        if base is None:
            continue
        for kind, bench in kinds.items():
            if bench is not base:
                ratio = bench["stats"]["min"] / base["stats"]["min"]
                line = f"  {kind} / {base['extra_info']['kind']} = {ratio:.2f}x"
                if "median_us" in bench["extra_info"] and "median_us" in base["extra_info"]:
                    median = bench["extra_info"]["median_us"] / base["extra_info"]["median_us"]
                    line += f" (medians: {median:.2f}x)"
                print(line)


def _order(group: str) -> tuple[str, int]:
    digits = "".join(ch for ch in group.split()[-1] if ch.isdigit())
    return (group.rsplit(" ", 1)[0], int(digits or 0))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench.json")
