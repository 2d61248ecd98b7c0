"""The table ``make bench`` prints (and docs/benchmarks.md shows): each figure, its baseline
from the same run, the ratio, and the target beside it."""

from __future__ import annotations

from typing import Any


def _ms(d: dict[str, Any] | None, key: str) -> str:
    if not d or d.get(key) is None:
        return "-"
    return f"{d[key]:.1f}"


def _gap_row(gap: dict[str, Any], indent: str) -> tuple[str, str, str, str, str]:
    """The worker's ``step gap`` split (:func:`bench.stats.worker_step_gap`), p50 of each segment."""
    return (f"{indent}in the worker p50 (ms): flush, save+claim, result, hand-over, setup = total",
            ", ".join(_ms(gap.get(k), "p50") for k in ("chunk_flush_ms", "save_claim_ms", "result_publish_ms",
                                                       "handover_ms", "next_setup_ms"))
            + f" = {_ms(gap.get('total_ms'), 'p50')}", "-", "-", "-")


def rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """``(figure, threadline, baseline, ratio, target)`` rows for the figures present."""
    out: list[tuple[str, str, str, str, str]] = []
    if t := results.get("ttfc"):
        a, b = t["threadline_ms"], t["baseline_ms"]
        out.append(("1 time to first chunk p50 / p95 / p99 (ms)",
                    f"{_ms(a, 'p50')} / {_ms(a, 'p95')} / {_ms(a, 'p99')}",
                    f"{_ms(b, 'p50')} / {_ms(b, 'p95')} / {_ms(b, 'p99')} "
                    f"({t['conditions'].get('kafka_hops', 4) - 1} relays)",
                    f"{t['ratio']['p50']}x / {t['ratio']['p99']}x", "p50 ≤ 15, p99 ≤ 50, ≤ 1.5x"))
        if w := t.get("worker_step_start_ms"):  # the worker's share, split (worker/step_gap.py's budget)
            out.append(("  in the worker p50 (ms): claim, setup, model open, first text = total",
                        ", ".join(_ms(w.get(k), "p50") for k in ("claim_ms", "setup_ms", "model_open_ms",
                                                                  "first_text_ms")) + f" = {_ms(w.get('total_ms'), 'p50')}",
                        "-", "-", "-"))
        if n := t.get("new_thread"):  # a thread that never spoke: its topic made by the subscription
            a = n["first_text_ms"]
            out.append(("1a brand-new thread: subscribe + send → first text p50 / p95 / p99 (ms)",
                        f"{_ms(a, 'p50')} / {_ms(a, 'p95')} / {_ms(a, 'p99')}",
                        f"subscribe {_ms(n['subscribe_ms'], 'p50')}, send → first text "
                        f"{_ms(n['send_to_first_text_ms'], 'p50')} (p50)", "-", "p50 ≤ 30"))
            if w := n.get("worker_step_start_ms"):
                out.append(("  in the worker p50 (ms): claim, setup, model open, first text = total",
                            ", ".join(_ms(w.get(k), "p50") for k in ("claim_ms", "setup_ms", "model_open_ms",
                                                                      "first_text_ms"))
                            + f" = {_ms(w.get('total_ms'), 'p50')}", "-", "-", "-"))
    if t := results.get("sse"):
        a, b = t["sse_ms"], t["kafka_ms"]
        out.append(("1b first token over the gateway's SSE p50 / p95 / p99 (ms)",
                    f"{_ms(a, 'p50')} / {_ms(a, 'p95')} / {_ms(a, 'p99')}",
                    f"{_ms(b, 'p50')} / {_ms(b, 'p95')} / {_ms(b, 'p99')} (Kafka-native client)",
                    f"{t['ratio']['p50']}x / {t['ratio']['p99']}x", "-"))
    if t := results.get("toolsteps"):
        a = t["ms_per_step"]
        out.append(("1c tool-step overhead (3-step run: tool, tool, text; instant model) p50 / p95 / p99 (ms)",
                    f"{_ms(a, 'p50')} / {_ms(a, 'p95')} / {_ms(a, 'p99')}", "-",
                    f"{t['ratio_to_target']['p50']}x / {t['ratio_to_target']['p99']}x target",
                    "p50 ≤ 5, p99 ≤ 15 (Restate's figure in the peer comparison)"))
        out.append(("  whole run (send → finish) p50 (ms); runs measured, bad",
                    f"{_ms(t['run_ms'], 'p50')}; {a.get('n', 0)}, {t['bad_runs']}", "-", "-", "-"))
        if gap := t.get("worker_step_gap_ms"):  # its two step boundaries in the worker, split
            out.append(_gap_row(gap, "  "))
        if cpu := t.get("cpu_ms_per_step"):
            out.append((f"  CPU per step (ms; {t['conditions']['threads']} threads): "
                        + ", ".join(cpu), ", ".join(str(v) for v in cpu.values()), "-", "-", "-"))
    if t := results.get("throughput"):
        runs = t.get("conditions", {}).get("repeats", 1)
        label = "2 chunks/s, one run, 3 processors" + (f" (median of {runs}, alternated)" if runs > 1 else "")
        out.append((label, f"{t['threadline']['chunks_per_s']:.0f}",
                    f"{t['baseline']['chunks_per_s']:.0f} (raw produce→consume)", f"{t['ratio']}x",
                    "≥ 20,000 /s, ≥ 0.5x"))
    if c := results.get("concurrency"):
        for s in c["sizes"]:
            out.append((f"3 {s['runs']} runs × 200 tok @ 50/s: added gap p50 / p99 (ms)",
                        f"{s['added_gap_ms']['p50']} / {s['added_gap_ms']['p99']}",
                        f"model pacing {1000 / c['conditions']['tokens_per_s']:.0f} ms", "-", "p99 ≤ 50 at 500 runs"))
            out.append((f"  {s['runs']} runs: worker CPU (cores), RSS peak (MB), per run (KB)",
                        f"{s['worker_cpu_cores']}, {s['worker_rss_peak_mb']}, {s['rss_per_run_kb']}",
                        f"idle RSS {s['worker_rss_idle_mb']} MB", "-", "≤ 400 MB, ≤ 256 KB/run"))
            out.append((f"  {s['runs']} runs: chunks/s, wall (s) vs ideal",
                        f"{s['chunks_per_s']:.0f}, {s['wall_s']} vs {s['ideal_wall_s']}",
                        f"subscriber CPU {s['subscriber']['cpu_share']}, lag p99 {s['subscriber']['record_lag_ms']['p99']} ms",
                        "-", "-"))
    for name, number in (("burst", "3b"), ("burst2", "3c")):
        if b := results.get(name):
            out += _burst_rows(b, number)
    if s := results.get("signals"):
        out.append(("4 send_message → accepted deliver p50 / p99 (ms)",
                    f"{_ms(s['accepted_deliver_ms'], 'p50')} / {_ms(s['accepted_deliver_ms'], 'p99')}", "-",
                    f"{s['ratio_to_target']['accepted_p99']}x target", "p99 ≤ 20"))
        out.append(("  → echo chunk p50 / p99 (ms, incl. rest of the step)",
                    f"{_ms(s['echo_ms'], 'p50')} / {_ms(s['echo_ms'], 'p99')}", "-", "-", "-"))
        out.append(("  step-finish → echo (step overhead) p50 / p99 (ms)",
                    f"{_ms(s['step_boundary_to_echo_ms'], 'p50')} / {_ms(s['step_boundary_to_echo_ms'], 'p99')}",
                    "-", f"{s['ratio_to_target']['boundary_p50']}x target", "p50 ≤ 10"))
        if gap := s.get("worker_step_gap_ms"):  # the same gap in the worker, split (worker/step_gap.py's budget)
            out.append(_gap_row(gap, "    "))
    if s := results.get("scaling"):
        out.append((f"5 {s['conditions']['runs']} runs, 1 → 2 workers: chunks/s",
                    f"{s['one_worker']['chunks_per_s']:.0f} → {s['two_workers']['chunks_per_s']:.0f}",
                    f"{s['conditions']['machine_cores']} cores", f"{s['throughput_ratio']}x", "≥ 1.8x"))
    if p := results.get("pipeline"):
        us = p["us_per_chunk"]
        out.append(("6 in-process pipeline µs/chunk: 0 / 1 / 3 / 10 processors",
                    f"{us['0']} / {us['1']} / {us['3']} / {us['10']}", f"{us['0']} (0 processors)",
                    f"{p['ratio_to_baseline']['3']}x at 3", "≤ 20 at 3, ≤ 3 per extra"))
        out.append(("  per extra processor (µs)", f"{p['us_per_extra_processor']}", "-", "-", "≤ 3"))
    return out


