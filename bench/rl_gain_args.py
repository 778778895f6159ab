"""The command line of bench/rl_gain.py: every option, its default and what it changes."""
from __future__ import annotations

import argparse
from pathlib import Path

from bench.protocol import PROTOCOLS, SUITE_ROOTS
from bench.recipe_inputs import override_key
from imagination.loop.config import LoopConfig

ARMS = ("start", "control", "anchor", "recipe")  # imagination/loop/arms.py


def parser(doc: str) -> argparse.ArgumentParser:
    """bench/rl_gain.py's argument parser, `doc` its description."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", choices=sorted(PROTOCOLS), default="v2",
                   help="v2: imagination's own gain against every control (the benchmark); v1: the recorded first "
                        "protocol (LIBERO-Spatial tasks 0-4, a 750-step start)")
    p.add_argument("--suite", choices=sorted(SUITE_ROOTS), default="",
                   help="protocol v2 on this suite, with the setting bench/choose_start.py recorded for it under its "
                        "root (libero_spatial: the recorded protocol v2); default: the protocol's own")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS),
                   help="which arms to run and score (the anchor arm runs only when the recipe has an anchor)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the recipe's RL seeds")
    p.add_argument("--min-seeds", type=int, default=3, help="seeds PASS needs")
    p.add_argument("--root", default="", help="the protocol's folder (default: the protocol's own); a variant's "
                                              "own, e.g. with --bc-augment-noise")
    p.add_argument("--bc-augment-noise", type=float, default=None,
                   help="the protocol's BC start trained with pixel noise up to this std (BCConfig.augment_noise); a "
                        "variant of the protocol: give it its own --root")
    p.add_argument("--bc-steps", type=int, default=None,
                   help="the protocol's BC start trained for this many steps; a variant of the protocol unless it is "
                        "the protocol's: give it its own --root")
    p.add_argument("--bc-task-weights", type=float, nargs="*", default=None,
                   help="the protocol's BC start trained with these per-task shares of its draws (BCConfig."
                        "task_weights, task 0 first); a variant of the protocol")
    p.add_argument("--near-miss-kinds", nargs="+", default=None, metavar="KIND",
                   help="the recipe's near-miss grasps: episode j of a task runs KIND[j %% len] (expert or a "
                        "perturbation kind; default three near_miss and one expert in four); e.g. near_miss: no clean "
                        "expert among them. Its own folder of grasps; the real-data control imitates their successes")
    p.add_argument("--own-drawn-layouts", type=int, default=None, metavar="N",
                   help="record the start's own rollouts also on N drawn layouts of each task (fresh placements, "
                        "never a benchmark init state): more real starts for RL, in the recipe's real budget and so "
                        "in the real-data control's; reward grasp recipes, their own folder own_rollouts_drawnN")
    p.add_argument("--run", default="",
                   help="a finished loop run (make demo): takes bc/, world_model/ and data/ from it")
    p.add_argument("--bc", default="", help="BC policy (Policy.save file); with none of --run/--bc/--world-model/"
                                            "--data, the protocol's own are built or reused")
    p.add_argument("--world-model", default="", help="world model file")
    p.add_argument("--data", default="", help="dataset whose episodes start imagined ones")
    p.add_argument("--rl-run", nargs="+", default=[], help="finished imagine_rl.py out_dirs to evaluate instead of "
                                                           "running RL here, one per seed (each config.yaml must "
                                                           "name --bc as the starting policy)")
    p.add_argument("--preset", default="quick", help="loop preset whose stage configs build the protocol's data, "
                                                     "world model and BC, and set the evaluation (configs/loop/)")
    p.add_argument("--recipe", default="", help="RL preset (configs/rl/; default the protocol's); with the "
                                                "protocol's own start, pointed at the protocol's inputs")
    p.add_argument("--rl", nargs="*", default=[], help="extra overrides of the recipe, e.g. iterations=20 (not "
                                                       "an input the protocol sets: policy, its judge's inputs)")
    p.add_argument("--tasks", type=int, nargs="+", default=None, help="default: the protocol's")
    p.add_argument("--eval-tasks", type=int, nargs="+", default=None,
                   help="evaluate every arm on these of the protocol's tasks only (default: all of them); the data, "
                        "the start and the recipe's inputs stay the protocol's")
    p.add_argument("--episodes-per-task", type=int, default=None, help="default: the protocol's (30 x 5 tasks = "
                                                                       "150 episodes per arm)")
    p.add_argument("--init-state-offset", type=int, default=None,
                   help="first init state of the benchmark's jobs (default: the protocol's, 20); 10000 + k: drawn "
                        "layouts from k (choose jobs without limit: 11000 starts at drawn layout 1000)")
    p.add_argument("--num-envs", type=int, default=2, help="real simulators in parallel (one per core)")
    p.add_argument("--image-size", type=int, default=0,
                   help="render every arm at this size, which the policy resizes to its own (0: the policy's size)")
    p.add_argument("--out-dir", default="", help="where RL and every evaluation go (default <root>/run)")
    p.add_argument("--threshold", type=float, default=10.0, help="minimum own gain in percentage points")
    p.add_argument("--gate", choices=("none", "task"), default="none",
                   help="task: each seed's policy acts only on the tasks where its real evaluation on the choose jobs "
                        "(init states 0-19) shows it no worse than the start by --gate-margin (bench/task_gate.py); "
                        "a recipe of its own on the ledger")
    p.add_argument("--gate-margin", type=float, default=LoopConfig.adopt_margin,
                   help="success-rate margin of the per-task gate (imagination/loop/adopt.py)")
    p.add_argument("--acts", choices=("always", "holding"), default="always",
                   help="holding: every arm but the start acts only once the gripper closes, the start while it is "
                        "open (policies/phase_switch.py), for a recipe that trains the carry and the placement; "
                        "the controls are switched alike; a recipe of its own on the ledger")
    p.add_argument("--rl-from", choices=("start", "control"), default="start",
                   help="control: the recipe's RL starts from arm b, the start fine-tuned on the successful real "
                        "episodes the recipe consumes (same real data, no more), so the own gain over b is what "
                        "imagined RL adds to them; needs the control arm; a recipe of its own on the ledger")
    p.add_argument("--refine-world-model", type=int, default=0, metavar="STEPS",
                   help="fine-tune the protocol's world model for STEPS on its data and the start's own rollouts (the "
                        "real episodes the recipe already consumes: no arm's budget grows) before RL; the recipe and "
                        "its anchor control imagine in it (imagination/loop/refine.py); a recipe of its own on the "
                        "ledger; 0: off")
    p.add_argument("--world-model-preset", default="", metavar="NAME",
                   help="train a world model of this preset (configs/world_model/, e.g. rl_gain_gpu on one GPU) afresh "
                        "on the protocol's data, held out as the protocol's model held it out, and the start's own "
                        "rollouts, into <root>/world_model_<NAME>; the recipe and its anchor control imagine in it "
                        "(imagination/loop/refine.py); a recipe of its own on the ledger; not with "
                        "--refine-world-model")
    p.add_argument("--recipe-world-model", default="", metavar="PATH",
                   help="a world model file the recipe and its anchor control imagine in instead of the protocol's, "
                        "e.g. one trained by scripts/train_world_model.py with other settings or on another machine; "
                        "the protocol's data, start and judge stay its own; a recipe of its own on the ledger; not "
                        "with --refine-world-model or --world-model-preset")
    p.add_argument("--recipe-goal-reader", default="", metavar="PATH",
                   help="a goal reader file the recipe's goal judge reads imagined frames with instead of the "
                        "protocol's, e.g. an outcome reader (scripts/train_goal_reader.py target=outcome); recipes "
                        "with reward goal only; a recipe of its own on the ledger")
    p.add_argument("--loop-rounds", type=int, default=0, metavar="N",
                   help="after the recipe's RL, N loop rounds (imagination/loop/rounds.py): each seed's policy is "
                        "recorded on the training init states of the tasks it imagines (real episodes, counted in the "
                        "recipe's budget), the grasp judge refit on every recorded episode, and RL run again from "
                        "that policy on its own recorded frames; a second real-data control (control_loop) imitates "
                        "every success the recipe then consumed; grasp recipes of the protocol's own start only; a "
                        "recipe of its own on the ledger; 0: off")
    p.add_argument("--loop-adopt-margin", type=float, default=0.10, metavar="M",
                   help="with --loop-rounds: a round's policy replaces the one its seed keeps only when, paired job "
                        "by job on the recorded jobs, it is not shown worse by more than M (a success-rate "
                        "difference; imagination/loop/adopt.py); the RL start is recorded first and the last "
                        "round's policies once more to decide them (real episodes, counted in the budget), and "
                        "each seed is scored with the policy it kept; 1: every round adopted, nothing more recorded "
                        "(default: %(default)s)")
    p.add_argument("--smoke", action="store_true",
                   help="the protocol end to end on --suite in minutes (bench/protocol.py smoke_protocol: its first "
                        "task, one init state per use, tiny models, one RL iteration, one seed) under "
                        "outputs/bench/smoke/<suite> unless --root: checks that every stage runs; its figures measure "
                        "nothing")
    return p



# the recipe's fields every run takes from the protocol or from --bc/--world-model/--data, never from --rl (with the
# protocol's own start, recipe_config's dry run refuses the rest it sets: a goal recipe's reader, a grasp judge's data)
SET_BY_THE_PROTOCOL = ("policy", "world_model", "start_data", "out_dir")


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, through `p.error` (one line, exit 2), options that contradict each other or are out of range, before
    anything is built: what can be told from the command line alone."""
    if args.suite and args.protocol != "v2":
        p.error(f"--suite: runs protocol v2 on a suite; --protocol {args.protocol} is LIBERO-Spatial's recorded one")
    if args.rl_from == "control" and not {"control", "recipe"} <= set(args.arms):
        p.error("--rl-from control: RL starts from the real-data control, which must be scored beside it: "
                "--arms must hold control and recipe")
    elsewhere = args.run or args.bc or args.world_model or args.data or args.rl_run
    for flag, given in (("--near-miss-kinds", args.near_miss_kinds), ("--own-drawn-layouts", args.own_drawn_layouts)):
        if given and elsewhere:
            p.error(f"{flag}: the protocol records its recipe's inputs itself; not with --run, --bc, --world-model, "
                    "--data or --rl-run")
    if args.own_drawn_layouts is not None and args.own_drawn_layouts < 0:
        p.error(f"--own-drawn-layouts: expected an integer >= 0, got {args.own_drawn_layouts}")
    if args.refine_world_model and elsewhere:
        p.error("--refine-world-model: refines the protocol's own world model on its own rollouts; not with --run, "
                "--bc, --world-model, --data or --rl-run")
    if args.world_model_preset and (elsewhere or args.refine_world_model):
        p.error("--world-model-preset: trains the protocol's world model afresh on its data and own rollouts; not "
                "with --refine-world-model, --run, --bc, --world-model, --data or --rl-run")
    if args.recipe_world_model:
        if elsewhere or args.refine_world_model or args.world_model_preset:
            p.error("--recipe-world-model: the recipe imagines in this model beside the protocol's own inputs; not "
                    "with --refine-world-model, --world-model-preset, --run, --bc, --world-model, --data or --rl-run")
        if not Path(args.recipe_world_model).is_file():
            p.error(f"--recipe-world-model: {args.recipe_world_model} is not a file (expected a world_model.pt "
                    "written by scripts/train_world_model.py)")
    if args.recipe_goal_reader and not Path(args.recipe_goal_reader).is_file():
        p.error(f"--recipe-goal-reader: {args.recipe_goal_reader} is not a file (expected a reader.pt written by "
                "scripts/train_goal_reader.py)")
    if args.loop_rounds < 0:
        p.error(f"--loop-rounds: expected a number of rounds >= 0 (0: off), got {args.loop_rounds}")
    if args.loop_rounds and (elsewhere or args.gate == "task" or args.acts == "holding" or "recipe" not in args.arms):
        p.error("--loop-rounds: records and retrains the recipe's own seeds from the protocol's start; needs the "
                "recipe arm, and not with --run, --bc, --world-model, --data, --rl-run, --gate task or --acts holding")
    if not 0 <= args.loop_adopt_margin <= 1:
        p.error(f"--loop-adopt-margin: expected a success-rate difference in [0, 1], got {args.loop_adopt_margin}")
    if args.refine_world_model < 0:
        p.error(f"--refine-world-model: expected fine-tune steps >= 0 (0: off), got {args.refine_world_model}")
    if set_here := [o for o in args.rl if override_key(o) in SET_BY_THE_PROTOCOL]:
        # they would be replaced by the protocol's own inputs without a word: the run would not be the one asked for
        p.error(f"--rl {' '.join(set_here)}: the benchmark sets the recipe's {', '.join(SET_BY_THE_PROTOCOL)} "
                "itself; give another start with --bc (with --world-model and --data), another folder with --out-dir")
    if args.acts == "holding" and args.gate == "task":
        p.error("--acts holding: not with --gate task (one composition of the start and an arm at a time)")


__all__ = ["ARMS", "SET_BY_THE_PROTOCOL", "check_args", "parser"]
