-- Routing what-if: a run's requests replayed over a fleet of workers, each with a prefix
-- cache of its own, under a routing policy (kvtrace/analysis/routing.py).
--
-- Requests come in arrival order (arrival_s, then request_idx) and read their blocks as
-- prefixes, as workload_prefix_hit_curve does with semantics 'prefix': a request's hit
-- is the leading run of its blocks its worker had cached when it arrived.  Each worker
-- holds capacity_blocks blocks (or capacity_bytes / (bytes per token x tokens per block),
-- the bytes per token given or those of `model`), as cache 'lru' (vLLM's hash-chained
-- pool: every block of the request touched after the hit, least recently used evicted)
-- or 'radix' (SGLang's radix tree: policy radix_lru of the hit curve).  One worker is
-- the hit curve at the same capacity.
--
-- Load: a worker's active requests when a request arrives; a request is active on its
-- worker from its arrival for output_tokens x tpot_ms (its decode; prefill taken as
-- instant), so the load does not depend on the caches.  Policies ('all': every one):
--
-- - round_robin: the k-th arrival to worker k mod workers;
-- - least_loaded: the fewest active requests;
-- - session_hash: a hash ring of 100 points per worker over session_id (the request
--   itself when it has none): a session stays on its worker;
-- - prefix_aware: llm-d's scorers, the largest hit_blocks / blocks + 0.5 x (1 -
--   min(load, threshold) / threshold) (prefix-cache-scorer plus load-aware-scorer,
--   weights 1 and 1, threshold 128 by default);
-- - prefix_cost: Dynamo's KV router cost, the smallest overlap_weight x (blocks -
--   hit_blocks) + (the worker's active blocks + blocks), at temperature 0.
-- Ties go to the smaller load, then the worker chosen least recently, then the lower
-- index.
--
-- Worked example (cache 'lru', 2 workers of 4 blocks, every request active for ever):
-- requests [a, b], [a, b, c], [d], [a, b] arrive in that order.  round_robin sends them
-- to workers 0, 1, 0, 1: hits 0, 0, 0, 2 (worker 1 holds a, b, c).  prefix_aware scores
-- the second request 2/3 + 0.5 x (1 - 1/128) on worker 0 against 0 + 0.5 on worker 1:
-- worker 0, hit 2; the third (no hit anywhere) goes to the less loaded worker 1; the
-- fourth to worker 0 (hit 2): 4 of the 8 blocks read hit, against 2 for round_robin.

-- @macro workload_routing(workers, capacity_blocks, policy, cache, capacity_bytes, bytes_per_token, model, tpot_ms, threshold, overlap_weight)
-- Per run with hashes and policy: one row for the fleet (worker NULL), then one per
-- worker: requests, blocks and tokens routed there, what its cache served (the prefill
-- tokens saved), its hit rate and the load it had when its requests arrived.
-- @column run_id                the run
-- @column policy                round_robin, least_loaded, session_hash, prefix_aware or prefix_cost
-- @column cache                 lru (hash-chained pool) or radix (radix tree)
-- @column worker                the worker (0 ..), NULL for the fleet
-- @column workers               workers in the fleet
-- @column capacity_blocks       each worker's cache capacity in blocks
-- @column requests              requests routed there
-- @column blocks                blocks those requests read
-- @column hit_blocks            of those, blocks the worker's cache served
-- @column tokens                input tokens of those requests
-- @column prefill_tokens_saved  input tokens of the served blocks
-- @column hit_rate              prefill_tokens_saved / tokens
-- @column mean_load             mean active requests on the worker at its requests' arrivals
-- @column peak_load             the most active requests a request found there
-- @column request_share         requests / all requests of the run
-- @column imbalance             fleet row: the busiest worker's requests / the mean per worker
CREATE MACRO workload_routing(workers := 4, capacity_blocks := NULL, policy := 'prefix_aware',
                              cache := 'lru', capacity_bytes := NULL, bytes_per_token := NULL,
                              model := NULL, tpot_ms := 30.0, threshold := 128.0,
                              overlap_weight := 1.0) AS TABLE
SELECT unnest(kvtrace_routing(workers::BIGINT, capacity_blocks::BIGINT, policy::VARCHAR,
                              cache::VARCHAR, capacity_bytes::BIGINT, bytes_per_token::DOUBLE,
                              model::VARCHAR, tpot_ms::DOUBLE, threshold::DOUBLE,
                              overlap_weight::DOUBLE),
              recursive := true);

-- @macro workload_routing_requests(workers, capacity_blocks, policy, cache, capacity_bytes, bytes_per_token, model, tpot_ms, threshold, overlap_weight)
-- Per run, policy and request, in arrival order: the worker the router chose, the active
-- requests it had then, and the blocks and tokens its cache served.  Arguments as
-- workload_routing.
-- Example: the header's prefix_aware replay gives workers 0, 0, 1, 0 and hit_blocks 0, 2,
-- 0, 2.
-- @column run_id       the run
-- @column policy       the routing policy
-- @column cache        lru or radix
-- @column request_idx  the request (its data row)
-- @column worker       the worker it went to
-- @column load         active requests on that worker when it arrived
-- @column blocks       its blocks
-- @column hit_blocks   blocks the worker's cache served
-- @column tokens       its input tokens
-- @column hit_tokens   input tokens of those blocks: prefill tokens saved
CREATE MACRO workload_routing_requests(workers := 4, capacity_blocks := NULL,
                                       policy := 'prefix_aware', cache := 'lru',
                                       capacity_bytes := NULL, bytes_per_token := NULL,
                                       model := NULL, tpot_ms := 30.0, threshold := 128.0,
                                       overlap_weight := 1.0) AS TABLE
SELECT unnest(kvtrace_routing_requests(workers::BIGINT, capacity_blocks::BIGINT,
                                       policy::VARCHAR, cache::VARCHAR,
                                       capacity_bytes::BIGINT, bytes_per_token::DOUBLE,
                                       model::VARCHAR, tpot_ms::DOUBLE, threshold::DOUBLE,
                                       overlap_weight::DOUBLE),
              recursive := true);
