"""``swinkit predict``: world sizes (and nodes) that were not run, predicted (docs/prediction.md).

Four sources, one command:

    python -m swinkit predict --run --preset cpu --world-sizes 1,2 --predict-from 1
                              # 2 predicted from 1, then run: held out, the error per launch
    python -m swinkit predict --run --preset cpu --world-sizes 1 --predict 2,4 --json p.json
                              # predicted only, nothing run at 2, 4
    python -m swinkit predict --stored p.json --predict 8 --nodes 2,4 --inter-link 12.5,5
                              # from a saved prediction: ring model, 2 and 4 nodes
    python -m swinkit predict --stored p.json --nodes 2,4 --inter-link localhost
                              # the link timed across 2 simulated nodes on this host
    python -m swinkit predict --predict 4,8 --nodes 2   # kept by bench_predict (SWINKIT_PREDICT=1)
    python -m swinkit predict --preset thesis --predict 1,2,4,8   # the thesis, projected
    python -m swinkit predict --preset thesis --predict 1,2,4,8 --precision bf16 --mfu 0.4
    python -m swinkit predict --preset thesis --predict 1,2,4,8 --precision bf16 \
                              --mfu-from results/gpu/gpu_check.json   # MFU measured on a GPU
"""
from __future__ import annotations

import argparse

from swinkit.cli import options
from swinkit.cli.exit_codes import EXIT_OK, describe



