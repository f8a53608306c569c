#!/usr/bin/python3
"""The HTML report of 'make bench': build/bench/report.html, one file that stands alone (the
plots are inline SVG drawn by matplotlib), from the JSON the benchmarks write:

  model.json          spyre-ops-bench (tools/bench/ops_bench.cpp): every op-library case on a
                      roofline chart, the plan and the naive plan
  torch_compare.json  spyre_engine_torch_compare --json (engine/bench/torch_compare.cpp): the
                      engine's functional speed against one-thread libtorch, the 1.5x target
  torch_compile.json  torch_spyre/tools/compile_bench.py --json: eager against torch.compile

A missing or unreadable input leaves its section out with a line saying why. Runs on the host
with Debian 12's python3-matplotlib (tools/setup/host-matplotlib.sh); the trixie sysroot does
not carry matplotlib.

    /usr/bin/python3 tools/bench/report.py [--bench-dir build/bench] [--out FILE]
"""

import argparse
import datetime
import html
import io
import json
import math
import os
import platform
import socket
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Text stays text in the SVG (searchable, smaller); fixed ids and no date: the same inputs give
# the same plots.
matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "spyre-bench",
                            "font.size": 9})

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class LeftOut(Exception):
    """A section cannot be drawn; the message says why (shown in the report)."""


def load_json(path, writer):
    """The parsed JSON of path, or LeftOut naming the file and what writes it."""
    if not os.path.exists(path):
        raise LeftOut(f"{path} not found ({writer} writes it)")
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise LeftOut(f"{path} is not valid JSON (line {e.lineno}: {e.msg})") from e
    except OSError as e:
        raise LeftOut(f"{path} cannot be read: {e.strerror}") from e


def fmt(x, digits=3):
    """A number for a table: `digits` significant digits, '-' for none."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}g}" if abs(x) < 10 ** digits else f"{x:.0f}"


def table(header, rows):
    """An HTML table; cells are escaped here."""
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>")
    return "\n".join(out) + "</table>"


def svg(fig):
    """The figure as an inline <svg> element (the XML prolog and doctype dropped)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


# --- roofline of the op library (model.json) ---

FAMILIES = [("matmul", "tab:blue"), ("mlp", "tab:green"), ("sdpa", "tab:purple"),
            ("softmax", "tab:orange")]


def roofline_data(path):
    """The machine's roofs, the cases that have FLOPs, bytes and a modeled time, and the names
    of the other records."""
    data = load_json(path, "spyre-ops-bench (tools/bench/ops_bench.cpp)")
    if not isinstance(data, list):
        raise LeftOut(f"{path} is not a list of cases")
    machines = [r for r in data if r.get("name") == "machine"]
    if not machines:
        raise LeftOut(f"{path} has no 'machine' record (written by a spyre-ops-bench older than "
                      "the report: rebuild it)")
    m = machines[0]
    cases = [r for r in data if "flops" in r and "bytes" in r and "modeled_us" in r]
    if not cases:
        raise LeftOut(f"{path} has no case with 'flops', 'bytes' and 'modeled_us'")
    others = [r.get("name", "?") for r in data if r is not m and r not in cases]
    return m, cases, others


def family(case):
    return case["name"].split()[0]


def roofs(m):
    """(label, FLOP/s) of each distinct matrix peak (dtypes of one rate share a line), and the
    vector units' rate."""
    by_rate = {}
    order = ["fp16", "bf16", "int8", "fp32"]
    for dt, rate in sorted(m["matrix_peak_flops_per_s"].items(),
                           key=lambda kv: order.index(kv[0]) if kv[0] in order else 9):
        by_rate.setdefault(rate, []).append(dt)
    out = [("/".join(dts), rate) for rate, dts in sorted(by_rate.items(), reverse=True)]
    return out, m["vector_peak_ops_per_s"]


def case_roof(case, m):
    """The attainable FLOP/s of a case at its intensity: its compute roof (matrix peak of its
    dtype, the vector rate for softmax) or DDR, whichever is lower."""
    peak = (m["vector_peak_ops_per_s"] if family(case) == "softmax"
            else m["matrix_peak_flops_per_s"][case["dtype"]])
    return min(peak, case["flops"] / case["bytes"] * m["ddr_bytes_per_s"])


