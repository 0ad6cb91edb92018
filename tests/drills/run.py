"""The drills, in the order they run on three real vLLM servers (A, B, F: docs/testing.md); F's
failing starts overlap B's last wait. Each server has its own log exporter and canary probe;
Prometheus watches the servers of the moment, the bundle regenerated and reloaded as they change."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.drill_stack import CHAT, PAGER, DrillStack, Slot, wait_until
from tests.support.vllm_server import VllmServer

from .catalog import SCENARIOS
from .harness import (
    WORDS,
    Judge,
    Load,
    Panel,
    Part,
    ScenarioResult,
    completion,
    firing_spans,
    range_query,
    recording,
    until,
)

HERE = Path(__file__).parent
CONFIG = HERE / "drill-config.yml"
SLOW_START = HERE / "drill-config-slow-start.yml"

SERVER_A = ("--max-num-seqs", "2")
# Server A's restart is also a rollout of a new configuration: room for a big batch (and no
# prefix cache to share its prompts), whose first prefill needs fresh memory the out-of-memory
# drill can refuse. A 768-token KV cache bounds the batch too tightly for that.
SERVER_A_AFTER_RESTART = ("--max-num-seqs", "64", "--no-enable-prefix-caching")
# 24 blocks x 32 tokens = 768 tokens of KV cache; --max-model-len must fit in it.
SERVER_B = ("--num-gpu-blocks-override", "24", "--block-size", "32", "--max-model-len", "512")
SERVER_F = ("--num-gpu-blocks-override", "24", "--block-size", "32", "--max-model-len", "2048")
# Address space (MiB) the model worker may still map once serving, tried in order until torch's
# CPU allocator is what fails; with larger margins oneDNN can fail first, with a message that does
# not say memory (docs/testing.md).
OOM_MARGINS_MIB = (2, 1, 3)
ALLOCATION_FAILURE = re.compile(rb"DefaultCPUAllocator: can't allocate memory")
# The error the engine core reports for its worker, for a death that is not the allocator's.
WORKER_FAILURE = re.compile(rb"Worker failed with error '([^'\n]{1,200})")


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d)", duration))


# -- the pictures' panels ----------------------------------------------------------------------


def panels(config: dict) -> dict[str, Panel]:
    alerts = config["alerts"]
    window = alerts["rate_window"]
    i = '{instance="{i}"}'
    return {
        "queue": Panel(
            "Requests (vLLM /metrics)",
            [
                ("waiting", f"sum(vllm:num_requests_waiting{i})"),
                ("running", f"sum(vllm:num_requests_running{i})"),
            ],
            thresholds=[("queue threshold", alerts["queue_waiting_threshold"])],
        ),
        "kv": Panel(
            "KV-cache usage",
            [("usage", f"max(vllm:kv_cache_usage_perc{i})")],
            thresholds=[("pressure threshold", alerts["kv_usage_threshold"])],
            ylim=(-0.02, 1.05),
        ),
        "ttft": Panel(
            f"Time to first token, p95 over {window} (s)",
            [("p95", f"max(job_instance_model:vllm_time_to_first_token_seconds:p95_{window}{i})")],
            thresholds=[("warning", alerts["ttft_p95_warning_seconds"])],
        ),
        "itl": Panel(
            f"Inter-token latency, p95 over {window} (s)",
            [("p95", f"max(job_instance_model:vllm_inter_token_latency_seconds:p95_{window}{i})")],
            thresholds=[("warning", alerts["itl_p95_warning_seconds"])],
        ),
        "preemptions": Panel(
            "Preemptions per second",
            [("preemptions/s", f"sum(rate(vllm:num_preemptions_total{i}[5s]))")],
        ),
        "tokens": Panel(
            "Generated tokens per second",
            [("tokens/s", f"sum(rate(vllm:generation_tokens_total{i}[5s]))")],
        ),
        "probe": Panel(
            "Canary probe",
            [
                ("success (0/1)", f"max(vllm_probe_success{i})"),
                ("/health answers (0/1)", f"max(vllm_probe_health_up{i})"),
            ],
            ylim=(-0.05, 1.1),
        ),
        "probe_latency": Panel(
            "Canary probe latency (s)",
            [
                (
                    "mean over 10s",
                    f"sum(rate(vllm_probe_duration_seconds_sum{i}[10s])) / sum(rate(vllm_probe_duration_seconds_count{i}[10s]))",
                )
            ],
        ),
        "up": Panel(
            "Scrape of vLLM (up)", [("up", 'max(up{job="vllm", instance="{i}"})')], ylim=(-0.05, 1.1)
        ),
        "state": Panel(
            "Server state (log exporter)", [("state", f"vllm_log_server_state{i} == 1")], kind="state"
        ),
    }


# -- the run -----------------------------------------------------------------------------------


@dataclass
class DoctorRun:
    command: list[str]
    code: int
    output: str
    seconds: float
    at: float


@dataclass
class Drill:
    workdir: Path
    config: dict = field(default_factory=lambda: yaml.safe_load(CONFIG.read_text()))
    results: dict[str, ScenarioResult] = field(default_factory=dict)
    phase_errors: list[str] = field(default_factory=list)
    doctor: DoctorRun | None = None
    started: float = 0.0
    finished: float = 0.0
    server_starts: list[tuple[str, float]] = field(default_factory=list)
    load_before: str = ""
    load_after: str = ""
    overlapped: threading.Thread | None = None  # phase F, once started beside B's dead engine

    def __post_init__(self) -> None:
        self.stack = DrillStack(self.workdir, self.config)
        self._mine = threading.local()  # the parts each thread made, for its own summaries
        self.results = {s.key: ScenarioResult(s.key) for s in SCENARIOS}
        self.panels = panels(self.config)
        alerts, prom, am = self.config["alerts"], self.config["prometheus"], self.config["alertmanager"]
        self.target_down_for = seconds(alerts["target_down_for"])
        self.log_event_for = seconds(alerts["log_event_for"])
        # The dead engine's detection budget: one scrape, two evaluations (the replica's recorded
        # readiness, then the page, in another rule group), Alertmanager's group_wait, and 2 s
        # for the log line, the exporter's poll and the webhook.
        self.dead_engine_budget = (
            seconds(prom["scrape_interval"])
            + 2 * seconds(prom["evaluation_interval"])
            + seconds(am["group_wait"])
            + 2
        )

    # helpers
    def part(self, key: str, title: str, instance: str, *panel_keys: str) -> Part:
        made = Part(title, instance, [self.panels[k] for k in panel_keys], self.stack.model_of(instance))
        self.results[key].parts.append(made)
        self.made().append(made)
        return made

    def made(self) -> list[Part]:
        """The parts this thread has made."""
        if not hasattr(self._mine, "parts"):
            self._mine.parts = []
        return self._mine.parts

    def say(self, text: str) -> None:
        print(f"[drill {time.time() - self.started:6.1f}s] {text}", flush=True)

    def step(self, scenario, slot: Slot) -> None:
        """Run one scenario on a server and print how its new parts were judged."""
        before = len(self.made())
        try:
            scenario(slot)
        finally:
            for part in self.made()[before:]:
                self.summarise(part)

    def first_log_line(self, part: Part, slot: Slot, launched: float) -> None:
        """How long after the launch the log exporter saw the start marker (Python's imports)."""
        seen = self.stack.value(
            f'vllm_log_last_event_timestamp_seconds{{event="startup_begin", instance="{slot.instance}"}}'
        )
        if seen and seen >= launched - 1:
            part.facts.append(f"first start marker in the log {seen - launched:.0f} s after the launch")

    def summarise(self, part: Part) -> None:
        self.say(f"{part.title}: {len(part.checks) - len(part.failures)}/{len(part.checks)} checks pass")
        for check in part.checks:
            self.say(f"   {'ok  ' if check.ok else 'FAIL'} {check.description}: {check.detail}")
        if part.error:
            self.say(f"   error: {part.error}")

    def notified(self, alert: str, receiver: str, since: float, **labels: str):
        return lambda: self.stack.recorder.first_firing(alert, receiver, since, **labels)

    def idle(self, slot: Slot, timeout: float = 60) -> None:
        expr = f'sum(vllm:num_requests_waiting{{instance="{slot.instance}"}}) + sum(vllm:num_requests_running{{instance="{slot.instance}"}})'
        until(lambda: self.stack.value(expr) == 0, timeout)

    def start_server(self, slot: Slot) -> None:
        began = time.monotonic()
        slot.server.start()
        self.server_starts.append((slot.name, time.monotonic() - began))
        self.say(f"server {slot.name} ready in {time.monotonic() - began:.0f} s")

    # the whole drill
    def run(self) -> None:
        self.started = time.time()
        self.load_before = f"{os.getloadavg()[0]:.2f}"
        try:
            self.guarded(self.phase_a)
            self.guarded(self.phase_b)
            if self.overlapped is None:
                self.guarded(self.phase_f)  # B stopped before its engine died: F alone
            else:
                self.overlapped.join()
        finally:
            self.finished = time.time()
            self.load_after = f"{os.getloadavg()[0]:.2f}"

    def guarded(self, phase, *args) -> None:
        try:
            phase(*args)
        except Exception as exc:  # the scenarios it did not reach fail, naming this
            self.phase_errors.append(f"{phase.__name__}: {type(exc).__name__}: {exc}")
            self.say(f"{phase.__name__} stopped: {exc}")

    def close(self) -> None:
        self.stack.close()

    # -- server A --------------------------------------------------------------------------
    def phase_a(self) -> None:
        a = self.stack.new_slot("A", *SERVER_A)
        try:
            self.start_server(a)
            self.stack.start([a], a.server.metrics_url)
            self.settle(a)
            self.step(self.latency, a)
            self.step(self.queue_pressure, a)
            self.delivered()
            self.run_doctor(a)
            self.step(self.hung_engine, a)
            self.step(self.planned_stop_and_restart, a)
            self.step(self.out_of_memory, a)
        finally:
            a.close()

    def settle(self, slot: Slot) -> None:
        """Every target scraped, the probe answered, and Prometheus sending to Alertmanager. The
        Watchdog's delivery is judged after the first scenarios (`delivered`): Prometheus drops the
        send it makes before it has found Alertmanager and resends a minute later (docs/testing.md)."""
        i = slot.instance
        wait_until(lambda: self.stack.value(f'up{{instance="{i}", job="vllm"}}') == 1, "vLLM scraped", 60)
        wait_until(lambda: self.stack.value(f'vllm_probe_success{{instance="{i}"}}') == 1, "the probe", 60)
        wait_until(self.stack.alertmanager_found, "Prometheus to find Alertmanager", 30)
        # A little traffic so rates and quantiles have samples before the scenarios.
        for n in range(4):
            completion(slot.server, f"warm up {n}", 16)
        self.say("stack settled: targets up, probe answering, Alertmanager found")

    def delivered(self) -> None:
        """The pipeline delivers: the Watchdog heartbeat has reached its receiver."""
        since = self.started
        wait_until(
            lambda: [n for n in self.stack.recorder.records(since) if n.receiver == "watchdog"],
            "the Watchdog heartbeat at its receiver",
            60,
        )
        self.say("Watchdog delivered")

    def latency(self, a: Slot) -> None:
        part = self.part(
            "latency", "8 clients on a 2-slot server", a.instance, "ttft", "queue", "itl", "probe", "up"
        )
        alerts = self.config["alerts"]
        itl = None
        with recording(part):
            load = Load(a.server, prompt_words=20, max_tokens=400)
            part.done.append(
                "Eight closed-loop clients send 400-token completions to server A (`--max-num-seqs 2`): "
                "six requests wait at any time, below the queue threshold, and the wait is time to first token."
            )
            # Eight: six wait, and the canary probe's request makes seven, under the threshold of 10.
            part.trigger_now("8 clients start")
            load.add(8)
            until(self.notified("VllmHighTimeToFirstToken", CHAT, part.trigger, severity="warning"), 150)
            time.sleep(5)  # the same load a little longer: a page would show here
            statuses = load.stop()
            part.event(f"load stopped ({sum(statuses.values())} requests: {statuses})")
            i = a.instance
            span = max(1, int(time.time() - part.trigger))
            w = alerts["rate_window"]
            ttft = self.stack.value(
                f'max_over_time(job_instance_model:vllm_time_to_first_token_seconds:p95_{w}{{instance="{i}"}}[{span}s])'
            )
            itl = self.stack.value(
                f'max_over_time(job_instance_model:vllm_inter_token_latency_seconds:p95_{w}{{instance="{i}"}}[{span}s])'
            )
            part.facts.append(
                f"highest p95 time to first token: {ttft:.2f} s" if ttft is not None else "no TTFT p95"
            )
            part.facts.append(
                f"highest p95 inter-token latency: {itl * 1000:.1f} ms" if itl is not None else "no ITL p95"
            )
            self.idle(a)
            part.end = time.time()
        judge = Judge(self.stack, part)
        judge.reaches("VllmHighTimeToFirstToken", "warning", (CHAT,))
        # One replica's p95 is a ticket; users' pain pages through the SLO burns.
        judge.pages_nobody("VllmHighTimeToFirstToken")
        if itl is not None and itl > alerts["itl_p95_warning_seconds"]:
            judge.reaches("VllmHighTimePerOutputToken", "warning", (CHAT,))
        else:
            judge.silent(
                "VllmHighTimePerOutputToken", why="never firing: this load stays below the threshold"
            )
        judge.silent("VllmQueueDepthHigh", why="never firing: six waiting, threshold 10")
        judge.not_hung_while_serving()

    def queue_pressure(self, a: Slot) -> None:
        part = self.part(
            "queue-pressure",
            "A growing queue on a 2-slot server",
            a.instance,
            "queue",
            "kv",
            "ttft",
            "probe",
            "up",
        )
        with recording(part):
            # Let the saturation alerts of the previous load resolve so this one's are new.
            until(
                lambda: (
                    not self.stack.query(
                        f'ALERTS{{alertname=~"VllmQueueDepthHigh|VllmSchedulerThrottled", instance="{a.instance}"}}'
                    )
                ),
                60,
            )
            load = Load(a.server, prompt_words=20, max_tokens=400)
            # Slow growth, few clients: VllmSchedulerThrottled needs the queue growing for its window and its
            # `for`, and each timed-out scrape restarts the `for`. 72 s of growth leaves room for a few gaps;
            # 20 clients put 18 in the queue, over the threshold of 10.
            part.done.append(
                "Closed-loop clients are added to server A (`--max-num-seqs 2`), one every 4 s from 2 to 20, "
                "each sending 400-token completions: the queue grows by one request per client while two run, "
                "and the KV cache (524,288 tokens) stays nearly empty."
            )
            part.trigger_now("2 clients start, one more every 4 s")
            load.add(2)
            while load.clients < 20:
                # By the clock, not by counting sleeps: on a loaded machine sleeps overrun.
                time.sleep(0.2)
                load.add(min(20, 2 + int((time.time() - part.trigger) / 4)) - load.clients)
            part.event("20 clients")
            since = part.trigger
            until(
                lambda: (
                    self.notified("VllmQueueDepthHigh", CHAT, since)()
                    and self.notified("VllmSchedulerThrottled", CHAT, since)()
                ),
                150,
            )
            statuses = load.stop()
            part.event(f"load stopped ({sum(statuses.values())} requests: {statuses})")
            kv = self.stack.value(
                f'max_over_time(max(vllm:kv_cache_usage_perc{{instance="{a.instance}"}})[{int(time.time() - since) + 1}s:1s])'
            )
            part.facts.append(f"highest KV-cache usage: {kv:.2%}" if kv is not None else "no KV usage")
            self.idle(a)
            part.end = time.time()
        judge = Judge(self.stack, part)
        judge.reaches("VllmQueueDepthHigh", "warning", (CHAT,))
        judge.reaches("VllmSchedulerThrottled", "warning", (CHAT,))
        judge.not_at("VllmQueueDepthHigh", PAGER)
        judge.silent("VllmKVCachePressure")
        judge.silent("VllmPreemptions")
        judge.not_hung_while_serving()

    def run_doctor(self, a: Slot) -> None:
        """`vllm-obs doctor` on the drill stack, with a little traffic flowing so the panels and
        recording rules it checks have something to show."""
        assert self.stack.prom is not None and self.stack.am is not None
        load = Load(a.server, prompt_words=20, max_tokens=32)
        load.add(2)
        time.sleep(10)
        command = [
            sys.executable,
            "-m",
            "vllm_obs.cli",
            "doctor",
            "--prometheus",
            self.stack.prom.url,
            "--alertmanager",
            self.stack.am.url,
            "--bundle",
            str(self.stack.bundle),
            "--config",
            str(self.stack.config_path),
        ]
        began = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        finally:
            load.stop()
        self.doctor = DoctorRun(
            command, done.returncode, done.stdout + done.stderr, time.monotonic() - began, time.time()
        )
        self.say(f"doctor exited {done.returncode} in {self.doctor.seconds:.1f} s")

    def hung_engine(self, a: Slot) -> None:
        part = self.part(
            "hung-engine",
            "kill -STOP, then kill -CONT, of EngineCore",
            a.instance,
            "probe",
            "probe_latency",
            "tokens",
            "up",
        )
        resumed = time.time()
        with recording(part):
            self.idle(a)
            until(
                lambda: (
                    not self.stack.query(f'ALERTS{{alertname="VllmEngineHung", instance="{a.instance}"}}')
                ),
                60,
            )
            pid = a.server.engine_core_pid()
            part.done.append(
                f"With server A idle, `kill -STOP` of its EngineCore process (pid {pid}); once its model's "
                "capacity page (VllmModelCapacityLow, cause hung) has arrived and VllmEngineHung fires, `kill -CONT`."
            )
            part.trigger_now(f"kill -STOP {pid} (EngineCore)")
            os.kill(pid, signal.SIGSTOP)
            paged = self.notified("VllmModelCapacityLow", PAGER, part.trigger, naming=f"{a.instance} (hung)")
            hung = f'ALERTS{{alertname="VllmEngineHung", alertstate="firing", instance="{a.instance}"}}'
            try:
                # The page has no `for` of its own; the replica's warning waits out hung_for.
                until(lambda: paged() and self.stack.query(hung), 90)
                time.sleep(3)
            finally:
                os.kill(pid, signal.SIGCONT)
            resumed = part.event(f"kill -CONT {pid}")
            i = a.instance
            until(lambda: not self.stack.query(f'ALERTS{{alertname="VllmEngineHung", instance="{i}"}}'), 60)
            part.event("VllmEngineHung no longer in ALERTS")
            health = lowest(self, f'vllm_probe_health_up{{instance="{i}"}}', part.trigger, resumed)
            success = lowest(self, f'vllm_probe_success{{instance="{i}"}}', part.trigger, resumed)
            part.check(
                "the probe fails while the engine is stopped", success == 0, f"lowest success {success}"
            )
            part.check(
                "/health keeps answering 200 while the engine is stopped",
                health == 1,
                f"lowest health_up {health}",
            )
            time.sleep(3)
            part.end = time.time()
        judge = Judge(self.stack, part)
        # The only replica of its model hangs: the model has no capacity left, which pages; the
        # replica's own warning is the same incident.
        judge.reaches("VllmModelCapacityLow", "critical", (PAGER, CHAT))
        judge.inhibited("VllmEngineHung", "VllmReplicaLost", "VllmModelCapacityLow")
        judge.resolves_after("VllmEngineHung", resumed, within=30)
        judge.silent("VllmEngineDead")
        judge.silent("VllmTargetDown")

    def planned_stop_and_restart(self, a: Slot) -> None:
        part = self.part(
            "lifecycle", "Planned stop and normal restart of server A", a.instance, "up", "state", "probe"
        )
        with recording(part):
            part.done.append(
                "SIGTERM to server A's API server (a planned stop, as `docker stop` or a pod deletion sends); "
                f"it stays stopped longer than `target_down_for` ({self.config['alerts']['target_down_for']}); "
                "then it is started again, appending to the same log, with a new configuration "
                f"(`{' '.join(SERVER_A_AFTER_RESTART)}`, which the out-of-memory drill needs): a rollout."
            )
            part.trigger_now("SIGTERM to the API server")
            status = a.server.stop_planned()
            part.event(f"server exited with status {status}")
            wait_until(
                lambda: self.stack.value(f'up{{instance="{a.instance}", job="vllm"}}') == 0, "up == 0", 30
            )
            down = part.event("Prometheus sees the target down")
            time.sleep(self.target_down_for + 5)
            part.event(f"down for {time.time() - down:.0f} s: relaunching")
            began = time.monotonic()
            launched = time.time()
            a.server.extra_args = SERVER_A_AFTER_RESTART
            a.server.launch()
            a.server.wait_ready()
            self.first_log_line(part, a, launched)
            part.event(f"ready again ({time.monotonic() - began:.0f} s after the relaunch)")
            wait_until(
                lambda: self.stack.value(f'up{{instance="{a.instance}", job="vllm"}}') == 1, "up == 1", 30
            )
            time.sleep(3)
            part.end = time.time()
            longest = longest_down(self, a.instance, part.start, part.end)
            part.check(
                "the target was down longer than target_down_for",
                longest > self.target_down_for,
                f"up == 0 for {longest:.0f} s at a stretch; target_down_for is {self.target_down_for:.0f} s",
            )
            states = state_sequence(self, a.instance, part.start, part.end)
            part.facts.append("states seen in the log: " + " -> ".join(states))
            part.check(
                "the log shows the server stopped, starting again, then ready",
                is_subsequence(["stopped", "starting", "ready"], states),
                " -> ".join(states),
            )
        judge = Judge(self.stack, part)
        judge.silent("VllmTargetDown", why="never firing")
        for receiver in (PAGER, CHAT):
            notes = [
                n
                for n in self.stack.recorder.records(part.start, part.end)
                if n.receiver == receiver
                and any(
                    x["status"] == "firing" and x["labels"].get("instance") == a.instance for x in n.alerts
                )
            ]
            part.check(
                f"no notification to the {'pager' if receiver == PAGER else 'chat'} for this server",
                not notes,
                ", ".join(sorted({x["labels"]["alertname"] for n in notes for x in n.alerts})) or "none",
            )

    def dead_engine(self, a: Slot) -> None:
        part = self.part("dead-engine", "kill -9 of EngineCore", a.instance, "up", "state", "probe", "tokens")
        with recording(part):
            statuses = [completion(a.server, f"before the kill {n}", 32) for n in range(2)]
            pid = a.server.engine_core_pid()
            part.done.append(
                f"After two completions ({statuses}), `kill -9` of server {a.name}'s EngineCore (pid {pid}): the API "
                "server logs the death, answers 503 on /health and exits."
            )
            part.trigger_now(f"kill -9 {pid} (EngineCore)")
            os.kill(pid, signal.SIGKILL)
            until(
                self.notified("VllmModelCapacityLow", PAGER, part.trigger, naming=f"{a.instance} (dead)"), 30
            )
            self.overlap_phase_f(a)
            status = a.server.wait_exit(timeout=120)
            part.event(f"API server exited with status {status}")
            part.check(
                "the server exits with status 0 after its engine's death (vLLM #48966), and is paged all the same",
                status == 0,
                f"exit status {status}",
            )
            i = a.instance
            until(
                lambda: self.stack.query(
                    f'ALERTS{{alertname="VllmTargetDown", alertstate="firing", instance="{i}"}}'
                ),
                self.target_down_for + 30,
            )
            part.event("VllmTargetDown firing in Prometheus")
            time.sleep(5)  # time for a notification it should not get
            part.end = time.time()
            low = lowest(self, f'vllm_probe_success{{instance="{i}"}}', part.trigger, part.end)
            part.check("the probe fails (its success goes to 0)", low == 0, f"lowest success {low}")
        judge = Judge(self.stack, part)
        # The model's only replica died: one page, for the model, naming the replica and why.
        judge.reaches("VllmModelCapacityLow", "critical", (PAGER, CHAT))
        judge.once("VllmModelCapacityLow", PAGER, "critical")
        judge.inhibited("VllmEngineDead", by="VllmReplicaLost")
        judge.inhibited("VllmTargetDown", "VllmEngineDead", "VllmReplicaLost")
        judge.silent("VllmOutOfMemory")
        judge.silent("VllmStartupFailed")
        dead = [x for x in part.latencies if x.alert == "VllmModelCapacityLow" and x.receiver == "pager"]
        if dead:
            part.check(
                "the capacity page comes within scrape + two evaluations + group_wait + 2 s",
                dead[0].seconds <= self.dead_engine_budget,
                f"{dead[0].seconds:.1f} s (budget {self.dead_engine_budget:.0f} s)",
            )

    # -- server B ----------------------------------------------------------------------------
    def phase_b(self) -> None:
        b = self.stack.new_slot("B", *SERVER_B)
        try:
            self.step(self.slow_start, b)
            self.step(self.kv_saturation, b)
            self.step(self.dead_engine, b)
        finally:
            b.close()

    def slow_start(self, b: Slot) -> None:
        overlay = yaml.safe_load(SLOW_START.read_text())
        expected = overlay["alerts"]["expected_startup"]
        part = self.part(
            "lifecycle",
            f"A start slower than expected_startup ({expected}), server B",
            b.instance,
            "up",
            "state",
            "probe",
        )
        total = None
        with recording(part):
            self.stack.configure([b], overlay)
            part.done.append(
                f"Prometheus reloaded with `alerts.expected_startup: {expected}` "
                f"(tests/drills/{SLOW_START.name}), below the real start-up time; server B is launched. "
                "Once VllmStartupSlow fires its processes are stopped (SIGSTOP) until the chat has it, so "
                "a fast start cannot end the alert within Alertmanager's wait; then B becomes ready and "
                "Prometheus goes back to the drill configuration."
            )
            launched = part.trigger_now("server B launched")
            began = time.monotonic()
            b.server.launch()
            firing = f'ALERTS{{alertname="VllmStartupSlow", alertstate="firing", instance="{b.instance}"}}'
            until(lambda: self.stack.query(firing), 60)
            group = b.server.process.pid  # the server's own session: its engine and workers too
            os.killpg(group, signal.SIGSTOP)
            frozen = time.monotonic()
            part.event("VllmStartupSlow firing: the start is frozen (SIGSTOP)")
            try:
                until(self.notified("VllmStartupSlow", CHAT, part.trigger, severity="warning"), 60)
            finally:
                os.killpg(group, signal.SIGCONT)
            frozen = time.monotonic() - frozen
            part.event(f"the start resumes (SIGCONT) after {frozen:.0f} s")
            b.server.wait_ready()
            self.server_starts.append(("B", time.monotonic() - began - frozen))
            part.event(f"ready ({time.monotonic() - began:.0f} s after the launch, {frozen:.0f} s of it frozen)")
            self.stack.configure([b])
            part.event("Prometheus back on the drill configuration")
            until(
                lambda: (
                    not self.stack.query(f'ALERTS{{alertname="VllmStartupSlow", instance="{b.instance}"}}')
                ),
                30,
            )
            part.end = time.time()
            self.first_log_line(part, b, launched)
            total = self.stack.value(
                f'vllm_log_last_startup_duration_seconds{{phase="total", instance="{b.instance}"}}'
            )
            part.facts.append(
                f"start-up measured by the log exporter: {total:.1f} s" if total else "no start-up time"
            )
        judge = Judge(self.stack, part)
        judge.reaches("VllmStartupSlow", "warning", (CHAT,))
        judge.pages_nobody("VllmStartupSlow")
        judge.silent("VllmTargetDown", why="never firing")
        judge.silent("VllmStartupFailed")

    def kv_saturation(self, b: Slot) -> None:
        part = self.part(
            "kv-cache-saturation",
            "Long concurrent requests on a 768-token KV cache",
            b.instance,
            "kv",
            "queue",
            "preemptions",
            "probe",
            "up",
        )
        preempted = None
        with recording(part):
            # Sequences of ~6 blocks: a few fill the cache, and one that finishes frees a fifth that a waiting
            # one takes at the next step. Shorter requests leave the engine idle between them; longer ones
            # swing the usage by half at every completion.
            load = Load(b.server, prompt_words=60, max_tokens=(100, 140))
            part.done.append(
                "Twelve closed-loop clients send completions of 100 to 140 tokens of ~70-token prompts to server B "
                "(`--num-gpu-blocks-override 24 --block-size 32`: 768 tokens of KV cache, `--max-model-len 512`): "
                "the cache fills, the scheduler preempts running requests to make room."
            )
            part.trigger_now("12 clients start")
            load.add(12)
            since = part.trigger
            until(
                lambda: (
                    self.notified("VllmKVCachePressure", CHAT, since)()
                    and self.notified("VllmPreemptions", CHAT, since)()
                ),
                150,
            )
            statuses = load.stop()
            part.event(f"load stopped ({sum(statuses.values())} requests: {statuses})")
            span = int(time.time() - since) + 1
            preempted = self.stack.value(
                f'sum(increase(vllm:num_preemptions_total{{instance="{b.instance}"}}[{span}s]))'
            )
            part.facts.append(
                f"preemptions counted by vLLM: {preempted:.0f}"
                if preempted is not None
                else "no preemption count"
            )
            self.idle(b)
            part.end = time.time()
        judge = Judge(self.stack, part)
        judge.reaches("VllmKVCachePressure", "warning", (CHAT,))
        judge.not_at("VllmKVCachePressure", PAGER)
        if preempted:
            judge.reaches("VllmPreemptions", "warning", (CHAT,))
        else:
            judge.silent("VllmPreemptions", why="the server did not preempt")
        judge.silent("VllmSchedulerThrottled")
        judge.not_hung_while_serving()

    def out_of_memory(self, a: Slot) -> None:
        part = self.part(
            "out-of-memory",
            "An address-space limit and a burst",
            a.instance,
            "queue",
            "tokens",
            "up",
            "state",
        )
        with recording(part):
            self.idle(a)
            worker = a.server.worker_pid()
            part.done.append(
                f"`prlimit --as` caps the address space of the model worker (pid {worker}) of server A, restarted "
                f"with `{' '.join(SERVER_A_AFTER_RESTART)}`, a few MiB above what it maps; then 64 completions of "
                "~700-word prompts arrive, 32 at a time. The margin is tried in the order "
                f"{', '.join(map(str, OOM_MARGINS_MIB))} MiB until torch's CPU allocator fails."
            )
            for margin in OOM_MARGINS_MIB:
                limit = vm_size(worker) + margin * 1024 * 1024
                # The soft limit only: the hard one stays, so a later margin may be set above it.
                subprocess.run(["prlimit", "--pid", str(worker), f"--as={limit}:"], check=True)
                part.trigger_now(f"address space limited to VmSize + {margin} MiB; burst of 64")
                statuses = burst(a.server, 64, 700, concurrency=32)
                part.event(f"burst answered {statuses}")
                time.sleep(1)
                if a.server.process.poll() is not None or ALLOCATION_FAILURE.search(
                    a.server.log_path.read_bytes()
                ):
                    break
            until(
                self.notified(
                    "VllmModelCapacityLow", PAGER, part.trigger, naming=f"{a.instance} (out_of_memory)"
                ),
                30,
            )
            with contextlib.suppress(subprocess.TimeoutExpired):
                part.event(f"API server exited with status {a.server.wait_exit(timeout=60)}")
            until(
                lambda: self.stack.query(
                    f'ALERTS{{alertname="VllmEngineDead", alertstate="firing", instance="{a.instance}"}}'
                ),
                20 + self.log_event_for,
            )
            time.sleep(5)
            part.end = time.time()
            log = a.server.log_path.read_bytes()
            allocator_failed = ALLOCATION_FAILURE.search(log) is not None
            part.check(
                "the log shows torch's CPU allocator failing",
                allocator_failed,
                "DefaultCPUAllocator: can't allocate memory"
                if allocator_failed
                else f"no allocation failure in the log ({worker_failure(log)})",
            )
        judge = Judge(self.stack, part)
        # The model's only replica ran out of memory and died: its capacity page says why.
        judge.reaches("VllmModelCapacityLow", "critical", (PAGER, CHAT))
        judge.inhibited("VllmOutOfMemory", by="VllmReplicaLost")
        judge.inhibited("VllmEngineDead", "VllmOutOfMemory", "VllmReplicaLost")

    # -- server F ------------------------------------------------------------------------------
    def overlap_phase_f(self, beside: Slot) -> None:
        """Phase F from now on, in a thread: `beside`'s engine is dead and paged, and it only waits
        out target_down_for, nothing on it timed any more (docs/testing.md)."""
        f = self.stack.new_slot("F", *SERVER_F)
        try:
            self.stack.configure([beside, f])
        except Exception as exc:  # F runs after B instead, alone
            f.close()
            self.say(f"phase F not started beside {beside.name}: {exc}")
            return
        self.overlapped = threading.Thread(target=self.guarded, args=(self.phase_f, f), daemon=True)
        self.overlapped.start()

    def phase_f(self, watched: Slot | None = None) -> None:
        """Server F's failing starts; `watched`: its slot, already in the monitoring."""
        f = watched or self.stack.new_slot("F", *SERVER_F)
        try:
            if watched is None:
                self.stack.configure([f])
            self.step(self.startup_failure, f)
            self.step(self.restart_loop, f)
        finally:
            f.close()

    def startup_failure(self, f: Slot) -> None:
        part = self.part(
            "startup-failure",
            "A --max-model-len the KV cache cannot hold",
            f.instance,
            "up",
            "state",
            "probe",
        )
        with recording(part):
            part.done.append(
                "Server F is started with `--num-gpu-blocks-override 24 --block-size 32 --max-model-len 2048`: "
                "768 tokens of KV cache cannot hold one 2048-token request, so the engine refuses to start."
            )
            launched = part.trigger_now("server F launched")
            f.server.launch()
            wait_until(
                lambda: self.stack.value(
                    f'vllm_log_last_event_timestamp_seconds{{event="startup_begin", instance="{f.instance}"}}'
                ),
                "the start marker in the log",
                240,
            )
            self.first_log_line(part, f, launched)
            status = f.server.wait_exit(timeout=300)
            part.event(f"server exited with status {status}")
            until(self.notified("VllmStartupFailed", CHAT, part.trigger), 20 + self.log_event_for + 10)
            time.sleep(3)
            part.end = time.time()
            reasons = self.stack.query(f'vllm_log_startup_failures_total{{instance="{f.instance}"}} > 0')
            part.facts.append(
                "failure reason counted: " + ", ".join(r["metric"].get("reason", "?") for r in reasons)
            )
            part.check("the server exits with a non-zero status", status != 0, f"status {status}")
        judge = Judge(self.stack, part)
        # A server that never served takes no capacity away: a ticket, not a page.
        judge.reaches("VllmStartupFailed", "warning", (CHAT,))
        judge.pages_nobody("VllmStartupFailed")
        judge.silent("VllmEngineDead")
        judge.pages_nobody("VllmTargetDown")

    def restart_loop(self, f: Slot) -> None:
        starts = self.config["alerts"]["restart_loop_starts"]
        part = self.part(
            "lifecycle",
            "The failing start again: a restart loop, server F",
            f.instance,
            "up",
            "state",
            "probe",
        )
        with recording(part):
            part.done.append(
                "Server F's failing command is started again into the same log, as a restart policy would "
                f"(`alerts.restart_loop_starts: {starts:g}`); once VllmRestartLoop has reached chat, the attempt is killed."
            )
            launched = part.trigger_now("server F relaunched")
            f.server.launch()
            until(self.notified("VllmRestartLoop", CHAT, part.trigger), 120)
            self.first_log_line(part, f, launched)
            f.server.kill_group()
            part.event("attempt killed")
            time.sleep(2)
            part.end = time.time()
            begun = self.stack.value(
                f'vllm_log_events_total{{event="startup_begin", instance="{f.instance}"}}'
            )
            part.facts.append(
                f"starts counted by the log exporter: {begun:.0f}" if begun is not None else "no start count"
            )
        judge = Judge(self.stack, part)
        judge.reaches("VllmRestartLoop", "warning", (CHAT,))
        judge.pages_nobody("VllmRestartLoop")
        judge.silent("VllmEngineDead")
        judge.pages_nobody("VllmTargetDown")


# -- small measurements ---------------------------------------------------------------------


def worker_failure(log: bytes) -> str:
    """What the engine core said its worker died of, for a report that can say why a drill missed."""
    found = WORKER_FAILURE.search(log)
    if found:
        return "the worker failed with: " + found.group(1).decode("utf-8", "replace")
    return "no worker failure in the log either"


def vm_size(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmSize for pid {pid}")


def burst(server: VllmServer, requests: int, words: int, concurrency: int) -> dict[str, int]:
    def one(i: int) -> str:
        prompt = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))
        return str(completion(server, f"{i} {prompt}", 16, timeout=120))

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        statuses = list(pool.map(one, range(requests)))
    return {s: statuses.count(s) for s in sorted(set(statuses))}


def longest_down(drill: Drill, instance: str, since: float, until_: float) -> float:
    spans = firing_spans(drill.stack, f'up{{job="vllm", instance="{instance}"}} == 0', since, until_)
    return max((b - a for a, b in spans), default=0.0)


def state_sequence(drill: Drill, instance: str, since: float, until_: float) -> list[str]:
    points = []
    for series in range_query(
        drill.stack, f'vllm_log_server_state{{instance="{instance}"}} == 1', since, until_
    ):
        points += [(float(t), series["metric"]["state"]) for t, _ in series["values"]]
    out: list[str] = []
    for _, state in sorted(points):
        if not out or out[-1] != state:
            out.append(state)
    return out


def lowest(drill: Drill, expr: str, since: float, until_: float) -> float | None:
    values = [
        float(v) for series in range_query(drill.stack, expr, since, until_) for _, v in series["values"]
    ]
    return min(values, default=None)


def is_subsequence(wanted: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(any(s == w for s in it) for w in wanted)
