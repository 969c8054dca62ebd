"""Print the tables of docs/scale.md from bench/results/scale-n*.json.

    python bench/scale_table.py bench/results/scale-n1000000.json
"""

from __future__ import annotations

import json
import sys


def mib(b) -> str:
    return f"{b / 2**20:,.0f}"


def main(path: str) -> None:
    r = json.loads(open(path).read())
    print(f"n = {r['n']:,}; {r['machine']['cpu']}, {r['machine']['cores']} cores; commit {r['commit'][:7]}; "
          f"load average {r['load_avg']}")
    print("\n| backend | `rag index` wall s | dense build s | BM25 build s | peak RSS MiB | dense on disk MiB | "
          "chunks.arrow MiB | BM25 MiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, b in r.get("build", {}).items():
        d = b["disk"]
        print(f"| {name} | {b['seconds']:,.0f} | {b['dense_build_seconds'] or 0:,.0f} | {b['sparse_build_seconds'] or 0:,.0f} "
              f"| {b['peak_rss_mib']:,.0f} | {mib(d['dense'])} | {mib(d['chunks'])} | {mib(d['sparse'])} |")
    print("\n| backend | open s | RSS after open MiB (anon + file) | dense recall@10 | dense QPS | dense P50 / P99 ms | "
          "sparse P50 / P99 ms | hybrid P50 / P99 ms | filtered dense P50 / P99 ms | RSS after queries MiB (anon + file) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, s in r.get("search", {}).items():
        m1, m2 = s["mem_after_open_mib"], s["mem_after_queries_mib"]
        d, sp, h, f = s["dense"], s["sparse"], s["hybrid"], s["filtered_dense"]
        print(f"| {name} | {s['open_seconds']:.2f} | {m1['VmRSS']:,.0f} ({m1['RssAnon']:,.0f} + {m1['RssFile']:,.0f}) "
              f"| {d['recall@10']:.4f} | {d['qps']:,.0f} | {d['p50_ms']} / {d['p99_ms']} | {sp['p50_ms']} / {sp['p99_ms']} "
              f"| {h['p50_ms']} / {h['p99_ms']} | {f['p50_ms']} / {f['p99_ms']} "
              f"| {m2['VmRSS']:,.0f} ({m2['RssAnon']:,.0f} + {m2['RssFile']:,.0f}) |")
    print("\n| backend | setting | recall@10 | QPS | P50 / P99 ms |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, s in r.get("search", {}).items():
        for p in s.get("sweep", []):
            setting = ", ".join(f"{k} {v}" for k, v in p.items() if k in ("ef", "nprobe", "rescore", "rerank"))  # rerank: before #33
            print(f"| {name} | {setting} | {p['recall@10']:.4f} | {p['qps']:,.0f} | {p['p50_ms']} / {p['p99_ms']} |")
    print("\n| backend | cold `rag search` (hybrid), page cache warm: median s, peak RSS MiB | page cache evicted: median s, peak MiB |")
    print("| --- | ---: | ---: |")
    for name, c in r.get("cold", {}).items():
        w, e = c["warm_page_cache"], c["cold_page_cache"]
        print(f"| {name} | {w['median_seconds']:.2f}, {w['max_peak_rss_mib']:,.0f} | {e['median_seconds']:.2f}, "
              f"{e['max_peak_rss_mib']:,.0f} |")
    if "small_index" in r:
        w = r["small_index"]["warm_page_cache"]
        print(f"\nsmall index ({r['small_index']['project']}): {w['median_seconds']:.2f} s, {w['max_peak_rss_mib']:,.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1])