def roofline_section(path):
    m, cases, skipped = roofline_data(path)
    matrix_roofs, vector_roof = roofs(m)
    bw = m["ddr_bytes_per_s"]
    ai = [c["flops"] / c["bytes"] for c in cases]
    tflops = [c["flops"] / (c["modeled_us"] * 1e-6) / 1e12 for c in cases]
    lo, hi = min(ai + [1.0]) / 2, max(ai + [1e3]) * 2
    fig, ax = plt.subplots(figsize=(10, 6.5))
    ax.set_xscale("log")
    ax.set_yscale("log")
    # Each compute roof runs flat from its ridge point (where DDR stops bounding) to the right;
    # DDR bounds everything left of the highest ridge.
    top = max([r for _, r in matrix_roofs] + [vector_roof])
    ax.plot([lo, top / bw], [lo * bw / 1e12, top / 1e12], color="black", lw=1.4,
            gid="roof-ddr", label=f"DDR {bw / 1e9:.1f} GB/s")
    styles = ["-", "--", "-.", ":"]
    roof_lines = [(f"matrix {label}", rate, "dimgray", styles[i % 4])
                  for i, (label, rate) in enumerate(matrix_roofs)]
    roof_lines.append(("vector (16-bit)", vector_roof, "tab:orange", ":"))
    for label, rate, color, ls in roof_lines:
        unit = "TFLOP/s" if label.startswith("matrix") else "Tops/s"
        ax.plot([rate / bw, hi], [rate / 1e12] * 2, color=color, ls=ls, lw=1.2,
                gid=f"roof-{label.replace(' ', '-')}", label=f"{label} {rate / 1e12:.3g} {unit}")
        # named left of its ridge point, above the DDR line: no case can be there
        ax.annotate(f"{label} {rate / 1e12:.3g}", (rate / bw, rate / 1e12), xytext=(-6, -3),
                    textcoords="offset points", ha="right", fontsize=7, color=color)
    colors = dict(FAMILIES)
    shown = set()
    rows = []
    for i, (c, x, y) in enumerate(zip(cases, ai, tflops)):
        fam = family(c)
        color = colors.get(fam, "tab:gray")
        label = None if fam in shown else f"{fam}: plan"
        shown.add(fam)
        ax.plot([x], [y], "o", color=color, ms=6, gid=f"plan-{i}", label=label)
        naive_y = None
        if c.get("naive_modeled_us"):
            naive_y = c["flops"] / (c["naive_modeled_us"] * 1e-6) / 1e12
            ax.plot([x, x], [naive_y, y], color=color, lw=0.6, alpha=0.6)
            ax.plot([x], [naive_y], "o", mfc="none", color=color, ms=6, gid=f"naive-{i}",
                    label="naive plan (hollow)" if "naive" not in shown else None)
            shown.add("naive")
        roof = case_roof(c, m)
        rows.append([i + 1, c["name"], fmt(x), fmt(c["modeled_us"]), fmt(y),
                     fmt(c.get("naive_modeled_us")), fmt(naive_y),
                     fmt(c["naive_modeled_us"] / c["modeled_us"]) if naive_y else "-",
                     fmt(100 * y / (roof / 1e12))])
    # case numbers beside the plan markers; cases that land on the same spot share one label
    spots = {}
    for i, (x, y) in enumerate(zip(ai, tflops)):
        spots.setdefault((round(math.log10(x) * 8), round(math.log10(y) * 8)), []).append(
            (i + 1, x, y))
    for group in spots.values():
        _, x, y = group[0]
        ax.annotate(",".join(str(n) for n, _, _ in group), (x, y), textcoords="offset points",
                    xytext=(4, 3), fontsize=7)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of least DDR traffic)")
    ax.set_ylabel("achieved TFLOP/s (modeled device time)")
    ax.set_title("op library on the cycle model: plan (filled) and naive plan (hollow)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    note = (f"<p>Not on the chart (no FLOPs: planning figures, not a device run): "
            f"{html.escape(', '.join(skipped))}.</p>" if skipped else "")
    source = (f"<p>Roofs: DDR {bw / 1e9:.1f} GB/s (<code>ddr_bytes_per_s</code>); matrix peak "
              f"per dtype = 2 FLOP x <code>mm_peak_macs_per_cycle</code> x "
              f"{m['num_cores']} cores x {m['clock_hz'] / 1e9:g} GHz; vector = 16-bit lanes x "
              f"corelets x cores x clock. From {html.escape(m.get('source', '?'))}. "
              "FLOPs: 2 per useful MAC (attention: the keys each query sees), softmax 5 vector "
              "operations per element; bytes: every input read and every output written once. "
              "The naive plan does the same work, so it sits at the same intensity.</p>")
    return svg(fig) + source + note + table(
        ["#", "case", "FLOP/byte", "plan us", "plan TFLOP/s", "naive us", "naive TFLOP/s",
         "naive / plan", "% of roof"], rows)


