"""A locustfile replaying the schedule in VLLM_OBS_REPLAY_SCHEDULE (JSON rows [offset s, prompt
tokens, output tokens]) open loop against VLLM_OBS_REPLAY_MODEL, streaming, timed as `e2e` and `ttft`.
Runs in locust's own virtualenv (`make locust-venv`; calibrate.py starts it), never imported here.
"""

from __future__ import annotations

import json
import os
import random
import time

import gevent.pool
from locust import events, task
from locust.contrib.fasthttp import FastHttpUser

VOCAB = (10, 470)  # token ids of the tiny test model (vocab_size 478), clear of the special ones


class Replay(FastHttpUser):
    fixed_count = 1
    network_timeout = 900.0  # a request queued behind a burst may wait minutes
    connection_timeout = 60.0

    @task
    def replay(self) -> None:
        with open(os.environ["VLLM_OBS_REPLAY_SCHEDULE"]) as handle:
            schedule = json.load(handle)
        rng = random.Random(1)
        pool, start = gevent.pool.Pool(4096), time.monotonic()
        for offset, prompt, output in schedule:
            gevent.sleep(max(0.0, start + offset - time.monotonic()))
            ids = [rng.randint(*VOCAB) for _ in range(prompt)]
            pool.spawn(self.one, ids, output)
        pool.join()
        self.environment.runner.quit()

    def one(self, ids: list[int], output: int) -> None:
        body = {
            "model": os.environ["VLLM_OBS_REPLAY_MODEL"],
            "prompt": ids,
            "max_tokens": output,
            "min_tokens": output,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
        }
        # locust times a streamed request to its headers; the two rows that matter are timed
        # here and recorded as requests of their own: until the first token, and until the end.
        started, first, failure = time.perf_counter(), None, None
        with self.client.post(
            "/v1/completions", json=body, stream=True, name="headers", catch_response=True
        ) as response:
            if response.status_code != 200:
                failure = RuntimeError(f"status {response.status_code}")
                response.failure(failure)
            else:
                for chunk in response.iter_content(chunk_size=64):
                    if first is None and "data:" in (chunk if isinstance(chunk, str) else chunk.decode()):
                        first = time.perf_counter()
        ended = time.perf_counter()
        for name, at in (("ttft", first), ("e2e", ended)):
            events.request.fire(
                request_type="POST",
                name=name,
                response_time=((at or ended) - started) * 1000,
                response_length=0,
                exception=failure or (None if at is not None else RuntimeError("no token streamed")),
                context={},
            )
