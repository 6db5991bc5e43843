"""PrefixCache: finds KV blocks that an earlier request already computed for the same start of a
prompt (read after the core path: prefix caching is off unless enable_prefix_caching=True).

As vLLM's automatic prefix caching: only full blocks are cached, and a block is named by a hash
chained from the previous block's hash and the block's own token ids,

    hash_0 = hash((ROOT, tokens[0:B]))     hash_i = hash((hash_{i-1}, tokens[i*B:(i+1)*B]))

so equal hashes mean equal whole prefixes, not just equal blocks. A new request walks its prompt's
hashes and reuses the longest run of cached blocks, but never the whole prompt: at least one token
must be computed to get the logits of the next one. The BlockManager owns the blocks (reference
counts, the free queue that is also the LRU eviction order); this class only maps hashes to block
ids. (vLLM hashes blocks with sha256 by default, 'sha256' | 'sha256_cbor', and v0.16 adds xxhash
variants (PrefixCachingHashAlgo in vllm.config.cache), so that collisions are impossible in
practice; the built-in 64-bit hash keeps this readable.)
"""
from __future__ import annotations

ROOT = 0   # the "previous hash" of a prompt's first block


class PrefixCache:
    def __init__(self, block_size: int, block_hashes=None):
        """block_hashes: None, or a function (token_ids, block_size) -> hashes of the full blocks,
        chained as above (any hashable values); used instead of the built-in hash."""
        self.block_size = block_size
        self.block_hashes = block_hashes
        self.cached: dict[int, int] = {}        # block hash -> block id holding those tokens' K/V
        self.block_hash: dict[int, int] = {}    # block id -> its hash (the inverse, for eviction)
        self.seq_hashes: dict[object, list[int]] = {}   # sequence -> hashes of its full blocks
        self.registered: dict[object, int] = {}         # sequence -> its blocks in the cache
        self.queries = 0                        # prompt tokens looked up (vLLM's queries)
        self.hits = 0                           # of which found in the cache

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    def hashes(self, seq, num_blocks: int) -> list[int]:
        """The chained hashes of seq's first `num_blocks` full blocks (computed once, then
        extended)."""
        out = self.seq_hashes.setdefault(seq, [])
        bs = self.block_size
        if self.block_hashes is not None and len(out) < num_blocks:
            out[:] = list(self.block_hashes(list(seq.token_ids[:num_blocks * bs]), bs))[:num_blocks]
            if len(out) != num_blocks:
                raise ValueError(f"block_hashes returned {len(out)} hashes for {num_blocks} full "
                                 "blocks")
        while len(out) < num_blocks:
            i = len(out)
            out.append(hash((out[-1] if out else ROOT, tuple(seq.token_ids[i * bs:(i + 1) * bs]))))
        return out

    def lookup(self, seq, count: bool = False) -> list[int]:
        """Block ids of the longest cached run of seq's full blocks, leaving at least one token to
        compute; none for prompt logprobs, which need every token computed (as vLLM). count: the
        lookup serves a request (its tokens counted in queries and hits)."""
        hits, full = [], (len(seq) - 1) // self.block_size
        for h in self.hashes(seq, 0 if seq.params.prompt_logprobs is not None else full):
            block = self.cached.get(h)
            if block is None:
                break
            hits.append(block)
        if count:
            self.queries += len(seq)
            self.hits += len(hits) * self.block_size
        return hits

    def register(self, seq, num_tokens: int) -> None:
        """Make seq's full blocks among its first `num_tokens` tokens findable (this step writes
        their K/V before any request reads them: attention writes the whole step's K/V first)."""
        n = num_tokens // self.block_size
        hashes = self.hashes(seq, n)
        for i in range(self.registered.get(seq, 0), n):
            if hashes[i] not in self.cached:
                self.cached[hashes[i]] = seq.block_table[i]
                self.block_hash[seq.block_table[i]] = hashes[i]
        self.registered[seq] = max(n, self.registered.get(seq, 0))

    def evict(self, block: int) -> None:
        """The block is being reused for other tokens: forget what it held."""
        h = self.block_hash.pop(block, None)
        if h is not None:
            del self.cached[h]

    def forget(self, seq) -> None:
        self.seq_hashes.pop(seq, None)
        self.registered.pop(seq, None)