# --- functional speed against libtorch (torch_compare.json) ---

def speed_section(path):
    d = load_json(path, "spyre_engine_torch_compare --json (engine/bench/torch_compare.cpp)")
    try:
        target, rows = d["target_ratio"], d["rows"]
    except (KeyError, TypeError) as e:
        raise LeftOut(f"{path} lacks 'target_ratio' or 'rows'") from e
    if not rows:
        raise LeftOut(f"{path} has no rows")
    labels = [f"{r['size']} {r['dtype']}" for r in rows]
    ratios = [r["ratio_1thread_cpu"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    ys = list(range(len(rows)))[::-1]
    for y, r, lab in zip(ys, ratios, labels):
        met = r is not None and r <= target
        ax.barh(y, r if r is not None else 0, color="tab:green" if met else "tab:red",
                gid=f"ratio-{lab.replace(' ', '-')}")
        ax.annotate("failed" if r is None else f"{r:.2f}", (r or 0, y), xytext=(3, -3),
                    bbox=dict(fc="white", ec="none", pad=0.3),
                    textcoords="offset points", fontsize=7)
    ax.axvline(target, color="black", ls="--", lw=1, gid="target",
               label=f"target {target:g}x (engine <= {target:g} x libtorch)")
    ax.set_yticks(ys, labels)
    ax.set_xlabel("engine time / libtorch time, one thread each (CPU time of the thread)")
    ax.set_title("functional engine speed against libtorch (green: target met)")
    ax.legend(loc="lower right", fontsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    info = (f"<p>{d.get('met', '?')} of {d.get('total', '?')} met. Engine kernels "
            f"{html.escape(str(d.get('engine_kernels', '?')))}, libtorch "
            f"{html.escape(str(d.get('libtorch', '?')))}, median of "
            f"{d.get('repetitions', '?')}; load average "
            f"{html.escape(str(d.get('load_average_start', '?')))} at start, "
            f"{html.escape(str(d.get('load_average_end', '?')))} at end.</p>")
    return svg(fig) + info + table(
        ["size", "dtype", "engine CPU ms", "libtorch CPU ms", "ratio", "target", "wall ratio",
         "modeled us", "max |d|"],
        [[r["size"], r["dtype"], fmt(r.get("engine_1thread_cpu_ms")),
          fmt(r.get("torch_1thread_cpu_ms")), fmt(r["ratio_1thread_cpu"]),
          "met" if r.get("target_met") else "MISSED",
          fmt(r["engine_1thread_wall_ms"] / r["torch_1thread_wall_ms"]
              if r.get("engine_1thread_wall_ms") and r.get("torch_1thread_wall_ms") else None),
          fmt(r.get("modeled_us")), fmt(r.get("max_abs_diff"), 2)] for r in rows])


# --- eager against torch.compile (torch_compile.json) ---

MODES = ["eager", "library", "compiled", "compiled+replay", "reduce-overhead"]


def compile_section(path):
    d = load_json(path, "torch_spyre/tools/compile_bench.py --json")
    recs = d.get("records") if isinstance(d, dict) else None
    if not recs:
        raise LeftOut(f"{path} has no records")
    cases = list(dict.fromkeys(r["case"] for r in recs))
    modes = [m for m in MODES if any(r["mode"] == m for r in recs)]
    modes += [m for m in dict.fromkeys(r["mode"] for r in recs) if m not in modes]
    by = {(r["case"], r["mode"]): r for r in recs}
    panels = [("modeled_us", "modeled device time (us)")]
    if any(r.get("host_us") for r in recs):
        panels.append(("host_us", "host time per call (us)"))
    # one bar slot per (case, mode) the file has, cases top down with a gap between them
    slot, ticks, y = {}, [], 0.0
    for case in cases:
        present = [m for m in modes if (case, m) in by]
        for m in present:
            slot[(case, m)] = y
            y -= 1
        ticks.append(y + 1 + (len(present) - 1) / 2)
        y -= 0.7
    height = 0.2 * -y + 1.5
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), height),
                             sharey=True, squeeze=False)
    fig.subplots_adjust(top=1 - 0.75 / height)  # room for the title and the legend
    colors = plt.get_cmap("tab10")
    for ax, (key, title) in zip(axes[0], panels):
        for j, mode in enumerate(modes):
            bars = [(slot[k], by[k].get(key)) for k in slot if k[1] == mode]
            drawn = [(yy, v) for yy, v in bars if v]
            if drawn:
                ax.barh([yy for yy, _ in drawn], [v for _, v in drawn], height=0.85,
                        color=colors(j), label=mode, gid=f"{key}-{mode}")
            for yy, v in bars:
                ax.annotate(fmt(v) if v else "none recorded", (v or 0, yy), xytext=(3, 0),
                            xycoords=("data" if v else "axes fraction", "data"),
                            textcoords="offset points", va="center", fontsize=6,
                            color="black" if v else "gray")
        ax.set_xscale("log")
        ax.set_xlabel(title)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].set_yticks(ticks, cases)
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    fig.legend([handles[m] for m in modes if m in handles], [m for m in modes if m in handles],
               loc="upper center", ncol=len(modes), fontsize=7,
               bbox_to_anchor=(0.5, 1 - 0.3 / height))
    fig.suptitle("torch.compile against eager on the simulator, per model", y=1 - 0.05 / height)
    note = ("<p>Bars per model and mode; <i>none recorded</i>: the file has no figure there "
            "(the op profiler does not see a replayed graph's launches; the row kernels are not "
            "timed on the host).</p>")
    return svg(fig) + note + table(
        ["case", "mode", "launches", "submissions", "modeled us", "host us"],
        [[r["case"], r["mode"], fmt(r.get("launches")), fmt(r.get("submissions")),
          fmt(r.get("modeled_us")), fmt(r.get("host_us"))] for r in recs])