def table(results: dict[str, Any]) -> str:
    """A Markdown table of :func:`rows`."""
    head = ("figure", "Threadline", "baseline (same run)", "ratio", "target")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(results)]
    for name, error in (results.get("errors") or {}).items():
        lines.append(f"| {name}: FAILED | {error} | - | - | - |")
    return "\n".join(lines)


def top_costs_text(results: dict[str, Any], n: int = 5) -> str:
    """The profiles' top self-time packages and frames, as Markdown lines."""
    out = []
    profiles = []
    if (t := results.get("ttfc")) and isinstance(t.get("profile"), dict):
        for svc in ("ingress", "run_orchestrator", "processor_worker"):
            if isinstance(t["profile"].get(svc), dict):
                profiles.append((f"TTFC, {svc}", t["profile"][svc]))
    if (t := results.get("throughput")) and isinstance(t.get("profile"), dict):
        profiles.append(("throughput, processor_worker", t["profile"]))
    if (t := results.get("burst")) and isinstance(t.get("profile"), dict):
        profiles.append(("burst, processor_worker", t["profile"]))
    for name, prof in profiles:
        if not prof.get("samples"):
            continue
        pk = ", ".join(f"{k} {v}%" for k, v in prof["packages"][:n])
        fr = ", ".join(f"`{k}` {v}%" for k, v in prof["frames"][:n])
        inc = ", ".join(f"{k} {v}%" for k, v in prof.get("inclusive", [])[:n])
        out.append(f"- **{name}** ({prof['samples']} samples, `{prof.get('file')}`): inclusive {inc}; "
                   f"self by package {pk}; top frames {fr}")
    return "\n".join(out)


