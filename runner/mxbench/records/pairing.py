"""The paired design's parts of the result record (:mod:`mxbench.records.record`): how a paired
process measured the step times, and the interference each window saw."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from mxbench.records.part import Doc, Part, Positive


class Interference(Part):
    """What else the machine did during a timed window, per second of its wall time
    (mxbench.bench.evidence.interference): cores' worth of CPU."""

    own_cores: Annotated[float | None, Doc("CPU this process got (1.0: one core busy)")] = None
    waited_cores: Annotated[
        float | None, Doc("time its threads were runnable but waited for a CPU (run delay)")
    ] = None
    others_cores: Annotated[float | None, Doc("CPU every other process used")] = None
    steal_cores: Annotated[float | None, Doc("CPU time the hypervisor stole")] = None
    pressure: Annotated[
        float | None, Doc("share of the time some task waited for a CPU (PSI cpu some)")
    ] = None
    gpu_others: Annotated[int | None, Doc("other processes on the GPU (NVML)")] = None
    throttle_reasons: Annotated[list[str], Doc("NVML clock-throttle reasons seen")] = []
    disturbed: Annotated[
        bool, Doc("past a threshold: another process, steal, run delay, throttling")
    ] = False


class Window(Part):
    """One timed window of a paired process: ``steps`` steps of one arm, alone on the
    process, between two device syncs."""

    round: Annotated[int, Meta(ge=0)]
    position: Annotated[int, Meta(ge=0), Doc("its place in the round's (random) order")]
    steps: Annotated[int, Meta(ge=1)]
    ms: Annotated[Positive, Doc("the window's wall time per step (ms)")]
    start_s: Annotated[float, Doc("when it began, seconds after the first window began")]
    interference: Interference = msgspec.field(default_factory=Interference)


class Pairing(Part):
    """How a paired process measured this arm: the arms of one comparison in one process,
    in short windows in a randomised balanced order (mxbench.bench.process.windows)."""

    design: Literal["paired"] = "paired"
    group: Annotated[str, Doc("the process's id: the records of its arms share it")] = ""
    arms: Annotated[list[str], Doc("the policies measured in the process, base first")] = []
    base: str = "float32"
    window_steps: Annotated[int, Doc("timed steps per window")] = 0
    order: Annotated[str, Doc("the windows' order, one letter an arm (A: arms[0])")] = ""
    ratios: Annotated[
        list[Positive],
        Doc("per round: the base's time per step / this arm's in the same round (its speedup); "
            "empty for the base"),
    ] = []  # fmt: skip
    clean: Annotated[list[bool], Doc("per round: no window of the round was disturbed")] = []
    idle_ratios: Annotated[
        list[Positive],
        Doc("per round, as ratios, each window's time on an idle machine: the CPU other "
            "processes took given back (a CPU device, mxbench.stats.load); empty: none changed, "
            "or not a CPU"),
    ] = []  # fmt: skip
    windows: Annotated[list[Window], Doc("this arm's timed windows, in order")] = []
    interference: Annotated[
        Interference | None, Doc("over every window of the process: medians; disturbed share")
    ] = None
    disturbed_share: Annotated[float | None, Doc("share of the process's windows disturbed")] = None

    @property
    def speedups(self) -> list[float]:
        """The rounds' ratios the speedup is judged from: on an idle machine where they were
        given back their CPU, else as measured."""
        return self.idle_ratios or self.ratios
