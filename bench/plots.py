"""The benchmark plots (PNG, matplotlib from Debian's python3-matplotlib), drawn by
run_all.py from the results it has just written: the latency distributions, the memory
of each side by role, tokenizer throughput beside tiktoken, and the soak over time."""

import csv
import gzip

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def latency(csv_paths, titles, out):
    """One panel per geometry: the distribution of each method's per-call latency, as the
    fraction of calls slower than x (log-log), so the tail up to p99.9 is visible."""
    fig, axes = plt.subplots(1, len(csv_paths), figsize=(7 * len(csv_paths), 5), squeeze=False)
    for ax, path, title in zip(axes[0], csv_paths, titles):
        by = {}
        with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
            for row in csv.DictReader(f):
                by.setdefault(row["method"], []).append(int(row["ns"]))
        for method, ns in by.items():
            x = np.sort(np.asarray(ns, dtype=np.float64) / 1e3)
            y = 1.0 - np.arange(len(x)) / len(x)
            ax.step(x, y, where="post", label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(1e-4, 1.05)
        ax.set_xlabel("time to the next batch (us)")
        ax.set_ylabel("fraction of calls slower")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def memory(mem, out):
    """PSS of each side stacked by role, with the RSS sum printed above each bar."""
    sides = [("shmfeed", "shmfeed (launcher + 2 producers + 2 ranks)"),
             ("dataloader", "DataLoader (2 ranks x 2 workers)")]
    roles = []
    for key, _ in sides:
        for p in mem[key]["procs"]:
            if p["role"] not in roles:
                roles.append(p["role"])
    fig, ax = plt.subplots(figsize=(8, 5.5))
    labelled = set()
    for i, (key, _) in enumerate(sides):
        bottom = 0.0
        for j, role in enumerate(roles):
            v = sum(p["pss"] for p in mem[key]["procs"] if p["role"] == role) / 1024
            if v:
                ax.bar(i, v, bottom=bottom, color=f"C{j}",
                       label=None if role in labelled else role)
                labelled.add(role)
                bottom += v
        rss = mem[key]["totals_kib"]["rss"] / 1024
        ax.text(i, bottom, f"PSS {bottom:.0f} MiB\n(RSS sum {rss:.0f} MiB)", ha="center",
                va="bottom")
    ax.set_xticks(range(len(sides)))
    ax.set_xticklabels([label for _, label in sides])
    ax.set_ylabel("PSS (MiB)")
    ax.set_title("host memory of 2 ranks and their data pipeline")
    ax.margins(y=0.2)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def tokenizer(rows, out):
    """MB/s per core of each encoding and text, shmfeed beside the peers measured."""
    labels = [f"{r['encoding'].replace('_base', '')}\n{r['file']}" for r in rows]
    who = [w for w in ("shmfeed", "tiktoken", "bpe_openai", "tokendagger")
           if any(r.get(w + "_mb_s") for r in rows)]
    x = np.arange(len(rows))
    width = 0.8 / len(who)
    fig, ax = plt.subplots(figsize=(12, 4.8))
    for i, w in enumerate(who):
        ax.bar(x - 0.4 + width * (i + 0.5), [r.get(w + "_mb_s") or 0 for r in rows], width,
               label=w.replace("_", "-"))
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("MB/s on one core")
    ax.set_title("tokenizer throughput")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def soak(data, out):
    """RSS of every process and the delivered tokens/s, over the soak."""
    t0 = data["t0"]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    series = {}
    for s in data["samples"]:
        for p in s["procs"]:
            series.setdefault((p["role"], p["pid"]), []).append(
                ((s["t"] - t0) / 60, p["rss"] / 1024))
    for (role, pid), pts in series.items():
        a1.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=f"{role} {pid}")
    a1.set_ylabel("RSS (MiB)")
    a1.set_yscale("log")
    a1.legend(fontsize=7)
    a1.grid(True, alpha=0.3)
    rates = data["summary"]["rates"]
    a2.plot([r["t"] / 60 for r in rates], [r["tokens_per_s"] / 1e6 for r in rates], marker=".")
    a2.axvline(data["warmup_s"] / 60, color="grey", linestyle=":", label="end of warm-up")
    a2.set_ylabel("M tokens/s to 2 ranks")
    a2.set_xlabel("minutes")
    a2.set_ylim(bottom=0)
    a2.legend(fontsize=8)
    a2.grid(True, alpha=0.3)
    fig.suptitle("soak: shmfeed run, raw text, 2 producers, 2 ranks")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