def _burst_rows(b: dict[str, Any], number: str) -> list[tuple[str, str, str, str, str]]:
    """The rows of a burst figure (``burst``: 500 runs on one worker; ``burst2``: 1,000 on two)."""
    st, workers = b["stored"], b.get("workers", 1)
    label = f"{workers} worker" + ("s" if workers > 1 else "")
    return [
        (f"{number} burst: {b['runs']} runs at once, {label}: failed runs; re-executed steps; pool timeouts",
         f"{b['failed_runs']} (stored: not finished {st['not_finished']}, running {st['still_running']}); "
         f"{st['re_executed_steps']}; {b['pool_timeouts_in_worker_logs']}", "-", "-", "0; 0"),
        ("  burst: first token p50 / p99 (ms); wall (s) vs ideal",
         f"{b['first_delta_ms']['p50']} / {b['first_delta_ms']['p99']}; {b['wall_s']} vs {b['ideal_wall_s']}",
         "-", f"{b['wall_ratio_to_ideal']}x ideal", "p99 ≤ 1000; ≤ 1.25x"),
        (f"  burst: added gap p50 / p99 (ms); worker CPU{' (all)' if workers > 1 else ''}, RSS peak (MB)"
         f"{' of the largest worker' if workers > 1 else ''}",
         f"{b['added_gap_ms']['p50']} / {b['added_gap_ms']['p99']}; {b['worker_cpu_cores']}, "
         f"{b.get('worker_rss_peak_each_mb', b['worker_rss_peak_mb'])}", "-", "-", "p99 ≤ 50; ≤ 400 MB"),
        *_burst_start_rows(b),
    ]


def _burst_start_rows(b: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Where the burst's first tokens went (p50 / p99, ms), and the worker's claim split."""
    split = b.get("start_split_ms") or {}
    names = ("request_to_step_task", "step_task_to_first_text", "first_text_produced_to_received")
    if not all(split.get(n, {}).get("n") for n in names):
        return []
    rows = [("  burst: first token split p50 / p99 (ms): request → step task, → first text produced, → received",
             ", ".join(f"{split[n]['p50']:.0f} / {split[n]['p99']:.0f}" for n in names), "-", "-", "-")]
    start, parts = b.get("worker_step_start_ms") or {}, ("claim_ms", "setup_ms", "model_open_ms")
    if all(start.get(n, {}).get("n") for n in parts):
        rows.append(("    in the worker p50 / p99 (ms): claim, setup, model open",
                     ", ".join(f"{start[n]['p50']:.0f} / {start[n]['p99']:.0f}" for n in parts), "-", "-", "-"))
    return rows