def add_parser(sub) -> None:
    p = sub.add_parser("predict", help="world sizes and nodes not run, predicted",
                       description=__doc__, epilog=describe((0, 1, 2, 3)),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_stored(p)
    p.add_argument("--run", action="store_true",
                   help="measure now (the --world-sizes) and predict from that")
    options.add_workload(p)
    options.add_repeats_and_injections(p)
    add_predict_args(p)
    p.set_defaults(scaling="weak")
    options.add_outputs(p, html=False)


PROJECTION_PRECISION_HELP = (
    "thesis projection: each device's compute in this precision, FLOPs / (MFU x its stated "
    "peak of the precision); a system without such math is left out, with the reason "
    "(default fp32; docs/precision.md)")


def add_predict_args(p: argparse.ArgumentParser, precision: bool = True) -> None:
    """The held-out prediction's options (docs/prediction.md); ``precision``: with
    ``--precision`` (a parser that has it already leaves it out)."""
    ints = options.comma_ints
    p.add_argument("--predict", metavar="N1,N2", type=ints("--predict"),
                   help="predict these world sizes without running them: with --run from the "
                        "--world-sizes run now (plus the collectives and loaders timed at each "
                        "N'), with --stored from a saved --predict JSON, on the thesis preset "
                        "as a projection from stated figures; otherwise from the held-out "
                        "report asv's bench_predict kept (--results, --commit, --machine)")
    p.add_argument("--predict-from", metavar="N1,N2", type=ints("--predict-from"),
                   help="with --run: predict each --world-sizes size above these from them "
                        "only, then run it and report the error per launch (held out)")
    p.add_argument("--in-launch", "--same-launch", dest="in_launch", action="store_true",
                   help="removed, refused: use --predict-from (held out) or the paired oracle "
                        "of --run (docs/prediction.md)")
    p.add_argument("--stored", metavar="JSON", help="a --predict --json report to predict from")
    p.add_argument("--link", metavar="GBPS,LATENCY_US", type=options.link("--link"),
                   help="the ring model's link (from a stored report: default fitted to its "
                        "timings; with the thesis projection: replaces every system's link)")
    p.add_argument("--inter-link", metavar="GBPS,LATENCY_US|localhost",
                   type=options.link("--inter-link", localhost=True),
                   help="with --nodes: the link between nodes; 'localhost' times the stored "
                        "run's buckets across two simulated nodes on this host (two elastic "
                        "agents on localhost) and fits the link to them")
    p.add_argument("--nodes", metavar="K1,K2", type=ints("--nodes"), default=[],
                   help="from a stored report (--stored, or asv's): predict K nodes of the "
                        "stored run's size each")
    p.add_argument("--device-iter-s", type=float,
                   help="thesis projection: one device's iteration alone (default: stated)")
    if precision:   # tools/attribute.py has it from the attribution's options
        options.add_precision(p, PROJECTION_PRECISION_HELP, default="fp32")
    mfu = p.add_mutually_exclusive_group()
    mfu.add_argument("--mfu", type=float,
                     help="thesis projection: the model FLOP utilisation in --precision (e.g. "
                          "a forward/backward component's measured one; default: 0.5, stated)")
    mfu.add_argument("--mfu-from", metavar="JSON",
                     help="thesis projection: the MFU measured in --precision in a saved "
                          "result (tools/gpu_check.py's gpu_check.json, its precision table "
                          "or measure part), the device it ran on said beside it")


def check(args) -> None:
    """The refusals that need no launch (ValueError naming the options)."""
    if args.in_launch:
        from swinkit.predict.supervisor.held_out import IN_LAUNCH_REMOVED
        raise ValueError(IN_LAUNCH_REMOVED)
    projecting = args.preset == "thesis" and args.predict and not (args.stored or args.run)
    if not projecting and ((args.precision or "fp32") != "fp32" or args.mfu is not None
                           or getattr(args, "mfu_from", None)):
        # a run's or a stored prediction's precision is the one its ranks applied
        raise ValueError("--precision and --mfu (--mfu-from) set the thesis projection's device "
                         "compute (--preset thesis --predict N, without --run or --stored)")
    if args.scaling == "strong":
        raise ValueError("--scaling strong: a prediction of world sizes not run assumes weak "
                         "scaling (each rank's work as in the run it is predicted from); use "
                         "--scaling weak")


def command(args) -> int:
    """Held out, predicted only, from stored, or the projection: its lines, and JSON."""
    check(args)
    args.precision = args.precision or "fp32"   # tools/attribute.py's option has no default
    options.export_data_root(args)
    options.default_iters(args, per_preset=args.run)
    report, lines = _predict(args)
    print("\n".join(lines))
    if args.json:
        from swinkit.result_files import write_json_atomic
        write_json_atomic(args.json, report)
        print(f"JSON report: {args.json}")
    return EXIT_OK


def _predict(args) -> tuple[dict, list[str]]:
    import json
    from pathlib import Path

    from swinkit.predict.report.text import held_out_lines
    if args.stored:
        try:
            stored = json.loads(Path(args.stored).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--stored {args.stored}: {exc}") from None
        report = _from_stored(args, stored)
    elif args.run:
        from swinkit.predict.supervisor.held_out import held_out
        from swinkit.injection import parse_injections
        sources = args.predict_from or args.world_sizes
        sizes = args.predict or [ws for ws in args.world_sizes if ws > max(sources)]
        report = held_out(args.preset, sizes, sources, iters=args.iters, repeats=args.repeats,
                          score=not args.predict, injection=parse_injections(args.inject))
    elif args.preset == "thesis" and args.predict:
        return _projection(args)
    elif args.predict_from or not (args.predict or args.nodes):
        raise ValueError("--predict-from needs --run (measure, then score); --predict N "
                         "without --run predicts from what asv's bench_predict kept, "
                         "--stored JSON from a saved prediction, --preset thesis projects")
    else:  # from the held-out report asv's bench_predict kept for the commit
        from swinkit.attribution.inputs import held_out_from_asv
        kept, path = held_out_from_asv(options.results_dir(args), args.machine, args.commit)
        # without --commit the newest kept, which may be an older commit's (the default
        # suite keeps none): the commit is said
        print(f"from the held-out prediction asv's bench_predict kept for commit "
              f"{str(kept.get('commit') or path.stem)[:8]}: {path}")
        report = dict(_from_stored(args, kept), source=str(path))
    return report, held_out_lines(report)


def _from_stored(args, stored: dict) -> dict:
    """Predictions at --predict sizes and --nodes from a stored held-out report, the
    inter-node link stated or (localhost) timed across two simulated nodes here."""
    from swinkit.predict.supervisor.stored import from_stored
    inter, timed_inter = args.inter_link, None
    if inter == "localhost":
        if not args.nodes:
            raise ValueError("--inter-link localhost: give --nodes K1,K2 to predict")
        from swinkit.predict.supervisor.internode import localhost_inter_link
        timed_inter = localhost_inter_link(_stored_buckets(stored))
        inter = timed_inter["link"]
    report = from_stored(stored, args.predict or [], args.link, args.nodes, inter)
    if timed_inter:
        report["inter_link"] = {"source": "timed across 2 simulated nodes on localhost",
                                "bandwidth_gbps": inter.bandwidth_gbps,
                                "latency_s": inter.latency_s, "fit": timed_inter["fit"],
                                "timed_s": timed_inter["timed_s"]}
    return report


def _stored_buckets(stored: dict) -> list[int]:
    """The buckets' bytes of a stored prediction (every launch has the same model)."""
    try:
        return list(stored["launches"][0]["basis"]["bucket_bytes"])
    except (KeyError, IndexError, TypeError):
        raise ValueError("--stored: no launch with a basis's bucket_bytes in it (not a "
                         "--predict --json report?)") from None


def _projection(args) -> tuple[dict, list[str]]:
    """The thesis's systems projected from stated figures (--link, --device-iter-s replace them)."""
    from dataclasses import replace

    from swinkit.predict.numbers.device_compute import STATED_MFU, thesis_devices
    from swinkit.predict.numbers.links import thesis_projection
    from swinkit.predict.report.text import projection_lines
    mfu, said = (STATED_MFU, "stated, not measured in this precision") if args.mfu is None \
        else (args.mfu, "given")
    if getattr(args, "mfu_from", None):
        mfu, device = _mfu_from(args.mfu_from, args.precision)
        said = f"measured on {device}, {args.mfu_from}"
    if not 0 < mfu <= 1:
        raise ValueError(f"--mfu must be in (0, 1], got {mfu!r}")
    stated, left_out = thesis_devices(args.precision, mfu)
    devices = {k: replace(d, link=args.link or d.link, iter_s=args.device_iter_s or d.iter_s)
               for k, d in stated.items()}
    proj = thesis_projection(devices, sorted(set(args.predict) | {1}))
    # the default MFU is a stated figure for every precision, not one measured in it: say so
    # (one H200's fp32 reading was 5.4 % of the bf16 peak); a measured one names its device
    lines = [f"thesis projection in {args.precision} at MFU {mfu:.3g} ({said}"
             + ("" if getattr(args, "mfu_from", None) else
                "; --mfu-from gpu_check.json, measured on a GPU, replaces it") + ")"
             + (" (device iteration given)" if args.device_iter_s else "")]
    lines += projection_lines(proj)
    lines += [f"  {key}: left out: {why}" for key, why in left_out.items()]
    return {"projection": proj, "precision": args.precision, "mfu": mfu, "mfu_source": said,
            "left_out": left_out, "predicted": True}, lines


def _mfu_from(path: str, precision: str) -> tuple[float, str]:
    """The MFU measured in ``precision`` in the JSON at ``path`` and its device; ValueError
    naming the file (unreadable, or nothing measured in that precision)."""
    import json
    from pathlib import Path

    from swinkit.predict.numbers.device_compute import mfu_measured_in
    try:
        return mfu_measured_in(json.loads(Path(path).read_text()), precision)
    except (OSError, json.JSONDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"--mfu-from {path}: {exc}") from None
