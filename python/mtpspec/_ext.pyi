# Type stubs for the C++ extension mtpspec._ext (python/src/*.cc). Use the `mtpspec` package API;
# these signatures are what it calls.
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
MAX_DRAFT_TOKENS: int

class Error(Exception):
    code: str

class NotFoundError(Error, FileNotFoundError): ...
class InvalidArgumentError(Error, ValueError): ...

def _raise_status(code: int, message: str) -> None: ...
def set_threads(threads: int) -> None: ...
def thread_count() -> int: ...
def merge_stats(stats: list[SpecStats]) -> SpecStats: ...
def parse_prompt_set(text: str, source: str, categories: list[str] = ...) -> list[tuple[str, str, list[str], str]]: ...

class Model:
    @staticmethod
    def load(path: str, dtype: Optional[str] = None, cache_capacity: Optional[int] = None,
             index_keys: str = "f32") -> Model: ...
    @property
    def index_keys(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def has_mtp(self) -> bool: ...
    @property
    def cache_capacity(self) -> int: ...
    def config(self) -> dict[str, Any]: ...
    def load_report(self) -> dict[str, Any]: ...
    def logits(
        self,
        ids: Sequence[int],
        positions: Optional[Sequence[int]] = None,
        rows: Union[None, str, Sequence[int]] = None,
        path: str = "auto",
        kv_cache: str = "f32",
    ) -> npt.NDArray[np.float32]: ...
    def time_forward(
        self, ids: Sequence[int], rows: int, repeats: int = 5, warmup: int = 1
    ) -> npt.NDArray[np.float64]: ...
    def mtp_draft(
        self,
        ids: Sequence[int],
        k: int,
        chain: str = "default",
        hidden: str = "post",
        index_share: str = "exact",
        next_token: Optional[int] = None,
    ) -> Tuple[List[int], npt.NDArray[np.float32], int]: ...

class SpecStats:
    drafter: str
    accept_rule: str
    lossy: bool
    synthetic: bool
    prompt_tokens: int
    generated_tokens: int
    verify_steps: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    drafted_per_pos: List[int]
    reached_per_pos: List[int]
    accepted_per_pos: List[int]
    accepted_histogram: List[int]
    step_drafted: List[int]
    step_accepted: List[int]
    k_decisions: List[int]
    probe_decisions: List[int]
    verify_seconds_by_k: List[float]
    cycle_seconds_by_k: List[float]
    prefill_seconds: float
    draft_seconds: float
    verify_seconds: float
    sample_seconds: float
    other_seconds: float
    draft_prefill_seconds: float
    prompts_deferred: int
    adaptive_k: bool
    extend_seconds: float
    total_seconds: float
    tree: str
    accepted_per_rank: List[int]
    @property
    def mean_acceptance_length(self) -> float: ...
    @property
    def draft_acceptance_rate(self) -> float: ...
    @property
    def per_position_acceptance(self) -> List[float]: ...
    @property
    def conditional_acceptance(self) -> List[float]: ...
    @property
    def tokens_per_second(self) -> float: ...
    def summary(self) -> str: ...
    def to_json(self) -> str: ...

class GenerateResult:
    tokens: List[int]
    logprobs: List[float]
    stats: SpecStats
    stop_reason: str

def generate(
    model: Model,
    prompt: Sequence[int],
    *,
    max_new_tokens: int = 32,
    draft: str = "mtp",
    k: Union[int, str] = 3,
    accept: str = "sampler-equality",
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    seed: int = 0,
    mtp_hidden: str = "post",
    mtp_chain: str = "default",
    mtp_index_share: str = "exact",
    sample_drafts: bool = False,
    adaptive_k: bool = False,
    synthetic_rates: Optional[Sequence[float]] = None,
    synthetic_rates_unconditional: Optional[Sequence[float]] = None,
    synthetic_acceptance_length: Optional[float] = None,
    acceptance_hook: Optional[
        Callable[[npt.NDArray[np.float64], List[int], Optional[npt.NDArray[np.float64]]], Tuple[int, int]]
    ] = None,
    on_tokens: Optional[Callable[[List[int]], Optional[bool]]] = None,
    stop_at_eos: bool = True,
    eos_token_id: Union[None, int, Sequence[int]] = None,
    stop_token_ids: Optional[Sequence[int]] = None,
    logprobs: bool = False,
    ngram: int = 3,
    relaxed_top_n: int = 3,
    relaxed_delta: float = 0.1,
    kv_cache: str = "f32",
    device: str = "cpu",
    device_weights: str = "bf16",
    adaptive_controller: Optional[AdaptiveController] = None,
    tree: Optional[Sequence[int]] = None,
    tree_nodes: Optional[int] = None,
) -> GenerateResult: ...

def generate_batch(
    model: Model,
    requests: List[Tuple[List[int], Dict[str, Any]]],
    batch: int,
    k_schedule: Optional[Sequence[Tuple[int, int]]] = None,
) -> Tuple[List[Optional[GenerateResult]], List[Optional[str]], List[Dict[str, Any]], str]: ...

def request_options() -> List[Dict[str, str]]: ...

class StopStrings:
    def __init__(self, tokenizer: Tokenizer, stops: List[str], skip_special_tokens: bool = False) -> None: ...
    def feed(self, tokens: List[int]) -> bool: ...
    @property
    def hit(self) -> Optional[str]: ...
    @property
    def hit_tokens(self) -> int: ...
    @property
    def fed(self) -> int: ...

class AdaptiveController:
    def __init__(self, k_max: int, exploration_budget: float = 0.01) -> None: ...
    @property
    def k_max(self) -> int: ...
    @property
    def exploration_budget(self) -> float: ...
    @property
    def requests(self) -> int: ...
    @property
    def probes(self) -> int: ...
    @property
    def best_k(self) -> int: ...
    @property
    def conditional_acceptance(self) -> List[float]: ...
    def expected_tokens_per_second(self, k: int) -> float: ...

class Tokenizer:
    @staticmethod
    def load(path: str) -> Tokenizer: ...
    def encode(self, text: str) -> List[int]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def special_tokens(self) -> List[Tuple[str, int]]: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def id_to_token(self, id: int) -> Optional[str]: ...
