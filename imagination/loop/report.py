"""A self-contained report of a co-evolution loop run: run_dir/report.md, report.html and report_assets/.

Reads run_dir/loop.json and the files it points to (evaluations, RL metrics, BC loss, world-model logs)
and writes tables, plots and video links. Links are relative to run_dir and files outside it are copied
into report_assets/linked/, so the folder can be moved or zipped. Missing pieces read "not run".

    python -m imagination.loop.report RUN_DIR
"""
from __future__ import annotations

import html
import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from envs.outcome import OUTCOMES
from imagination.eval.closed_loop import paired_separation
from imagination.loop.adopt import adoption_lines
from imagination.loop.report_files import RunFiles, load_loop, read_csv, tensorboard_scalars
from imagination.loop.report_gain import own_gain_lines
from infra.atomic import atomic_write_text
from infra.provenance import provenance_markdown

NOT_RUN = "not run"
REAL_VIDEOS_PER_PHASE = 4
SIGNAL_AUC = 0.6  # within-task AUC under which the report warns that the reward does not see real failures
CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}img{max-width:100%}code{background:#f3f3f3;padding:0 3px}
blockquote{margin:1em 0;padding:.6em 1em;border-left:6px solid #d9480f;background:#fff4e6}"""


def _pct(x: float) -> str:
    return f"{100 * x:.0f}"


def _cell(block: dict | None) -> str:
    """'60% (6/10) [31, 83]': rate, counts and 95% interval in percent."""
    if not block:
        return NOT_RUN
    lo, hi = block["ci95"]
    return f"{_pct(block['success_rate'])}% ({block['successes']}/{block['episodes']}) [{_pct(lo)}, {_pct(hi)}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731 - a '|' inside a cell would split it
    return (["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(map(esc, r)) + " |" for r in rows] + [""])


def _short(text: str, n: int = 48) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _stages(loop: dict) -> list[str]:
    stages = loop.get("stages", [])
    total = sum(float(s.get("seconds") or 0) for s in stages)
    h, m = divmod(round(total / 60), 60)
    rows = [[s["name"], str(s.get("status", "?")), f"{float(s.get('seconds') or 0) / 60:.1f}"] for s in stages]
    return [f"Total wall time: **{h} h {m:02d} min** ({total:.0f} s)", "", "## Stages", ""] + (
        _table(["stage", "status", "minutes"], rows) if rows else [f"No stages: {NOT_RUN}.", ""])


def _real(run: RunFiles, phases: list[dict], real: dict[str, dict | None]) -> list[str]:
    out = ["## Real LIBERO success", "",
           "Success rate (successes/episodes) [95% Wilson interval, %] per task, one column per policy.", ""]
    if not phases:
        return out + [f"Policies: {NOT_RUN}.", ""]
    # task keys: "3", or "libero_object/3" in a loop over several suites (imagination.eval.suites.merge_results)
    tasks = sorted({t for r in real.values() if r for t in r.get("per_task", {})},
                   key=lambda t: (t.rpartition("/")[0], int(t.rpartition("/")[2])))
    names = {t: r["per_task"][t].get("instruction", "") for r in real.values() if r for t in tasks
             if t in r["per_task"]}
    rows = [[f"{t}: {_short(names.get(t, ''))}"]
            + [_cell((real[p["name"]] or {}).get("per_task", {}).get(t)) if real[p["name"]] else NOT_RUN
               for p in phases] for t in tasks]
    ran: dict[str, dict] = {name: r for name, r in real.items() if r}  # the phases with results
    rows.append(["**all**"] + [_cell(ran[p["name"]]["overall"]) if p["name"] in ran else NOT_RUN for p in phases])
    out += _table(["task"] + [p["label"] for p in phases], rows)
    done = [p for p in phases if p["name"] in ran]
    if not done:
        return out
    failed = [(p["label"], ran[p["name"]]["overall"]) for p in done if "failures" in ran[p["name"]]["overall"]]
    if failed:  # how the real failures happened, from the simulator's objects (envs.outcome)
        kinds = [k for k in OUTCOMES[1:] if any(k in b["failures"] for _, b in failed)] or list(OUTCOMES[1:3])
        out += ["How the real episodes failed (the goal's object never lifted: a missed grasp; lifted, not "
                "placed: dropped or put down off target):", ""]
        out += _table(["policy", "failures"] + list(kinds), [[label, str(b["episodes"] - b["successes"])]
                                                              + [str(b["failures"].get(k, 0)) for k in kinds]
                                                              for label, b in failed])
    fig = Figure(figsize=(11, 3.8))
    ax0, ax1 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, max(2, len(tasks))]})
    for k, p in enumerate(done):
        blocks = [ran[p["name"]]["overall"]] + [ran[p["name"]]["per_task"].get(t) for t in tasks]
        rate = np.array([b["success_rate"] if b else np.nan for b in blocks])
        err = np.array([[b["success_rate"] - b["ci95"][0], b["ci95"][1] - b["success_rate"]] if b else [0, 0]
                        for b in blocks]).T
        ax0.bar(k, rate[0], yerr=err[:, :1], capsize=4, color=f"C{k}")
        width = 0.8 / len(done)
        ax1.bar(np.arange(len(tasks)) + (k - (len(done) - 1) / 2) * width, rate[1:], width, yerr=err[:, 1:],
                capsize=2, color=f"C{k}", label=p["label"])
    ax0.set_xticks(range(len(done)), [p["label"] for p in done], rotation=20, ha="right")
    ax1.set_xticks(range(len(tasks)), tasks, rotation=30 if any("/" in t for t in tasks) else 0)
    ax1.set(xlabel="task", title="per task")
    ax0.set_title("all tasks")
    ax1.legend(fontsize=8)
    for ax in (ax0, ax1):
        ax.set(ylim=(0, 1.05), ylabel="real success rate (95% CI)")
    return out + [f"![Real success per policy and task]({run.save(fig, 'real_success.png')})", ""]


def _signal(im: dict | None, re: dict | None) -> tuple[str, float]:
    """The reward's closed-loop signal on one phase's jobs: (cell, AUC within task or nan)."""
    sep = paired_separation(re, im) if im and re else None
    if sep is None:
        return "–", float("nan")
    if np.isnan(sep.auc_within_task):
        why = "one outcome only" if np.isnan(sep.auc) else f"no task has both outcomes; AUC {sep.auc:.2f}"
        return f"– ({why})", float("nan")
    return f"{sep.auc_within_task:.2f} (AUC {sep.auc:.2f})", sep.auc_within_task


def _imagined(loop: dict, phases: list[dict], real: dict, imagined: dict) -> list[str]:
    out, rows, weak = ["## Imagined vs real success", ""], [], []
    for p in phases:
        im, re = imagined[p["name"]], real[p["name"]]
        gap = f"{100 * (im['overall']['success_rate'] - re['overall']['success_rate']):+.0f} pts" if im and re else "–"
        cell, auc = _signal(im, re)
        if auc < SIGNAL_AUC:
            weak.append(f"{p['label']} ({auc:.2f})")
        rows.append([p["label"], _cell(im["overall"]) if im else NOT_RUN, _cell(re["overall"]) if re else NOT_RUN,
                     gap, cell])
    out += _table(["policy", "imagined", "real", "gap (imagined − real)", "reward signal: AUC within task"], rows)
    out += ["The last column asks whether imagination tells this policy's real successes from its real failures "
            "on the same task: each job's highest imagined success probability against its real outcome "
            "(0.5 = no signal; `scripts/closed_loop_check.py` measures it without the success head ending "
            "episodes).", ""]
    if weak:
        out += [f"> ⚠️ **The reward has little closed-loop signal** for {', '.join(weak)}: within a task, imagined "
                f"success does not follow real success (AUC within task below {SIGNAL_AUC}), so imagined RL's real "
                "effect is a random walk. Improve the world model (more policy episodes in the loop) before "
                "spending more RL on it.", ""]
    labels = {p["name"]: p["label"] for p in phases}
    guard = loop.get("guard") or []
    if not guard:
        return out + [f"Exploitation guard: {NOT_RUN}.", ""]
    for g in guard:
        where = f"round {g.get('round', '?')}, {labels.get(g.get('phase'), g.get('phase', '?'))}"
        excess, margin = float(g.get("gap") or 0), float(g.get("margin") or 0)
        figures = (f"{_pct(float(g.get('imagined_success') or 0))}% imagined vs "
                   f"{_pct(float(g.get('real_success') or 0))}% real, margin {_pct(margin)} points")
        if g.get("fired"):
            out += [f"> ⚠️ **Exploitation warning ({where}):** imagined success exceeds real by "
                    f"{_pct(excess)} points ({figures}); the next round weighted failures up by "
                    f"{float(g.get('failure_weight') or 1):g}×.", ""]
        else:
            out += [f"- Exploitation guard ({where}): gap {_pct(excess)} points is within the margin ({figures}).", ""]
    return out


def _task_bias(loop: dict) -> list[str]:
    """The grasp judge's per-task offsets of each round (stages `round<r>_task_bias`, imagination/eval/task_bias.py):
    the start policy's real successes per task next to the judge's mean P(success) before and after them."""
    fits = [(s["name"].removesuffix("_task_bias"), s.get("result") or {}) for s in loop.get("stages", [])
            if s["name"].endswith("_task_bias")]
    if not fits:
        return []
    out = ["## The judge's per-task offsets", "",
           "Before each round's RL the grasp judge's level is moved, task by task, to the start policy's real "
           "success on its recorded episodes re-run in imagination (one logit offset a task; the order within a "
           "task is untouched).", ""]
    rows = [[rnd, str(k), f"{t['real_successes']}/{t['jobs']}",
             f"{t['imagined_before']:.2f} → {t['imagined_after']:.2f}", f"{fit['bias'][int(k)]:+.2f}"]
            for rnd, fit in fits for k, t in (fit.get("tasks") or {}).items()]
    return out + _table(["round", "task", "real successes", "judge's mean P(success)", "offset (logit)"], rows)


def _threshold(wm: dict) -> str:
    cal = wm.get("calibration") or {}
    if "threshold" not in cal:
        return "0.5 (not calibrated)" if not cal else f"0.5 ({cal.get('skipped', 'skipped')})"
    return f"{cal['threshold']:.2f} ({cal['balanced_accuracy']:.2f}; {cal['balanced_accuracy_at_default']:.2f})"


def _world_models(run: RunFiles, wms: list[dict]) -> list[str]:
    out, evals, rows = ["## World-model fidelity", ""], {}, []
    for wm in wms:
        ev = run.json(wm.get("eval"))
        if ev is None:
            rows.append([wm["name"]] + [NOT_RUN] * 6 + [_threshold(wm)])
            continue
        evals[wm["name"]] = ev
        f = lambda k, fmt, ev=ev: format(ev[k], fmt) if isinstance(ev.get(k), (int, float)) else "–"  # noqa: E731
        rows.append([wm["name"], f("psnr", ".2f"), f("ssim", ".3f"), f("static_psnr", ".2f"), f("static_ssim", ".3f"),
                     f("success_f1", ".2f"), f("done_f1", ".2f"), _threshold(wm)])
    if not wms:
        return out + [f"World models: {NOT_RUN}.", ""]
    out += ["Open-loop replay of held-out episodes. The still-frame baseline repeats the first frame: a "
            "useful world model beats it.", ""]
    out += _table(["world model", "PSNR (dB)", "SSIM", "still-frame PSNR (dB)", "still-frame SSIM", "success F1",
                   "done F1", "success threshold (balanced acc.)"], rows)
    out += ["The success threshold is calibrated on the data's real episodes replayed in imagination "
            "(`scripts/calibrate_success.py`); balanced accuracy of the episode outcomes, at 0.5 in brackets.", ""]
    curves = {n: e for n, e in evals.items() if e.get("psnr_per_step")}
    if curves:
        fig = Figure(figsize=(7, 3.8))
        ax = fig.subplots()
        statics = [np.asarray(e.get("static_psnr_per_step") or [], float) for e in curves.values()]
        same = all(len(s) == len(statics[0]) and np.allclose(s, statics[0]) for s in statics)
        for k, (name, e) in enumerate(curves.items()):
            ax.plot(np.arange(1, len(e["psnr_per_step"]) + 1), e["psnr_per_step"], color=f"C{k}", label=name)
            if len(statics[k]) and (not same or k == 0):
                ax.plot(np.arange(1, len(statics[k]) + 1), statics[k], "--", color="gray" if same else f"C{k}",
                        label="still frame" if same else f"{name} still frame")
        ax.set(xlabel="frames ahead (open loop)", ylabel="PSNR (dB)")
        ax.legend(fontsize=8)
        out += [f"![PSNR vs horizon]({run.save(fig, 'psnr_vs_horizon.png')})", ""]
    return out


def _curves(run: RunFiles, loop: dict, rl_phases: list[dict]) -> list[str]:
    out = ["## Learning curves", ""]
    bc_dir = run.path(loop.get("bc_dir"))
    bc = read_csv(bc_dir / "loss.csv" if bc_dir else None)
    bc_xy = (bc["step"], bc["loss"]) if "step" in bc and "loss" in bc else \
        tensorboard_scalars(bc_dir / "logs" if bc_dir else None, "bc/loss")
    wm_xy = {wm["name"]: tensorboard_scalars(d / "logs" if (d := run.path(wm.get("train_dir"))) else None,
                                             "train/loss") for wm in loop.get("world_models") or []}
    metrics, rows = {}, []
    for p in rl_phases:
        rl_dir = run.path(p.get("rl"))
        m = read_csv(rl_dir / "metrics.csv" if rl_dir else None)
        res = run.json(str(rl_dir / "result.json")) if rl_dir else None
        if not m and rl_dir is not None:  # metrics.csv comes at the end; a run in progress has its logs only
            (x, rate), (_, ret) = (tensorboard_scalars(rl_dir / "logs", f"imagined_{k}")
                                   for k in ("success_rate", "return"))
            n = min(len(rate), len(ret))  # a log being written may hold one tag of the last iteration only
            m = {"iteration": x[:n], "imagined_success_rate": rate[:n], "imagined_return": ret[:n]} if n else {}
        if "iteration" not in m:
            rows.append([p["label"]] + [NOT_RUN] * 5)
            continue
        metrics[p["label"]] = m
        first_last = lambda k, m=m: f"{m[k][0]:.2f} → {m[k][-1]:.2f}" if k in m else "–"  # noqa: E731
        rows.append([p["label"], str(len(m["iteration"])), first_last("imagined_success_rate"),
                     first_last("imagined_return"), f"{res['seconds'] / 60:.1f}" if res and "seconds" in res else "–",
                     str(res.get("real_env_steps", "–")) if res else "–"])
    fig = Figure(figsize=(11, 7))
    axes = fig.subplots(2, 2).ravel()
    rl_lines = lambda k: {n: (m["iteration"], m[k]) for n, m in metrics.items() if k in m}  # noqa: E731
    panels = [("BC loss", "step", {"BC": bc_xy} if len(bc_xy[0]) else {}, True),
              ("world-model training loss", "step", {n: xy for n, xy in wm_xy.items() if len(xy[0])}, True),
              ("imagined success rate", "RL iteration", rl_lines("imagined_success_rate"), False),
              ("imagined return", "RL iteration", rl_lines("imagined_return"), False)]
    for ax, (title, xlabel, lines, log) in zip(axes, panels):
        ax.set(title=title, xlabel=xlabel)
        for name, (x, y) in lines.items():
            ax.plot(x, y, label=name, marker="o" if len(x) < 20 else None, ms=3)  # a short run is a few dots
        if not lines:
            ax.text(0.5, 0.5, NOT_RUN, ha="center", va="center", transform=ax.transAxes, color="gray")
            ax.set(xticks=[], yticks=[])
            out.append(f"- {title}: {NOT_RUN}")
        else:
            ax.legend(fontsize=8)
            if log and all(np.nanmin(y) > 0 for _, y in lines.values()):
                ax.set_yscale("log")  # losses span orders of magnitude
    fig.tight_layout()
    out += ([""] if len(out) > 2 else []) + [f"![Learning curves]({run.save(fig, 'learning_curves.png')})", ""]
    if rl_phases:
        out += ["Imagined RL (no real simulator steps are expected):", ""]
        out += _table(["policy", "iterations", "imagined success first → last", "imagined return first → last",
                       "minutes", "real env steps"], rows)
    return out


def _data(loop: dict) -> list[str]:
    data = loop.get("data")
    if not isinstance(data, dict) or not data:
        return ["## Data", "", f"Data aggregation: {NOT_RUN}.", ""]
    keys = ("episodes_before", "episodes_after", "policy_episodes_added", "failures_added")
    return ["## Data", ""] + _table(["", "episodes"], [[k.replace("_", " "), str(data.get(k, NOT_RUN))] for k in keys])


def _videos(run: RunFiles, loop: dict, phases: list[dict], real: dict) -> list[str]:
    out = ["## Videos", "", "### World model (real | imagined | difference)", ""]
    for wm in loop.get("world_models") or []:
        ev_path = run.path(wm.get("eval"))
        vids = sorted((ev_path.parent / "videos").glob("*.mp4")) if ev_path and ev_path.is_file() else []
        wm_links = ", ".join(f"[{v.stem}]({run.link(v)})" for v in vids)
        out.append(f"- {wm['name']}: {wm_links or NOT_RUN}")
    out += ["", "### Real evaluation", ""]
    for p in phases:
        res, folder = real[p["name"]], run.path(p.get("real"))
        links: list[str] = []
        for e in (res or {}).get("episodes", []):
            video = run.find(e.get("video"), folder.parent / "videos" if folder else None) if e.get("video") else None
            if video is not None and len(links) < REAL_VIDEOS_PER_PHASE:
                tag = "success" if e.get("success") else "fail"
                links.append(f"[task {e.get('task_id')} init {e.get('init_state_id')} {tag}]({run.link(video)})")
        out.append(f"- {p['label']}: " + (", ".join(links) or NOT_RUN))
    out += ["", "### Imagined RL episodes", ""]
    for p, rl_dir in [(p, run.path(p.get("rl"))) for p in phases]:
        if rl_dir is None:  # no RL in this phase
            continue
        res = run.json(str(rl_dir / "result.json")) or {}
        vids = [v for v in (run.find(v, rl_dir / "videos") for v in res.get("videos", [])) if v is not None]
        out.append(f"- {p['label']}: " + (", ".join(f"[{v.stem}]({run.link(v)})" for v in vids) or NOT_RUN))
    return out + [""]


def write_report(run_dir: str | Path) -> tuple[Path, Path]:
    """Write run_dir/report.md and run_dir/report.html (plots in run_dir/report_assets/); returns both paths."""
    import markdown

    run_dir = Path(run_dir)
    loop = load_loop(run_dir)
    run = RunFiles(run_dir, loop)
    phases = [{**p, "label": str(p.get("label") or p["name"])} for p in loop.get("phases", [])]
    real = {p["name"]: run.json(p.get("real"), results=True) for p in phases}
    imagined = {p["name"]: run.json(p.get("imagined"), results=True) for p in phases}
    name = run_dir.resolve().name
    md = ["# Co-evolution loop report", "", f"Run folder: `{name}`", ""]
    md += (_stages(loop) + _real(run, phases, real) + own_gain_lines(phases, real)
           + adoption_lines(loop.get("adoption") or [])
           + _imagined(loop, phases, real, imagined) + _task_bias(loop)
           + _world_models(run, loop.get("world_models") or []) + _curves(run, loop, [p for p in phases if p.get("rl")])
           + _data(loop) + _videos(run, loop, phases, real) + provenance_markdown(loop.get("provenance")))
    if run.notes:
        md += ["## Notes", ""] + [f"- {n}" for n in dict.fromkeys(run.notes)] + [""]
    text = "\n".join(md)
    body = markdown.markdown(text, extensions=["tables"])
    page = (f'<!doctype html>\n<html><head><meta charset="utf-8"><title>Loop report: {html.escape(name)}'
            f"</title>\n<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")
    paths = run_dir / "report.md", run_dir / "report.html"
    for path, content in zip(paths, (text, page)):
        atomic_write_text(path, content)
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m imagination.loop.report RUN_DIR")
    print(*write_report(sys.argv[1]), sep="\n")