# --- the page ---

def git_commit():
    try:
        rev = subprocess.run(["git", "-C", TOP, "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", TOP, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (git cannot read the checkout)"
    return rev + (" with uncommitted changes" if dirty else "")


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "?")
    except OSError:
        pass
    return (f"{socket.gethostname()}: {cpu}, {os.cpu_count()} CPUs, {platform.system()} "
            f"{platform.release()}")


SECTIONS = [("Op library on the roofline", "model.json", roofline_section),
            ("Functional speed against libtorch", "torch_compare.json", speed_section),
            ("torch.compile against eager", "torch_compile.json", compile_section)]

STYLE = """body{font-family:sans-serif;max-width:70em;margin:1em auto;font-size:14px}
table{border-collapse:collapse;font-size:12px;margin:.5em 0 2em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
td:nth-child(2),th:nth-child(2){text-align:left}
p.left-out{color:#a00}svg{max-width:100%;height:auto}"""


def report(bench_dir):
    """The whole HTML page."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>make bench</title>"
             f"<style>{STYLE}</style></head><body>",
             "<h1>make bench</h1>",
             f"<p>Machine: {html.escape(machine())}<br>Date: {now}<br>"
             f"Commit: {html.escape(git_commit())}<br>Inputs: {html.escape(bench_dir)}</p>"]
    for title, name, section in SECTIONS:
        path = os.path.join(bench_dir, name)
        parts.append(f"<h2>{html.escape(title)}</h2>")
        try:
            body = section(path)
            written = datetime.datetime.fromtimestamp(os.path.getmtime(path),
                                                      datetime.timezone.utc)
            parts.append(f"<p>From {html.escape(path)}, written "
                         f"{written.strftime('%Y-%m-%d %H:%M UTC')}.</p>" + body)
        except LeftOut as e:
            parts.append(f"<p class='left-out'>Left out: {html.escape(str(e))}.</p>")
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            parts.append(f"<p class='left-out'>Left out: {html.escape(path)} does not have the "
                         f"expected fields ({type(e).__name__}: {html.escape(str(e))}).</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench-dir", default="build/bench", help="where the JSON inputs are")
    ap.add_argument("--out", help="the HTML file (default: BENCH_DIR/report.html)")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.bench_dir, "report.html")
    page = report(args.bench_dir)
    with open(out, "w") as f:
        f.write(page)
    left_out = page.count("class='left-out'")
    print(f"wrote {out} ({len(SECTIONS) - left_out} of {len(SECTIONS)} sections"
          f"{', the others left out: see the file' if left_out else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
