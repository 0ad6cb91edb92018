"""One simulated vLLM replica: continuous batching, step by step, as the V1 scheduler runs it, with
step times fitted to the real vLLM CPU server. It reports raw observations of vLLM's families and
has three faults (slowdown, hang, smaller KV cache); the README describes the model.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

# The most steps one run of decode steps computes at once.
MAX_RUN = 4096


@dataclass(frozen=True)
class EngineParams:
    step_base: float  # seconds per step whatever it holds (scheduling, sampling, launch)
    per_prefill_token: float  # seconds per prompt token computed in the step
    per_decode_seq: float  # seconds per sequence decoding one token in the step
    per_context_token: float  # seconds per token already in the batch's KV cache (attention)
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_blocks: int
    block_size: int
    max_model_len: int

    def __post_init__(self) -> None:
        if self.kv_blocks * self.block_size < self.max_model_len:
            # vLLM refuses to start so: one request of the longest length would never fit.
            raise ValueError("the KV cache holds fewer tokens than max_model_len")

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)


@dataclass(eq=False)  # a request is itself, not its field values: list membership by identity
class Request:
    arrival: float
    prompt: int
    output: int
    cached: int = 0  # tokens whose KV is in the cache
    generated: int = 0
    blocks: int = 0
    scheduled_at: float | None = None  # first admitted
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    pooling: bool = False  # an embedding (pooling) request: done at its prompt, no output token

    @property
    def to_prefill(self) -> int:
        """Tokens to compute before the next one is sampled: the prompt, or after a preemption
        the prompt and every token generated so far (recompute); 0 while decoding (every known
        token but the last sampled one in the cache)."""
        left = self.prompt + self.generated - self.cached
        return 0 if left == 1 and self.generated > 0 else left


@dataclass
class Observations:
    """What vLLM's histograms and counters would have recorded, as raw values."""

    time_to_first_token: list[float] = field(default_factory=list)
    inter_token_latency: list[float] = field(default_factory=list)
    e2e_request_latency: list[float] = field(default_factory=list)
    request_queue_time: list[float] = field(default_factory=list)
    request_prefill_time: list[float] = field(default_factory=list)
    request_decode_time: list[float] = field(default_factory=list)
    iteration_tokens: list[int] = field(default_factory=list)
    request_prompt_tokens: list[int] = field(default_factory=list)
    request_generation_tokens: list[int] = field(default_factory=list)
    request_preemptions: list[int] = field(default_factory=list)
    prompt_tokens: int = 0  # counters
    generation_tokens: int = 0
    preemptions: int = 0
    finished: int = 0
    rejected: int = 0  # longer than max_model_len: vLLM answers 400
    lost: int = 0  # in flight when the engine died: the client gets an error
    errored: int = 0  # failed inside the engine (an error burst): finished_reason="error"
    refused: int = 0  # refused at admission by a queue limit (an incident): a 4xx
    aborted: int = 0  # the client disconnected first: finished_reason="abort"
    stopped: int = 0  # of `finished`, those that ended with finished_reason="stop" (pooling)


