-- Serving capacity from a fitted batch-time model (seed 003, Vidur-Search and the memory
-- planner): the highest request rate a simulated continuous-batching server meets TTFT /
-- TPOT targets at, for a run's (input, output) length mix, and the KV memory it needs.
--
-- The server (kvtrace/analysis/serving_capacity.py) runs iterations as Vidur's vLLM
-- scheduler does: waiting requests are prefilled first (first come first served, up to
-- max_batch_size running requests and max_batch_tokens prompt tokens, decodes paused),
-- else every running request decodes a token; each iteration lasts what
-- timing_cost_model('batches') of the cost run predicts.  A request reserves the KV of
-- its prompt and output from admission to completion; with gpu_memory_gib and
-- model_weights_gib the reservations are held within C = (0.9 x GPU memory - weights) /
-- KV bytes per token tokens.  Requests (`requests`, drawn with replacement from the run's
-- trace requests, else its benchmark's, by `seed`) arrive Poisson or evenly spaced; the
-- rate is bisected to 0.1 % over the same draws.  TPOT is (completion - first token) /
-- (output tokens - 1), over requests of more than one token.
--
-- Worked example: a model of 0.1 s per batch whatever it holds, 11 requests of one
-- output token arriving evenly (arrivals := 'uniform'), TTFT target 150 ms at p100.  Up
-- to 10/s each request finds the server idle: TTFT 0.1 s.  Above it the k-th request
-- arrives at k / rate and starts when the k-th batch ends, at k x 0.1 s: it waits
-- k x (0.1 - 1 / rate), the most for k = 10, which may be 0.05 s: the highest rate is
-- 1 / (0.1 - 0.005) = 10.53/s, TTFT there 0.15 s.
--
-- @requires runs.sql

-- @macro serving_capacity(run, ttft_slo_ms, tpot_slo_ms, percentile, cost_run, model, bytes_per_token, gpu_memory_gib, model_weights_gib, max_batch_size, max_batch_tokens, requests, arrivals, seed)
-- The highest rate meeting the targets (point 'highest'), then the run's measured
-- load levels with a finite request rate (point 'measured': serving_benchmark's
-- median, p90 or p99 beside the prediction at that rate).  run: the length mix (a run
-- id or name); cost_run: the run whose batch timings are fitted (default: the run
-- itself, else the only run with batch timings); model or bytes_per_token: the KV bytes
-- per token (kv_layouts); percentile defaults to 99, max_batch_size to 256,
-- max_batch_tokens to 8192, requests to 1000, arrivals to 'poisson', seed to 0.
-- @column run_id             the run whose lengths were served
-- @column cost_run_id        the run whose fitted batch times drive the server
-- @column point              highest, or measured (a load level of the run)
-- @column load_level         the measured load level, NULL for highest
-- @column request_rate       requests per second: the highest meeting the targets (NULL
--                            when even one request alone misses them), or the measured
--                            level's rate
-- @column requests           requests simulated
-- @column percentile         the percentile the targets hold at
-- @column ttft_slo_ms        the TTFT target (NULL: not checked)
-- @column tpot_slo_ms        the TPOT target (NULL: not checked)
-- @column meets_slo          whether the simulation at this rate meets the targets
-- @column predicted_ttft_ms  the simulated TTFT at the percentile
-- @column predicted_tpot_ms  the simulated TPOT at the percentile
-- @column measured_ttft_ms   the measured TTFT at the percentile (50, 90 or 99 only)
-- @column measured_tpot_ms   the measured TPOT at the percentile
-- @column peak_kv_tokens     the most KV tokens reserved at once at this rate
-- @column peak_kv_gib        peak_kv_tokens x KV bytes per token, in GiB
-- @column kv_bytes_per_token the model's KV bytes per token, when given
-- @column kv_capacity_tokens C, when GPU memory and model weights are given
-- @column memory_limited     whether a request waited for KV memory at this rate
CREATE MACRO serving_capacity(run, ttft_slo_ms := NULL, tpot_slo_ms := NULL,
                              percentile := 99, cost_run := NULL, model := NULL,
                              bytes_per_token := NULL, gpu_memory_gib := NULL,
                              model_weights_gib := NULL, max_batch_size := 256,
                              max_batch_tokens := 8192, requests := 1000,
                              arrivals := 'poisson', seed := 0) AS TABLE
SELECT unnest(kvtrace_serving_capacity(run::VARCHAR, ttft_slo_ms::DOUBLE,
                                       tpot_slo_ms::DOUBLE, percentile::DOUBLE,
                                       cost_run::VARCHAR, model::VARCHAR,
                                       bytes_per_token::DOUBLE, gpu_memory_gib::DOUBLE,
                                       model_weights_gib::DOUBLE, max_batch_size::BIGINT,
                                       max_batch_tokens::BIGINT, requests::BIGINT,
                                       arrivals::VARCHAR, seed::BIGINT),
              recursive := true);
