"""What Ray Data's HTTP request actors run for dhp (dhp.backends.ray_engine): a session that sends each row's exact
request body, retries as the live backend's runner does, and hands back every answer — an error status, a timeout, a
dropped connection included — as a row, so one bad request never fails the job (ray-project/ray#59194).

Ray pickles this module by value (ray.cloudpickle.register_pickle_by_value): the nodes of a cluster need Ray and
aiohttp, not dhp. Only the standard library and aiohttp are used here, imported inside the functions.
"""

from __future__ import annotations

import json
import os
import random

#: The row column holding the request body as JSON text (Ray's blocks are Arrow tables: a nested body would come back
#: with every other row's keys added as nulls, and a different body would be sent than the live backend sends).
BODY = "dhp_body"
#: The key sent without OPENAI_API_KEY (self-hosted servers take none): dhp.backends.openai_server.PLACEHOLDER_KEY.
PLACEHOLDER_KEY = "sk-no-key-required"


class Reply:
    """One answer as Ray's HTTP stage reads it: ``status`` is always 200 (so Ray neither retries nor raises: this
    session already retried as the live backend does), ``json()`` the real status, the body's text and the node."""

    status = 200

    def __init__(self, status: int, text: str, error: str = ""):
        self._row = {"status": int(status), "text": text, "error": error, "node": _node()}

    async def json(self, *args, **kwargs) -> dict:
        return self._row

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None


def _node() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (unit tests): no node
        return ""


class Session:
    """The ``session_factory`` product: ``post`` sends the row's body (``{BODY: json text}``) and returns a
    :class:`Reply` once the retries are over. The API key is read on the node from its own OPENAI_API_KEY: dhp never
    ships it through Ray."""

    def __init__(self, timeout: float, max_retries: int, backoff_initial: float, backoff_max: float):
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.backoff_initial, self.backoff_max = float(backoff_initial), float(backoff_max)
        self._session = None

    async def __aenter__(self):
        import aiohttp

        key = os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout, connect=min(self.timeout, 10.0)),
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json",
                     "Content-Type": "application/json"})
        await self._session.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:
        await self._session.__aexit__(*exc)

    def post(self, url: str, headers=None, data=None):
        import asyncio

        # started at once: Ray's stage awaits a batch's requests one after the other, so the batch's rows are in
        # flight together (ray_batch_size per actor) instead of one at a time
        return asyncio.ensure_future(self._send(url, json.loads(data)[BODY].encode("utf-8")))

    async def _send(self, url: str, body: bytes) -> Reply:
        import asyncio

        import aiohttp

        tries = 0
        while True:
            tries += 1
            last = tries > self.max_retries
            try:
                async with self._session.post(url, data=body) as r:
                    text = await r.text()
                    status = r.status
            except asyncio.TimeoutError:
                if last:
                    return Reply(0, "", "timeout")
            except aiohttp.ClientError as e:
                if last:
                    return Reply(0, "", f"connection error ({type(e).__name__}) to {url}")
            else:
                # the live runner retries rate limits, 5xx and a 2xx body without choices (OpenAIBackend._transient)
                transient = status == 429 or status >= 500 or (200 <= status < 300 and not _has_choices(text))
                if last or not transient:
                    return Reply(status, text)
            step = min(self.backoff_initial * 2 ** (tries - 1), self.backoff_max)
            await asyncio.sleep(step + random.uniform(0, self.backoff_initial))


def _has_choices(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and bool(data.get("choices"))


class SessionFactory:
    """Ray's ``session_factory``: a picklable callable building a :class:`Session` on the actor."""

    def __init__(self, timeout: float = 60.0, max_retries: int = 4, backoff_initial: float = 0.5,
                 backoff_max: float = 8.0):
        self.args = (timeout, max_retries, backoff_initial, backoff_max)

    def __call__(self) -> Session:
        return Session(*self.args)


def keep_answer(row: dict) -> dict:
    """Ray's postprocess: the row's index and its answer (the request body is not carried back)."""
    return {"dhp_index": row["dhp_index"], **{f"reply_{k}": v for k, v in row["http_response"].items()}}


def vllm_row(row: dict) -> dict:
    """Ray's preprocess for a ray-vllm judge: the chat messages and vLLM's sampling parameters (sent as JSON text, see
    BODY). A None parameter is left out: vLLM's default applies, as ``vllm serve`` does for a body without it."""
    sampling = {k: v for k, v in json.loads(row["dhp_sampling"]).items() if v is not None}
    return {"dhp_index": row["dhp_index"], "messages": json.loads(row["dhp_messages"]), "sampling_params": sampling}


def keep_vllm_answer(row: dict) -> dict:
    """Ray's postprocess for a ray-vllm judge: the text, token counts and the per-token log-probabilities as JSON
    (token-id keys would not survive Arrow), in vLLM's order."""
    logprobs = row.get("logprobs")
    return {"dhp_index": row["dhp_index"], "generated_text": row.get("generated_text") or "",
            "num_input_tokens": row.get("num_input_tokens") or 0,
            "num_generated_tokens": row.get("num_generated_tokens") or 0,
            "logprobs": None if logprobs is None else json.dumps(
                [{str(t): dict(info) for t, info in (pos or {}).items()} for pos in logprobs]),
            "__inference_error__": row.get("__inference_error__") or ""}