class Replica:
    def __init__(self, params: EngineParams) -> None:
        self.p = params
        self.now = 0.0
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.kv_blocks = params.kv_blocks  # usable now: a kv_exhaustion incident shrinks it
        self.free_blocks = params.kv_blocks
        self.seen = Observations()
        self.done: list[Request] = []
        self.slowdown = 1.0  # every step takes this many times as long
        self.hung = False  # no step runs
        self.runs = True  # decode-only stretches computed at once (decode_run); False: step by step
        self.timeout: float | None = None  # a client gives up on a request still queued this long

    # -- what a scrape reads -----------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_cache_usage(self) -> float:
        return 1 - self.free_blocks / self.kv_blocks

    # -- driving it ----------------------------------------------------------------------

    def submit(self, request: Request) -> bool:
        """Queue a request that arrived at request.arrival (not before the replica's clock)."""
        if request.prompt + request.output > self.p.max_model_len:
            self.seen.rejected += 1
            return False
        self.waiting.append(request)
        return True

    def run_until(self, t: float) -> None:
        """Run steps while there is work and a step starts before t; idle up to t otherwise."""
        while self.now < t and (self.running or self.waiting) and not self.hung:
            if self.timeout is not None:
                self._expire(self.now)
            if self.runs and self.decode_run(t):
                continue
            if not self.step():
                break  # nothing schedulable: a head-of-line request waits for blocks
        self.now = max(self.now, t)
        if self.timeout is not None:
            self._expire(self.now)

    def _expire(self, now: float) -> None:
        """Abort the queued requests whose clients gave up waiting (`timeout` after they came):
        the queue is in arrival order but for preempted requests, put back at its head."""
        waiting, timeout = self.waiting, self.timeout
        while waiting and waiting[0].arrival + timeout <= now:
            waiting.popleft()
            self.seen.aborted += 1

    def decode_run(self, t: float) -> bool:
        """The steps before t in which nothing but decoding happens, in one pass (the hot path): what
        `step` would do while every running request decodes, none is admitted or finishes and free KV
        blocks suffice; the step that breaks this is left to `step`. False when fewer than two apply."""
        running, p = self.running, self.p
        n = len(running)
        if n == 0 or n > p.max_num_batched_tokens:
            return False
        left, context = MAX_RUN + 1, 0
        for r in running:
            if r.prompt + r.generated - r.cached != 1 or r.generated == 0:
                return False  # prefilling (see to_prefill)
            left = min(left, r.output - r.generated)
            context += r.cached
        if self.waiting and n < p.max_num_seqs:
            head = self.waiting[0]
            tokens = min(head.to_prefill, p.max_num_batched_tokens - n)
            if p.blocks_for(head.cached + tokens) - head.blocks <= self.free_blocks:
                return False  # the head may be admitted at the next step
        if left - 1 < 2:
            return False
        base = p.step_base + p.per_prefill_token * 0 + p.per_decode_seq * n
        per, slow, now = p.per_context_token, self.slowdown, self.now
        ends: list[float] = []
        while len(ends) < left - 1 and now < t:  # each step starts where the last ended
            now += (base + per * context) * slow
            ends.append(now)
            context += n
        size = p.block_size
        k = len(ends)
        while (
            k >= 2 and sum(max(0, -(-(r.cached + k) // size) - r.blocks) for r in running) > self.free_blocks
        ):
            k //= 2  # a run that would need a preemption is left to `step`, a step at a time
        if k < 2:
            return False
        end = ends[k - 1]
        s = self.seen
        itl = s.inter_token_latency
        for r in running:
            extra = -(-(r.cached + k) // size) - r.blocks
            if extra > 0:
                r.blocks += extra
                self.free_blocks -= extra
            r.cached += k
            r.generated += k
            itl.append(ends[0] - r.last_token_at)
            r.last_token_at = end
        itl.extend([b - a for a, b in zip(ends[: k - 1], ends[1:k], strict=True)] * n)
        s.iteration_tokens.extend([n] * k)
        s.generation_tokens += n * k
        self.now = end
        return True

    def step(self) -> bool:
        """One engine step; False when nothing could be scheduled."""
        budget = self.p.max_num_batched_tokens
        batch: list[tuple[Request, int]] = []  # (request, tokens computed for it this step)
        for request in list(self.running):
            if request not in self.running:
                continue  # preempted by an earlier request of this step
            left = request.to_prefill
            tokens = min(left, budget) if left else 1
            if budget <= 0 or not self._reserve(request, tokens):
                continue
            budget -= tokens
            batch.append((request, tokens))
        while self.waiting and len(self.running) < self.p.max_num_seqs and budget > 0:
            head = self.waiting[0]
            tokens = min(head.to_prefill, budget)
            if self.p.blocks_for(head.cached + tokens) - head.blocks > self.free_blocks:
                break  # first come, first served: nothing overtakes the head
            self.waiting.popleft()
            self._reserve(head, tokens)
            if head.scheduled_at is None:
                head.scheduled_at = self.now
            self.running.append(head)
            budget -= tokens
            batch.append((head, tokens))
        if not batch:
            return False
        self._advance(batch)
        return True

    # -- faults -----------------------------------------------------------------------------

    def limit_kv(self, fraction: float) -> None:
        """Keep `fraction` of the KV blocks usable (1 gives them all back), never fewer than one
        request of max_model_len needs; the latest admitted requests are preempted until the
        running ones fit."""
        p = self.p
        usable = max(round(p.kv_blocks * fraction), p.blocks_for(p.max_model_len))
        usable = min(usable, p.kv_blocks)
        while self.running and self.kv_blocks - self.free_blocks > usable:
            self._preempt(self.running[-1])
        self.free_blocks += usable - self.kv_blocks
        self.kv_blocks = usable

    def abort(self, request: Request) -> None:
        """The client gave up: the request leaves the queue or the batch, its blocks freed."""
        if request.finished_at is not None:
            return
        if request in self.waiting:
            self.waiting.remove(request)
        elif request in self.running:
            self.running.remove(request)
            self.free_blocks += request.blocks
            request.blocks = 0
        else:
            return
        self.seen.aborted += 1

    def die(self) -> int:
        """The engine dies: every request in flight is lost (its client gets an error). The
        number lost; the replica holds nothing after it."""
        lost = len(self.running) + len(self.waiting)
        self.seen.lost += lost
        self.running.clear()
        self.waiting.clear()
        self.free_blocks = self.kv_blocks
        return lost

    # -- inside a step -------------------------------------------------------------------

    def _reserve(self, request: Request, tokens: int) -> bool:
        """Blocks for `tokens` more of the request's KV, preempting the latest admitted running
        requests while none are free; False if the request itself had to be preempted."""
        need = -(-(request.cached + tokens) // self.p.block_size) - request.blocks  # blocks_for, inlined: hot
        if need <= 0:
            return True
        while need > self.free_blocks:
            victim = self.running[-1]
            self._preempt(victim)
            if victim is request:
                return False
        self.free_blocks -= need
        request.blocks += need
        return True

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self.free_blocks += request.blocks
        request.blocks = 0
        request.cached = 0
        request.preemptions += 1
        self.seen.preemptions += 1
        self.waiting.appendleft(request)

    def _advance(self, batch: list[tuple[Request, int]]) -> None:
        p = self.p
        prefill = decoding = context = 0
        for r, tokens in batch:
            if r.to_prefill:
                prefill += tokens
            else:
                decoding += 1
            context += r.cached
        took = p.step_base + p.per_prefill_token * prefill + p.per_decode_seq * decoding
        took = (took + p.per_context_token * context) * self.slowdown
        end = self.now + took
        self.seen.iteration_tokens.append(prefill + decoding)
        self.seen.prompt_tokens += prefill
        for request, tokens in batch:
            request.cached += tokens
            if request.to_prefill:
                continue  # a chunk of a longer prompt: no token sampled yet
            if request.pooling:  # its output (the embedding) comes with the prompt's last chunk
                request.first_token_at = request.last_token_at = end
                self.seen.time_to_first_token.append(end - request.arrival)
                self._finish(request, end)
                continue
            request.generated += 1
            self.seen.generation_tokens += 1
            if request.last_token_at is None:
                request.first_token_at = end
                self.seen.time_to_first_token.append(end - request.arrival)
            else:  # since the previous token: a step, or longer if it waited or was preempted
                self.seen.inter_token_latency.append(end - request.last_token_at)
            request.last_token_at = end
            if request.generated >= request.output:
                self._finish(request, end)
        self.now = end

    def _finish(self, request: Request, at: float) -> None:
        self.running.remove(request)
        self.free_blocks += request.blocks
        request.blocks = 0
        request.finished_at = at
        s, first = self.seen, request.first_token_at
        assert first is not None and request.scheduled_at is not None
        s.finished += 1
        s.stopped += request.pooling
        s.e2e_request_latency.append(at - request.arrival)
        s.request_queue_time.append(request.scheduled_at - request.arrival)
        s.request_prefill_time.append(first - request.scheduled_at)
        s.request_decode_time.append(at - first)
        s.request_prompt_tokens.append(request.prompt)
        s.request_generation_tokens.append(request.generated)
        s.request_preemptions.append(request.preemptions)
        self.done.append(request)
